//! Running one render in a `lottie-render worker` child process, fenced off so that a
//! crash, hang, memory blow-up or takeover inside rlottie (C++ parsing untrusted data) costs
//! one job and never the caller. The child is started by [`worker_command`] (allow-listed
//! environment, no inherited descriptors, resource limits, its own process group killed as a
//! whole on deadline, cancel or when the parent goes away), confines itself before it reads
//! caller data ([`confine`]: Landlock and seccomp), speaks the NDJSON [`protocol`] in bounded
//! [`lines`], and every way it can end is classified here ([`WorkerFailure`]).
//! [`self_test`] proves all of that on the running kernel.

pub mod confine;
mod deadline;
mod image;
pub mod lines;
pub mod protocol;
pub(crate) mod seccomp;
pub mod self_test;
pub mod settings;
pub(crate) mod spare;
pub(crate) mod spawn;
pub mod zygote;

use crate::error::ErrorClass;
use crate::os;
pub(crate) use crate::os::{ResourceLimits, ResourceUsage};
use crate::reason::Reason;
use crate::render::OutputInfo;
use deadline::{cpu_exhausted, overrun_failure};
pub(crate) use deadline::{default_deadline, MAX_DEADLINE};
use lines::{BoundedLines, LineError, MAX_WORKER_LINE_BYTES};
use protocol::{ReportedFailure, WorkerEvent, WorkerJob};
pub use self_test::{self_test, SelfTestReport};
use spawn::Overrun;
pub use spawn::{
    worker_command, worker_limits, Watchdog, WorkerProcess, MAX_OUTPUT_BYTES, SVT_LOG_ERRORS_ONLY,
    WORKER_ENVIRONMENT, WORKER_MAX_PROCESSES, WORKER_OPEN_FILES,
};
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Address space a worker may map. Rendering 1920×1920 with two threads and an encoder's
/// lookahead needs a few hundred MiB; glibc and thread stacks reserve more than they use.
pub const DEFAULT_WORKER_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// How much of the worker's stderr is kept for diagnostics.
const STDERR_TAIL_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// The `lottie-render` executable to run as `worker`.
    pub executable: PathBuf,
    pub memory_bytes: u64,
    pub deadline: Duration,
}

impl SandboxSettings {
    fn limits(&self) -> ResourceLimits {
        worker_limits(
            self.memory_bytes,
            deadline::cpu_budget_seconds(self.deadline),
        )
    }
}

/// Cancels a running worker from another thread.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Why a worker did not produce its output.
#[derive(Debug, Clone, PartialEq)]
pub enum FailureKind {
    /// The worker reported the failure itself (bad template, unknown slot, encoder error…).
    Reported,
    /// The wall-clock deadline passed; the process group was killed.
    DeadlineExceeded,
    /// The CPU-time limit was hit (SIGXCPU).
    CpuLimit,
    /// An allocation failed under the address-space limit.
    MemoryLimit,
    /// Killed by a signal or exited abnormally: a crash in rlottie, an encoder, or a bug.
    Crashed {
        signal: Option<i32>,
    },
    Cancelled,
    /// The worker could not be started at all.
    SpawnFailed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerFailure {
    pub kind: FailureKind,
    pub class: ErrorClass,
    pub reason: Reason,
    pub message: String,
}

impl std::fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.reason)
    }
}

/// How a worker run ended, and what it cost.
#[derive(Debug)]
pub struct WorkerRun {
    pub result: Result<OutputInfo, WorkerFailure>,
    /// CPU time and peak memory of the worker process (zero when it never started). Peak
    /// memory is the worker's own report when it succeeded, else the kernel's ru_maxrss.
    pub usage: ResourceUsage,
    pub wall: Duration,
    /// Whether a spare (a worker started ahead of the job) ran it; else a worker was started
    /// for it (or none could be).
    pub on_spare: bool,
}

/// Runs `job` in a fresh worker process; `on_event` sees every protocol event as it arrives.
pub fn run_worker(
    job: &WorkerJob,
    settings: &SandboxSettings,
    cancel: &CancelToken,
    on_event: &mut dyn FnMut(&WorkerEvent),
) -> WorkerRun {
    run_worker_on(None, job, settings, cancel, on_event)
}

