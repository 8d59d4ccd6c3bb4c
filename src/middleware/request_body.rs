//! `RequestBodyLayer`: a call's request message is received whole, under a deadline and a
//! minimum rate and within a budget of buffered bytes, before anything inside this layer
//! (load shedding above all) sees the call. Every RPC of ours and of health carries exactly
//! one request message, so nothing is lost by waiting for it; what is won is that a caller
//! who sends headers and then nothing (or a trickle) holds no shedding permit, only its own
//! stream, and only until [`REQUEST_BODY_IDLE_TIMEOUT`] passes without a byte or the whole
//! deadline passes (UNAVAILABLE, reason REQUEST_BODY_TIMEOUT, with a retry delay: a slow
//! network is not the request's fault).
//!
//! Each method's row in [`crate::grpc::methods`] names the kind of its request body
//! ([`RequestKind`]); this layer gives each kind the limit of its real need
//! ([`message_limit`]): health and the id-only calls 4 KiB, SubmitRender 33 MiB,
//! CreateTemplate 64 MiB (a template and its fonts). A body declared above it (by
//! `content-length` or its gRPC length prefix) is refused at once, INVALID_ARGUMENT
//! REQUEST_TOO_LARGE, before anything is buffered; a path that is no method of ours is not
//! buffered at all (the router answers UNIMPLEMENTED).
//!
//! The declared length is checked against the limit and for nothing else: a body is
//! charged for the bytes that arrived, its buffer growing (and charged) as they do, from a
//! pool shared fairly ([`crate::fair_share`]: per peer address before the caller is
//! identified, per tenant after, shares shrinking as more callers hold bytes, a reserve for
//! callers holding nothing). Each kind's bodies come from one of three lanes
//! ([`BodyLane`]): health probes and the id-only calls (Get, List, Watch, Cancel, Delete,
//! Download) each have a small pool of their own, so they are served whatever the large
//! bodies hold. A body that finds no room in its caller's share, or in a full pool, for
//! [`REQUEST_BUFFER_WAIT`] is answered RESOURCE_EXHAUSTED (REQUEST_BUFFERS_BUSY) with a
//! retry delay.
//!
//! A body of the HTTP/JSON door ([`DoorBody`] in the request's extensions: JSON, or a raw
//! file) is received the same way and then written as its method's request message
//! ([`crate::grpc::json`]), the message its row names, so that every layer below sees gRPC.
//!
//! Reflection is a bidirectional stream ([`RequestKind::Stream`]): it is passed through as
//! it comes (its messages are bounded by the reflection services' own decoding limit).

use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::fair_share::{CallerKey, FairShare, ShareGuard, ShareRefusal, RESERVE_FIRST_AMOUNTS};
use crate::grpc::json::{message_named, DoorRequest};
use crate::grpc::methods::{Method, RequestKind};
use crate::reason::Reason;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use tonic::body::Body;
use tonic::Status;

use super::{AroundCall, AroundLayer, Next, Reply};

/// Largest request message accepted: a template (8 MiB) plus its fonts. Above it, the call
/// is answered INVALID_ARGUMENT (`middleware::request_size`) before the body is buffered.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// A RenderRequest's fields besides its images: with every map full (256 texts of 200
/// characters, 256 colours) it is under 400 KiB.
pub const MAX_RENDER_FIELDS_BYTES: usize = 1024 * 1024;
/// Largest RenderService request: its fields and its replacement images
/// (`grpc::convert::MAX_REQUEST_IMAGE_BYTES`); anything larger is not a render request.
pub const MAX_RENDER_REQUEST_BYTES: usize =
    MAX_RENDER_FIELDS_BYTES + crate::grpc::convert::MAX_REQUEST_IMAGE_BYTES;
/// Largest UploadImage request: one image and its field's tag and length.
pub const MAX_UPLOAD_IMAGE_REQUEST_BYTES: usize =
    crate::lottie::reading::images::MAX_IMAGE_BYTES + 16;
