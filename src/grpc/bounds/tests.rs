//! The contract's bounds: declared for every field that can grow, equal to the limits the
//! domain checks, and enforced by both scans.

use super::{json, wire, Schema, Shape, ValueKind};
use crate::error::ServiceError;
use crate::grpc::proto::descriptor_pool;
use crate::reason::Reason;
use prost::Message;
use std::collections::BTreeSet;

fn schema() -> &'static Schema {
    Schema::contract().unwrap()
}

/// Every request message of every method of the contract, and every message they nest.
fn request_messages() -> BTreeSet<String> {
    let pool = descriptor_pool().unwrap();
    let mut pending: Vec<String> = pool
        .services()
        .filter(|service| service.package_name() == "lottie.render.v1")
        .flat_map(|service| service.methods().collect::<Vec<_>>())
        .map(|method| method.input().full_name().to_owned())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let plan = &schema().messages[schema().message(&name).unwrap()];
        for field in &plan.fields {
            if let ValueKind::Message(index) = field.value {
                pending.push(schema().messages[index].full_name.clone());
            }
        }
    }
    seen
}

#[test]
fn every_field_of_every_request_message_that_can_grow_declares_its_bound() {
    let messages = request_messages();
    assert!(messages.contains("lottie.render.v1.RenderRequest"));
    assert!(messages.contains("lottie.render.v1.GradientStop"));
    let mut unbounded = Vec::new();
    for name in &messages {
        let plan = &schema().messages[schema().message(name).unwrap()];
        for field in &plan.fields {
            if !field.is_bounded() {
                unbounded.push(format!("{name}.{}", field.name));
            }
        }
    }
    assert!(
        unbounded.is_empty(),
        "fields without a bound: {unbounded:?}"
    );
}

fn field(message: &str, name: &str) -> super::FieldPlan {
    let plan = &schema().messages[schema().message(message).unwrap()];
    plan.fields.iter().find(|f| f.name == name).unwrap().clone()
}

#[test]
fn the_declared_bounds_are_the_limits_the_domain_checks() {
    use crate::grpc::convert::{
        MAX_GRADIENTS_PER_REQUEST, MAX_IMAGES_PER_REQUEST, MAX_MODIFICATIONS_PER_MAP,
        MAX_SLOT_ID_CHARS, MAX_TEXT_CHARS,
    };
    let modifications = "lottie.render.v1.Modifications";
    let as_u64 = |n: usize| Some(n as u64);
    for map in ["texts", "colors", "scalars", "vectors"] {
        assert_eq!(
            field(modifications, map).max_count,
            as_u64(MAX_MODIFICATIONS_PER_MAP)
        );
    }
    assert_eq!(
        field(modifications, "images").max_count,
        as_u64(MAX_IMAGES_PER_REQUEST)
    );
    assert_eq!(
        field(modifications, "gradients").max_count,
        as_u64(MAX_GRADIENTS_PER_REQUEST)
    );
    for map in [
        "texts",
        "colors",
        "images",
        "scalars",
        "vectors",
        "gradients",
    ] {
        assert_eq!(
            field(modifications, map).key_length.max_chars,
            as_u64(MAX_SLOT_ID_CHARS),
            "{map}"
        );
    }
    assert_eq!(
        field(modifications, "texts").length.max_chars,
        as_u64(MAX_TEXT_CHARS)
    );
    assert_eq!(
        field("lottie.render.v1.Gradient", "stops").max_count,
        as_u64(crate::lottie::slots::MAX_GRADIENT_STOPS)
    );
    assert_eq!(
        field("lottie.render.v1.ImageInput", "data")
            .length
            .max_bytes,
        as_u64(crate::lottie::reading::images::MAX_IMAGE_BYTES)
    );
    assert_eq!(
        field("lottie.render.v1.UploadImageRequest", "data")
            .length
            .max_bytes,
        as_u64(crate::lottie::reading::images::MAX_IMAGE_BYTES)
    );
    assert_eq!(
        field("lottie.render.v1.Notify", "webhook_url")
            .length
            .max_bytes,
        as_u64(crate::webhooks::destination::MAX_WEBHOOK_URL_BYTES)
    );
    let create = "lottie.render.v1.CreateTemplateRequest";
    assert_eq!(
        field(create, "name").length.max_chars,
        as_u64(crate::templates::MAX_TEMPLATE_NAME_CHARS)
    );
    assert_eq!(
        field(create, "fonts").max_count,
        as_u64(crate::lottie::lowering::text::fonts::MAX_FONTS_PER_TEMPLATE)
    );
    assert_eq!(
        field(create, "fonts").length.max_bytes,
        as_u64(crate::lottie::lowering::text::fonts::MAX_FONT_BYTES)
    );
    assert_eq!(
        field(create, "animation_id").length.max_chars,
        as_u64(crate::lottie::reading::dotlottie::MAX_ANIMATION_ID_CHARS)
    );
    for (message, name) in [
        ("lottie.render.v1.TimePoint", "marker"),
        ("lottie.render.v1.Segment", "marker"),
    ] {
        assert_eq!(
            field(message, name).length.max_chars,
            as_u64(crate::lottie::report::MAX_MARKER_NAME_CHARS)
        );
    }
    assert!(matches!(
        field(modifications, "texts").shape,
        Shape::Map {
            key: ValueKind::String
        }
    ));
}

