//! Measuring shaped lines and wrapping box text at the line-break opportunities (UAX #14),
//! breaking overlong words between characters, in time linear in the text.

use super::{GlyphSource, Shaped};

/// An overlong word's rest within this many line widths (by its characters' widths) is
/// measured shaped to decide whether it needs another break: each break takes at least half a
/// line, so a handful of shaped measures cover that zone…
const NEAR_LINE_WIDTHS: f64 = 2.0;
/// …and at most this many are made per word whatever the font (negative tracking can make
/// lines hold many characters).
const MAX_SHAPED_CHECKS: usize = 8;

/// Width of a shaped run in pixels, tracking included.
pub(super) fn width(shaped: &Shaped, scale: f64, tracking_px: f64) -> f64 {
    shaped.advance * scale + tracking_px * tracking_steps(shaped) as f64
}

/// Whether tracking follows glyph `index`: after the last glyph of each cluster, so marks
/// stay on their letter and a ligature moves as one.
pub(super) fn ends_cluster(shaped: &Shaped, index: usize) -> bool {
    match (shaped.glyphs.get(index), shaped.glyphs.get(index + 1)) {
        (Some(glyph), Some(next)) => glyph.cluster != next.cluster,
        _ => true,
    }
}

fn tracking_steps(shaped: &Shaped) -> usize {
    (0..shaped.glyphs.len())
        .filter(|index| ends_cluster(shaped, *index))
        .count()
}

/// Greedy wrap of one paragraph into lines no wider than `max_width`, at the line-break
/// opportunities of Unicode's line breaking algorithm (UAX #14: after spaces and hyphens,
/// between CJK ideographs, never inside a word). Each segment is measured once (linear in the
/// paragraph; kerning across a break is left out of the measure); a segment wider than the
/// whole line is broken between characters, each character measured once (by
/// [`split_overlong`]), so text that never fits its box costs no more than text that does.
pub(super) fn wrap(
    face: &dyn GlyphSource,
    paragraph: &str,
    scale: f64,
    tracking_px: f64,
    max_width: f64,
) -> Vec<String> {
    let measure = |text: &str| width(&face.shape(text), scale, tracking_px);
    let mut character_widths = CharacterWidths {
        face,
        scale,
        tracking_px,
        known: std::collections::HashMap::new(),
    };
    let mut filling = Lines::default();
    let mut start = 0;
    for (end, _) in unicode_linebreak::linebreaks(paragraph) {
        let segment = &paragraph[start..end];
        start = end;
        if segment.is_empty() {
            continue;
        }
        filling.add(segment, max_width, measure);
        let current = &filling.current;
        // A segment that alone is wider than the line: split it where it must.
        if filling.current_width > max_width
            && current.trim_end().chars().nth(1).is_some()
            && measure(current.trim_end()) > max_width
        {
            let rest = split_overlong(
                current,
                max_width,
                &mut character_widths,
                &mut filling.lines,
            );
            filling.current_width = measure(&rest);
            filling.current = rest;
        }
    }
    filling.finish()
}

/// Lines filled greedily, segment by segment.
#[derive(Debug, Default)]
pub(super) struct Lines {
    /// The lines ended so far.
    pub(super) lines: Vec<String>,
    /// The line being filled…
    pub(super) current: String,
    /// …and its width with its trailing spaces (they only count when more follows).
    pub(super) current_width: f64,
}

impl Lines {
    /// Adds `segment` (a line-break opportunity to the next) to the line being filled, first
    /// ending that line when the segment's visible part does not fit in `max_width`.
    pub(super) fn add(&mut self, segment: &str, max_width: f64, measure: impl Fn(&str) -> f64) {
        let visible = segment.trim_end();
        let visible_width = measure(visible);
        let full_width = if visible.len() == segment.len() {
            visible_width
        } else {
            measure(segment)
        };
        if !self.current.is_empty() && self.current_width + visible_width > max_width {
            self.lines.push(self.current.trim_end().to_owned());
            self.current.clear();
            self.current_width = 0.0;
        }
        self.current.push_str(segment);
        self.current_width += full_width;
    }

    /// The lines, the last one ended.
    pub(super) fn finish(mut self) -> Vec<String> {
        self.lines.push(self.current.trim_end().to_owned());
        self.lines
    }
}

/// Widths of single characters, each shaped once per paragraph.
struct CharacterWidths<'a> {
    face: &'a dyn GlyphSource,
    scale: f64,
    tracking_px: f64,
    known: std::collections::HashMap<char, f64>,
}

impl CharacterWidths<'_> {
    /// Width of `text` shaped as one run.
    fn measure(&self, text: &str) -> f64 {
        width(&self.face.shape(text), self.scale, self.tracking_px)
    }

    fn of(&mut self, character: char) -> f64 {
        let (face, scale, tracking_px) = (self.face, self.scale, self.tracking_px);
        *self.known.entry(character).or_insert_with(|| {
            width(
                &face.shape(character.encode_utf8(&mut [0; 4])),
                scale,
                tracking_px,
            )
        })
    }
}

/// Breaks `text` (wider than `max_width`) between characters into lines of `lines`, greedily
/// by the characters' own widths, each character visited once; answers what is left for the
/// line after (never empty of visible characters unless `text` fits).
fn split_overlong(
    text: &str,
    max_width: f64,
    widths: &mut CharacterWidths<'_>,
    lines: &mut Vec<String>,
) -> String {
    let characters: Vec<(usize, f64)> = text
        .char_indices()
        .map(|(offset, character)| (offset, widths.of(character)))
        .collect();
    // Width of the characters from each index to the end of `text`'s visible part.
    let visible_end = text.trim_end().len();
    let mut tail_width = vec![0.0; characters.len() + 1];
    for index in (0..characters.len()).rev() {
        let (offset, width) = characters[index];
        tail_width[index] = tail_width[index + 1] + if offset < visible_end { width } else { 0.0 };
    }
    let mut head_start = 0;
    let mut shaped_checks_left = MAX_SHAPED_CHECKS;
    loop {
        // Greedy head: the first character always, then while the line holds.
        let mut head_end = head_start + 1;
        let mut head_width = characters[head_start].1;
        while head_end < characters.len() && head_width + characters[head_end].1 <= max_width {
            head_width += characters[head_end].1;
            head_end += 1;
        }
        let rest_offset = characters
            .get(head_end)
            .map_or(text.len(), |(offset, _)| *offset);
        let rest = &text[rest_offset..];
        if rest.trim_end().is_empty() {
            return text[characters[head_start].0..].to_owned();
        }
        lines.push(text[characters[head_start].0..rest_offset].to_owned());
        head_start = head_end;
        let rest_visible = rest.trim_end();
        if rest_visible.chars().nth(1).is_none() {
            return rest.to_owned();
        }
        // Whether the rest still needs breaking is decided on its shaped width (kerning
        // included) when that is close to the line's; far from it the characters' sum says
        // the same. Shaping the rest costs its length, so it is done a bounded number of times.
        let near = tail_width[head_start] <= NEAR_LINE_WIDTHS * max_width;
        if near && shaped_checks_left > 0 {
            shaped_checks_left -= 1;
            if widths.measure(rest) <= max_width || widths.measure(rest_visible) <= max_width {
                return rest.to_owned();
            }
        } else if tail_width[head_start] <= max_width {
            return rest.to_owned();
        }
    }
}
