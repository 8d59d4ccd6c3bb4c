//! This instance's jobs, in either mode: the board, the in-process queue (every waiting job
//! in the embedded default; with shared jobs, only the followers of renders, which wait on
//! this instance), the quarantine, the outputs, the metrics and the recent pace of jobs; and
//! what is done with them alone: a job added here (it leads, follows a render of this
//! instance or reuses its output), cancelled, counted, expired. The runner, the shared part
//! and lookup each hold it; it holds none of them.

use super::board::{Admission, JobBoard};
use super::model::{Job, JobFailure, JobState, RenderWork};
use super::outcome::refused_failure;
use super::quarantine::Quarantine;
use super::queue::{PushRefused, QueuedJob, RenderQueue};
use super::shared::records::SharedError;
use crate::auth::TenantId;
use crate::metrics::{Metrics, OutcomeLabels};
use crate::reason::Reason;
use crate::storage::OutputStore;
use crate::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Assumed duration of a job before any has finished (for retry delays).
const INITIAL_JOB_SECONDS: f64 = 10.0;
/// Weight of the newest job in the moving average of job durations.
const JOB_SECONDS_SMOOTHING: f64 = 0.2;
/// Bounds of every retry delay the jobs suggest.
pub(crate) const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
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

/// Blocking board work (it may link an output file) on a blocking thread; a panic there is
/// this service's bug.
pub(crate) async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SubmitRefused> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| SubmitRefused::Internal(error.to_string()))
}

#[derive(Debug)]
pub(crate) struct LocalJobs {
    pub(crate) board: Arc<JobBoard>,
    /// See the module's head.
    pub(crate) queue: Arc<RenderQueue>,
    pub(crate) quarantine: Quarantine,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) outputs: OutputStore,
    /// This instance's worker loops.
    pub(crate) workers: usize,
    average_job_seconds: Mutex<f64>,
}

impl LocalJobs {
    pub(crate) fn new(
        board: JobBoard,
        queue: Arc<RenderQueue>,
        metrics: Arc<Metrics>,
        outputs: OutputStore,
        workers: usize,
    ) -> LocalJobs {
        LocalJobs {
            board: Arc::new(board),
            queue,
            quarantine: Quarantine::default(),
            metrics,
            outputs,
            workers,
            average_job_seconds: Mutex::new(INITIAL_JOB_SECONDS),
        }
    }

