//! Blurs and drop shadows drawn on pixels. rlottie ignores layer effects; the lowering writes
//! the colour effects into colours, but a blur or a soft shadow is a filter on what the layer
//! draws. For the layers of the root composition that ask for one
//! ([`crate::lottie::lowering::effects::rendered`]), the composition is drawn in parts: each
//! run of other layers, and each such layer alone, is a variant of the template with every
//! other root layer turned into a null (which draws nothing and still moves its children),
//! rendered by its own rlottie `Animation`. The layer's pixels go through its filters
//! ([`filter`], parameters read at each frame by [`parameters`]), and the parts are composited
//! bottom up, source-over, premultiplied: what is beneath and above the layer is rlottie's
//! picture untouched.
//!
//! A filtered layer is rendered on a canvas grown by the filter's reach (at most
//! [`MAX_EFFECT_MARGIN_PIXELS`]) on every side, so that what it draws outside the frame blurs
//! into it as it does in lottie-web: a null at the root carries the fit into the output and
//! the margin, and parents every root layer without a parent.
//!
//! What it costs is counted before a frame is drawn: [`MAX_BLURRED_PIXELS_PER_FRAME`].

mod filter;
mod parameters;

use super::RenderError;
use crate::lottie::lowering::effects::rendered::{self, RenderedEffect};
use filter::{Image, Rect};
use parameters::{FrameFilter, RootLayers};
use rlottie::{Animation, Bgra, Size, Surface};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// Pixels the filters of one frame may run over, each filter of each layer counting the
/// whole canvas it is drawn on (the output grown by its margin). A blur of a full 1080² frame
/// costs about as much as rlottie drawing a busy one (`lottie-render bench`, docs/performance.md):
/// 16 million is eight full-frame filters at 1080² with their margins, or four at the largest
/// output (1920², margins of 3σ); a template past it fails at once, not retryable, before any
/// frame is drawn, instead of running a worker's whole budget down.
pub const MAX_BLURRED_PIXELS_PER_FRAME: u64 = 16_000_000;

/// The widest margin a filtered layer is drawn with, in output pixels: 3σ of a blurriness of
/// 280 at the output's own scale. Past it what lies further outside the frame is not blurred
/// into it (a blur that wide is all but flat anyway).
pub const MAX_EFFECT_MARGIN_PIXELS: usize = 256;

/// Megapixels a job of `frames` frames of `width` × `height` is charged for `filters` filters
/// drawn on pixels, counted as output megapixels in its deadline and CPU budget: each filter
/// over its layer's canvas grown by the widest margin. A filtered megapixel costs a worker
/// some 55 ms of CPU with the extra rlottie renders and the composite beside it
/// (docs/performance.md), an output megapixel is given 250 ms: one for one keeps the budget
/// honest without a second constant.
pub fn charged_megapixels(filters: usize, width: u32, height: u32, frames: u32) -> f64 {
    let grown = |side: u32| f64::from(side) + 2.0 * MAX_EFFECT_MARGIN_PIXELS as f64;
    filters as f64 * grown(width) * grown(height) * f64::from(frames) / 1e6
}

/// One part of the composition: a template variant and, for a filtered layer, its filters.
struct Part {
    json: Arc<String>,
    filtered: Option<Filtered>,
}

/// A filtered layer's canvas margin and its filters at every output frame.
struct Filtered {
    margin: usize,
    frames: Vec<Vec<FrameFilter>>,
}

/// The composition in parts, bottom first, for frames `width` × `height`.
pub struct LayerEffects {
    parts: Vec<Part>,
    width: usize,
    height: usize,
}

impl std::fmt::Debug for LayerEffects {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LayerEffects")
            .field("parts", &self.parts.len())
            .finish()
    }
}

/// The refusal of filters over [`MAX_BLURRED_PIXELS_PER_FRAME`] (`pixels` of them a frame).
fn over_budget(pixels: u64, filtered: &[usize], width: usize, height: usize) -> RenderError {
    RenderError::EffectsOverBudget(format!(
        "the blurs and shadows of {} layers run over {pixels} pixels a frame at \
         {width}×{height}, more than {MAX_BLURRED_PIXELS_PER_FRAME}; render smaller, or \
         blur fewer layers",
        filtered.len()
    ))
}

