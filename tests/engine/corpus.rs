//! Every real template in the corpus renders to all three formats at a small size, and
//! every output is what ffprobe says it should be.

use crate::helpers::{corpus, probe, render_in_worker, spec, tempdir};
use lottie_render::error::ErrorClass;
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::lottie::{modifications, slots, timeline, Template};
use lottie_render::render;
use lottie_render::spec::output::MAX_GIF_SECONDS;
use lottie_render::spec::{Format, Modifications};
use std::time::Duration;

const WIDTH: u32 = 128;
const HEIGHT: u32 = 100;
const FPS: u32 = 30;

fn expected_frames(file: &str) -> u32 {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(corpus(file)).unwrap()).unwrap();
    let (fr, ip, op) = (
        json["fr"].as_f64().unwrap(),
        json["ip"].as_f64().unwrap(),
        json["op"].as_f64().unwrap(),
    );
    ((op - ip) / fr * f64::from(FPS)).round() as u32
}

fn renders_to_every_format(file: &str) {
    let dir = tempdir();
    let frames = expected_frames(file);
    for format in [Format::Mp4, Format::Webm, Format::Gif] {
        let (path, result) = render_in_worker(
            &corpus(file),
            Modifications::default(),
            spec(format, FPS, WIDTH, HEIGHT),
            dir.path(),
            Duration::from_secs(600),
        );
        if format == Format::Gif && f64::from(frames) / f64::from(FPS) > MAX_GIF_SECONDS {
            let failure = result.expect_err("a GIF longer than the limit must be refused");
            assert_eq!(
                (failure.reason.as_str(), failure.class),
                ("OUTPUT_TOO_LONG", ErrorClass::Deterministic),
                "{file}"
            );
            continue;
        }
        let output = result.unwrap_or_else(|failure| panic!("{file} as {format:?}: {failure}"));
        assert_eq!(output.frame_count, frames, "{file} {format:?}");
        let probed = probe(&path);
        let expected_codec = match format {
            Format::Mp4 => "h264",
            Format::Webm => "vp9",
            Format::Gif => "gif",
            other => panic!("the corpus is not rendered to {other:?}"),
        };
        assert_eq!(probed.codec, expected_codec, "{file} {format:?}");
        assert_eq!(
            (probed.width, probed.height),
            (WIDTH, HEIGHT),
            "{file} {format:?}"
        );
        let duration = f64::from(frames) / f64::from(FPS);
        assert!(
            (probed.duration - duration).abs() <= 1.0 / f64::from(FPS) + 1e-3,
            "{file} {format:?}: duration {} s, expected {duration} s",
            probed.duration
        );
        if format == Format::Gif {
            // gifski folds identical consecutive frames into one, and its denoiser folds or
            // splits subtle changes (measured on this corpus: 4 fewer to 13 more than the
            // distinct frames rlottie draws), so a real animation's count is bounded here;
            // colours.rs checks exact counts on a template whose every change is large.
            assert!(
                probed.frames >= 1 && probed.frames <= frames,
                "{file} gif: {} frames",
                probed.frames
            );
        } else {
            assert_eq!(probed.frames, frames, "{file} {format:?}");
            assert_eq!(probed.frame_rate, "30/1", "{file} {format:?}");
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), output.size_bytes);
    }
}

macro_rules! corpus_tests {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $name() {
                renders_to_every_format($file);
            }
        )*
    };
}

