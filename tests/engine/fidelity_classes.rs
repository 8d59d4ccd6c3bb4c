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

/// A shape layer at the centre of a `size` canvas drawing `shapes`, with transform `ks`
/// (its position added at the centre).
fn shape_layer(size: (u32, u32), mut ks: Value, shapes: Value) -> Vec<u8> {
    ks["p"] = json!({"a": 0, "k": [size.0 / 2, size.1 / 2, 0]});
    serde_json::to_vec(&json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": size.0, "h": size.1,
        "layers": [{"ddd": 0, "ind": 1, "ty": 4, "nm": "shape", "sr": 1, "ip": 0, "op": 30,
            "st": 0, "ks": ks, "shapes": shapes}]
    }))
    .unwrap()
}

/// The extent of opaque pixels (alpha ≥ 128) through the centre of a `width`×`height` frame:
/// (horizontal run, vertical run).
fn opaque_extent(frame: &[u8], (width, height): (usize, usize)) -> (usize, usize) {
    let alpha = |x: usize, y: usize| frame[(y * width + x) * 4 + 3];
    let across = (0..width).filter(|&x| alpha(x, height / 2) >= 128).count();
    let down = (0..height).filter(|&y| alpha(width / 2, y) >= 128).count();
    (across, down)
}

/// An independent cubic Bézier easing (bisection on x), for the expected sizes.
fn ease(x1: f64, y1: f64, x2: f64, y2: f64, x: f64) -> f64 {
    let cubic = |t: f64, p1: f64, p2: f64| {
        let u = 1.0 - t;
        3.0 * u * u * t * p1 + 3.0 * u * t * t * p2 + t * t * t
    };
    let (mut low, mut high) = (0.0, 1.0);
    for _ in 0..100 {
        let middle = (low + high) / 2.0;
        if cubic(middle, x1, x2) < x {
            low = middle;
        } else {
            high = middle;
        }
    }
    cubic((low + high) / 2.0, y1, y2)
}

/// A rectangle's size eased per axis (`"o": {"x": [0.8, 0]}`: slow start across, linear
/// down) grows each dimension on its own curve, as lottie-web draws it; rlottie alone eases
/// both on the first curve.
#[test]
fn keyframes_eased_per_axis_ease_each_axis_on_its_own_curve() {
    let size = json!({"a": 1, "k": [
        {"t": 0, "s": [20, 20], "o": {"x": [0.8, 0], "y": [0, 0]},
            "i": {"x": [1, 1], "y": [1, 1]}},
        {"t": 30, "s": [180, 180]}]});
    let shapes = json!([
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": size, "r": {"a": 0, "k": 0}},
        {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100}, "r": 1}]);
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let template = shape_layer((200, 200), ks, shapes);
    let frame = library_frame(&template, (200, 200), 15);
    let (across, down) = opaque_extent(&frame, (200, 200));
    let expected_across = 20.0 + 160.0 * ease(0.8, 0.0, 1.0, 1.0, 0.5);
    assert!(
        (across as f64 - expected_across).abs() <= 2.0,
        "{across} against {expected_across}"
    );
    assert!((down as f64 - 100.0).abs() <= 2.0, "{down}");
}

/// A horizontal gradient over a 200×40 rectangle across a 200×100 canvas: colour red → blue (stops at 0 and 1),
/// opacity 1 up to 0.5 then fading to 0 at 1: `stops` on the gradient's own offsets.
fn gradient_bar(stops: Value, count: u32) -> Vec<u8> {
    let shapes = json!([
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [200, 40]},
            "r": {"a": 0, "k": 0}},
        {"ty": "gf", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
            "s": {"a": 0, "k": [-100, 0]}, "e": {"a": 0, "k": [100, 0]},
            "g": {"p": count, "k": {"a": 0, "k": stops}}}]);
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    shape_layer((200, 100), ks, shapes)
}

