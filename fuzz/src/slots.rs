//! Slot discovery (`slots::discover`), run by the server on every CreateTemplate (the
//! report) and by the worker on every render, on templates that passed the fence.
//!
//! Promises checked beyond "no panic": every binding names a property that exists and is of
//! the right kind (a fill/stroke item, a text layer, an image asset); ids are non-empty and
//! distinct; the slot report a caller gets back stays in proportion to the template.

use super::template_answer_budget;
use lottie_render::lottie::reading::assets::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
use lottie_render::lottie::reading::model::layer_type;
use lottie_render::lottie::{slots, Template};
use serde_json::Value;
use std::collections::HashSet;

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    let Ok(template) = Template::parse(data) else {
        return;
    };
    let json = &template.json;
    let found = slots::discover(json);
    let mut ids = HashSet::new();
    for slot in &found.colors {
        assert!(!slot.id.is_empty());
        assert!(
            ids.insert(("color", &slot.id)),
            "colour slot {:?} twice",
            slot.id
        );
        assert_eq!(slot.binding_count, slot.bindings.len());
        for pointer in &slot.bindings {
            let item = json.pointer(pointer).expect("binding resolves");
            let ty = item.get("ty").and_then(Value::as_str);
            assert!(matches!(ty, Some("fl" | "st")), "{pointer} is {ty:?}");
        }
    }
    for slot in &found.texts {
        assert!(!slot.id.is_empty());
        assert!(
            ids.insert(("text", &slot.id)),
            "text slot {:?} twice",
            slot.id
        );
        assert_eq!(slot.binding_count, slot.bindings.len());
        for pointer in &slot.bindings {
            let layer = json.pointer(pointer).expect("binding resolves");
            let ty = layer.get("ty").and_then(Value::as_i64);
            assert_eq!(ty, Some(layer_type::TEXT), "{pointer}");
        }
    }
    for slot in &found.images {
        assert!(!slot.id.is_empty());
        assert!(
            ids.insert(("image", &slot.id)),
            "image slot {:?} twice",
            slot.id
        );
        assert_eq!(slot.binding_count, slot.bindings.len());
        assert!(slot.width >= 1 && u64::from(slot.width) <= MAX_IMAGE_SIDE);
        assert!(slot.height >= 1 && u64::from(slot.height) <= MAX_IMAGE_SIDE);
        assert!(u64::from(slot.width) * u64::from(slot.height) <= MAX_IMAGE_PIXELS);
        for pointer in &slot.bindings {
            let asset = json.pointer(pointer).expect("binding resolves");
            assert!(asset.get("p").is_some(), "{pointer} is no image asset");
        }
    }
    let report_bytes = serde_json::to_vec(&found).map_or(0, |bytes| bytes.len());
    assert!(
        report_bytes <= template_answer_budget(data),
        "slot report of {report_bytes} bytes for {} input bytes",
        data.len()
    );
}
