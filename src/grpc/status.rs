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
pub const ERROR_DOMAIN: &str = "lottie-render";
/// gRFC A6 server pushback: milliseconds to wait, or negative for "do not retry".
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";
/// HTTP-style retry delay in whole seconds, for callers and proxies that read it.
pub const RETRY_AFTER_HEADER: &str = "retry-after";

impl From<ServiceError> for Status {
    fn from(error: ServiceError) -> Status {
        let code = match error.code {
            ServiceErrorCode::InvalidArgument => Code::InvalidArgument,
            ServiceErrorCode::NotFound => Code::NotFound,
            ServiceErrorCode::FailedPrecondition => Code::FailedPrecondition,
            ServiceErrorCode::ResourceExhausted => Code::ResourceExhausted,
            ServiceErrorCode::Unavailable => Code::Unavailable,
            ServiceErrorCode::Aborted => Code::Aborted,
            ServiceErrorCode::Internal => Code::Internal,
        };
        let mut details = ErrorDetails::new();
        details.set_error_info(error.reason, ERROR_DOMAIN, HashMap::new());
        for violation in &error.violations {
            details
                .add_bad_request_violation(violation.field.clone(), violation.description.clone());
        }
        let retry_after = error
            .retry_after
            .filter(|_| error.code.class() == Some(ErrorClass::Transient));
        if let Some(delay) = retry_after {
            details.set_retry_info(Some(delay));
        }
        let mut status = Status::with_error_details(code, error.message, details);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FieldViolation;
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
            "REQUEST_INVALID",
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
        let status = Status::from(ServiceError::not_found("JOB_NOT_FOUND", "no job 1234"));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(header(&status, PUSHBACK_HEADER).as_deref(), Some("-1"));
    }

    #[test]
    fn transient_errors_carry_the_retry_delay_three_ways() {
        let status = Status::from(ServiceError::transient(
            ServiceErrorCode::ResourceExhausted,
            "QUEUE_FULL",
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
}