/// Gradient opacity stops at offsets of their own are drawn as lottie-web draws them: colour
/// interpolated between the colour stops, opacity between the opacity stops. A quarter of
/// the way along, red and blue mix 3:1 at full opacity; three quarters along, opacity is
/// half and the colour still 1:3 (lottie-web in Chromium: (190, 0, 64) and, over white,
/// (160, 129, 224)). rlottie alone paired the 0.5 opacity stop with the blue end (a 1:1 mix
/// a quarter along) and kept purple towards the transparent end.
#[test]
fn gradient_opacity_stops_at_their_own_offsets_keep_the_colour_stops_colours() {
    let template = gradient_bar(json!([0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0.5, 1, 1, 0]), 2);
    let frame = library_frame(&template, (200, 100), 0);
    let pixel = |x: usize| &frame[(50 * 200 + x) * 4..][..4];
    let quarter = pixel(50);
    assert!(
        quarter[0].abs_diff(191) <= 4 && quarter[2].abs_diff(64) <= 4,
        "{quarter:?}"
    );
    assert_eq!(quarter[3], 255, "{quarter:?}");
    let three_quarters = pixel(150);
    assert!(three_quarters[3].abs_diff(128) <= 4, "{three_quarters:?}");
    // Colour and opacity interpolated apart (lottie-web's SVG), not premultiplied.
    assert!(
        three_quarters[0].abs_diff(64) <= 6 && three_quarters[2].abs_diff(191) <= 6,
        "{three_quarters:?}"
    );
}

/// A 100×100 red square at the centre of a 200×200 canvas, `skew`ed (sk, sa in degrees) by
/// its group's transform or by its layer's.
fn skewed_square((skew, axis): (f64, f64), on_layer: bool) -> Vec<u8> {
    let skew_of = |on: bool| {
        if on {
            json!({"sk": {"a": 0, "k": skew}, "sa": {"a": 0, "k": axis}})
        } else {
            json!({})
        }
    };
    let mut group_transform = json!({"ty": "tr", "p": {"a": 0, "k": [0, 0]},
        "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0},
        "o": {"a": 0, "k": 100}});
    let mut ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let target = if on_layer {
        &mut ks
    } else {
        &mut group_transform
    };
    if let (Some(target), Value::Object(skew)) = (target.as_object_mut(), skew_of(true)) {
        target.extend(skew);
    }
    let shapes = json!([{"ty": "gr", "it": [
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]},
            "r": {"a": 0, "k": 0}},
        {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100}, "r": 1},
        group_transform]}]);
    shape_layer((200, 200), ks, shapes)
}

/// Whether canvas point `(x, y)` lies inside the square skewed as lottie-web skews it
/// (`skewFromAxis(-sk, sa)`: `R(-sa)·Shear(-tan sk)·R(sa)`), by `margin` pixels or more
/// (`Some(true)`), outside by as much (`Some(false)`), or too near its edge to say.
fn inside_skewed_square((skew, axis): (f64, f64), (x, y): (f64, f64), margin: f64) -> Option<bool> {
    let (sin, cos) = axis.to_radians().sin_cos();
    let shear = -skew.to_radians().tan();
    // The inverse: R(-sa)·Shear(+tan sk)·R(sa) undoes it.
    let (px, py) = (x - 100.0, y - 100.0);
    let (rx, ry) = (cos * px - sin * py, sin * px + cos * py);
    let (sx, sy) = (rx - shear * ry, ry);
    let (ux, uy) = (cos * sx + sin * sy, -sin * sx + cos * sy);
    let distance = ux.abs().max(uy.abs()) - 50.0;
    // The edge's distance in the skewed picture is at most this much shorter.
    let stretch = 1.0 + shear.abs();
    if distance < -margin * stretch {
        Some(true)
    } else if distance > margin * stretch {
        Some(false)
    } else {
        None
    }
}

