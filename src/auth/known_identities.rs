//! The identities file (`--identities FILE`): one line per certificate or sidecar identity,
//! `TENANT IDENTITY`, where IDENTITY is what the peer certificate or the mesh sidecar says:
//! a SPIFFE id (`spiffe://cluster.local/ns/web/sa/billing`), a certificate's subject CN, or
//! a Linkerd identity name. An identity that is not in the file is not known: it gets no
//! tenant (never the default one).

use super::caller::{TenantId, TenantIdError};
use std::collections::HashMap;

/// Longest identity: SPIFFE ids are at most 2048 bytes; a CN at most 64 characters.
pub const MAX_IDENTITY_BYTES: usize = 2048;

/// The parsed identities file: identity → tenant.
#[derive(Debug, Clone, Default)]
pub struct KnownIdentities {
    tenants: HashMap<String, TenantId>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KnownIdentitiesError {
    #[error("line {line}: expected `TENANT IDENTITY`")]
    Shape { line: usize },
    #[error("line {line}: {source}")]
    Tenant { line: usize, source: TenantIdError },
    #[error("line {line}: an identity is at most {MAX_IDENTITY_BYTES} bytes")]
    Identity { line: usize },
    #[error("line {line}: this identity is on line {first} already")]
    Duplicate { line: usize, first: usize },
}

impl KnownIdentities {
    /// Parses the file's text: blank lines and lines starting with `#` are skipped. The
    /// identity is the rest of the line after the tenant (a CN may hold spaces), trimmed.
    pub fn parse(text: &str) -> Result<KnownIdentities, KnownIdentitiesError> {
        let mut tenants = HashMap::new();
        let mut lines_of: HashMap<String, usize> = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let Some((tenant, identity)) = trimmed.split_once(char::is_whitespace) else {
                return Err(KnownIdentitiesError::Shape { line });
            };
            let identity = identity.trim();
            let tenant = TenantId::parse_configured(tenant)
                .map_err(|source| KnownIdentitiesError::Tenant { line, source })?;
            if identity.len() > MAX_IDENTITY_BYTES {
                return Err(KnownIdentitiesError::Identity { line });
            }
            if let Some(first) = lines_of.insert(identity.to_owned(), line) {
                return Err(KnownIdentitiesError::Duplicate { line, first });
            }
            tenants.insert(identity.to_owned(), tenant);
        }
        Ok(KnownIdentities { tenants })
    }

    pub(crate) fn len(&self) -> usize {
        self.tenants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }

    /// The tenant of an identity, if the file names it (exact match).
    pub(crate) fn tenant_of(&self, identity: &str) -> Option<TenantId> {
        self.tenants.get(identity).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_identity_names_its_tenant_and_no_other_does() {
        let identities = KnownIdentities::parse(
            "# tenant identity\n\
             acme spiffe://cluster.local/ns/acme/sa/billing\n\
             \n\
             globex   Globex Reports Client  \n\
             globex web.globex.serviceaccount.identity.linkerd.cluster.local\n",
        )
        .unwrap();
        assert_eq!(identities.len(), 3);
        for (identity, tenant) in [
            ("spiffe://cluster.local/ns/acme/sa/billing", Some("acme")),
            ("Globex Reports Client", Some("globex")),
            (
                "web.globex.serviceaccount.identity.linkerd.cluster.local",
                Some("globex"),
            ),
            ("spiffe://cluster.local/ns/acme/sa/billing/", None),
            ("SPIFFE://cluster.local/ns/acme/sa/billing", None),
            ("globex", None),
            ("", None),
        ] {
            assert_eq!(
                identities
                    .tenant_of(identity)
                    .as_ref()
                    .map(TenantId::as_str),
                tenant,
                "{identity:?}"
            );
        }
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number() {
        for (text, error) in [
            ("acme".to_string(), KnownIdentitiesError::Shape { line: 1 }),
            (
                "\na/b spiffe://x/y".to_string(),
                KnownIdentitiesError::Tenant {
                    line: 2,
                    source: TenantIdError::Characters,
                },
            ),
            (
                "default spiffe://x/y".to_string(),
                KnownIdentitiesError::Tenant {
                    line: 1,
                    source: TenantIdError::Reserved,
                },
            ),
            (
                format!("acme {}", "x".repeat(MAX_IDENTITY_BYTES + 1)),
                KnownIdentitiesError::Identity { line: 1 },
            ),
            (
                "acme spiffe://x/y\nglobex spiffe://x/y".to_string(),
                KnownIdentitiesError::Duplicate { line: 2, first: 1 },
            ),
        ] {
            assert_eq!(
                KnownIdentities::parse(&text).unwrap_err(),
                error,
                "{text:?}"
            );
        }
    }
}