/// The parts `json` (lowered, retimed, the output's frame 0 at its in point) is drawn in at
/// `width` × `height` for `frame_count` frames; `None` when no layer needs them. Fails when
/// the filters would run over more than [`MAX_BLURRED_PIXELS_PER_FRAME`] pixels a frame.
pub fn plan(
    json: &Value,
    width: usize,
    height: usize,
    frame_count: u32,
) -> Result<Option<Arc<LayerEffects>>, RenderError> {
    let Some(layers) = json.get("layers").and_then(Value::as_array) else {
        return Ok(None);
    };
    let filtered = rendered::rendered_effect_layers(layers);
    if filtered.is_empty() {
        return Ok(None);
    }
    let (fit, offset) = fit(json, width, height);
    let root = RootLayers { layers, fit };
    let in_point = json.get("ip").and_then(Value::as_f64).unwrap_or(0.0);
    // Each filtered layer, with its filters at every frame.
    let mut filters = Vec::with_capacity(filtered.len());
    let mut blurred_pixels = 0u64;
    for &index in &filtered {
        let effects: Vec<RenderedEffect<'_>> = layers[index]
            .get("ef")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(rendered::rendered_effect)
            .collect();
        // The least these filters cost (no margin), checked before their parameters are read
        // at every frame: a layer's effects are not counted by anything else, so thousands of
        // them must be refused before that work, not after.
        let least = (width * height) as u64 * effects.len() as u64;
        if blurred_pixels + least > MAX_BLURRED_PIXELS_PER_FRAME {
            return Err(over_budget(
                blurred_pixels + least,
                &filtered,
                width,
                height,
            ));
        }
        let frames: Vec<Vec<FrameFilter>> = (0..frame_count)
            .map(|frame| {
                let time = in_point + f64::from(frame);
                effects
                    .iter()
                    .filter_map(|effect| root.filter_at(index, *effect, time))
                    .filter(|filter| !filter.changes_nothing())
                    .collect()
            })
            .collect();
        let margin = frames
            .iter()
            .map(|filters| filter::reach(filters))
            .max()
            .unwrap_or(0)
            .min(MAX_EFFECT_MARGIN_PIXELS);
        let canvas = (width + 2 * margin) as u64 * (height + 2 * margin) as u64;
        blurred_pixels += canvas * effects.len() as u64;
        filters.push(Filtered { margin, frames });
    }
    if blurred_pixels > MAX_BLURRED_PIXELS_PER_FRAME {
        return Err(over_budget(blurred_pixels, &filtered, width, height));
    }
    // The parts, top first: a run of other layers, the filtered layer, …
    let mut parts = Vec::new();
    let mut next = 0;
    for (&index, filtered_layer) in filtered.iter().zip(filters) {
        if index > next {
            parts.push(Part {
                json: Arc::new(variant(json, next..index, None)),
                filtered: None,
            });
        }
        let canvas = Canvas {
            margin: filtered_layer.margin,
            fit,
            offset,
            width,
            height,
        };
        parts.push(Part {
            json: Arc::new(variant(json, index..index + 1, Some(canvas))),
            filtered: Some(filtered_layer),
        });
        next = index + 1;
    }
    if next < layers.len() {
        parts.push(Part {
            json: Arc::new(variant(json, next..layers.len(), None)),
            filtered: None,
        });
    }
    parts.reverse();
    Ok(Some(Arc::new(LayerEffects {
        parts,
        width,
        height,
    })))
}

/// rlottie's fit of the composition into `width` × `height` (contain, centred): output pixels
/// per composition unit and the offset of the composition's origin.
fn fit(json: &Value, width: usize, height: usize) -> (f64, [f64; 2]) {
    let size = |key: &str| {
        json.get(key)
            .and_then(Value::as_f64)
            .filter(|size| *size > 0.0)
            .unwrap_or(1.0)
    };
    let (composition_width, composition_height) = (size("w"), size("h"));
    let scale = (width as f64 / composition_width).min(height as f64 / composition_height);
    let offset = [
        (width as f64 - composition_width * scale) / 2.0,
        (height as f64 - composition_height * scale) / 2.0,
    ];
    (scale, offset)
}

/// A filtered layer's canvas: the output grown by `margin`, with the output's fit.
#[derive(Debug, Clone, Copy)]
struct Canvas {
    margin: usize,
    fit: f64,
    offset: [f64; 2],
    width: usize,
    height: usize,
}

/// `json` with only the root layers in `shown` drawn (the others nulls) and only the assets
/// they use; on `canvas` when given (its size, the fit written into a root null).
fn variant(json: &Value, shown: std::ops::Range<usize>, canvas: Option<Canvas>) -> String {
    let mut variant = Map::new();
    let Some(root) = json.as_object() else {
        return json.to_string();
    };
    for (key, value) in root {
        if key != "layers" && key != "assets" {
            variant.insert(key.clone(), value.clone());
        }
    }
    let layers = root.get("layers").and_then(Value::as_array);
    let mut kept: Vec<Value> = layers
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(index, layer)| {
            if shown.contains(&index) {
                layer.clone()
            } else {
                as_null(layer)
            }
        })
        .collect();
    let assets = root.get("assets").and_then(Value::as_array);
    variant.insert(
        "assets".to_owned(),
        Value::Array(used_assets(
            assets.map(Vec::as_slice).unwrap_or_default(),
            &kept,
        )),
    );
    if let Some(canvas) = canvas {
        put_on_canvas(&mut variant, &mut kept, canvas);
    }
    variant.insert("layers".to_owned(), Value::Array(kept));
    Value::Object(variant).to_string()
}

