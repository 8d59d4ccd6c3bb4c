//! `IdentityLayer`: resolves each request's [`Caller`] once, from its headers and
//! connection, and puts it on the request's extensions for the handlers; a call that must
//! say who it is and does not is answered UNAUTHENTICATED (pushback -1) from its headers,
//! before its body is received or anything is counted for it.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::auth::{Caller, Identities};
use http::Request;
use std::sync::Arc;
use tonic::Status;

/// Resolves each call's caller with its identities.
#[derive(Debug, Clone)]
pub struct Identity {
    identities: Arc<Identities>,
}

pub(crate) type IdentityLayer = AroundLayer<Identity>;

impl IdentityLayer {
    pub(crate) fn new(identities: Arc<Identities>) -> IdentityLayer {
        AroundLayer(Identity { identities })
    }
}

impl<B, R: Default + Send + 'static> AroundCall<B, R> for Identity {
    fn around<S: Next<B, R>>(&self, mut call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let resolved =
            self.identities
                .resolve(call.uri().path(), call.headers(), call.extensions());
        match resolved {
            Ok(caller) => {
                call.extensions_mut().insert::<Caller>(caller);
            }
            Err(refusal) => {
                return super::refuse(Status::from(refusal));
            }
        }
        Box::pin(next.call(call))
    }
}