corpus_tests! {
    tiny_checkmark_renders_to_every_format => "tiny-checkmark-done-70x70.json",
    tiny_solid_layer_renders_to_every_format => "tiny-solid-layer.json",
    simple_bouncy_ball_renders_to_every_format => "simple-bouncy-ball-60fps.json",
    ui_hamburger_arrow_renders_to_every_format => "ui-hamburger-arrow.json",
    ui_toggle_on_off_text_renders_to_every_format => "ui-toggle-on-off-text.json",
    ui_loader_74fps_renders_to_every_format => "ui-loader-74fps.json",
    heavy_bodymovin_logo_renders_to_every_format => "heavy-bodymovin-logo-1820x275.json",
    heavy_tractor_renders_to_every_format => "heavy-tractor-263-layers.json",
    text_banner_ad_renders_to_every_format => "text-banner-ad-970x250.json",
    text_dynamic_name_template_renders_to_every_format => "text-dynamic-name-template.json",
    text_multiline_renders_to_every_format => "text-multiline-1920x1080.json",
    text_rtl_arabic_renders_to_every_format => "text-rtl-arabic.json",
    text_range_selector_renders_to_every_format => "text-range-selector-glyphs.json",
    text_logo_masked_renders_to_every_format => "text-logo-masked-thorvg.json",
    slots_ball_colors_renders_to_every_format => "slots-ball-colors-opacity.json",
    slots_checkbox_precomp_renders_to_every_format => "slots-checkbox-colors-precomp.json",
    slots_transform_renders_to_every_format => "slots-transform-lottie-docs.json",
    slots_text_document_renders_to_every_format => "slots-text-document-sid.json",
    masks_mattes_bell_renders_to_every_format => "masks-mattes-bell-precomp.json",
    mattes_22_track_mattes_renders_to_every_format => "mattes-22-track-mattes.json",
    gradient_background_portrait_renders_to_every_format => "gradient-background-portrait-15fps.json",
    gradient_radial_mattes_100fps_renders_to_every_format => "gradient-radial-mattes-100fps.json",
    gradient_emoji_named_fills_renders_to_every_format => "gradient-emoji-named-fills-24fps.json",
    trim_fingerprint_renders_to_every_format => "trim-fingerprint-success.json",
    repeater_abstract_circle_renders_to_every_format => "repeater-abstract-circle-15fps.json",
    image_base64_heart_renders_to_every_format => "image-base64-heart.json",
    image_base64_43_images_renders_to_every_format => "image-base64-43-images-precomps.json",
    expressions_ripple_renders_to_every_format => "expressions-ripple-precomps.json",
    timeremap_precomp_renders_to_every_format => "timeremap-precomp-lottie-docs.json",
    // rlottie refuses this file as published ("w": 375.0); integer normalisation makes it render.
    float_precomp_size_renders_after_integer_normalisation => "refused-float-precomp-size.json",
}

/// Corpus files with nothing any lowering pass rewrites: no text layers, track mattes, masks,
/// expressions or layer effects.
const NOTHING_TO_LOWER: &[&str] = &[
    "gradient-background-portrait-15fps.json",
    "image-base64-heart.json",
    "repeater-abstract-circle-15fps.json",
    "simple-bouncy-ball-60fps.json",
    "slots-ball-colors-opacity.json",
    "slots-checkbox-colors-precomp.json",
    "slots-transform-lottie-docs.json",
    "timeremap-precomp-lottie-docs.json",
    "tiny-checkmark-done-70x70.json",
    "tiny-solid-layer.json",
    "trim-fingerprint-success.json",
    "ui-hamburger-arrow.json",
    "ui-loader-74fps.json",
];

/// What a lowering pass would rewrite, anywhere in `value`.
fn lowerable(value: &serde_json::Value, found: &mut Vec<&'static str>) {
    match value {
        serde_json::Value::Object(object) => {
            if object.get("ty").and_then(serde_json::Value::as_i64) == Some(5) {
                found.push("text layer");
            }
            if object.contains_key("tt") || object.contains_key("td") {
                found.push("track matte");
            }
            if object
                .get("masksProperties")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|masks| !masks.is_empty())
            {
                found.push("mask");
            }
            if object.get("x").is_some_and(serde_json::Value::is_string) {
                found.push("expression");
            }
            if object
                .get("ef")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|effects| !effects.is_empty())
            {
                found.push("layer effect");
            }
            object.values().for_each(|inner| lowerable(inner, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|inner| lowerable(inner, found)),
        _ => {}
    }
}

#[test]
fn a_template_with_nothing_to_lower_reaches_rlottie_byte_identical_to_before_the_lowering() {
    // Issue 12: "a template with nothing to lower renders byte-identical to before". rlottie
    // draws what it is given, so the same bytes in are the same frames out: the full prepare
    // path (expressions, text, mattes and masks, effects) must hand it the very JSON the path
    // before those passes did (parse, modifications, retiming).
    for file in NOTHING_TO_LOWER {
        let bytes = std::fs::read(corpus(file)).unwrap();
        let mut found = Vec::new();
        lowerable(&serde_json::from_slice(&bytes).unwrap(), &mut found);
        assert!(found.is_empty(), "{file} has something to lower: {found:?}");
        for fps in [FPS, 60] {
            let prepared = render::prepare(
                &bytes,
                &Modifications::default(),
                spec(Format::Mp4, fps, WIDTH, HEIGHT),
                &FontBook::default(),
            )
            .unwrap();
            let mut untouched = Template::parse(&bytes).unwrap().json;
            let template_slots = slots::discover(&untouched);
            modifications::apply(&mut untouched, &template_slots, &Modifications::default())
                .unwrap();
            let retimed = timeline::retime(&mut untouched, fps);
            assert_eq!(prepared.frame_count, retimed.frame_count, "{file}");
            let untouched = untouched.to_string();
            assert!(
                prepared.source.json.as_str() == untouched,
                "{file} at {fps} fps: the lowering passes changed the JSON rlottie gets"
            );
        }
    }
}
