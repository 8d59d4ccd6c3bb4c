//! The worker protocol, the contract between the parent (service or CLI) and a
//! `lottie-render worker` child process:
//!
//! 1. The parent writes one [`WorkerJob`] as JSON to the child's stdin and closes it.
//! 2. The child writes [`WorkerEvent`]s as NDJSON (one JSON object a line) to stdout:
//!    `started` once, `progress` as frames are encoded, then exactly one of `succeeded`
//!    or `failed`. When the job carries a `traceparent`, a few `span` events (timed steps
//!    of the run, [`crate::telemetry::worker_spans`]) come before that last event. Human
//!    diagnostics go to stderr.
//! 3. The child writes the output file to `output_path` (the parent owns temp naming and the
//!    final rename) and exits with [`exit_code::SUCCESS`], [`exit_code::DETERMINISTIC`]
//!    (the input is at fault: never retry) or [`exit_code::TRANSIENT`] (retry may succeed).
//!    Any other exit, or death by a signal, is a crash, classified by the parent.

use crate::error::ErrorClass;
use crate::reason::Reason;
use crate::render::OutputInfo;
use crate::spec::{Modifications, OutputSpec};
use crate::telemetry::worker_spans::WorkerSpan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Exit codes (from sysexits.h, so they read the same in shell scripts).
pub(crate) mod exit_code {
    pub const SUCCESS: i32 = 0;
    /// EX_DATAERR: the template, a modification or the job itself is invalid.
    pub const DETERMINISTIC: i32 = 65;
    /// EX_TEMPFAIL: resources or infrastructure; retrying may succeed.
    pub const TRANSIENT: i32 = 75;

    /// The exit code of a worker that failed with an error of `class`.
    pub(crate) fn of_failure(class: crate::error::ErrorClass) -> i32 {
        match class {
            crate::error::ErrorClass::Deterministic => DETERMINISTIC,
            crate::error::ErrorClass::Transient => TRANSIENT,
        }
    }
}

/// A failure a worker reports (a render's last event, an analysis's outcome). A reason
/// outside [`Reason`] does not decode: the parent takes such an answer for a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportedFailure {
    pub class: ErrorClass,
    pub reason: Reason,
    pub message: String,
}

/// A worker's end when its exit code and its last answer agree on it: what it made (exit 0)
/// or the failure it reported (exit 65 or 75). `None` for any other end, which the parent
/// classifies from the exit status and stderr.
pub(crate) fn reported_end<T>(
    code: Option<i32>,
    answer: Option<Result<T, ReportedFailure>>,
) -> Option<Result<T, ReportedFailure>> {
    match (code, answer) {
        (Some(exit_code::SUCCESS), Some(Ok(made))) => Some(Ok(made)),
        (Some(exit_code::DETERMINISTIC | exit_code::TRANSIENT), Some(Err(failure))) => {
            Some(Err(failure))
        }
        _ => None,
    }
}

/// Longest failure message a worker sends, bytes: enough for any error of ours with its
/// JSON path; longer ones (a path into a deeply nested template) are cut, so that every
/// event stays far below [`crate::sandbox::lines::MAX_WORKER_LINE_BYTES`].
pub(crate) const MAX_FAILURE_MESSAGE_BYTES: usize = 1024;

/// `message` cut to at most [`MAX_FAILURE_MESSAGE_BYTES`] at a character boundary, marked
/// with an ellipsis when cut.
pub(crate) fn bounded_failure_message(mut message: String) -> String {
    const ELLIPSIS: &str = "…";
    if message.len() <= MAX_FAILURE_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_FAILURE_MESSAGE_BYTES - ELLIPSIS.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(ELLIPSIS);
    message
}

/// One render, as the worker receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerJob {
    pub template_path: PathBuf,
    #[serde(default)]
    pub modifications: Modifications,
    pub output: OutputSpec,
    pub output_path: PathBuf,
    /// Where the poster goes when `output.poster` asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poster_path: Option<PathBuf>,
    /// Render threads; 0 = one per available core.
    #[serde(default)]
    pub threads: usize,
    /// Fonts for text layers: family → font file (the template's uploaded fonts).
    #[serde(default)]
    pub fonts: BTreeMap<String, PathBuf>,
    /// Replacement images: SHA-256 (as `modifications.images` names them) → image file.
    #[serde(default)]
    pub images: BTreeMap<String, PathBuf>,
    /// The dotLottie animation the template's record chose (None: the archive's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub animation: Option<String>,
    /// W3C `traceparent` of the server's render span: the worker reports its spans under it.
    /// None when the job is not traced (the worker then records nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Started {
        frames_total: u32,
    },
    Progress {
        frames_done: u32,
        frames_total: u32,
    },
    Succeeded {
        output: OutputInfo,
        /// The worker's own peak RSS (VmHWM), bytes.
        #[serde(default)]
        peak_rss_bytes: Option<u64>,
    },
    /// A failure line whose reason does not decode is taken for no answer, and the run for
    /// a crash.
    Failed(ReportedFailure),
    /// One timed step of the run (only when the job carries a `traceparent`).
    Span(WorkerSpan),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_failure_message_is_cut_at_a_character_boundary_with_an_ellipsis() {
        let long = "é".repeat(MAX_FAILURE_MESSAGE_BYTES);
        let cut = bounded_failure_message(long);
        assert!(cut.len() <= MAX_FAILURE_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("é…"), "{cut}");
        assert_eq!(bounded_failure_message("short".into()), "short");
    }
}
