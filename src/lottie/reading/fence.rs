//! The fence in front of rlottie: semantic limits on a parsed template. Debian's rlottie
//! trusts its input (see shared/corpus/MANIFEST.md): a huge or negative canvas crashes it,
//! a repeater with 1e9 copies eats memory without bound, curve handles of ±3e10 take over a
//! minute per frame. Everything recognisable is refused here with the JSON path at fault;
//! what cannot be recognised is left to the worker process limits.
//!
//! Here the canvas, assets, precomposition graph, layers and parenting; the shape items'
//! limits (repeaters, polystars, paths, gradients) are checked in `shapes`.

mod shapes;

use super::error::TemplateError;
use super::model::{layer_type, Animation, Layer};
use serde_json::Value;
use shapes::{check_path_property, check_shapes};
use std::collections::{HashMap, HashSet};

/// Highest frame rate accepted: above every display and every real template (max 120).
pub const MAX_FRAME_RATE: f64 = 240.0;
/// Canvas side limit, pixels; rlottie allocates the canvas from these.
pub const MAX_CANVAS_SIDE: i64 = 8192;
/// Longest template timeline, seconds. Motion-graphics templates run seconds to a minute;
/// ten minutes keeps frame counts (and thus render budgets) sane.
pub const MAX_DURATION_SECONDS: f64 = 600.0;
/// Layers in the whole document, precomps included. The heaviest real file we know has 332.
pub const MAX_LAYERS_TOTAL: usize = 5000;
/// Precomposition nesting depth. Real files nest a handful of levels; rlottie recurses per
/// level on every frame.
pub const MAX_PRECOMP_DEPTH: usize = 32;
/// Copies made by one repeater. Real repeaters make tens; rlottie allocates every copy
/// eagerly while loading.
pub const MAX_REPEATER_COPIES: f64 = 1000.0;
/// Copies made by repeaters nested inside each other (their product).
pub const MAX_NESTED_REPEATER_COPIES: f64 = 10_000.0;
/// Points of a star/polygon.
pub const MAX_POLYSTAR_POINTS: f64 = 1000.0;
/// Vertices of one path. rlottie silently drops paths of about 11,000 vertices or more.
pub const MAX_PATH_VERTICES: usize = 10_000;
/// Magnitude of a path vertex or tangent coordinate, pixels. rlottie's rasteriser time
/// grows linearly with tangent length (±1e9 takes seconds per frame); real artwork stays
/// within a few thousand pixels of its canvas.
pub const MAX_PATH_COORDINATE: f64 = 1_000_000.0;
/// Colour stops of one gradient.
pub const MAX_GRADIENT_STOPS: i64 = 256;
/// Properties with an expression. Real templates have a handful to a few hundred (a rigged
/// character); each is compiled and baked at every output frame in the worker.
pub const MAX_EXPRESSIONS: usize = 5_000;

/// Checks every limit; answers the warnings for features that will not render as a
/// designer expects.
pub(crate) fn check(model: &Animation, json: &Value) -> Result<Vec<String>, TemplateError> {
    check_root(model)?;
    let layer_total = total_layer_count(model);
    if layer_total > MAX_LAYERS_TOTAL {
        return Err(TemplateError::invalid(
            "$.layers",
            format!("{layer_total} layers in total (precomps included), more than the {MAX_LAYERS_TOTAL} limit"),
        ));
    }
    let assets = check_assets(model)?;
    check_precomp_graph(model, &assets)?;
    let mut warnings = Warnings::default();
    check_composition(&model.layers, "$.layers", &assets, &mut warnings)?;
    for (index, asset) in model.assets.iter().enumerate() {
        if let Some(layers) = &asset.layers {
            check_composition(
                layers,
                &format!("$.assets[{index}].layers"),
                &assets,
                &mut warnings,
            )?;
        }
    }
    // Expressions are evaluated in the worker (`crate::lottie::lowering::expressions`), within its work, memory
    // and baked-value budgets; the ones it cannot evaluate are warned about in the report, by
    // path. Their number is bounded here so that finding and compiling them stays small too.
    let expressions = count_expressions(json);
    if expressions > MAX_EXPRESSIONS {
        return Err(TemplateError::invalid(
            "$",
            format!("{expressions} properties have an expression, more than the {MAX_EXPRESSIONS} limit"),
        ));
    }
    Ok(warnings.into_vec())
}