/// Skew, on a group's transform or a shape layer's, is drawn as lottie-web draws it (rlottie
/// alone ignores it): every pixel well inside the skewed square is red and opaque, every one
/// well outside is clear.
#[test]
fn skew_is_drawn_in_group_and_layer_transforms() {
    for (skew, on_layer) in [
        ((45.0, 0.0), false),
        ((30.0, 20.0), true),
        ((-25.0, 60.0), false),
    ] {
        let frame = library_frame(&skewed_square(skew, on_layer), (200, 200), 0);
        let mut checked = (0, 0);
        for y in (0..200).step_by(5) {
            for x in (0..200).step_by(5) {
                let alpha = frame[(y * 200 + x) * 4 + 3];
                match inside_skewed_square(skew, (x as f64 + 0.5, y as f64 + 0.5), 2.0) {
                    Some(true) => {
                        assert_eq!(alpha, 255, "({x}, {y}) of {skew:?} on layer {on_layer}");
                        checked.0 += 1;
                    }
                    Some(false) => {
                        assert_eq!(alpha, 0, "({x}, {y}) of {skew:?} on layer {on_layer}");
                        checked.1 += 1;
                    }
                    None => {}
                }
            }
        }
        assert!(checked.0 > 200 && checked.1 > 200, "{checked:?}");
    }
}

/// A 100×100 rectangle filling a 100×100 canvas, its fill `colour`, in a document of
/// Bodymovin `version`.
fn filled_canvas(version: &str, colour: Value) -> Vec<u8> {
    let shapes = json!([
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]},
            "r": {"a": 0, "k": 0}},
        {"ty": "fl", "c": {"a": 0, "k": colour}, "o": {"a": 0, "k": 100}, "r": 1}]);
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let mut template: Value = serde_json::from_slice(&shape_layer((100, 100), ks, shapes)).unwrap();
    template["v"] = json!(version);
    serde_json::to_vec(&template).unwrap()
}

/// Documents older than Bodymovin 4.1.9 wrote fill and stroke colours in 0..255; lottie-web
/// divides them by 255 (its `checkColors`): [128, 64, 0, 255] is brown there, not the yellow
/// that clamping each channel to 1 gives. A newer document's channels are 0..1 as written.
#[test]
fn colours_of_documents_older_than_4_1_9_are_in_0_to_255() {
    // rlottie truncates a channel (0.5 → 127): within one level.
    let near = |pixel: &[u8], expected: [u8; 4]| {
        pixel
            .iter()
            .zip(expected)
            .all(|(got, wanted)| got.abs_diff(wanted) <= 1)
    };
    let old = library_frame(
        &filled_canvas("4.1.8", json!([128, 64, 0, 255])),
        (100, 100),
        0,
    );
    let pixel = &old[(50 * 100 + 50) * 4..][..4];
    assert!(near(pixel, [128, 64, 0, 255]), "{pixel:?}");
    let new = library_frame(
        &filled_canvas("5.7.0", json!([0.5, 0.25, 0, 1])),
        (100, 100),
        0,
    );
    let pixel = &new[(50 * 100 + 50) * 4..][..4];
    assert!(near(pixel, [128, 64, 0, 255]), "{pixel:?}");
}

