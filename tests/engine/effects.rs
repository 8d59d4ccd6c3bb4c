//! Layer effects that render: rlottie ignores `ef`, so Fill, Tint, Tritone and Drop Shadow
//! are written into the layers before it loads the template (a root layer's drop shadow is
//! drawn on its pixels: tests/engine/blur.rs). Pixels are rendered by the
//! library directly (no codec) and compared with the colour the effect asks for, computed
//! here from lottie-web's filter maths, at places computed from the template's geometry.
//! Effects lottie-web does not draw either are left undrawn and reported.

use crate::helpers::library_frame;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use serde_json::{json, Value};

const SIZE: u32 = 100;
/// The square every template draws: 40 × 40 centred on (50, 50), so x and y 30..70.
const SQUARE_CENTRE: (u32, u32) = (50, 50);
/// A pixel no layer covers (unless an offset shadow does).
const EMPTY: (u32, u32) = (5, 5);
/// Channel tolerance: antialiasing does not reach the sampled pixels, but rlottie's 8-bit
/// premultiplied pipeline rounds.
const TOLERANCE: i32 = 2;

/// A transform placing the layer's origin at the canvas centre.
fn centred_transform() -> Value {
    json!({
        "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [50, 50, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
        "s": {"a": 0, "k": [100, 100, 100]}
    })
}

/// A shape layer drawing a 40 × 40 square of `colour`, with `effects`.
fn square_layer(colour: [f64; 3], effects: Value) -> Value {
    json!({
        "ddd": 0, "ind": 1, "ty": 4, "nm": "square", "sr": 1, "ks": centred_transform(),
        "ip": 0, "op": 30, "st": 0, "bm": 0, "ef": effects,
        "shapes": [{"ty": "gr", "nm": "group", "it": [
            {"ty": "rc", "d": 1, "s": {"a": 0, "k": [40, 40]}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}},
            {"ty": "fl", "c": {"a": 0, "k": [colour[0], colour[1], colour[2], 1]}, "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
        ]}]
    })
}

fn template(layers: Value, assets: Value) -> Vec<u8> {
    json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": SIZE, "h": SIZE, "layers": layers, "assets": assets})
        .to_string()
        .into_bytes()
}

/// Bodymovin's encoding of one effect parameter.
fn parameter(ty: i64, name: &str, value: Value) -> Value {
    json!({"ty": ty, "nm": name, "mn": format!("ADBE {name}"), "v": {"a": 0, "k": value}})
}

fn fill_effect(colour: [f64; 3], opacity: f64) -> Value {
    json!({"ty": 21, "nm": "Fill", "mn": "ADBE Fill", "ef": [
        parameter(3, "Fill Mask", json!(0)), parameter(7, "All Masks", json!(0)),
        parameter(2, "Color", json!([colour[0], colour[1], colour[2], 1])),
        parameter(7, "Invert", json!(0)), parameter(0, "Horizontal Feather", json!(0)),
        parameter(0, "Vertical Feather", json!(0)), parameter(0, "Opacity", json!(opacity))
    ]})
}

fn tint_effect(black: [f64; 3], white: [f64; 3], amount: f64) -> Value {
    json!({"ty": 20, "nm": "Tint", "mn": "ADBE Tint", "ef": [
        parameter(2, "Map Black To", json!([black[0], black[1], black[2], 1])),
        parameter(2, "Map White To", json!([white[0], white[1], white[2], 1])),
        parameter(0, "Amount to Tint", json!(amount))
    ]})
}

/// Frame 0 in straight RGBA, rendered at the template's size.
fn render_frame(template: &[u8]) -> Vec<u8> {
    library_frame(template, (SIZE, SIZE), 0)
}

fn pixel(rgba: &[u8], (x, y): (u32, u32)) -> [u8; 4] {
    let at = ((y * SIZE + x) * 4) as usize;
    [rgba[at], rgba[at + 1], rgba[at + 2], rgba[at + 3]]
}

/// An opaque 0..=1 colour as 8-bit RGBA.
fn opaque(colour: [f64; 3]) -> [u8; 4] {
    let [r, g, b] = colour.map(|c| (c * 255.0).round() as u8);
    [r, g, b, 255]
}

fn assert_close(actual: [u8; 4], expected: [u8; 4], what: &str) {
    let close = actual
        .iter()
        .zip(expected)
        .all(|(a, e)| (i32::from(*a) - i32::from(e)).abs() <= TOLERANCE);
    assert!(close, "{what}: got {actual:?}, expected {expected:?}");
}

fn warnings(template: &[u8]) -> Vec<String> {
    InspectReport::new(&Template::parse(template).unwrap())
        .unwrap()
        .warnings
}

const RED: [f64; 3] = [1.0, 0.0, 0.0];
const BLUE: [f64; 3] = [0.0, 0.0, 1.0];

