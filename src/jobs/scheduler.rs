//! The scheduler of render jobs: it accepts a job (it follows a running render of the same
//! fingerprint, reuses a succeeded one's output, or is queued), runs queued jobs in sandboxed
//! worker processes, cancels jobs and drains on shutdown. Each concern has its own module:
//!
//! - [`worker_loops`]: the local worker loops, one render per job with its attempts and
//!   progress;
//! - [`shared_loops`]: with Redis, the worker loops on the shared work queue: take a job
//!   wherever it was accepted, keep its lease, acknowledge it once its end is recorded;
//! - [`outcome`]: what a finished attempt means (run again, the terminal state, failure and
//!   quarantine), decided by pure functions the runner applies;
//! - [`render_index`]: which render a new job joins, through the shared render index and this
//!   instance's board;
//! - [`following`]: jobs following another instance's render, and the one stream of a shared
//!   job's snapshots that followers and WatchRenderJob read;
//! - [`lookup`]: Get, Watch and Cancel of a tenant's job wherever it lives, this instance or
//!   another;
//! - [`replication`]: the ordered writer of shared records, and the end of jobs refused after
//!   being shared.
//!
//! Outcomes: success → SUCCEEDED with the output committed to storage; a reported
//! deterministic failure → FAILED, not retryable; a transient one, the deadline or the memory
//! limit → FAILED, retryable with a delay; a crash (signal, or an exit without a result) is
//! retried once on a fresh worker, and a second crash → FAILED RENDER_CRASHED, not
//! retryable, with the fingerprint quarantined. Draining (shutdown) cancels what waits, lets
//! running renders finish within the grace period and then cancels them, retryable.

mod following;
mod lookup;
mod outcome;
mod render_index;
mod replication;
mod shared_loops;
mod worker_loops;

pub use following::{FollowLost, OWNER_CHECK_INTERVAL};
pub use outcome::MAX_WORKER_ATTEMPTS;

