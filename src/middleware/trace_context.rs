//! `TraceContextLayer`: one OpenTelemetry server span per call, child of the caller's span
//! when the call carries a W3C `traceparent` (and `tracestate`), else the root of a new
//! trace. It sits outermost, so refusals by the layers inside it are traced too. The span
//! carries `rpc.system`, `rpc.service`, `rpc.method` and `rpc.grpc.status_code` (from the
//! answer's headers: errors travel trailers-only; an answer without a status there is a
//! success whose status follows in the trailers), and ends when the answer's headers are
//! ready (for a stream: when it starts). Its context goes into the request's extensions
//! ([`CallSpan`]) so a job can keep it. With traces off, calls pass untouched.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::grpc::methods::Method;
use crate::telemetry::traces::{CallSpan, Tracing};
use http::Request;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// Longest service or method name put on a span as it is; callers choose paths, and a
/// span must not carry whatever they send.
const MAX_NAME_BYTES: usize = 128;
/// What an unreadable path is called on its span.
const UNKNOWN: &str = "unknown";

/// Opens a server span per call, when traces are on.
#[derive(Debug, Clone)]
pub struct TraceContext {
    tracing: Tracing,
    propagator: TraceContextPropagator,
}

pub(crate) type TraceContextLayer = AroundLayer<TraceContext>;

impl TraceContextLayer {
    pub(crate) fn new(tracing: Tracing) -> TraceContextLayer {
        AroundLayer(TraceContext {
            tracing,
            propagator: TraceContextPropagator::new(),
        })
    }
}

/// "/package.Service/Method" → ("package.Service", "Method"): a method of ours by its row in
/// [`crate::grpc::methods`], another path by its words when each is a bounded dotted word
/// (a caller's mistaken service is worth seeing in a trace); "unknown" for anything else.
fn rpc_names(path: &str) -> (&str, &str) {
    if let Some(method) = Method::of(path) {
        return (method.service(), method.name());
    }
    let readable = |name: &str| {
        !name.is_empty()
            && name.len() <= MAX_NAME_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
    };
    match path.strip_prefix('/').and_then(|rest| rest.split_once('/')) {
        Some((service, method)) if readable(service) && readable(method) => (service, method),
        _ => (UNKNOWN, UNKNOWN),
    }
}

/// The request's headers as the propagator reads them.
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The gRPC status code in an answer's headers; 0 (OK) when the status follows in the
/// trailers.
fn status_code(headers: &http::HeaderMap) -> i64 {
    headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// Codes that mean the server failed (OpenTelemetry's gRPC conventions for server spans);
/// the others are the caller's business and leave the span's status unset.
fn is_server_error(code: i64) -> bool {
    use tonic::Code;
    [
        Code::Unknown,
        Code::DeadlineExceeded,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
    ]
    .iter()
    .any(|error| *error as i64 == code)
}

impl<B, R: Send + 'static> AroundCall<B, R> for TraceContext {
    fn around<S: Next<B, R>>(&self, mut call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let Some(tracer) = self.tracing.tracer() else {
            return Box::pin(next.call(call));
        };
        let parent = self.propagator.extract(&HeaderExtractor(call.headers()));
        let (service, method) = rpc_names(call.uri().path());
        let mut span = tracer
            .span_builder(format!("{service}/{method}"))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", service.to_owned()),
                KeyValue::new("rpc.method", method.to_owned()),
            ])
            .start_with_context(tracer, &parent);
        call.extensions_mut()
            .insert(CallSpan(span.span_context().clone()));
        let answer = next.call(call);
        Box::pin(async move {
            let answer = answer.await;
            match &answer {
                Ok(response) => {
                    let code = status_code(response.headers());
                    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code));
                    if is_server_error(code) {
                        span.set_status(Status::error(format!("grpc status {code}")));
                    }
                }
                Err(_) => span.set_status(Status::error("the transport failed")),
            }
            span.end();
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_names_come_from_readable_paths_only() {
        assert_eq!(
            rpc_names(Method::SubmitRender.path()),
            ("lottie.render.v1.RenderService", "SubmitRender")
        );
        assert_eq!(rpc_names("/no.Such/Method"), ("no.Such", "Method"));
        let long = format!("/{}/Method", "a".repeat(200));
        for path in [
            "/",
            "/x",
            "/a b/c",
            "/svc/",
            "//m",
            "/svc/m/extra",
            long.as_str(),
        ] {
            assert_eq!(rpc_names(path), ("unknown", "unknown"), "{path}");
        }
    }
}
