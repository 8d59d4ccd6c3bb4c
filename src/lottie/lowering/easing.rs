//! Keyframes eased per axis (`"o": {"x": [0.8, 0.2], …}` on a scale, a size or a non-spatial
//! position): lottie-web eases each dimension on its own curve, rlottie 0.1 uses the first
//! dimension's curve for all. Such a segment is resampled here into linear keyframes one
//! template frame apart (at most [`MAX_SAMPLES_PER_SEGMENT`]), each value eased per axis, so
//! rlottie draws every frame as lottie-web does and interpolates in between.

use serde_json::{json, Map, Value};

/// Keyframes the resampling may add to one template: a template eased per axis everywhere
/// (a rigged character: a few hundred segments of a second or two) adds a few thousand; the
/// bound keeps a hostile one (thousands of long segments) from growing the render's JSON by
/// more than a few MiB. Past it, the remaining properties keep their first axis's easing, and
/// the report says so.
pub const MAX_RESAMPLED_KEYFRAMES: usize = 20_000;
/// Samples of one segment: ten seconds at 30 fps; a longer segment is sampled more sparsely
/// (its ease changes slowly over a frame then).
pub const MAX_SAMPLES_PER_SEGMENT: usize = 300;
/// Dimensions of a value eased per axis: a colour's four at most. Each resampled keyframe
/// copies the value, so the bound above counts numbers only with this one; a longer value is
/// no property rlottie reads per axis and is left as written.
pub const MAX_EASED_DIMENSIONS: usize = 4;

/// Resamples every segment of `json` eased per axis; answers a warning when the bound on
/// added keyframes left some as rlottie reads them.
pub fn split_per_axis_easing(json: &mut Value) -> Vec<String> {
    let mut resampler = Resampler::default();
    super::for_each_object(json, |object| resampler.lower_object(object));
    resampler.warnings()
}

/// The resampling of one template, object by object, within its bound.
pub(super) struct Resampler {
    budget: usize,
    over: bool,
}

impl Default for Resampler {
    fn default() -> Resampler {
        Resampler {
            budget: MAX_RESAMPLED_KEYFRAMES,
            over: false,
        }
    }
}

impl Resampler {
    /// Resamples `object`'s keyframes (`k`) when a segment is eased per axis.
    pub(super) fn lower_object(&mut self, object: &mut Map<String, Value>) {
        if let Some(k) = object.get_mut("k") {
            self.lower_keyframes(k);
        }
    }

    /// Resamples keyframes `k` (a property's `k`) when a segment is eased per axis.
    pub(super) fn lower_keyframes(&mut self, k: &mut Value) {
        let Some(keyframes) = k.as_array_mut() else {
            return;
        };
        if !keyframes.iter().any(eased_per_axis) {
            return;
        }
        match resampled(keyframes, &mut self.budget) {
            Some(lowered) => *keyframes = lowered,
            None => self.over = true,
        }
    }

    /// A warning when the bound left some properties as rlottie reads them.
    pub(super) fn warnings(self) -> Vec<String> {
        if !self.over {
            return Vec::new();
        }
        vec![format!(
            "keyframes eased per axis past {MAX_RESAMPLED_KEYFRAMES} resampled keyframes \
             use their first axis's easing for every axis"
        )]
    }
}

/// A keyframe of a numeric vector whose easing differs between axes (not held, not spatial).
fn eased_per_axis(keyframe: &Value) -> bool {
    let Some(keyframe) = keyframe.as_object() else {
        return false;
    };
    if keyframe.get("h").and_then(Value::as_f64) == Some(1.0) || spatial(keyframe) {
        return false;
    }
    let is_vector = numbers(keyframe.get("s"))
        .is_some_and(|values| (2..=MAX_EASED_DIMENSIONS).contains(&values.len()));
    let differs = |handle: &str, axis: &str| {
        numbers(keyframe.get(handle).and_then(|h| h.get(axis)))
            .is_some_and(|values| values.iter().any(|v| (v - values[0]).abs() > 1e-9))
    };
    is_vector
        && [("o", "x"), ("o", "y"), ("i", "x"), ("i", "y")]
            .iter()
            .any(|(handle, axis)| differs(handle, axis))
}

/// A position keyframe moving along a curve (`to`/`ti` not zero): its one easing is the
/// path's, which rlottie reads as lottie-web does.
fn spatial(keyframe: &Map<String, Value>) -> bool {
    ["to", "ti"].iter().any(|key| {
        numbers(keyframe.get(*key)).is_some_and(|tangent| tangent.iter().any(|v| *v != 0.0))
    })
}

