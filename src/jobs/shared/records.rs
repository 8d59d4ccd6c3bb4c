//! Job records shared by every instance on one Redis (`--redis-url`), so that any instance
//! answers GetRenderJob, WatchRenderJob, CancelRenderJob, DownloadRenderOutput (with a shared
//! data directory) and idempotent replays for any job, and identical requests share one
//! render across instances.
//!
//! The instance that accepted a job owns it: it renders it and writes every snapshot to
//! `{prefix}job:{id}` (expiring with the retention) and publishes it on
//! `{prefix}job-events:{id}`. Others read the record, subscribe to the channel, and ask the
//! owner to cancel on `{prefix}cancel`. `{prefix}render:{fingerprint}` names the job that
//! renders (or rendered) a fingerprint; it is claimed with `SET NX` and taken over with a
//! compare-and-set when that job failed or was cancelled. `{prefix}tenant-jobs:{tenant}`
//! lists a tenant's jobs for ListRenderJobs ([`tenant_index`]), written with every record.

use crate::error::{ServiceError, ServiceErrorCode};
use crate::jobs::listing::ListPosition;
use crate::jobs::{Fingerprint, Job, JobFailure, JobState};
use crate::reason::Reason;
use crate::redis_client::{millis, RedisClient, RedisError, Subscription};
use deadpool_redis::redis::Script;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

mod render_index;
mod tenant_index;

use tenant_index::index_member;
pub use tenant_index::MAX_INDEXED_JOBS_PER_TENANT;

/// The key of job `id`'s record.
pub(crate) fn job_key(redis: &RedisClient, id: Uuid) -> String {
    redis.key(&format!("job:{id}"))
}

/// The channel job `id`'s snapshots are published on.
pub(crate) fn events_channel(redis: &RedisClient, id: Uuid) -> String {
    redis.key(&format!("job-events:{id}"))
}

/// Stores snapshot `ARGV[1]` (version `ARGV[2]`, expiry `ARGV[3]` ms, written by owner
/// `ARGV[4]`, empty for none) at `KEYS[1]` and publishes it on channel `KEYS[2]`, unless the
/// stored snapshot is as new or newer (snapshots may arrive out of order, an older one must
/// never overwrite a newer one), or the stored one is of a job of the shared queue taken by
/// another instance (an instance whose lease ran out must not overwrite the new owner's
/// snapshots). A snapshot written is listed in its tenant's index ([`INDEX_WRITTEN`]).
const PUBLISH_IF_NEWER: &str = r"
local current = redis.call('GET', KEYS[1])
if current then
  local ok, decoded = pcall(cjson.decode, current)
  if ok and type(decoded) == 'table' then
    if decoded['version'] and decoded['version'] >= tonumber(ARGV[2]) then
      return 0
    end
    if decoded['reclaimable'] == true and type(decoded['owner']) == 'string' and decoded['owner'] ~= ARGV[4] then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('PUBLISH', KEYS[2], ARGV[1])
";

/// Stores snapshot `ARGV[1]` (expiry `ARGV[3]` ms) at `KEYS[1]` and publishes it on channel
/// `KEYS[2]` only if the stored snapshot's version is exactly `ARGV[2]` (`ARGV[4]`, the owner,
/// is not read): the change was
/// decided on that snapshot (a compare-and-set for taking or cancelling a queued job). Listed
/// in its tenant's index as [`PUBLISH_IF_NEWER`] is.
const PUBLISH_IF_VERSION: &str = r"
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local ok, decoded = pcall(cjson.decode, current)
if not ok or type(decoded) ~= 'table' or decoded['version'] ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('PUBLISH', KEYS[2], ARGV[1])
";

/// The tail of both publishing scripts, once the snapshot is written: its job is listed in
/// its tenant's index `KEYS[3]` as member `ARGV[5]` (a member new there makes the index keep
/// only its newest `ARGV[6]`), and the index lives `ARGV[7]` ms (the retention) past this
/// write, as long as the record written last by any of its jobs.
const INDEX_WRITTEN: &str = r"
if redis.call('ZADD', KEYS[3], 0, ARGV[5]) == 1 then
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -tonumber(ARGV[6]) - 1)
end
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return 1";

