//! Starting a worker process, the parent's half of the sandbox: an allow-listed environment,
//! no inherited descriptors beyond the three pipes, resource limits, its own process group,
//! death with its parent and the OOM killer's first pick (the pre-exec part is in
//! [`crate::os`]); and the watchdog that kills the group at its deadline or on cancel. Every
//! worker kind starts through [`worker_command`], so they all get the same fence.

use crate::os::{self, ResourceLimits};
use crate::sandbox::CancelToken;
use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The whole environment of a worker, by name and value; nothing of the parent's environment
/// is passed on (it may hold credentials such as `LOTTIE_RENDER_REDIS_URL` with a password).
/// - `PATH`: a fixed system path; a worker runs no programs, but libraries may look.
/// - `MALLOC_ARENA_MAX`: glibc reserves 64 MiB of address space per malloc arena and thread;
///   two arenas keep the address-space limit about memory actually used.
/// - `LANG`, `LC_ALL`: a UTF-8 locale that needs no locale files.
pub const WORKER_ENVIRONMENT: &[(&str, &str)] = &[
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("MALLOC_ARENA_MAX", "2"),
    ("LANG", "C.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
    // SVT-AV1 writes its banner and configuration to stderr at its default level (info);
    // errors only, as the other encoders are set up (FFmpeg's log level, x265's log-level).
    ("SVT_LOG", SVT_LOG_ERRORS_ONLY),
];
/// SVT-AV1's `SVT_LOG` level that keeps its errors and drops its banner.
pub const SVT_LOG_ERRORS_ONLY: &str = "1";
/// Processes and threads a worker's user may have (RLIMIT_NPROC). The kernel counts every
/// thread of the user, the server's and other workers' included, so this is a backstop
/// against a runaway fork loop rather than a tight budget; the seccomp filter is what
/// refuses new processes (and root is exempt from this limit anyway).
pub const WORKER_MAX_PROCESSES: u64 = 4096;
/// File descriptors a worker may hold (it needs a handful: pipes, template, output).
pub const WORKER_OPEN_FILES: u64 = 256;
/// Largest output file a worker may write.
pub const MAX_OUTPUT_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// How often the watchdog checks for its backstop and for cancellation.
const WATCHDOG_TICK: Duration = Duration::from_millis(20);
/// How often the watchdog reads the worker's CPU time to see it progress.
const PROGRESS_SAMPLE: Duration = Duration::from_secs(1);

/// Resource limits of a worker with `memory_bytes` of address space and `cpu_seconds` of CPU
/// time (a render's from its work budget, `crate::sandbox::deadline`: the same on any
/// machine, so that running out of it is a verdict on the request, not on the machine).
pub fn worker_limits(memory_bytes: u64, cpu_seconds: u64) -> ResourceLimits {
    ResourceLimits {
        address_space_bytes: memory_bytes,
        cpu_seconds,
        file_size_bytes: MAX_OUTPUT_BYTES,
        open_files: WORKER_OPEN_FILES,
        processes: WORKER_MAX_PROCESSES,
    }
}

/// A command running `executable` with `args` as a sandboxed worker: stdin, stdout and stderr
/// piped, the [`WORKER_ENVIRONMENT`] only, `limits`, its own process group (so
/// [`os::kill_process_group`] with its pid ends it and anything it started), SIGKILL when the
/// parent dies, `oom_score_adj` [`os::WORKER_OOM_SCORE_ADJ`] and no inherited descriptor
/// beyond the pipes. The worker itself then confines what it may open and call
/// ([`crate::sandbox::confine`]) before it touches caller data.
pub fn worker_command<I, S>(executable: &Path, args: I, limits: ResourceLimits) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(executable);
    command
        .args(args)
        .env_clear()
        .envs(WORKER_ENVIRONMENT.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    os::apply_in_child(&mut command, limits);
    command
}

/// A running worker process, started for its job by [`worker_command`] or forked by the
/// zygote ([`crate::sandbox::zygote`]): either way a child of this process leading its own
/// process group, with its three pipes.
#[derive(Debug)]
pub struct WorkerProcess {
    pid: u32,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    /// Reaped already: its pid (and group id) may name another process now.
    reaped: bool,
}

impl WorkerProcess {
    /// A worker forked by the zygote: `pid` and the parent's ends of its pipes.
    pub(crate) fn forked(
        pid: u32,
        stdin: std::os::fd::OwnedFd,
        stdout: std::os::fd::OwnedFd,
        stderr: std::os::fd::OwnedFd,
    ) -> WorkerProcess {
        WorkerProcess {
            pid,
            stdin: Some(stdin.into()),
            stdout: Some(stdout.into()),
            stderr: Some(stderr.into()),
            reaped: false,
        }
    }

    /// Its process id, which is also its process group's.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for it to exit: its status and resource usage.
    pub(crate) fn wait_with_usage(&mut self) -> std::io::Result<(ExitStatus, os::ResourceUsage)> {
        let waited = os::wait_with_usage(self.pid);
        self.reaped = true;
        waited
    }

    /// True when it has exited (reaping it) or cannot be asked.
    pub(crate) fn has_exited(&mut self) -> bool {
        if !self.reaped && os::has_exited(self.pid) {
            self.reaped = true;
        }
        self.reaped
    }

    /// Kills its process group and reaps it.
    pub(crate) fn kill(mut self) {
        if !self.reaped {
            os::kill_process_group(self.pid);
            let _ = self.wait_with_usage();
        }
    }
}

impl From<Child> for WorkerProcess {
    fn from(mut child: Child) -> WorkerProcess {
        // The Child is dropped unreaped: it is reaped by pid (std keeps no handle that would
        // need closing beyond the pipes taken here).
        WorkerProcess {
            pid: child.id(),
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            reaped: false,
        }
    }
}

/// When the watchdog ends a worker that is neither finished nor cancelled: never for its
/// work (the CPU-time limit is the verdict on that), only when it stops making progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Wall-clock time after which the worker is ended whatever it does.
    pub backstop: Duration,
    /// Wall-clock time without a tick of CPU time after which it is ended (none: not
    /// watched).
    pub stall: Option<Duration>,
}

