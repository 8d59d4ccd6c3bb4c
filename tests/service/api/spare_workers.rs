//! Spare workers (`--spare-workers`): a render worker started ahead of its job takes the
//! next job, is replaced when taken or when it dies while waiting, has the job's budgets
//! counted from the job and not from its start, and nothing of it outlives the server.
//! Spares are forked from the worker zygote: such a worker is the server's child with the
//! fence of a started one, its crash is classified and quarantined as any worker's, and a
//! zygote that dies is replaced without losing the spares it forked.

use crate::helpers::{
    open_descriptors, own_worker, small_request, spawn_app_with, wait_for_workers,
    worker_processes, zygote_processes, ServerProcess, TestApp,
};
use lottie_render::grpc::proto::{self, JobState};
use std::path::Path;
use std::time::{Duration, Instant};

const BALL: &str = "slots-ball-colors-opacity.json";
/// rlottie's own regression file: renders frame 25 for ever (a job that never finishes).
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// How long a replacement spare may take to appear (the supervisor looks every 250 ms, and
/// the first replacement waits 100 ms).
const REPLACEMENT_LIMIT: Duration = Duration::from_secs(10);

/// A server with one worker and one spare (unless `configure` says otherwise), whose workers
/// run as `executable`.
async fn app_with_spare(
    executable: &Path,
    configure: impl FnOnce(&mut lottie_render::config::ServerSettings) + Send,
) -> TestApp {
    let executable = executable.to_path_buf();
    spawn_app_with(move |settings| {
        settings.render_workers.worker_executable = Some(executable);
        settings.render_workers.spare_workers = 1;
        configure(settings);
    })
    .await
}

/// The one worker process of `executable` alive now (the waiting spare), once there is one.
async fn the_spare(executable: &Path) -> u32 {
    wait_for_workers(executable, 1).await;
    worker_processes(executable)[0].0
}