fn numbers(value: Option<&Value>) -> Option<Vec<f64>> {
    value?.as_array()?.iter().map(Value::as_f64).collect()
}

/// `keyframes` with each segment eased per axis replaced by linear samples; None when the
/// samples would exceed what `budget` has left (nothing is taken from it then).
fn resampled(keyframes: &[Value], budget: &mut usize) -> Option<Vec<Value>> {
    let mut lowered = Vec::with_capacity(keyframes.len());
    let mut left = *budget;
    for (index, keyframe) in keyframes.iter().enumerate() {
        let samples = keyframes
            .get(index + 1)
            .filter(|_| eased_per_axis(keyframe))
            .and_then(|next| Segment::between(keyframe, next));
        let Some(segment) = samples else {
            lowered.push(keyframe.clone());
            continue;
        };
        left = left.checked_sub(segment.samples)?;
        lowered.extend(segment.linear_keyframes(keyframe));
    }
    *budget = left;
    Some(lowered)
}

/// One segment eased per axis: from `start` at `t0` to `end` at `t1`.
struct Segment {
    t0: f64,
    t1: f64,
    start: Vec<f64>,
    end: Vec<f64>,
    samples: usize,
}

impl Segment {
    fn between(keyframe: &Value, next: &Value) -> Option<Segment> {
        let t0 = keyframe.get("t")?.as_f64()?;
        let t1 = next.get("t")?.as_f64()?;
        let start = numbers(keyframe.get("s"))?;
        // Older exports give the segment's end on the keyframe itself.
        let end = numbers(keyframe.get("e")).or_else(|| numbers(next.get("s")))?;
        if !(t1 > t0 && t0.is_finite() && t1.is_finite()) || end.len() != start.len() {
            return None;
        }
        let samples = ((t1 - t0).ceil() as usize).clamp(1, MAX_SAMPLES_PER_SEGMENT);
        Some(Segment {
            t0,
            t1,
            start,
            end,
            samples,
        })
    }

    /// The value at `progress` (0..=1 of the segment's time), each axis on its own curve.
    fn value_at(&self, keyframe: &Value, progress: f64) -> Vec<f64> {
        let handle = |handle: &str, axis: &str, dimension: usize| {
            let value = keyframe.get(handle).and_then(|h| h.get(axis));
            match value {
                // lottie-web reads a missing dimension's handle from the first.
                Some(Value::Array(items)) => items
                    .get(dimension)
                    .or_else(|| items.first())
                    .and_then(Value::as_f64),
                Some(other) => other.as_f64(),
                None => None,
            }
        };
        (0..self.start.len())
            .map(|d| {
                let ease = match (
                    handle("o", "x", d),
                    handle("o", "y", d),
                    handle("i", "x", d),
                    handle("i", "y", d),
                ) {
                    (Some(x1), Some(y1), Some(x2), Some(y2)) => {
                        bezier_ease(x1, y1, x2, y2, progress)
                    }
                    _ => progress,
                };
                self.start[d] + (self.end[d] - self.start[d]) * ease
            })
            .collect()
    }

    /// The segment's samples as linear keyframes, the first at `t0` with the keyframe's own
    /// value (the next keyframe, as written, ends the last).
    fn linear_keyframes<'a>(&'a self, keyframe: &'a Value) -> impl Iterator<Item = Value> + 'a {
        let old_format = keyframe.get("e").is_some();
        let step = (self.t1 - self.t0) / self.samples as f64;
        (0..self.samples).map(move |sample| {
            let progress = |n: usize| n as f64 / self.samples as f64;
            let mut lowered = json!({
                "t": self.t0 + step * sample as f64,
                "s": self.value_at(keyframe, progress(sample)),
                "o": {"x": 0, "y": 0},
                "i": {"x": 1, "y": 1},
            });
            if old_format {
                lowered["e"] = json!(self.value_at(keyframe, progress(sample + 1)));
            }
            lowered
        })
    }
}