/// A null in `layer`'s place: its transform, parent, index and timing, nothing drawn.
fn as_null(layer: &Value) -> Value {
    let mut null = Map::new();
    for key in ["ind", "parent", "ks", "ip", "op", "st", "sr", "nm", "ddd"] {
        if let Some(value) = layer.get(key) {
            null.insert(key.to_owned(), value.clone());
        }
    }
    null.insert("ty".to_owned(), json!(3));
    Value::Object(null)
}

/// The assets `layers` draw from, directly or through the precompositions they show.
fn used_assets(assets: &[Value], layers: &[Value]) -> Vec<Value> {
    let id_of = |asset: &Value| asset.get("id").and_then(Value::as_str).map(str::to_owned);
    let mut used = HashSet::new();
    let mut pending: Vec<&Value> = layers.iter().collect();
    while let Some(layer) = pending.pop() {
        let Some(id) = layer.get("refId").and_then(Value::as_str) else {
            continue;
        };
        if !used.insert(id.to_owned()) {
            continue;
        }
        if let Some(asset) = assets
            .iter()
            .find(|asset| id_of(asset).as_deref() == Some(id))
        {
            pending.extend(
                asset
                    .get("layers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten(),
            );
        }
    }
    assets
        .iter()
        .filter(|asset| id_of(asset).is_some_and(|id| used.contains(&id)))
        .cloned()
        .collect()
}

/// Sizes the root to `canvas` in output pixels and adds a null at the root that scales the
/// composition by the fit and moves it by the offset plus the margin; every root layer
/// without a parent (or with one that does not exist) becomes its child.
fn put_on_canvas(root: &mut Map<String, Value>, layers: &mut Vec<Value>, canvas: Canvas) {
    let indices: HashSet<i64> = layers
        .iter()
        .filter_map(|layer| layer.get("ind").and_then(Value::as_f64))
        .map(|ind| ind.floor() as i64)
        .collect();
    let null_index = indices.iter().max().copied().unwrap_or(0).saturating_add(1);
    let margin = canvas.margin as f64;
    root.insert("w".to_owned(), json!(canvas.width + 2 * canvas.margin));
    root.insert("h".to_owned(), json!(canvas.height + 2 * canvas.margin));
    for layer in layers.iter_mut() {
        let parented = layer
            .get("parent")
            .and_then(Value::as_f64)
            .is_some_and(|parent| parent.fract() == 0.0 && indices.contains(&(parent as i64)));
        if let (false, Some(object)) = (parented, layer.as_object_mut()) {
            object.insert("parent".to_owned(), json!(null_index));
        }
    }
    let scale = canvas.fit * 100.0;
    let null = json!({
        "ty": 3, "ind": null_index, "nm": "lottie-render canvas", "sr": 1, "st": 0,
        "ip": root.get("ip").cloned().unwrap_or(json!(0)),
        "op": root.get("op").cloned().unwrap_or(json!(1)),
        "ks": {
            "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "a": {"a": 0, "k": [0, 0, 0]},
            "p": {"a": 0, "k": [canvas.offset[0] + margin, canvas.offset[1] + margin, 0]},
            "s": {"a": 0, "k": [scale, scale, 100]}
        }
    });
    // Appended: a parent may come after its children in the list.
    layers.push(null);
}

/// Draws frames of a [`LayerEffects`] on one thread: an `Animation` and a surface per part,
/// the filter's buffers and the composited frame, all reused.
pub struct PartsRenderer {
    effects: Arc<LayerEffects>,
    parts: Vec<(Animation, Surface)>,
    image: Image,
    scratch: Vec<[f32; 4]>,
    frame: Vec<Bgra>,
}

impl PartsRenderer {
    /// Loads every part into rlottie; `None` from rlottie means it refused one.
    pub fn new(effects: Arc<LayerEffects>) -> Result<PartsRenderer, RenderError> {
        let mut parts = Vec::with_capacity(effects.parts.len());
        for part in &effects.parts {
            let animation = Animation::from_data(part.json.as_bytes(), "", super::NO_RESOURCE_DIR)
                .ok_or(RenderError::RendererRefused)?;
            let margin = part.filtered.as_ref().map_or(0, |filtered| filtered.margin);
            let size = Size {
                width: effects.width + 2 * margin,
                height: effects.height + 2 * margin,
            };
            parts.push((animation, Surface::new(size)));
        }
        let frame = vec![transparent(); effects.width * effects.height];
        Ok(PartsRenderer {
            effects,
            parts,
            image: Image {
                width: 0,
                height: 0,
                pixels: Vec::new(),
            },
            scratch: Vec::new(),
            frame,
        })
    }

    /// The frame rendered last (transparent before the first).
    pub(crate) fn last_frame(&self) -> &[Bgra] {
        &self.frame
    }

    /// Renders frame `index`: premultiplied BGRA, row-major, valid until the next call.
    pub fn render(&mut self, index: u32) -> &[Bgra] {
        self.frame.fill(transparent());
        let (width, height) = (self.effects.width, self.effects.height);
        for (part, (animation, surface)) in self.effects.parts.iter().zip(&mut self.parts) {
            animation.render(index as usize, surface);
            let Some(filtered) = &part.filtered else {
                over(
                    &mut self.frame,
                    surface.data(),
                    width,
                    (0, 0),
                    full(width, height),
                );
                continue;
            };
            let filters = filtered
                .frames
                .get(index as usize)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let canvas_width = surface.width();
            let Some(content) = filter::content_bounds(surface.data(), canvas_width) else {
                continue;
            };
            let margin = filtered.margin;
            // The frame's rectangle on the canvas.
            let shown = Rect {
                x: margin,
                y: margin,
                width,
                height,
            };
            if filters.is_empty() {
                over(
                    &mut self.frame,
                    surface.data(),
                    canvas_width,
                    (margin, margin),
                    shown,
                );
                continue;
            }
            let region = filter::grown(
                content,
                filter::reach(filters),
                canvas_width,
                surface.height(),
            );
            filter::to_linear(surface.data(), canvas_width, region, &mut self.image);
            for frame_filter in filters {
                filter::apply(frame_filter, &mut self.image, &mut self.scratch);
            }
            over_linear(&mut self.frame, &self.image, region, shown);
        }
        &self.frame
    }
}

fn transparent() -> Bgra {
    Bgra {
        b: 0,
        g: 0,
        r: 0,
        a: 0,
    }
}

fn full(width: usize, height: usize) -> Rect {
    Rect {
        x: 0,
        y: 0,
        width,
        height,
    }
}

/// `src` over `dst` for one premultiplied 8-bit channel.
fn over_channel(src: u8, dst: u8, src_alpha: u8) -> u8 {
    let kept = (u32::from(dst) * u32::from(255 - src_alpha) + 127) / 255;
    (u32::from(src) + kept).min(255) as u8
}

fn over_pixel(src: Bgra, dst: &mut Bgra) {
    if src.a == 255 {
        *dst = src;
    } else if src.a != 0 || src.r != 0 || src.g != 0 || src.b != 0 {
        *dst = Bgra {
            b: over_channel(src.b, dst.b, src.a),
            g: over_channel(src.g, dst.g, src.a),
            r: over_channel(src.r, dst.r, src.a),
            a: over_channel(src.a, dst.a, src.a),
        };
    }
}

/// The part of `surface` (`surface_width` wide) in `shown` over `frame`, whose origin lies at
/// `origin` on the surface.
fn over(
    frame: &mut [Bgra],
    surface: &[Bgra],
    surface_width: usize,
    origin: (usize, usize),
    shown: Rect,
) {
    let width = shown.width;
    for y in 0..shown.height {
        let source_start = (origin.1 + y) * surface_width + origin.0;
        let source = &surface[source_start..source_start + width];
        for (dst, src) in frame[y * width..(y + 1) * width].iter_mut().zip(source) {
            over_pixel(*src, dst);
        }
    }
}

/// The filtered `image`, which covers `region` of the canvas, over `frame`, which shows
/// `shown` of it.
fn over_linear(frame: &mut [Bgra], image: &Image, region: Rect, shown: Rect) {
    let left = region.x.max(shown.x);
    let right = (region.x + region.width).min(shown.x + shown.width);
    let top = region.y.max(shown.y);
    let bottom = (region.y + region.height).min(shown.y + shown.height);
    for y in top..bottom {
        for x in left..right {
            let pixel = image.pixels[(y - region.y) * image.width + (x - region.x)];
            over_pixel(
                filter::to_srgb(pixel),
                &mut frame[(y - shown.y) * shown.width + (x - shown.x)],
            );
        }
    }
}