/// How long the record of a job not admitted yet lives. It is written just before the job
/// may be named by the render index (another instance that finds it there must find its
/// record), and admission writes it again with the retention a few Redis round trips later
/// (the queue's script, or the board's first snapshot); should this instance stop in between,
/// the record goes after a minute instead of a day.
pub const PENDING_RECORD_TTL: Duration = Duration::from_secs(60);
/// How long the record of a job refused after it was shared lives (a refusal that lost a
/// race with another submission: the usual refusal writes nothing). Long enough for an
/// instance that found the job in the render index meanwhile (a few round trips ago) to read
/// that it ended rather than take it for lost, and for a caller's retry of the same request
/// to meet the same record; short, so that refusals, which a caller can cause hundreds of
/// times a second, cannot fill Redis.
pub const REFUSED_RECORD_TTL: Duration = Duration::from_secs(60);

/// Attempts at a compare-and-set on a record that keeps changing under it (progress of a
/// job being taken at that very moment): a few, then the caller is told Redis is in trouble.
const RECORD_CHANGE_ATTEMPTS: usize = 4;

/// What an instance that took a queue entry finds in the job's record.
#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// The job is this instance's now (its record says so), queued again if it was left
    /// by an instance that stopped.
    Job(Box<Job>),
    /// The job has ended (cancelled while queued, or rendered by an instance whose entry
    /// was not acknowledged) or its record expired: nothing to render.
    Ended,
}

#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("shared job records are unreachable: {0}")]
    Unavailable(String),
    #[error("shared job records did not answer within {0:?}")]
    Timeout(Duration),
    #[error("a shared job record is damaged: {0}")]
    Damaged(String),
}

/// Retry delay when shared job records are unreachable.
const SHARED_RETRY_AFTER: Duration = Duration::from_secs(1);

impl From<SharedError> for ServiceError {
    fn from(error: SharedError) -> ServiceError {
        ServiceError::transient(
            ServiceErrorCode::Unavailable,
            Reason::JobStoreUnavailable,
            format!("shared job records are unreachable: {error}"),
            SHARED_RETRY_AFTER,
        )
    }
}

impl From<RedisError> for SharedError {
    fn from(error: RedisError) -> SharedError {
        match error {
            RedisError::Unavailable(message) => SharedError::Unavailable(message),
            RedisError::Timeout(after) => SharedError::Timeout(after),
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> SharedError {
    SharedError::Unavailable(error.to_string())
}

/// The snapshots published on a job's channel (none without a subscription); ends when the
/// pub/sub connection is lost.
fn job_changes(
    subscription: Option<Subscription>,
) -> impl futures_util::Stream<Item = Job> + Send + 'static {
    futures_util::stream::unfold(subscription, |subscription| async move {
        let mut subscription = subscription?;
        loop {
            let json = subscription.next().await?;
            // A damaged snapshot is skipped: the next one (or the record) tells the truth.
            if let Ok(job) = serde_json::from_str::<Job>(&json) {
                return Some((job, Some(subscription)));
            }
        }
    })
}

/// Who renders a fingerprint, as the shared index says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderClaim {
    /// Nobody did: the caller's job renders it now.
    Leads,
    /// This job renders (or rendered) it.
    Existing(Uuid),
}

#[derive(Debug)]
pub struct SharedJobs {
    /// This instance, as job records name their owner.
    instance: Uuid,
    redis: Arc<RedisClient>,
    retention: Duration,
    publish_if_newer: Script,
    publish_if_version: Script,
}

impl SharedJobs {
    pub(crate) fn new(redis: Arc<RedisClient>, retention: Duration) -> SharedJobs {
        SharedJobs {
            instance: Uuid::new_v4(),
            redis,
            retention,
            publish_if_newer: Script::new(&format!("{PUBLISH_IF_NEWER}{INDEX_WRITTEN}")),
            publish_if_version: Script::new(&format!("{PUBLISH_IF_VERSION}{INDEX_WRITTEN}")),
        }
    }

    pub(crate) fn instance(&self) -> Uuid {
        self.instance
    }

