//! `RequestMetricsLayer`: counts every answered call by method and gRPC status code, every
//! error by its ErrorInfo reason (rejections by reason), and times every call by method (to
//! its answer's headers: a unary call's whole handling, a stream's start; a Watch stream's
//! life is not latency), as the caller sees them:
//! it sits outermost, so refusals by the layers inside it are counted too. Errors travel as
//! trailers-only answers (status in the headers); an answer without a status in its headers
//! is a success whose status follows in the trailers.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::metrics::Metrics;
use http::Request;
use std::sync::Arc;
use tonic::Status;
use tonic_types::StatusExt;

/// Services whose methods are counted by name: the contract's, health and reflection.
const KNOWN_SERVICES: [&str; 5] = [
    "/lottie.render.v1.TemplateService/",
    "/lottie.render.v1.RenderService/",
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];
/// Label of every other path: callers choose paths, and a label per path would let them grow
/// the registry without bound.
const UNKNOWN_METHOD: &str = "unknown";
/// Their methods.
const KNOWN_METHODS: [&str; 15] = [
    "CreateTemplate",
    "GetTemplate",
    "ListTemplates",
    "DeleteTemplate",
    "UploadImage",
    "DeleteImage",
    "SubmitRender",
    "GetRenderJob",
    "WatchRenderJob",
    "CancelRenderJob",
    "DownloadRenderOutput",
    "Check",
    "Watch",
    "List",
    "ServerReflectionInfo",
];

/// "/package.Service/Method" → "Method" for the known services, else "unknown".
fn method_label(path: &str) -> String {
    KNOWN_SERVICES
        .iter()
        .find_map(|service| path.strip_prefix(service))
        .filter(|method| KNOWN_METHODS.contains(method))
        .unwrap_or(UNKNOWN_METHOD)
        .to_owned()
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
            metrics.request_duration(&method, started.elapsed());
            match Status::from_header_map(response.headers()) {
                Some(status) if status.code() != tonic::Code::Ok => {
                    metrics.request(&method, &format!("{:?}", status.code()));
                    let details = status.get_error_details();
                    let reason = details
                        .error_info()
                        .map_or("UNSPECIFIED", |info| info.reason.as_str());
                    metrics.rejection(reason);
                }
                _ => metrics.request(&method, "Ok"),
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::method_label;

    #[test]
    fn only_the_services_methods_get_a_label_of_their_own() {
        assert_eq!(
            method_label("/lottie.render.v1.RenderService/SubmitRender"),
            "SubmitRender"
        );
        assert_eq!(method_label("/grpc.health.v1.Health/Check"), "Check");
        for path in [
            "/lottie.render.v1.RenderService/NoSuchMethod",
            "/lottie.render.v1.RenderService/SubmitRender/x",
            "/evil/GetTemplate",
            "/",
        ] {
            assert_eq!(method_label(path), "unknown", "{path}");
        }
    }
}
