//! Shaping with harfrust: the chosen font first, then fallbacks for the characters it lacks,
//! each right-to-left run in its own direction (Unicode bidi), glyphs in the first font's
//! units.

use super::{GlyphSource, Shaped, ShapedGlyph};
use harfrust::font::Blob;
use std::sync::Arc;

/// Fonts, shaped with harfrust: the chosen one first, then fallbacks that draw the
/// characters it lacks (per run of characters, so a Latin font with an Arabic word draws the
/// word in a font that has it).
pub struct FontSource<'a> {
    faces: Vec<(harfrust::Font, ttf_parser::Face<'a>)>,
}

impl<'a> FontSource<'a> {
    /// `None` when `data` is not a font.
    pub fn new(data: &'a [u8]) -> Option<FontSource<'a>> {
        FontSource::with_fallbacks(data, &[])
    }

    /// `data` first, then `fallbacks` (unreadable fallbacks are skipped). The shaper owns the
    /// bytes it reads (harfrust's `Font` holds them static or shared), so borrowed bytes are
    /// copied for it; [`FontSource::shared_with_bundled`] is the render's way, without copies.
    pub fn with_fallbacks(data: &'a [u8], fallbacks: &[&'a [u8]]) -> Option<FontSource<'a>> {
        let copied = |data: &'a [u8]| (data, Blob::from(data.to_vec()));
        FontSource::from_blobs(copied(data), fallbacks.iter().map(|data| copied(data)))
    }

    /// `data` first, then the bundled font, neither copied: the shaper shares `data`'s
    /// allocation (fonts reach 16 MiB) and reads the bundled font from the binary.
    pub(crate) fn shared_with_bundled(data: &'a Arc<Vec<u8>>) -> Option<FontSource<'a>> {
        let shared: Arc<dyn AsRef<[u8]> + Send + Sync> = data.clone();
        FontSource::from_blobs(
            (data.as_slice(), Blob::from(shared)),
            [(
                super::super::fonts::BUNDLED_FONT,
                Blob::from(super::super::fonts::BUNDLED_FONT),
            )],
        )
    }

    /// Each font's bytes as ttf-parser borrows them and as harfrust holds them.
    fn from_blobs(
        first: (&'a [u8], Blob),
        fallbacks: impl IntoIterator<Item = (&'a [u8], Blob)>,
    ) -> Option<FontSource<'a>> {
        let parse = |(data, blob): (&'a [u8], Blob)| {
            Some((
                harfrust::Font::new(blob, 0)?,
                ttf_parser::Face::parse(data, 0).ok()?,
            ))
        };
        let mut faces = vec![parse(first)?];
        faces.extend(fallbacks.into_iter().filter_map(parse));
        Some(FontSource { faces })
    }

    /// The first font that has `character` (the chosen one when none has: its .notdef).
    fn font_for(&self, character: char) -> usize {
        self.faces
            .iter()
            .position(|(_, outlines)| outlines.glyph_index(character).is_some())
            .unwrap_or(0)
    }

    /// Shapes one run of one direction, split into sub-runs by font.
    fn shape_by_font(&self, text: &str, direction: Option<harfrust::Direction>) -> Shaped {
        // (font, byte offset of the piece in `text`, piece)
        let mut pieces: Vec<(usize, usize, String)> = Vec::new();
        for (offset, character) in text.char_indices() {
            // Marks stay with the run they are in (their base's font). A space goes to the
            // first font that has it, as in Chromium, whose fallback reshapes only what the
            // chosen font lacks: the spaces between Arabic words drawn in a fallback keep
            // the chosen font's width (text-rtl-arabic.json, docs/fidelity.md).
            let font = if is_mark(character) {
                pieces.last().map_or(0, |(font, _, _)| *font)
            } else {
                self.font_for(character)
            };
            match pieces.last_mut() {
                Some((last, _, piece)) if *last == font => piece.push(character),
                _ => pieces.push((font, offset, character.to_string())),
            }
        }
        if direction == Some(harfrust::Direction::RightToLeft) {
            pieces.reverse();
        }
        let primary_units = f64::from(self.faces[0].1.units_per_em());
        let mut shaped = Shaped {
            glyphs: Vec::new(),
            advance: 0.0,
        };
        // Clusters are byte offsets within a piece; the piece's offset makes them offsets in
        // `text`.
        for (font, piece_start, piece) in pieces {
            let piece_offset = u32::try_from(piece_start).unwrap_or(u32::MAX);
            let (face, outlines) = &self.faces[font];
            // Advances in the first font's units, whatever em the fallback uses.
            let factor = primary_units / f64::from(outlines.units_per_em());
            let part = shape_run(face, &piece, direction);
            for glyph in part.glyphs {
                let glyph = ShapedGlyph {
                    font: u8::try_from(font).unwrap_or(0),
                    cluster: piece_offset.saturating_add(glyph.cluster),
                    advance: glyph.advance * factor,
                    x_offset: glyph.x_offset * factor,
                    y_offset: glyph.y_offset * factor,
                    ..glyph
                };
                shaped.advance += glyph.advance;
                shaped.glyphs.push(glyph);
            }
        }
        shaped
    }
}

/// Combining marks (they belong to the preceding character's font).
fn is_mark(character: char) -> bool {
    matches!(u32::from(character), 0x0300..=0x036F | 0x0591..=0x05C7 | 0x0610..=0x061A | 0x064B..=0x065F | 0x0670 | 0x06D6..=0x06ED | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

impl GlyphSource for FontSource<'_> {
    fn units_per_em(&self) -> f64 {
        f64::from(self.faces[0].1.units_per_em())
    }
    fn ascender(&self) -> f64 {
        f64::from(self.faces[0].1.ascender())
    }
    fn descender(&self) -> f64 {
        f64::from(self.faces[0].1.descender()).abs()
    }
    fn shape(&self, text: &str) -> Shaped {
        let bidi = unicode_bidi::BidiInfo::new(text, None);
        if !bidi.has_rtl() {
            return self.shape_by_font(text, None);
        }
        let mut shaped = Shaped {
            glyphs: Vec::new(),
            advance: 0.0,
        };
        for paragraph in &bidi.paragraphs {
            let (levels, runs) = bidi.visual_runs(paragraph, paragraph.range.clone());
            for run in runs {
                let direction = if levels[run.start].is_rtl() {
                    harfrust::Direction::RightToLeft
                } else {
                    harfrust::Direction::LeftToRight
                };
                let run_start = u32::try_from(run.start).unwrap_or(u32::MAX);
                let part = self.shape_by_font(&text[run], Some(direction));
                // Clusters as byte offsets in `text`, not in the run.
                shaped
                    .glyphs
                    .extend(part.glyphs.into_iter().map(|glyph| ShapedGlyph {
                        cluster: glyph.cluster.saturating_add(run_start),
                        ..glyph
                    }));
                shaped.advance += part.advance;
            }
        }
        shaped
    }
    fn missing(&self, text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| {
                !c.is_whitespace()
                    && self
                        .faces
                        .iter()
                        .all(|(_, outlines)| outlines.glyph_index(*c).is_none())
            })
            .collect()
    }
}

/// Shapes one run (one direction), its glyphs left to right.
fn shape_run(face: &harfrust::Font, text: &str, direction: Option<harfrust::Direction>) -> Shaped {
    let mut buffer = harfrust::Buffer::new();
    buffer.push_str(text);
    buffer.guess_segment_properties();
    if let Some(direction) = direction {
        buffer.set_direction(direction);
    }
    let shaper = harfrust::ShaperFont::new(face);
    // harfrust's errors are misuses (a buffer shaped twice, no direction, a plan made for
    // another direction or script): a fresh buffer with its direction set and no plan has
    // none of them, and an empty run is the harmless answer if one ever appeared.
    if harfrust::shape(&shaper, &mut buffer, harfrust::ShapeOptions::new()).is_err() {
        return Shaped {
            glyphs: Vec::new(),
            advance: 0.0,
        };
    }
    let glyphs: Vec<ShapedGlyph> = buffer
        .glyph_infos()
        .iter()
        .zip(buffer.glyph_positions())
        .map(|(info, position)| ShapedGlyph {
            glyph: u16::try_from(info.glyph_id).unwrap_or(0),
            cluster: info.cluster,
            font: 0,
            advance: f64::from(position.x_advance),
            x_offset: f64::from(position.x_offset),
            y_offset: f64::from(position.y_offset),
        })
        .collect();
    let advance = glyphs.iter().map(|glyph| glyph.advance).sum();
    Shaped { glyphs, advance }
}
