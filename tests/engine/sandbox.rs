//! The sandbox's classification of how a worker ends, with real processes standing in for
//! misbehaving workers (scripts that crash, hang, fork children or flood their output), the
//! guarantee that nothing of a killed worker is left running, and the self-test of a real
//! worker proving its environment, descriptors, network, file-system and process limits.

use crate::helpers::{corpus, spec, tempdir};
use crate::kernel_offers;
use lottie_render::error::ErrorClass;
use lottie_render::sandbox::confine::{Confinement, LandlockState};
use lottie_render::sandbox::protocol::WorkerJob;
use lottie_render::sandbox::{self, CancelToken, FailureKind, SandboxSettings};
use lottie_render::spec::{Format, Modifications};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("fake-worker");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn run(
    executable: PathBuf,
    deadline: Duration,
    cancel: &CancelToken,
    dir: &Path,
) -> sandbox::WorkerRun {
    let job = WorkerJob {
        template_path: corpus("tiny-solid-layer.json"),
        modifications: Modifications::default(),
        output: spec(Format::Gif, 30, 100, 100),
        output_path: dir.join("out.gif"),
        poster_path: None,
        threads: 1,
        fonts: Default::default(),
        images: Default::default(),
        animation: None,
        traceparent: None,
    };
    let settings = SandboxSettings {
        executable,
        memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
        deadline,
    };
    sandbox::run_worker(&job, &settings, cancel, &mut |_| {})
}

/// Live (not zombie) processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            // A zombie is dead already (its parent, init for a killed group, reaps it).
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let (_, after_name) = stat.rsplit_once(')')?;
            if after_name.trim_start().starts_with('Z') {
                return None;
            }
            std::fs::read(path.join("cmdline")).ok()
        })
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(marker))
        .collect()
}

/// How long killed processes may take to leave the process table: SIGKILL is delivered
/// asynchronously, so a scan right after the kill may still see them. Generous, and still
/// far below the minutes the scripts' children sleep, so a survivor is caught.
const GONE_LIMIT: Duration = Duration::from_secs(30);

/// Waits until no live process has `marker` in its command line; panics naming the
/// survivors after [`GONE_LIMIT`].
fn assert_none_left(marker: &str) {
    let deadline = Instant::now() + GONE_LIMIT;
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left running {GONE_LIMIT:?} after the kill: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a run killed at its deadline or on cancel may take at most: far below the 300-odd
/// seconds the scripts' children sleep (a run that waited for them would take that long),
/// far above what an unoptimised build on a loaded machine needs to kill a group.
const KILLED_WELL_BEFORE_THE_SLEEPERS_END: Duration = Duration::from_secs(150);

#[test]
fn a_worker_killed_by_a_signal_is_a_crash_with_the_signal_named() {
    let dir = tempdir();
    let run = run(
        script(dir.path(), "echo 'rlottie blew up' >&2; kill -SEGV $$"),
        Duration::from_secs(30),
        &CancelToken::default(),
        dir.path(),
    );
    let failure = run.result.unwrap_err();
    assert_eq!(
        failure.kind,
        FailureKind::Crashed {
            signal: Some(libc::SIGSEGV)
        }
    );
    assert_eq!(
        (failure.reason.as_str(), failure.class),
        ("RENDER_CRASHED", ErrorClass::Transient)
    );
    assert!(
        failure.message.contains("SIGSEGV") && failure.message.contains("rlottie blew up"),
        "{}",
        failure.message
    );
}

#[test]
fn a_worker_that_exits_without_a_result_is_a_crash() {
    let dir = tempdir();
    let run = run(
        script(
            dir.path(),
            "echo '{\"event\":\"started\",\"frames_total\":3}'; exit 3",
        ),
        Duration::from_secs(30),
        &CancelToken::default(),
        dir.path(),
    );
    let failure = run.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Crashed { signal: None });
    assert!(
        failure.message.contains("exited with code 3"),
        "{}",
        failure.message
    );
}

