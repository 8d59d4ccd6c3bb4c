//! Image slots in a real worker process: a replacement image decoded there, fitted to its
//! asset's box and drawn where the template's transform puts the asset, checked in the
//! decoded frames against geometry computed here (the box at 50..150 of a 200² canvas) and
//! the colours of the images made here.

use crate::helpers::{decode_rgba, run_in_worker, spec, tempdir};
use image::codecs::jpeg::JpegEncoder;
use image::{ImageEncoder, Rgba, RgbaImage};
use lottie_render::error::ErrorClass;
use lottie_render::spec::{Fit, Format, ImageChoice, Modifications};
use std::path::Path;
use std::time::Duration;

/// Lowercase hex SHA-256, as the service names an image.
fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

const CANVAS: u32 = 200;
/// The asset's box, and where the image layer puts its top-left corner.
const BOX: u32 = 100;
const ORIGIN: u32 = 50;

const RED: Rgba<u8> = Rgba([255, 0, 0, 255]);
const GREEN: Rgba<u8> = Rgba([0, 255, 0, 255]);
const BLUE: Rgba<u8> = Rgba([0, 0, 255, 255]);
const WHITE: Rgba<u8> = Rgba([255, 255, 255, 255]);
const GREY: Rgba<u8> = Rgba([128, 128, 128, 255]);

fn png(image: &RgbaImage) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(
            image.as_raw(),
            image.width(),
            image.height(),
            image::ExtendedColorType::Rgba8,
        )
        .unwrap();
    bytes
}

/// Four solid quadrants: red, green / blue, white.
fn quadrants(width: u32, height: u32) -> RgbaImage {
    RgbaImage::from_fn(width, height, |x, y| {
        match (x < width / 2, y < height / 2) {
            (true, true) => RED,
            (false, true) => GREEN,
            (true, false) => BLUE,
            (false, false) => WHITE,
        }
    })
}

/// A 200² template of one image layer at (50, 50) showing asset "photo" (100², a grey
/// default), written to `dir`.
fn template(dir: &Path) -> std::path::PathBuf {
    use base64::Engine;
    let default = base64::engine::general_purpose::STANDARD
        .encode(png(&RgbaImage::from_pixel(BOX, BOX, GREY)));
    let json = serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": CANVAS, "h": CANVAS,
        "assets": [{"id": "photo", "w": BOX, "h": BOX, "e": 1, "u": "",
            "p": format!("data:image/png;base64,{default}")}],
        "layers": [{
            "ddd": 0, "ind": 1, "ty": 2, "nm": "photo layer", "refId": "photo", "sr": 1,
            "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 0, "k": [ORIGIN, ORIGIN, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}},
            "ip": 0, "op": 5, "st": 0, "bm": 0
        }]
    });
    let path = dir.join("image-slot.json");
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

/// The first frame of the template rendered to WebM (alpha kept) with `image` in slot
/// "photo" at `fit`.
fn first_frame(image: &[u8], fit: Fit) -> Result<RgbaImage, lottie_render::sandbox::WorkerFailure> {
    let dir = tempdir();
    let template = template(dir.path());
    let sha256 = hex_sha256(image);
    let file = dir.path().join("replacement");
    std::fs::write(&file, image).unwrap();
    let mut modifications = Modifications::default();
    modifications.images.insert(
        "photo".into(),
        ImageChoice {
            sha256: sha256.clone(),
            fit,
        },
    );
    let (output, run) = run_in_worker(
        &template,
        modifications,
        [(sha256, file)].into(),
        spec(Format::Webm, 30, CANVAS, CANVAS),
        dir.path(),
        Duration::from_secs(120),
    );
    run.result?;
    let frames = decode_rgba(&output, CANVAS, CANVAS);
    Ok(RgbaImage::from_raw(CANVAS, CANVAS, frames[0].clone()).unwrap())
}

/// Pixel (x, y) is `expected` within VP9's 4:2:0 error.
#[track_caller]
fn assert_near(frame: &RgbaImage, (x, y): (u32, u32), expected: Rgba<u8>) {
    let actual = frame.get_pixel(x, y);
    let close = actual
        .0
        .iter()
        .zip(expected.0)
        .all(|(a, e)| a.abs_diff(e) <= 48);
    assert!(close, "({x}, {y}) is {actual:?}, expected {expected:?}");
}

#[track_caller]
fn assert_transparent(frame: &RgbaImage, (x, y): (u32, u32)) {
    let alpha = frame.get_pixel(x, y).0[3];
    assert!(alpha < 32, "({x}, {y}) has alpha {alpha}, expected none");
}

/// A point `(u, v)` of the box, in fractions of its side, in canvas pixels.
fn in_box(u: f64, v: f64) -> (u32, u32) {
    let at = |f: f64| ORIGIN + (f * f64::from(BOX)) as u32;
    (at(u), at(v))
}

