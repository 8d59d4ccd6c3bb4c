//! A template and a render request through the service's own steps, none copied here:
//! CreateTemplate's parse (the dotLottie animation it names) and report (`InspectReport`, as
//! the analysis worker builds it), the template's record and admission record as stored,
//! the request's conversion from the wire (`RenderSubmission::try_from`), admission against
//! the record (`jobs::admission::check_against_record`: the theme applied, every modification
//! checked, the still time and segment resolved, the output's budget), and the worker's
//! `render::prepare_with_images` (expressions baked, modifications written, replacement
//! images decoded and fitted, text to glyphs, mattes, masks, layer effects and rlottie's
//! lowering, retiming, the still or segment cut). rlottie itself is not loaded.
//!
//! The input is a template (the first JSON value of the bytes, so corpus files are seeds as
//! they are) followed by bytes that `arbitrary` turns into how it is uploaded (as JSON, or as
//! a dotLottie archive with generated themes of every rule type and a second animation, one
//! of them chosen) and a render request ([`generate`]) with every kind of modification
//! (texts, colours, images encoded here as PNG, JPEG or WebP, scalars, vectors, gradients),
//! a theme, and the output's format, size, frame rate, still time, segment, loop count and
//! poster.
//!
//! Promises checked beyond "no panic": a refusal at admission is INVALID_ARGUMENT naming
//! request fields, in proportion to the request; what admission accepted the worker does not
//! refuse for what admission checked (modifications, the window, the output's length) nor
//! count otherwise (the same frame count, the same output); its other failures are
//! classified deterministic; no text layer is left for rlottie; no number of the template
//! becomes `null` (not finite) on the way; the frame rate is the output's; the prepared
//! document stays within [`MAX_PREPARED_BYTES`] and the fitted images. Time and memory per
//! input are held by libFuzzer's `-timeout` and `-rss_limit_mb`.
//!
//! [`run_reporting`] answers what reached a prepared render, so the seed test can prove that
//! every kind of modification, a theme, a still, a segment and a chosen animation do.

mod generate;
mod upload;

use super::{answer_budget, split_template};
use arbitrary::{Arbitrary, Unstructured};
use lottie_render::error::{Classified, ErrorClass, ServiceErrorCode};
use lottie_render::jobs::admission::{self, JobLimits};
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::lottie::reading::fence;
use lottie_render::lottie::reading::model::{for_each_layer_list, layer_type};
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use lottie_render::render::{self, RenderError};
use lottie_render::spec::{ImageSource, Modifications, RenderSubmission, Window};
use lottie_render::storage::{AdmissionRecord, TemplateRecord};
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;

/// The prepared document handed to rlottie: the template plus at most
/// `text::MAX_GLYPHS_PER_TEMPLATE` glyph outlines; the bundled font's most complex glyphs
/// take a few KiB of JSON each. Fitted replacement images come on top.
const MAX_PREPARED_BYTES: usize = 64 * 1024 * 1024;

/// The service's default job budget (`--max-job-megapixels`) and the longest job.
const LIMITS: JobLimits = JobLimits {
    max_megapixels: 26_600,
    max_duration: std::time::Duration::from_secs(600),
};

/// What of an input reached a prepared render.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Reached {
    /// A prepared render at all.
    pub prepared: bool,
    /// Each kind of modification, in [`modification_kinds`]' order.
    pub kinds: [bool; MODIFICATION_KINDS.len()],
    pub theme: bool,
    pub still: bool,
    pub segment: bool,
    /// A dotLottie archive of which CreateTemplate named an animation.
    pub chosen_animation: bool,
}

impl Reached {
    /// Both inputs' reach.
    pub fn or(self, other: Reached) -> Reached {
        let mut kinds = self.kinds;
        for (kind, reached) in kinds.iter_mut().zip(other.kinds) {
            *kind |= reached;
        }
        Reached {
            prepared: self.prepared || other.prepared,
            kinds,
            theme: self.theme || other.theme,
            still: self.still || other.still,
            segment: self.segment || other.segment,
            chosen_animation: self.chosen_animation || other.chosen_animation,
        }
    }
}

/// The kinds of modification a render request carries.
pub const MODIFICATION_KINDS: [&str; 6] = [
    "texts",
    "colors",
    "images",
    "scalars",
    "vectors",
    "gradients",
];

/// Which kinds `modifications` fills, in [`MODIFICATION_KINDS`]' order.
pub fn modification_kinds(modifications: &Modifications) -> [bool; MODIFICATION_KINDS.len()] {
    // No `..`: a new kind of modification fails to compile here until it is counted (and
    // the seed test then fails until it is generated and reaches a render).
    let Modifications {
        texts,
        colors,
        images,
        scalars,
        vectors,
        gradients,
    } = modifications;
    [
        !texts.is_empty(),
        !colors.is_empty(),
        !images.is_empty(),
        !scalars.is_empty(),
        !vectors.is_empty(),
        !gradients.is_empty(),
    ]
}

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    run_reporting(data);
}

