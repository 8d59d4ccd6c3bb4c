//! Fonts that match: a template's family, style and weight pick the closest bundled face
//! (Liberation Sans / Serif / Mono; Liberation Serif, as in Chromium, for an unknown family), uploaded fonts first, and
//! bold or italic no face has is synthesized. Each rendering is compared with an independent
//! rasterization (ab_glyph, its own layout) of the face the request must get, read from the
//! font file itself, and shown to differ from the faces it must not get.

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use lottie_render::lottie::lowering::text::convert_text_layers;
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::spec::{Format, Modifications};
use serde_json::json;
use std::collections::BTreeMap;

use crate::helpers::{library_frames, spec, text_layer_template};

const WIDTH: u32 = 600;
const HEIGHT: u32 = 160;
/// Where the text's baseline starts.
const ORIGIN: [f32; 2] = [10.0, 110.0];
/// Font size: large, so faces differ by many pixels.
const SIZE: f32 = 80.0;
const TEXT: &str = "Hamburg fox";

/// A font file of the repository's `assets/fonts/`.
fn asset(file: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets/fonts")
            .join(file),
    )
    .unwrap()
}

/// A template with one left-aligned black text layer in the font `fonts.list` entry `font`.
fn template(font: serde_json::Value) -> Vec<u8> {
    let document = json!({"s": SIZE, "f": font["fName"].clone(), "t": TEXT, "j": 0, "tr": 0,
        "lh": SIZE * 1.2, "ls": 0, "fc": [0, 0, 0]});
    text_layer_template(
        (WIDTH, HEIGHT),
        30,
        font,
        ORIGIN.map(f64::from),
        document,
        json!([]),
    )
}

/// Pixels of frame 0 at least half covered.
fn rendered(template: &[u8], fonts: &FontBook) -> Vec<bool> {
    let output = spec(Format::Webm, 30, WIDTH, HEIGHT);
    let rgba = library_frames(template, &Modifications::default(), fonts, output, [0]).remove(0);
    rgba.chunks(4).map(|pixel| pixel[3] >= 128).collect()
}

/// The warnings converting `template`'s text reports.
fn warnings(template: &[u8], fonts: &FontBook) -> Vec<String> {
    let mut json: serde_json::Value = serde_json::from_slice(template).unwrap();
    convert_text_layers(&mut json, fonts).unwrap().warnings
}

/// TEXT in `font` rasterized by ab_glyph (its own advances and kerning), each ink pixel
/// moved right by `slant` per pixel above the baseline (a synthesized oblique) and grown by
/// `grow` pixels all round (a synthesized bold).
fn reference(font: &[u8], slant: f32, grow: f32) -> Vec<bool> {
    let font = FontRef::try_from_slice(font).unwrap();
    // ab_glyph scales by ascent − descent; the document's size is the em.
    let scaled = font.as_scaled(PxScale::from(
        SIZE * font.height_unscaled() / font.units_per_em().unwrap(),
    ));
    let mut ink = vec![false; (WIDTH * HEIGHT) as usize];
    let mut pen = ORIGIN[0];
    let mut previous = None;
    for character in TEXT.chars() {
        let id = font.glyph_id(character);
        if let Some(previous) = previous {
            pen += scaled.kern(previous, id);
        }
        let glyph = id.with_scale_and_position(scaled.scale(), ab_glyph::point(pen, ORIGIN[1]));
        if let Some(outlined) = font.outline_glyph(glyph) {
            let bounds = outlined.px_bounds();
            outlined.draw(|x, y, coverage| {
                if coverage < 0.5 {
                    return;
                }
                let y = bounds.min.y + y as f32 + 0.5;
                let x = bounds.min.x + x as f32 + 0.5 + slant * (ORIGIN[1] - y);
                let reach = grow.ceil() as i64;
                for dy in -reach..=reach {
                    for dx in -reach..=reach {
                        if ((dx * dx + dy * dy) as f32).sqrt() > grow {
                            continue;
                        }
                        let (px, py) = (x.floor() as i64 + dx, y.floor() as i64 + dy);
                        if (0..i64::from(WIDTH)).contains(&px)
                            && (0..i64::from(HEIGHT)).contains(&py)
                        {
                            ink[(py * i64::from(WIDTH) + px) as usize] = true;
                        }
                    }
                }
            });
        }
        pen += scaled.h_advance(id);
        previous = Some(id);
    }
    ink
}

