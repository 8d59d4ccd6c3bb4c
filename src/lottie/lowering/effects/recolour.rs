//! Writing a colour map into what a layer draws: fills, strokes and gradients (gradients
//! subdivided so the map stays close between their stops), and the opacity and offset a
//! drop shadow copy takes.

use super::colour_map::ColourMap;
use super::parameters::{colour_of, is_animated};
use serde_json::{json, Map, Value};

/// Intermediate stops per gradient interval when a Tint or Tritone maps a gradient: with 8,
/// the piecewise-linear map is within a few 8-bit levels of the effect's curve.
const GRADIENT_SUBDIVISIONS: usize = 8;
/// Colour stops of a mapped gradient: the fence's limit for a template's own gradients.
const MAX_SUBDIVIDED_STOPS: usize = crate::lottie::reading::fence::MAX_GRADIENT_STOPS as usize;

/// Applies `map` to every fill, stroke and gradient of a shape list, groups included.
pub(super) fn recolour_shapes(shapes: &mut [Value], map: &ColourMap) {
    for shape in shapes.iter_mut() {
        let Some(object) = shape.as_object_mut() else {
            continue;
        };
        match object.get("ty").and_then(Value::as_str) {
            Some("gr") => {
                if let Some(Value::Array(items)) = object.get_mut("it") {
                    recolour_shapes(items, map);
                }
            }
            Some("fl" | "st") => recolour_solid_paint(object, map),
            Some(kind @ ("gf" | "gs")) => {
                if let ColourMap::Fill { .. } = map {
                    // A Fill leaves one colour: the gradient becomes a plain fill or stroke.
                    let plain = if kind == "gf" { "fl" } else { "st" };
                    object.insert("ty".to_owned(), json!(plain));
                    recolour_solid_paint(object, map);
                } else if let Some(gradient) = object.get_mut("g") {
                    recolour_gradient(gradient, map);
                }
            }
            _ => {}
        }
    }
}

fn recolour_solid_paint(paint: &mut Map<String, Value>, map: &ColourMap) {
    if let ColourMap::Fill {
        animated_colour: Some(animated),
        ..
    } = map
    {
        paint.insert("c".to_owned(), animated.clone());
        return;
    }
    match paint.get_mut("c") {
        Some(property) => map_property_values(property, &mut |value| {
            if let Some(colour) = colour_of(value) {
                let [r, g, b] = map.map(colour);
                *value = json!([r, g, b, 1]);
            }
        }),
        None => {
            let [r, g, b] = map.map([0.0, 0.0, 0.0]);
            paint.insert("c".to_owned(), json!({"a": 0, "k": [r, g, b, 1]}));
        }
    }
}

/// Maps the colour stops of a gradient (`{"p": stops, "k": property}`); opacity stops after
/// them are kept. The effect maps every pixel, and a map of the stops alone would be linear
/// between them where the effect is not: each interval gets intermediate stops first
/// (interpolated in sRGB, as renderers draw gradients), up to [`MAX_SUBDIVIDED_STOPS`].
fn recolour_gradient(gradient: &mut Value, map: &ColourMap) {
    let stops = gradient.get("p").and_then(Value::as_u64).unwrap_or(0) as usize;
    let Some(property) = gradient.get_mut("k") else {
        return;
    };
    let well_formed = stops >= 2
        && crate::lottie::reading::model::property_values(property)
            .iter()
            .all(|value| {
                value.as_array().is_some_and(|items| {
                    items.len() >= stops * 4 && items[..stops * 4].iter().all(Value::is_number)
                })
            });
    let steps = if well_formed {
        (MAX_SUBDIVIDED_STOPS - 1) / (stops - 1)
    } else {
        1
    }
    .clamp(1, GRADIENT_SUBDIVISIONS);
    map_property_values(property, &mut |value| {
        let Some(items) = value.as_array_mut() else {
            return;
        };
        let number = |value: &Value| value.as_f64().unwrap_or(0.0);
        let colour_stops: Vec<[f64; 4]> = items
            .chunks(4)
            .take(stops)
            .filter(|stop| stop.len() == 4)
            .map(|stop| {
                [
                    number(&stop[0]),
                    number(&stop[1]),
                    number(&stop[2]),
                    number(&stop[3]),
                ]
            })
            .collect();
        let mut subdivided = Vec::with_capacity(colour_stops.len() * steps);
        for (index, stop) in colour_stops.iter().enumerate() {
            subdivided.push(*stop);
            if let Some(next) = colour_stops.get(index + 1).filter(|_| steps > 1) {
                for step in 1..steps {
                    let t = step as f64 / steps as f64;
                    subdivided.push(std::array::from_fn(|i| stop[i] + (next[i] - stop[i]) * t));
                }
            }
        }
        let rest = items.split_off(colour_stops.len() * 4);
        items.clear();
        for [position, r, g, b] in subdivided {
            let [r, g, b] = map.map([r, g, b].map(|c| c.clamp(0.0, 1.0)));
            items.extend([json!(position), json!(r), json!(g), json!(b)]);
        }
        items.extend(rest);
    });
    if well_formed && steps > 1 {
        gradient["p"] = json!((stops - 1) * steps + 1);
    }
}

