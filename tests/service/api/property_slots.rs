//! Scalar, vector and gradient slots over the real gRPC stack: listed by CreateTemplate with
//! their defaults and what they accept, filled by SubmitRender, and a value the property
//! does not take refused naming its field (at the boundary for what no property takes, at
//! admission for what this slot does not).

use crate::helpers::*;
use lottie_render::grpc::proto;

/// A 100² template: a square whose layer position is `where` and whose fill opacity is
/// `fade`, and a gradient `sky` of two stops.
fn template_json() -> Vec<u8> {
    let transform = serde_json::json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [50, 50, 0], "sid": "where"}, "a": {"a": 0, "k": [0, 0, 0]},
        "s": {"a": 0, "k": [100, 100, 100]}});
    let shapes = serde_json::json!([{"ty": "gr", "it": [
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [40, 40]},
         "r": {"a": 0, "k": 0}},
        {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "r": 1,
         "o": {"a": 0, "k": 100, "sid": "fade"}},
        {"ty": "gf", "o": {"a": 0, "k": 0}, "r": 1, "t": 1,
         "s": {"a": 0, "k": [0, 0]}, "e": {"a": 0, "k": [10, 0]},
         "g": {"p": 2, "k": {"a": 0, "k": [0, 0, 0, 0, 1, 1, 1, 1]}, "sid": "sky"}},
        {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
         "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
    ]}]);
    let layer = serde_json::json!({"ddd": 0, "ind": 1, "ty": 4, "nm": "square", "sr": 1,
        "ip": 0, "op": 5, "st": 0, "bm": 0, "ks": transform, "shapes": shapes});
    serde_json::json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 100, "h": 100,
        "layers": [layer]})
    .to_string()
    .into_bytes()
}

fn stop(offset: f64, r: f64, g: f64, b: f64) -> proto::GradientStop {
    proto::GradientStop {
        offset,
        color: Some(color(r, g, b)),
    }
}

#[tokio::test]
async fn property_slots_are_listed_filled_and_refused_naming_their_field() {
    let app = spawn_app().await;
    let template = app.create("slots", template_json()).await.unwrap();
    let scalars: Vec<(&str, &str, f64, f64, f64)> = template
        .scalar_slots
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.property.as_str(),
                s.default_value,
                s.min,
                s.max,
            )
        })
        .collect();
    assert_eq!(scalars, [("fade", "opacity", 100.0, 0.0, 100.0)]);
    let vectors: Vec<(&str, &str, &[f64])> = template
        .vector_slots
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.property.as_str(),
                s.default_value.as_slice(),
            )
        })
        .collect();
    assert_eq!(vectors, [("where", "position", &[50.0, 50.0, 0.0][..])]);
    assert_eq!(template.gradient_slots.len(), 1);
    assert_eq!(template.gradient_slots[0].id, "sky");
    assert_eq!(template.gradient_slots[0].default_stops.len(), 2);

    let request = |modifications: proto::Modifications| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.modifications = Some(modifications);
        request
    };
    let valid = proto::Modifications {
        scalars: [("fade".to_owned(), 40.0)].into(),
        vectors: [(
            "where".to_owned(),
            proto::Vector {
                values: vec![30.0, 60.0, 0.0],
            },
        )]
        .into(),
        gradients: [(
            "sky".to_owned(),
            proto::Gradient {
                stops: vec![stop(0.0, 0.0, 0.0, 1.0), stop(1.0, 0.0, 1.0, 0.0)],
            },
        )]
        .into(),
        ..Default::default()
    };
    app.render(request(valid.clone())).await;

    // What this slot does not take: refused at admission.
    let mut over = valid.clone();
    over.scalars.insert("fade".into(), 150.0);
    let mut flat = valid.clone();
    flat.vectors.insert(
        "where".into(),
        proto::Vector {
            values: vec![1.0, 2.0],
        },
    );
    let mut three_stops = valid.clone();
    three_stops
        .gradients
        .get_mut("sky")
        .unwrap()
        .stops
        .push(stop(1.0, 1.0, 1.0, 1.0));
    let mut unknown = valid.clone();
    unknown.scalars.insert("nope".into(), 1.0);
    for (what, modifications, field, expected) in [
        (
            "opacity 150",
            over,
            "modifications.scalars[\"fade\"]",
            "SLOT_VALUE_INVALID",
        ),
        (
            "a 2-vector for a 3-vector",
            flat,
            "modifications.vectors[\"where\"]",
            "SLOT_VALUE_INVALID",
        ),
        (
            "three stops for two",
            three_stops,
            "modifications.gradients[\"sky\"]",
            "SLOT_VALUE_INVALID",
        ),
        (
            "an unknown slot",
            unknown,
            "modifications.scalars[\"nope\"]",
            "SLOT_UNKNOWN",
        ),
    ] {
        let status = app.submit(request(modifications)).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        );
        assert_eq!(reason(&status), expected, "{what}: {status:?}");
        assert_eq!(violated_fields(&status), [field], "{what}: {status:?}");
    }

    // What no property takes: refused at the boundary.
    let mut not_finite = valid.clone();
    not_finite.scalars.insert("fade".into(), f64::NAN);
    let mut backwards = valid.clone();
    backwards.gradients.insert(
        "sky".into(),
        proto::Gradient {
            stops: vec![stop(1.0, 0.0, 0.0, 0.0), stop(0.0, 1.0, 1.0, 1.0)],
        },
    );
    let mut four = valid;
    four.vectors.insert(
        "where".into(),
        proto::Vector {
            values: vec![1.0, 2.0, 3.0, 4.0],
        },
    );
    for (what, modifications, field) in [
        ("NaN", not_finite, "modifications.scalars[\"fade\"]"),
        (
            "decreasing offsets",
            backwards,
            "modifications.gradients[\"sky\"].stops",
        ),
        (
            "four numbers",
            four,
            "modifications.vectors[\"where\"].values",
        ),
    ] {
        let status = app.submit(request(modifications)).await.unwrap_err();
        assert_eq!(reason(&status), "REQUEST_INVALID", "{what}: {status:?}");
        assert_eq!(violated_fields(&status), [field], "{what}: {status:?}");
    }
    app.stop().await;
}

