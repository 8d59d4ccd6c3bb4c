//! Slot kinds and their shared discovery (DESIGN.md § Slots). A slot is a named place a render
//! request may fill; its kind says what it is found on and what value it takes. Every kind is
//! one row of the `slot_kinds!` table below and one file under `slots/` implementing [`Slot`]
//! (`colour.rs`: fills' and strokes' colours; `text.rs`: text layers; `image.rs`: image assets;
//! `scalar.rs`, `vector.rs`, `gradient.rs`: the Lottie slots specification's other kinds, any
//! property carrying a `sid`, by its value's kind). Each file's head says how its slots are
//! found and named. Every property bound to a slot is recorded as a JSON pointer, so
//! modifications write the tree directly; duplicate ids bind all of their properties.
//!
//! What uses every kind loops over them ([`for_each_kind`], or a method of [`Slots`] the table
//! writes) or destructures a struct with a field per kind, so that a new row is a compile
//! error wherever it must be handled: the check and the writing (`lottie::modifications`), the
//! admission copy (`storage::record_cache`), the summary (`storage::summary`), the request's
//! values (`spec::Modifications`, `grpc::convert`), the answer (`grpc::templates`) and the
//! CLI's print (`cli::client`); `grpc::proto`'s tests hold the wire contract to the table.

mod colour;
mod gradient;
mod image;
mod scalar;
mod text;
mod vector;

use super::reading::model::property_initial_value;
use crate::reason::Reason;
pub use crate::spec::GradientStop;
use crate::spec::{Modifications, Rgba};
pub use colour::{ColorSlot, ColorSlotSummary};
pub use gradient::{GradientSlot, GradientSlotSummary, MAX_GRADIENT_STOPS};
pub use image::{ImageSlot, ImageSlotSummary};
pub use scalar::{ScalarSlot, ScalarSlotSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
pub use text::{TextSlot, TextSlotSummary, MAX_DEFAULT_TEXT_CHARS};
pub use vector::{VectorSlot, VectorSlotSummary};

/// Bound of a scalar or vector slot's values where the property sets none of its own: far
/// past any canvas (8192) or rotation anyone means, and short of what makes geometry
/// overflow.
pub const MAX_PROPERTY_MAGNITUDE: f64 = 1e6;
/// What a slot kept for admission costs in memory besides its strings (the struct, its own
/// fields): a rough, generous figure for the record cache's byte budget.
const KEPT_SLOT_BYTES: usize = 96;

/// Declares the slot kinds from one table (the model is `reasons!` in `src/reason.rs`). A row
/// names the kind, its [`Slot`] type, the value a request gives it, its list (the field of
/// [`Slots`], of [`Modifications`] and of the request: `modifications.colors["bg"]`), one slot
/// (its accessor, its wire name: `Template.color_slots`) and how messages say it.
macro_rules! slot_kinds {
    ($($kind:ident => $slot:ident {
        value: $value:ty, list: $list:ident, one: $one:ident, said: $said:literal $(,)?
    },)+) => {
        /// A kind of slot: a row of the table.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum SlotKind {
            $($kind,)+
        }

        impl SlotKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [SlotKind] = &[$(SlotKind::$kind,)+];

            /// Its list in a request's `modifications` and in [`Slots`] (`colors`).
            pub const fn list(self) -> &'static str {
                match self {
                    $(SlotKind::$kind => stringify!($list),)+
                }
            }

            /// One slot of it on the wire (`color`, as in `Template.color_slots`).
            pub const fn wire_name(self) -> &'static str {
                match self {
                    $(SlotKind::$kind => stringify!($one),)+
                }
            }

            /// How messages say one slot of it (`colour`).
            pub const fn said(self) -> &'static str {
                match self {
                    $(SlotKind::$kind => $said,)+
                }
            }

            /// When its values are written into a render's template.
            pub const fn write_step(self) -> WriteStep {
                match self {
                    $(SlotKind::$kind => <$slot as Slot>::WRITE_STEP,)+
                }
            }

            /// Takes the value for its slot `id` out of `modifications`.
            pub fn remove_value(self, modifications: &mut Modifications, id: &str) {
                match self {
                    $(SlotKind::$kind => {
                        modifications.$list.remove(id);
                    })+
                }
            }
        }

        /// A template's slots, a list per kind, each sorted by id.
        #[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
        pub struct Slots {
            $(
                #[doc = concat!("The ", $said, " slots (absent from records written before \
                                 the kind: none).")]
                #[serde(default)]
                pub $list: Vec<$slot>,
            )+
        }

        impl Slots {
            $(
                #[doc = concat!("The ", $said, " slot `id`.")]
                pub fn $one(&self, id: &str) -> Option<&$slot> {
                    <$slot as TableRow>::find(self, id)
                }
            )+

            /// Every kind's slots of `template`.
            fn discovered(template: &Discovery) -> Slots {
                Slots {
                    $($list: <$slot as Slot>::discover(template),)+
                }
            }

            /// The slots as admission keeps them ([`Slot::for_admission`]).
            pub fn for_admission(&self) -> Slots {
                Slots {
                    $($list: self.$list.iter().map(Slot::for_admission).collect(),)+
                }
            }

            /// About the bytes the slots hold in memory as admission keeps them.
            pub fn admission_bytes(&self) -> usize {
                0 $(+ self.$list.iter().map(Slot::admission_bytes).sum::<usize>())+
            }
        }

        $(
            impl TableRow for $slot {
                const KIND: SlotKind = SlotKind::$kind;
                type Value = $value;

                fn all(slots: &Slots) -> &[$slot] {
                    &slots.$list
                }

                fn values(modifications: &Modifications) -> &BTreeMap<String, $value> {
                    &modifications.$list
                }

                fn id(&self) -> &str {
                    &self.id
                }

                fn bindings(&self) -> &[String] {
                    &self.bindings
                }

                fn bind(&mut self, pointer: String) {
                    self.bindings.push(pointer);
                    self.binding_count = self.bindings.len();
                }
            }
        )+

        /// Calls `visitor` once per kind, in the table's order.
        pub fn for_each_kind(visitor: &mut impl EachKind) {
            $(visitor.visit::<$slot>();)+
        }
    };
}

