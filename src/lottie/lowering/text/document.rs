//! A text keyframe's document (`t.d.k[].s`) as layout reads it, and the Lottie numbers and
//! colours in it.

use super::layout::{Document, Justify, Layout};
use serde_json::{json, Value};

pub(super) fn number(value: Option<&Value>) -> Option<f64> {
    value.and_then(Value::as_f64).filter(|v| v.is_finite())
}

fn pair(value: Option<&Value>) -> Option<[f64; 2]> {
    let array = value?.as_array()?;
    Some([number(array.first())?, number(array.get(1))?])
}

/// A colour array (`[r, g, b]` or `[r, g, b, a]`, 0..=1) as Lottie's `[r, g, b, 1]`.
pub(super) fn color(value: Option<&Value>) -> Option<Value> {
    let array = value?.as_array()?;
    let channel = |index: usize| number(array.get(index)).map(|v| v.clamp(0.0, 1.0));
    Some(json!([channel(0)?, channel(1)?, channel(2)?, 1]))
}

pub(super) fn document(text_document: &Value) -> Document {
    // Box text: `sz` sets it; a missing `ps` puts the box at the layer's origin and, as
    // lottie-web draws it (`yPos` starts at 0 unless `ps` is set), its first baseline there.
    let box_position = pair(text_document.get("ps"));
    let text_box = match pair(text_document.get("sz")) {
        Some(size) if size[0] > 0.0 && size[1] > 0.0 => {
            Some((box_position.unwrap_or([0.0, 0.0]), size))
        }
        _ => None,
    };
    Document {
        text: text_document
            .get("t")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        size: number(text_document.get("s")).unwrap_or(0.0),
        justify: Justify::from_lottie(text_document.get("j").and_then(Value::as_i64).unwrap_or(0)),
        tracking: number(text_document.get("tr")).unwrap_or(0.0),
        line_height: number(text_document.get("lh")),
        baseline_shift: number(text_document.get("ls")).unwrap_or(0.0),
        all_caps: text_document.get("ca").and_then(Value::as_i64).unwrap_or(0) != 0,
        text_box,
        first_baseline_on_box_top: box_position.is_none(),
    }
}

/// How much box text was shrunk to fit (1 when it was not).
pub(super) fn shrink_factor(layout: &Layout, document: &Document) -> f64 {
    if document.size > 0.0 {
        (layout.size / document.size).clamp(0.0, 1.0)
    } else {
        1.0
    }
}
