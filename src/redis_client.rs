//! The service's Redis connection (`--redis-url`), shared by the idempotency key store and
//! the shared job records: a deadpool pool whose every call has a deadline (pool wait and
//! connecting included), the key prefix, a client for pub/sub subscriptions, and the
//! compare-and-set scripts both use. Connections open lazily and are re-made after Redis
//! comes back, so a Redis that is down makes calls fail (and callers answer UNAVAILABLE),
//! never the server.

use deadpool_redis::redis::{self, Script};
use deadpool_redis::{Config, Pool, PoolConfig, Runtime, Timeouts};
use std::time::Duration;

/// `KEYS[1]` becomes `ARGV[2]` (expiry `ARGV[3]` ms) if it holds exactly `ARGV[1]`.
const COMPARE_AND_SET: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0";

/// `KEYS[1]` is deleted if it holds exactly `ARGV[1]`.
const COMPARE_AND_DELETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// How the service reaches Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    /// Prefix of every key this service writes (several deployments can share one Redis).
    pub key_prefix: String,
    pub pool_size: usize,
    /// Deadline of one call, pool wait and connecting included.
    pub timeout: Duration,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    #[error("Redis is unreachable: {0}")]
    Unavailable(String),
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
}

pub fn unavailable(error: impl std::fmt::Display) -> RedisError {
    RedisError::Unavailable(error.to_string())
}

pub struct RedisClient {
    pool: Pool,
    subscriptions: redis::Client,
    prefix: String,
    timeout: Duration,
    compare_and_set: Script,
    compare_and_delete: Script,
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A duration as Redis expiry milliseconds (at least 1).
pub fn millis(duration: Duration) -> u64 {
    duration.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl RedisClient {
    pub fn open(settings: &RedisSettings) -> Result<RedisClient, RedisError> {
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
            .map_err(|error| unavailable(format!("bad Redis settings: {error}")))?;
        let subscriptions = redis::Client::open(settings.url.as_str()).map_err(unavailable)?;
        Ok(RedisClient {
            pool,
            subscriptions,
            prefix: settings.key_prefix.clone(),
            timeout: settings.timeout,
            compare_and_set: Script::new(COMPARE_AND_SET),
            compare_and_delete: Script::new(COMPARE_AND_DELETE),
        })
    }

    /// The full Redis key of `suffix` (the prefix in front).
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// Runs `work` within the deadline.
    pub async fn within_deadline<T, E: From<RedisError>>(
        &self,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| E::from(RedisError::Timeout(self.timeout)))?
    }

    /// A pooled connection (call inside [`RedisClient::within_deadline`]).
    pub async fn connection(&self) -> Result<deadpool_redis::Connection, RedisError> {
        self.pool.get().await.map_err(unavailable)
    }

    /// A dedicated connection for SUBSCRIBE (pooled connections cannot subscribe).
    pub async fn subscribe(&self, channel: &str) -> Result<redis::aio::PubSub, RedisError> {
        self.within_deadline(async {
            let mut pubsub = self
                .subscriptions
                .get_async_pubsub()
                .await
                .map_err(unavailable)?;
            pubsub.subscribe(channel).await.map_err(unavailable)?;
            Ok::<_, RedisError>(pubsub)
        })
        .await
    }

    /// `key` becomes `new` (expiring after `ttl`) if it holds exactly `expected`.
    pub async fn compare_and_set(
        &self,
        key: &str,
        expected: &str,
        new: &str,
        ttl: Duration,
    ) -> Result<bool, RedisError> {
        let set: i64 = self
            .within_deadline(async {
                let mut connection = self.connection().await?;
                self.compare_and_set
                    .key(key)
                    .arg(expected)
                    .arg(new)
                    .arg(millis(ttl))
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        Ok(set == 1)
    }

    /// Deletes `key` if it holds exactly `expected`.
    pub async fn compare_and_delete(&self, key: &str, expected: &str) -> Result<bool, RedisError> {
        let deleted: i64 = self
            .within_deadline(async {
                let mut connection = self.connection().await?;
                self.compare_and_delete
                    .key(key)
                    .arg(expected)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        Ok(deleted == 1)
    }
}
