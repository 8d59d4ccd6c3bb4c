//! A gRPC status as an HTTP answer: the status code from the same classification the gRPC
//! side uses (docs/http.md has the table), an RFC 9457 `application/problem+json` body with
//! the reason and every field violation, and `Retry-After` (seconds, the very value the
//! gRPC answer carries) on every transient refusal.

use crate::error::ServiceError;
use crate::grpc::status::RETRY_AFTER_HEADER;
use crate::reason::Reason;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use tonic::body::Body;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The HTTP status of a gRPC status with this reason: a few reasons have an HTTP status of
/// their own; the rest follow their gRPC code.
pub(crate) fn http_status(code: Code, reason: Option<&str>) -> StatusCode {
    let by_reason = match reason {
        Some(reason) if reason == Reason::RequestTooLarge.as_str() => {
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        }
        Some(reason) if reason == Reason::BodyNotJson.as_str() => Some(StatusCode::BAD_REQUEST),
        Some(reason) if reason == Reason::RouteNotFound.as_str() => Some(StatusCode::NOT_FOUND),
        Some(reason) if reason == Reason::MethodNotAllowed.as_str() => {
            Some(StatusCode::METHOD_NOT_ALLOWED)
        }
        Some(reason) if reason == Reason::LengthRequired.as_str() => {
            Some(StatusCode::LENGTH_REQUIRED)
        }
        Some(reason) if reason == Reason::RangeNotSatisfiable.as_str() => {
            Some(StatusCode::RANGE_NOT_SATISFIABLE)
        }
        Some(reason) if reason == Reason::MediaTypeUnsupported.as_str() => {
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        }
        Some(reason) if reason == Reason::IdempotencyKeyInProgress.as_str() => {
            Some(StatusCode::CONFLICT)
        }
        _ => None,
    };
    by_reason.unwrap_or(match code {
        Code::Ok => StatusCode::OK,
        // The caller's mistake: the request is understood and refused as it is.
        Code::InvalidArgument | Code::OutOfRange => StatusCode::UNPROCESSABLE_ENTITY,
        // The resource's state forbids it for now (a download before the render ended).
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable | Code::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Internal | Code::Unknown | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    })
}

/// The problem document of `status`.
pub(crate) fn body_of(status: &Status) -> Vec<u8> {
    let details = status.get_error_details();
    let reason = details.error_info().map(|info| info.reason.clone());
    let http = http_status(status.code(), reason.as_deref());
    let mut problem = serde_json::Map::new();
    problem.insert("type".into(), "about:blank".into());
    problem.insert(
        "title".into(),
        http.canonical_reason().unwrap_or("Error").into(),
    );
    problem.insert("status".into(), http.as_u16().into());
    problem.insert("detail".into(), status.message().into());
    problem.insert("code".into(), code_name(status.code()).into());
    if let Some(reason) = reason {
        problem.insert("reason".into(), reason.into());
    }
    let retry_after = retry_after_seconds(status);
    problem.insert("retryable".into(), retry_after.is_some().into());
    if let Some(seconds) = retry_after {
        problem.insert("retryAfterSeconds".into(), seconds.into());
    }
    if let Some(bad_request) = details.bad_request() {
        let errors: Vec<serde_json::Value> = bad_request
            .field_violations
            .iter()
            .map(|violation| {
                serde_json::json!({"field": violation.field, "detail": violation.description})
            })
            .collect();
        problem.insert("errors".into(), errors.into());
    }
    serde_json::to_vec(&serde_json::Value::Object(problem)).unwrap_or_default()
}

/// The HTTP answer of `status`.
pub(crate) fn of_status(status: &Status) -> Response<Body> {
    let reason = status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone());
    let http = http_status(status.code(), reason.as_deref());
    let mut answer = Response::new(Body::new(Full::new(Bytes::from(body_of(status)))));
    *answer.status_mut() = http;
    let headers = answer.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(seconds) = retry_after_seconds(status) {
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if http == StatusCode::UNAUTHORIZED {
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
    }
    answer
}

/// The HTTP answer of a refusal the door makes itself.
pub(crate) fn of_error(error: ServiceError) -> Response<Body> {
    of_status(&Status::from(error))
}

/// The retry delay of a transient status in whole seconds (the `retry-after` the gRPC
/// answer carries), `None` for one not to retry.
fn retry_after_seconds(status: &Status) -> Option<u64> {
    if let Some(seconds) = status
        .metadata()
        .get(RETRY_AFTER_HEADER)
        .and_then(|value| value.to_str().ok()?.parse().ok())
    {
        return Some(seconds);
    }
    let delay = status.get_error_details().retry_info()?.retry_delay?;
    Some(delay.as_secs() + u64::from(delay.subsec_nanos() > 0))
}

/// The gRPC code's canonical name (`INVALID_ARGUMENT`), as the problem's `code`.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServiceErrorCode;
    use std::time::Duration;

    #[test]
    fn each_class_has_its_http_status_and_a_transient_one_its_delay() {
        for (error, expected) in [
            (
                ServiceError::invalid_argument(Reason::SlotUnknown, "x", Vec::new()),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                ServiceError::invalid_argument(Reason::RequestTooLarge, "x", Vec::new()),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (
                ServiceError::invalid_argument(Reason::BodyNotJson, "x", Vec::new()),
                StatusCode::BAD_REQUEST,
            ),
            (
                ServiceError::not_found(Reason::JobNotFound, "x"),
                StatusCode::NOT_FOUND,
            ),
            (
                ServiceError::deterministic(
                    ServiceErrorCode::FailedPrecondition,
                    Reason::JobNotSucceeded,
                    "x",
                ),
                StatusCode::CONFLICT,
            ),
            (
                ServiceError::transient(
                    ServiceErrorCode::Aborted,
                    Reason::IdempotencyKeyInProgress,
                    "x",
                    Duration::from_millis(1500),
                ),
                StatusCode::CONFLICT,
            ),
            (
                ServiceError::transient(
                    ServiceErrorCode::ResourceExhausted,
                    Reason::QueueFull,
                    "x",
                    Duration::from_millis(1500),
                ),
                StatusCode::TOO_MANY_REQUESTS,
            ),
            (
                ServiceError::transient(
                    ServiceErrorCode::Unavailable,
                    Reason::StorageUnavailable,
                    "x",
                    Duration::from_millis(1500),
                ),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                ServiceError::deterministic(
                    ServiceErrorCode::Unauthenticated,
                    Reason::Unauthenticated,
                    "x",
                ),
                StatusCode::UNAUTHORIZED,
            ),
        ] {
            let transient = error.retry_after.is_some();
            let answer = of_error(error);
            assert_eq!(answer.status(), expected);
            let retry_after = answer.headers().get(http::header::RETRY_AFTER);
            // 1.5 s is said as 2 whole seconds, as the gRPC side's `retry-after`.
            assert_eq!(
                retry_after.map(|value| value.to_str().unwrap().to_owned()),
                transient.then(|| "2".to_owned()),
                "{expected}"
            );
        }
    }
}
