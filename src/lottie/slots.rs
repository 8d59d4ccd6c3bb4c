//! Slot discovery (DESIGN.md § Slots). A slot is a named place a render request may fill:
//! - colour slots: a Lottie `sid` on a fill/stroke colour (values may come from the root
//!   `slots` object), else the name (`nm`) of a fill (`fl`) or stroke (`st`) item, in shape
//!   groups and precomps alike;
//! - text slots: text layers (`ty` 5) by the `sid` of their document, else `ln`, else `nm`;
//! - image slots: image assets (an asset with a `p`) by their `sid`, else their `id`, whose
//!   box (`w` × `h`) is within the embedded images' limits;
//! - scalar, vector and gradient slots (the Lottie slots specification's other kinds): any
//!   other animatable property of a layer or shape carrying a `sid`, by the kind of its value
//!   (one number; two or three; a gradient fill's or stroke's `g`).
//!
//! Every property bound to a slot is recorded as a JSON pointer, so modifications write the
//! tree directly. Duplicate ids bind all of their properties.

use super::assets::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
use super::model::{layer_type, property_initial_value};
pub use crate::spec::GradientStop;
use crate::spec::Rgba;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Longest font family a text slot reports, characters: the limit on an uploaded font's
/// family (`grpc::templates::MAX_TEMPLATE_NAME_CHARS`), so no longer name could match one
/// anyway. Every text slot set in a font repeats its family: unbounded, one long family in
/// the font list and many text layers made a report far larger than the template (caught
/// by the `slots` fuzz target's report budget: 16 KB of template, 500 KB of report).
pub(crate) const MAX_FONT_FAMILY_CHARS: usize = 128;

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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextSlot {
    pub id: String,
    pub default_text: String,
    /// Font family of the first keyframe's document, from the template's font list.
    pub font_family: String,
    /// JSON pointers to the text layers this slot sets.
    #[serde(skip)]
    pub bindings: Vec<String>,
    pub binding_count: usize,
}

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

/// Bound of a scalar or vector slot's values where the property sets none of its own: far
/// past any canvas (8192) or rotation anyone means, and short of what makes geometry
/// overflow.
pub const MAX_PROPERTY_MAGNITUDE: f64 = 1e6;
/// Stops of a gradient slot: Lottie exporters write 2 to a few dozen.
pub const MAX_GRADIENT_STOPS: usize = 64;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Slots {
    pub colors: Vec<ColorSlot>,
    pub texts: Vec<TextSlot>,
    /// Absent from records written before image slots: none.
    #[serde(default)]
    pub images: Vec<ImageSlot>,
    /// Absent from records written before these kinds: none.
    #[serde(default)]
    pub scalars: Vec<ScalarSlot>,
    #[serde(default)]
    pub vectors: Vec<VectorSlot>,
    #[serde(default)]
    pub gradients: Vec<GradientSlot>,
}

impl Slots {
    pub fn color(&self, id: &str) -> Option<&ColorSlot> {
        self.colors.iter().find(|slot| slot.id == id)
    }
    pub fn text(&self, id: &str) -> Option<&TextSlot> {
        self.texts.iter().find(|slot| slot.id == id)
    }
    pub fn image(&self, id: &str) -> Option<&ImageSlot> {
        self.images.iter().find(|slot| slot.id == id)
    }
    pub fn scalar(&self, id: &str) -> Option<&ScalarSlot> {
        self.scalars.iter().find(|slot| slot.id == id)
    }
    pub fn vector(&self, id: &str) -> Option<&VectorSlot> {
        self.vectors.iter().find(|slot| slot.id == id)
    }
    pub fn gradient(&self, id: &str) -> Option<&GradientSlot> {
        self.gradients.iter().find(|slot| slot.id == id)
    }
}

/// Finds every slot of a template (already through the fence).
pub fn discover(json: &Value) -> Slots {
    let root_slots = json.get("slots");
    let font_families = font_families(json);
    let mut colors: BTreeMap<String, ColorSlot> = BTreeMap::new();
    let mut texts: BTreeMap<String, TextSlot> = BTreeMap::new();
    let mut compositions = vec![("/layers".to_owned(), json.get("layers"))];
    if let Some(assets) = json.get("assets").and_then(Value::as_array) {
        for (index, asset) in assets.iter().enumerate() {
            compositions.push((format!("/assets/{index}/layers"), asset.get("layers")));
        }
    }
    let mut properties = PropertySlots::default();
    for (pointer, layers) in &compositions {
        if let Some(layers) = layers.and_then(Value::as_array) {
            for (index, layer) in layers.iter().enumerate() {
                properties.walk(layer, &format!("{pointer}/{index}"), None, None, root_slots);
            }
        }
    }
    for (pointer, layers) in compositions {
        let Some(layers) = layers.and_then(Value::as_array) else {
            continue;
        };
        for (index, layer) in layers.iter().enumerate() {
            let layer_pointer = format!("{pointer}/{index}");
            if layer.get("ty").and_then(Value::as_i64) == Some(layer_type::TEXT) {
                discover_text(
                    layer,
                    &layer_pointer,
                    root_slots,
                    &font_families,
                    &mut texts,
                );
            }
            if let Some(shapes) = layer.get("shapes").and_then(Value::as_array) {
                discover_colors(
                    shapes,
                    &format!("{layer_pointer}/shapes"),
                    root_slots,
                    &mut colors,
                );
            }
        }
    }
    Slots {
        colors: colors.into_values().collect(),
        texts: texts.into_values().collect(),
        images: discover_images(json),
        scalars: properties.scalars.into_values().collect(),
        vectors: properties.vectors.into_values().collect(),
        gradients: properties.gradients.into_values().collect(),
    }
}

