//! Alpha track mattes turned into masks of the matted layer, where a mask draws the same
//! picture. rlottie 0.1 composites a track matte by multiplying alphas with `x·a >> 8` three
//! or four times, so the inside of an alpha matte ends at alpha 251 (250 when the matted
//! precomposition has a matte of its own) and an opaque layer beneath shows through: black
//! over white comes out (3, 3, 3), (7, 7, 7) with two mattes. A mask is clipped by coverage
//! (its inside keeps the layer's own alpha, exactly), as lottie-web draws the matte.
//!
//! lottie-web multiplies the matted layer by the matte layer's alpha (an SVG `<mask>` of
//! `mask-type: alpha` on the matte layer as drawn, its opacity and transform included;
//! inverted, by one minus it, through a `feComponentTransfer` table `1 0`). That alpha is the
//! union of the matte's filled outlines exactly when every fill is opaque and nothing else
//! draws. So a matte becomes masks only when:
//!
//! - the matte (`tt` 1, alpha; or 2, inverted alpha) comes from the layer directly above, a
//!   visible shape or solid layer in 2D with opacity 100 throughout, no masks, matte, layer
//!   effects or blend mode of its own, in its composition for the whole time the matted
//!   layer is (`ip`/`op`), neither time-stretched;
//! - its shapes are rectangles, ellipses and paths in groups whose opacity is 100, filled by
//!   fills of opacity 100 throughout, each fill over one outline (several outlines under one
//!   fill combine by their winding, which masks do not), even-odd fills only over
//!   rectangles and ellipses; no strokes, gradients, trims, repeaters, merges or other
//!   modifiers; transforms without skew, 3D or position keyframes moving along a curve;
//! - the matted layer is a 2D layer without masks of its own (rlottie restarts a subtract or
//!   intersect mask from the whole layer when the masks before it leave nothing, so a matte
//!   appended to masks could show what they hid); an inverted matte has one outline (the
//!   same restart after a first outline covering everything).
//!
//! Each outline becomes a mask in the matted layer's space: the outline through its groups'
//! transforms, the matte layer's transform and its parents' (lottie-web's order), then the
//! inverse of the matted layer's transform and its parents'. Alpha mattes become add masks;
//! an inverted matte one subtract mask (rlottie 0.1 ignores a mask's `inv`; a first subtract
//! mask starts from the whole layer). Where every transform is static the mask is static, or
//! keyframed like the matte's path; otherwise it is sampled at every time the output shows
//! the composition (the expressions' sample grid), linear between, within
//! [`MAX_SAMPLED_MASK_VERTICES`]. Anything else stays a matte, drawn as before.