/// [`run_worker`] on `spare`, a worker started ahead of the job ([`spare`]), when given and
/// still able to take it; else on a worker started for it. The spare's CPU-time budget and
/// wall-clock deadline are the job's, counted from the moment it is handed the job.
pub(crate) fn run_worker_on(
    spare: Option<spare::SpareWorker>,
    job: &WorkerJob,
    settings: &SandboxSettings,
    cancel: &CancelToken,
    on_event: &mut dyn FnMut(&WorkerEvent),
) -> WorkerRun {
    let started = Instant::now();
    let mut usage = ResourceUsage::default();
    let mut on_spare = false;
    let result = run_worker_process(
        spare,
        job,
        settings,
        cancel,
        on_event,
        &mut usage,
        &mut on_spare,
    );
    if result.is_err() {
        // A failed, killed or crashed worker may leave a partial file behind.
        let _ = std::fs::remove_file(&job.output_path);
    }
    WorkerRun {
        result,
        usage,
        wall: started.elapsed(),
        on_spare,
    }
}

fn run_worker_process(
    spare: Option<spare::SpareWorker>,
    job: &WorkerJob,
    settings: &SandboxSettings,
    cancel: &CancelToken,
    on_event: &mut dyn FnMut(&WorkerEvent),
    usage: &mut ResourceUsage,
    on_spare: &mut bool,
) -> Result<OutputInfo, WorkerFailure> {
    let spawn_failed = |message: String| WorkerFailure {
        kind: FailureKind::SpawnFailed,
        class: ErrorClass::Transient,
        reason: Reason::WorkerUnavailable,
        message,
    };
    let job_json = serde_json::to_vec(job)
        .map_err(|error| spawn_failed(format!("cannot encode the job: {error}")))?;
    let mut child = match spare.and_then(|spare| hand_over(spare, settings)) {
        Some(child) => {
            *on_spare = true;
            child
        }
        None => worker_command(&settings.executable, ["worker"], settings.limits())
            .spawn()
            .map(WorkerProcess::from)
            .map_err(|error| spawn_failed(format!("cannot start the worker: {error}")))?,
    };
    let process_group = child.pid();
    let watchdog = Watchdog::start(
        process_group,
        deadline::watch_limits(settings.deadline),
        cancel,
    );
    let stderr_reader = child
        .stderr
        .take()
        .map(|stderr| std::thread::spawn(move || read_tail(stderr, STDERR_TAIL_BYTES)));
    if let Some(mut stdin) = child.stdin.take() {
        // A worker that dies before reading its job is classified by its exit below.
        let _ = stdin.write_all(&job_json);
    }
    let events = child
        .stdout
        .take()
        .map(|stdout| read_events(stdout, process_group, on_event))
        .unwrap_or_default();
    let status = child.wait_with_usage();
    let overrun = watchdog.finish();
    // Whatever happened, nothing of the worker's group may outlive it.
    os::kill_process_group(process_group);
    let stderr_tail = stderr_reader
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    let (status, worker_usage) =
        status.map_err(|error| spawn_failed(format!("cannot wait for the worker: {error}")))?;
    // wait4's ru_maxrss also counts the parent's pages the child had before exec; the
    // worker's own VmHWM is exact, so it wins when reported.
    *usage = ResourceUsage {
        max_rss_bytes: events
            .reported_peak_rss
            .unwrap_or(worker_usage.max_rss_bytes),
        ..worker_usage
    };
    if let Some(violation) = events.protocol_violation {
        if !cancel.is_cancelled() && overrun.is_none() {
            // A worker that breaks the protocol may be under an attacker's control: a crash
            // (retried once, then its fingerprint quarantined), never a result.
            return Err(WorkerFailure {
                kind: FailureKind::Crashed {
                    signal: status.signal(),
                },
                class: ErrorClass::Transient,
                reason: Reason::RenderCrashed,
                message: format!("the worker broke the protocol: it wrote {violation}"),
            });
        }
    }
    classify(
        status,
        events.last,
        &stderr_tail,
        Ended {
            overrun,
            cancelled: cancel.is_cancelled(),
            cpu: worker_usage.cpu,
        },
        settings,
    )
}

/// How a worker's run ended, beside its exit status.
#[derive(Debug, Clone, Copy)]
struct Ended {
    /// The watchdog ended it: past its backstop, or stuck.
    overrun: Option<Overrun>,
    cancelled: bool,
    /// The CPU time the worker used, all its threads.
    cpu: Duration,
}

