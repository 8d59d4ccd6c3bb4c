//! An effect's parameters at one frame, in output pixels: keyframes interpolated as lottie-web
//! reads them (a layer's properties at the composition's frame minus its start time `st`;
//! hold keyframes; the Bézier easing of the out and in tangents, first axis: the lowering has
//! split per-axis easing into linear keyframes already), and the layer's transform with its
//! parents' (rotation and scale) times the fit into the output, since lottie-web's filters
//! work in the layer's own coordinates.

use crate::lottie::lowering::bezier_ease;
use crate::lottie::lowering::effects::rendered::RenderedEffect;
use serde_json::Value;

/// lottie-web's blurriness to standard deviation (`SVGGaussianBlurEffect`: "empirical value,
/// matching AE's blur appearance").
const BLURRINESS_TO_SIGMA: f64 = 0.3;
/// lottie-web's drop shadow softness to standard deviation (`SVGDropShadowEffect`).
const SOFTNESS_TO_SIGMA: f64 = 0.25;
/// Standard deviations past which a Gaussian's weight is negligible (0.3 % of it lies beyond):
/// how far a blur reaches.
pub(super) const SIGMAS_OF_REACH: f64 = 3.0;

/// One effect of a layer at one frame, in output pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FrameFilter {
    /// Standard deviations along x and y.
    Blur { sigma: [f64; 2] },
    /// The layer's alpha blurred by `sigma`, moved by `offset`, in `colour` (sRGB, straight)
    /// at `opacity`, drawn beneath the layer.
    Shadow {
        colour: [f64; 3],
        opacity: f64,
        offset: [f64; 2],
        sigma: [f64; 2],
    },
}

/// A standard deviation below which a blur moves no level.
const NO_BLUR: f64 = 0.05;

impl FrameFilter {
    /// Whether the filter leaves the layer as it is (a blurriness of 0, a transparent shadow).
    pub(crate) fn changes_nothing(&self) -> bool {
        match self {
            FrameFilter::Blur { sigma } => sigma[0] <= NO_BLUR && sigma[1] <= NO_BLUR,
            FrameFilter::Shadow { opacity, .. } => *opacity <= 0.0,
        }
    }

    /// How far beyond its input this filter draws, in pixels.
    pub(crate) fn reach(&self) -> f64 {
        match self {
            FrameFilter::Blur { sigma } => SIGMAS_OF_REACH * sigma[0].max(sigma[1]),
            FrameFilter::Shadow { offset, sigma, .. } => {
                SIGMAS_OF_REACH * sigma[0].max(sigma[1]) + offset[0].hypot(offset[1])
            }
        }
    }
}

/// A 2×2 linear map, rows first.
pub(super) type Linear = [[f64; 2]; 2];

fn multiply(a: Linear, b: Linear) -> Linear {
    [
        [
            a[0][0] * b[0][0] + a[0][1] * b[1][0],
            a[0][0] * b[0][1] + a[0][1] * b[1][1],
        ],
        [
            a[1][0] * b[0][0] + a[1][1] * b[1][0],
            a[1][0] * b[0][1] + a[1][1] * b[1][1],
        ],
    ]
}

/// The numbers of a value (a number, or an array of numbers), finite ones only.
fn numbers(value: &Value) -> Option<Vec<f64>> {
    match value {
        Value::Number(number) => number.as_f64().filter(|n| n.is_finite()).map(|n| vec![n]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_f64().filter(|n| n.is_finite()))
            .collect(),
        _ => None,
    }
}

/// The first number of an easing tangent's `x` or `y` (a number or a list per axis).
fn tangent(keyframe: &Value, side: &str, axis: &str) -> Option<f64> {
    let value = keyframe.get(side)?.get(axis)?;
    match value {
        Value::Array(items) => items.first()?.as_f64(),
        other => other.as_f64(),
    }
    .filter(|n| n.is_finite())
}

