//! Feature classes real files use that the shared corpus did not show (issue 25), each with
//! a template written from its description and checked against lottie-web's documented
//! behaviour.

use crate::helpers::library_frame;
use serde_json::{json, Value};

/// A solid layer of `colour`, `w`×`h` at the origin, shown over frames `ip..op`.
fn solid(ind: u32, colour: &str, (w, h): (u32, u32), (ip, op): (u32, u32)) -> Value {
    json!({"ddd": 0, "ind": ind, "ty": 1, "sc": colour, "sw": w, "sh": h,
        "sr": 1, "ip": ip, "op": op, "st": 0,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
            "p": {"a": 0, "k": [0, 0, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
            "s": {"a": 0, "k": [100, 100, 100]}}})
}

/// A root canvas of fractional size (`"h": 99.6`, as some exporters write it) is rounded to
/// whole pixels, as asset and layer sizes are, instead of refusing the file: a solid covering
/// the rounded 200×100 canvas fills every corner of a 200×100 frame.
#[test]
fn a_fractional_root_canvas_is_rounded_not_refused() {
    let template = serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 200.2, "h": 99.6,
        "layers": [solid(1, "#ff0000", (200, 100), (0, 5))]
    });
    let frame = library_frame(template.to_string().as_bytes(), (200, 100), 0);
    for (x, y) in [(0, 0), (199, 0), (0, 99), (199, 99), (100, 50)] {
        let pixel = &frame[(y * 200 + x) * 4..(y * 200 + x) * 4 + 4];
        assert_eq!(pixel, [255, 0, 0, 255], "({x}, {y})");
    }
}

/// A 160×20 red bar at the centre of a 200×200 canvas, its layer rotated by `rotation`.
fn rotated_bar(rotation: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 200, "h": 200,
        "layers": [{"ddd": 0, "ind": 1, "ty": 4, "sr": 1, "ip": 0, "op": 30, "st": 0,
            "ks": {"o": {"a": 0, "k": 100}, "r": rotation,
                "p": {"a": 0, "k": [100, 100, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}},
            "shapes": [
                {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [160, 20]},
                    "r": {"a": 0, "k": 0}},
                {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100}, "r": 1}
            ]}]
    }))
    .unwrap()
}

fn alpha_at(frame: &[u8], (x, y): (usize, usize)) -> u8 {
    frame[(y * 200 + x) * 4 + 3]
}

/// An expression that gives a keyframed rotation one constant value bakes to a static
/// number (`"k": 90`), not a one-element array (`"k": [90]`, which rlottie 0.1 draws as
/// nothing): the bar stands upright, as lottie-web draws it.
#[test]
fn an_expression_constant_on_a_keyframed_scalar_bakes_to_a_number() {
    let rotation = serde_json::json!({"a": 1, "x": "90", "k": [
        {"t": 0, "s": [0], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
        {"t": 30, "s": [45]}]});
    let frame = library_frame(&rotated_bar(rotation), (200, 200), 10);
    // Upright: along the vertical axis, nothing along the horizontal one.
    assert_eq!(alpha_at(&frame, (100, 40)), 255);
    assert_eq!(alpha_at(&frame, (100, 160)), 255);
    assert_eq!(alpha_at(&frame, (40, 100)), 0);
    assert_eq!(alpha_at(&frame, (160, 100)), 0);
}

/// A precomposition of a red solid (its frames 0–14) then a blue one (15–29), shown by a
/// layer whose time remap is `tm`.
fn remapped_precomp(tm: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "assets": [{"id": "comp", "layers": [solid(1, "#ff0000", (100, 100), (0, 15)),
            solid(2, "#0000ff", (100, 100), (15, 30))]}],
        "layers": [{"ddd": 0, "ind": 1, "ty": 0, "refId": "comp", "w": 100, "h": 100,
            "sr": 1, "ip": 0, "op": 30, "st": 0, "tm": tm,
            "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 0, "k": [0, 0, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}}}]
    }))
    .unwrap()
}

