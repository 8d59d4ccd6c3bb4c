//! The evicted jobs whose shared records are still to be removed.

use crate::sync::lock;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// The jobs this instance evicted whose [`Replication::Forget`](super::Replication::Forget)
/// the writer of shared records has not done yet: the records are written in order by one
/// task, which may lag behind a burst of jobs (a reuse is SUCCEEDED at once), and until it reaches the forget the evicted
/// job's record is still in Redis. A lookup of a job not on the board reads that record, so
/// it must know the job is gone: else an evicted job would answer as kept (and its output,
/// removed already, would be reused).
///
/// Bounded by the jobs kept: an id enters only when a kept job is evicted and leaves when the
/// writer has tried its removal (done or failed alike, one Redis timeout each). With Redis
/// down nothing is admitted (submissions are JOB_STORE_UNAVAILABLE), so no admission evicts,
/// and retention can evict at most the jobs kept.
#[derive(Debug, Default, Clone)]
pub(crate) struct Forgetting(Arc<Mutex<HashSet<Uuid>>>);

impl Forgetting {
    /// Whether job `id` was evicted here and its record may still be read.
    pub(crate) fn contains(&self, id: Uuid) -> bool {
        lock(&self.0).contains(&id)
    }

    pub(super) fn add(&self, id: Uuid) {
        lock(&self.0).insert(id);
    }

    /// Job `id`'s record is removed (or its removal failed: it expires with the retention).
    pub(crate) fn done(&self, id: Uuid) {
        lock(&self.0).remove(&id);
    }
}
