//! Template analysis where a blow-up costs nothing: the report of a new template (text
//! shaping, layout, glyph outlines, the template's own `chars`, uploaded font parsing) is
//! built by a `lottie-render analyze` child process ([`protocol`]) under a CPU-time, memory
//! and wall-clock budget, never in the server. Analysis workers are a small pool of their own
//! (renders use the scheduler's), so renders cannot starve template creation nor the reverse.
//!
//! Outcomes: a template over the CPU or memory budget is INVALID_ARGUMENT
//! `TEMPLATE_TOO_COMPLEX` (the same input always breaches it); no worker free within
//! [`WORKER_WAIT`], or the wall deadline passing while CPU was under budget (a loaded
//! machine), is UNAVAILABLE with a retry delay. The analysis is tied to the call: when the
//! call's future is dropped (the caller hung up or its deadline passed), the worker's process
//! group is killed.
//!
//! The workers are shared fairly between tenants ([`shares`]): a pool of the one fair-share
//! mechanism (a tenant's share shrinks as more tenants hold workers, a reserve for tenants
//! holding none), waiting tenants served in turn, and each analysis' CPU time charged to its
//! tenant; a tenant whose analyses use up their budget is RESOURCE_EXHAUSTED
//! `ANALYSIS_BACKOFF` for a while.

pub(crate) mod protocol;
pub mod settings;
pub mod shares;

use crate::auth::TenantId;
use crate::error::{ErrorClass, FieldViolation, ServiceError, ServiceErrorCode};
use crate::lottie::report::InspectReport;
use crate::os::{self, ResourceLimits};
use crate::reason::Reason;
use crate::sandbox::{self, protocol::ReportedFailure};
use protocol::{AnalysisOutcome, InputHeader, MAX_OUTPUT_BYTES};
use shares::{AnalysisShares, AnalysisSlot, Refusal};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Analyses at once. An honest template analyses in tens of milliseconds, so two keep up with
/// any creation rate a person or a deploy script makes, while a burst of hostile templates
/// costs at most two cores' worth of CPU budget at a time (renders keep theirs).
pub(crate) const DEFAULT_ANALYSIS_WORKERS: u16 = 2;
/// CPU time one analysis may use by default, seconds (`--analysis-cpu-seconds`). The heaviest
/// honest templates we know analyse in well under a second; beyond this the template itself is
/// the problem.
pub const ANALYSIS_CPU_SECONDS: u64 = 5;
/// Address space one analysis may map. The executable and its libraries map ~150 MiB; a
/// template at the size limit parses to ~100 MiB of JSON values, its text conversion is bounded
/// by `MAX_TEXT_VERTICES_PER_TEMPLATE` (~350 MiB); the rest is margin.
pub const ANALYSIS_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;
/// Wall-clock backstop of one analysis, in multiples of its CPU budget: the verdict is the CPU
/// and memory budgets' (the same template always exhausts them), so a worker that makes
/// progress runs until they speak, however loaded the machine; only one that gets less than
/// a sixty-fourth of a core on average, or none at all for [`ANALYSIS_STALL_SECONDS`], is ended
/// as "the machine is loaded" (transient). With four, a 2-core machine at load average 6 (the
/// test suite beside two CPU hogs) answered "retry" to templates over the budget.
pub const ANALYSIS_WALL_PER_CPU: u32 = 64;
/// An analysis worker that uses no CPU at all for this long is stuck: ended, transient (by
/// default; `--analysis-stall-seconds`, hidden, lets a test hold analyses longer). A working
/// worker's CPU time grows every second however loaded the machine.
pub const ANALYSIS_STALL_SECONDS: u64 = 10;
/// How often an analysis' progress (its worker's CPU time) is read.
const PROGRESS_SAMPLE: Duration = Duration::from_secs(1);

/// What one analysis may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AnalysisBudget {
    /// Address space ([`ANALYSIS_MEMORY_BYTES`] by default).
    pub memory_bytes: u64,
    /// CPU time, seconds ([`ANALYSIS_CPU_SECONDS`] by default).
    pub cpu_seconds: u64,
    /// Seconds without any CPU after which a worker is stuck ([`ANALYSIS_STALL_SECONDS`]).
    pub stall_seconds: u64,
}

impl Default for AnalysisBudget {
    fn default() -> Self {
        AnalysisBudget {
            memory_bytes: ANALYSIS_MEMORY_BYTES,
            cpu_seconds: ANALYSIS_CPU_SECONDS,
            stall_seconds: ANALYSIS_STALL_SECONDS,
        }
    }
}

