//! `CatchPanicLayer`: a panic while a handler builds its answer becomes INTERNAL (generic
//! message, the panic logged) instead of a reset stream, and the server keeps serving. A
//! panic is always a bug of ours, so it never says anything about the caller's input.
//! (tower-http's CatchPanic answers HTTP 500, which gRPC clients read as UNKNOWN; this one
//! answers a gRPC status with ErrorInfo like every other error.)

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::error::ServiceError;
use futures_util::FutureExt;
use http::Request;
use std::panic::AssertUnwindSafe;
use tonic::Status;

/// Catches the panics of the services inside it.
#[derive(Debug, Clone, Default)]
pub struct CatchPanic;

pub(crate) type CatchPanicLayer = AroundLayer<CatchPanic>;

fn panic_response<ResponseBody: Default>(
    path: &str,
    panic: Box<dyn std::any::Any + Send>,
) -> http::Response<ResponseBody> {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    Status::from(ServiceError::internal(format!(
        "panic while handling {path}: {message}"
    )))
    .into_http()
}

impl<B, R: Default + Send + 'static> AroundCall<B, R> for CatchPanic {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let path = call.uri().path().to_owned();
        let future = match std::panic::catch_unwind(AssertUnwindSafe(|| next.call(call))) {
            Ok(future) => future,
            Err(panic) => {
                let response = panic_response(&path, panic);
                return Box::pin(async move { Ok(response) });
            }
        };
        Box::pin(async move {
            match AssertUnwindSafe(future).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => Ok(panic_response(&path, panic)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::middleware::BoxFuture;
    use std::convert::Infallible;
    use tower::{service_fn, Layer, ServiceExt};

    /// Answers "/ok"; panics at any other path, before its future or (`in_future`) inside it.
    fn panicking(
        in_future: bool,
        request: http::Request<()>,
    ) -> BoxFuture<Result<http::Response<String>, Infallible>> {
        if request.uri().path() == "/ok" {
            return Box::pin(async { Ok(http::Response::new("fine".to_owned())) });
        }
        if !in_future {
            panic!("bug before the future");
        }
        Box::pin(async { panic!("bug inside the future") })
    }

    fn status_of(response: &http::Response<String>) -> Option<Status> {
        Status::from_header_map(response.headers())
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_internal_and_the_service_keeps_serving() {
        for in_future in [false, true] {
            let service = CatchPanicLayer::default()
                .layer(service_fn(move |request| panicking(in_future, request)));
            let request = http::Request::builder().uri("/boom").body(()).unwrap();
            let response = service.clone().oneshot(request).await.unwrap();
            let status = status_of(&response).expect("a gRPC status");
            assert_eq!(status.code(), tonic::Code::Internal);
            assert!(!status.message().contains("bug"), "{}", status.message());
            let request = http::Request::builder().uri("/ok").body(()).unwrap();
            let response = service.oneshot(request).await.unwrap();
            assert_eq!(response.body(), "fine");
        }
    }
}
