//! Gradient opacity stops at offsets of their own. A Lottie gradient's flat values are `p`
//! colour stops (offset, r, g, b) then, optionally, opacity stops (offset, alpha) that may sit
//! elsewhere: lottie-web interpolates colour between colour stops and opacity between opacity
//! stops, each on its own. rlottie 0.1 pairs each opacity stop with the next colour stop's
//! colour, so the gradient's outer part comes out in the wrong colour and pale. Both lists are
//! resampled here onto the union of their offsets, where each is exact (both are piecewise
//! linear with breakpoints in the union), so rlottie's pairing meets matching stops only.
//! rlottie also interpolates between stops in premultiplied colour, lottie-web's SVG in
//! straight colour and opacity apart: towards a transparent stop, rlottie keeps the opaque
//! stop's colour. So where opacity changes between two stops the interval gets
//! [`OPACITY_SUBDIVISIONS`] stops, each exact, and the two interpolations nearly agree.

use serde_json::{Map, Value};

/// Stops of a resampled gradient: the fence's limit on a gradient's colour stops.
const MAX_RESAMPLED_STOPS: usize = crate::lottie::reading::fence::MAX_GRADIENT_STOPS as usize;
/// Offsets closer than this are one stop.
const SAME_OFFSET: f64 = 1e-6;
/// Pieces an interval whose opacity changes is cut into: the premultiplied interpolation's
/// error against the straight one falls with the square of the interval (a red-to-blue ramp
/// fading out is a quarter off midway in one piece, 1/256 in eight: under one level of 255).
const OPACITY_SUBDIVISIONS: usize = 8;
/// Numbers the resampling may write for one template's gradients. A real gradient of a few
/// stops, subdivided, over a hundred keyframes writes some 25,000; without a bound, a
/// template of many keyframes whose opacity offsets differ could grow each one to 256 stops
/// (1,536 numbers, from six) and the render's JSON by hundreds of times. Past it, the rest
/// are drawn as rlottie reads them, with a warning.
pub const MAX_RESAMPLED_GRADIENT_VALUES: usize = 250_000;

/// Resamples every gradient fill and stroke of `json` that rlottie would draw unlike
/// lottie-web; answers a warning for each that cannot be (too many stops).
pub fn resample_opacity_stops(json: &mut Value) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut values_left = MAX_RESAMPLED_GRADIENT_VALUES;
    super::for_each_object(json, |object| {
        lower_object(object, &mut warnings, &mut values_left)
    });
    warnings
}

/// Resamples `object` when it is such a gradient fill or stroke; a warning into `warnings`
/// (once) when it cannot be; what it writes comes out of `values_left`.
pub(super) fn lower_object(
    object: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
    values_left: &mut usize,
) {
    if !matches!(object.get("ty").and_then(Value::as_str), Some("gf" | "gs")) {
        return;
    }
    let Some(gradient) = object.get_mut("g").and_then(Value::as_object_mut) else {
        return;
    };
    if let Err(why) = resample(gradient, values_left) {
        let warning =
            format!("a gradient's opacity stops are drawn at its colour stops only ({why})");
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
}

/// One gradient's `g` (`p` and its property `k`), resampled in place when it needs it.
fn resample(gradient: &mut Map<String, Value>, values_left: &mut usize) -> Result<(), String> {
    let Some(count) = gradient.get("p").and_then(Value::as_u64) else {
        return Ok(());
    };
    let Ok(count) = usize::try_from(count) else {
        return Ok(());
    };
    let Some(property) = gradient.get_mut("k").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let mut values = stop_lists(property);
    let mut parsed = Vec::new();
    for flat in values.iter_mut() {
        match Stops::parse(flat, count) {
            Some(stops) => parsed.push(stops),
            // A list of another shape is rlottie's to read as it may.
            None => return Ok(()),
        }
    }
    if parsed.iter().all(Stops::drawn_alike) {
        return Ok(());
    }
    let mut offsets: Vec<f64> = parsed.iter().flat_map(Stops::offsets).collect();
    offsets.sort_by(f64::total_cmp);
    offsets.dedup_by(|a, b| (*a - *b).abs() < SAME_OFFSET);
    if offsets.len() > MAX_RESAMPLED_STOPS {
        return Err(format!(
            "{} stops in all, more than {MAX_RESAMPLED_STOPS}",
            offsets.len()
        ));
    }
    let subdivided = subdivided(&offsets, &parsed);
    let cost = |offsets: &[f64]| values.len() * offsets.len() * 6;
    if subdivided.len() <= MAX_RESAMPLED_STOPS && cost(&subdivided) <= *values_left {
        offsets = subdivided;
    }
    *values_left = values_left.checked_sub(cost(&offsets)).ok_or_else(|| {
        format!("the template's gradients would be resampled into more than {MAX_RESAMPLED_GRADIENT_VALUES} numbers")
    })?;
    for (flat, stops) in values.iter_mut().zip(&parsed) {
        **flat = stops.resampled(&offsets);
    }
    gradient.insert("p".into(), Value::from(offsets.len()));
    Ok(())
}

/// `offsets` with each interval over which some list's opacity changes cut into
/// [`OPACITY_SUBDIVISIONS`] pieces.
fn subdivided(offsets: &[f64], lists: &[Stops]) -> Vec<f64> {
    let mut cut = Vec::with_capacity(offsets.len() * OPACITY_SUBDIVISIONS);
    for pair in offsets.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        cut.push(from);
        let changes = lists
            .iter()
            .any(|stops| (stops.opacity_at(from) - stops.opacity_at(to)).abs() > 1e-9);
        if changes {
            let step = (to - from) / OPACITY_SUBDIVISIONS as f64;
            cut.extend((1..OPACITY_SUBDIVISIONS).map(|piece| from + step * piece as f64));
        }
    }
    cut.extend(offsets.last());
    cut
}

