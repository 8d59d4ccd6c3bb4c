//! Calls no stock client makes, for the third round's cases: gRPC messages written byte by
//! byte (millions of empty elements the bench never builds as values), calls held open on a
//! raw HTTP/2 connection, and HTTP/1.1 requests to the door, each from any loopback address
//! (the server shares its pools per address before identity).

use super::{outcome, Target};
use bytes::Bytes;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Status;
use tonic_types::StatusExt;

/// Bytes of an answer's head the bench reads at most (the door's are a few hundred).
const MAX_ANSWER_HEAD_BYTES: usize = 64 * 1024;
/// Bytes of a problem document read at most (they name a reason and a few fields).
const MAX_PROBLEM_BYTES: usize = 64 * 1024;
/// How long an answer may take once the request is sent (a 63 MiB body included).
const ANSWER_LIMIT: Duration = Duration::from_secs(60);

/// The first attacking loopback address; the bystander calls from 127.0.0.1.
pub(super) fn attacker_address(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + index as u8)
}

/// A TCP connection to `server` from `from`.
pub(super) async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(server).await
}

/// Whether the peer has closed `stream` (end of file or a reset), reading away whatever it
/// sent before (a TLS server's session tickets); false while it is open and silent.
pub(super) fn closed_by_peer(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 4096];
    loop {
        match stream.try_read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// Appends `value` as a protobuf varint.
pub(super) fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends field `number` of wire type 2 (a message, string, bytes or map entry) holding
/// `payload`.
pub(super) fn length_delimited(number: u32, payload: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(number) << 3 | 2, out);
    varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// `message` as one uncompressed gRPC message (its 5-byte prefix first).
pub(super) fn grpc_frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// The headers of a gRPC call to `path`, as the tenant of `key` (anonymous without).
pub(super) fn grpc_headers(
    target: &Target,
    path: &str,
    key: Option<&str>,
) -> anyhow::Result<http::Request<()>> {
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{path}", target.address))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let (Some(key), true) = (key, target.keys) {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    Ok(request.body(())?)
}

/// "OK" or "CODE REASON", and the first field a refusal names, of a gRPC status.
pub(super) fn outcome_naming_field(status: Status) -> String {
    let field = status
        .get_error_details()
        .bad_request()
        .and_then(|bad_request| bad_request.field_violations.first().cloned())
        .map(|violation| format!(" naming {}", violation.field))
        .unwrap_or_default();
    format!("{}{field}", outcome::<()>(&Err(status)))
}

/// One unary gRPC call of `headers` ([`grpc_headers`]) whose body is `framed` (prefix
/// included), on a connection of its own; the answer with the field it names.
pub(super) async fn grpc_call(
    target: &Target,
    headers: http::Request<()>,
    framed: Bytes,
) -> anyhow::Result<String> {
    let (client, driver) = super::raw_connection(target).await?;
    let mut client = client.ready().await?;
    let (answer, mut stream) = client.send_request(headers, false)?;
    stream.send_data(framed, true)?;
    let answer = async {
        let response = answer.await?;
        if let Some(status) = Status::from_header_map(response.headers()) {
            return Ok::<_, anyhow::Error>(outcome_naming_field(status));
        }
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data?;
            let _ = body.flow_control().release_capacity(data.len());
        }
        Ok(match body.trailers().await? {
            Some(trailers) => Status::from_header_map(&trailers)
                .map_or_else(|| "no grpc-status".to_owned(), outcome_naming_field),
            None => "no trailers".to_owned(),
        })
    };
    let answer = tokio::time::timeout(ANSWER_LIMIT, answer).await;
    driver.abort();
    match answer {
        Ok(answer) => answer,
        Err(_) => Ok(format!("no answer within {ANSWER_LIMIT:?}")),
    }
}

/// The head of an HTTP/1.1 request to the door: `method` `target_path` with `headers` (name,
/// value), a `content-length` of `length` when given, as the tenant of `key` (anonymous
/// without).
pub(super) fn door_head(
    target: &Target,
    (method, path): (&str, &str),
    key: Option<&str>,
    length: Option<usize>,
    headers: &[(&str, &str)],
) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\n", target.address);
    if let (Some(key), true) = (key, target.keys) {
        head.push_str(&format!("authorization: Bearer {key}\r\n"));
    }
    if let Some(length) = length {
        head.push_str(&format!("content-length: {length}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// What the door answered: its status, and the reason and first field of a problem document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct DoorAnswer {
    pub(super) status: u16,
    pub(super) reason: String,
    pub(super) field: String,
}

impl std::fmt::Display for DoorAnswer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "HTTP {}", self.status)?;
        if !self.reason.is_empty() {
            write!(formatter, " {}", self.reason)?;
        }
        if !self.field.is_empty() {
            write!(formatter, " naming {}", self.field)?;
        }
        Ok(())
    }
}

