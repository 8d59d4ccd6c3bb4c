//! `IdentityLayer`: resolves each request's [`Caller`] once, from its headers and
//! connection, and puts it on the request's extensions for the handlers; a call that must
//! say who it is and does not is answered UNAUTHENTICATED (pushback -1) from its headers,
//! before its body is received or anything is counted for it.

use super::BoxFuture;
use crate::auth::{Caller, Identities};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;
use tower::{Layer, Service};

#[derive(Debug, Clone)]
pub struct IdentityLayer {
    identities: Arc<Identities>,
}

impl IdentityLayer {
    pub fn new(identities: Arc<Identities>) -> IdentityLayer {
        IdentityLayer { identities }
    }
}

impl<S> Layer<S> for IdentityLayer {
    type Service = Identity<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Identity {
            inner,
            identities: self.identities.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Identity<S> {
    inner: S,
    identities: Arc<Identities>,
}

impl<S, RequestBody, ResponseBody> Service<http::Request<RequestBody>> for Identity<S>
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

    fn call(&mut self, mut request: http::Request<RequestBody>) -> Self::Future {
        let resolved = self.identities.resolve(
            request.uri().path(),
            request.headers(),
            request.extensions(),
        );
        match resolved {
            Ok(caller) => {
                request.extensions_mut().insert::<Caller>(caller);
            }
            Err(refusal) => {
                return super::refuse(Status::from(refusal));
            }
        }
        let mut inner = super::take_ready(&mut self.inner);
        Box::pin(inner.call(request))
    }
}
