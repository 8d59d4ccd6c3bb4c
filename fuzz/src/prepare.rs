//! The worker's steps before rlottie, as `render::prepare` runs them: parse and fence the
//! template, discover its slots, check a validated render request's modifications, bake
//! expressions into keyframes (QuickJS under its budget), write the modifications, turn text
//! layers into glyph shapes in the bundled font (text animators sampled at the output frame
//! rate), lower mattes, masks and layer effects, retime to the output frame rate. rlottie
//! itself is not loaded.
//!
//! The input is a template (the first JSON value of the bytes, so corpus files are seeds as
//! they are) followed by bytes that `arbitrary` turns into a render request: texts and
//! colours for existing or made-up slots, from a dictionary of hard scripts or arbitrary
//! Unicode, and the output frame rate. Only requests the gRPC conversion accepts go on, as
//! in the service.
//!
//! Promises checked beyond "no panic": modifications fail only for unknown slots; no text
//! layer is left for rlottie; every number handed to rlottie is finite (a time scaled to
//! infinity would be written as `null`); the frame count is the template's duration at the
//! output rate; warnings stay in proportion to the input; the prepared document stays
//! within [`MAX_PREPARED_BYTES`]. Time and memory per input are held by libFuzzer's
//! `-timeout` and `-rss_limit_mb`.

use super::{answer_budget, split_template};
use arbitrary::{Arbitrary, Unstructured};
use lottie_render::grpc::proto;
use lottie_render::lottie::model::{for_each_layer_list, layer_type};
use lottie_render::lottie::modifications::{self, ModificationError};
use lottie_render::lottie::text::{self, fonts::FontBook};
use lottie_render::lottie::{effects, expressions, fence, mattes, slots, timeline, Template};
use lottie_render::spec::RenderSubmission;
use serde_json::Value;

/// The prepared document handed to rlottie: the template plus at most
/// `text::MAX_GLYPHS_PER_TEMPLATE` glyph outlines; the bundled font's most complex glyphs
/// take a few KiB of JSON each.
const MAX_PREPARED_BYTES: usize = 64 * 1024 * 1024;

/// Texts that stress shaping, bidi, line breaking and fallback.
const SAMPLE_TEXTS: &[&str] = &[
    "",
    " ",
    "Hello\nWorld",
    "\n\n\n\n",
    "Supercalifragilisticexpialidociousantidisestablishmentarianism",
    "مرحبا بالعالم hello عالم",
    "שלום עולם 123",
    "日本語のテキストは単語の間に空白がありません",
    "한국어 텍스트",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "e\u{301}\u{302}\u{303}\u{304}\u{305}\u{306}\u{307}\u{308}",
    "👩‍👩‍👧‍👦🏳️‍🌈👍🏽",
    "\u{202E}override\u{202C} \u{2067}isolate\u{2069}",
    "\u{200B}\u{200B}\u{FEFF}\u{00AD}\u{2028}\u{2029}",
    "ﷺ ﷽ ﬀﬁﬂﬃﬄ",
    "\u{10FFFF}\u{E000}\u{FFFD}",
];

#[derive(Debug, Arbitrary)]
enum SlotChoice {
    /// The n-th slot of the template (modulo their number).
    Existing(u8),
    /// Any id, mostly one the template lacks.
    Made(String),
}

#[derive(Debug, Arbitrary)]
enum TextChoice {
    Sample(u8),
    Repeated(u8, u8),
    Free(String),
}

#[derive(Debug, Arbitrary)]
enum ColorChoice {
    Bytes([u8; 3], Option<u8>),
    Free(f64, f64, f64, Option<f64>),
}

#[derive(Debug, Arbitrary)]
struct Request {
    texts: Vec<(SlotChoice, TextChoice)>,
    colors: Vec<(SlotChoice, ColorChoice)>,
    sixty_fps: bool,
}

fn slot_id<T>(choice: SlotChoice, existing: &[T], id: impl Fn(&T) -> &str) -> String {
    match choice {
        SlotChoice::Existing(index) if !existing.is_empty() => {
            id(&existing[usize::from(index) % existing.len()]).to_owned()
        }
        SlotChoice::Existing(_) => "none".to_owned(),
        SlotChoice::Made(id) => id,
    }
}

fn text(choice: TextChoice) -> String {
    let sample = |index: u8| SAMPLE_TEXTS[usize::from(index) % SAMPLE_TEXTS.len()];
    match choice {
        TextChoice::Sample(index) => sample(index).to_owned(),
        TextChoice::Repeated(index, times) => sample(index).repeat(usize::from(times)),
        TextChoice::Free(text) => text,
    }
}

fn color(choice: ColorChoice) -> proto::Color {
    let unit = |byte: u8| f64::from(byte) / 255.0;
    match choice {
        ColorChoice::Bytes([r, g, b], a) => proto::Color {
            r: unit(r),
            g: unit(g),
            b: unit(b),
            a: a.map(unit),
        },
        ColorChoice::Free(r, g, b, a) => proto::Color { r, g, b, a },
    }
}

