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
//! - [`request_body`]: the request message is received whole, under a deadline and a global
//!   byte budget, before load shedding counts the call.
//! - [`stream_limit`]: at most a number of watch streams open at once, each holding its slot
//!   for as long as it is open.
//! - [`tenant_rate_limit`]: at most a number of calls per second per tenant, answered
//!   RESOURCE_EXHAUSTED with the wait beyond it.
//! - [`inflation_budget`]: a compressed request holds its service's message limit from a
//!   shared budget while it is decoded and handled (put on each service, not the stack: the
//!   limit is the service's).

pub mod catch_panic;
pub mod identity;
pub mod inflation_budget;
pub mod load_shed;
pub mod request_body;
pub mod request_metrics;
pub mod request_size;
pub mod stream_limit;
pub mod tenant_rate_limit;
pub mod trace_context;

pub use catch_panic::CatchPanicLayer;
pub use identity::IdentityLayer;
pub use inflation_budget::InflationBudgetLayer;
pub use load_shed::LoadShedLayer;
pub use request_body::RequestBodyLayer;
pub use request_metrics::RequestMetricsLayer;
pub use request_size::RequestSizeLayer;
pub use stream_limit::StreamLimitLayer;
pub use tenant_rate_limit::TenantRateLimitLayer;
pub use trace_context::TraceContextLayer;

use std::future::Future;
use std::pin::Pin;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The inner service that was polled ready, leaving a clone in its place: tower's rule that
/// the service which answered `poll_ready` serves the call, for layers that call it from a
/// future of their own.
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// A call refused from its headers: the status as the layer's response, nothing called.
pub(crate) fn refuse<ResponseBody, Error>(
    status: tonic::Status,
) -> BoxFuture<Result<http::Response<ResponseBody>, Error>>
where
    ResponseBody: Default + Send + 'static,
    Error: 'static,
{
    let response = status.into_http::<ResponseBody>();
    Box::pin(async move { Ok(response) })
}
