//! When each composition is seen: the times (in that composition's own frames) at which its
//! expressions are baked. The root composition is seen at every output frame; a precomposition
//! at its referencing layers' times mapped into its own timeline (start time, stretch), on a
//! grid aligned with the first reference's frames. Where a reference is time-remapped the
//! whole span of the precomposition's layers is sampled instead.

use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Samples of one composition. The root has at most 600 s (the fence's longest timeline) ×
/// 60 fps (the highest output rate); a precomposition seen through many shifted references may
/// span longer, and is then sampled more coarsely (linear keyframes in between) rather than
/// baked without bound.
pub const MAX_SAMPLES_PER_COMPOSITION: usize = 36_000;

/// The sample grid of one composition: `count` times from `start`, `step` frames apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sampling {
    pub start: f64,
    pub step: f64,
    pub count: usize,
}

impl Sampling {
    fn end(&self) -> f64 {
        self.start + self.step * (self.count.saturating_sub(1)) as f64
    }
}

/// The union of the references' times seen so far for one precomposition.
struct Span {
    start: f64,
    end: f64,
    step: f64,
    origin: f64,
}

/// Sample grids by composition: `None` is the root, `Some(id)` a precomposition asset.
/// Compositions never shown (unreferenced assets) have none.
pub(crate) fn compositions(json: &Value, fps: u32) -> HashMap<Option<String>, Sampling> {
    let number = |value: &Value, key: &str| value.get(key).and_then(Value::as_f64);
    let mut samplings = HashMap::new();
    samplings.insert(None, root(json, fps));
    let assets: HashMap<&str, &[Value]> = json
        .get("assets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|asset| {
            let id = asset.get("id").and_then(Value::as_str)?;
            let layers = asset.get("layers").and_then(Value::as_array)?;
            Some((id, layers.as_slice()))
        })
        .collect();
    let root_layers = json
        .get("layers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut spans: HashMap<&str, Span> = HashMap::new();
    for comp in parents_first(root_layers, &assets) {
        let (layers, sampling) = match comp {
            None => (root_layers, samplings[&None]),
            Some(id) => {
                let Some(sampling) = spans
                    .remove(id)
                    .and_then(|span| finish(span, assets.get(id).copied().unwrap_or_default()))
                else {
                    continue;
                };
                samplings.insert(Some(id.to_owned()), sampling);
                (assets.get(id).copied().unwrap_or_default(), sampling)
            }
        };
        for layer in layers {
            let Some(reference) = precomp_reference(layer, &assets) else {
                continue;
            };
            let from = number(layer, "ip").map_or(sampling.start, |ip| ip.max(sampling.start));
            let to = number(layer, "op").map_or(sampling.end(), |op| op.min(sampling.end()));
            if to < from {
                continue;
            }
            let seen = if layer.get("tm").is_some() {
                let (first, last) = layer_span(assets[reference]);
                (first, last, sampling.step, first)
            } else {
                let stretch = number(layer, "sr").filter(|sr| sr.is_finite() && *sr > 0.0);
                let stretch = stretch.unwrap_or(1.0);
                let start_time = number(layer, "st").unwrap_or(0.0);
                let local = |frame: f64| (frame - start_time) / stretch;
                (
                    local(from),
                    local(to),
                    sampling.step / stretch,
                    local(sampling.start),
                )
            };
            let span = spans.entry(reference).or_insert(Span {
                start: seen.0,
                end: seen.1,
                step: seen.2,
                origin: seen.3,
            });
            span.start = span.start.min(seen.0);
            span.end = span.end.max(seen.1);
            span.step = span.step.min(seen.2);
        }
    }
    samplings
}

/// The samples of the root composition: every output frame of an `fps` render.
pub(crate) fn root(json: &Value, fps: u32) -> Sampling {
    let number = |key: &str| json.get(key).and_then(Value::as_f64);
    let frame_rate = number("fr").unwrap_or(f64::from(fps));
    let ip = number("ip").unwrap_or(0.0);
    let op = number("op").unwrap_or(ip + 1.0);
    let count = crate::lottie::timeline::frame_count((op - ip) / frame_rate, fps) as usize;
    Sampling {
        start: ip,
        step: frame_rate / f64::from(fps),
        count: count.min(MAX_SAMPLES_PER_COMPOSITION),
    }
}

