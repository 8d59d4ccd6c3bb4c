//! The scheduler of render jobs, made of parts that own their state: this instance's jobs
//! ([`LocalJobs`]: board, queue, quarantine, outputs), the [`runner`] (the worker loops),
//! the [`super::outcome`] of a finished render (pure decisions the runner applies), [`lookup`]
//! (Get, Watch and Cancel wherever a job lives), and, with Redis, [`Shared`] (records,
//! shared queue, render index, following, replication). Which mode runs is one value
//! ([`Mode`]) chosen at start. The scheduler accepts a job (it follows a running render of
//! the same fingerprint, reuses a succeeded one's output, or is queued), cancels jobs and
//! drains on shutdown.
//!
//! Outcomes: success → SUCCEEDED with the output committed to storage; a reported
//! deterministic failure → FAILED, not retryable; a transient one, the deadline or the memory
//! limit → FAILED, retryable with a delay; a crash (signal, or an exit without a result) is
//! retried once on a fresh worker, and a second crash → FAILED RENDER_CRASHED, not
//! retryable, with the fingerprint quarantined. Draining (shutdown) cancels what waits, lets
//! running renders finish within the grace period and then cancels them, retryable.

mod lookup;
mod runner;

pub use super::local::SubmitRefused;
pub(crate) use lookup::Lookup;

use super::local::{off_runtime, LocalJobs};
use super::model::{Job, JobState, RenderWork};
use super::outcome::shutdown_failure;
use super::queue::RenderQueue;
use super::retention::RetentionLimits;
use super::shared::queue::SharedQueueSettings;
use super::shared::{replication_channel, Shared, SharedError, SharedJobs};
use super::{Fingerprint, JobBoard};
use crate::auth::TenantId;
use crate::metrics::Metrics;
use crate::storage::OutputStore;
use crate::telemetry::traces::Tracing;
use runner::Runner;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

#[derive(Debug, Clone)]
pub(crate) struct SchedulerSettings {
    pub workers: usize,
    pub executable: PathBuf,
    pub worker_memory_bytes: u64,
    /// Jobs one tenant may have queued, following or running at once (none: no limit but
    /// the queue's).
    pub tenant_max_jobs: Option<usize>,
    /// Where render spans (and the spans workers report) go; off by default.
    pub tracing: Tracing,
    /// Workers kept started ahead of their job ([`crate::sandbox::spare`]); 0: none.
    pub spare_workers: usize,
    /// With shared jobs: the lease of a job taken from the shared queue
    /// ([`crate::jobs::settings::DEFAULT_JOB_LEASE_MS`]).
    pub job_lease: Duration,
    /// The bounds of the jobs kept ([`crate::jobs::retention`]).
    pub retained: RetentionLimits,
    /// Where snapshots of jobs with a webhook go ([`crate::webhooks::dispatch`]); none:
    /// nobody is told.
    pub announcements: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
}

/// Which mode the jobs run in, chosen once at start: every job in this process (the
/// embedded default), or shared with the instances on one Redis.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    Local,
    Shared(Arc<Shared>),
}

impl Mode {
    /// How long a caller refused for a full queue should wait: the time the workers need
    /// to work through the queue at the recent pace.
    fn queue_retry_after(&self, local: &LocalJobs) -> Duration {
        match self {
            Mode::Local => local.queue_retry_after(),
            Mode::Shared(shared) => shared.queue_retry_after(),
        }
    }

    /// Waits (a little) until every shared record written so far has reached Redis.
    async fn flush(&self) {
        if let Mode::Shared(shared) = self {
            shared.flush().await;
        }
    }
}

#[derive(Debug)]
pub(crate) struct Scheduler {
    local: Arc<LocalJobs>,
    mode: Mode,
    runner: Arc<Runner>,
    lookup: Lookup,
    /// This instance: with shared jobs its id in the farm, else one made at start.
    instance: Uuid,
}