#[test]
fn a_fill_effect_draws_a_red_square_in_the_requested_blue() {
    let plain = render_frame(&template(json!([square_layer(RED, json!([]))]), json!([])));
    assert_close(
        pixel(&plain, SQUARE_CENTRE),
        opaque(RED),
        "without the effect",
    );
    let filled = render_frame(&template(
        json!([square_layer(RED, json!([fill_effect(BLUE, 1.0)]))]),
        json!([]),
    ));
    assert_close(
        pixel(&filled, SQUARE_CENTRE),
        opaque(BLUE),
        "with Fill blue",
    );
    assert_eq!(pixel(&filled, EMPTY)[3], 0, "the fill adds no pixels");
}

#[test]
fn a_fill_effect_at_half_opacity_halves_the_layer_alpha() {
    let filled = render_frame(&template(
        json!([square_layer(RED, json!([fill_effect(BLUE, 0.5)]))]),
        json!([]),
    ));
    let [r, g, b, a] = pixel(&filled, SQUARE_CENTRE);
    assert_close([r, g, b, 255], opaque(BLUE), "colour");
    assert!((i32::from(a) - 128).abs() <= TOLERANCE, "alpha {a}");
}

#[test]
fn a_fill_effect_on_a_precomp_recolours_its_layers_and_on_a_solid_its_colour() {
    let precomp_layer = json!({
        "ddd": 0, "ind": 1, "ty": 0, "nm": "precomp", "refId": "inner", "sr": 1,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [0, 0, 0]},
               "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}},
        "w": SIZE, "h": SIZE, "ip": 0, "op": 30, "st": 0, "bm": 0,
        "ef": [fill_effect(BLUE, 1.0)]
    });
    // The same asset drawn again without the effect stays red: the effect recolours a copy.
    let mut unfilled_precomp = precomp_layer.clone();
    unfilled_precomp["ind"] = json!(2);
    unfilled_precomp["ef"] = json!([]);
    unfilled_precomp["ks"]["p"]["k"] = json!([0, 45, 0]);
    let assets = json!([{"id": "inner", "layers": [square_layer(RED, json!([]))]}]);
    let frame = render_frame(&template(json!([precomp_layer, unfilled_precomp]), assets));
    assert_close(pixel(&frame, SQUARE_CENTRE), opaque(BLUE), "filled precomp");
    // The unfilled copy's square spans y 75..115: its visible part is red.
    assert_close(pixel(&frame, (50, 90)), opaque(RED), "unfilled precomp");

    let solid = json!({
        "ddd": 0, "ind": 1, "ty": 1, "nm": "solid", "sr": 1,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [0, 0, 0]},
               "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}},
        "sc": "#ff0000", "sw": SIZE, "sh": SIZE, "ip": 0, "op": 30, "st": 0, "bm": 0,
        "ef": [fill_effect(BLUE, 1.0)]
    });
    let frame = render_frame(&template(json!([solid]), json!([])));
    assert_close(pixel(&frame, EMPTY), opaque(BLUE), "filled solid");
}

/// An sRGB channel in linear light (the sRGB transfer function, written out from its
/// definition rather than taken from the code under test).
fn linear(c: f64) -> f64 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

