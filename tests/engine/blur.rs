//! Gaussian Blur and Drop Shadow drawn on a root layer's pixels (`render::layer_effects`):
//! frames rendered by the library (no codec), their alpha compared with the Gaussian of
//! lottie-web's σ (0.3 × blurriness; softness / 4 for a shadow), computed here from the error
//! function, at places the template's geometry gives; the layers beneath and above compared
//! with the same template without the effect.

use crate::helpers::{library_frames, spec};
use lottie_render::error::Classified;
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use lottie_render::spec::Format;
use lottie_render::spec::Modifications;
use serde_json::{json, Value};

const SIZE: u32 = 200;
/// The blurred square: 100 × 100 centred, so x and y 50..150.
const SQUARE: (f64, f64) = (50.0, 150.0);
/// Alpha levels of slack: the three boxes keep within 1 % of the Gaussian, rlottie's and the
/// composite's 8-bit rounding a level more.
const ALPHA_TOLERANCE: f64 = 4.0;

fn transform(position: [f64; 2]) -> Value {
    json!({
        "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [position[0], position[1], 0]}, "a": {"a": 0, "k": [0, 0, 0]},
        "s": {"a": 0, "k": [100, 100, 100]}
    })
}

/// A shape layer drawing a `side` square of `colour` centred on `position`, with `effects`.
fn square(ind: u32, colour: [f64; 3], side: f64, position: [f64; 2], effects: Value) -> Value {
    json!({
        "ddd": 0, "ind": ind, "ty": 4, "nm": format!("square {ind}"), "sr": 1,
        "ks": transform(position), "ip": 0, "op": 60, "st": 0, "bm": 0, "ef": effects,
        "shapes": [{"ty": "gr", "nm": "group", "it": [
            {"ty": "rc", "d": 1, "s": {"a": 0, "k": [side, side]}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}},
            {"ty": "fl", "c": {"a": 0, "k": [colour[0], colour[1], colour[2], 1]}, "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
        ]}]
    })
}

fn template(layers: Value, assets: Value, size: u32) -> Vec<u8> {
    json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 60, "w": size, "h": size,
           "layers": layers, "assets": assets})
    .to_string()
    .into_bytes()
}

fn parameter(ty: i64, name: &str, value: Value) -> Value {
    json!({"ty": ty, "nm": name, "mn": format!("ADBE {name}"), "v": {"a": 0, "k": value}})
}

/// A Gaussian Blur whose blurriness is `blurriness` (a value or keyframes), both dimensions.
fn blur(blurriness: Value) -> Value {
    let animated = blurriness.is_array();
    json!({"ty": 29, "nm": "Gaussian Blur", "mn": "ADBE Gaussian Blur 2", "ef": [
        {"ty": 0, "nm": "Blurriness", "v": {"a": i32::from(animated), "k": blurriness}},
        parameter(7, "Blur Dimensions", json!(1)),
        parameter(7, "Repeat Edge Pixels", json!(0))
    ]})
}

fn drop_shadow(
    colour: [f64; 3],
    opacity: f64,
    direction: f64,
    distance: f64,
    softness: f64,
) -> Value {
    json!({"ty": 25, "nm": "Drop Shadow", "mn": "ADBE Drop Shadow", "ef": [
        parameter(2, "Shadow Color", json!([colour[0], colour[1], colour[2], 1])),
        parameter(0, "Opacity", json!(opacity)), parameter(1, "Direction", json!(direction)),
        parameter(0, "Distance", json!(distance)), parameter(0, "Softness", json!(softness)),
        parameter(7, "Shadow Only", json!(0))
    ]})
}

fn frames(template: &[u8], size: u32, indices: &[u32]) -> Vec<Vec<u8>> {
    let output = spec(Format::Webm, 30, size, size);
    library_frames(
        template,
        &Modifications::default(),
        &FontBook::default(),
        output,
        indices.iter().copied(),
    )
}

fn alpha(rgba: &[u8], size: u32, (x, y): (u32, u32)) -> f64 {
    f64::from(rgba[((y * size + x) * 4 + 3) as usize])
}

/// The error function (Abramowitz and Stegun 7.1.26, error below 1.5e-7).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let value = 1.0 - poly * (-x * x).exp();
    if x < 0.0 {
        -value
    } else {
        value
    }
}

/// The alpha (0..=255) at pixel centre `x` of the span `from..to` of full alpha blurred by σ.
fn blurred_span(x: f64, (from, to): (f64, f64), sigma: f64) -> f64 {
    let centre = x + 0.5;
    let scale = sigma * std::f64::consts::SQRT_2;
    255.0 * 0.5 * (erf((centre - from) / scale) - erf((centre - to) / scale))
}

/// How far an alpha the frame shows is from the one expected: the frame conversion reads
/// alphas 251–254 as opaque (docs/colours.md), so an opaque pixel matches any expected alpha
/// within the tolerance of 251.
fn alpha_error(actual: f64, expected: f64) -> f64 {
    if actual == 255.0 && expected + ALPHA_TOLERANCE >= 250.5 {
        0.0
    } else {
        (actual - expected).abs()
    }
}

