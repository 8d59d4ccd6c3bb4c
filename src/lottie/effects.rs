//! Layer effects that render: rlottie ignores a layer's `ef` list, so before it loads a
//! template the effects lottie-web draws as colour maps are written into the layer's own
//! colours, and a drop shadow becomes a recoloured, offset copy of the layer drawn below it.
//! Runs after text lowering, so text layers are glyph shapes by then.
//!
//! The reference is lottie-web 5.x (`player/js/elements/svgElements/effects/*.js`), which
//! draws Tint (`ty` 20), Fill (21), Tritone (23) and Drop Shadow (25) as SVG filters on the
//! layer. The maths follows those filters:
//! - Fill: every pixel takes the effect colour; its alpha is multiplied by the effect opacity.
//! - Tint: the luminance `L` (mean of the linear-light channels, shown in sRGB) maps black to
//!   the "map black to" colour and white to the "map white to" colour; an amount below 100 %
//!   draws the tinted layer at that opacity over the original (mixed in linear light).
//! - Tritone: the same `L` picks along shadows → midtones → highlights.
//! - Drop Shadow: the layer's alpha, offset by distance at direction − 90° in the layer's own
//!   coordinates, flooded with the shadow colour at opacity / 255, drawn below the layer. One
//!   knowing difference: lottie-web's default filter region is the layer's bounding box, so its
//!   preview cuts the shadow off at the box (a shadowed rectangle shows none); the shadow is
//!   drawn whole here, as After Effects draws it.
//!
//! A filter maps pixels; this lowering maps the colours of fills, strokes, gradient stops and
//! solids, which is the same picture wherever one colour covers a pixel. What stays undrawn is
//! reported: effects lottie-web does not draw either (Change to Colour, Black & White, Invert
//! and other `ty` 5 groups: drawing them would differ from the designer's preview), effects
//! rlottie cannot draw (Gaussian Blur, Stroke, Pro Levels, Matte3, a drop shadow's softness),
//! image layers (their pixels are not ours to recolour) and animated effect parameters other
//! than Fill's colour (drawn at their first value).

use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};

/// Layers copied into recoloured precomposition assets and drop shadows, per template. A
/// Fill on a precomp layer copies its asset (and the assets nested in it); real templates
/// copy tens of layers, while precomps reused at every nesting level would otherwise copy
/// exponentially many. Past the budget an effect is reported instead of drawn.
pub const MAX_EFFECT_LAYER_COPIES: usize = 5000;
/// Distinct effect warnings kept per template: a handful is normal; thousands of layers each
/// carrying an undrawn effect would otherwise make thousands of lines.
pub const MAX_EFFECT_WARNINGS: usize = 256;
/// Intermediate stops per gradient interval when a Tint or Tritone maps a gradient: with 8,
/// the piecewise-linear map is within a few 8-bit levels of the effect's curve.
const GRADIENT_SUBDIVISIONS: usize = 8;
/// Colour stops of a mapped gradient: the fence's limit for a template's own gradients.
const MAX_SUBDIVIDED_STOPS: usize = super::fence::MAX_GRADIENT_STOPS as usize;
/// Characters of a layer or effect name quoted in a warning (names are the caller's).
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;

/// Bodymovin's effect type codes (`ef[].ty`) for the effects lowered here.
mod effect_type {
    pub const TINT: i64 = 20;
    pub const FILL: i64 = 21;
    pub const TRITONE: i64 = 23;
    pub const DROP_SHADOW: i64 = 25;
    /// A group of expression controls or an effect Bodymovin has no code for.
    pub const GROUP: i64 = 5;
}

/// Effects lottie-web 5.x draws that are not lowered: Stroke (22), Pro Levels (24), Matte3
/// (28), Gaussian Blur (29), Transform (35). Their warning says the preview differs.
const DRAWN_BY_LOTTIE_WEB_ONLY: [i64; 5] = [22, 24, 28, 29, 35];

/// Match-name prefixes of `ty` 5 groups that draw nothing in any player: expression controls
/// (sliders, colours, points, …) and pseudo-effects such as rig controllers.
const CONTROL_MATCH_NAME_PREFIXES: [&str; 2] = ["Pseudo/", "ADBE "];
const CONTROL_MATCH_NAME_SUFFIX: &str = " Control";

/// What lowering a template's effects did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EffectsReport {
    /// Effects written into the template.
    pub lowered_effects: usize,
    pub warnings: Vec<String>,
}

