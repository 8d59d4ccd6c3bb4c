//! Lottie properties from sampled values: static when they never change, else linear
//! keyframes keeping only the ends of constant runs and of straight stretches.

use serde_json::{json, Value};

/// Sampled values are rounded to this step: far below a pixel or a colour level, and equal
/// neighbours then merge.
const ROUNDING: f64 = 1e-4;

pub(super) fn round(value: f64) -> f64 {
    let rounded = (value / ROUNDING).round() * ROUNDING;
    if rounded == 0.0 {
        0.0
    } else {
        rounded
    }
}

/// A Lottie property from samples of one channel: static when they never change; else
/// linear keyframes at the sample times, keeping only the ends of constant runs and of
/// straight stretches. Counts its keyframes into `written`.
pub(super) fn channel(times: &[f64], samples: &[Vec<f64>], written: &mut usize) -> Value {
    let values: Vec<Vec<f64>> = samples
        .iter()
        .map(|sample| sample.iter().map(|v| round(*v)).collect())
        .collect();
    let Some(first) = values.first() else {
        return json!({"a": 0, "k": 0});
    };
    let as_k = |value: &Vec<f64>| -> Value {
        if value.len() == 1 {
            json!(value[0])
        } else {
            json!(value)
        }
    };
    if values.iter().all(|value| value == first) {
        return json!({"a": 0, "k": as_k(first)});
    }
    let straight = |before: usize, at: usize, after: usize| {
        let span = times[after] - times[before];
        if span <= 0.0 {
            return false;
        }
        let part = (times[at] - times[before]) / span;
        values[at].iter().enumerate().all(|(d, v)| {
            let expected = values[before][d] + (values[after][d] - values[before][d]) * part;
            (v - expected).abs() <= ROUNDING
        })
    };
    let mut kept: Vec<usize> = vec![0];
    for index in 1..values.len() {
        let last = values.len() - 1;
        if index == last {
            kept.push(index);
            break;
        }
        let anchor = kept[kept.len() - 1];
        if !straight(anchor, index, index + 1) {
            kept.push(index);
        }
    }
    *written += kept.len();
    let keyframes: Vec<Value> = kept
        .iter()
        .enumerate()
        .map(|(position, index)| {
            let value = &values[*index];
            match kept.get(position + 1) {
                Some(next) => json!({
                    "t": times[*index],
                    "s": value,
                    "e": values[*next],
                    "o": {"x": [0.0], "y": [0.0]},
                    "i": {"x": [1.0], "y": [1.0]},
                }),
                None => json!({"t": times[*index], "s": value}),
            }
        })
        .collect();
    json!({"a": 1, "k": keyframes})
}
