//! What rlottie 0.1 does not draw and no lowering replaces, said in the template's report
//! (measured: each drawn through the library beside the same template without it): layer
//! blend modes (`bm`, drawn as normal), layer styles (`sy`), and the shape modifiers Round
//! Corners (`rd`, where [`super::corners`] could not lower it), Pucker & Bloat (`pb`), Zig Zag
//! (`zz`), Offset Path (`op`) and Twist (`tw`), each ignored. Merge paths are warned about by
//! the fence; effects by [`crate::lottie::lowering::effects`].

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The warnings for `json` (a whole animation, lowered), one per kind of feature.
pub fn warnings(json: &Value) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(object) => {
                note_object(object, &mut found);
                stack.extend(object.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found.into_iter().collect()
}

/// The warnings `object` itself calls for, into `found`.
fn note_object(object: &Map<String, Value>, found: &mut BTreeSet<String>) {
    note_type(object.get("ty").and_then(Value::as_str), found);
    for (key, value) in object {
        note_entry(key, value, found);
    }
}

/// The warning an item of type `ty` calls for (a modifier rlottie ignores), into `found`.
pub(super) fn note_type(ty: Option<&str>, found: &mut BTreeSet<String>) {
    if let Some(name) = ty.and_then(modifier_name) {
        found.insert(format!("{name} is not drawn: the renderer ignores it"));
    }
}

/// The warning an object's entry `key` (`bm`, `sy`) calls for, into `found`.
pub(super) fn note_entry(key: &str, value: &Value, found: &mut BTreeSet<String>) {
    match key {
        // On layers and on shape items alike: rlottie ignores both.
        "bm" => {
            if let Some(mode) = value.as_i64().filter(|mode| *mode != 0) {
                found.insert(format!(
                    "blend mode {} (bm {mode}) is drawn as normal: the renderer has no blend modes",
                    blend_mode_name(mode)
                ));
            }
        }
        "sy" if value.as_array().is_some_and(|styles| !styles.is_empty()) => {
            found.insert("layer styles (sy) are not drawn".to_owned());
        }
        _ => {}
    }
}

fn blend_mode_name(mode: i64) -> &'static str {
    const NAMES: [&str; 18] = [
        "normal",
        "multiply",
        "screen",
        "overlay",
        "darken",
        "lighten",
        "colour dodge",
        "colour burn",
        "hard light",
        "soft light",
        "difference",
        "exclusion",
        "hue",
        "saturation",
        "colour",
        "luminosity",
        "add",
        "hard mix",
    ];
    usize::try_from(mode)
        .ok()
        .and_then(|mode| NAMES.get(mode))
        .copied()
        .unwrap_or("unknown")
}

fn modifier_name(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "rd" => "round corners (rd) on a path or rounded rectangle",
        "pb" => "pucker & bloat (pb)",
        "zz" => "zig zag (zz)",
        "op" => "offset path (op)",
        "tw" => "twist (tw)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_of_undrawn_feature_is_said_once() {
        let json = json!({"layers": [
            {"ty": 4, "bm": 1, "shapes": [{"ty": "gr", "it": [{"ty": "pb"}, {"ty": "zz"}]}]},
            {"ty": 4, "bm": 1, "sy": [{"ty": 1}], "shapes": [{"ty": "op"}, {"ty": "tw"}, {"ty": "rd"}]},
            {"ty": 1, "bm": 0}]});
        let warnings = warnings(&json);
        assert_eq!(warnings.len(), 7, "{warnings:?}");
        assert!(warnings
            .iter()
            .any(|w| w.starts_with("blend mode multiply (bm 1)")));
    }
}
