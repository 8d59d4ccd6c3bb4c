//! Writing a render's slot values into the template's JSON tree. Everything goes through
//! serde_json (never string building), so any text is escaped correctly and integer fields
//! stay integers.
//!
//! First every `sid` property takes its value from the root `slots` object (rlottie ignores
//! slots), then the requested colours and texts replace what their slots bind.

use super::slots::{slot_property, GradientStop, Slots, MAX_PROPERTY_MAGNITUDE};
use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;
use crate::spec::{Modifications, Rgba};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModificationError {
    #[error(
        "colors[\"{id}\"]: the template has no colour slot '{id}'; valid colour slots: {valid}"
    )]
    UnknownColorSlot { id: String, valid: String },
    #[error("texts[\"{id}\"]: the template has no text slot '{id}'; valid text slots: {valid}")]
    UnknownTextSlot { id: String, valid: String },
    #[error("images[\"{id}\"]: the template has no image slot '{id}'; valid image slots: {valid}")]
    UnknownImageSlot { id: String, valid: String },
    #[error("{kind}[\"{id}\"]: the template has no {singular} slot '{id}'; valid {singular} slots: {valid}")]
    UnknownSlot {
        kind: &'static str,
        singular: &'static str,
        id: String,
        valid: String,
    },
    #[error(
        "scalars[\"{id}\"]: the slot sets the {property}, which takes {min}..={max}; got {value}"
    )]
    ScalarOutOfRange {
        id: String,
        property: String,
        min: f64,
        max: f64,
        value: f64,
    },
    #[error(
        "vectors[\"{id}\"]: the slot sets the {property}, which takes {expected} numbers each \
         within ±{MAX_PROPERTY_MAGNITUDE}; got {got}"
    )]
    VectorShape {
        id: String,
        property: String,
        expected: usize,
        got: String,
    },
    #[error("gradients[\"{id}\"]: the gradient has {expected} stops; got {got}")]
    GradientStopCount {
        id: String,
        expected: usize,
        got: usize,
    },
    #[error("texts[\"{id}\"]: control character U+{code:04X} is not allowed (only newline)")]
    ControlCharacter { id: String, code: u32 },
}

impl Classified for ModificationError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> Reason {
        match self {
            ModificationError::UnknownColorSlot { .. }
            | ModificationError::UnknownTextSlot { .. }
            | ModificationError::UnknownImageSlot { .. }
            | ModificationError::UnknownSlot { .. } => Reason::SlotUnknown,
            ModificationError::ScalarOutOfRange { .. }
            | ModificationError::VectorShape { .. }
            | ModificationError::GradientStopCount { .. } => Reason::SlotValueInvalid,
            ModificationError::ControlCharacter { .. } => Reason::TextInvalid,
        }
    }
}

/// Slot ids an unknown-slot error lists at most: enough to spot a typo, while a template
/// of thousands of slots (its record allows a mebibyte of ids) does not make every refusal,
/// once per unknown id, that large.
pub const MAX_LISTED_SLOTS: usize = 20;

