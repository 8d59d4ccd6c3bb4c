//! Lowering: what rlottie 0.1 does not draw, or reads unlike lottie-web (the designers' player,
//! DESIGN.md "Fidelity"), rewritten on a render's JSON into what it draws alike. [`lower`] runs
//! the passes in their order, the one place that order is written, for a render and for the
//! inspect report alike. Each pass is a module of this room (a test of `./dev structure` holds
//! this map to the `mod` list below):
//!
//! - [`expressions`]: expressions baked into keyframes at the output's frame times (QuickJS,
//!   under a work budget).
//! - [`text`]: text layers turned into shape layers of glyph outlines.
//! - [`mattes`]: track mattes and masks drawn as lottie-web draws them.
//! - [`effects`]: layer effects written into colours and copied layers.
//! - [`skew`]: skewed transforms as nested groups (rlottie has no skew), before the walk below.
//! - [`gradients`], [`easing`], [`corners`]: in one walk over the JSON, gradients whose opacity
//!   stops sit at offsets of their own, keyframes eased per axis and round corners on
//!   rectangles, written the way rlottie reads them.
//! - [`unsupported`]: what rlottie does not draw at all, noted in the same walk for the
//!   template's report (as is what the passes above could not lower).
//!
//! Parse-time quirks (a solid without a colour, a static time remap, colours of documents older
//! than 4.1.9) are the template's own, written when it is read: [`super::reading`]. Retiming to
//! the output's frame rate follows the lowering in a render: [`super::timeline`].
//!
//! The last walk is linear in the JSON it visits except the easing's resampling, which adds at
//! most [`easing::MAX_RESAMPLED_KEYFRAMES`] keyframes to a template; expressions and text run
//! under budgets of their own.

pub mod corners;
pub mod easing;
pub mod effects;
pub mod expressions;
pub mod gradients;
pub mod mattes;
pub mod skew;
pub mod text;
pub mod unsupported;

use crate::spec::Fps;
use expressions::BudgetBreach;
use serde_json::Value;
use std::collections::BTreeSet;
use text::{fonts::FontBook, TextError};

pub use easing::bezier_ease;

/// What a template is lowered for: the fonts its text is drawn in and the frame times its
/// expressions and text animators are sampled at.
#[derive(Debug, Clone, Copy)]
pub struct Lowering<'a> {
    fonts: &'a FontBook,
    expressions_fps: u32,
    text_animators_fps: Option<f64>,
}

