//! Text animators lowered to per-glyph groups: rendered by the library directly (real
//! rlottie, no codec), with expectations computed from the template: which glyph a range
//! selector covers (glyph boxes from the font's own advances, read with ab_glyph), the
//! opacity lottie-web's selector formula gives at a frame, and the offset a position
//! animator adds.

use crate::helpers::{library_frame, sans_font, text_layer_template};
use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use lottie_render::lottie::lowering::text::animators::MAX_ANIMATOR_SAMPLES;
use lottie_render::lottie::lowering::text::fonts::BUNDLED_FONT;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use serde_json::{json, Value};

const WIDTH: u32 = 400;
const HEIGHT: u32 = 200;
const SIZE: f64 = 80.0;
const ORIGIN: [f64; 2] = [40.0, 130.0];

/// A 400×200, 30 fps template of one left-aligned black text at `ORIGIN` with `animators`,
/// lasting `frames`.
fn template(text: &str, animators: Value, frames: u32) -> Vec<u8> {
    let document = json!({"s": SIZE, "f": "Sans", "t": text, "j": 0, "tr": 0, "lh": SIZE * 1.2,
        "ls": 0, "fc": [0, 0, 0]});
    text_layer_template(
        (WIDTH, HEIGHT),
        frames,
        sans_font(),
        ORIGIN,
        document,
        animators,
    )
}

/// Straight RGBA of frame `frame` (30 fps output, the template's own frames).
fn rgba(template: &[u8], frame: u32) -> Vec<u8> {
    library_frame(template, (WIDTH, HEIGHT), frame)
}

/// The x range of each letter of `text` (identical letters: no kerning between them), from
/// the font's advances.
fn letter_columns(text: &str) -> Vec<(f64, f64)> {
    let font = FontRef::try_from_slice(BUNDLED_FONT).unwrap();
    let scaled = font.as_scaled(PxScale::from(
        SIZE as f32 * font.height_unscaled() / font.units_per_em().unwrap(),
    ));
    let mut x = ORIGIN[0];
    text.chars()
        .map(|character| {
            let advance = f64::from(scaled.h_advance(font.glyph_id(character)));
            let column = (x, x + advance);
            x += advance;
            column
        })
        .collect()
}

/// Pixels (r, g, b, a) of inked pixels (alpha ≥ 200) with x in `columns`, shrunk by 2 px.
fn inked_in(rgba: &[u8], columns: (f64, f64)) -> Vec<[u8; 4]> {
    let (from, to) = (columns.0 as u32 + 2, columns.1 as u32 - 2);
    let mut found = Vec::new();
    for y in 0..HEIGHT {
        for x in from..to.min(WIDTH) {
            let index = ((y * WIDTH + x) * 4) as usize;
            let pixel = [
                rgba[index],
                rgba[index + 1],
                rgba[index + 2],
                rgba[index + 3],
            ];
            if pixel[3] >= 200 {
                found.push(pixel);
            }
        }
    }
    found
}

#[test]
fn a_range_selector_colours_only_the_glyph_it_covers() {
    // Three letters; start 33.3 %, end 66.7 % of them: the second only (lottie-web's square
    // selector gives 1 there, 0 beside).
    let animators = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1, "rn": 0,
              "s": {"a": 0, "k": 100.0 / 3.0}, "e": {"a": 0, "k": 200.0 / 3.0},
              "a": {"a": 0, "k": 100}, "xe": {"a": 0, "k": 0}, "ne": {"a": 0, "k": 0}},
        "a": {"fc": {"a": 0, "k": [1, 0, 0, 1]}}
    }]);
    let pixels = rgba(&template("HHH", animators, 30), 0);
    let columns = letter_columns("HHH");
    for (index, columns) in columns.into_iter().enumerate() {
        let inked = inked_in(&pixels, columns);
        assert!(
            inked.len() > 200,
            "glyph {index} is drawn: {} px",
            inked.len()
        );
        let red = inked
            .iter()
            .filter(|p| p[0] > 200 && p[1] < 60 && p[2] < 60)
            .count();
        let black = inked
            .iter()
            .filter(|p| p[0] < 60 && p[1] < 60 && p[2] < 60)
            .count();
        if index == 1 {
            assert!(
                red * 10 >= inked.len() * 9,
                "glyph 2 is red: {red} of {}",
                inked.len()
            );
        } else {
            assert!(
                black * 10 >= inked.len() * 9,
                "glyph {} keeps black: {black} of {}",
                index + 1,
                inked.len()
            );
        }
    }
}

