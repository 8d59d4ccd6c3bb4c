//! Writing a render's slot values into the template's JSON tree. Everything goes through
//! serde_json (never string building), so any text is escaped correctly and integer fields
//! stay integers.
//!
//! First every `sid` property takes its value from the root `slots` object (rlottie ignores
//! slots), then the requested values replace what their slots bind. What a kind of slot
//! refuses and how it writes a value is the kind's own (`slots/`, the [`Slot`] trait); this
//! file loops over the kinds. It belongs with them in the slots' room, and stays at this
//! path while `lottie/` is given its rooms.

use super::slots::{
    for_each_kind, slot_property, EachKind, Slot, SlotKind, Slots, ValueProblem, WriteStep,
};
use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;
use crate::spec::Modifications;
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a render's values do not fit its template's slots. Every variant names the value's
/// kind and slot id, so its field is [`ModificationError::field`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModificationError {
    #[error(
        "{}[\"{id}\"]: the template has no {} slot '{id}'; valid {} slots: {valid}",
        .kind.list(),
        .kind.said(),
        .kind.said()
    )]
    UnknownSlot {
        kind: SlotKind,
        id: String,
        valid: String,
    },
    #[error("{}[\"{id}\"]: {problem}", .kind.list())]
    InvalidValue {
        kind: SlotKind,
        id: String,
        problem: ValueProblem,
    },
}

impl Classified for ModificationError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> Reason {
        match self {
            ModificationError::UnknownSlot { .. } => Reason::SlotUnknown,
            ModificationError::InvalidValue { problem, .. } => problem.reason(),
        }
    }
}

impl ModificationError {
    /// The kind of the value refused.
    pub fn kind(&self) -> SlotKind {
        match self {
            ModificationError::UnknownSlot { kind, .. }
            | ModificationError::InvalidValue { kind, .. } => *kind,
        }
    }

    /// The slot id of the value refused.
    pub fn id(&self) -> &str {
        match self {
            ModificationError::UnknownSlot { id, .. }
            | ModificationError::InvalidValue { id, .. } => id,
        }
    }

    /// The request field refused: `modifications.colors["bg"]`.
    pub fn field(&self) -> String {
        format!("modifications.{}[{:?}]", self.kind().list(), self.id())
    }
}

/// Slot ids an unknown-slot error lists at most: enough to spot a typo, while a template
/// of thousands of slots (its record allows a mebibyte of ids) does not make every refusal,
/// once per unknown id, that large.
pub const MAX_LISTED_SLOTS: usize = 20;

/// Checks every modification against the template's slots; all problems at once, kind by
/// kind in the table's order (`slots::SlotKind::ALL`), each kind's by slot id.
pub fn check(slots: &Slots, modifications: &Modifications) -> Vec<ModificationError> {
    let mut check = Check {
        slots,
        modifications,
        errors: Vec::new(),
    };
    for_each_kind(&mut check);
    check.errors
}

/// [`check`], kind by kind.
struct Check<'a> {
    slots: &'a Slots,
    modifications: &'a Modifications,
    errors: Vec<ModificationError>,
}

impl EachKind for Check<'_> {
    fn visit<S: Slot>(&mut self) {
        for (id, value) in S::values(self.modifications) {
            let problem = match S::find(self.slots, id) {
                None => {
                    self.errors.push(ModificationError::UnknownSlot {
                        kind: S::KIND,
                        id: id.clone(),
                        valid: listed(S::all(self.slots)),
                    });
                    None
                }
                Some(slot) => slot.refusal(value),
            };
            for problem in problem.into_iter().chain(S::refusal_by_any(value)) {
                self.errors.push(ModificationError::InvalidValue {
                    kind: S::KIND,
                    id: id.clone(),
                    problem,
                });
            }
        }
    }
}

/// The ids of `slots` for a refusal, at most [`MAX_LISTED_SLOTS`] of them.
fn listed<S: Slot>(slots: &[S]) -> String {
    let ids: Vec<&str> = slots.iter().map(|slot| slot.id()).collect();
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
}

/// Takes out of `modifications` the value `error` refuses.
pub(crate) fn remove_refused(modifications: &mut Modifications, error: &ModificationError) {
    error.kind().remove_value(modifications, error.id());
}

