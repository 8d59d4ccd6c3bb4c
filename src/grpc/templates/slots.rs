//! A template's slots as its answer shows them: each kind's summary (`lottie::slots`) as its
//! wire message, one conversion per kind. `summary_to_proto` takes a list per kind through
//! [`to_proto`]; a kind without its conversion here does not compile there.

use crate::grpc::proto;
use crate::lottie::slots::{
    ColorSlotSummary, GradientSlotSummary, ImageSlotSummary, ScalarSlotSummary, TextSlotSummary,
    VectorSlotSummary,
};

/// A kind's slot summaries as their wire messages, in order.
pub(super) fn to_proto<'a, S, P: From<&'a S>>(slots: &'a [S]) -> Vec<P> {
    slots.iter().map(P::from).collect()
}

impl From<&TextSlotSummary> for proto::TextSlot {
    fn from(slot: &TextSlotSummary) -> proto::TextSlot {
        proto::TextSlot {
            id: slot.id.clone(),
            default_text: slot.default_text.clone(),
            font_family: slot.font_family.clone(),
            default_text_truncated: slot.default_text_truncated,
        }
    }
}

impl From<&ColorSlotSummary> for proto::ColorSlot {
    fn from(slot: &ColorSlotSummary) -> proto::ColorSlot {
        proto::ColorSlot {
            id: slot.id.clone(),
            default_color: Some(slot.default_color.into()),
        }
    }
}

impl From<&ImageSlotSummary> for proto::ImageSlot {
    fn from(slot: &ImageSlotSummary) -> proto::ImageSlot {
        proto::ImageSlot {
            id: slot.id.clone(),
            width: slot.width,
            height: slot.height,
            has_default: slot.has_default,
        }
    }
}

impl From<&ScalarSlotSummary> for proto::ScalarSlot {
    fn from(slot: &ScalarSlotSummary) -> proto::ScalarSlot {
        proto::ScalarSlot {
            id: slot.id.clone(),
            property: slot.property.clone(),
            default_value: slot.default_value,
            min: slot.min,
            max: slot.max,
        }
    }
}

impl From<&VectorSlotSummary> for proto::VectorSlot {
    fn from(slot: &VectorSlotSummary) -> proto::VectorSlot {
        proto::VectorSlot {
            id: slot.id.clone(),
            property: slot.property.clone(),
            default_value: slot.default_value.clone(),
        }
    }
}

impl From<&GradientSlotSummary> for proto::GradientSlot {
    fn from(slot: &GradientSlotSummary) -> proto::GradientSlot {
        proto::GradientSlot {
            id: slot.id.clone(),
            default_stops: slot
                .default_stops
                .iter()
                .map(|stop| proto::GradientStop {
                    offset: stop.offset,
                    color: Some(stop.color.into()),
                })
                .collect(),
        }
    }
}