fn gradient_request(stops: usize) -> Vec<u8> {
    use crate::grpc::proto;
    proto::RenderRequest {
        modifications: Some(proto::Modifications {
            gradients: [(
                "g".to_owned(),
                proto::Gradient {
                    stops: vec![proto::GradientStop::default(); stops],
                },
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn wire_error(bytes: &[u8]) -> ServiceError {
    wire::check(schema(), "lottie.render.v1.RenderRequest", bytes).unwrap_err()
}

#[test]
fn a_wire_message_over_a_count_is_refused_naming_the_field() {
    wire::check(
        schema(),
        "lottie.render.v1.RenderRequest",
        &gradient_request(64),
    )
    .unwrap();
    let error = wire_error(&gradient_request(100_000));
    assert_eq!(error.reason, Reason::RequestInvalid);
    assert_eq!(
        error.violations[0].field,
        "modifications.gradients[\"g\"].stops"
    );
    assert_eq!(
        error.violations[0].description,
        "at most 64 items, got more"
    );
}

#[test]
fn a_long_map_key_is_refused_without_being_shown() {
    use crate::grpc::proto;
    let key = "k".repeat(100_000);
    let bytes = proto::RenderRequest {
        modifications: Some(proto::Modifications {
            texts: [(key, "x".to_owned())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let error = wire_error(&bytes);
    assert_eq!(error.violations[0].field, "modifications.texts");
    assert!(error.message.len() < 300, "{}", error.message);
}

#[test]
fn packed_numbers_are_counted_by_their_width() {
    use crate::grpc::proto;
    let vector = |values: Vec<f64>| {
        proto::RenderRequest {
            modifications: Some(proto::Modifications {
                vectors: [("v".to_owned(), proto::Vector { values })].into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    // 127.0 and 1e300 have bytes below 0x80 throughout: a varint count would see 24.
    wire::check(
        schema(),
        "lottie.render.v1.RenderRequest",
        &vector(vec![127.0, 1e300, 3.0]),
    )
    .unwrap();
    let error = wire_error(&vector(vec![1.0; 4]));
    assert_eq!(
        error.violations[0].field,
        "modifications.vectors[\"v\"].values"
    );
}

fn json_error(body: &str) -> ServiceError {
    json::check(schema(), "lottie.render.v1.RenderRequest", body.as_bytes()).unwrap_err()
}

#[test]
fn a_json_member_given_twice_is_refused_by_either_name() {
    for body in [
        r#"{"theme":"a","theme":"b"}"#,
        r#"{"templateId":"a","template_id":"b"}"#,
        r#"{"modifications":{"texts":{"t":"a","t":"b"}}}"#,
    ] {
        let error = json_error(body);
        assert_eq!(error.reason, Reason::RequestInvalid, "{body}");
        assert!(
            error.violations[0].description.contains("given twice"),
            "{body}: {:?}",
            error.violations
        );
    }
    json::check(
        schema(),
        "lottie.render.v1.RenderRequest",
        br#"{"theme":"a","templateId":"b"}"#,
    )
    .unwrap();
}

#[test]
fn a_json_list_over_its_bound_is_refused_even_when_the_body_is_cut_short() {
    let stops = "{},".repeat(10_000);
    let whole = format!(
        r#"{{"modifications":{{"gradients":{{"g":{{"stops":[{}]}}}}}}}}"#,
        stops.trim_end_matches(',')
    );
    let error = json_error(&whole);
    assert_eq!(
        error.violations[0].field,
        "modifications.gradients[\"g\"].stops"
    );
    let cut = &whole[..whole.len() / 2];
    assert_eq!(
        json_error(cut).violations[0].field,
        "modifications.gradients[\"g\"].stops"
    );
}

#[test]
fn json_bytes_are_measured_decoded() {
    // "AAAA" is three zero bytes: the base64 of `bytes` zeros, for multiples of three.
    let image = |bytes: u64| format!(r#"{{"data":"{}"}}"#, "AAAA".repeat((bytes / 3) as usize));
    let check = |body: String| {
        json::check(
            schema(),
            "lottie.render.v1.UploadImageRequest",
            body.as_bytes(),
        )
    };
    let at = crate::lottie::reading::images::MAX_IMAGE_BYTES as u64 / 3 * 3;
    check(image(at)).unwrap();
    let error = check(image(at + 3)).unwrap_err();
    assert_eq!(error.violations[0].field, "data");
}

#[test]
fn unknown_json_members_are_named() {
    let error = json_error(r#"{"modifications":{"textz":{}}}"#);
    assert_eq!(error.reason, Reason::UnknownFields);
    assert_eq!(error.violations[0].field, "modifications.textz");
}

#[test]
fn the_json_scan_keeps_every_key_within_its_bound_and_slack() {
    for plan in &schema().messages {
        for field in &plan.fields {
            if let Some(chars) = field.key_length.max_chars {
                assert!(
                    chars * super::LENGTH_SLACK * 4 <= json::MAX_KEPT_KEY_BYTES as u64,
                    "{}.{}",
                    plan.full_name,
                    field.name
                );
            }
        }
    }
}

/// A figure as the docs write it: `67,108,864`.
fn with_commas(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A string's or bytes' bounds as the docs write them, each part ending with `suffix`.
fn length_parts(length: super::Length, suffix: &str) -> Vec<String> {
    let chars = length
        .max_chars
        .map(|chars| format!("{} characters{suffix}", with_commas(chars)));
    let bytes = length
        .max_bytes
        .map(|bytes| format!("{} bytes{suffix}", with_commas(bytes)));
    chars.into_iter().chain(bytes).collect()
}

/// The row of docs/security.md's "Request bounds" table for `field` of `message`.
fn docs_row(message: &str, field: &super::FieldPlan) -> Option<String> {
    let count = |what: &str| {
        field
            .max_count
            .map(|count| format!("{} {what}", with_commas(count)))
    };
    let parts: Vec<String> = match field.shape {
        Shape::Map { .. } => count("entries")
            .into_iter()
            .chain(length_parts(field.key_length, " a key"))
            .chain(length_parts(field.length, " a value"))
            .collect(),
        Shape::Repeated => count("items")
            .into_iter()
            .chain(length_parts(field.length, " an item"))
            .collect(),
        Shape::Singular => length_parts(field.length, ""),
    };
    let short = message.rsplit('.').next().unwrap_or(message);
    (!parts.is_empty()).then(|| format!("| `{short}.{}` | {} |", field.name, parts.join(" / ")))
}

#[test]
fn the_request_bounds_table_of_the_security_docs_is_the_contracts() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    let start = docs.find("### Request bounds").expect("the section");
    let table: BTreeSet<String> = docs[start..]
        .lines()
        .skip_while(|line| !line.starts_with("| message.field"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(str::to_owned)
        .collect();
    let mut contract = BTreeSet::new();
    for name in request_messages() {
        let plan = &schema().messages[schema().message(&name).unwrap()];
        for field in &plan.fields {
            contract.extend(docs_row(&name, field));
        }
    }
    let missing: Vec<_> = contract.difference(&table).collect();
    let extra: Vec<_> = table.difference(&contract).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "rows the docs lack: {missing:#?}\nrows the contract lacks: {extra:#?}"
    );
}