    pub(crate) fn retention(&self) -> Duration {
        self.retention
    }

    pub(crate) fn redis(&self) -> &Arc<RedisClient> {
        &self.redis
    }

    fn heartbeat_key(&self, instance: Uuid) -> String {
        self.redis.key(&format!("instance:{instance}"))
    }

    fn quarantine_key(&self, fingerprint: &Fingerprint) -> String {
        self.redis.key(&format!("quarantine:{fingerprint}"))
    }

    /// Keeps this instance's heartbeat alive (it expires [`HEARTBEAT_TTL`] after the last
    /// beat), until the task is dropped.
    pub(crate) async fn beat(self: std::sync::Arc<Self>) {
        let key = self.heartbeat_key(self.instance);
        loop {
            if let Err(error) = self.redis.set_expiring(&key, "1", HEARTBEAT_TTL).await {
                tracing::warn!(%error, "cannot renew this instance's heartbeat");
            }
            tokio::time::sleep(HEARTBEAT_EVERY).await;
        }
    }

    async fn alive(&self, instance: Uuid) -> Result<bool, SharedError> {
        if instance == self.instance {
            return Ok(true);
        }
        Ok(self.redis.exists(&self.heartbeat_key(instance)).await?)
    }

    /// Quarantines `fingerprint` for every instance, for the retention.
    pub(crate) async fn quarantine(&self, fingerprint: &Fingerprint) -> Result<(), SharedError> {
        let key = self.quarantine_key(fingerprint);
        Ok(self.redis.set_expiring(&key, "1", self.retention).await?)
    }

    pub(crate) async fn is_quarantined(
        &self,
        fingerprint: &Fingerprint,
    ) -> Result<bool, SharedError> {
        Ok(self.redis.exists(&self.quarantine_key(fingerprint)).await?)
    }

    fn job_key(&self, id: Uuid) -> String {
        job_key(&self.redis, id)
    }

    fn events_channel(&self, id: Uuid) -> String {
        events_channel(&self.redis, id)
    }

    fn cancel_channel(&self) -> String {
        self.redis.key("cancel")
    }

    fn render_key(&self, fingerprint: &Fingerprint) -> String {
        self.redis.key(&format!("render:{fingerprint}"))
    }

    /// Writes `job`'s snapshot (unless a newer one is stored) and tells its watchers.
    pub(crate) async fn publish(&self, job: &Job) -> Result<(), SharedError> {
        self.publish_for(job, self.retention).await
    }

    /// [`SharedJobs::publish`] of a job not admitted yet, kept [`PENDING_RECORD_TTL`].
    pub(crate) async fn publish_pending(&self, job: &Job) -> Result<(), SharedError> {
        self.publish_for(job, PENDING_RECORD_TTL.min(self.retention))
            .await
    }

    /// [`SharedJobs::publish`] of the end of a job refused after it was shared, kept
    /// [`REFUSED_RECORD_TTL`].
    pub(crate) async fn publish_refused(&self, job: &Job) -> Result<(), SharedError> {
        self.publish_for(job, REFUSED_RECORD_TTL.min(self.retention))
            .await
    }

    async fn publish_for(&self, job: &Job, lifetime: Duration) -> Result<(), SharedError> {
        self.run_publishing(&self.publish_if_newer, job, job.version, lifetime)
            .await
            .map(drop)
    }

    /// Runs `script`, one of the publishing scripts ([`PUBLISH_IF_NEWER`],
    /// [`PUBLISH_IF_VERSION`]), on `job`'s record and channel with its snapshot, `version`,
    /// `lifetime` and owner; answers whether the snapshot was written.
    async fn run_publishing(
        &self,
        script: &Script,
        job: &Job,
        version: u64,
        lifetime: Duration,
    ) -> Result<bool, SharedError> {
        let json = serde_json::to_string(job).map_err(|e| SharedError::Damaged(e.to_string()))?;
        let key = self.job_key(job.id);
        let channel = self.events_channel(job.id);
        let owner = job.owner.map(|owner| owner.to_string()).unwrap_or_default();
        let index = self.tenant_index_key(&job.tenant);
        let written: i64 = self
            .redis
            .run_script(
                script
                    .key(&key)
                    .key(&channel)
                    .key(&index)
                    .arg(&json)
                    .arg(version)
                    .arg(millis(lifetime))
                    .arg(&owner)
                    .arg(index_member(ListPosition::of(job)))
                    .arg(MAX_INDEXED_JOBS_PER_TENANT)
                    .arg(millis(self.retention)),
            )
            .await?;
        Ok(written == 1)
    }

