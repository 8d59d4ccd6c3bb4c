//! The one place where service errors become gRPC statuses (DESIGN.md, error model).
//!
//! Every status carries `google.rpc.ErrorInfo` (stable reason, domain `lottie-render`).
//! Deterministic errors add `google.rpc.BadRequest` with every field violation and the
//! metadata `grpc-retry-pushback-ms: -1`, gRPC's own server-pushback signal (gRFC A6): stock
//! clients with a retry policy stop after one attempt. Transient errors add
//! `google.rpc.RetryInfo`, `retry-after` (whole seconds, at least 1) and
//! `grpc-retry-pushback-ms` with the delay.

use crate::error::{ErrorClass, ServiceError, ServiceErrorCode};
use std::collections::HashMap;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// ErrorInfo domain of every error this service reports.
pub(crate) const ERROR_DOMAIN: &str = "lottie-render";
/// gRFC A6 server pushback: milliseconds to wait, or negative for "do not retry".
pub(crate) const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";
/// HTTP-style retry delay in whole seconds, for callers and proxies that read it.
pub(crate) const RETRY_AFTER_HEADER: &str = "retry-after";
/// Longest status message, bytes. A status travels in the trailers (`grpc-message`, and again
/// inside `grpc-status-details-bin`, base64), and stock clients cap the whole header list
/// (grpc-java at 8 KiB, h2/hyper at 16 KiB): a longer answer (say, a parent cycle through
/// 5,000 layers) would reach the caller as a connection error instead of its classified status.
pub(crate) const MAX_STATUS_MESSAGE_BYTES: usize = 512;
/// Bytes of field violations (paths and descriptions) one status carries; the rest are
/// counted in a last violation, so the trailers stay under the 8 KiB clients accept.
pub(crate) const MAX_VIOLATION_BYTES: usize = 4096;
/// Longest field path or description of one violation, bytes.
pub(crate) const MAX_VIOLATION_PART_BYTES: usize = 256;

