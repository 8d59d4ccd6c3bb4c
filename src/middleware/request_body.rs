//! `RequestBodyLayer`: a call's request message is received whole, under a deadline and
//! within a budget of buffered bytes, before anything inside this layer (load shedding above
//! all) sees the call. Every RPC of ours and of health carries exactly one request message,
//! so nothing is lost by waiting for it; what is won is that a caller who sends headers and
//! then nothing (or a trickle) holds no shedding permit, only its own stream, and only until
//! [`RequestBodyLayer`]'s deadline (UNAVAILABLE, reason REQUEST_BODY_TIMEOUT, with a retry
//! delay: a slow network is not the request's fault).
//!
//! Each method has the body limit of its real need ([`method_body`]): health and the
//! id-only calls a few KiB, SubmitRender 1 MiB, CreateTemplate 64 MiB (a template and its
//! fonts). A body declared above it (by `content-length` or its gRPC length prefix) is
//! refused at once, INVALID_ARGUMENT REQUEST_TOO_LARGE, before anything is buffered; a path
//! that is no method of ours is not buffered at all (the router answers UNIMPLEMENTED).
//!
//! Once its length prefix is read, a body reserves its declared size from a pool shared
//! fairly ([`crate::fair_share`]): per peer address before the caller is identified, per
//! tenant after, no key holding more than a quarter of the pool (one largest request), so
//! four silent 64 MiB bodies from one caller hold one quarter, not everything. Health
//! probes have a small pool of their own that nobody else can take. A caller over its
//! share, or a pool full, for longer than a short wait is answered RESOURCE_EXHAUSTED
//! (REQUEST_BUFFERS_BUSY) with a retry delay.
//!
//! Reflection is a bidirectional stream: it is passed through as it comes (its messages
//! are bounded by the reflection services' own decoding limit).

use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::fair_share::{CallerKey, FairShare, ShareGuard, ShareRefusal};
use crate::reason::Reason;
use bytes::{Bytes, BytesMut};
use http::Request;
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
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
/// Each call in flight may buffer this much, within its caller's share.
pub const MAX_RENDER_REQUEST_BYTES: usize =
    MAX_RENDER_FIELDS_BYTES + crate::grpc::convert::MAX_REQUEST_IMAGE_BYTES;
/// Largest UploadImage request: one image and its field's tag and length.
pub const MAX_UPLOAD_IMAGE_REQUEST_BYTES: usize = crate::lottie::images::MAX_IMAGE_BYTES + 16;
/// Request bytes buffered at once, by every call together (health apart): four callers'
/// shares. Past it, a call waits (briefly) for others to be decoded, so hundreds of callers
/// announcing 64 MiB each cannot make the server hold their sum; one caller may hold a
/// quarter of it, [`CALLER_SHARE_BYTES`], so four callers are needed to fill it.
pub const REQUEST_BUFFER_BUDGET_BYTES: usize = 4 * CALLER_SHARE_BYTES;
/// What one caller may have buffered at once: one largest request (a template with its
/// fonts, or a SubmitRender with its images) and room beside it for a few of the others
/// (four SubmitRenders without images, or a thousand id-sized calls), so that a caller
/// uploading a template can still poll its jobs.
pub const CALLER_SHARE_BYTES: usize =
    MAX_REQUEST_BYTES + GRPC_PREFIX_BYTES + 4 * (MAX_RENDER_FIELDS_BYTES + GRPC_PREFIX_BYTES);
/// Largest health request: a service name (ours are under 50 bytes). tonic's default is
/// 4 MiB, which a compressed request would inflate to.
pub const MAX_HEALTH_REQUEST_BYTES: usize = 4 * 1024;
/// Largest reflection request: a file or symbol name (well under 1 KiB).
pub const MAX_REFLECTION_REQUEST_BYTES: usize = 4 * 1024;
/// Largest request of the calls that name one template or job (a UUID) or a list page (a
/// page token of some 60 bytes): a few hundred bytes at most, 4 KiB said generously.
pub const MAX_ID_REQUEST_BYTES: usize = 4 * 1024;
/// Health requests buffered at once: 256 of the largest, 1 MiB, a lane of their own so
/// that probes are answered whatever the other calls hold (an address a quarter of it).
pub const HEALTH_BUFFER_BUDGET_BYTES: usize = 256 * (MAX_HEALTH_REQUEST_BYTES + GRPC_PREFIX_BYTES);
/// How long a body waits for room (in its caller's share, or in a full pool) before it is
/// refused: short, so a caller is told to come back rather than held behind slow bodies.
pub const REQUEST_BUFFER_WAIT: Duration = Duration::from_secs(1);
/// Retry delay of a call refused for the buffers: a 64 MiB body takes seconds to arrive.
pub(crate) const REQUEST_BUFFERS_RETRY_AFTER: Duration = Duration::from_secs(2);
/// Retry delay of a call whose body did not arrive in time: the network may be better soon.
pub(crate) const REQUEST_BODY_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Calls whose request is a stream of messages, passed through unbuffered.
const STREAMING_REQUEST_PREFIXES: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];
/// A gRPC message on the wire: a compression flag byte and a big-endian u32 length.
const GRPC_PREFIX_BYTES: usize = 5;