/// What a caller holding no request buffer can always have buffered in the large bodies'
/// lane, from its reserve: a SubmitRender without images, a small template or image.
pub const LARGE_FIRST_AMOUNT_BYTES: usize = MAX_RENDER_FIELDS_BYTES;
/// Request bytes of the large bodies' lane (CreateTemplate, SubmitRender, UploadImage)
/// buffered at once by every call together, the default of `--request-buffers-mb`: four of
/// the largest requests (three callers competing can each have one arriving, a caller
/// alone two) and the reserve of sixteen first amounts. Hundreds of callers sending 64 MiB
/// each cannot make the server hold their sum.
pub const REQUEST_BUFFER_BUDGET_BYTES: usize =
    4 * MAX_REQUEST_BYTES + RESERVE_FIRST_AMOUNTS * LARGE_FIRST_AMOUNT_BYTES;
/// Largest health request: a service name (ours are under 50 bytes). tonic's default is
/// 4 MiB, which a compressed request would inflate to.
pub const MAX_HEALTH_REQUEST_BYTES: usize = 4 * 1024;
/// Largest reflection request: a file or symbol name (well under 1 KiB).
pub const MAX_REFLECTION_REQUEST_BYTES: usize = 4 * 1024;
/// Largest request of the calls that name one template or job (a UUID) or a list page (a
/// page token of some 60 bytes): a few hundred bytes at most, 4 KiB said generously.
pub const MAX_ID_REQUEST_BYTES: usize = 4 * 1024;
/// Health requests buffered at once: 256 of the largest, 1 MiB, a lane of their own so
/// that probes are answered whatever the other calls hold.
pub const HEALTH_BUFFER_BUDGET_BYTES: usize = 256 * (MAX_HEALTH_REQUEST_BYTES + GRPC_PREFIX_BYTES);
/// Requests of the id-only calls buffered at once: 256 of the largest, 1 MiB, a lane of
/// their own so that Get, List, Cancel and Delete are served whatever the large bodies hold
/// (issue 42: four addresses' silent uploads left 2 of 36 of them served).
pub const ID_BUFFER_BUDGET_BYTES: usize = 256 * (MAX_ID_REQUEST_BYTES + GRPC_PREFIX_BYTES);
/// What a caller holding nothing in the health or id-only lane can always have buffered:
/// one request of the largest.
pub const SMALL_FIRST_AMOUNT_BYTES: usize = MAX_ID_REQUEST_BYTES + GRPC_PREFIX_BYTES;
/// How long a body waits for room (in its caller's share, or in a full pool) before it is
/// refused: short, so a caller is told to come back rather than held behind slow bodies.
pub const REQUEST_BUFFER_WAIT: Duration = Duration::from_secs(1);
/// The minimum rate of a body: no byte for this long and the call is refused
/// (REQUEST_BODY_TIMEOUT), whatever is left of its whole deadline. A sender on any working
/// network sends something every few hundred milliseconds; a trickle of a byte a second
/// still holds its stream until the deadline, but only what it sent.
pub const REQUEST_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Retry delay of a call refused for the buffers: a 64 MiB body takes seconds to arrive.
pub(crate) const REQUEST_BUFFERS_RETRY_AFTER: Duration = Duration::from_secs(2);
/// Retry delay of a call whose body did not arrive in time: the network may be better soon.
pub(crate) const REQUEST_BODY_RETRY_AFTER: Duration = Duration::from_secs(1);
/// A gRPC message on the wire: a compression flag byte and a big-endian u32 length.
pub(crate) const GRPC_PREFIX_BYTES: usize = 5;

/// The pool a method's bodies are buffered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLane {
    /// Health probes: a small pool nobody else can take.
    Health,
    /// The calls that name one template, job or image, or a list page (4 KiB bodies).
    IdOnly,
    /// The calls that carry a template, a render request or an image.
    Large,
}

