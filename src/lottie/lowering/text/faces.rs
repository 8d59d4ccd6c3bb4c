//! Which bundled face stands in for a font the template names but did not upload: its family
//! (`fFamily`, else its `fName`) mapped to a family class by the names designers use, and its
//! style (`fStyle`) and weight (`fWeight`) to bold and italic.
//!
//! The bundled faces are Liberation Sans, Serif and Mono 2.1.5 (SIL Open Font License 1.1,
//! `assets/fonts/LICENSE-Liberation.txt`), each in regular, bold, italic and bold italic:
//! metric-compatible with Arial, Times New Roman and Courier New, so a text set in those (or
//! in Helvetica, Times, Courier, which they stand in for) keeps its line breaks and widths.
//! A family none of them resembles is drawn in Liberation Serif, as Chromium draws it
//! ([`UNKNOWN_FAMILY_CLASS`]).

use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// A family class a bundled family stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Sans,
    Serif,
    Mono,
}

/// The style a template asks for, reduced to what the bundled faces distinguish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Style {
    pub bold: bool,
    pub italic: bool,
}

/// The weight from which a face counts as bold: CSS's semibold (600) and heavier, as
/// browsers pick the bold face of a two-weight family for 600 and up.
pub(crate) const BOLD_WEIGHT: u16 = 600;

/// Weight names as font style names spell them (normalized: lower case, letters only), and
/// their CSS weights. Longer names first: "semibold" must not be read as "bold".
const WEIGHT_NAMES: &[(&str, u16)] = &[
    ("extralight", 200),
    ("ultralight", 200),
    ("hairline", 100),
    ("thin", 100),
    ("light", 300),
    ("semibold", 600),
    ("demibold", 600),
    ("extrabold", 800),
    ("ultrabold", 800),
    ("bold", 700),
    ("black", 900),
    ("heavy", 900),
    ("medium", 500),
];

fn normalized(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A CSS weight from a style name (`fStyle`, e.g. "SemiBold Italic"), when it names one.
fn weight_of_name(name: &str) -> Option<u16> {
    let name = normalized(name);
    WEIGHT_NAMES
        .iter()
        .find(|(word, _)| name.contains(word))
        .map(|(_, weight)| *weight)
}

/// `fWeight` as Bodymovin writes it: a number, a numeric string ("700"), a weight name
/// ("bold"), or empty.
fn weight_of_value(value: Option<&Value>) -> Option<u16> {
    match value? {
        Value::Number(number) => number
            .as_f64()
            .filter(|w| w.is_finite() && *w > 0.0)
            .map(|w| w.min(1000.0) as u16),
        Value::String(text) => {
            let text = text.trim();
            match text.parse::<f64>() {
                Ok(w) if w.is_finite() && w > 0.0 => Some(w.min(1000.0) as u16),
                _ if text.eq_ignore_ascii_case("normal") => Some(400),
                _ => weight_of_name(text),
            }
        }
        _ => None,
    }
}

impl Style {
    /// The style of a `fonts.list` entry: `fWeight` when it says one (as lottie-web reads
    /// it), else the weight its `fStyle` names; italic when `fStyle` says italic or oblique.
    pub(crate) fn of_font_entry(font: &Value) -> Style {
        let style = font.get("fStyle").and_then(Value::as_str).unwrap_or("");
        let weight = weight_of_value(font.get("fWeight"))
            .or_else(|| weight_of_name(style))
            .unwrap_or(400);
        let style = normalized(style);
        Style {
            bold: weight >= BOLD_WEIGHT,
            italic: style.contains("italic") || style.contains("oblique"),
        }
    }

    /// Its name as a font names its style.
    pub(crate) fn name(self) -> &'static str {
        match (self.bold, self.italic) {
            (false, false) => "Regular",
            (true, false) => "Bold",
            (false, true) => "Italic",
            (true, true) => "Bold Italic",
        }
    }
}