impl AnalysisBudget {
    /// The wall-clock limit ([`ANALYSIS_WALL_PER_CPU`] times the CPU budget).
    pub(crate) fn wall_deadline(&self) -> Duration {
        Duration::from_secs(self.cpu_seconds).saturating_mul(ANALYSIS_WALL_PER_CPU)
    }

    /// How long a worker may use no CPU at all before it is stuck.
    pub(crate) fn stall_limit(&self) -> Duration {
        Duration::from_secs(self.stall_seconds)
    }
}
/// How long a call waits for a free analysis worker before UNAVAILABLE: a few honest analyses
/// finish meanwhile; a queue of hostile ones does not hold callers for their whole budgets.
pub const WORKER_WAIT: Duration = Duration::from_secs(2);
/// Retry delay when no worker was free or the machine was too loaded.
pub(crate) const BUSY_RETRY_AFTER: Duration = Duration::from_secs(2);
/// File descriptors an analysis worker may hold: its three pipes and what the loader opens.
const ANALYSIS_OPEN_FILES: u64 = 32;
/// How much of the worker's stderr is kept for diagnostics.
const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// Why an analysis produced no report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AnalysisError {
    /// The template breached a budget (CPU, memory, text vertices, report size).
    #[error("{0}")]
    TooComplex(String),
    /// The worker found the template invalid: its model or fence (the server checks only its
    /// syntax), or a record over `storage::MAX_TEMPLATE_RECORD_BYTES`.
    #[error("{message}")]
    Invalid { reason: Reason, message: String },
    #[error("no analysis worker was free within {} s", WORKER_WAIT.as_secs())]
    Busy,
    /// The caller's tenant is backed off: its analyses used up their CPU budget.
    #[error(
        "this tenant's template analyses used up their CPU budget; its next analysis may \
         start in {} s",
        .0.as_secs_f64().ceil()
    )]
    Backoff(Duration),
    #[error("the analysis did not finish within {0} s (the machine is loaded)")]
    DeadlineExceeded(u64),
    /// The worker could not be run (spawn failure, a transient failure it reported).
    #[error("the analysis worker failed: {0}")]
    Unavailable(String),
    /// The worker crashed or answered nonsense: a bug of ours.
    #[error("the analysis worker crashed: {0}")]
    Crashed(String),
}

impl From<AnalysisError> for ServiceError {
    fn from(error: AnalysisError) -> ServiceError {
        let message = error.to_string();
        let on_template = |reason, message: String| {
            // The archive is fine; the animation it was asked for is not in it.
            let field = if reason == Reason::AnimationUnknown {
                "animation_id"
            } else {
                "lottie_json"
            };
            ServiceError::invalid_argument(
                reason,
                message.clone(),
                vec![FieldViolation {
                    field: field.into(),
                    description: message,
                }],
            )
        };
        match error {
            AnalysisError::TooComplex(_) => on_template(Reason::TemplateTooComplex, message),
            AnalysisError::Invalid { reason, .. } => on_template(reason, message),
            AnalysisError::Busy => ServiceError::transient(
                ServiceErrorCode::Unavailable,
                Reason::AnalysisBusy,
                message,
                BUSY_RETRY_AFTER,
            ),
            AnalysisError::Backoff(retry_after) => ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::AnalysisBackoff,
                message,
                retry_after,
            ),
            AnalysisError::DeadlineExceeded(_) => ServiceError::transient(
                ServiceErrorCode::Unavailable,
                Reason::AnalysisDeadlineExceeded,
                message,
                BUSY_RETRY_AFTER,
            ),
            AnalysisError::Unavailable(_) => ServiceError::transient(
                ServiceErrorCode::Unavailable,
                Reason::AnalysisUnavailable,
                message,
                BUSY_RETRY_AFTER,
            ),
            AnalysisError::Crashed(_) => ServiceError::internal(message),
        }
    }
}

/// Where analyses run.
#[derive(Debug, Clone)]
enum Runner {
    /// `executable analyze` child processes, each within `budget`.
    Workers {
        executable: PathBuf,
        budget: AnalysisBudget,
    },
    /// On a blocking thread of this process: only the library's own unit tests, whose test
    /// binary cannot run `analyze` (the worker path is tested over a real socket in tests/service/api).
    #[cfg(test)]
    InProcess,
}

