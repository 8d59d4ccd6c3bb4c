//! A render's budget, derived from the job's work (output megapixels, slow encoders,
//! replacement images' pixels), and what running out of it means. The verdict is the CPU
//! time's: a worker that uses up its CPU budget ([`cpu_budget_seconds`], RLIMIT_CPU) needed
//! more than its budget, and would again on any machine, idle or saturated (not retryable).
//! Wall-clock time only backstops a worker that makes no progress: past
//! [`WALL_BACKSTOP_FACTOR`] times the budget, or [`STALL_LIMIT`] without using any CPU, it
//! is ended as "the machine is loaded" or "stuck" (retryable).

use super::WorkerFailure;
use crate::error::ErrorClass;
use crate::reason::Reason;
use crate::sandbox::spawn::Overrun;
use crate::sandbox::FailureKind;
use std::time::Duration;

/// Fixed part of a render's deadline: process start, template load, encoder set-up.
const DEADLINE_BASE: Duration = Duration::from_secs(30);
/// Time allowed per output megapixel (frames × width × height / 1e6). Measured costs are
/// 10–60 ms per 1080×1080 frame (1.17 MP); this leaves a wide margin on a loaded machine.
const DEADLINE_PER_MEGAPIXEL: Duration = Duration::from_millis(250);
/// No render may run longer than this, whatever its size.
pub(crate) const MAX_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// A render's CPU time, in cores of its budget: one, all its threads together. A fixed
/// figure, not this machine's core count, so that the same request gets the same verdict on
/// any machine; the total CPU a render takes hardly depends on how many threads share it. The
/// budget gives each megapixel 2.3 to 25 times the CPU it takes (GIF, the most per megapixel
/// among the fast encoders: ~107 ms of CPU per 1080² megapixel, against 250 ms; WebP, APNG
/// and ProRes ~140 ms against 4 × 250 ms).
pub(crate) const CPU_BUDGET_CORES: u64 = 1;
/// The wall-clock backstop, in multiples of the budget: a worker that makes progress (its CPU
/// time grows) is let run until its CPU budget gives the verdict, however loaded the machine;
/// only one that gets less than a sixty-fourth of a core on average passes this first (then
/// "the machine is loaded"). A wall limit any tighter is a verdict of the load: with 8, a
/// render thread (niced, so the encoder goes first) beside four busy loops and the test suite
/// on two cores was told "retry" for a loop that must fail for good.
pub(crate) const WALL_BACKSTOP_FACTOR: u32 = 64;
/// The backstop of the largest budgets: two hours, whatever the budget.
pub(crate) const MAX_WALL_BACKSTOP: Duration = Duration::from_secs(2 * 60 * 60);
/// A worker that uses no CPU time at all for this long is stuck (waiting on something that
/// will not come): ended, and retryable. A working worker's CPU time grows every second
/// however loaded the machine (its encoder thread alone would), so a small budget's worker is
/// given its budget, at least [`MIN_STALL_LIMIT`], not the whole of this.
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(30);
/// The least time without CPU after which a worker is stuck: five of the watchdog's samples.
pub(crate) const MIN_STALL_LIMIT: Duration = Duration::from_secs(5);

/// The CPU-time limit (RLIMIT_CPU, seconds) of a render with `budget`.
pub(crate) fn cpu_budget_seconds(budget: Duration) -> u64 {
    budget.as_secs().saturating_add(1) * CPU_BUDGET_CORES
}

/// When the watchdog ends a render with `budget` that neither finishes nor runs out of CPU.
pub(crate) fn watch_limits(budget: Duration) -> crate::sandbox::spawn::WatchLimits {
    crate::sandbox::spawn::WatchLimits {
        backstop: budget
            .saturating_mul(WALL_BACKSTOP_FACTOR)
            .min(MAX_WALL_BACKSTOP),
        stall: Some(budget.clamp(MIN_STALL_LIMIT, STALL_LIMIT)),
    }
}

