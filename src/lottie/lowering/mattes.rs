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
//! Not lowered, reported as warnings: mask expansion (`x`, rlottie ignores it), a matte
//! source that has a matte of its own (rlottie cannot chain mattes), a `tp` naming no layer.
//! Difference masks (`f`) stay as rlottie draws them (exclusive or, as After Effects does),
//! where lottie-web adds them.

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
/// module documentation). Linear in the template, but for matte source copies, which are
/// bounded by [`MAX_MATTE_SOURCE_COPY_BYTES`].
pub fn lower_mattes_and_masks(json: &mut Value) -> MatteReport {
    lower_within_copy_budget(json, MAX_MATTE_SOURCE_COPY_BYTES)
}

fn lower_within_copy_budget(json: &mut Value, copy_budget: usize) -> MatteReport {
    let mut lowering = Lowering::new(json, copy_budget);
    for_each_layer_list(json, |layers| lowering.composition(layers));
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
            lowered_layers: 0,
            warnings: BTreeSet::new(),
        }
    }

    /// One composition's layers (front to back, as in the file).
    fn composition(&mut self, layers: &mut Vec<Value>) {
        self.place_matte_parents(layers);
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
mod tests {
    use super::*;

    fn layer(ind: i64, ty: i64) -> Value {
        json!({"ind": ind, "ty": ty, "ks": {"p": {"a": 0, "k": [ind, 0, 0]}}, "ip": 0, "op": 10, "st": 0,
               "shapes": [{"ty": "gr", "it": []}]})
    }

    fn with(mut layer: Value, key: &str, value: Value) -> Value {
        layer[key] = value;
        layer
    }

    fn animation(layers: Vec<Value>) -> Value {
        json!({"w": 10, "h": 10, "fr": 30, "ip": 0, "op": 10, "layers": layers})
    }

    fn indices(layers: &Value) -> Vec<i64> {
        layers
            .as_array()
            .unwrap()
            .iter()
            .map(|layer| layer["ind"].as_i64().unwrap())
            .collect()
    }

    #[test]
    fn a_template_with_nothing_to_lower_is_left_as_it_is() {
        // Adjacent matte on a precomp layer, masks rlottie draws right, no orphan source.
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(with(layer(2, 0), "tt", json!(1)), "refId", json!("a")),
            with(
                layer(3, 4),
                "masksProperties",
                json!([{"mode": "a", "x": {"a": 0, "k": 0}}, {"mode": "s"}, {"mode": "f"}]),
            ),
        ]);
        json["assets"] = json!([{"id": "a", "layers": [layer(1, 4)]}]);
        let before = json.clone();
        let report = lower_mattes_and_masks(&mut json);
        assert_eq!(report, MatteReport::default());
        assert_eq!(json.to_string(), before.to_string());
    }

    #[test]
    fn a_matted_shape_layer_becomes_a_matted_precomp_of_itself() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(with(layer(2, 4), "tt", json!(2)), "parent", json!(1)),
        ]);
        let report = lower_mattes_and_masks(&mut json);
        assert_eq!(report.lowered_layers, 1);
        let wrapper = &json["layers"][1];
        assert_eq!(wrapper["ty"], json!(0));
        assert_eq!(wrapper["ind"], json!(2));
        assert_eq!(wrapper["tt"], json!(2));
        assert_eq!(wrapper["parent"], json!(1));
        assert_eq!(
            wrapper["ks"]["p"]["k"],
            json!([2, 0, 0]),
            "the transform moves out"
        );
        assert_eq!(
            (wrapper["st"].clone(), wrapper["sr"].clone()),
            (json!(0), json!(1))
        );
        assert!(
            wrapper.get("w").is_none(),
            "an unsized precomp clips nothing"
        );
        let asset = &json["assets"][0];
        assert_eq!(asset["id"], wrapper["refId"]);
        let inner = &asset["layers"][0];
        assert_eq!(inner["ty"], json!(4));
        assert_eq!(inner["shapes"], layer(2, 4)["shapes"]);
        assert_eq!(inner["ks"], identity_transform());
        assert!(inner.get("tt").is_none() && inner.get("parent").is_none());
    }

    #[test]
    fn wrapper_asset_ids_do_not_collide_with_the_templates_own() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(layer(2, 4), "tt", json!(1)),
        ]);
        json["assets"] = json!([{"id": format!("{WRAPPER_ASSET_PREFIX}0"), "layers": []}]);
        lower_mattes_and_masks(&mut json);
        assert_eq!(json["assets"].as_array().unwrap().len(), 2);
        assert_eq!(
            json["layers"][1]["refId"],
            json!(format!("{WRAPPER_ASSET_PREFIX}1"))
        );
    }

    #[test]
    fn a_matte_parent_elsewhere_is_moved_directly_above_its_layer() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            layer(3, 4),
            with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
        ]);
        lower_mattes_and_masks(&mut json);
        assert_eq!(indices(&json["layers"]), vec![3, 1, 2]);
        assert_eq!(json["layers"][1]["td"], json!(1));
    }

    #[test]
    fn a_matte_parent_shared_by_two_layers_is_copied_for_the_second() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
            layer(3, 4),
            with(with(layer(4, 0), "tt", json!(1)), "tp", json!(1)),
        ]);
        let report = lower_mattes_and_masks(&mut json);
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        // The copy takes a fresh index above every other; the original stays in place.
        assert_eq!(indices(&json["layers"]), vec![1, 2, 3, 5, 4]);
        assert_eq!(json["layers"][3]["td"], json!(1));
        assert_eq!(json["layers"][3]["ks"], json["layers"][0]["ks"]);
    }

    #[test]
    fn copies_beyond_the_budget_are_reported_and_not_made() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(with(layer(2, 0), "tt", json!(1)), "tp", json!(1)),
            layer(3, 4),
            with(with(layer(4, 0), "tt", json!(1)), "tp", json!(1)),
        ]);
        let report = lower_within_copy_budget(&mut json, 10);
        assert_eq!(report.warnings, vec![COPY_BUDGET_WARNING.to_owned()]);
        assert_eq!(indices(&json["layers"]), vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_matte_parent_naming_no_layer_is_reported() {
        let mut json = animation(vec![
            with(layer(1, 4), "td", json!(1)),
            with(with(layer(2, 0), "tt", json!(1)), "tp", json!(99)),
        ]);
        let report = lower_mattes_and_masks(&mut json);
        assert_eq!(
            report.warnings,
            vec![MISSING_MATTE_PARENT_WARNING.to_owned()]
        );
        assert_eq!(indices(&json["layers"]), vec![1, 2]);
    }

    #[test]
    fn a_matte_source_with_nothing_matted_below_becomes_a_null_layer() {
        let mut json = animation(vec![
            layer(3, 4),
            with(layer(1, 4), "td", json!(1)),
            layer(2, 4),
        ]);
        lower_mattes_and_masks(&mut json);
        let source = &json["layers"][1];
        assert_eq!(source["ty"], json!(layer_type::NULL));
        assert!(source.get("td").is_none() && source.get("shapes").is_none());
        assert_eq!(source["ks"], layer(1, 4)["ks"], "it still parents");
        assert_eq!(json["layers"][0]["ty"], json!(4));
    }

    #[test]
    fn masks_lose_mode_none_and_draw_lighten_and_darken_as_add() {
        let mut json = animation(vec![with(
            with(layer(1, 4), "hasMask", json!(true)),
            "masksProperties",
            json!([{"mode": "n"}, {"mode": "l"}, {"mode": "d"}, {"mode": "s"}]),
        )]);
        lower_mattes_and_masks(&mut json);
        let modes: Vec<&str> = json["layers"][0]["masksProperties"]
            .as_array()
            .unwrap()
            .iter()
            .map(|mask| mask["mode"].as_str().unwrap())
            .collect();
        assert_eq!(modes, vec!["a", "a", "s"]);

        let mut only_none = animation(vec![with(
            with(layer(1, 4), "hasMask", json!(true)),
            "masksProperties",
            json!([{"mode": "n"}]),
        )]);
        lower_mattes_and_masks(&mut only_none);
        assert!(only_none["layers"][0].get("masksProperties").is_none());
        assert_eq!(only_none["layers"][0]["hasMask"], json!(false));
    }

    #[test]
    fn animated_mask_expansion_is_reported() {
        let mut json = animation(vec![with(
            layer(1, 4),
            "masksProperties",
            json!([{"mode": "a", "x": {"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 5, "s": [4]}]}}]),
        )]);
        let report = lower_mattes_and_masks(&mut json);
        assert_eq!(report.warnings, vec![EXPANSION_WARNING.to_owned()]);
        assert_eq!(report.lowered_layers, 0);
    }
}
