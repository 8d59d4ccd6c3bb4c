//! Range selectors (`s` of an animator): which letters an animator covers and by how much
//! (lottie-web's `TextSelectorProperty.js`), and how letters are counted for a selector
//! (characters, characters without spaces, words, lines; `TextProperty.js`
//! `completeTextData`), in a fixed random order when asked.

use super::property::Property;
use super::random::SplitMix;
use crate::lottie::lowering::bezier_ease;
use serde_json::Value;

/// The seed of "randomize order": a fixed one, so a template always renders the same.
const RANDOM_SEED: u64 = 0x5EED_7E47_A11A_7E12;

/// A range selector (`s` of an animator).
#[derive(Debug, Clone)]
pub(super) struct Selector {
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
pub(super) struct SelectorAt {
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
    pub(super) fn parse(selector: &Value) -> Selector {
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

    pub(super) fn is_animated(&self) -> bool {
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
    pub(super) fn at(&self, time: f64, total: usize, letters: usize) -> SelectorAt {
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
    pub(super) fn mult(&self, at: &SelectorAt, index: f64) -> f64 {
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

pub(super) fn is_newline(character: char) -> bool {
    matches!(character, '\r' | '\n' | '\u{3}')
}

/// Each letter's index for one selector and the count of units (`totalChars`), as
/// `TextProperty.js` `completeTextData` counts them.
pub(super) fn letter_indexes(letters: &[char], selector: &Selector) -> (Vec<f64>, usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