/// The pool a method's bodies are buffered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLane {
    /// Health probes: a small pool nobody else can take.
    Health,
    /// Every other method.
    Shared,
}

/// What one method's request body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MethodBody {
    /// Largest message, bytes (without its 5-byte prefix).
    pub limit: usize,
    pub lane: BodyLane,
}

/// The body limit and lane of the unary (or server-streaming) method at `path`; `None` for
/// a path that is no such method of this server.
pub(crate) fn method_body(path: &str) -> Option<MethodBody> {
    let shared = |limit| {
        Some(MethodBody {
            limit,
            lane: BodyLane::Shared,
        })
    };
    match path {
        "/grpc.health.v1.Health/Check" | "/grpc.health.v1.Health/Watch" => Some(MethodBody {
            limit: MAX_HEALTH_REQUEST_BYTES,
            lane: BodyLane::Health,
        }),
        "/lottie.render.v1.TemplateService/CreateTemplate" => shared(MAX_REQUEST_BYTES),
        "/lottie.render.v1.RenderService/SubmitRender" => shared(MAX_RENDER_REQUEST_BYTES),
        "/lottie.render.v1.TemplateService/UploadImage" => shared(MAX_UPLOAD_IMAGE_REQUEST_BYTES),
        "/lottie.render.v1.TemplateService/GetTemplate"
        | "/lottie.render.v1.TemplateService/ListTemplates"
        | "/lottie.render.v1.TemplateService/DeleteTemplate"
        | "/lottie.render.v1.TemplateService/DeleteImage"
        | "/lottie.render.v1.RenderService/GetRenderJob"
        | "/lottie.render.v1.RenderService/WatchRenderJob"
        | "/lottie.render.v1.RenderService/CancelRenderJob"
        | "/lottie.render.v1.RenderService/DownloadRenderOutput" => shared(MAX_ID_REQUEST_BYTES),
        _ => None,
    }
}

/// The most a request message of the method at `path` may be, bytes (`None`: no method of
/// this server with a body of one message).
pub fn method_body_limit(path: &str) -> Option<usize> {
    method_body(path).map(|method| method.limit)
}