/// The most one request message of `kind` may be, bytes (without its 5-byte prefix): the
/// real need of the methods of that kind.
pub(crate) const fn message_limit(kind: RequestKind) -> usize {
    match kind {
        RequestKind::Probe => MAX_HEALTH_REQUEST_BYTES,
        RequestKind::IdOnly => MAX_ID_REQUEST_BYTES,
        RequestKind::Template => MAX_REQUEST_BYTES,
        RequestKind::Render => MAX_RENDER_REQUEST_BYTES,
        RequestKind::Image => MAX_UPLOAD_IMAGE_REQUEST_BYTES,
        // Each message of reflection's stream (the layer does not buffer it; its services'
        // decoding limit holds it).
        RequestKind::Stream => MAX_REFLECTION_REQUEST_BYTES,
    }
}

/// The pool a body of `kind` is buffered from; `None`: a stream, passed through as it
/// comes.
const fn lane_of(kind: RequestKind) -> Option<BodyLane> {
    match kind {
        RequestKind::Probe => Some(BodyLane::Health),
        RequestKind::IdOnly => Some(BodyLane::IdOnly),
        RequestKind::Template | RequestKind::Render | RequestKind::Image => Some(BodyLane::Large),
        RequestKind::Stream => None,
    }
}

/// The most a request message of the method at `path` may be (`None`: no method of this
/// server with a body of one message).
pub fn method_body_limit(path: &str) -> Option<usize> {
    let kind = Method::of(path)?.body();
    lane_of(kind).map(|_| message_limit(kind))
}

/// The most a request message of any method of `service` (its full name) may be: the
/// service's decoding limit in tonic and its weight in the inflation budget, so that a
/// method is never refused below its own limit, and a method added to a service raises the
/// service's limit with it.
pub(crate) fn service_message_limit(service: &str) -> usize {
    Method::ALL
        .iter()
        .filter(|method| method.service() == service)
        .map(|method| message_limit(method.body()))
        .max()
        .unwrap_or(0)
}

/// The [`service_message_limit`] of the service `_service` serves (`app::startup` asks it
/// of each service it builds, so no limit there is written by hand).
pub(crate) fn message_limit_of<S: tonic::server::NamedService>(_service: &S) -> usize {
    service_message_limit(S::NAME)
}

/// A request of the HTTP/JSON door ([`crate::http_json`]): its body is JSON (or a raw Lottie
/// file) of `length` bytes, known from its headers. It is received whole under the same
/// deadline, minimum rate, method limit and fair share as a gRPC message, then written as
/// the request message its method's row names, from the body and what the door read of the
/// path and query (`request`; a classified error when the body is not the message).
#[derive(Debug, Clone)]
pub(crate) struct DoorBody {
    pub length: u64,
    pub request: DoorRequest,
}

/// The most a door's JSON body may be for a method whose message may be `limit` bytes:
/// bytes fields arrive in base64 (four characters for three bytes), and the other fields'
/// JSON is longer than their protobuf (names, quotes, decimal numbers): a quarter beside. A
/// 10 MiB image is a 13.3 MiB body; UploadImage's door took only 7.5 MiB images when it
/// held JSON to the message's limit. Never more than the largest message
/// ([`MAX_REQUEST_BYTES`]), which a caller's share of the buffers holds: a template of more
/// than 48 MiB comes as a raw upload, not in base64.
pub fn json_body_limit(limit: usize) -> usize {
    (limit / 3 * 4 + limit / 4 + 16).min(MAX_REQUEST_BYTES)
}

/// Receives each call's request message whole before passing the call on.
#[derive(Debug, Clone)]
pub struct RequestBody {
    deadline: Duration,
    /// [`REQUEST_BODY_IDLE_TIMEOUT`] (shorter in unit tests).
    idle: Duration,
    large: FairShare<CallerKey>,
    id_only: FairShare<CallerKey>,
    health: FairShare<CallerKey>,
}

pub(crate) type RequestBodyLayer = AroundLayer<RequestBody>;

impl RequestBodyLayer {
    /// Bodies must arrive within `deadline`; at most `budget_bytes` of the large bodies are
    /// buffered at once (the small lanes' apart).
    pub(crate) fn new(deadline: Duration, budget_bytes: usize) -> RequestBodyLayer {
        AroundLayer(RequestBody {
            deadline,
            idle: REQUEST_BODY_IDLE_TIMEOUT,
            large: FairShare::shrinking(budget_bytes, LARGE_FIRST_AMOUNT_BYTES),
            id_only: FairShare::shrinking(ID_BUFFER_BUDGET_BYTES, SMALL_FIRST_AMOUNT_BYTES),
            health: FairShare::shrinking(HEALTH_BUFFER_BUDGET_BYTES, SMALL_FIRST_AMOUNT_BYTES),
        })
    }
}

