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
//!
//! Blurs and drop shadows on a few layers of the root composition are not lowered here: the
//! render draws them on the layer's pixels, softness and animation included ([`rendered`]
//! says which; `render::layer_effects` draws them). Elsewhere a shadow is the copy above and a
//! blur is reported.
//!
//! Here the walk over compositions and layers; what an `ef` entry asks for is read in
//! `parameters`, the colour maps are in `colour_map` and written into layers by `recolour`.

mod colour_map;
mod parameters;
mod recolour;
pub mod rendered;

use colour_map::{parse_hex, to_hex, ColourMap};
use parameters::{DropShadow, Effect, DRAWN_BY_LOTTIE_WEB_ONLY};
use recolour::{offset_layer, recolour_shapes, scale_layer_opacity};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};

/// Layers copied into recoloured precomposition assets and drop shadows, per template. A
/// Fill on a precomp layer copies its asset (and the assets nested in it); real templates
/// copy tens of layers, while precomps reused at every nesting level would otherwise copy
/// exponentially many. Past the budget an effect is reported instead of drawn.
pub(crate) const MAX_EFFECT_LAYER_COPIES: usize = 5000;
/// Distinct effect warnings kept per template: a handful is normal; thousands of layers each
/// carrying an undrawn effect would otherwise make thousands of lines.
pub(crate) const MAX_EFFECT_WARNINGS: usize = 256;
/// Where the render draws blurs and soft shadows, for the warnings about the others.
pub(super) const RENDERED_WHERE: &str =
    "blurs and soft shadows are drawn on up to 4 shown layers of the root composition \
     outside track mattes";
/// Characters of a layer or effect name quoted in a warning (names are the caller's).
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;

/// The layer and the effect a warning is about, by their names (cut to
/// [`MAX_NAME_CHARS_IN_WARNINGS`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct EffectOn<'a> {
    pub(super) layer: &'a str,
    pub(super) effect: &'a str,
}

impl EffectOn<'_> {
    /// The warning "layer 'L': effect 'E' {what}".
    pub(super) fn says(self, what: impl std::fmt::Display) -> String {
        format!("layer '{}': effect '{}' {what}", self.layer, self.effect)
    }
}

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
        lowering.lower_composition(layers, Composition::Root);
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

/// Which composition a list of layers is: the root's blurs and shadows may be drawn by the
/// render ([`rendered`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Composition {
    Root,
    Precomposition,
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
    fn lower_composition(&mut self, layers: &mut Vec<Value>, composition: Composition) {
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
                self.lower_composition(&mut inner, Composition::Precomposition);
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
        let rendered = match composition {
            Composition::Root => rendered::rendered_effect_layers(layers),
            Composition::Precomposition => Vec::new(),
        };
        let mut lowered = Vec::with_capacity(layers.len());
        for (index, layer) in std::mem::take(layers).into_iter().enumerate() {
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            match layer_effects(&layer) {
                Some(effects) if !effects.is_empty() && !hidden => {
                    let effects = effects.clone();
                    let drawn_by_render = rendered.contains(&index);
                    lowered.extend(self.lower_layer(
                        layer,
                        &effects,
                        &mut next_index,
                        drawn_by_render,
                    ));
                }
                _ => lowered.push(layer),
            }
        }
        *layers = lowered;
    }

    /// The layer with its effects applied in order, followed by the shadow copies drawn below
    /// it. `drawn_by_render`: its blurs and shadows are left for the render ([`rendered`]).
    fn lower_layer(
        &mut self,
        layer: Value,
        effects: &[Value],
        next_index: &mut i64,
        drawn_by_render: bool,
    ) -> Vec<Value> {
        let layer_name = name_of(&layer);
        let mut parts = vec![layer];
        for effect in effects {
            if drawn_by_render && rendered::rendered_effect(effect).is_some() {
                self.report.lowered_effects += 1;
                continue;
            }
            let effect_name = name_of(effect);
            let on = EffectOn {
                layer: &layer_name,
                effect: &effect_name,
            };
            match self.classify(effect, on) {
                Effect::Control => {}
                Effect::NotDrawn => {
                    let match_name =
                        truncated(effect.get("mn").and_then(Value::as_str).unwrap_or_default());
                    let ty = effect.get("ty").and_then(Value::as_i64).unwrap_or(-1);
                    let why = if ty == rendered::GAUSSIAN_BLUR {
                        RENDERED_WHERE
                    } else if DRAWN_BY_LOTTIE_WEB_ONLY.contains(&ty) {
                        "lottie-web draws it; the renderer cannot"
                    } else {
                        "lottie-web does not draw it either"
                    };
                    self.warn(on.says(format_args!("({match_name}) is not drawn ({why})")));
                }
                Effect::Colour { map, opacity } => {
                    let mut drawn = true;
                    for part in parts.iter_mut() {
                        drawn &= self.recolour_layer(part, &map, on);
                        if opacity < 1.0 {
                            scale_layer_opacity(part, opacity);
                        }
                    }
                    if drawn {
                        self.report.lowered_effects += 1;
                    }
                }
                Effect::Shadow(shadow) => {
                    let shadows = self.drop_shadows(&parts, shadow, on);
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

    /// Applies `map` to the colours `layer` draws; false (and a warning) when part of it is
    /// left as it was.
    fn recolour_layer(&mut self, layer: &mut Value, map: &ColourMap, on: EffectOn<'_>) -> bool {
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
                    self.warn(
                        on.says("has an animated colour on a solid, drawn at its first value"),
                    );
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
            Some(0) => self.recolour_precomp(layer, map, on),
            Some(2) => {
                self.warn(on.says("is not drawn on an image layer"));
                false
            }
            // Nulls and hidden text draw nothing; other types are reported by the fence.
            _ => true,
        }
    }

    /// Points a precomp layer at a recoloured copy of its asset (nested precomps copied too).
    fn recolour_precomp(&mut self, layer: &mut Value, map: &ColourMap, on: EffectOn<'_>) -> bool {
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
            self.warn(on.says(format_args!(
                "is not drawn (its precomposition copies exceed {MAX_EFFECT_LAYER_COPIES} layers)"
            )));
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
                drawn &= self.recolour_layer(inner_layer, map, on);
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
        on: EffectOn<'_>,
    ) -> Vec<Value> {
        let drawable = parts.iter().all(|part| {
            matches!(part.get("ty").and_then(Value::as_i64), Some(1 | 4))
                && part.get("td").is_none()
                && part.get("tt").is_none()
        });
        if !drawable || parts.len() > self.copies_left {
            self.warn(on.says(
                "is not drawn (drop shadows are drawn for shape and solid layers outside track mattes)"
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
                self.recolour_layer(&mut copy, &fill, on);
                scale_layer_opacity(&mut copy, shadow.opacity);
                offset_layer(&mut copy, shadow.offset);
                if let Some(object) = copy.as_object_mut() {
                    object.remove("ef");
                    object.insert(
                        "nm".to_owned(),
                        json!(format!("{} (drop shadow)", on.layer)),
                    );
                }
                copy
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