/// [`run`], answering what reached a prepared render.
pub fn run_reporting(data: &[u8]) -> Reached {
    let (template_json, tail) = split_template(data);
    let Ok(request) = generate::Request::arbitrary_take_rest(Unstructured::new(tail)) else {
        return Reached::default();
    };
    // The themes' rules name the template's slots, found as a render finds them.
    let Ok(unpacked) = Template::parse(template_json) else {
        return Reached::default();
    };
    let slots = lottie_render::lottie::slots::discover(&unpacked.json);
    let (upload, animation) = upload::upload(template_json, &request.packing, &slots);

    // CreateTemplate: the parse of the animation it names, the analysis worker's report
    // (over its budget: TEMPLATE_TOO_COMPLEX, no template).
    let Ok(template) = Template::parse_animation(&upload, animation.as_deref()) else {
        return Reached::default();
    };
    let Ok(report) = InspectReport::new(&template) else {
        return Reached::default();
    };
    let wire = generate::render_request(&request, &report);
    let wire_bytes = wire.encoded_len();
    // What the gRPC boundary refuses never reaches admission.
    let Ok(mut submission) = RenderSubmission::try_from(wire) else {
        return Reached::default();
    };
    let record = TemplateRecord {
        id: submission.template_id,
        tenant: Default::default(),
        name: "fuzz".to_owned(),
        created_at_ms: 0,
        fonts: BTreeMap::new(),
        font_sha256: BTreeMap::new(),
        report,
    };
    let admission_record = AdmissionRecord::of(&record);
    let themed = submission.theme.is_some();
    let frames = match admission::check_against_record(&admission_record, &mut submission, LIMITS) {
        Ok(frames) => frames,
        Err(refusal) => {
            assert_eq!(
                refusal.code,
                ServiceErrorCode::InvalidArgument,
                "{refusal:?}"
            );
            assert!(!refusal.violations.is_empty(), "{refusal:?}");
            let answer = refusal.message.len()
                + refusal
                    .violations
                    .iter()
                    .map(|v| v.field.len() + v.description.len())
                    .sum::<usize>();
            assert!(
                answer <= 2 * answer_budget(wire_bytes + template.byte_len),
                "{answer} bytes of refusal for a {wire_bytes} byte request"
            );
            return Reached::default();
        }
    };

    // The worker: the images' bytes as staged for it, the animation the record chose.
    let image_bytes: BTreeMap<String, Vec<u8>> = submission
        .modifications
        .images
        .values()
        .filter_map(|choice| match submission.images.get(&choice.sha256) {
            Some(ImageSource::Sent(bytes)) => Some((choice.sha256.clone(), bytes.to_vec())),
            _ => None,
        })
        .collect();
    let prepared = render::prepare_with_images(render::RenderInput {
        template: &upload,
        animation: record.report.animation.as_deref(),
        modifications: &submission.modifications,
        images: &image_bytes,
        output: submission.output,
        fonts: &FontBook::default(),
    });
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            assert_refusal_is_the_workers_own(&error, !image_bytes.is_empty());
            return Reached::default();
        }
    };
    assert_eq!(
        prepared.frame_count, frames,
        "admission counted other frames"
    );
    assert_eq!(prepared.spec, submission.output);
    let fps = submission.output.fps.get();
    assert!(prepared.frame_count >= 1);
    assert!(f64::from(prepared.frame_count) <= fence::MAX_DURATION_SECONDS * f64::from(fps) + 1.0);
    let fitted_image_bytes: usize = admission_record
        .slots
        .images
        .iter()
        .filter(|slot| submission.modifications.images.contains_key(&slot.id))
        .map(|slot| 6 * slot.width as usize * slot.height as usize + 4096)
        .sum();
    let document = prepared.source.json.as_str();
    assert!(
        document.len() <= upload.len() + MAX_PREPARED_BYTES + fitted_image_bytes,
        "prepared document of {} bytes",
        document.len()
    );
    assert_ready_for_rlottie(document, &template.json, fps);

    Reached {
        prepared: true,
        kinds: modification_kinds(&submission.modifications),
        theme: themed,
        still: matches!(submission.output.window, Some(Window::Still { .. })),
        segment: matches!(submission.output.window, Some(Window::Segment { .. })),
        chosen_animation: record.report.animation.is_some(),
    }
}

/// A worker's refusal of a request admission accepted: only what admission cannot know
/// (expressions over their budget, text over its budget, an image that does not decode or
/// together with the template's own images passes their budget), never what it checked.
fn assert_refusal_is_the_workers_own(error: &RenderError, images_given: bool) {
    let its_own = match error {
        RenderError::ExpressionsOverBudget(_)
        | RenderError::Text(_)
        | RenderError::Image { .. } => true,
        RenderError::Template(_) => images_given,
        _ => false,
    };
    assert!(
        its_own,
        "admission accepted what the worker refused: {error}"
    );
    assert_eq!(error.class(), ErrorClass::Deterministic, "{error}");
}

/// The prepared `document` as rlottie gets it: no visible text layer, no number of
/// `template` turned `null` (a value scaled to infinity is written so), the output's frame
/// rate.
fn assert_ready_for_rlottie(document: &str, template: &Value, fps: u32) {
    let mut json: Value = match serde_json::from_str(document) {
        Ok(json) => json,
        Err(error) => panic!("the prepared document is not JSON: {error}"),
    };
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
    if let Some(path) = nulls_where_numbers_were(template, &json, &mut String::new()) {
        panic!("the number at {path} became null (not finite) on the way to rlottie");
    }
    assert_eq!(json.get("fr").and_then(Value::as_u64), Some(u64::from(fps)));
}

/// The first place where `before` has a number and `after` a `null` (serde_json writes
/// non-finite floats as `null`, so that is what an overflow looks like).
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
