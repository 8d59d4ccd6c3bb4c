//! Text that renders: text layers become glyph shapes before rlottie draws. Pixels are
//! rendered by the library directly (no codec) and compared with an independent
//! rasterization of the same string (ab_glyph, its own layout), with where justification and
//! boxes must put the ink, and with what missing glyphs and empty texts must draw.

use crate::helpers::{corpus, library_frame, library_frames, sans_font, spec, text_layer_template};
use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use lottie_render::lottie::lowering::text::fonts::{FontBook, BUNDLED_FONT};
use lottie_render::spec::{Format, Modifications};
use serde_json::json;

const WIDTH: u32 = 400;
const HEIGHT: u32 = 200;

/// A 400×200 template with one text layer at `position`, document `document`.
fn text_template(position: [f64; 2], document: serde_json::Value) -> Vec<u8> {
    text_layer_template(
        (WIDTH, HEIGHT),
        30,
        sans_font(),
        position,
        document,
        json!([]),
    )
}

/// Alpha of every pixel of frame 0, rendered at the template's own size.
fn alpha(template: &[u8], modifications: &Modifications, size: (u32, u32)) -> Vec<u8> {
    let output = spec(Format::Webm, 30, size.0, size.1);
    let fonts = FontBook::default();
    let rgba = library_frames(template, modifications, &fonts, output, [0]).remove(0);
    rgba.chunks(4).map(|pixel| pixel[3]).collect()
}

fn ink(alpha: &[u8]) -> Vec<bool> {
    alpha.iter().map(|a| *a >= 128).collect()
}

/// The text box of the box-text tests: left, top, width, height.
const BOX: (f64, f64, f64, f64) = (20.0, 20.0, 360.0, 160.0);

/// Renders box text `document` in [`BOX`] and checks that its ink stays inside the box
/// (within a pixel); answers the ink and its rows `(y0, y1)`.
fn drawn_in_box(mut document: serde_json::Value) -> (Vec<bool>, (u32, u32)) {
    let (left, top, width, height) = BOX;
    document["ps"] = json!([left, top]);
    document["sz"] = json!([width, height]);
    let rendered = ink(&alpha(
        &text_template([0.0, 0.0], document),
        &Modifications::default(),
        (WIDTH, HEIGHT),
    ));
    let (x0, y0, x1, y1) = bounds(&rendered, WIDTH).unwrap();
    let inside = |value: u32, low: f64, high: f64| {
        f64::from(value) >= low - 1.0 && f64::from(value) <= high + 1.0
    };
    assert!(
        inside(x0, left, left + width) && inside(x1, left, left + width),
        "x {x0}..{x1}"
    );
    assert!(
        inside(y0, top, top + height) && inside(y1, top, top + height),
        "y {y0}..{y1}"
    );
    (rendered, (y0, y1))
}

/// Bounding box (x0, y0, x1, y1) of the ink, inclusive.
fn bounds(ink: &[bool], width: u32) -> Option<(u32, u32, u32, u32)> {
    let mut found: Option<(u32, u32, u32, u32)> = None;
    for (index, _) in ink.iter().enumerate().filter(|(_, inked)| **inked) {
        let (x, y) = (index as u32 % width, index as u32 / width);
        found = Some(match found {
            None => (x, y, x, y),
            Some((x0, y0, x1, y1)) => (x0.min(x), y0.min(y), x1.max(x), y1.max(y)),
        });
    }
    found
}

fn document(text: &str, size: f64, justify: i64) -> serde_json::Value {
    json!({"s": size, "f": "Sans", "t": text, "j": justify, "tr": 0, "lh": size * 1.2, "ls": 0, "fc": [0, 0, 0]})
}

#[test]
fn a_text_modification_draws_the_new_text_and_an_empty_one_draws_nothing() {
    let template = std::fs::read(corpus("slots-text-document-sid.json")).unwrap();
    let with_text = |text: &str| {
        let mut modifications = Modifications::default();
        modifications
            .texts
            .insert("text_doc".into(), text.to_owned());
        ink(&alpha(&template, &modifications, (300, 100)))
    };
    let default = ink(&alpha(&template, &Modifications::default(), (300, 100)));
    let hello = with_text("Hello");
    let world = with_text("World");
    let empty = with_text("");
    let count = |ink: &[bool]| ink.iter().filter(|inked| **inked).count();
    assert!(count(&default) > 500, "the template's own text is drawn");
    assert_eq!(hello, default, "the same text draws the same pixels");
    assert!(count(&world) > 500);
    let differing = world.iter().zip(&hello).filter(|(a, b)| a != b).count();
    assert!(
        differing > 300,
        "different texts, different pixels ({differing})"
    );
    assert_eq!(count(&empty), 0, "an empty text draws no ink");
    // The ink is where the layer is: its baseline is at y = 80 of 100.
    let (_, top, _, bottom) = bounds(&world, 300).unwrap();
    assert!(top < 80 && (60..=100).contains(&bottom), "{top}..{bottom}");
}

