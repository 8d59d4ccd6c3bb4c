//! The tower stack in front of every service, built in one function with a why-comment on
//! each layer (outermost first; each layer sees what the ones inside it answer).

use crate::auth::{ApiKeys, Identities};
use crate::http_json::HttpJsonLayer;
use crate::metrics::Metrics;
use crate::middleware::request_body::REQUEST_BUFFER_BUDGET_BYTES;
use crate::middleware::settings::{RequestLimitSettings, TenantRate};
use crate::middleware::{CatchPanicLayer, IdempotencyKeyLayer, IdentityLayer, LoadShedLayer};
use crate::middleware::{
    RequestBodyLayer, RequestBoundsLayer, StreamLimitLayer, TenantRateLimitLayer, TraceContextLayer,
};
use crate::middleware::{RequestMetricsLayer, RequestSizeLayer};
use crate::reason::Reason;
use crate::telemetry::traces::Tracing;
use std::sync::Arc;
use std::time::Duration;
use tower::layer::util::{Identity, Stack};

/// The tower stack in front of every service, outermost first.
pub type Middleware = Stack<
    StreamLimitLayer,
    Stack<
        RequestSizeLayer,
        Stack<
            LoadShedLayer,
            Stack<
                RequestBoundsLayer,
                Stack<
                    RequestBodyLayer,
                    Stack<
                        IdempotencyKeyLayer,
                        Stack<
                            TenantRateLimitLayer,
                            Stack<
                                IdentityLayer,
                                Stack<
                                    CatchPanicLayer,
                                    Stack<
                                        RequestMetricsLayer,
                                        Stack<TraceContextLayer, Stack<HttpJsonLayer, Identity>>,
                                    >,
                                >,
                            >,
                        >,
                    >,
                >,
            >,
        >,
    >,
>;

/// What the tower stack bounds.
#[derive(Debug, Clone, Copy)]
pub struct StackLimits {
    /// Calls in flight (bodies received) before shedding.
    pub max_concurrent_requests: usize,
    /// Time a caller has to send its request message once its headers arrived.
    pub request_body_timeout: Duration,
    /// Request bytes of the large bodies buffered at once.
    pub request_buffer_bytes: usize,
    /// Watch streams (ours and health's) open at once.
    pub max_watchers: usize,
    /// Calls per second of one tenant (none: not limited).
    pub tenant_rate: Option<TenantRate>,
}

impl From<&RequestLimitSettings> for StackLimits {
    fn from(settings: &RequestLimitSettings) -> StackLimits {
        StackLimits {
            max_concurrent_requests: settings.max_concurrent_requests as usize,
            request_body_timeout: settings.request_body_timeout(),
            request_buffer_bytes: settings.request_buffer_bytes(),
            max_watchers: settings.max_watchers as usize,
            tenant_rate: settings.tenant_rate(),
        }
    }
}

/// Builds the tower stack with the default body deadline and watcher cap (public so tests
/// can put it in front of services of their own).
pub fn middleware(metrics: Arc<Metrics>, max_concurrent_requests: usize) -> Middleware {
    middleware_with(
        Tracing::off(),
        metrics,
        Arc::new(Identities::new(
            crate::auth::AuthMode::Off,
            ApiKeys::default(),
        )),
        StackLimits {
            max_concurrent_requests,
            request_body_timeout: Duration::from_millis(
                crate::middleware::settings::DEFAULT_REQUEST_BODY_TIMEOUT_MS,
            ),
            request_buffer_bytes: REQUEST_BUFFER_BUDGET_BYTES,
            max_watchers: crate::middleware::settings::DEFAULT_MAX_WATCHERS as usize,
            tenant_rate: None,
        },
    )
}

/// Builds the tower stack. Each layer sees what the ones inside it answer.
pub fn middleware_with(
    tracing: Tracing,
    metrics: Arc<Metrics>,
    identities: Arc<Identities>,
    limits: StackLimits,
) -> Middleware {
    tower::ServiceBuilder::new()
        // The HTTP/JSON door: a call that is not gRPC is turned into the gRPC call its route
        // stands for, and its answer back into HTTP, so every layer below (and every
        // refusal of theirs) serves both protocols alike. Outermost, so that nothing below
        // ever sees anything but gRPC.
        .layer(HttpJsonLayer::contract(metrics.clone()))
        // A server span per call, child of the caller's `traceparent`: outermost, so that
        // every refusal below is traced with its status.
        .layer(TraceContextLayer::new(tracing))
        // Counts every answer as the caller sees it, refusals of the layers below included.
        .layer(RequestMetricsLayer::new(metrics.clone()))
        // A bug of ours answers INTERNAL and never takes the connection (or server) down.
        .layer(CatchPanicLayer::default())
        // Says who is calling (its tenant scopes everything below) from the headers and the
        // connection; a call that must and cannot is refused before its body is received.
        .layer(IdentityLayer::new(identities))
        // A tenant over its request rate is told how long to wait, from the headers: its
        // calls cost no body, no permit and no handler while others' are served.
        .layer(TenantRateLimitLayer::new(limits.tenant_rate, metrics))
        // Refuses a SubmitRender without a well-formed idempotency-key from its headers,
        // before its body is even received; the handlers claim it once the request is valid.
        .layer(IdempotencyKeyLayer::default())
        // Receives the request message whole (deadline, minimum rate, per-method limit, the
        // bytes that arrived charged to a budget shared fairly per caller, health's and the
        // id-only calls' lanes apart) before anything below counts the call: a caller that
        // sends headers and no body holds no permit. Inside the identity layer, so an
        // identified caller's share is its tenant's.
        .layer(RequestBodyLayer::new(
            limits.request_body_timeout,
            limits.request_buffer_bytes,
        ))
        // The message just received is held to the contract's bounds (proto/, protovalidate
        // rules) before tonic copies it to decode it: a message over a bound costs its bytes
        // once, and load shedding does not count it.
        .layer(RequestBoundsLayer::default())
        // Beyond the in-flight limit, RESOURCE_EXHAUSTED with a delay instead of queueing.
        .layer(LoadShedLayer::new(limits.max_concurrent_requests))
        // tonic answers an oversized message OUT_OF_RANGE; it is the caller's mistake.
        .layer(RequestSizeLayer::default())
        // Watch streams live long and load shedding forgets them once their headers are
        // answered: they have a cap of their own, a slot held for the stream's life. Health
        // watchers (who need no identity) have theirs apart from WatchRenderJob's, so peers
        // that are no tenant's cannot take the slots the tenants need.
        .layer(StreamLimitLayer::new(
            limits.max_watchers,
            Reason::TooManyWatchers,
        ))
        .into_inner()
}