#[test]
fn an_opacity_animator_fades_a_glyph_as_the_selectors_formula_says() {
    // One letter, opacity 0 where selected; the start runs linearly 0 → 100 % over frames
    // 0..30. lottie-web's square selector: mult = 1 − s (s in letters = frame / 30), and
    // opacity = 1 + (0 · mult − 1) · mult = 1 − mult = frame / 30.
    let animators = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1, "rn": 0,
              "s": {"a": 1, "k": [
                  {"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
                  {"t": 30, "s": [100]}]},
              "a": {"a": 0, "k": 100}},
        "a": {"o": {"a": 0, "k": 0}}
    }]);
    let template = template("H", animators, 60);
    for frame in [6u32, 15, 24] {
        let pixels = rgba(&template, frame);
        let strongest = pixels.chunks(4).map(|p| p[3]).max().unwrap_or(0);
        let expected = 255.0 * f64::from(frame) / 30.0;
        assert!(
            (f64::from(strongest) - expected).abs() <= 3.0,
            "frame {frame}: alpha {strongest}, expected {expected:.1}"
        );
    }
    // Past the animation, the letter is fully shown.
    let strongest = rgba(&template, 45)
        .chunks(4)
        .map(|p| p[3])
        .max()
        .unwrap_or(0);
    assert_eq!(strongest, 255);
}

fn ink_bounds(pixels: &[u8]) -> (u32, u32, u32, u32) {
    let mut bounds = (u32::MAX, u32::MAX, 0, 0);
    for (index, pixel) in pixels.chunks(4).enumerate() {
        if pixel[3] >= 128 {
            let (x, y) = (index as u32 % WIDTH, index as u32 / WIDTH);
            bounds = (
                bounds.0.min(x),
                bounds.1.min(y),
                bounds.2.max(x),
                bounds.3.max(y),
            );
        }
    }
    bounds
}

#[test]
fn a_position_animator_moves_the_selected_glyphs_by_its_offset() {
    let moved = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1, "a": {"a": 0, "k": 100}},
        "a": {"p": {"a": 0, "k": [30, 20, 0]}}
    }]);
    let still = json!([]);
    let before = ink_bounds(&rgba(&template("HI", still, 30), 0));
    let after = ink_bounds(&rgba(&template("HI", moved, 30), 0));
    assert_eq!(
        (after.0, after.1, after.2, after.3),
        (before.0 + 30, before.1 + 20, before.2 + 30, before.3 + 20),
        "every glyph moves by (30, 20)"
    );
}

#[test]
fn animators_over_their_budget_render_without_them_and_say_so() {
    // 500 letters over 6 000 frames (200 s at 30 fps): 3 million glyph samples, over the
    // budget.
    let text = "H".repeat(500);
    let frames = 6_000;
    assert!(500 * frames as usize > MAX_ANIMATOR_SAMPLES);
    let animators = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1,
              "s": {"a": 1, "k": [{"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
                                  {"t": 30, "s": [100]}]},
              "a": {"a": 0, "k": 100}},
        "a": {"o": {"a": 0, "k": 0}}
    }]);
    let bytes = template(&text, animators, frames);
    let report = InspectReport::new(&Template::parse(&bytes).unwrap()).unwrap();
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("exceed the template's budget")),
        "{:?}",
        report.warnings
    );
    // Drawn without the animators: the text is fully shown at frame 0 (where the animator
    // would hide it).
    let strongest = rgba(&bytes, 0).chunks(4).map(|p| p[3]).max().unwrap_or(0);
    assert_eq!(strongest, 255);
}

#[test]
fn supported_animators_draw_without_warnings_and_3d_rotation_is_reported() {
    let animators = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1, "a": {"a": 0, "k": 100}},
        "a": {"r": {"a": 0, "k": 10}, "rx": {"a": 0, "k": 30}}
    }]);
    let bytes = template("Hi", animators, 30);
    let report = InspectReport::new(&Template::parse(&bytes).unwrap()).unwrap();
    assert!(
        report.warnings.iter().any(|w| w.contains("3D rotation")),
        "{:?}",
        report.warnings
    );
    let plain = json!([{
        "s": {"t": 0, "b": 1, "sh": 1, "r": 1, "a": {"a": 0, "k": 100}},
        "a": {"s": {"a": 0, "k": [150, 150, 100]}}
    }]);
    let bytes = template("Hi", plain, 30);
    let report = InspectReport::new(&Template::parse(&bytes).unwrap()).unwrap();
    assert!(
        !report.warnings.iter().any(|w| w.contains("animator")),
        "{:?}",
        report.warnings
    );
}