/// Family names (normalized) and the class whose bundled family stands in for them: the
/// metric-compatible originals, the common web and system names, the CSS generic families,
/// and a few popular families closer to the class's face than to DejaVu Sans. A name of six
/// characters or more also matches as a prefix ("Helvetica Neue LT Std", "ArialMT",
/// "TimesNewRomanPSMT"); shorter ones match whole, so "Inter" is not "Interstate".
const FAMILY_CLASSES: &[(&str, Class)] = &[
    // Sans: Liberation Sans has Arial's metrics, which Arial took from Helvetica.
    ("liberationsans", Class::Sans),
    ("arial", Class::Sans),
    ("arialmt", Class::Sans),
    ("arimo", Class::Sans),
    ("helvetica", Class::Sans),
    ("helveticaneue", Class::Sans),
    ("nimbussans", Class::Sans),
    ("sansserif", Class::Sans),
    ("systemui", Class::Sans),
    ("uisansserif", Class::Sans),
    ("applesystem", Class::Sans),
    ("blinkmacsystemfont", Class::Sans),
    ("sfpro", Class::Sans),
    ("sfprotext", Class::Sans),
    ("sfprodisplay", Class::Sans),
    ("segoeui", Class::Sans),
    ("roboto", Class::Sans),
    ("inter", Class::Sans),
    ("opensans", Class::Sans),
    ("notosans", Class::Sans),
    // Serif: Liberation Serif has Times New Roman's metrics.
    ("liberationserif", Class::Serif),
    ("times", Class::Serif),
    ("timesroman", Class::Serif),
    ("timesnewroman", Class::Serif),
    ("tinos", Class::Serif),
    ("nimbusroman", Class::Serif),
    ("georgia", Class::Serif),
    ("serif", Class::Serif),
    ("uiserif", Class::Serif),
    ("cambria", Class::Serif),
    ("garamond", Class::Serif),
    ("palatino", Class::Serif),
    ("baskerville", Class::Serif),
    ("notoserif", Class::Serif),
    // Mono: Liberation Mono has Courier New's metrics.
    ("liberationmono", Class::Mono),
    ("courier", Class::Mono),
    ("couriernew", Class::Mono),
    ("cousine", Class::Mono),
    ("nimbusmono", Class::Mono),
    ("monospace", Class::Mono),
    ("uimonospace", Class::Mono),
    ("consolas", Class::Mono),
    ("menlo", Class::Mono),
    ("monaco", Class::Mono),
    ("sfmono", Class::Mono),
    ("lucidaconsole", Class::Mono),
    ("robotomono", Class::Mono),
    ("sourcecodepro", Class::Mono),
    ("dejavusansmono", Class::Mono),
];

/// The class whose bundled family draws a family nobody has (not uploaded, none bundled
/// resembles it). Chromium, where designers check templates in lottie-web, does not ask
/// fontconfig for a substitute of an unknown family (`fc-match Ubuntu` says DejaVu Sans):
/// it falls back to its default standard font, Times New Roman, which fontconfig's metric
/// aliases resolve to Liberation Serif. Measured with Chromium 156 on Debian 12: text in
/// "Ubuntu", "Comic Neue" or "NoSuchFamilyXyz", upright or italic, draws pixel for pixel as
/// in "serif", "Times New Roman" and "Liberation Serif" (docs/fidelity.md, Fonts).
pub(crate) const UNKNOWN_FAMILY_CLASS: Class = Class::Serif;

/// Whether `family` is DejaVu Sans itself, the bundled fallback face, which draws it
/// rather than a stand-in.
pub(crate) fn is_bundled_fallback_family(family: &str) -> bool {
    normalized(family) == "dejavusans"
}

/// Shortest family key matched as a prefix (see [`FAMILY_CLASSES`]).
const MIN_PREFIX_KEY_CHARS: usize = 6;

/// The class of a family name, when a bundled family stands in for it. The longest matching
/// key wins ("Roboto Mono" is mono, not Roboto's sans).
pub(crate) fn class_of(family: &str) -> Option<Class> {
    let name = normalized(family);
    FAMILY_CLASSES
        .iter()
        .filter(|(key, _)| {
            name == *key || (key.len() >= MIN_PREFIX_KEY_CHARS && name.starts_with(key))
        })
        .max_by_key(|(key, _)| key.len())
        .map(|(_, class)| *class)
}

/// Whether `family` names the generic family or the bundled family itself, so drawing it in
/// the bundled face substitutes nothing worth a warning.
pub(crate) fn is_exact(family: &str, class: Class) -> bool {
    let name = normalized(family);
    let exact: &[&str] = match class {
        Class::Sans => &["liberationsans", "sansserif"],
        Class::Serif => &["liberationserif", "serif"],
        Class::Mono => &["liberationmono", "monospace"],
    };
    exact.contains(&name.as_str())
}

/// A bundled face.
#[derive(Debug)]
pub(crate) struct Face {
    pub family: &'static str,
    pub style: Style,
    pub data: &'static [u8],
    /// Its bytes as texts share them: copied once per process, when first used.
    copy: OnceLock<Arc<Vec<u8>>>,
}

impl Face {
    /// Its bytes, shared by every text drawn in it.
    pub(crate) fn shared(&self) -> Arc<Vec<u8>> {
        self.copy
            .get_or_init(|| Arc::new(self.data.to_vec()))
            .clone()
    }
}

macro_rules! liberation {
    ($family:literal, $prefix:literal, $style:literal, $bold:literal, $italic:literal) => {
        Face {
            family: $family,
            style: Style {
                bold: $bold,
                italic: $italic,
            },
            data: include_bytes!(concat!("../../../../assets/fonts/", $prefix, $style)),
            copy: OnceLock::new(),
        }
    };
}

