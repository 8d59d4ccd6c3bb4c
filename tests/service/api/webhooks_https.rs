//! Webhooks over HTTPS, as they travel in production (`webhooks::client`: TLS with the
//! system's roots, read by rustls-native-certs). The real `lottie-render serve` binary runs as
//! a process of its own, so the environment is its own: `SSL_CERT_FILE`, the variable
//! rustls-native-certs reads in place of the system's store, names a test CA made here. No
//! test-only trust switch: the sender builds its roots at start exactly as it does on a
//! host whose /etc/ssl/certs holds that CA. Receivers listen on 127.0.0.1, allowed by
//! `--webhook-allow-networks` (never `--webhook-allow-http`: these URLs are https).
//!
//! A receiver whose certificate that CA signed gets the event, signed; one whose certificate
//! another CA signed never gets a byte of it (the sender refuses the handshake), and the
//! delivery stays pending without a status, retried after a backoff like any receiver that
//! cannot be reached.

use super::pki::{TestCa, TestCertificate};
use super::webhooks::{secrets_file, verify, Seen, BALL, SECRET};
use crate::helpers::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_rustls::rustls;

/// How long a test waits for a delivery, or for its first attempt, before it gives up.
const DELIVERY_LIMIT: Duration = Duration::from_secs(60);

/// An HTTPS receiver on 127.0.0.1 answering 200 to every request, presenting `certificate`.
struct TlsReceiver {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Why each handshake that failed failed, as the receiver's side saw it.
    failed_handshakes: Arc<Mutex<Vec<String>>>,
}

fn server_config(certificate: &TestCertificate) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(certificate.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(certificate.key_pem.as_bytes()).unwrap();
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap()
}

impl TlsReceiver {
    async fn start(certificate: &TestCertificate) -> TlsReceiver {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(certificate)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let failed_handshakes: Arc<Mutex<Vec<String>>> = Arc::default();
        let (recorded, failures) = (seen.clone(), failed_handshakes.clone());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, seen, failures) =
                    (acceptor.clone(), recorded.clone(), failures.clone());
                tokio::spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(error) => {
                            failures.lock().unwrap().push(error.to_string());
                            return;
                        }
                    };
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let seen = seen.clone();
                            async move {
                                let (parts, body) = request.into_parts();
                                let body = body.collect().await.unwrap().to_bytes();
                                seen.lock().unwrap().push(Seen {
                                    headers: parts.headers,
                                    body,
                                    answered: Some(200),
                                });
                                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                    Bytes::from("ok"),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsReceiver {
            address,
            seen,
            failed_handshakes,
        }
    }

    fn url(&self) -> String {
        format!("https://{}/hooks/render", self.address)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn failed_handshakes(&self) -> Vec<String> {
        self.failed_handshakes.lock().unwrap().clone()
    }
}

/// The job's delivery of its succeeded event once `done` holds for it, polled with
/// GetRenderJob.
async fn delivery_when(
    server: &ServerProcess,
    job_id: &str,
    done: impl Fn(&proto::WebhookDelivery) -> bool,
) -> proto::WebhookDelivery {
    let renders = renders_on(server.channel().await);
    let start = Instant::now();
    loop {
        let job = get_job_through(renders.clone(), job_id).await.unwrap();
        let delivery = job
            .webhooks
            .iter()
            .find(|d| d.event == proto::WebhookEvent::Succeeded as i32);
        if let Some(delivery) = delivery.filter(|d| done(d)) {
            return delivery.clone();
        }
        assert!(start.elapsed() < DELIVERY_LIMIT, "{job:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn webhooks_go_over_https_to_a_receiver_the_system_roots_trust_and_never_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let trusted_ca = TestCa::new("lottie-render test webhook CA");
    let other_ca = TestCa::new("a CA this machine does not trust");
    let roots = trusted_ca.write(dir.path(), "system-roots.pem");
    let secrets = secrets_file(dir.path(), &format!("default {SECRET}\n"));
    let trusted = TlsReceiver::start(&trusted_ca.server(1)).await;
    let untrusted = TlsReceiver::start(&other_ca.server(2)).await;
    let server = ServerProcess::start_with_env(
        &[
            "--workers",
            "1",
            "--webhook-secrets",
            secrets.to_str().unwrap(),
            "--webhook-allow-networks",
            "127.0.0.0/8",
        ],
        &[("SSL_CERT_FILE", roots.to_str().unwrap())],
    );
    let template = TemplateServiceClient::new(server.channel().await)
        .create_template(create_request("ball", corpus(BALL)))
        .await
        .unwrap()
        .into_inner();
    let renders = renders_on(server.channel().await);
    let notified = |url: String| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.notify = Some(proto::Notify {
            webhook_url: url,
            events: vec![proto::WebhookEvent::Succeeded as i32],
        });
        request
    };
    let (job, _) = submit_keyed_through(renders.clone(), &unique_key(), notified(trusted.url()))
        .await
        .unwrap();
    let delivered = delivery_when(&server, &job.job_id, |d| {
        d.state != proto::WebhookDeliveryState::Pending as i32
    })
    .await;
    assert_eq!(
        delivered.state,
        proto::WebhookDeliveryState::Delivered as i32,
        "{delivered:?}; the trusted receiver's failed handshakes: {:?}",
        trusted.failed_handshakes()
    );
    assert_eq!((delivered.attempts, delivered.last_status), (1, 200));
    let seen = trusted.seen();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert!(verify(SECRET, &seen[0]), "signature of {:#?}", seen[0]);
    assert_eq!(seen[0].id(), delivered.webhook_id);
    let body = seen[0].json();
    assert_eq!(body["type"], "render.succeeded", "{body}");
    assert_eq!(body["data"]["jobId"], job.job_id.as_str());

    // The certificate another CA signed: the handshake is refused, nothing is sent.
    let (job, _) = submit_keyed_through(renders, &unique_key(), notified(untrusted.url()))
        .await
        .unwrap();
    let attempted = delivery_when(&server, &job.job_id, |d| d.attempts >= 1).await;
    assert_eq!(
        attempted.state,
        proto::WebhookDeliveryState::Pending as i32,
        "retried later, as an unreachable receiver is: {attempted:?}"
    );
    assert_eq!(attempted.last_status, 0, "no answer: {attempted:?}");
    assert!(attempted.next_attempt_at.is_some(), "{attempted:?}");
    assert!(untrusted.seen().is_empty(), "{:#?}", untrusted.seen());
    // The receiver's side of the refused handshake (its task may read the alert a moment
    // after the sender has recorded the attempt).
    let start = Instant::now();
    while untrusted.failed_handshakes().is_empty() {
        assert!(
            start.elapsed() < DELIVERY_LIMIT,
            "the sender connected and refused the certificate in the handshake"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failures = untrusted.failed_handshakes();
    assert!(
        failures.iter().all(|failure| failure.contains("alert")),
        "the sender ended each handshake with an alert: {failures:?}"
    );
    let metrics = server.metrics_text().await;
    let retried = sample_value(
        &metrics,
        "lottie_render_webhook_attempts_total{outcome=\"retried\"}",
    );
    assert!(retried >= Some(1.0), "{metrics}");
    assert!(server.stop().await);
}
