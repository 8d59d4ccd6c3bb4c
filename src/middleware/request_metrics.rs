//! `RequestMetricsLayer`: counts every answered call by method and gRPC status code, every
//! error by its method, code and ErrorInfo reason (rejections), and times every call by method (to
//! its answer's headers: a unary call's whole handling, a stream's start; a Watch stream's
//! life is not latency), as the caller sees them:
//! it sits outermost, so refusals by the layers inside it are counted too. Errors travel as
//! trailers-only answers (status in the headers); an answer without a status in its headers
//! is a success whose status follows in the trailers.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::grpc::methods::Method;
use crate::metrics::Metrics;
use http::Request;
use std::sync::Arc;
use tonic::Status;
use tonic_types::StatusExt;

/// Label of every other path: callers choose paths, and a label per path would let them grow
/// the registry without bound.
const UNKNOWN_METHOD: &str = "unknown";

/// The method's name for the methods of this server (its row in [`crate::grpc::methods`]:
/// ours, health's, reflection's), else "unknown".
fn method_label(path: &str) -> &'static str {
    Method::of(path).map_or(UNKNOWN_METHOD, Method::name)
}

/// Counts and times every call into `metrics`.
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    metrics: Arc<Metrics>,
}

pub(crate) type RequestMetricsLayer = AroundLayer<RequestMetrics>;

impl RequestMetricsLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> RequestMetricsLayer {
        AroundLayer(RequestMetrics { metrics })
    }
}

impl<B, R: Send + 'static> AroundCall<B, R> for RequestMetrics {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let method = method_label(call.uri().path());
        let metrics = self.metrics.clone();
        let started = std::time::Instant::now();
        let answer = next.call(call);
        Box::pin(async move {
            let response = answer.await?;
            metrics.request_duration(method, started.elapsed());
            match Status::from_header_map(response.headers()) {
                Some(status) if status.code() != tonic::Code::Ok => {
                    let code = format!("{:?}", status.code());
                    metrics.request(method, &code);
                    let details = status.get_error_details();
                    let reason = details
                        .error_info()
                        .map_or("UNSPECIFIED", |info| info.reason.as_str());
                    metrics.rejection(method, &code, reason);
                }
                _ => metrics.request(method, "Ok"),
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_services_methods_get_a_label_of_their_own() {
        assert_eq!(method_label(Method::SubmitRender.path()), "SubmitRender");
        assert_eq!(method_label("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(
            method_label("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            "ServerReflectionInfo"
        );
        for path in [
            "/lottie.render.v1.RenderService/NoSuchMethod",
            "/lottie.render.v1.RenderService/SubmitRender/x",
            "/grpc.health.v1.Health/SubmitRender",
            "/evil/GetTemplate",
            "/",
        ] {
            assert_eq!(method_label(path), "unknown", "{path}");
        }
    }
}
