//! The attackers of the pools test: each holds all it can of its row's pool until it is
//! aborted, counting the times it was refused (or, for webhooks, held back).

use super::{Attack, Caller, Prepared, GRPC_PREFIX_BYTES, RAMP, TINY};
use crate::api::webhooks::{Answer, Receiver};
use crate::helpers::{
    corpus, create_request, grpc_headers, grpc_message, status_of, submit_keyed_through,
    unique_key, BearerKey,
};
use bytes::Bytes;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;

/// An attacker's pause between a refused call (or a closed connection) and its next.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// What a download attacker's connection lets the server send: nearly nothing.
const STALLED_WINDOW: u32 = 1024;
/// Bytes of the outputs downloads hold: far more than the server reads ahead (4 MiB) and
/// buffers on the way out, so an unread download keeps its slot.
pub(super) const LARGE_OUTPUT_BYTES: usize = 12 << 20;
/// How late the webhook attackers' receivers answer: about as long as a row lasts, so every
/// delivery sent holds its slot through the bystander's calls (and well under the 10 s
/// answer timeout), and the server's stop, which lets attempts in flight end, is short.
pub(super) const SLOW_RECEIVER: Duration = Duration::from_secs(3);

/// Where an attacker attacks, and what it counts its refusals in.
pub(super) struct Target {
    pub(super) server: SocketAddr,
    pub(super) refused: Arc<AtomicUsize>,
}

impl Target {
    fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A channel of the attacker's own: its calls are not held up by the limit of calls per
    /// connection of the test's channel, which the bystander uses.
    fn own_channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.server))
            .unwrap()
            .connect_lazy()
    }
}

/// A TCP connection to `server` from `from`.
pub(super) async fn connect_from(
    from: IpAddr,
    server: SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(server).await
}

/// The headers of a gRPC call to `path` by `caller`.
fn headers_of(server: SocketAddr, path: &str, caller: &Caller) -> http::Request<()> {
    let mut headers = grpc_headers(server, path);
    if let Some(key) = &caller.key {
        let bearer = format!("Bearer {key}").parse().unwrap();
        headers.headers_mut().insert("authorization", bearer);
    }
    headers
}

/// A gRPC prefix declaring `declared` bytes and `sent` bytes of the message.
fn partial_message(declared: usize, sent: usize) -> Bytes {
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(&(declared as u32).to_be_bytes());
    bytes.resize(GRPC_PREFIX_BYTES + sent, 0);
    Bytes::from(bytes)
}

/// The request message a server stream of `path` opens with.
fn stream_request(path: &str, job: Option<&str>) -> Bytes {
    let job_id = job.unwrap_or_default().to_owned();
    if path.ends_with("/WatchRenderJob") {
        grpc_message(&proto::WatchRenderJobRequest { job_id })
    } else if path.ends_with("/DownloadRenderOutput") {
        grpc_message(&proto::DownloadRenderOutputRequest {
            job_id,
            ..Default::default()
        })
    } else {
        grpc_message(&HealthCheckRequest::default())
    }
}

