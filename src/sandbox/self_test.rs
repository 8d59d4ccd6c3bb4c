//! The sandbox self-test: a worker started exactly as a render's is ([`worker_command`], the
//! same environment and limits) runs `lottie-render worker --self-test`, confines itself with
//! a realistic policy (a template it may read, an output it may write, in a fresh directory)
//! and then tries each thing a subverted worker would: read a secret from its environment,
//! use an inherited descriptor, reach Redis over TCP, open UDP and unix sockets, read files
//! outside its job, create files, open a terminal device, fork, spawn and exec a program,
//! signal its parent. It reports what happened as one JSON line ([`SelfTestReport`]); the
//! suite asserts everything was refused and the allowed things still work, and the server
//! runs it once at start-up to log and export which protections the kernel gives
//! ([`protections`](SelfTestReport::protections)).

pub(crate) mod probes;

use crate::os;
use crate::sandbox::confine::{Confinement, LandlockState};
use crate::sandbox::lines::{BoundedLines, LineError};
use crate::sandbox::spawn::{worker_command, worker_limits, Watchdog};
use crate::sandbox::{CancelToken, DEFAULT_WORKER_MEMORY_BYTES};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The worker's argument that runs the self-test instead of a job.
pub(crate) const SELF_TEST_FLAG: &str = "--self-test";
/// Deadline of the self-test worker: it does a few dozen system calls, but a loaded machine
/// may take seconds to start a process.
const SELF_TEST_DEADLINE: Duration = Duration::from_secs(30);
/// Longest report line: a few dozen probes with their error messages take 2–4 KiB.
pub(crate) const MAX_SELF_TEST_REPORT_BYTES: usize = 64 * 1024;
/// What the self-test writes into its output file; the parent reads it back.
pub(crate) const SELF_TEST_OUTPUT: &[u8] = b"lottie-render sandbox self-test output\n";

/// The self-test's job, written to the worker's stdin like a render job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelfTestJob {
    /// A file the policy lets it read.
    pub template_path: PathBuf,
    /// A file beside the template that the policy does not name.
    pub neighbour_path: PathBuf,
    /// The file the policy lets it write (created by the worker before confining, as a
    /// render's output is).
    pub output_path: PathBuf,
}

/// What a probe expects: the attempt refused, or (for what a render needs) working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    Refused,
    Works,
}

/// One attempt and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What was tried, e.g. `connect to 127.0.0.1:6379 (Redis) over TCP`.
    pub name: String,
    /// The protection it proves (a label of the `sandbox_protection` metric).
    pub mechanism: String,
    pub expected: Expected,
    /// What happened: the error, or what was seen.
    pub observed: String,
    /// Whether what happened is what was expected.
    pub passed: bool,
}

/// Everything the self-test worker saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfTestReport {
    /// What `confine` put in force; None when it failed (then `confine_error` says why).
    pub confinement: Option<Confinement>,
    pub confine_error: Option<String>,
    /// Names (never values) of the worker's environment variables.
    pub environment: Vec<String>,
    pub probes: Vec<Probe>,
}

/// Labels of the `sandbox_protection` metric, each with what it means.
pub(crate) const MECHANISMS: &[(&str, &str)] = &[
    (
        "landlock",
        "Landlock fully enforced (file, TCP and scope rules)",
    ),
    ("seccomp", "the seccomp system-call filter installed"),
    (
        "environment",
        "only the allow-listed environment reaches workers",
    ),
    (
        "descriptors",
        "workers inherit no descriptor beyond their pipes",
    ),
    (
        "oom_score_adj",
        "the OOM killer prefers workers over the server",
    ),
    (
        "resource_limits",
        "RLIMIT_NPROC set on workers, and no limit can be raised",
    ),
    ("network", "workers cannot open sockets"),
    ("filesystem", "workers open only their job's files"),
    ("processes", "workers cannot fork, spawn or exec"),
    ("signals", "workers cannot signal other processes"),
];

