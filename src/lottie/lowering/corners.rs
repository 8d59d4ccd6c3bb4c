//! Round Corners (`rd`) on rectangles: rlottie 0.1 ignores the modifier, lottie-web rounds
//! every corner of the paths above it in its group. A rectangle's corners rounded by radius
//! `r` are the rectangle with roundness `r` (both clamp to half the shorter side and draw
//! quarter circles), so where every path the modifier reaches is a rectangle without a
//! roundness of its own (or an ellipse, which has no corners), the radius moves into them and
//! the modifier goes. Elsewhere it stays, and [`super::unsupported`] warns about it.

use serde_json::Value;

/// Lowers the Round Corners of every shape list in `json` that it can.
pub fn round_rectangle_corners(json: &mut Value) {
    super::for_each_object(json, lower_object);
}

/// Lowers the Round Corners of `object`'s shape lists (`shapes`, `it`).
fn lower_object(object: &mut serde_json::Map<String, Value>) {
    for key in ["shapes", "it"] {
        if let Some(list) = object.get_mut(key) {
            lower_list(list);
        }
    }
}

/// Lowers the Round Corners of one shape list (a layer's `shapes`, a group's `it`).
pub(super) fn lower_list(list: &mut Value) {
    if let Some(items) = list.as_array_mut() {
        lower_items(items);
    }
}

/// One list of shape items: its first `rd`, when static and every item above it is a plain
/// rectangle (or an ellipse, or draws no path), gives the rectangles its radius and is
/// removed. Only the first can be: the rectangles are rounded after it (lottie-web's later
/// Round Corners then find no corner either). One pass over the list, whatever its length.
fn lower_items(items: &mut Vec<Value>) {
    let Some(first) = items.iter().position(|item| ty(item) == Some("rd")) else {
        return;
    };
    let radius = static_number(items[first].get("r")).filter(|radius| *radius >= 0.0);
    let Some(radius) = radius.filter(|_| items[..first].iter().all(cornered_alike)) else {
        return;
    };
    for item in &mut items[..first] {
        if ty(item) == Some("rc") {
            item["r"] = serde_json::json!({"a": 0, "k": radius});
        }
    }
    items.remove(first);
}

fn ty(item: &Value) -> Option<&str> {
    item.get("ty").and_then(Value::as_str)
}

/// A property's static number (`{"a": 0, "k": 12}` or `[12]`).
fn static_number(property: Option<&Value>) -> Option<f64> {
    match property?.get("k")? {
        Value::Number(number) => number.as_f64(),
        Value::Array(items) if items.len() == 1 => items[0].as_f64(),
        _ => None,
    }
}

/// An item Round Corners affects as a rectangle's roundness would: a rectangle without
/// roundness, an ellipse (no corners), or anything that draws no path (fills, strokes,
/// transforms). Paths, stars and groups (their paths are reached too) are not.
fn cornered_alike(item: &Value) -> bool {
    match ty(item) {
        Some("rc") => match item.get("r") {
            None => true,
            roundness => static_number(roundness) == Some(0.0),
        },
        Some("el" | "fl" | "st" | "gf" | "gs" | "tr") => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rect(r: Value) -> Value {
        json!({"ty": "rc", "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [80, 80]}, "r": r})
    }

    #[test]
    fn round_corners_on_plain_rectangles_become_their_roundness() {
        let mut json = json!({"shapes": [rect(json!({"a": 0, "k": 0})),
            {"ty": "fl"}, {"ty": "rd", "r": {"a": 0, "k": 20}}]});
        round_rectangle_corners(&mut json);
        assert_eq!(json["shapes"].as_array().unwrap().len(), 2);
        assert_eq!(json["shapes"][0]["r"], json!({"a": 0, "k": 20.0}));
    }

    #[test]
    fn a_list_of_many_round_corners_is_lowered_in_one_pass() {
        // Hostile: 100,000 rectangles and modifiers alternating; only the first modifier is
        // lowered (the rectangles are rounded after it), in one pass over the list.
        let items: Vec<Value> = (0..50_000)
            .flat_map(|_| {
                [
                    rect(json!({"a": 0, "k": 0})),
                    json!({"ty": "rd", "r": {"a": 0, "k": 5}}),
                ]
            })
            .collect();
        let mut json = json!({"shapes": items});
        round_rectangle_corners(&mut json);
        assert_eq!(json["shapes"].as_array().unwrap().len(), 99_999);
        assert_eq!(json["shapes"][0]["r"]["k"], json!(5.0));
        assert_eq!(json["shapes"][1]["r"]["k"], json!(0));
        assert_eq!(json["shapes"][2]["ty"], "rd");
    }

    #[test]
    fn round_corners_over_paths_or_rounded_rectangles_stay() {
        for first in [
            json!({"ty": "sh"}),
            rect(json!({"a": 0, "k": 5})),
            rect(json!({"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 9, "s": [9]}]})),
        ] {
            let mut json = json!({"shapes": [first, {"ty": "rd", "r": {"a": 0, "k": 20}}]});
            let written = json.clone();
            round_rectangle_corners(&mut json);
            assert_eq!(json, written);
        }
    }
}