/// Writes the effects rlottie would ignore into the template's colours and layers, and
/// reports those that stay undrawn. A template without effects is left untouched.
pub fn lower_layer_effects(json: &mut Value) -> EffectsReport {
    if !has_effects(json) {
        return EffectsReport::default();
    }
    let mut assets = match json.get_mut("assets") {
        Some(Value::Array(assets)) => std::mem::take(assets),
        _ => Vec::new(),
    };
    let asset_index = assets
        .iter()
        .enumerate()
        .filter(|(_, asset)| asset.get("layers").is_some())
        .filter_map(|(index, asset)| Some((asset.get("id")?.as_str()?.to_owned(), index)))
        .collect();
    let mut lowering = Lowering {
        assets: &mut assets,
        asset_index,
        lowered_assets: HashSet::new(),
        copies_left: MAX_EFFECT_LAYER_COPIES,
        report: EffectsReport::default(),
        seen_warnings: HashSet::new(),
    };
    if let Some(Value::Array(layers)) = json.get_mut("layers") {
        lowering.lower_composition(layers);
    }
    let report = lowering.report;
    if let Some(Value::Array(slot)) = json.get_mut("assets") {
        *slot = assets;
    }
    report
}

/// Whether any layer of the template carries an effect.
fn has_effects(json: &Value) -> bool {
    let lists = json
        .get("assets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|asset| asset.get("layers"))
        .chain(json.get("layers"));
    lists
        .filter_map(Value::as_array)
        .flatten()
        .any(|layer| layer_effects(layer).is_some_and(|effects| !effects.is_empty()))
}

fn layer_effects(layer: &Value) -> Option<&Vec<Value>> {
    layer.get("ef")?.as_array()
}

fn truncated(name: &str) -> String {
    name.chars().take(MAX_NAME_CHARS_IN_WARNINGS).collect()
}

fn name_of(value: &Value) -> String {
    truncated(value.get("nm").and_then(Value::as_str).unwrap_or_default())
}

/// A colour map lowered into a layer's colours.
#[derive(Debug, Clone)]
enum ColourMap {
    /// Every colour becomes `colour`; `animated_colour` is the effect's keyframed colour
    /// property, written as is into fills and strokes.
    Fill {
        colour: [f64; 3],
        animated_colour: Option<Value>,
    },
    Tint {
        black: [f64; 3],
        white: [f64; 3],
        amount: f64,
    },
    Tritone {
        highlights: [f64; 3],
        midtones: [f64; 3],
        shadows: [f64; 3],
    },
}

impl ColourMap {
    fn map(&self, colour: [f64; 3]) -> [f64; 3] {
        match self {
            ColourMap::Fill { colour: fill, .. } => *fill,
            ColourMap::Tint {
                black,
                white,
                amount,
            } => {
                let light = luminance(colour);
                let tinted: [f64; 3] =
                    std::array::from_fn(|i| black[i] + (white[i] - black[i]) * light);
                // lottie-web 5.x merges, in linear light, the original, the grey at `amount`
                // over it, and the tinted colour at `amount` over that.
                let over = |under: f64, top: f64| under * (1.0 - amount) + top * amount;
                let grey = to_linear(light);
                std::array::from_fn(|i| {
                    to_srgb(over(over(to_linear(colour[i]), grey), to_linear(tinted[i])))
                })
            }
            ColourMap::Tritone {
                highlights,
                midtones,
                shadows,
            } => {
                let light = luminance(colour);
                let (from, to, t) = if light <= 0.5 {
                    (shadows, midtones, light * 2.0)
                } else {
                    (midtones, highlights, light * 2.0 - 1.0)
                };
                std::array::from_fn(|i| from[i] + (to[i] - from[i]) * t)
            }
        }
    }
}

/// lottie-web's grey for Tint and Tritone: the mean of the linear-light channels (the first
/// matrix runs in linearRGB), handed on in sRGB (the next primitive runs in sRGB).
fn luminance(colour: [f64; 3]) -> f64 {
    to_srgb(colour.iter().map(|c| to_linear(*c)).sum::<f64>() / 3.0)
}

fn to_linear(c: f64) -> f64 {
    let c = c.clamp(0.0, 1.0);
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn to_srgb(c: f64) -> f64 {
    let c = c.clamp(0.0, 1.0);
    if c <= 0.003_130_8 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

/// A drop shadow: colour, opacity 0..=1, offset in the layer's coordinates.
#[derive(Debug, Clone, Copy)]
struct DropShadow {
    colour: [f64; 3],
    opacity: f64,
    offset: [f64; 2],
}

/// What one entry of `ef` asks for.
enum Effect {
    Colour {
        map: ColourMap,
        opacity: f64,
    },
    Shadow(DropShadow),
    /// Draws nothing anywhere (expression controls).
    Control,
    NotDrawn,
}

/// Parameter `index` of an effect (`ef[].ef[index].v`) and whether it is animated.
fn parameter(effect: &Value, index: usize) -> Option<&Value> {
    effect.get("ef")?.as_array()?.get(index)?.get("v")
}

fn is_animated(property: &Value) -> bool {
    property.get("a").and_then(Value::as_i64) == Some(1)
        || property
            .get("k")
            .and_then(Value::as_array)
            .and_then(|items| items.first())
            .is_some_and(Value::is_object)
}

fn first_value(property: &Value) -> Option<&Value> {
    super::model::property_initial_value(property)
}

fn number_parameter(effect: &Value, index: usize) -> Option<f64> {
    match first_value(parameter(effect, index)?)? {
        Value::Array(items) => items.first()?.as_f64(),
        other => other.as_f64(),
    }
    .filter(|value| value.is_finite())
}

fn colour_parameter(effect: &Value, index: usize) -> Option<[f64; 3]> {
    colour_of(first_value(parameter(effect, index)?)?)
}

fn colour_of(value: &Value) -> Option<[f64; 3]> {
    let items = value.as_array()?;
    let channel = |i: usize| {
        items
            .get(i)?
            .as_f64()
            .filter(|v| v.is_finite())
            .map(|v| v.clamp(0.0, 1.0))
    };
    Some([channel(0)?, channel(1)?, channel(2)?])
}

/// Whether any of the effect's parameters `indices` is keyframed.
fn any_animated(effect: &Value, indices: &[usize]) -> bool {
    indices
        .iter()
        .filter_map(|index| parameter(effect, *index))
        .any(is_animated)
}

struct Lowering<'a> {
    assets: &'a mut Vec<Value>,
    asset_index: HashMap<String, usize>,
    /// Assets whose own layers' effects are lowered already.
    lowered_assets: HashSet<usize>,
    copies_left: usize,
    report: EffectsReport,
    seen_warnings: HashSet<String>,
}

impl Lowering<'_> {
    fn warn(&mut self, warning: String) {
        if self.report.warnings.len() < MAX_EFFECT_WARNINGS
            && self.seen_warnings.insert(warning.clone())
        {
            self.report.warnings.push(warning);
        }
    }

    /// Lowers the effects of one composition's layers, the precomps it draws first (so a
    /// recoloured copy of a precomp carries its own layers' effects).
    fn lower_composition(&mut self, layers: &mut Vec<Value>) {
        for layer in layers.iter() {
            if layer.get("ty").and_then(Value::as_i64) != Some(0) {
                continue;
            }
            let Some(&index) = layer
                .get("refId")
                .and_then(Value::as_str)
                .and_then(|id| self.asset_index.get(id))
            else {
                continue;
            };
            // The fence refuses precomp cycles, so this recursion ends (at its depth limit).
            if self.lowered_assets.insert(index) {
                let mut inner = match self.assets[index].get_mut("layers") {
                    Some(Value::Array(inner)) => std::mem::take(inner),
                    _ => continue,
                };
                self.lower_composition(&mut inner);
                if let Some(Value::Array(slot)) = self.assets[index].get_mut("layers") {
                    *slot = inner;
                }
            }
        }
        if !layers
            .iter()
            .any(|layer| layer_effects(layer).is_some_and(|effects| !effects.is_empty()))
        {
            return;
        }
        let mut next_index = layers
            .iter()
            .filter_map(|layer| layer.get("ind").and_then(Value::as_i64))
            .max()
            .unwrap_or(0);
        let mut lowered = Vec::with_capacity(layers.len());
        for layer in std::mem::take(layers) {
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            match layer_effects(&layer) {
                Some(effects) if !effects.is_empty() && !hidden => {
                    let effects = effects.clone();
                    lowered.extend(self.lower_layer(layer, &effects, &mut next_index));
                }
                _ => lowered.push(layer),
            }
        }
        *layers = lowered;
    }

    /// The layer with its effects applied in order, followed by the shadow copies drawn below
    /// it.
    fn lower_layer(&mut self, layer: Value, effects: &[Value], next_index: &mut i64) -> Vec<Value> {
        let layer_name = name_of(&layer);
        let mut parts = vec![layer];
        for effect in effects {
            let effect_name = name_of(effect);
            match self.classify(effect, &layer_name, &effect_name) {
                Effect::Control => {}
                Effect::NotDrawn => {
                    let match_name =
                        truncated(effect.get("mn").and_then(Value::as_str).unwrap_or_default());
                    let ty = effect.get("ty").and_then(Value::as_i64).unwrap_or(-1);
                    let why = if DRAWN_BY_LOTTIE_WEB_ONLY.contains(&ty) {
                        "lottie-web draws it; the renderer cannot"
                    } else {
                        "lottie-web does not draw it either"
                    };
                    self.warn(format!(
                        "layer '{layer_name}': effect '{effect_name}' ({match_name}) is not drawn ({why})"
                    ));
                }
                Effect::Colour { map, opacity } => {
                    let mut drawn = true;
                    for part in parts.iter_mut() {
                        drawn &= self.recolour_layer(part, &map, &layer_name, &effect_name);
                        if opacity < 1.0 {
                            scale_layer_opacity(part, opacity);
                        }
                    }
                    if drawn {
                        self.report.lowered_effects += 1;
                    }
                }
                Effect::Shadow(shadow) => {
                    let shadows = self.drop_shadows(&parts, shadow, &layer_name, &effect_name);
                    if !shadows.is_empty() {
                        self.report.lowered_effects += 1;
                    }
                    for mut copy in shadows {
                        *next_index += 1;
                        if let Some(object) = copy.as_object_mut() {
                            object.insert("ind".to_owned(), json!(*next_index));
                        }
                        parts.push(copy);
                    }
                }
            }
        }
        parts
    }

    fn classify(&mut self, effect: &Value, layer_name: &str, effect_name: &str) -> Effect {
        let ty = effect.get("ty").and_then(Value::as_i64).unwrap_or(-1);
        let animated_warning = |lowering: &mut Lowering| {
            lowering.warn(format!(
                "layer '{layer_name}': effect '{effect_name}' has animated parameters, drawn at their first value"
            ));
        };
        match ty {
            effect_type::FILL => {
                // Parameters: 0 mask, 1 all masks, 2 colour, 3 invert, 4-5 feather, 6 opacity.
                let Some(colour) = colour_parameter(effect, 2) else {
                    return Effect::NotDrawn;
                };
                let animated_colour = parameter(effect, 2).filter(|p| is_animated(p)).cloned();
                if any_animated(effect, &[6]) {
                    animated_warning(self);
                }
                Effect::Colour {
                    map: ColourMap::Fill {
                        colour,
                        animated_colour,
                    },
                    opacity: number_parameter(effect, 6).unwrap_or(1.0).clamp(0.0, 1.0),
                }
            }
            effect_type::TINT => {
                // Parameters: 0 map black to, 1 map white to, 2 amount (%).
                let (Some(black), Some(white)) =
                    (colour_parameter(effect, 0), colour_parameter(effect, 1))
                else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2]) {
                    animated_warning(self);
                }
                let amount = number_parameter(effect, 2).unwrap_or(100.0) / 100.0;
                Effect::Colour {
                    map: ColourMap::Tint {
                        black,
                        white,
                        amount: amount.clamp(0.0, 1.0),
                    },
                    opacity: 1.0,
                }
            }
            effect_type::TRITONE => {
                // Parameters: 0 highlights, 1 midtones, 2 shadows (blend is not drawn by
                // lottie-web).
                let (Some(highlights), Some(midtones), Some(shadows)) = (
                    colour_parameter(effect, 0),
                    colour_parameter(effect, 1),
                    colour_parameter(effect, 2),
                ) else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2]) {
                    animated_warning(self);
                }
                Effect::Colour {
                    map: ColourMap::Tritone {
                        highlights,
                        midtones,
                        shadows,
                    },
                    opacity: 1.0,
                }
            }
            effect_type::DROP_SHADOW => {
                // Parameters: 0 colour, 1 opacity (0..=255), 2 direction (degrees),
                // 3 distance, 4 softness, 5 shadow only (not drawn by lottie-web).
                let Some(colour) = colour_parameter(effect, 0) else {
                    return Effect::NotDrawn;
                };
                if any_animated(effect, &[0, 1, 2, 3, 4]) {
                    animated_warning(self);
                }
                let opacity =
                    (number_parameter(effect, 1).unwrap_or(255.0) / 255.0).clamp(0.0, 1.0);
                let angle = (number_parameter(effect, 2).unwrap_or(0.0) - 90.0).to_radians();
                let distance = number_parameter(effect, 3).unwrap_or(0.0);
                if number_parameter(effect, 4).unwrap_or(0.0) > 0.0 {
                    self.warn(format!(
                        "layer '{layer_name}': effect '{effect_name}' is drawn without its softness (the renderer cannot blur)"
                    ));
                }
                Effect::Shadow(DropShadow {
                    colour,
                    opacity,
                    offset: [distance * angle.cos(), distance * angle.sin()],
                })
            }
            effect_type::GROUP if is_control(effect) => Effect::Control,
            _ => Effect::NotDrawn,
        }
    }

    /// Applies `map` to the colours `layer` draws; false (and a warning) when part of it is
    /// left as it was.
    fn recolour_layer(
        &mut self,
        layer: &mut Value,
        map: &ColourMap,
        layer_name: &str,
        effect_name: &str,
    ) -> bool {
        match layer.get("ty").and_then(Value::as_i64) {
            Some(4) => {
                if let Some(Value::Array(shapes)) = layer.get_mut("shapes") {
                    recolour_shapes(shapes, map);
                }
                true
            }
            Some(1) => {
                if let ColourMap::Fill {
                    animated_colour: Some(_),
                    ..
                } = map
                {
                    self.warn(format!(
                        "layer '{layer_name}': effect '{effect_name}' has an animated colour on a solid, drawn at its first value"
                    ));
                }
                let solid = layer.get("sc").and_then(Value::as_str).and_then(parse_hex);
                match (solid, layer.as_object_mut()) {
                    (Some(colour), Some(object)) => {
                        object.insert("sc".to_owned(), json!(to_hex(map.map(colour))));
                        true
                    }
                    _ => false,
                }
            }
            Some(0) => self.recolour_precomp(layer, map, layer_name, effect_name),
            Some(2) => {
                self.warn(format!(
                    "layer '{layer_name}': effect '{effect_name}' is not drawn on an image layer"
                ));
                false
            }
            // Nulls and hidden text draw nothing; other types are reported by the fence.
            _ => true,
        }
    }

    /// Points a precomp layer at a recoloured copy of its asset (nested precomps copied too).
    fn recolour_precomp(
        &mut self,
        layer: &mut Value,
        map: &ColourMap,
        layer_name: &str,
        effect_name: &str,
    ) -> bool {
        let Some(&index) = layer
            .get("refId")
            .and_then(Value::as_str)
            .and_then(|id| self.asset_index.get(id))
        else {
            return true;
        };
        let layer_count = self.assets[index]
            .get("layers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if layer_count > self.copies_left {
            self.warn(format!(
                "layer '{layer_name}': effect '{effect_name}' is not drawn (its precomposition copies exceed {MAX_EFFECT_LAYER_COPIES} layers)"
            ));
            return false;
        }
        self.copies_left -= layer_count;
        let mut copy = self.assets[index].clone();
        let mut drawn = true;
        if let Some(Value::Array(inner)) = copy.get_mut("layers") {
            // A matte source is not drawn: the effect applies to what it lets through, and
            // recolouring it would change what a luma matte lets through.
            let drawn_layers = inner
                .iter_mut()
                .filter(|layer| layer.get("td").and_then(Value::as_i64).unwrap_or(0) == 0);
            for inner_layer in drawn_layers {
                drawn &= self.recolour_layer(inner_layer, map, layer_name, effect_name);
            }
        }
        let original_id = copy.get("id").and_then(Value::as_str).unwrap_or_default();
        let mut id = format!("{original_id}~effect{}", self.assets.len());
        while self.asset_index.contains_key(&id) {
            id.push('~');
        }
        if let Some(object) = copy.as_object_mut() {
            object.insert("id".to_owned(), json!(id));
        }
        self.asset_index.insert(id.clone(), self.assets.len());
        self.lowered_assets.insert(self.assets.len());
        self.assets.push(copy);
        if let Some(object) = layer.as_object_mut() {
            object.insert("refId".to_owned(), json!(id));
        }
        drawn
    }

    /// Shadow copies of `parts` (each to be drawn below them all), or none when a part cannot
    /// have one.
    fn drop_shadows(
        &mut self,
        parts: &[Value],
        shadow: DropShadow,
        layer_name: &str,
        effect_name: &str,
    ) -> Vec<Value> {
        let drawable = parts.iter().all(|part| {
            matches!(part.get("ty").and_then(Value::as_i64), Some(1 | 4))
                && part.get("td").is_none()
                && part.get("tt").is_none()
        });
        if !drawable || parts.len() > self.copies_left {
            self.warn(format!(
                "layer '{layer_name}': effect '{effect_name}' is not drawn (drop shadows are drawn for shape and solid layers outside track mattes)"
            ));
            return Vec::new();
        }
        self.copies_left -= parts.len();
        let fill = ColourMap::Fill {
            colour: shadow.colour,
            animated_colour: None,
        };
        parts
            .iter()
            .map(|part| {
                let mut copy = part.clone();
                self.recolour_layer(&mut copy, &fill, layer_name, effect_name);
                scale_layer_opacity(&mut copy, shadow.opacity);
                offset_layer(&mut copy, shadow.offset);
                if let Some(object) = copy.as_object_mut() {
                    object.remove("ef");
                    object.insert(
                        "nm".to_owned(),
                        json!(format!("{layer_name} (drop shadow)")),
                    );
                }
                copy
            })
            .collect()
    }
}

