//! Following a job that another instance renders, through its shared record. One stream of
//! a shared job's snapshots ([`follow_shared_job`]) serves both readers: a job of this
//! instance that joined that render (it mirrors the leader until it ends) and
//! WatchRenderJob of a job that lives on another instance.

use super::{Shared, SharedJobs};
use crate::jobs::board::mirror;
use crate::jobs::local::MIN_RETRY_AFTER;
use crate::jobs::model::{Job, JobFailure, JobState, RenderWork};
use crate::jobs::queue::PushRefused;
use crate::reason::Reason;
use futures_util::{Stream, StreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How often a reader of a quiet shared job checks that job's record (whose owner's
/// heartbeat tells whether the instance rendering it is still alive).
pub const OWNER_CHECK_INTERVAL: Duration = Duration::from_secs(15);
/// A job following another instance's render fails (retryable) when nothing is heard of
/// that render for this long: the longest render plus a long wait in a queue.
const FOLLOW_SILENCE_LIMIT: Duration = Duration::from_secs(3600);

/// Following a shared job stopped before it ended: its record became unreachable or gone,
/// or its changes stopped while it had not ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lost track of the shared job")]
pub struct FollowLost;

/// The snapshots of shared job `id` after `changes` (its subscription): each change as
/// published; when nothing comes for [`OWNER_CHECK_INTERVAL`] (a long queue) or the
/// subscription drops, the record itself, which reads as failed once its owner stopped.
/// Ends with [`FollowLost`] when the record cannot be read, when the subscription dropped
/// before the job ended, or when the job stays quiet longer than `silence_limit` (none: it
/// may stay quiet for ever). Snapshots may repeat: readers skip versions they have seen.
pub fn follow_shared_job(
    shared: Arc<SharedJobs>,
    id: Uuid,
    changes: impl Stream<Item = Job> + Send + 'static,
    silence_limit: Option<Duration>,
) -> impl Stream<Item = Result<Job, FollowLost>> + Send + 'static {
    let started_following = Instant::now();
    futures_util::stream::unfold(
        Some((Box::pin(changes), shared)),
        move |following| async move {
            let (mut changes, shared) = following?;
            let next = match tokio::time::timeout(OWNER_CHECK_INTERVAL, changes.next()).await {
                Ok(Some(job)) => Ok(job),
                quiet => {
                    let still_subscribed = quiet.is_err();
                    let within_silence_limit =
                        silence_limit.is_none_or(|limit| started_following.elapsed() < limit);
                    match shared.get(id).await.ok().flatten() {
                        Some(job) if job.state.is_terminal() => Ok(job),
                        Some(job) if still_subscribed && within_silence_limit => Ok(job),
                        _ => Err(FollowLost),
                    }
                }
            };
            let following = next.is_ok().then_some((changes, shared));
            Some((next, following))
        },
    )
}

impl Shared {
    /// Adds `job` as a follower of `leader`, a render of another instance, and keeps it in
    /// step with the leader's published snapshots.
    /// Refused when the queue has no slot for another follower.
    pub(super) fn follow_remote(
        self: &Arc<Self>,
        job: Job,
        work: Arc<RenderWork>,
        leader: Job,
    ) -> Result<Job, PushRefused> {
        let mut follower = job;
        mirror(&mut follower, &leader);
        self.local
            .board
            .insert_following(follower.clone(), work, leader.id)?;
        self.local.metrics.render_joins.inc();
        tracing::info!(job_id = %follower.id, template_id = %follower.template_id, leader_job_id = %leader.id, "job joins the render of an identical request on another instance");
        let shared = self.clone();
        let id = follower.id;
        tokio::spawn(async move { shared.keep_following(id, leader.id).await });
        Ok(follower)
    }