/// Checks every modification against the template's slots; all problems at once.
pub fn check(slots: &Slots, modifications: &Modifications) -> Vec<ModificationError> {
    let list = |ids: Vec<&str>| {
        if ids.is_empty() {
            "(none)".to_owned()
        } else if ids.len() > MAX_LISTED_SLOTS {
            format!(
                "{} and {} more",
                ids[..MAX_LISTED_SLOTS].join(", "),
                ids.len() - MAX_LISTED_SLOTS
            )
        } else {
            ids.join(", ")
        }
    };
    let mut errors = Vec::new();
    for id in modifications.colors.keys() {
        if slots.color(id).is_none() {
            errors.push(ModificationError::UnknownColorSlot {
                id: id.clone(),
                valid: list(slots.colors.iter().map(|s| s.id.as_str()).collect()),
            });
        }
    }
    for (id, text) in &modifications.texts {
        if slots.text(id).is_none() {
            errors.push(ModificationError::UnknownTextSlot {
                id: id.clone(),
                valid: list(slots.texts.iter().map(|s| s.id.as_str()).collect()),
            });
        }
        if let Some(control) = text.chars().find(|c| c.is_control() && *c != '\n') {
            errors.push(ModificationError::ControlCharacter {
                id: id.clone(),
                code: u32::from(control),
            });
        }
    }
    for id in modifications.images.keys() {
        if slots.image(id).is_none() {
            errors.push(ModificationError::UnknownImageSlot {
                id: id.clone(),
                valid: list(slots.images.iter().map(|s| s.id.as_str()).collect()),
            });
        }
    }
    for (id, value) in &modifications.scalars {
        match slots.scalar(id) {
            None => errors.push(ModificationError::UnknownSlot {
                kind: "scalars",
                singular: "scalar",
                id: id.clone(),
                valid: list(slots.scalars.iter().map(|s| s.id.as_str()).collect()),
            }),
            Some(slot) if !(slot.min..=slot.max).contains(value) => {
                errors.push(ModificationError::ScalarOutOfRange {
                    id: id.clone(),
                    property: slot.property.clone(),
                    min: slot.min,
                    max: slot.max,
                    value: *value,
                });
            }
            Some(_) => {}
        }
    }
    for (id, values) in &modifications.vectors {
        match slots.vector(id) {
            None => errors.push(ModificationError::UnknownSlot {
                kind: "vectors",
                singular: "vector",
                id: id.clone(),
                valid: list(slots.vectors.iter().map(|s| s.id.as_str()).collect()),
            }),
            Some(slot)
                if values.len() != slot.default_value.len()
                    || !values
                        .iter()
                        .all(|v| v.is_finite() && v.abs() <= MAX_PROPERTY_MAGNITUDE) =>
            {
                errors.push(ModificationError::VectorShape {
                    id: id.clone(),
                    property: slot.property.clone(),
                    expected: slot.default_value.len(),
                    got: format!("{values:?}"),
                });
            }
            Some(_) => {}
        }
    }
    for (id, stops) in &modifications.gradients {
        match slots.gradient(id) {
            None => errors.push(ModificationError::UnknownSlot {
                kind: "gradients",
                singular: "gradient",
                id: id.clone(),
                valid: list(slots.gradients.iter().map(|s| s.id.as_str()).collect()),
            }),
            Some(slot) if stops.len() != slot.stop_count => {
                errors.push(ModificationError::GradientStopCount {
                    id: id.clone(),
                    expected: slot.stop_count,
                    got: stops.len(),
                });
            }
            Some(_) => {}
        }
    }
    errors
}

/// Takes out of `modifications` the value `error` refuses.
pub(crate) fn remove_refused(modifications: &mut Modifications, error: &ModificationError) {
    match error {
        ModificationError::UnknownColorSlot { id, .. } => {
            modifications.colors.remove(id);
        }
        ModificationError::UnknownTextSlot { id, .. }
        | ModificationError::ControlCharacter { id, .. } => {
            modifications.texts.remove(id);
        }
        ModificationError::UnknownImageSlot { id, .. } => {
            modifications.images.remove(id);
        }
        ModificationError::UnknownSlot { kind, id, .. } => {
            match *kind {
                "scalars" => modifications.scalars.remove(id).map(|_| ()),
                "vectors" => modifications.vectors.remove(id).map(|_| ()),
                _ => modifications.gradients.remove(id).map(|_| ()),
            };
        }
        ModificationError::ScalarOutOfRange { id, .. } => {
            modifications.scalars.remove(id);
        }
        ModificationError::VectorShape { id, .. } => {
            modifications.vectors.remove(id);
        }
        ModificationError::GradientStopCount { id, .. } => {
            modifications.gradients.remove(id);
        }
    }
}

/// Writes fitted replacement images (slot id → PNG data URI of the slot's box) into the
/// image assets their slots bind, as embedded images; ids [`check`]ed first.
pub fn write_images(json: &mut Value, slots: &Slots, images: &BTreeMap<String, String>) {
    for (id, data_uri) in images {
        let Some(slot) = slots.image(id) else {
            continue;
        };
        for pointer in &slot.bindings {
            if let Some(Value::Object(asset)) = json.pointer_mut(pointer) {
                asset.insert("e".to_owned(), json!(1));
                asset.insert("u".to_owned(), json!(""));
                asset.insert("p".to_owned(), json!(data_uri));
            }
        }
    }
}

