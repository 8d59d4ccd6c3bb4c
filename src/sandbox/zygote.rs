//! The zygote: one `lottie-render worker --zygote` process, started like any worker (the
//! fence of [`worker_command`]: environment, limits, process group, death with the server),
//! that has loaded the worker's ~140 shared libraries once and forks a copy of itself for
//! every spare worker ([`crate::sandbox::spare`]). Measured on the release build, starting a
//! worker costs 25–33 ms of CPU, over 90% of it exec and the dynamic loader (mapping and
//! relocating the libraries of FFmpeg, rlottie and their dependencies); a fork of the loaded
//! process costs ~1 ms. Each forked worker is then a worker like any other: it waits for its
//! job on stdin, confines itself (Landlock, seccomp) once the job arrives, runs that one job
//! and exits.
//!
//! The forks are made with CLONE_PARENT, so a worker is a child of the server, not of the
//! zygote: the server waits for it and reads its exit status and resource usage (CPU, peak
//! RSS) as for a worker it started, the kernel kills it when the server's spare thread ends
//! (parent-death signal), and a zygote that dies takes none of the waiting workers with it.
//!
//! Fork safety: the zygote never starts a thread, and it forks from its request loop before
//! anything of a job exists; it holds no caller data and is never confined (it has nothing
//! to confine), and no worker can reach it (a confined worker may not signal other
//! processes, and it holds only its own pipes).
//!
//! Protocol on the zygote's stdin, a unix stream socket: the zygote first writes
//! [`READY`]; then for each request (one byte, [`FORK_REQUEST`], with the worker's stdin,
//! stdout and stderr as SCM_RIGHTS descriptors) it forks and answers the worker's pid as four
//! little-endian bytes (0: the fork failed) once the worker has set itself up (own process
//! group, parent-death signal, no other descriptor), so that the server never holds a pid
//! it could not kill as a group. The end of the socket ends the zygote.

use super::spawn::{worker_command, WorkerProcess};
use crate::os::{self, ResourceLimits};
use std::ffi::CStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// The zygote's first words: it has started and waits for requests.
const READY: &[u8; 4] = b"zyg1";
/// A request for one worker.
const FORK_REQUEST: u8 = b'f';
/// How long the server waits for the zygote to say it is ready, or to answer a fork. Both take
/// milliseconds (start-up ~35 ms of CPU, a fork ~1 ms); the margin is for a machine loaded
/// many times over. A zygote silent this long is wedged: it is killed and replaced.
const ANSWER_LIMIT: Duration = Duration::from_secs(5);
/// The zygote's process name (`comm`, shown by `ps`; at most 15 bytes), so that operators and
/// tests tell it from the workers: they share its command line, being forks of it.
pub(crate) const ZYGOTE_PROCESS_NAME: &CStr = c"lr-zygote";
/// The process name a forked worker takes back (an exec'd one is named after its executable).
pub const WORKER_PROCESS_NAME: &CStr = c"lottie-render";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ZygoteError {
    #[error("cannot start the zygote: {0}")]
    Start(std::io::Error),
    #[error("the zygote did not say it was ready: {0}")]
    NotReady(std::io::Error),
    #[error("cannot reach the zygote: {0}")]
    Request(std::io::Error),
    #[error("the zygote could not fork a worker")]
    ForkFailed,
}

/// The server's handle on a running zygote.
#[derive(Debug)]
pub(crate) struct Zygote {
    process: WorkerProcess,
    socket: UnixStream,
}

