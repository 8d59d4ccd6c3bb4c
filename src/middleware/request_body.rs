//! `RequestBodyLayer`: a call's request message is received whole, under a deadline and
//! within a global budget of buffered bytes, before anything inside this layer (load
//! shedding above all) sees the call. Every RPC of ours and of health carries exactly one
//! request message, so nothing is lost by waiting for it; what is won is that a caller who
//! sends headers and then nothing (or a trickle) holds no shedding permit, only its own
//! stream, and only until [`RequestBodyLayer`]'s deadline (UNAVAILABLE, reason
//! REQUEST_BODY_TIMEOUT, with a retry delay: a slow network is not the request's fault).
//!
//! The gRPC length prefix is read first: a message declared above the method's limit is not
//! buffered at all; tonic refuses it from the prefix and `request_size` words the answer.
//! Reflection is a bidirectional stream: it is passed through as it comes.

use crate::config::{MAX_RENDER_REQUEST_BYTES, MAX_REQUEST_BYTES};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::reason::Reason;
use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::Status;
use tower::{Layer, Service};

use super::BoxFuture;

/// Request bytes buffered at once, by every call together: four of the largest requests.
/// Past it, a call waits (within its deadline) for others to be decoded, so hundreds of
/// callers announcing 64 MiB each cannot make the server hold their sum.
pub const REQUEST_BUFFER_BUDGET_BYTES: usize = 4 * (MAX_REQUEST_BYTES + GRPC_PREFIX_BYTES);
/// Retry delay of a call whose body did not arrive in time: the network may be better soon.
pub const REQUEST_BODY_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Calls whose request is a stream of messages, passed through unbuffered.
const STREAMING_REQUEST_PREFIXES: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];
/// Methods whose messages are bounded by [`MAX_RENDER_REQUEST_BYTES`] (as their service
/// is configured in `server`); every other one by [`MAX_REQUEST_BYTES`].
const RENDER_SERVICE_PREFIX: &str = "/lottie.render.v1.RenderService/";
/// A gRPC message on the wire: a compression flag byte and a big-endian u32 length.
const GRPC_PREFIX_BYTES: usize = 5;

#[derive(Debug, Clone)]
pub struct RequestBodyLayer {
    deadline: Duration,
    budget: Arc<Semaphore>,
}

impl RequestBodyLayer {
    /// Bodies must arrive within `deadline`; at most `budget_bytes` are buffered at once.
    pub fn new(deadline: Duration, budget_bytes: usize) -> RequestBodyLayer {
        RequestBodyLayer {
            deadline,
            budget: Arc::new(Semaphore::new(budget_bytes.min(Semaphore::MAX_PERMITS))),
        }
    }
}

impl<S> Layer<S> for RequestBodyLayer {
    type Service = RequestBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestBody {
            inner,
            deadline: self.deadline,
            budget: self.budget.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestBody<S> {
    inner: S,
    deadline: Duration,
    budget: Arc<Semaphore>,
}

/// What arrived of a request body.
enum Received {
    /// The whole body, and its share of the budget.
    Whole(Bytes, Option<OwnedSemaphorePermit>),
    /// The start of a message declared larger than the method accepts: enough for tonic to
    /// refuse it from its length prefix.
    TooLarge(Bytes),
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

/// The largest message `path` accepts.
fn message_limit(path: &str) -> usize {
    if path.starts_with(RENDER_SERVICE_PREFIX) {
        MAX_RENDER_REQUEST_BYTES
    } else {
        MAX_REQUEST_BYTES
    }
}

/// Reads `body` to its end, taking each frame's bytes from `budget` (waiting for them when
/// the budget is spent). Stops early at a message declared above `limit`, or at a body longer
/// than the one message it declares (the rest is not for a unary call and is dropped; tonic
/// decodes the first message).
async fn receive(mut body: Body, limit: usize, budget: Arc<Semaphore>) -> Result<Received, Status> {
    let mut buffer = BytesMut::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            // Request trailers carry nothing a unary call needs.
            continue;
        };
        if data.is_empty() {
            continue;
        }
        // A frame is at most h2's max frame size (16 MiB), far below u32::MAX.
        let size = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let permit = budget
            .clone()
            .acquire_many_owned(size)
            .await
            .map_err(|_| Status::from(ServiceError::internal("the request budget closed")))?;
        match &mut held {
            Some(held) => held.merge(permit),
            None => held = Some(permit),
        }
        buffer.extend_from_slice(&data);
        if buffer.len() >= GRPC_PREFIX_BYTES {
            let declared = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]);
            let declared = usize::try_from(declared).unwrap_or(usize::MAX);
            if declared > limit {
                return Ok(Received::TooLarge(buffer.freeze()));
            }
            if buffer.len() >= GRPC_PREFIX_BYTES + declared && !body.is_end_stream() {
                // The whole message is here; whatever follows is not ours to wait for.
                buffer.truncate(GRPC_PREFIX_BYTES + declared);
                break;
            }
        }
    }
    Ok(Received::Whole(buffer.freeze(), held))
}

impl<S> Service<http::Request<Body>> for RequestBody<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let path = request.uri().path();
        if STREAMING_REQUEST_PREFIXES
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            return Box::pin(inner.call(request));
        }
        let limit = message_limit(path);
        let (deadline, budget) = (self.deadline, self.budget.clone());
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let received = tokio::time::timeout(deadline, receive(body, limit, budget)).await;
            let (bytes, permit) = match received {
                Ok(Ok(Received::Whole(bytes, permit))) => (bytes, permit),
                Ok(Ok(Received::TooLarge(start))) => (start, None),
                // The caller reset its stream: nobody reads this answer.
                Ok(Err(status)) => return Ok(status.into_http()),
                Err(_) => return Ok(timed_out(deadline).into_http()),
            };
            let request = http::Request::from_parts(parts, Body::new(Full::new(bytes)));
            let response = inner.call(request).await;
            // The bytes are decoded by now (the handler answered): they leave the budget.
            drop(permit);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tonic_types::StatusExt;
    use tower::ServiceExt;

    /// Answers the number of body bytes it received.
    #[derive(Clone)]
    struct CountsBytes;

    impl Service<http::Request<Body>> for CountsBytes {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            Box::pin(async move {
                let bytes = request.into_body().collect().await.unwrap().to_bytes();
                Ok(http::Response::new(Body::new(Full::new(Bytes::from(
                    bytes.len().to_string(),
                )))))
            })
        }
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

    #[tokio::test]
    async fn a_whole_message_reaches_the_service_and_a_declared_oversize_is_not_buffered() {
        let service = RequestBodyLayer::new(Duration::from_secs(5), 1 << 20).layer(CountsBytes);
        let request = http::Request::builder()
            .uri("/lottie.render.v1.TemplateService/GetTemplate")
            .body(Body::new(Full::new(message(1000))))
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(answer(response).await, "1005");
        // Declared above the render limit, with only its first kilobyte sent: the service
        // gets that start at once (and tonic refuses it from the prefix).
        let start = message(MAX_RENDER_REQUEST_BYTES + 1).slice(..1024);
        let (sender, body) = streamed_body();
        sender
            .send(Ok(http_body::Frame::data(start)))
            .await
            .unwrap();
        let request = http::Request::builder()
            .uri("/lottie.render.v1.RenderService/SubmitRender")
            .body(Body::new(body))
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(answer(response).await, "1024");
        drop(sender);
    }

    #[tokio::test]
    async fn a_body_that_never_arrives_is_answered_unavailable_after_the_deadline() {
        let service = RequestBodyLayer::new(Duration::from_millis(50), 1 << 20).layer(CountsBytes);
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
