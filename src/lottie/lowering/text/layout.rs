//! Laying out a text document: shaping with harfrust (kerning, ligatures, right-to-left and
//! complex scripts), lines from `\r`, box text wrapped at word boundaries and shrunk (not
//! below half its size) until it fits, justification, tracking, line height and baseline
//! shift. Coordinates are the text layer's own: point text has its first baseline at y = 0
//! and is aligned on x = 0; box text sits in the box at `ps` of size `sz`.
//!
//! `shaping` turns a line into glyphs (fonts and their fallbacks); `wrapping` measures lines
//! and breaks box text; this file fits the lines to the box and places them.

use std::sync::Arc;

mod shaping;
mod wrapping;

pub use shaping::FontSource;
use wrapping::{ends_cluster, width, wrap};

/// Box text is shrunk in steps of this factor…
const SHRINK_STEP: f64 = 0.95;
/// …at most this many times (0.95^14 ≈ 0.49).
const MAX_SHRINK_STEPS: usize = 14;
/// …down to this fraction of its size, and overflows beyond.
const MIN_SHRINK: f64 = 0.5;
/// Line height when the document gives none, as a multiple of the size (After Effects').
const DEFAULT_LINE_HEIGHT: f64 = 1.2;
/// Largest font size laid out, pixels (the canvas is at most 8,192 px; larger text only makes
/// huge paths, which rlottie renders slowly).
pub(crate) const MAX_FONT_SIZE: f64 = 4096.0;
/// Characters of one text document laid out: far more than any title or caption; beyond it a
/// hostile template would make millions of glyph paths.
pub(crate) const MAX_TEXT_CHARS: usize = 5000;
/// Tracking range, 1/1000 em (After Effects allows -1000..=10000).
const TRACKING_RANGE: (f64, f64) = (-1000.0, 10000.0);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Justify {
    Left,
    Right,
    Center,
    /// Justified paragraphs (`j` 3..=6) are laid out flush left; the last line follows its
    /// mode (left, right, centre, or left for "justify all").
    JustifyLastLeft,
    JustifyLastRight,
    JustifyLastCenter,
    JustifyAll,
}

impl Justify {
    pub(crate) fn from_lottie(value: i64) -> Justify {
        match value {
            1 => Justify::Right,
            2 => Justify::Center,
            3 => Justify::JustifyLastLeft,
            4 => Justify::JustifyLastRight,
            5 => Justify::JustifyLastCenter,
            6 => Justify::JustifyAll,
            _ => Justify::Left,
        }
    }

    /// How line `index` of `count` is aligned.
    fn line(self, index: usize, count: usize) -> Justify {
        let last = index + 1 == count;
        match self {
            Justify::JustifyLastRight if last => Justify::Right,
            Justify::JustifyLastCenter if last => Justify::Center,
            Justify::JustifyLastLeft
            | Justify::JustifyLastRight
            | Justify::JustifyLastCenter
            | Justify::JustifyAll => Justify::Left,
            other => other,
        }
    }
}

/// What layout needs of a text document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub text: String,
    /// Font size, pixels.
    pub size: f64,
    pub justify: Justify,
    /// Tracking, 1/1000 em.
    pub tracking: f64,
    /// Line height, pixels (`None`: 1.2 × size).
    pub line_height: Option<f64>,
    /// Baseline shift, pixels (up).
    pub baseline_shift: f64,
    pub all_caps: bool,
    /// Box text: top-left and size.
    pub text_box: Option<([f64; 2], [f64; 2])>,
    /// Box text whose template gives no box position (`ps`): lottie-web then puts the first
    /// baseline on the box's top (the layer's origin), not one ascent below it.
    pub first_baseline_on_box_top: bool,
}

/// A glyph placed: its id and its origin on the baseline, pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedGlyph {
    pub glyph: u16,
    /// Which font of the source (0: the chosen one; 1…: fallbacks for characters it lacks).
    pub font: u8,
    pub origin: [f64; 2],
    /// The character (index into [`Layout::text`]'s characters) its cluster starts at: text
    /// animators select characters, and a glyph moves with its character.
    pub letter: usize,
    /// Its line (index into [`Layout::lines`]).
    pub line: usize,
    /// Its advance, pixels (tracking not included).
    pub advance: f64,
}

