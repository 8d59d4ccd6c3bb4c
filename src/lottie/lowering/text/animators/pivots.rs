//! The pivot of each glyph under text animators: the centre of its character, word or line
//! (the anchor point grouping, `m.g`).

use super::super::layout::Layout;
use super::selector::is_newline;

/// The pivot of each glyph (layer coordinates): the centre of its character, word or line
/// on the baseline (lottie-web's `an / 2 - add` offset), moved by the grouping alignment.
pub(super) fn pivots(layout: &Layout, letters: &[char], grouping: i64) -> Vec<([f64; 2], f64)> {
    // Extent of each group of glyphs: (min x, max x).
    let group_of = |glyph: &super::super::layout::PlacedGlyph| -> usize {
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
