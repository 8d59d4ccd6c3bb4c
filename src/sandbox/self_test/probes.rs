//! The self-test's probes: what the worker records before it confines itself (environment,
//! inherited descriptors, OOM score, process limit), what it tries once confined, and the
//! parent's checks of the job directory afterwards. A refusal counts only when the kernel
//! said "permission denied" (EPERM from seccomp, EACCES from Landlock): any other failure
//! (Redis not listening, a missing file) proves nothing and fails the probe.

use super::{Expected, Probe, SelfTestJob, SelfTestReport, SELF_TEST_OUTPUT};
use crate::os;
use crate::sandbox::confine::{confine, FilePolicy};
use crate::sandbox::protocol::exit_code;
use crate::sandbox::spawn::{WORKER_ENVIRONMENT, WORKER_MAX_PROCESSES};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Where Redis listens by default: the credential-holding service a worker must not reach.
const PROBE_TCP_ADDRESS: &str = "127.0.0.1:6379";
/// How long the TCP probe waits for an answer (a refusal by seccomp is immediate).
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The planted secret the suite sets in the parent's environment.
const SECRET_VARIABLE: &str = "LOTTIE_RENDER_REDIS_URL";
/// Largest self-test job read from stdin (three paths).
const MAX_SELF_TEST_JOB_BYTES: u64 = 64 * 1024;

fn probe(name: &str, mechanism: &str, expected: Expected, observed: String, passed: bool) -> Probe {
    Probe {
        name: name.to_owned(),
        mechanism: mechanism.to_owned(),
        expected,
        observed,
        passed,
    }
}

/// An attempt that must be refused by the kernel.
fn refused<T>(name: &str, mechanism: &str, attempt: std::io::Result<T>) -> Probe {
    let (observed, passed) = match attempt {
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            (error.to_string(), true)
        }
        Err(error) => (format!("failed, but not refused: {error}"), false),
        Ok(_) => ("it worked".to_owned(), false),
    };
    probe(name, mechanism, Expected::Refused, observed, passed)
}

/// An attempt that must work.
fn works(name: &str, mechanism: &str, attempt: std::io::Result<String>) -> Probe {
    let (observed, passed) = match attempt {
        Ok(observed) => (observed, true),
        Err(error) => (error.to_string(), false),
    };
    probe(name, mechanism, Expected::Works, observed, passed)
}

pub(super) fn worker_main() -> ExitCode {
    // Before anything of ours opens a descriptor or reads a variable.
    let inherited = inherited_descriptors();
    let environment: Vec<String> = std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    let secret_visible = std::env::var_os(SECRET_VARIABLE).is_some();
    let oom_score_adj = std::fs::read_to_string("/proc/self/oom_score_adj");
    let max_processes = max_processes();
    let job = match read_job() {
        Ok(job) => job,
        Err(message) => {
            eprintln!("self-test: {message}");
            return ExitCode::from(exit_code::DETERMINISTIC as u8);
        }
    };
    // As a render does: the output exists before the worker confines itself.
    let _ = std::fs::File::create(&job.output_path);
    let policy = FilePolicy {
        readable: vec![job.template_path.clone()],
        writable: vec![job.output_path.clone()],
    };
    let (confinement, confine_error) = match confine(&policy) {
        Ok(confinement) => (Some(confinement), None),
        Err(error) => (None, Some(error.to_string())),
    };
    let mut probes = before_confinement(
        &environment,
        secret_visible,
        &inherited,
        oom_score_adj,
        max_processes,
    );
    probes.extend(network());
    probes.extend(files(&job));
    probes.extend(processes_and_signals());
    // Last: if exec worked, this process would become /bin/true and report nothing, which
    // the parent takes as a failure.
    probes.push(refused(
        "exec /bin/true",
        "processes",
        Err::<(), _>(Command::new("/bin/true").exec()),
    ));
    let report = SelfTestReport {
        confinement,
        confine_error,
        environment,
        probes,
    };
    match serde_json::to_string(&report) {
        Ok(line) => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("self-test: cannot encode the report: {error}");
            ExitCode::from(exit_code::TRANSIENT as u8)
        }
    }
}

