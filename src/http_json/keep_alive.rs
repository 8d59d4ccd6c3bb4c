//! An HTTP/1.1 connection can carry the next request only once this one's body has been read
//! to its end. A refusal from the headers (no route, no key, over the rate, too large) never
//! reads it (that is the point: a hostile body costs nothing), so hyper closes the connection
//! after the answer; the answer then says `Connection: close`, so the client knows before it
//! writes its next request into a closing socket.

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::Status;

/// Whether an HTTP/1.x request's body has been read to its end (`None`: nothing to follow,
/// an HTTP/2 request or one without a body).
#[derive(Debug, Clone)]
pub(crate) struct BodyRead(Option<Arc<AtomicBool>>);

impl BodyRead {
    /// Follows `call`'s body if it needs following, and answers the call with it.
    pub(crate) fn follow(call: Request<Body>) -> (Request<Body>, BodyRead) {
        let http1 = call.version() < http::Version::HTTP_2;
        if !http1 || http_body::Body::is_end_stream(call.body()) {
            return (call, BodyRead(None));
        }
        let ended = Arc::new(AtomicBool::new(false));
        let (parts, inner) = call.into_parts();
        let followed = Followed {
            inner,
            ended: ended.clone(),
        };
        (
            Request::from_parts(parts, Body::new(followed)),
            BodyRead(Some(ended)),
        )
    }

    /// `answer`, with `Connection: close` if the body was left unread.
    pub(crate) fn mark(&self, mut answer: Response<Body>) -> Response<Body> {
        if self
            .0
            .as_ref()
            .is_some_and(|ended| !ended.load(Ordering::Acquire))
        {
            answer
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        answer
    }
}

/// A body that says when it has been read to its end.
struct Followed {
    inner: Body,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for Followed {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(context);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
