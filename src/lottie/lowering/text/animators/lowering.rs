//! Lowering a document's text animators to per-glyph channels: every glyph's transform,
//! opacity, fill and stroke sampled at the output's frame times, within the template's
//! budgets.

use super::super::layout::Layout;
use super::channels::channel;
use super::colour::{hsv_to_rgb, rgb_to_hsv};
use super::pivots::pivots;
use super::properties::PropertiesAt;
use super::sampling::Sampling;
use super::selector::{letter_indexes, SelectorAt};
use super::{Animators, MAX_ANIMATOR_KEYFRAMES, MAX_ANIMATOR_SAMPLES};
use serde_json::{json, Value};

/// What is left of a template's animator budgets.
#[derive(Debug, Clone, Copy)]
pub struct AnimatorBudget {
    pub samples: usize,
    pub keyframes: usize,
}

impl Default for AnimatorBudget {
    fn default() -> Self {
        AnimatorBudget {
            samples: MAX_ANIMATOR_SAMPLES,
            keyframes: MAX_ANIMATOR_KEYFRAMES,
        }
    }
}

/// Why a document's animators were not lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    Samples,
    Keyframes,
}

/// One glyph's state at one time.
#[derive(Debug, Clone, Copy)]
struct GlyphState {
    anchor: [f64; 2],
    position: [f64; 2],
    scale: [f64; 2],
    rotation: f64,
    skew: f64,
    skew_axis: f64,
    opacity: f64,
    fill: [f64; 3],
    stroke: [f64; 3],
    stroke_width: f64,
    fill_opacity: f64,
    stroke_opacity: f64,
}

/// What the glyph groups need of the text document.
pub struct DocumentStyle {
    pub fill: Option<[f64; 3]>,
    pub stroke: Option<[f64; 3]>,
    pub stroke_width: f64,
    /// `j`: 0 left, 1 right, 2 centre (others lowered as left).
    pub justify: i64,
}

/// The per-glyph transforms, opacities and colours of one laid-out document over
/// `sampling`, as channels of Lottie properties: for each glyph, `tr` (anchor, position,
/// scale, rotation, skew, skew axis, opacity), and fill and stroke colour, opacity and width
/// properties. Fails (nothing spent) when over `budget`.
pub struct GlyphChannels {
    pub transform: Value,
    pub fill_color: Option<Value>,
    pub fill_opacity: Option<Value>,
    pub stroke_color: Option<Value>,
    pub stroke_opacity: Option<Value>,
    pub stroke_width: Option<Value>,
}

/// Lowers `animators` over `layout`: the channels of each glyph (in `layout.glyphs` order;
/// `None` for glyphs not `drawn`, such as spaces).
pub fn lower(
    animators: &Animators,
    layout: &Layout,
    style: &DocumentStyle,
    sampling: &Sampling,
    drawn: &[bool],
    budget: &mut AnimatorBudget,
) -> Result<Vec<Option<GlyphChannels>>, OverBudget> {
    let times: Vec<f64> = if animators.is_animated() {
        sampling.times.clone()
    } else {
        sampling.times.iter().take(1).copied().collect()
    };
    let glyph_count = layout.glyphs.len();
    // Every glyph counts (spaces too: tracking is computed for them).
    let samples = glyph_count.saturating_mul(times.len());
    if samples > budget.samples || (sampling.over_budget && animators.is_animated()) {
        return Err(OverBudget::Samples);
    }
    let letters: Vec<char> = layout.text.chars().collect();
    let frames = Frames::evaluate(animators, layout, &letters, &times);
    let tracking_shift = tracking_shifts(&frames, style.justify);
    let pivots = pivots(layout, &letters, animators.grouping);
    let paints = AnimatedPaints::of(animators, style);
    let mut written = 0usize;
    let mut result = Vec::with_capacity(glyph_count);
    // One pivot per glyph of the layout.
    for (glyph, pivot) in pivots.into_iter().enumerate() {
        if !drawn.get(glyph).copied().unwrap_or(false) {
            result.push(None);
            continue;
        }
        let states = glyph_states(&frames, style, glyph, pivot, tracking_shift.as_deref());
        result.push(Some(glyph_channels(&times, &states, &paints, &mut written)));
        if written > budget.keyframes {
            return Err(OverBudget::Keyframes);
        }
    }
    budget.samples -= samples;
    budget.keyframes -= written;
    Ok(result)
}