/// The four styles of each family, in the order [`bundled`] counts them: regular, bold,
/// italic, bold italic (files `PREFIX-Regular.ttf` …).
macro_rules! liberation_families {
    ($(($family:literal, $prefix:literal)),* $(,)?) => {
        [$(
            liberation!($family, $prefix, "-Regular.ttf", false, false),
            liberation!($family, $prefix, "-Bold.ttf", true, false),
            liberation!($family, $prefix, "-Italic.ttf", false, true),
            liberation!($family, $prefix, "-BoldItalic.ttf", true, true),
        )*]
    };
}

/// The bundled Liberation faces (about 4.2 MB): every class in every style, so none is
/// synthesized.
static LIBERATION: [Face; 12] = liberation_families![
    ("Liberation Sans", "LiberationSans"),
    ("Liberation Serif", "LiberationSerif"),
    ("Liberation Mono", "LiberationMono"),
];

/// The bundled face of `class` in `style`.
pub(crate) fn bundled(class: Class, style: Style) -> &'static Face {
    let first = match class {
        Class::Sans => 0,
        Class::Serif => 4,
        Class::Mono => 8,
    };
    let offset = usize::from(style.bold) + 2 * usize::from(style.italic);
    &LIBERATION[first + offset]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn designers_family_names_map_to_their_class() {
        for (family, class) in [
            ("Helvetica", Some(Class::Sans)),
            ("Helvetica Neue", Some(Class::Sans)),
            ("HelveticaNeue-Bold", Some(Class::Sans)),
            ("Arial", Some(Class::Sans)),
            ("ArialMT", Some(Class::Sans)),
            ("system-ui", Some(Class::Sans)),
            ("sans-serif", Some(Class::Sans)),
            ("Roboto", Some(Class::Sans)),
            ("Inter", Some(Class::Sans)),
            ("Open Sans", Some(Class::Sans)),
            ("Times", Some(Class::Serif)),
            ("Times New Roman", Some(Class::Serif)),
            ("TimesNewRomanPSMT", Some(Class::Serif)),
            ("Georgia", Some(Class::Serif)),
            ("serif", Some(Class::Serif)),
            ("Courier", Some(Class::Mono)),
            ("Courier New", Some(Class::Mono)),
            ("monospace", Some(Class::Mono)),
            ("Roboto Mono", Some(Class::Mono)),
            ("Interstate", None),
            ("Montserrat", None),
            ("Comic Neue", None),
            ("", None),
        ] {
            assert_eq!(class_of(family), class, "{family}");
        }
    }

    #[test]
    fn style_and_weight_read_as_lottie_web_reads_them_and_600_up_is_bold() {
        let style = |entry: Value| Style::of_font_entry(&entry);
        let plain = Style::default();
        let bold = Style {
            bold: true,
            italic: false,
        };
        let italic = Style {
            bold: false,
            italic: true,
        };
        let both = Style {
            bold: true,
            italic: true,
        };
        assert_eq!(style(json!({"fStyle": "Regular"})), plain);
        assert_eq!(style(json!({"fStyle": "Bold"})), bold);
        assert_eq!(style(json!({"fStyle": "Medium"})), plain);
        assert_eq!(style(json!({"fStyle": "SemiBold"})), bold);
        assert_eq!(style(json!({"fStyle": "Light Italic"})), italic);
        assert_eq!(style(json!({"fStyle": "BoldOblique"})), both);
        assert_eq!(style(json!({"fStyle": "Bold Italic", "fWeight": ""})), both);
        // fWeight, when set, wins over the style's name.
        assert_eq!(style(json!({"fStyle": "Bold", "fWeight": "400"})), plain);
        assert_eq!(style(json!({"fStyle": "Italic", "fWeight": 700})), both);
        assert_eq!(style(json!({"fWeight": "bold"})), bold);
        assert_eq!(style(json!({"fWeight": 1e300})), bold);
        assert_eq!(style(json!({})), plain);
    }

    #[test]
    fn each_bundled_face_is_the_style_it_is_filed_under() {
        for class in [Class::Sans, Class::Serif, Class::Mono] {
            for (bold, italic) in [(false, false), (true, false), (false, true), (true, true)] {
                let face = bundled(class, Style { bold, italic });
                let parsed = ttf_parser::Face::parse(face.data, 0).unwrap();
                assert_eq!(parsed.is_bold(), bold, "{}", face.family);
                assert_eq!(parsed.is_italic(), italic, "{}", face.family);
                let family = parsed
                    .names()
                    .into_iter()
                    .filter(|name| name.name_id == ttf_parser::name_id::FAMILY)
                    .find_map(|name| name.to_string())
                    .unwrap();
                assert_eq!(family, face.family);
            }
        }
    }
}
