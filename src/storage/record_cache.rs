//! What SubmitRender's admission needs of a template ([`AdmissionRecord`]: its owner, slot
//! ids, duration, render identity and font files), kept in memory, so a submission of a few
//! hundred bytes neither re-reads nor re-parses the template's record. Only the slot lists
//! are kept, never the record: a record holds every default text and warning (up to
//! [`super::MAX_TEMPLATE_RECORD_BYTES`]), and a cache of whole records was defeated by a
//! dozen templates with 7 MB records (each miss re-read and re-parsed 7 MB, 8 loops took a
//! core and 500 MB). A hit costs nothing; a miss reads one bounded record once. Records never
//! change once stored (a template is immutable; deletion removes its record first), so an
//! entry stays right for every instance sharing the data directory; a hit still checks that
//! the record exists, so a template deleted by any instance is NOT_FOUND at once.

use super::TemplateRecord;
use crate::auth::TenantId;
use crate::lottie::slots::Slots;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

/// Templates kept: far more than the templates a service renders from in a day's busy hour.
pub const MAX_CACHED_RECORDS: usize = 256;
/// Bytes of kept admission records (their [`AdmissionRecord::weight`]): bounded whatever was
/// uploaded. A template's slot ids are within its record's limit, so even the largest fit
/// dozens of times; honest ones (a few KiB) all 256.
pub const MAX_CACHED_RECORD_BYTES: u64 = 64 * 1024 * 1024;
/// What an admission record costs besides its strings and slots (the struct, the map entry;
/// a slot's own is `Slot::admission_bytes`): a rough, generous figure for the byte budget.
const ENTRY_OVERHEAD_BYTES: u64 = 512;

/// What admission reads of a template's record: its owner, slot ids (default colours, never
/// default texts nor font families), duration, render identity and font files (to pin them).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionRecord {
    pub id: Uuid,
    pub tenant: TenantId,
    pub duration_seconds: f64,
    /// [`TemplateRecord::render_identity`].
    pub render_identity: String,
    /// Font family → file name under `fonts/` (as in the record).
    pub fonts: BTreeMap<String, String>,
    /// The template's slots as admission keeps them (`Slot::for_admission`: ids and what a
    /// value is checked against, never bindings, default texts nor font families).
    pub slots: Slots,
    /// A dotLottie's themes (name → slot values), for `RenderRequest.theme`.
    pub themes: crate::lottie::reading::dotlottie::Themes,
    /// The dotLottie animation the template is (its record's choice).
    pub animation: Option<String>,
    /// The template's markers, for a render's still time and segment.
    pub markers: Vec<crate::spec::Marker>,
    /// Blurs and drop shadows its renders draw on pixels (the report's), charged to a job.
    pub pixel_filters: usize,
}

impl AdmissionRecord {
    pub fn of(record: &TemplateRecord) -> AdmissionRecord {
        AdmissionRecord {
            themes: record.report.themes.clone(),
            animation: record.report.animation.clone(),
            markers: record.report.markers.clone(),
            pixel_filters: record.report.pixel_filters,
            id: record.id,
            tenant: record.tenant.clone(),
            duration_seconds: record.report.duration_seconds,
            render_identity: record.render_identity(),
            fonts: record.fonts.clone(),
            slots: record.report.slots.for_admission(),
        }
    }

    /// About the bytes it holds in memory, for the cache's budget.
    pub(crate) fn weight(&self) -> u64 {
        let fonts: usize = self
            .fonts
            .iter()
            .map(|(family, file)| family.len() + file.len())
            .sum();
        // A theme: its name and its values, about their JSON's size.
        let themes: usize = self
            .themes
            .iter()
            .map(|(name, theme)| name.len() + serde_json::to_vec(theme).map_or(0, |j| j.len()))
            .sum();
        // A marker: its name and two numbers.
        let markers: usize = self
            .markers
            .iter()
            .map(|marker| 64 + marker.name.len())
            .sum();
        ENTRY_OVERHEAD_BYTES
            + (themes + markers) as u64
            + (self.slots.admission_bytes() + fonts + self.render_identity.len()) as u64
            + self.animation.as_ref().map_or(0, |id| id.len() as u64)
    }
}

#[derive(Debug, Default)]
struct Entries {
    records: HashMap<Uuid, (Arc<AdmissionRecord>, u64)>,
    /// Insertion order, oldest first: the first to go when the cache is full.
    order: VecDeque<Uuid>,
    bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RecordCache {
    entries: Arc<Mutex<Entries>>,
}

impl RecordCache {
    pub(crate) fn get(&self, id: Uuid) -> Option<Arc<AdmissionRecord>> {
        self.lock()
            .records
            .get(&id)
            .map(|(record, _)| record.clone())
    }

    /// Keeps `record` (whose weight is `bytes`), evicting the oldest entries as needed; a
    /// record larger than the whole budget is not kept.
    pub(crate) fn insert(&self, id: Uuid, record: Arc<AdmissionRecord>, bytes: u64) {
        if bytes > MAX_CACHED_RECORD_BYTES {
            return;
        }
        let mut entries = self.lock();
        if entries.records.contains_key(&id) {
            return;
        }
        while entries.records.len() >= MAX_CACHED_RECORDS
            || entries.bytes + bytes > MAX_CACHED_RECORD_BYTES
        {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = entries.records.remove(&oldest) {
                entries.bytes -= size;
            }
        }
        entries.records.insert(id, (record, bytes));
        entries.order.push_back(id);
        entries.bytes += bytes;
    }

    pub(crate) fn remove(&self, id: Uuid) {
        let mut entries = self.lock();
        if let Some((_, size)) = entries.records.remove(&id) {
            entries.bytes -= size;
            entries.order.retain(|kept| *kept != id);
        }
    }

    /// The entries, even if another thread panicked while holding the lock: every change
    /// above leaves them consistent before it could panic.
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
