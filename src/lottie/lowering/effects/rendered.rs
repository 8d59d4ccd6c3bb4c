//! Which layer effects the render draws on pixels rather than the lowering on colours: a
//! Gaussian Blur (`ty` 29, "ADBE Gaussian Blur 2") and a Drop Shadow (`ty` 25, "ADBE Drop
//! Shadow") on a layer of the root composition. The render (`render::layer_effects`) draws
//! the composition in parts at such a layer (what is beneath it, the layer, what is above),
//! filters the layer's pixels and composites them; the lowering leaves these effects in place
//! and warns about none of them. One rule, read by both, so a template's report says exactly
//! what its renders draw.
//!
//! Drawn: the root composition's layers that draw pixels (precomposition, solid, image, shape;
//! text is shapes by then), shown, outside track mattes (a matte applies after the effects,
//! and the parts would apply it before), at most [`MAX_RENDERED_EFFECT_LAYERS`] of them. The
//! rest keep the lowering's treatment: a drop shadow becomes an offset copy without its
//! softness, a blur is reported as not drawn.

use serde_json::Value;

/// Layers of the root composition whose blurs and shadows the render draws. Each adds one
/// rlottie render of the layer alone per frame (on a canvas grown by the blur's reach), one
/// more of what lies between it and the next, and a filter pass: a designer's blurred
/// background, a card's soft shadow and a blurred title fit four times over; past that the
/// layers keep the lowering's treatment (and its warning).
pub const MAX_RENDERED_EFFECT_LAYERS: usize = 4;

/// Bodymovin's effect type codes of the effects drawn here.
pub const GAUSSIAN_BLUR: i64 = 29;
pub const DROP_SHADOW: i64 = 25;

/// Layer types that draw pixels of their own: precomposition, solid, image, shape, and text
/// (shapes once lowered; counted before as after, so a template's charge is the same).
const DRAWING_LAYER_TYPES: [i64; 5] = [0, 1, 2, 4, 5];

/// An effect the render draws, with its parameters as properties (`{ "a", "k" }`), read per
/// frame by the render.
#[derive(Debug, Clone, Copy)]
pub enum RenderedEffect<'a> {
    /// Parameters: 0 blurriness, 1 blur dimensions (1 both, 2 horizontal, 3 vertical),
    /// 2 repeat edge pixels (drawn by lottie-web as an edge mode at its filter region's edge,
    /// where nothing is drawn: no visible difference, so not read).
    Blur {
        blurriness: Option<&'a Value>,
        dimensions: Option<&'a Value>,
    },
    /// Parameters: 0 colour, 1 opacity (0..=255), 2 direction (degrees), 3 distance,
    /// 4 softness, 5 shadow only (lottie-web draws the layer whatever it says: not read).
    Shadow {
        colour: Option<&'a Value>,
        opacity: Option<&'a Value>,
        direction: Option<&'a Value>,
        distance: Option<&'a Value>,
        softness: Option<&'a Value>,
    },
}

/// Parameter `index` of an effect, as a property.
fn parameter(effect: &Value, index: usize) -> Option<&Value> {
    effect.get("ef")?.as_array()?.get(index)?.get("v")
}

/// The effect `effect` asks the render to draw, if it is one of these.
pub fn rendered_effect(effect: &Value) -> Option<RenderedEffect<'_>> {
    match effect.get("ty").and_then(Value::as_i64)? {
        GAUSSIAN_BLUR => Some(RenderedEffect::Blur {
            blurriness: parameter(effect, 0),
            dimensions: parameter(effect, 1),
        }),
        DROP_SHADOW => Some(RenderedEffect::Shadow {
            colour: parameter(effect, 0),
            opacity: parameter(effect, 1),
            direction: parameter(effect, 2),
            distance: parameter(effect, 3),
            softness: parameter(effect, 4),
        }),
        _ => None,
    }
}

/// Whether `layer` asks for an effect the render could draw.
fn has_rendered_effect(layer: &Value) -> bool {
    layer
        .get("ef")
        .and_then(Value::as_array)
        .is_some_and(|effects| {
            effects
                .iter()
                .any(|effect| rendered_effect(effect).is_some())
        })
}

/// Whether the render can draw `layer`'s effects on its pixels (position aside).
fn drawable(layer: &Value) -> bool {
    let drawing = layer
        .get("ty")
        .and_then(Value::as_i64)
        .is_some_and(|ty| DRAWING_LAYER_TYPES.contains(&ty));
    let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
    let in_a_matte = ["td", "tt", "tp"].iter().any(|key| {
        layer
            .get(*key)
            .is_some_and(|value| value.as_i64() != Some(0))
    });
    drawing && !hidden && !in_a_matte
}

/// The indices (in `root_layers`, the root composition's list, top first) of the layers whose
/// blurs and shadows the render draws: the first [`MAX_RENDERED_EFFECT_LAYERS`] that ask for
/// one and can have it.
pub fn rendered_effect_layers(root_layers: &[Value]) -> Vec<usize> {
    root_layers
        .iter()
        .enumerate()
        .filter(|(_, layer)| has_rendered_effect(layer) && drawable(layer))
        .map(|(index, _)| index)
        .take(MAX_RENDERED_EFFECT_LAYERS)
        .collect()
}

/// How many filters the render runs on pixels for `root_layers` (each blur and drop shadow of
/// each layer [`rendered_effect_layers`] names): what a job is charged for them.
pub fn rendered_filter_count(root_layers: &[Value]) -> usize {
    rendered_effect_layers(root_layers)
        .into_iter()
        .filter_map(|index| root_layers[index].get("ef")?.as_array())
        .flatten()
        .filter(|effect| rendered_effect(effect).is_some())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blurred(extra: Value) -> Value {
        let mut layer = json!({"ty": 4, "ef": [{"ty": 29, "ef": [{"v": {"a": 0, "k": 10}}]}]});
        if let (Some(layer), Some(extra)) = (layer.as_object_mut(), extra.as_object()) {
            layer.extend(extra.clone());
        }
        layer
    }

    #[test]
    fn matted_hidden_and_null_layers_and_those_past_the_limit_are_left_to_the_lowering() {
        let layers = vec![
            blurred(json!({"tt": 1})),
            blurred(json!({"td": 1})),
            blurred(json!({"hd": true})),
            blurred(json!({"ty": 3})),
            json!({"ty": 4, "ef": [{"ty": 21}]}),
            blurred(json!({})),
            blurred(json!({"ty": 0})),
            blurred(json!({"ty": 1, "tt": 0})),
            blurred(json!({"ty": 2})),
            blurred(json!({})),
        ];
        assert_eq!(rendered_effect_layers(&layers), vec![5, 6, 7, 8]);
        assert_eq!(rendered_filter_count(&layers), 4);
    }
}