// The rows' order is the order a request's values are checked, so the order its refusals are
// listed in (pinned on the wire by tests); what is written first is each kind's `WRITE_STEP`.
slot_kinds! {
    Color => ColorSlot { value: Rgba, list: colors, one: color, said: "colour" },
    Text => TextSlot { value: String, list: texts, one: text, said: "text" },
    Image => ImageSlot { value: crate::spec::ImageChoice, list: images, one: image, said: "image" },
    Scalar => ScalarSlot { value: f64, list: scalars, one: scalar, said: "scalar" },
    Vector => VectorSlot { value: Vec<f64>, list: vectors, one: vector, said: "vector" },
    Gradient => GradientSlot {
        value: Vec<GradientStop>, list: gradients, one: gradient, said: "gradient",
    },
}

/// A kind's row of the table, written by `slot_kinds!`: its kind, where its slots and its
/// values are, and what every slot has (an id, the JSON pointers it binds).
pub trait TableRow: Sized {
    const KIND: SlotKind;
    /// What a request gives a slot of the kind (the value type of its `Modifications` map).
    type Value;
    /// The template's slots of the kind.
    fn all(slots: &Slots) -> &[Self];
    /// The request's values for slots of the kind, by slot id.
    fn values(modifications: &Modifications) -> &BTreeMap<String, Self::Value>;
    fn id(&self) -> &str;
    /// JSON pointers to what the slot sets (empty in the copy admission keeps).
    fn bindings(&self) -> &[String];
    /// Records one more property the slot sets.
    fn bind(&mut self, pointer: String);

    /// The slot `id` of the kind.
    fn find<'a>(slots: &'a Slots, id: &str) -> Option<&'a Self> {
        Self::all(slots).iter().find(|slot| slot.id() == id)
    }
}

