//! The jobs' settings: the queue, how long finished jobs are kept, the largest job accepted,
//! each tenant's share of the queue, the shared queue's lease, and the bounds of the jobs kept
//! ([`super::retention`]). Read by the scheduler, the intake and everything kept as long as
//! jobs are (idempotency keys, webhook deliveries); flattened into `serve`'s flags.

use super::admission::JobLimits;
use super::retention::RetainedJobSettings;
use crate::auth::AuthMode;
use std::time::Duration;

/// Default job budget, output megapixels (frames × width × height / 10⁶): two minutes of
/// 1920×1920 at 60 fps, about 8 minutes of rendering on two cores.
pub(crate) const DEFAULT_MAX_JOB_MEGAPIXELS: u64 = 26_600;
/// Jobs waiting for a worker: at ~1–10 s a job, a few minutes of work; beyond, callers are
/// better served by RESOURCE_EXHAUSTED and another instance.
pub(crate) const DEFAULT_QUEUE_CAPACITY: u32 = 64;
/// How long finished jobs, their outputs and their idempotency keys are kept: a day covers
/// a caller's retries and a downstream's download.
pub(crate) const DEFAULT_RETENTION_SECONDS: u64 = 24 * 3600;
/// Lease of a job taken from the shared queue, ms. A dead instance's jobs start again on
/// another one after this, so it is short next to a render (seconds to minutes); it is
/// renewed every third of it, so two renewals in a row may fail (a Redis failover, a paused
/// process) before the job is taken for lost and rendered a second time.
pub(crate) const DEFAULT_JOB_LEASE_MS: u64 = 30_000;
/// Jobs one tenant may have queued, following or running at once when authentication is on:
/// half the default queue, so one tenant alone can never fill the waiting room and a second
/// tenant always finds the other half.
pub const DEFAULT_TENANT_MAX_JOBS: u32 = 32;

/// The queue, the job budget and the jobs kept, from the flags.
#[derive(Debug, Clone, clap::Args)]
pub struct JobSettings {
    /// Jobs waiting for a worker; a submission beyond it is answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "LOTTIE_RENDER_QUEUE_CAPACITY", default_value_t = DEFAULT_QUEUE_CAPACITY, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub queue_capacity: u32,
    /// How long finished jobs and their outputs are kept, seconds.
    #[arg(long, env = "LOTTIE_RENDER_RETENTION_SECONDS", default_value_t = DEFAULT_RETENTION_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_seconds: u64,
    /// Largest job accepted, output megapixels (frames × width × height / 10⁶).
    #[arg(long, env = "LOTTIE_RENDER_MAX_JOB_MEGAPIXELS", default_value_t = DEFAULT_MAX_JOB_MEGAPIXELS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_job_megapixels: u64,
    /// Longest a render may run, seconds (its deadline is derived from its size, capped here).
    #[arg(long, env = "LOTTIE_RENDER_MAX_JOB_SECONDS", default_value_t = crate::sandbox::MAX_DEADLINE.as_secs_f64())]
    pub max_job_seconds: f64,
    /// With Redis: how long a job taken from the shared queue stays its instance's without a
    /// renewal of its lease (renewed every third of it), milliseconds. A job whose instance
    /// stopped is rendered by another one after this.
    #[arg(long, env = "LOTTIE_RENDER_JOB_LEASE_MS", default_value_t = DEFAULT_JOB_LEASE_MS, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub job_lease_ms: u64,
    /// Jobs one tenant may have queued, following an identical render or running at once;
    /// one more is answered RESOURCE_EXHAUSTED (TENANT_JOB_LIMIT) [default: 32 with `--auth
    /// optional|required`; with `--auth off` (one tenant) only the queue's capacity].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_MAX_JOBS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_max_jobs: Option<u32>,
    /// The bounds of the jobs kept per tenant and per instance ([`super::retention`]).
    #[command(flatten)]
    pub retained: RetainedJobSettings,
}

impl Default for JobSettings {
    fn default() -> JobSettings {
        JobSettings {
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            retention_seconds: DEFAULT_RETENTION_SECONDS,
            max_job_megapixels: DEFAULT_MAX_JOB_MEGAPIXELS,
            max_job_seconds: crate::sandbox::MAX_DEADLINE.as_secs_f64(),
            job_lease_ms: DEFAULT_JOB_LEASE_MS,
            tenant_max_jobs: None,
            retained: RetainedJobSettings::default(),
        }
    }
}

impl JobSettings {
    /// How long finished jobs, their outputs, their idempotency keys and their webhook
    /// deliveries are kept.
    pub(crate) fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_seconds)
    }

    pub(crate) fn job_lease(&self) -> Duration {
        Duration::from_millis(self.job_lease_ms)
    }

    /// Clamped so that a hostile or mistyped value (NaN, negative, huge) cannot panic.
    pub(crate) fn max_job_duration(&self) -> Duration {
        Duration::try_from_secs_f64(self.max_job_seconds).unwrap_or(crate::sandbox::MAX_DEADLINE)
    }

    /// The budget admission holds each job to.
    pub(crate) fn job_limits(&self) -> JobLimits {
        JobLimits {
            max_megapixels: self.max_job_megapixels,
            max_duration: self.max_job_duration(),
        }
    }

    /// The per-tenant job limit in force under `auth`: the flag's, else
    /// [`DEFAULT_TENANT_MAX_JOBS`] when callers can be of several tenants, else none (one
    /// tenant: the queue is its limit).
    pub fn tenant_job_limit(&self, auth: AuthMode) -> Option<usize> {
        match (self.tenant_max_jobs, auth) {
            (Some(limit), _) => Some(limit as usize),
            (None, AuthMode::Off) => None,
            (None, _) => Some(DEFAULT_TENANT_MAX_JOBS as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_job_limit_applies_only_where_there_can_be_several_tenants() {
        for (auth, flag, expected) in [
            (AuthMode::Off, None, None),
            (
                AuthMode::Optional,
                None,
                Some(DEFAULT_TENANT_MAX_JOBS as usize),
            ),
            (
                AuthMode::Required,
                None,
                Some(DEFAULT_TENANT_MAX_JOBS as usize),
            ),
            (AuthMode::Off, Some(5), Some(5)),
            (AuthMode::Required, Some(7), Some(7)),
        ] {
            let settings = JobSettings {
                tenant_max_jobs: flag,
                ..JobSettings::default()
            };
            assert_eq!(
                settings.tenant_job_limit(auth),
                expected,
                "{auth:?} {flag:?}"
            );
        }
    }
}
