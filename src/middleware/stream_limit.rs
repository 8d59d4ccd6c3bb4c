//! `StreamLimitLayer`: at most `limit` response streams of each cap ([`StreamCap`], named
//! in each method's row in [`crate::grpc::methods`]) open at once on this instance; one
//! more is answered RESOURCE_EXHAUSTED (with its reason and a retry delay) at once, from its
//! headers. The slot is held for the life of the response stream (until its body ends or is
//! dropped, when the caller goes away), not just until the headers: a watch costs for as
//! long as it is open. Used for watchers, which load shedding does not count once their
//! headers are answered: WatchRenderJob and health Watch each have slots of their own,
//! because health needs no identity (under `--auth required` too), and peers that are no
//! tenant's must not hold the slots the tenants' WatchRenderJob calls need.
//!
//! The slots are shared fairly ([`FairShare`]): each caller (its tenant once identified, its
//! peer address before: [`CallerKey`]) holds at most a share that shrinks as more callers
//! hold slots, and a caller holding none always finds one in the reserve; so neither one
//! tenant watching its own job a thousand times nor eight addresses together can take every
//! slot (issue 42: four addresses' 256 streams each held all 1,024). One more is refused
//! with the same reason, its message naming the caller's share.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::fair_share::{CallerKey, FairShare, ShareGuard, ShareRefusal, FIRST_SLOTS};
use crate::grpc::methods::{Method, StreamCap};
use crate::reason::Reason;
use http::Request;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::body::Body;
use tonic::Status;

/// Retry delay of a refused watcher: watches end as jobs end, within seconds to minutes.
pub(crate) const TOO_MANY_STREAMS_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Holds a slot per open stream of the methods of each cap, from that cap's own slots.
#[derive(Debug, Clone)]
pub struct StreamLimit {
    render_watchers: FairShare<CallerKey>,
    health_watchers: FairShare<CallerKey>,
    reason: Reason,
}

pub(crate) type StreamLimitLayer = AroundLayer<StreamLimit>;

impl StreamLimitLayer {
    /// At most `limit` streams of the methods of each cap at once, shared fairly between
    /// callers; one more is refused with `reason`.
    pub(crate) fn new(limit: usize, reason: Reason) -> StreamLimitLayer {
        AroundLayer(StreamLimit {
            render_watchers: FairShare::shrinking(limit, FIRST_SLOTS),
            health_watchers: FairShare::shrinking(limit, FIRST_SLOTS),
            reason,
        })
    }
}

impl StreamLimit {
    fn slots(&self, cap: StreamCap) -> &FairShare<CallerKey> {
        match cap {
            StreamCap::RenderWatchers => &self.render_watchers,
            StreamCap::HealthWatchers => &self.health_watchers,
        }
    }
}

/// A response body that holds its stream's slot until it is dropped.
struct SlotBody {
    inner: Body,
    _slot: ShareGuard<CallerKey>,
}

impl http_body::Body for SlotBody {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The response body is wrapped (to hold the slot), so this middleware answers tonic's
/// `Body` only.
impl<B> AroundCall<B, Body> for StreamLimit {
    fn around<S: Next<B, Body>>(&self, call: Request<B>, mut next: S) -> Reply<Body, S::Error> {
        let Some(cap) = Method::of(call.uri().path()).and_then(Method::watch) else {
            return Box::pin(next.call(call));
        };
        let open = self.slots(cap);
        let key = CallerKey::of(call.extensions());
        let slot = match open.try_acquire(key.clone(), 1) {
            Ok(slot) => slot,
            Err(refusal) => {
                let message = match refusal {
                    ShareRefusal::OverShare => format!(
                        "{key} already holds its share ({} of {}, fewer as more callers hold \
                         some) of the streams of this kind open on this instance; close one, \
                         or retry after the delay",
                        open.share_of(&key),
                        open.capacity()
                    ),
                    ShareRefusal::PoolFull => "too many streams of this kind are open on this \
                                               instance; retry after the delay or on another \
                                               instance"
                        .to_owned(),
                };
                return super::refuse(Status::from(ServiceError::transient(
                    ServiceErrorCode::ResourceExhausted,
                    self.reason,
                    message,
                    TOO_MANY_STREAMS_RETRY_AFTER,
                )));
            }
        };
        let answer = next.call(call);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| Body::new(SlotBody { inner, _slot: slot })))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::middleware::BoxFuture;
    use http_body_util::BodyExt;
    use std::convert::Infallible;
    use tower::{service_fn, Layer, ServiceExt};

    /// Answers a stream body of one byte.
    fn streams(_: http::Request<()>) -> BoxFuture<Result<http::Response<Body>, Infallible>> {
        let body = http_body_util::Full::new(bytes::Bytes::from_static(b"x"));
        Box::pin(async move { Ok(http::Response::new(Body::new(body))) })
    }

    fn request(path: &str) -> http::Request<()> {
        http::Request::builder().uri(path).body(()).unwrap()
    }

    const WATCH: &str = Method::WatchRenderJob.path();

    #[tokio::test]
    async fn a_stream_beyond_the_limit_is_refused_until_an_open_one_is_dropped() {
        let service = StreamLimitLayer::new(1, Reason::TooManyWatchers).layer(service_fn(streams));
        let open = service.clone().oneshot(request(WATCH)).await.unwrap();
        let refused = service.clone().oneshot(request(WATCH)).await.unwrap();
        let status = Status::from_header_map(refused.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(refused.headers()["grpc-retry-pushback-ms"], "5000");
        // Other methods are not counted, and the other cap's streams (health's) have slots
        // of their own (held here while they are open).
        let mut others = Vec::new();
        for path in [
            "/a/B",
            Method::DownloadRenderOutput.path(),
            Method::HealthWatch.path(),
        ] {
            let other = service.clone().oneshot(request(path)).await.unwrap();
            assert!(Status::from_header_map(other.headers()).is_none(), "{path}");
            others.push(other);
        }
        let refused = service
            .clone()
            .oneshot(request(Method::HealthWatch.path()))
            .await
            .unwrap();
        assert!(Status::from_header_map(refused.headers()).is_some());
        drop(others);
        // Once the stream's body is gone (read to its end here), its slot is free again.
        let body = open.into_body();
        drop(body.collect().await.unwrap());
        let again = service.oneshot(request(WATCH)).await.unwrap();
        assert!(Status::from_header_map(again.headers()).is_none());
    }

    #[tokio::test]
    async fn one_caller_holds_at_most_its_share_of_the_slots_and_another_is_served() {
        // 8 slots: 4 in reserve, 4 shared, so 2 for a caller alone.
        let service = StreamLimitLayer::new(8, Reason::TooManyWatchers).layer(service_fn(streams));
        let from = |address: &str| {
            let mut request = request(Method::HealthWatch.path());
            request
                .extensions_mut()
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: Some(address.parse().unwrap()),
                });
            request
        };
        let mut open = Vec::new();
        for _ in 0..2 {
            let response = service.clone().oneshot(from("192.0.2.1:1")).await.unwrap();
            assert!(Status::from_header_map(response.headers()).is_none());
            open.push(response);
        }
        let refused = service.clone().oneshot(from("192.0.2.1:2")).await.unwrap();
        let status = Status::from_header_map(refused.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("its share (2 of 8,"),
            "{status:?}"
        );
        let other = service.oneshot(from("192.0.2.2:1")).await.unwrap();
        assert!(Status::from_header_map(other.headers()).is_none());
    }
}