/// Calls `edit` on the static value or on every keyframe's start and end values.
fn map_property_values(property: &mut Value, edit: &mut dyn FnMut(&mut Value)) {
    let keyframed = is_animated(property);
    let Some(k) = property.get_mut("k") else {
        return;
    };
    match k {
        Value::Array(keyframes) if keyframed => {
            for keyframe in keyframes.iter_mut() {
                for key in ["s", "e"] {
                    if let Some(value) = keyframe.get_mut(key) {
                        edit(value);
                    }
                }
            }
        }
        static_value => edit(static_value),
    }
}

/// Multiplies a layer's opacity (`ks.o`, 0..=100, absent = 100) by `factor`.
pub(super) fn scale_layer_opacity(layer: &mut Value, factor: f64) {
    let Some(transform) = layer.get_mut("ks").and_then(Value::as_object_mut) else {
        return;
    };
    let property = transform
        .entry("o")
        .or_insert_with(|| json!({"a": 0, "k": 100}));
    map_property_values(property, &mut |value| match value {
        Value::Array(items) => {
            if let Some(first) = items.first_mut() {
                *first = json!(first.as_f64().unwrap_or(100.0) * factor);
            }
        }
        other => *other = json!(other.as_f64().unwrap_or(100.0) * factor),
    });
}

/// Moves a layer's content by `offset` in its own coordinates (its anchor point moves the
/// other way), as lottie-web's feOffset does inside the layer's transform.
pub(super) fn offset_layer(layer: &mut Value, offset: [f64; 2]) {
    let Some(transform) = layer.get_mut("ks").and_then(Value::as_object_mut) else {
        return;
    };
    let property = transform
        .entry("a")
        .or_insert_with(|| json!({"a": 0, "k": [0, 0, 0]}));
    map_property_values(property, &mut |value| {
        if let Some(items) = value.as_array_mut() {
            for (slot, delta) in items.iter_mut().zip(offset) {
                *slot = json!(slot.as_f64().unwrap_or(0.0) - delta);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tinted_gradient_gets_intermediate_stops_mapped_from_its_interpolated_colours() {
        let tint = ColourMap::Tint {
            black: [0.0, 0.0, 0.0],
            white: [1.0, 1.0, 1.0],
            amount: 1.0,
        };
        // Red to blue with one opacity stop pair after the colour stops.
        let mut gradient =
            json!({"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1]}});
        recolour_gradient(&mut gradient, &tint);
        assert_eq!(gradient["p"], json!(1 + GRADIENT_SUBDIVISIONS));
        let values: Vec<f64> = gradient["k"]["k"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(values.len(), (1 + GRADIENT_SUBDIVISIONS) * 4 + 4);
        assert_eq!(&values[values.len() - 4..], &[0.0, 1.0, 1.0, 1.0]);
        // The middle stop: position 0.5, the tint of sRGB-interpolated (0.5, 0, 0.5).
        let middle = &values[GRADIENT_SUBDIVISIONS / 2 * 4..][..4];
        let expected = tint.map([0.5, 0.0, 0.5]);
        assert!((middle[0] - 0.5).abs() < 1e-9);
        assert!(middle[1..]
            .iter()
            .zip(expected)
            .all(|(a, b)| (a - b).abs() < 1e-9));
    }
}