/// The asset a precomposition layer (`ty` 0) shows, when it exists.
fn precomp_reference<'a>(layer: &'a Value, assets: &HashMap<&str, &[Value]>) -> Option<&'a str> {
    if layer.get("ty").and_then(Value::as_i64) != Some(0) {
        return None;
    }
    let id = layer.get("refId").and_then(Value::as_str)?;
    assets.contains_key(id).then_some(id)
}

/// The earliest in point and the latest out point of `layers`.
fn layer_span(layers: &[Value]) -> (f64, f64) {
    let mut first = f64::INFINITY;
    let mut last = f64::NEG_INFINITY;
    for layer in layers {
        if let Some(ip) = layer.get("ip").and_then(Value::as_f64) {
            first = first.min(ip);
        }
        if let Some(op) = layer.get("op").and_then(Value::as_f64) {
            last = last.max(op);
        }
    }
    (first, last)
}

/// The grid covering `span`, limited to when the precomposition's layers exist, at most
/// [`MAX_SAMPLES_PER_COMPOSITION`] samples (coarser when it would be more).
fn finish(span: Span, layers: &[Value]) -> Option<Sampling> {
    let (first, last) = layer_span(layers);
    let start = if first.is_finite() {
        span.start.max(first)
    } else {
        span.start
    };
    let end = if last.is_finite() {
        span.end.min(last)
    } else {
        span.end
    };
    let mut step = span.step;
    if !(start.is_finite() && end.is_finite() && step.is_finite() && step > 0.0 && end >= start) {
        return None;
    }
    // On the first reference's grid, so its frames are sampled exactly.
    let start = if span.origin.is_finite() {
        span.origin + ((start - span.origin) / step).floor() * step
    } else {
        start
    };
    let mut count = ((end - start) / step).ceil() + 1.0;
    if count > MAX_SAMPLES_PER_COMPOSITION as f64 {
        count = MAX_SAMPLES_PER_COMPOSITION as f64;
        step = (end - start) / (count - 1.0);
    }
    Some(Sampling {
        start,
        step,
        count: count as usize,
    })
}

/// Compositions in an order where every composition comes after all that show it: the root
/// first. The fence refused cycles; the visited set makes sure of it anyway.
fn parents_first<'a>(
    root_layers: &'a [Value],
    assets: &HashMap<&'a str, &'a [Value]>,
) -> Vec<Option<&'a str>> {
    let mut finished = Vec::new();
    let mut visited = HashSet::new();
    // Depth-first post-order without recursion: (composition, its layers, next layer index).
    let mut stack: Vec<(Option<&str>, &[Value], usize)> = vec![(None, root_layers, 0)];
    while let Some((comp, layers, next)) = stack.pop() {
        if next < layers.len() {
            stack.push((comp, layers, next + 1));
            if let Some(reference) = precomp_reference(&layers[next], assets) {
                if visited.insert(reference) {
                    stack.push((Some(reference), assets[reference], 0));
                }
            }
        } else {
            finished.push(comp);
        }
    }
    finished.reverse();
    finished
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_precomp_shown_from_shifted_start_times_is_sampled_over_all_of_them() {
        let json = json!({"fr": 30, "ip": 0, "op": 60, "layers": [
            {"ty": 0, "refId": "a", "ip": 0, "op": 60, "st": -10},
            {"ty": 0, "refId": "a", "ip": 0, "op": 60, "st": 20},
        ], "assets": [{"id": "a", "layers": [{"ty": 4, "ip": -100, "op": 1000}]},
                      {"id": "unused", "layers": []}]});
        let samplings = compositions(&json, 60);
        assert_eq!(
            samplings[&None],
            Sampling {
                start: 0.0,
                step: 0.5,
                count: 120
            }
        );
        let precomp = samplings[&Some("a".to_owned())];
        // Local times from 0 - 20 = -20 to 59.5 + 10 = 69.5, on the half-frame grid.
        assert_eq!(precomp.step, 0.5);
        assert_eq!(precomp.start, -20.0);
        assert_eq!(precomp.end(), 69.5);
        assert!(!samplings.contains_key(&Some("unused".to_owned())));
    }
}
