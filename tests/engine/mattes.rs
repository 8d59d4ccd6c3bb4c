//! Mattes and masks drawn as lottie-web draws them (see `lottie::lowering::mattes`). Each template is a
//! 100×100 canvas of plain geometry; frames are rendered by the library directly (no codec)
//! and every pixel is checked against where the geometry puts it: inside a circle and a
//! square computed from the template's own numbers, with a margin for antialiased edges.

use crate::helpers::library_frame;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use serde_json::{json, Value};

const SIZE: u32 = 100;
/// Pixels this close to an edge are antialiased: not checked.
const EDGE_MARGIN: f64 = 1.5;

/// The matte circle: centre and radius.
const CIRCLE: (f64, f64, f64) = (40.0, 40.0, 25.0);
/// The matted square: left, top, side.
const SQUARE: (f64, f64, f64) = (40.0, 40.0, 45.0);

const RED: [u8; 3] = [255, 0, 0];
const GREEN: [u8; 3] = [0, 255, 0];

/// Straight RGBA of frame 0 at the template's size.
fn frame(template: &Value) -> Vec<[u8; 4]> {
    let rgba = library_frame(template.to_string().as_bytes(), (SIZE, SIZE), 0);
    rgba.chunks(4)
        .map(|pixel| [pixel[0], pixel[1], pixel[2], pixel[3]])
        .collect()
}

fn transform(position: [f64; 2]) -> Value {
    json!({
        "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [position[0], position[1], 0]},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}
    })
}

/// A shape layer drawing `shape` (an `el` or `rc`) filled with `color`, moved by `position`.
fn shape_layer(ind: i64, shape: Value, color: [u8; 3], position: [f64; 2]) -> Value {
    let rgb: Vec<f64> = color.iter().map(|c| f64::from(*c) / 255.0).collect();
    json!({
        "ddd": 0, "ind": ind, "ty": 4, "nm": format!("layer {ind}"), "sr": 1,
        "ks": transform(position), "ao": 0,
        "shapes": [{"ty": "gr", "it": [
            shape,
            {"ty": "fl", "c": {"a": 0, "k": [rgb[0], rgb[1], rgb[2], 1]}, "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
        ]}],
        "ip": 0, "op": 30, "st": 0, "bm": 0
    })
}

/// The circle, drawn around the layer origin and moved to [`CIRCLE`] by the layer transform
/// (so a lowering that loses the transform draws it elsewhere).
fn circle_layer(ind: i64, color: [u8; 3]) -> Value {
    let (x, y, radius) = CIRCLE;
    let ellipse = json!({"ty": "el", "d": 1, "s": {"a": 0, "k": [radius * 2.0, radius * 2.0]}, "p": {"a": 0, "k": [0, 0]}});
    shape_layer(ind, ellipse, color, [x, y])
}

/// The square, drawn around the layer origin and moved to [`SQUARE`] by the layer transform.
fn square_layer(ind: i64, color: [u8; 3]) -> Value {
    let (left, top, side) = SQUARE;
    let rect = json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": [side, side]}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}});
    shape_layer(ind, rect, color, [left + side / 2.0, top + side / 2.0])
}

fn with(mut layer: Value, key: &str, value: Value) -> Value {
    layer[key] = value;
    layer
}

fn animation(layers: Vec<Value>, assets: Vec<Value>) -> Value {
    json!({"v": "5.9.0", "fr": 30, "ip": 0, "op": 30, "w": SIZE, "h": SIZE, "layers": layers, "assets": assets})
}

/// The template's layers inside a precomp of the canvas size.
fn in_precomp(layers: Vec<Value>) -> Value {
    let precomp = json!({
        "ddd": 0, "ind": 1, "ty": 0, "nm": "precomp", "refId": "inner", "sr": 1,
        "ks": transform([0.0, 0.0]), "w": SIZE, "h": SIZE, "ip": 0, "op": 30, "st": 0
    });
    animation(
        vec![precomp],
        vec![json!({"id": "inner", "layers": layers})],
    )
}

/// Signed distances (negative inside) of a pixel centre to the circle and the square.
fn distances(index: usize) -> (f64, f64) {
    let (x, y) = (
        (index % SIZE as usize) as f64 + 0.5,
        (index / SIZE as usize) as f64 + 0.5,
    );
    let (cx, cy, radius) = CIRCLE;
    let circle = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt() - radius;
    let (left, top, side) = SQUARE;
    let square = (left - x)
        .max(x - (left + side))
        .max(top - y)
        .max(y - (top + side));
    (circle, square)
}

/// What a pixel must be.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    Color([u8; 3]),
    Transparent,
    /// On an edge: not checked.
    Either,
}