/// Whether a `ty` 5 group is an expression control or pseudo-effect (draws nothing).
fn is_control(effect: &Value) -> bool {
    let match_name = effect.get("mn").and_then(Value::as_str).unwrap_or_default();
    match_name.starts_with(CONTROL_MATCH_NAME_PREFIXES[0])
        || (match_name.starts_with(CONTROL_MATCH_NAME_PREFIXES[1])
            && match_name.ends_with(CONTROL_MATCH_NAME_SUFFIX))
}

/// Applies `map` to every fill, stroke and gradient of a shape list, groups included.
fn recolour_shapes(shapes: &mut [Value], map: &ColourMap) {
    for shape in shapes.iter_mut() {
        let Some(object) = shape.as_object_mut() else {
            continue;
        };
        match object.get("ty").and_then(Value::as_str) {
            Some("gr") => {
                if let Some(Value::Array(items)) = object.get_mut("it") {
                    recolour_shapes(items, map);
                }
            }
            Some("fl" | "st") => recolour_solid_paint(object, map),
            Some(kind @ ("gf" | "gs")) => {
                if let ColourMap::Fill { .. } = map {
                    // A Fill leaves one colour: the gradient becomes a plain fill or stroke.
                    let plain = if kind == "gf" { "fl" } else { "st" };
                    object.insert("ty".to_owned(), json!(plain));
                    recolour_solid_paint(object, map);
                } else if let Some(gradient) = object.get_mut("g") {
                    recolour_gradient(gradient, map);
                }
            }
            _ => {}
        }
    }
}