/// The flat value lists of a gradient property: its static value, or each keyframe's start
/// and (older exports) end.
fn stop_lists(property: &mut Map<String, Value>) -> Vec<&mut Value> {
    let Some(k) = property.get_mut("k") else {
        return Vec::new();
    };
    if k.as_array()
        .is_some_and(|items| items.iter().all(Value::is_number))
    {
        return vec![k];
    }
    let Some(keyframes) = k.as_array_mut() else {
        return Vec::new();
    };
    keyframes
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|keyframe| {
            keyframe
                .iter_mut()
                .filter(|(key, _)| key.as_str() == "s" || key.as_str() == "e")
                .map(|(_, value)| value)
        })
        .collect()
}

/// A gradient's colour stops (offset, rgb) and opacity stops (offset, alpha), as written.
struct Stops {
    colours: Vec<(f64, [f64; 3])>,
    opacities: Vec<(f64, [f64; 1])>,
}

impl Stops {
    fn parse(flat: &Value, count: usize) -> Option<Stops> {
        let numbers: Vec<f64> = flat
            .as_array()?
            .iter()
            .map(Value::as_f64)
            .collect::<Option<_>>()?;
        let (colour_part, opacity_part) = numbers.split_at_checked(count.checked_mul(4)?)?;
        if opacity_part.len() % 2 != 0 {
            return None;
        }
        Some(Stops {
            colours: colour_part
                .chunks_exact(4)
                .map(|stop| (stop[0], [stop[1], stop[2], stop[3]]))
                .collect(),
            opacities: opacity_part
                .chunks_exact(2)
                .map(|stop| (stop[0], [stop[1]]))
                .collect(),
        })
    }

    /// No opacity stops, or one of the same opacity at each colour stop: rlottie draws it as
    /// lottie-web does.
    fn drawn_alike(&self) -> bool {
        let aligned = self.opacities.len() == self.colours.len()
            && self
                .opacities
                .iter()
                .zip(&self.colours)
                .all(|(opacity, colour)| (opacity.0 - colour.0).abs() < SAME_OFFSET);
        let constant = self
            .opacities
            .iter()
            .all(|opacity| (opacity.1[0] - self.opacities[0].1[0]).abs() < 1e-9);
        self.opacities.is_empty() || (aligned && constant)
    }

    fn offsets(&self) -> impl Iterator<Item = f64> + '_ {
        let colours = self.colours.iter().map(|stop| stop.0);
        colours.chain(self.opacities.iter().map(|stop| stop.0))
    }

    fn opacity_at(&self, offset: f64) -> f64 {
        if self.opacities.is_empty() {
            return 1.0;
        }
        piecewise_linear(&self.opacities, offset)[0]
    }

    /// The flat list with a colour and an opacity stop at each of `offsets`.
    fn resampled(&self, offsets: &[f64]) -> Value {
        let mut flat = Vec::with_capacity(offsets.len() * 6);
        for &offset in offsets {
            flat.push(offset);
            flat.extend(piecewise_linear(&self.colours, offset));
        }
        for &offset in offsets {
            flat.push(offset);
            flat.push(self.opacity_at(offset));
        }
        Value::from(flat)
    }
}