/// A request of the HTTP/JSON door ([`crate::http_json`]): its body is JSON (or a raw Lottie
/// file) of `length` bytes, known from its headers. It is received whole under the same
/// deadline, method limit and fair share as a gRPC message, then `convert` turns it into the
/// method's message (a classified error when it is not one).
#[derive(Clone)]
pub(crate) struct JsonBody {
    pub length: u64,
    pub convert: ToMessage,
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

/// Turns a door's body into its method's message, framed as gRPC frames it (the body is
/// moved in, so that it is freed as soon as the message is built).
pub(crate) type ToMessage = Arc<dyn Fn(Bytes) -> Result<Bytes, ServiceError> + Send + Sync>;

/// Receives each call's request message whole before passing the call on.
#[derive(Debug, Clone)]
pub struct RequestBody {
    deadline: Duration,
    shared: FairShare<CallerKey>,
    health: FairShare<CallerKey>,
}

pub(crate) type RequestBodyLayer = AroundLayer<RequestBody>;

impl RequestBodyLayer {
    /// Bodies must arrive within `deadline`; at most `budget_bytes` are buffered at once
    /// (health's apart), a caller holding at most a quarter of them.
    pub(crate) fn new(deadline: Duration, budget_bytes: usize) -> RequestBodyLayer {
        AroundLayer(RequestBody {
            deadline,
            shared: FairShare::with_default_share(budget_bytes),
            health: FairShare::with_default_share(HEALTH_BUFFER_BUDGET_BYTES),
        })
    }
}

/// The whole body, and its hold on the buffers.
struct Received(Bytes, Option<ShareGuard<CallerKey>>);

/// Why a body was not received.
enum NotReceived {
    /// Declared (or sent) above the method's limit: the caller's mistake.
    TooLarge { declared: u64, limit: usize },
    /// No room for it in the caller's share or the pool.
    Busy(ShareRefusal),
    /// The stream failed (the caller reset it): nobody reads this answer.
    Failed(Status),
}

/// The answer to a call whose body did not arrive within `deadline`.
fn timed_out(deadline: Duration) -> Status {
    Status::from(ServiceError::transient(
        ServiceErrorCode::Unavailable,
        Reason::RequestBodyTimeout,
        format!(
            "the request message did not arrive within {} ms of its headers",
            deadline.as_millis()
        ),
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
            "{key} already holds its share ({} bytes) of this instance's request buffers with \
             other requests still arriving; retry after the delay",
            pool.per_key()
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

/// Reads `body` to the end of its one message. The message's declared size (its prefix)
/// is taken from `pool` under `key` before more than its first frame is kept; a message
/// declared above `limit` is refused then. A body longer than the one message it declares
/// is cut there (the rest is not for a unary call and is dropped; tonic decodes the first
/// message).
async fn receive(
    mut body: Body,
    limit: usize,
    pool: &FairShare<CallerKey>,
    key: &CallerKey,
) -> Result<Received, NotReceived> {
    let mut buffer = BytesMut::new();
    let mut held: Option<ShareGuard<CallerKey>> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(NotReceived::Failed)?.into_data() else {
            // Request trailers carry nothing a unary call needs.
            continue;
        };
        if data.is_empty() {
            continue;
        }
        buffer.extend_from_slice(&data);
        if buffer.len() < GRPC_PREFIX_BYTES {
            continue;
        }
        let declared = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]);
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        if declared > limit {
            return Err(NotReceived::TooLarge {
                declared: declared as u64,
                limit,
            });
        }
        let whole = GRPC_PREFIX_BYTES + declared;
        if held.is_none() {
            let guard = pool
                .acquire(key.clone(), whole, REQUEST_BUFFER_WAIT)
                .await
                .map_err(NotReceived::Busy)?;
            held = Some(guard);
        }
        if buffer.len() >= whole {
            // The whole message is here; whatever follows is not ours to wait for.
            buffer.truncate(whole);
            break;
        }
    }
    Ok(Received(buffer.freeze(), held))
}

/// Reads a JSON body of `length` bytes, its room in `pool` taken first.
async fn receive_json(
    mut body: Body,
    length: u64,
    pool: &FairShare<CallerKey>,
    key: &CallerKey,
) -> Result<Received, NotReceived> {
    let size = usize::try_from(length).unwrap_or(usize::MAX);
    let guard = pool
        .acquire(key.clone(), size, REQUEST_BUFFER_WAIT)
        .await
        .map_err(NotReceived::Busy)?;
    let mut buffer = BytesMut::with_capacity(size);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(NotReceived::Failed)?.into_data() else {
            continue;
        };
        if buffer.len() + data.len() > size {
            // More than its headers declared (hyper refuses this on HTTP/1.1; said again).
            return Err(NotReceived::TooLarge {
                declared: (buffer.len() + data.len()) as u64,
                limit: size,
            });
        }
        buffer.extend_from_slice(&data);
    }
    Ok(Received(buffer.freeze(), Some(guard)))
}

/// The gRPC message the door's `json` body stands for, with its length prefix.
fn json_to_message(json: &JsonBody, body: Bytes) -> Result<Bytes, Status> {
    (json.convert)(body).map_err(Status::from)
}