/// A text drawn in the template's own glyphs (`chars`: a 20×70 box for "I", advance 30, at
/// size 100) skips a character they lack, as lottie-web does (an empty glyph of no width),
/// instead of drawing the whole text in another font: "IJI" at size 100 shows two boxes,
/// the second one advance after the first.
#[test]
fn embedded_glyphs_skip_the_characters_they_lack() {
    let template = json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 200, "h": 100,
        "fonts": {"list": [{"fName": "Box-Regular", "fFamily": "Box", "fStyle": "Regular",
            "ascent": 70}]},
        "chars": [{"ch": "I", "size": 100, "style": "Regular", "w": 30, "fFamily": "Box",
            "data": {"shapes": [{"ty": "gr", "it": [{"ty": "sh", "ks": {"a": 0, "k": {"c": true,
                "v": [[0, 0], [20, 0], [20, -70], [0, -70]],
                "i": [[0, 0], [0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0], [0, 0]]}}}]}]}}],
        "layers": [{"ddd": 0, "ind": 1, "ty": 5, "nm": "t", "sr": 1, "ip": 0, "op": 5, "st": 0,
            "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [10, 85, 0]},
                "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}},
            "t": {"d": {"k": [{"s": {"s": 100, "f": "Box-Regular", "t": "IJI", "j": 0,
                "fc": [0, 0, 0]}, "t": 0}]}, "p": {}, "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}},
                "a": []}}]
    });
    let frame = library_frame(template.to_string().as_bytes(), (200, 100), 0);
    // Row 50: boxes at x 10..30 and 40..60 (the baseline at y 85, 70 tall).
    let alpha = |x: usize| frame[(50 * 200 + x) * 4 + 3];
    for x in [12, 28, 42, 58] {
        assert_eq!(alpha(x), 255, "x {x}");
    }
    for x in [35, 65, 75, 100, 150] {
        assert_eq!(alpha(x), 0, "x {x}");
    }
}

/// A square path of side `side` centred on the origin.
fn square_path(side: f64) -> Value {
    let h = side / 2.0;
    json!({"c": true, "v": [[-h, -h], [h, -h], [h, h], [-h, h]],
        "i": [[0, 0], [0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0], [0, 0]]})
}

