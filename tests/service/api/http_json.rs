//! The HTTP/JSON door over a real socket with a stock HTTP client (reqwest, HTTP/1.1 and h2
//! by prior knowledge): the same server, port and stack as gRPC, its answers in canonical
//! JSON, its refusals RFC 9457 problems with the status of the gRPC classification and the
//! same retry delay.

use crate::helpers::*;
use lottie_render::grpc::proto;
use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const BALL: &str = "slots-ball-colors-opacity.json";
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";

fn url(app: &TestApp, path: &str) -> String {
    format!("http://{}{path}", app.address)
}

fn http1() -> Client {
    Client::builder().http1_only().build().unwrap()
}

fn h2c() -> Client {
    Client::builder().http2_prior_knowledge().build().unwrap()
}

/// The problem document of a refusal, checked to be one (content type, status member).
async fn problem(response: Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status, "{response:?}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], status.as_u16(), "{body}");
    body
}

fn fields(problem: &Value) -> Vec<String> {
    let mut fields: Vec<String> = problem["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|error| error["field"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    fields.sort();
    fields
}

/// Registers a corpus file as a raw Lottie upload (`curl --data-binary @file`).
async fn upload(client: &Client, app: &TestApp, name: &str, file: &str) -> Value {
    let response = client
        .post(url(app, &format!("/v1/templates?name={name}")))
        .header("content-type", "application/json")
        .body(corpus(file))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "{response:?}");
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let template: Value = response.json().await.unwrap();
    assert_eq!(
        location,
        format!("/v1/templates/{}", template["templateId"].as_str().unwrap())
    );
    template
}

fn render_body(template_id: &str, format: &str, width: u32) -> Value {
    json!({
        "templateId": template_id,
        "output": {"format": format, "fps": 30, "width": width, "height": 100}
    })
}