/// Writes fitted replacement images (slot id → PNG data URI of the slot's box) into the
/// image assets their slots bind, as embedded images; ids [`check`]ed first.
pub fn write_images(json: &mut Value, slots: &Slots, images: &BTreeMap<String, String>) {
    for (id, data_uri) in images {
        if let Some(slot) = slots.image(id) {
            slot.write_fitted(json, data_uri);
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

/// Writes the requested values into what their slots bind, in `json` whose slot references
/// are already resolved ([`resolve_slot_references`]); values [`check`]ed first. Kinds that
/// replace whole properties first (scalars, vectors, gradients: an animated property becomes
/// static, as the slots specification says), then kinds that set parts of items (colours,
/// texts), each step in the table's order ([`WriteStep`]); images are written once fitted
/// ([`write_images`]).
pub fn write(json: &mut Value, slots: &Slots, modifications: &Modifications) {
    for step in [WriteStep::WholeProperty, WriteStep::ItemParts] {
        for_each_kind(&mut Writer {
            json: &mut *json,
            slots,
            modifications,
            step,
        });
    }
}

/// [`write`]'s one step, kind by kind.
struct Writer<'a> {
    json: &'a mut Value,
    slots: &'a Slots,
    modifications: &'a Modifications,
    step: WriteStep,
}

impl EachKind for Writer<'_> {
    fn visit<S: Slot>(&mut self) {
        if S::WRITE_STEP != self.step {
            return;
        }
        for (id, value) in S::values(self.modifications) {
            if let Some(slot) = S::find(self.slots, id) {
                slot.write(self.json, value);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lottie::slots::{discover, ColorSlot};
    use crate::spec::Rgba;
    use serde_json::json;

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

    /// One slot of every kind: colour `Fill` (whose opacity is scalar `fade`), text `Title`,
    /// image `logo`, vector `where` (a position of two numbers), gradient `sky` (two stops).
    fn every_kind() -> Value {
        json!({
            "assets": [{"id": "logo", "w": 10, "h": 10, "p": "data:image/png;base64,AA"}],
            "layers": [
                {"ty": 4, "nm": "a", "ks": {"p": {"a": 0, "k": [5, 5], "sid": "where"}}, "shapes": [
                    {"ty": "fl", "nm": "Fill", "c": {"a": 0, "k": [1, 0, 0, 1]},
                     "o": {"a": 0, "k": 100, "sid": "fade"}},
                    {"ty": "gf", "g": {"p": 2, "k": {"a": 0, "k": [0, 0, 0, 0, 1, 1, 1, 1]}, "sid": "sky"}}
                ]},
                {"ty": 5, "nm": "Title", "t": {"d": {"k": [{"s": {"t": "Hi", "f": "Sans"}, "t": 0}]}}}
            ]
        })
    }

    /// What `check` says of `modifications`: each refusal's kind, field, message and reason.
    fn refusals(modifications: &Modifications) -> Vec<(SlotKind, String, String, Reason)> {
        check(&discover(&every_kind()), modifications)
            .iter()
            .map(|e| (e.kind(), e.field(), e.to_string(), e.reason()))
            .collect()
    }

    #[test]
    fn an_unknown_slot_of_each_kind_is_refused_naming_its_field_and_slots_in_table_order() {
        // A literal of every map: a new kind of slot is a compile error here until it has a
        // row below.
        let mut modifications = Modifications {
            texts: [("nope".into(), "x".into())].into(),
            colors: [("nope".into(), Rgba::WHITE)].into(),
            images: [(
                "nope".into(),
                crate::spec::ImageChoice {
                    sha256: "00".into(),
                    fit: crate::spec::Fit::Cover,
                },
            )]
            .into(),
            scalars: [("nope".into(), 1.0)].into(),
            vectors: [("nope".into(), vec![1.0, 2.0])].into(),
            gradients: [("nope".into(), Vec::new())].into(),
        };
        let expected = [
            (SlotKind::Color, "colors", "colour", "Fill"),
            (SlotKind::Text, "texts", "text", "Title"),
            (SlotKind::Image, "images", "image", "logo"),
            (SlotKind::Scalar, "scalars", "scalar", "fade"),
            (SlotKind::Vector, "vectors", "vector", "where"),
            (SlotKind::Gradient, "gradients", "gradient", "sky"),
        ]
        .map(|(kind, list, said, valid)| {
            (
                kind,
                format!("modifications.{list}[\"nope\"]"),
                format!(
                    "{list}[\"nope\"]: the template has no {said} slot 'nope'; valid {said} \
                     slots: {valid}"
                ),
                Reason::SlotUnknown,
            )
        });
        assert_eq!(refusals(&modifications), expected);
        let kinds: Vec<SlotKind> = expected.iter().map(|(kind, ..)| *kind).collect();
        assert_eq!(kinds, SlotKind::ALL, "a row per kind, in the table's order");
        // A theme's refused values are taken out kind by kind.
        for error in check(&discover(&every_kind()), &modifications.clone()) {
            remove_refused(&mut modifications, &error);
        }
        assert_eq!(modifications, Modifications::default());
    }

    #[test]
    fn a_value_its_slot_does_not_take_is_refused_naming_its_field_and_why() {
        let stop = crate::spec::GradientStop {
            offset: 0.0,
            color: Rgba::WHITE,
        };
        let modifications = Modifications {
            texts: [
                ("Title".into(), "tab\there".into()),
                ("nope".into(), "bell\u{7}".into()),
            ]
            .into(),
            scalars: [("fade".into(), 150.0)].into(),
            vectors: [("where".into(), vec![1.0, 2.0, 3.0])].into(),
            gradients: [("sky".into(), vec![stop])].into(),
            ..Modifications::default()
        };
        let expected = [
            (
                SlotKind::Text,
                "modifications.texts[\"Title\"]",
                "texts[\"Title\"]: control character U+0009 is not allowed (only newline)",
                Reason::TextInvalid,
            ),
            (
                SlotKind::Text,
                "modifications.texts[\"nope\"]",
                "texts[\"nope\"]: the template has no text slot 'nope'; valid text slots: Title",
                Reason::SlotUnknown,
            ),
            (
                SlotKind::Text,
                "modifications.texts[\"nope\"]",
                "texts[\"nope\"]: control character U+0007 is not allowed (only newline)",
                Reason::TextInvalid,
            ),
            (
                SlotKind::Scalar,
                "modifications.scalars[\"fade\"]",
                "scalars[\"fade\"]: the slot sets the opacity, which takes 0..=100; got 150",
                Reason::SlotValueInvalid,
            ),
            (
                SlotKind::Vector,
                "modifications.vectors[\"where\"]",
                "vectors[\"where\"]: the slot sets the position, which takes 2 numbers each \
                 within ±1000000; got [1.0, 2.0, 3.0]",
                Reason::SlotValueInvalid,
            ),
            (
                SlotKind::Gradient,
                "modifications.gradients[\"sky\"]",
                "gradients[\"sky\"]: the gradient has 2 stops; got 1",
                Reason::SlotValueInvalid,
            ),
        ]
        .map(|(kind, field, message, reason)| (kind, field.to_owned(), message.to_owned(), reason));
        assert_eq!(refusals(&modifications), expected);
    }

    #[test]
    fn whole_properties_are_written_before_parts_of_items_so_a_colours_alpha_wins() {
        let steps = [
            WriteStep::WholeProperty,
            WriteStep::ItemParts,
            WriteStep::AfterFitting,
        ];
        let written: Vec<SlotKind> = steps
            .iter()
            .flat_map(|step| {
                let kinds = SlotKind::ALL.iter();
                kinds.filter(move |kind| kind.write_step() == *step)
            })
            .copied()
            .collect();
        use SlotKind::*;
        assert_eq!(written, [Scalar, Vector, Gradient, Color, Text, Image]);

        // `Fill`'s opacity is the scalar slot `fade`: a colour with alpha sets it after.
        let render = |colour: Rgba| {
            let mut json = every_kind();
            let slots = discover(&json);
            let modifications = Modifications {
                colors: [("Fill".into(), colour)].into(),
                scalars: [("fade".into(), 20.0)].into(),
                ..Modifications::default()
            };
            apply(&mut json, &slots, &modifications).unwrap();
            json.pointer("/layers/0/shapes/0/o").cloned()
        };
        let translucent = Rgba::new(0.0, 0.0, 1.0, Some(0.5)).unwrap();
        assert_eq!(render(translucent), Some(json!({"a": 0, "k": 50.0})));
        let opaque = Rgba::new(0.0, 0.0, 1.0, None).unwrap();
        assert_eq!(render(opaque), Some(json!({"a": 0, "k": 20.0})));
    }
}
