//! The `inspect` report: what a template is, what it offers to modify and what will not
//! render as designed.

use super::slots::{self, Slots};
use super::template::Template;
use super::text::{self, fonts::FontBook};
use serde::{Deserialize, Serialize};

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
}

impl InspectReport {
    /// The report with text drawn in the bundled font only (no uploaded fonts).
    pub fn new(template: &Template) -> InspectReport {
        InspectReport::with_fonts(template, &FontBook::default())
    }

    /// The report, text warnings (font fallbacks, unsupported text features, characters no
    /// font has) included, for a template whose uploaded fonts are `fonts`.
    pub fn with_fonts(template: &Template, fonts: &FontBook) -> InspectReport {
        let model = &template.model;
        let mut warnings = template.warnings.clone();
        let mut converted = template.json.clone();
        for warning in text::convert_text_layers(&mut converted, fonts).warnings {
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
        }
        InspectReport {
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
            slots: slots::discover(&template.json),
            warnings,
        }
    }
}
