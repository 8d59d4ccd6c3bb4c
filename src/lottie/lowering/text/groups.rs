//! The Lottie groups a laid-out document becomes: its glyph paths with the document's fill
//! and stroke, shown while its keyframe holds; under text animators a group per glyph.

use super::animators;
use super::document::{color, number};
use super::layout::Layout;
use super::warnings::TextWarnings;
use super::TextBudget;
use serde_json::{json, Value};

/// The name of the stroke that synthesizes a bold face (see [`fonts::synthetic_bold_width`]).
const SYNTHESIZED_BOLD: &str = "synthesized bold";

/// The group of glyph paths (`items`), fill and stroke of one laid-out document, with a
/// stroke `bold_width` wide in the fill's colour under both when bold is synthesized.
pub(super) fn glyph_group(
    mut items: Vec<Value>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    opacity: Value,
) -> Value {
    let bold = bold_width
        .filter(|width| *width > 0.0)
        .zip(color(text_document.get("fc")))
        .map(|(width, color)| {
            json!({
                "ty": "st", "nm": SYNTHESIZED_BOLD, "c": {"a": 0, "k": color},
                "o": {"a": 0, "k": 100}, "w": {"a": 0, "k": width}, "lc": 2, "lj": 2, "ml": 4
            })
        });
    let fill = color(text_document.get("fc")).map(|color| {
        // Non-zero winding: TrueType and CFF outlines are drawn so.
        json!({"ty": "fl", "c": {"a": 0, "k": color}, "o": {"a": 0, "k": 100}, "r": 1})
    });
    // Box text shrunk to fit keeps its stroke in proportion.
    let stroke_width = number(text_document.get("sw")).unwrap_or(0.0) * stroke_scale;
    let stroke = color(text_document.get("sc"))
        .filter(|_| stroke_width > 0.0)
        .map(|color| {
            json!({
                "ty": "st", "c": {"a": 0, "k": color}, "o": {"a": 0, "k": 100},
                "w": {"a": 0, "k": stroke_width}, "lc": 2, "lj": 2, "ml": 4
            })
        });
    let stroke_over_fill = text_document
        .get("of")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // Items earlier in a group paint over later ones.
    let paints: Vec<Value> = match (fill, stroke, stroke_over_fill) {
        (fill, Some(stroke), true) => [Some(stroke), fill].into_iter().flatten().collect(),
        (fill, stroke, false) => [fill, stroke].into_iter().flatten().collect(),
        (fill, None, true) => fill.into_iter().collect(),
    };
    items.extend(paints);
    items.extend(bold);
    items.push(group_transform(opacity));
    json!({"ty": "gr", "nm": "text", "it": items})
}

/// The transform of a text group: identity but for its `opacity` (the hold of its keyframe).
fn group_transform(opacity: Value) -> Value {
    json!({
        "ty": "tr",
        "p": {"a": 0, "k": [0, 0]},
        "a": {"a": 0, "k": [0, 0]},
        "s": {"a": 0, "k": [100, 100]},
        "r": {"a": 0, "k": 0},
        "o": opacity,
    })
}

/// A colour array's red, green and blue (0..=1).
fn rgb(value: Option<&Value>) -> Option<[f64; 3]> {
    let array = value?.as_array()?;
    let channel = |index: usize| number(array.get(index)).map(|v| v.clamp(0.0, 1.0));
    Some([channel(0)?, channel(1)?, channel(2)?])
}

/// The group of one glyph's paths under text animators: the document's fill and stroke, its
/// colours, opacities and width replaced by the animated ones, and its transform by the
/// glyph's.
fn animated_glyph_group(
    paths: Vec<Value>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    channels: animators::GlyphChannels,
) -> Value {
    let mut group = glyph_group(
        paths,
        text_document,
        stroke_scale,
        bold_width,
        json!({"a": 0, "k": 100}),
    );
    if let Some(items) = group.get_mut("it").and_then(Value::as_array_mut) {
        for item in items.iter_mut() {
            let Some(object) = item.as_object_mut() else {
                continue;
            };
            // A synthesized bold stroke is ink of the fill: it follows the fill's channels.
            let bold = object.get("nm").and_then(Value::as_str) == Some(SYNTHESIZED_BOLD);
            let replacements: Vec<(&str, &Option<Value>)> =
                match object.get("ty").and_then(Value::as_str) {
                    Some("st") if bold => {
                        vec![("c", &channels.fill_color), ("o", &channels.fill_opacity)]
                    }
                    Some("fl") => vec![("c", &channels.fill_color), ("o", &channels.fill_opacity)],
                    Some("st") => vec![
                        ("c", &channels.stroke_color),
                        ("o", &channels.stroke_opacity),
                        ("w", &channels.stroke_width),
                    ],
                    Some("tr") => {
                        *item = channels.transform.clone();
                        continue;
                    }
                    _ => Vec::new(),
                };
            for (key, value) in replacements {
                if let Some(value) = value {
                    object.insert(key.to_owned(), value.clone());
                }
            }
        }
    }
    if let Some(object) = group.as_object_mut() {
        object.insert("nm".into(), json!("glyph"));
    }
    group
}