/// The scalar, vector and gradient slots found so far, by id.
#[derive(Default)]
struct PropertySlots {
    scalars: BTreeMap<String, ScalarSlot>,
    vectors: BTreeMap<String, VectorSlot>,
    gradients: BTreeMap<String, GradientSlot>,
}

impl PropertySlots {
    /// Looks for `sid` properties in `value` (at `pointer`, under `key` of an object whose
    /// `ty` is `parent_ty`). A property with a `sid` is not looked into (its keyframes hold
    /// no slots).
    fn walk(
        &mut self,
        value: &Value,
        pointer: &str,
        key: Option<&str>,
        parent_ty: Option<&str>,
        root_slots: Option<&Value>,
    ) {
        match value {
            Value::Object(map) => {
                if let (Some(sid), Some(key)) = (map.get("sid").and_then(Value::as_str), key) {
                    if !sid.is_empty() {
                        let shown = slot_property(root_slots, sid).unwrap_or(value);
                        self.add(sid, key, parent_ty, shown, pointer);
                    }
                    return;
                }
                let ty = map.get("ty").and_then(Value::as_str);
                for (child_key, child) in map {
                    // Text documents and the colours of fills and strokes are slots of their
                    // own kinds (found above).
                    if child_key == "t" && map.get("ty").and_then(Value::as_i64) == Some(5) {
                        continue;
                    }
                    let child_pointer = format!("{pointer}/{}", escape_pointer(child_key));
                    self.walk(child, &child_pointer, Some(child_key), ty, root_slots);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.walk(item, &format!("{pointer}/{index}"), None, None, root_slots);
                }
            }
            _ => {}
        }
    }

    /// Records the property `shown` (its value, from the root `slots` when given there) at
    /// `pointer` as slot `sid`, by its kind.
    fn add(&mut self, sid: &str, key: &str, parent_ty: Option<&str>, shown: &Value, pointer: &str) {
        let pointer = pointer.to_owned();
        if key == "c" && matches!(parent_ty, Some("fl" | "st")) {
            return;
        }
        if key == "g" && matches!(parent_ty, Some("gf" | "gs")) {
            let stop_count = shown
                .get("p")
                .and_then(Value::as_u64)
                .and_then(|p| usize::try_from(p).ok())
                .filter(|p| (1..=MAX_GRADIENT_STOPS).contains(p));
            let Some(stop_count) = stop_count else { return };
            let values = shown.get("k").and_then(property_initial_value);
            let default_stops = values
                .and_then(Value::as_array)
                .map(|flat| gradient_stops(flat, stop_count))
                .unwrap_or_default();
            let slot = self
                .gradients
                .entry(sid.to_owned())
                .or_insert_with(|| GradientSlot {
                    id: sid.to_owned(),
                    stop_count,
                    default_stops,
                    bindings: Vec::new(),
                    binding_count: 0,
                });
            if slot.stop_count == stop_count {
                slot.bindings.push(pointer);
                slot.binding_count = slot.bindings.len();
            }
            return;
        }
        let numbers: Option<Vec<f64>> = match property_initial_value(shown) {
            Some(Value::Number(number)) => number.as_f64().map(|n| vec![n]),
            Some(Value::Array(items)) => items.iter().map(Value::as_f64).collect(),
            _ => None,
        };
        let Some(numbers) = numbers.filter(|n| n.iter().all(|v| v.is_finite())) else {
            return;
        };
        let property = property_name(key, parent_ty);
        match numbers.len() {
            1 => {
                let (min, max) = scalar_range(key, parent_ty);
                let slot = self
                    .scalars
                    .entry(sid.to_owned())
                    .or_insert_with(|| ScalarSlot {
                        id: sid.to_owned(),
                        property,
                        default_value: numbers[0],
                        min,
                        max,
                        bindings: Vec::new(),
                        binding_count: 0,
                    });
                slot.bindings.push(pointer);
                slot.binding_count = slot.bindings.len();
            }
            2 | 3 => {
                let slot = self
                    .vectors
                    .entry(sid.to_owned())
                    .or_insert_with(|| VectorSlot {
                        id: sid.to_owned(),
                        property,
                        default_value: numbers.clone(),
                        bindings: Vec::new(),
                        binding_count: 0,
                    });
                // One dimension per slot: a property of another one is left to its value.
                if slot.default_value.len() == numbers.len() {
                    slot.bindings.push(pointer);
                    slot.binding_count = slot.bindings.len();
                }
            }
            _ => {}
        }
    }
}

