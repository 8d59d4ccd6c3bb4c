//! The template's own glyphs: Bodymovin exports may carry `chars`, each character's outline
//! as drawn by the designer's font (at size 100, baseline at y = 0, y down). When every
//! character of a text is there, those outlines are used instead of a substitute font.

use super::layout::{GlyphSource, Shaped, ShapedGlyph};
use serde_json::Value;
use std::collections::HashMap;

/// The em of `chars` data: outlines and advances are given for a 100 px font.
const CHARS_EM: f64 = 100.0;
/// Ascent (per 100) when the template's font list gives none.
const DEFAULT_ASCENT: f64 = 75.0;
/// Descent (per 100): the font list does not give it; typical Latin fonts reach about this
/// far below the baseline.
const DESCENT: f64 = 25.0;
/// Largest advance of one glyph (per 100): wider glyphs are absurd and would overflow layout.
const MAX_ADVANCE: f64 = 1000.0;
/// Paths of one glyph kept (real glyphs have a handful).
const MAX_PATHS_PER_GLYPH: usize = 64;

/// The `chars` of one font family.
#[derive(Debug, Clone, Default)]
pub struct CharsSource {
    /// Advance (per 100) and `sh` items of each glyph, by glyph index.
    glyphs: Vec<(f64, Vec<Value>)>,
    index: HashMap<char, u16>,
    ascent: f64,
}

/// Whether a path's points are finite, within the fence's coordinate limit, and not more than
/// the fence allows (a glyph is drawn a hundred times its size at most, so the limit holds
/// with room after scaling).
fn bounded(path: &Value) -> bool {
    let limit = crate::lottie::fence::MAX_PATH_COORDINATE / 100.0;
    let Some(shape) = path.pointer("/ks/k") else {
        return false;
    };
    ["v", "i", "o"].iter().all(|key| match shape.get(*key) {
        Some(Value::Array(points)) => {
            points.len() <= crate::lottie::fence::MAX_PATH_VERTICES
                && points.iter().all(|point| {
                    point.as_array().is_some_and(|xy| {
                        xy.len() >= 2
                            && xy.iter().take(2).all(|v| {
                                v.as_f64()
                                    .is_some_and(|v| v.is_finite() && v.abs() <= limit)
                            })
                    })
                })
        }
        _ => false,
    })
}

/// Every `sh` item with a static path inside `shapes` (groups included).
fn static_paths(shapes: &Value, found: &mut Vec<Value>) {
    let Some(items) = shapes.as_array() else {
        return;
    };
    for item in items {
        match item.get("ty").and_then(Value::as_str) {
            Some("sh")
                if item.pointer("/ks/k").is_some_and(Value::is_object)
                    && found.len() < MAX_PATHS_PER_GLYPH
                    && bounded(item) =>
            {
                found.push(item.clone());
            }
            Some("gr") => static_paths(item.get("it").unwrap_or(&Value::Null), found),
            _ => {}
        }
    }
}

impl CharsSource {
    /// The chars of `family` in `json` (all its styles; `style` first), if it has any.
    pub fn for_family(json: &Value, family: &str, style: Option<&str>) -> Option<CharsSource> {
        let chars = json.get("chars")?.as_array()?;
        let ascent = json
            .pointer("/fonts/list")
            .and_then(Value::as_array)
            .and_then(|list| {
                list.iter()
                    .find(|font| font.get("fFamily").and_then(Value::as_str) == Some(family))
            })
            .and_then(|font| font.get("ascent"))
            .and_then(Value::as_f64)
            .filter(|ascent| ascent.is_finite() && *ascent > 0.0)
            .unwrap_or(DEFAULT_ASCENT);
        let mut source = CharsSource {
            ascent,
            ..CharsSource::default()
        };
        // The wanted style first, so it wins over another style's outline of a character.
        let mut entries: Vec<&Value> = chars
            .iter()
            .filter(|entry| entry.get("fFamily").and_then(Value::as_str) == Some(family))
            .collect();
        entries.sort_by_key(|entry| entry.get("style").and_then(Value::as_str) != style);
        for entry in entries {
            let Some(mut characters) = entry.get("ch").and_then(Value::as_str).map(str::chars)
            else {
                continue;
            };
            let (Some(character), None) = (characters.next(), characters.next()) else {
                continue;
            };
            if source.index.contains_key(&character) {
                continue;
            }
            let advance = entry
                .get("w")
                .and_then(Value::as_f64)
                .filter(|w| w.is_finite())
                .unwrap_or(0.0)
                .clamp(0.0, MAX_ADVANCE);
            let mut paths = Vec::new();
            static_paths(
                entry.pointer("/data/shapes").unwrap_or(&Value::Null),
                &mut paths,
            );
            let Ok(glyph) = u16::try_from(source.glyphs.len()) else {
                break;
            };
            source.index.insert(character, glyph);
            source.glyphs.push((advance, paths));
        }
        (!source.index.is_empty()).then_some(source)
    }

    /// Whether every character of `text` (line breaks aside) has an outline here.
    pub fn covers(&self, text: &str) -> bool {
        text.chars()
            .filter(|c| !matches!(c, '\r' | '\n' | '\u{3}'))
            .all(|c| self.index.contains_key(&c))
    }

    /// The `sh` items of `glyph` placed at `origin` (pixels) for a font of `size` px.
    pub fn paths(&self, glyph: u16, origin: [f64; 2], size: f64) -> Vec<Value> {
        let scale = size / CHARS_EM;
        let Some((_, paths)) = self.glyphs.get(usize::from(glyph)) else {
            return Vec::new();
        };
        paths
            .iter()
            .map(|path| {
                let mut path = path.clone();
                if let Some(Value::Object(shape)) = path.pointer_mut("/ks/k") {
                    for (key, offset) in [("v", true), ("i", false), ("o", false)] {
                        if let Some(Value::Array(points)) = shape.get_mut(key) {
                            for point in points.iter_mut() {
                                if let Some([x, y]) = point.as_array().map(|xy| {
                                    [
                                        xy.first().and_then(Value::as_f64).unwrap_or(0.0),
                                        xy.get(1).and_then(Value::as_f64).unwrap_or(0.0),
                                    ]
                                }) {
                                    let (dx, dy) = if offset {
                                        (origin[0], origin[1])
                                    } else {
                                        (0.0, 0.0)
                                    };
                                    *point = serde_json::json!([dx + x * scale, dy + y * scale]);
                                }
                            }
                        }
                    }
                }
                path
            })
            .collect()
    }
}

impl GlyphSource for CharsSource {
    fn units_per_em(&self) -> f64 {
        CHARS_EM
    }
    fn ascender(&self) -> f64 {
        self.ascent
    }
    fn descender(&self) -> f64 {
        DESCENT
    }
    fn shape(&self, text: &str) -> Shaped {
        let glyphs: Vec<ShapedGlyph> = text
            .chars()
            .enumerate()
            .filter_map(|(position, c)| {
                let glyph = *self.index.get(&c)?;
                Some(ShapedGlyph {
                    glyph,
                    cluster: u32::try_from(position).unwrap_or(u32::MAX),
                    font: 0,
                    advance: self.glyphs[usize::from(glyph)].0,
                    x_offset: 0.0,
                    y_offset: 0.0,
                })
            })
            .collect();
        let advance = glyphs.iter().map(|glyph| glyph.advance).sum();
        Shaped { glyphs, advance }
    }
    fn missing(&self, text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| !c.is_whitespace() && !self.index.contains_key(c))
            .collect()
    }
}
