//! Refusals provoked for real over the wire, each checked for its code, its ErrorInfo reason
//! and its retry semantics (pushback -1, or one delay in RetryInfo, pushback and
//! retry-after): TEMPLATE_NOT_FOUND, JOB_NOT_SUCCEEDED, OUTPUT_TOO_LONG, SERVER_OVERLOADED
//! (a call held in flight at a limit of one), STORAGE_UNAVAILABLE (the template directory
//! removed under the server), JOB_STORE_UNAVAILABLE (its Redis gone), TEMPLATE_TOO_LARGE (a
//! template one byte over its size limit) and COMPRESSED_REQUESTS_BUSY (the inflation budget
//! held by compressed calls in their handlers).

use crate::helpers::unique_prefix;
use crate::helpers::OwnRedis;
use crate::helpers::{
    corpus, create_request, refusal_delay, small_request, spawn_app, spawn_app_with,
    violated_fields, Hold, TestApp,
};
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::grpc::proto::{self, JobState};
use lottie_render::lottie::reading::template::MAX_TEMPLATE_BYTES;
use lottie_render::middleware::inflation_budget::{INFLATION_BUDGET_BYTES, INFLATION_RETRY_AFTER};
use lottie_render::middleware::request_body::MAX_REQUEST_BYTES;
use std::time::Duration;
use tonic::codec::CompressionEncoding;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BALL: &str = "slots-ball-colors-opacity.json";
/// rlottie's own regression file: renders frame 25 for ever (a job that never finishes).
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// The longest GIF the service makes (README: "GIF over 300 s").
const MAX_GIF_SECONDS: u32 = 300;

/// A one-layer solid template lasting `seconds` at 30 fps.
fn solid_lasting(seconds: u32) -> Vec<u8> {
    let frames = seconds * 30;
    serde_json::to_vec(&serde_json::json!({
        "v": "5.7.4", "fr": 30, "ip": 0, "op": frames, "w": 100, "h": 100, "assets": [],
        "layers": [{"ddd": 0, "ind": 1, "ty": 1, "sw": 100, "sh": 100, "sc": "#0000ff",
            "ks": {}, "ip": 0, "op": frames, "st": 0}]
    }))
    .unwrap()
}

async fn create(app: &TestApp, name: &str, json: Vec<u8>) -> proto::Template {
    app.create(name, json).await.unwrap()
}

async fn download_refusal(app: &TestApp, job_id: &str) -> tonic::Status {
    // The refusal comes with the response headers or as the stream's first message.
    match app
        .renders()
        .download_render_output(proto::DownloadRenderOutputRequest {
            job_id: job_id.into(),
            ..Default::default()
        })
        .await
    {
        Err(status) => status,
        Ok(response) => response
            .into_inner()
            .message()
            .await
            .expect_err("a download of a job that has not succeeded"),
    }
}