/// A key as a JSON pointer token (RFC 6901).
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// What a property is, for the report.
fn property_name(key: &str, parent_ty: Option<&str>) -> String {
    let name = match (key, parent_ty) {
        ("o", _) => "opacity",
        ("r", Some("rc")) => "roundness",
        ("r", _) => "rotation",
        ("w", _) => "stroke width",
        ("p", _) => "position",
        ("a", _) => "anchor",
        ("s", Some("rc" | "el")) => "size",
        ("s", Some("tm")) => "trim start",
        ("e", Some("tm")) => "trim end",
        ("s", Some("gf" | "gs")) => "gradient start",
        ("e", Some("gf" | "gs")) => "gradient end",
        ("s", _) => "scale",
        ("sk", _) => "skew",
        ("sa", _) => "skew axis",
        (other, _) => other,
    };
    name.to_owned()
}

/// The values a scalar property accepts.
fn scalar_range(key: &str, parent_ty: Option<&str>) -> (f64, f64) {
    match (key, parent_ty) {
        // Percentages.
        ("o", _) | ("s" | "e", Some("tm")) => (0.0, 100.0),
        ("w", _) | ("r", Some("rc")) => (0.0, MAX_PROPERTY_MAGNITUDE),
        _ => (-MAX_PROPERTY_MAGNITUDE, MAX_PROPERTY_MAGNITUDE),
    }
}

/// The stops of a Lottie gradient's flat values: `count` × (offset, r, g, b), then optionally
/// `count` × (offset, alpha) (channels 0..=1).
fn gradient_stops(flat: &[Value], count: usize) -> Vec<GradientStop> {
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

/// Image assets by `sid`, else `id`. An asset whose box is outside the embedded images'
/// limits (or missing) is no slot: no replacement could be fitted to it within them.
fn discover_images(json: &Value) -> Vec<ImageSlot> {
    let mut images: BTreeMap<String, ImageSlot> = BTreeMap::new();
    let Some(assets) = json.get("assets").and_then(Value::as_array) else {
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
        let side = |key: &str| {
            asset
                .get(key)
                .and_then(Value::as_f64)
                .filter(|side| side.is_finite() && *side >= 1.0 && *side <= MAX_IMAGE_SIDE as f64)
                .map(|side| side.round() as u32)
        };
        let (Some(width), Some(height)) = (side("w"), side("h")) else {
            continue;
        };
        if u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
            continue;
        }
        let has_default = reference
            .as_str()
            .is_some_and(|reference| reference.starts_with("data:"));
        let slot = images.entry(id.to_owned()).or_insert_with(|| ImageSlot {
            id: id.to_owned(),
            width,
            height,
            has_default,
            bindings: Vec::new(),
            binding_count: 0,
        });
        slot.bindings.push(format!("/assets/{index}"));
        slot.binding_count = slot.bindings.len();
    }
    images.into_values().collect()
}