use super::board::{JobBoard, Replication};
use super::model::{Job, JobState, RenderWork};
use super::quarantine::Quarantine;
use super::queue::{PushRefused, RenderQueue};
use super::retention::RetentionLimits;
use super::shared::{SharedError, SharedJobs};
use super::shared_queue::{SharedQueue, SharedQueueSettings};
use super::Fingerprint;
use crate::auth::TenantId;
use crate::metrics::Metrics;
use crate::reason::Reason;
use crate::sandbox::spare::{SpareSettings, SpareWorkers};
use crate::storage::OutputStore;
use crate::sync::lock;
use crate::telemetry::traces::Tracing;
use outcome::shutdown_failure;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// Assumed duration of a job before any has finished (for retry delays).
const INITIAL_JOB_SECONDS: f64 = 10.0;
/// Bounds of every retry delay this module suggests.
const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How long a cancel request for a job not on this board is kept (see
/// `Scheduler::unclaimed_cancels`): far longer than taking a job lasts (two Redis calls)…
const UNCLAIMED_CANCEL_MEMORY: Duration = Duration::from_secs(10);
/// …and at most this many (every instance hears every cancel request).
const MAX_UNCLAIMED_CANCELS: usize = 1024;
/// How long the cancel call waits for a running job's worker to be gone.
pub const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// Why a job was not added.
#[derive(Debug, thiserror::Error)]
pub enum SubmitRefused {
    #[error("the queue refused the job")]
    Queue(PushRefused),
    #[error(transparent)]
    Shared(#[from] SharedError),
    #[error("a bug of ours while adding the job: {0}")]
    Internal(String),
}

#[derive(Debug, Clone)]
pub struct SchedulerSettings {
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
    /// ([`crate::config::DEFAULT_JOB_LEASE_MS`]).
    pub job_lease: Duration,
    /// The bounds of the jobs kept ([`crate::jobs::retention`]).
    pub retained: RetentionLimits,
}

/// Where accepted jobs wait for a worker: the scheduler's worker loops read one or the other.
#[derive(Debug)]
pub enum WorkQueue {
    /// This process's queue, fair across tenants (the embedded default).
    InProcess(Arc<RenderQueue>),
    /// The queue every instance on one Redis shares ([`crate::jobs::shared_queue`]).
    Shared(Arc<SharedQueue>),
}

#[derive(Debug)]
pub struct Scheduler {
    board: Arc<JobBoard>,
    /// The in-process queue: jobs waiting for a worker in the embedded default; with shared
    /// jobs, only the followers of renders (which wait on this instance) count against it.
    queue: Arc<RenderQueue>,
    /// What the worker loops read.
    work: WorkQueue,
    /// With the shared queue: the work of jobs this instance accepted, kept (with the
    /// template files it pins) until the job ends wherever it renders.
    accepted: Mutex<std::collections::HashMap<Uuid, Arc<RenderWork>>>,
    /// With the shared queue: cancel requests of other instances for jobs not on this
    /// board, kept for [`UNCLAIMED_CANCEL_MEMORY`]: one may be for a job this instance is
    /// taking from the queue at that very moment (its record names this instance already,
    /// its board entry is not made yet).
    unclaimed_cancels: Mutex<std::collections::HashMap<Uuid, std::time::Instant>>,
    quarantine: Arc<Quarantine>,
    /// Jobs shared with other instances (Redis), when configured.
    shared: Option<Arc<SharedJobs>>,
    /// The ordered writer of shared records (with `shared`).
    replication: Option<tokio::sync::mpsc::UnboundedSender<Replication>>,
    metrics: Arc<Metrics>,
    outputs: OutputStore,
    settings: SchedulerSettings,
    average_job_seconds: Mutex<f64>,
    shutting_down: AtomicBool,
    loops: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The workers started ahead of the next jobs, when enabled.
    spares: Option<Arc<SpareWorkers>>,
}

impl Scheduler {
    /// Creates the scheduler and starts its worker loops on the current runtime.
    pub fn start(
        settings: SchedulerSettings,
        queue_capacity: usize,
        outputs: OutputStore,
        metrics: Arc<Metrics>,
        shared: Option<Arc<SharedJobs>>,
    ) -> Arc<Scheduler> {
        let (board, replication) = match &shared {
            Some(shared) => {
                let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
                let board = JobBoard::replicated(sender.clone());
                let forgetting = board.forgetting().clone();
                tokio::spawn(replication::replicate(shared.clone(), receiver, forgetting));
                (board, Some(sender))
            }
            None => (JobBoard::default(), None),
        };
        let queue =
            Arc::new(RenderQueue::new(queue_capacity).with_tenant_limit(settings.tenant_max_jobs));
        // Followers of a render wait like queued renders: they count against the capacity.
        let board = board
            .counting_followers_in(queue.clone())
            .retaining(settings.retained, metrics.clone());
        let spares = (settings.spare_workers > 0).then(|| {
            SpareWorkers::start(
                SpareSettings {
                    executable: settings.executable.clone(),
                    memory_bytes: settings.worker_memory_bytes,
                    count: settings.spare_workers,
                },
                metrics.clone(),
            )
        });
        let work = match &shared {
            Some(shared) => WorkQueue::Shared(Arc::new(SharedQueue::new(
                shared.redis().clone(),
                shared.instance(),
                SharedQueueSettings {
                    capacity: queue_capacity,
                    tenant_max_jobs: settings.tenant_max_jobs,
                    lease: settings.job_lease,
                    retention: shared.retention(),
                },
            ))),
            None => WorkQueue::InProcess(queue.clone()),
        };
        let scheduler = Arc::new(Scheduler {
            board: Arc::new(board),
            queue,
            work,
            accepted: Mutex::default(),
            unclaimed_cancels: Mutex::default(),
            quarantine: Arc::new(Quarantine::default()),
            shared,
            replication,
            metrics,
            outputs,
            settings,
            average_job_seconds: Mutex::new(INITIAL_JOB_SECONDS),
            shutting_down: AtomicBool::new(false),
            loops: Mutex::new(Vec::new()),
            spares,
        });
        let loops = (0..scheduler.settings.workers)
            .map(|_| match &scheduler.work {
                WorkQueue::InProcess(_) => tokio::spawn(scheduler.clone().worker_loop()),
                WorkQueue::Shared(queue) => {
                    tokio::spawn(scheduler.clone().shared_worker_loop(queue.clone()))
                }
            })
            .collect();
        *lock(&scheduler.loops) = loops;
        if let WorkQueue::Shared(queue) = &scheduler.work {
            tokio::spawn(scheduler.clone().release_ended_work());
            tokio::spawn(shared_loops::announce_workers(
                Arc::downgrade(&scheduler),
                queue.clone(),
            ));
        }
        scheduler
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn outputs(&self) -> &OutputStore {
        &self.outputs
    }

    /// How long a caller refused for a full queue should wait: the time the workers need
    /// to work through the queue at the recent pace.
    pub fn queue_retry_after(&self) -> Duration {
        let waiting = match &self.work {
            WorkQueue::InProcess(queue) => queue.len(),
            WorkQueue::Shared(queue) => queue.waiting(),
        };
        self.retry_after_waiting(waiting)
    }

    /// [`Scheduler::queue_retry_after`] with `waiting` jobs in the queue (the shared queue
    /// tells its length when it refuses), worked through by this instance's workers or, on
    /// the shared queue, by the workers of every live instance (as last announced; the
    /// recent pace of this instance stands for theirs).
    pub fn retry_after_waiting(&self, waiting: usize) -> Duration {
        let average = *lock(&self.average_job_seconds);
        let waiting = waiting as f64 + 1.0;
        let workers = match &self.work {
            WorkQueue::InProcess(_) => self.settings.workers,
            WorkQueue::Shared(queue) => queue.farm_workers(self.settings.workers),
        };
        let seconds = waiting * average / workers.max(1) as f64;
        Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_RETRY_AFTER)
            .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
    }

    /// How long a caller refused for its tenant's share should wait: until one of the
    /// tenant's jobs likely ends ([`super::queue::TenantLoad::slot_frees_in`]), within the
    /// bounds of every retry delay (never 0).
    pub fn tenant_retry_after(&self, tenant: &TenantId) -> Duration {
        let average = Duration::try_from_secs_f64(*lock(&self.average_job_seconds))
            .unwrap_or(MAX_RETRY_AFTER);
        self.queue
            .tenant_load(tenant)
            .slot_frees_in(average, self.settings.workers)
            .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
    }

    /// Adds a new job: it follows a running render of the same fingerprint (on this instance
    /// or, with shared jobs, on another), starts from a succeeded one's output, or is
    /// queued. On refusal the job is not kept.
    ///
    /// The job counts against its tenant's share of the queue (`--tenant-max-jobs`).
    ///
    /// Refused because the shared records failed, the job may still be half-shared: its
    /// record published (queued, owned by this live instance) and the render index naming
    /// it, though nobody will ever run it. A retry (the caller's key is freed) would then
    /// follow that record until the silence limit of [`following`]; so it is ended as failed
    /// and taken out of the render index ([`Scheduler::abandon_shared`]).
    pub async fn submit(
        self: &Arc<Self>,
        job: Job,
        work: RenderWork,
    ) -> Result<Job, SubmitRefused> {
        let abandoned = self.shared.as_ref().map(|shared| {
            let mut job = job.clone();
            job.owner = Some(shared.instance());
            job
        });
        let submitted = self.submit_once(job, work).await;
        if let (Err(SubmitRefused::Shared(error)), Some(job)) = (&submitted, abandoned) {
            self.abandon_shared(job, error.to_string());
        }
        self.discard_evicted();
        submitted
    }

    /// Removes the outputs of the jobs the board evicted to make room (off the runtime: file
    /// removal blocks).
    fn discard_evicted(&self) {
        let evicted = self.board.take_evicted();
        if evicted.is_empty() {
            return;
        }
        let outputs = self.outputs.clone();
        tokio::task::spawn_blocking(move || {
            for job in evicted {
                outputs.remove(job.id, job.format.extension());
                tracing::debug!(job_id = %job.id, tenant = %job.tenant, "ended job evicted to make room");
            }
        });
    }

    /// Counts a refusal for the tenant's share or its jobs kept (the label set is bounded:
    /// tenants come from configuration).
    fn count_tenant_refusal(&self, tenant: &TenantId, refused: PushRefused) {
        match refused {
            PushRefused::TenantFull { held, limit } => {
                self.metrics
                    .tenant_refusal(tenant.as_str(), Reason::TenantJobLimit);
                tracing::info!(tenant = %tenant, held, limit, "job refused: the tenant holds its share");
            }
            PushRefused::RetainedJobsFull(full) => {
                self.metrics
                    .tenant_refusal(tenant.as_str(), Reason::RetainedJobsFull);
                tracing::info!(tenant = %tenant, retained = full.retained, limit = full.limit, per_tenant = full.per_tenant, "job refused: the jobs kept are at their bound and none has ended");
            }
            PushRefused::Full { .. } | PushRefused::Closed => {}
        }
    }

    /// Whether `fingerprint` is quarantined here or, with shared jobs, by any instance.
    pub async fn is_quarantined(&self, fingerprint: &Fingerprint) -> Result<bool, SharedError> {
        if self.quarantine.contains(fingerprint) {
            return Ok(true);
        }
        match &self.shared {
            Some(shared) => shared.is_quarantined(fingerprint).await,
            None => Ok(false),
        }
    }

    /// Cancels a job: a waiting one at once, a running one by killing its worker (waiting up
    /// to [`CANCEL_SETTLE`] for it to be gone). A finished job is answered as it is.
    pub async fn cancel(&self, id: Uuid) -> Option<Job> {
        let (job, mut changes) = self.board.subscribe(id)?;
        if job.state.is_terminal() {
            return Some(job);
        }
        if self.board.leader_of(id).is_some() {
            // It only follows another job's render: it stops, the render goes on.
            let job = self
                .board
                .detach(id, |job| job.finish(JobState::Cancelled, None));
            tracing::info!(job_id = %id, template_id = %job.as_ref()?.template_id, "job cancelled while following a shared render");
            return job;
        }
        if self.queue.remove(id) {
            self.metrics.queue_depth.set(self.queue.len() as i64);
            let job = self.board.update(id, |job| {
                job.finish(JobState::Cancelled, None);
                true
            });
            self.count_finished(JobState::Cancelled, None);
            tracing::info!(job_id = %id, template_id = %job.as_ref()?.template_id, "job cancelled while queued");
            return job;
        }
        // Running (or about to run: its loop sees the token before spawning anything).
        self.board.request_cancel(id);
        let settled = tokio::time::timeout(CANCEL_SETTLE, async {
            while let Ok(job) = changes.recv().await {
                if job.state.is_terminal() {
                    break;
                }
            }
        });
        let _ = settled.await;
        self.board.get(id)
    }

    /// Acts on another instance's request to cancel `id`: cancels it when it is this
    /// instance's; with the shared queue, else keeps the request a moment, in case this
    /// instance is taking that job right now ([`Scheduler::adopt_taken`] looks).
    pub async fn cancel_requested(&self, id: Uuid) {
        {
            let mut unclaimed = lock(&self.unclaimed_cancels);
            if !self.is_local_job(id) {
                if matches!(self.work, WorkQueue::Shared(_)) {
                    unclaimed.retain(|_, heard| heard.elapsed() < UNCLAIMED_CANCEL_MEMORY);
                    if unclaimed.len() < MAX_UNCLAIMED_CANCELS {
                        unclaimed.insert(id, std::time::Instant::now());
                    }
                }
                return;
            }
        }
        self.cancel(id).await;
    }

    /// Puts a job taken from the shared queue on the board (as its render here), cancelled
    /// at once if a cancel request came for it while it was being taken.
    fn adopt_taken(&self, job: Job, work: Arc<RenderWork>) {
        let id = job.id;
        let mut unclaimed = lock(&self.unclaimed_cancels);
        self.board.adopt(job, work);
        if unclaimed.remove(&id).is_some() {
            self.board.request_cancel(id);
        }
        drop(unclaimed);
        self.discard_evicted();
    }

    /// Stops taking jobs: waiting ones are cancelled (retryable), running ones get `grace`
    /// to finish and are then cancelled (retryable). Returns when every worker is gone.
    pub async fn drain(&self, grace: Duration) {
        let waiting = self.queue.close();
        // Jobs this instance accepted into the shared queue are the farm's: their template
        // files must outlive this process for whichever instance renders them (the pin
        // sweep removes them after the retention).
        for (_, work) in lock(&self.accepted).drain() {
            std::mem::forget(work);
        }
        // No job will come for a spare.
        if let Some(spares) = &self.spares {
            spares.close();
        }
        self.metrics.queue_depth.set(0);
        if let WorkQueue::Shared(queue) = &self.work {
            // This instance's workers stop counting towards the farm's at once.
            if let Err(error) = queue.announce(0).await {
                tracing::debug!(%error, "cannot tell the farm this instance leaves");
            }
        }
        for id in waiting {
            if let Some(job) = self.board.update(id, |job| {
                job.finish(JobState::Cancelled, Some(shutdown_failure()));
                true
            }) {
                tracing::info!(job_id = %id, template_id = %job.template_id, "queued job cancelled by shutdown (retryable)");
            }
            self.count_finished(JobState::Cancelled, None);
        }
        // Jobs following another instance's render stop here; that render goes on there.
        for id in self.board.remote_followers() {
            self.board.detach(id, |job| {
                job.finish(JobState::Cancelled, Some(shutdown_failure()))
            });
        }
        let loops = std::mem::take(&mut *lock(&self.loops));
        let mut all = futures_util::future::join_all(loops);
        if tokio::time::timeout(grace, &mut all).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                "renders still running after the shutdown grace period; cancelling them"
            );
            self.shutting_down.store(true, Ordering::SeqCst);
            for token in self.board.running_cancel_tokens() {
                token.cancel();
            }
            all.await;
        }
        // Every worker has ended: the thread that started the spares (their parent, for
        // the kernel's parent-death signal) may go.
        if let Some(spares) = &self.spares {
            spares.stop();
        }
        // The last states (cancelled, by shutdown) must reach the other instances.
        self.flush_shared().await;
    }

    /// Forgets jobs, outputs and quarantine entries older than `retention`.
    pub fn expire(&self, retention: Duration) {
        for job in self.board.expire(retention) {
            self.outputs.remove(job.id, job.format.extension());
            tracing::debug!(job_id = %job.id, template_id = %job.template_id, "job expired");
        }
        let quarantined = self.quarantine.expire(retention);
        self.metrics
            .quarantined_fingerprints
            .set(quarantined as i64);
        match self.outputs.sweep(retention) {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed expired outputs"),
            Err(error) => tracing::warn!(%error, "cannot sweep expired outputs"),
        }
    }

    /// The queue in front of the workers (its depth tells readiness).
    pub fn queue(&self) -> &Arc<RenderQueue> {
        &self.queue
    }
}
