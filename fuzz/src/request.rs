//! Request conversion: arbitrary bytes as the body of a RenderRequest and of a
//! CreateTemplateRequest, through the server's strict decoder and into domain types, as the
//! gRPC handlers do before anything else runs; and as the other caller-written strings the
//! server reads (the `idempotency-key` metadata, template and job ids).
//!
//! Promises checked beyond "no panic": an undecodable or unknown-field body is
//! INVALID_ARGUMENT (never INTERNAL: prost and the descriptor-driven decoder must agree on
//! every input); an accepted RenderRequest holds only values the contract allows; error
//! messages stay in proportion to the request.

use lottie_render::error::{ServiceError, ServiceErrorCode};
use lottie_render::grpc::codec::decode_strictly;
use lottie_render::grpc::convert::{
    parse_id, MAX_MODIFICATIONS_PER_MAP, MAX_SLOT_ID_CHARS, MAX_TEXT_CHARS,
};
use lottie_render::grpc::proto;
use lottie_render::grpc::templates::validate_create;
use lottie_render::idempotency::key::MAX_IDEMPOTENCY_KEY_LEN;
use lottie_render::idempotency::IdempotencyKey;
use lottie_render::spec::RenderSubmission;

/// An error may quote the caller's bytes (escaped, so up to 10 characters per byte for
/// `\u{10ffff}`-style escapes) plus a fixed text per violation.
fn assert_error_bounded(error: &ServiceError, input_len: usize) {
    let budget = 16 * input_len + 4096;
    let size = error.message.len()
        + error
            .violations
            .iter()
            .map(|v| v.field.len() + v.description.len())
            .sum::<usize>();
    assert!(
        size <= budget,
        "error of {size} bytes for a {input_len} byte request"
    );
}

fn render_request(data: &[u8]) {
    let request = match decode_strictly::<proto::RenderRequest>(data.to_vec()) {
        Ok(request) => request,
        Err(error) => {
            assert_eq!(error.code, ServiceErrorCode::InvalidArgument, "{error:?}");
            assert_error_bounded(&error, data.len());
            return;
        }
    };
    match RenderSubmission::try_from(request) {
        Ok(submission) => {
            let modifications = &submission.modifications;
            assert!(modifications.texts.len() <= MAX_MODIFICATIONS_PER_MAP);
            assert!(modifications.colors.len() <= MAX_MODIFICATIONS_PER_MAP);
            let ids = modifications
                .texts
                .keys()
                .chain(modifications.colors.keys());
            for id in ids {
                assert!(
                    (1..=MAX_SLOT_ID_CHARS).contains(&id.chars().count()),
                    "{id:?}"
                );
            }
            for text in modifications.texts.values() {
                assert!(text.chars().count() <= MAX_TEXT_CHARS);
                assert!(
                    !text.chars().any(|c| c.is_control() && c != '\n'),
                    "{text:?}"
                );
            }
            let output = submission.output;
            assert!([30, 60].contains(&output.fps.get()));
            for side in [output.width.get(), output.height.get()] {
                assert!((100..=1920).contains(&side));
            }
            let colors = modifications
                .colors
                .values()
                .chain(output.background.iter());
            for color in colors {
                let channels = [Some(color.r()), Some(color.g()), Some(color.b()), color.a()];
                for channel in channels.into_iter().flatten() {
                    assert!((0.0..=1.0).contains(&channel), "{color:?}");
                }
            }
        }
        Err(error) => {
            assert_eq!(error.code, ServiceErrorCode::InvalidArgument, "{error:?}");
            assert_eq!(error.reason.as_str(), "REQUEST_INVALID");
            assert!(!error.violations.is_empty());
            assert_error_bounded(&error, data.len());
        }
    }
}

fn create_template_request(data: &[u8]) {
    let request = match decode_strictly::<proto::CreateTemplateRequest>(data.to_vec()) {
        Ok(request) => request,
        Err(error) => {
            assert_eq!(error.code, ServiceErrorCode::InvalidArgument, "{error:?}");
            assert_error_bounded(&error, data.len());
            return;
        }
    };
    let (violations, reason) = validate_create(&request);
    if violations.iter().any(|v| v.field == "lottie_json") {
        assert!(
            [
                "TEMPLATE_INVALID",
                "TEMPLATE_TOO_LARGE",
                "TEMPLATE_TOO_COMPLEX"
            ]
            .contains(&reason.as_str()),
            "{reason}"
        );
    }
    let size: usize = violations
        .iter()
        .map(|v| v.field.len() + v.description.len())
        .sum();
    assert!(size <= 16 * data.len() + 4096, "violations of {size} bytes");
}

fn metadata_and_ids(data: &[u8]) {
    match IdempotencyKey::from_header(Some(data)) {
        Ok(key) => {
            assert!((1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&key.as_str().len()));
            assert!(key.as_str().bytes().all(|byte| byte.is_ascii_graphic()));
        }
        Err(error) => {
            assert_eq!(error.code, ServiceErrorCode::InvalidArgument);
            assert_error_bounded(&error, data.len());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        match parse_id("job_id", text) {
            Ok(id) => assert_eq!(id.hyphenated().to_string(), text.to_ascii_lowercase()),
            Err(error) => {
                assert_eq!(error.code, ServiceErrorCode::InvalidArgument);
                assert_error_bounded(&error, data.len());
            }
        }
    }
}

/// The bytes as the HTTP door's JSON body of a RenderRequest: the JSON scan (bounds,
/// duplicate members) and prost-reflect's conversion either refuse it, classified and in
/// proportion, or make a message the wire scan and prost accept: the two scans of the one
/// contract agree (a body the door let through over a bound would be built before the wire
/// scan ever saw it).
fn render_request_json(data: &[u8]) {
    let descriptor = lottie_render::grpc::proto::descriptor_pool()
        .expect("the contract's descriptors")
        .get_message_by_name("lottie.render.v1.RenderRequest")
        .expect("RenderRequest");
    let message = match lottie_render::grpc::json::from_json(&descriptor, data) {
        Ok(message) => message,
        Err(error) => {
            assert_eq!(error.code, ServiceErrorCode::InvalidArgument, "{error:?}");
            assert_error_bounded(&error, data.len());
            return;
        }
    };
    let bytes = prost::Message::encode_to_vec(&message);
    if let Err(error) = decode_strictly::<proto::RenderRequest>(bytes) {
        panic!("the door accepted a body the wire scan refuses: {error:?}");
    }
}

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    render_request(data);
    render_request_json(data);
    create_template_request(data);
    metadata_and_ids(data);
}