fn discover_colors(
    shapes: &[Value],
    pointer: &str,
    root_slots: Option<&Value>,
    colors: &mut BTreeMap<String, ColorSlot>,
) {
    for (index, shape) in shapes.iter().enumerate() {
        let item_pointer = format!("{pointer}/{index}");
        match shape.get("ty").and_then(Value::as_str) {
            Some("gr") => {
                if let Some(items) = shape.get("it").and_then(Value::as_array) {
                    discover_colors(items, &format!("{item_pointer}/it"), root_slots, colors);
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
                let slot = colors.entry(id.to_owned()).or_insert_with(|| ColorSlot {
                    id: id.to_owned(),
                    default_color,
                    bindings: Vec::new(),
                    binding_count: 0,
                });
                slot.bindings.push(item_pointer);
                slot.binding_count = slot.bindings.len();
            }
            _ => {}
        }
    }
}

fn discover_text(
    layer: &Value,
    layer_pointer: &str,
    root_slots: Option<&Value>,
    font_families: &BTreeMap<String, String>,
    texts: &mut BTreeMap<String, TextSlot>,
) {
    let document = layer.pointer("/t/d");
    let sid = document.and_then(|d| d.get("sid")).and_then(Value::as_str);
    let id = sid
        .or_else(|| layer.get("ln").and_then(Value::as_str))
        .or_else(|| layer.get("nm").and_then(Value::as_str));
    let Some(id) = id.filter(|id| !id.is_empty()) else {
        return;
    };
    let shown = sid
        .and_then(|sid| slot_property(root_slots, sid))
        .or(document);
    let first = shown.and_then(|d| d.pointer("/k/0/s"));
    let default_text = first
        .and_then(|s| s.get("t"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace('\r', "\n");
    let font_name = first
        .and_then(|s| s.get("f"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let font_family: String = font_families
        .get(font_name)
        .map_or(font_name, String::as_str)
        .chars()
        .take(MAX_FONT_FAMILY_CHARS)
        .collect();
    let slot = texts.entry(id.to_owned()).or_insert_with(|| TextSlot {
        id: id.to_owned(),
        default_text,
        font_family,
        bindings: Vec::new(),
        binding_count: 0,
    });
    slot.bindings.push(layer_pointer.to_owned());
    slot.binding_count = slot.bindings.len();
}

/// `fonts.list[].fName` → `fFamily`.
fn font_families(json: &Value) -> BTreeMap<String, String> {
    json.pointer("/fonts/list")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|font| {
            let name = font.get("fName")?.as_str()?;
            let family = font.get("fFamily").and_then(Value::as_str).unwrap_or(name);
            Some((name.to_owned(), family.to_owned()))
        })
        .collect()
}

/// The property a root `slots` entry provides for `sid`.
pub(crate) fn slot_property<'a>(root_slots: Option<&'a Value>, sid: &str) -> Option<&'a Value> {
    root_slots?.get(sid)?.get("p")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_font_family_shared_by_many_text_layers_keeps_the_report_small() {
        // Caught by the `slots` fuzz target's report budget: every text slot repeated the
        // whole family name, so 50 layers made a 500 KB report out of a 16 KB template.
        let family = "F".repeat(10_000);
        let layers: Vec<Value> = (0..50)
            .map(|index| {
                json!({"ty": 5, "nm": format!("t{index}"),
                    "t": {"d": {"k": [{"s": {"t": "x", "f": "A", "s": 10}, "t": 0}]}}})
            })
            .collect();
        let template = json!({"fonts": {"list": [{"fName": "A", "fFamily": family}]},
            "layers": layers});
        let found = discover(&template);
        assert_eq!(found.texts.len(), 50);
        for slot in &found.texts {
            assert_eq!(slot.font_family, "F".repeat(MAX_FONT_FAMILY_CHARS));
        }
        let report_bytes = serde_json::to_vec(&found).unwrap().len();
        let template_bytes = template.to_string().len();
        assert!(
            report_bytes < template_bytes,
            "{report_bytes} bytes of report for {template_bytes} bytes of template"
        );
    }

    #[test]
    fn image_assets_are_slots_by_sid_else_id_with_their_box() {
        let template = json!({"assets": [
            {"id": "image_0", "w": 320, "h": 200, "e": 1, "p": "data:image/png;base64,AA"},
            {"id": "image_1", "sid": "logo", "w": 64.4, "h": 64, "e": 1, "p": "data:image/png;base64,AA"},
            {"id": "image_2", "sid": "logo", "w": 64, "h": 64, "e": 1, "p": "data:image/png;base64,AA"},
            {"id": "precomp", "layers": []},
            {"id": "huge", "w": 100000, "h": 10, "p": "data:image/png;base64,AA"},
            {"id": "no_box", "p": "data:image/png;base64,AA"}
        ]});
        let found = discover(&template);
        let ids: Vec<&str> = found.images.iter().map(|slot| slot.id.as_str()).collect();
        assert_eq!(ids, ["image_0", "logo"]);
        let logo = found.image("logo").unwrap();
        assert_eq!((logo.width, logo.height, logo.has_default), (64, 64, true));
        assert_eq!(logo.bindings, ["/assets/1", "/assets/2"]);
        assert_eq!(found.image("image_0").unwrap().width, 320);
    }

    #[test]
    fn a_text_slot_reports_its_family_from_the_font_list_else_the_font_name() {
        let template = json!({"fonts": {"list": [{"fName": "Sans-Bold", "fFamily": "Sans"}]},
        "layers": [
            {"ty": 5, "nm": "listed", "t": {"d": {"k": [{"s": {"t": "a", "f": "Sans-Bold"}, "t": 0}]}}},
            {"ty": 5, "nm": "unlisted", "t": {"d": {"k": [{"s": {"t": "b", "f": "Serif"}, "t": 0}]}}}
        ]});
        let found = discover(&template);
        assert_eq!(found.text("listed").unwrap().font_family, "Sans");
        assert_eq!(found.text("unlisted").unwrap().font_family, "Serif");
    }
}
