//! Outcome decisions: the terminal state and classified failure of a finished render (its
//! output committed, a failure reported, a crash quarantined, a cancel or a shutdown), and
//! the failures of jobs ended without a render of their own.

use super::Scheduler;
use super::MIN_RETRY_AFTER;
use crate::error::ErrorClass;
use crate::jobs::board::Replication;
use crate::jobs::model::{Job, JobFailure, JobState, RenderWork};
use crate::jobs::queue::PushRefused;
use crate::metrics::FormatLabels;
use crate::reason::Reason;
use crate::sandbox::{CancelToken, FailureKind, WorkerRun};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Worker runs per job when the worker crashes: the first crash may be bad luck (a flaky
/// machine, an OOM kill); a second on a fresh process means the request itself is poison.
pub const MAX_WORKER_ATTEMPTS: u32 = 2;
/// Retry delay of a job cancelled by shutdown: another instance (or this one restarted)
/// takes it.
const SHUTDOWN_RETRY_AFTER: Duration = Duration::from_secs(5);

impl Scheduler {
    /// The terminal state and error of a finished worker run.
    pub(super) fn conclude(
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
                        reason: Reason::StorageUnavailable,
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
                    self.quarantine_fingerprint(
                        job,
                        "the worker crashed on every attempt; fingerprint quarantined",
                    );
                    JobFailure {
                        reason: Reason::RenderCrashed,
                        message: format!(
                            "the renderer crashed on {MAX_WORKER_ATTEMPTS} fresh workers ({}); \
                             this request is quarantined and will be refused",
                            failure.message
                        ),
                        retryable: false,
                        retry_after: None,
                    }
                }
                // Counted work ran out: the same request always runs out again, so it is
                // refused at once afterwards instead of costing its CPU on every submission.
                FailureKind::Reported if failure.reason == Reason::ExpressionsCpuExceeded => {
                    self.quarantine_fingerprint(
                        job,
                        "the render's expressions ran out of their budget; fingerprint quarantined",
                    );
                    JobFailure {
                        reason: failure.reason,
                        message: format!(
                            "{}; this request is quarantined and will be refused",
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

    /// Quarantines `job`'s fingerprint here and, with shared jobs, for every instance.
    fn quarantine_fingerprint(&self, job: &Job, why: &'static str) {
        let quarantined = self.quarantine.add(job.fingerprint.clone());
        if let Some(replication) = &self.replication {
            let _ = replication.send(Replication::Quarantine(job.fingerprint.clone()));
        }
        self.metrics
            .quarantined_fingerprints
            .set(quarantined as i64);
        tracing::error!(fingerprint = %job.fingerprint, quarantined, "{why}");
    }

    /// The error of jobs that joined a render the queue then refused.
    pub(super) fn refused_failure(&self, refused: PushRefused) -> JobFailure {
        JobFailure {
            reason: match refused {
                PushRefused::Full { .. } => Reason::QueueFull,
                PushRefused::TenantFull { .. } => Reason::TenantJobLimit,
                PushRefused::Closed => Reason::ServerShuttingDown,
                PushRefused::RetainedJobsFull(_) => Reason::RetainedJobsFull,
            },
            message: "the render this job shared was refused by a full or closing queue; \
                      submit again"
                .into(),
            retryable: true,
            retry_after: Some(self.queue_retry_after()),
        }
    }
}

/// The failure of a job whose fingerprint was quarantined while it waited.
pub(super) fn quarantined_failure() -> JobFailure {
    JobFailure {
        reason: Reason::RenderQuarantined,
        message: "an identical request crashed the renderer twice or ran its expressions out of \
                  their budget; it is quarantined"
            .into(),
        retryable: false,
        retry_after: None,
    }
}

/// The failure of a job that shutdown cancelled: retryable, elsewhere or later.
pub(super) fn shutdown_failure() -> JobFailure {
    JobFailure {
        reason: Reason::ServerShuttingDown,
        message: "the server shut down before the render finished; submit it again".into(),
        retryable: true,
        retry_after: Some(SHUTDOWN_RETRY_AFTER),
    }
}