/// A document's animators evaluated at each sample time: what weighing a glyph needs.
struct Frames<'a> {
    animators: &'a Animators,
    layout: &'a Layout,
    /// Per animator: each letter's index for its selector, and the count of units.
    indexes: Vec<(Vec<f64>, usize)>,
    /// Per time: each animator's selector and properties.
    per_time: Vec<Vec<(SelectorAt, PropertiesAt)>>,
    /// Per time: the grouping alignment (`m.a`), percent.
    alignments: Vec<[f64; 2]>,
}

impl<'a> Frames<'a> {
    fn evaluate(
        animators: &'a Animators,
        layout: &'a Layout,
        letters: &[char],
        times: &[f64],
    ) -> Frames<'a> {
        let letter_count = letters.len();
        let indexes: Vec<(Vec<f64>, usize)> = animators
            .list
            .iter()
            .map(|animator| letter_indexes(letters, &animator.selector))
            .collect();
        let per_time: Vec<Vec<(SelectorAt, PropertiesAt)>> = times
            .iter()
            .map(|time| {
                animators
                    .list
                    .iter()
                    .zip(&indexes)
                    .map(|(animator, (_, total))| {
                        (
                            animator.selector.at(*time, *total, letter_count),
                            animator.properties.at(*time),
                        )
                    })
                    .collect()
            })
            .collect();
        let alignments: Vec<[f64; 2]> = times
            .iter()
            .map(|time| {
                let value = animators.alignment.at(*time);
                [
                    value.first().copied().unwrap_or(0.0),
                    value.get(1).copied().unwrap_or(0.0),
                ]
            })
            .collect();
        Frames {
            animators,
            layout,
            indexes,
            per_time,
            alignments,
        }
    }

    /// How much `animator` selects `glyph` at sample `time`.
    fn mult(&self, glyph: usize, time: usize, animator: usize) -> f64 {
        let letter = self.layout.glyphs[glyph].letter;
        let index = self.indexes[animator].0.get(letter).copied().unwrap_or(0.0);
        self.animators.list[animator]
            .selector
            .mult(&self.per_time[time][animator].0, index)
    }
}

/// Each glyph's shift by tracking animators at each sample time (glyph-major: glyph ×
/// times + time); `None` when no animator sets tracking.
///
/// Tracking (`t`) moves each letter and those after it on its line
/// (`TextAnimatorProperty.js`: `xPos += t * mult`, not for a line's first letter of left
/// aligned text; right and centred lines move back by what they grew).
fn tracking_shifts(frames: &Frames<'_>, justify: i64) -> Option<Vec<f64>> {
    if !frames.animators.uses(|p| p.tracking.is_some()) {
        return None;
    }
    let glyphs = &frames.layout.glyphs;
    let glyph_count = glyphs.len();
    let time_count = frames.per_time.len();
    let mut tracking_shift = vec![0.0; glyph_count.saturating_mul(time_count)];
    for time in 0..time_count {
        let mut line_start = 0;
        let mut lines_seen = 0.0;
        while line_start < glyph_count {
            let line = glyphs[line_start].line;
            let line_end = (line_start..glyph_count)
                .find(|g| glyphs[*g].line != line)
                .unwrap_or(glyph_count);
            let mut running = 0.0;
            let mut total = 0.0;
            let mut previous_letter = None;
            for glyph in line_start..line_end {
                let letter = glyphs[glyph].letter;
                if previous_letter != Some(letter) {
                    previous_letter = Some(letter);
                    let step: f64 = (0..frames.animators.list.len())
                        .filter_map(|a| {
                            frames.per_time[time][a]
                                .1
                                .tracking
                                .map(|t| t * frames.mult(glyph, time, a))
                        })
                        .sum();
                    total += step;
                    if glyph != line_start || justify != 0 {
                        running += step;
                    }
                }
                tracking_shift[glyph * time_count + time] = running;
            }
            lines_seen += 1.0;
            let first_letters: f64 = frames.per_time[time]
                .iter()
                .filter_map(|(_, p)| p.tracking)
                .sum();
            let justify = match justify {
                1 => -total,
                2 if total != 0.0 => -0.5 * total - 0.5 * first_letters * lines_seen,
                _ => 0.0,
            };
            for glyph in line_start..line_end {
                tracking_shift[glyph * time_count + time] += justify;
            }
            line_start = line_end;
        }
    }
    Some(tracking_shift)
}