/// Calls `path` on `client` with `message` again and again: each call accepted is held
/// (never read) for as long as the attack lasts, each refused is counted and made again.
/// Returns when the connection fails.
async fn hold_calls(
    client: h2::client::SendRequest<Bytes>,
    target: &Target,
    (path, caller): (&'static str, &Caller),
    (message, ends_there): (Bytes, bool),
) {
    loop {
        let Ok(mut ready) = client.clone().ready().await else {
            return;
        };
        let headers = headers_of(target.server, path, caller);
        let Ok((answer, mut stream)) = ready.send_request(headers, false) else {
            return;
        };
        if stream.send_data(message.clone(), ends_there).is_err() {
            return;
        }
        match answer.await {
            Ok(response) if status_of(&response).is_none() => {
                let _held = (response, stream);
                std::future::pending::<()>().await;
            }
            _ => {
                target.refused();
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// One `POST /v1/templates` declaring `declared` bytes, all but the last written, until the
/// server answers (a refusal: the body never ends).
async fn door_body(server: SocketAddr, caller: &Caller, declared: usize) -> std::io::Result<()> {
    let (mut read, mut write) = connect_from(caller.address, server).await?.into_split();
    let authorization = caller
        .key
        .as_ref()
        .map(|key| format!("authorization: Bearer {key}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /v1/templates HTTP/1.1\r\nhost: {server}\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n{authorization}\r\n"
    );
    let spaces = vec![b' '; declared - 1];
    let writing = async {
        write.write_all(head.as_bytes()).await?;
        write.write_all(&spaces).await?;
        std::future::pending::<std::io::Result<()>>().await
    };
    let mut answer = [0u8; 1024];
    tokio::select! {
        written = writing => written,
        read = read.read(&mut answer) => match read {
            Ok(read) if read > 0 => Err(std::io::Error::other("refused")),
            _ => Ok(()),
        },
    }
}

/// A connection that says nothing, held until the server closes it; then another.
async fn silent_connection(target: &Target, caller: &Caller) {
    let mut buffer = [0u8; 1024];
    loop {
        if let Ok(mut stream) = connect_from(caller.address, target.server).await {
            while matches!(stream.read(&mut buffer).await, Ok(read) if read > 0) {}
        }
        target.refused();
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// CreateTemplate of [`TINY`] again and again as `caller`, each refusal counted.
async fn creation(target: &Target, caller: &Caller) {
    let key = BearerKey::of(caller.key.as_deref());
    let templates = TemplateServiceClient::with_interceptor(target.own_channel(), key);
    loop {
        let request = create_request("attacker", corpus(TINY));
        if templates.clone().create_template(request).await.is_err() {
            target.refused();
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// `events` copies of `request` under fresh keys, each with a webhook to one of `receivers`
/// slow receivers of the attacker's own; then, after the ramp, the deliveries the receivers
/// have not seen are counted as held back (by the attacker's share of the sender, or its
/// bound of deliveries waiting).
async fn webhook_flood(
    target: &Target,
    (caller, request): (&Caller, proto::RenderRequest),
    events: usize,
    receivers: usize,
) {
    let key = BearerKey::of(caller.key.as_deref());
    let renders = RenderServiceClient::with_interceptor(target.own_channel(), key);
    let mut slow = Vec::new();
    for _ in 0..receivers {
        slow.push(Receiver::start(|_, _| Answer::Late(SLOW_RECEIVER)).await);
    }
    for index in 0..events {
        let notified = proto::RenderRequest {
            notify: Some(proto::Notify {
                webhook_url: slow[index % slow.len()].url("/attacker"),
                events: vec![proto::WebhookEvent::Succeeded as i32],
            }),
            ..request.clone()
        };
        if submit_keyed_through(renders.clone(), &unique_key(), notified)
            .await
            .is_err()
        {
            target.refused();
        }
    }
    tokio::time::sleep(RAMP).await;
    let sent: usize = slow.iter().map(|receiver| receiver.seen().len()).sum();
    target
        .refused
        .fetch_add(events.saturating_sub(sent), Ordering::Relaxed);
    std::future::pending::<()>().await;
}

/// One attacker, holding all it can until it is aborted, counting its calls refused.
pub(super) async fn attacker(attack: Attack, target: Target, caller: Caller, prepared: Prepared) {
    let (path, message, ends_there, streams, window) = match attack {
        Attack::DoorBodies {
            declared,
            connections,
        } => {
            let bodies = (0..connections).map(|_| async {
                loop {
                    if door_body(target.server, &caller, declared).await.is_err() {
                        target.refused();
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            });
            futures_util::future::join_all(bodies).await;
            return;
        }
        Attack::SilentConnections { connections } => {
            let held = (0..connections).map(|_| silent_connection(&target, &caller));
            futures_util::future::join_all(held).await;
            return;
        }
        Attack::Creations { calls } => {
            let creations = (0..calls).map(|_| creation(&target, &caller));
            futures_util::future::join_all(creations).await;
            return;
        }
        Attack::Webhooks { events, receivers } => {
            let request = prepared.request.expect("a rendered request");
            webhook_flood(&target, (&caller, request), events, receivers).await;
            return;
        }
        Attack::Bodies {
            path,
            declared,
            sent,
            streams,
        } => (path, partial_message(declared, sent), false, streams, None),
        Attack::Streams { path, streams } => {
            let message = stream_request(path, prepared.job.as_deref());
            (path, message, true, streams, Some(STALLED_WINDOW))
        }
    };
    loop {
        if let Ok(tcp) = connect_from(caller.address, target.server).await {
            let mut builder = h2::client::Builder::new();
            if let Some(window) = window {
                builder.initial_window_size(window);
            }
            if let Ok((client, connection)) = builder.handshake::<_, Bytes>(tcp).await {
                let connection = tokio::spawn(connection);
                let calls = (0..streams).map(|_| {
                    let message = (message.clone(), ends_there);
                    hold_calls(client.clone(), &target, (path, &caller), message)
                });
                futures_util::future::join_all(calls).await;
                connection.abort();
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}
