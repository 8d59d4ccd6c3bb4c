//! Feature classes real files use that the shared corpus did not show (issue 25), each with
//! a template written from its description and checked against lottie-web's documented
//! behaviour.

use crate::helpers::library_frame;

/// A root canvas of fractional size (`"h": 99.6`, as some exporters write it) is rounded to
/// whole pixels, as asset and layer sizes are, instead of refusing the file: a solid covering
/// the rounded 200×100 canvas fills every corner of a 200×100 frame.
#[test]
fn a_fractional_root_canvas_is_rounded_not_refused() {
    let template = serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 200.2, "h": 99.6,
        "layers": [{"ddd": 0, "ind": 1, "ty": 1, "sc": "#ff0000", "sw": 200, "sh": 100,
            "sr": 1, "ip": 0, "op": 5, "st": 0,
            "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 0, "k": [0, 0, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}}}]
    });
    let frame = library_frame(template.to_string().as_bytes(), (200, 100), 0);
    for (x, y) in [(0, 0), (199, 0), (0, 99), (199, 99), (100, 50)] {
        let pixel = &frame[(y * 200 + x) * 4..(y * 200 + x) * 4 + 4];
        assert_eq!(pixel, [255, 0, 0, 255], "({x}, {y})");
    }
}