pub(crate) fn total_layer_count(model: &Animation) -> usize {
    model.layers.len()
        + model
            .assets
            .iter()
            .filter_map(|asset| asset.layers.as_ref().map(Vec::len))
            .sum::<usize>()
}

fn check_root(model: &Animation) -> Result<(), TemplateError> {
    if !(model.fr.is_finite() && model.fr > 0.0 && model.fr <= MAX_FRAME_RATE) {
        return Err(TemplateError::invalid(
            "$.fr",
            format!(
                "frame rate must be above 0 and at most {MAX_FRAME_RATE}, got {}",
                model.fr
            ),
        ));
    }
    for (name, value) in [("ip", model.ip), ("op", model.op)] {
        if !value.is_finite() {
            return Err(TemplateError::invalid(
                format!("$.{name}"),
                "must be a finite number",
            ));
        }
    }
    if model.op <= model.ip {
        return Err(TemplateError::invalid(
            "$.op",
            format!("out point {} must be after in point {}", model.op, model.ip),
        ));
    }
    let duration = (model.op - model.ip) / model.fr;
    if duration > MAX_DURATION_SECONDS {
        return Err(TemplateError::invalid(
            "$.op",
            format!(
                "timeline lasts {duration:.1} s, longer than the {MAX_DURATION_SECONDS} s limit"
            ),
        ));
    }
    for (name, value) in [("w", model.w), ("h", model.h)] {
        if !(1..=MAX_CANVAS_SIDE).contains(&value) {
            return Err(TemplateError::invalid(
                format!("$.{name}"),
                format!("canvas size must be 1..={MAX_CANVAS_SIDE} pixels, got {value}"),
            ));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum AssetKind {
    Precomp,
    Image,
}

fn check_assets(model: &Animation) -> Result<HashMap<&str, (usize, AssetKind)>, TemplateError> {
    let mut assets = HashMap::new();
    for (index, asset) in model.assets.iter().enumerate() {
        let kind = if asset.is_precomp() {
            AssetKind::Precomp
        } else {
            AssetKind::Image
        };
        if assets.insert(asset.id.as_str(), (index, kind)).is_some() {
            return Err(TemplateError::invalid(
                format!("$.assets[{index}].id"),
                format!("asset id '{}' is used twice", asset.id),
            ));
        }
    }
    Ok(assets)
}

/// Precomp references form a graph; it must be acyclic and shallow.
fn check_precomp_graph(
    model: &Animation,
    assets: &HashMap<&str, (usize, AssetKind)>,
) -> Result<(), TemplateError> {
    // Iterative depth-first search with an explicit stack, so hostile depth cannot overflow ours.
    struct Frame<'a> {
        layers: &'a [Layer],
        path: String,
        next: usize,
    }
    let mut stack = vec![Frame {
        layers: &model.layers,
        path: "$.layers".to_owned(),
        next: 0,
    }];
    let mut on_path: Vec<&str> = Vec::new();
    let mut finished: HashSet<&str> = HashSet::new();
    while let Some(frame) = stack.last_mut() {
        let Some(layer) = frame.layers.get(frame.next) else {
            stack.pop();
            if let Some(done) = on_path.pop() {
                finished.insert(done);
            }
            continue;
        };
        let layer_path = format!("{}[{}]", frame.path, frame.next);
        frame.next += 1;
        if layer.ty != layer_type::PRECOMP {
            continue;
        }
        let Some(ref_id) = layer.ref_id.as_deref() else {
            return Err(TemplateError::invalid(
                layer_path,
                "precomp layer has no refId",
            ));
        };
        let Some(&(index, kind)) = assets.get(ref_id) else {
            return Err(TemplateError::invalid(
                format!("{layer_path}.refId"),
                format!("names asset '{ref_id}', which does not exist"),
            ));
        };
        if kind != AssetKind::Precomp {
            return Err(TemplateError::invalid(
                format!("{layer_path}.refId"),
                format!(
                    "precomp layer names asset '{ref_id}', which is an image, not a precomposition"
                ),
            ));
        }
        if on_path.contains(&ref_id) {
            let mut cycle: Vec<&str> = on_path
                .iter()
                .skip_while(|id| **id != ref_id)
                .copied()
                .collect();
            cycle.push(ref_id);
            return Err(TemplateError::invalid(
                format!("{layer_path}.refId"),
                format!("precomp reference cycle: {}", cycle.join(" → ")),
            ));
        }
        if finished.contains(ref_id) {
            continue;
        }
        if on_path.len() + 1 > MAX_PRECOMP_DEPTH {
            return Err(TemplateError::invalid(
                format!("{layer_path}.refId"),
                format!("precomps nest deeper than {MAX_PRECOMP_DEPTH} levels"),
            ));
        }
        on_path.push(ref_id);
        let layers = model.assets[index].layers.as_deref().unwrap_or_default();
        stack.push(Frame {
            layers,
            path: format!("$.assets[{index}].layers"),
            next: 0,
        });
    }
    Ok(())
}

/// Distinct warnings in the order found (a set beside the list: a template of thousands of
/// layer types must not make this quadratic).
#[derive(Default)]
struct Warnings(Vec<String>, HashSet<String>);

impl Warnings {
    fn add(&mut self, warning: String) {
        if self.1.insert(warning.clone()) {
            self.0.push(warning);
        }
    }
    fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// One composition (the root or a precomp): image references, parenting, shapes, masks.
fn check_composition(
    layers: &[Layer],
    path: &str,
    assets: &HashMap<&str, (usize, AssetKind)>,
    warnings: &mut Warnings,
) -> Result<(), TemplateError> {
    let mut parents = ParentChains::new(layers);
    for (index, layer) in layers.iter().enumerate() {
        let layer_path = format!("{path}[{index}]");
        if layer.ty == layer_type::IMAGE {
            let ref_id = layer.ref_id.as_deref().unwrap_or_default();
            match assets.get(ref_id) {
                None => {
                    return Err(TemplateError::invalid(
                        format!("{layer_path}.refId"),
                        format!("names asset '{ref_id}', which does not exist"),
                    ))
                }
                Some((_, AssetKind::Precomp)) => {
                    return Err(TemplateError::invalid(
                        format!("{layer_path}.refId"),
                        format!("image layer names asset '{ref_id}', which is a precomposition, not an image"),
                    ))
                }
                Some((_, AssetKind::Image)) => {}
            }
        }
        if !(layer_type::PRECOMP..=layer_type::TEXT).contains(&layer.ty) {
            warnings.add(format!("layer type {} is not drawn", layer.ty));
        }
        parents.check(layer, &layer_path)?;
        for (mask_index, mask) in layer.masks_properties.iter().enumerate() {
            if let Some(points) = mask.get("pt") {
                check_path_property(
                    points,
                    &format!("{layer_path}.masksProperties[{mask_index}].pt"),
                )?;
            }
        }
        check_shapes(
            &layer.shapes,
            &format!("{layer_path}.shapes"),
            1.0,
            warnings,
        )?;
    }
    Ok(())
}

/// The parent links of one composition, checked for cycles in time linear in the layer
/// count: every layer index is walked at most once over all the layers' chains, because a
/// chain that reaches an index already known to end (no cycle behind it) stops there.
struct ParentChains {
    /// `ind` → its layer's `parent` (the last layer with an `ind` wins, as before).
    parents: HashMap<i64, Option<i64>>,
    /// Indices whose chain is known to end without a cycle.
    ends: HashSet<i64>,
}

impl ParentChains {
    fn new(layers: &[Layer]) -> ParentChains {
        let mut parents = HashMap::new();
        for layer in layers {
            if let Some(ind) = layer.ind {
                parents.insert(ind, layer.parent);
            }
        }
        ParentChains {
            parents,
            ends: HashSet::new(),
        }
    }

    /// Fails when `layer`'s chain of parents comes back on itself: the chain is reported from
    /// the layer to the first index met twice. With unique `ind`s (every real file) this is
    /// exactly the per-layer walk it replaces; a layer whose `ind` a later layer reuses is
    /// shadowed (players resolve `parent` to one layer per `ind`), so a chain through the
    /// reused `ind` is that other layer's, and comes back to this one only through a cycle
    /// of its own.
    fn check(&mut self, layer: &Layer, layer_path: &str) -> Result<(), TemplateError> {
        let Some(start) = layer.ind else {
            return Ok(());
        };
        // The layer's own parent link is the map's unless another layer shares its `ind`;
        // only a link the map holds may be cached as ending.
        let start_is_mapped = self.parents.get(&start) == Some(&layer.parent);
        let mut chain = vec![start];
        let mut on_chain: HashSet<i64> = HashSet::from([start]);
        let mut current = layer.parent;
        while let Some(parent) = current {
            if on_chain.contains(&parent) {
                chain.push(parent);
                return Err(parent_cycle(layer_path, &chain));
            }
            if self.ends.contains(&parent) {
                break;
            }
            chain.push(parent);
            on_chain.insert(parent);
            // A parent that names no layer is ignored by players; only cycles are fatal.
            current = self.parents.get(&parent).copied().flatten();
        }
        let cached = if start_is_mapped {
            &chain[..]
        } else {
            &chain[1..]
        };
        self.ends.extend(cached.iter().copied());
        Ok(())
    }
}

/// The refusal of a parent chain that comes back on itself, `chain` from the layer to the
/// first index met twice.
fn parent_cycle(layer_path: &str, chain: &[i64]) -> TemplateError {
    let chain: Vec<String> = chain.iter().map(i64::to_string).collect();
    TemplateError::invalid(
        format!("{layer_path}.parent"),
        format!("parent cycle between layers {}", chain.join(" → ")),
    )
}

/// Properties carrying an expression (`"x": "…"`).
fn count_expressions(json: &Value) -> usize {
    let mut count = 0;
    let mut stack = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if map.get("x").is_some_and(Value::is_string) && map.contains_key("k") {
                    count += 1;
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::Reason;
    use serde_json::json;

    /// The per-layer walk the linear check replaced (cubic over a composition), kept to check
    /// that the linear one gives the same answers.
    fn check_parent_chain_before(
        layer: &Layer,
        layer_path: &str,
        parents: &HashMap<i64, Option<i64>>,
    ) -> Result<(), TemplateError> {
        let Some(start) = layer.ind else {
            return Ok(());
        };
        let mut seen = vec![start];
        let mut current = layer.parent;
        while let Some(parent) = current {
            if seen.contains(&parent) {
                seen.push(parent);
                return Err(parent_cycle(layer_path, &seen));
            }
            seen.push(parent);
            current = parents.get(&parent).copied().flatten();
        }
        Ok(())
    }

    fn layers(links: &[(Option<i64>, Option<i64>)]) -> Vec<Layer> {
        links
            .iter()
            .map(|(ind, parent)| {
                serde_json::from_value(json!({"ty": 3, "ind": ind, "parent": parent})).unwrap()
            })
            .collect()
    }

    /// The first error of a composition, as `check_composition` reports it (layer order).
    fn first_error_now(layers: &[Layer]) -> Option<String> {
        let mut chains = ParentChains::new(layers);
        layers.iter().enumerate().find_map(|(index, layer)| {
            chains
                .check(layer, &format!("$.layers[{index}]"))
                .err()
                .map(|error| error.to_string())
        })
    }

    fn first_error_before(layers: &[Layer]) -> Option<String> {
        let parents: HashMap<i64, Option<i64>> = layers
            .iter()
            .filter_map(|layer| Some((layer.ind?, layer.parent)))
            .collect();
        layers.iter().enumerate().find_map(|(index, layer)| {
            check_parent_chain_before(layer, &format!("$.layers[{index}]"), &parents)
                .err()
                .map(|error| error.to_string())
        })
    }

    #[test]
    fn the_linear_parent_check_finds_the_same_cycles_as_the_per_layer_walk() {
        let mut cases: Vec<Vec<(Option<i64>, Option<i64>)>> = vec![
            vec![(Some(1), Some(2)), (Some(2), Some(1))],
            vec![(Some(1), Some(1))],
            vec![(Some(1), None), (Some(2), Some(1)), (Some(3), Some(2))],
            vec![(Some(1), Some(9)), (Some(2), Some(1))],
            vec![(None, Some(1)), (Some(1), None)],
            vec![(Some(5), Some(4)), (Some(4), Some(3)), (Some(3), Some(4))],
        ];
        // Every parent assignment of four layers with unique indices (5^4 graphs), and a
        // pseudo-random sample of larger ones.
        for code in 0..625u32 {
            let links = (0..4)
                .map(|layer| {
                    let choice = (code / 5u32.pow(layer)) % 5;
                    (
                        Some(i64::from(layer) + 1),
                        (choice > 0).then_some(i64::from(choice)),
                    )
                })
                .collect();
            cases.push(links);
        }
        let mut state = 0x2545_f491_u64;
        for _ in 0..300 {
            let count = 2 + (state % 40) as i64;
            let links = (1..=count)
                .map(|ind| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let parent = (state >> 33) as i64 % (count + 3) - 1;
                    (Some(ind), (parent > 0).then_some(parent))
                })
                .collect();
            cases.push(links);
        }
        for links in cases {
            let layers = layers(&links);
            assert_eq!(
                first_error_now(&layers),
                first_error_before(&layers),
                "{links:?}"
            );
        }
    }

    /// Timings of each template, the best kept (the least disturbed by other work).
    const FENCE_TIMINGS: usize = 3;
    /// How much longer than unlinked layers a chain of parents may take to fence.
    const CHAIN_SLOWDOWN_FACTOR: u32 = 4;

    #[test]
    fn a_parent_chain_of_five_thousand_layers_fences_quickly() {
        let mut layers: Vec<Value> = (1..=MAX_LAYERS_TOTAL as i64)
            .map(|ind| json!({"ty": 3, "ind": ind, "parent": ind + 1, "ks": {}, "ip": 0, "op": 30, "st": 0}))
            .collect();
        let template = |layers: &Vec<Value>| {
            serde_json::to_vec(&json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 100,
                "h": 100, "layers": layers}))
            .unwrap()
        };
        // Linear in the chain, compared with as many layers and no parent links (nearly the
        // same bytes to parse), each the best of a few runs on this machine now: following
        // the chain up from every layer would be some 2,500 times the links, far past the
        // factor.
        let best_of = |bytes: &[u8]| {
            (0..FENCE_TIMINGS)
                .map(|_| {
                    let started = std::time::Instant::now();
                    crate::lottie::Template::parse(bytes).unwrap();
                    started.elapsed()
                })
                .min()
                .unwrap()
        };
        let unlinked: Vec<Value> = layers
            .iter()
            .map(|layer| {
                let mut layer = layer.clone();
                layer.as_object_mut().unwrap().remove("parent");
                layer
            })
            .collect();
        let chained = best_of(&template(&layers));
        let alone = best_of(&template(&unlinked));
        println!("a chain of {MAX_LAYERS_TOTAL} parents fenced in {chained:?}, unlinked {alone:?}");
        assert!(
            chained < alone * CHAIN_SLOWDOWN_FACTOR,
            "chained {chained:?}, unlinked {alone:?}"
        );
        // Closing the chain into one cycle is found, from the first layer.
        layers[MAX_LAYERS_TOTAL - 1]["parent"] = json!(1);
        let error = crate::lottie::Template::parse(&template(&layers))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("$.layers[0].parent: parent cycle between layers 1 → 2 → 3"),
            "{}",
            &error[..200.min(error.len())]
        );
        assert!(error.ends_with("4999 → 5000 → 1"));
    }

    /// A document of `layers` (30 fps, one second, 100×100) with `root` fields over it.
    fn document(layers: Vec<Value>, root: Value) -> Vec<u8> {
        let mut document = json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
            "layers": layers});
        for (key, value) in root.as_object().into_iter().flatten() {
            document[key] = value.clone();
        }
        serde_json::to_vec(&document).unwrap()
    }

    fn null_layer(ind: usize) -> Value {
        json!({"ty": 3, "ind": ind, "ks": {}, "ip": 0, "op": 30, "st": 0})
    }

    fn shape_layer(shapes: Value) -> Value {
        json!({"ty": 4, "ind": 1, "ks": {}, "ip": 0, "op": 30, "st": 0, "shapes": shapes})
    }

    fn rectangle() -> Value {
        json!({"ty": "rc", "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [4, 4]},
            "r": {"a": 0, "k": 0}})
    }

    fn repeater(copies: f64) -> Value {
        json!({"ty": "rp", "c": {"a": 0, "k": copies}, "o": {"a": 0, "k": 0}, "m": 1,
            "tr": {"ty": "tr", "p": {"a": 0, "k": [5, 0]}}})
    }

    fn group(items: Value) -> Value {
        json!({"ty": "gr", "it": items})
    }

    /// The path of the refusal of `bytes`, checking that it is the fence's classified one
    /// (TEMPLATE_INVALID, not retryable); `None` when the template is accepted.
    fn refusal(bytes: &[u8]) -> Option<String> {
        use crate::error::{Classified, ErrorClass};
        let error = crate::lottie::Template::parse(bytes).err()?;
        assert_eq!(error.reason(), Reason::TemplateInvalid, "{error}");
        assert_eq!(error.class(), ErrorClass::Deterministic, "{error}");
        match error {
            TemplateError::Invalid { path, .. } => Some(path),
            other => panic!("not a fence refusal: {other}"),
        }
    }

    #[test]
    fn a_frame_rate_of_240_passes_the_fence_and_one_just_above_is_refused_at_fr() {
        // Eight seconds at each rate: the duration limit stays out of the way.
        let at = |fr: f64| document(vec![null_layer(1)], json!({"fr": fr, "op": fr * 8.0}));
        assert_eq!(refusal(&at(MAX_FRAME_RATE)), None);
        assert_eq!(
            refusal(&at(MAX_FRAME_RATE + 0.001)).as_deref(),
            Some("$.fr")
        );
        assert_eq!(refusal(&at(241.0)).as_deref(), Some("$.fr"));
    }

    #[test]
    fn five_thousand_layers_pass_the_fence_and_one_more_anywhere_is_refused() {
        let layers = |count: usize| (1..=count).map(null_layer).collect::<Vec<_>>();
        assert_eq!(
            refusal(&document(layers(MAX_LAYERS_TOTAL), json!({}))),
            None
        );
        assert_eq!(
            refusal(&document(layers(MAX_LAYERS_TOTAL + 1), json!({}))).as_deref(),
            Some("$.layers")
        );
        // Layers of precomps count too: 4,000 at the root and the rest in an asset.
        let with_precomp = |in_precomp: usize| {
            let mut root = layers(4000);
            root.push(
                json!({"ty": 0, "ind": 4001, "refId": "inner", "ks": {}, "ip": 0,
                "op": 30, "st": 0, "w": 100, "h": 100}),
            );
            document(
                root,
                json!({"assets": [{"id": "inner", "layers": layers(in_precomp)}]}),
            )
        };
        assert_eq!(refusal(&with_precomp(MAX_LAYERS_TOTAL - 4001)), None);
        assert_eq!(
            refusal(&with_precomp(MAX_LAYERS_TOTAL - 4000)).as_deref(),
            Some("$.layers")
        );
    }

    #[test]
    fn one_repeater_of_a_thousand_copies_passes_the_fence_and_one_more_is_refused() {
        let with = |copies: f64| {
            document(
                vec![shape_layer(json!([rectangle(), repeater(copies)]))],
                json!({}),
            )
        };
        assert_eq!(refusal(&with(MAX_REPEATER_COPIES)), None);
        assert_eq!(
            refusal(&with(MAX_REPEATER_COPIES + 1.0)).as_deref(),
            Some("$.layers[0].shapes[1].c")
        );
    }

    #[test]
    fn nested_repeaters_are_refused_by_the_product_of_their_copies_as_rlottie_nests_them() {
        // rlottie repeats what comes before a repeater: a group holding a repeater, followed
        // by a repeater, makes inner × outer copies (the corpus' repeater file has this shape).
        let nested = |inner: f64, outer: f64| {
            document(
                vec![shape_layer(json!([
                    group(json!([rectangle(), repeater(inner)])),
                    repeater(outer)
                ]))],
                json!({}),
            )
        };
        assert_eq!(refusal(&nested(100.0, 100.0)), None, "exactly the limit");
        assert_eq!(
            refusal(&nested(100.0, 101.0)).as_deref(),
            Some("$.layers[0].shapes[0].it[1].c"),
            "10,100 copies"
        );
        assert_eq!(
            refusal(&nested(1000.0, 1000.0)).as_deref(),
            Some("$.layers[0].shapes[0].it[1].c"),
            "a million copies, each repeater within its own limit"
        );
        // Two repeaters in one list: the second repeats the first.
        let in_sequence = |first: f64, second: f64| {
            document(
                vec![shape_layer(json!([
                    rectangle(),
                    repeater(first),
                    repeater(second)
                ]))],
                json!({}),
            )
        };
        assert_eq!(refusal(&in_sequence(100.0, 100.0)), None);
        assert_eq!(
            refusal(&in_sequence(100.0, 101.0)).as_deref(),
            Some("$.layers[0].shapes[1].c")
        );
        // A group after a repeater is not repeated by it: 1,000 and 1,000 side by side.
        let side_by_side = document(
            vec![shape_layer(json!([
                rectangle(),
                repeater(1000.0),
                group(json!([rectangle(), repeater(1000.0)]))
            ]))],
            json!({}),
        );
        assert_eq!(refusal(&side_by_side), None);
    }

    #[test]
    fn a_gradient_of_256_stops_passes_the_fence_and_more_stops_or_missing_data_are_refused() {
        let gradient = |stops: i64, numbers: usize| {
            let data: Vec<f64> = (0..numbers).map(|n| (n % 4) as f64 / 4.0).collect();
            document(
                vec![shape_layer(json!([
                    rectangle(),
                    {"ty": "gf", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
                     "s": {"a": 0, "k": [0, 0]}, "e": {"a": 0, "k": [10, 0]},
                     "g": {"p": stops, "k": {"a": 0, "k": data}}}
                ]))],
                json!({}),
            )
        };
        let max = MAX_GRADIENT_STOPS as usize;
        assert_eq!(refusal(&gradient(MAX_GRADIENT_STOPS, 4 * max)), None);
        assert_eq!(
            refusal(&gradient(MAX_GRADIENT_STOPS + 1, 4 * (max + 1))).as_deref(),
            Some("$.layers[0].shapes[1].g.p")
        );
        assert_eq!(
            refusal(&gradient(-1, 0)).as_deref(),
            Some("$.layers[0].shapes[1].g.p")
        );
        // Three stops need twelve numbers (offset, r, g, b each); opacity stops may follow.
        assert_eq!(refusal(&gradient(3, 12)), None);
        assert_eq!(refusal(&gradient(3, 12 + 4)), None);
        assert_eq!(
            refusal(&gradient(3, 11)).as_deref(),
            Some("$.layers[0].shapes[1].g.k")
        );
        // Keyframed data is checked in every keyframe.
        let keyframed = |second: usize| {
            let values = |count: usize| vec![0.5; count];
            document(
                vec![shape_layer(json!([
                    rectangle(),
                    {"ty": "gf", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
                     "s": {"a": 0, "k": [0, 0]}, "e": {"a": 0, "k": [10, 0]},
                     "g": {"p": 2, "k": {"a": 1, "k": [
                         {"t": 0, "s": values(8), "i": {"x": [1], "y": [1]},
                          "o": {"x": [0], "y": [0]}},
                         {"t": 20, "s": values(second)}
                     ]}}}
                ]))],
                json!({}),
            )
        };
        assert_eq!(refusal(&keyframed(8)), None);
        assert_eq!(
            refusal(&keyframed(7)).as_deref(),
            Some("$.layers[0].shapes[1].g.k")
        );
    }

    #[test]
    fn more_expressions_than_the_limit_are_refused_and_the_limit_itself_passes() {
        let template = |count: usize| {
            let sliders: Vec<Value> = (0..count)
                .map(|_| json!({"ty": 0, "v": {"a": 0, "k": 0, "x": "time"}}))
                .collect();
            serde_json::to_vec(&json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 100,
                "h": 100, "layers": [{"ty": 3, "ind": 1, "ks": {}, "ip": 0, "op": 30, "st": 0,
                    "ef": [{"ty": 5, "ef": sliders}]}]}))
            .unwrap()
        };
        assert!(crate::lottie::Template::parse(&template(MAX_EXPRESSIONS)).is_ok());
        let error = crate::lottie::Template::parse(&template(MAX_EXPRESSIONS + 1))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "$: {} properties have an expression, more than the {MAX_EXPRESSIONS} limit",
                MAX_EXPRESSIONS + 1
            )
        );
    }
}
