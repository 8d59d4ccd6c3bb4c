//! Runs queued jobs: `workers` loops each take the next job from the queue and render it in a
//! fresh `lottie-render worker` process (the sandbox) on a blocking thread, publishing
//! progress on the board as the worker reports it.
//!
//! Outcomes: success → SUCCEEDED with the output committed to storage; a reported
//! deterministic failure → FAILED, not retryable; a transient one, the deadline or the memory
//! limit → FAILED, retryable with a delay; a crash (signal, or an exit without a result) is
//! retried once on a fresh worker, and a second crash → FAILED RENDER_CRASHED, not
//! retryable, with the fingerprint quarantined. Draining (shutdown) cancels what waits, lets
//! running renders finish within the grace period and then cancels them, retryable.

use super::board::{Admission, JobBoard, Replication};
use super::model::{Job, JobFailure, JobState, RenderWork};
use super::quarantine::{lock, Quarantine};
use super::queue::{PushRefused, QueuedJob, RenderQueue, StartedJob};
use super::shared::{RenderClaim, SharedError, SharedJobs};
use super::Fingerprint;
use crate::auth::TenantId;
use crate::error::ErrorClass;
use crate::metrics::{FormatLabels, Metrics, OutcomeLabels};
use crate::sandbox::protocol::{WorkerEvent, WorkerJob};
use crate::sandbox::spare::{SpareSettings, SpareWorkers};
use crate::sandbox::{self, CancelToken, FailureKind, SandboxSettings, WorkerRun};
use crate::storage::OutputStore;
use crate::telemetry::traces::{RenderSpan, Tracing};
use crate::telemetry::worker_spans::MAX_WORKER_SPANS;
use futures_util::StreamExt;
use opentelemetry::KeyValue;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

/// Worker runs per job when the worker crashes: the first crash may be bad luck (a flaky
/// machine, an OOM kill); a second on a fresh process means the request itself is poison.
pub const MAX_WORKER_ATTEMPTS: u32 = 2;
/// Assumed duration of a job before any has finished (for retry delays).
const INITIAL_JOB_SECONDS: f64 = 10.0;
/// Weight of the newest job in the moving average of job durations.
const JOB_SECONDS_SMOOTHING: f64 = 0.2;
/// Bounds of every retry delay this module suggests.
const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Retry delay of a job cancelled by shutdown: another instance (or this one restarted)
/// takes it.
const SHUTDOWN_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Reason of a job refused because its tenant holds its share of the queue.
pub const TENANT_JOB_LIMIT_REASON: &str = "TENANT_JOB_LIMIT";
/// Version of a shared record that is final (a job refused before it was admitted).
const FINAL_VERSION: u64 = 1 << 52;
/// How long shutdown waits for shared records to be written.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// A job following another instance's render fails (retryable) when nothing is heard of
/// that render for this long: the longest render plus a long wait in a queue.
const FOLLOW_SILENCE_LIMIT: Duration = Duration::from_secs(3600);
/// Attempts at ending a job refused half-shared, and the wait between them: the shared
/// records just failed, so they are given a minute (12 × 5 s) to come back.
const ABANDON_ATTEMPTS: u32 = 12;
const ABANDON_RETRY_DELAY: Duration = Duration::from_secs(5);
/// How often a job following another instance's quiet render checks that render's record.
pub const OWNER_CHECK_INTERVAL: Duration = Duration::from_secs(15);
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
    /// Workers kept started ahead of their job ([`sandbox::spare`]); 0: none.
    pub spare_workers: usize,
}

