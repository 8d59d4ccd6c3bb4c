//! Replication: the ordered writer of this instance's snapshots and quarantines to the
//! shared records, and the end of jobs refused after they were shared (so that no other
//! instance follows a job that will never run).

use super::{Shared, SharedError, SharedJobs};
use crate::jobs::board::{Forgetting, Replication};
use crate::jobs::local::MIN_RETRY_AFTER;
use crate::jobs::model::{Job, JobFailure, JobState};
use crate::jobs::queue::PushRefused;
use crate::reason::Reason;
use std::sync::Arc;
use std::time::Duration;

/// How long the end of a job is retried while Redis fails, and the pauses between
/// attempts (doubled from the first to the last).
const END_WRITE_PATIENCE: Duration = Duration::from_secs(300);
const END_WRITE_RETRY_MIN: Duration = Duration::from_millis(100);
const END_WRITE_RETRY_MAX: Duration = Duration::from_secs(5);
/// Version of a shared record that is final (a job refused before it was admitted).
const FINAL_VERSION: u64 = 1 << 52;
/// How long shutdown waits for shared records to be written.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// Attempts at ending a job refused half-shared, and the wait between them: the shared
/// records just failed, so they are given a minute (12 × 5 s) to come back.
const ABANDON_ATTEMPTS: u32 = 12;
const ABANDON_RETRY_DELAY: Duration = Duration::from_secs(5);

impl Shared {
    /// Ends the shared traces of a job [`Shared::submit`] refused for a shared-record
    /// failure (no local part exists then: the refusal comes before the job is queued or
    /// follows anything), in the background, retried while the records keep failing.
    pub(super) fn abandon(&self, mut job: Job, error: String) {
        let shared = self.records.clone();
        job.finish(
            JobState::Failed,
            Some(JobFailure {
                reason: Reason::JobStoreUnavailable,
                message: format!("the job could not be shared: {error}"),
                retryable: true,
                retry_after: Some(MIN_RETRY_AFTER),
            }),
        );
        job.version = FINAL_VERSION;
        tokio::spawn(async move {
            for attempt in 1..=ABANDON_ATTEMPTS {
                let ended = shared.publish_refused(&job).await;
                let unindexed = shared.clear_render(&job.fingerprint, job.id).await;
                match (ended, unindexed) {
                    (Ok(()), Ok(())) => return,
                    (ended, unindexed) if attempt == ABANDON_ATTEMPTS => {
                        tracing::warn!(job_id = %job.id, ended = ?ended.err(), unindexed = ?unindexed.err(), "cannot end a job refused half-shared; followers give up after the silence limit");
                    }
                    _ => tokio::time::sleep(ABANDON_RETRY_DELAY).await,
                }
            }
        });
    }

    /// Ends the shared record of a job the queue refused after it was shared (it said
    /// QUEUED), so that nobody follows it, and frees the fingerprint; the end is kept
    /// [`crate::jobs::shared::REFUSED_RECORD_TTL`].
    pub(super) async fn share_refusal(&self, job: &Job, refused: PushRefused) {
        let shared = &self.records;
        let mut refused_job = job.clone();
        refused_job.finish(
            JobState::Failed,
            Some(JobFailure {
                reason: Reason::JobRefused,
                message: format!("the job was not accepted: {refused:?}"),
                retryable: true,
                retry_after: Some(self.queue_retry_after()),
            }),
        );
        refused_job.version = FINAL_VERSION;
        // Short-lived: refusals must not fill Redis.
        if let Err(error) = shared.publish_refused(&refused_job).await {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot share a refused job's end");
        }
        if let Err(error) = shared.clear_render(&job.fingerprint, job.id).await {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot free a shared render");
        }
    }

    /// Waits (a little) until every shared record written so far has reached Redis.
    pub(crate) async fn flush(&self) {
        let (done, flushed) = tokio::sync::oneshot::channel();
        if self.replication.send(Replication::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(FLUSH_LIMIT, flushed).await;
        }
    }
}

/// Writes the board's snapshots to the shared records in order (a snapshot older than the
/// stored one is dropped by Redis itself), frees the fingerprint of a render that failed or
/// was cancelled, shares quarantines, and removes the records of jobs evicted here (telling
/// `forgetting` when each is done).
pub(super) async fn replicate(
    shared: Arc<SharedJobs>,
    mut messages: tokio::sync::mpsc::UnboundedReceiver<Replication>,
    forgetting: Forgetting,
) {
    while let Some(message) = messages.recv().await {
        match message {
            Replication::Snapshot(job) => {
                if let Err(error) = publish_snapshot(&shared, &job).await {
                    tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot share a job's state");
                }
                if matches!(job.state, JobState::Failed | JobState::Cancelled) {
                    if let Err(error) = shared.clear_render(&job.fingerprint, job.id).await {
                        tracing::warn!(job_id = %job.id, template_id = %job.template_id, %error, "cannot free a shared render");
                    }
                }
            }
            Replication::Quarantine(fingerprint) => {
                if let Err(error) = shared.quarantine(&fingerprint).await {
                    tracing::warn!(%fingerprint, %error, "cannot share a quarantine");
                }
            }
            Replication::Forget(tenant, position) => {
                if let Err(error) = shared.forget(&tenant, position).await {
                    tracing::warn!(job_id = %position.id, %error, "cannot remove an evicted job's record; it expires with the retention");
                }
                forgetting.done(position.id);
            }
            Replication::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Writes one snapshot. A job's end is retried (Redis may be restarting) for up to
/// [`END_WRITE_PATIENCE`]: without it, a job of the shared queue stays unacknowledged and
/// another instance renders it again; a progress snapshot is not worth holding the next
/// ones back for (a later one replaces it).
async fn publish_snapshot(shared: &SharedJobs, job: &Job) -> Result<(), SharedError> {
    let give_up = tokio::time::Instant::now() + END_WRITE_PATIENCE;
    let mut pause = END_WRITE_RETRY_MIN;
    loop {
        match shared.publish(job).await {
            Ok(()) => return Ok(()),
            Err(error)
                if !job.state.is_terminal() || tokio::time::Instant::now() + pause > give_up =>
            {
                return Err(error)
            }
            Err(error) => {
                tracing::debug!(job_id = %job.id, %error, "cannot share a job's end yet; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(END_WRITE_RETRY_MAX);
            }
        }
    }
}