/// A property's (`{ "a", "k" }`) value at `time` (in the frames its keyframes are in).
pub(super) fn value_at(property: &Value, time: f64) -> Option<Vec<f64>> {
    let k = property.get("k")?;
    let keyframes = match k.as_array() {
        Some(items) if items.first().is_some_and(Value::is_object) => items,
        _ => return numbers(k),
    };
    let time_of = |keyframe: &Value| keyframe.get("t").and_then(Value::as_f64);
    let start_of = |keyframe: &Value| keyframe.get("s").and_then(numbers);
    let first = keyframes.first()?;
    if time_of(first).is_none_or(|t| time <= t) {
        return start_of(first);
    }
    for pair in keyframes.windows(2) {
        let (keyframe, next) = (&pair[0], &pair[1]);
        let (Some(from), Some(to)) = (time_of(keyframe), time_of(next)) else {
            return start_of(keyframe);
        };
        if time >= to {
            continue;
        }
        let start = start_of(keyframe)?;
        let hold = keyframe.get("h").and_then(Value::as_i64) == Some(1);
        let end = keyframe
            .get("e")
            .and_then(numbers)
            .or_else(|| start_of(next));
        let (false, Some(end)) = (hold, end) else {
            return Some(start);
        };
        let progress = if to > from {
            (time - from) / (to - from)
        } else {
            1.0
        };
        let eased = match (
            tangent(keyframe, "o", "x"),
            tangent(keyframe, "o", "y"),
            tangent(keyframe, "i", "x"),
            tangent(keyframe, "i", "y"),
        ) {
            (Some(x1), Some(y1), Some(x2), Some(y2)) => bezier_ease(x1, y1, x2, y2, progress),
            _ => progress,
        };
        return Some(
            start
                .iter()
                .zip(&end)
                .map(|(a, b)| a + (b - a) * eased)
                .collect(),
        );
    }
    // Past the last keyframe: its start value, or where the one before it ended.
    let last = keyframes.last()?;
    start_of(last).or_else(|| {
        keyframes
            .iter()
            .rev()
            .find_map(|keyframe| keyframe.get("e").and_then(numbers))
    })
}

fn scalar_at(property: Option<&Value>, time: f64, default: f64) -> f64 {
    property
        .and_then(|property| value_at(property, time))
        .and_then(|values| values.first().copied())
        .unwrap_or(default)
}

/// The root composition's layers, for their transforms at a frame.
pub(super) struct RootLayers<'a> {
    pub(super) layers: &'a [Value],
    /// Output pixels per composition unit.
    pub(super) fit: f64,
}

impl RootLayers<'_> {
    /// The time `layer`'s own properties are read at when the composition shows `frame`.
    fn local_time(layer: &Value, frame: f64) -> f64 {
        frame - layer.get("st").and_then(Value::as_f64).unwrap_or(0.0)
    }

    /// Layer `index`'s rotation and scale with its parents', then the fit, at `frame`.
    pub(super) fn to_output(&self, index: usize, frame: f64) -> Linear {
        let mut linear = [[self.fit, 0.0], [0.0, self.fit]];
        let mut chain = Vec::new();
        let mut current = self.layers.get(index);
        // A parent chain is at most as long as the list (a cycle stops there).
        while let Some(layer) = current.filter(|_| chain.len() < self.layers.len()) {
            chain.push(layer);
            current = layer
                .get("parent")
                .and_then(Value::as_f64)
                .and_then(|parent| {
                    self.layers
                        .iter()
                        .find(|other| other.get("ind").and_then(Value::as_f64) == Some(parent))
                });
        }
        // The outermost parent first: output = fit × parent × … × layer.
        for layer in chain.iter().rev() {
            linear = multiply(linear, own_linear(layer, Self::local_time(layer, frame)));
        }
        linear
    }

    /// `effect` (of layer `index`) at composition frame `frame`, in output pixels.
    pub(super) fn filter_at(
        &self,
        index: usize,
        effect: RenderedEffect<'_>,
        frame: f64,
    ) -> Option<FrameFilter> {
        let layer = self.layers.get(index)?;
        let time = Self::local_time(layer, frame);
        let linear = self.to_output(index, frame);
        // The covariance diag(σh², σv²) in the layer's coordinates, seen in the output.
        let spread = |sigma_h: f64, sigma_v: f64| -> [f64; 2] {
            let axis = |row: [f64; 2]| {
                ((row[0] * sigma_h).powi(2) + (row[1] * sigma_v).powi(2))
                    .sqrt()
                    .min(MAX_SIGMA_PIXELS)
            };
            [axis(linear[0]), axis(linear[1])]
        };
        Some(match effect {
            RenderedEffect::Blur {
                blurriness,
                dimensions,
            } => {
                let sigma = BLURRINESS_TO_SIGMA * scalar_at(blurriness, time, 0.0).max(0.0);
                // 1 both, 2 horizontal only, 3 vertical only (lottie-web's mapping).
                let dimensions = scalar_at(dimensions, time, 1.0).round();
                let horizontal = if dimensions == 3.0 { 0.0 } else { sigma };
                let vertical = if dimensions == 2.0 { 0.0 } else { sigma };
                FrameFilter::Blur {
                    sigma: spread(horizontal, vertical),
                }
            }
            RenderedEffect::Shadow {
                colour,
                opacity,
                direction,
                distance,
                softness,
            } => {
                let colour = colour
                    .and_then(|property| value_at(property, time))
                    .unwrap_or_default();
                let channel = |i: usize| colour.get(i).copied().unwrap_or(0.0).clamp(0.0, 1.0);
                let angle = (scalar_at(direction, time, 0.0) - 90.0).to_radians();
                let distance =
                    scalar_at(distance, time, 0.0).clamp(-MAX_SIGMA_PIXELS, MAX_SIGMA_PIXELS);
                let (dx, dy) = (distance * angle.cos(), distance * angle.sin());
                let offset = [
                    (linear[0][0] * dx + linear[0][1] * dy)
                        .clamp(-MAX_SIGMA_PIXELS, MAX_SIGMA_PIXELS),
                    (linear[1][0] * dx + linear[1][1] * dy)
                        .clamp(-MAX_SIGMA_PIXELS, MAX_SIGMA_PIXELS),
                ];
                let sigma = SOFTNESS_TO_SIGMA * scalar_at(softness, time, 0.0).max(0.0);
                FrameFilter::Shadow {
                    colour: [channel(0), channel(1), channel(2)],
                    opacity: (scalar_at(opacity, time, 255.0) / 255.0).clamp(0.0, 1.0),
                    offset,
                    sigma: spread(sigma, sigma),
                }
            }
        })
    }
}

