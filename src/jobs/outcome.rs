//! What a finished attempt means, decided without touching anything: whether a worker run
//! is tried again, and the terminal state, failure and quarantine of a finished render (its
//! output to be stored, a failure reported, a crash quarantined, a cancel or a shutdown);
//! and the failures of jobs ended without a render of their own. The runner applies what
//! these functions return (the output stored, the fingerprint quarantined, the board
//! updated), so every rule here is unit-tested without a process.

use crate::error::ErrorClass;
use crate::jobs::model::{JobFailure, JobState};
use crate::jobs::queue::PushRefused;
use crate::reason::Reason;
use crate::render::OutputInfo;
use crate::sandbox::{FailureKind, WorkerFailure};
use std::time::Duration;

/// Worker runs per job when the worker crashes: the first crash may be bad luck (a flaky
/// machine, an OOM kill); a second on a fresh process means the request itself is poison.
pub const MAX_WORKER_ATTEMPTS: u32 = 2;
/// Retry delay of a job cancelled by shutdown: another instance (or this one restarted)
/// takes it.
const SHUTDOWN_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Retry delay of a render whose output could not be stored.
const STORAGE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What else than its result decides what a finished render means.
#[derive(Debug, Clone, Copy)]
pub(super) struct Circumstances {
    /// Worker runs made (1 or more).
    pub attempts: u32,
    /// The job's cancel token fired (its caller, a lost lease, or shutdown).
    pub cancelled: bool,
    /// The server is past its shutdown grace period.
    pub shutting_down: bool,
    /// The delay a retryable failure suggests (the queue's recent pace).
    pub retry_after: Duration,
}

/// What the runner does with a finished render.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    /// Store the output: the job succeeded once it is stored (else [`storage_failure`]).
    StoreOutput(OutputInfo),
    /// The job ends in `state` with `failure`; with `quarantine`, its fingerprint is
    /// quarantined first, for that reason.
    Ends {
        state: JobState,
        failure: Option<JobFailure>,
        quarantine: Option<&'static str>,
    },
}

/// Whether another worker run follows attempt `attempt` (which ended with `result`): only
/// after a crash, within [`MAX_WORKER_ATTEMPTS`], while the job is not cancelled and its
/// fingerprint not quarantined meanwhile.
pub(super) fn runs_again(
    result: &Result<OutputInfo, WorkerFailure>,
    attempt: u32,
    cancelled: bool,
    quarantined: bool,
) -> bool {
    crashed(result) && attempt < MAX_WORKER_ATTEMPTS && !cancelled && !quarantined
}

/// Whether a worker run crashed (a signal, or an exit without a result).
pub(super) fn crashed(result: &Result<OutputInfo, WorkerFailure>) -> bool {
    matches!(result, Err(failure) if matches!(failure.kind, FailureKind::Crashed { .. }))
}

/// The terminal state and error of a finished render.
///
/// Success → the output is stored; a reported deterministic failure → FAILED, not
/// retryable; a transient one, the deadline or the memory limit → FAILED, retryable with a
/// delay; a crash on the last attempt → FAILED RENDER_CRASHED, quarantined; expressions out
/// of their budget → FAILED, quarantined; cancelled → CANCELLED (retryable when shutdown
/// cancelled it).
pub(super) fn decide(
    result: Result<OutputInfo, WorkerFailure>,
    circumstances: &Circumstances,
) -> Decision {
    let cancelled = |shutting_down: bool| Decision::Ends {
        state: JobState::Cancelled,
        failure: shutting_down.then(shutdown_failure),
        quarantine: None,
    };
    let failure = match result {
        Ok(output) => return Decision::StoreOutput(output),
        // Whatever the worker did last, the job was cancelled (a crash followed by a cancel
        // must not quarantine the request).
        Err(_) if circumstances.cancelled => return cancelled(circumstances.shutting_down),
        Err(failure) => failure,
    };
    let (failure, quarantine) = match failure.kind {
        FailureKind::Cancelled => return cancelled(circumstances.shutting_down),
        FailureKind::Crashed { .. } if circumstances.attempts >= MAX_WORKER_ATTEMPTS => (
            JobFailure {
                reason: Reason::RenderCrashed,
                message: format!(
                    "the renderer crashed on {MAX_WORKER_ATTEMPTS} fresh workers ({}); \
                     this request is quarantined and will be refused",
                    failure.message
                ),
                retryable: false,
                retry_after: None,
            },
            Some("the worker crashed on every attempt; fingerprint quarantined"),
        ),
        // Counted work ran out: the same request always runs out again, so it is refused at
        // once afterwards instead of costing its CPU on every submission.
        FailureKind::Reported if failure.reason == Reason::ExpressionsCpuExceeded => quarantined(
            failure,
            "the render's expressions ran out of their budget; fingerprint quarantined",
        ),
        // A worker that used up its CPU budget needs more than its budget
        // (`sandbox::deadline`), on any machine: the same request would again.
        FailureKind::CpuLimit if failure.class == ErrorClass::Deterministic => quarantined(
            failure,
            "the render used up its CPU budget; fingerprint quarantined",
        ),
        _ => {
            let retryable = failure.class == ErrorClass::Transient;
            (
                JobFailure {
                    reason: failure.reason,
                    message: failure.message,
                    retryable,
                    retry_after: retryable.then_some(circumstances.retry_after),
                },
                None,
            )
        }
    };
    Decision::Ends {
        state: JobState::Failed,
        failure: Some(failure),
        quarantine,
    }
}

