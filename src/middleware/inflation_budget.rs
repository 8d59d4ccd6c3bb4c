//! `InflationBudgetLayer`: a compressed request holds its service's message limit from a
//! shared budget of inflated bytes while it is decoded and handled, so gzip cannot multiply
//! what the server holds.
//!
//! [`super::request_body`]'s budget counts the bytes a call *sent*, and holds them until its
//! handler answers; for a gzip-compressed call those bytes are the compressed ones, while
//! tonic inflates the message into a buffer of up to the service's limit (64 MiB for
//! TemplateService, whatever the compressed size) and the decoded message lives until the
//! handler answers. Without this layer, a caller sending a thousand 64 KiB bodies that each
//! inflate to 64 MiB would make the server hold 64 GiB within a budget of 256 MiB. With it, a
//! compressed call waits (up to [`INFLATION_WAIT`]) until its limit fits in the budget, and is
//! then answered RESOURCE_EXHAUSTED (COMPRESSED_REQUESTS_BUSY) with a retry delay.
//! Uncompressed calls pass at once. The budget is shared by every service; each service's
//! layer is built with that service's limit (tonic's `max_decoding_message_size`), because
//! the inflated size is known only once it has been paid for.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::reason::Reason;
use http::Request;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tonic::Status;

/// Inflated bytes held at once by compressed calls: four of the largest requests, as many as
/// `request_body`'s budget holds uncompressed.
pub const INFLATION_BUDGET_BYTES: usize = 4 * super::request_body::MAX_REQUEST_BYTES;
/// How long a compressed call may wait for its share: a CreateTemplate holds it for as long
/// as its handler runs (its analysis waits up to 10 s for a parse slot).
pub const INFLATION_WAIT: Duration = Duration::from_secs(15);
/// Retry delay of a compressed call that found no room.
pub const INFLATION_RETRY_AFTER: Duration = Duration::from_secs(2);

/// The budget every service's [`InflationBudgetLayer`] takes from.
pub(crate) fn shared_budget(bytes: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS)))
}

/// Holds a service's message limit from the shared budget while a compressed call runs.
#[derive(Debug, Clone)]
pub(crate) struct InflationBudget {
    budget: Arc<Semaphore>,
    /// The service's message limit, in permits (bytes).
    weight: u32,
    wait: Duration,
}

pub(crate) type InflationBudgetLayer = AroundLayer<InflationBudget>;

impl InflationBudgetLayer {
    /// For a service whose messages inflate up to `message_limit` bytes.
    pub(crate) fn new(budget: Arc<Semaphore>, message_limit: usize) -> InflationBudgetLayer {
        AroundLayer(InflationBudget {
            budget,
            weight: u32::try_from(message_limit).unwrap_or(u32::MAX),
            wait: INFLATION_WAIT,
        })
    }

    /// Waits `wait` for a share instead of [`INFLATION_WAIT`].
    pub(crate) fn with_wait(self, wait: Duration) -> InflationBudgetLayer {
        AroundLayer(InflationBudget { wait, ..self.0 })
    }
}

/// Whether the call's message is compressed (`grpc-encoding` other than `identity`).
fn is_compressed<B>(request: &http::Request<B>) -> bool {
    request
        .headers()
        .get("grpc-encoding")
        .is_some_and(|encoding| encoding.as_bytes() != b"identity")
}

fn busy() -> Status {
    Status::from(ServiceError::transient(
        ServiceErrorCode::ResourceExhausted,
        Reason::CompressedRequestsBusy,
        "too many compressed requests are being decoded; retry after the delay, or send \
         this one uncompressed",
        INFLATION_RETRY_AFTER,
    ))
}

