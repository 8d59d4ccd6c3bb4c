//! The third round (issue 42) against the pools a caller can hold, from eight loopback
//! addresses at once (127.0.0.2 to .9: the server shares per address before identity):
//! request buffers declared and never sent, silent connections (plaintext, and TLS
//! handshaken then silent from one address). Each case's own bystander (the bystander
//! tenant, from 127.0.0.1, on fresh connections) calls while the attack holds and says how
//! many of its calls were served within a second. Streams held (watches, downloads) are in
//! `third_round_streams`.

use super::raw_calls::{
    attacker_address, closed_by_peer, connect_from, door_call, door_head, grpc_headers, h2_from,
    open_call,
};
use super::shares::{honest_tls_call, make_certificates};
use super::{counted, outcome, parent_chain, start_server, Case, Target};
use super::{BYSTANDER_KEY, BYSTANDER_LIMIT};
use crate::grpc::proto;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use crate::middleware::request_body::MAX_REQUEST_BYTES;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Attacking addresses: the four, doubled, as the pools test runs them.
pub(super) const ADDRESSES: usize = 8;
/// How long the declaring attackers hold on: past the started server's body deadline (2 s)
/// and the 5 s without a byte, so each of their calls is refused and sent again.
const DECLARED_HOLD: Duration = Duration::from_secs(7);
/// What a declared SubmitRender says it will send (the 4 MiB).
const DECLARED_RENDER_BYTES: usize = 4 << 20;
/// The bystander's pause between calls, and the attackers' head start.
const BYSTANDER_PAUSE: Duration = Duration::from_millis(100);
const RAMP: Duration = Duration::from_millis(500);
/// Silent TCP connections from each address: 44 past the 256 one address may hold.
const SILENT_PER_ADDRESS: usize = 300;
/// The started server's first-request deadline (`--first-request-timeout-ms`'s 10 s) and a
/// second: every silent connection must be closed by then.
const FIRST_REQUEST_DEADLINE: Duration = Duration::from_secs(11);
/// Handshaken-then-silent TLS connections from one address.
const TLS_SILENT: usize = 300;
/// The door's raw template upload, whose body is the Lottie file.
const RAW_UPLOAD: &str = "/v1/templates?name=declared";
const SUBMIT_RENDER: &str = crate::grpc::methods::Method::SubmitRender.path();
const CREATE_TEMPLATE: &str = crate::grpc::methods::Method::CreateTemplate.path();

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "declared-not-sent-8-addresses",
            expected: "nothing held for bytes not sent: the attackers' calls REQUEST_BODY_TIMEOUT at the body deadline, sent again and again for 7 s; the bystander's list and get ≥ 95 % served within 1 s (was 2–3 of 36 in 70 s)",
            requests: (ADDRESSES * 4) as u32,
            attack: |target| Box::pin(declared_not_sent(target)),
        },
        Case {
            name: "2400-silent-tcp-8-addresses",
            expected: "256 of each address's 300 held, the rest closed at once; all closed at the first-request deadline (10 s); a new connection's call within 1 s meanwhile (20,000 filled the descriptors)",
            requests: (ADDRESSES * SILENT_PER_ADDRESS) as u32,
            attack: |target| Box::pin(silent_connections(target)),
        },
        Case {
            name: "tls-300-handshaken-silent-one-address",
            expected: "on a TLS server of its own: 256 handshaken, the rest closed at accept; all closed at the first-request deadline (10 s); an honest TLS handshake+call within 1 s (2,000 stayed open)",
            requests: TLS_SILENT as u32,
            attack: |target| Box::pin(silent_tls(target)),
        },
    ]
}

/// The bystander's calls, how many were served within [`BYSTANDER_LIMIT`] and the slowest.
#[derive(Default)]
struct Served {
    calls: usize,
    served: usize,
    worst: Duration,
}

impl std::fmt::Display for Served {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{} of {} served within 1 s (worst {:.0} ms)",
            self.served,
            self.calls,
            self.worst.as_secs_f64() * 1e3
        )
    }
}

