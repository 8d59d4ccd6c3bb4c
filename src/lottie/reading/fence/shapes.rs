//! The fence's limits on shape items: repeater copies (nested repeaters by their product, as
//! rlottie nests them), polystar points, bezier paths (vertex counts, matching arrays,
//! coordinates) and gradient stops.

use super::{
    Warnings, MAX_GRADIENT_STOPS, MAX_NESTED_REPEATER_COPIES, MAX_PATH_COORDINATE,
    MAX_PATH_VERTICES, MAX_POLYSTAR_POINTS, MAX_REPEATER_COPIES,
};
use crate::lottie::reading::error::TemplateError;
use crate::lottie::reading::model::{property_values, Shape};
use serde_json::Value;

pub(super) fn check_shapes(
    shapes: &[Shape],
    path: &str,
    outer_copies: f64,
    warnings: &mut Warnings,
) -> Result<(), TemplateError> {
    // A repeater repeats the items *before* it in the same group, nested repeaters included
    // (rlottie's repeater processing walks a group backwards and moves everything before a
    // repeater into that repeater's content, allocating every copy eagerly). So an item is
    // made `outer_copies` times the copies of every repeater after it in its list. A
    // repeater over its own limit counts once here: its own check below refuses it.
    let mut made_times = vec![outer_copies; shapes.len()];
    let mut after = outer_copies;
    for (index, shape) in shapes.iter().enumerate().rev() {
        made_times[index] = after;
        if shape.ty == "rp" {
            let copies = max_number(shape.properties.get("c"));
            if is_within(copies, MAX_REPEATER_COPIES) {
                after *= copies.max(1.0);
            }
        }
    }
    for (index, shape) in shapes.iter().enumerate() {
        let shape_path = format!("{path}[{index}]");
        match shape.ty.as_str() {
            "gr" => check_shapes(
                &shape.it,
                &format!("{shape_path}.it"),
                made_times[index],
                warnings,
            )?,
            "rp" => {
                let copies = count_within(
                    shape,
                    &shape_path,
                    ("c", "copies"),
                    MAX_REPEATER_COPIES,
                    "repeater makes",
                )?;
                let copies_made = made_times[index] * copies.max(1.0);
                if copies_made > MAX_NESTED_REPEATER_COPIES {
                    return Err(TemplateError::invalid(
                        format!("{shape_path}.c"),
                        format!("nested repeaters make {copies_made} copies, more than the {MAX_NESTED_REPEATER_COPIES} limit"),
                    ));
                }
            }
            "sr" => {
                count_within(
                    shape,
                    &shape_path,
                    ("pt", "points"),
                    MAX_POLYSTAR_POINTS,
                    "star/polygon has",
                )?;
            }
            "sh" => {
                if let Some(path_property) = shape.properties.get("ks") {
                    check_path_property(path_property, &format!("{shape_path}.ks"))?;
                }
            }
            "gf" | "gs" => check_gradient(shape, &shape_path)?,
            "mm" => warnings
                .add("merge paths are not supported by the renderer and are ignored".to_owned()),
            _ => {}
        }
    }
    Ok(())
}

/// The largest value of the shape's count property `key` (of `unit`s), refused above `limit`:
/// "{shape_path}.{key}: {says} {count} {unit}, more than the {limit} limit".
fn count_within(
    shape: &Shape,
    shape_path: &str,
    (key, unit): (&str, &str),
    limit: f64,
    says: &str,
) -> Result<f64, TemplateError> {
    let count = max_number(shape.properties.get(key));
    if !is_within(count, limit) {
        return Err(TemplateError::invalid(
            format!("{shape_path}.{key}"),
            format!("{says} {count} {unit}, more than the {limit} limit"),
        ));
    }
    Ok(count)
}

/// `value ≤ limit`, false for NaN (a property holding no number is refused, not waved through).
fn is_within(value: f64, limit: f64) -> bool {
    value.partial_cmp(&limit).is_some_and(|order| order.is_le())
}

/// Largest number a scalar property takes (static or any keyframe); NaN when it holds none.
fn max_number(property: Option<&Value>) -> f64 {
    let Some(property) = property else { return 0.0 };
    property_values(property)
        .into_iter()
        .filter_map(|value| match value {
            Value::Array(items) => items.first().and_then(Value::as_f64),
            other => other.as_f64(),
        })
        .fold(f64::NAN, f64::max)
}

/// A bezier path property (static or keyframed): vertex counts, matching arrays, coordinates.
pub(super) fn check_path_property(property: &Value, path: &str) -> Result<(), TemplateError> {
    for value in property_values(property) {
        // Keyframed paths hold their value in a one-element array.
        let shapes: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for shape in shapes {
            let arrays: Vec<(&str, &Vec<Value>)> = ["v", "i", "o"]
                .into_iter()
                .filter_map(|key| {
                    shape
                        .get(key)
                        .and_then(Value::as_array)
                        .map(|array| (key, array))
                })
                .collect();
            let Some((_, vertices)) = arrays.first() else {
                continue;
            };
            if vertices.len() > MAX_PATH_VERTICES {
                return Err(TemplateError::invalid(
                    format!("{path}.v"),
                    format!(
                        "path has {} vertices, more than the {MAX_PATH_VERTICES} limit",
                        vertices.len()
                    ),
                ));
            }
            for (key, array) in &arrays {
                if array.len() != vertices.len() {
                    return Err(TemplateError::invalid(
                        format!("{path}.{key}"),
                        format!(
                            "path has {} vertices but {} entries in '{key}'",
                            vertices.len(),
                            array.len()
                        ),
                    ));
                }
                let too_far = array
                    .iter()
                    .flat_map(|point| point.as_array().into_iter().flatten())
                    .filter_map(Value::as_f64)
                    .any(|coordinate| !is_within(coordinate.abs(), MAX_PATH_COORDINATE));
                if too_far {
                    return Err(TemplateError::invalid(
                        format!("{path}.{key}"),
                        format!("path coordinate beyond ±{MAX_PATH_COORDINATE} pixels"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_gradient(shape: &Shape, path: &str) -> Result<(), TemplateError> {
    let Some(gradient) = shape.properties.get("g") else {
        return Ok(());
    };
    let Some(stops) = gradient.get("p") else {
        return Ok(());
    };
    let count = stops.as_i64().unwrap_or(-1);
    if !(0..=MAX_GRADIENT_STOPS).contains(&count) {
        return Err(TemplateError::invalid(
            format!("{path}.g.p"),
            format!("gradient stop count must be 0..={MAX_GRADIENT_STOPS}, got {stops}"),
        ));
    }
    if let Some(data) = gradient.get("k") {
        for value in property_values(data) {
            let available = value.as_array().map_or(0, Vec::len);
            if available < 4 * count as usize {
                return Err(TemplateError::invalid(
                    format!("{path}.g.k"),
                    format!(
                        "gradient declares {count} stops but holds data for {}",
                        available / 4
                    ),
                ));
            }
        }
    }
    Ok(())
}