#[test]
fn a_hanging_worker_and_its_children_are_killed_at_the_deadline() {
    let dir = tempdir();
    let marker = "311.5";
    let started = Instant::now();
    let run = run(
        script(dir.path(), &format!("sleep {marker} & sleep {marker}")),
        Duration::from_secs(1),
        &CancelToken::default(),
        dir.path(),
    );
    let elapsed = started.elapsed();
    println!("a hanging worker with a 1 s deadline ended after {elapsed:?}");
    assert!(
        elapsed < KILLED_WELL_BEFORE_THE_SLEEPERS_END,
        "took {elapsed:?}"
    );
    let failure = run.result.unwrap_err();
    assert_eq!(
        (failure.kind, failure.class),
        (FailureKind::DeadlineExceeded, ErrorClass::Transient)
    );
    assert_none_left(marker);
    assert!(!dir.path().join("out.gif").exists());
}

#[test]
fn cancelling_kills_the_worker_group_at_once() {
    let dir = tempdir();
    let marker = "322.5";
    let cancel = CancelToken::default();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let run = run(
        script(
            dir.path(),
            &format!(
                "touch {}; sleep {marker} & sleep {marker}",
                dir.path().join("out.gif").display()
            ),
        ),
        Duration::from_secs(60),
        &cancel,
        dir.path(),
    );
    canceller.join().unwrap();
    let elapsed = started.elapsed();
    println!("a worker cancelled after 300 ms ended after {elapsed:?}");
    // Cancelled, not DeadlineExceeded: the cancel ended it, not the 60 s deadline.
    assert!(
        elapsed < KILLED_WELL_BEFORE_THE_SLEEPERS_END,
        "took {elapsed:?}"
    );
    let failure = run.result.unwrap_err();
    assert_eq!(
        (failure.kind, failure.reason.as_str()),
        (FailureKind::Cancelled, "CANCELLED")
    );
    assert_none_left(marker);
    assert!(
        !dir.path().join("out.gif").exists(),
        "the partial output was left behind"
    );
}

#[test]
fn a_real_worker_reports_its_cpu_time_and_peak_memory() {
    let dir = tempdir();
    let run = run(
        crate::helpers::executable(),
        Duration::from_secs(60),
        &CancelToken::default(),
        dir.path(),
    );
    let output = run.result.unwrap();
    assert_eq!(output.frame_count, 901, "30.03 s at 30 fps");
    assert!(run.usage.cpu > Duration::ZERO);
    // The worker's own VmHWM: megabytes, not the test process's size.
    assert!(
        run.usage.max_rss_bytes > 5 << 20 && run.usage.max_rss_bytes < 1 << 30,
        "{}",
        run.usage.max_rss_bytes
    );
}

#[test]
fn a_worker_writing_an_endless_line_is_killed_as_a_protocol_violation_and_the_parent_stays_small() {
    let dir = tempdir();
    let marker = "333.5";
    let peak_before = lottie_render::os::own_peak_rss_bytes().unwrap();
    let started = Instant::now();
    // An endless stream without a newline: a parent that buffered lines whole would grow
    // until the deadline (gigabytes a second) and then report a timeout.
    let run = run(
        script(
            dir.path(),
            &format!("sleep {marker} & yes lottie | tr -d '\\n'"),
        ),
        // Far beyond the moment the line passes its limit, so that only the line can end
        // the run (the failure says which did), however slow the machine.
        Duration::from_secs(120),
        &CancelToken::default(),
        dir.path(),
    );
    let growth = lottie_render::os::own_peak_rss_bytes()
        .unwrap()
        .saturating_sub(peak_before);
    println!(
        "endless line: killed after {:?}, the parent's peak RSS grew by {growth} bytes",
        started.elapsed()
    );
    let failure = run.result.unwrap_err();
    assert!(
        matches!(failure.kind, FailureKind::Crashed { .. })
            && failure.reason.as_str() == "RENDER_CRASHED"
            && failure.message.contains(&format!(
                "longer than {} bytes",
                sandbox::lines::MAX_WORKER_LINE_BYTES
            )),
        "{failure:?}"
    );
    // Other tests run in this process at the same time: a wide margin, far below what an
    // unbounded line would take.
    assert!(growth < 256 << 20, "the parent grew by {growth} bytes");
    assert_none_left(marker);
}

