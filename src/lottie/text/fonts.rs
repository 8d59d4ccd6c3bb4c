//! The fonts a render can use: the families uploaded with the template, and a bundled,
//! freely licensed default (DejaVu Sans, Bitstream Vera licence, `assets/fonts/`) compiled
//! into the binary so a text always renders, whatever the template names.

use std::collections::BTreeMap;
use std::sync::Arc;

/// DejaVu Sans 2.37: Latin, Greek, Cyrillic, Arabic, Hebrew and many symbols.
pub const BUNDLED_FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
/// Fonts uploaded per template: a title card uses one or two families.
pub const MAX_FONTS_PER_TEMPLATE: usize = 16;
/// Largest uploaded font file: full CJK fonts reach ~16 MiB.
pub const MAX_FONT_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a template's font name quoted in a warning.
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;
/// Its family name, as warnings name it.
pub const BUNDLED_FAMILY: &str = "DejaVu Sans";

/// One copy of the bundled font per process, shared by every text.
static BUNDLED: std::sync::LazyLock<Arc<Vec<u8>>> =
    std::sync::LazyLock::new(|| Arc::new(BUNDLED_FONT.to_vec()));

/// Font bytes by family.
#[derive(Debug, Clone, Default)]
pub struct FontBook {
    uploaded: BTreeMap<String, Arc<Vec<u8>>>,
}

/// A font chosen for a text, and why.
#[derive(Debug, Clone)]
pub struct ChosenFont {
    pub data: Arc<Vec<u8>>,
    pub family: String,
    /// Set when the template's font was not available and the bundled one stands in.
    pub fallback_warning: Option<String>,
}

impl FontBook {
    /// Fonts uploaded with a template: family → TTF/OTF bytes.
    pub fn new(uploaded: BTreeMap<String, Vec<u8>>) -> FontBook {
        FontBook {
            uploaded: uploaded
                .into_iter()
                .map(|(family, bytes)| (family, Arc::new(bytes)))
                .collect(),
        }
    }

    /// The font for a text document naming `font_name` (its `f`), which the template's font
    /// list maps to `family` (`fFamily`): an uploaded font by family or by name (case
    /// insensitive), else the bundled one.
    pub fn choose(&self, font_name: &str, family: Option<&str>) -> ChosenFont {
        let wanted = [family.unwrap_or(font_name), font_name];
        for candidate in wanted {
            if let Some((name, data)) = self
                .uploaded
                .iter()
                .find(|(uploaded, _)| uploaded.eq_ignore_ascii_case(candidate))
            {
                return ChosenFont {
                    data: data.clone(),
                    family: name.clone(),
                    fallback_warning: None,
                };
            }
        }
        // The name is the template's and unbounded: a warning quotes its start.
        let shown: String = family
            .unwrap_or(font_name)
            .chars()
            .take(MAX_NAME_CHARS_IN_WARNINGS)
            .collect();
        ChosenFont {
            data: BUNDLED.clone(),
            family: BUNDLED_FAMILY.to_owned(),
            fallback_warning: Some(format!(
                "font '{shown}' was not uploaded with the template; its text is drawn in the \
                 bundled {BUNDLED_FAMILY}"
            )),
        }
    }
}
