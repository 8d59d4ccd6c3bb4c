//! Animated properties of text animators and their selectors: a Lottie property
//! (`{"a": …, "k": …}`) read once, then evaluated at any time as lottie-web interpolates
//! keyframes (both export formats, holds, per-dimension Bézier easing).

use crate::lottie::lowering::bezier_ease;
use serde_json::Value;

/// Keyframes of one animated property read: far more than a designer sets by hand.
const MAX_KEYFRAMES_PER_PROPERTY: usize = 10_000;

/// One keyframe: its time, start value, end value (old exports give `e`; newer ones leave it
/// to the next keyframe's `s`), hold flag and easing (`o.x`, `o.y`, `i.x`, `i.y`, per
/// dimension when given so).
#[derive(Debug, Clone)]
struct Keyframe {
    time: f64,
    start: Option<Vec<f64>>,
    end: Option<Vec<f64>>,
    hold: bool,
    ease: [Vec<f64>; 4],
}

/// A property's value over time: static, or keyframed.
#[derive(Debug, Clone)]
pub struct Property {
    value: Vec<f64>,
    keyframes: Vec<Keyframe>,
}

fn numbers(value: &Value) -> Option<Vec<f64>> {
    match value {
        Value::Number(number) => number.as_f64().filter(|v| v.is_finite()).map(|v| vec![v]),
        Value::Array(items) => items
            .iter()
            .take(4)
            .map(|item| item.as_f64().filter(|v| v.is_finite()))
            .collect(),
        _ => None,
    }
}

fn ease_part(keyframe: &Value, handle: &str, axis: &str) -> Vec<f64> {
    keyframe
        .get(handle)
        .and_then(|handle| handle.get(axis))
        .and_then(numbers)
        .unwrap_or_default()
}

impl Property {
    /// A static property of `value`.
    pub(crate) fn constant(value: Vec<f64>) -> Property {
        Property {
            value,
            keyframes: Vec::new(),
        }
    }

    /// Reads a Lottie property (`{"a": …, "k": …}`); `None` when it has no usable value.
    pub(crate) fn parse(property: &Value) -> Option<Property> {
        let k = property.get("k")?;
        if let Some(items) = k
            .as_array()
            .filter(|items| items.first().is_some_and(Value::is_object))
        {
            let keyframes: Vec<Keyframe> = items
                .iter()
                .take(MAX_KEYFRAMES_PER_PROPERTY)
                .filter_map(|keyframe| {
                    let time = keyframe.get("t")?.as_f64().filter(|t| t.is_finite())?;
                    Some(Keyframe {
                        time,
                        start: keyframe.get("s").and_then(numbers),
                        end: keyframe.get("e").and_then(numbers),
                        hold: keyframe.get("h").and_then(Value::as_i64) == Some(1),
                        ease: [
                            ease_part(keyframe, "o", "x"),
                            ease_part(keyframe, "o", "y"),
                            ease_part(keyframe, "i", "x"),
                            ease_part(keyframe, "i", "y"),
                        ],
                    })
                })
                .collect();
            let value = keyframes.iter().find_map(|k| k.start.clone())?;
            return Some(Property { value, keyframes });
        }
        numbers(k).map(Property::constant)
    }

    pub(crate) fn is_animated(&self) -> bool {
        self.keyframes.len() > 1
    }

    /// The value at `time` (the layer's frames), as lottie-web interpolates keyframes:
    /// the first value before the first keyframe, the last after the last, eased between.
    pub(crate) fn at(&self, time: f64) -> Vec<f64> {
        let keyframes = &self.keyframes;
        if keyframes.len() < 2 {
            return self.value.clone();
        }
        let first = &keyframes[0];
        if time <= first.time {
            return first.start.clone().unwrap_or_else(|| self.value.clone());
        }
        // The keyframe whose span holds `time`.
        let next = keyframes.partition_point(|keyframe| keyframe.time <= time);
        let Some(current) = keyframes.get(next.wrapping_sub(1)) else {
            return self.value.clone();
        };
        let previous_end = || {
            keyframes[..next]
                .iter()
                .rev()
                .find_map(|keyframe| {
                    if keyframe.hold {
                        keyframe.start.clone()
                    } else {
                        keyframe.end.clone().or_else(|| keyframe.start.clone())
                    }
                })
                .unwrap_or_else(|| self.value.clone())
        };
        let Some(following) = keyframes.get(next) else {
            // After the last keyframe: its value, or (old exports, whose last keyframe has
            // only a time) the end of the one before.
            return current.start.clone().unwrap_or_else(previous_end);
        };
        let Some(start) = current.start.clone() else {
            return previous_end();
        };
        if current.hold {
            return start;
        }
        let end = current
            .end
            .clone()
            .or_else(|| following.start.clone())
            .unwrap_or_else(|| start.clone());
        let span = following.time - current.time;
        let progress = if span > 0.0 {
            ((time - current.time) / span).clamp(0.0, 1.0)
        } else {
            1.0
        };
        start
            .iter()
            .enumerate()
            .map(|(dimension, from)| {
                let to = end.get(dimension).copied().unwrap_or(*from);
                let part = |values: &Vec<f64>, default: f64| {
                    values
                        .get(dimension)
                        .or(values.first())
                        .copied()
                        .unwrap_or(default)
                };
                let eased = bezier_ease(
                    part(&current.ease[0], 0.0),
                    part(&current.ease[1], 0.0),
                    part(&current.ease[2], 1.0),
                    part(&current.ease[3], 1.0),
                    progress,
                );
                from + (to - from) * eased
            })
            .collect()
    }

    pub(crate) fn scalar(&self, time: f64) -> f64 {
        self.at(time).first().copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyframes_interpolate_in_both_export_formats() {
        let new = Property::parse(&json!({"a": 1, "k": [
            {"t": 0, "s": [0], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
            {"t": 10, "s": [100]}]}))
        .unwrap();
        assert!((new.scalar(5.0) - 50.0).abs() < 1e-9);
        assert_eq!(new.scalar(20.0), 100.0);
        assert_eq!(new.scalar(-5.0), 0.0);
        let old = Property::parse(&json!({"a": 1, "k": [
            {"t": 0, "s": [-100], "e": [100], "o": {"x": [0], "y": [0]}, "i": {"x": [1], "y": [1]}},
            {"t": 10}]}))
        .unwrap();
        assert!((old.scalar(5.0)).abs() < 1e-9);
        assert_eq!(old.scalar(12.0), 100.0);
        let hold = Property::parse(&json!({"a": 1, "k": [
            {"t": 0, "s": [1], "h": 1}, {"t": 10, "s": [2], "h": 1}]}))
        .unwrap();
        assert_eq!(hold.scalar(9.9), 1.0);
        assert_eq!(hold.scalar(10.0), 2.0);
    }
}
