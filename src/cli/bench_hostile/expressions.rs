//! Expressions that burn CPU in the analysis and in renders (issue 21, item 6).

use super::Case;

pub(super) fn cases() -> Vec<Case> {
    Vec::new()
}
