//! Scalar slots: a layer's or shape's property holding one number (an opacity, a rotation, a
//! stroke width) and carrying a `sid`. A value is a number within the property's range; it
//! replaces the whole property (an animated one becomes static).

use super::{
    bind_property, replace_bound, Discovery, Slot, ValueProblem, WriteStep, KEPT_SLOT_BYTES,
    MAX_PROPERTY_MAGNITUDE,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A property holding one number (an opacity, a rotation, a stroke width).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalarSlot {
    pub id: String,
    /// What the property is ("opacity", "rotation", "stroke width", or its Lottie key).
    pub property: String,
    pub default_value: f64,
    /// The values it accepts.
    pub min: f64,
    pub max: f64,
    /// JSON pointers to the properties this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of a scalar slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalarSlotSummary {
    pub id: String,
    pub property: String,
    pub default_value: f64,
    pub min: f64,
    pub max: f64,
}

impl Slot for ScalarSlot {
    type Summary = ScalarSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::WholeProperty;

    fn discover(template: &Discovery) -> Vec<ScalarSlot> {
        let mut found = BTreeMap::new();
        for property in &template.properties {
            let Some(&[number]) = property.numbers().as_deref() else {
                continue;
            };
            let (min, max) = range(property.key, property.parent_ty);
            let new = || ScalarSlot {
                id: property.sid.to_owned(),
                property: property.name(),
                default_value: number,
                min,
                max,
                bindings: Vec::new(),
                binding_count: 0,
            };
            let pointer = property.pointer.clone();
            bind_property(&mut found, property.sid, pointer, new, |_| true);
        }
        found.into_values().collect()
    }

    fn refusal(&self, value: &f64) -> Option<ValueProblem> {
        (!(self.min..=self.max).contains(value)).then(|| ValueProblem::OutOfRange {
            property: self.property.clone(),
            min: self.min,
            max: self.max,
            value: *value,
        })
    }

    fn write(&self, json: &mut Value, value: &f64) {
        replace_bound(json, &self.bindings, &json!({"a": 0, "k": value}));
    }

    fn for_admission(&self) -> ScalarSlot {
        ScalarSlot {
            bindings: Vec::new(),
            ..self.clone()
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_SLOT_BYTES + self.id.len() + self.property.len()
    }

    fn summary(&self) -> (ScalarSlotSummary, usize) {
        let summary = ScalarSlotSummary {
            id: self.id.clone(),
            property: self.property.clone(),
            default_value: self.default_value,
            min: self.min,
            max: self.max,
        };
        (summary, self.id.len() + self.property.len())
    }
}

/// The values a scalar property accepts.
fn range(key: &str, parent_ty: Option<&str>) -> (f64, f64) {
    match (key, parent_ty) {
        // Percentages.
        ("o", _) | ("s" | "e", Some("tm")) => (0.0, 100.0),
        ("w", _) | ("r", Some("rc")) => (0.0, MAX_PROPERTY_MAGNITUDE),
        _ => (-MAX_PROPERTY_MAGNITUDE, MAX_PROPERTY_MAGNITUDE),
    }
}