/// What a kind of slot is beyond its row: how a template's slots of it are found, which values
/// they refuse, how a value is written, what admission keeps of a slot and what GetTemplate
/// shows of it. One implementation per file under `slots/`.
pub trait Slot: TableRow + Clone {
    /// What GetTemplate and ListTemplates show of a slot (kept in the template's summary).
    type Summary;
    /// When its values are written ([`WriteStep`]).
    const WRITE_STEP: WriteStep;

    /// The template's slots of the kind, sorted by id.
    fn discover(template: &Discovery) -> Vec<Self>;

    /// Why no slot of the kind takes `value` (checked for an unknown slot id too).
    fn refusal_by_any(_value: &Self::Value) -> Option<ValueProblem> {
        None
    }

    /// Why this slot does not take `value`.
    fn refusal(&self, _value: &Self::Value) -> Option<ValueProblem> {
        None
    }

    /// Writes `value` (checked) into every property the slot binds in `json`, whose slot
    /// references are resolved.
    fn write(&self, json: &mut Value, value: &Self::Value);

    /// The slot as admission keeps it in memory: its id and what [`Slot::refusal`] reads.
    fn for_admission(&self) -> Self;

    /// About the bytes [`Slot::for_admission`]'s copy holds.
    fn admission_bytes(&self) -> usize;

    /// What GetTemplate shows of the slot, and about the bytes its strings and numbers take
    /// on the wire (for the slot list's budget, `storage::summary`).
    fn summary(&self) -> (Self::Summary, usize);
}

/// Something done once per kind, with the kind's type in hand ([`for_each_kind`]).
pub trait EachKind {
    fn visit<S: Slot>(&mut self);
}

/// When a kind's values are written into a render's template (`modifications::write`), so
/// that kinds binding the same item write it in a known order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// First: the value replaces a whole property (`{"a": 0, "k": …}`).
    WholeProperty,
    /// Then: the value sets parts of an item (a fill's colour and its opacity, a text
    /// document's text), so a colour's alpha sets its fill's opacity over an opacity slot.
    ItemParts,
    /// Not by `modifications::write`: the worker decodes and fits the value first, and
    /// `modifications::write_images` writes what it made.
    AfterFitting,
}

/// Why a slot does not take a value: the part of a refusal after the value's field.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ValueProblem {
    #[error("the slot sets the {property}, which takes {min}..={max}; got {value}")]
    OutOfRange {
        property: String,
        min: f64,
        max: f64,
        value: f64,
    },
    #[error(
        "the slot sets the {property}, which takes {expected} numbers each within \
         ±{MAX_PROPERTY_MAGNITUDE}; got {got}"
    )]
    Dimension {
        property: String,
        expected: usize,
        got: String,
    },
    #[error("the gradient has {expected} stops; got {got}")]
    StopCount { expected: usize, got: usize },
    #[error("control character U+{code:04X} is not allowed (only newline)")]
    ControlCharacter { code: u32 },
}

impl ValueProblem {
    pub fn reason(&self) -> Reason {
        match self {
            ValueProblem::OutOfRange { .. }
            | ValueProblem::Dimension { .. }
            | ValueProblem::StopCount { .. } => Reason::SlotValueInvalid,
            ValueProblem::ControlCharacter { .. } => Reason::TextInvalid,
        }
    }
}

/// Finds every slot of a template (already through the fence).
pub fn discover(json: &Value) -> Slots {
    Slots::discovered(&Discovery::of(json))
}

/// What the kinds' discovery reads of a template, gathered once.
pub struct Discovery<'a> {
    pub json: &'a Value,
    /// The root `slots` object: values for `sid` properties.
    pub root_slots: Option<&'a Value>,
    /// Every composition's layers with their JSON pointers: the root's, then each asset's.
    pub layers: Vec<(String, &'a Value)>,
    /// The properties of layers and shapes carrying a `sid`, in document order (a fill's or
    /// stroke's colour, a colour slot's, and text documents left out).
    pub properties: Vec<SidProperty<'a>>,
}

/// A property carrying a `sid`.
pub struct SidProperty<'a> {
    pub sid: &'a str,
    /// Its key in its object, and that object's `ty`: what the property is.
    pub key: &'a str,
    pub parent_ty: Option<&'a str>,
    /// What it shows: the root `slots` entry for its `sid` when there is one, else itself.
    pub shown: &'a Value,
    pub pointer: String,
}

