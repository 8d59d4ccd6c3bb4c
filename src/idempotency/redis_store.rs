//! The Redis store (deadpool-redis): keys shared by every instance on one Redis, so a retry
//! that lands on another instance is still recognised. Claims are `SET NX PX` in a Lua
//! script that answers the current record when the key is taken (atomic, one round trip, the
//! lease as expiry); bind, replace and release are compare-and-set Lua scripts (the
//! record changes only if it is still what the caller saw). Every call has a deadline: a slow
//! or unreachable Redis is an error the service answers UNAVAILABLE (fail closed, never a
//! render without the check). The pool reconnects by itself when Redis comes back.

use super::store::{Claim, IdempotencyStore, KeyRecord, StoreError};
use deadpool_redis::redis::{self, Script};
use deadpool_redis::{Config, Pool, PoolConfig, Runtime, Timeouts};
use std::time::Duration;
use uuid::Uuid;

/// `KEYS[1]` becomes `ARGV[2]` with expiry `ARGV[3]` ms, if it holds exactly `ARGV[1]`.
const COMPARE_AND_SET: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0";

/// Claims `KEYS[1]` with `ARGV[1]` (expiry `ARGV[2]` ms) unless it is set; answers '' when
/// claimed, else the current record: one round trip, atomic.
const CLAIM: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return ''
end
return redis.call('GET', KEYS[1])";

/// `KEYS[1]` is deleted if it holds exactly `ARGV[1]`.
const COMPARE_AND_DELETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// How a Redis store connects.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    /// Prefix of every key this service writes (several deployments can share one Redis).
    pub key_prefix: String,
    pub pool_size: usize,
    /// Deadline of one store call, pool wait and connecting included.
    pub timeout: Duration,
}

pub struct RedisStore {
    pool: Pool,
    prefix: String,
    timeout: Duration,
    claim: Script,
    compare_and_set: Script,
    compare_and_delete: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on `settings.url`. Connections open lazily: a Redis that is down at start-up
    /// makes calls fail (UNAVAILABLE), not the server.
    pub fn open(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let mut config = Config::from_url(settings.url.clone());
        config.pool = Some(PoolConfig {
            max_size: settings.pool_size,
            timeouts: Timeouts {
                wait: Some(settings.timeout),
                create: Some(settings.timeout),
                recycle: Some(settings.timeout),
            },
            ..PoolConfig::default()
        });
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|error| StoreError::Unavailable(format!("bad Redis settings: {error}")))?;
        Ok(RedisStore {
            pool,
            prefix: settings.key_prefix.clone(),
            timeout: settings.timeout,
            claim: Script::new(CLAIM),
            compare_and_set: Script::new(COMPARE_AND_SET),
            compare_and_delete: Script::new(COMPARE_AND_DELETE),
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}idempotency:{key}", self.prefix)
    }

    /// Runs `work` within the store's deadline (pool wait and connecting included).
    async fn within_deadline<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
    }

    async fn connection(&self) -> Result<deadpool_redis::Connection, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|error| StoreError::Unavailable(error.to_string()))
    }

    async fn compare_and_set(
        &self,
        key: &str,
        expected: &str,
        new: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = self.key(key);
        let millis = ttl.as_millis().max(1) as u64;
        let set: i64 = self
            .within_deadline(async {
                let mut connection = self.connection().await?;
                self.compare_and_set
                    .key(&key)
                    .arg(expected)
                    .arg(new)
                    .arg(millis)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        Ok(set == 1)
    }
}

fn unavailable(error: redis::RedisError) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

#[tonic::async_trait]
impl IdempotencyStore for RedisStore {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let redis_key = self.key(key);
        let claimed = KeyRecord::InProgress {
            fingerprint: fingerprint.to_owned(),
        }
        .encode();
        let millis = lease.as_millis().max(1) as u64;
        let current: String = self
            .within_deadline(async {
                let mut connection = self.connection().await?;
                self.claim
                    .key(&redis_key)
                    .arg(&claimed)
                    .arg(millis)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        if current.is_empty() {
            Ok(Claim::Claimed)
        } else {
            Ok(Claim::Existing(KeyRecord::decode(&current)?))
        }
    }

    async fn bind(
        &self,
        key: &str,
        fingerprint: &str,
        id: Uuid,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let claimed = KeyRecord::InProgress {
            fingerprint: fingerprint.to_owned(),
        };
        let bound = KeyRecord::Bound {
            fingerprint: fingerprint.to_owned(),
            id,
        };
        self.compare_and_set(key, &claimed.encode(), &bound.encode(), ttl)
            .await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &KeyRecord,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let claimed = KeyRecord::InProgress {
            fingerprint: fingerprint.to_owned(),
        };
        self.compare_and_set(key, &expected.encode(), &claimed.encode(), lease)
            .await
    }

    async fn release(&self, key: &str, fingerprint: &str) -> Result<(), StoreError> {
        let redis_key = self.key(key);
        let claimed = KeyRecord::InProgress {
            fingerprint: fingerprint.to_owned(),
        }
        .encode();
        let _: i64 = self
            .within_deadline(async {
                let mut connection = self.connection().await?;
                self.compare_and_delete
                    .key(&redis_key)
                    .arg(&claimed)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        Ok(())
    }
}