#[test]
fn the_ink_of_a_word_matches_an_independent_rasterization_of_it() {
    // slots-text-document-sid.json: a 300×100 canvas, its text slot at (5, 80), 100 px,
    // left-aligned, in a font it does not embed (Ubuntu Light Italic, so the bundled
    // Liberation Serif Italic, as Chromium draws an unknown family: tests/engine/fonts.rs).
    let (text, size, origin) = ("Lottie", 100.0, [5.0, 80.0]);
    let (width, height) = (300u32, 100u32);
    let template = std::fs::read(corpus("slots-text-document-sid.json")).unwrap();
    let mut modifications = Modifications::default();
    modifications
        .texts
        .insert("text_doc".into(), text.to_owned());
    let rendered = ink(&alpha(&template, &modifications, (width, height)));
    // ab_glyph lays the string out by itself (advances and kerning) and rasterizes it.
    let italic = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets/fonts/LiberationSerif-Italic.ttf"),
    )
    .unwrap();
    let font = FontRef::try_from_slice(&italic).unwrap();
    let scaled = font.as_scaled(PxScale::from(
        (size * f64::from(font.height_unscaled()) / f64::from(font.units_per_em().unwrap())) as f32,
    ));
    let mut reference = vec![false; (width * height) as usize];
    let mut pen = origin[0] as f32;
    let mut previous = None;
    for character in text.chars() {
        let glyph_id = font.glyph_id(character);
        if let Some(previous) = previous {
            pen += scaled.kern(previous, glyph_id);
        }
        let glyph = glyph_id
            .with_scale_and_position(scaled.scale(), ab_glyph::point(pen, origin[1] as f32));
        if let Some(outlined) = font.outline_glyph(glyph) {
            let bounds = outlined.px_bounds();
            outlined.draw(|x, y, coverage| {
                let (px, py) = (
                    (f64::from(bounds.min.x) + f64::from(x) + 0.5).floor() as i64,
                    bounds.min.y as i64 + i64::from(y),
                );
                if coverage >= 0.5
                    && (0..i64::from(width)).contains(&px)
                    && (0..i64::from(height)).contains(&py)
                {
                    reference[(py * i64::from(width) + px) as usize] = true;
                }
            });
        }
        pen += scaled.h_advance(glyph_id);
        previous = Some(glyph_id);
    }
    let both = rendered
        .iter()
        .zip(&reference)
        .filter(|(a, b)| **a && **b)
        .count();
    let either = rendered
        .iter()
        .zip(&reference)
        .filter(|(a, b)| **a || **b)
        .count();
    let iou = both as f64 / either as f64;
    assert!(either > 2000, "{either} inked pixels");
    eprintln!("intersection over union with ab_glyph's rasterization: {iou:.3}");
    assert!(iou >= 0.9, "intersection over union {iou:.3}");
}

#[test]
fn box_text_without_a_box_position_has_its_first_baseline_on_the_layer_position() {
    // lottie-web draws box text (`sz`) without `ps` from y = 0 of the layer (its first
    // baseline there, as point text), and with `ps` one ascent below the box's top
    // (text-rtl-arabic.json's box texts have no `ps`). "HH" has no descender: its ink ends
    // on the baseline.
    let (size, position) = (40.0, [50.0, 100.0]);
    let mut boxed = document("HH", size, 0);
    boxed["sz"] = json!([300, 80]);
    let without = ink(&alpha(
        &text_template(position, boxed.clone()),
        &Modifications::default(),
        (WIDTH, HEIGHT),
    ));
    let (left, _, _, bottom) = bounds(&without, WIDTH).unwrap();
    assert!(
        (98..=100).contains(&bottom),
        "baseline on the layer's y = 100: ink ends on row {bottom}"
    );
    assert!((50..=56).contains(&left), "box at the layer's x: {left}");
    boxed["ps"] = json!([0, 0]);
    let with = ink(&alpha(
        &text_template(position, boxed),
        &Modifications::default(),
        (WIDTH, HEIGHT),
    ));
    let (_, top, _, bottom) = bounds(&with, WIDTH).unwrap();
    // A capital reaches about 0.73 em above the baseline, an ascent is about 0.75–0.93 em:
    // the ink starts at or just below the box's top and ends about an ascent below it.
    assert!((100..=110).contains(&top), "ink starts at row {top}");
    assert!(
        f64::from(bottom) >= position[1] + 0.7 * size,
        "baseline an ascent below the box's top: ink ends on row {bottom}"
    );
}

