//! Tower middleware of the gRPC server, one per file as `Foo` + `FooLayer`; the stack is built
//! in [`crate::app::stack`] with a why-comment on each layer.
//!
//! - [`trace_context`]: one OpenTelemetry server span per call, child of the caller's W3C
//!   `traceparent`.
//! - [`request_metrics`]: counts every answered call by method and status code, times it by
//!   method, and counts every error by its ErrorInfo reason.
//! - [`catch_panic`]: a panic in a handler answers INTERNAL and the server keeps serving.
//! - [`identity`]: says who is calling ([`crate::auth::Caller`]) from the headers and the
//!   connection, or refuses the call UNAUTHENTICATED before its body is received.
//! - [`load_shed`]: beyond a number of calls in flight, answers RESOURCE_EXHAUSTED at once
//!   with a retry delay instead of queueing inside the server.
//! - [`request_size`]: a request above the size limit (inflated, when gzip) is
//!   INVALID_ARGUMENT, not tonic's OUT_OF_RANGE; one that does not inflate is too.
//! - [`request_body`]: the request message is received whole, under a deadline and a minimum
//!   rate, each byte charged to buffers shared fairly, before load shedding counts the call.
//! - [`request_bounds`]: the message just received is held to the contract's bounds before
//!   anything copies or decodes it.
//! - [`stream_limit`]: at most a number of watch streams open at once, each holding its slot
//!   for as long as it is open.
//! - [`tenant_rate_limit`]: at most a number of calls per second per tenant, answered
//!   RESOURCE_EXHAUSTED with the wait beyond it.
//! - [`inflation_budget`]: a compressed request holds its service's message limit from a
//!   shared budget while it is decoded and handled (put on each service, not the stack: the
//!   limit is the service's).
//!
//! Every one is an [`AroundCall`] over the one [`AroundLayer`] helper below; none writes its
//! own `Layer` and `Service`. tower-http's neighbours do not fit a gRPC server: its
//! CatchPanic and RequestBodyLimit answer HTTP statuses (500, 413) that gRPC clients read
//! without our reason or retry delay, and its TraceLayer does not take the caller's
//! `traceparent` as parent; tower's LoadShed answers an error, not a status with a delay.

pub(crate) mod catch_panic;
pub(crate) mod idempotency_key;
pub(crate) mod identity;
pub mod inflation_budget;
pub(crate) mod load_shed;
pub mod request_body;
pub(crate) mod request_bounds;
pub(crate) mod request_metrics;
pub(crate) mod request_size;
pub mod settings;
pub(crate) mod stream_limit;
pub(crate) mod tenant_rate_limit;
pub(crate) mod trace_context;

pub(crate) use catch_panic::CatchPanicLayer;
pub(crate) use idempotency_key::IdempotencyKeyLayer;
pub(crate) use identity::IdentityLayer;
pub(crate) use inflation_budget::InflationBudgetLayer;
pub(crate) use load_shed::LoadShedLayer;
pub(crate) use request_body::RequestBodyLayer;
pub(crate) use request_bounds::RequestBoundsLayer;
pub(crate) use request_metrics::RequestMetricsLayer;
pub(crate) use request_size::RequestSizeLayer;
pub(crate) use stream_limit::StreamLimitLayer;
pub(crate) use tenant_rate_limit::TenantRateLimitLayer;
pub(crate) use trace_context::TraceContextLayer;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, Service};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The service a middleware passes a call on to (what tonic's routes are).
pub(crate) trait Next<RequestBody, ResponseBody>:
    Service<
        http::Request<RequestBody>,
        Response = http::Response<ResponseBody>,
        Future: Send + 'static,
        Error: 'static,
    > + Send
    + 'static
{
}

impl<S, RequestBody, ResponseBody> Next<RequestBody, ResponseBody> for S
where
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
{
}

/// A middleware's answer to a call.
pub(crate) type Reply<ResponseBody, Error> = BoxFuture<Result<http::Response<ResponseBody>, Error>>;

/// What one of our middleware does with a call (request body `B`, response body `R`), given
/// the inner service to pass it on to (the one that was polled ready): each middleware file
/// writes only this, as `Foo`, and names its layer `FooLayer = AroundLayer<Foo>`. The tower
/// plumbing (the layer, the service, `poll_ready`, tower's rule that the service polled
/// ready serves the call) is written once here. Not `tower::layer::layer_fn`: its closure
/// types cannot be named, and the stack's type is named ([`crate::app::stack::Middleware`])
/// for the router and for the tests that put the stack in front of services of their own.
pub(crate) trait AroundCall<B, R>: Clone {
    fn around<S: Next<B, R>>(&self, call: http::Request<B>, next: S) -> Reply<R, S::Error>;
}

/// The layer of a middleware `A` ([`AroundCall`]).
#[derive(Debug, Clone, Default)]
pub struct AroundLayer<A>(pub(crate) A);

impl<A: Clone, S> Layer<S> for AroundLayer<A> {
    type Service = Around<A, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Around {
            around: self.0.clone(),
            inner,
        }
    }
}

/// The service of a middleware `A` in front of `S`.
#[derive(Debug, Clone)]
pub struct Around<A, S> {
    around: A,
    inner: S,
}

/// Routed like the service it wraps (for middleware put on one service, not the stack).
impl<A, S: tonic::server::NamedService> tonic::server::NamedService for Around<A, S> {
    const NAME: &'static str = S::NAME;
}

impl<A, S, RequestBody, ResponseBody> Service<http::Request<RequestBody>> for Around<A, S>
where
    A: AroundCall<RequestBody, ResponseBody>,
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>
        + Next<RequestBody, ResponseBody>
        + Clone,
{
    type Response = http::Response<ResponseBody>;
    type Error = S::Error;
    type Future = Reply<ResponseBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        self.around.around(request, take_ready(&mut self.inner))
    }
}

/// The inner service that was polled ready, leaving a clone in its place.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// A call refused from its headers: the status as the layer's response, nothing called.
pub(crate) fn refuse<ResponseBody, Error>(status: tonic::Status) -> Reply<ResponseBody, Error>
where
    ResponseBody: Default + Send + 'static,
    Error: 'static,
{
    let response = status.into_http::<ResponseBody>();
    Box::pin(async move { Ok(response) })
}