    /// Writes `job` (whose version is one above `expected`) only if the stored record is
    /// still at version `expected`; answers whether it was written.
    async fn publish_if_version(&self, job: &Job, expected: u64) -> Result<bool, SharedError> {
        self.run_publishing(&self.publish_if_version, job, expected, self.retention)
            .await
    }

    /// Makes job `id`, whose queue entry this instance just took, this instance's: its
    /// record names this instance as owner. A job left running by an instance that stopped
    /// goes back to QUEUED (progress and start forgotten) before this instance runs it.
    pub(crate) async fn take(&self, id: Uuid) -> Result<Taken, SharedError> {
        match self.reset_queued(id, Some(self.instance), |_| true).await? {
            Some(taken) => Ok(Taken::Job(Box::new(taken))),
            None => Ok(Taken::Ended),
        }
    }

    /// Gives job `id`, which this instance took but hands back to the shared queue (it is
    /// shutting down), back to nobody: its record goes back to QUEUED with no owner, so that a
    /// cancel meanwhile finds it waiting, and the next instance to take it makes it its own.
    /// Nothing changes when the record has ended or is no longer this instance's.
    pub(crate) async fn requeue(&self, id: Uuid) -> Result<(), SharedError> {
        let instance = self.instance;
        self.reset_queued(id, None, |stored| stored.owner == Some(instance))
            .await
            .map(drop)
    }

    /// Puts job `id`'s record back to QUEUED (progress, start, output and error forgotten)
    /// owned by `owner`, by compare-and-set on its version, if it has not ended and `may`
    /// accepts the stored record; the record written, or `None` when nothing was.
    async fn reset_queued(
        &self,
        id: Uuid,
        owner: Option<Uuid>,
        may: impl Fn(&Job) -> bool,
    ) -> Result<Option<Job>, SharedError> {
        for _ in 0..RECORD_CHANGE_ATTEMPTS {
            let Some(stored) = self.stored(id).await? else {
                return Ok(None);
            };
            if stored.state.is_terminal() || !may(&stored) {
                return Ok(None);
            }
            let mut queued = stored.clone();
            queued.state = JobState::Queued;
            queued.frames_done = 0;
            queued.started_at = None;
            queued.output = None;
            queued.error = None;
            queued.owner = owner;
            queued.reclaimable = true;
            queued.version = stored.version + 1;
            if self.publish_if_version(&queued, stored.version).await? {
                return Ok(Some(queued));
            }
        }
        Err(unavailable(
            "a queued job's record changed under every attempt",
        ))
    }

    /// Cancels `job`, a job waiting in the shared queue that no instance has taken, if its
    /// record has not changed since `job` was read; answers the cancelled snapshot, or
    /// `None` when it changed (taken meanwhile: ask its owner).
    pub(crate) async fn cancel_queued(&self, job: &Job) -> Result<Option<Job>, SharedError> {
        let mut cancelled = job.clone();
        cancelled.finish(JobState::Cancelled, None);
        cancelled.version = job.version + 1;
        if !self.publish_if_version(&cancelled, job.version).await? {
            return Ok(None);
        }
        // Its entry is acknowledged by whichever instance reads it next.
        self.clear_render(&job.fingerprint, job.id).await?;
        Ok(Some(cancelled))
    }

    /// The record as stored (no liveness check of its owner).
    pub(crate) async fn stored(&self, id: Uuid) -> Result<Option<Job>, SharedError> {
        let json = self.redis.get(&self.job_key(id)).await?;
        json.map(|json| {
            serde_json::from_str(&json).map_err(|error| SharedError::Damaged(error.to_string()))
        })
        .transpose()
    }