/// The analysis workers of one server.
#[derive(Debug, Clone)]
pub(crate) struct AnalysisPool {
    runner: Runner,
    shares: AnalysisShares,
}

impl AnalysisPool {
    /// At most `workers` analyses at once (shared between tenants: [`shares`]), each in a
    /// `executable analyze` child process within `budget`.
    pub(crate) fn new(executable: PathBuf, workers: usize, budget: AnalysisBudget) -> AnalysisPool {
        AnalysisPool {
            runner: Runner::Workers { executable, budget },
            shares: AnalysisShares::new(workers, Duration::from_secs(budget.cpu_seconds)),
        }
    }

    #[cfg(test)]
    pub(crate) fn in_process() -> AnalysisPool {
        AnalysisPool {
            runner: Runner::InProcess,
            shares: AnalysisShares::new(
                DEFAULT_ANALYSIS_WORKERS.into(),
                Duration::from_secs(ANALYSIS_CPU_SECONDS),
            ),
        }
    }

    /// Refuses a call of `tenant` while it is backed off, before the caller spends anything
    /// on the template (its parse included).
    pub(crate) fn check_backoff(&self, tenant: &TenantId) -> Result<(), AnalysisError> {
        self.shares
            .check_backoff(tenant)
            .map_err(AnalysisError::Backoff)
    }

    /// The report of `template` (syntax-checked by the caller; parsed and fenced here, in the
    /// worker) with its uploaded `fonts` (and, for a dotLottie, its `animation`), built under
    /// the analysis budgets in a worker of `tenant`'s share, its CPU time charged to `tenant`.
    pub(crate) async fn analyze(
        &self,
        tenant: &TenantId,
        template: &[u8],
        fonts: &BTreeMap<String, bytes::Bytes>,
        animation: Option<&str>,
    ) -> Result<InspectReport, AnalysisError> {
        let slot =
            self.shares
                .acquire(tenant, WORKER_WAIT)
                .await
                .map_err(|refusal| match refusal {
                    Refusal::Backoff(delay) => AnalysisError::Backoff(delay),
                    Refusal::Busy => AnalysisError::Busy,
                })?;
        match &self.runner {
            Runner::Workers { executable, budget } => {
                let started = std::time::Instant::now();
                let input = WorkerInput {
                    template,
                    fonts,
                    animation,
                };
                let result = run_worker(executable, *budget, input, slot).await;
                if let Err(error) = &result {
                    tracing::info!(%error, elapsed_ms = started.elapsed().as_millis() as u64, "template analysis failed");
                }
                result
            }
            #[cfg(test)]
            Runner::InProcess => {
                let _slot = slot;
                let template = template.to_vec();
                let fonts: BTreeMap<String, Vec<u8>> = fonts
                    .iter()
                    .map(|(family, bytes)| (family.clone(), bytes.to_vec()))
                    .collect();
                let animation = animation.map(str::to_owned);
                tokio::task::spawn_blocking(move || {
                    let template =
                        crate::lottie::Template::parse_animation(&template, animation.as_deref())
                            .map_err(|e| AnalysisError::Invalid {
                            reason: crate::error::Classified::reason(&e),
                            message: e.to_string(),
                        })?;
                    let fonts = crate::lottie::lowering::text::fonts::FontBook::new(fonts);
                    InspectReport::with_fonts(&template, &fonts)
                        .map_err(|error| AnalysisError::TooComplex(error.to_string()))
                })
                .await
                .map_err(|error| AnalysisError::Crashed(error.to_string()))?
            }
        }
    }
}

/// The one place an analysis worker's command is built: the sandbox's worker command (an
/// allow-listed environment, no inherited descriptors, its own process group, death with the
/// server, the OOM killer's first pick) with the analysis budgets as rlimits and no file it
/// may write. The worker confines itself (no file at all, no network, no new processes)
/// before it reads its input.
fn analysis_worker_command(executable: &Path, budget: AnalysisBudget) -> std::process::Command {
    sandbox::worker_command(
        executable,
        ["analyze"],
        ResourceLimits {
            address_space_bytes: budget.memory_bytes,
            cpu_seconds: budget.cpu_seconds,
            // It writes no file at all (RLIMIT_FSIZE does not apply to its pipes).
            file_size_bytes: 0,
            open_files: ANALYSIS_OPEN_FILES,
            processes: sandbox::WORKER_MAX_PROCESSES,
        },
    )
}

