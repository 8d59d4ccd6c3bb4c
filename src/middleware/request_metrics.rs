//! `RequestMetricsLayer`: counts every answered call by method and gRPC status code, and
//! every error by its ErrorInfo reason (rejections by reason), as the caller sees them:
//! it sits outermost, so refusals by the layers inside it are counted too. Errors travel as
//! trailers-only answers (status in the headers); an answer without a status in its headers
//! is a success whose status follows in the trailers.

use super::BoxFuture;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;
use tonic_types::StatusExt;
use tower::{Layer, Service};

#[derive(Debug, Clone)]
pub struct RequestMetricsLayer {
    metrics: Arc<Metrics>,
}

impl RequestMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> RequestMetricsLayer {
        RequestMetricsLayer { metrics }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, RequestBody, ResponseBody> Service<http::Request<RequestBody>> for RequestMetrics<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    RequestBody: Send + 'static,
    ResponseBody: Send + 'static,
{
    type Response = http::Response<ResponseBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        // "/package.Service/Method" → "Method"; anything else is counted as it came.
        let path = request.uri().path();
        let method = path.rsplit('/').next().unwrap_or(path).to_owned();
        let metrics = self.metrics.clone();
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let response = inner.call(request).await?;
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