impl RequestBody {
    fn pool(&self, lane: BodyLane) -> &FairShare<CallerKey> {
        match lane {
            BodyLane::Health => &self.health,
            BodyLane::IdOnly => &self.id_only,
            BodyLane::Large => &self.large,
        }
    }
}

/// How the end of a body is known.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// One gRPC message: its prefix declares its length, at most `limit`.
    Grpc { limit: usize },
    /// A door's body of `length` bytes (its `content-length`, checked against the limit).
    Json { length: usize },
}

/// Why a body was not received.
enum NotReceived {
    /// Declared (or sent) above the method's limit: the caller's mistake.
    TooLarge { declared: u64, limit: usize },
    /// No room for it in the caller's share or the pool.
    Busy(ShareRefusal),
    /// No byte for [`REQUEST_BODY_IDLE_TIMEOUT`].
    Stalled(Duration),
    /// The stream failed (the caller reset it): nobody reads this answer.
    Failed(Status),
}

/// The answer to a call whose body did not arrive in time: `what` says which limit.
fn timed_out(what: String) -> Status {
    Status::from(ServiceError::transient(
        ServiceErrorCode::Unavailable,
        Reason::RequestBodyTimeout,
        what,
        REQUEST_BODY_RETRY_AFTER,
    ))
}

/// The answer to a body above its method's limit.
fn too_large(declared: u64, limit: usize) -> Status {
    let description =
        format!("the request is {declared} bytes, more than the {limit} this method accepts");
    Status::from(ServiceError::invalid_argument(
        Reason::RequestTooLarge,
        description.clone(),
        vec![FieldViolation {
            field: "(request)".into(),
            description,
        }],
    ))
}

/// The answer to a body the buffers have no room for.
fn busy(refusal: ShareRefusal, key: &CallerKey, pool: &FairShare<CallerKey>) -> Status {
    let message = match refusal {
        ShareRefusal::OverShare => format!(
            "{key} already holds its share ({} bytes, less as more callers send) of this \
             instance's request buffers with other requests still arriving; retry after the \
             delay",
            pool.share_of(key)
        ),
        ShareRefusal::PoolFull => "this instance's request buffers are all held by requests \
                                   still arriving; retry after the delay or on another instance"
            .to_owned(),
    };
    Status::from(ServiceError::transient(
        ServiceErrorCode::ResourceExhausted,
        Reason::RequestBuffersBusy,
        message,
        REQUEST_BUFFERS_RETRY_AFTER,
    ))
}

/// The answer to a body that was not received.
fn refusal(not_received: NotReceived, key: &CallerKey, pool: &FairShare<CallerKey>) -> Status {
    match not_received {
        NotReceived::TooLarge { declared, limit } => too_large(declared, limit),
        NotReceived::Busy(refusal) => busy(refusal, key, pool),
        NotReceived::Stalled(idle) => timed_out(format!(
            "no byte of the request message arrived for {} ms",
            idle.as_millis()
        )),
        NotReceived::Failed(status) => status,
    }
}

/// The length `content-length` declares, if it is there and a number.
fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The message length a gRPC prefix declares, once its five bytes are in `kept` and `next`.
fn declared_length(kept: &[u8], next: &[u8]) -> Option<usize> {
    let mut prefix = kept.iter().chain(next).skip(1).take(GRPC_PREFIX_BYTES - 1);
    let mut length = [0u8; 4];
    for byte in &mut length {
        *byte = *prefix.next()?;
    }
    Some(usize::try_from(u32::from_be_bytes(length)).unwrap_or(usize::MAX))
}

