//! Fair shares of the connection-level pools over a real socket (issue 21, items 1 and 8):
//! request bodies are limited per method and buffered from a pool each caller holds at most
//! a share of (health on a lane of its own), and one tenant cannot hold every watcher slot.
//! The attacker speaks raw HTTP/2 (the `h2` crate) so it can declare a body and go silent.

use crate::helpers::{api_keys_file, reason, spawn_app_with, TestApp};
use crate::helpers::{grpc_headers, raw_connection, status_of};
use bytes::Bytes;
use lottie_render::auth::AuthMode;
use lottie_render::cli::bench_hostile::payloads::declared_largest_one_byte_short;
use lottie_render::grpc::proto;
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";
/// A real template on which rlottie never finishes: its job stays RUNNING until cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
const ACME: &str = "acme-secret-key";
const GLOBEX: &str = "globex-secret-key";
/// How soon a bystander must be answered while the attack holds on.
const BYSTANDER_LIMIT: Duration = Duration::from_secs(1);
/// How long the bystanders keep calling during an attack: long enough for the attacker's
/// 256 MiB to reach the server many times over on loopback.
const ATTACK_WINDOW: Duration = Duration::from_secs(6);

/// Four streams to `path` on one raw connection (with `key` as bearer when given), each
/// sending [`declared_largest_one_byte_short`] and then nothing; answers their answers and
/// the open request streams (kept, so they stay open).
async fn four_silent_largest_bodies(
    app: &TestApp,
    path: &str,
    key: Option<&str>,
) -> (Vec<h2::client::ResponseFuture>, Vec<h2::SendStream<Bytes>>) {
    let mut client = raw_connection(app.address, h2::client::Builder::new()).await;
    let body = declared_largest_one_byte_short();
    let (mut answers, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        client = client.ready().await.unwrap();
        let mut headers = grpc_headers(app.address, path);
        if let Some(key) = key {
            headers
                .headers_mut()
                .insert("authorization", format!("Bearer {key}").parse().unwrap());
        }
        let (answer, mut stream) = client.send_request(headers, false).unwrap();
        stream.send_data(body.clone(), false).unwrap();
        answers.push(answer);
        streams.push(stream);
    }
    (answers, streams)
}

/// Calls `call` every 300 ms for [`ATTACK_WINDOW`]; each must be answered (OK) within
/// [`BYSTANDER_LIMIT`]. Answers the worst latency.
async fn bystander_answered_throughout<F, Fut>(what: &str, call: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let end = tokio::time::Instant::now() + ATTACK_WINDOW;
    let mut worst = Duration::ZERO;
    while tokio::time::Instant::now() < end {
        let started = tokio::time::Instant::now();
        let answer = tokio::time::timeout(BYSTANDER_LIMIT, call()).await;
        let answer = answer.unwrap_or_else(|_| {
            panic!("{what} not answered within {BYSTANDER_LIMIT:?} during the attack")
        });
        answer.unwrap_or_else(|status| panic!("{what} refused during the attack: {status:?}"));
        worst = worst.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    worst
}

/// The gRPC status of each answer (refusals are trailers-only), within a few seconds.
async fn refusals(answers: Vec<h2::client::ResponseFuture>) -> Vec<tonic::Status> {
    let mut statuses = Vec::new();
    for answer in answers {
        let response = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("the attacker's stream was never answered")
            .expect("an answer");
        statuses.push(status_of(&response).expect("a refusal"));
    }
    statuses
}

#[tokio::test]
async fn a_health_body_flood_is_refused_at_once_and_bystanders_are_answered_meanwhile() {
    let app = spawn_app_with(|settings| settings.request_body_timeout_ms = 30_000).await;
    let (answers, streams) =
        four_silent_largest_bodies(&app, "/grpc.health.v1.Health/Check", None).await;
    let list = || async {
        app.templates()
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .map(drop)
    };
    let health = || async {
        HealthClient::new(app.channel.clone())
            .check(HealthCheckRequest::default())
            .await
            .map(drop)
    };
    let (listed, checked) = tokio::join!(
        bystander_answered_throughout("ListTemplates", list),
        bystander_answered_throughout("Health/Check", health),
    );
    eprintln!("bystander worst: ListTemplates {listed:?}, Health/Check {checked:?}");
    // A health request is a few KiB at most: each 64 MiB one was refused from its length
    // prefix, the caller's mistake, nothing buffered.
    for status in refusals(answers).await {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(reason(&status), "REQUEST_TOO_LARGE");
    }
    drop(streams);
    app.stop().await;
}

/// A server with tenants acme and globex (auth required).
async fn two_tenants(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut lottie_render::config::ServerSettings) + Send,
) -> TestApp {
    let keys = api_keys_file(dir, &[("acme", "billing", ACME), ("globex", "ops", GLOBEX)]);
    spawn_app_with(|settings| {
        settings.auth = AuthMode::Required;
        settings.api_keys = Some(keys);
        settings.request_body_timeout_ms = 30_000;
        configure(settings);
    })
    .await
}

