//! The service fits a service mesh and Kubernetes (issue 10, part 5), over real sockets:
//! connections are sent GOAWAY at their age and closed at age + grace, gzip works both ways
//! and a gzip bomb is refused without inflating past the limit, the `liveness` and
//! `readiness` health services flip for what they say, and the metrics endpoint says its
//! format and times every method.

use crate::helpers::{
    corpus, create_request, health_status, reason, small_request, spawn_app, spawn_app_with,
    unique_key, OwnRedis, TestApp,
};
use crate::helpers::{grpc_headers, grpc_message, raw_connection, status_of, ServerProcess};
use bytes::Bytes;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::mesh::probes::{LIVENESS, READINESS};
use std::io::Write;
use std::time::{Duration, Instant};
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BALL: &str = "slots-ball-colors-opacity.json";
/// A real template on which rlottie never finishes: its job stays RUNNING until cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// How long a health status may take to flip: readiness is evaluated every second, and a
/// Redis that went away may take its deadline to be noticed; generous for a loaded machine.
const FLIP_LIMIT: Duration = Duration::from_secs(30);

/// Polls the health service `service` until it is `status` (within [`FLIP_LIMIT`]).
async fn wait_for_health(app: &TestApp, service: &str, status: ServingStatus) {
    let deadline = Instant::now() + FLIP_LIMIT;
    loop {
        let now = health_status(&app.channel, service).await;
        if now == status as i32 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "health service {service:?} is still {:?}, not {status:?}",
            ServingStatus::try_from(now)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn readiness_is_not_serving_while_the_queue_is_full_and_while_draining_and_liveness_stays_serving(
) {
    let mut app = spawn_app_with(|settings| {
        settings.render_workers.workers = Some(1);
        settings.jobs.queue_capacity = 1;
        // The drain waits this long on the render that never finishes: time to look.
        settings.application.shutdown_grace_seconds = 10.0;
    })
    .await;
    wait_for_health(&app, READINESS, ServingStatus::Serving).await;
    wait_for_health(&app, LIVENESS, ServingStatus::Serving).await;
    let template = app.create_template(NEVER_FINISHES).await;
    let running = app
        .start_running(small_request(&template.template_id, proto::Format::Gif))
        .await;
    // Another size: a render of its own (not a follower of the running one) that waits.
    let mut other = small_request(&template.template_id, proto::Format::Gif);
    if let Some(output) = other.output.as_mut() {
        output.width = 120;
    }
    let queued = app.submit(other).await.unwrap();
    wait_for_health(&app, READINESS, ServingStatus::NotServing).await;
    assert_eq!(
        health_status(&app.channel, LIVENESS).await,
        ServingStatus::Serving as i32,
        "a full queue is not a wedged process"
    );
    app.cancel(&queued.job_id).await;
    wait_for_health(&app, READINESS, ServingStatus::Serving).await;

    app.begin_shutdown();
    wait_for_health(&app, READINESS, ServingStatus::NotServing).await;
    assert_eq!(
        health_status(&app.channel, LIVENESS).await,
        ServingStatus::Serving as i32,
        "a draining process is not a wedged one"
    );
    // Looked: the drain ends with its last render instead of waiting out the grace.
    app.cancel(&running.job_id).await;
    app.stop().await;
}

#[tokio::test]
async fn after_sigterm_a_new_connection_is_answered_for_the_drain_minimum_even_with_nothing_to_drain(
) {
    const DRAIN_MIN: Duration = Duration::from_secs(3);
    let mut app = spawn_app_with(|settings| {
        settings.mesh.drain_min_seconds = DRAIN_MIN.as_secs();
    })
    .await;
    let began = Instant::now();
    app.begin_shutdown();
    wait_for_health(&app, "", ServingStatus::NotServing).await;
    // A caller whose endpoint list still names this instance connects now: it is answered
    // (and told to go elsewhere), not refused at the socket.
    let late = Channel::from_shared(format!("http://{}", app.address))
        .unwrap()
        .connect()
        .await
        .expect("the listener is still open");
    assert_eq!(
        health_status(&late, READINESS).await,
        ServingStatus::NotServing as i32
    );
    drop(late);
    app.stop().await;
    assert!(
        began.elapsed() >= DRAIN_MIN,
        "stopped after {:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn readiness_is_not_serving_while_redis_is_down_and_serving_again_when_it_is_back() {
    let redis = OwnRedis::start();
    let port = redis.port;
    let app = spawn_app_with(|settings| {
        settings.redis.redis_url = Some(redis.url());
        settings.redis.redis_key_prefix = format!("{}:", unique_key());
    })
    .await;
    wait_for_health(&app, READINESS, ServingStatus::Serving).await;

    drop(redis);
    wait_for_health(&app, READINESS, ServingStatus::NotServing).await;
    assert_eq!(
        health_status(&app.channel, LIVENESS).await,
        ServingStatus::Serving as i32
    );
    assert_eq!(
        health_status(&app.channel, "").await,
        ServingStatus::Serving as i32,
        "the overall status keeps its meaning (serving until shutdown)"
    );

    let redis = OwnRedis::start_on(port);
    wait_for_health(&app, READINESS, ServingStatus::Serving).await;
    app.stop().await;
    drop(redis);
}

#[tokio::test]
async fn a_connection_is_sent_goaway_at_its_age_its_calls_in_flight_get_the_grace_and_the_next_call_reconnects(
) {
    const AGE: Duration = Duration::from_secs(1);
    const GRACE: Duration = Duration::from_secs(3);
    let app = spawn_app_with(|settings| {
        settings.mesh.max_connection_age_seconds = AGE.as_secs();
        settings.mesh.max_connection_age_grace_seconds = GRACE.as_secs();
    })
    .await;
    let opened = Instant::now();
    let mut client = raw_connection(app.address, h2::client::Builder::new()).await;
    // Two calls in flight: their headers are sent, their messages not yet.
    let get_template = "/lottie.render.v1.TemplateService/GetTemplate";
    let (finishing, mut finishing_body) = client
        .send_request(grpc_headers(app.address, get_template), false)
        .unwrap();
    client = client.ready().await.unwrap();
    let (lingering, _lingering_body) = client
        .send_request(grpc_headers(app.address, get_template), false)
        .unwrap();

    // Until the age, new calls are taken; from it, the server has said GOAWAY.
    let deadline = Instant::now() + Duration::from_secs(30);
    let goaway = loop {
        assert!(Instant::now() < deadline, "no GOAWAY within 30 s");
        let refused = match client.clone().ready().await {
            Err(error) => error,
            Ok(mut ready) => {
                match ready.send_request(
                    grpc_headers(app.address, "/grpc.health.v1.Health/Check"),
                    true,
                ) {
                    Err(error) => error,
                    Ok(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        break refused;
    };
    let goaway_at = opened.elapsed();
    assert!(goaway.is_go_away() && goaway.is_remote(), "{goaway:?}");
    assert!(
        goaway_at >= AGE,
        "GOAWAY after {goaway_at:?}, before the age"
    );

    // The call in flight at the age is answered after the GOAWAY.
    finishing_body
        .send_data(
            grpc_message(&proto::GetTemplateRequest {
                template_id: uuid::Uuid::new_v4().to_string(),
            }),
            true,
        )
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), finishing)
        .await
        .expect("the call in flight is answered")
        .expect("the call in flight is answered, not reset");
    let status = status_of(&answer).expect("a gRPC answer");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    // The call that never sends its message is cut when the grace is over.
    let cut = tokio::time::timeout(Duration::from_secs(30), lingering)
        .await
        .expect("the lingering call ends once the grace is over");
    let cut_at = opened.elapsed();
    assert!(cut.is_err(), "the lingering call was answered: {cut:?}");
    assert!(
        cut_at >= AGE + GRACE,
        "cut after {cut_at:?}, within the grace"
    );
    println!("goaway after {goaway_at:?}, lingering call cut after {cut_at:?}");

    // The client's channel (connected before this test's raw connection, so past its age and
    // grace too) calls again on a new connection.
    assert_eq!(
        health_status(&app.channel, "").await,
        ServingStatus::Serving as i32
    );
    app.stop().await;
}

/// Reads HTTP/2 frames from `socket` until the server closes it; answers the PING frames
/// seen (type 6, without the ACK flag).
async fn pings_until_closed(socket: &mut tokio::net::TcpStream) -> usize {
    use tokio::io::AsyncReadExt;
    let mut pings = 0;
    let mut header = [0u8; 9];
    while socket.read_exact(&mut header).await.is_ok() {
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let mut payload = vec![0u8; length];
        if socket.read_exact(&mut payload).await.is_err() {
            break;
        }
        if header[3] == 6 && header[4] & 1 == 0 {
            pings += 1;
        }
    }
    pings
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_disconnected_after_the_keepalive_interval_and_timeout(
) {
    use tokio::io::AsyncWriteExt;
    const INTERVAL: Duration = Duration::from_secs(1);
    const TIMEOUT: Duration = Duration::from_secs(1);
    let app = spawn_app_with(|settings| {
        settings.mesh.http2_keepalive_interval_seconds = INTERVAL.as_secs();
        settings.mesh.http2_keepalive_timeout_seconds = TIMEOUT.as_secs();
    })
    .await;
    let mut socket = tokio::net::TcpStream::connect(app.address).await.unwrap();
    let opened = Instant::now();
    // The client preface, empty SETTINGS and the ACK of the server's: a live HTTP/2 peer that
    // then never answers a PING.
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    socket
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    socket
        .write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0])
        .await
        .unwrap();
    let pings = tokio::time::timeout(Duration::from_secs(30), pings_until_closed(&mut socket))
        .await
        .expect("the server closes the connection within 30 s");
    let closed_after = opened.elapsed();
    println!("{pings} unanswered PING(s), closed after {closed_after:?}");
    assert!(pings >= 1, "the server pinged before closing");
    assert!(
        closed_after >= INTERVAL + TIMEOUT,
        "closed after {closed_after:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn gzip_requests_are_accepted_and_answers_are_gzip_only_for_clients_that_accept_it() {
    let app = spawn_app().await;
    let mut gzip = TemplateServiceClient::new(app.channel.clone())
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip);
    let created = gzip
        .create_template(create_request(BALL, corpus(BALL)))
        .await
        .unwrap();
    assert_eq!(
        created
            .metadata()
            .get("grpc-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip")
    );
    let template = created.into_inner();
    assert!(!template.template_id.is_empty());

    let plain = TemplateServiceClient::new(app.channel.clone())
        .get_template(proto::GetTemplateRequest {
            template_id: template.template_id.clone(),
        })
        .await
        .unwrap();
    assert_eq!(plain.metadata().get("grpc-encoding"), None);
    assert_eq!(plain.into_inner().template_id, template.template_id);

    let health = HealthClient::new(app.channel.clone())
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip)
        .check(HealthCheckRequest {
            service: READINESS.into(),
        })
        .await
        .unwrap();
    assert_eq!(
        health
            .metadata()
            .get("grpc-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip")
    );
    assert_eq!(health.into_inner().status, ServingStatus::Serving as i32);
    app.stop().await;
}

/// `inflated` zero bytes, gzip-compressed (about a thousandth of the size).
fn gzip_of_zeros(inflated: usize) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![0u8; 1024 * 1024];
    let mut left = inflated;
    while left > 0 {
        let now = left.min(chunk.len());
        encoder.write_all(&chunk[..now]).unwrap();
        left -= now;
    }
    encoder.finish().unwrap()
}

/// `payload` as one gRPC message flagged compressed.
fn compressed_message(payload: &[u8]) -> Bytes {
    let mut framed = vec![1u8];
    framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    framed.extend_from_slice(payload);
    Bytes::from(framed)
}

/// Sends `body` as a gzip-encoded call to `path`; answers the status of the answer.
async fn gzip_call(
    client: &mut h2::client::SendRequest<Bytes>,
    address: std::net::SocketAddr,
    path: &str,
    body: Bytes,
) -> tonic::Status {
    let mut headers = grpc_headers(address, path);
    headers
        .headers_mut()
        .insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
    headers.headers_mut().insert(
        "idempotency-key",
        http::HeaderValue::from_str(&unique_key()).unwrap(),
    );
    *client = client.clone().ready().await.unwrap();
    let (answer, mut stream) = client.send_request(headers, false).unwrap();
    stream.send_data(body, true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("an answer within a minute")
        .expect("an answer, not a reset");
    status_of(&answer).expect("a trailers-only answer")
}

#[tokio::test]
async fn a_gzip_bomb_is_refused_as_too_large_without_inflating_past_the_limit() {
    // The bombs are made before connecting: a connection that sends no request within the
    // first-request timeout (10 s; compressing a gibibyte on a loaded machine can take that
    // long) is closed, rightly.
    // 1 GiB of zeros in about 1 MiB: sixteen times CreateTemplate's 64 MiB limit.
    let bomb = gzip_of_zeros(1024 * 1024 * 1024);
    let render_bomb = gzip_of_zeros(64 * 1024 * 1024);
    println!("gzip bomb: {} bytes inflating to 1 GiB", bomb.len());
    let server = ServerProcess::start(&[]);
    let mut client = raw_connection(server.address, h2::client::Builder::new()).await;
    let before = server.peak_rss_bytes();
    let cases = [
        (
            "/lottie.render.v1.TemplateService/CreateTemplate",
            compressed_message(&bomb),
            "REQUEST_TOO_LARGE",
        ),
        (
            "/lottie.render.v1.RenderService/SubmitRender",
            compressed_message(&render_bomb),
            "REQUEST_TOO_LARGE",
        ),
        (
            "/lottie.render.v1.RenderService/SubmitRender",
            compressed_message(b"not gzip at all"),
            "BODY_UNDECODABLE",
        ),
    ];
    for (path, body, expected) in cases {
        let started = Instant::now();
        let status = gzip_call(&mut client, server.address, path, body).await;
        println!("{path}: answered {expected} after {:?}", started.elapsed());
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (Code::InvalidArgument, expected),
            "{path}: {status:?}"
        );
        let pushback = status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|value| value.to_str().unwrap().to_owned());
        assert_eq!(pushback.as_deref(), Some("-1"), "{path}: not retryable");
    }
    let grown = server.peak_rss_bytes().saturating_sub(before);
    println!("peak RSS grew by {} MiB", grown / (1024 * 1024));
    assert!(
        grown < 200 * 1024 * 1024,
        "the server grew {grown} bytes for a bomb bounded at 64 MiB"
    );
    assert!(server.stop().await, "the server stopped cleanly");
}

#[tokio::test]
async fn the_metrics_endpoint_says_openmetrics_and_times_every_method() {
    let app = spawn_app().await;
    for _ in 0..3 {
        let unknown = app
            .get_template(&uuid::Uuid::new_v4().to_string())
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), Code::NotFound);
    }
    health_status(&app.channel, READINESS).await;

    let response = app.metrics_text().await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let content_type = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap();
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert_eq!(
        app.metric("lottie_render_request_duration_seconds_count{method=\"GetTemplate\"}")
            .await,
        3.0
    );
    assert!(
        app.metric("lottie_render_request_duration_seconds_count{method=\"Check\"}")
            .await
            >= 1.0
    );
    assert!(
        body.contains(
            "lottie_render_request_duration_seconds_bucket{le=\"0.001\",method=\"GetTemplate\"}"
        ) || body.contains(
            "lottie_render_request_duration_seconds_bucket{method=\"GetTemplate\",le=\"0.001\"}"
        )
    );
    app.stop().await;
}
