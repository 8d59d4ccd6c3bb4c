//! How a request's [`Caller`] is resolved: the authentication mode and the identity
//! configuration (API keys, certificate and sidecar identities), replaceable at run time
//! when its files change.
//!
//! Sources, in order; the first one the request presents decides, and an identity it
//! presents that is not known is refused (never silently the default tenant):
//! 1. the mTLS peer certificate (SPIFFE id, else subject CN), when `--identities` is set;
//! 2. the trusted sidecar's header, only under `--trust-sidecar-identity`, and only that
//!    mesh's (`x-forwarded-client-cert` for `envoy`, `l5d-client-id` for `linkerd`);
//! 3. an API key (`authorization: Bearer KEY`).

use super::api_keys::{ApiKeys, MAX_API_KEY_BYTES};
use super::caller::{Caller, IdentitySource};
use super::known_identities::KnownIdentities;
use super::peer_certificate;
use super::sidecar::{self, TrustedSidecar};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::reason::Reason;
use std::sync::{Arc, RwLock};

/// Whether calls must say who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AuthMode {
    /// Every call is the anonymous caller of the default tenant (the embedded default).
    #[default]
    Off,
    /// A call with a known identity is its tenant's; a call with none is the default
    /// tenant's anonymous caller; a credential that is not known is refused.
    Optional,
    /// A call without a known identity is refused UNAUTHENTICATED before its body is read.
    Required,
}