/// Opaque (but for antialiasing near an edge) and of `color` (but for rounding).
fn close_to(pixel: &[u8; 4], color: [u8; 3]) -> bool {
    pixel[3] >= 250 && (0..3).all(|c| pixel[c].abs_diff(color[c]) <= 8)
}

/// Checks every pixel against `expected(circle distance, square distance)`; answers how many
/// pixels were coloured as expected (so a test can also require that something was drawn).
fn check(pixels: &[[u8; 4]], expected: impl Fn(f64, f64) -> Expected) -> usize {
    let mut coloured = 0;
    for (index, pixel) in pixels.iter().enumerate() {
        let (circle, square) = distances(index);
        if on_edge(circle) || on_edge(square) {
            continue;
        }
        match expected(circle, square) {
            Expected::Color(color) => {
                let close = pixel[3] >= 250 && (0..3).all(|c| pixel[c].abs_diff(color[c]) <= 8);
                assert!(
                    close,
                    "pixel ({}, {}) should be {color:?}, is {pixel:?}",
                    index % SIZE as usize,
                    index / SIZE as usize
                );
                coloured += 1;
            }
            Expected::Transparent => assert!(
                pixel[3] <= 5,
                "pixel ({}, {}) should be transparent, is {pixel:?}",
                index % SIZE as usize,
                index / SIZE as usize
            ),
            Expected::Either => {}
        }
    }
    coloured
}

/// Pixels of the circle ∩ square region off their edges (computed, not rendered).
fn intersection_area() -> usize {
    (0..(SIZE * SIZE) as usize)
        .filter(|&index| {
            let (circle, square) = distances(index);
            !on_edge(circle) && !on_edge(square) && circle < 0.0 && square < 0.0
        })
        .count()
}

/// Checks that `template` shows the red square where it meets the circle and nothing
/// elsewhere.
fn assert_shows_only_the_intersection(template: &Value) {
    let coloured = check(&frame(template), |circle, square| {
        if circle < 0.0 && square < 0.0 {
            Expected::Color(RED)
        } else {
            Expected::Transparent
        }
    });
    assert_eq!(coloured, intersection_area());
}

fn on_edge(distance: f64) -> bool {
    distance.abs() < EDGE_MARGIN
}

#[test]
fn a_square_matted_by_a_circle_inside_a_precomp_shows_only_their_intersection() {
    let template = in_precomp(vec![
        with(circle_layer(1, [0, 0, 255]), "td", json!(1)),
        with(square_layer(2, RED), "tt", json!(1)),
    ]);
    assert_shows_only_the_intersection(&template);
}

#[test]
fn an_inverted_matte_shows_the_square_outside_the_circle() {
    let template = in_precomp(vec![
        with(circle_layer(1, [0, 0, 255]), "td", json!(1)),
        with(square_layer(2, RED), "tt", json!(2)),
    ]);
    let coloured = check(&frame(&template), |circle, square| {
        if square < 0.0 && circle > 0.0 {
            Expected::Color(RED)
        } else {
            Expected::Transparent
        }
    });
    assert!(
        coloured > 500,
        "only {coloured} pixels of square minus circle"
    );
}

#[test]
fn a_luma_matte_of_a_white_circle_shows_the_intersection_at_the_top_level() {
    let template = animation(
        vec![
            with(circle_layer(1, [255, 255, 255]), "td", json!(1)),
            with(square_layer(2, RED), "tt", json!(3)),
        ],
        vec![],
    );
    assert_shows_only_the_intersection(&template);
}

