//! Image slots: image assets (an asset with a `p`) by their `sid`, else their `id`, whose box
//! (`w` × `h`) is within the embedded images' limits. A value names an image and its fit; the
//! worker decodes and fits it (`lottie::reading::images`), then [`ImageSlot::write_fitted`] embeds it.

use super::{Discovery, Slot, WriteStep, KEPT_SLOT_BYTES};
use crate::lottie::reading::assets::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
use crate::spec::ImageChoice;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageSlot {
    pub id: String,
    /// The asset's box, pixels: a replacement image is fitted to it.
    pub width: u32,
    pub height: u32,
    /// Whether the template embeds an image the slot shows when not filled.
    pub has_default: bool,
    /// JSON pointers to the image assets this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

/// What GetTemplate shows of an image slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageSlotSummary {
    pub id: String,
    pub width: u32,
    pub height: u32,
    pub has_default: bool,
}

impl Slot for ImageSlot {
    type Summary = ImageSlotSummary;
    const WRITE_STEP: WriteStep = WriteStep::AfterFitting;

    /// An asset whose box is outside the embedded images' limits (or missing) is no slot: no
    /// replacement could be fitted to it within them.
    fn discover(template: &Discovery) -> Vec<ImageSlot> {
        let mut found = BTreeMap::new();
        let Some(assets) = template.json.get("assets").and_then(Value::as_array) else {
            return Vec::new();
        };
        for (index, asset) in assets.iter().enumerate() {
            // rlottie takes any asset with a `p` for an image (`assets` module).
            let Some(reference) = asset.get("p") else {
                continue;
            };
            let id = asset
                .get("sid")
                .and_then(Value::as_str)
                .or_else(|| asset.get("id").and_then(Value::as_str));
            let Some(id) = id.filter(|id| !id.is_empty()) else {
                continue;
            };
            let (Some(width), Some(height)) = (side(asset, "w"), side(asset, "h")) else {
                continue;
            };
            if u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
                continue;
            }
            let has_default = reference
                .as_str()
                .is_some_and(|reference| reference.starts_with("data:"));
            super::bind_property(
                &mut found,
                id,
                format!("/assets/{index}"),
                || ImageSlot {
                    id: id.to_owned(),
                    width,
                    height,
                    has_default,
                    bindings: Vec::new(),
                    binding_count: 0,
                },
                |_| true,
            );
        }
        found.into_values().collect()
    }

    /// Nothing: a request's image is decoded and fitted in the worker first
    /// ([`WriteStep::AfterFitting`]); [`ImageSlot::write_fitted`] writes the result.
    fn write(&self, _json: &mut Value, _image: &ImageChoice) {}

    fn for_admission(&self) -> ImageSlot {
        ImageSlot {
            bindings: Vec::new(),
            ..self.clone()
        }
    }

    fn admission_bytes(&self) -> usize {
        KEPT_SLOT_BYTES + self.id.len()
    }

    fn summary(&self) -> (ImageSlotSummary, usize) {
        let summary = ImageSlotSummary {
            id: self.id.clone(),
            width: self.width,
            height: self.height,
            has_default: self.has_default,
        };
        (summary, self.id.len())
    }
}

impl ImageSlot {
    /// Writes a fitted replacement image (a PNG data URI of the slot's box) into the image
    /// assets the slot binds, as embedded images.
    pub fn write_fitted(&self, json: &mut Value, data_uri: &str) {
        for pointer in &self.bindings {
            if let Some(Value::Object(asset)) = json.pointer_mut(pointer) {
                asset.insert("e".to_owned(), json!(1));
                asset.insert("u".to_owned(), json!(""));
                asset.insert("p".to_owned(), json!(data_uri));
            }
        }
    }
}

/// The asset's `key` side, pixels, when it is within the embedded images' limits.
fn side(asset: &Value, key: &str) -> Option<u32> {
    asset
        .get(key)
        .and_then(Value::as_f64)
        .filter(|side| side.is_finite() && *side >= 1.0 && *side <= MAX_IMAGE_SIDE as f64)
        .map(|side| side.round() as u32)
}