/// Intersection over union of two ink masks.
fn iou(a: &[bool], b: &[bool]) -> f64 {
    let both = a.iter().zip(b).filter(|(a, b)| **a && **b).count();
    let either = a.iter().zip(b).filter(|(a, b)| **a || **b).count();
    assert!(either > 2000, "{either} inked pixels");
    both as f64 / either as f64
}

/// Asserts `ink` matches `expected` (intersection over union ≥ 0.9) better than each of
/// `others` by a clear margin.
/// The ink of [`TEXT`] drawn upright in the bundled font `file`, neither slanted nor grown.
fn face(file: &str) -> Vec<bool> {
    reference(&asset(file), 0.0, 0.0)
}

/// The sans faces a serif must not be drawn in.
fn sans_faces() -> [(&'static str, Vec<bool>); 2] {
    [
        ("DejaVu Sans", face("DejaVuSans.ttf")),
        ("Liberation Sans", face("LiberationSans-Regular.ttf")),
    ]
}

fn assert_drawn_in(ink: &[bool], expected: &[bool], others: &[(&str, Vec<bool>)]) {
    let matched = iou(ink, expected);
    eprintln!("intersection over union with the expected face: {matched:.3}");
    assert!(matched >= 0.9, "intersection over union {matched:.3}");
    for (name, other) in others {
        let score = iou(ink, other);
        eprintln!("… with {name}: {score:.3}");
        assert!(score < matched - 0.1, "{name}: {score:.3} vs {matched:.3}");
    }
}

fn font(name: &str, family: &str, style: &str) -> serde_json::Value {
    json!({"fName": name, "fFamily": family, "fStyle": style, "ascent": 75})
}

#[test]
fn times_new_roman_is_drawn_in_liberation_serif_its_metric_twin() {
    let template = template(font("TimesNewRomanPSMT", "Times New Roman", "Regular"));
    let ink = rendered(&template, &FontBook::default());
    assert_drawn_in(&ink, &face("LiberationSerif-Regular.ttf"), &sans_faces());
    let warnings = warnings(&template, &FontBook::default());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("'Times New Roman'") && w.contains("Liberation Serif")),
        "{warnings:?}"
    );
}

#[test]
fn a_bold_italic_request_gets_the_bold_italic_face_with_nothing_synthesized() {
    // Helvetica, bold by its weight, italic by its style.
    let mut entry = font("Helvetica-BoldOblique", "Helvetica", "Oblique");
    entry["fWeight"] = json!("700");
    let template = template(entry);
    let ink = rendered(&template, &FontBook::default());
    assert_drawn_in(
        &ink,
        &face("LiberationSans-BoldItalic.ttf"),
        &[
            ("Liberation Sans Bold", face("LiberationSans-Bold.ttf")),
            ("Liberation Sans Italic", face("LiberationSans-Italic.ttf")),
        ],
    );
    let warnings = warnings(&template, &FontBook::default());
    assert!(
        warnings.iter().all(|w| !w.contains("synthesized")),
        "{warnings:?}"
    );
    // Courier New Bold: the mono bold face.
    let courier = self::template(font("CourierNewPS-BoldMT", "Courier New", "Bold"));
    assert_drawn_in(
        &rendered(&courier, &FontBook::default()),
        &face("LiberationMono-Bold.ttf"),
        &[("Liberation Mono", face("LiberationMono-Regular.ttf"))],
    );
}