use super::geometry::{all_values_are, Affine, Contour, Transform};
use crate::lottie::lowering::expressions::sampling::Sampling;
use crate::lottie::lowering::text::animators::Property;
use crate::lottie::reading::model::layer_type;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Mask path vertices written for one template (a vertex per outline point, per keyframe
/// or sampled frame when the matte moves). A real template's moving mattes take a few thousand (a
/// rectangle over 10 s at 60 fps is 2 400); at about 70 bytes of JSON a vertex this bound
/// adds at most about the largest accepted template again. Mattes beyond it stay mattes.
pub const MAX_SAMPLED_MASK_VERTICES: usize = 100_000;

/// Track matte types turned into masks: alpha and inverted alpha.
const ALPHA: i64 = 1;
const INVERTED_ALPHA: i64 = 2;

/// Turns the mattes of one composition's `layers` into masks where they allow it (see the
/// module documentation); `grid` is when the output shows the composition. Answers how many
/// layers changed.
pub(super) fn lower_composition(
    layers: &mut [Value],
    grid: Option<Sampling>,
    vertices_left: &mut usize,
) -> usize {
    let mut lowered = 0;
    for position in 1..layers.len() {
        let Some((masks, mode)) = masks_for(layers, position, grid, vertices_left) else {
            continue;
        };
        let Some(layer) = layers[position].as_object_mut() else {
            continue;
        };
        let masks: Vec<Value> = masks
            .into_iter()
            .map(|path| {
                json!({"nm": "track matte", "mode": mode, "inv": false,
                       "o": {"a": 0, "k": 100}, "x": {"a": 0, "k": 0}, "pt": path})
            })
            .collect();
        layer.remove("tt");
        layer.remove("tp");
        layer.insert("hasMask".to_owned(), Value::from(true));
        layer.insert("masksProperties".to_owned(), Value::Array(masks));
        lowered += 1;
    }
    lowered
}

/// The mask paths (Lottie `pt` properties) and mode standing in for the matte of
/// `layers[position]`, or `None` when it stays a matte.
fn masks_for(
    layers: &[Value],
    position: usize,
    grid: Option<Sampling>,
    vertices_left: &mut usize,
) -> Option<(Vec<Value>, &'static str)> {
    let matted = &layers[position];
    let matte = &layers[position.checked_sub(1)?];
    let kind = matted.get("tt").and_then(Value::as_i64)?;
    if !(kind == ALPHA || kind == INVERTED_ALPHA) || !matte_layer_allows_masks(matte, matted) {
        return None;
    }
    if matted
        .get("tp")
        .is_some_and(|tp| tp.as_i64() != matte.get("ind").and_then(Value::as_i64))
        || flag(matted, "hd")
        || flag(matted, "ddd")
        || matted
            .get("masksProperties")
            .and_then(Value::as_array)
            .is_some_and(|masks| !masks.is_empty())
    {
        return None;
    }
    let by_index = indices(layers);
    let matte_chain = Chain::of(layers, position - 1, &by_index)?;
    let matted_chain = Chain::of(layers, position, &by_index)?;
    let outlines = matte_outlines(matte)?;
    if outlines.is_empty() || (kind == INVERTED_ALPHA && outlines.len() != 1) {
        return None;
    }
    let scene = Scene {
        matte_chain,
        matted_chain,
        visible: (number(matted, "ip")?, number(matted, "op")?),
    };
    let paths = scene.mask_paths(&outlines, grid, vertices_left)?;
    Some((paths, if kind == ALPHA { "a" } else { "s" }))
}

/// The matte layer's own conditions (the module documentation's first point).
fn matte_layer_allows_masks(matte: &Value, matted: &Value) -> bool {
    let drawn_type = matches!(
        matte.get("ty").and_then(Value::as_i64),
        Some(layer_type::SHAPE | layer_type::SOLID)
    );
    let covers = match (
        number(matte, "ip"),
        number(matte, "op"),
        number(matted, "ip"),
        number(matted, "op"),
    ) {
        (Some(matte_in), Some(matte_out), Some(matted_in), Some(matted_out)) => {
            matte_in <= matted_in && matte_out >= matted_out
        }
        _ => false,
    };
    let nonempty = |key: &str| {
        matte
            .get(key)
            .and_then(Value::as_array)
            .is_some_and(|items| !items.is_empty())
    };
    drawn_type
        && covers
        && flag(matte, "td")
        && !flag(matte, "hd")
        && !flag(matte, "ddd")
        && matte.get("tt").and_then(Value::as_i64).unwrap_or(0) == 0
        && matte.get("bm").and_then(Value::as_i64).unwrap_or(0) == 0
        && !nonempty("masksProperties")
        && !nonempty("ef")
        && matte
            .get("ks")
            .and_then(|ks| ks.get("o"))
            .is_none_or(|opacity| all_values_are(opacity, 100.0))
}

/// A layer's transform and its parents'. Their keyframes are all in the composition's frames
/// (lottie-web subtracts a layer's start `st` from both the time and the keyframe times), so
/// a start time changes nothing here.
struct Chain(Vec<Transform>);

impl Chain {
    /// `None` when a transform is not read here, a layer of the chain is 3D or
    /// time-stretched, or the parents loop.
    fn of(layers: &[Value], position: usize, by_index: &HashMap<i64, usize>) -> Option<Chain> {
        let mut links = Vec::new();
        let mut current = Some(position);
        while let Some(at) = current {
            let layer = &layers[at];
            let stretched = number(layer, "sr").is_some_and(|stretch| stretch != 1.0);
            if links.len() >= layers.len() || flag(layer, "ddd") || stretched {
                return None;
            }
            let transform = match layer.get("ks") {
                Some(ks) => Transform::parse(ks)?,
                None => Transform::parse(&json!({}))?,
            };
            links.push(transform);
            current = match layer.get("parent").and_then(Value::as_i64) {
                Some(parent) => Some(*by_index.get(&parent)?),
                None => None,
            };
        }
        Some(Chain(links))
    }

    fn is_animated(&self) -> bool {
        self.0.iter().any(Transform::is_animated)
    }

    /// Layer space to composition space at `time` (the composition's frames).
    fn at(&self, time: f64) -> Affine {
        self.0.iter().fold(Affine::IDENTITY, |map, transform| {
            map.then(transform.at(time))
        })
    }
}

/// One filled outline of the matte: its groups' transforms (innermost first) and shape.
struct Outline {
    groups: Vec<Transform>,
    shape: Shape,
}

enum Shape {
    Rectangle {
        position: Property,
        size: Property,
        roundness: Property,
    },
    Ellipse {
        position: Property,
        size: Property,
    },
    /// A path's `ks` property: static or keyframed.
    Path(Value),
    Fixed(Contour),
}

impl Outline {
    fn is_animated(&self) -> bool {
        self.groups.iter().any(Transform::is_animated)
            || match &self.shape {
                Shape::Rectangle {
                    position,
                    size,
                    roundness,
                } => position.is_animated() || size.is_animated() || roundness.is_animated(),
                Shape::Ellipse { position, size } => position.is_animated() || size.is_animated(),
                Shape::Path(path) => keyframes(path).is_some(),
                Shape::Fixed(_) => false,
            }
    }

    /// The groups' transforms at `time` (the composition's frames).
    fn groups_at(&self, time: f64) -> Affine {
        self.groups
            .iter()
            .fold(Affine::IDENTITY, |map, group| map.then(group.at(time)))
    }

    /// The outline in the matte layer's space at `time`; `None` for a keyframed path (only
    /// mapped keyframe by keyframe) or a malformed one.
    fn at(&self, time: f64) -> Option<Contour> {
        let pair = |property: &Property| {
            let values = property.at(time);
            [
                values.first().copied().unwrap_or(0.0),
                values.get(1).copied().unwrap_or(0.0),
            ]
        };
        let shape = match &self.shape {
            Shape::Rectangle {
                position,
                size,
                roundness,
            } => Contour::rectangle(pair(position), pair(size), roundness.scalar(time)),
            Shape::Ellipse { position, size } => Contour::ellipse(pair(position), pair(size)),
            Shape::Path(path) => Contour::from_path(static_path(path)?)?,
            Shape::Fixed(contour) => contour.clone(),
        };
        Some(shape.transformed(self.groups_at(time)))
    }
}

/// The matte's filled outlines; `None` when its drawing is not their union (the module
/// documentation's second point).
fn matte_outlines(matte: &Value) -> Option<Vec<Outline>> {
    if matte.get("ty").and_then(Value::as_i64) == Some(layer_type::SOLID) {
        let width = number(matte, "sw")?;
        let height = number(matte, "sh")?;
        let solid = Contour::rectangle([width / 2.0, height / 2.0], [width, height], 0.0);
        return Some(vec![Outline {
            groups: Vec::new(),
            shape: Shape::Fixed(solid),
        }]);
    }
    let mut outlines = Vec::new();
    let mut fills = Vec::new();
    collect(
        matte.get("shapes")?.as_array()?,
        &[],
        &mut outlines,
        &mut fills,
        0,
    )?;
    // Each outline under one fill at most; an outline filled twice is one mask.
    let mut filled: Vec<usize> = Vec::new();
    for fill in fills {
        match fill.as_slice() {
            [] => {}
            [one] if !filled.contains(one) => filled.push(*one),
            [_] => {}
            _ => return None,
        }
    }
    filled.sort_unstable();
    let mut outlines: Vec<Option<Outline>> = outlines.into_iter().map(Some).collect();
    Some(
        filled
            .into_iter()
            .filter_map(|index| outlines.get_mut(index)?.take())
            .collect(),
    )
}

/// Group levels a matte's shapes are read within: deeper than any designer's file (the
/// fence already bounds the JSON's nesting); a deeper matte stays a matte.
pub const MAX_MATTE_GROUP_DEPTH: usize = 64;

/// Reads `items` (a shape list) inside `groups`: appends its outlines to `outlines` and, per
/// fill, the outlines it fills to `fills`. Answers the list's outlines (which fills after
/// its group fill too).
fn collect(
    items: &[Value],
    groups: &[Transform],
    outlines: &mut Vec<Outline>,
    fills: &mut Vec<Vec<usize>>,
    depth: usize,
) -> Option<Vec<usize>> {
    if depth > MAX_MATTE_GROUP_DEPTH {
        return None;
    }
    let mut before = Vec::new();
    for item in items {
        if flag(item, "hd") {
            continue;
        }
        let property = |key: &str| item.get(key).and_then(Property::parse);
        let shape = match item.get("ty").and_then(Value::as_str)? {
            "gr" => {
                let inner = item.get("it")?.as_array()?;
                let mut nested = Vec::with_capacity(groups.len() + 1);
                if let Some(transform) = inner
                    .iter()
                    .find(|inner| inner.get("ty").and_then(Value::as_str) == Some("tr"))
                {
                    let opaque = transform
                        .get("o")
                        .is_none_or(|opacity| all_values_are(opacity, 100.0));
                    if !opaque {
                        return None;
                    }
                    nested.push(Transform::parse(transform)?);
                }
                nested.extend(groups.iter().cloned());
                before.extend(collect(inner, &nested, outlines, fills, depth + 1)?);
                continue;
            }
            "tr" => continue,
            "fl" => {
                let opaque = item
                    .get("o")
                    .is_none_or(|opacity| all_values_are(opacity, 100.0));
                let even_odd = item.get("r").and_then(Value::as_i64) == Some(2);
                let over_paths = before.iter().any(|&index| {
                    matches!(
                        outlines[index],
                        Outline {
                            shape: Shape::Path(_),
                            ..
                        }
                    )
                });
                if !opaque || (even_odd && over_paths) {
                    return None;
                }
                fills.push(before.clone());
                continue;
            }
            "rc" => Shape::Rectangle {
                position: property("p")?,
                size: property("s")?,
                roundness: property("r").unwrap_or_else(|| Property::constant(vec![0.0])),
            },
            "el" => Shape::Ellipse {
                position: property("p")?,
                size: property("s")?,
            },
            "sh" => Shape::Path(item.get("ks")?.clone()),
            _ => return None,
        };
        before.push(outlines.len());
        outlines.push(Outline {
            groups: groups.to_vec(),
            shape,
        });
    }
    Some(before)
}

/// The two layers' transforms and times.
struct Scene {
    matte_chain: Chain,
    matted_chain: Chain,
    /// The matted layer's in and out points (the composition's frames).
    visible: (f64, f64),
}

impl Scene {
    /// Matte layer space to matted layer space at `time` (the composition's frames).
    fn matte_to_matted(&self, time: f64) -> Option<Affine> {
        Some(
            self.matte_chain
                .at(time)
                .then(self.matted_chain.at(time).inverse()?),
        )
    }

    /// One mask path property per outline; `None` when one cannot be made within the budget.
    /// What was sampled is spent from `left` whether or not the matte became masks: a matte
    /// that ran out part-way must not let the next one start from the whole budget again.
    fn mask_paths(
        &self,
        outlines: &[Outline],
        grid: Option<Sampling>,
        left: &mut usize,
    ) -> Option<Vec<Value>> {
        let moving = self.matte_chain.is_animated() || self.matted_chain.is_animated();
        let mut paths = Vec::with_capacity(outlines.len());
        for outline in outlines {
            let path = if !moving && !outline.is_animated() {
                let contour = outline
                    .at(0.0)?
                    .transformed(self.matte_to_matted(self.visible.0)?);
                *left = left.checked_sub(contour.len())?;
                json!({"a": 0, "k": contour.to_json()})
            } else if let (false, Shape::Path(path), true) = (
                moving,
                &outline.shape,
                outline.groups.iter().all(|group| !group.is_animated()),
            ) {
                let map = outline
                    .groups_at(0.0)
                    .then(self.matte_to_matted(self.visible.0)?);
                self.mapped_keyframes(path, map, left)?
            } else {
                self.sampled(outline, grid?, left)?
            };
            paths.push(path);
        }
        Some(paths)
    }

    /// A keyframed matte path mapped by a static `map`, keyframe by keyframe (exact: an
    /// affine map commutes with the vertex interpolation), at the same times.
    fn mapped_keyframes(&self, path: &Value, map: Affine, left: &mut usize) -> Option<Value> {
        let mut property = path.clone();
        let keyframes = property.get_mut("k")?.as_array_mut()?;
        without_last_easing(keyframes);
        for keyframe in keyframes.iter_mut() {
            let keyframe = keyframe.as_object_mut()?;
            // rlottie 0.1 draws a mask path whose handles are arrays as nothing past its
            // first keyframe; lottie-web reads a path's `[x]` as `x`.
            for handle in ["o", "i"] {
                let Some(Value::Object(handle)) = keyframe.get_mut(handle) else {
                    continue;
                };
                for axis in ["x", "y"] {
                    if let Some(Value::Array(items)) = handle.get(axis) {
                        let first = items.first().cloned().unwrap_or(Value::from(0));
                        handle.insert(axis.to_owned(), first);
                    }
                }
            }
            for key in ["s", "e"] {
                let Some(value) = keyframe.get_mut(key) else {
                    continue;
                };
                let shapes: Vec<&mut Value> = match value {
                    Value::Array(items) => items.iter_mut().collect(),
                    single => vec![single],
                };
                for shape in shapes {
                    let contour = Contour::from_path(shape)?.transformed(map);
                    *left = left.checked_sub(contour.len())?;
                    *shape = contour.to_json();
                }
            }
        }
        Some(property)
    }

    /// The outline sampled at the grid's times while the matted layer is shown, keyframed
    /// linearly in between (exact at every frame the output shows).
    fn sampled(&self, outline: &Outline, grid: Sampling, left: &mut usize) -> Option<Value> {
        let (from, to) = self.visible;
        let mut keyframes = Vec::new();
        let mut count = None;
        for sample in 0..grid.count {
            let time = grid.start + grid.step * sample as f64;
            if time < from || time >= to {
                continue;
            }
            let shape = outline.at(time)?;
            if *count.get_or_insert(shape.len()) != shape.len() {
                return None;
            }
            let contour = match self.matte_to_matted(time) {
                Some(map) => shape.transformed(map),
                None => shape.collapsed(),
            };
            *left = left.checked_sub(contour.len())?;
            keyframes.push(json!({
                "t": time, "s": [contour.to_json()],
                // Scalar handles: rlottie 0.1 draws a mask path whose handles are arrays
                // (`"x": [0]`) as nothing past its first keyframe (as it does when the last
                // keyframe has handles at all).
                "o": {"x": 0, "y": 0}, "i": {"x": 1, "y": 1}
            }));
        }
        match keyframes.len() {
            0 => None,
            1 => keyframes.pop().and_then(|mut only| {
                Some(json!({"a": 0, "k": only.get_mut("s")?.get_mut(0)?.take()}))
            }),
            _ => {
                without_last_easing(&mut keyframes);
                Some(json!({"a": 1, "k": keyframes}))
            }
        }
    }
}

/// rlottie 0.1 draws a mask path whose last keyframe has easing handles as nothing past its
/// first keyframe; lottie-web never reads them (no keyframe follows).
fn without_last_easing(keyframes: &mut [Value]) {
    if let Some(Value::Object(last)) = keyframes.last_mut() {
        last.remove("o");
        last.remove("i");
    }
}

/// A path property's keyframes, when it has more than one.
fn keyframes(path: &Value) -> Option<&Vec<Value>> {
    path.get("k")?
        .as_array()
        .filter(|items| items.len() > 1 && items.iter().all(Value::is_object))
}

/// A path property's value when it is static (or a single keyframe).
fn static_path(path: &Value) -> Option<&Value> {
    let k = path.get("k")?;
    match k.as_array() {
        Some(items) if items.len() == 1 => {
            let start = items[0].get("s")?;
            start
                .as_array()
                .map_or(Some(start), |shapes| shapes.first())
        }
        Some(_) => None,
        None => Some(k),
    }
}

/// The first layer of each index (as players resolve `parent`).
fn indices(layers: &[Value]) -> HashMap<i64, usize> {
    let mut by_index = HashMap::new();
    for (position, layer) in layers.iter().enumerate() {
        if let Some(index) = layer.get("ind").and_then(Value::as_i64) {
            by_index.entry(index).or_insert(position);
        }
    }
    by_index
}

fn number(layer: &Value, key: &str) -> Option<f64> {
    layer
        .get(key)
        .and_then(Value::as_f64)
        .filter(|n| n.is_finite())
}

/// A Lottie flag: `true`, or a number other than 0.
fn flag(value: &Value, key: &str) -> bool {
    match value.get(key) {
        Some(Value::Bool(flag)) => *flag,
        Some(number) => number.as_f64().is_some_and(|n| n != 0.0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transform(position: [f64; 2], scale: f64) -> Value {
        json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "a": {"a": 0, "k": [0, 0, 0]},
               "p": {"a": 0, "k": [position[0], position[1], 0]}, "s": {"a": 0, "k": [scale, scale, 100]}})
    }

    fn filled(items: Vec<Value>) -> Value {
        let mut it = items;
        it.push(
            json!({"ty": "fl", "c": {"a": 0, "k": [1, 1, 1, 1]}, "o": {"a": 0, "k": 100}, "r": 1}),
        );
        it.push(json!({"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
                       "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}));
        json!([{"ty": "gr", "it": it}])
    }

    fn rect(size: [f64; 2]) -> Value {
        json!({"ty": "rc", "d": 1, "s": {"a": 0, "k": size}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}})
    }

    /// A matte of `shapes` at `position` above a matted layer (`tt`) at (50, 50), scaled 200 %.
    fn pair(shapes: Value, position: [f64; 2], tt: i64) -> Vec<Value> {
        vec![
            json!({"ind": 1, "ty": 4, "td": 1, "ks": transform(position, 100.0), "ip": 0, "op": 30,
                   "st": 0, "shapes": shapes}),
            json!({"ind": 2, "ty": 0, "tt": tt, "refId": "x", "ks": transform([50.0, 50.0], 200.0),
                   "ip": 0, "op": 30, "st": 0}),
        ]
    }

    fn lower(layers: &mut [Value], grid: Option<Sampling>) -> usize {
        lower_composition(layers, grid, &mut MAX_SAMPLED_MASK_VERTICES.clone())
    }

    fn grid() -> Option<Sampling> {
        Some(Sampling {
            start: 0.0,
            step: 1.0,
            count: 30,
        })
    }

    #[test]
    fn a_rectangle_matte_becomes_an_add_mask_in_the_matted_layers_space() {
        // The matte rectangle covers x 20..80, y 0..100 on the canvas (its layer at (40, 50)
        // under a parent at (10, 0)); the matted layer maps p to 50 + 2p, so the mask is
        // x -15..15, y -25..25.
        let mut layers = pair(filled(vec![rect([60.0, 100.0])]), [40.0, 50.0], 1);
        layers[0]["parent"] = json!(3);
        layers.push(json!({"ind": 3, "ty": 3, "ks": transform([10.0, 0.0], 100.0), "ip": 0, "op": 30, "st": 0}));
        assert_eq!(lower(&mut layers, None), 1);
        let matted = &layers[1];
        assert!(matted.get("tt").is_none());
        assert_eq!(matted["hasMask"], json!(true));
        let mask = &matted["masksProperties"][0];
        assert_eq!(mask["mode"], json!("a"));
        assert_eq!(
            mask["pt"]["k"]["v"],
            json!([[15.0, -25.0], [15.0, 25.0], [-15.0, 25.0], [-15.0, -25.0]])
        );
    }

    #[test]
    fn an_inverted_matte_of_one_outline_becomes_a_subtract_mask() {
        let ellipse =
            json!({"ty": "el", "d": 1, "s": {"a": 0, "k": [20, 20]}, "p": {"a": 0, "k": [0, 0]}});
        let mut layers = pair(filled(vec![ellipse.clone()]), [50.0, 50.0], 2);
        assert_eq!(lower(&mut layers, None), 1);
        assert_eq!(layers[1]["masksProperties"][0]["mode"], json!("s"));
        // Two outlines: a first subtract mask covering everything would restart the second.
        let two = filled(vec![ellipse.clone()]);
        let shapes = json!([two[0], two[0]]);
        let mut layers = pair(shapes, [50.0, 50.0], 2);
        assert_eq!(lower(&mut layers, None), 0);
        let mut layers = pair(json!([two[0], two[0]]), [50.0, 50.0], 1);
        assert_eq!(lower(&mut layers, None), 1, "as alpha, two add masks");
        assert_eq!(layers[1]["masksProperties"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn mattes_masks_cannot_draw_stay_mattes() {
        let shapes = |extra: Value| {
            let mut shapes = filled(vec![rect([10.0, 10.0])]);
            shapes[0]["it"].as_array_mut().unwrap().insert(1, extra);
            shapes
        };
        let cases = [
            (
                "a stroke",
                shapes(
                    json!({"ty": "st", "c": {"a": 0, "k": [0, 0, 0, 1]}, "o": {"a": 0, "k": 100}, "w": {"a": 0, "k": 2}}),
                ),
            ),
            (
                "a gradient",
                shapes(json!({"ty": "gf", "o": {"a": 0, "k": 100}})),
            ),
            (
                "a trim",
                shapes(json!({"ty": "tm", "s": {"a": 0, "k": 0}, "e": {"a": 0, "k": 50}})),
            ),
            ("two outlines under one fill", shapes(rect([4.0, 4.0]))),
            ("a translucent fill", {
                let mut shapes = filled(vec![rect([10.0, 10.0])]);
                shapes[0]["it"][1]["o"] =
                    json!({"a": 1, "k": [{"t": 0, "s": [100]}, {"t": 9, "s": [60]}]});
                shapes
            }),
            (
                "nothing filled",
                json!([{"ty": "gr", "it": [rect([10.0, 10.0])]}]),
            ),
        ];
        for (case, shapes) in cases {
            let mut layers = pair(shapes, [50.0, 50.0], 1);
            assert_eq!(lower(&mut layers, grid()), 0, "{case}");
            assert_eq!(layers[1]["tt"], json!(1), "{case}");
        }
        let mut translucent = pair(filled(vec![rect([10.0, 10.0])]), [50.0, 50.0], 1);
        translucent[0]["ks"]["o"] = json!({"a": 0, "k": 99});
        let mut short = pair(filled(vec![rect([10.0, 10.0])]), [50.0, 50.0], 1);
        short[0]["op"] = json!(20);
        let mut masked = pair(filled(vec![rect([10.0, 10.0])]), [50.0, 50.0], 1);
        masked[1]["masksProperties"] = json!([{"mode": "a"}]);
        let luma = pair(filled(vec![rect([10.0, 10.0])]), [50.0, 50.0], 3);
        for (case, mut layers) in [
            ("layer opacity", translucent),
            ("matte ends first", short),
            ("masked layer", masked),
            ("luma matte", luma),
        ] {
            assert_eq!(lower(&mut layers, grid()), 0, "{case}");
        }
    }

    #[test]
    fn a_keyframed_matte_path_under_still_transforms_keeps_its_keyframes_mapped() {
        let square = |side: f64| {
            json!({"c": true, "i": [[0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0]],
                                        "v": [[0, 0], [side, 0], [side, side]]})
        };
        let path = json!({"ty": "sh", "ks": {"a": 1, "k": [
            {"t": 4, "s": [square(10.0)], "o": {"x": [0.3], "y": [0]}, "i": {"x": [0.7], "y": [1]}},
            {"t": 14, "s": [square(20.0)]}]}});
        let mut layers = pair(filled(vec![path]), [50.0, 50.0], 1);
        layers[0]["st"] = json!(3);
        layers[0]["ip"] = json!(-5);
        assert_eq!(lower(&mut layers, None), 1);
        let keyframes = &layers[1]["masksProperties"][0]["pt"]["k"];
        // Keyframe times are the composition's, whatever the layers' start times.
        assert_eq!(keyframes[0]["t"], json!(4));
        assert_eq!(
            keyframes[0]["o"],
            json!({"x": 0.3, "y": 0}),
            "scalar handles"
        );
        assert_eq!(
            keyframes[1]["s"][0]["v"],
            json!([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
        );
    }

    #[test]
    fn a_moving_matte_is_sampled_at_every_frame_shown_within_the_budget() {
        let mut layers = pair(filled(vec![rect([10.0, 10.0])]), [50.0, 50.0], 1);
        layers[0]["ks"]["p"] = json!({"a": 1, "k": [
            {"t": 0, "s": [50, 50, 0], "o": {"x": 0, "y": 0}, "i": {"x": 1, "y": 1}}, {"t": 30, "s": [80, 50, 0]}]});
        layers[1]["ip"] = json!(10);
        let mut sampled = layers.clone();
        assert_eq!(lower(&mut sampled, grid()), 1);
        let keyframes = sampled[1]["masksProperties"][0]["pt"]["k"]
            .as_array()
            .unwrap();
        assert_eq!(keyframes.len(), 20, "frames 10..30");
        // At frame 20 the matte is at x 70: 20 right of the matted layer's 50, halved.
        assert!(keyframes[19].get("o").is_none() && keyframes[19].get("i").is_none());
        let at_20 = &keyframes[10];
        assert_eq!(at_20["t"], json!(20.0));
        assert_eq!(at_20["s"][0]["v"][0], json!([12.5, -2.5]));
        let mut unshown = layers.clone();
        assert_eq!(lower(&mut unshown, None), 0, "a composition never shown");
        let mut tight = layers;
        let mut budget = 4 * 19;
        assert_eq!(lower_composition(&mut tight, grid(), &mut budget), 0);
        // The 19 frames sampled before the budget ran out are spent all the same: the next
        // matte does not start from the whole budget again.
        assert_eq!(budget, 0, "what was sampled is spent");
    }
}