/// Charges the worker's CPU time to its tenant, then kills its whole process group, when
/// dropped: when the call's future is dropped mid-analysis (caller gone, deadline passed) and
/// after every normal end alike. The CPU time is read from `/proc` while the worker is
/// unreaped (running, or exited and not yet waited for), so hanging up before the budget
/// does not make an analysis free. That read stays on the async thread: procfs answers from
/// kernel memory in microseconds, never waiting on a disk.
struct ChargeAndKillOnDrop {
    group: Option<u32>,
    slot: AnalysisSlot,
    budget: AnalysisBudget,
    started: Instant,
    /// The CPU time read before the worker was reaped.
    cpu: Option<Duration>,
    /// The worker died of its CPU limit or passed its wall-clock deadline.
    exhausted: bool,
}

impl ChargeAndKillOnDrop {
    /// Reads the worker's CPU time; call before it is reaped.
    fn read_cpu(&mut self) {
        if self.cpu.is_none() {
            self.cpu = self.group.and_then(|pid| os::cpu_time_of(pid).ok());
        }
    }
}

impl Drop for ChargeAndKillOnDrop {
    fn drop(&mut self) {
        self.read_cpu();
        if let Some(group) = self.group {
            os::kill_process_group(group);
        }
        let budget = Duration::from_secs(self.budget.cpu_seconds);
        // Unreadable (no /proc): the wall time, an upper bound of one thread's CPU time.
        let cpu = self
            .cpu
            .unwrap_or_else(|| self.started.elapsed().min(budget));
        self.slot.charge(cpu, self.exhausted || cpu >= budget);
    }
}

/// What an analysis worker is given.
struct WorkerInput<'a> {
    template: &'a [u8],
    fonts: &'a BTreeMap<String, bytes::Bytes>,
    animation: Option<&'a str>,
}

/// `work` (an analysis), or None when its worker `pid` made no progress (its CPU time did
/// not grow) for `stall`, or `backstop` passed: the wall clock decides
/// nothing about a worker that progresses (issue 43), its CPU limit does.
async fn while_progressing<T>(
    work: impl std::future::Future<Output = T>,
    pid: Option<u32>,
    backstop: Duration,
    stall: Duration,
) -> Option<T> {
    let mut work = std::pin::pin!(work);
    let started = Instant::now();
    let (mut cpu, mut grew) = (None, started);
    let mut samples = tokio::time::interval(PROGRESS_SAMPLE);
    loop {
        tokio::select! {
            done = &mut work => return Some(done),
            _ = samples.tick() => {
                let now = Instant::now();
                match pid.map(os::cpu_time_of) {
                    Some(Ok(read)) if Some(read) == cpu => {}
                    Some(Ok(read)) => (cpu, grew) = (Some(read), now),
                    // Exiting, or unreadable: its exit ends the wait.
                    _ => grew = now,
                }
                if now.duration_since(started) >= backstop
                    || now.duration_since(grew) >= stall
                {
                    return None;
                }
            }
        }
    }
}

