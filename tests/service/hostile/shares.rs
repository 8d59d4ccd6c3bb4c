//! Request bodies are limited per method over a real socket (issue 21, item 1): a health
//! call declaring 64 MiB is refused from its length prefix while bystanders are served. The
//! attacker speaks raw HTTP/2 (the `h2` crate) so it can declare a body and go silent. The
//! pools' fair shares under eight attackers are `pools.rs`.

use crate::helpers::{grpc_headers, raw_connection, reason, spawn_app_with, status_of, TestApp};
use bytes::Bytes;
use lottie_render::cli::bench_hostile::payloads::declared_largest_one_byte_short;
use lottie_render::grpc::proto;
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How soon a bystander must be answered while the attack holds on: milliseconds when it
/// is served, within a floor a saturated 2-core machine (load about 6) holds; one held
/// behind the attack would wait for the 30 s body deadline.
const BYSTANDER_LIMIT: Duration = Duration::from_secs(5);
/// How long the bystanders keep calling during an attack: long enough for the attacker's
/// 256 MiB to reach the server many times over on loopback.
const ATTACK_WINDOW: Duration = Duration::from_secs(6);

/// Four streams to `path` on one raw connection, each sending
/// [`declared_largest_one_byte_short`] and then nothing; answers their answers and the open
/// request streams (kept, so they stay open).
async fn four_silent_largest_bodies(
    app: &TestApp,
    path: &str,
) -> (Vec<h2::client::ResponseFuture>, Vec<h2::SendStream<Bytes>>) {
    let mut client = raw_connection(app.address, h2::client::Builder::new()).await;
    let body = declared_largest_one_byte_short();
    let (mut answers, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        client = client.ready().await.unwrap();
        let headers = grpc_headers(app.address, path);
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

/// The gRPC status of each answer (refusals are trailers-only), within a few seconds (one
/// not refused from its length prefix would be answered at the 30 s body deadline).
async fn refusals(answers: Vec<h2::client::ResponseFuture>) -> Vec<tonic::Status> {
    let mut statuses = Vec::new();
    for answer in answers {
        let response = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("the attacker's stream was never answered")
            .expect("an answer");
        statuses.push(status_of(&response).expect("a refusal"));
    }
    statuses
}

#[tokio::test]
async fn a_health_body_flood_is_refused_at_once_and_bystanders_are_answered_meanwhile() {
    let app = spawn_app_with(|settings| settings.limits.request_body_timeout_ms = 30_000).await;
    let (answers, streams) = four_silent_largest_bodies(&app, "/grpc.health.v1.Health/Check").await;
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