/// A cubic Bézier easing curve from (0, 0) to (1, 1) with control points (`x1`, `y1`) and
/// (`x2`, `y2`), evaluated at `x`, as lottie-web's `BezierEasing` (Newton's method with a
/// bisection fallback). Hand-written: a dozen lines, and the easing crates on crates.io
/// pull in more than they save.
pub fn bezier_ease(x1: f64, y1: f64, x2: f64, y2: f64, x: f64) -> f64 {
    let (x1, x2) = (x1.clamp(0.0, 1.0), x2.clamp(0.0, 1.0));
    if (x1 == y1 && x2 == y2) || x <= 0.0 || x >= 1.0 {
        return x.clamp(0.0, 1.0);
    }
    let curve = |t: f64, p1: f64, p2: f64| {
        let u = 1.0 - t;
        3.0 * u * u * t * p1 + 3.0 * u * t * t * p2 + t * t * t
    };
    let slope = |t: f64, p1: f64, p2: f64| {
        let u = 1.0 - t;
        3.0 * u * u * p1 + 6.0 * u * t * (p2 - p1) + 3.0 * t * t * (1.0 - p2)
    };
    let mut t = x;
    let mut solved = false;
    for _ in 0..8 {
        let error = curve(t, x1, x2) - x;
        if error.abs() < 1e-9 {
            solved = true;
            break;
        }
        let derivative = slope(t, x1, x2);
        if derivative.abs() < 1e-6 {
            break;
        }
        t = (t - error / derivative).clamp(0.0, 1.0);
    }
    if !solved {
        let (mut low, mut high) = (0.0, 1.0);
        for _ in 0..60 {
            t = (low + high) / 2.0;
            if curve(t, x1, x2) < x {
                low = t;
            } else {
                high = t;
            }
        }
    }
    curve(t, y1, y2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn easing_matches_known_points_of_css_ease() {
        // CSS `ease` (0.25, 0.1, 0.25, 1) at x = 0.5 is about 0.8024.
        assert!((bezier_ease(0.25, 0.1, 0.25, 1.0, 0.5) - 0.8024).abs() < 1e-3);
        assert_eq!(bezier_ease(0.0, 0.0, 1.0, 1.0, 0.3), 0.3);
    }

    fn scale(o_x: Value) -> Value {
        json!({"a": 1, "k": [
            {"t": 0, "s": [0, 0], "o": {"x": o_x, "y": [0, 0]}, "i": {"x": [1, 1], "y": [1, 1]}},
            {"t": 10, "s": [100, 100]}]})
    }

    #[test]
    fn a_segment_eased_per_axis_becomes_linear_samples_eased_per_axis() {
        let mut property = scale(json!([0.8, 0.0]));
        assert!(split_per_axis_easing(&mut property).is_empty());
        let keyframes = property["k"].as_array().unwrap();
        // Ten samples one frame apart, then the final keyframe as written.
        assert_eq!(keyframes.len(), 11);
        assert_eq!(keyframes[10], json!({"t": 10, "s": [100, 100]}));
        let middle = &keyframes[5]["s"];
        let x = middle[0].as_f64().unwrap();
        assert!((x - 100.0 * bezier_ease(0.8, 0.0, 1.0, 1.0, 0.5)).abs() < 1e-9);
        assert!(x < 40.0, "{x}");
        // The second axis is linear.
        assert!((middle[1].as_f64().unwrap() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn the_same_easing_on_every_axis_is_left_as_written() {
        let mut property = scale(json!([0.8, 0.8]));
        let written = property.clone();
        split_per_axis_easing(&mut property);
        assert_eq!(property, written);
    }

    #[test]
    fn values_of_more_dimensions_than_a_colour_are_left_as_written() {
        let mut property = json!({"a": 1, "k": [
            {"t": 0, "s": [0, 0, 0, 0, 0], "o": {"x": [0.8, 0, 0, 0, 0], "y": [0, 0, 0, 0, 0]},
                "i": {"x": [1, 1, 1, 1, 1], "y": [1, 1, 1, 1, 1]}},
            {"t": 10, "s": [1, 1, 1, 1, 1]}]});
        let written = property.clone();
        assert!(split_per_axis_easing(&mut property).is_empty());
        assert_eq!(property, written);
    }

    #[test]
    fn past_the_bound_properties_are_left_and_the_report_says_so() {
        let long = json!({"a": 1, "k": [
            {"t": 0, "s": [0, 0], "o": {"x": [0.8, 0], "y": [0, 0]}, "i": {"x": [1, 1], "y": [1, 1]}},
            {"t": 1000, "s": [100, 100]}]});
        let count = MAX_RESAMPLED_KEYFRAMES / MAX_SAMPLES_PER_SEGMENT + 1;
        let mut json = json!({"layers": vec![long; count]});
        let warnings = split_per_axis_easing(&mut json);
        assert_eq!(warnings.len(), 1);
        let lengths: Vec<usize> = json["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["k"].as_array().unwrap().len())
            .collect();
        assert_eq!(lengths.iter().filter(|&&n| n == 2).count(), 1);
    }
}
