//! How many jobs (and how many bytes of them) the board keeps: per tenant and for the
//! instance, by count and by bytes. A job stays on the board from its acceptance until the
//! retention runs out, so without a bound a caller that makes jobs faster than they expire
//! grows the server without end: an identical request under a fresh Idempotency-Key is
//! SUCCEEDED at once (it reuses the output) and costs no worker, no queue slot and no job
//! limit, but is kept for the whole retention.
//!
//! The decision: a new job that would put its tenant (or the instance) over a bound evicts
//! the oldest *ended* job, of its own tenant first, then of anyone when the instance is over;
//! an ended job can go early at no cost to anyone but its own caller (GetRenderJob answers
//! JOB_NOT_FOUND, its idempotency key is freed). Jobs that have not ended are never evicted
//! (someone waits for them): when nothing can be evicted the submission is refused,
//! RESOURCE_EXHAUSTED (RETAINED_JOBS_FULL) with the delay until a job likely ends. The
//! alternative, refusing as soon as a bound is reached, would let one tenant's burst of
//! reuses lock that tenant out for a day; evicting another tenant's jobs first would let one
//! tenant empty everyone's history.
//!
//! This module only counts; the board ([`super::board`]) holds the jobs and asks it, in the
//! same critical section as the insertion, whether there is room.

use crate::auth::TenantId;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

const MIB: u64 = 1024 * 1024;

/// Jobs one tenant keeps at most: a day (the default retention) of one job every 9 s, far
/// above an honest caller's history, and at ~1 KiB a job about 10 MiB.
pub(crate) const DEFAULT_MAX_RETAINED_JOBS_PER_TENANT: u32 = 10_000;
/// Bytes of jobs one tenant keeps at most, MiB: 10,000 jobs of ~1.6 KiB, room for long
/// failure messages; it bounds the tenant when its jobs are bigger than usual.
pub(crate) const DEFAULT_MAX_RETAINED_JOBS_MB_PER_TENANT: u64 = 16;
/// Jobs the instance keeps at most: ten tenants at their bound.
pub(crate) const DEFAULT_MAX_RETAINED_JOBS: u32 = 100_000;
/// Bytes of jobs the instance keeps at most, MiB: ten tenants at their bound, a fifth of the
/// 600 MiB the server is meant to stay under.
pub(crate) const DEFAULT_MAX_RETAINED_JOBS_MB: u64 = 128;

/// The bounds of the jobs kept, from the flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RetainedJobSettings {
    /// Jobs one tenant's callers keep on this instance (queued, running and ended, until the
    /// retention); beyond it its oldest ended job is forgotten, or the submission refused
    /// RESOURCE_EXHAUSTED (RETAINED_JOBS_FULL) when none has ended.
    #[arg(long, env = "LOTTIE_RENDER_MAX_RETAINED_JOBS_PER_TENANT", default_value_t = DEFAULT_MAX_RETAINED_JOBS_PER_TENANT, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_retained_jobs_per_tenant: u32,
    /// Memory one tenant's kept jobs may hold, MiB (as `--max-retained-jobs-per-tenant`).
    #[arg(long, env = "LOTTIE_RENDER_MAX_RETAINED_JOBS_MB_PER_TENANT", default_value_t = DEFAULT_MAX_RETAINED_JOBS_MB_PER_TENANT, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_retained_jobs_mb_per_tenant: u64,
    /// Jobs this instance keeps, all tenants; beyond it the oldest ended job (of the
    /// submitting tenant first) is forgotten.
    #[arg(long, env = "LOTTIE_RENDER_MAX_RETAINED_JOBS", default_value_t = DEFAULT_MAX_RETAINED_JOBS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_retained_jobs: u32,
    /// Memory this instance's kept jobs may hold, MiB (as `--max-retained-jobs`).
    #[arg(long, env = "LOTTIE_RENDER_MAX_RETAINED_JOBS_MB", default_value_t = DEFAULT_MAX_RETAINED_JOBS_MB, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_retained_jobs_mb: u64,
}

impl Default for RetainedJobSettings {
    fn default() -> RetainedJobSettings {
        RetainedJobSettings {
            max_retained_jobs_per_tenant: DEFAULT_MAX_RETAINED_JOBS_PER_TENANT,
            max_retained_jobs_mb_per_tenant: DEFAULT_MAX_RETAINED_JOBS_MB_PER_TENANT,
            max_retained_jobs: DEFAULT_MAX_RETAINED_JOBS,
            max_retained_jobs_mb: DEFAULT_MAX_RETAINED_JOBS_MB,
        }
    }
}