/// The group of one laid-out document under text animators: a group per drawn glyph (later
/// glyphs over earlier ones, as lottie-web draws them), shown by `opacity`. `None` when the
/// animators are over the template's budget.
#[allow(clippy::too_many_arguments)]
fn animated_document_group(
    layer_animators: &animators::Animators,
    layout: &Layout,
    glyph_paths: Vec<Vec<Value>>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    sampling: &animators::Sampling,
    opacity: Value,
    budget: &mut TextBudget,
) -> Option<Value> {
    let stroke_width = number(text_document.get("sw")).unwrap_or(0.0) * stroke_scale;
    let style = animators::DocumentStyle {
        fill: rgb(text_document.get("fc")),
        stroke: rgb(text_document.get("sc")).filter(|_| stroke_width > 0.0),
        stroke_width,
        justify: text_document.get("j").and_then(Value::as_i64).unwrap_or(0),
    };
    let drawn: Vec<bool> = glyph_paths.iter().map(|paths| !paths.is_empty()).collect();
    let channels = animators::lower(
        layer_animators,
        layout,
        &style,
        sampling,
        &drawn,
        &mut budget.animators,
    )
    .ok()?;
    let mut items: Vec<Value> = glyph_paths
        .into_iter()
        .zip(channels)
        .filter_map(|(paths, channels)| {
            Some(animated_glyph_group(
                paths,
                text_document,
                stroke_scale,
                bold_width,
                channels?,
            ))
        })
        .collect();
    // Items earlier in a group paint over later ones.
    items.reverse();
    items.push(group_transform(opacity));
    Some(json!({"ty": "gr", "nm": "text", "it": items}))
}

/// Opacity of keyframe `index`'s group: shown from its time until the next keyframe's.
pub(super) fn hold_opacity(times: &[f64], index: usize) -> Value {
    if times.len() < 2 {
        return json!({"a": 0, "k": 100});
    }
    let mut keyframes = Vec::new();
    let start = times[index];
    keyframes
        .push(json!({"t": times[0].min(start), "s": [if index == 0 { 100 } else { 0 }], "h": 1}));
    if index > 0 {
        keyframes.push(json!({"t": start, "s": [100], "h": 1}));
    }
    if let Some(next) = times.get(index + 1) {
        keyframes.push(json!({"t": next, "s": [0], "h": 1}));
    }
    json!({"a": 1, "k": keyframes})
}

/// Where one text keyframe's document sits in its layer.
pub(super) struct DocumentParts<'a> {
    pub(super) name: &'a str,
    pub(super) animators: Option<&'a animators::Animators>,
    pub(super) sampling: Option<&'a animators::Sampling>,
    /// The layer's text keyframe times, and which one this document is.
    pub(super) times: &'a [f64],
    pub(super) index: usize,
    /// The width of the stroke that synthesizes bold, when the face lacks it.
    pub(super) bold_width: Option<f64>,
}

/// The group of one laid-out document: its glyphs under the layer's animators (sampled while
/// the document shows), or all its glyph paths in one group when there are none or they are
/// over their budget (with a warning).
pub(super) fn document_group(
    parts: &DocumentParts<'_>,
    layout: &Layout,
    glyph_paths: Vec<Vec<Value>>,
    text_document: &Value,
    stroke_scale: f64,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
) -> Value {
    let bold_width = parts.bold_width;
    let opacity = hold_opacity(parts.times, parts.index);
    if let (Some(layer_animators), Some(sampling)) = (parts.animators, parts.sampling) {
        // The first document shows from the layer's start, the others from their time.
        let from = if parts.index == 0 {
            f64::NEG_INFINITY
        } else {
            parts.times.get(parts.index).copied().unwrap_or(0.0)
        };
        let shown = sampling.within(from, parts.times.get(parts.index + 1).copied());
        if let Some(group) = animated_document_group(
            layer_animators,
            layout,
            glyph_paths.clone(),
            text_document,
            stroke_scale,
            bold_width,
            &shown,
            opacity.clone(),
            budget,
        ) {
            return group;
        }
        warnings.insert(format!(
            "text layer '{}': its text animators exceed the template's budget ({} glyph samples, {} keyframes); the text renders without them",
            parts.name,
            animators::MAX_ANIMATOR_SAMPLES,
            animators::MAX_ANIMATOR_KEYFRAMES
        ));
    }
    glyph_group(
        glyph_paths.into_iter().flatten().collect(),
        text_document,
        stroke_scale,
        bold_width,
        opacity,
    )
}