#[tokio::test]
async fn unknown_templates_unfinished_jobs_and_over_long_gifs_are_refused_with_their_reasons() {
    let app = spawn_app().await;
    let unknown = uuid::Uuid::new_v4().to_string();

    let status = app.get_template(&unknown).await.unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::NotFound, "TEMPLATE_NOT_FOUND"),
        None
    );
    let status = app
        .templates()
        .delete_template(proto::DeleteTemplateRequest {
            template_id: unknown.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::NotFound, "TEMPLATE_NOT_FOUND"),
        None
    );
    let status = app
        .submit(small_request(&unknown, proto::Format::Gif))
        .await
        .unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::InvalidArgument, "TEMPLATE_NOT_FOUND"),
        None
    );

    // One worker: the first job runs for ever, the second waits behind it.
    let never = app.create_template(NEVER_FINISHES).await;
    let running = app
        .start_running(small_request(&never.template_id, proto::Format::Mp4))
        .await;
    let mut other = small_request(&never.template_id, proto::Format::Mp4);
    other.output.as_mut().unwrap().width = 102;
    let queued = app.submit(other).await.unwrap();
    assert_eq!(queued.state, JobState::Queued as i32);
    for job in [&running, &queued] {
        let status = download_refusal(&app, &job.job_id).await;
        assert_eq!(
            refusal_delay(&status, Code::FailedPrecondition, "JOB_NOT_SUCCEEDED"),
            None
        );
    }
    let cancelled = app.cancel(&queued.job_id).await;
    assert_eq!(cancelled.state, JobState::Cancelled as i32);
    let status = download_refusal(&app, &queued.job_id).await;
    assert_eq!(
        refusal_delay(&status, Code::FailedPrecondition, "JOB_NOT_SUCCEEDED"),
        None
    );

    // A GIF of the longest template allowed is accepted; one frame-second more is not.
    let longest = create(&app, "longest GIF", solid_lasting(MAX_GIF_SECONDS)).await;
    let accepted = app.submit_small(&longest, proto::Format::Gif).await;
    app.cancel(&accepted.job_id).await;
    let too_long = create(&app, "too long", solid_lasting(MAX_GIF_SECONDS + 1)).await;
    let status = app
        .submit(small_request(&too_long.template_id, proto::Format::Gif))
        .await
        .unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::InvalidArgument, "OUTPUT_TOO_LONG"),
        None
    );
    assert_eq!(violated_fields(&status), ["output.format"]);
    // The limit is the GIF's: the same template as MP4 is accepted.
    let mp4 = app.submit_small(&too_long, proto::Format::Mp4).await;
    app.cancel(&mp4.job_id).await;
    app.cancel(&running.job_id).await;
    app.stop().await;
}

/// The shed call comes on a connection of its own: on the held call's connection it would
/// not reach load shedding at all but wait for that connection's share of the limit
/// (docs/security.md: calls in the stack per connection, `--max-concurrent-requests` ÷ 8, at least
/// one), and be served once the held call ends.
#[tokio::test]
async fn a_call_over_the_limit_in_flight_is_server_overloaded_with_a_delay_and_health_is_not_shed()
{
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let script = hold.script.clone();
    let app = spawn_app_with(|settings| {
        settings.analysis.analysis_executable = Some(script);
        settings.limits.max_concurrent_requests = 1;
    })
    .await;
    // The one call in flight: a CreateTemplate whose analysis is held.
    hold.engage();
    let held = tokio::spawn({
        let mut templates = app.templates();
        async move {
            templates
                .create_template(create_request(BALL, corpus(BALL)))
                .await
        }
    });
    let analysis = hold.wait_for_held(1).await[0];
    hold.disengage();

    let other_connection =
        tonic::transport::Channel::from_shared(format!("http://{}", app.address))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let status = TemplateServiceClient::new(other_connection.clone())
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap_err();
    let delay = refusal_delay(&status, Code::ResourceExhausted, "SERVER_OVERLOADED")
        .expect("a retry delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    assert_eq!(
        app.metric("lottie_render_rejections_total{method=\"ListTemplates\",code=\"ResourceExhausted\",reason=\"SERVER_OVERLOADED\"}")
            .await,
        1.0
    );
    let health = HealthClient::new(other_connection)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    hold.release(analysis);
    held.await.unwrap().unwrap();
    app.templates()
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .expect("served once the call in flight has ended");
    app.stop().await;
}

#[tokio::test]
async fn a_template_directory_gone_from_under_the_server_is_storage_unavailable_with_a_delay() {
    let app = spawn_app().await;
    let templates = app.data_dir.path().join("templates");
    assert!(templates.is_dir());
    std::fs::remove_dir_all(&templates).unwrap();
    let status = app.create(BALL, corpus(BALL)).await.unwrap_err();
    let delay =
        refusal_delay(&status, Code::Unavailable, "STORAGE_UNAVAILABLE").expect("a retry delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    assert!(!templates.exists(), "nothing was half-created");
    app.stop().await;
}

#[tokio::test]
async fn a_job_lookup_with_its_redis_gone_is_job_store_unavailable_with_a_delay() {
    let redis = OwnRedis::start();
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        settings.redis.redis_url = Some(url);
        settings.redis.redis_key_prefix = unique_prefix();
    })
    .await;
    drop(redis);
    let status = app
        .try_get_job(&uuid::Uuid::new_v4().to_string())
        .await
        .unwrap_err();
    let delay =
        refusal_delay(&status, Code::Unavailable, "JOB_STORE_UNAVAILABLE").expect("a retry delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    app.stop().await;
}