/// Which paints of the document the animators change (each becomes a channel per glyph).
struct AnimatedPaints {
    fill: bool,
    fill_opacity: bool,
    stroke: bool,
    stroke_opacity: bool,
    stroke_width: bool,
}

impl AnimatedPaints {
    fn of(animators: &Animators, style: &DocumentStyle) -> AnimatedPaints {
        AnimatedPaints {
            fill: style.fill.is_some()
                && animators.uses(|p| {
                    p.fill_color.is_some()
                        || p.hue.is_some()
                        || p.saturation.is_some()
                        || p.brightness.is_some()
                }),
            fill_opacity: style.fill.is_some() && animators.uses(|p| p.fill_opacity.is_some()),
            stroke: style.stroke.is_some() && animators.uses(|p| p.stroke_color.is_some()),
            stroke_opacity: style.stroke.is_some()
                && animators.uses(|p| p.stroke_opacity.is_some()),
            stroke_width: style.stroke.is_some() && animators.uses(|p| p.stroke_width.is_some()),
        }
    }
}

/// The states of `glyph` at each sample time, its pivot being `(pivot, width)`.
fn glyph_states(
    frames: &Frames<'_>,
    style: &DocumentStyle,
    glyph: usize,
    (pivot, width): ([f64; 2], f64),
    tracking_shift: Option<&[f64]>,
) -> Vec<GlyphState> {
    let y_offset = frames.layout.size * 1.2 * 0.714;
    let time_count = frames.per_time.len();
    let mut states = Vec::with_capacity(time_count);
    for time in 0..time_count {
        let alignment = frames.alignments[time];
        let center = [
            pivot[0] + alignment[0] * width * 0.005,
            pivot[1] + alignment[1] * y_offset * 0.01,
        ];
        let mut state = GlyphState {
            anchor: center,
            position: center,
            scale: [1.0, 1.0],
            rotation: 0.0,
            skew: 0.0,
            skew_axis: 0.0,
            opacity: 1.0,
            fill: style.fill.unwrap_or([0.0; 3]),
            stroke: style.stroke.unwrap_or([0.0; 3]),
            stroke_width: style.stroke_width,
            fill_opacity: 1.0,
            stroke_opacity: 1.0,
        };
        // lottie-web composes per letter: anchor offsets, then scales, then per
        // animator skew and rotation, then positions; a group transform (anchor, scale,
        // skew, rotation, position) draws the same when skews and rotations do not
        // interleave across animators (sums otherwise).
        for (animator, (_, properties)) in frames.per_time[time].iter().enumerate() {
            let m = frames.mult(glyph, time, animator);
            if m == 0.0 {
                continue;
            }
            state.apply(properties, m);
        }
        if let Some(tracking_shift) = tracking_shift {
            state.position[0] += tracking_shift[glyph * time_count + time];
        }
        states.push(state);
    }
    states
}

