//! The server a run attacks when none is given: `serve` of this executable as a child process
//! (port 0, a data directory of its own, the two tenants' API keys), optionally under an
//! address-space limit as a container's memory limit would hold it, and what the bench reads
//! of it from /proc: its peak RSS (reset before each case), its peak address space, whether
//! it is still alive and the last lines it logged.

use super::{ATTACKER_KEY, BYSTANDER_KEY};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Flags of the server the bench starts: one worker and a short queue so the fan-out case
/// shows the bound at small numbers, a 2 s body deadline and 64 watchers so the slow-body
/// and watcher cases finish quickly (the defaults are 30 s and 1,024), and API keys
/// optional, so anonymous attacks are the `default` tenant's and the bystander is a tenant
/// of its own (`--api-keys` is added with the file).
pub(super) const STARTED_SERVER_FLAGS: [&str; 10] = [
    "--workers",
    "1",
    "--queue-capacity",
    "2",
    "--request-body-timeout-ms",
    "2000",
    "--max-watchers",
    "64",
    "--auth",
    "optional",
];
/// How long the started server may take to log that it serves.
const START_LIMIT: Duration = Duration::from_secs(30);
/// Lines of the started server's log kept, to say why it exited if it does.
const LOG_TAIL_LINES: usize = 12;
/// How long a server being torn down (its memory gone) may take to become reapable.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(10);

/// A server started for the run, killed when the run ends.
pub(super) struct StartedServer {
    child: Child,
    log_tail: Arc<Mutex<VecDeque<String>>>,
    _data_dir: tempfile::TempDir,
}

impl Drop for StartedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StartedServer {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the server ended and the last lines it logged, once it has exited (or is being
    /// torn down: a process writing its core dump has no memory left to show, and is not
    /// yet reapable).
    pub(super) fn exited(&mut self) -> Option<String> {
        let deadline = Instant::now() + TEARDOWN_LIMIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().ok()? {
                break status;
            }
            if peak_rss_mib(self.pid()).is_some() || Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The log reader may still be reading the last lines.
        std::thread::sleep(Duration::from_millis(200));
        // A poisoned tail is only a log: read it all the same.
        let tail = self
            .log_tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(" / ");
        Some(format!("{status}; its last lines: {tail}"))
    }
}

/// Starts `serve` of this executable with [`STARTED_SERVER_FLAGS`], the two tenants' API keys
/// and `extra` flags (a case that needs a server of its own, TLS say, starts one too), under
/// an address-space limit of `address_space_bytes` when given.
pub(super) fn start_server(
    extra: &[String],
    address_space_bytes: Option<u64>,
) -> anyhow::Result<(StartedServer, SocketAddr)> {
    let data_dir = tempfile::tempdir()?;
    let api_keys = data_dir.path().join("api-keys");
    std::fs::write(
        &api_keys,
        format!(
            "attacker bench {}\nbystander bench {}\n",
            crate::auth::api_keys::sha256_hex(ATTACKER_KEY),
            crate::auth::api_keys::sha256_hex(BYSTANDER_KEY)
        ),
    )?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(STARTED_SERVER_FLAGS)
        .arg("--api-keys")
        .arg(&api_keys)
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir.path().join("data"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(bytes) = address_space_bytes {
        crate::os::limit_address_space_in_child(&mut command, bytes);
    }
    let mut child = command.spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let log_tail = Arc::new(Mutex::new(VecDeque::new()));
    let (found, address) = std::sync::mpsc::channel();
    let tail = log_tail.clone();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && line.contains(" serving ") {
                if let Some(listen) = logged_address(&line) {
                    let _ = found.send(listen);
                    sent = true;
                }
            }
            // A poisoned tail is only a log: keep writing to it.
            let mut tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if tail.len() == LOG_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
    let server = StartedServer {
        child,
        log_tail,
        _data_dir: data_dir,
    };
    let address = address
        .recv_timeout(START_LIMIT)
        .map_err(|_| anyhow::anyhow!("the server did not start within {START_LIMIT:?}"))?;
    Ok((server, address))
}

/// `listen=Some(ADDR)` of a text log line.
fn logged_address(line: &str) -> Option<SocketAddr> {
    let start = line.find("listen=Some(")? + "listen=Some(".len();
    let end = line[start..].find(')')? + start;
    line[start..end].parse().ok()
}

/// A `/proc/PID/status` figure in kB, as MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Peak RSS of a process since its start or since [`reset_peak_rss`], MiB (`VmHWM`).
pub(super) fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmHWM:")
}

/// Peak address space of a process since its start, MiB (`VmPeak`: what RLIMIT_AS bounds).
pub(super) fn peak_address_space_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmPeak:")
}

/// Starts a process's peak RSS afresh from its current RSS (`5` to `/proc/PID/clear_refs`), so
/// that each case's peak is its own; false where the kernel does not allow it.
pub(super) fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}
