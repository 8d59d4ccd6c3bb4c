//! The Redis store: keys shared by every instance on one Redis, so a retry that lands on
//! another instance is still recognised. Claims are `SET NX PX` in a Lua script that answers
//! the current record when the key is taken (atomic, one round trip, the lease as expiry);
//! bind, replace and release are compare-and-set scripts (the record changes only if it is
//! still what the caller saw: an in-progress record holds its claimant's token, so only the
//! claimant holding the key can bind or release it). Every call has a deadline ([`RedisClient`]): a slow or
//! unreachable Redis is an error the service answers UNAVAILABLE (fail closed, never a render
//! without the check). The pool reconnects by itself when Redis comes back.

use super::store::{Claim, Claimant, IdempotencyStore, KeyRecord, StoreError, Stored};
use crate::redis_client::{millis, unavailable, RedisClient, RedisError};
use deadpool_redis::redis::Script;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Claims `KEYS[1]` with `ARGV[1]` (expiry `ARGV[2]` ms) unless it is set; answers '' when
/// claimed, else the current record.
const CLAIM: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return ''
end
return redis.call('GET', KEYS[1])";

impl From<RedisError> for StoreError {
    fn from(error: RedisError) -> StoreError {
        match error {
            RedisError::Unavailable(message) => StoreError::Unavailable(message),
            RedisError::Timeout(after) => StoreError::Timeout(after),
        }
    }
}

#[derive(Debug)]
pub struct RedisStore {
    redis: Arc<RedisClient>,
    claim: Script,
}

impl RedisStore {
    pub fn new(redis: Arc<RedisClient>) -> RedisStore {
        RedisStore {
            redis,
            claim: Script::new(CLAIM),
        }
    }

    fn key(&self, key: &str) -> String {
        self.redis.key(&format!("idempotency:{key}"))
    }
}

#[tonic::async_trait]
impl IdempotencyStore for RedisStore {
    async fn claim(&self, key: &str, claimant: &Claimant, lease: Duration) -> Stored<Claim> {
        let redis_key = self.key(key);
        let claimed = claimant.record().encode();
        let current: String = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                self.claim
                    .key(&redis_key)
                    .arg(&claimed)
                    .arg(millis(lease))
                    .invoke_async(&mut connection)
                    .await
                    .map_err(|error| StoreError::from(unavailable(error)))
            })
            .await?;
        if current.is_empty() {
            Ok(Claim::Claimed)
        } else {
            Ok(Claim::Existing(KeyRecord::decode(&current)?))
        }
    }

    async fn bind(&self, key: &str, claimant: &Claimant, id: Uuid, ttl: Duration) -> Stored<bool> {
        let (claimed, bound) = (claimant.record(), claimant.bound(id));
        Ok(self
            .redis
            .compare_and_set(&self.key(key), &claimed.encode(), &bound.encode(), ttl)
            .await?)
    }

    async fn replace(
        &self,
        key: &str,
        expected: &KeyRecord,
        claimant: &Claimant,
        lease: Duration,
    ) -> Stored<bool> {
        let claimed = claimant.record();
        Ok(self
            .redis
            .compare_and_set(&self.key(key), &expected.encode(), &claimed.encode(), lease)
            .await?)
    }

    async fn release(&self, key: &str, claimant: &Claimant) -> Stored<()> {
        let claimed = claimant.record();
        self.redis
            .compare_and_delete(&self.key(key), &claimed.encode())
            .await?;
        Ok(())
    }
}