impl RetainedJobSettings {
    pub(crate) fn limits(&self) -> RetentionLimits {
        RetentionLimits {
            max_jobs_per_tenant: self.max_retained_jobs_per_tenant as usize,
            max_bytes_per_tenant: self.max_retained_jobs_mb_per_tenant.saturating_mul(MIB),
            max_jobs: self.max_retained_jobs as usize,
            max_bytes: self.max_retained_jobs_mb.saturating_mul(MIB),
        }
    }
}

/// The bounds in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetentionLimits {
    pub max_jobs_per_tenant: usize,
    pub max_bytes_per_tenant: u64,
    pub max_jobs: usize,
    pub max_bytes: u64,
}

impl RetentionLimits {
    /// No bound (a board of its own in unit tests).
    pub(crate) const UNBOUNDED: RetentionLimits = RetentionLimits {
        max_jobs_per_tenant: usize::MAX,
        max_bytes_per_tenant: u64::MAX,
        max_jobs: usize::MAX,
        max_bytes: u64::MAX,
    };
}

impl Default for RetentionLimits {
    fn default() -> RetentionLimits {
        RetentionLimits::UNBOUNDED
    }
}

/// Jobs and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub jobs: usize,
    pub bytes: u64,
}

impl Usage {
    fn over(self, bytes: u64, max_jobs: usize, max_bytes: u64) -> bool {
        self.jobs.saturating_add(1) > max_jobs || self.bytes.saturating_add(bytes) > max_bytes
    }
}

/// No ended job to evict, and a bound reached: the submission waits for a job to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetainedFull {
    /// Jobs kept (of the tenant, or of the instance).
    pub retained: usize,
    pub limit: usize,
    /// The tenant's bound (else the instance's).
    pub per_tenant: bool,
}

/// What a new job of some size needs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// It fits.
    Enough,
    /// This ended job must go first (then ask again).
    Evict(Uuid),
    /// Nothing can go.
    Full(RetainedFull),
}

#[derive(Debug, Default)]
struct TenantRetained {
    usage: Usage,
    /// Its ended jobs by the order they ended.
    ended: BTreeMap<u64, Uuid>,
}

/// The count of the jobs kept, per tenant and for the instance, and the order their ended
/// jobs ended in.
#[derive(Debug, Default)]
pub(crate) struct RetainedJobs {
    limits: RetentionLimits,
    total: Usage,
    tenants: HashMap<TenantId, TenantRetained>,
    /// Every ended job by the order it ended in.
    ended: BTreeMap<u64, Uuid>,
    next_order: u64,
}

impl RetainedJobs {
    pub(crate) fn new(limits: RetentionLimits) -> RetainedJobs {
        RetainedJobs {
            limits,
            ..RetainedJobs::default()
        }
    }

    pub(crate) fn total(&self) -> Usage {
        self.total
    }

    /// Whether a new job of `tenant` of `bytes` fits, or what must go first.
    pub(crate) fn room_for(&self, tenant: &TenantId, bytes: u64) -> Room {
        let limits = self.limits;
        let own = self.tenants.get(tenant);
        let own_usage = own.map_or(Usage::default(), |kept| kept.usage);
        let tenant_over = own_usage.over(
            bytes,
            limits.max_jobs_per_tenant,
            limits.max_bytes_per_tenant,
        );
        let instance_over = self.total.over(bytes, limits.max_jobs, limits.max_bytes);
        if !tenant_over && !instance_over {
            return Room::Enough;
        }
        // Its own oldest ended job first, whichever bound is reached.
        if let Some((_, id)) = own.and_then(|kept| kept.ended.first_key_value()) {
            return Room::Evict(*id);
        }
        if tenant_over {
            return Room::Full(RetainedFull {
                retained: own_usage.jobs,
                limit: limits.max_jobs_per_tenant,
                per_tenant: true,
            });
        }
        match self.ended.first_key_value() {
            Some((_, id)) => Room::Evict(*id),
            None => Room::Full(RetainedFull {
                retained: self.total.jobs,
                limit: limits.max_jobs,
                per_tenant: false,
            }),
        }
    }

