//! Track mattes and masks drawn as lottie-web draws them. Debian's rlottie 0.1 differs from
//! lottie-web (the designers' player, DESIGN.md "Fidelity") in the ways below, each found by
//! rendering small templates through the library; each is lowered here, after text layers
//! became shapes and before rlottie loads the template. A template using none of them is
//! left untouched (its render stays byte-identical).
//!
//! - **Matted layers that are not precomps.** A shape, solid or image layer with a track
//!   matte (`tt`) draws nothing unless its drawing covers the whole canvas (0.1's matte path
//!   for plain layers clips to nothing); a matted *precomp* layer is drawn right. So such a
//!   layer is wrapped in a precomposition of its own: the wrapper takes the layer's
//!   transform, parent, index and matte; the layer inside keeps its content, masks and timing
//!   with an identity transform, so it draws exactly where it did. The wrapper has no size
//!   (`w`/`h`), so rlottie clips nothing.
//! - **`tp` (matte parent, Bodymovin 5.8+)** is ignored: rlottie always takes the layer
//!   directly above as the matte. The source `tp` names is moved directly above its matted
//!   layer (a matte source is never drawn, so its place in the stack does not matter), or
//!   copied there when it serves several layers or is drawn itself.
//! - **A matte source (`td`) with no matted layer below** is drawn by rlottie as an ordinary
//!   layer; lottie-web never draws a matte source. It becomes a null layer, whose transform
//!   still parents other layers.
//! - **Masks of mode `n`** (none: a path kept for text on a path or effects) hide the whole
//!   layer in rlottie; lottie-web skips them. They are removed.
//! - **Lighten (`l`) and darken (`d`) masks** hide the whole layer in rlottie; lottie-web
//!   draws every mode but `n`, `s` and `i` as an added path. They become `a`.
//!
//! - **Alpha track mattes rlottie would leave translucent.** rlottie composites a matte by
//!   multiplying alphas with rounding down, so black inside an alpha matte over white comes
//!   out (3, 3, 3); a shape or solid matte that masks draw exactly becomes masks of the
//!   matted layer ([`as_masks`], which says when).
//!
//! Not lowered, reported as warnings: mask expansion (`x`, rlottie ignores it), a matte
//! source that has a matte of its own (rlottie cannot chain mattes), a `tp` naming no layer.
//! Difference masks (`f`) stay as rlottie draws them (exclusive or, as After Effects does),
//! where lottie-web adds them.

mod as_masks;
mod geometry;

pub use as_masks::{MAX_MATTE_GROUP_DEPTH, MAX_SAMPLED_MASK_VERTICES};

use crate::lottie::lowering::expressions::sampling::{compositions, Sampling};
use crate::lottie::reading::model::{for_each_layer_list, layer_type, property_values};
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Bytes of matte sources copied for one template (a source named by `tp` from several
/// layers is copied once per extra layer). Real templates copy none: Bodymovin places each
/// source directly above its layer. The limit keeps a hostile template (one large source
/// named by thousands of layers) from multiplying its size: copies may at most double a
/// template of the largest accepted size.
pub(crate) const MAX_MATTE_SOURCE_COPY_BYTES: usize =
    crate::lottie::reading::template::MAX_TEMPLATE_BYTES;
/// Prefix of the ids of the precomposition assets wrapping matted layers.
const WRAPPER_ASSET_PREFIX: &str = "lottie-render-matted-";

/// Track matte types rlottie draws (`tt`): alpha, inverted alpha, luma, inverted luma.
const TRACK_MATTE_TYPES: std::ops::RangeInclusive<i64> = 1..=4;

/// What lowering a template's mattes and masks did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatteReport {
    /// Layers rewritten: matted layers wrapped, matte sources moved, copied or hidden, layers
    /// whose masks changed.
    pub lowered_layers: usize,
    pub warnings: Vec<String>,
}

const EXPANSION_WARNING: &str =
    "mask expansion is not drawn: masks keep their path as drawn, neither grown nor shrunk";
const CHAINED_MATTE_WARNING: &str =
    "a track matte source that has a track matte of its own is drawn without it";
