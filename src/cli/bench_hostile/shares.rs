//! Fair shares of the connection-level pools: request-body buffers, watch and download slots, TLS handshakes (issue 21, items 1, 8, 9).

use super::payloads::declared_largest_one_byte_short;
use super::{counted, outcome, parent_chain, raw_connection, start_server, Case, Target};
use super::{ATTACKER_KEY, BYSTANDER_KEY, BYSTANDER_LIMIT};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic::Status;

/// Streams of each flood: the four, which filled the old single budget.
const FLOOD_BODIES: usize = 4;
/// How long the flooding streams stay open (silent) while the bystander calls: beyond the
/// started server's body deadline (2 s).
const FLOOD_HOLD: Duration = Duration::from_secs(3);
/// Watches the attacker opens on its own job: every slot of the started server.
const ATTACKER_WATCHES: usize = 64;
/// Silent TLS connections: 64 from each of 8 loopback addresses, the attack.
const SILENT_ADDRESSES: u8 = 8;
const SILENT_PER_ADDRESS: usize = 64;
/// How long the silent connections are held while the honest client calls.
const SILENT_HOLD: Duration = Duration::from_secs(2);

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "health-body-flood-4x64mib",
            expected: "health: REQUEST_TOO_LARGE at once (KiBs); the attacker's CreateTemplates: what its share holds (128 MiB alone, charged as bytes arrive) until the body deadline (REQUEST_BODY_TIMEOUT), the rest REQUEST_BUFFERS_BUSY; bystander served",
            requests: 2 * FLOOD_BODIES as u32,
            attack: |target| Box::pin(body_flood(target)),
        },
        Case {
            name: "tenant-watchers-over-share",
            expected: "the attacker's watches beyond its share (24 of 64 alone) TOO_MANY_WATCHERS; the bystander tenant's watch served",
            requests: ATTACKER_WATCHES as u32,
            attack: |target| Box::pin(watchers_over_share(target)),
        },
        Case {
            name: "tls-silent-8-addresses",
            expected: "on a TLS server of its own: 16 of each address's 64 silent connections held, the rest closed at once; an honest TLS handshake+call (measured inside the case: the generic bystander speaks plaintext to the main server) within 1 s",
            requests: u32::from(SILENT_ADDRESSES) * SILENT_PER_ADDRESS as u32,
            attack: |target| Box::pin(silent_tls_connections(target)),
        },
    ]
}

/// [`FLOOD_BODIES`] streams to `path` on one connection, each sending the never-finished
/// body, held silent for [`FLOOD_HOLD`]; answers the count of each answer.
async fn flood(
    target: &Target,
    path: &str,
    key: Option<&str>,
    counts: &mut BTreeMap<String, usize>,
) -> anyhow::Result<()> {
    let (mut client, driver) = raw_connection(target).await?;
    let body = declared_largest_one_byte_short();
    let (mut answers, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..FLOOD_BODIES {
        client = client.ready().await?;
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{path}", target.address))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let (Some(key), true) = (key, target.keys) {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let (answer, mut stream) = client.send_request(request.body(())?, false)?;
        stream.send_data(body.clone(), false)?;
        answers.push(answer);
        streams.push(stream);
    }
    tokio::time::sleep(FLOOD_HOLD).await;
    for answer in answers {
        let text = match tokio::time::timeout(Duration::from_secs(10), answer).await {
            Ok(Ok(response)) => match Status::from_header_map(response.headers()) {
                Some(status) => outcome::<()>(&Err(status)),
                None => format!("HTTP {}", response.status()),
            },
            Ok(Err(error)) => format!("reset ({error})"),
            Err(_) => "no answer".into(),
        };
        *counts.entry(text).or_default() += 1;
    }
    drop(streams);
    driver.abort();
    Ok(())
}

/// The health flood (anonymous: health needs no identity), then the same four
/// bodies as the attacking tenant's CreateTemplates; the generic bystander calls meanwhile.
async fn body_flood(target: &Target) -> anyhow::Result<String> {
    let mut health = BTreeMap::new();
    flood(target, "/grpc.health.v1.Health/Check", None, &mut health).await?;
    let mut create = BTreeMap::new();
    flood(
        target,
        crate::grpc::methods::Method::CreateTemplate.path(),
        Some(ATTACKER_KEY),
        &mut create,
    )
    .await?;
    Ok(format!(
        "health: {}; CreateTemplate: {}",
        counted(&health),
        counted(&create)
    ))
}

/// A render that runs for minutes (cancelled at the end), as the tenant of `key`.
async fn long_job(channel: &Channel, target: &Target, key: &str) -> anyhow::Result<String> {
    let mut slow = parent_chain(20);
    slow["op"] = json!(1800);
    for layer in slow["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(1800);
    }
    let template = TemplateServiceClient::new(channel.clone())
        .create_template(target.template_request("long", serde_json::to_vec(&slow)?, key)?)
        .await?
        .into_inner();
    let mut request = target.as_tenant(
        proto::RenderRequest {
            template_id: template.template_id,
            modifications: None,
            output: square_output(proto::Format::Mp4, 60, 1920),
            notify: None,
            theme: String::new(),
        },
        key,
    )?;
    request.metadata_mut().insert(
        "idempotency-key",
        format!("bench-hostile-{}-{key}", std::process::id()).parse()?,
    );
    Ok(RenderServiceClient::new(channel.clone())
        .submit_render(request)
        .await?
        .into_inner()
        .job_id)
}

/// Opens a watch of `job_id` as the tenant of `key`, its first snapshot read.
async fn watch(
    channel: &Channel,
    target: &Target,
    key: &str,
    job_id: &str,
) -> anyhow::Result<Result<tonic::Streaming<proto::RenderJob>, Status>> {
    let request = target.as_tenant(
        proto::WatchRenderJobRequest {
            job_id: job_id.to_owned(),
        },
        key,
    )?;
    let answer = async {
        let mut stream = RenderServiceClient::new(channel.clone())
            .watch_render_job(request)
            .await?
            .into_inner();
        stream.message().await?;
        Ok::<_, Status>(stream)
    };
    Ok(answer.await)
}

/// The attacking tenant watches its own job [`ATTACKER_WATCHES`] times (every slot); then
/// the bystander tenant watches its own job.
async fn watchers_over_share(target: &Target) -> anyhow::Result<String> {
    let channels = [target.channel().await?, target.channel().await?];
    let attacker_job = long_job(&channels[0], target, ATTACKER_KEY).await?;
    let bystander_job = long_job(&channels[1], target, BYSTANDER_KEY).await?;
    let mut counts = BTreeMap::<String, usize>::new();
    let mut held = Vec::new();
    for index in 0..ATTACKER_WATCHES {
        let answer = watch(&channels[index % 2], target, ATTACKER_KEY, &attacker_job).await?;
        *counts.entry(outcome(&answer)).or_default() += 1;
        held.extend(answer.ok());
    }
    let started = Instant::now();
    let bystander = watch(&channels[1], target, BYSTANDER_KEY, &bystander_job).await?;
    let waited = started.elapsed();
    let answer = format!(
        "attacker: {}; bystander's watch {} in {:.0} ms",
        counted(&counts),
        outcome(&bystander),
        waited.as_secs_f64() * 1e3
    );
    drop((held, bystander));
    for (key, job_id) in [(ATTACKER_KEY, attacker_job), (BYSTANDER_KEY, bystander_job)] {
        let request = target.as_tenant(proto::CancelRenderJobRequest { job_id }, key)?;
        let _ = RenderServiceClient::new(channels[0].clone())
            .cancel_render_job(request)
            .await;
    }
    Ok(answer)
}

/// A CA and a server certificate for localhost / 127.0.0.1 in `dir`, made with the openssl
/// CLI; answers the CA's PEM.
pub(super) fn make_certificates(dir: &Path) -> anyhow::Result<String> {
    let openssl = |args: &[&str]| -> anyhow::Result<()> {
        let output = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=bench-hostile-ca",
    ]);
    openssl(&ca)?;
    let mut request = vec!["req"];
    request.extend(ec);
    request.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&request)?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])?;
    Ok(std::fs::read_to_string(dir.join("ca.pem"))?)
}