/// Makes room in `buffer` for `needed` bytes, charging what it grows by to `held` first
/// (which holds what the buffer holds): it doubles, so arrival stays linear, but never past
/// `whole`, what the body declares, so a buffer is at most twice the bytes that arrived.
async fn make_room(
    buffer: &mut Vec<u8>,
    needed: usize,
    whole: usize,
    held: &mut ShareGuard<CallerKey>,
) -> Result<(), NotReceived> {
    if needed <= buffer.capacity() {
        return Ok(());
    }
    let capacity = buffer.capacity().saturating_mul(2).min(whole).max(needed);
    held.grow(capacity.saturating_sub(held.units()), REQUEST_BUFFER_WAIT)
        .await
        .map_err(NotReceived::Busy)?;
    buffer.reserve_exact(capacity - buffer.len());
    Ok(())
}

/// Reads `body` to the end of its one message ([`Framing`]), each byte charged to `held`
/// as it arrives (its buffer's growth, in fact), and refused when nothing arrives for
/// `idle`. A gRPC message declared above its limit is refused as soon as its prefix is in;
/// a gRPC body longer than the one message it declares is cut there (the rest is not for a
/// unary call; tonic decodes the first message); a door's body longer than its length is
/// refused.
async fn receive(
    mut body: Body,
    framing: Framing,
    held: &mut ShareGuard<CallerKey>,
    idle: Duration,
) -> Result<Bytes, NotReceived> {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        // Only the wait for the caller's bytes counts: not a wait for room in the buffers.
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(NotReceived::Stalled(idle)),
            Ok(None) => break,
            Ok(Some(frame)) => frame.map_err(NotReceived::Failed)?,
        };
        let Ok(data) = frame.into_data() else {
            // Request trailers carry nothing a unary call needs.
            continue;
        };
        let arrived = buffer.len() + data.len();
        // Where the body ends, and whether it ends there for sure (a gRPC message whose
        // prefix is in), or only with the stream.
        let (whole, ends_there) = match framing {
            Framing::Json { length } if arrived > length => {
                // More than its headers declared (hyper refuses this on HTTP/1.1; said again).
                return Err(NotReceived::TooLarge {
                    declared: arrived as u64,
                    limit: length,
                });
            }
            Framing::Json { length } => (length, false),
            Framing::Grpc { limit } => match declared_length(&buffer, &data) {
                Some(declared) if declared > limit => {
                    return Err(NotReceived::TooLarge {
                        declared: declared as u64,
                        limit,
                    })
                }
                Some(declared) => (GRPC_PREFIX_BYTES + declared, true),
                None => (arrived, false),
            },
        };
        let kept = arrived.min(whole);
        make_room(&mut buffer, kept, whole, held).await?;
        let take = kept - buffer.len();
        buffer.extend_from_slice(&data[..take]);
        if ends_there && buffer.len() == whole {
            // The whole message is here; whatever follows is not ours to wait for.
            break;
        }
    }
    Ok(Bytes::from(buffer))
}

/// The gRPC message, with its length prefix, that the door's `body` stands for: the
/// request message of `method`. The body is moved in, so that it is freed as soon as the
/// message is built.
fn door_message(method: Method, door: &DoorBody, body: Bytes) -> Result<Bytes, Status> {
    let input = message_named(method.request())?;
    Ok(door.request.framed_message(&input, body)?)
}

