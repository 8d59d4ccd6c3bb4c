//! RenderService end to end: real worker processes rendering real templates, watched,
//! cancelled, timed out, crashed, drained at shutdown and expired.

use crate::helpers::{
    color, crashing_worker, health_status, own_worker, pushback_ms, reason, refusal_delay,
    small_request, spawn_app, spawn_app_with, state, wait_for_workers, with_idempotency_key,
    worker_processes, WATCH_LIMIT,
};
use lottie_render::grpc::proto::{self, JobState};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

/// rlottie's own regression file: renders frame 25 for ever (a job that never finishes).
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
const BALL: &str = "slots-ball-colors-opacity.json";

/// `request` at another output width (another fingerprint).
fn sized(mut request: proto::RenderRequest, width: u32) -> proto::RenderRequest {
    if let Some(output) = request.output.as_mut() {
        output.width = width;
    }
    request
}

/// How long a test waits for the health service to change its answer: generous, as the
/// change itself is immediate and only a loaded machine delays seeing it.
const HEALTH_FLIP_LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_valid_request_is_queued_then_succeeds_and_its_output_is_the_video_asked_for() {
    let app = spawn_app().await;
    let template = app.create_template(BALL).await;
    let mut request = small_request(&template.template_id, proto::Format::Mp4);
    request.modifications = Some(proto::Modifications {
        texts: Default::default(),
        // The channel bounds themselves are valid.
        colors: [("ball_color".to_owned(), color(1.0, 0.0, 0.0))].into(),
        ..Default::default()
    });
    let submitted = app.submit(request).await.unwrap();
    assert_eq!(state(&submitted), JobState::Queued);
    assert_eq!(submitted.frames_total, 61);
    assert!(submitted.created_at.is_some() && submitted.started_at.is_none());

    let seen = app.watch(&submitted.job_id, WATCH_LIMIT).await;
    let last = seen.last().unwrap();
    assert_eq!(state(last), JobState::Succeeded, "{last:?}");
    assert!(last.started_at.is_some() && last.finished_at.is_some());
    // States only move forward; progress only grows, in steps of at most 5%.
    let states: Vec<JobState> = seen.iter().map(state).collect();
    assert!(
        states.windows(2).all(|w| w[0] as i32 <= w[1] as i32),
        "{states:?}"
    );
    assert!(states.contains(&JobState::Running), "{states:?}");
    let running: Vec<u32> = seen
        .iter()
        .filter(|job| state(job) != JobState::Queued)
        .map(|job| job.frames_done)
        .collect();
    let step = last.frames_total.div_ceil(20);
    assert!(
        running
            .windows(2)
            .all(|w| w[0] <= w[1] && w[1] - w[0] <= step),
        "progress {running:?}"
    );
    assert_eq!(last.frames_done, 61);

    let output = last.output.clone().unwrap();
    assert_eq!(
        (output.content_type.as_str(), output.width, output.height),
        ("video/mp4", 100, 100)
    );
    assert_eq!((output.fps, output.frame_count), (30, 61));
    let bytes = app.download(&submitted.job_id).await.unwrap();
    assert_eq!(bytes.len() as u64, output.size_bytes);
    let digest: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(digest, output.sha256);
    let file = app.data_dir.path().join("probe.mp4");
    std::fs::write(&file, &bytes).unwrap();
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=codec_name,width,height,nb_read_frames",
        ])
        .args(["-of", "csv=p=0"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        "h264,100,100,61"
    );

    assert_eq!(
        app.metric("lottie_render_jobs_finished_total{outcome=\"succeeded\"}")
            .await,
        1.0
    );
    assert_eq!(
        app.metric("lottie_render_grpc_requests_total{method=\"SubmitRender\",code=\"Ok\"}")
            .await,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn cancelling_kills_a_running_worker_and_takes_a_queued_job_off_the_queue() {
    let (_dir, executable) = own_worker();
    let app = spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(executable.clone())
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let running = app.submit(request.clone()).await.unwrap();
    // Another request (an identical one would share the first one's render).
    let waiting = app.submit(sized(request, 101)).await.unwrap();
    app.wait_for_state(&running.job_id, JobState::Running).await;
    wait_for_workers(&executable, 1).await;

    let cancelled = app.cancel(&waiting.job_id).await;
    assert_eq!(state(&cancelled), JobState::Cancelled);
    assert!(cancelled.error.is_none() && cancelled.started_at.is_none());

    let cancelled = app.cancel(&running.job_id).await;
    assert_eq!(state(&cancelled), JobState::Cancelled, "{cancelled:?}");
    assert!(cancelled.error.is_none());
    assert_eq!(worker_processes(&executable), []);
    let outputs: Vec<_> = std::fs::read_dir(app.data_dir.path().join("outputs"))
        .unwrap()
        .collect();
    assert!(outputs.is_empty(), "partial output left: {outputs:?}");
    // Cancelling again answers the job as it is; it has no output to download.
    let again = app.cancel(&running.job_id).await;
    assert_eq!(again, cancelled);
    let status = app.download(&running.job_id).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
    app.stop().await;
}

/// A template that never finishes, with a one-second budget: its worker burns its CPU budget
/// (two seconds of CPU, all its threads together) and fails for good, RENDER_CPU_EXCEEDED, not
/// retryable, the same request refused at once afterwards (issue 43: a verdict of its work,
/// not of the machine). Only on a machine that gives it less than a quarter of a core does the
/// wall-clock backstop come first: RENDER_DEADLINE_EXCEEDED, retryable, saying so. Either way
/// it leaves nothing behind.
#[tokio::test]
async fn a_render_past_its_deadline_fails_by_its_cpu_time_verdict_and_leaves_nothing_behind() {
    let (_dir, executable) = own_worker();
    let app = spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(executable.clone());
        settings.jobs.max_job_seconds = 1.0;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let job = app.submit_small(&template, proto::Format::Gif).await;
    let seen = app.watch(&job.job_id, WATCH_LIMIT).await;
    let last = seen.last().unwrap();
    assert_eq!(state(last), JobState::Failed);
    let error = last.error.clone().unwrap();
    if error.retryable {
        assert_eq!(error.reason, "RENDER_DEADLINE_EXCEEDED", "{error:?}");
        assert!(error.message.contains("the machine is loaded"), "{error:?}");
        let delay = error.retry_after.unwrap();
        assert!(delay.seconds >= 1, "{delay:?}");
    } else {
        assert_eq!(error.reason, "RENDER_CPU_EXCEEDED", "{error:?}");
        assert!(
            error.message.contains("more work than the budget"),
            "{error:?}"
        );
        assert!(error.retry_after.is_none(), "{error:?}");
        let again = app
            .renders()
            .submit_render(with_idempotency_key(
                small_request(&template.template_id, proto::Format::Gif),
                &crate::helpers::unique_key(),
            ))
            .await
            .unwrap_err();
        assert_eq!(reason(&again), "RENDER_QUARANTINED", "{again:?}");
    }
    assert_eq!(worker_processes(&executable), []);
    assert_eq!(
        std::fs::read_dir(app.data_dir.path().join("outputs"))
            .unwrap()
            .count(),
        0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_worker_crash_is_retried_once_then_quarantined_and_refused_without_spawning() {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let script = crashing_worker(dir.path(), &starts);
    let app =
        spawn_app_with(|settings| settings.render_workers.worker_executable = Some(script.clone()))
            .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    let key = crate::helpers::unique_key();
    let keyed = |request: proto::RenderRequest| {
        let mut call = tonic::Request::new(request);
        call.metadata_mut()
            .insert("idempotency-key", key.parse().unwrap());
        call
    };
    let job = app
        .renders()
        .submit_render(keyed(request.clone()))
        .await
        .unwrap()
        .into_inner();
    let seen = app.watch(&job.job_id, WATCH_LIMIT).await;
    let last = seen.last().unwrap();
    assert_eq!(state(last), JobState::Failed);
    let error = last.error.clone().unwrap();
    assert_eq!(error.reason, "RENDER_CRASHED");
    assert!(!error.retryable && error.retry_after.is_none());
    assert!(error.message.contains("SIGSEGV"), "{}", error.message);
    let count = || std::fs::read_to_string(&starts).unwrap().lines().count();
    assert_eq!(count(), 2, "one retry on a fresh worker");
    assert_eq!(
        health_status(&app.channel, "").await,
        ServingStatus::Serving as i32
    );

    // A retry with the same key gets the same failed job at once…
    let replayed = app
        .renders()
        .submit_render(keyed(request.clone()))
        .await
        .unwrap();
    assert_eq!(
        replayed.metadata().get("idempotent-replayed").unwrap(),
        "true"
    );
    assert_eq!(replayed.get_ref().job_id, job.job_id);
    // …and the same request under a new key (same fingerprint) is refused at the boundary:
    // no worker starts.
    let status = app.submit(request.clone()).await.unwrap_err();
    let quarantined = refusal_delay(&status, Code::InvalidArgument, "RENDER_QUARANTINED");
    assert_eq!(quarantined, None, "do not retry");
    assert_eq!(app.metric("lottie_render_worker_crashes_total").await, 2.0);
    // A verdict on the request, not the service's failure (the render-success SLO's split).
    assert_eq!(
        app.metric(r#"lottie_render_jobs_failed_total{reason="RENDER_CRASHED",retryable="false"}"#)
            .await,
        1.0
    );
    assert_eq!(
        app.metric("lottie_render_quarantined_fingerprints").await,
        1.0
    );
    assert_eq!(
        app.metric("lottie_render_rejections_total{method=\"SubmitRender\",code=\"InvalidArgument\",reason=\"RENDER_QUARANTINED\"}")
            .await,
        1.0
    );
    // Another request on the same template is another fingerprint: it is accepted (and
    // crashes twice in its turn).
    let mut other = request;
    other.output.as_mut().unwrap().fps = 60;
    let other = app.submit(other).await.unwrap();
    let seen = app.watch(&other.job_id, WATCH_LIMIT).await;
    assert_eq!(state(seen.last().unwrap()), JobState::Failed);
    // No worker started for the refused call: a job it had queued anyway would have been
    // ahead of this one (one worker, first in first out), so its worker would have started
    // by now.
    assert_eq!(count(), 4, "2 for the first request, 2 for the other one");
    app.stop().await;
}

#[tokio::test]
async fn a_full_queue_is_resource_exhausted_with_a_retry_delay() {
    let app = spawn_app_with(|settings| {
        settings.jobs.queue_capacity = 1;
        settings.application.shutdown_grace_seconds = 0.1;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    app.start_running(request.clone()).await;
    // Distinct requests: identical ones would share one render and need no queue slot.
    let queued = app.submit(sized(request.clone(), 101)).await.unwrap();
    assert_eq!(state(&queued), JobState::Queued);
    let status = app.submit(sized(request, 102)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(details.error_info().unwrap().reason, "QUEUE_FULL");
    let delay = details.retry_info().unwrap().retry_delay.unwrap();
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    let pushback = pushback_ms(&status);
    assert_eq!(pushback, delay.as_millis() as u64);
    let retry_after: u64 = status
        .metadata()
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    assert_eq!(app.metric("lottie_render_queue_depth").await, 1.0);
    app.stop().await;
}

#[tokio::test]
async fn shutdown_refuses_new_work_cancels_running_renders_retryably_and_leaves_no_process() {
    let (_dir, executable) = own_worker();
    let mut app = spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(executable.clone());
        settings.application.shutdown_grace_seconds = 0.5;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    let job = app.start_running(request.clone()).await;
    wait_for_workers(&executable, 1).await;
    let mut watch = app.open_watch(&job.job_id).await;

    // A client-side health check keeps a Watch open; it must not hold the shutdown up.
    let mut health_watch = HealthClient::new(app.channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health_watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );

    app.begin_shutdown();
    // The flip is immediate; a loaded machine may take a while to show it.
    let deadline = tokio::time::Instant::now() + HEALTH_FLIP_LIMIT;
    while health_status(&app.channel, "").await != ServingStatus::NotServing as i32 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still SERVING {HEALTH_FLIP_LIMIT:?} after the shutdown began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = app.submit(request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.get_error_details().error_info().unwrap().reason,
        "SERVER_DRAINING"
    );
    assert!(status.metadata().get("retry-after").is_some());

    let mut last = None;
    while let Some(snapshot) = watch.message().await.unwrap() {
        last = Some(snapshot);
    }
    let last = last.unwrap();
    assert_eq!(state(&last), JobState::Cancelled);
    let error = last.error.unwrap();
    assert_eq!(error.reason, "SERVER_SHUTTING_DOWN");
    assert!(error.retryable && error.retry_after.is_some());
    tokio::time::timeout(Duration::from_secs(30), app.stop())
        .await
        .expect("the server stopped despite an open health Watch");
    assert_eq!(worker_processes(&executable), []);
}

/// Retention of the expiry test: long enough that the job is normally looked at before it
/// expires (which is checked then, not assumed), short enough for a quick test.
const SHORT_RETENTION_SECONDS: u64 = 5;
/// How long the expiry test waits for the sweep (every quarter of the retention) to remove
/// the job: far beyond the retention, as a loaded machine may run the sweep late.
const EXPIRY_LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn finished_jobs_and_their_outputs_expire_after_the_retention() {
    let retention = Duration::from_secs(SHORT_RETENTION_SECONDS);
    let app =
        spawn_app_with(|settings| settings.jobs.retention_seconds = SHORT_RETENTION_SECONDS).await;
    let template = app.create_template(BALL).await;
    let job = app.submit_small(&template, proto::Format::Gif).await;
    let seen = app.watch(&job.job_id, WATCH_LIMIT).await;
    let done = seen.last().unwrap();
    assert_eq!(state(done), JobState::Succeeded);
    // The server's own clock (this process's): the output was written after the job
    // started, the job finished at `finished_at`; neither may go before its retention.
    let time = |timestamp: Option<prost_types::Timestamp>| {
        std::time::SystemTime::try_from(timestamp.unwrap()).unwrap()
    };
    let output_kept_until = time(done.started_at) + retention;
    let job_kept_until = time(done.finished_at) + retention;
    let output = app
        .data_dir
        .path()
        .join("outputs")
        .join(format!("{}.gif", job.job_id));
    let deadline = tokio::time::Instant::now() + EXPIRY_LIMIT;
    let mut looks = 0;
    loop {
        let output_exists = output.exists();
        let answer = app
            .renders()
            .get_render_job(proto::GetRenderJobRequest {
                job_id: job.job_id.clone(),
            })
            .await;
        // Taken after the look: whatever was gone was gone by then.
        let looked_by = std::time::SystemTime::now();
        looks += 1;
        assert!(
            output_exists || looked_by >= output_kept_until,
            "the output was gone before its retention (look {looks})"
        );
        let job_exists = match answer {
            Ok(_) => true,
            Err(status) => {
                assert_eq!(status.code(), Code::NotFound, "{status:?}");
                false
            }
        };
        assert!(
            job_exists || looked_by >= job_kept_until,
            "the job was gone before its retention (look {looks})"
        );
        if !job_exists && !output_exists {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job there: {job_exists}, output there: {output_exists}, {EXPIRY_LIMIT:?} after \
             it finished (retention {retention:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("expired after {looks} looks");
    app.stop().await;
}

#[test]
fn serve_exits_zero_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // A free port: bound, read and released (the server binds it right after).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_lottie-render"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(up, "the server never listened");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