#[test]
fn fill_stretches_the_image_over_the_assets_box_and_nothing_else() {
    let frame = first_frame(&png(&quadrants(40, 20)), Fit::Fill).unwrap();
    assert_near(&frame, in_box(0.2, 0.2), RED);
    assert_near(&frame, in_box(0.8, 0.2), GREEN);
    assert_near(&frame, in_box(0.2, 0.8), BLUE);
    assert_near(&frame, in_box(0.8, 0.8), WHITE);
    // Outside the box: the canvas is transparent.
    assert_transparent(&frame, (10, 10));
    assert_transparent(&frame, (190, 100));
}

#[test]
fn cover_keeps_the_proportions_and_cuts_what_passes_the_box() {
    // 200×100, blue in its outer quarters: covering a square box cuts exactly those.
    let source = RgbaImage::from_fn(
        200,
        100,
        |x, _| {
            if (50..150).contains(&x) {
                RED
            } else {
                BLUE
            }
        },
    );
    let frame = first_frame(&png(&source), Fit::Cover).unwrap();
    for u in [0.05, 0.5, 0.95] {
        assert_near(&frame, in_box(u, 0.5), RED);
    }
}

#[test]
fn contain_keeps_the_proportions_and_leaves_the_rest_of_the_box_transparent() {
    // 200×100 into 100²: 100×50, at 25..75 of the box's height.
    let frame = first_frame(&png(&quadrants(200, 100)), Fit::Contain).unwrap();
    assert_transparent(&frame, in_box(0.5, 0.1));
    assert_transparent(&frame, in_box(0.5, 0.9));
    assert_near(&frame, in_box(0.2, 0.35), RED);
    assert_near(&frame, in_box(0.8, 0.35), GREEN);
    assert_near(&frame, in_box(0.2, 0.65), BLUE);
    assert_near(&frame, in_box(0.8, 0.65), WHITE);
}

/// A phone photo: pixels stored sideways with EXIF orientation 6 (turn 90° clockwise).
/// Stored left red, right blue; shown top red, bottom blue.
#[test]
fn a_jpeg_with_exif_orientation_6_is_shown_upright() {
    let stored = RgbaImage::from_fn(64, 32, |x, _| if x < 32 { RED } else { BLUE });
    let rgb = image::DynamicImage::ImageRgba8(stored).into_rgb8();
    let mut jpeg = Vec::new();
    let mut encoder = JpegEncoder::new_with_quality(&mut jpeg, 95);
    // A little-endian TIFF header and one IFD entry: tag 0x0112 (orientation), SHORT, 6.
    let mut exif = b"II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00".to_vec();
    exif.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]);
    encoder.set_exif_metadata(exif).unwrap();
    encoder
        .write_image(rgb.as_raw(), 64, 32, image::ExtendedColorType::Rgb8)
        .unwrap();
    let frame = first_frame(&jpeg, Fit::Fill).unwrap();
    assert_near(&frame, in_box(0.5, 0.15), RED);
    assert_near(&frame, in_box(0.5, 0.85), BLUE);
}