/// An honest TLS client: a fresh connection, its handshake and one ListTemplates call as
/// the bystander tenant; answers the outcome and how long it all took.
pub(super) async fn honest_tls_call(
    address: SocketAddr,
    ca: &str,
) -> anyhow::Result<(String, Duration)> {
    let started = Instant::now();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    let connected = Channel::from_shared(format!("https://{address}"))?
        .tls_config(tls)?
        .connect_timeout(BYSTANDER_LIMIT * 10)
        .connect()
        .await;
    let answer = match connected {
        Ok(channel) => {
            let mut request = tonic::Request::new(proto::ListTemplatesRequest {
                page_size: 1,
                page_token: String::new(),
            });
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {BYSTANDER_KEY}").parse()?);
            outcome(
                &TemplateServiceClient::new(channel)
                    .list_templates(request)
                    .await,
            )
        }
        Err(error) => format!("no connection ({error})"),
    };
    Ok((answer, started.elapsed()))
}

/// 64 silent TCP connections from each of 127.0.0.2 to 127.0.0.9 to a TLS server of the
/// case's own; an honest client from 127.0.0.1 handshakes and calls meanwhile.
async fn silent_tls_connections(target: &Target) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let ca = make_certificates(dir.path())?;
    let flag = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let (_server, address) = start_server(
        &[
            "--tls-cert".into(),
            flag("server.pem"),
            "--tls-key".into(),
            flag("server.key"),
        ],
        target.address_space_bytes,
    )?;
    let (before, _) = honest_tls_call(address, &ca).await?;
    let mut silent = Vec::new();
    let mut failed = 0usize;
    for host in 2..2 + SILENT_ADDRESSES {
        for _ in 0..SILENT_PER_ADDRESS {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::from(([127, 0, 0, host], 0)))?;
            match tokio::time::timeout(BYSTANDER_LIMIT, socket.connect(address)).await {
                Ok(Ok(stream)) => silent.push(stream),
                _ => failed += 1,
            }
        }
    }
    // The server sees every silent connection before the honest one (one accept queue).
    let (answer, took) = honest_tls_call(address, &ca).await?;
    tokio::time::sleep(SILENT_HOLD.saturating_sub(took)).await;
    // Connections the server closed read end-of-file (or an error) now; open ones would block.
    let closed = silent
        .iter()
        .filter(|stream| {
            let mut byte = [0u8; 1];
            match stream.try_read(&mut byte) {
                Ok(read) => read == 0,
                Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
            }
        })
        .count();
    drop(silent);
    Ok(format!(
        "{} silent connections ({failed} not connected), {closed} closed by the server; honest TLS handshake+call {answer} in {:.0} ms{}; before the attack: {before}",
        usize::from(SILENT_ADDRESSES) * SILENT_PER_ADDRESS - failed,
        took.as_secs_f64() * 1e3,
        if took <= BYSTANDER_LIMIT { "" } else { " (slowed)" },
    ))
}