async fn submit(client: &Client, app: &TestApp, key: &str, body: &Value) -> Response {
    client
        .post(url(app, "/v1/renders"))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_template_and_a_render_go_from_upload_to_a_ranged_download_over_http1_and_h2() {
    let app = spawn_app().await;
    let client = http1();
    let template = upload(&client, &app, "ball", BALL).await;
    let id = template["templateId"].as_str().unwrap();
    assert_eq!(template["name"], "ball");
    // The same template through gRPC: one contract.
    let through_grpc = app.get_template(id).await.unwrap();
    assert_eq!(through_grpc.sha256, template["sha256"].as_str().unwrap());
    // A JSON CreateTemplate (bytes are base64, as the canonical mapping says).
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(corpus(BALL));
    let response = client
        .post(url(&app, "/v1/templates"))
        .json(&json!({"name": "ball-json", "lottieJson": encoded}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let listed: Value = h2c()
        .get(url(&app, "/v1/templates?pageSize=10"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["templates"].as_array().unwrap().len(), 2, "{listed}");

    let key = unique_key();
    let body = render_body(id, "FORMAT_GIF", 100);
    let response = submit(&client, &app, &key, &body).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED, "{response:?}");
    assert!(response.headers().get("idempotent-replayed").is_none());
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let job: Value = response.json().await.unwrap();
    let job_id = job["jobId"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/v1/renders/{job_id}"));

    // The events, as Server-Sent Events, to the end (over h2).
    let mut events = h2c()
        .get(url(&app, &format!("/v1/renders/{job_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(WATCH_LIMIT, events.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let states: Vec<String> = text
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let (name, data) = event.split_once('\n').unwrap();
            assert_eq!(name, "event: job", "{event}");
            let job: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            job["state"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(states.last().unwrap(), "JOB_STATE_SUCCEEDED", "{states:?}");

    // A replay answers the same job, marked; the same key with another body is refused.
    let replay = submit(&client, &app, &key, &body).await;
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed["jobId"], job_id.as_str());
    let quoted = submit(&client, &app, &format!("\"{key}\""), &body).await;
    assert_eq!(
        quoted.headers()["idempotent-replayed"],
        "true",
        "a quoted key is the key"
    );
    let other = submit(&client, &app, &key, &render_body(id, "FORMAT_GIF", 120)).await;
    let refused = problem(other, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(refused["reason"], "IDEMPOTENCY_KEY_REUSED");

    // The file: its type, length and ETag (its sha256), whole and in ranges.
    let download = url(&app, &format!("/v1/renders/{job_id}/output"));
    let whole = client.get(&download).send().await.unwrap();
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(whole.headers()["content-type"], "image/gif");
    let etag = whole.headers()["etag"].to_str().unwrap().to_owned();
    let bytes = whole.bytes().await.unwrap();
    assert_eq!(etag, format!("\"{}\"", sha256_hex(&bytes)));
    let finished: Value = client
        .get(url(&app, &format!("/v1/renders/{job_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(finished["output"]["sha256"], sha256_hex(&bytes));
    assert_eq!(
        finished["output"]["sizeBytes"],
        bytes.len().to_string(),
        "uint64 is a string in canonical JSON"
    );
    for (range, expected) in [
        ("bytes=0-99", &bytes[..100]),
        ("bytes=100-", &bytes[100..]),
        (
            &format!("bytes=10-{}", bytes.len() + 50) as &str,
            &bytes[10..],
        ),
    ] {
        let part = h2c()
            .get(&download)
            .header("range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        let content_range = part.headers()["content-range"].to_str().unwrap().to_owned();
        let got = part.bytes().await.unwrap();
        assert_eq!(sha256_hex(&got), sha256_hex(expected), "{range}");
        assert!(content_range.ends_with(&format!("/{}", bytes.len())));
    }
    let past = client
        .get(&download)
        .header("range", format!("bytes={}-", bytes.len()))
        .send()
        .await
        .unwrap();
    let refused = problem(past, StatusCode::RANGE_NOT_SATISFIABLE).await;
    assert_eq!(refused["reason"], "RANGE_NOT_SATISFIABLE");
    app.stop().await;
}

#[tokio::test]
async fn refusals_are_problems_with_the_status_of_their_class_and_every_field_path() {
    let app = spawn_app().await;
    let client = http1();
    let template = upload(&client, &app, "ball", BALL).await;
    let id = template["templateId"].as_str().unwrap();
    let post = |path: &str, body: &'static str| {
        client
            .post(url(&app, path))
            .header("idempotency-key", unique_key())
            .header("content-type", "application/json")
            .body(body)
    };
    // Not JSON at all: 400.
    let not_json = post("/v1/renders", "{\"templateId\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(not_json, StatusCode::BAD_REQUEST).await["reason"],
        "BODY_NOT_JSON"
    );
    // JSON, but not the message: 422 naming the JSON path.
    let typo = post("/v1/renders", r#"{"output": {"widht": 3}}"#)
        .send()
        .await
        .unwrap();
    let typo = problem(typo, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(typo["reason"], "UNKNOWN_FIELDS");
    assert_eq!(fields(&typo), ["output.widht"]);
    // The message, but not a valid request: every violation, by the gRPC side's paths.
    let mut body = render_body(id, "FORMAT_MP4", 100);
    body["modifications"] =
        json!({"texts": {"headline": "hi"}, "colors": {"primary_bg": {"r": 0}}});
    let response = client
        .post(url(&app, "/v1/renders"))
        .header("idempotency-key", unique_key())
        .json(&body)
        .send()
        .await
        .unwrap();
    let unknown = problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(unknown["reason"], "SLOT_UNKNOWN");
    assert_eq!(unknown["retryable"], false);
    assert_eq!(
        fields(&unknown),
        [
            "modifications.colors[\"primary_bg\"]",
            "modifications.texts[\"headline\"]"
        ]
    );
    // No idempotency key: 422 (refused from the headers, as over gRPC).
    let keyless = client
        .post(url(&app, "/v1/renders"))
        .json(&render_body(id, "FORMAT_MP4", 100))
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(keyless, StatusCode::UNPROCESSABLE_ENTITY).await["reason"],
        "IDEMPOTENCY_KEY_MISSING"
    );
    // Unknown ids, routes and verbs.
    let unknown_job = "0b9c6b2e-4f7e-4a53-9d3e-2f1d8e0c1a55";
    for path in [
        format!("/v1/renders/{unknown_job}"),
        format!("/v1/templates/{unknown_job}"),
        "/v1/nothing".to_owned(),
        "/lottie.render.v1.RenderService/GetRenderJob".to_owned(),
    ] {
        let response = client.get(url(&app, &path)).send().await.unwrap();
        problem(response, StatusCode::NOT_FOUND).await;
    }
    let not_a_uuid = client.get(url(&app, "/v1/renders/x")).send().await.unwrap();
    problem(not_a_uuid, StatusCode::UNPROCESSABLE_ENTITY).await;
    let verb = client.put(url(&app, "/v1/renders")).send().await.unwrap();
    assert_eq!(verb.headers()["allow"], "POST, GET");
    problem(verb, StatusCode::METHOD_NOT_ALLOWED).await;
    let query = client
        .get(url(&app, "/v1/templates?colour=red"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(query, StatusCode::UNPROCESSABLE_ENTITY).await["reason"],
        "UNKNOWN_FIELDS"
    );
    // A body over the door's limit for the method (base64 room included), refused from its
    // Content-Length: 413.
    use lottie_render::middleware::request_body::{json_body_limit, MAX_RENDER_REQUEST_BYTES};
    let large = client
        .post(url(&app, "/v1/renders"))
        .header("idempotency-key", unique_key())
        .header("content-type", "application/json")
        .body(vec![b' '; json_body_limit(MAX_RENDER_REQUEST_BYTES) + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(large, StatusCode::PAYLOAD_TOO_LARGE).await["reason"],
        "REQUEST_TOO_LARGE"
    );
    let xml = client
        .post(url(&app, "/v1/renders"))
        .header("idempotency-key", unique_key())
        .header("content-type", "application/xml")
        .body("<render/>")
        .send()
        .await
        .unwrap();
    problem(xml, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
    // A download before the job succeeded is a conflict of state.
    let slow = upload(&client, &app, "slow", NEVER_FINISHES).await;
    let job: Value = submit(
        &client,
        &app,
        &unique_key(),
        &render_body(slow["templateId"].as_str().unwrap(), "FORMAT_MP4", 100),
    )
    .await
    .json()
    .await
    .unwrap();
    let early = client
        .get(url(
            &app,
            &format!("/v1/renders/{}/output", job["jobId"].as_str().unwrap()),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(early, StatusCode::CONFLICT).await["reason"],
        "JOB_NOT_SUCCEEDED"
    );
    let cancelled = client
        .post(url(
            &app,
            &format!("/v1/renders/{}:cancel", job["jobId"].as_str().unwrap()),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn a_full_queue_answers_429_with_the_retry_delay_grpc_gives_for_it() {
    let app = spawn_app_with(|settings| {
        settings.jobs.queue_capacity = 1;
        settings.application.shutdown_grace_seconds = 0.1;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    app.start_running(request.clone()).await;
    let mut queued = request.clone();
    queued.output.as_mut().unwrap().width = 102;
    app.submit(queued).await.unwrap();
    let mut refused = request;
    refused.output.as_mut().unwrap().width = 104;
    let status = app.submit(refused).await.unwrap_err();
    let grpc_delay = status
        .metadata()
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let response = submit(
        &http1(),
        &app,
        &unique_key(),
        &render_body(&template.template_id, "FORMAT_MP4", 106),
    )
    .await;
    assert_eq!(
        response.headers()["retry-after"].to_str().unwrap(),
        grpc_delay
    );
    let refusal = problem(response, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(refusal["reason"], "QUEUE_FULL");
    assert_eq!(refusal["retryable"], true);
    // Counted as the gRPC call it stands for, and by its HTTP status.
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(
            "lottie_render_http_requests_total{method=\"SubmitRender\",status=\"429\"} 1"
        ),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test]
async fn credentials_and_tenants_are_the_grpc_sides() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_with_keys(
        dir.path(),
        &[("acme", "ci", "acme-key"), ("globex", "ci", "globex-key")],
        |_| {},
    )
    .await;
    let client = http1();
    let anonymous = client.get(url(&app, "/v1/templates")).send().await.unwrap();
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    problem(anonymous, StatusCode::UNAUTHORIZED).await;
    let wrong = client
        .get(url(&app, "/v1/templates"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    problem(wrong, StatusCode::UNAUTHORIZED).await;
    let created = client
        .post(url(&app, "/v1/templates?name=ball"))
        .bearer_auth("acme-key")
        .body(corpus(BALL))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let template: Value = created.json().await.unwrap();
    let path = format!("/v1/templates/{}", template["templateId"].as_str().unwrap());
    let own = client
        .get(url(&app, &path))
        .bearer_auth("acme-key")
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    let others = client
        .get(url(&app, &path))
        .bearer_auth("globex-key")
        .send()
        .await
        .unwrap();
    problem(others, StatusCode::NOT_FOUND).await;
    let deleted = client
        .delete(url(&app, &path))
        .bearer_auth("globex-key")
        .send()
        .await
        .unwrap();
    problem(deleted, StatusCode::NOT_FOUND).await;
    let deleted = client
        .delete(url(&app, &path))
        .bearer_auth("acme-key")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    app.stop().await;
}

/// The `Retry-After` of an HTTP refusal and the `retry-after` of the gRPC one, for one fault.
fn both_delays(status: tonic::Status, response: Response) -> (String, String) {
    let grpc = status
        .metadata()
        .get("retry-after")
        .expect("a gRPC retry delay")
        .to_str()
        .unwrap()
        .to_owned();
    let http = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .to_owned();
    (grpc, http)
}

#[tokio::test]
async fn a_lost_redis_answers_503_and_a_tenant_at_its_job_limit_429_with_the_grpc_delays() {
    let redis = OwnRedis::start();
    let url_of_redis = redis.url();
    let app = spawn_app_with(|settings| {
        settings.redis.redis_url = Some(url_of_redis);
        settings.redis.redis_key_prefix = unique_prefix();
    })
    .await;
    drop(redis);
    let unknown = uuid::Uuid::new_v4().to_string();
    let status = app.try_get_job(&unknown).await.unwrap_err();
    let response = http1()
        .get(url(&app, &format!("/v1/renders/{unknown}")))
        .send()
        .await
        .unwrap();
    let (grpc, http) = both_delays(status, response);
    assert_eq!(http, grpc);
    let response = http1()
        .get(url(&app, &format!("/v1/renders/{unknown}")))
        .send()
        .await
        .unwrap();
    let refusal = problem(response, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(refusal["reason"], "JOB_STORE_UNAVAILABLE");
    app.stop().await;

    let app = spawn_app_with(|settings| {
        settings.jobs.tenant_max_jobs = Some(1);
        settings.application.shutdown_grace_seconds = 0.1;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    app.start_running(request.clone()).await;
    let mut refused = request;
    refused.output.as_mut().unwrap().width = 104;
    let status = app.submit(refused).await.unwrap_err();
    let body = render_body(&template.template_id, "FORMAT_MP4", 106);
    let response = submit(&http1(), &app, &unique_key(), &body).await;
    let (grpc, http) = both_delays(status, response);
    assert_eq!(http, grpc);
    let response = submit(&http1(), &app, &unique_key(), &body).await;
    let refusal = problem(response, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(refusal["reason"], "TENANT_JOB_LIMIT");
    app.stop().await;
}

#[tokio::test]
async fn a_body_without_a_length_is_411_and_a_deeply_nested_one_is_refused_at_its_first_byte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app().await;
    let mut connection = tokio::net::TcpStream::connect(app.address).await.unwrap();
    connection
        .write_all(
            b"POST /v1/renders HTTP/1.1\r\nhost: x\r\nidempotency-key: k\r\n\
              content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
              2\r\n{}\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let read = connection.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).to_string();
    assert!(answer.starts_with("HTTP/1.1 411"), "{answer}");
    assert!(answer.contains("LENGTH_REQUIRED"), "{answer}");
    // The body was never read, so the connection cannot carry another request: said.
    assert!(answer.contains("connection: close"), "{answer}");
    // 100,000 levels of nesting (200 KB): the contract has no free-form JSON member, so the
    // first `[` is already not the message (nothing is nested; serde_json's depth limit of
    // 128 would stop it otherwise).
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let started = std::time::Instant::now();
    let response = http1()
        .post(url(&app, "/v1/renders"))
        .header("idempotency-key", unique_key())
        .header("content-type", "application/json")
        .body(nested)
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(response, StatusCode::UNPROCESSABLE_ENTITY).await["reason"],
        "REQUEST_INVALID"
    );
    // Milliseconds; a floor a saturated 2-core machine holds, far below what a scan quadratic
    // in the 100,000 levels would take (minutes).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The contract's OpenAPI document is served, with every route.
    let document: Value = http1()
        .get(url(&app, "/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    assert!(document["paths"]["/v1/renders/{job_id}:cancel"]["post"].is_object());
    app.stop().await;
}

#[tokio::test]
async fn an_http1_only_client_is_served_over_tls() {
    use rustls::pki_types::pem::PemObject;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::api::pki::TestCa::new("test ca");
    let tls = crate::api::pki::server_tls(dir.path(), &ca, None);
    let app = spawn_app_with(|settings| settings.tls = tls).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    // What Python's requests or an HTTP/1.1-only tool offers.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(app.address).await.unwrap();
    let mut tls = connector
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("a handshake offering only http/1.1");
    tls.write_all(b"GET /openapi.json HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    // To the end of the answer (a peer that closes without close_notify ends it too).
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"openapi\":\"3.1.0\""));
    app.stop().await;
}

#[tokio::test]
async fn a_key_still_being_handled_is_409_with_a_delay_then_replayed() {
    let app = spawn_app().await;
    // A template whose analysis takes seconds: an endless loop allocating arrays (more work
    // per poll than the work units count), baked until the expressions' CPU cap ends it
    // (then registered with a warning).
    let slow = lottie_render::cli::bench_hostile::payloads::red_square(json!({
        "a": 0, "k": [50, 50],
        "x": "var $bm_rt, a; while (true) { a = [time, {x: time}]; } $bm_rt = [0, 0];"
    }));
    let body = serde_json::to_vec(&slow).unwrap();
    let key = unique_key();
    let create = |client: Client| {
        let (body, key, url) = (
            body.clone(),
            key.clone(),
            url(&app, "/v1/templates?name=slow"),
        );
        async move {
            client
                .post(url)
                .header("idempotency-key", key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    // Two calls with the key, the second while the first is being handled (whichever claims
    // the key first on a loaded machine, the other is the one told to come back).
    let first = tokio::spawn(create(http1()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = create(http1()).await;
    let first = first.await.unwrap();
    let (created, in_progress) = if first.status() == StatusCode::CREATED {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(in_progress.headers()["retry-after"], "1");
    let in_progress = problem(in_progress, StatusCode::CONFLICT).await;
    assert_eq!(in_progress["reason"], "IDEMPOTENCY_KEY_IN_PROGRESS");
    let created: Value = created.json().await.unwrap();
    let replay = create(http1()).await;
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed["templateId"], created["templateId"]);
    app.stop().await;
}
