//! Webhook signatures by the Standard Webhooks specification (standardwebhooks.com): each
//! delivery carries `webhook-id` (the same on every retry of one event), `webhook-timestamp`
//! (Unix seconds) and `webhook-signature`, `v1,` and the base64 HMAC-SHA256 of
//! `id.timestamp.body` under the tenant's secret, one per secret (two during a rotation,
//! space-separated). Secrets are written `whsec_` and the key in base64, as the
//! specification's libraries generate and read them; a file of them
//! (`--webhook-secrets`) has a line `TENANT whsec_…` each.

use crate::auth::TenantId;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;

/// The prefix of a secret, as the specification writes it.
const SECRET_PREFIX: &str = "whsec_";
/// Shortest key accepted, bytes: the specification's libraries generate 24 to 64; below 16
/// an HMAC key is guessable.
pub const MIN_SECRET_KEY_BYTES: usize = 16;
/// Longest key accepted, bytes (an HMAC-SHA256 key longer than its 64-byte block is hashed
/// first; 64 is what the libraries generate at most).
pub const MAX_SECRET_KEY_BYTES: usize = 64;

/// One signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never logged.
        formatter.write_str("Secret(…)")
    }
}

impl Secret {
    /// A `whsec_…` secret, or why it is not one.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| format!("a secret starts with {SECRET_PREFIX}"))?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|error| format!("the key after {SECRET_PREFIX} is not base64: {error}"))?;
        if !(MIN_SECRET_KEY_BYTES..=MAX_SECRET_KEY_BYTES).contains(&key.len()) {
            return Err(format!(
                "the key is {} bytes; {MIN_SECRET_KEY_BYTES}..={MAX_SECRET_KEY_BYTES} expected",
                key.len()
            ));
        }
        Ok(Secret(key))
    }

    /// A fresh random secret (32 bytes), for the embedded default.
    pub fn generate() -> Secret {
        let mut key = Vec::with_capacity(32);
        while key.len() < 32 {
            key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        }
        key.truncate(32);
        Secret(key)
    }

    /// The secret as it is written (`whsec_…`).
    pub fn expose(&self) -> String {
        format!(
            "{SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(&self.0)
        )
    }

    /// `v1,` and the signature of one delivery.
    fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        // HMAC takes a key of any length (RFC 2104): this cannot fail, whatever the file says.
        #[allow(clippy::expect_used)]
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        let signature = mac.finalize().into_bytes();
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(signature)
        )
    }
}

/// The `webhook-signature` header of one delivery: a signature per secret.
pub fn signature_header(secrets: &[Secret], id: &str, timestamp: u64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| secret.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The secrets of a `--webhook-secrets` file, by tenant (a tenant on two lines has two:
/// a rotation). Blank lines and lines starting with `#` are skipped.
pub fn parse_secrets_file(text: &str) -> Result<HashMap<TenantId, Vec<Secret>>, String> {
    let mut secrets: HashMap<TenantId, Vec<Secret>> = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(tenant), Some(secret), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("line {}: expected `TENANT whsec_…`", number + 1));
        };
        let tenant =
            TenantId::parse(tenant).map_err(|error| format!("line {}: {error}", number + 1))?;
        let secret =
            Secret::parse(secret).map_err(|error| format!("line {}: {error}", number + 1))?;
        secrets.entry(tenant).or_default().push(secret);
    }
    Ok(secrets)
}

/// The secrets in force: a `--webhook-secrets` file's (swapped whole when it changes), or
/// one generated at start for every tenant when no file is given.
#[derive(Debug)]
pub struct SigningSecrets {
    by_tenant: std::sync::Mutex<HashMap<TenantId, Vec<Secret>>>,
    generated: Option<Secret>,
}

impl SigningSecrets {
    /// The secrets of a file.
    pub fn from_file(secrets: HashMap<TenantId, Vec<Secret>>) -> SigningSecrets {
        SigningSecrets {
            by_tenant: std::sync::Mutex::new(secrets),
            generated: None,
        }
    }

    /// One fresh secret for every tenant, logged once so the operator can give it to the
    /// receivers (with several instances, give them a file instead: each would generate its
    /// own).
    pub fn generated() -> SigningSecrets {
        let secret = Secret::generate();
        tracing::warn!(
            secret = %secret.expose(),
            "webhooks are signed with this secret, generated at start (no --webhook-secrets): \
             it changes at every start"
        );
        SigningSecrets {
            by_tenant: std::sync::Mutex::new(HashMap::new()),
            generated: Some(secret),
        }
    }

    /// Puts a re-read file in force.
    pub fn replace(&self, secrets: HashMap<TenantId, Vec<Secret>>) {
        *crate::sync::lock(&self.by_tenant) = secrets;
    }

    /// The secrets that sign `tenant`'s deliveries (none: the file names no secret for it).
    pub fn of(&self, tenant: &TenantId) -> Vec<Secret> {
        if let Some(generated) = &self.generated {
            return vec![generated.clone()];
        }
        crate::sync::lock(&self.by_tenant)
            .get(tenant)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether `tenant` has a secret: a webhook of a tenant without one is refused at submit.
    pub fn has(&self, tenant: &TenantId) -> bool {
        !self.of(tenant).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's own example (its README, "Verifying webhooks"):
    /// this secret, id, timestamp and payload sign to this signature, as every one of its
    /// reference libraries computes it.
    #[test]
    fn the_specifications_example_signs_to_its_signature() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let header = signature_header(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(header, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_signs_twice_and_files_are_read_strictly() {
        let file = "# rotation\nacme whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n\n\
                    acme whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nglobex whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
        let secrets = parse_secrets_file(file).unwrap();
        let acme = &secrets[&TenantId::parse("acme").unwrap()];
        let header = signature_header(acme, "id", 1, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        assert!(header.split(' ').all(|part| part.starts_with("v1,")));
        for broken in [
            "acme",
            "acme whsec_x y",
            "acme secret",
            "acme whsec_!!!",
            "acme whsec_AAAA",
        ] {
            assert!(parse_secrets_file(broken).is_err(), "{broken}");
        }
        let generated = Secret::generate();
        assert_eq!(Secret::parse(&generated.expose()).unwrap(), generated);
        assert_eq!(format!("{generated:?}"), "Secret(…)");
    }
}
