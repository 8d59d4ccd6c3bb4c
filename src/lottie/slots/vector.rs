//! Vector slots: a layer's or shape's property holding two or three numbers (a position, a
//! scale, a size, an anchor) and carrying a `sid`. A value has the property's dimension, each
//! number within ±[`MAX_PROPERTY_MAGNITUDE`]; it replaces the whole property.

use super::{
    bind_property, replace_bound, Discovery, Slot, ValueProblem, WriteStep, MAX_PROPERTY_MAGNITUDE,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A property holding two or three numbers (a position, a scale, a size, an anchor).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VectorSlot {
    pub id: String,
    pub property: String,
    /// Its length is the dimension a value must have.
    pub default_value: Vec<f64>,
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of a vector slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorSlotSummary {
    pub id: String,
    pub property: String,
    pub default_value: Vec<f64>,
}

/// Bytes a vector slot kept for admission holds besides its strings: the struct and its
/// default's numbers (counted apart, instead of the other kinds' `KEPT_SLOT_BYTES`).
const KEPT_VECTOR_BYTES: usize = 64;
/// Wire bytes of one number of a default: eight, and a tag.
const NUMBER_BYTES: usize = 9;

impl Slot for VectorSlot {
    type Summary = VectorSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::WholeProperty;

    fn discover(template: &Discovery) -> Vec<VectorSlot> {
        let mut found = BTreeMap::new();
        for property in &template.properties {
            let Some(numbers) = property.numbers().filter(|n| matches!(n.len(), 2 | 3)) else {
                continue;
            };
            let dimension = numbers.len();
            let new = || VectorSlot {
                id: property.sid.to_owned(),
                property: property.name(),
                default_value: numbers,
                bindings: Vec::new(),
                binding_count: 0,
            };
            // One dimension per slot: a property of another one is left to its value.
            let takes = |slot: &VectorSlot| slot.default_value.len() == dimension;
            let pointer = property.pointer.clone();
            bind_property(&mut found, property.sid, pointer, new, takes);
        }
        found.into_values().collect()
    }

    fn refusal(&self, values: &Vec<f64>) -> Option<ValueProblem> {
        let fits = values.len() == self.default_value.len()
            && values
                .iter()
                .all(|v| v.is_finite() && v.abs() <= MAX_PROPERTY_MAGNITUDE);
        (!fits).then(|| ValueProblem::Dimension {
            property: self.property.clone(),
            expected: self.default_value.len(),
            got: format!("{values:?}"),
        })
    }

    fn write(&self, json: &mut Value, values: &Vec<f64>) {
        replace_bound(json, &self.bindings, &json!({"a": 0, "k": values}));
    }

    fn for_admission(&self) -> VectorSlot {
        VectorSlot {
            bindings: Vec::new(),
            ..self.clone()
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_VECTOR_BYTES + 8 * self.default_value.len() + self.id.len() + self.property.len()
    }

    fn summary(&self) -> (VectorSlotSummary, usize) {
        let summary = VectorSlotSummary {
            id: self.id.clone(),
            property: self.property.clone(),
            default_value: self.default_value.clone(),
        };
        let bytes = self.id.len() + self.property.len() + NUMBER_BYTES * self.default_value.len();
        (summary, bytes)
    }
}