impl<'a> Discovery<'a> {
    fn of(json: &'a Value) -> Discovery<'a> {
        let root_slots = json.get("slots");
        let mut compositions = vec![("/layers".to_owned(), json.get("layers"))];
        if let Some(assets) = json.get("assets").and_then(Value::as_array) {
            for (index, asset) in assets.iter().enumerate() {
                compositions.push((format!("/assets/{index}/layers"), asset.get("layers")));
            }
        }
        let mut layers = Vec::new();
        for (pointer, composition) in compositions {
            if let Some(composition) = composition.and_then(Value::as_array) {
                for (index, layer) in composition.iter().enumerate() {
                    layers.push((format!("{pointer}/{index}"), layer));
                }
            }
        }
        let mut properties = Vec::new();
        for (pointer, layer) in &layers {
            find_sid_properties(layer, pointer, None, None, root_slots, &mut properties);
        }
        Discovery {
            json,
            root_slots,
            layers,
            properties,
        }
    }
}

/// Adds the properties with a `sid` in `value` (at `pointer`, under `key` of an object whose
/// `ty` is `parent_ty`) to `found`. A property with a `sid` is not looked into (its keyframes
/// hold no slots).
fn find_sid_properties<'a>(
    value: &'a Value,
    pointer: &str,
    key: Option<&'a str>,
    parent_ty: Option<&'a str>,
    root_slots: Option<&'a Value>,
    found: &mut Vec<SidProperty<'a>>,
) {
    match value {
        Value::Object(map) => {
            if let (Some(sid), Some(key)) = (map.get("sid").and_then(Value::as_str), key) {
                // A fill's or stroke's colour is a colour slot (found by its own kind).
                let colour = key == "c" && matches!(parent_ty, Some("fl" | "st"));
                if !sid.is_empty() && !colour {
                    found.push(SidProperty {
                        sid,
                        key,
                        parent_ty,
                        shown: slot_property(root_slots, sid).unwrap_or(value),
                        pointer: pointer.to_owned(),
                    });
                }
                return;
            }
            let ty = map.get("ty").and_then(Value::as_str);
            for (child_key, child) in map {
                // Text documents are text slots (found by their own kind).
                if child_key == "t" && map.get("ty").and_then(Value::as_i64) == Some(5) {
                    continue;
                }
                let child_pointer = format!("{pointer}/{}", escape_pointer(child_key));
                find_sid_properties(
                    child,
                    &child_pointer,
                    Some(child_key),
                    ty,
                    root_slots,
                    found,
                );
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let item_pointer = format!("{pointer}/{index}");
                find_sid_properties(item, &item_pointer, None, None, root_slots, found);
            }
        }
        _ => {}
    }
}

impl SidProperty<'_> {
    /// A gradient fill's or stroke's colours: a gradient slot's, whatever its value.
    pub fn is_gradient(&self) -> bool {
        self.key == "g" && matches!(self.parent_ty, Some("gf" | "gs"))
    }

    /// The numbers it shows first (a number, or an array of numbers), all finite.
    pub fn numbers(&self) -> Option<Vec<f64>> {
        if self.is_gradient() {
            return None;
        }
        let numbers: Option<Vec<f64>> = match property_initial_value(self.shown) {
            Some(Value::Number(number)) => number.as_f64().map(|n| vec![n]),
            Some(Value::Array(items)) => items.iter().map(Value::as_f64).collect(),
            _ => None,
        };
        numbers.filter(|numbers| numbers.iter().all(|n| n.is_finite()))
    }

    /// What the property is, for the report.
    pub fn name(&self) -> String {
        let name = match (self.key, self.parent_ty) {
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
}

/// Adds `property` (a slot's value, at `pointer`) to the slot `id` in `found`, making the slot
/// with `new` when it is the first; a slot whose `takes` refuses the property is left as it
/// was (one dimension or stop count per slot: a property of another is left to its value).
fn bind_property<S: TableRow>(
    found: &mut BTreeMap<String, S>,
    id: &str,
    pointer: String,
    new: impl FnOnce() -> S,
    takes: impl FnOnce(&S) -> bool,
) {
    let slot = found.entry(id.to_owned()).or_insert_with(new);
    if takes(slot) {
        slot.bind(pointer);
    }
}

/// Replaces every property `bindings` points to in `json` with `property`.
fn replace_bound(json: &mut Value, bindings: &[String], property: &Value) {
    for pointer in bindings {
        if let Some(bound) = json.pointer_mut(pointer) {
            *bound = property.clone();
        }
    }
}

/// A key as a JSON pointer token (RFC 6901).
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `text` cut to `max_chars` characters (at a character boundary), and whether it was cut.
pub(crate) fn cut(text: &str, max_chars: usize) -> (String, bool) {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => (text[..end].to_owned(), true),
        None => (text.to_owned(), false),
    }
}

