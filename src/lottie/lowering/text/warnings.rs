//! The warnings of text conversion: distinct, bounded in number, naming layers and
//! characters in bounded length.

use super::MAX_TEXT_WARNINGS;
use serde_json::Value;
use std::collections::BTreeSet;

/// Characters of a layer name quoted in a warning (names are the caller's and unbounded).
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;

/// A layer's name (`nm`) as warnings quote it: at most [`MAX_NAME_CHARS_IN_WARNINGS`]
/// characters.
pub(super) fn quoted_layer_name(layer: &Value) -> String {
    let name = layer
        .get("nm")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    if name.chars().count() > MAX_NAME_CHARS_IN_WARNINGS {
        name.chars()
            .take(MAX_NAME_CHARS_IN_WARNINGS)
            .chain(['…'])
            .collect()
    } else {
        name.to_owned()
    }
}

/// Characters no font has named in one warning; the rest are counted. One warning per
/// document, not per character, so a long text in a script no font covers (found by the
/// `prepare` fuzz target: 300 CJK characters in an 11 KB template drew 3 MB of warnings)
/// draws one line.
const MAX_MISSING_CHARACTERS_NAMED: usize = 16;

/// The warning for a document whose `missing` characters no font has.
pub(super) fn missing_characters_warning(name: &str, missing: &[char]) -> String {
    format!(
        "text layer '{name}': characters {} are in no available font; they are drawn as the font's .notdef",
        named_characters(missing)
    )
}

/// `missing` as code points (`U+004A, U+00E9`), distinct and sorted, at most
/// [`MAX_MISSING_CHARACTERS_NAMED`] named and the rest counted.
pub(super) fn named_characters(missing: &[char]) -> String {
    let mut distinct: Vec<char> = missing.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let named: Vec<String> = distinct
        .iter()
        .take(MAX_MISSING_CHARACTERS_NAMED)
        .map(|character| format!("U+{:04X}", u32::from(*character)))
        .collect();
    let more = distinct.len().saturating_sub(MAX_MISSING_CHARACTERS_NAMED);
    if more > 0 {
        format!("{} and {more} more", named.join(", "))
    } else {
        named.join(", ")
    }
}

/// Text warnings, distinct and sorted, at most [`MAX_TEXT_WARNINGS`] of them.
#[derive(Default)]
pub(super) struct TextWarnings {
    kept: BTreeSet<String>,
    dropped: usize,
}

impl TextWarnings {
    pub(super) fn insert(&mut self, warning: String) {
        if self.kept.len() < MAX_TEXT_WARNINGS || self.kept.contains(&warning) {
            self.kept.insert(warning);
        } else {
            self.dropped += 1;
        }
    }

    pub(super) fn into_vec(self) -> Vec<String> {
        let dropped = self.dropped;
        let mut warnings: Vec<String> = self.kept.into_iter().collect();
        if dropped > 0 {
            warnings.push(format!("… and {dropped} more text warnings"));
        }
        warnings
    }
}