/// A linear-light channel in sRGB.
fn srgb(c: f64) -> f64 {
    if c <= 0.0031308 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

/// lottie-web's Tint: grey = mean of the linear-light channels shown in sRGB, mapped between
/// the two colours, written out here from its filter definition.
fn expected_tint(colour: [f64; 3], black: [f64; 3], white: [f64; 3]) -> [f64; 3] {
    let grey = srgb(colour.iter().copied().map(linear).sum::<f64>() / 3.0);
    std::array::from_fn(|i| black[i] + (white[i] - black[i]) * grey)
}

#[test]
fn a_tint_effect_maps_the_square_by_its_luminance() {
    let black = [0.0, 0.25, 0.0];
    let white = [1.0, 0.5, 0.0];
    for colour in [RED, [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.2, 0.6, 0.9]] {
        let frame = render_frame(&template(
            json!([square_layer(
                colour,
                json!([tint_effect(black, white, 100.0)])
            )]),
            json!([]),
        ));
        assert_close(
            pixel(&frame, SQUARE_CENTRE),
            opaque(expected_tint(colour, black, white)),
            &format!("tint of {colour:?}"),
        );
    }
    // At 50 %, lottie-web 5.x merges in linear light the original, the grey over it and the
    // tinted colour over that, each at the amount.
    let tinted = expected_tint(RED, black, white);
    let grey = (1.0 + 0.0 + 0.0) / 3.0; // the mean of red's linear channels
    let half = |under: f64, top: f64| (under + top) / 2.0;
    let expected: [f64; 3] = std::array::from_fn(|i| {
        let original = if i == 0 { 1.0 } else { 0.0 };
        srgb(half(half(original, grey), linear(tinted[i])))
    });
    let frame = render_frame(&template(
        json!([square_layer(RED, json!([tint_effect(black, white, 50.0)]))]),
        json!([]),
    ));
    assert_close(
        pixel(&frame, SQUARE_CENTRE),
        opaque(expected),
        "tint at 50 %",
    );
    // White maps exactly to the "map white to" colour.
    let frame = render_frame(&template(
        json!([square_layer(
            [1.0, 1.0, 1.0],
            json!([tint_effect(black, white, 100.0)])
        )]),
        json!([]),
    ));
    assert_close(pixel(&frame, SQUARE_CENTRE), opaque(white), "white");
}

#[test]
fn a_drop_shadow_draws_an_offset_copy_in_its_colour_below_the_layer() {
    // Direction 180° (straight down in After Effects: direction − 90° = 90°), distance 20.
    let shadow = json!({"ty": 25, "nm": "Drop Shadow", "mn": "ADBE Drop Shadow", "ef": [
        parameter(2, "Shadow Color", json!([0, 1, 0, 1])), parameter(0, "Opacity", json!(255)),
        parameter(1, "Direction", json!(180)), parameter(0, "Distance", json!(20)),
        parameter(0, "Softness", json!(0)), parameter(7, "Shadow Only", json!(0))
    ]});
    let frame = render_frame(&template(
        json!([square_layer(RED, json!([shadow]))]),
        json!([]),
    ));
    // The square spans y 30..70; its shadow y 50..90. The square stays on top.
    assert_close(pixel(&frame, SQUARE_CENTRE), opaque(RED), "the square");
    assert_close(
        pixel(&frame, (50, 80)),
        opaque([0.0, 1.0, 0.0]),
        "the shadow",
    );
    assert_eq!(pixel(&frame, (50, 95))[3], 0, "below the shadow");
    assert_eq!(pixel(&frame, (50, 25))[3], 0, "above the square");
}

#[test]
fn effects_lottie_web_does_not_draw_are_left_undrawn_and_reported() {
    let invert = json!({"ty": 5, "nm": "Invert", "mn": "ADBE Invert", "ef": [
        parameter(7, "Channel", json!(1)), parameter(0, "Blend With Original", json!(0))
    ]});
    let stroke = json!({"ty": 22, "nm": "Stroke", "mn": "ADBE Stroke", "ef": [
        parameter(0, "Brush Size", json!(2))
    ]});
    let bytes = template(
        json!([square_layer(RED, json!([invert, stroke]))]),
        json!([]),
    );
    // lottie-web (the designer's preview) draws the square as it is: so do we.
    assert_close(
        pixel(&render_frame(&bytes), SQUARE_CENTRE),
        opaque(RED),
        "square",
    );
    let warnings = warnings(&bytes);
    // (A blur inside a precomposition is reported too: tests/engine/blur.rs.)
    for (name, why) in [
        (
            "'Invert' (ADBE Invert)",
            "lottie-web does not draw it either",
        ),
        (
            "'Stroke' (ADBE Stroke)",
            "lottie-web draws it; the renderer cannot",
        ),
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(name) && w.contains("not drawn") && w.contains(why)),
            "{name} missing from {warnings:?}"
        );
    }
}

#[test]
fn expression_controls_draw_nothing_and_are_not_reported() {
    let slider = json!({"ty": 5, "nm": "Speed", "mn": "ADBE Slider Control", "ef": [
        parameter(0, "Slider", json!(3))
    ]});
    let bytes = template(json!([square_layer(RED, json!([slider]))]), json!([]));
    assert_close(
        pixel(&render_frame(&bytes), SQUARE_CENTRE),
        opaque(RED),
        "square",
    );
    assert_eq!(warnings(&bytes), Vec::<String>::new());
}

#[test]
fn a_fill_effect_on_a_text_layer_colours_its_glyphs() {
    let text = json!({
        "ddd": 0, "ind": 1, "ty": 5, "nm": "title", "sr": 1,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [10, 80, 0]},
               "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}},
        "ip": 0, "op": 30, "st": 0, "bm": 0, "ef": [fill_effect(BLUE, 1.0)],
        "t": {"d": {"k": [{"s": {"s": 80, "f": "Sans", "t": "█", "j": 0, "tr": 0, "lh": 96, "ls": 0, "fc": [0, 0, 0]}, "t": 0}]},
              "p": {}, "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}}, "a": []}
    });
    let bytes = json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": SIZE, "h": SIZE,
        "fonts": {"list": [{"fName": "Sans", "fFamily": "DejaVu Sans", "fStyle": "Book", "ascent": 75}]},
        "layers": [text]})
    .to_string()
    .into_bytes();
    let frame = render_frame(&bytes);
    // Every inked pixel is blue, none black (the document's own colour), and there is ink.
    let inked: Vec<[u8; 4]> = frame
        .chunks(4)
        .map(|p| [p[0], p[1], p[2], p[3]])
        .filter(|p| p[3] == 255)
        .collect();
    assert!(inked.len() > 100, "{} inked pixels", inked.len());
    for p in inked {
        assert_close(p, opaque(BLUE), "glyph pixel");
    }
}
