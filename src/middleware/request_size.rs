//! `RequestSizeLayer`: a request message above the size limit is the caller's mistake, so it
//! is answered INVALID_ARGUMENT (reason REQUEST_TOO_LARGE, pushback -1) like every other bad
//! input. tonic enforces the limit itself while reading the body, before any of our code sees
//! the message (so an oversized body is never buffered), but answers OUT_OF_RANGE without
//! details; this layer rewrites exactly that answer. No handler of ours answers OUT_OF_RANGE.
//!
//! The same holds for gzip-compressed requests: tonic inflates a message into a buffer capped
//! at the same limit (`max_decoding_message_size`), so a small body that inflates past it (a
//! gzip bomb) costs at most the limit in memory; tonic answers it RESOURCE_EXHAUSTED (which
//! would invite a retry) and a body that is not valid gzip INTERNAL (which would look like a
//! bug of ours). Both are the caller's mistake: REQUEST_TOO_LARGE and BODY_UNDECODABLE.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;
use http::Request;
use tonic::{Code, Status};

/// How tonic's decoder words a message above `max_decoding_message_size`.
const TONIC_TOO_LARGE_PREFIX: &str = "Error, decoded message length too large";
/// …a compressed message that inflates past it (RESOURCE_EXHAUSTED)…
const TONIC_INFLATED_TOO_LARGE_PREFIX: &str = "Error decompressing: size limit";
/// …a compressed message that does not inflate (INTERNAL)…
const TONIC_UNDECOMPRESSIBLE_PREFIX: &str = "Error decompressing:";
/// …and a message flagged compressed in a call that named no encoding (INTERNAL).
const TONIC_COMPRESSED_WITHOUT_ENCODING_PREFIX: &str =
    "protocol error: received message with compressed-flag but no grpc-encoding";

/// Rewrites tonic's refusals of a request message.
#[derive(Debug, Clone, Default)]
pub struct RequestSize;

pub(crate) type RequestSizeLayer = AroundLayer<RequestSize>;

/// The service's answer for an oversized or undecompressible request, when `response` is
/// tonic's.
fn rewrite<ResponseBody: Default>(
    response: http::Response<ResponseBody>,
) -> http::Response<ResponseBody> {
    match Status::from_header_map(response.headers()).and_then(|status| classify(&status)) {
        Some(error) => Status::from(error).into_http(),
        None => response,
    }
}

/// Our classification of tonic's own refusals of a request message, `None` for any other
/// answer.
fn classify(status: &Status) -> Option<ServiceError> {
    let message = status.message();
    let (reason, field, description) = match status.code() {
        Code::OutOfRange if message.starts_with(TONIC_TOO_LARGE_PREFIX) => (
            Reason::RequestTooLarge,
            "(request)",
            format!("the request is larger than this method accepts ({message})"),
        ),
        Code::ResourceExhausted if message.starts_with(TONIC_INFLATED_TOO_LARGE_PREFIX) => (
            Reason::RequestTooLarge,
            "(request)",
            format!("the request inflates past what this method accepts ({message})"),
        ),
        Code::Internal
            if message.starts_with(TONIC_UNDECOMPRESSIBLE_PREFIX)
                || message.starts_with(TONIC_COMPRESSED_WITHOUT_ENCODING_PREFIX) =>
        {
            (
                Reason::BodyUndecodable,
                "(body)",
                format!("the request body does not decompress ({message})"),
            )
        }
        _ => return None,
    };
    Some(ServiceError::invalid_argument(
        reason,
        description.clone(),
        vec![FieldViolation {
            field: field.into(),
            description,
        }],
    ))
}

impl<B, R: Default + Send + 'static> AroundCall<B, R> for RequestSize {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        let answer = next.call(call);
        Box::pin(async move { answer.await.map(rewrite) })
    }
}

#[cfg(test)]
mod tests {
    use super::classify;
    use crate::reason::Reason;
    use tonic::{Code, Status};

    #[test]
    fn tonics_refusals_of_a_request_message_are_the_callers_mistake_and_nothing_else_is() {
        let cases = [
            (
                Status::out_of_range(
                    "Error, decoded message length too large: found 2000000 bytes, the limit is: 1048576 bytes",
                ),
                Some(Reason::RequestTooLarge),
            ),
            (
                Status::resource_exhausted(
                    "Error decompressing: size limit, of 1048576 bytes, exceeded while decompressing message",
                ),
                Some(Reason::RequestTooLarge),
            ),
            (
                Status::internal("Error decompressing: invalid gzip header, while sending request"),
                Some(Reason::BodyUndecodable),
            ),
            (
                Status::internal(
                    "protocol error: received message with compressed-flag but no grpc-encoding was specified",
                ),
                Some(Reason::BodyUndecodable),
            ),
            (Status::internal("a bug of ours"), None),
            (Status::resource_exhausted("the queue is full"), None),
            (Status::out_of_range("page beyond the end"), None),
        ];
        for (status, expected) in cases {
            let classified = classify(&status);
            assert_eq!(
                classified.as_ref().map(|error| error.reason),
                expected,
                "{status:?}"
            );
            if let Some(error) = classified {
                assert_eq!(Status::from(error).code(), Code::InvalidArgument);
            }
        }
    }
}