#[test]
fn right_and_centre_justification_put_lines_where_expected() {
    let anchor = 200.0;
    let line_bounds = |justify: i64| {
        let rendered = ink(&alpha(
            &text_template([anchor, 100.0], document("Justified", 40.0, justify)),
            &Modifications::default(),
            (WIDTH, HEIGHT),
        ));
        bounds(&rendered, WIDTH).unwrap()
    };
    let (left_x0, _, left_x1, _) = line_bounds(0);
    let (right_x0, _, right_x1, _) = line_bounds(1);
    let (center_x0, _, center_x1, _) = line_bounds(2);
    let anchor = anchor as i64;
    // Side bearings leave a few pixels between the anchor and the first or last ink.
    assert!(
        (i64::from(left_x0) - anchor).abs() <= 5,
        "left starts at the anchor: {left_x0}"
    );
    assert!(
        (i64::from(right_x1) - anchor).abs() <= 5,
        "right ends at the anchor: {right_x1}"
    );
    let middle = (i64::from(center_x0) + i64::from(center_x1)) / 2;
    assert!(
        (middle - anchor).abs() <= 5,
        "centre is centred on the anchor: {middle}"
    );
    // The three are the same line, moved.
    let widths = [
        left_x1 - left_x0,
        right_x1 - right_x0,
        center_x1 - center_x0,
    ];
    assert!(
        widths.iter().all(|w| w.abs_diff(widths[0]) <= 2),
        "{widths:?}"
    );
}

#[test]
fn a_two_hundred_character_title_stays_inside_its_box() {
    let title: String = "Congratulations to our wonderful graduates ".repeat(5)[..200].to_owned();
    let (rendered, _) = drawn_in_box(document(&title, 48.0, 2));
    assert!(rendered.iter().filter(|inked| **inked).count() > 3000);
}

#[test]
fn a_character_no_font_has_is_drawn_as_notdef() {
    let rendered = ink(&alpha(
        &text_template([40.0, 120.0], document("\u{10FFFD}", 80.0, 0)),
        &Modifications::default(),
        (WIDTH, HEIGHT),
    ));
    let (x0, y0, x1, y1) = bounds(&rendered, WIDTH).expect(".notdef draws ink");
    // DejaVu's .notdef is a box about as tall as a capital.
    assert!(x1 - x0 > 20 && y1 - y0 > 40, "{x0},{y0}..{x1},{y1}");
}

/// Frame `index` of a corpus template rendered at `size`, straight RGBA.
fn rgba_frame(file: &str, size: (u32, u32), index: u32) -> Vec<u8> {
    library_frame(&std::fs::read(corpus(file)).unwrap(), size, index)
}

/// The horizontal extent of each run of rows holding dark pixels within columns `x0..x1`.
fn dark_lines(rgba: &[u8], width: u32, x0: u32, x1: u32, y0: u32, y1: u32) -> Vec<(u32, u32)> {
    let dark = |x: u32, y: u32| {
        let i = ((y * width + x) * 4) as usize;
        rgba[i + 3] > 200 && rgba[i] < 80 && rgba[i + 1] < 80 && rgba[i + 2] < 80
    };
    let mut lines = Vec::new();
    let mut current: Option<(u32, u32)> = None;
    for y in y0..y1 {
        let row: Vec<u32> = (x0..x1).filter(|&x| dark(x, y)).collect();
        match (row.first(), row.last(), current) {
            (Some(&left), Some(&right), Some((l, r))) => {
                current = Some((l.min(left), r.max(right)))
            }
            (Some(&left), Some(&right), None) => current = Some((left, right)),
            (None, _, Some(line)) => {
                lines.push(line);
                current = None;
            }
            _ => {}
        }
    }
    lines.extend(current);
    lines
}

