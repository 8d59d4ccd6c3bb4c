//! A dotLottie theme's rules of every type the README names, in an archive dotlottie-js
//! packs: `Scalar`, `Position`, `Vector` and `Gradient` rules with a static value render as
//! the same values sent in the request (each rule shown to matter), beside the `Color` and
//! `Text` rules of `dotlottie_js.rs`; an `expression` rule is left out with a warning naming
//! it (keyframed and `Image` rules: `dotlottie_js.rs`). These seven types are all the
//! dotLottie theme schema has (dotlottie-js refuses an archive with any other).

use super::cli_flags::slots_template;
use super::dotlottie_js::dotlottie_js;
use crate::helpers::*;
use lottie_render::grpc::proto;

fn opaque(r: f64, g: f64, b: f64) -> proto::Color {
    proto::Color {
        a: Some(1.0),
        ..color(r, g, b)
    }
}

/// The values the theme's rules set, as a request's modifications.
fn theme_values() -> proto::Modifications {
    let stop = |offset, color| proto::GradientStop {
        offset,
        color: Some(color),
    };
    let vector = |values: &[f64]| proto::Vector {
        values: values.to_vec(),
    };
    proto::Modifications {
        scalars: [("fade".to_owned(), 40.0)].into(),
        vectors: [
            ("where".to_owned(), vector(&[30.0, 60.0, 0.0])),
            ("size".to_owned(), vector(&[50.0, 150.0, 100.0])),
        ]
        .into(),
        gradients: [(
            "sky".to_owned(),
            proto::Gradient {
                stops: vec![
                    stop(0.0, opaque(0.0, 0.0, 1.0)),
                    stop(1.0, opaque(0.0, 1.0, 0.0)),
                ],
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// A change to the theme's values: a rule left out.
type ModificationsChange = dyn Fn(&mut proto::Modifications);

#[tokio::test]
async fn scalar_position_vector_and_gradient_theme_rules_render_as_their_values() {
    let app = spawn_app().await;
    // The slots template, its band's scale a vector slot `size` too.
    let mut animation: serde_json::Value = serde_json::from_slice(&slots_template()).unwrap();
    animation["layers"][2]["ks"]["s"]["sid"] = "size".into();
    let every = serde_json::json!({"rules": [
        {"id": "fade", "type": "Scalar", "value": 40},
        {"id": "where", "type": "Position", "value": [30, 60, 0]},
        {"id": "size", "type": "Vector", "value": [50, 150, 100]},
        {"id": "sky", "type": "Gradient", "value": [
            {"offset": 0, "color": [0, 0, 1, 1]}, {"offset": 1, "color": [0, 1, 0, 1]}]},
        {"id": "fade", "type": "Scalar", "expression": "value / 2"}
    ]});
    let archive = dotlottie_js(serde_json::json!({"version": 2,
        "animations": [{"id": "slots", "data": animation}],
        "themes": [{"id": "every", "data": every}]}));
    let template = app.create("slots.lottie", archive).await.unwrap();
    assert_eq!(template.themes, ["every"]);
    assert!(
        template
            .warnings
            .iter()
            .any(|warning| warning.starts_with("theme 'every'")
                && warning.contains("Scalar rule 'fade' (an expression)")),
        "{:?}",
        template.warnings
    );
    let render = |theme: &str, modifications: proto::Modifications| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.theme = theme.into();
        request.modifications = Some(modifications);
        let app = &app;
        async move { app.render(request).await.output.unwrap().sha256 }
    };
    let themed = render("every", Default::default()).await;
    assert_eq!(
        themed,
        render("", theme_values()).await,
        "the theme is its values"
    );
    assert_ne!(themed, render("", Default::default()).await);
    let without: [(&str, &ModificationsChange); 4] = [
        ("Scalar", &|m| m.scalars.clear()),
        ("Position", &|m| {
            m.vectors.remove("where");
        }),
        ("Vector", &|m| {
            m.vectors.remove("size");
        }),
        ("Gradient", &|m| m.gradients.clear()),
    ];
    for (rule, change) in without {
        let mut values = theme_values();
        change(&mut values);
        assert_ne!(
            render("", values).await,
            themed,
            "the {rule} rule made no difference: this test could not see it dropped"
        );
    }
    app.stop().await;
}