/// The value of stops `(offset, value)` at `at`: linear between neighbours, the end stop's
/// value beyond either end (as lottie-web and SVG extend them).
fn piecewise_linear<const N: usize>(stops: &[(f64, [f64; N])], at: f64) -> [f64; N] {
    let Some(first) = stops.first() else {
        return [0.0; N];
    };
    if at <= first.0 {
        return first.1;
    }
    for pair in stops.windows(2) {
        let ((from, a), (to, b)) = (pair[0], pair[1]);
        if at <= to {
            let span = to - from;
            let t = if span > 0.0 { (at - from) / span } else { 1.0 };
            return std::array::from_fn(|i| a[i] + (b[i] - a[i]) * t);
        }
    }
    stops.last().map_or(first.1, |last| last.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lowered(g: Value) -> Value {
        let mut json = json!({"layers": [{"shapes": [{"ty": "gf", "g": g}]}]});
        assert!(resample_opacity_stops(&mut json).is_empty());
        json["layers"][0]["shapes"][0]["g"].take()
    }

    fn numbers(value: &Value) -> Vec<f64> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    }

    #[test]
    fn opacity_stops_of_their_own_are_resampled_onto_the_union_of_offsets() {
        // Red → blue, opaque to 0.5 then fading out at 1.
        let g = lowered(json!({"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1,
            0, 1, 0.5, 1, 1, 0]}}));
        // 0, 0.5, then 0.5..1 (where opacity changes) in eight pieces.
        assert_eq!(g["p"], 2 + OPACITY_SUBDIVISIONS);
        let flat = numbers(&g["k"]["k"]);
        let (colours, opacities) = flat.split_at(4 * (2 + OPACITY_SUBDIVISIONS));
        let expected = [
            0.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.5, 0.5625, 0.4375, 0.0, 0.5625,
        ];
        assert_eq!(&colours[..12], expected);
        assert_eq!(&opacities[..6], [0.0, 1.0, 0.5, 1.0, 0.5625, 0.875]);
        assert_eq!(&opacities[opacities.len() - 2..], [1.0, 0.0]);
    }

    #[test]
    fn constant_opacity_at_the_colour_stops_and_no_opacity_are_left_as_written() {
        let aligned = json!({"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1, 0, 0.5, 1, 0.5]}});
        assert_eq!(lowered(aligned.clone()), aligned);
        let plain = json!({"p": 2, "k": {"a": 0, "k": [0, 1, 0, 0, 1, 0, 0, 1]}});
        assert_eq!(lowered(plain.clone()), plain);
    }

    #[test]
    fn a_template_past_the_numbers_bound_keeps_the_rest_as_written_with_a_warning() {
        // Each keyframe's opacity stops elsewhere: 12 stops of 6 numbers, subdivided more.
        let keyframe = |t: usize| {
            let at = (t % 90) as f64 / 100.0 + 0.05;
            json!({"t": t, "s": [0, 1, 0, 0, 1, 0, 0, 1, 0, 1, at, 0.5, 1, 0]})
        };
        let keyframes: Vec<Value> = (0..MAX_RESAMPLED_GRADIENT_VALUES / 60)
            .map(keyframe)
            .collect();
        let gradient = json!({"ty": "gf", "g": {"p": 2, "k": {"a": 1, "k": keyframes}}});
        let mut json = json!({"layers": [{"shapes": [gradient.clone(), gradient]}]});
        let warnings = resample_opacity_stops(&mut json);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("more than 250000 numbers"),
            "{warnings:?}"
        );
        // The second gradient is left as written.
        assert_eq!(json["layers"][0]["shapes"][1]["g"]["p"], 2);
    }

    #[test]
    fn keyframes_share_one_union_of_offsets() {
        let g = lowered(json!({"p": 2, "k": {"a": 1, "k": [
            {"t": 0, "s": [0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0.25, 0.5, 1, 0]},
            {"t": 10, "s": [0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0.75, 0.5, 1, 0]}]}}));
        let stops = g["p"].as_u64().unwrap() as usize;
        // 0, 0.25, 0.75, 1, and the pieces of the three intervals where an opacity changes.
        assert_eq!(stops, 4 + 3 * (OPACITY_SUBDIVISIONS - 1));
        for keyframe in g["k"]["k"].as_array().unwrap() {
            assert_eq!(keyframe["s"].as_array().unwrap().len(), stops * 6);
        }
    }
}