/// A JPEG of `stored` with EXIF orientation `orientation` (a little-endian TIFF header and
/// one IFD entry: tag 0x0112, SHORT, the value).
fn jpeg_with_orientation(stored: &RgbaImage, orientation: u8) -> Vec<u8> {
    let rgb = image::DynamicImage::ImageRgba8(stored.clone()).into_rgb8();
    let mut jpeg = Vec::new();
    let mut encoder = JpegEncoder::new_with_quality(&mut jpeg, 95);
    let mut exif = b"II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00".to_vec();
    exif.extend_from_slice(&[orientation, 0, 0, 0, 0, 0, 0, 0]);
    encoder.set_exif_metadata(exif).unwrap();
    encoder
        .write_image(
            rgb.as_raw(),
            rgb.width(),
            rgb.height(),
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
    jpeg
}

/// Where the upright image's point `(u, v)` (fractions of its sides) is in the stored
/// pixels, for each EXIF orientation, as the EXIF specification defines them: 1 as stored,
/// 2 mirrored left-right, 3 turned 180°, 4 mirrored top-bottom, 5 transposed, 6 turned 90°
/// clockwise, 7 transversed, 8 turned 90° anticlockwise.
fn stored_point(orientation: u8, (u, v): (f64, f64)) -> (f64, f64) {
    match orientation {
        1 => (u, v),
        2 => (1.0 - u, v),
        3 => (1.0 - u, 1.0 - v),
        4 => (u, 1.0 - v),
        5 => (v, u),
        6 => (v, 1.0 - u),
        7 => (1.0 - v, 1.0 - u),
        8 => (1.0 - v, u),
        _ => unreachable!("EXIF orientations are 1..=8"),
    }
}

/// Every EXIF orientation in one render: a 400×200 canvas of eight 100² image slots `o1` …
/// `o8` (four a row), each showing the same stored pixels (quadrants, wider than tall) with
/// its own orientation, filled into its box; each quadrant of each box is the stored
/// quadrant the specification's transform puts there.
#[test]
fn jpegs_with_each_exif_orientation_are_shown_upright() {
    use base64::Engine;
    let dir = tempdir();
    let default = base64::engine::general_purpose::STANDARD
        .encode(png(&RgbaImage::from_pixel(BOX, BOX, GREY)));
    let at = |orientation: u8| {
        let index = u32::from(orientation - 1);
        ((index % 4) * BOX, (index / 4) * BOX)
    };
    let orientations = 1..=8u8;
    let assets: Vec<serde_json::Value> = orientations
        .clone()
        .map(|o| {
            serde_json::json!({"id": format!("o{o}"), "w": BOX, "h": BOX, "e": 1, "u": "",
                "p": format!("data:image/png;base64,{default}")})
        })
        .collect();
    let layers: Vec<serde_json::Value> = orientations
        .clone()
        .map(|o| {
            let (x, y) = at(o);
            serde_json::json!({"ddd": 0, "ind": o, "ty": 2, "refId": format!("o{o}"), "sr": 1,
                "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                    "p": {"a": 0, "k": [x, y, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                    "s": {"a": 0, "k": [100, 100, 100]}},
                "ip": 0, "op": 5, "st": 0, "bm": 0})
        })
        .collect();
    let template = dir.path().join("orientations.json");
    let json = serde_json::json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 4 * BOX,
        "h": 2 * BOX, "assets": assets, "layers": layers});
    std::fs::write(&template, json.to_string()).unwrap();
    let stored = quadrants(64, 32);
    let mut modifications = Modifications::default();
    let mut images = std::collections::BTreeMap::new();
    for o in orientations.clone() {
        let jpeg = jpeg_with_orientation(&stored, o);
        let sha256 = hex_sha256(&jpeg);
        let file = dir.path().join(format!("o{o}.jpg"));
        std::fs::write(&file, &jpeg).unwrap();
        modifications.images.insert(
            format!("o{o}"),
            ImageChoice {
                sha256: sha256.clone(),
                fit: Fit::Fill,
            },
        );
        images.insert(sha256, file);
    }
    let (output, run) = run_in_worker(
        &template,
        modifications,
        images,
        spec(Format::Webm, 30, 4 * BOX, 2 * BOX),
        dir.path(),
        Duration::from_secs(120),
    );
    run.result.unwrap();
    let frames = decode_rgba(&output, 4 * BOX, 2 * BOX);
    let frame = RgbaImage::from_raw(4 * BOX, 2 * BOX, frames[0].clone()).unwrap();
    for o in orientations {
        let (x, y) = at(o);
        for shown in [(0.25, 0.25), (0.75, 0.25), (0.25, 0.75), (0.75, 0.75)] {
            let (su, sv) = stored_point(o, shown);
            let expected = *stored.get_pixel(
                (su * f64::from(stored.width())) as u32,
                (sv * f64::from(stored.height())) as u32,
            );
            let pixel = (
                x + (shown.0 * f64::from(BOX)) as u32,
                y + (shown.1 * f64::from(BOX)) as u32,
            );
            let actual = frame.get_pixel(pixel.0, pixel.1);
            let close = actual
                .0
                .iter()
                .zip(expected.0)
                .all(|(a, e)| a.abs_diff(e) <= 48);
            assert!(
                close,
                "orientation {o}, upright point {shown:?}: {actual:?}, expected {expected:?}"
            );
        }
    }
}

#[test]
fn a_webp_with_alpha_is_drawn_with_its_transparency() {
    let source = RgbaImage::from_fn(
        20,
        20,
        |x, _| {
            if x < 10 {
                Rgba([0, 0, 0, 0])
            } else {
                GREEN
            }
        },
    );
    let mut webp = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
        .write_image(source.as_raw(), 20, 20, image::ExtendedColorType::Rgba8)
        .unwrap();
    let frame = first_frame(&webp, Fit::Fill).unwrap();
    assert_transparent(&frame, in_box(0.2, 0.5));
    assert_near(&frame, in_box(0.8, 0.5), GREEN);
}

/// An image whose header passes (what the server checks) but whose data is cut fails the
/// render in the worker: deterministic, IMAGE_INVALID, naming the slot.
#[test]
fn an_image_that_does_not_decode_fails_the_render_naming_its_slot() {
    let mut cut = png(&quadrants(64, 64));
    cut.truncate(cut.len() / 2);
    let failure = first_frame(&cut, Fit::Cover).unwrap_err();
    assert_eq!(failure.class, ErrorClass::Deterministic, "{failure:?}");
    assert_eq!(failure.reason.as_str(), "IMAGE_INVALID", "{failure:?}");
    assert!(
        failure.message.contains("modifications.images[\"photo\"]"),
        "{}",
        failure.message
    );
}
