//! Colour slots: a fill's or stroke's colour, by the `sid` of its `c`, else the item's name
//! (`nm`), in shape groups and precomps alike. A value is a straight-alpha sRGB colour; its
//! alpha sets the item's opacity.

use super::{slot_property, Discovery, Slot, WriteStep, KEPT_SLOT_BYTES};
use crate::lottie::reading::model::property_initial_value;
use crate::spec::Rgba;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ColorSlot {
    pub id: String,
    /// The colour the template shows when the slot is not modified (first keyframe if animated).
    pub default_color: Rgba,
    /// JSON pointers to the fill/stroke items whose colour (`c`) this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of a colour slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColorSlotSummary {
    pub id: String,
    pub default_color: Rgba,
}

impl Slot for ColorSlot {
    type Summary = ColorSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::ItemParts;

    fn discover(template: &Discovery) -> Vec<ColorSlot> {
        let mut found = BTreeMap::new();
        for (pointer, layer) in &template.layers {
            if let Some(shapes) = layer.get("shapes").and_then(Value::as_array) {
                let shapes_pointer = format!("{pointer}/shapes");
                discover_in(shapes, &shapes_pointer, template.root_slots, &mut found);
            }
        }
        found.into_values().collect()
    }

    fn write(&self, json: &mut Value, color: &Rgba) {
        for pointer in &self.bindings {
            if let Some(item) = json.pointer_mut(pointer) {
                set_color(item, color);
            }
        }
    }

    fn for_admission(&self) -> ColorSlot {
        ColorSlot {
            bindings: Vec::new(),
            ..self.clone()
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_SLOT_BYTES + self.id.len()
    }

    fn summary(&self) -> (ColorSlotSummary, usize) {
        let summary = ColorSlotSummary {
            id: self.id.clone(),
            default_color: self.default_color,
        };
        (summary, self.id.len())
    }
}

/// The colour slots of the fill and stroke items in `shapes` (at `pointer`) and in their
/// groups, added to `found`.
fn discover_in(
    shapes: &[Value],
    pointer: &str,
    root_slots: Option<&Value>,
    found: &mut BTreeMap<String, ColorSlot>,
) {
    for (index, shape) in shapes.iter().enumerate() {
        let item_pointer = format!("{pointer}/{index}");
        match shape.get("ty").and_then(Value::as_str) {
            Some("gr") => {
                if let Some(items) = shape.get("it").and_then(Value::as_array) {
                    discover_in(items, &format!("{item_pointer}/it"), root_slots, found);
                }
            }
            Some("fl" | "st") => {
                let color = shape.get("c");
                let sid = color.and_then(|c| c.get("sid")).and_then(Value::as_str);
                let id = sid.or_else(|| shape.get("nm").and_then(Value::as_str));
                let Some(id) = id.filter(|id| !id.is_empty()) else {
                    continue;
                };
                let shown = sid.and_then(|sid| slot_property(root_slots, sid)).or(color);
                let default_color = shown
                    .and_then(property_initial_value)
                    .and_then(Rgba::from_lottie)
                    .unwrap_or(Rgba::OPAQUE_BLACK);
                super::bind_property(
                    found,
                    id,
                    item_pointer,
                    || ColorSlot {
                        id: id.to_owned(),
                        default_color,
                        bindings: Vec::new(),
                        binding_count: 0,
                    },
                    |_| true,
                );
            }
            _ => {}
        }
    }
}

/// A fill/stroke item takes a static colour; a given alpha sets the item's opacity.
fn set_color(item: &mut Value, color: &Rgba) {
    let Some(item) = item.as_object_mut() else {
        return;
    };
    let sid = item.get("c").and_then(|c| c.get("sid")).cloned();
    let mut property = json!({"a": 0, "k": [color.r(), color.g(), color.b(), 1]});
    if let (Some(sid), Some(map)) = (sid, property.as_object_mut()) {
        map.insert("sid".to_owned(), sid);
    }
    item.insert("c".to_owned(), property);
    if let Some(alpha) = color.a() {
        item.insert("o".to_owned(), json!({"a": 0, "k": alpha * 100.0}));
    }
}