impl<B: Send + 'static, R: Default + Send + 'static> AroundCall<B, R> for InflationBudget {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        if !is_compressed(&call) {
            return Box::pin(next.call(call));
        }
        let (budget, weight, wait) = (self.budget.clone(), self.weight, self.wait);
        Box::pin(async move {
            let share = tokio::time::timeout(wait, budget.acquire_many_owned(weight)).await;
            let Ok(Ok(share)) = share else {
                return Ok(busy().into_http());
            };
            let response = next.call(call).await;
            // Decoded and handled by now (the handler answered): the share goes back.
            drop(share);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::middleware::BoxFuture;
    use std::convert::Infallible;
    use std::task::{Context, Poll};
    use tonic::Code;
    use tower::{Layer, Service, ServiceExt};

    /// Answers at once, except calls with an `x-hold` header: those answer once `released`
    /// turns true.
    #[derive(Clone)]
    struct Holding {
        released: tokio::sync::watch::Receiver<bool>,
    }

    impl Service<http::Request<()>> for Holding {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<()>) -> Self::Future {
            let mut released = self.released.clone();
            let hold = request.headers().contains_key("x-hold");
            Box::pin(async move {
                if hold {
                    let _ = released.wait_for(|released| *released).await;
                }
                Ok(http::Response::new("done".to_owned()))
            })
        }
    }

    fn request(encoding: Option<&str>, hold: bool) -> http::Request<()> {
        let mut builder =
            http::Request::builder().uri(crate::grpc::methods::Method::CreateTemplate.path());
        if let Some(encoding) = encoding {
            builder = builder.header("grpc-encoding", encoding);
        }
        if hold {
            builder = builder.header("x-hold", "1");
        }
        builder.body(()).unwrap()
    }

    /// A service of 1 KiB messages with room for two of them, whose calls wait `wait`.
    fn two_calls_of_room(
        wait: Duration,
    ) -> (
        crate::middleware::Around<InflationBudget, Holding>,
        tokio::sync::watch::Sender<bool>,
    ) {
        let (release, released) = tokio::sync::watch::channel(false);
        let layer = InflationBudgetLayer::new(shared_budget(2 * 1024), 1024).with_wait(wait);
        (layer.layer(Holding { released }), release)
    }

    #[tokio::test]
    async fn a_compressed_call_beyond_the_budget_waits_for_a_share_and_plain_calls_never_wait() {
        let (service, release) = two_calls_of_room(INFLATION_WAIT);
        let holding = [
            tokio::spawn(service.clone().oneshot(request(Some("gzip"), true))),
            tokio::spawn(service.clone().oneshot(request(Some("gzip"), true))),
        ];
        while service.around.budget.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let waiting = tokio::spawn(service.clone().oneshot(request(Some("gzip"), false)));
        for encoding in [None, Some("identity")] {
            let plain = service.clone().oneshot(request(encoding, false)).await;
            assert_eq!(plain.unwrap().into_body(), "done", "{encoding:?}");
        }
        assert!(!waiting.is_finished(), "no room: it waits");
        release.send(true).unwrap();
        for call in holding {
            assert_eq!(call.await.unwrap().unwrap().into_body(), "done");
        }
        assert_eq!(waiting.await.unwrap().unwrap().into_body(), "done");
        assert_eq!(
            service.around.budget.available_permits(),
            2 * 1024,
            "every share back"
        );
    }

    #[tokio::test]
    async fn a_compressed_call_that_finds_no_room_in_time_is_refused_with_a_retry_delay() {
        let (service, _release) = two_calls_of_room(Duration::from_millis(200));
        let _holding = [
            tokio::spawn(service.clone().oneshot(request(Some("gzip"), true))),
            tokio::spawn(service.clone().oneshot(request(Some("gzip"), true))),
        ];
        while service.around.budget.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let refused = service
            .clone()
            .oneshot(request(Some("gzip"), false))
            .await
            .unwrap();
        let status = Status::from_header_map(refused.headers()).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        use tonic_types::StatusExt;
        assert_eq!(
            status
                .get_error_details()
                .error_info()
                .map(|info| info.reason.as_str()),
            Some("COMPRESSED_REQUESTS_BUSY")
        );
        // README: retried after 2 s, in the pushback header, retry-after and RetryInfo.
        let header = |name: &str| {
            status
                .metadata()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        assert_eq!(header("grpc-retry-pushback-ms").as_deref(), Some("2000"));
        assert_eq!(header("retry-after").as_deref(), Some("2"));
        assert_eq!(
            status
                .get_error_details()
                .retry_info()
                .and_then(|info| info.retry_delay),
            Some(INFLATION_RETRY_AFTER)
        );
    }
}
