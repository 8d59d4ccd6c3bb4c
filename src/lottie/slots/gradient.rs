//! Gradient slots: a gradient fill's or stroke's colours (`g`) carrying a `sid`. A value is
//! as many stops as the gradient has (its `p`); it replaces the whole `g`.

use super::{bind_property, replace_bound, Discovery, Slot, ValueProblem, WriteStep};
use super::{GradientStop, KEPT_SLOT_BYTES};
use crate::lottie::reading::model::property_initial_value;
use crate::spec::Rgba;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Stops of a gradient slot: Lottie exporters write 2 to a few dozen.
pub const MAX_GRADIENT_STOPS: usize = 64;
/// Wire bytes of a stop: its offset and a colour of four channels, with their tags.
const STOP_BYTES: usize = 48;

/// A gradient fill's or stroke's colours (`g`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GradientSlot {
    pub id: String,
    /// The stops a value must have: the gradient's `p`.
    pub stop_count: usize,
    pub default_stops: Vec<GradientStop>,
    /// JSON pointers to the gradients' `g` objects this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of a gradient slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradientSlotSummary {
    pub id: String,
    pub default_stops: Vec<GradientStop>,
}

impl Slot for GradientSlot {
    type Summary = GradientSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::WholeProperty;

    fn discover(template: &Discovery) -> Vec<GradientSlot> {
        let mut found = BTreeMap::new();
        for property in template.properties.iter().filter(|p| p.is_gradient()) {
            let stop_count = property
                .shown
                .get("p")
                .and_then(Value::as_u64)
                .and_then(|p| usize::try_from(p).ok())
                .filter(|p| (1..=MAX_GRADIENT_STOPS).contains(p));
            let Some(stop_count) = stop_count else {
                continue;
            };
            let new = || GradientSlot {
                id: property.sid.to_owned(),
                stop_count,
                default_stops: property
                    .shown
                    .get("k")
                    .and_then(property_initial_value)
                    .and_then(Value::as_array)
                    .map(|flat| stops(flat, stop_count))
                    .unwrap_or_default(),
                bindings: Vec::new(),
                binding_count: 0,
            };
            // One stop count per slot: a gradient of another is left to its value.
            let takes = |slot: &GradientSlot| slot.stop_count == stop_count;
            let pointer = property.pointer.clone();
            bind_property(&mut found, property.sid, pointer, new, takes);
        }
        found.into_values().collect()
    }

    fn refusal(&self, stops: &Vec<GradientStop>) -> Option<ValueProblem> {
        (stops.len() != self.stop_count).then_some(ValueProblem::StopCount {
            expected: self.stop_count,
            got: stops.len(),
        })
    }

    fn write(&self, json: &mut Value, stops: &Vec<GradientStop>) {
        replace_bound(json, &self.bindings, &property(stops));
    }

    fn for_admission(&self) -> GradientSlot {
        // Admission needs the stop count only.
        GradientSlot {
            default_stops: Vec::new(),
            bindings: Vec::new(),
            ..self.clone()
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_SLOT_BYTES + self.id.len()
    }

    fn summary(&self) -> (GradientSlotSummary, usize) {
        let summary = GradientSlotSummary {
            id: self.id.clone(),
            default_stops: self.default_stops.clone(),
        };
        (
            summary,
            self.id.len() + self.default_stops.len() * STOP_BYTES,
        )
    }
}

/// The stops of a Lottie gradient's flat values: `count` × (offset, r, g, b), then optionally
/// `count` × (offset, alpha) (channels 0..=1).
fn stops(flat: &[Value], count: usize) -> Vec<GradientStop> {
    let number = |index: usize| flat.get(index).and_then(Value::as_f64);
    let has_alpha = flat.len() >= count * 6;
    (0..count)
        .filter_map(|stop| {
            let base = stop * 4;
            let alpha = if has_alpha {
                number(count * 4 + stop * 2 + 1)
            } else {
                None
            };
            let color = Rgba::new(
                number(base + 1)?.clamp(0.0, 1.0),
                number(base + 2)?.clamp(0.0, 1.0),
                number(base + 3)?.clamp(0.0, 1.0),
                alpha.map(|a| a.clamp(0.0, 1.0)),
            )
            .ok()?;
            Some(GradientStop {
                offset: number(base)?,
                color,
            })
        })
        .collect()
}

/// A gradient's `g`: its stop count and its flat values, colour stops then opacity stops.
fn property(stops: &[GradientStop]) -> Value {
    let mut flat: Vec<f64> = Vec::with_capacity(stops.len() * 6);
    for stop in stops {
        flat.extend([stop.offset, stop.color.r(), stop.color.g(), stop.color.b()]);
    }
    for stop in stops {
        flat.extend([stop.offset, stop.color.a().unwrap_or(1.0)]);
    }
    json!({"p": stops.len(), "k": {"a": 0, "k": flat}})
}
