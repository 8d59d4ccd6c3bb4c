//! When text animators are sampled: the output's frame times over the layer's time.

use super::MAX_ANIMATOR_SAMPLES;

/// When to sample: frame times of the layer's composition. Keyframe times are the
/// composition's, not shifted by the layer's start (lottie-web subtracts `st` from both the
/// frame and the keyframe times; rlottie reads them so too).
#[derive(Debug, Clone)]
pub struct Sampling {
    pub times: Vec<f64>,
    /// More frame times than the whole sample budget: nothing is sampled.
    pub over_budget: bool,
}

impl Sampling {
    /// The times of a layer shown over `[from, to]` of its composition, on a grid of `step`
    /// frames (one output frame).
    pub(crate) fn new(from: f64, to: f64, step: f64) -> Sampling {
        let step = if step.is_finite() && step > 0.0 {
            step
        } else {
            1.0
        };
        let mut times = Vec::new();
        let mut over_budget = false;
        if from.is_finite() && to.is_finite() && to >= from {
            let first = (from / step).ceil();
            let last = (to / step).floor();
            // Bounded by the caller's sample budget before any is made.
            let count = (last - first + 1.0).max(0.0);
            if count <= MAX_ANIMATOR_SAMPLES as f64 {
                for k in 0..count as usize {
                    times.push((first + k as f64) * step);
                }
            } else {
                over_budget = true;
            }
        }
        if times.is_empty() {
            times.push(from);
        }
        Sampling { times, over_budget }
    }

    /// Only the times in `[from, to)` (a text keyframe's span), with `from` itself.
    pub(crate) fn within(&self, from: f64, to: Option<f64>) -> Sampling {
        let mut times: Vec<f64> = self
            .times
            .iter()
            .copied()
            .filter(|time| *time >= from && to.is_none_or(|to| *time < to))
            .collect();
        // The document's first moment, between two samples.
        if from.is_finite()
            && times.first().is_none_or(|first| *first > from)
            && self.times.first().is_some_and(|first| *first < from)
        {
            times.insert(0, from);
        }
        if times.is_empty() {
            times.push(if from.is_finite() {
                from
            } else {
                self.times.first().copied().unwrap_or(0.0)
            });
        }
        Sampling {
            times,
            over_budget: self.over_budget,
        }
    }
}
