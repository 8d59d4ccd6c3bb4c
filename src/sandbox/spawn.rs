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
use std::sync::atomic::{AtomicBool, Ordering};
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
/// How often the watchdog checks for its deadline and for cancellation.
const WATCHDOG_TICK: Duration = Duration::from_millis(20);

/// Resource limits of a worker with `memory_bytes` of address space and a wall-clock
/// `deadline`.
pub fn worker_limits(memory_bytes: u64, deadline: Duration) -> ResourceLimits {
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    ResourceLimits {
        address_space_bytes: memory_bytes,
        // All cores busy for the whole deadline, plus a little: the wall-clock deadline
        // normally fires first; this catches a worker that escapes it.
        cpu_seconds: deadline.as_secs().saturating_add(1) * cores + 5,
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

/// Kills a worker's process group when its deadline passes or it is cancelled, from a thread
/// of its own, until [`Watchdog::finish`] (which wakes it at once: a finished job does not
/// wait for the next tick).
pub struct Watchdog {
    finished: std::sync::mpsc::Sender<()>,
    timed_out: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    pub(crate) fn start(process_group: u32, deadline: Duration, cancel: &CancelToken) -> Watchdog {
        let (finished, finishing) = std::sync::mpsc::channel::<()>();
        let timed_out = Arc::new(AtomicBool::new(false));
        let thread = {
            let (timed_out, cancel) = (timed_out.clone(), cancel.clone());
            let deadline = Instant::now() + deadline;
            std::thread::spawn(move || loop {
                let now = Instant::now();
                if now >= deadline {
                    timed_out.store(true, Ordering::SeqCst);
                    os::kill_process_group(process_group);
                    return;
                }
                if cancel.is_cancelled() {
                    os::kill_process_group(process_group);
                    return;
                }
                match finishing.recv_timeout(WATCHDOG_TICK.min(deadline - now)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    // Finished (the sender sent or was dropped).
                    _ => return,
                }
            })
        };
        Watchdog {
            finished,
            timed_out,
            thread,
        }
    }

    /// Stops watching; true when the deadline had passed and the group was killed for it.
    pub(crate) fn finish(self) -> bool {
        let _ = self.finished.send(());
        let _ = self.thread.join();
        self.timed_out.load(Ordering::SeqCst)
    }
}