/// Every number in `value` (serde_json writes non-finite floats as `null`, so a `null`
/// where the template had a number is what an overflow looks like).
fn nulls_where_numbers_were(before: &Value, after: &Value, path: &mut String) -> Option<String> {
    match (before, after) {
        (Value::Number(_), Value::Null) => Some(path.clone()),
        (Value::Object(old), Value::Object(new)) => old.iter().find_map(|(key, old_value)| {
            let new_value = new.get(key)?;
            let length = path.len();
            path.push('/');
            path.push_str(key);
            let found = nulls_where_numbers_were(old_value, new_value, path);
            path.truncate(length);
            found
        }),
        (Value::Array(old), Value::Array(new)) => {
            old.iter().zip(new).enumerate().find_map(|(index, (o, n))| {
                let length = path.len();
                path.push_str(&format!("/{index}"));
                let found = nulls_where_numbers_were(o, n, path);
                path.truncate(length);
                found
            })
        }
        _ => None,
    }
}

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    let (template_bytes, tail) = split_template(data);
    let Ok(template) = Template::parse(template_bytes) else {
        return;
    };
    let Ok(request) = Request::arbitrary_take_rest(Unstructured::new(tail)) else {
        return;
    };
    let found = slots::discover(&template.json);
    let texts = request
        .texts
        .into_iter()
        .map(|(slot, choice)| (slot_id(slot, &found.texts, |s| &s.id), text(choice)))
        .collect();
    let colors = request
        .colors
        .into_iter()
        .map(|(slot, choice)| (slot_id(slot, &found.colors, |s| &s.id), color(choice)))
        .collect();
    let fps = if request.sixty_fps { 60 } else { 30 };
    let wire = proto::RenderRequest {
        template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11".to_owned(),
        modifications: Some(proto::Modifications {
            texts,
            colors,
            ..Default::default()
        }),
        output: Some(proto::OutputSpec {
            format: proto::Format::Webm as i32,
            fps,
            width: 0,
            height: 0,
            background: None,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    };
    // What the gRPC boundary refuses never reaches the worker.
    let Ok(submission) = RenderSubmission::try_from(wire) else {
        return;
    };
    let modifications = &submission.modifications;
    let unknown = modifications
        .colors
        .keys()
        .any(|id| found.color(id).is_none())
        || modifications
            .texts
            .keys()
            .any(|id| found.text(id).is_none());

    // The worker's steps in `render::prepare`'s order: check, resolve slot references, bake
    // expressions, write the modifications, text to glyphs, mattes, effects, retime.
    let mut json = template.json.clone();
    match modifications::check(&found, modifications)
        .into_iter()
        .next()
    {
        None => assert!(!unknown, "an unknown slot was accepted"),
        Some(
            ModificationError::UnknownColorSlot { .. } | ModificationError::UnknownTextSlot { .. },
        ) => {
            assert!(unknown, "a known slot was refused");
            return;
        }
        Some(error) => panic!("a validated request was refused: {error}"),
    }
    modifications::resolve_slot_references(&mut json);
    // An expression budget that runs out is a classified refusal of the render, as in the
    // worker.
    if expressions::bake(&mut json, fps).budget_breach.is_some() {
        return;
    }
    modifications::write(&mut json, &found, modifications);

    // Over the text budget is a classified refusal (TEMPLATE_TOO_COMPLEX), as in the worker.
    // At the output's frame rate, as the worker converts (text animators sampled there).
    let Ok(report) =
        text::convert_text_layers_at(&mut json, &FontBook::default(), Some(f64::from(fps)))
    else {
        return;
    };
    let modification_bytes: usize = modifications
        .texts
        .iter()
        .map(|(id, text)| id.len() + text.len())
        .sum();
    let warning_bytes: usize = report.warnings.iter().map(String::len).sum();
    assert!(
        warning_bytes <= answer_budget(template_bytes.len() + modification_bytes),
        "{warning_bytes} bytes of text warnings for a {} byte template",
        template_bytes.len()
    );
    for_each_layer_list(&mut json, |layers| {
        for layer in layers.iter() {
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            let ty = layer.get("ty").and_then(Value::as_i64);
            assert!(
                hidden || ty != Some(layer_type::TEXT),
                "a text layer is left for rlottie"
            );
        }
    });

    // After text, as in the worker: lowered text layers can be matted, and are recoloured by
    // effects as glyph shapes.
    mattes::lower_mattes_and_masks(&mut json);
    effects::lower_layer_effects(&mut json);
    for_each_layer_list(&mut json, |layers| {
        for layer in layers.iter() {
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            let ty = layer.get("ty").and_then(Value::as_i64);
            assert!(
                hidden || ty != Some(layer_type::TEXT),
                "mattes or effects brought back a text layer for rlottie"
            );
        }
    });

    let converted = json.clone();
    let timeline = timeline::retime(&mut json, submission.output.fps.get());
    assert_eq!(
        timeline.frame_count,
        timeline::frame_count(template.duration_seconds(), fps)
    );
    assert!(timeline.frame_count >= 1);
    assert!(f64::from(timeline.frame_count) <= fence::MAX_DURATION_SECONDS * f64::from(fps) + 1.0);
    assert_eq!(json.get("fr").and_then(Value::as_u64), Some(u64::from(fps)));
    if let Some(path) = nulls_where_numbers_were(&converted, &json, &mut String::new()) {
        panic!("retiming turned the number at {path} into null (not finite)");
    }
    let prepared = json.to_string();
    assert!(
        prepared.len() <= template_bytes.len() + MAX_PREPARED_BYTES,
        "prepared document of {} bytes",
        prepared.len()
    );
}
