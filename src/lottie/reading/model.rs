//! The typed Bodymovin model: only what the service needs to validate, fence and find slots
//! in a template. Everything else stays in the JSON tree that is rewritten and handed to
//! rlottie, so unknown or newer Lottie features pass through untouched.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The root of a Bodymovin document.
#[derive(Debug, Deserialize)]
pub struct Animation {
    /// Bodymovin version that wrote the file.
    pub v: String,
    /// Frame rate, frames per second.
    pub fr: f64,
    /// In point, in frames.
    pub ip: f64,
    /// Out point, in frames (exclusive).
    pub op: f64,
    /// Canvas width, pixels.
    pub w: i64,
    /// Canvas height, pixels.
    pub h: i64,
    #[serde(default)]
    pub nm: Option<String>,
    pub layers: Vec<Layer>,
    #[serde(default)]
    pub assets: Vec<Asset>,
    #[serde(default)]
    pub fonts: Option<FontList>,
    #[serde(default)]
    pub chars: Vec<Map<String, Value>>,
    /// Lottie slots: slot id → `{ "p": property }`.
    #[serde(default)]
    pub slots: BTreeMap<String, Slot>,
    #[serde(default)]
    pub markers: Vec<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
pub struct Slot {
    pub p: Value,
}

#[derive(Debug, Deserialize)]
pub struct FontList {
    #[serde(default)]
    pub list: Vec<Font>,
}

#[derive(Debug, Deserialize)]
pub struct Font {
    #[serde(rename = "fName")]
    pub name: String,
    #[serde(rename = "fFamily", default)]
    pub family: Option<String>,
    #[serde(rename = "fStyle", default)]
    pub style: Option<String>,
}

/// An asset: a precomposition (has `layers`) or an image (has `p`).
#[derive(Debug, Deserialize)]
pub struct Asset {
    pub id: String,
    #[serde(default)]
    pub layers: Option<Vec<Layer>>,
    #[serde(default)]
    pub p: Option<String>,
    #[serde(default)]
    pub w: Option<i64>,
    #[serde(default)]
    pub h: Option<i64>,
}

impl Asset {
    pub(crate) fn is_precomp(&self) -> bool {
        self.layers.is_some()
    }
}

/// Layer types rlottie knows (`ty`).
pub mod layer_type {
    pub(crate) const PRECOMP: i64 = 0;
    pub(crate) const SOLID: i64 = 1;
    pub(crate) const IMAGE: i64 = 2;
    pub(crate) const NULL: i64 = 3;
    pub(crate) const SHAPE: i64 = 4;
    pub const TEXT: i64 = 5;
}

#[derive(Debug, Deserialize)]
pub struct Layer {
    pub ty: i64,
    #[serde(default)]
    pub ind: Option<i64>,
    #[serde(default)]
    pub parent: Option<i64>,
    #[serde(rename = "refId", default)]
    pub ref_id: Option<String>,
    #[serde(default)]
    pub nm: Option<String>,
    #[serde(default)]
    pub ln: Option<String>,
    #[serde(default)]
    pub ip: Option<f64>,
    #[serde(default)]
    pub op: Option<f64>,
    #[serde(default)]
    pub st: Option<f64>,
    /// Transform; a map when present (null is refused, as rlottie refuses it).
    #[serde(default)]
    pub ks: Map<String, Value>,
    #[serde(default)]
    pub shapes: Vec<Shape>,
    #[serde(default)]
    pub masks_properties: Vec<Map<String, Value>>,
    #[serde(default)]
    pub t: Option<TextData>,
    #[serde(default)]
    pub w: Option<i64>,
    #[serde(default)]
    pub h: Option<i64>,
    /// Time remap (precomp layers); present means the layer remaps time.
    #[serde(default)]
    pub tm: Option<Map<String, Value>>,
    #[serde(default)]
    pub ef: Vec<Value>,
}

/// A shape item; groups (`gr`) nest items in `it`. The rest of the item stays loosely
/// typed: its properties are checked by the fence where rlottie needs protecting.
#[derive(Debug, Deserialize)]
pub struct Shape {
    pub ty: String,
    #[serde(default)]
    pub nm: Option<String>,
    #[serde(default)]
    pub it: Vec<Shape>,
    #[serde(flatten)]
    pub properties: Map<String, Value>,
}

/// A text layer's data (`t`).
#[derive(Debug, Deserialize)]
pub struct TextData {
    pub d: TextDocumentProperty,
    #[serde(default)]
    pub a: Vec<Value>,
    #[serde(default)]
    pub p: Option<Map<String, Value>>,
}

/// The animated text document: keyframes of `{ s: document, t: time }`.
#[derive(Debug, Deserialize)]
pub struct TextDocumentProperty {
    pub k: Vec<TextDocumentKeyframe>,
    #[serde(default)]
    pub sid: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct TextDocumentKeyframe {
    pub s: TextDocument,
    #[serde(default)]
    pub t: f64,
}

#[derive(Debug, Deserialize)]
pub struct TextDocument {
    /// The text; lines are separated by `\r`.
    #[serde(default)]
    pub t: String,
    /// Font name (matches `fonts.list[].fName`).
    #[serde(default)]
    pub f: Option<String>,
    /// Font size, points.
    #[serde(default)]
    pub s: Option<f64>,
}

/// Values of an animatable property (`{ "a": 0|1, "k": … }`): the static value, or the
/// start values of each keyframe.
/// Visits every list of layers of a template: each precomposition's, then the top level.
pub fn for_each_layer_list(json: &mut Value, mut visit: impl FnMut(&mut Vec<Value>)) {
    if let Some(Value::Array(assets)) = json.get_mut("assets") {
        for asset in assets.iter_mut() {
            if let Some(Value::Array(layers)) = asset.get_mut("layers") {
                visit(layers);
            }
        }
    }
    if let Some(Value::Array(layers)) = json.get_mut("layers") {
        visit(layers);
    }
}

pub(crate) fn property_values(property: &Value) -> Vec<&Value> {
    let Some(k) = property.get("k") else {
        return Vec::new();
    };
    match k.as_array() {
        Some(items) if items.first().is_some_and(Value::is_object) => items
            .iter()
            .flat_map(|keyframe| [keyframe.get("s"), keyframe.get("e")])
            .flatten()
            .collect(),
        _ => vec![k],
    }
}

/// The first value a property shows (static value, or the first keyframe's start value).
pub(crate) fn property_initial_value(property: &Value) -> Option<&Value> {
    property_values(property).into_iter().next()
}