/// Deadline for a render of `frames` frames of `spec`'s size in its format (its encoder's
/// cost per megapixel, [`crate::spec::output::FormatFacts::encoding_cost`]), with
/// `image_megapixels` of replacement images to decode and fit: a megapixel of image counts
/// as one of output (measured: some 65 ms to decode and resample a megapixel of WebP, against
/// 10–50 ms per output megapixel; 16 images of 4096² took a 100×100 still 17.8 s).
pub(crate) fn default_deadline(
    spec: &crate::spec::OutputSpec,
    frames: u32,
    image_megapixels: f64,
) -> Duration {
    let megapixels = crate::spec::output::megapixels(spec, frames);
    let work = megapixels * spec.format.facts().encoding_cost + image_megapixels.max(0.0);
    (DEADLINE_BASE + DEADLINE_PER_MEGAPIXEL.mul_f64(work)).min(MAX_DEADLINE)
}

/// What a worker the watchdog ended (`overrun`) after `cpu` of CPU time, of a CPU budget
/// [`cpu_budget_seconds`] of `budget`, tells: not that its request is too much (the CPU
/// limit says that, `RENDER_CPU_EXCEEDED`), but that the machine gave it too little CPU, or
/// that it got stuck: retryable.
pub(super) fn overrun_failure(overrun: Overrun, cpu: Duration, budget: Duration) -> WorkerFailure {
    let message = match overrun {
        Overrun::Backstop => format!(
            "the render had {:.0} s of CPU of its {} s budget after {} s: the machine is \
             loaded; retry after the delay",
            cpu.as_secs_f64(),
            cpu_budget_seconds(budget),
            watch_limits(budget).backstop.as_secs()
        ),
        Overrun::Stalled => format!(
            "the render used no CPU for {} s ({:.0} s of its {} s budget): it was stuck; \
             retry after the delay",
            budget.clamp(MIN_STALL_LIMIT, STALL_LIMIT).as_secs(),
            cpu.as_secs_f64(),
            cpu_budget_seconds(budget)
        ),
    };
    WorkerFailure {
        kind: FailureKind::DeadlineExceeded,
        class: ErrorClass::Transient,
        reason: Reason::RenderDeadlineExceeded,
        message,
    }
}

/// The failure of a worker that ran out of its CPU time (SIGXCPU): its request is more work
/// than its budget, and will be again, on any machine (not retryable; quarantined).
pub(super) fn cpu_exhausted() -> WorkerFailure {
    WorkerFailure {
        kind: FailureKind::CpuLimit,
        class: ErrorClass::Deterministic,
        reason: Reason::RenderCpuExceeded,
        message: "the render used up its CPU budget: it is more work than the budget allows \
                  (frames × pixels, images, expressions); a smaller size, fewer frames or \
                  smaller images"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_ended_by_the_watchdog_was_slowed_or_stuck_not_too_much() {
        let budget = Duration::from_secs(40);
        for overrun in [Overrun::Backstop, Overrun::Stalled] {
            let failure = overrun_failure(overrun, Duration::from_secs(12), budget);
            assert_eq!(
                (failure.class, failure.reason),
                (ErrorClass::Transient, Reason::RenderDeadlineExceeded),
                "{overrun:?}"
            );
            assert!(
                failure.message.contains("retry after the delay"),
                "{}",
                failure.message
            );
        }
        let exhausted = cpu_exhausted();
        assert_eq!(
            (exhausted.class, exhausted.reason),
            (ErrorClass::Deterministic, Reason::RenderCpuExceeded)
        );
    }

    #[test]
    fn the_cpu_budget_is_the_same_on_any_machine_and_the_backstop_is_for_starved_workers_only() {
        let budget = Duration::from_secs(30);
        assert_eq!(cpu_budget_seconds(budget), 31);
        let limits = watch_limits(budget);
        // A worker with a sixty-fourth of a core all along runs out of CPU as the backstop
        // comes: its CPU limit speaks first whenever it had more.
        let least_cpu = limits.backstop.as_secs() / 64;
        assert!(least_cpu + 1 >= cpu_budget_seconds(budget));
        assert_eq!(watch_limits(MAX_DEADLINE).backstop, MAX_WALL_BACKSTOP);
    }
}