#[tokio::test]
async fn one_tenants_silent_template_uploads_hold_only_its_share_and_another_tenant_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let app = two_tenants(dir.path(), |_| {}).await;
    let (answers, streams) = four_silent_largest_bodies(
        &app,
        "/lottie.render.v1.TemplateService/CreateTemplate",
        Some(ACME),
    )
    .await;
    let list = || async {
        app.templates_as(Some(GLOBEX))
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .map(drop)
    };
    let worst = bystander_answered_throughout("globex's ListTemplates", list).await;
    eprintln!("bystander worst: {worst:?}");
    // And globex's own upload is buffered and handled.
    app.use_api_key(Some(GLOBEX));
    tokio::time::timeout(Duration::from_secs(20), app.create_template(BALL))
        .await
        .expect("globex's CreateTemplate was not answered during the attack");
    // One of acme's uploads holds its share; the three others were refused at once, with
    // a retry delay, while that one still arrives.
    let mut answers = answers;
    let first = answers.remove(0);
    let statuses = refusals(answers).await;
    for status in &statuses {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(reason(status), "REQUEST_BUFFERS_BUSY");
        assert!(
            status
                .get_error_details()
                .retry_info()
                .and_then(|info| info.retry_delay)
                .is_some(),
            "{status:?}"
        );
        assert!(status.message().contains("tenant acme"), "{status:?}");
    }
    drop((first, streams));
    app.stop().await;
}

#[tokio::test]
async fn one_tenant_holding_its_share_of_watchers_leaves_another_tenants_watch_served() {
    let dir = tempfile::tempdir().unwrap();
    // Eight watcher slots: a tenant holds at most two.
    let app = two_tenants(dir.path(), |settings| settings.max_watchers = 8).await;
    let job_of = |key: &'static str| {
        let app = &app;
        async move {
            app.use_api_key(Some(key));
            let template = app.create_template(NEVER_FINISHES).await;
            let job = app.submit_small(&template, proto::Format::Webm).await;
            app.use_api_key(None);
            job.job_id
        }
    };
    let acme_job = job_of(ACME).await;
    let globex_job = job_of(GLOBEX).await;
    let watch = |key: &'static str, job_id: String| {
        let client = app.renders_as(Some(key));
        async move {
            let mut client = client;
            let mut stream = client
                .watch_render_job(proto::WatchRenderJobRequest { job_id })
                .await?
                .into_inner();
            stream.message().await?;
            Ok::<_, tonic::Status>(stream)
        }
    };
    // acme tries to take every slot with watches of its own job.
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..8 {
        match watch(ACME, acme_job.clone()).await {
            Ok(stream) => held.push(stream),
            Err(status) => refused.push(status),
        }
    }
    // globex's watch of its own job is served meanwhile.
    let served = tokio::time::timeout(BYSTANDER_LIMIT * 5, watch(GLOBEX, globex_job.clone()))
        .await
        .expect("globex's watch was not answered");
    let globex_watch = served.expect("globex's watch was refused while acme held its share");
    assert_eq!(
        held.len(),
        2,
        "acme holds its share, a quarter of the slots"
    );
    for status in &refused {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(reason(status), "TOO_MANY_WATCHERS");
        assert!(status.message().contains("its share"), "{status:?}");
    }
    drop((held, globex_watch));
    for (key, job) in [(ACME, acme_job), (GLOBEX, globex_job)] {
        app.use_api_key(Some(key));
        app.cancel(&job).await;
    }
    app.stop().await;
}