#[test]
fn a_matte_parent_names_a_source_that_is_not_directly_above() {
    // Bodymovin 5.8+: the matted square names its matte by index (`tp`); a green layer sits
    // between them and must draw normally, above the matted square.
    let green_bar = shape_layer(
        3,
        json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": [100, 10]}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}}),
        GREEN,
        [50.0, 5.0],
    );
    let template = animation(
        vec![
            with(circle_layer(1, [0, 0, 255]), "td", json!(1)),
            green_bar,
            with(with(square_layer(2, RED), "tt", json!(1)), "tp", json!(1)),
        ],
        vec![],
    );
    let pixels = frame(&template);
    let coloured = check(&pixels, |circle, square| {
        if circle < 0.0 && square < 0.0 {
            Expected::Color(RED)
        } else {
            Expected::Either
        }
    });
    assert_eq!(coloured, intersection_area());
    // The bar (y 0..10) is green; nothing else outside the intersection is drawn: the
    // circle, a matte source, never shows.
    for (index, pixel) in pixels.iter().enumerate() {
        let (x, y) = (index % SIZE as usize, index / SIZE as usize);
        let (circle, square) = distances(index);
        if y < 9 && (1..99).contains(&x) {
            assert_eq!(pixel[..3], GREEN, "bar pixel ({x}, {y})");
        } else if y > 11 && !(circle < EDGE_MARGIN && square < EDGE_MARGIN) {
            assert!(
                pixel[3] <= 5,
                "pixel ({x}, {y}) should be transparent, is {pixel:?}"
            );
        }
    }
}

#[test]
fn a_matte_source_with_no_matted_layer_below_is_not_drawn() {
    let template = animation(
        vec![
            with(circle_layer(1, [0, 0, 255]), "td", json!(1)),
            square_layer(2, RED),
        ],
        vec![],
    );
    let coloured = check(&frame(&template), |_, square| {
        if square < 0.0 {
            Expected::Color(RED)
        } else {
            Expected::Transparent
        }
    });
    assert!(coloured > 1500, "only {coloured} square pixels");
}

/// A mask of `mode` covering the left half of the canvas, expanded by `expansion`.
fn left_half_mask(mode: &str, expansion: f64) -> Value {
    json!({
        "inv": false, "mode": mode, "o": {"a": 0, "k": 100}, "x": {"a": 0, "k": expansion},
        "pt": {"a": 0, "k": {"c": true, "i": [[0, 0], [0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0], [0, 0]],
            "v": [[0, 0], [50, 0], [50, 100], [0, 100]]}}
    })
}

/// A red canvas-filling layer with `masks` (mask paths are in layer space: the layer is
/// not moved, so they are in canvas space too).
fn masked_canvas(masks: Vec<Value>) -> Value {
    let rect = json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": [100, 100]}, "p": {"a": 0, "k": [50, 50]}, "r": {"a": 0, "k": 0}});
    let layer = shape_layer(1, rect, RED, [0.0, 0.0]);
    let layer = with(layer, "hasMask", json!(true));
    animation(vec![with(layer, "masksProperties", json!(masks))], vec![])
}

/// Asserts red on the left half (x < 50) and transparent on the right.
fn left_half_only(pixels: &[[u8; 4]]) {
    for (index, pixel) in pixels.iter().enumerate() {
        let x = (index % SIZE as usize) as f64 + 0.5;
        if x < 50.0 - EDGE_MARGIN {
            assert_eq!(
                *pixel,
                [255, 0, 0, 255],
                "pixel {index} left of the mask edge"
            );
        } else if x > 50.0 + EDGE_MARGIN {
            assert_eq!(pixel[3], 0, "pixel {index} right of the mask edge");
        }
    }
}

#[test]
fn a_mask_of_mode_none_does_not_hide_its_layer() {
    let pixels = frame(&masked_canvas(vec![left_half_mask("n", 0.0)]));
    assert!(pixels.iter().all(|pixel| *pixel == [255, 0, 0, 255]));
    // Beside an add mask, the none mask changes nothing.
    left_half_only(&frame(&masked_canvas(vec![
        left_half_mask("a", 0.0),
        left_half_mask("n", 0.0),
    ])));
}

#[test]
fn lighten_and_darken_masks_add_their_path_as_lottie_web_does() {
    for mode in ["l", "d"] {
        left_half_only(&frame(&masked_canvas(vec![left_half_mask(mode, 0.0)])));
    }
}