fn recolour_solid_paint(paint: &mut Map<String, Value>, map: &ColourMap) {
    if let ColourMap::Fill {
        animated_colour: Some(animated),
        ..
    } = map
    {
        paint.insert("c".to_owned(), animated.clone());
        return;
    }
    match paint.get_mut("c") {
        Some(property) => map_property_values(property, &mut |value| {
            if let Some(colour) = colour_of(value) {
                let [r, g, b] = map.map(colour);
                *value = json!([r, g, b, 1]);
            }
        }),
        None => {
            let [r, g, b] = map.map([0.0, 0.0, 0.0]);
            paint.insert("c".to_owned(), json!({"a": 0, "k": [r, g, b, 1]}));
        }
    }
}

/// Maps the colour stops of a gradient (`{"p": stops, "k": property}`); opacity stops after
/// them are kept. The effect maps every pixel, and a map of the stops alone would be linear
/// between them where the effect is not: each interval gets intermediate stops first
/// (interpolated in sRGB, as renderers draw gradients), up to [`MAX_SUBDIVIDED_STOPS`].
fn recolour_gradient(gradient: &mut Value, map: &ColourMap) {
    let stops = gradient.get("p").and_then(Value::as_u64).unwrap_or(0) as usize;
    let Some(property) = gradient.get_mut("k") else {
        return;
    };
    let well_formed = stops >= 2
        && super::model::property_values(property).iter().all(|value| {
            value.as_array().is_some_and(|items| {
                items.len() >= stops * 4 && items[..stops * 4].iter().all(Value::is_number)
            })
        });
    let steps = if well_formed {
        (MAX_SUBDIVIDED_STOPS - 1) / (stops - 1)
    } else {
        1
    }
    .clamp(1, GRADIENT_SUBDIVISIONS);
    map_property_values(property, &mut |value| {
        let Some(items) = value.as_array_mut() else {
            return;
        };
        let number = |value: &Value| value.as_f64().unwrap_or(0.0);
        let colour_stops: Vec<[f64; 4]> = items
            .chunks(4)
            .take(stops)
            .filter(|stop| stop.len() == 4)
            .map(|stop| {
                [
                    number(&stop[0]),
                    number(&stop[1]),
                    number(&stop[2]),
                    number(&stop[3]),
                ]
            })
            .collect();
        let mut subdivided = Vec::with_capacity(colour_stops.len() * steps);
        for (index, stop) in colour_stops.iter().enumerate() {
            subdivided.push(*stop);
            if let Some(next) = colour_stops.get(index + 1).filter(|_| steps > 1) {
                for step in 1..steps {
                    let t = step as f64 / steps as f64;
                    subdivided.push(std::array::from_fn(|i| stop[i] + (next[i] - stop[i]) * t));
                }
            }
        }
        let rest = items.split_off(colour_stops.len() * 4);
        items.clear();
        for [position, r, g, b] in subdivided {
            let [r, g, b] = map.map([r, g, b].map(|c| c.clamp(0.0, 1.0)));
            items.extend([json!(position), json!(r), json!(g), json!(b)]);
        }
        items.extend(rest);
    });
    if well_formed && steps > 1 {
        gradient["p"] = json!((stops - 1) * steps + 1);
    }
}