    /// The record, read as failed (INSTANCE_LOST, retryable) when the instance that owns a
    /// job outside the shared queue stopped before it ended.
    pub(crate) async fn get(&self, id: Uuid) -> Result<Option<Job>, SharedError> {
        let Some(job) = self.stored(id).await? else {
            return Ok(None);
        };
        Ok(Some(self.as_read(job, &mut HashMap::new()).await?))
    }

    /// A stored record as readers see it: failed (INSTANCE_LOST, retryable) when the instance
    /// that owns a job outside the shared queue stopped before it ended. `alive` keeps the
    /// owners asked about within one call (a listing asks once per instance, not per job).
    async fn as_read(
        &self,
        mut job: Job,
        alive: &mut HashMap<Uuid, bool>,
    ) -> Result<Job, SharedError> {
        // A job of the shared queue is reclaimed by another instance instead.
        if let Some(owner) = job
            .owner
            .filter(|_| !job.state.is_terminal() && !job.reclaimable)
        {
            let owner_alive = match alive.get(&owner) {
                Some(known) => *known,
                None => {
                    let asked = self.alive(owner).await?;
                    alive.insert(owner, asked);
                    asked
                }
            };
            if !owner_alive {
                // Its instance died mid-render: nobody will finish it.
                job.finish(
                    JobState::Failed,
                    Some(JobFailure {
                        reason: Reason::InstanceLost,
                        message: "the instance rendering this job stopped; submit it again".into(),
                        retryable: true,
                        retry_after: Some(Duration::from_secs(1)),
                    }),
                );
                job.version += 1;
            }
        }
        Ok(job)
    }

    /// The job's snapshot now and every later one, until the returned stream is dropped. A
    /// job without a record (an unknown or expired id) is answered `None` without
    /// subscribing to anything; subscriptions share the instance's one pub/sub connection.
    pub(crate) async fn watch(
        &self,
        id: Uuid,
    ) -> Result<(Option<Job>, impl futures_util::Stream<Item = Job> + use<>), SharedError> {
        if self.get(id).await?.is_none() {
            return Ok((None, job_changes(None)));
        }
        let subscription = self.redis.subscribe(&self.events_channel(id)).await?;
        // Subscribed first, read second: no change falls between the two.
        let current = self.get(id).await?;
        Ok((current, job_changes(Some(subscription))))
    }

    /// Asks the instance that owns `id` to cancel it.
    pub(crate) async fn request_cancel(&self, id: Uuid) -> Result<(), SharedError> {
        Ok(self
            .redis
            .publish(&self.cancel_channel(), &id.to_string())
            .await?)
    }

    /// Cancel requests of every instance, for the owner to act on (ids it does not own are
    /// for others). Subscribes again by itself after Redis went away.
    pub(crate) fn cancel_requests(&self) -> tokio::sync::mpsc::Receiver<Uuid> {
        let (sender, receiver) = tokio::sync::mpsc::channel(CANCEL_BUFFER);
        let redis = self.redis.clone();
        let channel = self.cancel_channel();
        tokio::spawn(async move {
            loop {
                match redis.subscribe(&channel).await {
                    Ok(mut subscription) => loop {
                        let text = tokio::select! {
                            // The server stopped listening: the subscription goes too.
                            _ = sender.closed() => return,
                            text = subscription.next() => text,
                        };
                        let Some(text) = text else {
                            break;
                        };
                        if let Ok(id) = Uuid::try_parse(&text) {
                            if sender.send(id).await.is_err() {
                                return;
                            }
                        }
                    },
                    Err(error) => {
                        tracing::warn!(%error, "cannot listen for cancel requests; retrying");
                    }
                }
                if sender.is_closed() {
                    return;
                }
                tokio::time::sleep(RESUBSCRIBE_DELAY).await;
            }
        });
        receiver
    }
}

/// An instance is taken for gone when its heartbeat is this old…
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(10);
/// …and it beats this often.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(3);
/// Cancel requests buffered for the owner.
const CANCEL_BUFFER: usize = 256;
/// Pause before listening again after Redis went away.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(500);