/// What the jobs and workers are doing now (GetServiceStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobActivity {
    /// Jobs waiting for a worker: in this instance's queue, or the farm's shared queue.
    pub waiting: usize,
    /// Jobs being rendered: by this instance, or by the farm with shared jobs.
    pub rendering: usize,
    /// This instance's workers, and those rendering now.
    pub workers: usize,
    pub workers_busy: usize,
}

impl Scheduler {
    /// Creates the scheduler and starts its worker loops (and, with `shared` records, the
    /// loops of [`Shared`]) on the current runtime.
    pub(crate) fn start(
        settings: SchedulerSettings,
        queue_capacity: usize,
        outputs: OutputStore,
        metrics: Arc<Metrics>,
        shared: Option<Arc<SharedJobs>>,
    ) -> Arc<Scheduler> {
        let replication = shared.as_ref().map(|_| replication_channel());
        let board = match &replication {
            Some((sender, _)) => JobBoard::replicated(sender.clone()),
            None => JobBoard::default(),
        };
        let queue =
            Arc::new(RenderQueue::new(queue_capacity).with_tenant_limit(settings.tenant_max_jobs));
        // Followers of a render wait like queued renders: they count against the capacity.
        let mut board = board
            .counting_followers_in(queue.clone())
            .retaining(settings.retained, metrics.clone());
        if let Some(announcements) = settings.announcements.clone() {
            board = board.announcing(announcements);
        }
        let local = Arc::new(LocalJobs::new(
            board,
            queue,
            metrics,
            outputs,
            settings.workers,
        ));
        let mode = match shared.zip(replication) {
            Some((records, replication)) => {
                let queue = SharedQueueSettings {
                    capacity: queue_capacity,
                    tenant_max_jobs: settings.tenant_max_jobs,
                    lease: settings.job_lease,
                    retention: records.retention(),
                };
                Mode::Shared(Shared::start(local.clone(), records, queue, replication))
            }
            None => Mode::Local,
        };
        let runner = Runner::start(local.clone(), mode.clone(), settings);
        let lookup = Lookup::new(local.clone(), mode.clone());
        let instance = match &mode {
            Mode::Shared(shared) => shared.records().instance(),
            Mode::Local => Uuid::new_v4(),
        };
        Arc::new(Scheduler {
            local,
            mode,
            runner,
            lookup,
            instance,
        })
    }

    /// This instance: with shared jobs its id in the farm (its records' owner, its consumer
    /// of the shared queue), else an id made when it started.
    pub(crate) fn instance(&self) -> Uuid {
        self.instance
    }

    /// What the jobs and this instance's workers are doing now; with shared jobs the queue
    /// is the farm's, read from Redis.
    pub(crate) async fn activity(&self) -> Result<JobActivity, SharedError> {
        let busy = usize::try_from(self.local.metrics.jobs_running.get()).unwrap_or(0);
        let (waiting, rendering) = match &self.mode {
            Mode::Local => (self.local.queue.len(), busy),
            Mode::Shared(shared) => shared.queue().counts().await?,
        };
        Ok(JobActivity {
            waiting,
            rendering,
            workers: self.local.workers,
            workers_busy: busy.min(self.local.workers),
        })
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.local.metrics
    }

    pub(crate) fn outputs(&self) -> &OutputStore {
        &self.local.outputs
    }

    /// Get, Watch and Cancel of a tenant's job wherever it lives.
    pub(crate) fn lookup(&self) -> &Lookup {
        &self.lookup
    }

    /// How long a caller refused for a full queue should wait: the time the workers need
    /// to work through the queue at the recent pace.
    pub(crate) fn queue_retry_after(&self) -> Duration {
        self.mode.queue_retry_after(&self.local)
    }