/// A group named `name` of one path `Path 1` (`path`, a property) filled with `colour`, at
/// `position`.
fn path_group(name: &str, path: Value, colour: [f64; 4], position: [f64; 2]) -> Value {
    json!({"ty": "gr", "nm": name, "it": [
        {"ty": "sh", "nm": "Path 1", "ks": path},
        {"ty": "fl", "c": {"a": 0, "k": colour}, "o": {"a": 0, "k": 100}, "r": 1},
        {"ty": "tr", "p": {"a": 0, "k": position}, "a": {"a": 0, "k": [0, 0]},
            "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}]})
}

/// A path-valued expression is baked into path keyframes: Shape 2's path reads Shape 1's
/// (a square growing from 40 to 80 px over 30 frames), so at frame 15 both groups show a
/// 60 px square, red on the left and blue on the right, where Shape 2's own path is a 4 px
/// square that rlottie alone would draw.
#[test]
fn a_path_valued_expression_is_baked() {
    let growing = json!({"a": 1, "k": [
        {"t": 0, "s": [square_path(40.0)], "i": {"x": 1, "y": 1}, "o": {"x": 0, "y": 0}},
        {"t": 30, "s": [square_path(80.0)]}]});
    let mut reading = json!({"a": 0, "k": square_path(4.0)});
    reading["x"] = json!("$bm_rt = content('Shape 1').content('Path 1').path;");
    let shapes = json!([
        path_group("Shape 1", growing, [1.0, 0.0, 0.0, 1.0], [-50.0, 0.0]),
        path_group("Shape 2", reading, [0.0, 0.0, 1.0, 1.0], [50.0, 0.0])
    ]);
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let frame = library_frame(&shape_layer((200, 200), ks, shapes), (200, 200), 15);
    let pixel = |x: usize, y: usize| &frame[(y * 200 + x) * 4..][..4];
    for (centre, colour) in [(50, [255, 0, 0, 255]), (150, [0, 0, 255, 255])] {
        for (dx, dy) in [
            (-27i32, 0i32),
            (27, 0),
            (0, -27),
            (0, 27),
            (-27, -27),
            (27, 27),
        ] {
            let (x, y) = ((centre + dx) as usize, (100 + dy) as usize);
            assert_eq!(pixel(x, y), colour, "inside ({x}, {y})");
        }
        for (dx, dy) in [(-33i32, 0i32), (33, 0), (0, -33), (0, 33)] {
            let (x, y) = ((centre + dx) as usize, (100 + dy) as usize);
            assert_eq!(pixel(x, y)[3], 0, "outside ({x}, {y})");
        }
    }
}

/// A hostile path expression: a path past the fence's vertex limit keeps the property's own
/// path, with a warning; the baked path is never what rlottie sees. (The template's bound on
/// all baked vertices together is a unit test of `expressions::paths`.)
#[test]
fn a_path_expression_past_the_path_limits_keeps_the_static_path() {
    let mut path = json!({"a": 0, "k": square_path(4.0)});
    path["x"] = json!(
        "var p = []; for (var i = 0; i < 10001; i += 1) p.push([i % 100, i % 7]);\n\
         $bm_rt = createPath(p, [], [], true);"
    );
    let shapes = json!([path_group("Shape", path, [1.0, 0.0, 0.0, 1.0], [0.0, 0.0])]);
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let mut json: Value = serde_json::from_slice(&shape_layer((200, 200), ks, shapes)).unwrap();
    // Two frames: the limit, not the CPU budget, is what stops it.
    json["op"] = json!(2);
    json["layers"][0]["op"] = json!(2);
    let report = lottie_render::lottie::lowering::expressions::bake(&mut json, 30);
    assert_eq!(report.baked, 0);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("10001 vertices, more than 10000")),
        "{:?}",
        report.warnings
    );
    assert_eq!(
        json["layers"][0]["shapes"][0]["it"][0]["ks"]["k"],
        square_path(4.0)
    );
}
/// Black inside an alpha track matte is black and opaque, as lottie-web draws it: a black
/// solid matted (`tt: 1`) by an opaque white solid over its left half.
#[test]
fn black_inside_an_alpha_matte_stays_black_and_opaque() {
    let mut source = solid(1, "#ffffff", (50, 100), (0, 5));
    source["td"] = json!(1);
    let mut matted = solid(2, "#000000", (100, 100), (0, 5));
    matted["tt"] = json!(1);
    let template = json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 100, "h": 100,
        "layers": [source, matted]
    });
    let frame = library_frame(template.to_string().as_bytes(), (100, 100), 0);
    assert_eq!(&frame[(50 * 100 + 25) * 4..][..4], [0, 0, 0, 255], "inside");
    assert_eq!(frame[(50 * 100 + 75) * 4 + 3], 0, "outside");
    // Over white in an MP4 through a worker, as a user gets it: black, not (3, 3, 3).
    let dir = crate::helpers::tempdir();
    let path = dir.path().join("matte.json");
    std::fs::write(&path, template.to_string()).unwrap();
    let white = lottie_render::spec::Rgba::parse_hex("#ffffff").unwrap();
    let output = crate::helpers::with_background(
        crate::helpers::spec(lottie_render::spec::Format::Mp4, 30, 100, 100),
        white,
    );
    let (mp4, result) = crate::helpers::render_in_worker(
        &path,
        Default::default(),
        output,
        dir.path(),
        std::time::Duration::from_secs(60),
    );
    result.expect("the worker renders it");
    let decoded = crate::helpers::decode_rgba(&mp4, 100, 100);
    let pixel = &decoded[0][(50 * 100 + 25) * 4..][..3];
    assert!(pixel.iter().all(|&channel| channel <= 1), "{pixel:?}");
}

/// The report's warnings for `template`, as CreateTemplate's analysis makes them.
fn report_warnings(template: &[u8]) -> Vec<String> {
    let template = lottie_render::lottie::Template::parse(template).unwrap();
    lottie_render::lottie::report::InspectReport::new(&template)
        .unwrap()
        .warnings
}

/// An 80×80 red rectangle at the centre of a 100×100 canvas, `modifier` (a shape item) after
/// it in its list, on a layer of blend mode `bm`.
fn modified_rectangle(modifier: Option<Value>, bm: i64) -> Vec<u8> {
    let mut shapes = vec![json!({"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]},
        "s": {"a": 0, "k": [80, 80]}, "r": {"a": 0, "k": 0}})];
    shapes.extend(modifier);
    shapes.push(
        json!({"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100},
        "r": 1}),
    );
    let ks = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}});
    let mut template: Value =
        serde_json::from_slice(&shape_layer((100, 100), ks, Value::Array(shapes))).unwrap();
    template["layers"][0]["bm"] = json!(bm);
    serde_json::to_vec(&template).unwrap()
}