impl DoorAnswer {
    pub(super) fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Sends `head` and `body` on `stream` while reading the answer (a refusal may come before
/// the body is sent, and the server then reads no more of it); the answer's head and, for
/// a refusal, its problem document. The connection is handed back open (an event stream
/// goes on on it; neither side of it is shut).
pub(super) async fn door_call(
    mut stream: TcpStream,
    head: &str,
    body: &[u8],
) -> anyhow::Result<(DoorAnswer, TcpStream)> {
    let answer = {
        let (mut read, mut write) = stream.split();
        let writing = async {
            if write.write_all(head.as_bytes()).await.is_ok() {
                let _ = write.write_all(body).await;
            }
            // Only the answer ends the call.
            std::future::pending::<anyhow::Result<DoorAnswer>>().await
        };
        let reading = async {
            match tokio::time::timeout(ANSWER_LIMIT, read_answer(&mut read)).await {
                Ok(answer) => answer,
                Err(_) => Err(anyhow::anyhow!("no answer within {ANSWER_LIMIT:?}")),
            }
        };
        tokio::select! {
            answer = reading => answer,
            answer = writing => answer,
        }
    };
    Ok((answer?, stream))
}

/// Reads an answer's head, and the problem document of a refusal.
async fn read_answer(read: &mut (impl AsyncRead + Unpin)) -> anyhow::Result<DoorAnswer> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
        anyhow::ensure!(
            received.len() < MAX_ANSWER_HEAD_BYTES,
            "answer head too long"
        );
        let read = read.read(&mut chunk).await?;
        anyhow::ensure!(read > 0, "connection closed without an answer");
        received.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {head}"))?;
    let mut answer = DoorAnswer {
        status,
        reason: String::new(),
        field: String::new(),
    };
    if answer.success() {
        return Ok(answer);
    }
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0)
        .min(MAX_PROBLEM_BYTES);
    let mut problem = received[head_end..].to_vec();
    while problem.len() < length {
        let read = read.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        problem.extend_from_slice(&chunk[..read]);
    }
    if let Ok(problem) = serde_json::from_slice::<serde_json::Value>(&problem) {
        answer.reason = problem["reason"].as_str().unwrap_or_default().to_owned();
        answer.field = problem["errors"][0]["field"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    Ok(answer)
}

/// A raw HTTP/2 connection to the target from `from`, whose streams let the server send
/// `stream_window` bytes before they are read (h2's default without), and the task that
/// drives it (abort it to close the connection).
pub(super) async fn h2_from(
    target: &Target,
    from: Ipv4Addr,
    stream_window: Option<u32>,
) -> anyhow::Result<(h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>)> {
    let tcp = connect_from(from, target.address).await?;
    let mut builder = h2::client::Builder::new();
    if let Some(window) = stream_window {
        builder.initial_window_size(window);
    }
    let (client, connection) = builder.handshake(tcp).await?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client.ready().await?, driver))
}

/// Opens a call of `headers` on `client` whose body is `body` (`ends` it there or not) and
/// waits for the answer's headers: Ok with the call held open (the answer's body unread,
/// the request's stream kept) when the server took it, Err with "CODE REASON" when its
/// answer was a refusal (trailers only).
pub(super) async fn open_call(
    client: &h2::client::SendRequest<Bytes>,
    headers: http::Request<()>,
    (body, ends): (Bytes, bool),
) -> anyhow::Result<Result<HeldCall, String>> {
    let mut client = client.clone().ready().await?;
    let (answer, mut stream) = client.send_request(headers, false)?;
    stream.send_data(body, ends)?;
    let response = match tokio::time::timeout(ANSWER_LIMIT, answer).await {
        Ok(response) => response?,
        Err(_) => return Ok(Err(format!("no answer within {ANSWER_LIMIT:?}"))),
    };
    Ok(match Status::from_header_map(response.headers()) {
        Some(status) => Err(outcome::<()>(&Err(status))),
        None => Ok(HeldCall {
            _response: response,
            _stream: stream,
        }),
    })
}

/// A call the server took and the caller holds open, neither reading nor ending it.
pub(super) struct HeldCall {
    _response: http::Response<h2::RecvStream>,
    _stream: h2::SendStream<Bytes>,
}
