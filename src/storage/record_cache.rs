//! Parsed template records kept in memory for SubmitRender's admission, so a submission of a
//! few hundred bytes does not re-read and re-parse a record that can be megabytes (a template
//! with a 7 MB default text): without it, a burst of submissions naming one large template
//! cost the server a parse each, in memory and CPU alike. Records never change once stored
//! (a template is immutable; deletion renames its directory away), so an entry stays right
//! for every instance sharing the data directory; a hit still checks that the record file
//! exists, so a template deleted by any instance is NOT_FOUND at once.

use super::TemplateRecord;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

/// Records kept: far more than the templates a service renders from in a day's busy hour.
pub const MAX_CACHED_RECORDS: usize = 256;
/// Bytes of record files kept (their size on disk, about their size in memory): bounded
/// whatever was uploaded.
pub const MAX_CACHED_RECORD_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Default)]
struct Entries {
    records: HashMap<Uuid, (Arc<TemplateRecord>, u64)>,
    /// Insertion order, oldest first: the first to go when the cache is full.
    order: VecDeque<Uuid>,
    bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub struct RecordCache {
    entries: Arc<Mutex<Entries>>,
}

impl RecordCache {
    pub fn get(&self, id: Uuid) -> Option<Arc<TemplateRecord>> {
        self.lock()
            .records
            .get(&id)
            .map(|(record, _)| record.clone())
    }

    /// Keeps `record` (read from a file of `bytes` bytes), evicting the oldest entries as
    /// needed; a record larger than the whole budget is not kept.
    pub fn insert(&self, id: Uuid, record: Arc<TemplateRecord>, bytes: u64) {
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

    pub fn remove(&self, id: Uuid) {
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
