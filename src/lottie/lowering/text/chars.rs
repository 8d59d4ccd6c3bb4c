//! The template's own glyphs: Bodymovin exports may carry `chars`, each character's outline
//! as drawn by the designer's font (at size 100, baseline at y = 0, y down). When every
//! character of a text is there, those outlines are used instead of a substitute font.
//!
//! The `chars` list is read once per template ([`CharsLibrary::new`], linear in its size):
//! every entry is indexed by family, by style and character, so a font of the template's
//! font list finds its glyphs by lookups, however many fonts and styles the list names.

use super::layout::{GlyphSource, Shaped, ShapedGlyph};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

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
/// Glyphs kept per family: glyph ids are 16-bit, and no font has more.
const MAX_GLYPHS_PER_FAMILY: usize = u16::MAX as usize;

/// One glyph of `chars`: its advance (per 100), its `sh` items and their vertex count.
#[derive(Debug, Clone, Default)]
struct CharsGlyph {
    advance: f64,
    paths: Vec<Value>,
    vertices: usize,
}

/// Every glyph of one family, indexed by style and character.
#[derive(Debug, Default)]
struct CharsFamily {
    glyphs: Vec<CharsGlyph>,
    /// The first entry of each character, whatever its style.
    first: HashMap<char, u16>,
    /// The first entry of each character per style (`None`: entries without a style).
    by_style: HashMap<Option<String>, HashMap<char, u16>>,
}

/// The template's whole `chars`, by family.
#[derive(Debug, Default)]
pub(crate) struct CharsLibrary {
    families: HashMap<String, Arc<CharsFamily>>,
    /// `ascent` of the first font-list entry of each family.
    ascents: HashMap<String, f64>,
}

/// The `chars` of one family as one style draws them: that style's outline of a character
/// first, any other style's otherwise.
#[derive(Debug, Clone)]
pub(crate) struct CharsSource {
    family: Arc<CharsFamily>,
    style: Option<String>,
    ascent: f64,
}

/// Whether a path's points are finite, within the fence's coordinate limit, and not more than
/// the fence allows (a glyph is drawn a hundred times its size at most, so the limit holds
/// with room after scaling).
fn bounded(path: &Value) -> bool {
    let limit = crate::lottie::reading::fence::MAX_PATH_COORDINATE / 100.0;
    let Some(shape) = path.pointer("/ks/k") else {
        return false;
    };
    ["v", "i", "o"].iter().all(|key| match shape.get(*key) {
        Some(Value::Array(points)) => {
            points.len() <= crate::lottie::reading::fence::MAX_PATH_VERTICES
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

fn path_vertices(path: &Value) -> usize {
    path.pointer("/ks/k/v")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

impl CharsFamily {
    /// Adds `entry` (its character is `character`, its style `style`) unless that style
    /// already has the character; the first entry of a character also stands for every style.
    fn add(&mut self, entry: &Value, character: char, style: Option<String>) {
        let styled = self.by_style.entry(style).or_default();
        if styled.contains_key(&character) || self.glyphs.len() >= MAX_GLYPHS_PER_FAMILY {
            return;
        }
        let Ok(glyph) = u16::try_from(self.glyphs.len()) else {
            return;
        };
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
        let vertices = paths.iter().map(path_vertices).sum();
        styled.insert(character, glyph);
        self.first.entry(character).or_insert(glyph);
        self.glyphs.push(CharsGlyph {
            advance,
            paths,
            vertices,
        });
    }
}

impl CharsLibrary {
    /// Reads the `chars` and font list of `json` once.
    pub(crate) fn new(json: &Value) -> CharsLibrary {
        let mut library = CharsLibrary::default();
        if let Some(list) = json.pointer("/fonts/list").and_then(Value::as_array) {
            for font in list {
                let Some(family) = font.get("fFamily").and_then(Value::as_str) else {
                    continue;
                };
                if library.ascents.contains_key(family) {
                    continue;
                }
                let ascent = font
                    .get("ascent")
                    .and_then(Value::as_f64)
                    .filter(|ascent| ascent.is_finite() && *ascent > 0.0)
                    .unwrap_or(DEFAULT_ASCENT);
                library.ascents.insert(family.to_owned(), ascent);
            }
        }
        let Some(chars) = json.get("chars").and_then(Value::as_array) else {
            return library;
        };
        let mut families: HashMap<String, CharsFamily> = HashMap::new();
        for entry in chars {
            let Some(family) = entry.get("fFamily").and_then(Value::as_str) else {
                continue;
            };
            let Some(mut characters) = entry.get("ch").and_then(Value::as_str).map(str::chars)
            else {
                continue;
            };
            let (Some(character), None) = (characters.next(), characters.next()) else {
                continue;
            };
            let style = entry
                .get("style")
                .and_then(Value::as_str)
                .map(str::to_owned);
            families
                .entry(family.to_owned())
                .or_default()
                .add(entry, character, style);
        }
        library.families = families
            .into_iter()
            .map(|(family, glyphs)| (family, Arc::new(glyphs)))
            .collect();
        library
    }

    /// The chars of `family` in `style` (other styles standing in), if it has any.
    pub(crate) fn source(&self, family: &str, style: Option<&str>) -> Option<CharsSource> {
        let glyphs = self.families.get(family)?;
        if glyphs.first.is_empty() {
            return None;
        }
        Some(CharsSource {
            family: glyphs.clone(),
            style: style.map(str::to_owned),
            ascent: self.ascents.get(family).copied().unwrap_or(DEFAULT_ASCENT),
        })
    }
}

impl CharsSource {
    fn glyph_of(&self, character: char) -> Option<u16> {
        self.family
            .by_style
            .get(&self.style)
            .and_then(|styled| styled.get(&character))
            .or_else(|| self.family.first.get(&character))
            .copied()
    }

    /// The characters of `text` (line breaks and spaces aside) with no outline here, each
    /// once, in order.
    pub(crate) fn missing_characters(&self, text: &str) -> Vec<char> {
        let mut missing = Vec::new();
        for character in text.chars() {
            let blank = character.is_whitespace() || character == '\u{3}';
            if !blank && self.glyph_of(character).is_none() && !missing.contains(&character) {
                missing.push(character);
            }
        }
        missing
    }

    /// Vertices of the outline of `glyph` (what drawing it once costs).
    pub(crate) fn vertices(&self, glyph: u16) -> usize {
        self.family
            .glyphs
            .get(usize::from(glyph))
            .map_or(0, |glyph| glyph.vertices)
    }

    /// The `sh` items of `glyph` placed at `origin` (pixels) for a font of `size` px.
    pub(crate) fn paths(&self, glyph: u16, origin: [f64; 2], size: f64) -> Vec<Value> {
        let scale = size / CHARS_EM;
        let Some(glyph) = self.family.glyphs.get(usize::from(glyph)) else {
            return Vec::new();
        };
        glyph
            .paths
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
            .char_indices()
            .filter_map(|(position, c)| {
                let glyph = self.glyph_of(c)?;
                Some(ShapedGlyph {
                    glyph,
                    cluster: u32::try_from(position).unwrap_or(u32::MAX),
                    font: 0,
                    advance: self.family.glyphs[usize::from(glyph)].advance,
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
            .filter(|c| !c.is_whitespace() && self.glyph_of(*c).is_none())
            .collect()
    }
}