/// Why the watchdog ended a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// Past [`WatchLimits::backstop`].
    Backstop,
    /// No CPU time used for [`WatchLimits::stall`].
    Stalled,
}

/// Kills a worker's process group when it passes its backstop, stalls, or is cancelled,
/// from a thread of its own, until [`Watchdog::finish`] (which wakes it at once: a finished
/// job does not wait for the next tick).
pub struct Watchdog {
    finished: std::sync::mpsc::Sender<()>,
    overrun: Arc<std::sync::Mutex<Option<Overrun>>>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    pub(crate) fn start(process_group: u32, limits: WatchLimits, cancel: &CancelToken) -> Watchdog {
        let (finished, finishing) = std::sync::mpsc::channel::<()>();
        let overrun = Arc::new(std::sync::Mutex::new(None));
        let thread = {
            let (overrun, cancel) = (overrun.clone(), cancel.clone());
            let started = Instant::now();
            let backstop = started + limits.backstop;
            std::thread::spawn(move || {
                let end = |why| {
                    *crate::sync::lock(&overrun) = Some(why);
                    os::kill_process_group(process_group);
                };
                let mut progress = Progress::new(process_group, started);
                loop {
                    let now = Instant::now();
                    if now >= backstop {
                        return end(Overrun::Backstop);
                    }
                    if let Some(stall) = limits.stall {
                        if progress.stalled_for(now) >= stall {
                            return end(Overrun::Stalled);
                        }
                    }
                    if cancel.is_cancelled() {
                        os::kill_process_group(process_group);
                        return;
                    }
                    match finishing.recv_timeout(WATCHDOG_TICK.min(backstop - now)) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        // Finished (the sender sent or was dropped).
                        _ => return,
                    }
                }
            })
        };
        Watchdog {
            finished,
            overrun,
            thread,
        }
    }

    /// Stops watching; why the group was ended for its time, if it was.
    pub(crate) fn finish(self) -> Option<Overrun> {
        let _ = self.finished.send(());
        let _ = self.thread.join();
        *crate::sync::lock(&self.overrun)
    }
}

/// The worker's CPU time, sampled every [`PROGRESS_SAMPLE`]: when it last grew.
struct Progress {
    pid: u32,
    sampled: Instant,
    cpu: Option<Duration>,
    grew: Instant,
}

impl Progress {
    fn new(pid: u32, now: Instant) -> Progress {
        Progress {
            pid,
            sampled: now,
            cpu: None,
            grew: now,
        }
    }

    /// How long the worker has used no CPU time, as of `now`. A worker whose CPU time cannot
    /// be read (it is exiting) counts as progressing: its exit ends the watch.
    fn stalled_for(&mut self, now: Instant) -> Duration {
        if now.duration_since(self.sampled) >= PROGRESS_SAMPLE {
            self.sampled = now;
            match os::cpu_time_of(self.pid) {
                Ok(cpu) if Some(cpu) == self.cpu => {}
                Ok(cpu) => {
                    self.cpu = Some(cpu);
                    self.grew = now;
                }
                Err(_) => self.grew = now,
            }
        }
        now.duration_since(self.grew)
    }
}
