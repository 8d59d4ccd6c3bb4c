//! The `inspect` report: what a template is, what it offers to modify and what will not
//! render as designed. Building it lowers the template as a render does ([`lowering::lower`]:
//! expressions, text shaping, layout and glyph outlines, mattes, effects), whose cost grows
//! faster than the template: the service builds it in an analysis worker
//! process (`crate::analysis`), never in the server.

use super::lowering::text::{fonts::FontBook, TextError};
use super::lowering::{self, Lowering};
use super::reading::{dotlottie, Template};
use super::slots::{self, Slots};
use crate::spec::Marker;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InspectReport {
    pub file_bytes: usize,
    pub sha256: String,
    pub version: String,
    pub name: Option<String>,
    pub width: i64,
    pub height: i64,
    pub frame_rate: f64,
    pub in_frame: f64,
    pub out_frame: f64,
    pub duration_seconds: f64,
    pub layer_count: usize,
    pub slots: Slots,
    pub warnings: Vec<String>,
    /// A dotLottie's themes, each with only the values its template's slots take (absent
    /// from reports before themes: none).
    #[serde(default)]
    pub themes: dotlottie::Themes,
    /// A dotLottie's animation ids (none for JSON and `.tgs`) and the one CreateTemplate
    /// chose (`animation_id`; None: the archive's own choice). A render unpacks the same one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub animations: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub animation: Option<String>,
    /// The template's time markers, in its order: what a render's still time and segment may
    /// name (absent from reports before markers: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
    /// Blurs and drop shadows a render draws on pixels
    /// ([`super::lowering::effects::rendered`]): admission charges a job for them (absent
    /// from reports before they were drawn: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pixel_filters: usize,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// Markers a report lists, and so a render may name: a template is its designer's, and
/// animations name a handful of segments (the corpus: at most 9); a million markers would be
/// a report of megabytes held with the template.
pub const MAX_MARKERS: usize = 256;
/// A marker's name, in characters: longer ones are not listed (and said in a warning).
pub const MAX_MARKER_NAME_CHARS: usize = 200;

/// The template's markers in seconds from its first frame: each with a name (`cm`) and a
/// start (`tm`, template frames on the composition's timeline, where `ip` is the first); `dr`
/// (frames) 0 when absent. Nameless, duplicate (the first wins, as lottie-web's lookup finds
/// it), overlong and unreadable ones are left out with a warning, and past [`MAX_MARKERS`].
pub(crate) fn markers(template: &Template) -> (Vec<Marker>, Vec<String>) {
    let model = &template.model;
    let mut listed: Vec<Marker> = Vec::new();
    let mut left_out = 0usize;
    for marker in &model.markers {
        let name = marker.get("cm").and_then(Value::as_str).unwrap_or_default();
        let start = marker.get("tm").and_then(Value::as_f64);
        let duration = marker.get("dr").and_then(Value::as_f64).unwrap_or(0.0);
        let listable = !name.is_empty()
            && name.chars().count() <= MAX_MARKER_NAME_CHARS
            && start.is_some_and(f64::is_finite)
            && duration.is_finite()
            && duration >= 0.0
            && listed.len() < MAX_MARKERS
            && !listed.iter().any(|listed| listed.name == name);
        match start.filter(|_| listable) {
            Some(start) => listed.push(Marker {
                name: name.to_owned(),
                start_seconds: (start - model.ip) / model.fr,
                duration_seconds: duration / model.fr,
            }),
            None => left_out += 1,
        }
    }
    let warnings = if left_out == 0 {
        vec![]
    } else {
        vec![format!(
            "{left_out} markers are not listed and cannot be named by a render: nameless, \
             named twice, named in more than {MAX_MARKER_NAME_CHARS} characters, without a \
             start, or past the first {MAX_MARKERS}"
        )]
    };
    (listed, warnings)
}

impl InspectReport {
    /// The report with text drawn in the bundled font only (no uploaded fonts).
    pub fn new(template: &Template) -> Result<InspectReport, TextError> {
        InspectReport::with_fonts(template, &FontBook::default())
    }

    /// The report, with the warnings of every lowering pass ([`lowering::lower`]: each
    /// expression left at its static value, font fallbacks, unsupported text features,
    /// characters no font has, mattes, masks, effects and what else rlottie cannot draw), for a
    /// template whose uploaded fonts are `fonts`. Fails when the template's text is over its
    /// budget ([`super::lowering::text::MAX_TEXT_VERTICES_PER_TEMPLATE`]).
    pub(crate) fn with_fonts(
        template: &Template,
        fonts: &FontBook,
    ) -> Result<InspectReport, TextError> {
        let model = &template.model;
        let mut warnings = template.warnings.clone();
        let mut seen: HashSet<String> = warnings.iter().cloned().collect();
        let mut converted = template.json.clone();
        // A dotLottie's own fonts, under the uploaded ones, as a render has them.
        let fonts = &fonts.with_template_fonts(template.fonts.clone());
        // Lowered as a render lowers it (the same passes in the same order), without a
        // caller's modifications: what a render cannot draw as designed is in the warnings.
        let lowered = lowering::lower(&mut converted, Lowering::for_report(fonts), |_, _| {
            Ok::<(), TextError>(())
        })?;
        for warning in lowered.warnings {
            if seen.insert(warning.clone()) {
                warnings.push(warning);
            }
        }
        let pixel_filters = converted
            .get("layers")
            .and_then(serde_json::Value::as_array)
            .map_or(0, |layers| {
                lowering::effects::rendered::rendered_filter_count(layers)
            });
        // The converted copy is not needed past its warnings: free it before slot discovery.
        drop(converted);
        let slots = slots::discover(&template.json);
        let (themes, theme_warnings) = valid_themes(&template.themes, &slots);
        let (markers, marker_warnings) = markers(template);
        warnings.extend(marker_warnings);
        for warning in theme_warnings {
            if seen.insert(warning.clone()) {
                warnings.push(warning);
            }
        }
        Ok(InspectReport {
            file_bytes: template.byte_len,
            sha256: template.sha256.clone(),
            version: model.v.clone(),
            name: model.nm.clone(),
            width: model.w,
            height: model.h,
            frame_rate: model.fr,
            in_frame: model.ip,
            out_frame: model.op,
            duration_seconds: template.duration_seconds(),
            layer_count: template.layer_count(),
            themes,
            animations: template.animations.clone(),
            animation: template.animation.clone(),
            slots,
            warnings,
            markers,
            pixel_filters,
        })
    }
}

/// Each theme's values that its template's slots take: a value for no slot, or one the slot
/// refuses, is left out (a theme is the designer's, not the caller's: what it cannot do is
/// not an error of the render that names it), and said in a warning per theme.
pub(crate) fn valid_themes(
    themes: &dotlottie::Themes,
    slots: &Slots,
) -> (dotlottie::Themes, Vec<String>) {
    let mut warnings = Vec::new();
    let themes = themes
        .iter()
        .map(|(name, theme)| {
            let mut kept = theme.clone();
            let refused = super::modifications::check(slots, theme);
            if let Some(first) = refused.first() {
                let more = match refused.len() {
                    1 => String::new(),
                    count => format!(" (and {} more)", count - 1),
                };
                warnings.push(format!("theme '{name}': left out: {first}{more}"));
            }
            for error in &refused {
                super::modifications::remove_refused(&mut kept, error);
            }
            (name.clone(), kept)
        })
        .collect();
    (themes, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template_with(markers: Vec<Value>) -> Template {
        let document = json!({
            "v": "5.7.0", "fr": 30, "ip": 6, "op": 96, "w": 100, "h": 100,
            "layers": [], "markers": markers
        });
        Template::parse(document.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn markers_are_listed_in_seconds_from_the_in_point_and_bounded() {
        let (listed, warnings) = markers(&template_with(vec![
            json!({"cm": "intro", "tm": 6, "dr": 30}),
            json!({"cm": "point", "tm": 36}),
        ]));
        assert_eq!(
            listed,
            [
                Marker {
                    name: "intro".into(),
                    start_seconds: 0.0,
                    duration_seconds: 1.0
                },
                Marker {
                    name: "point".into(),
                    start_seconds: 1.0,
                    duration_seconds: 0.0
                }
            ]
        );
        assert!(warnings.is_empty());
        // A hostile list: ten thousand markers, a name past the limit, one twice, nameless
        // ones, one without a start: at most MAX_MARKERS listed, one warning saying how many
        // were left out.
        let mut many: Vec<Value> = (0..10_000)
            .map(|index| json!({"cm": format!("m{index}"), "tm": 6}))
            .collect();
        many.insert(
            0,
            json!({"cm": "x".repeat(MAX_MARKER_NAME_CHARS + 1), "tm": 6}),
        );
        many.insert(1, json!({"cm": "m0", "tm": 6}));
        many.insert(2, json!({"tm": 6}));
        many.insert(3, json!({"cm": "no start"}));
        let (listed, warnings) = markers(&template_with(many));
        assert_eq!(listed.len(), MAX_MARKERS);
        assert_eq!(listed[0].name, "m0");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("9748 markers"), "{warnings:?}");
    }
}
