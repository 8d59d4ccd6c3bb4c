//! What GetTemplate and ListTemplates show of a template: its record with every caller-sized
//! part cut to a named limit (default texts, warnings, the slot list), so that an answer stays
//! far below gRPC's default 4 MiB message limit whatever was uploaded, and a listing reads a
//! small file per template shown instead of the whole record. Each cut is flagged, so a
//! caller knows it sees less than there is.

use super::TemplateRecord;
use crate::auth::TenantId;
use crate::lottie::slots::{
    cut, ColorSlotSummary, GradientSlotSummary, ImageSlotSummary, ScalarSlotSummary, Slot, Slots,
    TextSlotSummary, VectorSlotSummary,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Characters of a text slot's default text shown (the text slot's summary cuts it).
pub use crate::lottie::slots::MAX_DEFAULT_TEXT_CHARS;
/// Warnings shown. They are deduplicated already; a real template has a handful.
pub const MAX_WARNINGS_SHOWN: usize = 50;
/// Characters of one warning shown (a warning may quote template text, such as a font name).
pub const MAX_WARNING_CHARS: usize = 500;
/// Bytes of the slot list shown (ids, default texts, font families): a render can fill at
/// most 256 text and 256 colour slots, whose ids take at most 64 characters, so 256 KiB
/// shows every slot a real template has; a template whose slots need more shows the first
/// (by id) and says so.
pub const MAX_SLOT_LIST_BYTES: usize = 256 * 1024;
/// Wire overhead counted per slot besides its strings (tags, lengths, a colour's four
/// doubles), so that [`MAX_SLOT_LIST_BYTES`] bounds the encoded size, not only the text.
const SLOT_OVERHEAD_BYTES: usize = 48;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TemplateSummary {
    pub id: Uuid,
    /// The tenant that owns the template (summaries written before tenants: the default).
    #[serde(default)]
    pub tenant: TenantId,
    pub name: String,
    pub created_at_ms: u64,
    pub sha256: String,
    pub width: i64,
    pub height: i64,
    pub frame_rate: f64,
    pub in_frame: f64,
    pub out_frame: f64,
    pub duration_seconds: f64,
    pub text_slots: Vec<TextSlotSummary>,
    pub color_slots: Vec<ColorSlotSummary>,
    /// Absent from summaries written before image slots: none.
    #[serde(default)]
    pub image_slots: Vec<ImageSlotSummary>,
    /// Absent from summaries written before these kinds: none.
    #[serde(default)]
    pub scalar_slots: Vec<ScalarSlotSummary>,
    #[serde(default)]
    pub vector_slots: Vec<VectorSlotSummary>,
    #[serde(default)]
    pub gradient_slots: Vec<GradientSlotSummary>,
    /// A dotLottie's theme names (summaries before themes: none).
    #[serde(default)]
    pub themes: Vec<String>,
    /// A dotLottie's animation ids and the one the template is (summaries before: none).
    #[serde(default)]
    pub animations: Vec<String>,
    #[serde(default)]
    pub animation: Option<String>,
    /// The template's markers (summaries before markers: none).
    #[serde(default)]
    pub markers: Vec<crate::spec::Marker>,
    /// Slots were left out to keep the list within [`MAX_SLOT_LIST_BYTES`].
    pub slots_truncated: bool,
    pub warnings: Vec<String>,
    /// Warnings were left out or cut.
    pub warnings_truncated: bool,
}

