//! A render's deadline: the wall-clock time its worker gets, derived from the job's work
//! (output megapixels, slow encoders, replacement images' pixels), and what a worker that ran
//! past it tells: its request needed more than its budget (it had the CPU), or the machine
//! slowed it.

use super::WorkerFailure;
use crate::error::ErrorClass;
use crate::reason::Reason;
use crate::sandbox::FailureKind;
use crate::spec::Format;
use std::time::Duration;

/// Fixed part of a render's deadline: process start, template load, encoder set-up.
const DEADLINE_BASE: Duration = Duration::from_secs(30);
/// Time allowed per output megapixel (frames × width × height / 1e6). Measured costs are
/// 10–60 ms per 1080×1080 frame (1.17 MP); this leaves a wide margin on a loaded machine.
const DEADLINE_PER_MEGAPIXEL: Duration = Duration::from_millis(250);
/// No render may run longer than this, whatever its size.
pub(crate) const MAX_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How many times [`DEADLINE_PER_MEGAPIXEL`] the slow encoders get: WebP, APNG and ProRes
/// 4444 encode 1080² at 10–14 frames a second on two cores (docs/formats.md), against about
/// 100 for H.264, and APNG's `small` quality is slower again; a deadline that ran out on them
/// would fail a job as transient, to be retried to the same end.
const SLOW_ENCODER_DEADLINE_FACTOR: f64 = 4.0;
/// The share of one core over the whole deadline above which a worker that ran out of time
/// is judged to have been working, not waiting (`deadline_failure`): the deadline gives each
/// megapixel 5 to 25 times what it takes, so a worker that had most of a core all along and
/// did not finish needs more than its budget whatever the load.
pub(crate) const DEADLINE_WORK_SHARE: f64 = 0.9;
/// Deadline for a render of `frames` frames of `spec`'s size in its format, with
/// `image_megapixels` of replacement images to decode and fit: a megapixel of image counts
/// as one of output (measured: some 65 ms to decode and resample a megapixel of WebP, against
/// 10–50 ms per output megapixel; 16 images of 4096² took a 100×100 still 17.8 s).
pub(crate) fn default_deadline(
    spec: &crate::spec::OutputSpec,
    frames: u32,
    image_megapixels: f64,
) -> Duration {
    let (width, height) = (spec.width.get(), spec.height.get());
    let megapixels = f64::from(frames) * f64::from(width) * f64::from(height) / 1e6;
    let factor = match spec.format {
        Format::Webp | Format::Apng | Format::Mov => SLOW_ENCODER_DEADLINE_FACTOR,
        _ => 1.0,
    };
    let work = megapixels * factor + image_megapixels.max(0.0);
    (DEADLINE_BASE + DEADLINE_PER_MEGAPIXEL.mul_f64(work)).min(MAX_DEADLINE)
}

/// What a worker that ran past its wall-clock `deadline` after `cpu` of CPU time tells. The
/// deadline is derived from the job's work (output megapixels, images) with a wide margin;
/// a worker that had at least [`DEADLINE_WORK_SHARE`] of a core for all of it was working,
/// not waiting: its request needs more than its budget and will again (not retryable, as a
/// retry would burn the same). One that got less was slowed by the machine: retryable.
pub(super) fn deadline_failure(cpu: Duration, deadline: Duration) -> WorkerFailure {
    let seconds = deadline.as_secs();
    if cpu >= deadline.mul_f64(DEADLINE_WORK_SHARE) {
        WorkerFailure {
            kind: FailureKind::DeadlineExceeded,
            class: ErrorClass::Deterministic,
            reason: Reason::RenderDeadlineExceeded,
            message: format!(
                "the render did not finish within its {seconds} s deadline though it used {:.0} s \
                 of CPU: it is more work than its budget (a smaller size, fewer frames or \
                 smaller images)",
                cpu.as_secs_f64()
            ),
        }
    } else {
        WorkerFailure {
            kind: FailureKind::DeadlineExceeded,
            class: ErrorClass::Transient,
            reason: Reason::RenderDeadlineExceeded,
            message: format!(
                "the render did not finish within its {seconds} s deadline, having had {:.0} s \
                 of CPU: the machine is loaded; retry after the delay",
                cpu.as_secs_f64()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_the_work_ran_past_is_not_retryable_and_one_the_machine_caused_is() {
        let deadline = Duration::from_secs(40);
        // Most of a core for the whole deadline: the request is more work than its budget.
        let working = deadline_failure(Duration::from_secs(38), deadline);
        assert_eq!(
            (working.class, working.reason),
            (ErrorClass::Deterministic, Reason::RenderDeadlineExceeded)
        );
        assert!(
            working.message.contains("more work than its budget"),
            "{}",
            working.message
        );
        // Two threads at a core each for half of it: working too.
        assert_eq!(
            deadline_failure(Duration::from_secs(40), deadline).class,
            ErrorClass::Deterministic
        );
        // A fifth of a core: the machine was loaded, a retry may well succeed.
        let waiting = deadline_failure(Duration::from_secs(8), deadline);
        assert_eq!(waiting.class, ErrorClass::Transient);
        assert!(
            waiting.message.contains("the machine is loaded"),
            "{}",
            waiting.message
        );
    }
}