impl SelfTestReport {
    /// Probes whose outcome was not the expected one.
    pub fn failures(&self) -> Vec<&Probe> {
        self.probes.iter().filter(|probe| !probe.passed).collect()
    }

    /// Each of [`MECHANISMS`] with whether it is in force.
    pub fn protections(&self) -> Vec<(&'static str, bool)> {
        MECHANISMS
            .iter()
            .map(|&(mechanism, _)| {
                let in_force = match mechanism {
                    "landlock" => self
                        .confinement
                        .is_some_and(|confinement| confinement.landlock == LandlockState::Full),
                    "seccomp" => self
                        .confinement
                        .is_some_and(|confinement| confinement.seccomp),
                    _ => {
                        let mut probes = self
                            .probes
                            .iter()
                            .filter(|probe| probe.mechanism == mechanism)
                            .peekable();
                        probes.peek().is_some() && probes.all(|probe| probe.passed)
                    }
                };
                (mechanism, in_force)
            })
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    #[error("cannot prepare the self-test: {0}")]
    Prepare(std::io::Error),
    #[error("cannot start the self-test worker: {0}")]
    Spawn(std::io::Error),
    #[error("the self-test worker gave no report ({status}): {stderr}")]
    NoReport { status: String, stderr: String },
    #[error("the self-test worker's report is not valid: {0}")]
    InvalidReport(String),
}

/// Runs the self-test in a worker started from `executable` and returns its report, with the
/// parent's own checks (the output really written, nothing else created) added as probes.
/// Blocks for as long as the worker runs (a fraction of a second): call it off the async
/// runtime.
pub fn self_test(executable: &Path) -> Result<SelfTestReport, SelfTestError> {
    let dir = tempfile::Builder::new()
        .prefix("lottie-render-self-test-")
        .tempdir()
        .map_err(SelfTestError::Prepare)?;
    let job = SelfTestJob {
        template_path: dir.path().join("template.json"),
        neighbour_path: dir.path().join("neighbour-secret.txt"),
        output_path: dir.path().join("output.gif"),
    };
    std::fs::write(&job.template_path, b"{\"v\":\"5.7.0\"}").map_err(SelfTestError::Prepare)?;
    std::fs::write(&job.neighbour_path, b"not for workers").map_err(SelfTestError::Prepare)?;
    let job_json = serde_json::to_vec(&job)
        .map_err(|error| SelfTestError::Prepare(std::io::Error::other(error)))?;
    let limits = worker_limits(
        DEFAULT_WORKER_MEMORY_BYTES,
        SELF_TEST_DEADLINE.as_secs().saturating_add(1),
    );
    let mut command = worker_command(executable, ["worker", SELF_TEST_FLAG], limits);
    // An inheritable descriptor open while the worker starts, as a careless library in the
    // server could leave one: the worker must not get it.
    let planted = os::sandbox_probes::inheritable_duplicate(std::io::stderr().as_fd())
        .map_err(SelfTestError::Prepare)?;
    let spawned = command.spawn();
    drop(planted);
    let mut child = spawned.map_err(SelfTestError::Spawn)?;
    let process_group = child.id();
    let limits = crate::sandbox::spawn::WatchLimits {
        backstop: SELF_TEST_DEADLINE,
        stall: None,
    };
    let watchdog = Watchdog::start(process_group, limits, &CancelToken::default());
    let stderr_reader = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let _ = stderr
                .take(MAX_SELF_TEST_REPORT_BYTES as u64)
                .read_to_end(&mut tail);
            String::from_utf8_lossy(&tail).into_owned()
        })
    });
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&job_json);
    }
    let mut report = None;
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BoundedLines::new(stdout, MAX_SELF_TEST_REPORT_BYTES);
        loop {
            match lines.next_line() {
                Ok(Some(line)) => report = Some(serde_json::from_slice::<SelfTestReport>(line)),
                Ok(None) | Err(LineError::Read(_)) => break,
                Err(error @ LineError::TooLong { .. }) => {
                    report = Some(Err(serde::de::Error::custom(error)));
                    break;
                }
            }
        }
    }
    let status = child.wait();
    watchdog.finish();
    os::kill_process_group(process_group);
    let stderr = stderr_reader
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    let mut report = match report {
        Some(Ok(report)) => report,
        Some(Err(error)) => return Err(SelfTestError::InvalidReport(error.to_string())),
        None => {
            return Err(SelfTestError::NoReport {
                status: status.map_or_else(|error| error.to_string(), |status| status.to_string()),
                stderr,
            })
        }
    };
    report
        .probes
        .extend(probes::parent_checks(dir.path(), &job));
    Ok(report)
}