#[test]
fn an_unknown_family_is_drawn_in_liberation_serif_as_chromium_draws_it() {
    // Chromium draws a family it does not have in its default standard font (Times New
    // Roman, Liberation Serif here), not in what `fc-match` names (DejaVu Sans).
    let template = template(font(
        "Grotesk-Regular",
        "Totally Unknown Grotesk",
        "Regular",
    ));
    assert_drawn_in(
        &rendered(&template, &FontBook::default()),
        &face("LiberationSerif-Regular.ttf"),
        &sans_faces(),
    );
    let warnings = warnings(&template, &FontBook::default());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("'Totally Unknown Grotesk'")
                && w.contains("Liberation Serif Regular")),
        "{warnings:?}"
    );
    // slots-text-document-sid.json's "Ubuntu" "Light Italic": lottie-web asks for weight 200,
    // italic; Chromium takes Liberation Serif's italic face (its lightest), nothing slanted.
    let italic = self::template(font("Ubuntu Light Italic", "Ubuntu", "Light Italic"));
    let dejavu = asset("DejaVuSans.ttf");
    assert_drawn_in(
        &rendered(&italic, &FontBook::default()),
        &face("LiberationSerif-Italic.ttf"),
        &[
            ("slanted DejaVu Sans", reference(&dejavu, 0.25, 0.0)),
            (
                "upright Liberation Serif",
                face("LiberationSerif-Regular.ttf"),
            ),
        ],
    );
    let warnings = self::warnings(&italic, &FontBook::default());
    assert!(
        warnings.iter().all(|w| !w.contains("synthesized")),
        "{warnings:?}"
    );
}

#[test]
fn dejavu_sans_asked_by_name_is_drawn_in_the_bundled_dejavu_sans_without_a_warning() {
    let template = template(font("DejaVuSans", "DejaVu Sans", "Book"));
    assert_drawn_in(
        &rendered(&template, &FontBook::default()),
        &face("DejaVuSans.ttf"),
        &[("Liberation Serif", face("LiberationSerif-Regular.ttf"))],
    );
    let warnings = warnings(&template, &FontBook::default());
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn italic_with_no_italic_face_is_slanted_and_bold_with_no_bold_face_is_widened() {
    // DejaVu Sans is bundled upright and regular only.
    let dejavu = asset("DejaVuSans.ttf");
    // Skia's (Chromium's) fake italic: x moves 1/4 of the height above the baseline.
    let italic = template(font("DejaVuSans-Oblique", "DejaVu Sans", "Oblique"));
    assert_drawn_in(
        &rendered(&italic, &FontBook::default()),
        &reference(&dejavu, 0.25, 0.0),
        &[("upright DejaVu Sans", reference(&dejavu, 0.0, 0.0))],
    );
    let warnings = warnings(&italic, &FontBook::default());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("DejaVu Sans") && w.contains("italic is synthesized")),
        "{warnings:?}"
    );
    // Skia's fake bold at 36 px and up: the outline stroked 1/32 of the size wide, so it
    // grows by half that all round.
    let bold = template(font("DejaVuSans-Black", "DejaVu Sans", "Black"));
    let ink = rendered(&bold, &FontBook::default());
    let grown = reference(&dejavu, 0.0, SIZE / 32.0 / 2.0);
    let plain = reference(&dejavu, 0.0, 0.0);
    let count = |ink: &[bool]| ink.iter().filter(|inked| **inked).count() as f64;
    eprintln!(
        "ink: rendered {}, grown reference {}, plain reference {}",
        count(&ink),
        count(&grown),
        count(&plain)
    );
    assert!(iou(&ink, &grown) >= 0.9, "{:.3}", iou(&ink, &grown));
    assert!(count(&ink) > count(&plain) * 1.08, "bold draws more ink");
    let warnings = self::warnings(&bold, &FontBook::default());
    assert!(
        warnings.iter().any(|w| w.contains("bold is synthesized")),
        "{warnings:?}"
    );
}

#[test]
fn an_uploaded_font_keeps_priority_over_the_bundled_match() {
    // DejaVu Serif (Debian's fonts-dejavu-core, which ./dev installs) uploaded as "Times New
    // Roman": it, not Liberation Serif, draws the text.
    let serif = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf").unwrap();
    let fonts = FontBook::new(BTreeMap::from([(
        "Times New Roman".to_owned(),
        serif.clone(),
    )]));
    let template = template(font("TimesNewRomanPSMT", "Times New Roman", "Regular"));
    assert_drawn_in(
        &rendered(&template, &fonts),
        &reference(&serif, 0.0, 0.0),
        &[("Liberation Serif", face("LiberationSerif-Regular.ttf"))],
    );
    let warnings = warnings(&template, &fonts);
    assert!(warnings.is_empty(), "{warnings:?}");
}