    /// How long `waiting` jobs (plus the caller's) take `workers` workers at the recent pace,
    /// within the bounds of every retry delay.
    pub(crate) fn retry_after_waiting(&self, waiting: usize, workers: usize) -> Duration {
        let average = *lock(&self.average_job_seconds);
        let seconds = (waiting as f64 + 1.0) * average / workers.max(1) as f64;
        Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_RETRY_AFTER)
            .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
    }

    /// [`LocalJobs::retry_after_waiting`] for the in-process queue and this instance's
    /// workers (the embedded default).
    pub(crate) fn queue_retry_after(&self) -> Duration {
        self.retry_after_waiting(self.queue.len(), self.workers)
    }

    /// How long a caller refused for its tenant's share should wait: until one of the
    /// tenant's jobs likely ends ([`super::queue::TenantLoad::slot_frees_in`]), within the
    /// bounds of every retry delay (never 0).
    pub(crate) fn tenant_retry_after(&self, tenant: &TenantId) -> Duration {
        let average = Duration::try_from_secs_f64(*lock(&self.average_job_seconds))
            .unwrap_or(MAX_RETRY_AFTER);
        self.queue
            .tenant_load(tenant)
            .slot_frees_in(average, self.workers)
            .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
    }

    /// Takes a finished (not cancelled) job's duration into the recent pace.
    pub(crate) fn record_job_seconds(&self, seconds: f64) {
        let mut average = lock(&self.average_job_seconds);
        *average = *average * (1.0 - JOB_SECONDS_SMOOTHING) + seconds * JOB_SECONDS_SMOOTHING;
    }

    /// Removes the outputs of the jobs the board evicted to make room (off the runtime: file
    /// removal blocks).
    pub(crate) fn discard_evicted(&self) {
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
    pub(crate) fn count_tenant_refusal(&self, tenant: &TenantId, refused: PushRefused) {
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

    /// Counts a job that ended in `state` (FAILED with `failure`), its render having taken
    /// `seconds` when it had one.
    pub(crate) fn count_finished(
        &self,
        state: JobState,
        failure: Option<&JobFailure>,
        seconds: Option<f64>,
    ) {
        let labels = OutcomeLabels {
            outcome: state.label().to_owned(),
        };
        self.metrics.jobs_finished.get_or_create(&labels).inc();
        if let (JobState::Failed, Some(failure)) = (state, failure) {
            self.metrics.job_failed(failure.reason, failure.retryable);
        }
        if let Some(seconds) = seconds {
            self.metrics
                .job_duration_seconds
                .get_or_create(&labels)
                .observe(seconds);
        }
    }

    /// Whether job `id` was evicted from this instance's board ([`crate::jobs::retention`])
    /// and its shared record, which may not be removed yet, must be taken for gone.
    pub(crate) fn evicted_here(&self, id: Uuid) -> bool {
        self.board.forgetting().contains(id)
    }

    /// Gives every follower of `id` its (hard-linked) output.
    pub(crate) fn link_followers(&self, id: Uuid, extension: &str) {
        for follower in self.board.followers(id) {
            if let Err(error) = self.outputs.link(id, follower, extension) {
                tracing::warn!(follower_job_id = %follower, %error, "cannot give a follower its output");
            }
        }
    }

    /// Cancels a job: a waiting one at once, a running one by killing its worker (waiting up
    /// to [`CANCEL_SETTLE`] for it to be gone). A finished job is answered as it is.
    pub(crate) async fn cancel(&self, id: Uuid) -> Option<Job> {
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
            self.count_finished(JobState::Cancelled, None, None);
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

    /// Forgets jobs, outputs and quarantine entries older than `retention`.
    pub(crate) fn expire(&self, retention: Duration) {
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

    /// Adds a leading job to this process's queue, or it follows or reuses a render of this
    /// instance (the embedded default). Blocking (it may link an output file).
    pub(crate) fn submit(&self, job: Job, work: Arc<RenderWork>) -> Result<Job, PushRefused> {
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
                            let failure = refused_failure(refused, self.queue_retry_after());
                            self.board.remove_refused(id, JobState::Failed, &failure);
                            Err(refused)
                        }
                    };
                }
                Admission::Follows(leader) => {
                    self.count_join(&job, leader);
                    return Ok(self.board.get(id).unwrap_or(job));
                }
                Admission::Refused(refused) => return Err(refused),
                Admission::Reuses(leader) => match self.reuse(&job, work.clone(), &leader)? {
                    Some(reused) => return Ok(reused),
                    // The output expired under us: render again.
                    None => self.board.forget_render(&job.fingerprint, leader.id),
                },
            }
        }
    }

    /// Adds `job` as a follower (or reuser) of this instance's render of its fingerprint;
    /// `None` when there is none (any more). Blocking (it may link an output file).
    pub(crate) fn join_render(
        &self,
        job: &Job,
        work: Arc<RenderWork>,
    ) -> Option<Result<Job, PushRefused>> {
        match self.board.admit_following(job, &work)? {
            Admission::Follows(leader) => {
                self.count_join(job, leader);
                Some(Ok(self.board.get(job.id).unwrap_or_else(|| job.clone())))
            }
            Admission::Refused(refused) => Some(Err(refused)),
            Admission::Reuses(leader) => match self.reuse(job, work, &leader) {
                Ok(Some(reused)) => Some(Ok(reused)),
                Err(refused) => Some(Err(refused)),
                Ok(None) => {
                    self.board.forget_render(&job.fingerprint, leader.id);
                    None
                }
            },
            Admission::Leads => None,
        }
    }

    fn count_join(&self, job: &Job, leader: Uuid) {
        self.metrics.render_joins.inc();
        tracing::info!(job_id = %job.id, template_id = %job.template_id, leader_job_id = %leader, "job joins the render of an identical request");
    }

    /// Gives `job` the output of `source` (an identical request's succeeded job) and adds
    /// it as succeeded; `None` when that output is gone. Refused, like any new job, when the
    /// jobs kept are at their bound ([`crate::jobs::retention`]): a reuse costs no worker, but
    /// is kept as long as any job. Blocking (links a file).
    pub(crate) fn reuse(
        &self,
        job: &Job,
        work: Arc<RenderWork>,
        source: &Job,
    ) -> Result<Option<Job>, PushRefused> {
        let extension = job.format.extension();
        if let Err(error) = self.outputs.link(source.id, job.id, extension) {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, %error, "cannot reuse an output");
            return Ok(None);
        }
        let now = SystemTime::now();
        let mut reused = job.clone();
        reused.state = JobState::Succeeded;
        reused.frames_total = source.frames_total;
        reused.frames_done = source.frames_total;
        reused.output = source.output.clone();
        reused.started_at = Some(now);
        reused.finished_at = Some(now);
        if let Err(refused) = self.board.insert(reused.clone(), work) {
            // Its link goes: nothing of the refused job stays.
            self.outputs.remove(job.id, extension);
            return Err(refused);
        }
        self.metrics.render_cache_hits.inc();
        tracing::info!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, "job reuses the output of an identical request");
        Ok(Some(reused))
    }
}