#[derive(Debug)]
pub struct Scheduler {
    pub board: Arc<JobBoard>,
    pub queue: Arc<RenderQueue>,
    pub quarantine: Arc<Quarantine>,
    /// Jobs shared with other instances (Redis), when configured.
    pub shared: Option<Arc<SharedJobs>>,
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
                tokio::spawn(replicate(shared.clone(), receiver));
                (JobBoard::replicated(sender.clone()), Some(sender))
            }
            None => (JobBoard::default(), None),
        };
        let queue =
            Arc::new(RenderQueue::new(queue_capacity).with_tenant_limit(settings.tenant_max_jobs));
        // Followers of a render wait like queued renders: they count against the capacity.
        let board = board.counting_followers_in(queue.clone());
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
        let scheduler = Arc::new(Scheduler {
            board: Arc::new(board),
            queue,
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
            .map(|_| tokio::spawn(scheduler.clone().worker_loop()))
            .collect();
        *lock(&scheduler.loops) = loops;
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
        let average = *lock(&self.average_job_seconds);
        let waiting = self.queue.len() as f64 + 1.0;
        let seconds = waiting * average / self.settings.workers.max(1) as f64;
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
    /// follow that record for [`FOLLOW_SILENCE_LIMIT`]; so it is ended as failed and taken
    /// out of the render index ([`Scheduler::abandon_shared`]).
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
        submitted
    }

    /// Ends the shared traces of a job [`Scheduler::submit`] refused for a shared-record
    /// failure (no local part exists then: the refusal comes before the job is queued or
    /// follows anything), in the background, retried while the records keep failing.
    fn abandon_shared(&self, mut job: Job, error: String) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        job.finish(
            JobState::Failed,
            Some(JobFailure {
                reason: "JOB_STORE_UNAVAILABLE".into(),
                message: format!("the job could not be shared: {error}"),
                retryable: true,
                retry_after: Some(MIN_RETRY_AFTER),
            }),
        );
        job.version = FINAL_VERSION;
        tokio::spawn(async move {
            for attempt in 1..=ABANDON_ATTEMPTS {
                let ended = shared.publish(&job).await;
                let unindexed = shared.clear_render(&job.fingerprint, job.id).await;
                match (ended, unindexed) {
                    (Ok(()), Ok(())) => return,
                    (ended, unindexed) if attempt == ABANDON_ATTEMPTS => {
                        tracing::warn!(job_id = %job.id, ended = ?ended.err(), unindexed = ?unindexed.err(), "cannot end a job refused half-shared; followers give up after the silence limit");
                    }
                    _ => tokio::time::sleep(ABANDON_RETRY_DELAY).await,
                }
            }
        });
    }

    async fn submit_once(
        self: &Arc<Self>,
        mut job: Job,
        work: RenderWork,
    ) -> Result<Job, SubmitRefused> {
        let tenant = job.tenant.clone();
        let work = Arc::new(work);
        if let Some(shared) = self.shared.clone() {
            job.owner = Some(shared.instance());
            // Shared before it may lead: another instance that finds this job in the render
            // index must find its record too, or it would take it for gone and render twice.
            shared.publish(&job).await?;
            loop {
                let leader = match shared.claim_render(&job.fingerprint, job.id).await? {
                    RenderClaim::Leads => break,
                    RenderClaim::Existing(leader) if leader == job.id => break,
                    RenderClaim::Existing(leader) => leader,
                };
                // A live or succeeded render of this instance: the board decides below.
                if let Some(local) = self.board.get(leader) {
                    if !matches!(local.state, JobState::Failed | JobState::Cancelled) {
                        break;
                    }
                    if shared
                        .replace_render(&job.fingerprint, leader, job.id)
                        .await?
                    {
                        break;
                    }
                    continue;
                }
                match shared.get(leader).await? {
                    Some(remote) if remote.state == JobState::Succeeded => {
                        let scheduler = self.clone();
                        let (copy, work_copy) = (job.clone(), work.clone());
                        let reused = tokio::task::spawn_blocking(move || {
                            scheduler.reuse(&copy, work_copy, &remote)
                        })
                        .await
                        .map_err(|error| SubmitRefused::Internal(error.to_string()))?;
                        if let Some(reused) = reused {
                            return Ok(reused);
                        }
                        // Its output is gone: render anew.
                        shared
                            .replace_render(&job.fingerprint, leader, job.id)
                            .await?;
                    }
                    Some(remote) if !remote.state.is_terminal() => {
                        let followed = self.follow_remote(job.clone(), work, remote);
                        if let Err(refused) = followed {
                            self.count_tenant_refusal(&tenant, refused);
                            self.share_refusal(&job, refused).await;
                        }
                        return followed.map_err(SubmitRefused::Queue);
                    }
                    // Failed, cancelled or expired: the first to take the fingerprint over
                    // renders it.
                    _ => {
                        if shared
                            .replace_render(&job.fingerprint, leader, job.id)
                            .await?
                        {
                            break;
                        }
                    }
                }
            }
        }
        let scheduler = self.clone();
        let submitted = {
            let job = job.clone();
            tokio::task::spawn_blocking(move || scheduler.submit_locally(job, work))
                .await
                .map_err(|error| SubmitRefused::Internal(error.to_string()))?
        };
        if let Err(refused) = &submitted {
            self.count_tenant_refusal(&tenant, *refused);
            self.share_refusal(&job, *refused).await;
        }
        submitted.map_err(SubmitRefused::Queue)
    }

    /// Counts a refusal for the tenant's share (the label set is bounded: tenants come from
    /// configuration).
    fn count_tenant_refusal(&self, tenant: &TenantId, refused: PushRefused) {
        if let PushRefused::TenantFull { held, limit } = refused {
            self.metrics
                .tenant_refusal(tenant.as_str(), TENANT_JOB_LIMIT_REASON);
            tracing::info!(tenant = %tenant, held, limit, "job refused: the tenant holds its share");
        }
    }

    /// Ends the shared record of a job the queue refused (it said QUEUED), so that nobody
    /// follows it, and frees the fingerprint.
    async fn share_refusal(&self, job: &Job, refused: PushRefused) {
        let Some(shared) = &self.shared else {
            return;
        };
        let mut refused_job = job.clone();
        refused_job.finish(
            JobState::Failed,
            Some(JobFailure {
                reason: "JOB_REFUSED".into(),
                message: format!("the job was not accepted: {refused:?}"),
                retryable: true,
                retry_after: Some(self.queue_retry_after()),
            }),
        );
        refused_job.version = FINAL_VERSION;
        if let Err(error) = shared.publish(&refused_job).await {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot share a refused job's end");
        }
        if let Err(error) = shared.clear_render(&job.fingerprint, job.id).await {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot free a shared render");
        }
    }

    /// The error of jobs that joined a render the queue then refused.
    fn refused_failure(&self, refused: PushRefused) -> JobFailure {
        JobFailure {
            reason: match refused {
                PushRefused::Full { .. } => "QUEUE_FULL".into(),
                PushRefused::TenantFull { .. } => TENANT_JOB_LIMIT_REASON.into(),
                PushRefused::Closed => "SERVER_SHUTTING_DOWN".into(),
            },
            message: "the render this job shared was refused by a full or closing queue; \
                      submit again"
                .into(),
            retryable: true,
            retry_after: Some(self.queue_retry_after()),
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

    /// Waits (a little) until every shared record written so far has reached Redis.
    pub async fn flush_shared(&self) {
        if let Some(replication) = &self.replication {
            let (done, flushed) = tokio::sync::oneshot::channel();
            if replication.send(Replication::Flush(done)).is_ok() {
                let _ = tokio::time::timeout(FLUSH_LIMIT, flushed).await;
            }
        }
    }

    /// Gives `job` the output of `source` (an identical request's succeeded job) and adds
    /// it as succeeded; `None` when that output is gone. Blocking (links a file).
    fn reuse(&self, job: &Job, work: Arc<RenderWork>, source: &Job) -> Option<Job> {
        let extension = job.format.extension();
        if let Err(error) = self.outputs.link(source.id, job.id, extension) {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, %error, "cannot reuse an output");
            return None;
        }
        let now = SystemTime::now();
        let mut reused = job.clone();
        reused.state = JobState::Succeeded;
        reused.frames_total = source.frames_total;
        reused.frames_done = source.frames_total;
        reused.output = source.output.clone();
        reused.started_at = Some(now);
        reused.finished_at = Some(now);
        self.board.insert(reused.clone(), work);
        self.metrics.render_cache_hits.inc();
        tracing::info!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, "job reuses the output of an identical request");
        Some(reused)
    }

    /// Adds `job` as a follower of `leader`, a render of another instance, and keeps it in
    /// step with the leader's published snapshots.
    /// Refused when the queue has no slot for another follower.
    fn follow_remote(
        self: &Arc<Self>,
        job: Job,
        work: Arc<RenderWork>,
        leader: Job,
    ) -> Result<Job, PushRefused> {
        let mut follower = job;
        super::board::mirror(&mut follower, &leader);
        self.board
            .insert_following(follower.clone(), work, leader.id)?;
        self.metrics.render_joins.inc();
        tracing::info!(job_id = %follower.id, template_id = %follower.template_id, leader_job_id = %leader.id, "job joins the render of an identical request on another instance");
        let scheduler = self.clone();
        let id = follower.id;
        tokio::spawn(async move { scheduler.keep_following(id, leader.id).await });
        Ok(follower)
    }

    async fn keep_following(self: Arc<Self>, id: Uuid, leader: Uuid) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let lost = |message: String| JobFailure {
            reason: "SHARED_RENDER_LOST".into(),
            message,
            retryable: true,
            retry_after: Some(MIN_RETRY_AFTER),
        };
        let (current, changes) = match shared.watch(leader).await {
            Ok(watch) => watch,
            Err(error) => {
                self.board.update(id, |job| {
                    job.finish(
                        JobState::Failed,
                        Some(lost(format!("cannot follow the shared render: {error}"))),
                    );
                    true
                });
                return;
            }
        };
        let mut changes = std::pin::pin!(changes);
        let mut next = current;
        let mut last_version = None;
        let started_following = std::time::Instant::now();
        loop {
            let leader_job = match next.take() {
                Some(job) => job,
                None => match tokio::time::timeout(OWNER_CHECK_INTERVAL, changes.next()).await {
                    Ok(Some(job)) => job,
                    // Quiet (a long queue) or the subscription dropped: the record says
                    // whether the render is still alive (its owner's heartbeat included).
                    quiet => match shared.get(leader).await.ok().flatten() {
                        Some(job) if job.state.is_terminal() => job,
                        Some(job)
                            if quiet.is_err()
                                && started_following.elapsed() < FOLLOW_SILENCE_LIMIT =>
                        {
                            job
                        }
                        _ => {
                            self.board.update(id, |job| {
                                job.finish(
                                    JobState::Failed,
                                    Some(lost("lost track of the shared render".into())),
                                );
                                true
                            });
                            return;
                        }
                    },
                },
            };
            if last_version.is_some_and(|last| leader_job.version <= last) {
                continue;
            }
            last_version = Some(leader_job.version);
            if leader_job.state == JobState::Succeeded {
                let scheduler = self.clone();
                let extension = leader_job.format.extension();
                let linked = tokio::task::spawn_blocking(move || {
                    scheduler.outputs.link(leader, id, extension)
                })
                .await;
                if !matches!(linked, Ok(Ok(()))) {
                    self.board.update(id, |job| {
                        job.finish(JobState::Failed, Some(lost("the shared render's output is not in this instance's data directory".into())));
                        true
                    });
                    return;
                }
            }
            let followed = self.board.update(id, |job| {
                super::board::mirror(job, &leader_job);
                true
            });
            match followed {
                Some(job) if !job.state.is_terminal() => {}
                // Finished, cancelled by its own caller, or expired.
                _ => return,
            }
        }
    }

    /// The local part of [`Scheduler::submit`]. Blocking (it may link an output file).
    fn submit_locally(
        &self,
        job: Job,
        work: Arc<RenderWork>,
    ) -> Result<Job, super::queue::PushRefused> {
        let id = job.id;
        loop {
            match self.board.admit(&job, &work) {
                Admission::Leads => {
                    let queued = QueuedJob {
                        id,
                        tenant: job.tenant.clone(),
                        deadline: work.deadline,
                    };
                    return match self.queue.try_push(queued) {
                        Ok(depth) => {
                            self.metrics.queue_depth.set(depth as i64);
                            Ok(job)
                        }
                        Err(refused) => {
                            self.board
                                .remove_refused(id, &self.refused_failure(refused));
                            Err(refused)
                        }
                    };
                }
                Admission::Follows(leader) => {
                    self.metrics.render_joins.inc();
                    tracing::info!(job_id = %id, template_id = %job.template_id, leader_job_id = %leader, "job joins the render of an identical request");
                    return Ok(self.board.get(id).unwrap_or(job));
                }
                Admission::Refused(refused) => return Err(refused),
                Admission::Reuses(leader) => match self.reuse(&job, work.clone(), &leader) {
                    Some(reused) => return Ok(reused),
                    // The output expired under us: render again.
                    None => self.board.forget_render(&job.fingerprint, leader.id),
                },
            }
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

    /// Stops taking jobs: waiting ones are cancelled (retryable), running ones get `grace`
    /// to finish and are then cancelled (retryable). Returns when every worker is gone.
    pub async fn drain(&self, grace: Duration) {
        let waiting = self.queue.close();
        // No job will come for a spare.
        if let Some(spares) = &self.spares {
            spares.close();
        }
        self.metrics.queue_depth.set(0);
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

    async fn worker_loop(self: Arc<Self>) {
        while let Some(started) = self.queue.pop().await {
            let id = started.id;
            self.metrics.queue_depth.set(self.queue.len() as i64);
            let scheduler = self.clone();
            // The job's tenant slot goes with it: freed as the job ends (or its runner panics).
            let ran = tokio::task::spawn_blocking(move || scheduler.run_job(started)).await;
            if let Err(error) = ran {
                // A bug of ours in run_job: the job must not stay RUNNING for ever.
                let template_id = self.board.get(id).map(|job| job.template_id.to_string());
                tracing::error!(job_id = %id, template_id = template_id.as_deref().unwrap_or("-"), %error, "the job runner panicked");
                self.board.update(id, |job| {
                    job.finish(
                        JobState::Failed,
                        Some(JobFailure {
                            reason: "INTERNAL".into(),
                            message: "internal error; it has been logged".into(),
                            retryable: true,
                            retry_after: Some(MIN_RETRY_AFTER),
                        }),
                    );
                    true
                });
            }
        }
    }

    /// Runs one job to a terminal state (blocking: waits for worker processes). Its tenant's
    /// slot (`slot`) is given back before a rendered job is seen to end, so a caller that saw
    /// it end may submit again at once.
    fn run_job(&self, slot: StartedJob) {
        let id = slot.id;
        let Some((work, cancel)) = self.board.work(id) else {
            return;
        };
        let Some(job) = self.board.update(id, |job| {
            if job.state != JobState::Queued {
                return false;
            }
            if cancel.is_cancelled() {
                // Cancelled between leaving the queue and starting: nothing to spawn.
                job.finish(JobState::Cancelled, None);
                return true;
            }
            if self.quarantine.contains(&job.fingerprint) {
                // An identical request crashed twice while this one waited.
                job.finish(JobState::Failed, Some(quarantined_failure()));
                return true;
            }
            job.state = JobState::Running;
            job.started_at = Some(SystemTime::now());
            true
        }) else {
            return;
        };
        if job.state.is_terminal() {
            self.count_finished(job.state, None);
            tracing::info!(job_id = %id, template_id = %job.template_id, state = job.state.label(), "job ended before its render started");
            return;
        }
        if job.state != JobState::Running {
            return;
        }
        let span = tracing::info_span!("job", job_id = %id, template_id = %job.template_id);
        let _entered = span.enter();
        tracing::info!(frames_total = job.frames_total, "render started");
        let mut render_span = self
            .settings
            .tracing
            .render_span(work.trace_parent.as_ref(), || {
                vec![
                    KeyValue::new("job.id", id.to_string()),
                    KeyValue::new("template.id", job.template_id.to_string()),
                    KeyValue::new("output.format", work.output.format.extension()),
                    KeyValue::new("frames", i64::from(job.frames_total)),
                ]
            });
        self.metrics.jobs_running.inc();
        let started = Instant::now();
        let (run, attempts) = self.run_attempts(id, &job.fingerprint, &work, &cancel, &render_span);
        let (state, error) = self.conclude(&job, &work, run, attempts, &cancel);
        drop(slot);
        render_span.set_attribute(KeyValue::new("job.state", state.label()));
        render_span.set_attribute(KeyValue::new("attempts", i64::from(attempts)));
        render_span.end(error.as_ref().map(|error| error.reason.as_str()));
        let job = self.board.update(id, |job| {
            if state == JobState::Succeeded {
                job.frames_done = job.frames_total;
            }
            job.finish(state, error.clone());
            true
        });
        if state == JobState::Succeeded {
            // Jobs that joined between the first linking and the update.
            self.link_followers(id, work.output.format.extension());
        }
        self.metrics.jobs_running.dec();
        let seconds = started.elapsed().as_secs_f64();
        self.count_finished(state, Some(seconds));
        if state != JobState::Cancelled {
            let mut average = lock(&self.average_job_seconds);
            *average = *average * (1.0 - JOB_SECONDS_SMOOTHING) + seconds * JOB_SECONDS_SMOOTHING;
        }
        match (&state, &error, job) {
            (JobState::Succeeded, _, Some(job)) => tracing::info!(
                seconds,
                attempts,
                size_bytes = job.output.as_ref().map_or(0, |o| o.size_bytes),
                "render succeeded"
            ),
            (_, Some(error), _) => tracing::warn!(
                seconds,
                attempts,
                reason = %error.reason,
                retryable = error.retryable,
                message = %error.message,
                "render ended without output"
            ),
            _ => tracing::info!(seconds, attempts, state = state.label(), "render ended"),
        }
    }

    /// Worker runs until one does not crash or the attempts are used up; the spans each
    /// worker reports are exported under `render_span`.
    fn run_attempts(
        &self,
        id: Uuid,
        fingerprint: &Fingerprint,
        work: &RenderWork,
        cancel: &CancelToken,
        render_span: &RenderSpan,
    ) -> (WorkerRun, u32) {
        let extension = work.output.format.extension();
        let job = WorkerJob {
            template_path: work.template_path.clone(),
            modifications: work.modifications.clone(),
            output: work.output,
            output_path: self.outputs.partial_path(id, extension),
            threads: 0,
            fonts: work.fonts.clone(),
            traceparent: render_span.traceparent(),
        };
        let settings = SandboxSettings {
            executable: self.settings.executable.clone(),
            memory_bytes: self.settings.worker_memory_bytes,
            deadline: work.deadline,
        };
        let mut attempt = 1;
        loop {
            let mut spans = Vec::new();
            let mut on_event = |event: &WorkerEvent| match event {
                WorkerEvent::Span(span) if spans.len() < MAX_WORKER_SPANS => {
                    spans.push(span.clone());
                }
                WorkerEvent::Span(_) => {}
                _ => self.publish_progress(id, event),
            };
            // A retry after a crash runs on a worker started for it, as the first run may
            // have failed for the spare's sake.
            let spare = match (&self.spares, attempt) {
                (Some(spares), 1) => spares.take(),
                _ => None,
            };
            let run = sandbox::run_worker_on(spare, &job, &settings, cancel, &mut on_event);
            if run.on_spare {
                self.metrics.spare_worker_hits.inc();
            } else if !matches!(&run.result, Err(failure) if failure.kind == FailureKind::SpawnFailed)
            {
                self.metrics.workers_started.inc();
            }
            render_span.export_worker_spans(&spans);
            let crashed = matches!(
                &run.result,
                Err(failure) if matches!(failure.kind, FailureKind::Crashed { .. })
            );
            if crashed {
                self.metrics.worker_crashes.inc();
                if let Err(failure) = &run.result {
                    tracing::warn!(attempt, message = %failure.message, "the worker crashed");
                }
            }
            if !crashed
                || attempt >= MAX_WORKER_ATTEMPTS
                || cancel.is_cancelled()
                || self.quarantine.contains(fingerprint)
            {
                return (run, attempt);
            }
            attempt += 1;
            self.board.update(id, |job| {
                job.frames_done = 0;
                true
            });
        }
    }

    /// Gives every follower of `id` its (hard-linked) output.
    fn link_followers(&self, id: Uuid, extension: &str) {
        for follower in self.board.followers(id) {
            if let Err(error) = self.outputs.link(id, follower, extension) {
                tracing::warn!(follower_job_id = %follower, %error, "cannot give a follower its output");
            }
        }
    }

    /// Progress on the board: a published change per whole percent (watchers are promised
    /// at least one every 5%).
    fn publish_progress(&self, id: Uuid, event: &WorkerEvent) {
        let (done, total) = match event {
            WorkerEvent::Started { frames_total } => (0, *frames_total),
            WorkerEvent::Progress {
                frames_done,
                frames_total,
            } => (*frames_done, *frames_total),
            _ => return,
        };
        self.board.update(id, |job| {
            let before = percent(job.frames_done, job.frames_total);
            let changed_total = job.frames_total != total;
            job.frames_done = done;
            job.frames_total = total;
            changed_total || percent(done, total) != before
        });
    }

    /// The terminal state and error of a finished worker run.
    fn conclude(
        &self,
        job: &Job,
        work: &RenderWork,
        run: WorkerRun,
        attempts: u32,
        cancel: &CancelToken,
    ) -> (JobState, Option<JobFailure>) {
        let extension = work.output.format.extension();
        if run.result.is_err() && cancel.is_cancelled() {
            // Whatever the worker did last, the job was cancelled (a crash followed by a
            // cancel must not quarantine the request).
            return if self.shutting_down.load(Ordering::SeqCst) {
                (JobState::Cancelled, Some(shutdown_failure()))
            } else {
                (JobState::Cancelled, None)
            };
        }
        let failure = match run.result {
            Ok(output) => match self.outputs.commit(job.id, extension) {
                Ok(_) => {
                    self.link_followers(job.id, extension);
                    let fps = f64::from(output.frame_count) / run.wall.as_secs_f64().max(1e-3);
                    self.metrics
                        .frames_per_second
                        .get_or_create(&FormatLabels {
                            format: extension.to_owned(),
                        })
                        .observe(fps);
                    self.metrics
                        .frames_rendered
                        .inc_by(u64::from(output.frame_count));
                    self.board.update(job.id, |job| {
                        job.output = Some(output);
                        false
                    });
                    return (JobState::Succeeded, None);
                }
                Err(error) => {
                    self.outputs.remove(job.id, extension);
                    JobFailure {
                        reason: "STORAGE_UNAVAILABLE".into(),
                        message: format!("cannot store the output: {error}"),
                        retryable: true,
                        retry_after: Some(MIN_RETRY_AFTER),
                    }
                }
            },
            Err(failure) => match failure.kind {
                FailureKind::Cancelled if self.shutting_down.load(Ordering::SeqCst) => {
                    return (JobState::Cancelled, Some(shutdown_failure()));
                }
                FailureKind::Cancelled => return (JobState::Cancelled, None),
                FailureKind::Crashed { .. } if attempts >= MAX_WORKER_ATTEMPTS => {
                    let quarantined = self.quarantine.add(job.fingerprint.clone());
                    if let Some(replication) = &self.replication {
                        let _ = replication.send(Replication::Quarantine(job.fingerprint.clone()));
                    }
                    self.metrics
                        .quarantined_fingerprints
                        .set(quarantined as i64);
                    tracing::error!(
                        fingerprint = %job.fingerprint,
                        quarantined,
                        "the worker crashed on every attempt; fingerprint quarantined"
                    );
                    JobFailure {
                        reason: "RENDER_CRASHED".into(),
                        message: format!(
                            "the renderer crashed on {MAX_WORKER_ATTEMPTS} fresh workers ({}); \
                             this request is quarantined and will be refused",
                            failure.message
                        ),
                        retryable: false,
                        retry_after: None,
                    }
                }
                _ => {
                    let retryable = failure.class == ErrorClass::Transient;
                    JobFailure {
                        reason: failure.reason,
                        message: failure.message,
                        retryable,
                        retry_after: retryable.then(|| self.queue_retry_after()),
                    }
                }
            },
        };
        (JobState::Failed, Some(failure))
    }

    fn count_finished(&self, state: JobState, seconds: Option<f64>) {
        let labels = OutcomeLabels {
            outcome: state.label().to_owned(),
        };
        self.metrics.jobs_finished.get_or_create(&labels).inc();
        if let Some(seconds) = seconds {
            self.metrics
                .job_duration_seconds
                .get_or_create(&labels)
                .observe(seconds);
        }
    }
}

/// Writes the board's snapshots to the shared records in order (a snapshot older than the
/// stored one is dropped by Redis itself), frees the fingerprint of a render that failed or
/// was cancelled, and shares quarantines.
async fn replicate(
    shared: Arc<SharedJobs>,
    mut messages: tokio::sync::mpsc::UnboundedReceiver<Replication>,
) {
    while let Some(message) = messages.recv().await {
        match message {
            Replication::Snapshot(job) => {
                if let Err(error) = shared.publish(&job).await {
                    tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot share a job's state");
                }
                if matches!(job.state, JobState::Failed | JobState::Cancelled) {
                    if let Err(error) = shared.clear_render(&job.fingerprint, job.id).await {
                        tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot free a shared render");
                    }
                }
            }
            Replication::Quarantine(fingerprint) => {
                if let Err(error) = shared.quarantine(&fingerprint).await {
                    tracing::warn!(%fingerprint, %error, "cannot share a quarantine");
                }
            }
            Replication::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

fn quarantined_failure() -> JobFailure {
    JobFailure {
        reason: "RENDER_QUARANTINED".into(),
        message: "an identical request crashed the renderer twice; it is quarantined".into(),
        retryable: false,
        retry_after: None,
    }
}

fn shutdown_failure() -> JobFailure {
    JobFailure {
        reason: "SERVER_SHUTTING_DOWN".into(),
        message: "the server shut down before the render finished; submit it again".into(),
        retryable: true,
        retry_after: Some(SHUTDOWN_RETRY_AFTER),
    }
}

fn percent(done: u32, total: u32) -> u64 {
    if total == 0 {
        0
    } else {
        u64::from(done) * 100 / u64::from(total)
    }
}