fn read_job() -> Result<SelfTestJob, String> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_SELF_TEST_JOB_BYTES)
        .read_to_end(&mut input)
        .map_err(|error| format!("cannot read the job: {error}"))?;
    serde_json::from_slice(&input).map_err(|error| format!("job is not valid: {error}"))
}

fn before_confinement(
    environment: &[String],
    secret_visible: bool,
    inherited: &[String],
    oom_score_adj: std::io::Result<String>,
    max_processes: Option<u64>,
) -> Vec<Probe> {
    let foreign: Vec<&String> = environment
        .iter()
        .filter(|name| {
            !WORKER_ENVIRONMENT
                .iter()
                .any(|(allowed, _)| allowed == name)
        })
        .collect();
    let environment_observed = if foreign.is_empty() && !secret_visible {
        format!("only {}", environment.join(", "))
    } else {
        format!("variables outside the allow-list: {foreign:?}")
    };
    let oom_score_adj = oom_score_adj.map(|text| text.trim().to_owned());
    let oom_passed = oom_score_adj.as_deref().ok() == Some(&*os::WORKER_OOM_SCORE_ADJ.to_string());
    vec![
        probe(
            &format!("read {SECRET_VARIABLE} or any variable outside the allow-list"),
            "environment",
            Expected::Refused,
            environment_observed,
            foreign.is_empty() && !secret_visible,
        ),
        probe(
            "use a descriptor above stderr inherited from the parent",
            "descriptors",
            Expected::Refused,
            if inherited.is_empty() {
                "none inherited".to_owned()
            } else {
                format!("inherited: {}", inherited.join(", "))
            },
            inherited.is_empty(),
        ),
        probe(
            &format!("oom_score_adj is {}", os::WORKER_OOM_SCORE_ADJ),
            "oom_score_adj",
            Expected::Works,
            format!("{oom_score_adj:?}"),
            oom_passed,
        ),
        probe(
            &format!("RLIMIT_NPROC is {WORKER_MAX_PROCESSES}"),
            "resource_limits",
            Expected::Works,
            format!("{max_processes:?}"),
            max_processes == Some(WORKER_MAX_PROCESSES),
        ),
    ]
}

fn network() -> Vec<Probe> {
    let tcp = PROBE_TCP_ADDRESS
        .parse()
        .map_err(std::io::Error::other)
        .and_then(|address| std::net::TcpStream::connect_timeout(&address, PROBE_CONNECT_TIMEOUT));
    vec![
        refused(
            &format!("connect to {PROBE_TCP_ADDRESS} (Redis) over TCP"),
            "network",
            tcp,
        ),
        refused(
            "open a UDP socket",
            "network",
            std::net::UdpSocket::bind("127.0.0.1:0"),
        ),
        refused(
            "open a unix socket",
            "network",
            std::os::unix::net::UnixDatagram::unbound(),
        ),
    ]
}

