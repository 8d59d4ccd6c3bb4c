//! The `idempotency-key` request metadata as a validated type.

use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;

/// Request metadata that carries the key.
pub(crate) const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest key accepted: long enough for a UUID plus a caller's own prefix, short enough to
/// bound the store's memory per key.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// 1..=255 visible ASCII characters (`!`..=`~`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parses the header's raw bytes; `None` means the header is absent.
    pub fn from_header(value: Option<&[u8]>) -> Result<IdempotencyKey, ServiceError> {
        let Some(bytes) = value else {
            return Err(refusal(
                Reason::IdempotencyKeyMissing,
                "SubmitRender needs request metadata `idempotency-key` (1..=255 visible ASCII characters), e.g. a UUID per logical request",
            ));
        };
        let well_formed = (1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&bytes.len())
            && bytes.iter().all(|b| b.is_ascii_graphic());
        match std::str::from_utf8(bytes) {
            Ok(text) if well_formed => Ok(IdempotencyKey(text.to_owned())),
            _ => Err(refusal(
                Reason::IdempotencyKeyInvalid,
                format!("`idempotency-key` must be 1..={MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters (no spaces), got {} bytes", bytes.len()),
            )),
        }
    }
}

fn refusal(reason: Reason, message: impl Into<String>) -> ServiceError {
    let message = message.into();
    let violation = FieldViolation {
        field: IDEMPOTENCY_KEY_HEADER.to_owned(),
        description: message.clone(),
    };
    ServiceError::invalid_argument(reason, message, vec![violation])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_visible_ascii_characters() {
        let cases: &[(Option<&[u8]>, Option<Reason>)] = &[
            (None, Some(Reason::IdempotencyKeyMissing)),
            (Some(b""), Some(Reason::IdempotencyKeyInvalid)),
            (Some(b"has space"), Some(Reason::IdempotencyKeyInvalid)),
            (Some(b"tab\there"), Some(Reason::IdempotencyKeyInvalid)),
            (
                Some("caf\u{e9}".as_bytes()),
                Some(Reason::IdempotencyKeyInvalid),
            ),
            (Some(&[b'k'; 256]), Some(Reason::IdempotencyKeyInvalid)),
            (Some(&[b'k'; 255]), None),
            (Some(b"x"), None),
            (Some(b"order-42:render/3~!"), None),
        ];
        for (value, refused) in cases {
            let result = IdempotencyKey::from_header(*value);
            match (refused, result) {
                (None, Ok(key)) => assert_eq!(Some(key.as_str().as_bytes()), *value),
                (Some(reason), Err(error)) => assert_eq!(error.reason, *reason, "{value:?}"),
                (expected, got) => panic!("{value:?}: expected {expected:?}, got {got:?}"),
            }
        }
    }
}
