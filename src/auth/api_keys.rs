//! The API keys file (`--api-keys FILE`): one key a line, `TENANT CALLER SHA256HEX`, where
//! SHA256HEX is the hex SHA-256 of the key a caller sends as `authorization: Bearer KEY`.
//! Keys are stored hashed (the file holds no secret a reader could replay) and a presented
//! key's hash is compared with every stored hash in constant time.

use super::caller::{TenantId, TenantIdError};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Longest caller name in the file: it shows up in logs and traces, not more.
pub(crate) const MAX_CALLER_NAME_BYTES: usize = 255;
/// Longest bearer token accepted: real keys are 32 to 64 characters; hashing a 16 KiB
/// header for each call would be the caller's cheap way to spend our CPU.
pub const MAX_API_KEY_BYTES: usize = 512;

/// One key of the file.
#[derive(Debug, Clone)]
struct ApiKey {
    tenant: TenantId,
    caller: Arc<str>,
    sha256: [u8; 32],
}

/// The parsed API keys file.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: Vec<ApiKey>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiKeysError {
    #[error("line {line}: expected `TENANT CALLER SHA256HEX`")]
    Shape { line: usize },
    #[error("line {line}: {source}")]
    Tenant { line: usize, source: TenantIdError },
    #[error("line {line}: a caller name is 1 to {MAX_CALLER_NAME_BYTES} bytes")]
    Caller { line: usize },
    #[error("line {line}: the key's hash is 64 hex digits (sha256sum of the key)")]
    Hash { line: usize },
    #[error("line {line}: this hash is on line {first} already")]
    Duplicate { line: usize, first: usize },
}

impl ApiKeys {
    /// Parses the file's text: blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<ApiKeys, ApiKeysError> {
        let mut keys: Vec<(usize, ApiKey)> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = trimmed.split_whitespace().collect();
            let [tenant, caller, hash] = fields[..] else {
                return Err(ApiKeysError::Shape { line });
            };
            let tenant = TenantId::parse_configured(tenant)
                .map_err(|source| ApiKeysError::Tenant { line, source })?;
            if caller.len() > MAX_CALLER_NAME_BYTES {
                return Err(ApiKeysError::Caller { line });
            }
            let sha256 = parse_sha256_hex(hash).ok_or(ApiKeysError::Hash { line })?;
            if let Some((first, _)) = keys.iter().find(|(_, key)| key.sha256 == sha256) {
                return Err(ApiKeysError::Duplicate {
                    line,
                    first: *first,
                });
            }
            keys.push((
                line,
                ApiKey {
                    tenant,
                    caller: Arc::from(caller),
                    sha256,
                },
            ));
        }
        Ok(ApiKeys {
            keys: keys.into_iter().map(|(_, key)| key).collect(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The tenant and caller name of a presented key, if it is one of the file's. Every
    /// stored hash is compared, each in constant time, so the answer's timing says nothing
    /// about which (or how much of a) hash matched.
    pub(crate) fn find(&self, presented: &[u8]) -> Option<(TenantId, Arc<str>)> {
        if presented.is_empty() || presented.len() > MAX_API_KEY_BYTES {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.sha256.ct_eq(&digest)) {
                found = Some((key.tenant.clone(), key.caller.clone()));
            }
        }
        found
    }
}

fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(bytes)
}

/// The hex SHA-256 of a key, as the file wants it (what `sha256sum` prints).
pub fn sha256_hex(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_key_names_its_tenant_and_caller_and_no_other_key_does() {
        let text = format!(
            "# tenant caller sha256\n\nacme billing {}\n  globex   reports {}  \n",
            sha256_hex("key-of-acme"),
            sha256_hex("key-of-globex").to_uppercase()
        );
        let keys = ApiKeys::parse(&text).unwrap();
        assert_eq!(keys.len(), 2);
        let (tenant, caller) = keys.find(b"key-of-acme").unwrap();
        assert_eq!((tenant.as_str(), &*caller), ("acme", "billing"));
        let (tenant, caller) = keys.find(b"key-of-globex").unwrap();
        assert_eq!((tenant.as_str(), &*caller), ("globex", "reports"));
        for unknown in [
            &b"key-of-acm"[..],
            b"",
            b"KEY-OF-ACME",
            &[b'k'; MAX_API_KEY_BYTES + 1],
        ] {
            assert!(keys.find(unknown).is_none(), "{unknown:?}");
        }
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number() {
        let hash = sha256_hex("k");
        for (text, error) in [
            ("acme billing".to_string(), ApiKeysError::Shape { line: 1 }),
            (
                format!("acme billing {hash} extra"),
                ApiKeysError::Shape { line: 1 },
            ),
            (
                format!("\na/b billing {hash}"),
                ApiKeysError::Tenant {
                    line: 2,
                    source: TenantIdError::Characters,
                },
            ),
            (
                format!("# anonymous callers' tenant\ndefault billing {hash}"),
                ApiKeysError::Tenant {
                    line: 2,
                    source: TenantIdError::Reserved,
                },
            ),
            (
                format!("acme {} {hash}", "c".repeat(256)),
                ApiKeysError::Caller { line: 1 },
            ),
            (
                "acme billing abc".to_string(),
                ApiKeysError::Hash { line: 1 },
            ),
            (
                format!("acme billing {}", "g".repeat(64)),
                ApiKeysError::Hash { line: 1 },
            ),
            (
                format!("acme a {hash}\nacme b {hash}"),
                ApiKeysError::Duplicate { line: 2, first: 1 },
            ),
        ] {
            assert_eq!(ApiKeys::parse(&text).unwrap_err(), error, "{text:?}");
        }
    }
}
