//! The README's webhook promises no other test held the service to: a 429 with
//! `Retry-After` is retried when the receiver says (not after the sender's own backoff), a
//! redirect is never followed (the delivery is refused, its target never sent a byte), and
//! `--webhook-secrets` gives each tenant its own secret (two lines for one tenant: two
//! signatures, during a rotation). Signatures are checked by the Standard Webhooks
//! algorithm as `webhooks.rs` writes it out, not by the service's code.

use super::webhooks::{secrets_file, verify, Answer, Receiver, Seen, BALL};
use crate::helpers::*;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use lottie_render::grpc::proto;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a test waits for a delivery before it gives up.
const DELIVERY_LIMIT: Duration = Duration::from_secs(60);

/// One request a [`ScriptedReceiver`] saw: when, its path, its webhook-id.
#[derive(Clone, Debug)]
struct Arrival {
    at: SystemTime,
    path: String,
    id: String,
}

/// A receiver on 127.0.0.1 whose answer (status and headers) `script` makes from the path
/// and the attempt (1-based) of the request's webhook-id.
struct ScriptedReceiver {
    address: SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
}

type Script = dyn Fn(&str, usize) -> (u16, Vec<(&'static str, String)>) + Send + Sync;

impl ScriptedReceiver {
    async fn start(
        script: impl Fn(&str, usize) -> (u16, Vec<(&'static str, String)>) + Send + Sync + 'static,
    ) -> ScriptedReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let recorded = arrivals.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (arrivals, script) = (recorded.clone(), script.clone());
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (arrivals, script) = (arrivals.clone(), script.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let _ = body.collect().await;
                            let id = parts.headers["webhook-id"].to_str().unwrap().to_owned();
                            let path = parts.uri.path().to_owned();
                            let attempt = {
                                let mut arrivals = arrivals.lock().unwrap();
                                let attempt =
                                    arrivals.iter().filter(|seen| seen.id == id).count() + 1;
                                arrivals.push(Arrival {
                                    at: SystemTime::now(),
                                    path: path.clone(),
                                    id,
                                });
                                attempt
                            };
                            let (status, headers) = script(&path, attempt);
                            let mut response = http::Response::new(Full::new(Bytes::new()));
                            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            for (name, value) in headers {
                                response.headers_mut().insert(name, value.parse().unwrap());
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
        ScriptedReceiver { address, arrivals }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }
}

/// A server that may call receivers on 127.0.0.1 over plain HTTP, signing with the tenant
/// secrets of `secrets` (lines of `--webhook-secrets`), tenants named by `keys`.
async fn webhook_app(dir: &std::path::Path, secrets: &str, keys: &[(&str, &str, &str)]) -> TestApp {
    let secrets = secrets_file(dir, secrets);
    let configure = |settings: &mut lottie_render::config::ServerSettings| {
        settings.webhooks.webhook_secrets = Some(secrets);
        settings.webhooks.webhook_allow_http = true;
        settings.webhooks.webhook_allow_networks =
            Some(lottie_render::webhooks::settings::Networks(vec![
                "127.0.0.0/8".parse().unwrap(),
            ]));
    };
    if keys.is_empty() {
        spawn_app_with(configure).await
    } else {
        spawn_app_with_keys(dir, keys, configure).await
    }
}

/// A small render of the ball (its own template) telling `url` when it succeeded.
async fn notified_render(app: &TestApp, url: &str) -> proto::RenderJob {
    let template = app.create_template(BALL).await;
    let mut request = small_request(&template.template_id, proto::Format::Gif);
    request.notify = Some(proto::Notify {
        webhook_url: url.into(),
        events: vec![proto::WebhookEvent::Succeeded as i32],
    });
    app.submit(request).await.unwrap()
}

/// The job's succeeded delivery, polled with GetRenderJob until `done` holds for it.
async fn delivery_when(
    app: &TestApp,
    job_id: &str,
    done: impl Fn(&proto::WebhookDelivery) -> bool,
) -> proto::WebhookDelivery {
    let start = Instant::now();
    loop {
        let job = app.get_job(job_id).await;
        if let Some(delivery) = job.webhooks.iter().find(|d| done(d)) {
            return delivery.clone();
        }
        assert!(start.elapsed() < DELIVERY_LIMIT, "{job:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ended(delivery: &proto::WebhookDelivery) -> bool {
    delivery.state != proto::WebhookDeliveryState::Pending as i32
}

#[tokio::test]
async fn a_429_with_retry_after_is_sent_again_when_the_receiver_says_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let app = webhook_app(dir.path(), &format!("default {secret}\n"), &[]).await;
    // The first attempt of each event is told to come back: in one second, or in half a
    // minute (far past the sender's own first backoff, at most 5 s with its jitter).
    let soon = ScriptedReceiver::start(|_, attempt| match attempt {
        1 => (429, vec![("retry-after", "1".to_owned())]),
        _ => (200, Vec::new()),
    })
    .await;
    let later = ScriptedReceiver::start(|_, _| (429, vec![("retry-after", "30".to_owned())])).await;

    let job = notified_render(&app, &soon.url("/soon")).await;
    let delivered = delivery_when(&app, &job.job_id, ended).await;
    assert_eq!(
        delivered.state,
        proto::WebhookDeliveryState::Delivered as i32
    );
    assert_eq!((delivered.attempts, delivered.last_status), (2, 200));
    let arrivals = soon.arrivals();
    assert_eq!(arrivals.len(), 2, "{arrivals:?}");
    assert_eq!(arrivals[0].id, arrivals[1].id, "the same webhook-id");
    let waited = arrivals[1].at.duration_since(arrivals[0].at).unwrap();
    // A floor only (the machine may be slow): not sent again before the receiver's second.
    assert!(
        waited >= Duration::from_millis(900),
        "sent again after {waited:?}"
    );

    let job = notified_render(&app, &later.url("/later")).await;
    let waiting = delivery_when(&app, &job.job_id, |d| d.attempts >= 1).await;
    assert_eq!(waiting.state, proto::WebhookDeliveryState::Pending as i32);
    assert_eq!(waiting.last_status, 429);
    // Due the receiver's 30 s after it answered, give or take the timestamp's rounding and a
    // slow machine's delay between the answer and its reading (the sender's own first
    // backoff is at most 5 s).
    let next = SystemTime::try_from(waiting.next_attempt_at.unwrap()).unwrap();
    let answered = later.arrivals()[0].at;
    let due_after = next.duration_since(answered).unwrap_or(Duration::ZERO);
    assert!(
        due_after >= Duration::from_secs(29) && due_after <= Duration::from_secs(40),
        "the next attempt is due {due_after:?} after the 429, not the receiver's 30 s"
    );
    assert_eq!(later.arrivals().len(), 1, "{:?}", later.arrivals());
    app.stop().await;
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_the_delivery_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let app = webhook_app(dir.path(), &format!("default {secret}\n"), &[]).await;
    let target = Receiver::start(|_, _| Answer::Status(200)).await;
    let elsewhere = target.url("/moved");
    // Each path answers the redirect status it names, to the target.
    let redirecting = ScriptedReceiver::start(move |path, _| {
        let status = path.trim_start_matches('/').parse().unwrap();
        (status, vec![("location", elsewhere.clone())])
    })
    .await;
    for status in [301u32, 302, 303, 307, 308] {
        let job = notified_render(&app, &redirecting.url(&format!("/{status}"))).await;
        let refused = delivery_when(&app, &job.job_id, ended).await;
        assert_eq!(
            refused.state,
            proto::WebhookDeliveryState::Refused as i32,
            "{status}: {refused:?}"
        );
        assert_eq!(
            (refused.attempts, refused.last_status),
            (1, status),
            "{refused:?}"
        );
    }
    let arrivals: Vec<String> = redirecting
        .arrivals()
        .into_iter()
        .map(|arrival| arrival.path)
        .collect();
    assert_eq!(
        arrivals,
        ["/301", "/302", "/303", "/307", "/308"],
        "each once"
    );
    assert!(target.seen().is_empty(), "followed: {:#?}", target.seen());
    app.stop().await;
}

/// A Standard Webhooks secret of `seed`'s bytes.
fn secret_of(seed: &str) -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(seed)
    )
}

#[tokio::test]
async fn each_tenant_signs_with_its_own_secret_and_a_rotation_signs_twice() {
    let dir = tempfile::tempdir().unwrap();
    let acme = secret_of("acme's webhook secret, 32 bytes!");
    let globex_old = secret_of("globex's old secret, 32 bytes...");
    let globex_new = secret_of("globex's new secret, 32 bytes...");
    let keys = [
        ("acme", "billing", "acme-api-key"),
        ("globex", "ops", "globex-api-key"),
    ];
    let secrets = format!("acme {acme}\nglobex {globex_old}\nglobex {globex_new}\n");
    let app = webhook_app(dir.path(), &secrets, &keys).await;
    let receiver = Receiver::start(|_, _| Answer::Status(200)).await;
    app.use_api_key(Some("acme-api-key"));
    let acme_job = notified_render(&app, &receiver.url("/acme")).await;
    app.use_api_key(Some("globex-api-key"));
    let globex_job = notified_render(&app, &receiver.url("/globex")).await;
    let seen = receiver
        .wait_until("both tenants' events", |seen| seen.len() >= 2)
        .await;
    let of_job = |job: &proto::RenderJob| -> Seen {
        seen.iter()
            .find(|s| s.json()["data"]["jobId"] == job.job_id.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no event of {}: {seen:#?}", job.job_id))
    };
    let (acme_event, globex_event) = (of_job(&acme_job), of_job(&globex_job));
    let signatures = |event: &Seen| {
        event.headers["webhook-signature"]
            .to_str()
            .unwrap()
            .split(' ')
            .count()
    };
    assert_eq!(signatures(&acme_event), 1);
    assert!(verify(&acme, &acme_event), "acme's secret signs acme's");
    assert!(!verify(&globex_old, &acme_event) && !verify(&globex_new, &acme_event));
    assert_eq!(
        signatures(&globex_event),
        2,
        "one per secret of the rotation"
    );
    assert!(
        verify(&globex_old, &globex_event),
        "the old secret still checks"
    );
    assert!(verify(&globex_new, &globex_event), "the new secret checks");
    assert!(
        !verify(&acme, &globex_event),
        "acme's secret never signs globex's"
    );
    app.stop().await;
}