/// A standard deviation (and a shadow's distance) in output pixels past which nothing changes
/// that anyone could see at the largest output (1920 pixels): the blur is flat, the shadow
/// gone. It keeps the filter's arithmetic finite whatever a template asks.
const MAX_SIGMA_PIXELS: f64 = 4096.0;

/// A layer's own rotation and scale at `time`.
fn own_linear(layer: &Value, time: f64) -> Linear {
    let transform = layer.get("ks");
    let rotation = scalar_at(transform.and_then(|ks| ks.get("r")), time, 0.0).to_radians();
    let scale = transform
        .and_then(|ks| ks.get("s"))
        .and_then(|property| value_at(property, time))
        .unwrap_or_default();
    let sx = scale.first().copied().unwrap_or(100.0) / 100.0;
    let sy = scale.get(1).copied().unwrap_or(100.0) / 100.0;
    let (sin, cos) = rotation.sin_cos();
    [[cos * sx, -sin * sy], [sin * sx, cos * sy]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyframes_are_interpolated_held_and_eased() {
        let linear = json!({"a": 1, "k": [{"t": 10, "s": [0]}, {"t": 20, "s": [20]}]});
        assert_eq!(value_at(&linear, 0.0), Some(vec![0.0]));
        assert_eq!(value_at(&linear, 15.0), Some(vec![10.0]));
        assert_eq!(value_at(&linear, 30.0), Some(vec![20.0]));
        let held = json!({"a": 1, "k": [{"t": 0, "s": [5], "h": 1}, {"t": 10, "s": [9]}]});
        assert_eq!(value_at(&held, 9.0), Some(vec![5.0]));
        // CSS "ease-in" (0.42, 0, 1, 1) at half time is 0.3153.
        let eased = json!({"a": 1, "k": [
            {"t": 0, "s": [0], "o": {"x": [0.42], "y": [0]}, "i": {"x": [1], "y": [1]}},
            {"t": 10, "s": [100]}]});
        let half = value_at(&eased, 5.0).unwrap()[0];
        assert!((half - 31.53).abs() < 0.05, "{half}");
        assert_eq!(value_at(&json!({"a": 0, "k": 7}), 3.0), Some(vec![7.0]));
    }

    #[test]
    fn a_blur_follows_the_layer_and_parent_scale_and_the_fit() {
        let layers = [
            json!({"ind": 1, "ks": {"s": {"a": 0, "k": [200, 100]}}}),
            json!({"ind": 2, "parent": 1, "ks": {"s": {"a": 0, "k": [50, 300]}},
                   "ef": [{"ty": 29, "ef": [{"v": {"a": 0, "k": 10}}]}]}),
        ];
        let root = RootLayers {
            layers: &layers,
            fit: 2.0,
        };
        let effect =
            crate::lottie::lowering::effects::rendered::rendered_effect(&layers[1]["ef"][0])
                .unwrap();
        let Some(FrameFilter::Blur { sigma }) = root.filter_at(1, effect, 0.0) else {
            panic!("a blur");
        };
        // σ = 3 in the layer; × (2 × 0.5) horizontally, × (1 × 3) vertically, × fit 2.
        assert!(
            (sigma[0] - 6.0).abs() < 1e-9 && (sigma[1] - 18.0).abs() < 1e-9,
            "{sigma:?}"
        );
    }
}