/// The request body is read and replaced, so this middleware takes tonic's `Body` only.
impl AroundCall<Body, Body> for RequestBody {
    fn around<S: Next<Body, Body>>(
        &self,
        call: Request<Body>,
        mut next: S,
    ) -> Reply<Body, S::Error> {
        let path = call.uri().path();
        if STREAMING_REQUEST_PREFIXES
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            return Box::pin(next.call(call));
        }
        let Some(method) = method_body(path) else {
            // No method of ours: its body is never read (the router answers UNIMPLEMENTED).
            let (parts, _) = call.into_parts();
            return Box::pin(next.call(Request::from_parts(parts, Body::empty())));
        };
        let json = call.extensions().get::<JsonBody>().cloned();
        if let Some(json) = &json {
            let limit = json_body_limit(method.limit);
            if json.length > limit as u64 {
                return super::refuse(too_large(json.length, limit));
            }
        } else if let Some(declared) = content_length(call.headers()) {
            if declared > (method.limit + GRPC_PREFIX_BYTES) as u64 {
                return super::refuse(too_large(declared, method.limit));
            }
        }
        let pool = match method.lane {
            BodyLane::Health => self.health.clone(),
            BodyLane::Shared => self.shared.clone(),
        };
        let key = CallerKey::of(call.extensions());
        let deadline = self.deadline;
        Box::pin(async move {
            let (parts, body) = call.into_parts();
            let received = match &json {
                Some(json) => {
                    tokio::time::timeout(deadline, receive_json(body, json.length, &pool, &key))
                        .await
                }
                None => {
                    tokio::time::timeout(deadline, receive(body, method.limit, &pool, &key)).await
                }
            };
            let (bytes, held) = match received {
                Ok(Ok(Received(bytes, held))) => (bytes, held),
                Ok(Err(NotReceived::TooLarge { declared, limit })) => {
                    return Ok(too_large(declared, limit).into_http())
                }
                Ok(Err(NotReceived::Busy(refusal))) => {
                    return Ok(busy(refusal, &key, &pool).into_http())
                }
                Ok(Err(NotReceived::Failed(status))) => return Ok(status.into_http()),
                Err(_) => return Ok(timed_out(deadline).into_http()),
            };
            let bytes = match &json {
                Some(json) => match json_to_message(json, bytes) {
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
            "/lottie.render.v1.TemplateService/GetTemplate",
            Body::new(Full::new(message(1000))),
        );
        let response = service.clone().oneshot(whole).await.unwrap();
        assert_eq!(answer(response).await, "1005");
        // Declared above the method's limit, with only its first kilobyte sent (and never
        // the rest): refused from the prefix, at once.
        for (path, declared) in [
            (
                "/lottie.render.v1.RenderService/SubmitRender",
                MAX_RENDER_REQUEST_BYTES + 1,
            ),
            ("/grpc.health.v1.Health/Check", MAX_REQUEST_BYTES + 4),
            (
                "/lottie.render.v1.TemplateService/ListTemplates",
                MAX_ID_REQUEST_BYTES + 1,
            ),
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
    fn every_method_of_our_services_and_healths_has_a_body_limit() {
        use prost::Message as _;
        let mut paths = Vec::new();
        for set in [
            crate::grpc::proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ] {
            let set = prost_types::FileDescriptorSet::decode(set).unwrap();
            for file in set.file {
                for service in &file.service {
                    for method in &service.method {
                        paths.push(format!(
                            "/{}.{}/{}",
                            file.package(),
                            service.name(),
                            method.name()
                        ));
                    }
                }
            }
        }
        assert!(paths.len() >= 11, "{paths:?}");
        for path in paths {
            assert!(method_body(&path).is_some(), "{path} has no body limit");
        }
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

    #[tokio::test]
    async fn a_caller_over_its_share_of_the_buffers_is_refused_while_health_has_its_own_lane() {
        // A budget of four of the largest requests: one caller holds at most one of them.
        let budget = 4 * (MAX_RENDER_REQUEST_BYTES + GRPC_PREFIX_BYTES);
        let service =
            RequestBodyLayer::new(Duration::from_secs(5), budget).layer(service_fn(counts_bytes));
        let submit = "/lottie.render.v1.RenderService/SubmitRender";
        // A body declared at the method's limit, its first kilobyte sent, then silence.
        let (holder, body) = streamed_body();
        holder
            .send(Ok(http_body::Frame::data(
                message(MAX_RENDER_REQUEST_BYTES).slice(..1024),
            )))
            .await
            .unwrap();
        let held = tokio::spawn(service.clone().oneshot(request(submit, body)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The same caller's next body finds its share held.
        let response = service
            .clone()
            .oneshot(request(submit, Body::new(Full::new(message(10)))))
            .await
            .unwrap();
        assert_eq!(
            reason_of(&response),
            (
                tonic::Code::ResourceExhausted,
                "REQUEST_BUFFERS_BUSY".into()
            )
        );
        assert_eq!(response.headers()["grpc-retry-pushback-ms"], "2000");
        // Health is answered from its own lane.
        let response = service
            .clone()
            .oneshot(request(
                "/grpc.health.v1.Health/Check",
                Body::new(Full::new(message(10))),
            ))
            .await
            .unwrap();
        assert_eq!(answer(response).await, "15");
        // Another caller (another address) is served from the rest of the pool.
        let mut other = request(submit, Body::new(Full::new(message(10))));
        other
            .extensions_mut()
            .insert(tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: Some("192.0.2.9:1000".parse().unwrap()),
            });
        let response = service.oneshot(other).await.unwrap();
        assert_eq!(answer(response).await, "15");
        drop(holder);
        let _ = held.await;
    }

    #[tokio::test]
    async fn a_body_that_never_arrives_is_answered_unavailable_after_the_deadline() {
        let service = RequestBodyLayer::new(Duration::from_millis(50), 1 << 20)
            .layer(service_fn(counts_bytes));
        let (sender, body) = streamed_body();
        let request = http::Request::builder()
            .uri("/lottie.render.v1.RenderService/GetRenderJob")
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