fn files(job: &SelfTestJob) -> Vec<Probe> {
    let create = |path: &Path| {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path);
        if created.is_ok() {
            let _ = std::fs::remove_file(path);
        }
        created
    };
    let job_dir = job.output_path.parent().unwrap_or(Path::new("/"));
    let write_output = || -> std::io::Result<String> {
        let mut output = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&job.output_path)?;
        output.write_all(SELF_TEST_OUTPUT)?;
        drop(output);
        // Encoders read back what they wrote (MP4's faststart moves the index forward).
        let read_back = std::fs::read(&job.output_path)?;
        Ok(format!("wrote and read back {} bytes", read_back.len()))
    };
    let mut probes = vec![
        refused(
            "read /etc/passwd",
            "filesystem",
            std::fs::read("/etc/passwd"),
        ),
        refused(
            "read a file beside the template that the policy does not name",
            "filesystem",
            std::fs::read(&job.neighbour_path),
        ),
        refused(
            "list the job's directory",
            "filesystem",
            std::fs::read_dir(job_dir),
        ),
        refused(
            "create a file in /tmp",
            "filesystem",
            create(
                &Path::new("/tmp").join(format!("lottie-render-self-test-{}", std::process::id())),
            ),
        ),
        refused(
            "create a file beside the output",
            "filesystem",
            create(&job_dir.join("created-by-the-worker")),
        ),
        refused(
            "open /dev/ptmx",
            "filesystem",
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/ptmx"),
        ),
        refused(
            "make its output world-writable (chmod)",
            "filesystem",
            std::fs::set_permissions(
                &job.output_path,
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            ),
        ),
        works(
            "read its template",
            "filesystem",
            std::fs::read(&job.template_path).map(|bytes| format!("read {} bytes", bytes.len())),
        ),
        works("write its output", "filesystem", write_output()),
    ];
    // x265 sizes its thread pool from libnuma's CPUs per node (`confine::numa_cpu_maps`): those
    // files only, not the node's memory use beside them. A kernel without NUMA in sysfs has
    // neither, for anyone, so nothing to probe there. (Landlock does not fence `stat`, so the
    // check works confined.)
    if Path::new(NUMA_NODE0_CPUS).exists() {
        probes.push(works(
            "read the CPUs of NUMA node 0 (libnuma, which sizes x265's threads)",
            "filesystem",
            std::fs::read_to_string(NUMA_NODE0_CPUS).map(|cpus| format!("cpumap {}", cpus.trim())),
        ));
    }
    if Path::new(NUMA_NODE0_MEMORY).exists() {
        probes.push(refused(
            "read the memory use of NUMA node 0 (the host's)",
            "filesystem",
            std::fs::read(NUMA_NODE0_MEMORY),
        ));
    }
    probes
}

/// The file libnuma reads for the CPUs of node 0.
const NUMA_NODE0_CPUS: &str = "/sys/devices/system/node/node0/cpumap";
/// The host's memory use on node 0, beside it.
const NUMA_NODE0_MEMORY: &str = "/sys/devices/system/node/node0/meminfo";

fn processes_and_signals() -> Vec<Probe> {
    let spawn = Command::new("/bin/true")
        .spawn()
        .map(|mut child| child.wait());
    vec![
        refused("fork", "processes", os::sandbox_probes::try_fork()),
        refused(
            "raise its address-space limit",
            "resource_limits",
            os::sandbox_probes::try_raise_address_space_limit(),
        ),
        refused("spawn /bin/true", "processes", spawn),
        works(
            "start a thread (rendering needs them)",
            "processes",
            std::thread::spawn(|| "a thread ran".to_owned())
                .join()
                .map_err(|_| std::io::Error::other("the thread panicked")),
        ),
        refused(
            "signal its parent",
            "signals",
            os::sandbox_probes::may_signal(std::os::unix::process::parent_id()),
        ),
    ]
}

/// Descriptors above stderr open in this process, with what they point to; the one that
/// lists /proc/self/fd is left out.
fn inherited_descriptors() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return vec!["cannot list /proc/self/fd".to_owned()];
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let number: i32 = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).unwrap_or_default();
            let listing = target.starts_with("/proc") && target.ends_with("fd");
            (number > 2 && !listing).then(|| format!("{number} → {}", target.display()))
        })
        .collect()
}

/// The soft RLIMIT_NPROC, from /proc/self/limits.
fn max_processes() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max processes"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// What the parent checks once the worker is gone: its output holds what it wrote, and it
/// created nothing else in the job's directory.
pub(super) fn parent_checks(dir: &Path, job: &SelfTestJob) -> Vec<Probe> {
    let output = std::fs::read(&job.output_path);
    let output_written = output.as_deref().ok() == Some(SELF_TEST_OUTPUT);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| Some(entry.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let expected: Vec<String> = {
        let mut expected: Vec<String> = [&job.template_path, &job.neighbour_path, &job.output_path]
            .iter()
            .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned()))
            .collect();
        expected.sort();
        expected
    };
    vec![
        probe(
            "the output file holds what the worker wrote (seen by the parent)",
            "filesystem",
            Expected::Works,
            match &output {
                Ok(bytes) => format!("{} bytes", bytes.len()),
                Err(error) => error.to_string(),
            },
            output_written,
        ),
        probe(
            "leave a new file in the job's directory (seen by the parent)",
            "filesystem",
            Expected::Refused,
            format!("{names:?}"),
            names == expected,
        ),
    ]
}
