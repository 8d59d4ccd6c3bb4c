//! The caller of one request and its tenant. A caller belongs to exactly one tenant (the
//! mapping is configuration); with authentication off every call is the anonymous caller of
//! the default tenant, so the embedded default behaves as one tenant.

use std::fmt;
use std::sync::Arc;

/// Longest tenant name: tenant names become parts of Redis keys and storage paths, so they
/// stay short and plain.
pub(crate) const MAX_TENANT_ID_BYTES: usize = 64;

/// The tenant every call belongs to when authentication is off (and an unauthenticated
/// call's tenant under `--auth optional`).
pub(crate) const DEFAULT_TENANT: &str = "default";

/// A tenant name: 1 to [`MAX_TENANT_ID_BYTES`] bytes of ASCII letters, digits, `.`, `_` and
/// `-` (safe as a path segment and inside a Redis key, never `.` or `..`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    #[error("a tenant name is 1 to {MAX_TENANT_ID_BYTES} bytes")]
    Length,
    #[error(
        "a tenant name has only ASCII letters, digits, '.', '_' and '-', and is not '.' or '..'"
    )]
    Characters,
    #[error(
        "the tenant name '{DEFAULT_TENANT}' is the anonymous callers' own; a named identity \
         under it would share their templates and jobs (with --auth optional) — name the \
         tenant otherwise"
    )]
    Reserved,
}

impl TenantId {
    pub(crate) fn parse(name: &str) -> Result<TenantId, TenantIdError> {
        if name.is_empty() || name.len() > MAX_TENANT_ID_BYTES {
            return Err(TenantIdError::Length);
        }
        let plain = name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
        if !plain || name == "." || name == ".." {
            return Err(TenantIdError::Characters);
        }
        Ok(TenantId(Arc::from(name)))
    }

    /// A tenant of the API keys or identities files: a tenant name that is not the anonymous
    /// callers' [`DEFAULT_TENANT`] (under `--auth optional` both would be one tenant, so a key
    /// holder would see what anyone without a key stored, and the other way round).
    pub(crate) fn parse_configured(name: &str) -> Result<TenantId, TenantIdError> {
        let tenant = TenantId::parse(name)?;
        if tenant.is_default() {
            return Err(TenantIdError::Reserved);
        }
        Ok(tenant)
    }

    /// The tenant of every call when authentication is off.
    pub fn default_tenant() -> TenantId {
        TenantId(Arc::from(DEFAULT_TENANT))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_default(&self) -> bool {
        &*self.0 == DEFAULT_TENANT
    }
}

/// Stored as its name (job records, template records); a stored name that is not a tenant
/// name is a damaged record, refused like any other.
impl serde::Serialize for TenantId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for TenantId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TenantId, D::Error> {
        let name = String::deserialize(deserializer)?;
        TenantId::parse(&name).map_err(serde::de::Error::custom)
    }
}

/// Records written before tenants existed belong to the default tenant.
impl Default for TenantId {
    fn default() -> TenantId {
        TenantId::default_tenant()
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// Where a caller's identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// No identity was presented (authentication off, or optional and none given).
    Anonymous,
    /// The mTLS peer certificate (SPIFFE URI SAN, else subject CN).
    PeerCertificate,
    /// A trusted sidecar's header (`x-forwarded-client-cert`, `l5d-client-id`).
    Sidecar,
    /// `authorization: Bearer KEY`.
    ApiKey,
}

/// The caller of one request, resolved once by the identity layer and carried to the
/// handlers as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: TenantId,
    /// The caller's name within its tenant (a SPIFFE id, a CN, an API key's caller name);
    /// `anonymous` when none.
    pub name: Arc<str>,
    pub source: IdentitySource,
}

impl Caller {
    /// The caller of every request when authentication is off.
    pub(crate) fn anonymous() -> Caller {
        Caller {
            tenant: TenantId::default_tenant(),
            name: Arc::from("anonymous"),
            source: IdentitySource::Anonymous,
        }
    }

    /// The caller the identity layer put on `extensions`; the anonymous caller of the
    /// default tenant when there is none (a service used without the identity layer, as in
    /// some tests: the layer refuses unauthenticated calls before they get here when
    /// authentication is required).
    pub fn of(extensions: &http::Extensions) -> Caller {
        extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(Caller::anonymous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_plain_and_short() {
        for good in [
            "default",
            "acme",
            "team-a.prod_1",
            &"x".repeat(MAX_TENANT_ID_BYTES),
        ] {
            assert_eq!(
                TenantId::parse(good).map(|t| t.to_string()),
                Ok(good.to_string())
            );
        }
        for (bad, error) in [
            ("", TenantIdError::Length),
            (&*"x".repeat(MAX_TENANT_ID_BYTES + 1), TenantIdError::Length),
            (".", TenantIdError::Characters),
            ("..", TenantIdError::Characters),
            ("a/b", TenantIdError::Characters),
            ("a:b", TenantIdError::Characters),
            ("ünï", TenantIdError::Characters),
            ("a b", TenantIdError::Characters),
        ] {
            assert_eq!(TenantId::parse(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn a_request_without_a_caller_is_the_anonymous_caller_of_the_default_tenant() {
        let caller = Caller::of(&http::Extensions::new());
        assert!(caller.tenant.is_default());
        assert_eq!(caller.source, IdentitySource::Anonymous);
        let mut extensions = http::Extensions::new();
        let acme = Caller {
            tenant: TenantId::parse("acme").unwrap(),
            name: Arc::from("spiffe://acme/billing"),
            source: IdentitySource::ApiKey,
        };
        extensions.insert(acme.clone());
        assert_eq!(Caller::of(&extensions), acme);
    }
}