/// Calls `edit` on the static value or on every keyframe's start and end values.
fn map_property_values(property: &mut Value, edit: &mut dyn FnMut(&mut Value)) {
    let keyframed = is_animated(property);
    let Some(k) = property.get_mut("k") else {
        return;
    };
    match k {
        Value::Array(keyframes) if keyframed => {
            for keyframe in keyframes.iter_mut() {
                for key in ["s", "e"] {
                    if let Some(value) = keyframe.get_mut(key) {
                        edit(value);
                    }
                }
            }
        }
        static_value => edit(static_value),
    }
}

/// Multiplies a layer's opacity (`ks.o`, 0..=100, absent = 100) by `factor`.
fn scale_layer_opacity(layer: &mut Value, factor: f64) {
    let Some(transform) = layer.get_mut("ks").and_then(Value::as_object_mut) else {
        return;
    };
    let property = transform
        .entry("o")
        .or_insert_with(|| json!({"a": 0, "k": 100}));
    map_property_values(property, &mut |value| match value {
        Value::Array(items) => {
            if let Some(first) = items.first_mut() {
                *first = json!(first.as_f64().unwrap_or(100.0) * factor);
            }
        }
        other => *other = json!(other.as_f64().unwrap_or(100.0) * factor),
    });
}

/// Moves a layer's content by `offset` in its own coordinates (its anchor point moves the
/// other way), as lottie-web's feOffset does inside the layer's transform.
fn offset_layer(layer: &mut Value, offset: [f64; 2]) {
    let Some(transform) = layer.get_mut("ks").and_then(Value::as_object_mut) else {
        return;
    };
    let property = transform
        .entry("a")
        .or_insert_with(|| json!({"a": 0, "k": [0, 0, 0]}));
    map_property_values(property, &mut |value| {
        if let Some(items) = value.as_array_mut() {
            for (slot, delta) in items.iter_mut().zip(offset) {
                *slot = json!(slot.as_f64().unwrap_or(0.0) - delta);
            }
        }
    });
}

