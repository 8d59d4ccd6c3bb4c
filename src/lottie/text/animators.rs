//! Text animators (`t.a`) lowered to per-glyph keyframed groups: rlottie draws no text, let
//! alone animators, so once a text document is laid out each glyph becomes its own group
//! whose transform, opacity, fill and stroke are sampled at the output's frame times.
//!
//! The maths is lottie-web's, the player designers check their templates in (airbnb/
//! lottie-web 5.13, `player/js/utils/text/`): which characters a range selector covers and
//! by how much ([`Selector::mult`], from `TextSelectorProperty.js`), how the letters are
//! counted (`TextProperty.js` `completeTextData`), and how each animator's properties move,
//! scale, rotate and colour a letter around its anchor (`TextAnimatorProperty.js`
//! `getMeasures`). Text on a path, 3D rotations (`rx`, `ry`) and expression selectors are
//! not lowered (reported as warnings).

use super::layout::Layout;
use serde_json::{json, Value};

/// Glyph samples (glyphs × frame times) evaluated for one template's animators. Measured
/// with `lottie-render inspect` (release build) on text-dynamic-name-template with 500, 2 500
/// and 5 000 animated letters over its 61 frames: each sample costs about 5 µs of CPU and
/// 1.3 KB of peak memory all told (selectors, the keyframes written, the glyph groups they
/// land in), so the bound keeps the lowering near a second and 250 MB, well inside the
/// analysis worker's 5 s CPU and 1 GiB budgets (a debug build is three times slower): a
/// hundred glyphs animated over half a minute at 60 fps fits; a 7 MB text of 5 000 animated
/// letters (305 000 samples) renders without its animators, with a warning.
pub const MAX_ANIMATOR_SAMPLES: usize = 200_000;
/// Keyframes written for one template's animators (after constant runs and straight
/// stretches are merged). Each costs about 250 bytes as a JSON value, so the bound keeps the
/// lowered template under about 75 MB in the worker.
pub const MAX_ANIMATOR_KEYFRAMES: usize = 300_000;
/// Animators of one text layer lowered: After Effects templates use a handful; more only
/// multiplies the work.
pub const MAX_ANIMATORS_PER_LAYER: usize = 32;
/// Keyframes of one animated property read: far more than a designer sets by hand.
const MAX_KEYFRAMES_PER_PROPERTY: usize = 10_000;
/// Sampled values are rounded to this step: far below a pixel or a colour level, and equal
/// neighbours then merge.
const ROUNDING: f64 = 1e-4;
/// The seed of "randomize order": a fixed one, so a template always renders the same.
const RANDOM_SEED: u64 = 0x5EED_7E47_A11A_7E12;