/// The failure of a render whose output could not be stored.
pub(super) fn storage_failure(error: impl std::fmt::Display) -> JobFailure {
    JobFailure {
        reason: Reason::StorageUnavailable,
        message: format!("cannot store the output: {error}"),
        retryable: true,
        retry_after: Some(STORAGE_RETRY_AFTER),
    }
}

/// Whether a render that ended with `failure` goes back to the shared queue instead of
/// ending: a job of the shared queue (`reclaimable`) stopped by this instance's shutdown.
pub(super) fn handed_back(
    reclaimable: bool,
    failure: Option<&JobFailure>,
    shutting_down: bool,
) -> bool {
    reclaimable
        && shutting_down
        && failure.is_some_and(|failure| failure.reason == Reason::ServerShuttingDown)
}

/// The error of jobs that joined a render the queue then refused.
pub(super) fn refused_failure(refused: PushRefused, retry_after: Duration) -> JobFailure {
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
        retry_after: Some(retry_after),
    }
}

/// A failure its request will meet again: not retryable, its fingerprint quarantined (`why`).
fn quarantined(failure: WorkerFailure, why: &'static str) -> (JobFailure, Option<&'static str>) {
    (
        JobFailure {
            reason: failure.reason,
            message: format!(
                "{}; this request is quarantined and will be refused",
                failure.message
            ),
            retryable: false,
            retry_after: None,
        },
        Some(why),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    const RETRY_AFTER: Duration = Duration::from_secs(7);

    fn output() -> OutputInfo {
        OutputInfo {
            content_type: "image/gif".into(),
            size_bytes: 10,
            sha256: "sha".into(),
            width: 10,
            height: 10,
            fps: 10,
            frame_count: 10,
            duration_seconds: 1.0,
            poster: None,
        }
    }

    fn failed(kind: FailureKind, class: ErrorClass, reason: Reason) -> WorkerFailure {
        WorkerFailure {
            kind,
            class,
            reason,
            message: "what the worker said".into(),
        }
    }

    fn crash() -> Result<OutputInfo, WorkerFailure> {
        Err(failed(
            FailureKind::Crashed { signal: Some(11) },
            ErrorClass::Transient,
            Reason::RenderCrashed,
        ))
    }

    fn on_attempt(attempts: u32) -> Circumstances {
        Circumstances {
            attempts,
            cancelled: false,
            shutting_down: false,
            retry_after: RETRY_AFTER,
        }
    }

    fn ends(decision: Decision) -> (JobState, Option<JobFailure>, Option<&'static str>) {
        match decision {
            Decision::Ends {
                state,
                failure,
                quarantine,
            } => (state, failure, quarantine),
            Decision::StoreOutput(_) => panic!("expected an end, got {decision:?}"),
        }
    }

    #[test]
    fn a_render_with_an_output_stores_it() {
        assert_eq!(
            decide(Ok(output()), &on_attempt(1)),
            Decision::StoreOutput(output())
        );
    }

    #[test]
    fn a_first_crash_runs_again_unless_cancelled_or_quarantined_meanwhile() {
        assert!(runs_again(&crash(), 1, false, false));
        assert!(!runs_again(&crash(), MAX_WORKER_ATTEMPTS, false, false));
        assert!(!runs_again(&crash(), 1, true, false));
        assert!(!runs_again(&crash(), 1, false, true));
        assert!(!runs_again(&Ok(output()), 1, false, false));
        let deadline = Err(failed(
            FailureKind::DeadlineExceeded,
            ErrorClass::Transient,
            Reason::RenderDeadlineExceeded,
        ));
        assert!(!runs_again(&deadline, 1, false, false));
    }

    #[test]
    fn each_failure_ends_failed_with_its_reason_retry_and_quarantine() {
        // (what the worker reported, attempts) → (reason, retry delay, quarantined)
        let cases = [
            (
                FailureKind::Crashed { signal: Some(11) },
                ErrorClass::Transient,
                Reason::RenderCrashed,
                MAX_WORKER_ATTEMPTS,
                (Reason::RenderCrashed, None, true),
            ),
            (
                FailureKind::Reported,
                ErrorClass::Deterministic,
                Reason::ExpressionsCpuExceeded,
                1,
                (Reason::ExpressionsCpuExceeded, None, true),
            ),
            (
                FailureKind::MemoryLimit,
                ErrorClass::Transient,
                Reason::RenderMemoryExceeded,
                1,
                (Reason::RenderMemoryExceeded, Some(RETRY_AFTER), false),
            ),
            (
                FailureKind::DeadlineExceeded,
                ErrorClass::Transient,
                Reason::RenderDeadlineExceeded,
                1,
                (Reason::RenderDeadlineExceeded, Some(RETRY_AFTER), false),
            ),
            (
                FailureKind::CpuLimit,
                ErrorClass::Deterministic,
                Reason::RenderCpuExceeded,
                1,
                (Reason::RenderCpuExceeded, None, true),
            ),
            (
                FailureKind::Reported,
                ErrorClass::Deterministic,
                Reason::TemplateInvalid,
                1,
                (Reason::TemplateInvalid, None, false),
            ),
        ];
        for (kind, class, reason, attempts, expected) in cases {
            let (state, failure, quarantine) = ends(decide(
                Err(failed(kind.clone(), class, reason)),
                &on_attempt(attempts),
            ));
            let failure = failure.unwrap();
            assert_eq!(state, JobState::Failed, "{kind:?}");
            assert_eq!(
                (failure.reason, failure.retry_after, quarantine.is_some()),
                expected,
                "{kind:?}"
            );
            assert_eq!(failure.retryable, expected.1.is_some(), "{kind:?}");
            assert!(failure.message.contains("what the worker said"), "{kind:?}");
        }
    }

    #[test]
    fn a_cancelled_render_is_cancelled_whatever_it_reported_and_retryable_only_by_shutdown() {
        let cancelled = Circumstances {
            cancelled: true,
            ..on_attempt(MAX_WORKER_ATTEMPTS)
        };
        // A crash on the last attempt, then a cancel: no quarantine.
        assert_eq!(
            ends(decide(crash(), &cancelled)),
            (JobState::Cancelled, None, None)
        );
        let by_shutdown = Circumstances {
            shutting_down: true,
            ..cancelled
        };
        let (state, failure, quarantine) = ends(decide(crash(), &by_shutdown));
        assert_eq!(state, JobState::Cancelled);
        assert_eq!(failure, Some(shutdown_failure()));
        assert_eq!(quarantine, None);
        // The worker saw the cancel itself.
        let result = Err(failed(
            FailureKind::Cancelled,
            ErrorClass::Transient,
            Reason::Cancelled,
        ));
        assert_eq!(
            ends(decide(result, &on_attempt(1))),
            (JobState::Cancelled, None, None)
        );
    }

    #[test]
    fn only_a_shared_queue_job_stopped_by_shutdown_goes_back_to_the_queue() {
        let shutdown = shutdown_failure();
        assert!(handed_back(true, Some(&shutdown), true));
        assert!(!handed_back(false, Some(&shutdown), true));
        assert!(!handed_back(true, Some(&shutdown), false));
        assert!(!handed_back(true, None, true));
        assert!(!handed_back(
            true,
            Some(&storage_failure("disk full")),
            true
        ));
    }

    #[test]
    fn jobs_of_a_refused_render_are_told_why_and_when_to_retry() {
        let failure = refused_failure(PushRefused::Full { length: 3 }, RETRY_AFTER);
        assert_eq!(failure.reason, Reason::QueueFull);
        assert!(failure.retryable);
        assert_eq!(failure.retry_after, Some(RETRY_AFTER));
        assert_eq!(
            refused_failure(PushRefused::Closed, RETRY_AFTER).reason,
            Reason::ServerShuttingDown
        );
    }
}
