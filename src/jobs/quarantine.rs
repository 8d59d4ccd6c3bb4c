//! Fingerprints whose renders crashed the worker twice, or whose expressions ran out of their
//! budget (`EXPRESSIONS_CPU_EXCEEDED`). A quarantined request is refused at the boundary
//! (INVALID_ARGUMENT) without spawning anything, so a poisoned template cannot burn the render
//! farm however often it is retried. Entries expire with the job retention.

use super::Fingerprint;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

#[derive(Debug, Default)]
pub struct Quarantine {
    entries: Mutex<HashMap<Fingerprint, SystemTime>>,
}

impl Quarantine {
    /// Quarantines `fingerprint`; answers how many fingerprints are quarantined now.
    pub(crate) fn add(&self, fingerprint: Fingerprint) -> usize {
        let mut entries = lock(&self.entries);
        entries.insert(fingerprint, SystemTime::now());
        entries.len()
    }

    pub(crate) fn contains(&self, fingerprint: &Fingerprint) -> bool {
        lock(&self.entries).contains_key(fingerprint)
    }

    /// Forgets entries older than `retention`; answers how many remain.
    pub(crate) fn expire(&self, retention: Duration) -> usize {
        let now = SystemTime::now();
        let mut entries = lock(&self.entries);
        entries.retain(|_, since| now.duration_since(*since).unwrap_or_default() < retention);
        entries.len()
    }
}