/// The largest difference, in alpha levels, between row `y` of `rgba` and a span blurred by σ.
fn profile_error(rgba: &[u8], y: u32, span: (f64, f64), sigma: f64) -> f64 {
    (0..SIZE)
        .map(|x| {
            alpha_error(
                alpha(rgba, SIZE, (x, y)),
                blurred_span(f64::from(x), span, sigma),
            )
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_blurred_squares_edge_follows_the_gaussian_of_three_tenths_of_its_blurriness() {
    let bytes = template(
        json!([square(
            1,
            [1.0, 0.0, 0.0],
            100.0,
            [100.0, 100.0],
            json!([blur(json!(20))])
        )]),
        json!([]),
        SIZE,
    );
    let frame = frames(&bytes, SIZE, &[0]).remove(0);
    // σ = 0.3 × 20 = 6; along the middle row the vertical blur is flat (50 pixels = 8σ away).
    let error = profile_error(&frame, 100, SQUARE, 6.0);
    assert!(
        error <= ALPHA_TOLERANCE,
        "off the Gaussian of σ 6 by {error}"
    );
    // And a σ 15 % off is told apart.
    for wrong in [5.1, 6.9] {
        let off = profile_error(&frame, 100, SQUARE, wrong);
        assert!(off > ALPHA_TOLERANCE + 2.0, "σ {wrong} fits as well: {off}");
    }
    // The edge (x = 50, between pixels 49 and 50) is dimmed to half.
    let edge = (alpha(&frame, SIZE, (49, 100)) + alpha(&frame, SIZE, (50, 100))) / 2.0;
    assert!((edge - 127.5).abs() <= ALPHA_TOLERANCE, "{edge}");
}

#[test]
fn an_animated_blurriness_is_read_at_each_frame() {
    // Blurriness 0 at frame 0 to 20 at frame 20, linear; 30 fps in and out.
    let keyframes = json!([
        {"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
        {"t": 20, "s": [20]}
    ]);
    let blurred = template(
        json!([square(
            1,
            [1.0, 0.0, 0.0],
            100.0,
            [100.0, 100.0],
            json!([blur(keyframes)])
        )]),
        json!([]),
        SIZE,
    );
    let sharp = template(
        json!([square(1, [1.0, 0.0, 0.0], 100.0, [100.0, 100.0], json!([]))]),
        json!([]),
        SIZE,
    );
    let animated = frames(&blurred, SIZE, &[0, 10, 20]);
    assert_eq!(
        animated[0],
        frames(&sharp, SIZE, &[0])[0],
        "blurriness 0 is no blur"
    );
    for (frame, sigma) in [(1, 3.0), (2, 6.0)] {
        let error = profile_error(&animated[frame], 100, SQUARE, sigma);
        assert!(
            error <= ALPHA_TOLERANCE,
            "frame {frame}: off σ {sigma} by {error}"
        );
    }
}

#[test]
fn the_layers_beneath_and_above_a_blurred_layer_are_drawn_untouched() {
    // Beneath: a blue square over the whole canvas; above: a small green square on the blurred
    // red square's centre and another far from it.
    let layers = |effects: Value| {
        json!([
            square(3, [0.0, 1.0, 0.0], 20.0, [100.0, 100.0], json!([])),
            square(4, [0.0, 1.0, 0.0], 20.0, [20.0, 180.0], json!([])),
            square(1, [1.0, 0.0, 0.0], 60.0, [100.0, 100.0], effects),
            square(2, [0.0, 0.0, 1.0], 200.0, [100.0, 100.0], json!([]))
        ])
    };
    let blurred = frames(
        &template(layers(json!([blur(json!(30))])), json!([]), SIZE),
        SIZE,
        &[0],
    )
    .remove(0);
    let plain = frames(&template(layers(json!([])), json!([]), SIZE), SIZE, &[0]).remove(0);
    // σ = 9: the blur reaches 27 pixels past the red square (70..130), so 43..157.
    let reach = 43..157;
    for y in 0..SIZE {
        for x in 0..SIZE {
            let at = ((y * SIZE + x) * 4) as usize;
            let inside_reach = reach.contains(&x) && reach.contains(&y);
            let above = (91..109).contains(&x) && (91..109).contains(&y);
            if above || !inside_reach {
                assert_eq!(blurred[at..at + 4], plain[at..at + 4], "pixel ({x}, {y})");
            }
        }
    }
    // Within the reach the red blurs into the blue: purple, neither pure.
    let at = ((100 * SIZE + 70) * 4) as usize;
    let edge = &blurred[at..at + 4];
    assert!(edge[0] > 60 && edge[2] > 60 && edge[3] == 255, "{edge:?}");
}

/// Frame 0 of a 100-pixel red square at (100, 100) carrying `effect`, alone on the canvas.
fn red_square_with_effect(effect: Value) -> Vec<u8> {
    let layer = square(1, [1.0, 0.0, 0.0], 100.0, [100.0, 100.0], json!([effect]));
    let bytes = template(json!([layer]), json!([]), SIZE);
    frames(&bytes, SIZE, &[0]).remove(0)
}

#[test]
fn a_drop_shadow_is_offset_by_direction_and_distance_in_its_colour_and_opacity() {
    // Direction 135° (After Effects: clockwise from up, so down and right), distance 20√2:
    // the shadow is the square moved by (20, 20); opacity 128 of 255; no softness.
    let shadow = drop_shadow(
        [0.0, 0.0, 1.0],
        128.0,
        135.0,
        20.0 * std::f64::consts::SQRT_2,
        0.0,
    );
    let frame = red_square_with_effect(shadow);
    let pixel = |x: u32, y: u32| {
        let at = ((y * SIZE + x) * 4) as usize;
        [frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]
    };
    assert_eq!(pixel(100, 100), [255, 0, 0, 255], "the square on top");
    // Shadow only: x and y in 150..170 (and the strips beside the square).
    let shade = pixel(160, 160);
    assert!(
        shade[0] == 0 && shade[1] == 0 && shade[2] >= 254,
        "{shade:?}"
    );
    assert!(shade[3].abs_diff(128) <= 1, "{shade:?}");
    assert_eq!(pixel(160, 60)[3], 0, "above the shadow's top edge (70)");
    assert_eq!(pixel(60, 160)[3], 0, "left of the shadow's left edge (70)");
    assert_eq!(pixel(172, 100)[3], 0, "right of the shadow (170)");
}

#[test]
fn a_drop_shadows_softness_blurs_it_by_a_quarter() {
    // Direction 90° (to the right), distance 20, softness 40: σ = 10. Along the middle row the
    // shadow spans 70..170 and shows right of the square (150..200).
    let shadow = drop_shadow([0.0, 0.0, 0.0], 255.0, 90.0, 20.0, 40.0);
    let frame = red_square_with_effect(shadow);
    let worst = (150..SIZE)
        .map(|x| {
            let expected = blurred_span(f64::from(x), (70.0, 170.0), 10.0);
            alpha_error(alpha(&frame, SIZE, (x, 100)), expected)
        })
        .fold(0.0, f64::max);
    assert!(
        worst <= ALPHA_TOLERANCE,
        "off the Gaussian of σ 10 by {worst}"
    );
}

#[test]
fn a_blur_inside_a_precomposition_is_reported_not_drawn() {
    let bytes = template(
        json!([{"ddd": 0, "ind": 1, "ty": 0, "nm": "inner", "refId": "inner", "sr": 1,
                "ks": transform([0.0, 0.0]), "w": SIZE, "h": SIZE, "ip": 0, "op": 60, "st": 0}]),
        json!([{"id": "inner", "layers": [
            square(1, [1.0, 0.0, 0.0], 100.0, [100.0, 100.0], json!([blur(json!(20))]))
        ]}]),
        SIZE,
    );
    let warnings = InspectReport::new(&Template::parse(&bytes).unwrap())
        .unwrap()
        .warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("Gaussian Blur") && w.contains("root composition")),
        "{warnings:?}"
    );
    // Drawn sharp.
    let frame = frames(&bytes, SIZE, &[0]).remove(0);
    assert_eq!(alpha(&frame, SIZE, (51, 100)), 255.0);
}

#[test]
fn many_large_animated_blurs_are_refused_before_a_frame_is_drawn() {
    // Eight full-canvas layers, each blurred 0 → 400 (σ 120): four are drawn (the rest are
    // reported), and four filters on a 1920² canvas with their margins are past the bound.
    let keyframes = json!([{"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
                           {"t": 60, "s": [400]}]);
    let layers: Vec<Value> = (1..=8)
        .map(|ind| {
            square(
                ind,
                [1.0, 0.0, 0.0],
                200.0,
                [100.0, 100.0],
                json!([blur(keyframes.clone())]),
            )
        })
        .collect();
    let bytes = template(Value::Array(layers), json!([]), SIZE);
    let warnings = InspectReport::new(&Template::parse(&bytes).unwrap())
        .unwrap()
        .warnings;
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("Gaussian Blur"))
            .count(),
        4,
        "{warnings:?}"
    );
    let output = spec(Format::Webm, 30, 1920, 1920);
    let error = lottie_render::render::prepare(
        &bytes,
        &Modifications::default(),
        output,
        &FontBook::default(),
    )
    .err()
    .expect("refused");
    assert_eq!(error.reason().as_str(), "JOB_TOO_LARGE", "{error}");
    assert!(!error.class().is_retryable(), "{error}");
    assert!(error.to_string().contains("16000000"), "{error}");
    // The same template at a small size is within the bound and renders.
    let small = spec(Format::Webm, 30, 200, 200);
    assert!(lottie_render::render::prepare(
        &bytes,
        &Modifications::default(),
        small,
        &FontBook::default()
    )
    .is_ok());
}