impl<'a> Lowering<'a> {
    /// For a render at `fps`: expressions and text animators sampled at its frame times.
    pub fn for_render(fonts: &'a FontBook, fps: Fps) -> Lowering<'a> {
        Lowering {
            fonts,
            expressions_fps: fps.get(),
            text_animators_fps: Some(f64::from(fps.get())),
        }
    }

    /// For the inspect report: expressions baked at the highest output rate (every expression
    /// that bakes there bakes at any), text animators at the template's own frames.
    pub fn for_report(fonts: &'a FontBook) -> Lowering<'a> {
        Lowering {
            fonts,
            expressions_fps: Fps::SUPPORTED.iter().copied().max().unwrap_or(60),
            text_animators_fps: None,
        }
    }
}

/// What the passes could not draw as lottie-web does, in their order: the report lists it
/// (a render has said it already, at CreateTemplate, and drops it).
#[derive(Debug, Default)]
pub struct Lowered {
    pub warnings: Vec<String>,
}

/// Lowers `json`, a whole animation, for rlottie: every pass in its order. `modify` is the
/// caller's step, run once expressions are baked and before anything else is drawn: a render
/// writes its modifications there (after the bake, so no caller value can steer an expression
/// into work the analysis never saw; before text, mattes and effects, which must draw the
/// caller's texts and colours), told whether the expressions ran out of their budget so it can
/// stop first; the report has none. Fails when `modify` does, or when the texts are over their
/// budget ([`text::MAX_TEXT_VERTICES_PER_TEMPLATE`]), leaving `json` partly lowered.
pub fn lower<E: From<TextError>>(
    json: &mut Value,
    lowering: Lowering<'_>,
    modify: impl FnOnce(&mut Value, Option<BudgetBreach>) -> Result<(), E>,
) -> Result<Lowered, E> {
    // rlottie ignores slots: the root `slots` values go into the properties that name them,
    // so that expressions there are evaluated (and charged) like any other.
    super::modifications::resolve_slot_references(json);
    // rlottie ignores expressions: their values at the frame times become keyframes, before
    // text conversion, which keeps the baked transforms of text layers.
    let baked = expressions::bake(json, lowering.expressions_fps);
    modify(json, baked.budget_breach)?;
    let mut warnings = baked.warnings;
    // rlottie draws no text layers: they become glyph shapes.
    let drawn_text =
        text::convert_text_layers_at(json, lowering.fonts, lowering.text_animators_fps)?;
    warnings.extend(drawn_text.warnings);
    // After text: lowered text layers can be matted or matte sources like any shape layer.
    warnings.extend(mattes::lower_mattes_and_masks(json, lowering.expressions_fps).warnings);
    // rlottie ignores layer effects: after text, so that text layers are recoloured as glyph
    // shapes, and after the mattes.
    warnings.extend(effects::lower_layer_effects(json).warnings);
    // Last: on the caller's gradients and on the shapes text, mattes and effects made too.
    warnings.extend(lower_reading_differences(json));
    Ok(Lowered { warnings })
}

/// What else rlottie reads unlike lottie-web (gradient opacity stops, per-axis easing, skew,
/// round corners), written the way it reads it; answers what it could not write, and what
/// rlottie leaves undrawn.
fn lower_reading_differences(json: &mut Value) -> Vec<String> {
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
    warnings
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A shape layer whose position is an expression, above a text layer.
    fn expression_above_text() -> Value {
        json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100, "layers": [
            {"ty": 4, "ind": 1, "nm": "moving", "ip": 0, "op": 30, "st": 0, "shapes": [],
             "ks": {"p": {"a": 0, "k": [10, 20, 0], "x": "[time * 100, 50]"}}},
            {"ty": 5, "ind": 2, "nm": "title", "ip": 0, "op": 30, "st": 0, "ks": {},
             "t": {"d": {"k": [{"s": {"s": 20, "f": "Any", "t": "Hi", "j": 0, "fc": [0, 0, 0]},
                                "t": 0}]}}}]})
    }

    #[test]
    fn the_callers_step_runs_once_expressions_are_baked_and_before_text_is_drawn() {
        let mut json = expression_above_text();
        let fonts = FontBook::default();
        let lowered = lower(&mut json, Lowering::for_report(&fonts), |json, breach| {
            assert_eq!(breach, None);
            assert!(json.pointer("/layers/0/ks/p/x").is_none(), "baked first");
            assert_eq!(
                json.pointer("/layers/1/ty"),
                Some(&json!(5)),
                "text not yet drawn"
            );
            Ok::<(), TextError>(())
        });
        assert!(lowered.is_ok());
        assert_eq!(
            json.pointer("/layers/1/ty"),
            Some(&json!(4)),
            "text drawn as shapes"
        );
    }

    #[test]
    fn a_failing_callers_step_stops_the_lowering_there() {
        #[derive(Debug, PartialEq)]
        struct Refused;
        impl From<TextError> for Refused {
            fn from(_: TextError) -> Refused {
                Refused
            }
        }
        let mut json = expression_above_text();
        let fonts = FontBook::default();
        let fps = Fps::try_from(30).expect("a supported rate");
        let lowered = lower(&mut json, Lowering::for_render(&fonts, fps), |_, _| {
            Err(Refused)
        });
        assert_eq!(lowered.err(), Some(Refused));
        assert_eq!(
            json.pointer("/layers/1/ty"),
            Some(&json!(5)),
            "nothing drawn after it"
        );
    }
}