/// `#rrggbb` (a solid's colour) as 0..=1 channels.
fn parse_hex(hex: &str) -> Option<[f64; 3]> {
    let digits = hex.strip_prefix('#')?;
    if digits.len() != 6 || !digits.is_ascii() {
        return None;
    }
    let channel = |i: usize| {
        u8::from_str_radix(&digits[i * 2..i * 2 + 2], 16)
            .ok()
            .map(|v| f64::from(v) / 255.0)
    };
    Some([channel(0)?, channel(1)?, channel(2)?])
}

fn to_hex(colour: [f64; 3]) -> String {
    let [r, g, b] = colour.map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8);
    format!("#{r:02x}{g:02x}{b:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tint_maps_black_and_white_to_its_colours_and_grey_between() {
        let tint = ColourMap::Tint {
            black: [1.0, 0.0, 0.0],
            white: [0.0, 0.0, 1.0],
            amount: 1.0,
        };
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(tint.map([0.0, 0.0, 0.0]), [1.0, 0.0, 0.0]));
        assert!(close(tint.map([1.0, 1.0, 1.0]), [0.0, 0.0, 1.0]));
        // Pure red: a third of the linear light, shown in sRGB.
        let light = to_srgb(1.0 / 3.0);
        assert!(close(tint.map([1.0, 0.0, 0.0]), [1.0 - light, 0.0, light]));
    }

    #[test]
    fn a_template_without_effects_is_left_untouched() {
        let mut template = json!({"layers": [{"ty": 4, "nm": "a", "shapes": []}], "assets": []});
        let before = template.to_string();
        assert_eq!(lower_layer_effects(&mut template), EffectsReport::default());
        assert_eq!(template.to_string(), before);
    }

    #[test]
    fn templates_whose_effects_are_only_expression_controls_are_left_untouched() {
        // Both corpus files carry rig controllers (`Pseudo/…` groups) and nothing drawn.
        for name in [
            "gradient-emoji-named-fills-24fps.json",
            "expressions-ripple-precomps.json",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/corpus")
                .join(name);
            let mut template: Value =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            assert!(has_effects(&template), "{name} has effects");
            let before = template.to_string();
            assert_eq!(lower_layer_effects(&mut template), EffectsReport::default());
            assert_eq!(template.to_string(), before, "{name}");
        }
    }

    #[test]
    fn tritone_maps_black_grey_and_white_to_shadows_midtones_and_highlights() {
        let tritone = ColourMap::Tritone {
            highlights: [1.0, 1.0, 0.0],
            midtones: [0.0, 1.0, 0.0],
            shadows: [0.0, 0.0, 1.0],
        };
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(tritone.map([0.0, 0.0, 0.0]), [0.0, 0.0, 1.0]));
        assert!(close(tritone.map([1.0, 1.0, 1.0]), [1.0, 1.0, 0.0]));
        // A neutral grey is its own luminance: sRGB 0.5 is exactly the midtones.
        assert!(close(tritone.map([0.5, 0.5, 0.5]), [0.0, 1.0, 0.0]));
    }

    #[test]
    fn a_tinted_gradient_gets_intermediate_stops_mapped_from_its_interpolated_colours() {
        let tint = ColourMap::Tint {
            black: [0.0, 0.0, 0.0],
            white: [1.0, 1.0, 1.0],
            amount: 1.0,
        };
        // Red to blue with one opacity stop pair after the colour stops.
        let mut gradient =
            json!({"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1]}});
        recolour_gradient(&mut gradient, &tint);
        assert_eq!(gradient["p"], json!(1 + GRADIENT_SUBDIVISIONS));
        let values: Vec<f64> = gradient["k"]["k"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(values.len(), (1 + GRADIENT_SUBDIVISIONS) * 4 + 4);
        assert_eq!(&values[values.len() - 4..], &[0.0, 1.0, 1.0, 1.0]);
        // The middle stop: position 0.5, the tint of sRGB-interpolated (0.5, 0, 0.5).
        let middle = &values[GRADIENT_SUBDIVISIONS / 2 * 4..][..4];
        let expected = tint.map([0.5, 0.0, 0.5]);
        assert!((middle[0] - 0.5).abs() < 1e-9);
        assert!(middle[1..]
            .iter()
            .zip(expected)
            .all(|(a, b)| (a - b).abs() < 1e-9));
    }

    #[test]
    fn solid_colours_round_trip_through_hex() {
        assert_eq!(parse_hex("#ff8000").map(to_hex).as_deref(), Some("#ff8000"));
        assert_eq!(parse_hex("ff8000"), None);
        assert_eq!(parse_hex("#ff80é"), None);
    }
}