/// Every probe the self-test must have run, so that a probe silently dropped fails here.
const REQUIRED_PROBES: &[&str] = &[
    "read LOTTIE_RENDER_REDIS_URL or any variable outside the allow-list",
    "use a descriptor above stderr inherited from the parent",
    "oom_score_adj is 1000",
    "RLIMIT_NPROC is 4096",
    "connect to 127.0.0.1:6379 (Redis) over TCP",
    "open a UDP socket",
    "open a unix socket",
    "read /etc/passwd",
    "read a file beside the template that the policy does not name",
    "list the job's directory",
    "create a file in /tmp",
    "create a file beside the output",
    "open /dev/ptmx",
    "make its output world-writable (chmod)",
    "read its template",
    "write its output",
    "fork",
    "raise its address-space limit",
    "spawn /bin/true",
    "start a thread (rendering needs them)",
    "signal its parent",
    "exec /bin/true",
    "the output file holds what the worker wrote (seen by the parent)",
    "leave a new file in the job's directory (seen by the parent)",
];

#[test]
fn the_worker_self_test_is_refused_everything_forbidden_and_still_does_its_job() {
    // A secret in the server's environment, as a deployment with a Redis password has it.
    std::env::set_var(
        "LOTTIE_RENDER_REDIS_URL",
        "redis://:hunter2-secret@127.0.0.1:6379",
    );
    let started = Instant::now();
    let report = sandbox::self_test(&crate::helpers::executable()).unwrap();
    println!("the sandbox self-test took {:?}", started.elapsed());
    let names: Vec<&str> = report
        .probes
        .iter()
        .map(|probe| probe.name.as_str())
        .collect();
    for required in REQUIRED_PROBES {
        assert!(names.contains(required), "probe missing: {required}");
    }
    // Where sysfs has NUMA nodes, libnuma's file is probed (x265 sizes its threads from it),
    // and the node's memory use beside it is probed refused.
    if Path::new("/sys/devices/system/node/node0/cpumap").exists() {
        assert!(
            names
                .iter()
                .any(|name| name.contains("CPUs of NUMA node 0")),
            "{names:?}"
        );
    }
    if Path::new("/sys/devices/system/node/node0/meminfo").exists() {
        assert!(
            names
                .iter()
                .any(|name| name.contains("memory use of NUMA node 0")),
            "{names:?}"
        );
    }
    // Every mechanism this kernel offers is in force and each of its probes passed; what
    // it lacks (an older Landlock ABI, no seccomp) fails the test unless the suite is told to
    // pass without it (`kernel_offers::ALLOW_MISSING_PROTECTIONS`), which then says so.
    let describe = |probe: &&lottie_render::sandbox::self_test::Probe| {
        format!("{} ({:?}): {}", probe.name, probe.expected, probe.observed)
    };
    let (failures, excused): (Vec<_>, Vec<_>) = report
        .failures()
        .into_iter()
        .partition(|probe| kernel_offers::offers(&probe.mechanism));
    let failures: Vec<String> = failures.iter().map(describe).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if !excused.is_empty() {
        let excused: Vec<String> = excused.iter().map(describe).collect();
        kernel_offers::missing_protections(&format!(
            "not refused on this kernel: {}",
            excused.join("; ")
        ));
    }
    let landlock = if kernel_offers::landlock_offers(kernel_offers::WORKER_LANDLOCK_ABI) {
        LandlockState::Full
    } else if kernel_offers::landlock_offers(landlock::ABI::V1) {
        LandlockState::Partial
    } else {
        LandlockState::None
    };
    assert_eq!(
        report.confinement,
        Some(Confinement {
            landlock,
            seccomp: kernel_offers::seccomp_offered(),
        }),
        "{:?}",
        report.confine_error
    );
    let mut environment = report.environment.clone();
    environment.sort();
    assert_eq!(
        environment,
        ["LANG", "LC_ALL", "MALLOC_ARENA_MAX", "PATH", "SVT_LOG"]
    );
    let protections = report.protections();
    let off: Vec<&str> =
        kernel_offers::offered(protections.iter().map(|(mechanism, _)| *mechanism))
            .into_iter()
            .filter(|offered| !protections.contains(&(offered, true)))
            .collect();
    assert!(
        off.is_empty(),
        "offered by this kernel, not in force: {off:?}"
    );
}