/// The bystander on a fresh connection from 127.0.0.1: ListTemplates and GetTemplate of its
/// own template in turn until `until`.
async fn list_and_get_until(target: &Target, until: Instant) -> anyhow::Result<Served> {
    let channel = target.channel().await?;
    let mut templates = TemplateServiceClient::new(channel);
    let template_id = templates
        .create_template(target.template_request(
            "bystander",
            serde_json::to_vec(&parent_chain(2))?,
            BYSTANDER_KEY,
        )?)
        .await?
        .into_inner()
        .template_id;
    tokio::time::sleep(RAMP).await;
    let mut served = Served::default();
    while Instant::now() < until {
        let started = Instant::now();
        let answer = if served.calls % 2 == 0 {
            let request = proto::ListTemplatesRequest {
                page_size: 1,
                page_token: String::new(),
            };
            let call = templates.list_templates(target.as_tenant(request, BYSTANDER_KEY)?);
            tokio::time::timeout(BYSTANDER_LIMIT * 5, call)
                .await
                .map(|answer| answer.is_ok())
        } else {
            let request = proto::GetTemplateRequest {
                template_id: template_id.clone(),
            };
            let call = templates.get_template(target.as_tenant(request, BYSTANDER_KEY)?);
            tokio::time::timeout(BYSTANDER_LIMIT * 5, call)
                .await
                .map(|answer| answer.is_ok())
        };
        let took = started.elapsed();
        served.calls += 1;
        served.worst = served.worst.max(took);
        if answer == Ok(true) && took <= BYSTANDER_LIMIT {
            served.served += 1;
        }
        tokio::time::sleep(BYSTANDER_PAUSE).await;
    }
    Ok(served)
}

/// What the declaring attackers were answered, and the bytes they sent.
#[derive(Default)]
struct Declared {
    answers: BTreeMap<String, usize>,
    bytes_sent: usize,
}

type SharedDeclared = Arc<Mutex<Declared>>;

fn note(declared: &SharedDeclared, answer: String, bytes: usize) {
    // A poisoned tally is still a tally.
    let mut declared = declared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *declared.answers.entry(answer).or_default() += 1;
    declared.bytes_sent += bytes;
}

/// One door call declaring `length` bytes and sending only its head, again and again until
/// `until`, from the attacker address `index`.
async fn declare_at_the_door(
    target: &Target,
    (index, until): (usize, Instant),
    (path, length): (&str, usize),
    declared: &SharedDeclared,
) {
    while Instant::now() < until {
        let key = format!("bench-declared-{}", uuid::Uuid::new_v4());
        let head = door_head(
            target,
            ("POST", path),
            None,
            Some(length),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", &key),
            ],
        );
        let answer = match connect_from(attacker_address(index), target.address).await {
            Ok(stream) => match door_call(stream, &head, &[]).await {
                Ok((answer, _)) => answer.to_string(),
                Err(error) => format!("bench error: {error:#}"),
            },
            Err(error) => format!("not connected ({error})"),
        };
        note(declared, answer, head.len());
    }
}

/// One gRPC call of `path` declaring `length` bytes and sending only the 5-byte prefix,
/// again and again until `until`, from the attacker address `index`.
async fn declare_over_grpc(
    target: &Target,
    (index, until): (usize, Instant),
    (path, length): (&str, usize),
    declared: &SharedDeclared,
) {
    let Ok((client, driver)) = h2_from(target, attacker_address(index), None).await else {
        note(declared, "not connected".into(), 0);
        return;
    };
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&(length as u32).to_be_bytes());
    let prefix = Bytes::from(prefix);
    while Instant::now() < until {
        let answer = match grpc_headers(target, path, None) {
            Ok(mut headers) => {
                if let Ok(key) = format!("bench-declared-{}", uuid::Uuid::new_v4()).parse() {
                    headers.headers_mut().insert("idempotency-key", key);
                }
                match open_call(&client, headers, (prefix.clone(), false)).await {
                    Ok(Err(refused)) => refused,
                    Ok(Ok(_held)) => "held".into(),
                    Err(error) => format!("bench error: {error:#}"),
                }
            }
            Err(error) => format!("bench error: {error:#}"),
        };
        note(declared, answer, prefix.len());
    }
    driver.abort();
}

/// Eight addresses each declaring a 64 MiB CreateTemplate and a 4 MiB SubmitRender at the
/// door and over gRPC and sending nothing more, again as each is refused, while the
/// bystander lists and gets.
async fn declared_not_sent(target: &Target) -> anyhow::Result<String> {
    let until = Instant::now() + DECLARED_HOLD;
    let declared = SharedDeclared::default();
    let attackers = (0..ADDRESSES).map(|index| {
        let declared = &declared;
        async move {
            tokio::join!(
                declare_at_the_door(
                    target,
                    (index, until),
                    (RAW_UPLOAD, MAX_REQUEST_BYTES),
                    declared
                ),
                declare_at_the_door(
                    target,
                    (index, until),
                    ("/v1/renders", DECLARED_RENDER_BYTES),
                    declared
                ),
                declare_over_grpc(
                    target,
                    (index, until),
                    (CREATE_TEMPLATE, MAX_REQUEST_BYTES - 5),
                    declared
                ),
                declare_over_grpc(
                    target,
                    (index, until),
                    (SUBMIT_RENDER, DECLARED_RENDER_BYTES),
                    declared
                ),
            );
        }
    });
    let (_, served) = tokio::join!(
        futures_util::future::join_all(attackers),
        list_and_get_until(target, until)
    );
    let served = served?;
    let declared = declared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok(format!(
        "attackers ({:.1} KiB sent in all): {}; bystander's list and get: {served}",
        declared.bytes_sent as f64 / 1024.0,
        counted(&declared.answers)
    ))
}

