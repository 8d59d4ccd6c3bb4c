//! `ServerProcess`: the real `lottie-render serve` binary as a child process, for tests that
//! measure what an attack costs the server itself (its peak RSS and CPU time from /proc),
//! which an in-process server shared with the other tests of this binary cannot show.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// How long the server may take to log that it is serving.
const START_LIMIT: Duration = Duration::from_secs(30);

pub struct ServerProcess {
    child: Child,
    pub address: SocketAddr,
    pub metrics_address: SocketAddr,
    pub data_dir: tempfile::TempDir,
    /// The executable its workers run as (a symlink of its own, see `own_worker_executable`).
    pub worker_executable: PathBuf,
    /// Every line the server logged so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Starts `lottie-render serve` on ports chosen by the kernel with its own data directory
    /// and worker executable, plus `extra_args`, and waits until it serves.
    pub fn start(extra_args: &[&str]) -> ServerProcess {
        ServerProcess::start_with_env(extra_args, &[])
    }

    /// As [`ServerProcess::start`], with extra environment variables for the server.
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::start_with_worker(super::own_worker_executable, extra_args, env)
    }

    /// As [`ServerProcess::start_with_env`], with the worker executable that `worker` makes in
    /// the server's temporary directory (a stand-in script, say).
    pub fn start_with_worker(
        worker: impl FnOnce(&std::path::Path) -> PathBuf,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        ServerProcess::start_in(None, worker, extra_args, env)
    }

    /// As [`ServerProcess::start_with_worker`], with templates and outputs in `data_dir`
    /// (several servers sharing it, as instances of one farm share a volume); none: a
    /// directory of its own.
    pub fn start_in(
        data_dir: Option<&std::path::Path>,
        worker: impl FnOnce(&std::path::Path) -> PathBuf,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let command = Command::new(env!("CARGO_BIN_EXE_lottie-render"));
        ServerProcess::start_command(command, data_dir, worker, extra_args, env)
    }

    /// As [`ServerProcess::start`], started with an open files limit (RLIMIT_NOFILE) of
    /// `soft` (in force) and `hard` (the most it may raise it to), by `prlimit`, which execs
    /// the server (so its process id is the server's).
    pub fn start_with_open_files(soft: u64, hard: u64, extra_args: &[&str]) -> ServerProcess {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={soft}:{hard}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_lottie-render"));
        ServerProcess::start_command(command, None, super::own_worker_executable, extra_args, &[])
    }

    /// As [`ServerProcess::start`], started under an address-space limit (RLIMIT_AS) of
    /// `soft` bytes, the hard limit left unlimited (as `bench-hostile` starts its server:
    /// the workers give themselves larger budgets), by `prlimit`, which execs the server.
    pub fn start_with_address_space(soft: u64, extra_args: &[&str]) -> ServerProcess {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--as={soft}:unlimited"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_lottie-render"));
        ServerProcess::start_command(command, None, super::own_worker_executable, extra_args, &[])
    }

    /// Whether the server has exited (its status), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// `command` (the server, or a program that execs it with the arguments that follow) with
    /// the arguments of `serve`.
    fn start_command(
        mut command: Command,
        data_dir: Option<&std::path::Path>,
        worker: impl FnOnce(&std::path::Path) -> PathBuf,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let own_dir = tempfile::tempdir().unwrap();
        let worker_executable = worker(own_dir.path());
        let data = data_dir.map_or_else(|| own_dir.path().join("data"), |dir| dir.to_path_buf());
        let data_dir = own_dir;
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data)
            .arg("--worker-executable")
            .arg(&worker_executable)
            .args(extra_args)
            .env("RUST_LOG", "info")
            // Tests count the worker processes their jobs start; the spare-worker tests turn
            // it on (an argument or `env` wins over this).
            .env("LOTTIE_RENDER_SPARE_WORKERS", "0")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addresses, found) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let (mut metrics, mut sent) = (None, false);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("serving metrics") {
                        metrics = logged_address(&line, "listen");
                    } else if !sent && line.contains(" serving ") {
                        if let (Some(address), Some(metrics)) =
                            (logged_address(&line, "listen"), metrics)
                        {
                            let _ = addresses.send((address, metrics));
                            sent = true;
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let (address, metrics_address) = found.recv_timeout(START_LIMIT).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "the server did not start: {:?}",
                log.lock().unwrap().join("\n")
            )
        });
        ServerProcess {
            child,
            address,
            metrics_address,
            data_dir,
            worker_executable,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.address))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// The server's peak resident set size so far, bytes (`VmHWM`).
    pub fn peak_rss_bytes(&self) -> u64 {
        status_kib(self.pid(), "VmHWM:") * 1024
    }

    /// The server's resident set size now, bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        status_kib(self.pid(), "VmRSS:") * 1024
    }

    /// CPU time (user + system) the server process has used so far, all threads.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command name (which may hold spaces) start at "state" (field 3);
        // utime and stime are fields 14 and 15, in clock ticks.
        let rest = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second())
    }

    /// The Prometheus text of the server's metrics endpoint.
    pub async fn metrics_text(&self) -> String {
        super::metrics_text(self.metrics_address).await
    }

    /// Every line the server logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The server's worker processes alive now (children and orphans alike).
    pub fn workers(&self) -> Vec<(u32, String)> {
        super::worker_processes(&self.worker_executable)
    }

    /// Sends SIGKILL (no drain, no goodbye: a crashed instance) and waits for the exit.
    pub fn kill(&mut self) {
        send_signal(self.pid(), "KILL");
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and returns at once (the drain runs meanwhile).
    pub fn terminate(&self) {
        send_signal(self.pid(), "TERM");
    }

    /// Waits up to `limit` for the process to exit; its status, or `None` if it still runs.
    /// Polls without blocking the test's runtime: the clients' connections (their tasks on
    /// that runtime) must answer the server's GOAWAY and PING for its drain to close them,
    /// or it waits out `app::serve::OPEN_CALLS_AFTER_DRAIN` for them.
    pub async fn wait_for_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// SIGTERM, then waits (bounded, as [`ServerProcess::wait_for_exit`]) for a clean exit;
    /// answers whether it exited 0.
    pub async fn stop(mut self) -> bool {
        send_signal(self.pid(), "TERM");
        match self.wait_for_exit(Duration::from_secs(30)).await {
            Some(status) => status.success(),
            None => {
                let _ = self.child.kill();
                false
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A failed test must not leave a server (and its workers) behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address logged as `field=Some(ADDR)` (text logs), if this line has one.
fn logged_address(line: &str, field: &str) -> Option<SocketAddr> {
    let start = line.find(&format!("{field}=Some("))? + field.len() + "=Some(".len();
    let end = line[start..].find(')')? + start;
    line[start..end].parse().ok()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn clock_ticks_per_second() -> f64 {
    let output = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status();
}
