//! What lottie-web draws and rlottie 0.1 reads differently, written the way rlottie reads it,
//! on the render's JSON after its modifications (so a slot's gradient or easing is lowered as
//! the template's own): gradients whose opacity stops sit at offsets of their own
//! ([`gradients`]), keyframes eased per axis ([`easing`]), skewed transforms ([`skew`]) and
//! round corners on rectangles ([`corners`]). What cannot be lowered, and what rlottie does
//! not draw at all ([`unsupported`]), is said in the template's report. Parse-time quirks (a solid
//! without a colour, a static time remap, colours of documents older than 4.1.9) are the
//! template's own: [`super::template`].
//!
//! Each step is linear in the JSON it visits except the easing's resampling, which adds at
//! most [`easing::MAX_RESAMPLED_KEYFRAMES`] keyframes to a template.

pub mod corners;
pub mod easing;
pub mod gradients;
pub mod skew;
pub mod unsupported;

use serde_json::Value;

pub use easing::bezier_ease;

/// What the lowering could not do, for the report.
#[derive(Debug, Default)]
pub struct Lowered {
    pub warnings: Vec<String>,
}

/// Lowers `json` (a whole animation) for rlottie.
pub fn lower_for_rlottie(json: &mut Value) -> Lowered {
    let mut warnings = Vec::new();
    warnings.extend(gradients::resample_opacity_stops(json));
    warnings.extend(easing::split_per_axis_easing(json));
    warnings.extend(skew::lower_skew(json));
    corners::round_rectangle_corners(json);
    warnings.extend(unsupported::warnings(json));
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
