//! Sending one webhook request, bounded: the name resolved by our own resolver
//! ([`super::resolver`]), which drops every address the [`Policy`] refuses (so a name that
//! resolves to loopback, or resolves elsewhere at submit and to a private address now, is
//! never connected to: DNS rebinding); a connect timeout and an answer timeout; at most [`MAX_ANSWER_BYTES`] of the answer read;
//! no redirect followed (hyper's client follows none). TLS with the system's roots
//! (`/etc/ssl/certs`, Debian's ca-certificates).

use super::destination::{Destination, Policy};
use super::resolver::GuardedResolver;
use super::retry::{parse_retry_after, Outcome};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Time to connect (TCP and TLS) to a receiver: a dead one costs a delivery slot this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time from the request's start to the end of the answer (the 10 s).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a receiver's answer read: its status is what matters; the rest is dropped.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Sends webhook requests.
#[derive(Clone)]
pub struct Sender {
    client: Client<HttpsConnector<HttpConnector<GuardedResolver>>, Full<Bytes>>,
    policy: Arc<Policy>,
    answer_timeout: Duration,
}

impl Sender {
    /// A sender under `policy`, trusting the system's certificate authorities.
    pub fn new(policy: Arc<Policy>) -> std::io::Result<Sender> {
        let mut http = HttpConnector::new_with_resolver(GuardedResolver::new(policy.clone()));
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(tokio_rustls::rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Sender {
            client,
            policy,
            answer_timeout: ANSWER_TIMEOUT,
        })
    }

    /// The same sender, giving receivers `answer_timeout` to answer (tests shorten it).
    pub fn with_answer_timeout(self, answer_timeout: Duration) -> Sender {
        Sender {
            answer_timeout,
            ..self
        }
    }

    /// POSTs `body` with `headers` to `destination`; what came of it.
    pub async fn send(
        &self,
        destination: &Destination,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Outcome {
        // The URL was checked at submit; the policy may have changed since (a restart).
        if self
            .policy
            .destination(&destination.uri.to_string())
            .is_err()
        {
            return Outcome::Refused;
        }
        let mut request = http::Request::post(destination.uri.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "lottie-render-webhooks");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let Ok(request) = request.body(Full::new(body)) else {
            return Outcome::Refused;
        };
        let exchange = async {
            let response = match self.client.request(request).await {
                Ok(response) => response,
                Err(error) if refused_by_resolver(&error) => return Some(Outcome::Refused),
                Err(_) => return None,
            };
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, SystemTime::now()));
            // Read (at most the cap) so the connection can be reused; an answer over it or
            // broken half-way still answered its status.
            let _ = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await;
            Some(Outcome::Answered {
                status,
                retry_after,
            })
        };
        match tokio::time::timeout(self.answer_timeout, exchange).await {
            Ok(Some(outcome)) => outcome,
            Ok(None) | Err(_) => Outcome::NoAnswer,
        }
    }
}

/// Whether the connection was never tried because our resolver refused every address.
fn refused_by_resolver(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return true;
            }
        }
        cause = current.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::sync::mpsc;

    /// A receiver on 127.0.0.1 answering the statuses of `answers` in turn (with
    /// `Retry-After: 1` on a 503), sending each request it saw (headers, body) to the test.
    async fn receiver(
        answers: Vec<u16>,
    ) -> (
        SocketAddr,
        mpsc::UnboundedReceiver<(http::HeaderMap, Bytes)>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (seen, requests) = mpsc::unbounded_channel();
        let answers = Arc::new(std::sync::Mutex::new(answers.into_iter()));
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (seen, answers) = (seen.clone(), answers.clone());
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (seen, answers) = (seen.clone(), answers.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            seen.send((parts.headers, body)).unwrap();
                            let status = answers.lock().unwrap().next().unwrap_or(200);
                            let mut answer = http::Response::new(Full::new(Bytes::from("ok")));
                            *answer.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            if status == 503 {
                                answer
                                    .headers_mut()
                                    .insert("retry-after", "1".parse().unwrap());
                            }
                            Ok::<_, std::convert::Infallible>(answer)
                        }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        (address, requests)
    }

    fn open_policy() -> Arc<Policy> {
        Arc::new(Policy {
            allow_http: true,
            allowed_networks: Policy::parse_networks("127.0.0.0/8").unwrap(),
        })
    }

    #[tokio::test]
    async fn a_receiver_sees_the_request_and_its_answers_are_reported() {
        let (address, mut requests) = receiver(vec![503, 200, 400]).await;
        let policy = open_policy();
        let sender = Sender::new(policy.clone()).unwrap();
        let destination = policy
            .destination(&format!("http://{address}/hook"))
            .unwrap();
        let headers = [("webhook-id", "msg_1".to_owned())];
        let body = Bytes::from_static(b"{\"type\":\"render.succeeded\"}");
        let outcomes = [
            Outcome::Answered {
                status: 503,
                retry_after: Some(Duration::from_secs(1)),
            },
            Outcome::Answered {
                status: 200,
                retry_after: None,
            },
            Outcome::Answered {
                status: 400,
                retry_after: None,
            },
        ];
        for expected in outcomes {
            assert_eq!(
                sender.send(&destination, &headers, body.clone()).await,
                expected
            );
            let (seen, seen_body) = requests.recv().await.unwrap();
            assert_eq!(seen["webhook-id"], "msg_1");
            assert_eq!(seen["content-type"], "application/json");
            assert_eq!(seen_body, body);
        }
    }

    #[tokio::test]
    async fn refused_addresses_are_never_connected_to() {
        let (address, mut requests) = receiver(vec![]).await;
        // Allowed when the URL was checked; refused by the sender's own policy now.
        let destination = open_policy()
            .destination(&format!("http://{address}/hook"))
            .unwrap();
        let strict = Arc::new(Policy {
            allow_http: true,
            allowed_networks: Vec::new(),
        });
        let sender = Sender::new(strict.clone()).unwrap();
        let outcome = sender.send(&destination, &[], Bytes::new()).await;
        assert_eq!(outcome, Outcome::Refused);
        assert!(requests.try_recv().is_err(), "nothing reached the receiver");
    }
}