/// A line placed: its horizontal extent and baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedLine {
    pub left: f64,
    pub right: f64,
    pub baseline: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub glyphs: Vec<PlacedGlyph>,
    pub lines: Vec<PlacedLine>,
    /// The size used (box text may have been shrunk).
    pub size: f64,
    /// Pixels per font unit at that size.
    pub scale: f64,
    /// Characters no glyph was found for (drawn as .notdef).
    pub missing: Vec<char>,
    /// Box text that still does not fit at half its size (the lines below the box are left
    /// out).
    pub overflows: bool,
    /// The text laid out (capitals applied, `\r\n` as `\r`, cut at [`MAX_TEXT_CHARS`]).
    pub text: String,
}

/// One shaped run: glyphs with advances and offsets in font units.
pub struct Shaped {
    pub glyphs: Vec<ShapedGlyph>,
    /// Advance width in font units (tracking not included).
    pub advance: f64,
}

/// One shaped glyph; advance and offsets in the source's units (its first font's em).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShapedGlyph {
    pub glyph: u16,
    /// The character cluster it draws, as the byte offset in the shaped text of its first
    /// character (glyphs of one cluster: a letter and its marks, or a ligature's parts, move
    /// together under tracking).
    pub cluster: u32,
    pub font: u8,
    pub advance: f64,
    pub x_offset: f64,
    pub y_offset: f64,
}

/// Where glyphs come from: fonts (shaped by harfrust) or the template's own `chars`.
pub trait GlyphSource {
    fn units_per_em(&self) -> f64;
    fn ascender(&self) -> f64;
    /// How far glyphs reach below the baseline, positive, in font units.
    fn descender(&self) -> f64;
    /// The glyphs of one line, left to right.
    fn shape(&self, text: &str) -> Shaped;
    /// Characters of `text` this source has no glyph for.
    fn missing(&self, text: &str) -> Vec<char>;
}

/// Lays `document` out in the font `data` (the bundled font drawing what it lacks); `None`
/// when the font cannot be parsed.
pub fn lay_out(document: &Document, data: &[u8]) -> Option<Layout> {
    Some(lay_out_with(
        document,
        &FontSource::with_fallbacks(data, &[super::fonts::BUNDLED_FONT])?,
    ))
}

/// [`lay_out`] for a render: the font's bytes shared with the shaper, not copied.
pub(crate) fn lay_out_shared(document: &Document, data: &Arc<Vec<u8>>) -> Option<Layout> {
    Some(lay_out_with(
        document,
        &FontSource::shared_with_bundled(data)?,
    ))
}

/// Lays `document` out with the glyphs of `source`.
pub(crate) fn lay_out_with(document: &Document, source: &dyn GlyphSource) -> Layout {
    let units_per_em = source.units_per_em();
    let ascender = source.ascender();
    let text = shown_text(document);
    let tracking = document.tracking.clamp(TRACKING_RANGE.0, TRACKING_RANGE.1);
    // Lottie separates lines with \r; \n and ETX (\u{3}) are seen in exported files too.
    let paragraphs: Vec<&str> = text.split(['\r', '\n', '\u{3}']).collect();
    let original = document.size.clamp(0.0, MAX_FONT_SIZE);
    let FittedLines {
        lines,
        overflows,
        size,
    } = fit_lines(document, source, &paragraphs, tracking);
    let scale = size / units_per_em;
    let line_height = document
        .line_height
        .filter(|height| *height > 0.0)
        .map_or(size * DEFAULT_LINE_HEIGHT, |height| {
            height.min(MAX_FONT_SIZE * 4.0) * size / original.max(1e-9)
        });
    let first_baseline = match document.text_box {
        Some(([_, top], _)) if document.first_baseline_on_box_top => top,
        Some(([_, top], _)) => top + ascender * scale,
        None => 0.0,
    } - document.baseline_shift;
    let mut layout = Layout {
        glyphs: Vec::new(),
        lines: Vec::new(),
        size,
        scale,
        missing: Vec::new(),
        overflows,
        text: String::new(),
    };
    // Box text that does not fit even at half its size loses the lines below the box, as
    // After Effects hides them: nothing ever spills out of a title card.
    let lines: Vec<String> = match document.text_box {
        Some((_, [_, box_height])) if overflows => {
            let first = (ascender + source.descender()) * scale;
            let more = ((box_height - first + 1e-6) / line_height).floor();
            let fitting = if more.is_finite() && more > 0.0 {
                1 + more as usize
            } else {
                1
            };
            lines.into_iter().take(fitting).collect()
        }
        _ => lines,
    };
    let placing = LinePlacing {
        document,
        source,
        letter_at: letter_at_bytes(&text),
        scale,
        tracking_px: tracking / 1000.0 * size,
        line_height,
        first_baseline,
        count: lines.len(),
    };
    // Lines are pieces of `text` in order (wrapping trims spaces between them): each is
    // found from where the previous one ended.
    let mut cursor = 0;
    let mut missing = std::collections::HashSet::new();
    for (index, line) in lines.iter().enumerate() {
        let line_start = text
            .get(cursor..)
            .and_then(|rest| rest.find(line.as_str()))
            .map_or(cursor, |found| cursor + found);
        cursor = (line_start + line.len()).min(text.len());
        placing.place(index, line, line_start, &mut layout, &mut missing);
    }
    layout.text = text;
    layout
}

