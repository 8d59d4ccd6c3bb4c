//! The Idempotency-Key's settings ([`super::claim::KeyPolicy`]): how long a key stays claimed
//! while its call runs. Its record is kept as long as jobs are (`--retention-seconds`).
//! Flattened into `serve`'s flags.

use std::time::Duration;

/// A key claimed by a call that died is freed after this (the 300 s).
pub(crate) const DEFAULT_IDEMPOTENCY_LEASE_SECONDS: u64 = 300;

/// The idempotency key's lease, from the flags.
#[derive(Debug, Clone, clap::Args)]
pub struct IdempotencySettings {
    /// How long an idempotency key stays claimed while its job is created, seconds (a caller
    /// that died meanwhile frees the key when it runs out).
    #[arg(long, env = "LOTTIE_RENDER_IDEMPOTENCY_LEASE_SECONDS", default_value_t = DEFAULT_IDEMPOTENCY_LEASE_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub idempotency_lease_seconds: u64,
}

impl Default for IdempotencySettings {
    fn default() -> IdempotencySettings {
        IdempotencySettings {
            idempotency_lease_seconds: DEFAULT_IDEMPOTENCY_LEASE_SECONDS,
        }
    }
}

impl IdempotencySettings {
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_secs(self.idempotency_lease_seconds)
    }
}