#[test]
fn mask_expansion_is_reported_as_not_drawn() {
    let report = |template: &Value| {
        let template = Template::parse(template.to_string().as_bytes()).unwrap();
        InspectReport::new(&template).unwrap().warnings
    };
    let expanded = report(&masked_canvas(vec![left_half_mask("a", 12.0)]));
    assert!(
        expanded.iter().any(|w| w.contains("mask expansion")),
        "{expanded:?}"
    );
    let plain = report(&masked_canvas(vec![left_half_mask("a", 0.0)]));
    assert!(!plain.iter().any(|w| w.contains("mask")), "{plain:?}");
}

#[test]
fn a_text_layer_is_a_matte_source_like_a_shape_layer() {
    // The template's own glyph for "I" is a 20×70 box (in units of a 100-point font) standing
    // on the baseline: at size 100 with its origin at (40, 80) it covers x 40..60, y 10..80.
    // The text lowering keeps `td` on the glyph layer, so the red upper half of the canvas
    // below shows through the letter only: x 40..60, y 10..50.
    let text = json!({
        "ddd": 0, "ind": 1, "ty": 5, "nm": "letters", "sr": 1, "td": 1,
        "ks": transform([40.0, 80.0]), "ip": 0, "op": 30, "st": 0,
        "t": {"d": {"k": [{"s": {"s": 100, "f": "Box-Regular", "t": "I", "j": 0, "fc": [0, 0, 0]}, "t": 0}]},
              "p": {}, "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}}, "a": []}
    });
    let upper_half = json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": [100, 50]}, "p": {"a": 0, "k": [50, 25]}, "r": {"a": 0, "k": 0}});
    let matted = with(shape_layer(2, upper_half, RED, [0.0, 0.0]), "tt", json!(1));
    let mut template = animation(vec![text, matted], vec![]);
    template["fonts"] = json!({"list": [{"fName": "Box-Regular", "fFamily": "Box", "fStyle": "Regular", "ascent": 70}]});
    template["chars"] = json!([{"ch": "I", "size": 100, "style": "Regular", "w": 30, "fFamily": "Box",
        "data": {"shapes": [{"ty": "gr", "it": [{"ty": "sh", "ks": {"a": 0, "k": {"c": true,
            "v": [[0, 0], [20, 0], [20, -70], [0, -70]],
            "i": [[0, 0], [0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0], [0, 0]]}}}]}]}}]);
    let mut red = 0;
    for (index, pixel) in frame(&template).iter().enumerate() {
        let (x, y) = (
            (index % SIZE as usize) as f64 + 0.5,
            (index / SIZE as usize) as f64 + 0.5,
        );
        if [x - 40.0, x - 60.0, y - 10.0, y - 50.0]
            .iter()
            .any(|distance| on_edge(*distance))
        {
            continue;
        }
        if (40.0..60.0).contains(&x) && (10.0..50.0).contains(&y) {
            assert!(close_to(pixel, RED), "letter pixel ({x}, {y}) is {pixel:?}");
            red += 1;
        } else {
            assert!(
                pixel[3] <= 5,
                "pixel ({x}, {y}) outside the letter is {pixel:?}"
            );
        }
    }
    assert!(red > 500, "only {red} pixels of the letter");
}

// Alpha mattes made masks (`lottie::lowering::mattes::as_masks`): rlottie left the inside of
// an alpha matte at alpha 251 (250 under two mattes), so what lies beneath showed through.
// Each template puts an opaque white solid beneath black under mattes; inside, the pixels
// must be black and opaque exactly, as lottie-web draws them.

const WHITE: [u8; 4] = [255, 255, 255, 255];
const BLACK: [u8; 4] = [0, 0, 0, 255];

/// A white solid filling the canvas, at the bottom.
fn white_solid(ind: i64) -> Value {
    json!({"ddd": 0, "ind": ind, "ty": 1, "nm": "white", "sr": 1, "ks": transform([0.0, 0.0]),
           "sc": "#ffffff", "sw": SIZE, "sh": SIZE, "ip": 0, "op": 30, "st": 0})
}

fn rectangle(size: [f64; 2]) -> Value {
    json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": size}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}})
}

/// A black square of side 50 around its origin, scaled 200 % about it at the canvas centre:
/// it covers the canvas, and a mask must be drawn in its own (half-size) space.
fn black_canvas(ind: i64) -> Value {
    let mut layer = shape_layer(ind, rectangle([50.0, 50.0]), [0, 0, 0], [50.0, 50.0]);
    layer["ks"]["s"] = json!({"a": 0, "k": [200, 200, 100]});
    layer
}

/// Checks every pixel of frame `index` off the edges that `inside(x, y)` (pixel centres)
/// draws: black inside, white outside, exactly. `edges` are the lines x = e or y = e to skip.
fn assert_black_inside(template: &Value, index: u32, inside: impl Fn(f64, f64) -> Option<bool>) {
    let rgba = library_frame(template.to_string().as_bytes(), (SIZE, SIZE), index);
    let mut black = 0;
    for (pixel_index, pixel) in rgba.chunks(4).enumerate() {
        let (x, y) = (
            (pixel_index % SIZE as usize) as f64 + 0.5,
            (pixel_index / SIZE as usize) as f64 + 0.5,
        );
        let Some(within) = inside(x, y) else { continue };
        let expected = if within { BLACK } else { WHITE };
        assert_eq!(pixel, expected, "frame {index}, pixel ({x}, {y})");
        black += usize::from(within);
    }
    assert!(black > 300, "frame {index}: only {black} black pixels");
}

/// Inside the box `left..right` × `top..bottom`, `None` within the edge margin.
fn in_box(x: f64, y: f64, (left, top, right, bottom): (f64, f64, f64, f64)) -> Option<bool> {
    let distance = (left - x).max(x - right).max(top - y).max(y - bottom);
    (!on_edge(distance)).then_some(distance < 0.0)
}

#[test]
fn black_under_an_alpha_matte_inside_a_matted_precomp_is_opaque_black_over_white() {
    // Inside the precomp, a rectangle 80×80 at (50, 50) mattes the black canvas: 10..90.
    let inner = vec![
        with(
            shape_layer(1, rectangle([80.0, 80.0]), [0, 0, 255], [50.0, 50.0]),
            "td",
            json!(1),
        ),
        with(black_canvas(2), "tt", json!(1)),
    ];
    // Above, a 60×100 rectangle mattes the precomp, moved to x 20..80 by its own position
    // (40, 50) and its parent's (10, 0): a null layer listed below everything.
    let outer_matte = with(
        with(
            shape_layer(1, rectangle([60.0, 100.0]), [255, 255, 255], [40.0, 50.0]),
            "td",
            json!(1),
        ),
        "parent",
        json!(10),
    );
    let precomp = json!({
        "ddd": 0, "ind": 2, "ty": 0, "nm": "precomp", "refId": "inner", "sr": 1, "tt": 1,
        "ks": transform([0.0, 0.0]), "w": SIZE, "h": SIZE, "ip": 0, "op": 30, "st": 0
    });
    let null = json!({"ddd": 0, "ind": 10, "ty": 3, "nm": "mover", "sr": 1,
                      "ks": transform([10.0, 0.0]), "ip": 0, "op": 30, "st": 0});
    let template = animation(
        vec![outer_matte, precomp, white_solid(3), null],
        vec![json!({"id": "inner", "layers": inner})],
    );
    assert_black_inside(&template, 0, |x, y| in_box(x, y, (20.0, 10.0, 80.0, 90.0)));
}

#[test]
fn black_outside_an_inverted_alpha_matte_is_opaque_black_over_white() {
    let template = animation(
        vec![
            with(circle_layer(1, [0, 0, 255]), "td", json!(1)),
            with(black_canvas(2), "tt", json!(2)),
            white_solid(3),
        ],
        vec![],
    );
    let (cx, cy, radius) = CIRCLE;
    assert_black_inside(&template, 0, |x, y| {
        let distance = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt() - radius;
        (!on_edge(distance)).then_some(distance > 0.0)
    });
}

#[test]
fn a_moving_alpha_matte_over_a_moving_layer_cuts_where_the_geometry_puts_it() {
    // A 20-wide band moving linearly from x = 10 to x = 90 over frames 0..30, matting the
    // black canvas, which itself drifts 10 down over the same time (still covering it).
    let linear = |from: [f64; 2], to: [f64; 2]| {
        json!({"a": 1, "k": [
            {"t": 0, "s": [from[0], from[1], 0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
            {"t": 30, "s": [to[0], to[1], 0]}]})
    };
    let mut band = shape_layer(1, rectangle([20.0, 100.0]), [0, 0, 255], [0.0, 0.0]);
    band["ks"]["p"] = linear([10.0, 50.0], [90.0, 50.0]);
    let mut matted = black_canvas(2);
    matted["ks"]["p"] = linear([50.0, 50.0], [50.0, 60.0]);
    matted["ks"]["s"] = json!({"a": 0, "k": [250, 250, 100]});
    let template = animation(
        vec![
            with(band, "td", json!(1)),
            with(matted, "tt", json!(1)),
            white_solid(3),
        ],
        vec![],
    );
    for frame in [3, 15, 27] {
        let centre = 10.0 + 80.0 * f64::from(frame) / 30.0;
        assert_black_inside(&template, frame, |x, y| {
            in_box(x, y, (centre - 10.0, -10.0, centre + 10.0, 110.0))
        });
    }
}

#[test]
fn a_half_transparent_matte_stays_a_matte_and_lets_half_the_white_through() {
    // lottie-web multiplies by the matte's alpha: black at 50 % over white is grey 127.5.
    let mut matte = shape_layer(1, rectangle([60.0, 60.0]), [0, 0, 255], [50.0, 50.0]);
    matte["shapes"][0]["it"][1]["o"] = json!({"a": 0, "k": 50});
    let template = animation(
        vec![
            with(matte, "td", json!(1)),
            with(black_canvas(2), "tt", json!(1)),
            white_solid(3),
        ],
        vec![],
    );
    let rgba = library_frame(template.to_string().as_bytes(), (SIZE, SIZE), 0);
    for (index, pixel) in rgba.chunks(4).enumerate() {
        let (x, y) = (
            (index % SIZE as usize) as f64 + 0.5,
            (index / SIZE as usize) as f64 + 0.5,
        );
        match in_box(x, y, (20.0, 20.0, 80.0, 80.0)) {
            Some(true) => assert!(
                pixel[3] == 255 && pixel[..3].iter().all(|c| c.abs_diff(128) <= 3),
                "({x}, {y}) is {pixel:?}"
            ),
            Some(false) => assert_eq!(pixel, WHITE, "({x}, {y})"),
            None => {}
        }
    }
}

/// Layers of every composition of `json` answering `count`.
fn count_layers(json: &Value, count: impl Fn(&Value) -> bool) -> usize {
    let lists = std::iter::once(&json["layers"]).chain(
        json["assets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|asset| &asset["layers"]),
    );
    lists
        .filter_map(Value::as_array)
        .flatten()
        .filter(|layer| count(layer))
        .count()
}

#[test]
fn the_corpus_mattes_that_masks_draw_alike_become_masks() {
    // (file, mattes made masks, mattes left): mattes-22's mattes fill two paths each.
    for (file, masked, left) in [
        ("gradient-radial-mattes-100fps.json", 12, 0),
        ("heavy-tractor-263-layers.json", 3, 0),
        ("masks-mattes-bell-precomp.json", 1, 0),
        ("mattes-22-track-mattes.json", 0, 11),
    ] {
        let bytes = std::fs::read(crate::helpers::corpus(file)).unwrap();
        let mut json = Template::parse(&bytes).unwrap().json;
        lottie_render::lottie::lowering::mattes::lower_mattes_and_masks(&mut json, 60);
        let made_masks = count_layers(&json, |layer| {
            layer["masksProperties"]
                .as_array()
                .is_some_and(|masks| masks.iter().any(|mask| mask["nm"] == "track matte"))
        });
        let mattes_left = count_layers(&json, |layer| layer["tt"].as_i64().unwrap_or(0) != 0);
        assert_eq!((made_masks, mattes_left), (masked, left), "{file}");
    }
}