/// Waits until the only worker of `executable` is another process than `previous`.
async fn a_spare_other_than(executable: &Path, previous: u32) -> u32 {
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    loop {
        let workers = worker_processes(executable);
        if let [(pid, _)] = workers.as_slice() {
            if *pid != previous {
                return *pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no new spare replaced {previous}: {workers:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The one zygote of `executable` alive now, once there is one.
async fn the_zygote(executable: &Path) -> u32 {
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    loop {
        if let [(pid, _)] = zygote_processes(executable).as_slice() {
            return *pid;
        }
        assert!(Instant::now() < deadline, "no zygote started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `sample` is `value` (a counter bumped a moment after what the test saw).
async fn metric_becomes(app: &TestApp, sample: &str, value: f64) {
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    loop {
        let now = app.metric_or_zero(sample).await;
        if now == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sample} stayed {now}, not {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Field `index` (1-based, as in proc(5)) of `/proc/PID/stat`.
fn stat_field(pid: u32, index: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after_name) = stat.rsplit_once(')').unwrap();
    after_name
        .split_whitespace()
        .nth(index - 3)
        .unwrap()
        .parse()
        .unwrap()
}

fn kill(signal: &str, pid: u32) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

fn is_alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie is not alive either.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

async fn render_succeeds(app: &TestApp, template_id: &str, width: u32) {
    let mut request = small_request(template_id, proto::Format::Mp4);
    if let Some(output) = request.output.as_mut() {
        output.width = width;
    }
    app.render(request).await;
}

/// [`render_succeeds`], then checks that `hits` jobs in all have been served by a spare.
async fn render_succeeds_on_a_spare(app: &TestApp, template_id: &str, width: u32, hits: f64) {
    render_succeeds(app, template_id, width).await;
    assert_eq!(
        app.metric("lottie_render_spare_worker_hits_total").await,
        hits
    );
}

#[tokio::test]
async fn a_job_is_served_by_the_worker_that_was_waiting_before_it_was_submitted() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let template = app.create_template(BALL).await;
    let spare = the_spare(&executable).await;

    render_succeeds(&app, &template.template_id, 100).await;

    assert_eq!(
        app.metric("lottie_render_spare_worker_hits_total").await,
        1.0
    );
    // The spare ran the job and exited (one job, one process); the next spare waits.
    assert!(!is_alive(spare), "the spare {spare} is still running");
    let next = a_spare_other_than(&executable, spare).await;
    // No worker was started for the job itself: the first spare and its replacement.
    assert_eq!(app.metric("lottie_render_workers_started_total").await, 2.0);

    render_succeeds_on_a_spare(&app, &template.template_id, 101, 2.0).await;
    assert!(!is_alive(next));
    app.stop().await;
}

#[tokio::test]
async fn a_spare_killed_while_waiting_is_replaced_and_the_next_job_runs_on_the_replacement() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let template = app.create_template(BALL).await;
    let spare = the_spare(&executable).await;

    std::process::Command::new("kill")
        .args(["-KILL", &spare.to_string()])
        .status()
        .unwrap();
    let replacement = a_spare_other_than(&executable, spare).await;
    assert_eq!(
        app.metric("lottie_render_spare_worker_deaths_total").await,
        1.0
    );

    render_succeeds_on_a_spare(&app, &template.template_id, 100, 1.0).await;
    assert!(!is_alive(replacement));
    app.stop().await;
}

#[tokio::test]
async fn a_spare_that_waited_longer_than_a_jobs_deadline_still_renders_the_job() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |settings| settings.jobs.max_job_seconds = 1.0).await;
    let template = app.create_template(BALL).await;
    let spare = the_spare(&executable).await;
    // The wait is the point: longer than any job's deadline here (1 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(is_alive(spare));

    render_succeeds_on_a_spare(&app, &template.template_id, 100, 1.0).await;
    app.stop().await;
}

#[tokio::test]
async fn a_spare_handed_a_job_has_the_jobs_cpu_budget_not_the_loosest_it_started_with() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let template = app.create_template(NEVER_FINISHES).await;
    let spare = the_spare(&executable).await;
    let cpu_limit = |pid: u32| -> u64 {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let line = limits
            .lines()
            .find(|line| line.starts_with("Max cpu time"))
            .unwrap()
            .to_owned();
        line.split_whitespace().nth(3).unwrap().parse().unwrap()
    };
    let waiting = cpu_limit(spare);

    let job = app
        .start_running(small_request(&template.template_id, proto::Format::Webm))
        .await;
    // A small job's deadline is about 30 s: its CPU budget is tens of seconds per core,
    // far below the 30 minutes per core a spare starts with.
    // (Polled: the job is RUNNING a moment before the spare is handed it.)
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    let mut running = cpu_limit(spare);
    while running >= waiting / 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        running = cpu_limit(spare);
    }
    assert!(
        running < waiting / 10,
        "the job runs under {running} s of CPU; the spare waited under {waiting} s"
    );
    app.cancel(&job.job_id).await;
    app.stop().await;
}

#[tokio::test]
async fn as_many_spares_wait_as_asked_for_and_shutdown_ends_them_all() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |settings| {
        settings.render_workers.spare_workers = 2
    })
    .await;
    wait_for_workers(&executable, 2).await;
    assert_eq!(zygote_processes(&executable).len(), 1);
    app.stop().await;
    assert_eq!(worker_processes(&executable), []);
    assert_eq!(zygote_processes(&executable), []);
}

#[tokio::test]
async fn shutdown_leaves_no_spare_worker_behind() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let spare = the_spare(&executable).await;
    let zygote = the_zygote(&executable).await;
    app.stop().await;
    assert_eq!(worker_processes(&executable), []);
    assert!(!is_alive(spare));
    assert!(!is_alive(zygote));
}

#[tokio::test]
async fn the_serve_process_stopped_by_sigterm_leaves_no_spare_worker_behind() {
    let server = ServerProcess::start(&["--spare-workers", "1", "--workers", "1"]);
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    while server.workers().is_empty() {
        assert!(Instant::now() < deadline, "no spare worker started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let executable = server.worker_executable.clone();
    assert_eq!(zygote_processes(&executable).len(), 1);
    assert!(server.stop().await, "the server did not exit cleanly");
    assert_eq!(worker_processes(&executable), []);
    assert_eq!(zygote_processes(&executable), []);
}

#[tokio::test]
async fn a_spare_forked_from_the_zygote_is_the_servers_child_with_the_fence_of_a_started_worker() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let spare = the_spare(&executable).await;
    let zygote = the_zygote(&executable).await;

    // (Counted a moment after the zygote answers with the spare's pid.)
    metric_becomes(&app, "lottie_render_spare_workers_forked_total", 1.0).await;
    assert_eq!(
        app.metric("lottie_render_worker_zygote_starts_total").await,
        1.0
    );
    // The server (this test process) is the parent of both: it reaps the spare and reads its
    // usage, and the kernel kills both with it.
    let server = i64::from(std::process::id());
    assert_eq!(stat_field(spare, 4), server, "parent of the spare");
    assert_eq!(stat_field(zygote, 4), server, "parent of the zygote");
    assert_eq!(
        stat_field(spare, 5),
        i64::from(spare),
        "its own process group"
    );
    // Its three pipes, and /proc/self/status, which every worker opens before confinement
    // (its peak memory probe): nothing of the zygote's or the server's.
    let mut descriptors = open_descriptors(&spare);
    descriptors.sort();
    let names: Vec<&str> = descriptors.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["0", "1", "2", "3"], "{descriptors:?}");
    for (name, target) in &descriptors[..3] {
        assert!(target.starts_with("pipe:"), "fd {name} is {target}");
    }
    assert_eq!(descriptors[3].1, format!("/proc/{spare}/status"));
    crate::helpers::assert_worker_environment_and_oom_score(&spare);
    let limits = std::fs::read_to_string(format!("/proc/{spare}/limits")).unwrap();
    let core = limits
        .lines()
        .find(|line| line.starts_with("Max core file size"))
        .unwrap();
    assert_eq!(core.split_whitespace().nth(4), Some("0"), "{core}");
    app.stop().await;
}

