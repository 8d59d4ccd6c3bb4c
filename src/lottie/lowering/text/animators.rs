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
//!
//! The parts: `property` evaluates an animated property over time; `selector` is the range
//! selectors' maths and letter counting (its "randomize order" from `random`); `properties`
//! is the set one animator sets; `colour` converts for the hue, saturation and brightness
//! animators; `sampling` says when to sample; `lowering` makes each glyph's states and,
//! through `pivots` and `channels`, the Lottie properties they become.

mod channels;
mod colour;
mod lowering;
mod pivots;
mod properties;
mod property;
mod random;
mod sampling;
mod selector;

pub use lowering::{lower, AnimatorBudget, DocumentStyle, GlyphChannels, OverBudget};
pub use property::Property;
pub(crate) use sampling::Sampling;

use properties::Properties;
use selector::Selector;
use serde_json::Value;

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
pub(crate) const MAX_ANIMATOR_KEYFRAMES: usize = 300_000;
/// Animators of one text layer lowered: After Effects templates use a handful; more only
/// multiplies the work.
pub(crate) const MAX_ANIMATORS_PER_LAYER: usize = 32;

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
    pub(crate) fn parse(text_data: &Value) -> Option<Animators> {
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
    pub(crate) fn is_animated(&self) -> bool {
        self.alignment.is_animated()
            || self.list.iter().any(|animator| {
                animator.selector.is_animated()
                    || animator
                        .properties
                        .all()
                        .any(|property| property.as_ref().is_some_and(Property::is_animated))
            })
    }

    fn uses(&self, pick: impl Fn(&Properties) -> bool) -> bool {
        self.list.iter().any(|animator| pick(&animator.properties))
    }
}
