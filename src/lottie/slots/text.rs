//! Text slots: text layers (`ty` 5) by the `sid` of their document, else their `ln`, else
//! their name (`nm`). A value is the text every keyframe of the document shows; newlines are
//! its only control characters.

use super::{cut, slot_property, Discovery, Slot, ValueProblem, WriteStep, KEPT_SLOT_BYTES};
use crate::lottie::reading::model::layer_type;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Longest font family a text slot reports, characters: the limit on an uploaded font's
/// family (`grpc::templates::MAX_TEMPLATE_NAME_CHARS`), so no longer name could match one
/// anyway. Every text slot set in a font repeats its family: unbounded, one long family in
/// the font list and many text layers made a report far larger than the template (caught
/// by the `slots` fuzz target's report budget: 16 KB of template, 500 KB of report).
pub(crate) const MAX_FONT_FAMILY_CHARS: usize = 128;
/// Characters of a text slot's default text shown. A render may set at most 200 characters
/// (`grpc::convert::MAX_TEXT_CHARS`); 1,000 shows every real headline or paragraph whole.
pub const MAX_DEFAULT_TEXT_CHARS: usize = 1000;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextSlot {
    pub id: String,
    pub default_text: String,
    /// Font family of the first keyframe's document, from the template's font list.
    pub font_family: String,
    /// JSON pointers to the text layers this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of a text slot: its default text cut to
/// [`MAX_DEFAULT_TEXT_CHARS`], flagged when cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextSlotSummary {
    pub id: String,
    pub default_text: String,
    pub default_text_truncated: bool,
    pub font_family: String,
}

impl Slot for TextSlot {
    type Summary = TextSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::ItemParts;

    fn discover(template: &Discovery) -> Vec<TextSlot> {
        let font_families = font_families(template.json);
        let mut found = BTreeMap::new();
        for (pointer, layer) in &template.layers {
            if layer.get("ty").and_then(Value::as_i64) == Some(layer_type::TEXT) {
                discover_layer(layer, pointer, template, &font_families, &mut found);
            }
        }
        found.into_values().collect()
    }

    fn refusal_by_any(text: &String) -> Option<ValueProblem> {
        let control = text.chars().find(|c| c.is_control() && *c != '\n')?;
        Some(ValueProblem::ControlCharacter {
            code: u32::from(control),
        })
    }

    fn write(&self, json: &mut Value, text: &String) {
        // Lottie breaks lines with a carriage return.
        let lottie_text = text.replace('\n', "\r");
        for pointer in &self.bindings {
            if let Some(layer) = json.pointer_mut(pointer) {
                set_text(layer, &lottie_text);
            }
        }
    }

    fn for_admission(&self) -> TextSlot {
        // Admission checks ids only: never the default text nor the family.
        TextSlot {
            id: self.id.clone(),
            default_text: String::new(),
            font_family: String::new(),
            bindings: Vec::new(),
            binding_count: self.binding_count,
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_SLOT_BYTES + self.id.len()
    }

    fn summary(&self) -> (TextSlotSummary, usize) {
        let (default_text, default_text_truncated) =
            cut(&self.default_text, MAX_DEFAULT_TEXT_CHARS);
        let bytes = self.id.len() + default_text.len() + self.font_family.len();
        let summary = TextSlotSummary {
            id: self.id.clone(),
            default_text,
            default_text_truncated,
            font_family: self.font_family.clone(),
        };
        (summary, bytes)
    }
}

/// The text slot of `layer` (a text layer at `layer_pointer`), added to `found`.
fn discover_layer(
    layer: &Value,
    layer_pointer: &str,
    template: &Discovery,
    font_families: &BTreeMap<String, String>,
    found: &mut BTreeMap<String, TextSlot>,
) {
    let document = layer.pointer("/t/d");
    let sid = document.and_then(|d| d.get("sid")).and_then(Value::as_str);
    let id = sid
        .or_else(|| layer.get("ln").and_then(Value::as_str))
        .or_else(|| layer.get("nm").and_then(Value::as_str));
    let Some(id) = id.filter(|id| !id.is_empty()) else {
        return;
    };
    let shown = sid
        .and_then(|sid| slot_property(template.root_slots, sid))
        .or(document);
    let first = shown.and_then(|d| d.pointer("/k/0/s"));
    let default_text = first
        .and_then(|s| s.get("t"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace('\r', "\n");
    let font_name = first
        .and_then(|s| s.get("f"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let font_family: String = font_families
        .get(font_name)
        .map_or(font_name, String::as_str)
        .chars()
        .take(MAX_FONT_FAMILY_CHARS)
        .collect();
    super::bind_property(
        found,
        id,
        layer_pointer.to_owned(),
        || TextSlot {
            id: id.to_owned(),
            default_text,
            font_family,
            bindings: Vec::new(),
            binding_count: 0,
        },
        |_| true,
    );
}

/// `fonts.list[].fName` → `fFamily`.
fn font_families(json: &Value) -> BTreeMap<String, String> {
    json.pointer("/fonts/list")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|font| {
            let name = font.get("fName")?.as_str()?;
            let family = font.get("fFamily").and_then(Value::as_str).unwrap_or(name);
            Some((name.to_owned(), family.to_owned()))
        })
        .collect()
}

/// Every keyframe of the layer's text document shows the new text.
fn set_text(layer: &mut Value, text: &str) {
    let Some(keyframes) = layer.pointer_mut("/t/d/k").and_then(Value::as_array_mut) else {
        return;
    };
    for keyframe in keyframes {
        if let Some(document) = keyframe.get_mut("s").and_then(Value::as_object_mut) {
            document.insert("t".to_owned(), Value::from(text));
        }
    }
}
