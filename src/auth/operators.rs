//! Who operates the service: the identities `--operators` names, who may read what the
//! whole instance is doing (GetServiceStatus: its queue, workers, every tenant's refusals),
//! which no tenant sees of another otherwise. With authentication off there is one anonymous
//! caller and it is everyone, so it is an operator too.

use super::{AuthMode, Caller, TenantId};

/// The caller part of an operator pattern that means every caller of its tenant.
const EVERY_CALLER: &str = "*";
/// Longest caller name a pattern names (a SPIFFE id or a certificate's CN is well under).
const MAX_OPERATOR_CALLER_BYTES: usize = 512;

/// One entry of `--operators`: `TENANT/CALLER` (that caller, as its API key, certificate
/// or sidecar names it) or `TENANT/*` (every caller of the tenant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorPattern {
    tenant: TenantId,
    /// `None`: every caller of the tenant.
    caller: Option<String>,
}

impl std::str::FromStr for OperatorPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<OperatorPattern, String> {
        let text = text.trim();
        let Some((tenant, caller)) = text.split_once('/') else {
            return Err(format!(
                "{text:?} is not TENANT/CALLER or TENANT/* (a slash between them)"
            ));
        };
        let tenant = TenantId::parse(tenant).map_err(|error| format!("{text:?}: {error}"))?;
        if caller.is_empty() || caller.len() > MAX_OPERATOR_CALLER_BYTES {
            return Err(format!(
                "{text:?}: the caller is 1 to {MAX_OPERATOR_CALLER_BYTES} bytes, or * for all"
            ));
        }
        let caller = (caller != EVERY_CALLER).then(|| caller.to_owned());
        Ok(OperatorPattern { tenant, caller })
    }
}

impl OperatorPattern {
    fn includes(&self, caller: &Caller) -> bool {
        caller.tenant == self.tenant
            && self
                .caller
                .as_deref()
                .is_none_or(|name| name == &*caller.name)
    }
}

/// The operators in force: everyone when authentication is off, else the patterns given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators {
    everyone: bool,
    patterns: Vec<OperatorPattern>,
}

impl Operators {
    /// The operators of `mode` with `--operators` `patterns`.
    pub fn new(mode: AuthMode, patterns: Vec<OperatorPattern>) -> Operators {
        Operators {
            everyone: mode == AuthMode::Off,
            patterns,
        }
    }

    /// Whether `caller` is an operator.
    pub fn includes(&self, caller: &Caller) -> bool {
        self.everyone || self.patterns.iter().any(|pattern| pattern.includes(caller))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::IdentitySource;
    use std::sync::Arc;

    fn caller(tenant: &str, name: &str) -> Caller {
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            name: Arc::from(name),
            source: IdentitySource::ApiKey,
        }
    }

    #[test]
    fn operators_are_the_named_callers_and_tenants_or_everyone_without_authentication() {
        let patterns: Vec<OperatorPattern> = ["ops/alice", "infra/*", "mesh/spiffe://c/ns/a/sa/b"]
            .iter()
            .map(|text| text.parse().unwrap())
            .collect();
        let operators = Operators::new(AuthMode::Required, patterns.clone());
        for (tenant, name, expected) in [
            ("ops", "alice", true),
            ("ops", "bob", false),
            ("infra", "anyone", true),
            ("mesh", "spiffe://c/ns/a/sa/b", true),
            ("acme", "alice", false),
        ] {
            assert_eq!(
                operators.includes(&caller(tenant, name)),
                expected,
                "{tenant}/{name}"
            );
        }
        assert!(Operators::new(AuthMode::Off, Vec::new()).includes(&Caller::anonymous()));
        assert!(!Operators::new(AuthMode::Optional, Vec::new()).includes(&Caller::anonymous()));
        assert!(!Operators::default().includes(&caller("ops", "alice")));
    }

    #[test]
    fn patterns_that_name_no_identity_are_refused() {
        for bad in [
            "ops",
            "/alice",
            "ops/",
            "a b/c",
            &format!("ops/{}", "x".repeat(513)),
        ] {
            assert!(bad.parse::<OperatorPattern>().is_err(), "{bad}");
        }
    }
}