/// A new connection from 127.0.0.1 and one ListTemplates on it as the bystander: its
/// outcome and how long both took.
async fn fresh_call(target: &Target) -> (String, Duration) {
    let started = Instant::now();
    let answer = async {
        let channel = Channel::from_shared(format!("http://{}", target.address))?
            .connect_timeout(BYSTANDER_LIMIT * 5)
            .connect()
            .await?;
        let request = proto::ListTemplatesRequest {
            page_size: 1,
            page_token: String::new(),
        };
        let mut templates = TemplateServiceClient::new(channel);
        let call = templates.list_templates(target.as_tenant(request, BYSTANDER_KEY)?);
        Ok::<_, anyhow::Error>(
            match tokio::time::timeout(BYSTANDER_LIMIT * 5, call).await {
                Ok(answer) => outcome(&answer),
                Err(_) => "no answer within 5 s".into(),
            },
        )
    };
    let answer = answer
        .await
        .unwrap_or_else(|error| format!("no connection ({error:#})"));
    (answer, started.elapsed())
}

/// "OK in 3 ms", flagged when slower than the bystander's limit.
pub(super) fn timed((answer, took): &(String, Duration)) -> String {
    format!(
        "{answer} in {:.0} ms{}",
        took.as_secs_f64() * 1e3,
        if *took <= BYSTANDER_LIMIT {
            ""
        } else {
            " (slowed)"
        }
    )
}

/// [`SILENT_PER_ADDRESS`] TCP connections from each of eight addresses that never send a
/// byte; a new connection calls meanwhile, and again once the first-request deadline passed.
async fn silent_connections(target: &Target) -> anyhow::Result<String> {
    let mut silent = Vec::new();
    let mut failed = 0usize;
    for index in 0..ADDRESSES {
        for _ in 0..SILENT_PER_ADDRESS {
            let connecting = connect_from(attacker_address(index), target.address);
            match tokio::time::timeout(BYSTANDER_LIMIT, connecting).await {
                Ok(Ok(stream)) => silent.push(stream),
                _ => failed += 1,
            }
        }
    }
    let connected = Instant::now();
    let during = fresh_call(target).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let closed_at_once = silent
        .iter()
        .filter(|stream| closed_by_peer(stream))
        .count();
    tokio::time::sleep(FIRST_REQUEST_DEADLINE.saturating_sub(connected.elapsed())).await;
    let closed_by_deadline = silent
        .iter()
        .filter(|stream| closed_by_peer(stream))
        .count();
    let after = fresh_call(target).await;
    Ok(format!(
        "{} connected ({failed} not), {closed_at_once} closed at once, {closed_by_deadline} closed after {} s; a new connection's call during: {}, after: {}",
        silent.len(),
        FIRST_REQUEST_DEADLINE.as_secs(),
        timed(&during),
        timed(&after)
    ))
}

/// A TLS client trusting only `ca` (PEM).
fn tls_connector(ca: &str) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(certificate?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// On a TLS server of the case's own: [`TLS_SILENT`] connections from 127.0.0.2 that
/// complete their handshake and send nothing more; an honest client from 127.0.0.1
/// handshakes and calls meanwhile, and again once the first-request deadline passed.
async fn silent_tls(target: &Target) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let ca = make_certificates(dir.path())?;
    let flag = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let tls_flags = [
        "--tls-cert".into(),
        flag("server.pem"),
        "--tls-key".into(),
        flag("server.key"),
    ];
    let (_server, address) = start_server(&tls_flags, target.address_space_bytes)?;
    let connector = tls_connector(&ca)?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost")?;
    let mut silent = Vec::new();
    let mut failed = 0usize;
    for _ in 0..TLS_SILENT {
        let handshake = async {
            let tcp = connect_from(attacker_address(0), address).await?;
            Ok::<_, anyhow::Error>(connector.connect(name.clone(), tcp).await?)
        };
        match tokio::time::timeout(BYSTANDER_LIMIT * 2, handshake).await {
            Ok(Ok(stream)) => silent.push(stream),
            _ => failed += 1,
        }
    }
    let handshaken = Instant::now();
    let during = honest_tls_call(address, &ca).await?;
    tokio::time::sleep(FIRST_REQUEST_DEADLINE.saturating_sub(handshaken.elapsed())).await;
    let closed = silent
        .iter()
        .filter(|stream| closed_by_peer(stream.get_ref().0))
        .count();
    let after = honest_tls_call(address, &ca).await?;
    Ok(format!(
        "{} handshaken ({failed} not), {closed} closed after {} s; honest TLS handshake+call during: {}, after: {}",
        silent.len(),
        FIRST_REQUEST_DEADLINE.as_secs(),
        timed(&during),
        timed(&after)
    ))
}
