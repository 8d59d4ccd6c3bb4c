//! Get, Watch, Cancel and List of a tenant's jobs wherever they live: this instance's board
//! first, then, with shared jobs, the records of the other instances (a listing reads the
//! tenant's index of the records: every instance's jobs, this instance's as its board has
//! them now). Another tenant's job is
//! absent for the caller exactly as an unknown id: it is looked for in the shared records as
//! an unknown id is, so that neither the answer (UNAVAILABLE while Redis is down) nor its
//! time (a Redis round trip) tells that the id is a job of this instance.

use super::Mode;
use crate::auth::TenantId;
use crate::jobs::listing::{JobPage, JobQuery};
use crate::jobs::local::{LocalJobs, CANCEL_SETTLE};
use crate::jobs::model::Job;
use crate::jobs::shared::{follow_shared_job, FollowLost, SharedError, SharedJobs};
use futures_util::{Stream, StreamExt};
use std::sync::Arc;
use tokio::sync::broadcast;
use uuid::Uuid;

/// A job's shared record as it is now, and its later snapshots.
type SharedWatch = (Job, std::pin::Pin<Box<dyn Stream<Item = Job> + Send>>);

#[derive(Debug)]
pub(crate) struct Lookup {
    local: Arc<LocalJobs>,
    /// With shared jobs, where the jobs of other instances are.
    mode: Mode,
}

impl Lookup {
    pub(super) fn new(local: Arc<LocalJobs>, mode: Mode) -> Lookup {
        Lookup { local, mode }
    }

    /// A job of `tenant` on this instance or on another one sharing Redis (another tenant's
    /// job is not found, as an unknown one).
    pub(crate) async fn find_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Option<Job>, SharedError> {
        let job = match (self.local_job(tenant, id), &self.mode) {
            (Some(job), _) => Some(job),
            // Read even for a job evicted here, so that the answer takes the time any other
            // absent job's does. Evicted asked before the read, as in `Shared::join`: asked
            // after, a record read just before its removal would answer for the job.
            (None, Mode::Shared(shared)) => {
                let evicted_here = self.local.evicted_here(id);
                shared.records().get(id).await?.filter(|_| !evicted_here)
            }
            (None, Mode::Local) => None,
        };
        Ok(job.filter(|job| job.tenant == *tenant))
    }

    /// One page of `tenant`'s jobs, as `query` asks: from the board alone in memory, from
    /// the records of every instance with shared jobs (a job of this instance as its board
    /// has it, which may be newer; a job evicted here is not shown, as GetRenderJob does not
    /// find it).
    pub(crate) async fn list_jobs(
        &self,
        tenant: &TenantId,
        query: &JobQuery,
    ) -> Result<JobPage, SharedError> {
        let Mode::Shared(shared) = &self.mode else {
            return Ok(self.local.board.list(tenant, query));
        };
        let current = |record: Job| {
            if self.local.evicted_here(record.id) {
                return None;
            }
            Some(self.local_job(tenant, record.id).unwrap_or(record))
        };
        shared.records().list(tenant, query, current).await
    }

    /// A job of `tenant` on this instance's board.
    fn local_job(&self, tenant: &TenantId, id: Uuid) -> Option<Job> {
        self.local.board.get(id).filter(|job| job.tenant == *tenant)
    }

    /// A job of `tenant` on this instance as it is now, and its later snapshots (they end
    /// when the job expires).
    pub(crate) fn watch_local_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Option<(Job, impl Stream<Item = Job> + Send + 'static + use<>)> {
        let board = self.local.board.clone();
        let (job, changes) = board
            .subscribe(id)
            .filter(|(job, _)| job.tenant == *tenant)?;
        let snapshots = futures_util::stream::unfold(
            (changes, board),
            move |(mut changes, board)| async move {
                let next = match changes.recv().await {
                    Ok(job) => job,
                    // Fell behind: the snapshot is the truth (progress is monotonic).
                    Err(broadcast::error::RecvError::Lagged(_)) => board.get(id)?,
                    // The job expired.
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((next, (changes, board)))
            },
        );
        Some((job, snapshots))
    }

    /// A job of `tenant` on another instance as its shared record has it now, and its later
    /// snapshots ([`follow_shared_job`]); `None` when there is no such job (or no shared
    /// records).
    pub(crate) async fn watch_shared_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<
        Option<(
            Job,
            impl Stream<Item = Result<Job, FollowLost>> + Send + 'static + use<>,
        )>,
        SharedError,
    > {
        let Some((records, (current, changes))) = self.shared_record(tenant, id).await? else {
            return Ok(None);
        };
        Ok(Some((
            current,
            follow_shared_job(records, id, changes, None),
        )))
    }

    /// A job of `tenant` in the shared records (none without them, or for a job evicted
    /// here) as it is now, and its later snapshots; another tenant's job is not found.
    async fn shared_record(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Option<(Arc<SharedJobs>, SharedWatch)>, SharedError> {
        let Mode::Shared(shared) = &self.mode else {
            return Ok(None);
        };
        let records = shared.records().clone();
        // Before the read, as in `find_job`.
        let evicted_here = self.local.evicted_here(id);
        let (current, changes) = records.watch(id).await?;
        let Some(current) = current.filter(|job| job.tenant == *tenant && !evicted_here) else {
            return Ok(None);
        };
        Ok(Some((records, (current, Box::pin(changes)))))
    }

    /// Cancels a job of `tenant`: one of this instance as [`LocalJobs::cancel`] does, one of
    /// another instance by asking its owner, answered once it has ended (or as it is after
    /// [`CANCEL_SETTLE`]). Another tenant's job here is left alone and looked for in the
    /// shared records, as an unknown id (where it is not found either, and never cancelled).
    pub(crate) async fn cancel_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Option<Job>, SharedError> {
        if self.local_job(tenant, id).is_some() {
            let cancelled = self.local.cancel(id).await;
            // Its end reaches the shared records before the answer, so that every instance
            // answers for the job as this one did.
            self.mode.flush().await;
            return Ok(cancelled);
        }
        // Another tenant's job: not found, and its owner is never asked.
        let Some((shared, (current, changes))) = self.shared_record(tenant, id).await? else {
            return Ok(None);
        };
        if current.state.is_terminal() {
            return Ok(Some(current));
        }
        // Waiting in the shared queue, taken by nobody: its record is all there is. Taken
        // meanwhile (the record changed), its owner is asked as for any other job.
        if current.reclaimable && current.owner.is_none() {
            if let Some(cancelled) = shared.cancel_queued(&current).await? {
                self.local.board.announce(&cancelled);
                tracing::info!(job_id = %id, template_id = %cancelled.template_id, "job cancelled while queued in the shared queue");
                return Ok(Some(cancelled));
            }
        }
        shared.request_cancel(id).await?;
        let mut changes = std::pin::pin!(changes);
        let mut latest = current;
        let _ = tokio::time::timeout(CANCEL_SETTLE, async {
            while let Some(job) = changes.next().await {
                let terminal = job.state.is_terminal();
                if job.version > latest.version {
                    latest = job;
                }
                if terminal {
                    break;
                }
            }
        })
        .await;
        Ok(Some(latest))
    }
}