/// The names in the server's template directory.
fn template_directory(app: &TestApp) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(app.data_dir.path().join("templates"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    names
}

/// README: a template over 8 MiB, well within CreateTemplate's 64 MiB request limit, is
/// refused for its size (deterministic, pushback -1), naming the field, and nothing of it is
/// stored.
#[tokio::test]
async fn a_template_one_byte_over_its_size_limit_is_template_too_large_and_nothing_is_stored() {
    let app = spawn_app().await;
    let before = template_directory(&app);
    // A real template, padded with JSON whitespace: only its size is wrong.
    let mut json = corpus(BALL);
    json.resize(MAX_TEMPLATE_BYTES + 1, b' ');
    assert!(json.len() < MAX_REQUEST_BYTES);
    let status = app.create(BALL, json).await.unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::InvalidArgument, "TEMPLATE_TOO_LARGE"),
        None
    );
    assert_eq!(violated_fields(&status), ["lottie_json"]);
    assert!(app.list_templates().await.templates.is_empty());
    assert_eq!(template_directory(&app), before, "nothing was stored");
    app.stop().await;
}

/// README: compressed calls hold their service's message limit (64 MiB for TemplateService)
/// from a 256 MiB inflation budget while they are handled: four CreateTemplates whose analyses
/// are held fill it, so a fifth compressed call waits out its (here shortened) wait and is
/// RESOURCE_EXHAUSTED `COMPRESSED_REQUESTS_BUSY` with a 2 s delay, while an uncompressed call
/// is served at once; once the four end, compressed calls are served again.
#[tokio::test]
async fn compressed_calls_beyond_the_inflation_budget_are_compressed_requests_busy_with_a_delay() {
    let holders = INFLATION_BUDGET_BYTES / MAX_REQUEST_BYTES;
    assert_eq!(holders, 4);
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let script = hold.script.clone();
    let app = spawn_app_with(|settings| {
        settings.analysis.analysis_executable = Some(script);
        // A tenant holds half the analysis workers: room for every holder.
        settings.analysis.analysis_workers = 2 * holders as u16;
        settings.limits.inflation_wait = Some(Duration::from_millis(300));
    })
    .await;
    let compressed = || app.templates().send_compressed(CompressionEncoding::Gzip);
    hold.engage();
    let held: Vec<_> = (0..holders)
        .map(|index| {
            let mut templates = compressed();
            tokio::spawn(async move {
                templates
                    .create_template(create_request(&format!("holder {index}"), corpus(BALL)))
                    .await
            })
        })
        .collect();
    hold.wait_for_held(holders).await;
    hold.disengage();

    let list = proto::ListTemplatesRequest::default();
    app.templates()
        .list_templates(list.clone())
        .await
        .expect("an uncompressed call is served beside a full budget");
    let status = compressed().list_templates(list.clone()).await.unwrap_err();
    assert_eq!(
        refusal_delay(&status, Code::ResourceExhausted, "COMPRESSED_REQUESTS_BUSY"),
        Some(INFLATION_RETRY_AFTER)
    );
    assert_eq!(INFLATION_RETRY_AFTER, Duration::from_secs(2));

    hold.let_go();
    for holder in held {
        holder.await.unwrap().expect("a holder is created");
    }
    compressed()
        .list_templates(list)
        .await
        .expect("served once the budget is back");
    app.stop().await;
}
