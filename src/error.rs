//! Error classes: every failure the service can report is either deterministic (the same
//! request will always fail, so callers must not retry) or transient (an infrastructure
//! hiccup, worth retrying later). Module errors carry their class; later layers map the
//! class to a wire status in exactly one place.

use serde::{Deserialize, Serialize};

/// Whether retrying the same request can ever succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The input itself is at fault: the same request fails the same way every time.
    Deterministic,
    /// Capacity, memory, time or infrastructure: the same request may succeed later.
    Transient,
}

impl ErrorClass {
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorClass::Transient)
    }
}

/// Implemented by every module error so callers can decide retries without matching
/// on variants they do not own.
pub trait Classified {
    fn class(&self) -> ErrorClass;
    /// A stable, machine-readable reason in SCREAMING_SNAKE_CASE (e.g. `TEMPLATE_INVALID`).
    fn reason(&self) -> &'static str;
}