async fn run_worker(
    executable: &Path,
    budget: AnalysisBudget,
    input: WorkerInput<'_>,
    slot: AnalysisSlot,
) -> Result<InspectReport, AnalysisError> {
    let WorkerInput {
        template,
        fonts,
        animation,
    } = input;
    let mut command = tokio::process::Command::from(analysis_worker_command(executable, budget));
    command.kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn().map_err(|error| {
        AnalysisError::Unavailable(format!("cannot start the analysis worker: {error}"))
    })?;
    // Declared after `child`, so dropped first: the group dies while the child is unreaped
    // (its id cannot have been reused).
    let worker = child.id();
    let mut guard = ChargeAndKillOnDrop {
        group: worker,
        slot,
        budget,
        started,
        cpu: None,
        exhausted: false,
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(AnalysisError::Unavailable(
            "the analysis worker has no pipes".into(),
        ));
    };
    let mut header = InputHeader::new(template, fonts);
    header.animation = animation.map(str::to_owned);
    let header = header.to_line();
    let write = async move {
        // A worker that dies before reading everything is classified by its exit below.
        let _ = stdin.write_all(&header).await;
        let _ = stdin.write_all(template).await;
        for bytes in fonts.values() {
            let _ = stdin.write_all(bytes).await;
        }
        drop(stdin);
    };
    let read_output = async move {
        let mut output = Vec::new();
        let _ = stdout
            .take(MAX_OUTPUT_BYTES as u64 + 1)
            .read_to_end(&mut output)
            .await;
        output
    };
    let work = async {
        let ((), output, stderr_tail) =
            tokio::join!(write, read_output, read_tail(stderr, STDERR_TAIL_BYTES));
        // Its pipes are closed: it has exited or is exiting, and is not reaped yet.
        guard.read_cpu();
        let status = child.wait().await;
        (output, stderr_tail, status)
    };
    let deadline = budget.wall_deadline();
    let Some((output, stderr_tail, status)) =
        while_progressing(work, worker, deadline, budget.stall_limit()).await
    else {
        // Stuck, or starved past the backstop: charged as a used-up budget (its tenant's
        // other analyses wait while this machine is this loaded).
        guard.exhausted = true;
        return Err(AnalysisError::DeadlineExceeded(deadline.as_secs()));
    };
    let status = status.map_err(|error| {
        AnalysisError::Unavailable(format!("cannot wait for the analysis worker: {error}"))
    })?;
    guard.exhausted = status.signal() == Some(libc::SIGXCPU);
    if output.len() > MAX_OUTPUT_BYTES {
        return Err(AnalysisError::Crashed(format!(
            "the analysis answer is larger than {MAX_OUTPUT_BYTES} bytes"
        )));
    }
    let outcome = tokio::task::spawn_blocking(move || {
        serde_json::from_slice::<AnalysisOutcome>(&output).ok()
    })
    .await
    .ok()
    .flatten();
    classify(status, outcome, &stderr_tail, budget)
}

/// Every way an analysis worker can end, classified.
fn classify(
    status: std::process::ExitStatus,
    outcome: Option<AnalysisOutcome>,
    stderr_tail: &str,
    budget: AnalysisBudget,
) -> Result<InspectReport, AnalysisError> {
    let answer = outcome.map(|outcome| match outcome {
        AnalysisOutcome::Analysed { report, .. } => Ok(*report),
        AnalysisOutcome::Failed(reported) => Err(reported),
    });
    match sandbox::protocol::reported_end(status.code(), answer) {
        Some(Ok(report)) => return Ok(report),
        Some(Err(ReportedFailure {
            class,
            reason,
            message,
        })) => {
            return Err(match (class, reason) {
                (ErrorClass::Deterministic, Reason::TemplateTooComplex) => {
                    AnalysisError::TooComplex(message)
                }
                (
                    ErrorClass::Deterministic,
                    Reason::TemplateInvalid
                    | Reason::TemplateTooLarge
                    | Reason::TemplateRecordTooLarge
                    | Reason::AnimationUnknown,
                ) => AnalysisError::Invalid { reason, message },
                (ErrorClass::Transient, _) => {
                    AnalysisError::Unavailable(format!("{message} ({reason})"))
                }
                _ => AnalysisError::Crashed(format!("unexpected failure {reason}: {message}")),
            })
        }
        None => {}
    }
    if status.signal() == Some(libc::SIGXCPU) {
        return Err(AnalysisError::TooComplex(format!(
            "analysing the template used up its CPU budget of {} s",
            budget.cpu_seconds
        )));
    }
    if sandbox::ran_out_of_memory(stderr_tail) {
        return Err(AnalysisError::TooComplex(format!(
            "analysing the template used up its memory budget of {} MiB",
            budget.memory_bytes / (1024 * 1024)
        )));
    }
    // We send SIGKILL only when the call ends early (then nobody reads this); another one
    // comes from outside, nearly always the kernel's OOM killer: the machine, not the input.
    if status.signal() == Some(libc::SIGKILL) {
        return Err(AnalysisError::Unavailable(
            "the analysis worker was killed from outside (SIGKILL)".into(),
        ));
    }
    let last_line = sandbox::last_line(stderr_tail);
    Err(AnalysisError::Crashed(format!("{status}: {last_line}")))
}

/// Reads a stream to its end, keeping only the last `limit` bytes.
async fn read_tail(mut stream: impl AsyncRead + Unpin, limit: usize) -> String {
    let mut tail = sandbox::Tail::new(limit);
    let mut buffer = [0u8; 4096];
    while let Ok(read @ 1..) = stream.read(&mut buffer).await {
        tail.push(&buffer[..read]);
    }
    tail.into_text()
}