impl From<ServiceError> for Status {
    fn from(error: ServiceError) -> Status {
        let code = match error.code {
            ServiceErrorCode::InvalidArgument => Code::InvalidArgument,
            ServiceErrorCode::NotFound => Code::NotFound,
            ServiceErrorCode::Unauthenticated => Code::Unauthenticated,
            ServiceErrorCode::PermissionDenied => Code::PermissionDenied,
            ServiceErrorCode::FailedPrecondition => Code::FailedPrecondition,
            ServiceErrorCode::ResourceExhausted => Code::ResourceExhausted,
            ServiceErrorCode::Unavailable => Code::Unavailable,
            ServiceErrorCode::Aborted => Code::Aborted,
            ServiceErrorCode::Internal => Code::Internal,
        };
        let mut details = ErrorDetails::new();
        details.set_error_info(error.reason, ERROR_DOMAIN, HashMap::new());
        let mut budget = MAX_VIOLATION_BYTES;
        for (shown, violation) in error.violations.iter().enumerate() {
            let field = truncated(&violation.field, MAX_VIOLATION_PART_BYTES);
            let description = truncated(&violation.description, MAX_VIOLATION_PART_BYTES);
            let size = field.len() + description.len();
            if size > budget {
                details.add_bad_request_violation(
                    "",
                    format!(
                        "{} more violations not shown",
                        error.violations.len() - shown
                    ),
                );
                break;
            }
            budget -= size;
            details.add_bad_request_violation(field, description);
        }
        let retry_after = error
            .retry_after
            .filter(|_| error.code.class() == Some(ErrorClass::Transient));
        if let Some(delay) = retry_after {
            details.set_retry_info(Some(delay));
        }
        let message = truncated(&error.message, MAX_STATUS_MESSAGE_BYTES);
        let mut status = Status::with_error_details(code, message, details);
        let metadata = status.metadata_mut();
        match (error.code.class(), retry_after) {
            (Some(ErrorClass::Deterministic), _) => {
                metadata.insert(PUSHBACK_HEADER, MetadataValue::from_static("-1"));
            }
            (Some(ErrorClass::Transient), Some(delay)) => {
                let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
                metadata.insert(PUSHBACK_HEADER, MetadataValue::from(millis));
                metadata.insert(RETRY_AFTER_HEADER, MetadataValue::from(seconds.max(1)));
            }
            // Internal errors (our bugs) leave retries to the caller's policy.
            _ => {}
        }
        status
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, marked with "…" when cut.
fn truncated(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let ellipsis = "…";
    let mut end = limit.saturating_sub(ellipsis.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FieldViolation;
    use crate::reason::Reason;
    use std::time::Duration;

    fn header(status: &Status, name: &str) -> Option<String> {
        status
            .metadata()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    #[test]
    fn invalid_argument_lists_every_violation_and_says_do_not_retry() {
        let violations = vec![
            FieldViolation {
                field: "modifications.colors[\"bg\"].r".into(),
                description: "must be 0..=1, got 255".into(),
            },
            FieldViolation {
                field: "output.fps".into(),
                description: "must be 0, 30 or 60".into(),
            },
        ];
        let status = Status::from(ServiceError::invalid_argument(
            Reason::RequestInvalid,
            "2 invalid fields",
            violations,
        ));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(header(&status, PUSHBACK_HEADER).as_deref(), Some("-1"));
        assert_eq!(header(&status, RETRY_AFTER_HEADER), None);
        let details = status.get_error_details();
        let info = details.error_info().unwrap();
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("REQUEST_INVALID", ERROR_DOMAIN)
        );
        let fields: Vec<&str> = details
            .bad_request()
            .unwrap()
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, ["modifications.colors[\"bg\"].r", "output.fps"]);
        assert!(details.retry_info().is_none());
    }

    #[test]
    fn not_found_says_do_not_retry() {
        let status = Status::from(ServiceError::not_found(Reason::JobNotFound, "no job 1234"));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(header(&status, PUSHBACK_HEADER).as_deref(), Some("-1"));
    }

    #[test]
    fn transient_errors_carry_the_retry_delay_three_ways() {
        let status = Status::from(ServiceError::transient(
            ServiceErrorCode::ResourceExhausted,
            Reason::QueueFull,
            "the render queue is full",
            Duration::from_millis(2500),
        ));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(header(&status, PUSHBACK_HEADER).as_deref(), Some("2500"));
        assert_eq!(
            header(&status, RETRY_AFTER_HEADER).as_deref(),
            Some("3"),
            "rounded up to whole seconds"
        );
        let details = status.get_error_details();
        assert_eq!(
            details.retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(2500))
        );
        assert_eq!(details.error_info().unwrap().reason, "QUEUE_FULL");
    }

    #[test]
    fn internal_errors_hide_the_cause_and_set_no_pushback() {
        let status = Status::from(ServiceError::internal("index out of bounds at src/x.rs:1"));
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("index out of bounds"));
        assert_eq!(header(&status, PUSHBACK_HEADER), None);
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "INTERNAL"
        );
    }

    #[test]
    fn a_huge_error_is_cut_to_fit_the_trailers_stock_clients_accept() {
        let violations = (0..1000)
            .map(|index| FieldViolation {
                field: format!("modifications.texts[\"slot-{index}\"]"),
                description: "é".repeat(400),
            })
            .collect();
        let status = Status::from(ServiceError::invalid_argument(
            Reason::RequestInvalid,
            "ü".repeat(100_000),
            violations,
        ));
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(status.message().ends_with('…'));
        let encoded = status.into_http::<tonic::body::Body>();
        let trailer_bytes: usize = encoded
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum();
        assert!(
            trailer_bytes < 8 * 1024,
            "{trailer_bytes} bytes of trailers"
        );
        let status = Status::from_header_map(encoded.headers()).unwrap();
        let violations = status
            .get_error_details()
            .bad_request()
            .unwrap()
            .field_violations
            .clone();
        let last = violations.last().unwrap();
        assert!(
            last.description.ends_with("more violations not shown"),
            "{last:?}"
        );
        assert!(violations.len() > 5 && violations.len() < 1000);
    }
}
