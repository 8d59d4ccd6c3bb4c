//! `RequestSizeLayer`: a request message above the size limit is the caller's mistake, so it
//! is answered INVALID_ARGUMENT (reason REQUEST_TOO_LARGE, pushback -1) like every other bad
//! input. tonic enforces the limit itself while reading the body, before any of our code sees
//! the message (so an oversized body is never buffered), but answers OUT_OF_RANGE without
//! details; this layer rewrites exactly that answer. No handler of ours answers OUT_OF_RANGE.

use super::BoxFuture;
use crate::error::{FieldViolation, ServiceError};
use std::task::{Context, Poll};
use tonic::{Code, Status};
use tower::{Layer, Service};

/// How tonic's decoder words a message above `max_decoding_message_size`.
const TONIC_TOO_LARGE_PREFIX: &str = "Error, decoded message length too large";

#[derive(Debug, Clone, Default)]
pub struct RequestSizeLayer;

impl<S> Layer<S> for RequestSizeLayer {
    type Service = RequestSize<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestSize { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RequestSize<S> {
    inner: S,
}

/// The service's answer for an oversized request, when `response` is tonic's.
fn rewrite<ResponseBody: Default>(
    response: http::Response<ResponseBody>,
) -> http::Response<ResponseBody> {
    match Status::from_header_map(response.headers()) {
        Some(status)
            if status.code() == Code::OutOfRange
                && status.message().starts_with(TONIC_TOO_LARGE_PREFIX) =>
        {
            let description = format!(
                "the request is larger than this method accepts ({})",
                status.message()
            );
            Status::from(ServiceError::invalid_argument(
                "REQUEST_TOO_LARGE",
                description.clone(),
                vec![FieldViolation {
                    field: "(request)".into(),
                    description,
                }],
            ))
            .into_http()
        }
        _ => response,
    }
}

impl<S, RequestBody, ResponseBody> Service<http::Request<RequestBody>> for RequestSize<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    RequestBody: Send + 'static,
    ResponseBody: Default + Send + 'static,
{
    type Response = http::Response<ResponseBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(request).await.map(rewrite) })
    }
}