/// A static time remap (`"tm": {"a": 0, "k": 0.8}`) holds the precomposition at 0.8 s on
/// every frame, as lottie-web shows it; rlottie ignores a static one, so it is lowered to a
/// held keyframe: the blue solid of the precomposition's frame 24, from the first frame on.
#[test]
fn a_static_time_remap_holds_its_time_on_every_frame() {
    let template = remapped_precomp(serde_json::json!({"a": 0, "k": 0.8}));
    for index in [0, 29] {
        let frame = library_frame(&template, (100, 100), index);
        assert_eq!(
            &frame[(50 * 100 + 50) * 4..][..4],
            [0, 0, 255, 255],
            "frame {index}"
        );
    }
}

/// A solid layer with an empty colour (`"sc": ""`) is painted black by lottie-web (its
/// canvas takes the empty string as no colour and keeps the default black fill).
#[test]
fn a_solid_without_a_colour_is_black() {
    let template = serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 100, "h": 100,
        "layers": [solid(1, "", (100, 100), (0, 5))]
    });
    let frame = library_frame(template.to_string().as_bytes(), (100, 100), 0);
    assert_eq!(&frame[(50 * 100 + 50) * 4..][..4], [0, 0, 0, 255]);
}

/// A 160×20 bar at the centre of a 200×200 canvas, its layer starting at frame 20 (`st`,
/// shown from frame 20) and rotated by `rotation`.
fn started_bar(rotation: Value) -> Vec<u8> {
    let mut template: Value = serde_json::from_slice(&rotated_bar(rotation)).unwrap();
    template["op"] = json!(60);
    template["layers"][0]["ip"] = json!(20);
    template["layers"][0]["op"] = json!(60);
    template["layers"][0]["st"] = json!(20);
    serde_json::to_vec(&template).unwrap()
}

/// A rotation from 0° at frame 20 to 90° at frame 60, linear.
fn quarter_turn(expression: Option<&str>) -> Value {
    let mut rotation = json!({"a": 1, "k": [
        {"t": 20, "s": [0], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
        {"t": 60, "s": [90]}]});
    if let Some(expression) = expression {
        rotation["x"] = json!(expression);
    }
    rotation
}

/// Whether the bar of `started_bar` lies at 45°: along the diagonal, not along either axis.
fn is_at_45_degrees(frame: &[u8]) -> bool {
    alpha_at(frame, (128, 128)) == 255
        && alpha_at(frame, (72, 72)) == 255
        && alpha_at(frame, (140, 100)) == 0
        && alpha_at(frame, (100, 140)) == 0
}

/// A layer's keyframe times are its composition's frames whatever its start time (`st`
/// shifts only a precomposition's contents): lottie-web (measured in Chromium with the
/// fidelity tool) and rlottie both show the bar at 45° at frame 40, halfway between its
/// keyframes at 20 and 60. An expression's `value` reads the keyframes the same way (it
/// used to subtract `st` and showed 0°).
#[test]
fn an_expressions_value_reads_keyframes_at_the_compositions_time() {
    let plain = library_frame(&started_bar(quarter_turn(None)), (200, 200), 40);
    assert!(is_at_45_degrees(&plain), "keyframes alone");
    let expression = quarter_turn(Some("$bm_rt = value;"));
    let frame = library_frame(&started_bar(expression), (200, 200), 40);
    assert!(is_at_45_degrees(&frame), "through an expression");
}

/// `key(n).time` is the keyframe's `t` in seconds, nothing added (lottie-web, measured as
/// above): keyframe 2 at frame 60 is 2 s, so `key(2).time * 22.5` turns the bar by 45° on
/// every frame (it used to add `st`: 2⅔ s, 60°).
#[test]
fn a_keys_time_is_its_frame_in_seconds() {
    let expression = quarter_turn(Some("$bm_rt = key(2).time * 22.5;"));
    for index in [25, 50] {
        let frame = library_frame(&started_bar(expression.clone()), (200, 200), index);
        assert!(is_at_45_degrees(&frame), "frame {index}");
    }
}