const MISSING_MATTE_PARENT_WARNING: &str =
    "a track matte parent (tp) names no layer of its composition: the layer above is the matte";
const COPY_BUDGET_WARNING: &str =
    "track matte sources shared by many layers exceed the copy budget: the extra layers use the layer above as their matte";

/// Rewrites `json`'s mattes and masks into forms rlottie draws as lottie-web does (see the
/// module documentation), for an output at `fps` (the frames a moving matte's masks are
/// sampled at). Linear in the template, but for matte source copies, which are bounded by
/// [`MAX_MATTE_SOURCE_COPY_BYTES`], and sampled masks ([`MAX_SAMPLED_MASK_VERTICES`]).
pub fn lower_mattes_and_masks(json: &mut Value, fps: u32) -> MatteReport {
    lower_within_copy_budget(json, fps, MAX_MATTE_SOURCE_COPY_BYTES)
}

fn lower_within_copy_budget(json: &mut Value, fps: u32, copy_budget: usize) -> MatteReport {
    let grids = compositions(json, fps);
    let mut lowering = Lowering::new(json, copy_budget);
    if let Some(Value::Array(assets)) = json.get_mut("assets") {
        for asset in assets.iter_mut() {
            let id = asset.get("id").and_then(Value::as_str).map(str::to_owned);
            if let Some(Value::Array(layers)) = asset.get_mut("layers") {
                lowering.composition(layers, id.and_then(|id| grids.get(&Some(id)).copied()));
            }
        }
    }
    if let Some(Value::Array(layers)) = json.get_mut("layers") {
        lowering.composition(layers, grids.get(&None).copied());
    }
    if !lowering.new_assets.is_empty() {
        if let Some(root) = json.as_object_mut() {
            let assets = root
                .entry("assets")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !assets.is_array() {
                *assets = Value::Array(Vec::new());
            }
            if let Value::Array(assets) = assets {
                assets.append(&mut lowering.new_assets);
            }
        }
    }
    for_each_layer_list(json, |layers| {
        for layer in layers.iter_mut() {
            if lower_masks(layer, &mut lowering.warnings) {
                lowering.lowered_layers += 1;
            }
        }
    });
    MatteReport {
        lowered_layers: lowering.lowered_layers,
        warnings: lowering.warnings.into_iter().collect(),
    }
}

/// State of one template's lowering: asset ids taken, copy budget, what was done.
struct Lowering {
    asset_ids: HashSet<String>,
    next_wrapper: u64,
    new_assets: Vec<Value>,
    copy_budget: usize,
    sampled_vertices_left: usize,
    lowered_layers: usize,
    warnings: BTreeSet<String>,
}

/// How a matted layer whose `tp` names a source elsewhere gets it directly above.
enum Placement {
    Move(usize),
    Copy(Value),
}