    /// Counts a new job of `tenant` of `bytes`.
    pub(crate) fn add(&mut self, tenant: &TenantId, bytes: u64) {
        let kept = self.tenants.entry(tenant.clone()).or_default();
        kept.usage.jobs += 1;
        kept.usage.bytes = kept.usage.bytes.saturating_add(bytes);
        self.total.jobs += 1;
        self.total.bytes = self.total.bytes.saturating_add(bytes);
    }

    /// A job of `tenant` now holds `new` bytes instead of `old`.
    pub(crate) fn resize(&mut self, tenant: &TenantId, old: u64, new: u64) {
        if let Some(kept) = self.tenants.get_mut(tenant) {
            kept.usage.bytes = kept.usage.bytes.saturating_sub(old).saturating_add(new);
        }
        self.total.bytes = self.total.bytes.saturating_sub(old).saturating_add(new);
    }

    /// Job `id` of `tenant` has ended: it may be evicted from now on, after every job that
    /// ended before it. Answers its place in that order.
    pub(crate) fn ended(&mut self, tenant: &TenantId, id: Uuid) -> u64 {
        let order = self.next_order;
        self.next_order += 1;
        self.ended.insert(order, id);
        self.tenants
            .entry(tenant.clone())
            .or_default()
            .ended
            .insert(order, id);
        order
    }

    /// Forgets a job of `tenant` of `bytes` (with its place among ended jobs, if it ended).
    pub(crate) fn remove(&mut self, tenant: &TenantId, bytes: u64, ended: Option<u64>) {
        if let Some(order) = ended {
            self.ended.remove(&order);
        }
        if let Some(kept) = self.tenants.get_mut(tenant) {
            if let Some(order) = ended {
                kept.ended.remove(&order);
            }
            kept.usage.jobs = kept.usage.jobs.saturating_sub(1);
            kept.usage.bytes = kept.usage.bytes.saturating_sub(bytes);
            if kept.usage.jobs == 0 {
                self.tenants.remove(tenant);
            }
        }
        self.total.jobs = self.total.jobs.saturating_sub(1);
        self.total.bytes = self.total.bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap()
    }

    fn limits(per_tenant: usize, total: usize) -> RetentionLimits {
        RetentionLimits {
            max_jobs_per_tenant: per_tenant,
            max_bytes_per_tenant: 10_000,
            max_jobs: total,
            max_bytes: 100_000,
        }
    }

    #[test]
    fn a_tenant_over_its_bound_evicts_its_own_oldest_ended_job_first() {
        let mut kept = RetainedJobs::new(limits(2, 10));
        let (a, b) = (tenant("a"), tenant("b"));
        let (first, second, others) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        kept.add(&b, 100);
        kept.ended(&b, others);
        kept.add(&a, 100);
        kept.add(&a, 100);
        assert_eq!(
            kept.room_for(&a, 100),
            Room::Full(RetainedFull {
                retained: 2,
                limit: 2,
                per_tenant: true
            }),
            "nothing of its own has ended: refused, never another tenant's job"
        );
        let first_order = kept.ended(&a, first);
        kept.ended(&a, second);
        assert_eq!(kept.room_for(&a, 100), Room::Evict(first));
        kept.remove(&a, 100, Some(first_order));
        assert_eq!(kept.room_for(&a, 100), Room::Enough);
        assert_eq!(kept.room_for(&b, 100), Room::Enough);
        assert_eq!(
            kept.total(),
            Usage {
                jobs: 2,
                bytes: 200
            }
        );
    }

    #[test]
    fn an_instance_over_its_bound_evicts_the_oldest_ended_job_of_anyone() {
        let mut kept = RetainedJobs::new(limits(10, 2));
        let (a, b) = (tenant("a"), tenant("b"));
        let old = Uuid::new_v4();
        kept.add(&a, 100);
        kept.ended(&a, old);
        kept.add(&a, 100);
        assert_eq!(kept.room_for(&b, 100), Room::Evict(old));
    }

    #[test]
    fn bytes_bound_like_counts() {
        let mut kept = RetainedJobs::new(limits(100, 100));
        let a = tenant("a");
        kept.add(&a, 9_000);
        assert_eq!(kept.room_for(&a, 500), Room::Enough);
        assert!(matches!(kept.room_for(&a, 2_000), Room::Full(_)));
        kept.resize(&a, 9_000, 1_000);
        assert_eq!(kept.room_for(&a, 2_000), Room::Enough);
    }
}