/// Round Corners on a rectangle is drawn as lottie-web draws it (the rectangle's own
/// roundness): with a radius of 30 the corner pixel (12, 12) lies outside the quarter circle
/// centred at (40, 40), the middle of the top edge inside. Nothing to warn about then.
#[test]
fn round_corners_on_a_rectangle_are_drawn() {
    let template = modified_rectangle(Some(json!({"ty": "rd", "r": {"a": 0, "k": 30}})), 0);
    let frame = library_frame(&template, (100, 100), 0);
    let alpha = |x: usize, y: usize| frame[(y * 100 + x) * 4 + 3];
    assert_eq!(alpha(12, 12), 0);
    assert_eq!(alpha(50, 12), 255);
    assert_eq!(alpha(30, 30), 255);
    assert!(report_warnings(&template).is_empty());
}

/// Every feature the renderer leaves undrawn is a warning in the report (each measured
/// undrawn through the library): blend modes, layer styles, the shape modifiers it ignores,
/// Round Corners it cannot lower, an animated skew.
#[test]
fn every_feature_the_renderer_does_not_draw_is_a_warning() {
    let cases = [
        (
            modified_rectangle(None, 1),
            "blend mode multiply (bm 1) is drawn as normal",
        ),
        (
            modified_rectangle(Some(json!({"ty": "pb", "a": {"a": 0, "k": 50}})), 0),
            "pucker & bloat",
        ),
        (
            modified_rectangle(Some(json!({"ty": "zz", "r": {"a": 0, "k": 5}})), 0),
            "zig zag",
        ),
        (
            modified_rectangle(Some(json!({"ty": "op", "a": {"a": 0, "k": 10}})), 0),
            "offset path",
        ),
        (
            modified_rectangle(Some(json!({"ty": "tw", "a": {"a": 0, "k": 90}})), 0),
            "twist",
        ),
    ];
    for (template, warning) in cases {
        let warnings = report_warnings(&template);
        assert!(
            warnings.iter().any(|w| w.contains(warning)),
            "{warning}: {warnings:?}"
        );
    }
    let mut styled: Value = serde_json::from_slice(&modified_rectangle(None, 0)).unwrap();
    styled["layers"][0]["sy"] = json!([{"ty": 1, "nm": "Drop Shadow"}]);
    let warnings = report_warnings(&serde_json::to_vec(&styled).unwrap());
    assert!(
        warnings.iter().any(|w| w.contains("layer styles")),
        "{warnings:?}"
    );
    let mut skewing: Value = serde_json::from_slice(&modified_rectangle(None, 0)).unwrap();
    skewing["layers"][0]["ks"]["sk"] = json!({"a": 1, "k": [
        {"t": 0, "s": [0], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
        {"t": 10, "s": [30]}]});
    let warnings = report_warnings(&serde_json::to_vec(&skewing).unwrap());
    assert!(
        warnings.iter().any(|w| w.contains("an animated skew")),
        "{warnings:?}"
    );
    // A rounded rectangle's Round Corners cannot move into its roundness.
    let mut rounded: Value = serde_json::from_slice(&modified_rectangle(
        Some(json!({"ty": "rd", "r": {"a": 0, "k": 30}})),
        0,
    ))
    .unwrap();
    rounded["layers"][0]["shapes"][0]["r"] = json!({"a": 0, "k": 5});
    let warnings = report_warnings(&serde_json::to_vec(&rounded).unwrap());
    assert!(
        warnings.iter().any(|w| w.contains("round corners (rd)")),
        "{warnings:?}"
    );
}