/// The request body is read and replaced, so this middleware takes tonic's `Body` only.
impl AroundCall<Body, Body> for RequestBody {
    fn around<S: Next<Body, Body>>(
        &self,
        mut call: Request<Body>,
        mut next: S,
    ) -> Reply<Body, S::Error> {
        let Some(method) = Method::of(call.uri().path()) else {
            // No method of ours: its body is never read (the router answers UNIMPLEMENTED).
            let (parts, _) = call.into_parts();
            return Box::pin(next.call(Request::from_parts(parts, Body::empty())));
        };
        let (limit, Some(lane)) = (message_limit(method.body()), lane_of(method.body())) else {
            // A stream of messages (reflection): passed through as it comes.
            return Box::pin(next.call(call));
        };
        let door = call.extensions_mut().remove::<DoorBody>();
        let framing = if let Some(door) = &door {
            let limit = json_body_limit(limit);
            if door.length > limit as u64 {
                return super::refuse(too_large(door.length, limit));
            }
            Framing::Json {
                length: usize::try_from(door.length).unwrap_or(usize::MAX),
            }
        } else {
            if let Some(declared) = content_length(call.headers()) {
                if declared > (limit + GRPC_PREFIX_BYTES) as u64 {
                    return super::refuse(too_large(declared, limit));
                }
            }
            Framing::Grpc { limit }
        };
        let pool = self.pool(lane).clone();
        let key = CallerKey::of(call.extensions());
        let (deadline, idle) = (self.deadline, self.idle);
        Box::pin(async move {
            let (parts, body) = call.into_parts();
            let mut held = pool.hold(key.clone());
            let receiving = receive(body, framing, &mut held, idle);
            let received = tokio::time::timeout(deadline, receiving).await;
            let bytes = match received {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(not_received)) => return Ok(refusal(not_received, &key, &pool).into_http()),
                Err(_) => {
                    return Ok(timed_out(format!(
                        "the request message did not arrive within {} ms of its headers",
                        deadline.as_millis()
                    ))
                    .into_http())
                }
            };
            let bytes = match &door {
                Some(door) => match door_message(method, door, bytes) {
                    Ok(message) => message,
                    Err(status) => return Ok(status.into_http()),
                },
                None => bytes,
            };
            let request = Request::from_parts(parts, Body::new(Full::new(bytes)));
            let response = next.call(request).await;
            // The bytes are decoded by now (the handler answered): they leave the budget.
            drop(held);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::middleware::BoxFuture;
    use std::convert::Infallible;
    use tonic_types::StatusExt;
    use tower::{service_fn, Layer, ServiceExt};

    /// Answers the number of body bytes it received.
    fn counts_bytes(
        request: http::Request<Body>,
    ) -> BoxFuture<Result<http::Response<Body>, Infallible>> {
        Box::pin(async move {
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            Ok(http::Response::new(Body::new(Full::new(Bytes::from(
                bytes.len().to_string(),
            )))))
        })
    }

    fn message(length: usize) -> Bytes {
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&(length as u32).to_be_bytes());
        bytes.resize(GRPC_PREFIX_BYTES + length, 7);
        Bytes::from(bytes)
    }

    type FrameSender = tokio::sync::mpsc::Sender<Result<http_body::Frame<Bytes>, Infallible>>;

    /// A body whose frames the test sends when it likes.
    fn streamed_body() -> (FrameSender, Body) {
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        (sender, Body::new(http_body_util::StreamBody::new(stream)))
    }

    async fn answer(response: http::Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn reason_of(response: &http::Response<Body>) -> (tonic::Code, String) {
        let status = Status::from_header_map(response.headers()).expect("a gRPC status");
        let reason = status
            .get_error_details()
            .error_info()
            .map(|info| info.reason.clone())
            .unwrap_or_default();
        (status.code(), reason)
    }

    fn request(path: &str, body: Body) -> http::Request<Body> {
        http::Request::builder().uri(path).body(body).unwrap()
    }

    #[tokio::test]
    async fn a_whole_message_reaches_the_service_and_one_over_its_methods_limit_is_refused_unbuffered(
    ) {
        let service =
            RequestBodyLayer::new(Duration::from_secs(5), 1 << 20).layer(service_fn(counts_bytes));
        let whole = request(
            Method::GetTemplate.path(),
            Body::new(Full::new(message(1000))),
        );
        let response = service.clone().oneshot(whole).await.unwrap();
        assert_eq!(answer(response).await, "1005");
        // Declared above the method's limit, with only its first kilobyte sent (and never
        // the rest): refused from the prefix, at once.
        for (path, declared) in [
            (Method::SubmitRender.path(), MAX_RENDER_REQUEST_BYTES + 1),
            ("/grpc.health.v1.Health/Check", MAX_REQUEST_BYTES + 4),
            (Method::ListTemplates.path(), MAX_ID_REQUEST_BYTES + 1),
        ] {
            let start = message(declared).slice(..1024);
            let (sender, body) = streamed_body();
            sender
                .send(Ok(http_body::Frame::data(start)))
                .await
                .unwrap();
            let response = service.clone().oneshot(request(path, body)).await.unwrap();
            assert_eq!(
                reason_of(&response),
                (tonic::Code::InvalidArgument, "REQUEST_TOO_LARGE".into()),
                "{path}"
            );
            drop(sender);
        }
        // Declared by content-length: refused before any byte is read.
        let (_sender, body) = streamed_body();
        let mut declared = request("/grpc.health.v1.Health/Check", body);
        declared.headers_mut().insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(64u64 << 20),
        );
        let response = service.oneshot(declared).await.unwrap();
        assert_eq!(reason_of(&response).1, "REQUEST_TOO_LARGE");
    }

    #[test]
    fn the_request_buffers_flags_default_is_the_budget_of_four_largest_requests_and_the_reserve() {
        let flag_default = crate::middleware::settings::DEFAULT_REQUEST_BUFFERS_MB as usize;
        assert_eq!(flag_default << 20, REQUEST_BUFFER_BUDGET_BYTES);
    }

    #[test]
    fn each_services_message_limit_is_its_largest_methods_and_streams_have_no_body_limit() {
        // The services' decoding limits (app::startup) as they were written before the
        // table of methods: a new method may raise its service's, never lower it.
        for (service, limit) in [
            ("lottie.render.v1.TemplateService", MAX_REQUEST_BYTES),
            ("lottie.render.v1.RenderService", MAX_RENDER_REQUEST_BYTES),
            ("grpc.health.v1.Health", MAX_HEALTH_REQUEST_BYTES),
            (
                "grpc.reflection.v1.ServerReflection",
                MAX_REFLECTION_REQUEST_BYTES,
            ),
        ] {
            assert_eq!(service_message_limit(service), limit, "{service}");
        }
        for method in Method::ALL {
            let limit = method_body_limit(method.path());
            assert_eq!(
                limit.is_none(),
                method.body() == RequestKind::Stream,
                "{method:?}"
            );
            assert!(limit.unwrap_or(0) <= service_message_limit(method.service()));
        }
        assert_eq!(
            method_body_limit(Method::UploadImage.path()),
            Some(MAX_UPLOAD_IMAGE_REQUEST_BYTES)
        );
        assert_eq!(method_body_limit("/evil.Service/Hold"), None);
    }

    #[tokio::test]
    async fn an_unknown_path_is_passed_on_without_its_body() {
        let service =
            RequestBodyLayer::new(Duration::from_secs(5), 1 << 20).layer(service_fn(counts_bytes));
        let (_sender, body) = streamed_body();
        let response = service
            .oneshot(request("/evil.Service/Hold", body))
            .await
            .unwrap();
        assert_eq!(answer(response).await, "0");
    }

    /// `request` as if it came from `address`.
    fn from(address: &str, mut request: http::Request<Body>) -> http::Request<Body> {
        request
            .extensions_mut()
            .insert(tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(format!("{address}:1000").parse().unwrap()),
            });
        request
    }