/// The text as drawn: upper-cased for all caps, "\r\n" as one line break, at most
/// [`MAX_TEXT_CHARS`] characters.
fn shown_text(document: &Document) -> String {
    let text: String = if document.all_caps {
        document.text.to_uppercase()
    } else {
        document.text.clone()
    };
    // "\r\n" is one line break, not two.
    text.replace("\r\n", "\r")
        .chars()
        .take(MAX_TEXT_CHARS)
        .collect()
}

/// The lines of a document at the size they are drawn.
struct FittedLines {
    lines: Vec<String>,
    /// Box text that does not fit its box even shrunk to [`MIN_SHRINK`].
    overflows: bool,
    size: f64,
}

/// The lines of `paragraphs`: as they are for point text; for box text wrapped to the box,
/// shrunk in steps until they fit it.
fn fit_lines(
    document: &Document,
    source: &dyn GlyphSource,
    paragraphs: &[&str],
    tracking: f64,
) -> FittedLines {
    let units_per_em = source.units_per_em();
    let ascender = source.ascender();
    let mut size = document.size.clamp(0.0, MAX_FONT_SIZE);
    let original = size;
    let mut steps = 0;
    let (lines, overflows) = loop {
        let scale = size / units_per_em;
        let tracking_px = tracking / 1000.0 * size;
        // A box lower than one line at this size cannot fit the text whatever the wrap: the
        // step is skipped without wrapping (the last step still wraps, its lines are drawn).
        if let Some((_, [_, box_height])) = document.text_box {
            let last_step =
                steps + 1 > MAX_SHRINK_STEPS || size * SHRINK_STEP < original * MIN_SHRINK;
            if !last_step && (ascender + source.descender()) * scale > box_height + 1e-6 {
                steps += 1;
                size *= SHRINK_STEP;
                continue;
            }
        }
        let lines: Vec<String> = match document.text_box {
            Some((_, [box_width, _])) => paragraphs
                .iter()
                .flat_map(|paragraph| wrap(source, paragraph, scale, tracking_px, box_width))
                .collect(),
            None => paragraphs.iter().map(|p| (*p).to_owned()).collect(),
        };
        let Some((_, [box_width, box_height])) = document.text_box else {
            break (lines, false);
        };
        let line_height = document
            .line_height
            .filter(|height| *height > 0.0)
            .map_or(size * DEFAULT_LINE_HEIGHT, |height| {
                height * size / original.max(1e-9)
            });
        let widest = lines
            .iter()
            .map(|line| width(&source.shape(line), scale, tracking_px))
            .fold(0.0, f64::max);
        // From the top of the box to the lowest descender.
        let height = (ascender + source.descender()) * scale
            + line_height * lines.len().saturating_sub(1) as f64;
        let fits = widest <= box_width + 1e-6 && height <= box_height + 1e-6;
        if fits {
            break (lines, false);
        }
        steps += 1;
        if steps > MAX_SHRINK_STEPS || size * SHRINK_STEP < original * MIN_SHRINK {
            break (lines, true);
        }
        size *= SHRINK_STEP;
    };
    FittedLines {
        lines,
        overflows,
        size,
    }
}