// ---------------------------------------------------------------------------------------
// Animated properties.

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
    fn constant(value: Vec<f64>) -> Property {
        Property {
            value,
            keyframes: Vec::new(),
        }
    }

    /// Reads a Lottie property (`{"a": …, "k": …}`); `None` when it has no usable value.
    pub fn parse(property: &Value) -> Option<Property> {
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

    fn is_animated(&self) -> bool {
        self.keyframes.len() > 1
    }

    /// The value at `time` (the layer's frames), as lottie-web interpolates keyframes:
    /// the first value before the first keyframe, the last after the last, eased between.
    pub fn at(&self, time: f64) -> Vec<f64> {
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

    fn scalar(&self, time: f64) -> f64 {
        self.at(time).first().copied().unwrap_or(0.0)
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

// ---------------------------------------------------------------------------------------
// Range selectors.

/// A range selector (`s` of an animator).
#[derive(Debug, Clone)]
struct Selector {
    /// Based on (`b`): 1 characters, 2 characters excluding spaces, 3 words, 4 lines.
    based: i64,
    /// Units (`r`): indexes (2) rather than percent (1).
    index_units: bool,
    /// Shape (`sh`): 1 square, 2 ramp up, 3 ramp down, 4 triangle, 5 round, 6 smooth.
    shape: i64,
    randomize: bool,
    start: Property,
    end: Option<Property>,
    offset: Property,
    amount: Property,
    ease_high: Property,
    ease_low: Property,
    smoothness: Property,
}

/// A selector's values at one time.
#[derive(Debug, Clone, Copy)]
struct SelectorAt {
    start: f64,
    end: f64,
    amount: f64,
    /// Easing control points (x1, y1, x2, y2).
    ease: [f64; 4],
    smoothness: f64,
}

fn property_or(container: &Value, key: &str, default: f64) -> Property {
    container
        .get(key)
        .and_then(Property::parse)
        .unwrap_or_else(|| Property::constant(vec![default]))
}

impl Selector {
    fn parse(selector: &Value) -> Selector {
        let integer =
            |key: &str, default: i64| selector.get(key).and_then(Value::as_i64).unwrap_or(default);
        Selector {
            based: integer("b", 1),
            index_units: integer("r", 1) == 2,
            shape: integer("sh", 1),
            randomize: integer("rn", 0) == 1,
            start: property_or(selector, "s", 0.0),
            end: selector.get("e").and_then(Property::parse),
            offset: property_or(selector, "o", 0.0),
            amount: property_or(selector, "a", 100.0),
            ease_high: property_or(selector, "xe", 0.0),
            ease_low: property_or(selector, "ne", 0.0),
            smoothness: property_or(selector, "sm", 100.0),
        }
    }

    fn is_animated(&self) -> bool {
        [
            &self.start,
            &self.offset,
            &self.amount,
            &self.ease_high,
            &self.ease_low,
            &self.smoothness,
        ]
        .iter()
        .any(|property| property.is_animated())
            || self.end.as_ref().is_some_and(Property::is_animated)
    }

    /// The selector at `time` for a text of `total` units (`TextSelectorProperty.js`
    /// `getValue`): start and end in units of letters, ordered.
    fn at(&self, time: f64, total: usize, letters: usize) -> SelectorAt {
        let end = match &self.end {
            Some(end) => end.scalar(time),
            // Index units without an end cover the whole text (lottie-web sets it to the
            // letter count).
            None if self.index_units => letters as f64,
            None => 100.0,
        };
        let to_letters = |value: f64| {
            if self.index_units {
                value
            } else if total == 0 {
                0.0
            } else {
                value * total as f64 / 100.0
            }
        };
        let offset = to_letters(self.offset.scalar(time));
        let mut start = to_letters(self.start.scalar(time)) + offset;
        let mut end = to_letters(end) + offset;
        if start > end {
            std::mem::swap(&mut start, &mut end);
        }
        let (ease_low, ease_high) = (self.ease_low.scalar(time), self.ease_high.scalar(time));
        let (mut x1, mut y1, mut x2, mut y2) = (0.0, 0.0, 1.0, 1.0);
        if ease_low > 0.0 {
            x1 = ease_low / 100.0;
        } else {
            y1 = -ease_low / 100.0;
        }
        if ease_high > 0.0 {
            x2 = 1.0 - ease_high / 100.0;
        } else {
            y2 = 1.0 + ease_high / 100.0;
        }
        SelectorAt {
            start,
            end,
            amount: self.amount.scalar(time) / 100.0,
            ease: [x1, y1, x2, y2],
            smoothness: self.smoothness.scalar(time),
        }
    }

    /// How much letter `index` is selected (`TextSelectorProperty.js` `getMult`), times
    /// the amount.
    fn mult(&self, at: &SelectorAt, index: f64) -> f64 {
        let (s, e) = (at.start, at.end);
        let ease = |mult: f64| bezier_ease(at.ease[0], at.ease[1], at.ease[2], at.ease[3], mult);
        let ramp = || (0.5 / (e - s) + (index - s) / (e - s)).clamp(0.0, 1.0);
        let mut mult = match self.shape {
            2 => ease(if e == s {
                f64::from(u8::from(index >= e))
            } else {
                ramp()
            }),
            3 => ease(if e == s {
                f64::from(u8::from(index < e))
            } else {
                1.0 - ramp()
            }),
            4 => ease(if e == s {
                0.0
            } else {
                let mult = ramp();
                if mult < 0.5 {
                    mult * 2.0
                } else {
                    1.0 - 2.0 * (mult - 0.5)
                }
            }),
            5 => ease(if e == s {
                0.0
            } else {
                let total = e - s;
                let index = (index + 0.5 - s).max(0.0).min(e - s);
                let x = -total / 2.0 + index;
                let a = total / 2.0;
                (1.0 - (x * x) / (a * a)).max(0.0).sqrt()
            }),
            6 => ease(if e == s {
                0.0
            } else {
                let index = (index + 0.5 - s).max(0.0).min(e - s);
                (1.0 + (std::f64::consts::PI + std::f64::consts::PI * 2.0 * index / (e - s)).cos())
                    / 2.0
            }),
            _ => {
                let mut mult = 0.0;
                if index >= s.floor() {
                    mult = if index - s < 0.0 {
                        (e.min(1.0) - (s - index)).clamp(0.0, 1.0)
                    } else {
                        (e - index).clamp(0.0, 1.0)
                    };
                }
                ease(mult)
            }
        };
        if at.smoothness != 100.0 {
            let smoothness = if at.smoothness == 0.0 {
                1e-8
            } else {
                at.smoothness / 100.0
            };
            let threshold = 0.5 - smoothness * 0.5;
            mult = if mult < threshold {
                0.0
            } else {
                ((mult - threshold) / smoothness).min(1.0)
            };
        }
        mult * at.amount
    }
}

// ---------------------------------------------------------------------------------------
// Animator properties.

/// The properties one animator sets (`a` of an animator), lottie-web's units: scale and
/// opacities as fractions, angles in degrees.
#[derive(Debug, Clone, Default)]
struct Properties {
    position: Option<Property>,
    anchor: Option<Property>,
    scale: Option<Property>,
    rotation: Option<Property>,
    skew: Option<Property>,
    skew_axis: Option<Property>,
    opacity: Option<Property>,
    fill_color: Option<Property>,
    stroke_color: Option<Property>,
    stroke_width: Option<Property>,
    fill_opacity: Option<Property>,
    stroke_opacity: Option<Property>,
    hue: Option<Property>,
    saturation: Option<Property>,
    brightness: Option<Property>,
    tracking: Option<Property>,
}

impl Properties {
    fn parse(properties: &Value) -> Properties {
        let get = |key: &str| properties.get(key).and_then(Property::parse);
        Properties {
            position: get("p"),
            anchor: get("a"),
            scale: get("s"),
            rotation: get("r"),
            skew: get("sk"),
            skew_axis: get("sa"),
            opacity: get("o"),
            fill_color: get("fc"),
            stroke_color: get("sc"),
            stroke_width: get("sw"),
            fill_opacity: get("fo"),
            stroke_opacity: get("so"),
            hue: get("fh"),
            saturation: get("fs"),
            brightness: get("fb"),
            tracking: get("t"),
        }
    }

    fn all(&self) -> [&Option<Property>; 16] {
        [
            &self.position,
            &self.anchor,
            &self.scale,
            &self.rotation,
            &self.skew,
            &self.skew_axis,
            &self.opacity,
            &self.fill_color,
            &self.stroke_color,
            &self.stroke_width,
            &self.fill_opacity,
            &self.stroke_opacity,
            &self.hue,
            &self.saturation,
            &self.brightness,
            &self.tracking,
        ]
    }

    fn at(&self, time: f64) -> PropertiesAt {
        let pair = |property: &Option<Property>, scale: f64| {
            property.as_ref().map(|property| {
                let value = property.at(time);
                [
                    value.first().copied().unwrap_or(0.0) * scale,
                    value.get(1).copied().unwrap_or(0.0) * scale,
                ]
            })
        };
        let scalar = |property: &Option<Property>, scale: f64| {
            property
                .as_ref()
                .map(|property| property.scalar(time) * scale)
        };
        let color = |property: &Option<Property>| {
            property.as_ref().map(|property| {
                let value = property.at(time);
                [0, 1, 2].map(|index| value.get(index).copied().unwrap_or(0.0))
            })
        };
        PropertiesAt {
            position: pair(&self.position, 1.0),
            anchor: pair(&self.anchor, 1.0),
            scale: pair(&self.scale, 0.01),
            rotation: scalar(&self.rotation, 1.0),
            skew: scalar(&self.skew, 1.0),
            skew_axis: scalar(&self.skew_axis, 1.0),
            opacity: scalar(&self.opacity, 0.01),
            fill_color: color(&self.fill_color),
            stroke_color: color(&self.stroke_color),
            stroke_width: scalar(&self.stroke_width, 1.0),
            fill_opacity: scalar(&self.fill_opacity, 0.01),
            stroke_opacity: scalar(&self.stroke_opacity, 0.01),
            hue: scalar(&self.hue, 1.0),
            saturation: scalar(&self.saturation, 0.01),
            brightness: scalar(&self.brightness, 0.01),
            tracking: scalar(&self.tracking, 1.0),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct PropertiesAt {
    position: Option<[f64; 2]>,
    anchor: Option<[f64; 2]>,
    scale: Option<[f64; 2]>,
    rotation: Option<f64>,
    skew: Option<f64>,
    skew_axis: Option<f64>,
    opacity: Option<f64>,
    fill_color: Option<[f64; 3]>,
    stroke_color: Option<[f64; 3]>,
    stroke_width: Option<f64>,
    fill_opacity: Option<f64>,
    stroke_opacity: Option<f64>,
    hue: Option<f64>,
    saturation: Option<f64>,
    brightness: Option<f64>,
    tracking: Option<f64>,
}

#[derive(Debug, Clone)]
struct Animator {
    selector: Selector,
    properties: Properties,
}

/// A text layer's animators, read once.
#[derive(Debug, Clone)]
pub struct Animators {
    list: Vec<Animator>,
    /// Anchor point grouping (`m.g`): 1 characters, 2 words, 3 lines, 4 all.
    grouping: i64,
    /// Grouping alignment (`m.a`), percent.
    alignment: Property,
    /// What the layer's animators use that is not lowered.
    pub unsupported: Vec<&'static str>,
}

impl Animators {
    /// The animators of a text layer's `t`, `None` when it has none.
    pub fn parse(text_data: &Value) -> Option<Animators> {
        let entries = text_data.get("a")?.as_array()?;
        if entries.is_empty() {
            return None;
        }
        let mut unsupported = Vec::new();
        if entries.len() > MAX_ANIMATORS_PER_LAYER {
            unsupported.push("more than 32 animators (the rest)");
        }
        let list: Vec<Animator> = entries
            .iter()
            .take(MAX_ANIMATORS_PER_LAYER)
            .map(|entry| {
                let properties = entry.get("a").unwrap_or(&Value::Null);
                if properties.get("rx").is_some() || properties.get("ry").is_some() {
                    unsupported.push("3D rotation (rx, ry)");
                }
                Animator {
                    selector: Selector::parse(entry.get("s").unwrap_or(&Value::Null)),
                    properties: Properties::parse(properties),
                }
            })
            .collect();
        unsupported.sort_unstable();
        unsupported.dedup();
        Some(Animators {
            list,
            grouping: text_data
                .pointer("/m/g")
                .and_then(Value::as_i64)
                .unwrap_or(1),
            alignment: text_data
                .pointer("/m/a")
                .and_then(Property::parse)
                .unwrap_or_else(|| Property::constant(vec![0.0, 0.0])),
            unsupported,
        })
    }

    /// Whether anything the animators set changes over time.
    pub fn is_animated(&self) -> bool {
        self.alignment.is_animated()
            || self.list.iter().any(|animator| {
                animator.selector.is_animated()
                    || animator
                        .properties
                        .all()
                        .iter()
                        .any(|property| property.as_ref().is_some_and(Property::is_animated))
            })
    }

    fn uses(&self, pick: impl Fn(&Properties) -> bool) -> bool {
        self.list.iter().any(|animator| pick(&animator.properties))
    }
}

// ---------------------------------------------------------------------------------------
// Letters.

/// Minimal deterministic generator (SplitMix64) for "randomize order": the order only has
/// to be a fixed shuffle, not unpredictable, so no dependency is needed.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % bound.max(1) as u64) as usize
    }
}

fn is_newline(character: char) -> bool {
    matches!(character, '\r' | '\n' | '\u{3}')
}

/// Each letter's index for one selector and the count of units (`totalChars`), as
/// `TextProperty.js` `completeTextData` counts them.
fn letter_indexes(letters: &[char], selector: &Selector) -> (Vec<f64>, usize) {
    let mut indexes = Vec::with_capacity(letters.len());
    let mut counted = Vec::new();
    let mut index = 0usize;
    let last = letters.len().saturating_sub(1);
    for (position, character) in letters.iter().enumerate() {
        indexes.push(index);
        let newline = is_newline(*character);
        let advances = match selector.based {
            2 => !newline && *character != ' ',
            3 => newline || *character == ' ' || position == last,
            4 => newline || position == last,
            _ => !newline,
        };
        if advances {
            counted.push(index);
            index += 1;
        }
    }
    if selector.randomize {
        // Each run of letters sharing an index takes one index drawn from the pool.
        let mut random = SplitMix(RANDOM_SEED);
        let mut current = None;
        let mut drawn = 0;
        for slot in indexes.iter_mut() {
            if current != Some(*slot) {
                current = Some(*slot);
                drawn = if counted.is_empty() {
                    *slot
                } else {
                    counted.swap_remove(random.below(counted.len()))
                };
            }
            *slot = drawn;
        }
    }
    (indexes.into_iter().map(|i| i as f64).collect(), index)
}

/// HSV of an RGB colour (0..=1), lottie-web's `RGBtoHSV`.
fn rgb_to_hsv(color: [f64; 3]) -> [f64; 3] {
    let [r, g, b] = color;
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let d = max - min;
    let s = if max == 0.0 { 0.0 } else { d / max };
    let h = if d == 0.0 {
        0.0
    } else if max == r {
        (g - b + d * if g < b { 6.0 } else { 0.0 }) / (6.0 * d)
    } else if max == g {
        (b - r + d * 2.0) / (6.0 * d)
    } else {
        (r - g + d * 4.0) / (6.0 * d)
    };
    [h, s, max]
}

/// RGB of an HSV colour, lottie-web's `HSVtoRGB`.
fn hsv_to_rgb([h, s, v]: [f64; 3]) -> [f64; 3] {
    let i = (h * 6.0).floor();
    let f = h * 6.0 - i;
    let p = v * (1.0 - s);
    let q = v * (1.0 - f * s);
    let t = v * (1.0 - (1.0 - f) * s);
    match (i as i64).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

// ---------------------------------------------------------------------------------------
// Lowering.

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
    pub fn new(from: f64, to: f64, step: f64) -> Sampling {
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
    pub fn within(&self, from: f64, to: Option<f64>) -> Sampling {
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

fn round(value: f64) -> f64 {
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
fn channel(times: &[f64], samples: &[Vec<f64>], written: &mut usize) -> Value {
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

/// The pivot of each glyph (layer coordinates): the centre of its character, word or line
/// on the baseline (lottie-web's `an / 2 - add` offset), moved by the grouping alignment.
fn pivots(layout: &Layout, letters: &[char], grouping: i64) -> Vec<([f64; 2], f64)> {
    // Extent of each group of glyphs: (min x, max x).
    let group_of = |glyph: &super::layout::PlacedGlyph| -> usize {
        match grouping {
            // Words: letters up to and including the space or line break that ends them.
            2 => letters
                .iter()
                .take(glyph.letter)
                .filter(|c| **c == ' ' || is_newline(**c))
                .count(),
            3 => glyph.line,
            _ => glyph.letter,
        }
    };
    let groups: Vec<usize> = if grouping == 2 {
        // Word index per letter, counted once (linear).
        let mut word = 0;
        let mut per_letter = Vec::with_capacity(letters.len() + 1);
        for character in letters {
            per_letter.push(word);
            if *character == ' ' || is_newline(*character) {
                word += 1;
            }
        }
        per_letter.push(word);
        layout
            .glyphs
            .iter()
            .map(|glyph| per_letter.get(glyph.letter).copied().unwrap_or(word))
            .collect()
    } else {
        layout.glyphs.iter().map(group_of).collect()
    };
    let mut extents: std::collections::HashMap<usize, (f64, f64)> =
        std::collections::HashMap::new();
    for (glyph, group) in layout.glyphs.iter().zip(&groups) {
        let is_space = letters.get(glyph.letter).is_some_and(|c| c.is_whitespace());
        if grouping == 2 && is_space {
            continue;
        }
        let (left, right) = (glyph.origin[0], glyph.origin[0] + glyph.advance);
        extents
            .entry(*group)
            .and_modify(|(low, high)| {
                *low = low.min(left);
                *high = high.max(right);
            })
            .or_insert((left, right));
    }
    layout
        .glyphs
        .iter()
        .zip(&groups)
        .map(|(glyph, group)| {
            let (low, high) = extents
                .get(group)
                .copied()
                .unwrap_or((glyph.origin[0], glyph.origin[0] + glyph.advance));
            let baseline = layout
                .lines
                .get(glyph.line)
                .map_or(glyph.origin[1], |line| line.baseline);
            ([(low + high) / 2.0, baseline], high - low)
        })
        .collect()
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
    let letter_count = letters.len();
    let indexes: Vec<(Vec<f64>, usize)> = animators
        .list
        .iter()
        .map(|animator| letter_indexes(&letters, &animator.selector))
        .collect();
    // Per time: each animator's selector and properties.
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
    let mult = |glyph: usize, time: usize, animator: usize| -> f64 {
        let letter = layout.glyphs[glyph].letter;
        let index = indexes[animator].0.get(letter).copied().unwrap_or(0.0);
        animators.list[animator]
            .selector
            .mult(&per_time[time][animator].0, index)
    };
    // Tracking (`t`) moves each letter and those after it on its line
    // (`TextAnimatorProperty.js`: `xPos += t * mult`, not for a line's first letter of left
    // aligned text; right and centred lines move back by what they grew).
    let uses_tracking = animators.uses(|p| p.tracking.is_some());
    let mut tracking_shift = vec![0.0; if uses_tracking { samples } else { 0 }];
    if uses_tracking {
        for time in 0..times.len() {
            let mut line_start = 0;
            let mut lines_seen = 0.0;
            while line_start < glyph_count {
                let line = layout.glyphs[line_start].line;
                let line_end = (line_start..glyph_count)
                    .find(|g| layout.glyphs[*g].line != line)
                    .unwrap_or(glyph_count);
                let mut running = 0.0;
                let mut total = 0.0;
                let mut previous_letter = None;
                for glyph in line_start..line_end {
                    let letter = layout.glyphs[glyph].letter;
                    if previous_letter != Some(letter) {
                        previous_letter = Some(letter);
                        let step: f64 = (0..animators.list.len())
                            .filter_map(|a| {
                                per_time[time][a]
                                    .1
                                    .tracking
                                    .map(|t| t * mult(glyph, time, a))
                            })
                            .sum();
                        total += step;
                        if glyph != line_start || style.justify != 0 {
                            running += step;
                        }
                    }
                    tracking_shift[glyph * times.len() + time] = running;
                }
                lines_seen += 1.0;
                let first_letters: f64 =
                    per_time[time].iter().filter_map(|(_, p)| p.tracking).sum();
                let justify = match style.justify {
                    1 => -total,
                    2 if total != 0.0 => -0.5 * total - 0.5 * first_letters * lines_seen,
                    _ => 0.0,
                };
                for glyph in line_start..line_end {
                    tracking_shift[glyph * times.len() + time] += justify;
                }
                line_start = line_end;
            }
        }
    }
    let size = layout.size;
    let y_offset = size * 1.2 * 0.714;
    let pivots = pivots(layout, &letters, animators.grouping);
    let fill_animated = style.fill.is_some()
        && animators.uses(|p| {
            p.fill_color.is_some()
                || p.hue.is_some()
                || p.saturation.is_some()
                || p.brightness.is_some()
        });
    let fill_opacity_animated =
        style.fill.is_some() && animators.uses(|p| p.fill_opacity.is_some());
    let stroke_animated = style.stroke.is_some() && animators.uses(|p| p.stroke_color.is_some());
    let stroke_opacity_animated =
        style.stroke.is_some() && animators.uses(|p| p.stroke_opacity.is_some());
    let stroke_width_animated =
        style.stroke.is_some() && animators.uses(|p| p.stroke_width.is_some());
    let mut written = 0usize;
    let mut result = Vec::with_capacity(glyph_count);
    for glyph in 0..glyph_count {
        if !drawn.get(glyph).copied().unwrap_or(false) {
            result.push(None);
            continue;
        }
        let (pivot, width) = pivots[glyph];
        let mut states = Vec::with_capacity(times.len());
        for time in 0..times.len() {
            let alignment = alignments[time];
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
            for (animator, (_, properties)) in per_time[time].iter().enumerate() {
                let m = mult(glyph, time, animator);
                if m == 0.0 {
                    continue;
                }
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
            if uses_tracking {
                state.position[0] += tracking_shift[glyph * times.len() + time];
            }
            states.push(state);
        }
        let pick = |get: &dyn Fn(&GlyphState) -> Vec<f64>| -> Vec<Vec<f64>> {
            states.iter().map(get).collect()
        };
        let mut channel_of =
            |get: &dyn Fn(&GlyphState) -> Vec<f64>| channel(&times, &pick(get), &mut written);
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
        let fill_color = fill_animated.then(|| channel_of(&|s| color(s.fill)));
        let fill_opacity = fill_opacity_animated
            .then(|| channel_of(&|s| vec![s.fill_opacity.clamp(0.0, 1.0) * 100.0]));
        let stroke_color = stroke_animated.then(|| channel_of(&|s| color(s.stroke)));
        let stroke_opacity = stroke_opacity_animated
            .then(|| channel_of(&|s| vec![s.stroke_opacity.clamp(0.0, 1.0) * 100.0]));
        let stroke_width =
            stroke_width_animated.then(|| channel_of(&|s| vec![s.stroke_width.max(0.0)]));
        result.push(Some(GlyphChannels {
            transform,
            fill_color,
            fill_opacity,
            stroke_color,
            stroke_opacity,
            stroke_width,
        }));
        if written > budget.keyframes {
            return Err(OverBudget::Keyframes);
        }
    }
    budget.samples -= samples;
    budget.keyframes -= written;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(json: Value) -> Selector {
        Selector::parse(&json)
    }

    #[test]
    fn a_square_selector_covers_the_letters_between_start_and_end() {
        // Three letters, start 33.3 %, end 66.7 %: the second letter only.
        let s = selector(
            json!({"b": 1, "sh": 1, "s": {"a": 0, "k": 100.0 / 3.0}, "e": {"a": 0, "k": 200.0 / 3.0}}),
        );
        let at = s.at(0.0, 3, 3);
        let mults: Vec<f64> = (0..3).map(|i| s.mult(&at, f64::from(i))).collect();
        assert!(
            mults[0].abs() < 1e-9 && (mults[1] - 1.0).abs() < 1e-9 && mults[2].abs() < 1e-9,
            "{mults:?}"
        );
    }

    #[test]
    fn ramps_follow_lottie_webs_formula() {
        // Ramp up over 4 letters (0 .. 4): mult = 0.5/4 + i/4.
        let s = selector(
            json!({"b": 1, "sh": 2, "r": 2, "s": {"a": 0, "k": 0}, "e": {"a": 0, "k": 4}}),
        );
        let at = s.at(0.0, 4, 4);
        for i in 0..4 {
            let expected = 0.125 + f64::from(i) / 4.0;
            assert!((s.mult(&at, f64::from(i)) - expected).abs() < 1e-9);
        }
    }

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

    #[test]
    fn easing_matches_known_points_of_css_ease() {
        // CSS `ease` (0.25, 0.1, 0.25, 1) at x = 0.5 is about 0.8024.
        assert!((bezier_ease(0.25, 0.1, 0.25, 1.0, 0.5) - 0.8024).abs() < 1e-3);
        assert_eq!(bezier_ease(0.0, 0.0, 1.0, 1.0, 0.3), 0.3);
    }

    #[test]
    fn randomized_order_is_a_fixed_permutation() {
        let letters: Vec<char> = "abcdefgh".chars().collect();
        let s = selector(json!({"b": 1, "rn": 1}));
        let (first, total) = letter_indexes(&letters, &s);
        let (second, _) = letter_indexes(&letters, &s);
        assert_eq!(first, second);
        assert_eq!(total, 8);
        let mut sorted = first.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, (0..8).map(f64::from).collect::<Vec<_>>());
    }

    #[test]
    fn words_and_lines_are_counted_as_lottie_web_counts_them() {
        let letters: Vec<char> = "ab cd\ref".chars().collect();
        let words = selector(json!({"b": 3}));
        assert_eq!(
            letter_indexes(&letters, &words),
            (vec![0., 0., 0., 1., 1., 1., 2., 2.], 3)
        );
        let lines = selector(json!({"b": 4}));
        assert_eq!(letter_indexes(&letters, &lines).1, 2);
        let no_spaces = selector(json!({"b": 2}));
        assert_eq!(letter_indexes(&letters, &no_spaces).1, 6);
    }
}
