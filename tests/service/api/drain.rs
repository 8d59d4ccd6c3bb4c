//! The drain on SIGTERM, on the real `lottie-render serve` process: a queued job is cancelled
//! as retryable `SERVER_SHUTTING_DOWN`, a render running when the drain starts finishes
//! within the grace period and succeeds, new submissions are refused UNAVAILABLE
//! `SERVER_DRAINING` with a retry delay, and the process exits 0. The running render is held
//! at its start (its worker stopped, see `helpers::Hold`) until the drain is under way, so the
//! job is certainly still running when the drain begins: with a grace of 0 it would be
//! cancelled.

use crate::helpers::{
    corpus, create_request, process_state, refusal_delay, rest_of, state, unique_key,
    with_idempotency_key, Hold, ServerProcess,
};
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::grpc::proto::{self, JobState};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BALL: &str = "slots-ball-colors-opacity.json";
/// Far longer than the held render takes once resumed, even on a loaded machine.
const GRACE_SECONDS: &str = "300";
/// How long the test waits for any one thing (a worker, the drain, the exit) before failing.
const PATIENCE: Duration = Duration::from_secs(120);

async fn submit(
    channel: &Channel,
    request: proto::RenderRequest,
) -> Result<proto::RenderJob, tonic::Status> {
    RenderServiceClient::new(channel.clone())
        .submit_render(with_idempotency_key(request, &unique_key()))
        .await
        .map(tonic::Response::into_inner)
}

async fn get_job(channel: &Channel, job_id: &str) -> proto::RenderJob {
    let request = proto::GetRenderJobRequest {
        job_id: job_id.into(),
    };
    let mut client = RenderServiceClient::new(channel.clone());
    client.get_render_job(request).await.unwrap().into_inner()
}

fn request(template_id: &str, side: u32) -> proto::RenderRequest {
    proto::RenderRequest {
        template_id: template_id.into(),
        modifications: None,
        output: Some(proto::OutputSpec {
            format: proto::Format::Mp4 as i32,
            fps: 60,
            width: side,
            height: side,
            background: None,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    }
}

async fn watch(channel: &Channel, job_id: &str) -> tonic::Streaming<proto::RenderJob> {
    let request = proto::WatchRenderJobRequest {
        job_id: job_id.into(),
    };
    let mut client = RenderServiceClient::new(channel.clone());
    client.watch_render_job(request).await.unwrap().into_inner()
}

#[tokio::test]
async fn on_sigterm_a_queued_job_is_cancelled_retryably_a_running_one_finishes_and_the_process_exits_zero(
) {
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let script = hold.script.clone();
    let mut server = ServerProcess::start_with_worker(
        move |_| script,
        &["--workers", "1", "--shutdown-grace-seconds", GRACE_SECONDS],
        &[],
    );
    let channel = server.channel().await;
    let template = TemplateServiceClient::new(channel.clone())
        .create_template(create_request(BALL, corpus(BALL)))
        .await
        .unwrap()
        .into_inner();

    // The running job: its worker is held at its start.
    hold.engage();
    let running = submit(&channel, request(&template.template_id, 480))
        .await
        .unwrap();
    let worker = hold.wait_for_held(1).await[0];
    hold.disengage();
    assert_eq!(
        state(&get_job(&channel, &running.job_id).await),
        JobState::Running
    );
    // A different request (another fingerprint) waits: one worker.
    let queued = submit(&channel, request(&template.template_id, 240))
        .await
        .unwrap();
    assert_eq!(state(&queued), JobState::Queued);
    let running_watch = watch(&channel, &running.job_id).await;
    let queued_watch = watch(&channel, &queued.job_id).await;

    server.terminate();
    // The drain has begun once health says NOT_SERVING; the listener still answers.
    let mut health = HealthClient::new(channel.clone());
    let mut draining = false;
    for _ in 0..(PATIENCE.as_millis() / 20) {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        if status == ServingStatus::NotServing as i32 {
            draining = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(draining, "health never turned NOT_SERVING after SIGTERM");

    // New work is refused with a retry delay.
    let refused = submit(&channel, request(&template.template_id, 360))
        .await
        .unwrap_err();
    let delay =
        refusal_delay(&refused, Code::Unavailable, "SERVER_DRAINING").expect("a retry delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");

    // The queued job is cancelled, retryably.
    let queued_end = rest_of(queued_watch, PATIENCE).await.pop().unwrap();
    assert_eq!(state(&queued_end), JobState::Cancelled, "{queued_end:?}");
    let error = queued_end.error.unwrap();
    assert_eq!(error.reason, "SERVER_SHUTTING_DOWN");
    assert!(error.retryable, "{error:?}");
    let retry_after = error.retry_after.expect("a retry delay");
    assert!(retry_after.seconds >= 1, "{retry_after:?}");

    // The render is still running during the drain; resumed, it finishes within the grace.
    assert_eq!(
        state(&get_job(&channel, &running.job_id).await),
        JobState::Running
    );
    hold.release(worker);
    let running_end = rest_of(running_watch, PATIENCE).await.pop().unwrap();
    assert_eq!(state(&running_end), JobState::Succeeded, "{running_end:?}");
    let output = running_end.output.unwrap();
    let file = server
        .data_dir
        .path()
        .join("data/outputs")
        .join(format!("{}.mp4", running.job_id));
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(output.size_bytes, bytes.len() as u64);
    assert_eq!(output.sha256, crate::helpers::sha256_hex(&bytes));

    drop((health, channel));
    let status = server
        .wait_for_exit(PATIENCE)
        .await
        .expect("the server did not exit after the drain");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        matches!(process_state(worker), None | Some('Z')),
        "no worker outlives the server"
    );
}
