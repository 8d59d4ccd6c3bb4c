//! The fonts a render can use: the families uploaded with the template; bundled, freely
//! licensed faces compiled into the binary (`assets/fonts/`): Liberation Sans, Serif and Mono
//! in four styles each for the families they stand in for ([`super::faces`]) and, as in
//! Chromium, Liberation Serif for a family nobody has; DejaVu Sans (Bitstream Vera licence)
//! for DejaVu Sans and for every character the chosen face lacks, so a text always renders,
//! whatever the template names. Bold or italic a chosen face lacks is synthesized, with a warning.

use super::faces::{self, Style};
use std::collections::BTreeMap;
use std::sync::Arc;

/// DejaVu Sans 2.37: Latin, Greek, Cyrillic, Arabic, Hebrew and many symbols.
pub const BUNDLED_FONT: &[u8] = include_bytes!("../../../../assets/fonts/DejaVuSans.ttf");
/// Fonts uploaded per template: a title card uses one or two families.
pub const MAX_FONTS_PER_TEMPLATE: usize = 16;
/// Largest uploaded font file: full CJK fonts reach ~16 MiB.
pub const MAX_FONT_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a template's font name quoted in a warning.
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;
/// Its family name, as warnings name it.
pub(crate) const BUNDLED_FAMILY: &str = "DejaVu Sans";

/// SFNT magic numbers: TrueType (0x00010000 and `true`), OpenType CFF (`OTTO`), collections.
const FONT_MAGICS: [&[u8; 4]; 4] = [b"\x00\x01\x00\x00", b"OTTO", b"true", b"ttcf"];

/// Whether `bytes` start as a TrueType or OpenType font (or collection) and are at most
/// [`MAX_FONT_BYTES`]; the font itself is parsed in a worker.
pub fn is_font_file(bytes: &[u8]) -> bool {
    bytes.len() <= MAX_FONT_BYTES && FONT_MAGICS.iter().any(|magic| bytes.starts_with(*magic))
}

/// One copy of the bundled font per process, shared by every text.
static BUNDLED: std::sync::LazyLock<Arc<Vec<u8>>> =
    std::sync::LazyLock::new(|| Arc::new(BUNDLED_FONT.to_vec()));

/// Font bytes by family.
#[derive(Debug, Clone, Default)]
pub struct FontBook {
    uploaded: BTreeMap<String, Arc<Vec<u8>>>,
}

/// What a face lacks of the style asked for, made up from its outlines: bold by widening
/// the outline (a stroke of the fill's colour), italic by slanting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Synthesis {
    pub bold: bool,
    pub oblique: bool,
}

/// Slant of a synthesized oblique, as x shift per unit of height above the baseline: Skia's
/// (Chromium's) fake italic skew of 1/4 (about 14°), so it matches the designer's player.
pub(crate) const OBLIQUE_SLANT: f64 = 0.25;

/// Width of the stroke that synthesizes bold, per pixel of font size: Skia's fake bold
/// (Chromium's), which strokes the outline 1/24 of the size wide at 9 px and below and 1/32
/// at 36 px and above, linearly between.
pub(crate) fn synthetic_bold_width(size: f64) -> f64 {
    const SMALL: (f64, f64) = (9.0, 1.0 / 24.0);
    const LARGE: (f64, f64) = (36.0, 1.0 / 32.0);
    let ratio = if size <= SMALL.0 {
        SMALL.1
    } else if size >= LARGE.0 {
        LARGE.1
    } else {
        SMALL.1 + (LARGE.1 - SMALL.1) * (size - SMALL.0) / (LARGE.0 - SMALL.0)
    };
    size.max(0.0) * ratio
}

/// A font chosen for a text, and why.
#[derive(Debug, Clone)]
pub(crate) struct ChosenFont {
    pub data: Arc<Vec<u8>>,
    pub family: String,
    /// Set when the template's font was not available and a bundled one stands in.
    pub fallback_warning: Option<String>,
    /// What the face lacks of the requested style and is synthesized.
    pub synthesis: Synthesis,
    /// Set when something is synthesized.
    pub synthesis_warning: Option<String>,
}

/// Bold and italic as the face `data` itself is (its OS/2 weight and flags).
fn face_style(data: &[u8]) -> Style {
    match ttf_parser::Face::parse(data, 0) {
        Ok(face) => Style {
            bold: face.is_bold() || face.weight().to_number() >= faces::BOLD_WEIGHT,
            italic: face.is_italic() || face.is_oblique(),
        },
        Err(_) => Style::default(),
    }
}

