//! What lottie-web shows and rlottie 0.1 does not, written the way rlottie reads it when the
//! template is parsed, before anything else sees the tree (slots, the fence, the report and
//! every render see the same): a solid without a colour, a static time remap, and the
//! colours of documents older than Bodymovin 4.1.9. Render-time lowerings, which must also
//! reach the caller's values, are [`crate::lottie::lowering`]'s.

use serde_json::Value;

/// The first Bodymovin version writing fill and stroke colours in 0..=1; lottie-web divides
/// older documents' by 255 (its `checkColors`).
const FIRST_UNIT_COLOUR_VERSION: [u64; 3] = [4, 1, 9];

/// Lowers every parse-time quirk of `json` (a whole animation).
pub(crate) fn lower_parse_time_quirks(json: &mut Value) {
    let old_colours = json
        .get("v")
        .and_then(Value::as_str)
        .is_some_and(|version| older_than(version, FIRST_UNIT_COLOUR_VERSION));
    super::model::for_each_layer_list(json, |layers| {
        for layer in layers.iter_mut() {
            lower_quirks_of(layer);
            if old_colours {
                scale_old_colours(layer);
            }
        }
    });
}

fn lower_quirks_of(layer: &mut Value) {
    // A solid without a colour (`"sc": ""`): lottie-web paints it black, rlottie white.
    if layer.get("ty").and_then(Value::as_i64) == Some(1)
        && layer.get("sc").and_then(Value::as_str) == Some("")
    {
        if let Some(map) = layer.as_object_mut() {
            map.insert("sc".into(), Value::from("#000000"));
        }
    }
    // A static time remap (`"tm": {"a": 0, "k": 0.8}`): lottie-web shows the precomposition
    // at that time on every frame; rlottie reads only keyframed remaps. It becomes a held
    // keyframe at the layer's in point (an expression's remap is baked with the others).
    let in_point = layer.get("ip").and_then(Value::as_f64).unwrap_or(0.0);
    let Some(remap) = layer.get_mut("tm").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(seconds) = remap.get("k").and_then(Value::as_f64) else {
        return;
    };
    if remap.contains_key("x") {
        return;
    }
    remap.insert("a".into(), Value::from(1));
    remap.insert(
        "k".into(),
        serde_json::json!([{"t": in_point, "s": [seconds], "h": 1}]),
    );
}

/// Whether `version` ("4.1.8") is older than `minimum`, compared as lottie-web compares them
/// (dotted numbers; a part that is no number counts as 0).
fn older_than(version: &str, minimum: [u64; 3]) -> bool {
    let mut parts = version
        .split('.')
        .map(|part| part.trim().parse::<u64>().unwrap_or(0));
    for wanted in minimum {
        let part = parts.next().unwrap_or(0);
        if part != wanted {
            return part < wanted;
        }
    }
    false
}

/// A shape layer's fill and stroke colours divided by 255 (documents older than 4.1.9 wrote
/// them in 0..=255; lottie-web converts only these, in shape layers, groups included).
fn scale_old_colours(layer: &mut Value) {
    if layer.get("ty").and_then(Value::as_i64) != Some(4) {
        return;
    }
    let mut stack: Vec<&mut Value> = layer.get_mut("shapes").into_iter().collect();
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(item) => {
                let ty = item.get("ty").and_then(Value::as_str);
                if matches!(ty, Some("fl" | "st")) {
                    if let Some(colour) = item.get_mut("c") {
                        scale_colour_property(colour);
                    }
                } else if ty == Some("gr") {
                    stack.extend(item.get_mut("it"));
                }
            }
            _ => {}
        }
    }
}

fn scale_colour_property(colour: &mut Value) {
    let scale = |values: &mut Value| {
        if let Some(values) = values.as_array_mut() {
            for value in values.iter_mut() {
                if let Some(number) = value.as_f64() {
                    *value = Value::from(number / 255.0);
                }
            }
        }
    };
    let Some(k) = colour.get_mut("k") else {
        return;
    };
    if k.as_array()
        .is_some_and(|items| items.iter().all(Value::is_number))
    {
        scale(k);
        return;
    }
    for keyframe in k.as_array_mut().into_iter().flatten() {
        for key in ["s", "e"] {
            if let Some(values) = keyframe.get_mut(key) {
                scale(values);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_compare_as_dotted_numbers() {
        assert!(older_than("4.1.8", FIRST_UNIT_COLOUR_VERSION));
        assert!(older_than("4.0.10", FIRST_UNIT_COLOUR_VERSION));
        assert!(older_than("3.9.9", FIRST_UNIT_COLOUR_VERSION));
        assert!(!older_than("4.1.9", FIRST_UNIT_COLOUR_VERSION));
        assert!(!older_than("4.1.10", FIRST_UNIT_COLOUR_VERSION));
        assert!(!older_than("5.7.0", FIRST_UNIT_COLOUR_VERSION));
    }

    #[test]
    fn an_old_documents_fill_and_stroke_colours_are_divided_by_255() {
        let shapes = json!([{"ty": "gr", "it": [
            {"ty": "fl", "c": {"a": 0, "k": [255, 127.5, 0, 255]}},
            {"ty": "st", "c": {"a": 1, "k": [{"t": 0, "s": [0, 51, 255, 255], "e": [255, 0, 0, 255]}]}}]}]);
        let mut old = json!({"v": "4.1.8", "layers": [{"ty": 4, "shapes": shapes.clone()},
            {"ty": 1, "sc": "#ffffff"}]});
        lower_parse_time_quirks(&mut old);
        let group = &old["layers"][0]["shapes"][0]["it"];
        assert_eq!(group[0]["c"]["k"], json!([1.0, 0.5, 0.0, 1.0]));
        assert_eq!(group[1]["c"]["k"][0]["s"], json!([0.0, 0.2, 1.0, 1.0]));
        assert_eq!(group[1]["c"]["k"][0]["e"], json!([1.0, 0.0, 0.0, 1.0]));
        let mut new = json!({"v": "4.1.9", "layers": [{"ty": 4, "shapes": shapes.clone()}]});
        lower_parse_time_quirks(&mut new);
        assert_eq!(new["layers"][0]["shapes"], shapes);
    }
}