#[test]
fn the_corpus_paragraphs_are_left_centre_and_right_justified() {
    // text-multiline-1920x1080.json: "ABC\rD\rE" justified left, centre and right, as box
    // (top row) and point text (bottom row), in the template's own glyphs (`chars`).
    let rgba = rgba_frame("text-multiline-1920x1080.json", (1920, 1080), 30);
    let columns = [(380, 720), (860, 1200), (1460, 1800)];
    for (row, (y0, y1)) in [(40, 360), (560, 880)].into_iter().enumerate() {
        for (column, &(x0, x1)) in columns.iter().enumerate() {
            let lines = dark_lines(&rgba, 1920, x0, x1, y0, y1);
            assert_eq!(lines.len(), 3, "row {row} column {column}: {lines:?}");
            let spread = |values: Vec<f64>| {
                values.iter().cloned().fold(f64::MIN, f64::max)
                    - values.iter().cloned().fold(f64::MAX, f64::min)
            };
            let lefts = spread(lines.iter().map(|l| f64::from(l.0)).collect());
            let rights = spread(lines.iter().map(|l| f64::from(l.1)).collect());
            let centres = spread(lines.iter().map(|l| f64::from(l.0 + l.1) / 2.0).collect());
            // Side bearings differ by letter: a few pixels at this size.
            let (aligned, others) = match column {
                0 => (lefts, [rights, centres]),
                1 => (centres, [lefts, rights]),
                _ => (rights, [lefts, centres]),
            };
            assert!(
                aligned <= 12.0,
                "row {row} column {column}: spread {aligned} in {lines:?}"
            );
            assert!(
                others.iter().all(|s| *s > 40.0),
                "row {row} column {column}: {others:?}"
            );
        }
    }
}

/// DejaVu Serif from Debian's fonts-dejavu-core (`./dev` installs it): a font visibly
/// different from the bundled DejaVu Sans, with no Arabic.
const SERIF: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf";

#[test]
fn characters_the_chosen_font_lacks_are_drawn_by_the_bundled_one() {
    use lottie_render::lottie::lowering::text::layout::{FontSource, GlyphSource};
    let serif = std::fs::read(SERIF).unwrap();
    let source = FontSource::with_fallbacks(&serif, &[BUNDLED_FONT]).unwrap();
    let shaped = source.shape("Hello سلام");
    let fonts: Vec<u8> = shaped.glyphs.iter().map(|g| g.font).collect();
    assert!(fonts.contains(&0) && fonts.contains(&1), "{fonts:?}");
    assert!(shaped.glyphs.iter().all(|g| g.glyph != 0), "no .notdef");
    assert!(source.missing("Hello سلام").is_empty());
    // Between words in the fallback, a space the chosen font has is the chosen font's (as
    // Chromium's fallback draws it). In "سلام سلام" the space is byte 8.
    let shaped = source.shape("سلام سلام");
    let space: Vec<u8> = shaped
        .glyphs
        .iter()
        .filter(|g| g.cluster == 8)
        .map(|g| g.font)
        .collect();
    let letters: Vec<u8> = shaped
        .glyphs
        .iter()
        .filter(|g| g.cluster != 8)
        .map(|g| g.font)
        .collect();
    assert_eq!(space, [0], "the space: {:?}", shaped.glyphs);
    assert!(
        letters.len() >= 6 && letters.iter().all(|font| *font == 1),
        "{letters:?}"
    );
}

#[test]
fn box_text_that_fits_when_shrunk_is_all_drawn_inside_the_box_even_with_tight_lines() {
    let (_, top, _, height) = BOX;
    // About four lines at full size: it fits once shrunk a little; lines as tall as the size.
    let text = "Congratulations to every one of our graduates of the class of 2026";
    let boxed = json!({"s": 48.0, "f": "Sans", "t": text, "j": 0, "tr": 0, "lh": 48.0, "ls": 0, "fc": [0, 0, 0]});
    let (_, (y0, y1)) = drawn_in_box(boxed);
    // Every word is there: the last line reaches well down the box.
    assert!(f64::from(y1) > top + height * 0.6, "y {y0}..{y1}");
}

#[test]
fn a_text_that_changes_over_time_shows_each_keyframe_in_its_turn() {
    // "WIDE TEXT" from frame 0, a single "I" from frame 15 (of 30): hold keyframes, retimed.
    let mut template: serde_json::Value = serde_json::from_slice(&text_template(
        [20.0, 120.0],
        document("WIDE TEXT", 48.0, 0),
    ))
    .unwrap();
    let keyframes = template.pointer_mut("/layers/0/t/d/k").unwrap();
    keyframes
        .as_array_mut()
        .unwrap()
        .push(json!({"s": document("I", 48.0, 0), "t": 15}));
    let bytes = template.to_string().into_bytes();
    let output = spec(Format::Webm, 60, WIDTH, HEIGHT);
    let fonts = FontBook::default();
    let mut widths = Vec::new();
    // At 60 fps the switch is at output frame 30.
    let indices = [0, 29, 31, 59];
    for rgba in library_frames(&bytes, &Modifications::default(), &fonts, output, indices) {
        let alpha: Vec<u8> = rgba.chunks(4).map(|pixel| pixel[3]).collect();
        let (x0, _, x1, _) = bounds(&ink(&alpha), WIDTH).unwrap();
        widths.push(x1 - x0);
    }
    assert!(widths[0] > 200 && widths[1] > 200, "{widths:?}");
    assert!(widths[2] < 20 && widths[3] < 20, "{widths:?}");
}