/// Character index of each byte offset of `text` (a glyph's cluster is a byte offset).
fn letter_at_bytes(text: &str) -> Vec<usize> {
    let mut letter_at = vec![0usize; text.len() + 1];
    for (index, (offset, character)) in text.char_indices().enumerate() {
        for slot in letter_at.iter_mut().skip(offset).take(character.len_utf8()) {
            *slot = index;
        }
    }
    if let Some(last) = letter_at.last_mut() {
        *last = text.chars().count();
    }
    letter_at
}

/// What placing each line of a document needs, fixed once its size is.
struct LinePlacing<'a> {
    document: &'a Document,
    source: &'a dyn GlyphSource,
    /// Character index of each byte offset of the text.
    letter_at: Vec<usize>,
    scale: f64,
    tracking_px: f64,
    line_height: f64,
    first_baseline: f64,
    /// Lines drawn.
    count: usize,
}

impl LinePlacing<'_> {
    /// Shapes line `index` (`line`, at byte `line_start` of the text) and places its glyphs
    /// into `layout`, its characters no font has into `missing` (once each).
    fn place(
        &self,
        index: usize,
        line: &str,
        line_start: usize,
        layout: &mut Layout,
        missing: &mut std::collections::HashSet<char>,
    ) {
        let Self {
            document,
            source,
            scale,
            tracking_px,
            ..
        } = *self;
        let shaped = source.shape(line);
        // Tracking follows every cluster but the line's last when aligning it, as lottie-web
        // measures a line (`lineWidth` starts at minus one tracking step).
        let line_width = width(&shaped, scale, tracking_px)
            - if shaped.glyphs.is_empty() {
                0.0
            } else {
                tracking_px
            };
        let baseline = self.first_baseline + self.line_height * index as f64;
        let (anchor, span) = match document.text_box {
            Some(([left, _], [box_width, _])) => (left, box_width),
            None => (0.0, 0.0),
        };
        let left = match document.justify.line(index, self.count) {
            Justify::Right => anchor + span - line_width,
            Justify::Center => anchor + (span - line_width) / 2.0,
            _ => anchor,
        };
        let mut pen = left;
        for (glyph_index, shaped_glyph) in shaped.glyphs.iter().enumerate() {
            let byte = line_start.saturating_add(shaped_glyph.cluster as usize);
            layout.glyphs.push(PlacedGlyph {
                glyph: shaped_glyph.glyph,
                font: shaped_glyph.font,
                origin: [
                    pen + shaped_glyph.x_offset * scale,
                    baseline - shaped_glyph.y_offset * scale,
                ],
                letter: self
                    .letter_at
                    .get(byte)
                    .or(self.letter_at.last())
                    .copied()
                    .unwrap_or(0),
                line: index,
                advance: shaped_glyph.advance * scale,
            });
            pen += shaped_glyph.advance * scale;
            if ends_cluster(&shaped, glyph_index) {
                pen += tracking_px;
            }
        }
        for character in source.missing(line) {
            if missing.insert(character) {
                layout.missing.push(character);
            }
        }
        layout.lines.push(PlacedLine {
            left,
            right: left + line_width,
            baseline,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::fonts::BUNDLED_FONT;
    use super::*;

    fn document(text: &str) -> Document {
        Document {
            text: text.into(),
            size: 40.0,
            justify: Justify::Left,
            tracking: 0.0,
            line_height: None,
            baseline_shift: 0.0,
            all_caps: false,
            text_box: None,
            first_baseline_on_box_top: false,
        }
    }

    /// The wrap as it was before it was made linear (quadratic in an overlong segment), kept
    /// to check that the linear one breaks the same lines.
    fn wrap_before(
        paragraph: &str,
        max_width: f64,
        measure: impl Fn(&str) -> f64 + Copy,
    ) -> Vec<String> {
        let mut segments = Vec::new();
        let mut start = 0;
        for (end, _) in unicode_linebreak::linebreaks(paragraph) {
            if end > start {
                segments.push(&paragraph[start..end]);
            }
            start = end;
        }
        let mut filling = wrapping::Lines::default();
        for segment in segments {
            filling.add(segment, max_width, measure);
            let wrapping::Lines {
                lines,
                current,
                current_width,
            } = &mut filling;
            while *current_width > max_width
                && measure(current.trim_end()) > max_width
                && current.trim_end().chars().count() > 1
            {
                let mut head = String::new();
                let mut head_width = 0.0;
                for character in current.chars() {
                    let character_width = measure(character.encode_utf8(&mut [0; 4]));
                    if !head.is_empty() && head_width + character_width > max_width {
                        break;
                    }
                    head.push(character);
                    head_width += character_width;
                }
                let rest = current[head.len()..].to_owned();
                if rest.trim_end().is_empty() {
                    break;
                }
                lines.push(head);
                *current_width = measure(&rest);
                *current = rest;
            }
        }
        filling.finish()
    }

    #[test]
    fn the_linear_wrap_breaks_the_same_lines_as_the_quadratic_one_did() {
        let source = FontSource::with_fallbacks(BUNDLED_FONT, &[BUNDLED_FONT]).unwrap();
        let texts = [
            "Congratulations Alexandria Congratulations Alexandria Congratulations",
            "日本語のテキストは単語の間に空白がありません",
            "Supercalifragilisticexpialidocious",
            "Supercalifragilisticexpialidocious and more words after it, trailing   ",
            "A well-known, hyphen-separated sentence — with dashes — and 12,345 numbers.",
            "سلام عليكم سلام عليكم سلام عليكم",
            "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW iiiiiiiiiiiiiiiiiiiiiiiiiiiii",
            "",
            "   ",
        ];
        let units = source.units_per_em();
        for text in texts {
            for size in [12.0, 40.0, 96.0] {
                for tracking in [0.0, 200.0] {
                    for max_width in [1.0, 30.0, 150.0, 300.0, 5000.0] {
                        let scale = size / units;
                        let tracking_px = tracking / 1000.0 * size;
                        assert_eq!(
                            wrap(&source, text, scale, tracking_px, max_width),
                            wrap_before(text, max_width, |text: &str| {
                                width(&source.shape(text), scale, tracking_px)
                            }),
                            "{text:?} at {size} px, tracking {tracking}, width {max_width}"
                        );
                    }
                }
            }
        }
    }

    /// A glyph source that counts the characters it is asked to shape: the work of a
    /// layout, counted instead of timed.
    struct CountingSource<'a> {
        fonts: FontSource<'a>,
        characters_shaped: std::cell::Cell<usize>,
    }

    impl GlyphSource for CountingSource<'_> {
        fn units_per_em(&self) -> f64 {
            self.fonts.units_per_em()
        }
        fn ascender(&self) -> f64 {
            self.fonts.ascender()
        }
        fn descender(&self) -> f64 {
            self.fonts.descender()
        }
        fn shape(&self, text: &str) -> Shaped {
            self.characters_shaped
                .set(self.characters_shaped.get() + text.chars().count());
            self.fonts.shape(text)
        }
        fn missing(&self, text: &str) -> Vec<char> {
            self.fonts.missing(text)
        }
    }

    #[test]
    fn box_text_that_never_fits_costs_linear_time() {
        // Every character is wider than the box: the quadratic wrap shaped the rest of the
        // text once per character (n² / 2, 12.5 million characters here), at every shrink
        // step.
        let mut doc = document(&"W".repeat(MAX_TEXT_CHARS));
        doc.text_box = Some(([0.0, 0.0], [1.0, 1.0]));
        let source = CountingSource {
            fonts: FontSource::with_fallbacks(BUNDLED_FONT, &[BUNDLED_FONT]).unwrap(),
            characters_shaped: std::cell::Cell::new(0),
        };
        let started = std::time::Instant::now();
        let layout = lay_out_with(&doc, &source);
        let elapsed = started.elapsed();
        assert!(layout.overflows);
        assert_eq!(layout.lines.len(), 1, "only the first line fits the box");
        let shaped = source.characters_shaped.get();
        println!(
            "box text of {MAX_TEXT_CHARS} characters that never fits: {shaped} characters \
             shaped, {elapsed:?}"
        );
        // A few passes over the text (measure, split, measure the lines), whatever the
        // number of shrink steps: far below the quadratic wrap's n² / 2.
        assert!(shaped <= 10 * MAX_TEXT_CHARS, "{shaped} characters shaped");
    }

    #[test]
    fn box_text_in_a_box_lower_than_a_line_ends_at_the_last_shrink_step_as_before() {
        let mut doc = document("lorem ipsum dolor sit amet lorem ipsum");
        doc.text_box = Some(([0.0, 0.0], [300.0, 1.0]));
        let layout = lay_out(&doc, BUNDLED_FONT).unwrap();
        // 0.95^13 ≈ 0.513 is the last step not below half the size.
        assert!(
            (layout.size - 40.0 * SHRINK_STEP.powi(13)).abs() < 1e-9,
            "{}",
            layout.size
        );
        assert!(layout.overflows);
        assert_eq!(layout.lines.len(), 1, "only the first line is kept");
        let mut wide_enough = doc.clone();
        wide_enough.text_box = Some(([0.0, 0.0], [10_000.0, 1.0]));
        let one_line = lay_out(&wide_enough, BUNDLED_FONT).unwrap();
        assert_eq!(one_line.size, layout.size);
    }

    #[test]
    fn point_text_aligns_lines_on_the_anchor() {
        let mut doc = document("Hello\rWorld!!");
        for (justify, check) in [
            (Justify::Left, 0usize),
            (Justify::Right, 1),
            (Justify::Center, 2),
        ] {
            doc.justify = justify;
            let layout = lay_out(&doc, BUNDLED_FONT).unwrap();
            assert_eq!(layout.lines.len(), 2);
            assert!((layout.lines[1].baseline - 48.0).abs() < 1e-9);
            for line in &layout.lines {
                let value = match check {
                    0 => line.left,
                    1 => line.right,
                    _ => (line.left + line.right) / 2.0,
                };
                assert!(value.abs() < 1e-6, "{justify:?}: {line:?}");
            }
        }
    }

    /// The bundled font's own metrics, read without shaping: independent of the layout.
    struct Metrics<'a> {
        face: ttf_parser::Face<'a>,
    }

    impl Metrics<'_> {
        fn bundled() -> Metrics<'static> {
            Metrics {
                face: ttf_parser::Face::parse(BUNDLED_FONT, 0).unwrap(),
            }
        }
        fn glyph(&self, character: char) -> u16 {
            self.face.glyph_index(character).unwrap().0
        }
        /// Pixels per font unit at `size`.
        fn scale(&self, size: f64) -> f64 {
            size / f64::from(self.face.units_per_em())
        }
        /// Sum of the characters' advances (no kerning) at `size`, pixels.
        fn advances(&self, text: &str, size: f64) -> f64 {
            text.chars()
                .map(|c| {
                    let glyph = self.face.glyph_index(c).unwrap();
                    f64::from(self.face.glyph_hor_advance(glyph).unwrap())
                })
                .sum::<f64>()
                * self.scale(size)
        }
        /// Ascender plus descender at `size`, pixels.
        fn line_extent(&self, size: f64) -> f64 {
            f64::from(self.face.ascender() - self.face.descender()) * self.scale(size)
        }
    }

    /// The glyphs of `layout` line by line (by baseline).
    fn glyphs_by_line(layout: &Layout) -> Vec<Vec<u16>> {
        let mut lines: Vec<(f64, Vec<u16>)> = Vec::new();
        for glyph in &layout.glyphs {
            match lines.last_mut() {
                Some((baseline, glyphs)) if *baseline == glyph.origin[1] => {
                    glyphs.push(glyph.glyph)
                }
                _ => lines.push((glyph.origin[1], vec![glyph.glyph])),
            }
        }
        lines.into_iter().map(|(_, glyphs)| glyphs).collect()
    }

    #[test]
    fn box_text_wraps_at_words() {
        let metrics = Metrics::bundled();
        let two_words = "Congratulations Alexandria";
        let mut doc = document(&format!("{two_words} {two_words} Congratulations"));
        // Two words fit a line with 3 % to spare (kerning moves less than that); a third
        // (another 60 % of a line) does not. Tall enough for every line at full size.
        let width = metrics.advances(two_words, 40.0) * 1.03;
        doc.text_box = Some(([10.0, 20.0], [width, 400.0]));
        let layout = lay_out(&doc, BUNDLED_FONT).unwrap();
        assert!(!layout.overflows);
        assert_eq!(layout.size, 40.0, "nothing to shrink");
        let expected: Vec<Vec<u16>> = [two_words, two_words, "Congratulations"]
            .iter()
            .map(|line| line.chars().map(|c| metrics.glyph(c)).collect())
            .collect();
        assert_eq!(glyphs_by_line(&layout), expected);
        assert_eq!(layout.lines.len(), 3);
    }

    #[test]
    fn box_text_shrinks_until_it_fits() {
        let metrics = Metrics::bundled();
        let text = "Congratulations Alexandria";
        let mut doc = document(text);
        // 88 % of the text's width at 40 px, and one line high: the text fits on one line
        // from 0.95³ ≈ 86 % of its size (0.95² ≈ 90 % is still too wide), never on two.
        let (left, top) = (10.0, 20.0);
        let (width, height) = (
            metrics.advances(text, 40.0) * 0.88,
            metrics.line_extent(40.0) + 0.5,
        );
        doc.text_box = Some(([left, top], [width, height]));
        let layout = lay_out(&doc, BUNDLED_FONT).unwrap();
        assert!(!layout.overflows, "{layout:?}");
        assert!(
            (layout.size - 40.0 * SHRINK_STEP.powi(3)).abs() < 1e-9,
            "{}",
            layout.size
        );
        let expected: Vec<u16> = text.chars().map(|c| metrics.glyph(c)).collect();
        assert_eq!(glyphs_by_line(&layout), [expected]);
        // It fits the box: every line within its sides, ascender to descender within its
        // top and bottom.
        let scale = metrics.scale(layout.size);
        for line in &layout.lines {
            assert!(
                line.left >= left - 1e-6 && line.right <= left + width + 1e-6,
                "{line:?} in a box from x {left} to {}",
                left + width
            );
            let above = line.baseline - f64::from(metrics.face.ascender()) * scale;
            let below = line.baseline - f64::from(metrics.face.descender()) * scale;
            assert!(
                above >= top - 1e-6 && below <= top + height + 1e-6,
                "{line:?} reaches from y {above} to {below} in a box from {top} to {}",
                top + height
            );
        }
    }

    #[test]
    fn box_text_breaks_where_unicode_allows_between_ideographs_and_inside_overlong_words() {
        let mut doc = document("日本語のテキストは単語の間に空白がありません");
        doc.text_box = Some(([0.0, 0.0], [200.0, 400.0]));
        let layout = lay_out(&doc, BUNDLED_FONT).unwrap();
        assert!(layout.lines.len() > 1, "{:?}", layout.lines);
        assert!(layout.lines.iter().all(|line| line.right <= 200.0 + 1e-6));
        let mut long = document("Supercalifragilisticexpialidocious");
        long.text_box = Some(([0.0, 0.0], [150.0, 400.0]));
        let layout = lay_out(&long, BUNDLED_FONT).unwrap();
        assert!(layout.lines.len() > 1);
        assert!(
            layout.lines.iter().all(|line| line.right <= 150.0 + 1e-6),
            "{:?}",
            layout.lines
        );
    }

    #[test]
    fn tracking_moves_clusters_so_marks_stay_on_their_letter() {
        let mut plain = document("q");
        plain.tracking = 1000.0;
        let mut marked = document("q\u{301}");
        marked.tracking = 1000.0;
        let plain = lay_out(&plain, BUNDLED_FONT).unwrap();
        let marked = lay_out(&marked, BUNDLED_FONT).unwrap();
        assert_eq!(marked.glyphs.len(), 2);
        // One tracking step (one em, 40 px) for the letter and its accent together.
        let width = |layout: &Layout| layout.lines[0].right - layout.lines[0].left;
        assert!((width(&plain) - width(&marked)).abs() < 1e-6);
        assert!((marked.glyphs[1].origin[0] - marked.glyphs[0].origin[0]).abs() < 40.0);
    }

    #[test]
    fn arabic_is_shaped_and_missing_characters_are_reported() {
        // "Salaam": lam followed by alef joins into one lam-alef ligature glyph.
        let arabic = "سلام عليكم";
        let layout = lay_out(&document(arabic), BUNDLED_FONT).unwrap();
        assert!(layout.missing.is_empty());
        assert!(layout.glyphs.iter().all(|g| g.glyph != 0));
        assert!(
            layout.glyphs.len() < arabic.chars().count(),
            "{} glyphs for {} characters",
            layout.glyphs.len(),
            arabic.chars().count()
        );
        let missing = lay_out(&document("a\u{10FFFD}b"), BUNDLED_FONT).unwrap();
        assert_eq!(missing.missing, ['\u{10FFFD}']);
        assert!(missing.glyphs.iter().any(|g| g.glyph == 0));
    }
}