/// Gives a spare the job's CPU-time budget counted from now (it was started with the
/// loosest); None, with the spare killed, when that fails: the job then gets a worker of
/// its own rather than one whose budget is not its own.
fn hand_over(spare: spare::SpareWorker, settings: &SandboxSettings) -> Option<WorkerProcess> {
    let pid = spare.pid();
    match os::limit_cpu_from_now(pid, settings.limits().cpu_seconds) {
        Ok(()) => {
            tracing::debug!(
                pid,
                waited_ms = spare.started.elapsed().as_millis() as u64,
                "job handed to the spare worker"
            );
            Some(spare.process)
        }
        Err(error) => {
            tracing::warn!(pid, %error, "cannot give the spare worker its job's budget; starting the job's own");
            spare.process.kill();
            None
        }
    }
}

/// What a worker said on stdout.
#[derive(Default)]
struct Events {
    last: Option<WorkerEvent>,
    /// The worker's own peak RSS, from its `succeeded` event.
    reported_peak_rss: Option<u64>,
    /// Set when the worker wrote a line past [`MAX_WORKER_LINE_BYTES`] (it was killed).
    protocol_violation: Option<LineError>,
}

/// Reads the worker's events as they come, in lines of at most [`MAX_WORKER_LINE_BYTES`]:
/// a longer line kills the worker's group at once and ends the reading.
fn read_events(
    stdout: impl Read,
    process_group: u32,
    on_event: &mut dyn FnMut(&WorkerEvent),
) -> Events {
    let mut events = Events::default();
    let mut lines = BoundedLines::new(stdout, MAX_WORKER_LINE_BYTES);
    loop {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) | Err(LineError::Read(_)) => return events,
            Err(error @ LineError::TooLong { .. }) => {
                os::kill_process_group(process_group);
                events.protocol_violation = Some(error);
                return events;
            }
        };
        if let Ok(event) = serde_json::from_slice::<WorkerEvent>(line) {
            if let WorkerEvent::Succeeded {
                peak_rss_bytes: Some(peak),
                ..
            } = event
            {
                events.reported_peak_rss = Some(peak);
            }
            on_event(&event);
            // A span is a side note: the run's outcome is the last event of the protocol.
            if !matches!(event, WorkerEvent::Span(_)) {
                events.last = Some(event);
            }
        }
    }
}

fn classify(
    status: std::process::ExitStatus,
    last_event: Option<WorkerEvent>,
    stderr_tail: &str,
    Ended {
        overrun,
        cancelled,
        cpu,
    }: Ended,
    settings: &SandboxSettings,
) -> Result<OutputInfo, WorkerFailure> {
    let failure = |kind, class, reason, message: String| WorkerFailure {
        kind,
        class,
        reason,
        message,
    };
    let out_of_memory = || {
        failure(
            FailureKind::MemoryLimit,
            ErrorClass::Transient,
            Reason::RenderMemoryExceeded,
            format!(
                "the render ran out of memory under its {} MiB limit",
                settings.memory_bytes / (1024 * 1024)
            ),
        )
    };
    if cancelled {
        return Err(failure(
            FailureKind::Cancelled,
            ErrorClass::Transient,
            Reason::Cancelled,
            "the render was cancelled".into(),
        ));
    }
    if let Some(overrun) = overrun {
        return Err(overrun_failure(overrun, cpu, settings.deadline));
    }
    let last_event_missing = last_event.is_none();
    let answer = last_event.and_then(|event| match event {
        WorkerEvent::Succeeded { output, .. } => Some(Ok(output)),
        WorkerEvent::Failed(reported) => Some(Err(reported)),
        _ => None,
    });
    match protocol::reported_end(status.code(), answer) {
        Some(Ok(output)) => return Ok(output),
        Some(Err(reported)) if reported.reason == Reason::RenderMemoryExceeded => {
            return Err(out_of_memory());
        }
        Some(Err(reported)) => {
            let ReportedFailure {
                class,
                reason,
                message,
            } = reported;
            return Err(failure(FailureKind::Reported, class, reason, message));
        }
        None => {}
    }
    if ran_out_of_memory(stderr_tail)
        || unmappable(status, last_event_missing, stderr_tail, settings)
    {
        return Err(out_of_memory());
    }
    // We only send SIGKILL on deadline or cancel (handled above); any other SIGKILL comes
    // from outside, nearly always the kernel's OOM killer under memory pressure: transient,
    // and not the request's fault (it must not count towards quarantine).
    if status.signal() == Some(libc::SIGKILL) {
        return Err(failure(
            FailureKind::MemoryLimit,
            ErrorClass::Transient,
            Reason::RenderMemoryExceeded,
            "the worker was killed from outside (SIGKILL), most likely by the kernel under \
             memory pressure"
                .into(),
        ));
    }
    if let Some(failure) = limit_signal(status) {
        return Err(failure);
    }
    let detail = match (status.signal(), status.code()) {
        (Some(signal), _) => format!(
            "the worker was killed by signal {signal} ({})",
            signal_name(signal)
        ),
        (None, Some(code)) => format!("the worker exited with code {code} without a result"),
        (None, None) => "the worker ended without a status".into(),
    };
    let last_line = last_line(stderr_tail);
    let message = if last_line.is_empty() {
        detail
    } else {
        format!("{detail}: {last_line}")
    };
    Err(failure(
        FailureKind::Crashed {
            signal: status.signal(),
        },
        ErrorClass::Transient,
        Reason::RenderCrashed,
        message,
    ))
}