impl TemplateSummary {
    /// The bounded view of `record`.
    pub(crate) fn of(record: &TemplateRecord) -> TemplateSummary {
        let report = &record.report;
        // Destructured so that a new kind of slot is a compile error here: its list needs a
        // field of the summary. The budget is spent in this order: texts first.
        let Slots {
            colors,
            texts,
            images,
            scalars,
            vectors,
            gradients,
        } = &report.slots;
        let mut shown = ShownSlots {
            budget: MAX_SLOT_LIST_BYTES,
            truncated: false,
        };
        let text_slots = shown.take(texts);
        let color_slots = shown.take(colors);
        let image_slots = shown.take(images);
        let scalar_slots = shown.take(scalars);
        let vector_slots = shown.take(vectors);
        let gradient_slots = shown.take(gradients);
        let mut warnings_truncated = report.warnings.len() > MAX_WARNINGS_SHOWN;
        let warnings = report
            .warnings
            .iter()
            .take(MAX_WARNINGS_SHOWN)
            .map(|warning| {
                let (shown, was_cut) = cut(warning, MAX_WARNING_CHARS);
                warnings_truncated |= was_cut;
                shown
            })
            .collect();
        TemplateSummary {
            id: record.id,
            tenant: record.tenant.clone(),
            name: record.name.clone(),
            created_at_ms: record.created_at_ms,
            sha256: report.sha256.clone(),
            width: report.width,
            height: report.height,
            frame_rate: report.frame_rate,
            in_frame: report.in_frame,
            out_frame: report.out_frame,
            duration_seconds: report.duration_seconds,
            text_slots,
            color_slots,
            image_slots,
            scalar_slots,
            vector_slots,
            gradient_slots,
            themes: report.themes.keys().cloned().collect(),
            animations: report.animations.clone(),
            animation: report.animation.clone(),
            markers: report.markers.clone(),
            slots_truncated: shown.truncated,
            warnings,
            warnings_truncated,
        }
    }

    pub(crate) fn created_at(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.created_at_ms)
    }
}

/// The slot list's budget as it is spent, kind by kind.
struct ShownSlots {
    /// Bytes left of [`MAX_SLOT_LIST_BYTES`].
    budget: usize,
    /// Some slots were left out.
    truncated: bool,
}

impl ShownSlots {
    /// What GetTemplate shows of `slots`: their summaries, in order, while they fit.
    fn take<S: Slot>(&mut self, slots: &[S]) -> Vec<S::Summary> {
        let mut shown = Vec::new();
        for slot in slots {
            let (summary, bytes) = slot.summary();
            match self.budget.checked_sub(bytes + SLOT_OVERHEAD_BYTES) {
                Some(left) => self.budget = left,
                None => {
                    self.truncated = true;
                    break;
                }
            }
            shown.push(summary);
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lottie::report::InspectReport;
    use crate::lottie::slots::TextSlot;
    use std::collections::BTreeMap;

    fn record_with(texts: Vec<TextSlot>, warnings: Vec<String>) -> TemplateRecord {
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let mut report =
            InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        report.slots.texts = texts;
        report.warnings = warnings;
        TemplateRecord {
            id: Uuid::new_v4(),
            tenant: Default::default(),
            name: "t".into(),
            created_at_ms: 1,
            fonts: BTreeMap::new(),
            font_sha256: BTreeMap::new(),
            report,
        }
    }

    fn text_slot(id: String, default_text: String) -> TextSlot {
        TextSlot {
            id,
            default_text,
            font_family: "Sans".into(),
            bindings: Vec::new(),
            binding_count: 1,
        }
    }

    #[test]
    fn long_default_texts_and_warnings_are_cut_at_character_boundaries_and_flagged() {
        let summary = TemplateSummary::of(&record_with(
            vec![
                text_slot("long".into(), "é".repeat(3 * MAX_DEFAULT_TEXT_CHARS)),
                text_slot("short".into(), "hello".into()),
            ],
            (0..2 * MAX_WARNINGS_SHOWN)
                .map(|i| format!("w{i}"))
                .collect(),
        ));
        assert_eq!(
            summary.text_slots[0].default_text,
            "é".repeat(MAX_DEFAULT_TEXT_CHARS)
        );
        assert!(summary.text_slots[0].default_text_truncated);
        assert!(!summary.text_slots[1].default_text_truncated);
        assert_eq!(summary.warnings.len(), MAX_WARNINGS_SHOWN);
        assert!(summary.warnings_truncated);
        assert!(!summary.slots_truncated);
    }

    #[test]
    fn a_slot_list_over_its_byte_budget_shows_a_prefix_and_says_so() {
        let slots = (0..2000)
            .map(|i| text_slot(format!("{i:05}"), "x".repeat(MAX_DEFAULT_TEXT_CHARS)))
            .collect();
        let summary = TemplateSummary::of(&record_with(slots, Vec::new()));
        assert!(summary.slots_truncated);
        assert!(summary.text_slots.len() < 2000);
        let shown: usize = summary
            .text_slots
            .iter()
            .map(|slot| slot.id.len() + slot.default_text.len() + slot.font_family.len())
            .sum();
        assert!(shown <= MAX_SLOT_LIST_BYTES);
        assert_eq!(summary.text_slots[0].id, "00000");
    }
}