impl GlyphState {
    /// One animator's `properties` applied with selection `m`.
    fn apply(&mut self, properties: &PropertiesAt, m: f64) {
        let state = self;
        if let Some([x, y]) = properties.anchor {
            state.anchor[0] += x * m;
            state.anchor[1] += y * m;
        }
        if let Some([x, y]) = properties.scale {
            state.scale[0] *= 1.0 + (x - 1.0) * m;
            state.scale[1] *= 1.0 + (y - 1.0) * m;
        }
        if let Some(skew) = properties.skew {
            state.skew += skew * m;
            state.skew_axis += properties.skew_axis.unwrap_or(0.0) * m;
        }
        if let Some(rotation) = properties.rotation {
            state.rotation += rotation * m;
        }
        if let Some(opacity) = properties.opacity {
            state.opacity += (opacity * m - state.opacity) * m;
        }
        if let Some(width) = properties.stroke_width {
            state.stroke_width += width * m;
        }
        if let Some(color) = properties.stroke_color {
            for (channel, target) in state.stroke.iter_mut().zip(color) {
                *channel += (target - *channel) * m;
            }
        }
        if let Some(color) = properties.fill_color {
            for (channel, target) in state.fill.iter_mut().zip(color) {
                *channel += (target - *channel) * m;
            }
        }
        if let Some(hue) = properties.hue {
            let mut hsv = rgb_to_hsv(state.fill);
            hsv[0] += hue * m / 360.0;
            if hsv[0] > 1.0 {
                hsv[0] -= 1.0;
            } else if hsv[0] < 0.0 {
                hsv[0] += 1.0;
            }
            state.fill = hsv_to_rgb(hsv);
        }
        if let Some(saturation) = properties.saturation {
            let mut hsv = rgb_to_hsv(state.fill);
            hsv[1] = (hsv[1] + saturation * m).clamp(0.0, 1.0);
            state.fill = hsv_to_rgb(hsv);
        }
        if let Some(brightness) = properties.brightness {
            let mut hsv = rgb_to_hsv(state.fill);
            hsv[2] = (hsv[2] + brightness * m).clamp(0.0, 1.0);
            state.fill = hsv_to_rgb(hsv);
        }
        // After Effects' fill and stroke opacity (lottie-web does not draw them):
        // from 100 % towards the animator's value by the selection.
        if let Some(opacity) = properties.fill_opacity {
            state.fill_opacity += (opacity - 1.0) * m;
        }
        if let Some(opacity) = properties.stroke_opacity {
            state.stroke_opacity += (opacity - 1.0) * m;
        }
        if let Some([x, y]) = properties.position {
            state.position[0] += x * m;
            state.position[1] += y * m;
        }
    }
}

/// One glyph's channels from its `states` at `times`, the keyframes written counted into
/// `written`.
fn glyph_channels(
    times: &[f64],
    states: &[GlyphState],
    paints: &AnimatedPaints,
    written: &mut usize,
) -> GlyphChannels {
    let pick = |get: &dyn Fn(&GlyphState) -> Vec<f64>| -> Vec<Vec<f64>> {
        states.iter().map(get).collect()
    };
    let mut channel_of =
        |get: &dyn Fn(&GlyphState) -> Vec<f64>| channel(times, &pick(get), written);
    let transform = json!({
        "ty": "tr",
        "a": channel_of(&|s| s.anchor.to_vec()),
        "p": channel_of(&|s| s.position.to_vec()),
        "s": channel_of(&|s| vec![s.scale[0] * 100.0, s.scale[1] * 100.0]),
        "r": channel_of(&|s| vec![s.rotation]),
        "sk": channel_of(&|s| vec![s.skew]),
        "sa": channel_of(&|s| vec![s.skew_axis]),
        "o": channel_of(&|s| vec![s.opacity.clamp(0.0, 1.0) * 100.0]),
    });
    let color = |c: [f64; 3]| {
        vec![
            c[0].clamp(0.0, 1.0),
            c[1].clamp(0.0, 1.0),
            c[2].clamp(0.0, 1.0),
            1.0,
        ]
    };
    let fill_color = paints.fill.then(|| channel_of(&|s| color(s.fill)));
    let fill_opacity = paints
        .fill_opacity
        .then(|| channel_of(&|s| vec![s.fill_opacity.clamp(0.0, 1.0) * 100.0]));
    let stroke_color = paints.stroke.then(|| channel_of(&|s| color(s.stroke)));
    let stroke_opacity = paints
        .stroke_opacity
        .then(|| channel_of(&|s| vec![s.stroke_opacity.clamp(0.0, 1.0) * 100.0]));
    let stroke_width = paints
        .stroke_width
        .then(|| channel_of(&|s| vec![s.stroke_width.max(0.0)]));
    GlyphChannels {
        transform,
        fill_color,
        fill_opacity,
        stroke_color,
        stroke_opacity,
        stroke_width,
    }
}