/// Resolves slots and applies the modifications to `json` (whose slots are `slots`).
pub fn apply(
    json: &mut Value,
    slots: &Slots,
    modifications: &Modifications,
) -> Result<(), ModificationError> {
    if let Some(first) = check(slots, modifications).into_iter().next() {
        return Err(first);
    }
    resolve_slot_references(json);
    write(json, slots, modifications);
    Ok(())
}

/// Writes the requested colours, texts, numbers and gradients into what their slots bind, in
/// `json` whose slot references are already resolved ([`resolve_slot_references`]); values
/// [`check`]ed first. A scalar, vector or gradient slot replaces its whole property (the
/// slots specification): an animated one becomes static.
pub fn write(json: &mut Value, slots: &Slots, modifications: &Modifications) {
    let mut set = |bindings: &[String], value: &Value| {
        for pointer in bindings {
            if let Some(property) = json.pointer_mut(pointer) {
                *property = value.clone();
            }
        }
    };
    for (id, value) in &modifications.scalars {
        if let Some(slot) = slots.scalar(id) {
            set(&slot.bindings, &json!({"a": 0, "k": value}));
        }
    }
    for (id, values) in &modifications.vectors {
        if let Some(slot) = slots.vector(id) {
            set(&slot.bindings, &json!({"a": 0, "k": values}));
        }
    }
    for (id, stops) in &modifications.gradients {
        if let Some(slot) = slots.gradient(id) {
            set(&slot.bindings, &gradient_property(stops));
        }
    }
    write_colors_and_texts(json, slots, modifications);
}

/// A gradient's `g`: its stop count and its flat values, colour stops then opacity stops.
fn gradient_property(stops: &[GradientStop]) -> Value {
    let mut flat: Vec<f64> = Vec::with_capacity(stops.len() * 6);
    for stop in stops {
        flat.extend([stop.offset, stop.color.r(), stop.color.g(), stop.color.b()]);
    }
    for stop in stops {
        flat.extend([stop.offset, stop.color.a().unwrap_or(1.0)]);
    }
    json!({"p": stops.len(), "k": {"a": 0, "k": flat}})
}

fn write_colors_and_texts(json: &mut Value, slots: &Slots, modifications: &Modifications) {
    for (id, color) in &modifications.colors {
        let Some(slot) = slots.color(id) else {
            continue;
        };
        for pointer in &slot.bindings {
            if let Some(item) = json.pointer_mut(pointer) {
                set_color(item, color);
            }
        }
    }
    for (id, text) in &modifications.texts {
        let Some(slot) = slots.text(id) else { continue };
        let lottie_text = text.replace('\n', "\r");
        for pointer in &slot.bindings {
            if let Some(layer) = json.pointer_mut(pointer) {
                set_text(layer, &lottie_text);
            }
        }
    }
}

