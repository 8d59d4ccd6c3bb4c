//! The `inspect` report: what a template is, what it offers to modify and what will not
//! render as designed.

use super::slots::{self, Slots};
use super::template::Template;
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
    pub fn new(template: &Template) -> InspectReport {
        let model = &template.model;
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
            warnings: template.warnings.clone(),
        }
    }
}
