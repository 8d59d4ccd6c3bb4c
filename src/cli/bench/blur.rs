//! What a blurred layer costs per frame (issue 46): a template of a full-canvas background
//! beneath a rotating card, rendered on one thread with the card blurred (blurriness 20 and
//! 100, σ 6 and 30 composition pixels) and without, at the bench's size; the difference per
//! frame is the extra rlottie renders of the parts, the filter and the composite.

use super::measure::{measure, median_of, Measure};
use super::{output_spec, render_single_threaded, Bench};
use crate::render;
use crate::spec::{Format, Modifications};
use serde_json::{json, Value};

/// Frames of the blur template (two seconds at 30 fps).
const FRAMES: u32 = 60;

/// The template: a card (two thirds of the canvas, rotating once) over a background, the card
/// with `effects`.
fn template(effects: Value) -> Vec<u8> {
    let transform = |rotation: Value| {
        json!({"o": {"a": 0, "k": 100}, "r": rotation, "p": {"a": 0, "k": [540, 540, 0]},
               "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}})
    };
    let rectangle = |size: f64, colour: [f64; 3]| {
        json!([{"ty": "gr", "it": [
            {"ty": "rc", "d": 1, "s": {"a": 0, "k": [size, size]}, "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 40}},
            {"ty": "fl", "c": {"a": 0, "k": [colour[0], colour[1], colour[2], 1]}, "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
        ]}])
    };
    let spin = json!({"a": 1, "k": [{"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
                                      {"t": FRAMES, "s": [360]}]});
    json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": FRAMES, "w": 1080, "h": 1080, "layers": [
        {"ty": 4, "ind": 1, "nm": "card", "ks": transform(spin), "ip": 0, "op": FRAMES, "st": 0,
         "ef": effects, "shapes": rectangle(720.0, [0.9, 0.3, 0.1])},
        {"ty": 4, "ind": 2, "nm": "background", "ks": transform(json!({"a": 0, "k": 0})),
         "ip": 0, "op": FRAMES, "st": 0, "shapes": rectangle(1080.0, [0.1, 0.4, 0.8])}
    ]})
    .to_string()
    .into_bytes()
}

fn blur(blurriness: f64) -> Value {
    json!([{"ty": 29, "nm": "Gaussian Blur", "mn": "ADBE Gaussian Blur 2", "ef": [
        {"ty": 0, "nm": "Blurriness", "v": {"a": 0, "k": blurriness}},
        {"ty": 7, "nm": "Blur Dimensions", "v": {"a": 0, "k": 1}},
        {"ty": 7, "nm": "Repeat Edge Pixels", "v": {"a": 0, "k": 0}}
    ]}])
}

impl Bench<'_> {
    /// Prints the per-frame cost of rendering the card sharp and blurred.
    pub(super) fn blurred_layer(&self) -> Result<(), String> {
        let size = self.args.size;
        println!("blurred layer: a card over a background, {FRAMES} frames at {size}², one thread");
        let spec = output_spec(Format::Mp4, size, 30)?;
        let per_frame = |cost: &Measure| cost.wall.as_secs_f64() * 1000.0 / f64::from(FRAMES);
        let mut sharp_ms = None;
        for (label, effects) in [
            ("sharp", json!([])),
            ("blurriness 20 (σ 6 at 1080)", blur(20.0)),
            ("blurriness 100 (σ 30 at 1080)", blur(100.0)),
        ] {
            let bytes = template(effects);
            let fonts = crate::lottie::lowering::text::fonts::FontBook::default();
            let prepared = render::prepare(&bytes, &Modifications::default(), spec, &fonts)
                .map_err(|e| e.to_string())?;
            let cost = median_of(self.repeat, || {
                measure(|| render_single_threaded(&prepared)).map(|((), cost)| cost)
            })?;
            let ms = per_frame(&cost);
            let extra = sharp_ms
                .map(|sharp: f64| format!("  (+{:.1} ms a frame)", ms - sharp))
                .unwrap_or_default();
            println!("  {label:<30} {ms:>7.1} ms a frame{extra}");
            sharp_ms.get_or_insert(ms);
        }
        Ok(())
    }
}
