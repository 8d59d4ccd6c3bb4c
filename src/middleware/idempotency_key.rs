//! `IdempotencyKeyLayer`: a call to a method whose key is required (SubmitRender) without a
//! well-formed `idempotency-key`, or to one whose key is optional (CreateTemplate) with a
//! malformed one, is answered INVALID_ARGUMENT (reason IDEMPOTENCY_KEY_MISSING or _INVALID,
//! pushback -1) straight from the HTTP/2 headers, before the body is read or decoded. Each
//! method's rule is its row's ([`crate::grpc::methods::KeyRule`]). A valid key travels on to the handler as a
//! request extension ([`IdempotencyKey`]), which claims it in the key store once the request
//! is validated (`crate::idempotency::once`).

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::grpc::methods::{KeyRule, Method};
use crate::idempotency::key::{IdempotencyKey, IDEMPOTENCY_KEY_HEADER};
use http::Request;
use tonic::Status;

/// Checks the key of the methods that take one.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyKeyCheck;

pub(crate) type IdempotencyKeyLayer = AroundLayer<IdempotencyKeyCheck>;

impl<B, R: Default + Send + 'static> AroundCall<B, R> for IdempotencyKeyCheck {
    fn around<S: Next<B, R>>(&self, mut call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let rule = Method::of(call.uri().path()).map_or(KeyRule::Ignored, Method::key);
        let header = call
            .headers()
            .get(IDEMPOTENCY_KEY_HEADER)
            .map(|value| value.as_bytes());
        let checked = match rule {
            KeyRule::Required => true,
            KeyRule::Optional => header.is_some(),
            KeyRule::Ignored => false,
        };
        if checked {
            match IdempotencyKey::from_header(header) {
                Ok(key) => {
                    call.extensions_mut().insert(key);
                }
                Err(refusal) => {
                    return super::refuse(Status::from(refusal));
                }
            }
        }
        Box::pin(next.call(call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::status::PUSHBACK_HEADER;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tower::{Layer, Service, ServiceExt};

    /// An inner service that counts calls and echoes the key it was handed.
    fn inner(
        calls: Arc<AtomicUsize>,
    ) -> impl Service<
        http::Request<()>,
        Response = http::Response<String>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
           + Send {
        tower::service_fn(move |request: http::Request<()>| {
            calls.fetch_add(1, Ordering::SeqCst);
            let key = request
                .extensions()
                .get::<IdempotencyKey>()
                .map(|key| key.as_str().to_owned())
                .unwrap_or_default();
            async move { Ok::<_, Infallible>(http::Response::new(key)) }
        })
    }

    fn request(path: &str, key: Option<&str>) -> http::Request<()> {
        let mut builder = http::Request::builder().uri(format!("http://localhost{path}"));
        if let Some(key) = key {
            builder = builder.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        builder.body(()).unwrap()
    }

    fn header<'a>(response: &'a http::Response<String>, name: &str) -> Option<&'a str> {
        response.headers().get(name).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn submit_render_without_a_key_is_refused_before_the_handler_runs() {
        for (key, reason) in [
            (None, "IDEMPOTENCY_KEY_MISSING"),
            (Some("two words"), "IDEMPOTENCY_KEY_INVALID"),
        ] {
            let calls = Arc::new(AtomicUsize::new(0));
            let service = IdempotencyKeyLayer::default().layer(inner(calls.clone()));
            let response = service
                .oneshot(request(Method::SubmitRender.path(), key))
                .await
                .unwrap();
            assert_eq!(
                calls.load(Ordering::SeqCst),
                0,
                "{key:?} reached the handler"
            );
            assert_eq!(
                header(&response, "grpc-status"),
                Some("3"),
                "INVALID_ARGUMENT"
            );
            assert_eq!(header(&response, PUSHBACK_HEADER), Some("-1"));
            let status = Status::from_header_map(response.headers()).unwrap();
            use tonic_types::StatusExt;
            assert_eq!(
                status.get_error_details().error_info().unwrap().reason,
                reason
            );
        }
    }

    #[tokio::test]
    async fn a_valid_key_reaches_the_handler_and_other_methods_need_none() {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = IdempotencyKeyLayer::default().layer(inner(calls.clone()));
        let response = service
            .clone()
            .oneshot(request(Method::SubmitRender.path(), Some("order-42")))
            .await
            .unwrap();
        assert_eq!(response.body(), "order-42");
        let response = service
            .oneshot(request(Method::GetRenderJob.path(), None))
            .await
            .unwrap();
        assert_eq!(response.body(), "");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_optional_key_is_checked_only_when_given() {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = IdempotencyKeyLayer::default().layer(inner(calls.clone()));
        let create = Method::CreateTemplate.path();
        let response = service
            .clone()
            .oneshot(request(create, None))
            .await
            .unwrap();
        assert_eq!(header(&response, "grpc-status"), None);
        let response = service
            .clone()
            .oneshot(request(create, Some("t-1")))
            .await
            .unwrap();
        assert_eq!(response.body(), "t-1");
        let response = service
            .oneshot(request(create, Some("two words")))
            .await
            .unwrap();
        assert_eq!(header(&response, "grpc-status"), Some("3"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
