//! What lottie-web draws and rlottie 0.1 reads differently, written the way rlottie reads it,
//! on the render's JSON after its modifications (so a slot's gradient or easing is lowered as
//! the template's own): gradients whose opacity stops sit at offsets of their own
//! ([`gradients`]), keyframes eased per axis ([`easing`]), skewed transforms ([`skew`]) and
//! round corners on rectangles ([`corners`]). What cannot be lowered, and what rlottie does
//! not draw at all ([`unsupported`]), is said in the template's report. Parse-time quirks (a solid
//! without a colour, a static time remap, colours of documents older than 4.1.9) are the
//! template's own: [`super::reading::template`].
//!
//! Each step is linear in the JSON it visits except the easing's resampling, which adds at
//! most [`easing::MAX_RESAMPLED_KEYFRAMES`] keyframes to a template.

pub mod corners;
pub mod easing;
pub mod effects;
pub mod expressions;
pub mod gradients;
pub mod mattes;
pub mod skew;
pub mod text;
pub mod unsupported;

use serde_json::Value;
use std::collections::BTreeSet;

pub use easing::bezier_ease;

/// What the lowering could not do, for the report.
#[derive(Debug, Default)]
pub struct Lowered {
    pub warnings: Vec<String>,
}

/// Lowers `json` (a whole animation) for rlottie.
pub fn lower_for_rlottie(json: &mut Value) -> Lowered {
    let mut warnings = skew::lower_skew(json);
    let mut gradient_warnings = Vec::new();
    let mut gradient_values_left = gradients::MAX_RESAMPLED_GRADIENT_VALUES;
    let mut resampler = easing::Resampler::default();
    let mut undrawn = BTreeSet::new();
    // The rest in one walk, each object's entries visited once (a template holds up to two
    // million values, and a key lookup costs a hash): each object is offered to every step
    // before its children are walked, so a Round Corners lowered in its list is gone before
    // the undrawn features are noted.
    for_each_object(json, |object| {
        let ty = object.get("ty").and_then(Value::as_str);
        unsupported::note_type(ty, &mut undrawn);
        if matches!(ty, Some("gf" | "gs")) {
            gradients::lower_object(object, &mut gradient_warnings, &mut gradient_values_left);
        }
        for (key, value) in object.iter_mut() {
            match key.as_str() {
                "k" => resampler.lower_keyframes(value),
                "shapes" | "it" => corners::lower_list(value),
                _ => unsupported::note_entry(key, value, &mut undrawn),
            }
        }
    });
    warnings.extend(gradient_warnings);
    warnings.extend(resampler.warnings());
    warnings.extend(undrawn);
    Lowered { warnings }
}

/// Every JSON object of `json`, parents before their children, each offered mutably to
/// `visit` before its children are walked (an explicit stack: templates nest deeply).
pub(crate) fn for_each_object(
    json: &mut Value,
    mut visit: impl FnMut(&mut serde_json::Map<String, Value>),
) {
    let mut stack = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                visit(map);
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}
