//! The table of jobs: the current snapshot of each, the work it stands for, its cancel token,
//! and a broadcast of every change so WatchRenderJob can follow it. Snapshots are cheap
//! clones; every critical section is a map operation (no I/O under the lock).

use super::model::{Job, RenderWork};
use super::quarantine::lock;
use crate::sandbox::CancelToken;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;
use uuid::Uuid;

/// Changes a watcher may fall behind by before it re-reads the snapshot: a job publishes
/// its state changes (≤ 4) and at most one progress change per percent.
const WATCH_BACKLOG: usize = 128;

struct Entry {
    job: Job,
    work: Arc<RenderWork>,
    cancel: CancelToken,
    changes: broadcast::Sender<Job>,
}

#[derive(Default)]
pub struct JobBoard {
    entries: Mutex<HashMap<Uuid, Entry>>,
}

impl std::fmt::Debug for JobBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBoard")
            .field("jobs", &lock(&self.entries).len())
            .finish()
    }
}

impl JobBoard {
    pub fn insert(&self, job: Job, work: RenderWork) {
        let (changes, _) = broadcast::channel(WATCH_BACKLOG);
        lock(&self.entries).insert(
            job.id,
            Entry {
                job,
                work: Arc::new(work),
                cancel: CancelToken::default(),
                changes,
            },
        );
    }

    pub fn remove(&self, id: Uuid) -> Option<Job> {
        lock(&self.entries).remove(&id).map(|entry| entry.job)
    }

    pub fn get(&self, id: Uuid) -> Option<Job> {
        lock(&self.entries).get(&id).map(|entry| entry.job.clone())
    }

    /// The current snapshot and a receiver of every later change.
    pub fn subscribe(&self, id: Uuid) -> Option<(Job, broadcast::Receiver<Job>)> {
        lock(&self.entries)
            .get(&id)
            .map(|entry| (entry.job.clone(), entry.changes.subscribe()))
    }

    pub fn work(&self, id: Uuid) -> Option<(Arc<RenderWork>, CancelToken)> {
        lock(&self.entries)
            .get(&id)
            .map(|entry| (entry.work.clone(), entry.cancel.clone()))
    }

    /// Applies `change` unless the job is terminal already; publishes the new snapshot when
    /// `change` answers true (something a watcher should see). Answers the snapshot.
    pub fn update(&self, id: Uuid, change: impl FnOnce(&mut Job) -> bool) -> Option<Job> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(&id)?;
        if entry.job.state.is_terminal() {
            return Some(entry.job.clone());
        }
        if change(&mut entry.job) {
            entry.job.version += 1;
            // No receiver is fine: nobody is watching.
            let _ = entry.changes.send(entry.job.clone());
        }
        Some(entry.job.clone())
    }

    /// Asks the job's worker to stop (the scheduler marks the job when it has).
    pub fn request_cancel(&self, id: Uuid) -> Option<Job> {
        let entries = lock(&self.entries);
        let entry = entries.get(&id)?;
        entry.cancel.cancel();
        Some(entry.job.clone())
    }

    /// Cancel tokens of every running job.
    pub fn running_cancel_tokens(&self) -> Vec<CancelToken> {
        lock(&self.entries)
            .values()
            .filter(|entry| entry.job.state == super::JobState::Running)
            .map(|entry| entry.cancel.clone())
            .collect()
    }

    /// Removes terminal jobs finished more than `retention` ago; answers them.
    pub fn expire(&self, retention: Duration) -> Vec<Job> {
        let now = SystemTime::now();
        let mut entries = lock(&self.entries);
        let expired: Vec<Uuid> = entries
            .values()
            .filter(|entry| {
                entry.job.finished_at.is_some_and(|finished| {
                    now.duration_since(finished).unwrap_or_default() >= retention
                })
            })
            .map(|entry| entry.job.id)
            .collect();
        expired
            .into_iter()
            .filter_map(|id| entries.remove(&id).map(|entry| entry.job))
            .collect()
    }
}
