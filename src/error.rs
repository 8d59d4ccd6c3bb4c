//! Error classes: every failure the service can report is either deterministic (the same
//! request will always fail, so callers must not retry) or transient (an infrastructure
//! hiccup, worth retrying later). Module errors carry their class; later layers map the
//! class to a wire status in exactly one place.

use crate::reason::Reason;
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
    /// The stable, machine-readable reason (on the wire `TEMPLATE_INVALID` and the like).
    fn reason(&self) -> Reason;
}

/// The small set of outcomes the service reports (DESIGN.md, error model); mapped to gRPC
/// status codes in exactly one place (`grpc::status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceErrorCode {
    /// The request itself is wrong: never retry.
    InvalidArgument,
    /// The named template or job does not exist: never retry.
    NotFound,
    /// The call carries no known identity where one is required (or a credential that is
    /// not known): never retry with the same credential.
    Unauthenticated,
    /// The caller is known but may not make this call (GetServiceStatus by a caller who is
    /// no operator): never retry with the same identity.
    PermissionDenied,
    /// The call needs another state of the resource (downloading a job that has not
    /// succeeded): do not retry until that changes.
    FailedPrecondition,
    /// Capacity (queue, workers, memory) is exhausted: retry after the delay.
    ResourceExhausted,
    /// A dependency is unreachable or the server is draining: retry after the delay.
    Unavailable,
    /// A concurrent call with the same idempotency key is in flight: retry after the delay.
    Aborted,
    /// A bug of ours. The message is generic; the cause is logged.
    Internal,
}

impl ServiceErrorCode {
    pub(crate) fn class(self) -> Option<ErrorClass> {
        match self {
            ServiceErrorCode::InvalidArgument
            | ServiceErrorCode::NotFound
            | ServiceErrorCode::Unauthenticated
            | ServiceErrorCode::PermissionDenied
            | ServiceErrorCode::FailedPrecondition => Some(ErrorClass::Deterministic),
            ServiceErrorCode::ResourceExhausted
            | ServiceErrorCode::Unavailable
            | ServiceErrorCode::Aborted => Some(ErrorClass::Transient),
            ServiceErrorCode::Internal => None,
        }
    }
}

/// One invalid field of a request, with its path (`modifications.colors["bg"].r`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    pub field: String,
    pub description: String,
}

/// The refusals of one stage of a request, gathered so that the caller gets all of them at
/// once: the first one's reason leads ([`Violations::into_result`]).
#[derive(Debug, Default)]
pub struct Violations {
    reason: Option<Reason>,
    fields: Vec<FieldViolation>,
}

impl Violations {
    /// Adds a refusal of `field`.
    pub fn push(
        &mut self,
        reason: Reason,
        field: impl Into<String>,
        description: impl Into<String>,
    ) {
        self.reason.get_or_insert(reason);
        self.fields.push(FieldViolation {
            field: field.into(),
            description: description.into(),
        });
    }

    /// `value` when nothing was refused, else one INVALID_ARGUMENT listing every refusal (its
    /// message each `field: description`, joined with `; `).
    pub fn into_result<T>(self, value: T) -> Result<T, ServiceError> {
        let Some(reason) = self.reason else {
            return Ok(value);
        };
        let message = self
            .fields
            .iter()
            .map(|v| format!("{}: {}", v.field, v.description))
            .collect::<Vec<_>>()
            .join("; ");
        Err(ServiceError::invalid_argument(reason, message, self.fields))
    }
}

/// An error as the service reports it to a caller.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError {
    pub code: ServiceErrorCode,
    /// Stable machine-readable reason: the wire contract.
    pub reason: Reason,
    pub message: String,
    /// Every invalid field, all at once (INVALID_ARGUMENT only).
    pub violations: Vec<FieldViolation>,
    /// When to retry (transient codes only).
    pub retry_after: Option<std::time::Duration>,
}

impl ServiceError {
    pub(crate) fn invalid_argument(
        reason: Reason,
        message: impl Into<String>,
        violations: Vec<FieldViolation>,
    ) -> Self {
        ServiceError {
            violations,
            ..ServiceError::deterministic(ServiceErrorCode::InvalidArgument, reason, message)
        }
    }

    pub(crate) fn not_found(reason: Reason, message: impl Into<String>) -> Self {
        ServiceError::deterministic(ServiceErrorCode::NotFound, reason, message)
    }

    /// A deterministic error without field violations (`NotFound`, `FailedPrecondition`).
    pub(crate) fn deterministic(
        code: ServiceErrorCode,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        ServiceError {
            code,
            reason,
            message: message.into(),
            violations: Vec::new(),
            retry_after: None,
        }
    }

    /// A transient error (`ResourceExhausted`, `Unavailable` or `Aborted`) with its retry delay.
    pub(crate) fn transient(
        code: ServiceErrorCode,
        reason: Reason,
        message: impl Into<String>,
        retry_after: std::time::Duration,
    ) -> Self {
        ServiceError {
            retry_after: Some(retry_after),
            ..ServiceError::deterministic(code, reason, message)
        }
    }

    /// A bug of ours: the caller sees a generic message, the cause goes to the log.
    pub(crate) fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        ServiceError::deterministic(
            ServiceErrorCode::Internal,
            Reason::Internal,
            "internal error; it has been logged",
        )
    }
}
