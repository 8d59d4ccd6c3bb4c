//! `LoadShedLayer`: at most `limit` calls in flight; one more is answered RESOURCE_EXHAUSTED
//! (reason SERVER_OVERLOADED, with a retry delay) at once. An overloaded server that queues
//! calls internally only makes every caller time out and retry; shedding tells them when to
//! come back. Health checks are never shed, so the mesh keeps seeing the instance. The layer
//! in front of it ([`super::request_body`]) has received the request message already: a
//! permit is held only by a call whose request has arrived, never by a caller that sent
//! headers and is slow (or silent) with the rest. (tower's LoadShed answers an `Overloaded`
//! error that tonic turns into a status without ErrorInfo or RetryInfo; this one speaks the
//! service's error model.)

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::reason::Reason;
use http::Request;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tonic::Status;

/// Retry delay of a shed call: overload passes quickly or the mesh routes elsewhere.
pub(crate) const OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Calls never shed (health checks).
const NEVER_SHED_PREFIX: &str = "/grpc.health.v1.Health/";

/// Sheds the calls beyond its permits.
#[derive(Debug, Clone)]
pub struct LoadShed {
    in_flight: Arc<Semaphore>,
}

pub(crate) type LoadShedLayer = AroundLayer<LoadShed>;

impl LoadShedLayer {
    pub(crate) fn new(limit: usize) -> LoadShedLayer {
        AroundLayer(LoadShed {
            in_flight: Arc::new(Semaphore::new(limit)),
        })
    }
}

impl<B, R: Default + Send + 'static> AroundCall<B, R> for LoadShed {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let permit = if call.uri().path().starts_with(NEVER_SHED_PREFIX) {
            None
        } else {
            match self.in_flight.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    return super::refuse(Status::from(ServiceError::transient(
                        ServiceErrorCode::ResourceExhausted,
                        Reason::ServerOverloaded,
                        "too many calls in flight; retry after the delay",
                        OVERLOAD_RETRY_AFTER,
                    )));
                }
            }
        };
        let answer = next.call(call);
        Box::pin(async move {
            let response = answer.await;
            // Held until the answer's headers are ready (a stream's body is not counted).
            drop(permit);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::middleware::BoxFuture;
    use std::convert::Infallible;
    use tokio::sync::Notify;
    use tower::{service_fn, Layer, ServiceExt};

    /// Answers once `release` is notified.
    fn done_once_notified(
        release: Arc<Notify>,
    ) -> BoxFuture<Result<http::Response<String>, Infallible>> {
        Box::pin(async move {
            release.notified().await;
            Ok(http::Response::new("done".to_owned()))
        })
    }

    fn request(path: &str) -> http::Request<()> {
        http::Request::builder().uri(path).body(()).unwrap()
    }

    #[tokio::test]
    async fn calls_beyond_the_limit_are_shed_with_a_retry_delay_but_health_never_is() {
        let release = Arc::new(Notify::new());
        let slow = release.clone();
        let service = LoadShedLayer::new(1).layer(service_fn(move |_: http::Request<()>| {
            done_once_notified(slow.clone())
        }));
        let first = tokio::spawn(service.clone().oneshot(request("/a/B")));
        tokio::task::yield_now().await;
        let shed = service.clone().oneshot(request("/a/B")).await.unwrap();
        let status = Status::from_header_map(shed.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(shed.headers()["grpc-retry-pushback-ms"], "1000");
        let health = tokio::spawn(
            service
                .clone()
                .oneshot(request("/grpc.health.v1.Health/Check")),
        );
        tokio::task::yield_now().await;
        release.notify_waiters();
        assert_eq!(first.await.unwrap().unwrap().body(), "done");
        assert_eq!(health.await.unwrap().unwrap().body(), "done");
        // The permit came back: the next call is served.
        let next = tokio::spawn(service.oneshot(request("/a/B")));
        tokio::task::yield_now().await;
        release.notify_waiters();
        assert_eq!(next.await.unwrap().unwrap().body(), "done");
    }
}