/// The last line of a worker's stderr that is not blank (what it said last before it ended).
pub(crate) fn last_line(stderr_tail: &str) -> &str {
    stderr_tail
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default()
}

/// What a worker's stderr says when an allocation was refused under its address-space limit:
/// Rust's allocation-failure abort, C++'s bad_alloc, and the dynamic loader failing to map the
/// worker's libraries under a tiny limit. Every worker kind (render, analysis) reads it.
const OUT_OF_MEMORY_SIGNS: [&str; 4] = [
    "memory allocation of",
    "std::bad_alloc",
    "failed to map segment",
    "Cannot allocate memory",
];

/// Whether a worker was killed before its first line under a limit that cannot hold its own
/// image and loader: the kernel could not map it (a debug build's image is over 40 MiB), so
/// it ran out of memory rather than crashed.
fn unmappable(
    status: std::process::ExitStatus,
    reported_nothing: bool,
    stderr_tail: &str,
    settings: &SandboxSettings,
) -> bool {
    status.signal() == Some(libc::SIGSEGV)
        && reported_nothing
        && stderr_tail.trim().is_empty()
        && image::loadable_bytes(&settings.executable).is_some_and(|image| {
            settings.memory_bytes < image.saturating_add(image::LOADER_HEADROOM_BYTES)
        })
}

/// Whether a worker's stderr tail shows it ran out of its address space.
pub(crate) fn ran_out_of_memory(stderr_tail: &str) -> bool {
    OUT_OF_MEMORY_SIGNS
        .iter()
        .any(|sign| stderr_tail.contains(sign))
}

/// The failure of a worker a resource limit stopped by its signal (the file size, CPU time);
/// None for any other end.
fn limit_signal(status: std::process::ExitStatus) -> Option<WorkerFailure> {
    let failure = |kind, class, reason, message: String| WorkerFailure {
        kind,
        class,
        reason,
        message,
    };
    // The output reached the file-size limit: the same request writes the same bytes again,
    // so it fails for good, as the caller's choice of format, size and length.
    if status.signal() == Some(libc::SIGXFSZ) {
        return Some(failure(
            FailureKind::Reported,
            ErrorClass::Deterministic,
            Reason::OutputTooLarge,
            format!(
                "the output grew past the {} GiB an output may have; choose a shorter segment, \
                 a smaller size or a lossy format",
                MAX_OUTPUT_BYTES / (1024 * 1024 * 1024)
            ),
        ));
    }
    if status.signal() == Some(libc::SIGXCPU) {
        return Some(cpu_exhausted());
    }
    None
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "signal",
    }
}

/// Reads a stream to its end, keeping only the last `limit` bytes.
fn read_tail(mut stream: impl Read, limit: usize) -> String {
    let mut tail = Tail::new(limit);
    let mut buffer = [0u8; 4096];
    while let Ok(read @ 1..) = stream.read(&mut buffer) {
        tail.push(&buffer[..read]);
    }
    tail.into_text()
}

/// The last bytes of a stream read in pieces (a worker's stderr): memory stays within twice
/// the limit whatever the stream's length.
pub(crate) struct Tail {
    bytes: Vec<u8>,
    limit: usize,
}