/// The property a root `slots` entry provides for `sid`.
pub(crate) fn slot_property<'a>(root_slots: Option<&'a Value>, sid: &str) -> Option<&'a Value> {
    root_slots?.get(sid)?.get("p")
}

#[cfg(test)]
mod tests {
    use super::text::MAX_FONT_FAMILY_CHARS;
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_names_each_kind_once_in_its_order() {
        let lists: Vec<&str> = SlotKind::ALL.iter().map(|kind| kind.list()).collect();
        assert_eq!(
            lists,
            [
                "colors",
                "texts",
                "images",
                "scalars",
                "vectors",
                "gradients"
            ]
        );
        let wire: Vec<&str> = SlotKind::ALL.iter().map(|k| k.wire_name()).collect();
        assert_eq!(
            wire,
            ["color", "text", "image", "scalar", "vector", "gradient"]
        );
        assert_eq!(SlotKind::Color.said(), "colour");
    }

    #[test]
    fn slot_lists_keep_their_record_names_and_older_records_read_as_none() {
        let slots: Slots = serde_json::from_value(json!({"colors": [], "texts": []})).unwrap();
        assert_eq!(slots, Slots::default());
        let written = serde_json::to_value(Slots::default()).unwrap();
        let keys: Vec<&String> = written.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "colors",
                "texts",
                "images",
                "scalars",
                "vectors",
                "gradients"
            ]
        );
    }

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

    #[test]
    fn sid_properties_are_slots_of_their_values_kind_and_colours_and_texts_of_their_own() {
        let template = json!({
            "slots": {"wide": {"p": {"a": 0, "k": [1, 2, 3]}}},
            "layers": [{"ty": 4, "ks": {
                "o": {"a": 0, "k": 80, "sid": "fade"},
                "p": {"a": 0, "k": [0, 0], "sid": "wide"},
                "s": {"a": 0, "k": [100, 100], "sid": "wide"}
            }, "shapes": [
                {"ty": "fl", "nm": "Fill", "c": {"a": 0, "k": [1, 0, 0], "sid": "paint"},
                 "o": {"a": 0, "k": 100, "sid": "fade"}},
                {"ty": "gf", "g": {"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1]}, "sid": "sky"}},
                {"ty": "gf", "g": {"p": 0, "k": {"a": 0, "k": []}, "sid": "broken"}}
            ]}]
        });
        let found = discover(&template);
        let fade = found.scalar("fade").unwrap();
        assert_eq!(
            (
                fade.property.as_str(),
                fade.default_value,
                fade.binding_count
            ),
            ("opacity", 80.0, 2)
        );
        assert_eq!((fade.min, fade.max), (0.0, 100.0));
        // Both bound to the root slot's value: one dimension, three numbers.
        let wide = found.vector("wide").unwrap();
        assert_eq!(wide.default_value, [1.0, 2.0, 3.0]);
        assert_eq!(wide.binding_count, 2);
        assert_eq!(found.gradient("sky").unwrap().stop_count, 2);
        assert!(found.gradient("broken").is_none() && found.vector("broken").is_none());
        assert_eq!(
            found.color("paint").unwrap().bindings,
            ["/layers/0/shapes/0"]
        );
        assert!(found.scalar("paint").is_none());
    }
}