    /// Keeps follower `id` in step with `leader`'s shared snapshots until either ends; a
    /// leader lost track of fails the follower, retryable (SHARED_RENDER_LOST).
    async fn keep_following(self: Arc<Self>, id: Uuid, leader: Uuid) {
        let shared = self.records.clone();
        let board = &self.local.board;
        let lost = |message: String| JobFailure {
            reason: Reason::SharedRenderLost,
            message,
            retryable: true,
            retry_after: Some(MIN_RETRY_AFTER),
        };
        let (current, changes) = match shared.watch(leader).await {
            Ok(watch) => watch,
            Err(error) => {
                board.update(id, |job| {
                    job.finish(
                        JobState::Failed,
                        Some(lost(format!("cannot follow the shared render: {error}"))),
                    );
                    true
                });
                return;
            }
        };
        let changes = follow_shared_job(shared, leader, changes, Some(FOLLOW_SILENCE_LIMIT));
        let mut snapshots =
            std::pin::pin!(futures_util::stream::iter(current.map(Ok)).chain(changes));
        let mut last_version = None;
        while let Some(snapshot) = snapshots.next().await {
            let Ok(leader_job) = snapshot else {
                board.update(id, |job| {
                    job.finish(
                        JobState::Failed,
                        Some(lost("lost track of the shared render".into())),
                    );
                    true
                });
                return;
            };
            if last_version.is_some_and(|last| leader_job.version <= last) {
                continue;
            }
            last_version = Some(leader_job.version);
            if leader_job.state == JobState::Succeeded {
                let outputs = self.local.outputs.clone();
                let extension = leader_job.format.extension();
                let linked =
                    tokio::task::spawn_blocking(move || outputs.link(leader, id, extension)).await;
                if !matches!(linked, Ok(Ok(()))) {
                    board.update(id, |job| {
                        job.finish(
                            JobState::Failed,
                            Some(lost(
                                "the shared render's output is not in the store".into(),
                            )),
                        );
                        true
                    });
                    return;
                }
            }
            let followed = board.update(id, |job| {
                mirror(job, &leader_job);
                true
            });
            match followed {
                Some(job) if !job.state.is_terminal() => {}
                // Finished, cancelled by its own caller, or expired.
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against the real Redis of the test machine (127.0.0.1:6379), each test under its own
    //! key prefix.

    use super::*;
    use crate::auth::TenantId;
    use crate::jobs::test_support::{gif_fingerprint, queued_job, test_redis};

    fn shared_jobs() -> Arc<SharedJobs> {
        let prefix = format!("lottie-render-test:following:{}:", Uuid::new_v4());
        Arc::new(SharedJobs::new(
            test_redis(&prefix),
            Duration::from_secs(60),
        ))
    }

    fn a_queued_job() -> Job {
        let tenant = TenantId::default();
        let fingerprint = gif_fingerprint(&tenant, "sha");
        queued_job(tenant, fingerprint)
    }

    #[tokio::test]
    async fn a_shared_job_is_followed_through_each_published_change_to_its_end() {
        let shared = shared_jobs();
        let mut job = a_queued_job();
        shared.publish(&job).await.unwrap();
        let (current, changes) = shared.watch(job.id).await.unwrap();
        assert_eq!(current.map(|job| job.state), Some(JobState::Queued));
        let snapshots = follow_shared_job(shared.clone(), job.id, changes, None);
        let mut snapshots = std::pin::pin!(snapshots);
        job.state = JobState::Running;
        job.version = 1;
        shared.publish(&job).await.unwrap();
        let running = snapshots.next().await.unwrap().unwrap();
        assert_eq!((running.state, running.version), (JobState::Running, 1));
        job.finish(JobState::Succeeded, None);
        job.version = 2;
        shared.publish(&job).await.unwrap();
        let succeeded = snapshots.next().await.unwrap().unwrap();
        assert_eq!(
            (succeeded.state, succeeded.version),
            (JobState::Succeeded, 2)
        );
    }

    #[tokio::test]
    async fn following_a_job_without_a_record_is_lost_once_and_then_ends() {
        let shared = shared_jobs();
        let id = Uuid::new_v4();
        let (current, changes) = shared.watch(id).await.unwrap();
        assert!(current.is_none());
        let snapshots = follow_shared_job(shared, id, changes, None);
        let mut snapshots = std::pin::pin!(snapshots);
        assert_eq!(snapshots.next().await, Some(Err(FollowLost)));
        assert_eq!(snapshots.next().await, None);
    }
}