impl Lowering {
    fn new(json: &Value, copy_budget: usize) -> Lowering {
        let asset_ids = json
            .get("assets")
            .and_then(Value::as_array)
            .map(|assets| {
                assets
                    .iter()
                    .filter_map(|asset| asset.get("id").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Lowering {
            asset_ids,
            next_wrapper: 0,
            new_assets: Vec::new(),
            copy_budget,
            sampled_vertices_left: MAX_SAMPLED_MASK_VERTICES,
            lowered_layers: 0,
            warnings: BTreeSet::new(),
        }
    }

    /// One composition's layers (front to back, as in the file), shown at `grid`'s times.
    fn composition(&mut self, layers: &mut Vec<Value>, grid: Option<Sampling>) {
        self.place_matte_parents(layers);
        // Once each source is directly above its layer; the sources of mattes made masks
        // become null layers next.
        self.lowered_layers +=
            as_masks::lower_composition(layers, grid, &mut self.sampled_vertices_left);
        self.hide_unused_matte_sources(layers);
        self.wrap_matted_layers(layers);
    }

    /// Puts the source each `tp` names directly above its matted layer.
    fn place_matte_parents(&mut self, layers: &mut Vec<Value>) {
        let misplaced = |index: usize, layer: &Value| {
            matte_parent(layer)
                .is_some_and(|parent| index == 0 || layer_index(&layers[index - 1]) != Some(parent))
        };
        if !layers
            .iter()
            .enumerate()
            .any(|(index, layer)| misplaced(index, layer))
        {
            return;
        }
        // Players resolve an index to one layer: the first that has it.
        let mut by_index: HashMap<i64, usize> = HashMap::new();
        for (position, layer) in layers.iter().enumerate() {
            if let Some(index) = layer_index(layer) {
                by_index.entry(index).or_insert(position);
            }
        }
        let source_of = |position: usize, layer: &Value| match matte_parent(layer) {
            Some(parent) => by_index.get(&parent).copied(),
            None => position.checked_sub(1),
        };
        let mut users: HashMap<usize, usize> = HashMap::new();
        for (position, layer) in layers.iter().enumerate() {
            if has_track_matte(layer) {
                if let Some(source) = source_of(position, layer) {
                    *users.entry(source).or_default() += 1;
                }
            }
        }
        let mut next_index = layers
            .iter()
            .filter_map(layer_index)
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        let mut source_bytes: HashMap<usize, usize> = HashMap::new();
        let mut placements: HashMap<usize, Placement> = HashMap::new();
        let mut moved: HashSet<usize> = HashSet::new();
        for position in 0..layers.len() {
            let layer = &layers[position];
            if !misplaced(position, layer) || !has_track_matte(layer) {
                continue;
            }
            let Some(source) = source_of(position, layer) else {
                self.warnings
                    .insert(MISSING_MATTE_PARENT_WARNING.to_owned());
                continue;
            };
            if source == position || has_track_matte(&layers[source]) {
                self.warnings.insert(CHAINED_MATTE_WARNING.to_owned());
                continue;
            }
            if users.get(&source) == Some(&1) && is_matte_source(&layers[source]) {
                moved.insert(source);
                placements.insert(position, Placement::Move(source));
                self.lowered_layers += 1;
                continue;
            }
            let bytes = *source_bytes.entry(source).or_insert_with(|| {
                serde_json::to_vec(&layers[source]).map_or(usize::MAX, |bytes| bytes.len())
            });
            if bytes > self.copy_budget || next_index == i64::MAX {
                self.warnings.insert(COPY_BUDGET_WARNING.to_owned());
                continue;
            }
            self.copy_budget -= bytes;
            let mut copy = layers[source].clone();
            if let Some(object) = copy.as_object_mut() {
                object.insert("ind".to_owned(), Value::from(next_index));
                object.insert("td".to_owned(), Value::from(1));
            }
            next_index = next_index.saturating_add(1);
            placements.insert(position, Placement::Copy(copy));
            self.lowered_layers += 1;
        }
        if placements.is_empty() {
            return;
        }
        let mut old: Vec<Option<Value>> = std::mem::take(layers).into_iter().map(Some).collect();
        for position in 0..old.len() {
            if moved.contains(&position) {
                continue;
            }
            match placements.remove(&position) {
                Some(Placement::Copy(copy)) => layers.push(copy),
                Some(Placement::Move(source)) => layers.extend(old[source].take()),
                None => {}
            }
            layers.extend(old[position].take());
        }
    }

    /// Matte sources with no matted layer directly below become null layers.
    fn hide_unused_matte_sources(&mut self, layers: &mut [Value]) {
        for position in 0..layers.len() {
            let used = layers.get(position + 1).is_some_and(has_track_matte);
            if used || !is_matte_source(&layers[position]) {
                continue;
            }
            if let Some(object) = layers[position].as_object_mut() {
                object.insert("ty".to_owned(), Value::from(layer_type::NULL));
                object.remove("td");
                object.remove("shapes");
                self.lowered_layers += 1;
            }
        }
    }

    /// Matted shape, solid and image layers become matted precomps of themselves.
    fn wrap_matted_layers(&mut self, layers: &mut [Value]) {
        // The top layer has no layer above to be its matte: rlottie and lottie-web skip it.
        for layer in layers.iter_mut().skip(1) {
            let drawn_plain = matches!(
                layer.get("ty").and_then(Value::as_i64),
                Some(layer_type::SOLID | layer_type::IMAGE | layer_type::SHAPE)
            );
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            if !has_track_matte(layer) || !drawn_plain || hidden {
                continue;
            }
            let Value::Object(mut inner) = std::mem::take(layer) else {
                continue;
            };
            let id = self.wrapper_asset_id();
            let mut wrapper = Map::new();
            for key in ["ddd", "ind", "nm", "ip", "op"] {
                if let Some(value) = inner.get(key) {
                    wrapper.insert(key.to_owned(), value.clone());
                }
            }
            for key in ["ks", "parent", "ao", "tt", "tp", "td"] {
                if let Some(value) = inner.remove(key) {
                    wrapper.insert(key.to_owned(), value);
                }
            }
            wrapper.insert("ty".to_owned(), Value::from(layer_type::PRECOMP));
            wrapper.insert("refId".to_owned(), Value::from(id.clone()));
            wrapper.insert("st".to_owned(), Value::from(0));
            wrapper.insert("sr".to_owned(), Value::from(1));
            inner.insert("ks".to_owned(), identity_transform());
            self.new_assets
                .push(json!({ "id": id, "layers": [Value::Object(inner)] }));
            *layer = Value::Object(wrapper);
            self.lowered_layers += 1;
        }
    }

    /// An asset id no asset of the template has.
    fn wrapper_asset_id(&mut self) -> String {
        loop {
            let id = format!("{WRAPPER_ASSET_PREFIX}{}", self.next_wrapper);
            self.next_wrapper += 1;
            if self.asset_ids.insert(id.clone()) {
                return id;
            }
        }
    }
}

/// Removes `n` masks, draws `l`/`d` masks as `a`, warns about expansion. True when the
/// layer changed.
fn lower_masks(layer: &mut Value, warnings: &mut BTreeSet<String>) -> bool {
    let Some(object) = layer.as_object_mut() else {
        return false;
    };
    let Some(Value::Array(masks)) = object.get_mut("masksProperties") else {
        return false;
    };
    let mut changed = false;
    for mask in masks.iter_mut() {
        if mask.get("x").is_some_and(|expansion| {
            property_values(expansion).into_iter().any(|value| {
                let number = match value {
                    Value::Array(items) => items.first().and_then(Value::as_f64),
                    other => other.as_f64(),
                };
                number.is_some_and(|number| number != 0.0)
            })
        }) {
            warnings.insert(EXPANSION_WARNING.to_owned());
        }
        if matches!(mask_mode(mask), Some("l" | "d")) {
            if let Some(mask) = mask.as_object_mut() {
                mask.insert("mode".to_owned(), Value::from("a"));
                changed = true;
            }
        }
    }
    let before = masks.len();
    masks.retain(|mask| mask_mode(mask) != Some("n"));
    if masks.len() == before {
        return changed;
    }
    if masks.is_empty() {
        object.remove("masksProperties");
        object.insert("hasMask".to_owned(), Value::from(false));
    }
    true
}

fn mask_mode(mask: &Value) -> Option<&str> {
    mask.get("mode").and_then(Value::as_str)
}

fn layer_index(layer: &Value) -> Option<i64> {
    layer.get("ind").and_then(Value::as_i64)
}

fn has_track_matte(layer: &Value) -> bool {
    layer
        .get("tt")
        .and_then(Value::as_i64)
        .is_some_and(|matte| TRACK_MATTE_TYPES.contains(&matte))
}

/// The `ind` of the layer a matted layer names as its matte (`tp`), if it names one.
fn matte_parent(layer: &Value) -> Option<i64> {
    if !has_track_matte(layer) {
        return None;
    }
    layer.get("tp").and_then(Value::as_i64)
}

fn is_matte_source(layer: &Value) -> bool {
    match layer.get("td") {
        Some(Value::Bool(flag)) => *flag,
        Some(value) => value.as_f64().is_some_and(|flag| flag != 0.0),
        None => false,
    }
}

fn identity_transform() -> Value {
    json!({
        "o": {"a": 0, "k": 100},
        "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [0, 0, 0]},
        "a": {"a": 0, "k": [0, 0, 0]},
        "s": {"a": 0, "k": [100, 100, 100]}
    })
}

#[cfg(test)]
mod tests;
