//! How to reach Redis, from the flags: unset, every instance keeps its state in memory; set,
//! idempotency keys, job records, the render index and the work queue go to Redis
//! ([`super::RedisClient`]). Flattened into `serve`'s flags.

use super::RedisSettings;
use std::time::Duration;

/// Redis connections: each call holds one for a round trip or two.
pub(crate) const DEFAULT_REDIS_POOL_SIZE: u32 = 16;
/// A Redis round trip is well under a millisecond on a LAN; 500 ms means it is in trouble.
pub(crate) const DEFAULT_REDIS_TIMEOUT_MS: u64 = 500;
/// Prefix of the service's Redis keys.
pub(crate) const DEFAULT_REDIS_KEY_PREFIX: &str = "lottie-render:";

/// The Redis connection's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisConnectionSettings {
    /// Redis for idempotency keys (`redis://host:6379/0`); in this process's memory when unset.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Prefix of every Redis key this service writes.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_KEY_PREFIX", default_value = DEFAULT_REDIS_KEY_PREFIX)]
    pub redis_key_prefix: String,
    /// Redis connections kept open.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_POOL_SIZE", default_value_t = DEFAULT_REDIS_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub redis_pool_size: u32,
    /// Deadline of one Redis call (pool wait and connecting included), milliseconds; beyond
    /// it the call is answered UNAVAILABLE.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_TIMEOUT_MS", default_value_t = DEFAULT_REDIS_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_timeout_ms: u64,
}

impl Default for RedisConnectionSettings {
    fn default() -> RedisConnectionSettings {
        RedisConnectionSettings {
            redis_url: None,
            redis_key_prefix: DEFAULT_REDIS_KEY_PREFIX.into(),
            redis_pool_size: DEFAULT_REDIS_POOL_SIZE,
            redis_timeout_ms: DEFAULT_REDIS_TIMEOUT_MS,
        }
    }
}

impl RedisConnectionSettings {
    /// The Redis connection settings, when Redis is configured.
    pub(crate) fn connection(&self) -> Option<RedisSettings> {
        self.redis_url.as_ref().map(|url| RedisSettings {
            url: url.clone(),
            key_prefix: self.redis_key_prefix.clone(),
            pool_size: self.redis_pool_size as usize,
            timeout: Duration::from_millis(self.redis_timeout_ms),
        })
    }
}