impl Tail {
    pub(crate) fn new(limit: usize) -> Tail {
        Tail {
            bytes: Vec::new(),
            limit,
        }
    }

    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.bytes.extend_from_slice(piece);
        if self.bytes.len() > 2 * self.limit {
            self.bytes.drain(..self.bytes.len() - self.limit);
        }
    }

    /// The last `limit` bytes, as text.
    pub(crate) fn into_text(self) -> String {
        let start = self.bytes.len().saturating_sub(self.limit);
        String::from_utf8_lossy(&self.bytes[start..]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that ended by itself, neither out of time nor cancelled.
    fn ended() -> Ended {
        Ended {
            overrun: None,
            cancelled: false,
            cpu: Duration::ZERO,
        }
    }

    use protocol::exit_code;

    #[test]
    fn span_lines_are_side_notes_and_malformed_ones_are_ignored() {
        let span = r#"{"event":"span","name":"prepare","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"a1b2c3d4e5f60718","parent_span_id":"00f067aa0ba902b7","start_unix_nanos":1,"end_unix_nanos":2}"#;
        let output = [
            r#"{"event":"started","frames_total":3}"#,
            // Garbage in a span: a float id, a missing field, an unknown field, not JSON.
            r#"{"event":"span","name":"x","trace_id":1.5,"span_id":"","parent_span_id":"","start_unix_nanos":1,"end_unix_nanos":2}"#,
            r#"{"event":"span","name":"x"}"#,
            &span.replace(r#""end_unix_nanos":2"#, r#""end_unix_nanos":2,"evil":true"#),
            r#"{"event":"span","#,
            r#"{"event":"succeeded","output":{"content_type":"image/gif","size_bytes":1,"sha256":"00","width":1,"height":1,"fps":1,"frame_count":3,"duration_seconds":3.0}}"#,
            // After the outcome: seen, but the outcome stays the run's last protocol event.
            span,
        ]
        .join("\n");
        let mut seen = Vec::new();
        let events = read_events(output.as_bytes(), 0, &mut |event| seen.push(event.clone()));
        assert!(events.protocol_violation.is_none());
        assert!(matches!(events.last, Some(WorkerEvent::Succeeded { .. })));
        let spans = seen
            .iter()
            .filter(|event| matches!(event, WorkerEvent::Span(_)))
            .count();
        assert_eq!(spans, 1, "{seen:?}");
        assert_eq!(seen.len(), 3, "{seen:?}");
    }

    fn settings() -> SandboxSettings {
        SandboxSettings {
            executable: PathBuf::from("lottie-render"),
            memory_bytes: DEFAULT_WORKER_MEMORY_BYTES,
            deadline: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_failure_with_a_reason_outside_the_contract_is_no_answer_and_the_run_a_crash() {
        let output = [
            r#"{"event":"started","frames_total":3}"#,
            r#"{"event":"failed","class":"deterministic","reason":"NO_SUCH_REASON","message":"x"}"#,
        ]
        .join("\n");
        let events = read_events(output.as_bytes(), 0, &mut |_| {});
        assert!(
            matches!(events.last, Some(WorkerEvent::Started { .. })),
            "{:?}",
            events.last
        );
        let settings = settings();
        let status = std::process::ExitStatus::from_raw(exit_code::DETERMINISTIC << 8);
        let failure = classify(status, events.last, "", ended(), &settings).unwrap_err();
        assert_eq!(failure.reason, Reason::RenderCrashed);
        assert_eq!(failure.class, ErrorClass::Transient);
        assert!(matches!(
            failure.kind,
            FailureKind::Crashed { signal: None }
        ));
    }

    #[test]
    fn a_worker_stopped_by_the_file_size_limit_failed_for_good_with_output_too_large() {
        // What the kernel does to a process writing past RLIMIT_FSIZE (SIGXFSZ's default
        // action ends it), with no answer written.
        let status = std::process::ExitStatus::from_raw(libc::SIGXFSZ);
        let failure = classify(status, None, "", ended(), &settings()).unwrap_err();
        assert_eq!(failure.reason, Reason::OutputTooLarge);
        assert_eq!(failure.class, ErrorClass::Deterministic);
        assert!(failure.message.contains("2 GiB"), "{}", failure.message);
    }

    #[test]
    fn a_reported_failure_keeps_its_reason_and_its_line_its_spelling() {
        let line = r#"{"event":"failed","class":"deterministic","reason":"SLOT_UNKNOWN","message":"no slot"}"#;
        let event: WorkerEvent = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&event).unwrap(), line);
        let settings = settings();
        let status = std::process::ExitStatus::from_raw(exit_code::DETERMINISTIC << 8);
        let failure = classify(status, Some(event), "", ended(), &settings).unwrap_err();
        assert_eq!(failure.reason, Reason::SlotUnknown);
        assert_eq!(failure.kind, FailureKind::Reported);
    }
}