/// Runs the self-test (stdin to stdout) inside a worker; the body of
/// `lottie-render worker --self-test`.
pub(crate) fn worker_main() -> std::process::ExitCode {
    probes::worker_main()
}

/// Runs the self-test and logs what it found: one info line when every protection is in
/// force, else a warning naming each missing one (the worker still runs with the rest).
/// Returns each of [`MECHANISMS`] with whether it is in force (none in force when the
/// self-test could not run). Skipped (an empty list) when `executable` is not this very
/// program: only `lottie-render` knows `worker --self-test`, and a configured stand-in (a
/// wrapper, a test double) must not be started for it.
pub(crate) fn check_at_start_up(executable: &Path) -> Vec<(&'static str, bool)> {
    let same_program = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .ok()
        .zip(std::fs::canonicalize(executable).ok())
        .is_some_and(|(own, worker)| own == worker);
    if !same_program {
        tracing::info!(
            executable = %executable.display(),
            "worker sandbox self-test skipped: the worker executable is not this program"
        );
        return Vec::new();
    }
    match self_test(executable) {
        Ok(report) => {
            let protections = report.protections();
            let missing: Vec<&str> = protections
                .iter()
                .filter(|(_, in_force)| !in_force)
                .map(|(mechanism, _)| *mechanism)
                .collect();
            if missing.is_empty() {
                tracing::info!(
                    confinement = ?report.confinement,
                    "worker sandbox self-test: every protection in force"
                );
            } else {
                let failures: Vec<String> = report
                    .failures()
                    .iter()
                    .map(|probe| format!("{}: {}", probe.name, probe.observed))
                    .collect();
                tracing::warn!(
                    missing = ?missing,
                    failures = ?failures,
                    confinement = ?report.confinement,
                    confine_error = ?report.confine_error,
                    "worker sandbox self-test: some protections are not in force on this \
                     kernel; workers run with the rest"
                );
            }
            protections
        }
        Err(error) => {
            tracing::warn!(%error, "worker sandbox self-test could not run; protections unknown");
            MECHANISMS
                .iter()
                .map(|&(mechanism, _)| (mechanism, false))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(mechanism: &str, passed: bool) -> Probe {
        Probe {
            name: format!("try {mechanism}"),
            mechanism: mechanism.to_owned(),
            expected: Expected::Refused,
            observed: String::new(),
            passed,
        }
    }

    #[test]
    fn a_mechanism_is_in_force_only_when_it_was_probed_and_every_probe_of_it_passed() {
        let report = SelfTestReport {
            confinement: Some(Confinement {
                landlock: LandlockState::Partial,
                seccomp: true,
            }),
            confine_error: None,
            environment: Vec::new(),
            probes: vec![
                probe("network", true),
                probe("network", false),
                probe("filesystem", true),
            ],
        };
        let protections = report.protections();
        let in_force = |wanted: &str| {
            protections
                .iter()
                .find(|(mechanism, _)| *mechanism == wanted)
                .map(|(_, in_force)| *in_force)
        };
        assert_eq!(in_force("landlock"), Some(false));
        assert_eq!(in_force("seccomp"), Some(true));
        assert_eq!(in_force("network"), Some(false));
        assert_eq!(in_force("filesystem"), Some(true));
        assert_eq!(in_force("processes"), Some(false), "never probed");
        assert_eq!(protections.len(), MECHANISMS.len());
        assert_eq!(report.failures().len(), 1);
    }
}