    /// A body that sends `start` and then nothing, until its sender is dropped.
    async fn silent_after(start: Bytes) -> (FrameSender, Body) {
        let (sender, body) = streamed_body();
        sender
            .send(Ok(http_body::Frame::data(start)))
            .await
            .unwrap();
        (sender, body)
    }

    const CREATE: &str = Method::CreateTemplate.path();

    #[tokio::test]
    async fn a_body_is_charged_for_the_bytes_that_arrived_not_for_the_length_it_declares() {
        // 64 MiB: 16 in reserve, 48 shared, 24 for a caller alone.
        let service = RequestBodyLayer::new(Duration::from_secs(30), 64 << 20)
            .layer(service_fn(counts_bytes));
        // Ten bodies declared at the method's limit and ten door bodies declared at 60 MiB,
        // each with its first kilobyte sent and never the rest.
        let mut silent = Vec::new();
        for _ in 0..10 {
            let (sender, body) = silent_after(message(MAX_REQUEST_BYTES).slice(..1024)).await;
            let held = tokio::spawn(service.clone().oneshot(request(CREATE, body)));
            silent.push((sender, held));
            let (sender, body) = silent_after(Bytes::from(vec![b' '; 1024])).await;
            let mut door = request(CREATE, body);
            door.extensions_mut().insert(DoorBody {
                length: 60 << 20,
                request: DoorRequest {
                    form: crate::grpc::json::BodyForm::Json,
                    fields: Vec::new(),
                },
            });
            silent.push((sender, tokio::spawn(service.clone().oneshot(door))));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // They hold kilobytes: the same caller's 20 MiB body is buffered and handled.
        let large = request(CREATE, Body::new(Full::new(message(20 << 20))));
        let response = service.clone().oneshot(large).await.unwrap();
        assert_eq!(answer(response).await, (5 + (20 << 20)).to_string());
        drop(silent);
    }

    #[tokio::test]
    async fn a_caller_over_its_share_is_refused_while_others_and_the_small_lanes_are_served() {
        let service = RequestBodyLayer::new(Duration::from_secs(30), 64 << 20)
            .layer(service_fn(counts_bytes));
        // A caller holds 20 MiB of a body still arriving (its share alone: 24 MiB).
        let (holder, body) = silent_after(message(40 << 20).slice(..20 << 20)).await;
        let held = tokio::spawn(service.clone().oneshot(request(CREATE, body)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // More than a caller could ever hold at once is refused at once; 8 MiB more than
        // its share, after the short wait for room.
        for size in [30 << 20, 8 << 20] {
            let body = Body::new(Full::new(message(size)));
            let response = service
                .clone()
                .oneshot(request(CREATE, body))
                .await
                .unwrap();
            assert_eq!(
                reason_of(&response),
                (
                    tonic::Code::ResourceExhausted,
                    "REQUEST_BUFFERS_BUSY".into()
                ),
                "{size}"
            );
            assert_eq!(response.headers()["grpc-retry-pushback-ms"], "2000");
        }
        // Its id-only calls and health probes have lanes of their own.
        for path in [Method::GetTemplate.path(), "/grpc.health.v1.Health/Check"] {
            let small = request(path, Body::new(Full::new(message(10))));
            let response = service.clone().oneshot(small).await.unwrap();
            assert_eq!(answer(response).await, "15", "{path}");
        }
        // Another caller (another address) is served from the rest of the pool: with two
        // callers holding, a share is a third of the shared 48 MiB.
        let other = from(
            "192.0.2.9",
            request(CREATE, Body::new(Full::new(message(10 << 20)))),
        );
        let response = service.clone().oneshot(other).await.unwrap();
        assert_eq!(answer(response).await, (5 + (10 << 20)).to_string());
        drop(holder);
        let _ = held.await;
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_refused_after_the_idle_timeout_before_its_deadline() {
        let mut layer = RequestBodyLayer::new(Duration::from_secs(30), 1 << 20);
        layer.0.idle = Duration::from_millis(100);
        let service = layer.layer(service_fn(counts_bytes));
        let (_sender, body) = silent_after(message(3000).slice(..1000)).await;
        let started = tokio::time::Instant::now();
        let response = service
            .oneshot(request(Method::SubmitRender.path(), body))
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not the deadline"
        );
        let status = Status::from_header_map(response.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("no byte"), "{status:?}");
        assert_eq!(reason_of(&response).1, "REQUEST_BODY_TIMEOUT");
        assert_eq!(response.headers()["grpc-retry-pushback-ms"], "1000");
    }

    #[tokio::test]
    async fn a_body_that_never_arrives_is_answered_unavailable_after_the_deadline() {
        let service = RequestBodyLayer::new(Duration::from_millis(50), 1 << 20)
            .layer(service_fn(counts_bytes));
        let (sender, body) = streamed_body();
        let request = http::Request::builder()
            .uri(Method::GetRenderJob.path())
            .body(Body::new(body))
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        let status = Status::from_header_map(response.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "REQUEST_BODY_TIMEOUT"
        );
        assert_eq!(response.headers()["grpc-retry-pushback-ms"], "1000");
        drop(sender);
    }
}