/// Each refusal's field and description, in the order of the answer's `BadRequest`.
fn violations(status: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    let details = status.get_error_details();
    let request = details.bad_request().expect("a BadRequest");
    request
        .field_violations
        .iter()
        .map(|v| (v.field.clone(), v.description.clone()))
        .collect()
}

#[tokio::test]
async fn an_unknown_slot_of_every_kind_is_refused_with_its_field_and_message_in_kind_order() {
    let app = spawn_app().await;
    let template = app.create("slots", template_json()).await.unwrap();
    let image = super::image_slots::png(&super::image_slots::quadrants(4, 4));
    // A literal of every map: a new kind of slot on the wire is a compile error here until
    // it has a row below.
    let modifications = proto::Modifications {
        texts: [("nope".to_owned(), "hi".to_owned())].into(),
        colors: [("nope".to_owned(), color(0.0, 0.0, 0.0))].into(),
        images: [(
            "nope".to_owned(),
            proto::ImageInput {
                source: Some(proto::image_input::Source::Data(image.into())),
                fit: 0,
            },
        )]
        .into(),
        scalars: [("nope".to_owned(), 1.0)].into(),
        vectors: [(
            "nope".to_owned(),
            proto::Vector {
                values: vec![1.0, 2.0],
            },
        )]
        .into(),
        gradients: [(
            "nope".to_owned(),
            proto::Gradient {
                stops: vec![stop(0.0, 0.0, 0.0, 0.0)],
            },
        )]
        .into(),
    };
    let mut request = small_request(&template.template_id, proto::Format::Gif);
    request.modifications = Some(modifications);
    let status = app.submit(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "SLOT_UNKNOWN", "{status:?}");
    // The kinds in the order admission checks them (`lottie::slots::SlotKind::ALL`).
    let expected = [
        ("colors", "colour", "(none)"),
        ("texts", "text", "(none)"),
        ("images", "image", "(none)"),
        ("scalars", "scalar", "fade"),
        ("vectors", "vector", "where"),
        ("gradients", "gradient", "sky"),
    ]
    .map(|(list, said, valid)| {
        (
            format!("modifications.{list}[\"nope\"]"),
            format!(
                "{list}[\"nope\"]: the template has no {said} slot 'nope'; valid {said} slots: \
                 {valid}"
            ),
        )
    });
    assert_eq!(violations(&status), expected);
    app.stop().await;
}
