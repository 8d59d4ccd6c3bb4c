//! What one entry of a layer's `ef` list asks for: its type, its parameters (first values,
//! whether animated), and the [`Effect`] the lowering draws, reports or skips.

use super::colour_map::ColourMap;
use super::{EffectOn, Lowering};
use serde_json::Value;

/// Bodymovin's effect type codes (`ef[].ty`) for the effects lowered here.
mod effect_type {
    pub(crate) const TINT: i64 = 20;
    pub(crate) const FILL: i64 = 21;
    pub(crate) const TRITONE: i64 = 23;
    pub(crate) const DROP_SHADOW: i64 = 25;
    /// A group of expression controls or an effect Bodymovin has no code for.
    pub(crate) const GROUP: i64 = 5;
}

/// Effects lottie-web 5.x draws that are not lowered: Stroke (22), Pro Levels (24), Matte3
/// (28), Gaussian Blur (29), Transform (35). Their warning says the preview differs.
pub(super) const DRAWN_BY_LOTTIE_WEB_ONLY: [i64; 5] = [22, 24, 28, 29, 35];

/// Match-name prefixes of `ty` 5 groups that draw nothing in any player: expression controls
/// (sliders, colours, points, …) and pseudo-effects such as rig controllers.
const CONTROL_MATCH_NAME_PREFIXES: [&str; 2] = ["Pseudo/", "ADBE "];
const CONTROL_MATCH_NAME_SUFFIX: &str = " Control";

/// A drop shadow: colour, opacity 0..=1, offset in the layer's coordinates.
#[derive(Debug, Clone, Copy)]
pub(super) struct DropShadow {
    pub(super) colour: [f64; 3],
    pub(super) opacity: f64,
    pub(super) offset: [f64; 2],
}

/// What one entry of `ef` asks for.
pub(super) enum Effect {
    Colour {
        map: ColourMap,
        opacity: f64,
    },
    Shadow(DropShadow),
    /// Draws nothing anywhere (expression controls).
    Control,
    NotDrawn,
}

/// Parameter `index` of an effect (`ef[].ef[index].v`) and whether it is animated.
fn parameter(effect: &Value, index: usize) -> Option<&Value> {
    effect.get("ef")?.as_array()?.get(index)?.get("v")
}

pub(super) fn is_animated(property: &Value) -> bool {
    property.get("a").and_then(Value::as_i64) == Some(1)
        || property
            .get("k")
            .and_then(Value::as_array)
            .and_then(|items| items.first())
            .is_some_and(Value::is_object)
}

fn first_value(property: &Value) -> Option<&Value> {
    crate::lottie::reading::model::property_initial_value(property)
}

fn number_parameter(effect: &Value, index: usize) -> Option<f64> {
    match first_value(parameter(effect, index)?)? {
        Value::Array(items) => items.first()?.as_f64(),
        other => other.as_f64(),
    }
    .filter(|value| value.is_finite())
}

fn colour_parameter(effect: &Value, index: usize) -> Option<[f64; 3]> {
    colour_of(first_value(parameter(effect, index)?)?)
}

pub(super) fn colour_of(value: &Value) -> Option<[f64; 3]> {
    let items = value.as_array()?;
    let channel = |i: usize| {
        items
            .get(i)?
            .as_f64()
            .filter(|v| v.is_finite())
            .map(|v| v.clamp(0.0, 1.0))
    };
    Some([channel(0)?, channel(1)?, channel(2)?])
}

/// Whether any of the effect's parameters `indices` is keyframed.
fn any_animated(effect: &Value, indices: &[usize]) -> bool {
    indices
        .iter()
        .filter_map(|index| parameter(effect, *index))
        .any(is_animated)
}

impl Lowering<'_> {
    pub(super) fn classify(&mut self, effect: &Value, on: EffectOn<'_>) -> Effect {
        let ty = effect.get("ty").and_then(Value::as_i64).unwrap_or(-1);
        let animated_warning = |lowering: &mut Lowering| {
            lowering.warn(on.says("has animated parameters, drawn at their first value"));
        };
        match ty {
            effect_type::FILL => {
                // Parameters: 0 mask, 1 all masks, 2 colour, 3 invert, 4-5 feather, 6 opacity.
                let Some(colour) = colour_parameter(effect, 2) else {
                    return Effect::NotDrawn;
                };
                let animated_colour = parameter(effect, 2).filter(|p| is_animated(p)).cloned();
                if any_animated(effect, &[6]) {
                    animated_warning(self);
                }
                Effect::Colour {
                    map: ColourMap::Fill {
                        colour,
                        animated_colour,
                    },
                    opacity: number_parameter(effect, 6).unwrap_or(1.0).clamp(0.0, 1.0),
                }
            }
            effect_type::TINT => {
                // Parameters: 0 map black to, 1 map white to, 2 amount (%).
                let (Some(black), Some(white)) =
                    (colour_parameter(effect, 0), colour_parameter(effect, 1))
                else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2]) {
                    animated_warning(self);
                }
                let amount = number_parameter(effect, 2).unwrap_or(100.0) / 100.0;
                Effect::Colour {
                    map: ColourMap::Tint {
                        black,
                        white,
                        amount: amount.clamp(0.0, 1.0),
                    },
                    opacity: 1.0,
                }
            }
            effect_type::TRITONE => {
                // Parameters: 0 highlights, 1 midtones, 2 shadows (blend is not drawn by
                // lottie-web).
                let (Some(highlights), Some(midtones), Some(shadows)) = (
                    colour_parameter(effect, 0),
                    colour_parameter(effect, 1),
                    colour_parameter(effect, 2),
                ) else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2]) {
                    animated_warning(self);
                }
                Effect::Colour {
                    map: ColourMap::Tritone {
                        highlights,
                        midtones,
                        shadows,
                    },
                    opacity: 1.0,
                }
            }
            effect_type::DROP_SHADOW => {
                // Parameters: 0 colour, 1 opacity (0..=255), 2 direction (degrees),
                // 3 distance, 4 softness, 5 shadow only (not drawn by lottie-web).
                let Some(colour) = colour_parameter(effect, 0) else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2, 3, 4]) {
                    animated_warning(self);
                }
                let opacity =
                    (number_parameter(effect, 1).unwrap_or(255.0) / 255.0).clamp(0.0, 1.0);
                let angle = (number_parameter(effect, 2).unwrap_or(0.0) - 90.0).to_radians();
                let distance = number_parameter(effect, 3).unwrap_or(0.0);
                if number_parameter(effect, 4).unwrap_or(0.0) > 0.0 {
                    self.warn(on.says(format_args!(
                        "is drawn without its softness ({})",
                        super::RENDERED_WHERE
                    )));
                }
                Effect::Shadow(DropShadow {
                    colour,
                    opacity,
                    offset: [distance * angle.cos(), distance * angle.sin()],
                })
            }
            effect_type::GROUP if is_control(effect) => Effect::Control,
            _ => Effect::NotDrawn,
        }
    }
}

/// Whether a `ty` 5 group is an expression control or pseudo-effect (draws nothing).
fn is_control(effect: &Value) -> bool {
    let match_name = effect.get("mn").and_then(Value::as_str).unwrap_or_default();
    match_name.starts_with(CONTROL_MATCH_NAME_PREFIXES[0])
        || (match_name.starts_with(CONTROL_MATCH_NAME_PREFIXES[1])
            && match_name.ends_with(CONTROL_MATCH_NAME_SUFFIX))
}