#[tokio::test]
async fn a_zygote_killed_while_spares_wait_is_replaced_and_the_waiting_spare_still_renders() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let template = app.create_template(BALL).await;
    let spare = the_spare(&executable).await;
    let zygote = the_zygote(&executable).await;

    kill("-KILL", zygote);
    // The spare it forked is the server's, not the zygote's: it waits on.
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    while app.metric("lottie_render_worker_zygote_deaths_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the zygote's death went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(is_alive(spare));
    render_succeeds_on_a_spare(&app, &template.template_id, 100, 1.0).await;

    // The spare's replacement comes from a new zygote (or, while that one waits out its
    // delay, by exec), and the next job runs on it.
    let replacement = a_spare_other_than(&executable, spare).await;
    let new_zygote = the_zygote(&executable).await;
    assert_ne!(new_zygote, zygote);
    metric_becomes(&app, "lottie_render_worker_zygote_starts_total", 2.0).await;
    render_succeeds(&app, &template.template_id, 101).await;
    assert!(!is_alive(replacement));
    app.stop().await;
    assert_eq!(zygote_processes(&executable), []);
}

#[tokio::test]
async fn a_forked_worker_that_aborts_is_retried_on_a_fresh_worker_then_quarantined() {
    let (_dir, executable) = own_worker();
    let app = app_with_spare(&executable, |_| {}).await;
    let template = app.create_template(NEVER_FINISHES).await;
    let spare = the_spare(&executable).await;
    let job = app
        .start_running(small_request(&template.template_id, proto::Format::Webm))
        .await;
    // The spare has the job once it has confined itself (seccomp filter mode).
    let confined = || {
        std::fs::read_to_string(format!("/proc/{spare}/status"))
            .is_ok_and(|status| status.lines().any(|line| line == "Seccomp:\t2"))
    };
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    while !confined() {
        assert!(Instant::now() < deadline, "the spare never took the job");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A crash as rlottie's C++ would have one (an abort; a SIGSEGV sent from outside is
    // swallowed once by Rust's stack-overflow handler): the exit status the server reads (it
    // is the forked worker's parent) says SIGABRT.
    kill("-ABRT", spare);
    // The retry runs on a worker started by exec for it (command line without --zygote).
    let retry_prefix = format!("{} worker", executable.display());
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    let retry = loop {
        let started: Vec<u32> = worker_processes(&executable)
            .into_iter()
            .filter(|(_, cmdline)| cmdline.trim_end() == retry_prefix)
            .map(|(pid, _)| pid)
            .collect();
        if let [pid] = started.as_slice() {
            break *pid;
        }
        assert!(
            Instant::now() < deadline,
            "no retry worker started: {:?}, job {:?}",
            worker_processes(&executable),
            app.get_job(&job.job_id).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(app.metric("lottie_render_worker_crashes_total").await, 1.0);
    kill("-ABRT", retry);

    let last = app.finished(&job.job_id).await;
    assert_eq!(last.state, JobState::Failed as i32, "{last:?}");
    let error = last.error.clone().unwrap();
    assert_eq!(error.reason, "RENDER_CRASHED");
    assert!(error.message.contains("SIGABRT"), "{}", error.message);
    assert_eq!(app.metric("lottie_render_worker_crashes_total").await, 2.0);
    assert_eq!(
        app.metric("lottie_render_quarantined_fingerprints").await,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_server_killed_outright_leaves_no_zygote_or_forked_spare_behind() {
    let mut server = ServerProcess::start(&["--spare-workers", "2", "--workers", "1"]);
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    while server.workers().len() < 2 {
        assert!(Instant::now() < deadline, "no spare workers started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let executable = server.worker_executable.clone();
    assert_eq!(zygote_processes(&executable).len(), 1);

    // No shutdown runs: the parent-death signal (or the end of their stdin) ends them.
    kill("-KILL", server.pid());
    assert!(server.wait_for_exit(REPLACEMENT_LIMIT).await.is_some());
    let deadline = Instant::now() + REPLACEMENT_LIMIT;
    while !(worker_processes(&executable).is_empty() && zygote_processes(&executable).is_empty()) {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?} {:?}",
            worker_processes(&executable),
            zygote_processes(&executable)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
