//! Webhooks against a real HTTP receiver on a socket: signatures checked by the Standard
//! Webhooks algorithm written out here (not the service's code), answers classified as we ask
//! our callers to classify ours (503 + Retry-After redelivered with the same webhook-id, 400
//! never again, a silent receiver timed out without holding up others), deliveries that
//! outlive a restart, and destinations refused at submit and at connect time.

use crate::helpers::*;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use lottie_render::grpc::proto;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub(crate) const BALL: &str = "slots-ball-colors-opacity.json";
/// A secret in the specification's own format (its README's example).
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How long a test waits for a delivery before it gives up.
const DELIVERY_LIMIT: Duration = Duration::from_secs(60);

/// What a receiver answers to the `attempt`-th request (1-based) carrying one webhook-id.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer {
    Status(u16),
    /// 503 with `Retry-After: 1`.
    Unavailable,
    /// Never answers (holds the connection open).
    Silent,
    /// 200 after this long (a slow receiver).
    Late(Duration),
}

/// One request the receiver saw.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) answered: Option<u16>,
}

impl Seen {
    pub(crate) fn id(&self) -> String {
        self.headers["webhook-id"].to_str().unwrap().to_owned()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A receiver on 127.0.0.1 whose answers `script` chooses from the webhook-id and the attempt.
pub(crate) struct Receiver {
    pub(crate) address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    pub(crate) async fn start(
        script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Receiver::on(listener, script)
    }

    fn on(
        listener: tokio::net::TcpListener,
        script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        let address = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script = Arc::new(script);
        let recorded = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (seen, script) = (recorded.clone(), script.clone());
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (seen, script) = (seen.clone(), script.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let id = parts.headers["webhook-id"].to_str().unwrap().to_owned();
                            let attempt = {
                                let seen = seen.lock().unwrap();
                                seen.iter().filter(|s| s.id() == id).count() + 1
                            };
                            let answer = script(&id, attempt);
                            let status = match answer {
                                Answer::Status(status) => Some(status),
                                Answer::Unavailable => Some(503),
                                Answer::Late(_) => Some(200),
                                Answer::Silent => None,
                            };
                            seen.lock().unwrap().push(Seen {
                                headers: parts.headers,
                                body,
                                answered: status,
                            });
                            let Some(status) = status else {
                                std::future::pending::<()>().await;
                                unreachable!()
                            };
                            if let Answer::Late(after) = answer {
                                tokio::time::sleep(after).await;
                            }
                            let mut response = http::Response::new(Full::new(Bytes::from("ok")));
                            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            if let Answer::Unavailable = answer {
                                response
                                    .headers_mut()
                                    .insert("retry-after", "1".parse().unwrap());
                            }
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Receiver { address, seen }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `done` holds for what the receiver saw.
    pub(crate) async fn wait_until(&self, what: &str, done: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
        let start = std::time::Instant::now();
        loop {
            let seen = self.seen();
            if done(&seen) {
                return seen;
            }
            if start.elapsed() > DELIVERY_LIMIT {
                let summary: Vec<(String, Option<u16>, Value)> = seen
                    .iter()
                    .map(|s| (s.id(), s.answered, s.json()["type"].clone()))
                    .collect();
                panic!(
                    "{what}: the receiver saw {} requests: {summary:?}",
                    seen.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The Standard Webhooks verification, written out from the specification: the signature
/// is base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")) where the key is the base64 after
/// `whsec_`; the header holds `v1,<signature>` entries separated by spaces.
pub(crate) fn verify(secret: &str, seen: &Seen) -> bool {
    use hmac::Mac;
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let id = seen.headers["webhook-id"].to_str().unwrap();
    let timestamp = seen.headers["webhook-timestamp"].to_str().unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&seen.body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    let sent: i64 = timestamp.parse().unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // The specification's tolerance: five minutes either way.
    (now - sent).abs() <= 300
        && seen.headers["webhook-signature"]
            .to_str()
            .unwrap()
            .split(' ')
            .any(|signature| signature == expected)
}

pub(crate) fn secrets_file(dir: &std::path::Path, lines: &str) -> PathBuf {
    let path = dir.join("webhook-secrets");
    std::fs::write(&path, lines).unwrap();
    path
}

/// A server that may call receivers on 127.0.0.1 over plain HTTP, signing with [`SECRET`].
async fn spawn_webhook_app(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut lottie_render::config::ServerSettings) + Send,
) -> TestApp {
    let secrets = secrets_file(dir, &format!("default {SECRET}\n"));
    spawn_app_with(|settings| {
        settings.webhooks.webhook_secrets = Some(secrets);
        settings.webhooks.webhook_allow_http = true;
        settings.webhooks.webhook_allow_networks =
            Some(lottie_render::webhooks::settings::Networks(vec![
                "127.0.0.0/8".parse().unwrap(),
            ]));
        configure(settings);
    })
    .await
}

fn notified(template_id: &str, url: &str, events: &[proto::WebhookEvent]) -> proto::RenderRequest {
    let mut request = small_request(template_id, proto::Format::Gif);
    request.notify = Some(proto::Notify {
        webhook_url: url.into(),
        events: events.iter().map(|event| *event as i32).collect(),
    });
    request
}

/// The job's delivery of `event`, as GetRenderJob shows it, once it is no longer pending.
async fn ended_delivery(
    app: &TestApp,
    job_id: &str,
    event: proto::WebhookEvent,
) -> proto::WebhookDelivery {
    let start = std::time::Instant::now();
    loop {
        let job = app.get_job(job_id).await;
        if let Some(delivery) = job.webhooks.iter().find(|d| d.event == event as i32) {
            if delivery.state != proto::WebhookDeliveryState::Pending as i32 {
                return delivery.clone();
            }
        }
        assert!(start.elapsed() < DELIVERY_LIMIT, "{job:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn events_arrive_signed_and_a_503_with_retry_after_is_redelivered_with_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_webhook_app(dir.path(), |_| {}).await;
    // Every event's first attempt is told to come back in a second.
    let receiver = Receiver::start(|_, attempt| {
        if attempt == 1 {
            Answer::Unavailable
        } else {
            Answer::Status(204)
        }
    })
    .await;
    let template = app.create_template(BALL).await;
    let events = [proto::WebhookEvent::Started, proto::WebhookEvent::Succeeded];
    let request = notified(
        &template.template_id,
        &receiver.url("/hooks/render"),
        &events,
    );
    let key = unique_key();
    let job = app.submit_with_key(&key, request.clone()).await.unwrap();
    // The webhook is part of the request the key stands for: the same request replays the
    // job (no second delivery), another receiver under the same key is refused.
    let (replayed, was_replay) = app.submit_keyed(&key, request.clone()).await.unwrap();
    assert!(was_replay);
    assert_eq!(replayed.job_id, job.job_id);
    let mut elsewhere = request;
    elsewhere.notify.as_mut().unwrap().webhook_url = receiver.url("/other");
    let status = app.submit_with_key(&key, elsewhere).await.unwrap_err();
    assert_eq!(reason(&status), "IDEMPOTENCY_KEY_REUSED");
    let done = app.finished(&job.job_id).await;
    assert_eq!(state(&done), proto::JobState::Succeeded);
    let seen = receiver
        .wait_until("two events, each twice", |seen| {
            seen.iter().filter(|s| s.answered == Some(204)).count() == 2
        })
        .await;
    assert_eq!(seen.len(), 4, "{seen:#?}");
    for request in &seen {
        assert!(verify(SECRET, request), "signature of {request:#?}");
        assert_eq!(request.headers["content-type"], "application/json");
        let body = request.json();
        assert_eq!(body["data"]["jobId"], job.job_id.as_str(), "{body}");
        assert_eq!(body["data"]["templateId"], template.template_id.as_str());
    }
    let by_id = |id: &str| -> Vec<&Seen> { seen.iter().filter(|s| s.id() == id).collect() };
    let succeeded = seen
        .iter()
        .find(|s| s.json()["type"] == "render.succeeded")
        .unwrap();
    let attempts = by_id(&succeeded.id());
    assert_eq!(attempts.len(), 2, "the same webhook-id on the retry");
    assert_eq!(
        attempts[0].body, attempts[1].body,
        "the same body on the retry"
    );
    assert_eq!(attempts[0].answered, Some(503));
    let body = succeeded.json();
    assert_eq!(body["data"]["state"], "JOB_STATE_SUCCEEDED");
    assert_eq!(body["data"]["output"]["contentType"], "image/gif");
    let started = seen
        .iter()
        .find(|s| s.json()["type"] == "render.started")
        .unwrap();
    assert_eq!(started.json()["data"]["state"], "JOB_STATE_RUNNING");
    assert_ne!(started.id(), succeeded.id());
    // GetRenderJob shows how each went.
    let delivery = ended_delivery(&app, &job.job_id, proto::WebhookEvent::Succeeded).await;
    assert_eq!(
        delivery.state,
        proto::WebhookDeliveryState::Delivered as i32
    );
    assert_eq!((delivery.attempts, delivery.last_status), (2, 204));
    assert_eq!(delivery.webhook_id, succeeded.id());
    assert_eq!(
        app.metric("lottie_render_webhook_attempts_total{outcome=\"retried\"}")
            .await,
        2.0
    );
    assert_eq!(
        app.metric("lottie_render_webhook_attempts_total{outcome=\"delivered\"}")
            .await,
        2.0
    );
}

#[tokio::test]
async fn a_permanent_4xx_is_not_sent_again_and_a_silent_receiver_holds_up_nobody_else() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_webhook_app(dir.path(), |settings| {
        settings.webhooks.answer_timeout = Some(Duration::from_secs(2));
    })
    .await;
    let refusing = Receiver::start(|_, _| Answer::Status(400)).await;
    let silent = Receiver::start(|_, _| Answer::Silent).await;
    let healthy = Receiver::start(|_, _| Answer::Status(200)).await;
    let template = app.create_template(BALL).await;
    let succeeded = [proto::WebhookEvent::Succeeded];
    // More jobs for the silent receiver than it has slots: they wait, they do not spill over.
    let mut silent_jobs = Vec::new();
    for _ in 0..6 {
        let job = app
            .submit(notified(
                &template.template_id,
                &silent.url("/"),
                &succeeded,
            ))
            .await
            .unwrap();
        silent_jobs.push(job.job_id);
    }
    let refused = app
        .submit(notified(
            &template.template_id,
            &refusing.url("/"),
            &succeeded,
        ))
        .await
        .unwrap();
    let healthy_job = app
        .submit(notified(
            &template.template_id,
            &healthy.url("/"),
            &succeeded,
        ))
        .await
        .unwrap();
    let delivered = ended_delivery(&app, &healthy_job.job_id, proto::WebhookEvent::Succeeded).await;
    assert_eq!(
        delivered.state,
        proto::WebhookDeliveryState::Delivered as i32
    );
    let refusal = ended_delivery(&app, &refused.job_id, proto::WebhookEvent::Succeeded).await;
    assert_eq!(refusal.state, proto::WebhookDeliveryState::Refused as i32);
    assert_eq!((refusal.attempts, refusal.last_status), (1, 400));
    // The silent receiver was tried at most its destination's share at once.
    let waiting = silent
        .wait_until("the silent receiver's first requests", |seen| {
            !seen.is_empty()
        })
        .await;
    assert!(waiting.len() <= 4, "{} at once", waiting.len());
    // After the answer timeout, its deliveries are pending again with attempts counted.
    let start = std::time::Instant::now();
    loop {
        let job = app.get_job(&silent_jobs[0]).await;
        let delivery = job.webhooks.first().cloned();
        if let Some(delivery) = delivery.filter(|d| d.attempts >= 1) {
            assert_eq!(delivery.state, proto::WebhookDeliveryState::Pending as i32);
            assert_eq!(delivery.last_status, 0, "no answer");
            assert!(delivery.next_attempt_at.is_some());
            break;
        }
        assert!(start.elapsed() < DELIVERY_LIMIT, "{job:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(refusing.seen().len(), 1, "a 400 is never sent again");
}

/// A delivery due again when its server stops is sent by the next one: on the same data
/// directory (one instance), or by another instance on the same Redis.
async fn a_delivery_pending_at_a_restart_is_delivered_after_it(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().to_path_buf();
    let prefix = unique_prefix();
    // Down (503, Retry-After: 1) until the first server has stopped.
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let receiver_down = down.clone();
    let receiver = Receiver::start(move |_, _| {
        if receiver_down.load(std::sync::atomic::Ordering::SeqCst) {
            Answer::Unavailable
        } else {
            Answer::Status(200)
        }
    })
    .await;
    let configure = |settings: &mut lottie_render::config::ServerSettings| match store {
        Store::Memory => settings.application.data_dir = data.clone(),
        Store::Redis => {
            // Another instance: its own data directory, the same Redis.
            settings.redis.redis_url = Some(redis_url());
            settings.redis.redis_key_prefix = prefix.clone();
        }
    };
    let app = spawn_webhook_app(dir.path(), configure).await;
    let template = app.create_template(BALL).await;
    let job = app
        .submit(notified(
            &template.template_id,
            &receiver.url("/"),
            &[proto::WebhookEvent::Succeeded],
        ))
        .await
        .unwrap();
    receiver
        .wait_until("the first attempt", |seen| !seen.is_empty())
        .await;
    app.stop().await;
    let before = receiver.seen().len();
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    let app = spawn_webhook_app(dir.path(), configure).await;
    let seen = receiver
        .wait_until("the retry after the restart", |seen| {
            seen.iter().any(|s| s.answered == Some(200))
        })
        .await;
    let delivered = seen.iter().position(|s| s.answered == Some(200)).unwrap();
    assert!(delivered >= before, "delivered by the second server");
    assert!(seen[..before].iter().all(|s| s.answered == Some(503)));
    assert_eq!(seen[delivered].id(), seen[0].id());
    assert_eq!(seen[delivered].json()["data"]["jobId"], job.job_id.as_str());
    assert!(verify(SECRET, &seen[delivered]));
    app.stop().await;
}

on_both_stores!(a_delivery_pending_at_a_restart_is_delivered_after_it);

#[tokio::test]
async fn destinations_of_this_machine_and_its_networks_are_refused_at_submit_and_when_resolved() {
    let dir = tempfile::tempdir().unwrap();
    // The default policy (https only, no network allowed), with a secret for the tenant.
    let secrets = secrets_file(dir.path(), &format!("default {SECRET}\n"));
    let app = spawn_app_with(|settings| {
        settings.webhooks.webhook_secrets = Some(secrets);
    })
    .await;
    let template = app.create_template(BALL).await;
    let refused = [
        ("http://example.com/hook", "must be https"),
        ("https://127.0.0.1/hook", "loopback"),
        ("https://[::1]/hook", "loopback"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://10.1.2.3/hook", "private"),
        ("https://172.16.0.1/hook", "private"),
        ("https://192.168.1.1/hook", "private"),
        ("https://100.64.0.1/hook", "carrier-grade NAT"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://[fe80::1]/hook", "link-local"),
        ("https://[fd00::1]/hook", "unique-local"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://[ff02::1]/hook", "multicast"),
        ("https://0.0.0.0/hook", "unspecified"),
        // Only globally reachable addresses: the special-purpose blocks, and IPv6 forms of
        // IPv4 addresses judged by the address they embed (NAT64, 6to4, Teredo, SIIT).
        ("https://192.0.0.1/hook", "IETF protocol assignments"),
        ("https://198.18.0.1/hook", "benchmarking"),
        ("https://[64:ff9b::7f00:1]/hook", "loopback"),
        (
            "https://[64:ff9b::a9fe:a9fe]/latest/meta-data",
            "link-local",
        ),
        ("https://[2002:7f00:1::1]/hook", "loopback"),
        ("https://[2001:0:808:808::80ff:fffe]/hook", "loopback"),
        ("https://[::ffff:0:7f00:1]/hook", "loopback"),
        // Hosts a browser reads as IPv4 addresses, refused here, not only when resolved.
        ("https://2130706433/hook", "127.0.0.1 is a loopback"),
        ("https://0x7f.1/hook", "127.0.0.1 is a loopback"),
        ("https://127.1/hook", "127.0.0.1 is a loopback"),
        ("https://0177.0.0.1/hook", "127.0.0.1 is a loopback"),
        ("https://localhost/hook", "this machine"),
        ("https://printer.local/hook", "this machine"),
        ("https://user:secret@example.com/hook", "credentials"),
        ("ftp://example.com/hook", "https"),
    ];
    for (url, why) in refused {
        let status = app
            .submit(notified(&template.template_id, url, &[]))
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{url}: {status:?}"
        );
        assert_eq!(violated_fields(&status), ["notify.webhook_url"], "{url}");
        assert!(
            status.message().contains(why),
            "{url}: {why} not in {:?}",
            status.message()
        );
    }
    // A tenant the secrets file does not name cannot have webhooks: nothing could sign them.
    let other = tempfile::tempdir().unwrap();
    let secrets = secrets_file(other.path(), &format!("acme {SECRET}\n"));
    let unsigned = spawn_app_with(|settings| {
        settings.webhooks.webhook_secrets = Some(secrets);
    })
    .await;
    let template = unsigned.create_template(BALL).await;
    let status = unsigned
        .submit(notified(
            &template.template_id,
            "https://example.com/hook",
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&status), "WEBHOOK_SECRET_MISSING");
}

#[tokio::test]
async fn a_name_that_resolves_to_this_machine_is_never_connected_to() {
    // This machine's own name is accepted at submit (it is a name, not an address) and
    // resolves to one of its addresses (/etc/hosts): refused when sending, never connected.
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(|_, _| Answer::Status(200)).await;
    let app = spawn_webhook_app(dir.path(), |settings| {
        settings.webhooks.webhook_allow_networks = None;
    })
    .await;
    let host = hostname();
    let resolved: Vec<std::net::IpAddr> = tokio::net::lookup_host((host.as_str(), 0))
        .await
        .unwrap()
        .map(|address| address.ip())
        .collect();
    assert!(
        resolved.iter().all(|ip| match ip {
            std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_private(),
            std::net::IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        }),
        "{host} resolves to {resolved:?}: not an address of this machine's networks"
    );
    let template = app.create_template(BALL).await;
    let url = format!("http://{host}:{}/hook", receiver.address.port());
    let job = app
        .submit(notified(
            &template.template_id,
            &url,
            &[proto::WebhookEvent::Succeeded],
        ))
        .await
        .unwrap();
    let delivery = ended_delivery(&app, &job.job_id, proto::WebhookEvent::Succeeded).await;
    assert_eq!(delivery.state, proto::WebhookDeliveryState::Refused as i32);
    assert_eq!(delivery.last_status, 0, "never answered: never connected");
    assert!(receiver.seen().is_empty());
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// The acceptance run: 50 jobs (40 rendered in four kinds, 5 failed past their
/// deadline, 5 cancelled), a receiver failing half of all requests with 503, jobs and
/// deliveries on Redis: every job's terminal event reaches the application exactly once after
/// de-duplication by webhook-id.
#[tokio::test]
async fn fifty_jobs_with_a_receiver_failing_half_the_time_deliver_every_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_webhook_app(dir.path(), |settings| {
        Store::Redis.configure(settings);
        // The never-ending template fails here; a small ball renders in well under it.
        settings.jobs.max_job_seconds = 4.0;
    })
    .await;
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = requests.clone();
    let receiver = Receiver::start(move |_, _| {
        if counter
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            .is_multiple_of(2)
        {
            Answer::Unavailable
        } else {
            Answer::Status(200)
        }
    })
    .await;
    let ball = app.create_template(BALL).await;
    let never = app
        .create_template("malformed/real-rlottie-repro-infinite-loop.json")
        .await;
    let url = receiver.url("/events");
    let mut expected: HashMap<String, &str> = HashMap::new();
    for index in 0..40 {
        let mut request = notified(&ball.template_id, &url, &[]);
        let shade = f64::from(index % 4) / 4.0;
        request.output.as_mut().unwrap().background = Some(color(shade, 0.5, 0.5));
        let job = app.submit(request).await.unwrap();
        expected.insert(job.job_id, "render.succeeded");
    }
    let mut cancelled = Vec::new();
    for index in 0..10 {
        // Two kinds: one render that fails at its deadline, one whose jobs are cancelled.
        let mut request = notified(&never.template_id, &url, &[]);
        let shade = f64::from(index % 2);
        request.output.as_mut().unwrap().background = Some(color(shade, 0.5, 0.5));
        let job = app.submit(request).await.unwrap();
        if index % 2 == 0 {
            expected.insert(job.job_id, "render.failed");
        } else {
            cancelled.push(job.job_id.clone());
            expected.insert(job.job_id, "render.cancelled");
        }
    }
    for job_id in &cancelled {
        app.cancel(job_id).await;
    }
    for job_id in expected.keys() {
        app.finished(job_id).await;
    }
    let seen = receiver
        .wait_until("every event accepted", |seen| {
            let accepted: std::collections::HashSet<String> = seen
                .iter()
                .filter(|s| s.answered == Some(200))
                .map(Seen::id)
                .collect();
            accepted.len() >= expected.len()
        })
        .await;
    // The application: accepts a request once per webhook-id (its de-duplication).
    let mut application: HashMap<String, Value> = HashMap::new();
    for request in seen.iter().filter(|s| s.answered == Some(200)) {
        assert!(verify(SECRET, request));
        application
            .entry(request.id())
            .or_insert_with(|| request.json());
    }
    assert_eq!(application.len(), 50);
    let mut by_job: HashMap<String, String> = HashMap::new();
    for body in application.values() {
        let job_id = body["data"]["jobId"].as_str().unwrap().to_owned();
        let kind = body["type"].as_str().unwrap().to_owned();
        assert!(by_job.insert(job_id, kind).is_none(), "one event per job");
    }
    for (job_id, kind) in &expected {
        assert_eq!(
            by_job.get(job_id).map(String::as_str),
            Some(*kind),
            "{job_id}"
        );
    }
    let refused = seen.iter().filter(|s| s.answered == Some(503)).count();
    assert!(refused >= 25, "half the requests were refused: {refused}");
    let kinds = |kind: &str| by_job.values().filter(|k| k.as_str() == kind).count();
    eprintln!(
        "50 jobs ({} succeeded, {} failed, {} cancelled): {} requests, {refused} answered 503, \
         {} events delivered once each",
        kinds("render.succeeded"),
        kinds("render.failed"),
        kinds("render.cancelled"),
        seen.len(),
        application.len()
    );
}

/// A job cancelled while it waits in the shared queue (its record is all there is: no
/// instance holds it) still tells its webhook.
#[tokio::test]
async fn a_job_cancelled_in_the_shared_queue_tells_its_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_webhook_app(dir.path(), |settings| Store::Redis.configure(settings)).await;
    let receiver = Receiver::start(|_, _| Answer::Status(200)).await;
    let never = app
        .create_template("malformed/real-rlottie-repro-infinite-loop.json")
        .await;
    // The one worker is busy with this one.
    let busy = app
        .start_running(small_request(&never.template_id, proto::Format::Gif))
        .await;
    // Another size: another render, queued behind it (not following it).
    let mut request = notified(&never.template_id, &receiver.url("/"), &[]);
    request.output.as_mut().unwrap().width = 120;
    let waiting = app.submit(request).await.unwrap();
    assert_eq!(state(&waiting), proto::JobState::Queued);
    let cancelled = app.cancel(&waiting.job_id).await;
    assert_eq!(state(&cancelled), proto::JobState::Cancelled);
    let seen = receiver
        .wait_until("the cancelled event", |seen| !seen.is_empty())
        .await;
    let body = seen[0].json();
    assert_eq!(body["type"], "render.cancelled");
    assert_eq!(body["data"]["jobId"], waiting.job_id.as_str());
    app.cancel(&busy.job_id).await;
}