impl Zygote {
    /// Starts `executable` as a zygote under `limits` (which its workers inherit; a spare's
    /// loosest, lowered to the job's budget when the job arrives) and waits until it is ready.
    pub(crate) fn start(executable: &Path, limits: ResourceLimits) -> Result<Zygote, ZygoteError> {
        let (socket, zygote_end) = UnixStream::pair().map_err(ZygoteError::Start)?;
        let mut command = worker_command(executable, ["worker", "--zygote"], limits);
        // Its stdout and stderr go nowhere: it has nothing to say beyond the socket, and its
        // workers get pipes of their own.
        command
            .stdin(Stdio::from(OwnedFd::from(zygote_end)))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let spawned = command.spawn();
        // Our copy of the zygote's end goes with the command: the zygote then sees the end of
        // the stream when we close ours.
        drop(command);
        let process = WorkerProcess::from(spawned.map_err(ZygoteError::Start)?);
        let mut zygote = Zygote { process, socket };
        let mut ready = [0u8; READY.len()];
        let answered = zygote
            .socket
            .set_read_timeout(Some(ANSWER_LIMIT))
            .and_then(|()| zygote.socket.read_exact(&mut ready));
        match answered {
            Ok(()) if &ready == READY => Ok(zygote),
            Ok(()) => {
                zygote.kill();
                Err(ZygoteError::NotReady(std::io::Error::other(
                    "it answered something else",
                )))
            }
            Err(error) => {
                zygote.kill();
                Err(ZygoteError::NotReady(error))
            }
        }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A new worker forked from the zygote, waiting for its job on stdin. An error leaves the
    /// zygote unusable (the caller kills it).
    pub(crate) fn fork_worker(&mut self) -> Result<WorkerProcess, ZygoteError> {
        let pipe = || std::io::pipe().map_err(ZygoteError::Request);
        let (stdin_read, stdin_write) = pipe()?;
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        os::forked_workers::send_with_descriptors(
            self.socket.as_fd(),
            &[FORK_REQUEST],
            &[
                stdin_read.as_fd(),
                stdout_write.as_fd(),
                stderr_write.as_fd(),
            ],
        )
        .map_err(ZygoteError::Request)?;
        // The worker's ends are the worker's now: with ours closed, it sees the end of its
        // stdin when we close the writing end, and we see the end of its output when it exits.
        drop((stdin_read, stdout_write, stderr_write));
        let mut answer = [0u8; 4];
        self.socket
            .read_exact(&mut answer)
            .map_err(ZygoteError::Request)?;
        match u32::from_le_bytes(answer) {
            0 => Err(ZygoteError::ForkFailed),
            pid => Ok(WorkerProcess::forked(
                pid,
                stdin_write.into(),
                stdout_read.into(),
                stderr_read.into(),
            )),
        }
    }

    /// True when the zygote has exited (reaping it).
    pub(crate) fn has_exited(&mut self) -> bool {
        self.process.has_exited()
    }

    /// Kills the zygote and reaps it. The workers it forked live on: they are the server's.
    pub(crate) fn kill(self) {
        self.process.kill();
    }
}

/// How [`serve`] ended in this process.
pub(crate) enum Served {
    /// This process is a freshly forked worker: it goes on to read its job on stdin.
    Forked,
    /// This process is the zygote and its work is over: it exits with this code.
    Ended(ExitCode),
}

/// The zygote's side: serves fork requests on stdin until the server closes it. Returns in
/// the zygote when it is done, and in every forked worker (as [`Served::Forked`]).
pub(crate) fn serve() -> Served {
    let threads = super::confine::thread_count();
    if threads > 1 {
        eprintln!("the zygote must be single-threaded to fork safely ({threads} threads)");
        return Served::Ended(ExitCode::FAILURE);
    }
    // The server: the parent of every worker forked from here.
    let server = os::forked_workers::parent_pid();
    let control = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(descriptor) => UnixStream::from(descriptor),
        Err(error) => {
            eprintln!("the zygote cannot use its stdin: {error}");
            return Served::Ended(ExitCode::FAILURE);
        }
    };
    os::forked_workers::set_process_name(ZYGOTE_PROCESS_NAME);
    if (&control).write_all(READY).is_err() {
        return Served::Ended(ExitCode::FAILURE);
    }
    serve_requests(control, server)
}

fn serve_requests(mut control: UnixStream, server: u32) -> Served {
    loop {
        let mut request = [0u8; 1];
        let (read, descriptors) =
            match os::forked_workers::receive_with_descriptors(control.as_fd(), &mut request, 3) {
                // The server closed the socket (it stopped, or let this zygote go).
                Ok((0, _)) => return Served::Ended(ExitCode::SUCCESS),
                Ok(received) => received,
                Err(_) => return Served::Ended(ExitCode::FAILURE),
            };
        let pipes: Result<[OwnedFd; 3], _> = descriptors.try_into();
        let answer = match (read, request[0], pipes) {
            (1, FORK_REQUEST, Ok(pipes)) => match fork_worker(pipes, server, control) {
                Forked::InWorker => return Served::Forked,
                Forked::InZygote { worker, zygote } => {
                    control = zygote;
                    worker
                }
            },
            // A malformed request: nothing forked.
            _ => None,
        };
        let answer = answer.unwrap_or(0).to_le_bytes();
        if (&control).write_all(&answer).is_err() {
            return Served::Ended(ExitCode::FAILURE);
        }
    }
}

enum Forked {
    /// This process is the new worker.
    InWorker,
    /// This process is still the zygote: the worker's pid (None: no worker) and the control
    /// socket back.
    InZygote {
        worker: Option<u32>,
        zygote: UnixStream,
    },
}

/// Forks one worker with `pipes` as its stdio and waits until it has set itself up (a pipe
/// that the worker closes when done, or by dying). The control socket is passed in so that
/// the worker closes it before closing every descriptor it does not own.
fn fork_worker(pipes: [OwnedFd; 3], server: u32, control: UnixStream) -> Forked {
    let Ok((mut set_up_read, set_up_write)) = std::io::pipe() else {
        return Forked::InZygote {
            worker: None,
            zygote: control,
        };
    };
    match os::forked_workers::fork_as_sibling() {
        Ok(None) => {
            drop((control, set_up_read));
            let set_up = os::forked_workers::become_forked_worker(pipes, server);
            os::forked_workers::set_process_name(WORKER_PROCESS_NAME);
            // Every descriptor owned here is dropped before the others are closed.
            drop(set_up_write);
            if set_up
                .and_then(|()| os::forked_workers::close_descriptors_above_stderr())
                .is_err()
            {
                os::exit_immediately(crate::sandbox::protocol::exit_code::TRANSIENT);
            }
            Forked::InWorker
        }
        Ok(Some(pid)) => {
            drop((pipes, set_up_write));
            // Ends when the worker has closed its end: set up, or dead (which the server then
            // sees as a spare that died while waiting).
            let _ = set_up_read.read_to_end(&mut Vec::new());
            Forked::InZygote {
                worker: Some(pid),
                zygote: control,
            }
        }
        Err(_) => Forked::InZygote {
            worker: None,
            zygote: control,
        },
    }
}