/// The template's name for a font, as a warning quotes it (it is unbounded).
fn shown(name: &str) -> String {
    name.chars().take(MAX_NAME_CHARS_IN_WARNINGS).collect()
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

    /// These fonts and, under them, a template's own (a dotLottie's, by `fName`): a family or
    /// name uploaded with CreateTemplate is the uploaded one.
    pub fn with_template_fonts(
        &self,
        own: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> FontBook {
        let mut book = self.clone();
        for (name, bytes) in own {
            let taken = book
                .uploaded
                .keys()
                .any(|uploaded| uploaded.eq_ignore_ascii_case(&name));
            if !taken {
                book.uploaded.insert(name, Arc::new(bytes));
            }
        }
        book
    }

    /// The font for a text document naming `font_name` (its `f`), which the template's font
    /// list maps to `family` (`fFamily`) in `style`: an uploaded font by family or by name
    /// (case insensitive); else the bundled Liberation face of the family's class in that
    /// style (Arial, Helvetica → Sans; Times, Georgia → Serif; Courier → Mono; …); DejaVu Sans
    /// for DejaVu Sans; else, as Chromium does, Liberation Serif in that style. Characters the
    /// face lacks are drawn in DejaVu Sans all the same (the layout's fallback). Bold or
    /// italic the chosen face lacks is synthesized.
    pub(crate) fn choose(&self, font_name: &str, family: Option<&str>, style: Style) -> ChosenFont {
        let wanted = [family.unwrap_or(font_name), font_name];
        for candidate in wanted {
            if let Some((name, data)) = self
                .uploaded
                .iter()
                .find(|(uploaded, _)| uploaded.eq_ignore_ascii_case(candidate))
            {
                return with_synthesis(data.clone(), name.clone(), None, style);
            }
        }
        let asked = shown(family.unwrap_or(font_name));
        if let Some((named, class)) = wanted
            .iter()
            .find_map(|name| faces::class_of(name).map(|class| (*name, class)))
        {
            let face = faces::bundled(class, style);
            let warning = (!faces::is_exact(named, class)).then(|| {
                format!(
                    "font '{asked}' was not uploaded with the template; its text is drawn in the \
                     bundled {} {}, its closest match",
                    face.family,
                    face.style.name()
                )
            });
            return with_synthesis(face.shared(), face.family.to_owned(), warning, style);
        }
        if wanted
            .iter()
            .any(|name| faces::is_bundled_fallback_family(name))
        {
            return self.bundled_fallback(style);
        }
        // A family nobody has: Chromium (lottie-web, the designers' player) draws it in its
        // default standard font, Times New Roman, which fontconfig resolves to Liberation
        // Serif (see [`faces::UNKNOWN_FAMILY_CLASS`]); so do we.
        let face = faces::bundled(faces::UNKNOWN_FAMILY_CLASS, style);
        let warning = format!(
            "font '{asked}' was not uploaded with the template and no bundled family resembles \
             it; its text is drawn in the bundled {} {}, as lottie-web in Chromium draws a family \
             it does not have",
            face.family,
            face.style.name()
        );
        with_synthesis(face.shared(), face.family.to_owned(), Some(warning), style)
    }

    /// The bundled DejaVu Sans in `style` (what it lacks synthesized): for a template asking
    /// for DejaVu Sans itself, and for a text whose chosen font cannot be read (DejaVu covers
    /// the most characters).
    pub(crate) fn bundled_fallback(&self, style: Style) -> ChosenFont {
        with_synthesis(BUNDLED.clone(), BUNDLED_FAMILY.to_owned(), None, style)
    }
}

/// `data` as the chosen font for `style`, with what it lacks of the style synthesized.
fn with_synthesis(
    data: Arc<Vec<u8>>,
    family: String,
    fallback_warning: Option<String>,
    style: Style,
) -> ChosenFont {
    let has = face_style(&data);
    let synthesis = Synthesis {
        bold: style.bold && !has.bold,
        oblique: style.italic && !has.italic,
    };
    let synthesized = match (synthesis.bold, synthesis.oblique) {
        (false, false) => None,
        (true, false) => Some("bold is synthesized (its outlines widened)"),
        (false, true) => Some("italic is synthesized (its outlines slanted)"),
        (true, true) => Some("bold and italic are synthesized (its outlines widened and slanted)"),
    };
    let synthesis_warning = synthesized.map(|what| {
        format!(
            "font '{}' has no {} face here; its {what}",
            shown(&family),
            style.name()
        )
    });
    ChosenFont {
        data,
        family,
        fallback_warning,
        synthesis,
        synthesis_warning,
    }
}