/// Calls that never need an identity: health checks (Kubernetes' gRPC probes and the mesh
/// send no credential) and reflection (the schema is public; grpcurl needs it to build a
/// request at all).
pub(crate) const OPEN_PATH_PREFIXES: [&str; 3] = [
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// The identity configuration of a running server.
#[derive(Debug)]
pub struct Identities {
    mode: AuthMode,
    api_keys: RwLock<Arc<ApiKeys>>,
    /// Certificate and sidecar identities (`--identities`); none: peer certificates name
    /// no one (mTLS is then transport security only).
    known: Option<RwLock<Arc<KnownIdentities>>>,
    /// `--trust-sidecar-identity`: the mesh whose sidecar's header is read (none: no
    /// sidecar header is).
    trust_sidecar: Option<TrustedSidecar>,
}

impl Identities {
    pub fn new(mode: AuthMode, api_keys: ApiKeys) -> Identities {
        Identities {
            mode,
            api_keys: RwLock::new(Arc::new(api_keys)),
            known: None,
            trust_sidecar: None,
        }
    }

    /// With the certificate and sidecar identities of `--identities`.
    pub fn with_known_identities(mut self, known: KnownIdentities) -> Identities {
        self.known = Some(RwLock::new(Arc::new(known)));
        self
    }

    /// Believing this mesh sidecar's identity header (`--trust-sidecar-identity`).
    pub fn trusting_sidecar_identity(mut self, trust: Option<TrustedSidecar>) -> Identities {
        self.trust_sidecar = trust;
        self
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Replaces the API keys (the file changed); calls in flight keep the keys they had.
    pub(crate) fn replace_api_keys(&self, api_keys: ApiKeys) {
        // A poisoned lock only means a panic elsewhere while it was held; the Arc inside is
        // whole either way.
        *self
            .api_keys
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(api_keys);
    }

    /// Replaces the certificate and sidecar identities (the file changed); does nothing
    /// when the server has no identities file.
    pub(crate) fn replace_known_identities(&self, known: KnownIdentities) {
        if let Some(lock) = &self.known {
            *lock
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(known);
        }
    }

    /// The tenant of a certificate or sidecar identity, or why it has none.
    fn known_caller(
        &self,
        identity: String,
        source: IdentitySource,
    ) -> Result<Caller, ServiceError> {
        let tenant = self.known.as_ref().and_then(|lock| {
            lock.read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .tenant_of(&identity)
        });
        match tenant {
            Some(tenant) => Ok(Caller {
                tenant,
                name: Arc::from(identity),
                source,
            }),
            None => Err(unauthenticated(&format!(
                "the identity {identity:?} is not in this server's identities file"
            ))),
        }
    }

    fn api_keys(&self) -> Arc<ApiKeys> {
        self.api_keys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The caller of a request with these headers and extensions, or why it is refused.
    pub(crate) fn resolve(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Caller, ServiceError> {
        if self.mode == AuthMode::Off
            || OPEN_PATH_PREFIXES
                .iter()
                .any(|prefix| path.starts_with(prefix))
        {
            return Ok(Caller::anonymous());
        }
        if self.known.is_some() {
            if let Some(identity) = peer_certificate::peer_identity(extensions) {
                let identity = identity.map_err(|error| unauthenticated(&error.to_string()))?;
                return self.known_caller(identity, IdentitySource::PeerCertificate);
            }
        }
        if let Some(sidecar) = self.trust_sidecar {
            if let Some(identity) = sidecar::sidecar_identity(headers, sidecar) {
                let identity = identity.map_err(|error| unauthenticated(&error.to_string()))?;
                return self.known_caller(identity, IdentitySource::Sidecar);
            }
        }
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            let key = bearer_token(value.as_bytes())
                .ok_or_else(|| unauthenticated("the authorization header is not `Bearer KEY`"))?;
            let (tenant, name) = self
                .api_keys()
                .find(key)
                .ok_or_else(|| unauthenticated("the API key is not known"))?;
            return Ok(Caller {
                tenant,
                name,
                source: IdentitySource::ApiKey,
            });
        }
        match self.mode {
            AuthMode::Required => Err(unauthenticated(
                "this server requires an identity: a client certificate, a mesh sidecar's \
                 identity or an API key (authorization: Bearer KEY)",
            )),
            AuthMode::Off | AuthMode::Optional => Ok(Caller::anonymous()),
        }
    }
}

/// The KEY of `Bearer KEY` (scheme case-insensitive, RFC 7235).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let key = rest.trim_ascii();
    (!key.is_empty() && key.len() <= MAX_API_KEY_BYTES).then_some(key)
}

fn unauthenticated(message: &str) -> ServiceError {
    ServiceError::deterministic(
        ServiceErrorCode::Unauthenticated,
        Reason::Unauthenticated,
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::api_keys::sha256_hex;

    fn identities(mode: AuthMode) -> Identities {
        let keys = ApiKeys::parse(&format!("acme billing {}", sha256_hex("acme-key"))).unwrap();
        Identities::new(mode, keys)
    }

    fn headers(authorization: Option<&str>) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    const SUBMIT: &str = crate::grpc::methods::Method::SubmitRender.path();

    #[test]
    fn each_mode_resolves_or_refuses_as_documented() {
        let none = http::Extensions::new();
        for (mode, authorization, path, expected) in [
            (AuthMode::Off, None, SUBMIT, Some("default")),
            (AuthMode::Off, Some("Bearer wrong"), SUBMIT, Some("default")),
            (AuthMode::Optional, None, SUBMIT, Some("default")),
            (
                AuthMode::Optional,
                Some("Bearer acme-key"),
                SUBMIT,
                Some("acme"),
            ),
            (
                AuthMode::Optional,
                Some("bearer  acme-key "),
                SUBMIT,
                Some("acme"),
            ),
            (AuthMode::Optional, Some("Bearer wrong"), SUBMIT, None),
            (AuthMode::Optional, Some("Basic YWNtZQ=="), SUBMIT, None),
            (AuthMode::Required, None, SUBMIT, None),
            (AuthMode::Required, Some("Bearer "), SUBMIT, None),
            (
                AuthMode::Required,
                Some("Bearer acme-key"),
                SUBMIT,
                Some("acme"),
            ),
            (
                AuthMode::Required,
                None,
                "/grpc.health.v1.Health/Check",
                Some("default"),
            ),
        ] {
            let resolved = identities(mode).resolve(path, &headers(authorization), &none);
            match expected {
                Some(tenant) => assert_eq!(
                    resolved.map(|caller| caller.tenant.to_string()),
                    Ok(tenant.to_string()),
                    "{mode:?} {authorization:?}"
                ),
                None => assert_eq!(
                    resolved.map_err(|error| (error.code, error.reason)),
                    Err((ServiceErrorCode::Unauthenticated, Reason::Unauthenticated)),
                    "{mode:?} {authorization:?}"
                ),
            }
        }
    }

    #[test]
    fn replaced_keys_apply_to_the_next_call() {
        let identities = identities(AuthMode::Required);
        let none = http::Extensions::new();
        let new_key = headers(Some("Bearer new-key"));
        assert!(identities.resolve(SUBMIT, &new_key, &none).is_err());
        identities.replace_api_keys(
            ApiKeys::parse(&format!("globex ops {}", sha256_hex("new-key"))).unwrap(),
        );
        let caller = identities.resolve(SUBMIT, &new_key, &none).unwrap();
        assert_eq!(caller.tenant.as_str(), "globex");
        let old_key = headers(Some("Bearer acme-key"));
        assert!(identities.resolve(SUBMIT, &old_key, &none).is_err());
    }
}