    /// [`Scheduler::queue_retry_after`] with `waiting` jobs in the queue (the shared queue
    /// tells its length when it refuses), worked through by this instance's workers or, on
    /// the shared queue, by the workers of every live instance (as last announced; the
    /// recent pace of this instance stands for theirs).
    pub(crate) fn retry_after_waiting(&self, waiting: usize) -> Duration {
        let workers = match &self.mode {
            Mode::Local => self.local.workers,
            Mode::Shared(shared) => shared.farm_workers(),
        };
        self.local.retry_after_waiting(waiting, workers)
    }

    /// How long a caller refused for its tenant's share should wait: until one of the
    /// tenant's jobs likely ends ([`super::queue::TenantLoad::slot_frees_in`]), within the
    /// bounds of every retry delay (never 0).
    pub(crate) fn tenant_retry_after(&self, tenant: &TenantId) -> Duration {
        self.local.tenant_retry_after(tenant)
    }

    /// Adds a new job: it follows a running render of the same fingerprint (on this instance
    /// or, with shared jobs, on another), starts from a succeeded one's output, or is
    /// queued. On refusal the job is not kept.
    ///
    /// The job counts against its tenant's share of the queue (`--tenant-max-jobs`).
    pub(crate) async fn submit(&self, job: Job, work: RenderWork) -> Result<Job, SubmitRefused> {
        let submitted = match &self.mode {
            Mode::Local => {
                let tenant = job.tenant.clone();
                let local = self.local.clone();
                let submitted = off_runtime(move || local.submit(job, Arc::new(work))).await?;
                if let Err(refused) = &submitted {
                    self.local.count_tenant_refusal(&tenant, *refused);
                }
                submitted.map_err(SubmitRefused::Queue)
            }
            Mode::Shared(shared) => shared.submit(job, work).await,
        };
        self.local.discard_evicted();
        submitted
    }

    /// Whether `fingerprint` is quarantined here or, with shared jobs, by any instance.
    pub(crate) async fn is_quarantined(
        &self,
        fingerprint: &Fingerprint,
    ) -> Result<bool, SharedError> {
        if self.local.quarantine.contains(fingerprint) {
            return Ok(true);
        }
        match &self.mode {
            Mode::Shared(shared) => shared.is_quarantined(fingerprint).await,
            Mode::Local => Ok(false),
        }
    }

    /// Acts on another instance's request to cancel `id` ([`Shared::cancel_requested`]).
    pub(crate) async fn cancel_requested(&self, id: Uuid) {
        match &self.mode {
            Mode::Shared(shared) => shared.cancel_requested(id).await,
            Mode::Local => {
                self.local.cancel(id).await;
            }
        }
    }

    /// Stops taking jobs: waiting ones are cancelled (retryable), running ones get `grace`
    /// to finish and are then cancelled (retryable). Returns when every worker is gone.
    pub(crate) async fn drain(&self, grace: Duration) {
        let waiting = self.local.queue.close();
        self.runner.close_spares();
        self.local.metrics.queue_depth.set(0);
        if let Mode::Shared(shared) = &self.mode {
            shared.leave().await;
        }
        for id in waiting {
            if let Some(job) = self.local.board.update(id, |job| {
                job.finish(JobState::Cancelled, Some(shutdown_failure()));
                true
            }) {
                tracing::info!(job_id = %id, template_id = %job.template_id, "queued job cancelled by shutdown (retryable)");
            }
            self.local.count_finished(JobState::Cancelled, None, None);
        }
        // Jobs following another instance's render stop here; that render goes on there.
        for id in self.local.board.remote_followers() {
            self.local.board.detach(id, |job| {
                job.finish(JobState::Cancelled, Some(shutdown_failure()))
            });
        }
        self.runner.stop(grace).await;
        // The last states (cancelled, by shutdown) must reach the other instances.
        self.mode.flush().await;
    }

    /// Forgets jobs, outputs and quarantine entries older than `retention`.
    pub(crate) fn expire(&self, retention: Duration) {
        self.local.expire(retention);
    }

    /// The queue in front of the workers (its depth tells readiness).
    pub(crate) fn queue(&self) -> &Arc<RenderQueue> {
        &self.local.queue
    }
}
