//! What is kept about a template besides its files ([`TemplateRecord`], `record.json`): its
//! name, owner, creation time, fonts and report, written last when a template is stored (a
//! template exists once its record does), and its size limit. Read by the template store
//! ([`super::templates`]), the bounded summary ([`super::summary`]) and the admission cache
//! ([`super::record_cache`]).

use crate::auth::TenantId;
use crate::lottie::report::InspectReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Largest record a template may keep (`record.json`: its report, with every slot, default
/// text and warning, and its name and font families), bytes; CreateTemplate refuses a larger
/// one (INVALID_ARGUMENT `TEMPLATE_RECORD_TOO_LARGE`). Records are what admission and
/// idempotent replays read back: an honest template's is a few KiB (a thousand slots with
/// long names, ~200 KiB), while an unbounded one was the uploader's choice (a 7 MB default
/// text, cheap through the root `slots` object) and re-read at every cache miss.
pub const MAX_TEMPLATE_RECORD_BYTES: usize = 1024 * 1024;

/// What is kept about a template besides its JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateRecord {
    pub id: Uuid,
    /// The tenant whose caller created it; only that tenant's callers see it. Records
    /// written before tenants belong to the default tenant.
    #[serde(default)]
    pub tenant: TenantId,
    pub name: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Font family → file name under `fonts/`.
    pub fonts: BTreeMap<String, String>,
    /// Font family → lowercase hex sha256 of the font file.
    #[serde(default)]
    pub font_sha256: BTreeMap<String, String>,
    /// The template's report (timing, slots, warnings), computed once at creation so that
    /// reads and listings never parse the JSON again.
    pub report: InspectReport,
}

impl TemplateRecord {
    /// What the template renders from: its file's sha256 (with the animation chosen of a
    /// dotLottie) and, when it has fonts, theirs (the same JSON with another font renders
    /// other pixels). Part of every job's fingerprint.
    pub(crate) fn render_identity(&self) -> String {
        // The archive's sha256 alone is the same for each of its animations.
        let template = match &self.report.animation {
            Some(animation) => format!("{}#{animation:?}", self.report.sha256),
            None => self.report.sha256.clone(),
        };
        if self.font_sha256.is_empty() {
            return template;
        }
        let fonts: Vec<String> = self
            .font_sha256
            .iter()
            .map(|(family, sha256)| format!("{family:?}={sha256}"))
            .collect();
        crate::lottie::reading::template::hex_sha256(
            format!("{template}+{}", fonts.join(",")).as_bytes(),
        )
    }
}