/// Replaces every property carrying a `sid` with the root `slots` value for it, keeping the
/// `sid` so slot discovery still sees it. Not idempotent (a second pass would undo what came
/// after the first): once per render, and once for the analysis' copy.
pub fn resolve_slot_references(json: &mut Value) {
    let Some(root_slots) = json.get("slots").cloned() else {
        return;
    };
    let mut stack: Vec<&mut Value> = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                let replacement = map
                    .get("sid")
                    .and_then(Value::as_str)
                    .and_then(|sid| slot_property(Some(&root_slots), sid))
                    .and_then(Value::as_object);
                if let Some(replacement) = replacement {
                    let sid = map.get("sid").cloned();
                    map.clear();
                    map.extend(replacement.iter().map(|(k, v)| (k.clone(), v.clone())));
                    if let Some(sid) = sid {
                        map.insert("sid".to_owned(), sid);
                    }
                    continue;
                }
                stack.extend(
                    map.iter_mut()
                        .filter(|(key, _)| key.as_str() != "slots")
                        .map(|(_, v)| v),
                );
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lottie::slots::{discover, ColorSlot};

    fn template() -> Value {
        json!({
            "slots": {"accent": {"p": {"a": 0, "k": [0, 0, 1]}}},
            "layers": [
                {"ty": 4, "nm": "a", "shapes": [
                    {"ty": "gr", "it": [{"ty": "fl", "nm": "Fill", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100}}]},
                    {"ty": "fl", "nm": "Fill", "c": {"a": 1, "k": [{"t": 0, "s": [0, 1, 0]}, {"t": 9, "s": [1, 1, 0]}]}},
                    {"ty": "st", "nm": "Line", "c": {"a": 0, "k": [0, 0, 0], "sid": "accent"}}
                ]},
                {"ty": 5, "nm": "Title", "t": {"d": {"k": [{"s": {"t": "Hi", "f": "Sans"}, "t": 0}, {"s": {"t": "Bye", "f": "Sans"}, "t": 5}]}}}
            ]
        })
    }

    #[test]
    fn duplicate_names_bind_every_property_and_sid_wins_over_name() {
        let slots = discover(&template());
        let ids: Vec<_> = slots
            .colors
            .iter()
            .map(|s| (s.id.as_str(), s.binding_count))
            .collect();
        assert_eq!(ids, [("Fill", 2), ("accent", 1)]);
        assert_eq!(
            slots.color("accent").unwrap().default_color,
            Rgba::new(0.0, 0.0, 1.0, None).unwrap()
        );
        assert_eq!(slots.texts[0].id, "Title");
        assert_eq!(slots.texts[0].default_text, "Hi");
    }

    #[test]
    fn colours_and_texts_are_written_into_every_binding() {
        let mut json = template();
        let slots = discover(&json);
        let mut modifications = Modifications::default();
        modifications
            .colors
            .insert("Fill".into(), Rgba::new(0.5, 0.25, 1.0, Some(0.5)).unwrap());
        modifications
            .texts
            .insert("Title".into(), "Line \"one\"\nLine two".into());
        apply(&mut json, &slots, &modifications).unwrap();
        assert_eq!(
            json.pointer("/layers/0/shapes/0/it/0/c/k"),
            Some(&json!([0.5, 0.25, 1.0, 1]))
        );
        assert_eq!(
            json.pointer("/layers/0/shapes/0/it/0/o/k"),
            Some(&json!(50.0))
        );
        assert_eq!(
            json.pointer("/layers/0/shapes/1/c"),
            Some(&json!({"a": 0, "k": [0.5, 0.25, 1.0, 1]}))
        );
        assert_eq!(
            json.pointer("/layers/0/shapes/2/c/k"),
            Some(&json!([0, 0, 1])),
            "slot value resolved"
        );
        assert_eq!(
            json.pointer("/layers/1/t/d/k/1/s/t"),
            Some(&json!("Line \"one\"\rLine two"))
        );
    }

    #[test]
    fn unknown_slots_list_the_valid_ids_and_control_characters_are_refused() {
        let slots = discover(&template());
        let mut modifications = Modifications::default();
        modifications.colors.insert("nope".into(), Rgba::WHITE);
        modifications
            .texts
            .insert("Title".into(), "tab\there".into());
        let errors = check(&slots, &modifications);
        assert_eq!(errors.len(), 2);
        assert!(
            errors[0]
                .to_string()
                .contains("valid colour slots: Fill, accent"),
            "{}",
            errors[0]
        );
        assert!(errors[1].to_string().contains("U+0009"), "{}", errors[1]);
        let mut crowded = slots.clone();
        crowded.colors = (0..1000)
            .map(|index| ColorSlot {
                id: format!("slot-{index:04}"),
                ..slots.colors[0].clone()
            })
            .collect();
        let errors = check(&crowded, &modifications);
        let message = errors[0].to_string();
        assert!(message.ends_with("slot-0019 and 980 more"), "{message}");
        assert!(message.len() < 600, "{}", message.len());
    }
}
