//! The work queue every instance on one Redis shares (`--redis-url`), fair across tenants:
//! any instance with a free worker takes the farm's next job, wherever it was accepted, and
//! tenants with waiting jobs take turns as they do in the in-process queue
//! ([`crate::jobs::queue`]).
//!
//! Keys (under the Redis key prefix):
//! - `queue-waiting:{tenant}`: a list per tenant of the jobs waiting, oldest first; each item
//!   is the job's id and its [`SharedWork`] as JSON, on two lines.
//! - `queue-turns`: the tenants with waiting jobs, ordered by turn: a tenant that has not been
//!   served since it last held nothing goes first (by arrival), then the tenant served least
//!   recently. `queue-served` keeps each tenant's last turn, `queue-sequence` numbers arrivals
//!   and turns, `queue-length` counts the waiting jobs and `queue-wake` holds one token per
//!   waiting job for the readers blocked on it.
//! - `queue`: a Stream of the jobs being rendered, read by one consumer group
//!   ([`CONSUMER_GROUP`]), each instance a consumer named by its instance id. A job enters it
//!   when an instance takes it ([`TAKE`]), so its pending entry is the job's lease.
//! - `queue-tenants`: per tenant, the jobs it holds in the queue (waiting or being rendered):
//!   the per-tenant limit reads it.
//! - `queue-instances` and `queue-instance-workers`: the live instances (each announces
//!   itself with its worker count every few seconds) whose workers the retry delay of a full
//!   queue divides the waiting jobs by.
//!
//! A job is accepted by one script ([`ENQUEUE`]) that checks the capacity (jobs waiting) and
//! the tenant's share, adds the job to its tenant's list and writes the job's record
//! together: either both exist or neither. A free worker takes the job of the tenant whose
//! turn it is ([`TAKE`], into the stream and this instance's pending entries at once), keeps
//! a lease on it by resetting its idle time every third of the lease ([`RENEW`]), and
//! acknowledges and deletes it once the job's terminal record is written ([`ACK`]). An entry
//! idle for a whole lease belongs to an instance that stopped (or lost Redis for that long):
//! another instance reclaims it (XAUTOCLAIM) and renders the job again. An instance only
//! reclaims after it has itself reached Redis for a whole lease, so that after an outage every
//! live owner has had the time to renew its leases first. An instance shutting down hands its
//! entries back ([`HAND_BACK`]) to the front of their tenants' lists, so the next free worker
//! of the farm takes them at once.
//!
//! The scripts name the per-tenant list keys they build: fine for the single Redis server
//! this service is deployed with (Redis Cluster is not supported).

use super::records::{events_channel, job_key, SharedError};
use crate::auth::TenantId;
use crate::jobs::model::{Job, SharedWork};
use crate::jobs::queue::PushRefused;
use crate::redis_client::{millis, RedisClient};
use crate::sync::lock;
use deadpool_redis::redis::{self, Script, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

mod reply;
mod scripts;

use reply::{collect_entries, collect_entry_list, text};
use scripts::{ACK, ANNOUNCE, ENQUEUE, HAND_BACK, RENEW, TAKE};

/// The consumer group every instance reads the queue in.
pub(crate) const CONSUMER_GROUP: &str = "renderers";
/// How long one read waits for a new job before the reader looks for entries to reclaim (and
/// whether the server is shutting down): short enough that a dead instance's job waits at
/// most a second past its lease, long enough that an idle farm costs Redis one call a second
/// per free worker.
pub(crate) const READ_BLOCK: Duration = Duration::from_secs(1);
/// How often an instance announces itself (and its worker count) to the farm, and how long an
/// announcement lasts: three missed announcements and its workers no longer count.
pub(crate) const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);
const ANNOUNCEMENT_LIFETIME: Duration = Duration::from_secs(15);

/// Why a job was not added to the shared queue.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnqueueRefused {
    #[error("the shared queue refused the job")]
    Refused(PushRefused),
    #[error(transparent)]
    Shared(#[from] SharedError),
}

/// What the queue's capacity and the tenants' shares are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SharedQueueSettings {
    /// Entries waiting (not yet taken) across the farm.
    pub capacity: usize,
    /// Jobs one tenant may have in the queue (waiting or rendering) across the farm, plus
    /// its followers on the accepting instance.
    pub tenant_max_jobs: Option<usize>,
    /// See [`crate::jobs::settings::DEFAULT_JOB_LEASE_MS`].
    pub lease: Duration,
    /// How long job records are kept (the record written with an entry expires with it).
    pub retention: Duration,
}

/// An entry this instance took from the queue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delivery {
    pub entry: String,
    pub job: Uuid,
    pub tenant: TenantId,
    pub work: SharedWork,
    /// Taken over from an instance whose lease ran out.
    pub reclaimed: bool,
}

#[derive(Debug)]
pub(crate) struct SharedQueue {
    redis: Arc<RedisClient>,
    keys: QueueKeys,
    /// This instance's consumer name (its instance id).
    consumer: String,
    settings: SharedQueueSettings,
    /// The connection blocking reads wait on (a pooled one would be held for a second);
    /// one reader at a time, made again after an error.
    reader: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    /// Since when every call of the reader has reached Redis (none after an error).
    healthy_since: Mutex<Option<Instant>>,
    /// Where the next XAUTOCLAIM scan starts.
    reclaim_cursor: Mutex<String>,
    /// The workers of every live instance and the jobs waiting, as last seen (announcements,
    /// acceptances): the retry delay of a full queue divides one by the other.
    farm_workers: AtomicUsize,
    waiting: AtomicUsize,
    enqueue: Script,
    take: Script,
    renew: Script,
    ack: Script,
    hand_back: Script,
    announce: Script,
}

/// The queue's keys under the Redis key prefix (see the module's head), made once.
#[derive(Debug)]
struct QueueKeys {
    stream: String,
    tenants: String,
    length: String,
    turns: String,
    served: String,
    sequence: String,
    wake: String,
    /// The waiting list of a tenant is this prefix and the tenant's id.
    waiting_prefix: String,
    instances: String,
    instance_workers: String,
}

impl QueueKeys {
    fn new(redis: &RedisClient) -> QueueKeys {
        QueueKeys {
            stream: redis.key("queue"),
            tenants: redis.key("queue-tenants"),
            length: redis.key("queue-length"),
            turns: redis.key("queue-turns"),
            served: redis.key("queue-served"),
            sequence: redis.key("queue-sequence"),
            wake: redis.key("queue-wake"),
            waiting_prefix: redis.key("queue-waiting:"),
            instances: redis.key("queue-instances"),
            instance_workers: redis.key("queue-instance-workers"),
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> SharedError {
    SharedError::Unavailable(error.to_string())
}

/// The cursor XAUTOCLAIM starts a scan with.
const SCAN_START: &str = "0-0";

impl SharedQueue {
    pub(crate) fn new(
        redis: Arc<RedisClient>,
        instance: Uuid,
        settings: SharedQueueSettings,
    ) -> Self {
        SharedQueue {
            keys: QueueKeys::new(&redis),
            redis,
            consumer: instance.to_string(),
            settings,
            reader: tokio::sync::Mutex::new(None),
            healthy_since: Mutex::new(None),
            reclaim_cursor: Mutex::new(SCAN_START.into()),
            farm_workers: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            enqueue: Script::new(ENQUEUE),
            take: Script::new(TAKE),
            renew: Script::new(RENEW),
            ack: Script::new(ACK),
            hand_back: Script::new(HAND_BACK),
            announce: Script::new(ANNOUNCE),
        }
    }

    pub(crate) fn lease(&self) -> Duration {
        self.settings.lease
    }

    /// The workers of every live instance of the farm, as last announced (at least this
    /// instance's `own` workers).
    pub(crate) fn farm_workers(&self, own: usize) -> usize {
        self.farm_workers.load(Ordering::Relaxed).max(own)
    }

    /// The jobs waiting in the queue, as last seen.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The jobs waiting in the queue and those being rendered (taken, not yet acknowledged:
    /// the stream's entries), across the farm, read now (two O(1) reads in one round trip).
    pub(crate) async fn counts(&self) -> Result<(usize, usize), SharedError> {
        let (waiting, rendering): (Option<i64>, i64) = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::pipe()
                    .get(&self.keys.length)
                    .cmd("XLEN")
                    .arg(&self.keys.stream)
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        let count = |value: i64| usize::try_from(value).unwrap_or(0);
        Ok((count(waiting.unwrap_or(0)), count(rendering)))
    }

    /// The refusal [`SharedQueue::enqueue`] would answer now for a job of `tenant` holding
    /// `local_held` jobs on this instance outside the queue; reads only, so that a job
    /// refused here leaves nothing in Redis (the script checks again, atomically).
    pub(crate) async fn refusal(
        &self,
        tenant: &TenantId,
        local_held: usize,
    ) -> Result<Option<PushRefused>, SharedError> {
        let limit = self.settings.tenant_max_jobs.unwrap_or(0);
        let (held, waiting): (Option<i64>, Option<i64>) = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::pipe()
                    .hget(&self.keys.tenants, tenant.as_str())
                    .get(&self.keys.length)
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        let held = usize::try_from(held.unwrap_or(0))
            .unwrap_or(0)
            .saturating_add(local_held);
        if limit > 0 && held >= limit {
            return Ok(Some(PushRefused::TenantFull { held, limit }));
        }
        let waiting = usize::try_from(waiting.unwrap_or(0)).unwrap_or(0);
        if waiting >= self.settings.capacity.max(1) {
            return Ok(Some(PushRefused::Full { length: waiting }));
        }
        Ok(None)
    }

    /// Adds `record`'s job (its record written at once, as `record` says) with `work`;
    /// answers the jobs waiting in the queue, this one included. `local_held`: jobs its
    /// tenant holds on this instance outside the queue (followers).
    pub(crate) async fn enqueue(
        &self,
        record: &Job,
        work: &SharedWork,
        local_held: usize,
    ) -> Result<usize, EnqueueRefused> {
        let work = serde_json::to_string(work).map_err(|e| SharedError::Damaged(e.to_string()))?;
        let json =
            serde_json::to_string(record).map_err(|e| SharedError::Damaged(e.to_string()))?;
        let record_key = job_key(&self.redis, record.id);
        let channel = events_channel(&self.redis, record.id);
        let list = format!("{}{}", self.keys.waiting_prefix, record.tenant.as_str());
        let limit = self.settings.tenant_max_jobs.unwrap_or(0);
        let (answer, count): (String, i64) = self
            .redis
            .run_script(
                self.enqueue
                    .key(&self.keys.length)
                    .key(&self.keys.tenants)
                    .key(&record_key)
                    .key(&channel)
                    .key(&self.keys.turns)
                    .key(&self.keys.served)
                    .key(&self.keys.sequence)
                    .key(&self.keys.wake)
                    .key(&list)
                    .arg(self.settings.capacity.max(1))
                    .arg(record.tenant.as_str())
                    .arg(limit)
                    .arg(record.id.to_string())
                    .arg(&work)
                    .arg(&json)
                    .arg(millis(self.settings.retention))
                    .arg(local_held),
            )
            .await
            .map_err(SharedError::from)?;
        let count = usize::try_from(count).unwrap_or(0);
        if answer != "tenant" {
            self.waiting.store(count, Ordering::Relaxed);
        }
        match answer.as_str() {
            "queued" => Ok(count),
            "full" => Err(EnqueueRefused::Refused(PushRefused::Full { length: count })),
            "tenant" => Err(EnqueueRefused::Refused(PushRefused::TenantFull {
                held: count,
                limit,
            })),
            other => Err(SharedError::Damaged(format!("the queue answered {other:?}")).into()),
        }
    }

    /// The next job for a free worker: one whose owner's lease ran out (when this instance
    /// may reclaim), else a new one, waiting up to [`READ_BLOCK`]; `None` when none came.
    pub(crate) async fn next(&self) -> Result<Option<Delivery>, SharedError> {
        let mut reader = self.reader.lock().await;
        let answer = self.next_with(&mut reader).await;
        match &answer {
            Ok(_) => {
                let mut healthy = lock(&self.healthy_since);
                healthy.get_or_insert_with(Instant::now);
            }
            Err(_) => {
                *lock(&self.healthy_since) = None;
                // A broken connection is made anew next time.
                *reader = None;
            }
        }
        answer
    }

    async fn next_with(
        &self,
        reader: &mut Option<redis::aio::MultiplexedConnection>,
    ) -> Result<Option<Delivery>, SharedError> {
        if self.may_reclaim() {
            if let Some(delivery) = self.reclaim().await? {
                return Ok(Some(delivery));
            }
        }
        let connection = match reader {
            Some(connection) => connection,
            None => reader.insert(
                self.redis
                    .blocking_connection(READ_BLOCK)
                    .await
                    .map_err(SharedError::from)?,
            ),
        };
        if let Some(delivery) = self.take(false).await? {
            return Ok(Some(delivery));
        }
        // Nothing waits: wait for the next job's wake token (one per job queued), then take
        // the job whose turn it is (perhaps another one, or none when a reader elsewhere was
        // quicker).
        let token: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&self.keys.wake)
            .arg(READ_BLOCK.as_secs_f64())
            .query_async(connection)
            .await
            .map_err(unavailable)?;
        if token.is_none() {
            return Ok(None);
        }
        self.take(true).await
    }

    /// The job of the tenant whose turn it is, if any, now this instance's pending entry.
    /// `woken`: this reader took a wake token already (else the take removes one).
    async fn take(&self, woken: bool) -> Result<Option<Delivery>, SharedError> {
        let reply: Value = self
            .redis
            .run_script(
                self.take
                    .key(&self.keys.turns)
                    .key(&self.keys.served)
                    .key(&self.keys.sequence)
                    .key(&self.keys.length)
                    .key(&self.keys.wake)
                    .key(&self.keys.stream)
                    .key(&self.keys.tenants)
                    .arg(CONSUMER_GROUP)
                    .arg(&self.consumer)
                    .arg(&self.keys.waiting_prefix)
                    .arg(if woken { "1" } else { "0" }),
            )
            .await
            .map_err(SharedError::from)?;
        let mut entries = Vec::new();
        collect_entries(&reply, &mut entries);
        match entries.into_iter().next() {
            Some((entry, fields)) => self.delivery(entry, &fields, false).await,
            None => Ok(None),
        }
    }

    /// Notes how a call to Redis went: any failure restarts the wait before reclaiming.
    fn observe<T>(&self, result: Result<T, SharedError>) -> Result<T, SharedError> {
        if result.is_err() {
            *lock(&self.healthy_since) = None;
        }
        result
    }

    /// Whether this instance has reached Redis for a whole lease without an error (so every
    /// live owner had the time to renew its leases since the last outage).
    fn may_reclaim(&self) -> bool {
        lock(&self.healthy_since).is_some_and(|since| since.elapsed() >= self.settings.lease)
    }

    /// One entry whose lease ran out, now this instance's, if any.
    async fn reclaim(&self) -> Result<Option<Delivery>, SharedError> {
        let cursor = lock(&self.reclaim_cursor).clone();
        let reply: Value = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::cmd("XAUTOCLAIM")
                    .arg(&self.keys.stream)
                    .arg(CONSUMER_GROUP)
                    .arg(&self.consumer)
                    .arg(millis(self.settings.lease))
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut connection)
                    .await
                    .map_err(|error| {
                        if error.code() == Some("NOGROUP") {
                            // Nothing to reclaim in a queue that has no group yet.
                            SharedError::Damaged("no consumer group yet".into())
                        } else {
                            unavailable(error)
                        }
                    })
            })
            .await
            .or_else(|error| match error {
                SharedError::Damaged(_) => Ok(Value::Nil),
                error => Err(error),
            })?;
        let Value::Array(parts) = reply else {
            return Ok(None);
        };
        let next = parts
            .first()
            .and_then(text)
            .unwrap_or_else(|| SCAN_START.into());
        *lock(&self.reclaim_cursor) = next;
        let mut entries = Vec::new();
        if let Some(claimed) = parts.get(1) {
            collect_entry_list(claimed, &mut entries);
        }
        match entries.into_iter().next() {
            Some((entry, fields)) => self.delivery(entry, &fields, true).await,
            None => Ok(None),
        }
    }

    /// The delivery of entry `entry`; a damaged entry (not written by this version) is
    /// logged and acknowledged away, as nobody could render it.
    async fn delivery(
        &self,
        entry: String,
        fields: &[(String, String)],
        reclaimed: bool,
    ) -> Result<Option<Delivery>, SharedError> {
        let field = |name: &str| {
            fields
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        let job = field("job").and_then(|id| Uuid::try_parse(id).ok());
        let tenant = field("tenant").and_then(|tenant| TenantId::parse(tenant).ok());
        let work = field("work").and_then(|work| serde_json::from_str::<SharedWork>(work).ok());
        match (job, tenant, work) {
            (Some(job), Some(tenant), Some(work)) => Ok(Some(Delivery {
                entry,
                job,
                tenant,
                work,
                reclaimed,
            })),
            _ => {
                tracing::error!(entry, "a damaged entry in the shared queue; dropping it");
                self.ack_entry(&entry, field("tenant").unwrap_or_default())
                    .await?;
                Ok(None)
            }
        }
    }

    /// Keeps this instance's lease on `delivery`: true while it is still this instance's,
    /// false once another instance reclaimed it (or it was acknowledged).
    pub(crate) async fn renew(&self, delivery: &Delivery) -> Result<bool, SharedError> {
        let renewed: i64 = self.observe(
            self.redis
                .run_script(
                    self.renew
                        .key(&self.keys.stream)
                        .arg(CONSUMER_GROUP)
                        .arg(&delivery.entry)
                        .arg(&self.consumer),
                )
                .await
                .map_err(SharedError::from),
        )?;
        Ok(renewed == 1)
    }

    /// Acknowledges and deletes the entry of a job that has ended (or that nobody renders).
    pub(crate) async fn ack(&self, delivery: &Delivery) -> Result<(), SharedError> {
        self.ack_entry(&delivery.entry, delivery.tenant.as_str())
            .await
    }

    async fn ack_entry(&self, entry: &str, tenant: &str) -> Result<(), SharedError> {
        let acked = self
            .redis
            .run_script::<i64>(
                self.ack
                    .key(&self.keys.stream)
                    .key(&self.keys.tenants)
                    .key(&self.keys.served)
                    .arg(CONSUMER_GROUP)
                    .arg(entry)
                    .arg(tenant),
            )
            .await
            .map(drop)
            .map_err(SharedError::from);
        self.observe(acked)
    }

    /// Gives the entry of a job this instance took but will not render (it is shutting
    /// down) back to the front of its tenant's waiting list, so that the farm's next free
    /// worker takes it at once; false when it was no longer this instance's.
    pub(crate) async fn hand_back(&self, delivery: &Delivery) -> Result<bool, SharedError> {
        let work = serde_json::to_string(&delivery.work)
            .map_err(|e| SharedError::Damaged(e.to_string()))?;
        let list = format!("{}{}", self.keys.waiting_prefix, delivery.tenant.as_str());
        let handed: i64 = self.observe(
            self.redis
                .run_script(
                    self.hand_back
                        .key(&self.keys.stream)
                        .key(&self.keys.turns)
                        .key(&self.keys.served)
                        .key(&self.keys.length)
                        .key(&self.keys.wake)
                        .key(&list)
                        .arg(CONSUMER_GROUP)
                        .arg(&delivery.entry)
                        .arg(&self.consumer)
                        .arg(delivery.tenant.as_str())
                        .arg(delivery.job.to_string())
                        .arg(&work),
                )
                .await
                .map_err(SharedError::from),
        )?;
        Ok(handed == 1)
    }

    /// Announces this instance with its `workers` to the farm (0: it leaves) for
    /// [`ANNOUNCEMENT_LIFETIME`], and learns the workers of every live instance and the jobs
    /// waiting ([`SharedQueue::farm_workers`], [`SharedQueue::waiting`]).
    pub(crate) async fn announce(&self, workers: usize) -> Result<(), SharedError> {
        let (farm, waiting): (i64, i64) = self.observe(
            self.redis
                .run_script(
                    self.announce
                        .key(&self.keys.instances)
                        .key(&self.keys.instance_workers)
                        .key(&self.keys.length)
                        .arg(&self.consumer)
                        .arg(workers)
                        .arg(millis(ANNOUNCEMENT_LIFETIME)),
                )
                .await
                .map_err(SharedError::from),
        )?;
        self.farm_workers
            .store(usize::try_from(farm).unwrap_or(0), Ordering::Relaxed);
        self.waiting
            .store(usize::try_from(waiting).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Against the real Redis of the test machine (127.0.0.1:6379), each test under its own
    //! key prefix.

    use super::*;
    use crate::jobs::shared::{SharedJobs, Taken};
    use crate::jobs::test_support::{gif_fingerprint, gif_output, queued_job, test_redis};
    use crate::spec::Modifications;

    fn prefix() -> String {
        format!("lottie-render-test:shared-queue:{}:", Uuid::new_v4())
    }

    fn queue(prefix: &str, capacity: usize, lease: Duration) -> SharedQueue {
        queue_with_tenant_limit(prefix, capacity, lease, Some(2))
    }

    fn queue_with_tenant_limit(
        prefix: &str,
        capacity: usize,
        lease: Duration,
        tenant_max_jobs: Option<usize>,
    ) -> SharedQueue {
        SharedQueue::new(
            test_redis(prefix),
            Uuid::new_v4(),
            SharedQueueSettings {
                capacity,
                tenant_max_jobs,
                lease,
                retention: Duration::from_secs(60),
            },
        )
    }

    /// A queued record of `tenant` as it goes into the queue, and its work.
    fn job(tenant: &str) -> (Job, SharedWork) {
        let tenant = TenantId::parse(tenant).unwrap();
        let fingerprint = gif_fingerprint(&tenant, &Uuid::new_v4().to_string());
        let mut job = queued_job(tenant, fingerprint);
        job.reclaimable = true;
        let work = SharedWork {
            template_key: "templates/.jobs/t/template.json".into(),
            modifications: Modifications::default(),
            output: gif_output(),
            deadline: Duration::from_secs(30),
            fonts: Default::default(),
            traceparent: None,
            animation: None,
        };
        (job, work)
    }

    async fn enqueue(queue: &SharedQueue, job: &(Job, SharedWork)) -> Result<usize, PushRefused> {
        match queue.enqueue(&job.0, &job.1, 0).await {
            Ok(waiting) => Ok(waiting),
            Err(EnqueueRefused::Refused(refused)) => Err(refused),
            Err(EnqueueRefused::Shared(error)) => panic!("{error}"),
        }
    }

    #[tokio::test]
    async fn capacity_and_tenant_shares_count_the_whole_queue_and_an_acknowledgement_frees_them() {
        let prefix = prefix();
        let queue = queue(&prefix, 2, Duration::from_secs(30));
        let records = SharedJobs::new(test_redis(&prefix), Duration::from_secs(60));
        let (a1, a2, a3, b1) = (job("a"), job("a"), job("a"), job("b"));
        assert_eq!(enqueue(&queue, &a1).await, Ok(1));
        assert_eq!(enqueue(&queue, &a2).await, Ok(2));
        // The record is written with the entry.
        let stored = records.stored(a1.0.id).await.unwrap().unwrap();
        assert!(stored.reclaimable && stored.owner.is_none());
        let tenant_full = Err(PushRefused::TenantFull { held: 2, limit: 2 });
        assert_eq!(enqueue(&queue, &a3).await, tenant_full);
        assert_eq!(
            enqueue(&queue, &b1).await,
            Err(PushRefused::Full { length: 2 })
        );
        assert!(
            records.stored(b1.0.id).await.unwrap().is_none(),
            "refused: no record"
        );
        // Taken, a job leaves the waiting count but keeps its tenant's slot until acknowledged.
        let taken = queue.next().await.unwrap().unwrap();
        assert_eq!((taken.job, taken.reclaimed), (a1.0.id, false));
        assert_eq!(taken.work, a1.1);
        assert_eq!(enqueue(&queue, &b1).await, Ok(2));
        assert_eq!(enqueue(&queue, &a3).await, tenant_full);
        queue.ack(&taken).await.unwrap();
        // Acknowledged twice, counted once.
        queue.ack(&taken).await.unwrap();
        assert_eq!(
            enqueue(&queue, &a3).await,
            Err(PushRefused::Full { length: 2 })
        );
    }

    /// Drives Redis' clock for `delivery`'s entry: its idle time becomes `idle`, as if its
    /// owner had not renewed it for that long (XCLAIM to the same consumer, which keeps it
    /// that consumer's).
    async fn age_entry(owner: &SharedQueue, delivery: &Delivery, idle: Duration) {
        let mut connection = owner.redis.connection().await.unwrap();
        let _: Value = redis::cmd("XCLAIM")
            .arg(&owner.keys.stream)
            .arg(CONSUMER_GROUP)
            .arg(&owner.consumer)
            .arg(0)
            .arg(&delivery.entry)
            .arg("IDLE")
            .arg(millis(idle))
            .arg("JUSTID")
            .query_async(&mut connection)
            .await
            .unwrap();
    }

    /// Drives `reader`'s own clock: it has reached Redis without an error for `healthy`.
    fn healthy_for(reader: &SharedQueue, healthy: Duration) {
        let since = Instant::now().checked_sub(healthy).unwrap();
        *lock(&reader.healthy_since) = Some(since);
    }

    #[tokio::test]
    async fn an_entry_whose_lease_ran_out_is_reclaimed_and_its_first_owner_learns_it() {
        // A lease no step of the test comes near on a loaded machine; both clocks that decide
        // a reclaim (Redis' idle time of the entry, the reader's time since it first reached
        // Redis) are driven instead of waited for.
        let prefix = prefix();
        let lease = Duration::from_secs(30);
        let overdue = lease + Duration::from_secs(1);
        let (first, second) = (queue(&prefix, 8, lease), queue(&prefix, 8, lease));
        let job = job("a");
        enqueue(&first, &job).await.unwrap();
        let delivery = first.next().await.unwrap().unwrap();
        // The second instance reaches Redis (its own clock starts) ...
        assert_eq!(second.next().await.unwrap(), None);
        // ... and the entry is not renewed for a lease, but the second instance has not
        // reached Redis for a whole lease yet: it may not reclaim.
        age_entry(&first, &delivery, overdue).await;
        assert_eq!(second.next().await.unwrap(), None);
        healthy_for(&second, lease);
        // Renewed just now: not reclaimed.
        assert!(first.renew(&delivery).await.unwrap());
        assert_eq!(second.next().await.unwrap(), None);
        // Not renewed for a lease: reclaimed.
        age_entry(&first, &delivery, overdue).await;
        let reclaimed = second.next().await.unwrap().unwrap();
        assert_eq!((reclaimed.job, reclaimed.reclaimed), (job.0.id, true));
        assert!(
            !first.renew(&delivery).await.unwrap(),
            "the first owner lost it"
        );
        assert!(second.renew(&reclaimed).await.unwrap());
        second.ack(&reclaimed).await.unwrap();
        assert!(
            !second.renew(&reclaimed).await.unwrap(),
            "acknowledged: nobody's"
        );
    }

    #[tokio::test]
    async fn instances_enqueuing_at_the_same_time_never_overshoot_the_capacity_together() {
        // README ("Capacity and shares"): the capacity is checked in the enqueue script, so
        // instances cannot overshoot it together. Three instances, thirty jobs at once from
        // five tenants (no tenant share), a capacity of eight.
        let prefix = prefix();
        let capacity = 8;
        let lease = Duration::from_secs(30);
        let farm: Vec<SharedQueue> = (0..3)
            .map(|_| queue_with_tenant_limit(&prefix, capacity, lease, None))
            .collect();
        let jobs: Vec<_> = (0..30)
            .map(|index| job(&format!("t{}", index % 5)))
            .collect();
        let answers = futures_util::future::join_all(
            jobs.iter()
                .enumerate()
                .map(|(index, job)| enqueue(&farm[index % farm.len()], job)),
        )
        .await;
        let accepted = answers.iter().filter(|answer| answer.is_ok()).count();
        assert_eq!(accepted, capacity, "{answers:?}");
        for answer in &answers {
            if let Err(refused) = answer {
                assert_eq!(*refused, PushRefused::Full { length: capacity });
            }
        }
        // Exactly the accepted ones wait: every instance together takes eight, then none.
        let mut taken = 0;
        while let Some(delivery) = farm[taken % farm.len()].next().await.unwrap() {
            farm[0].ack(&delivery).await.unwrap();
            taken += 1;
            assert!(taken <= capacity, "more taken than accepted");
        }
        assert_eq!(taken, capacity);
    }

    #[tokio::test]
    async fn tenants_take_turns_across_instances_and_a_newcomer_goes_before_the_served() {
        let prefix = prefix();
        let lease = Duration::from_secs(30);
        let (first, second) = (
            queue_with_tenant_limit(&prefix, 16, lease, None),
            queue_with_tenant_limit(&prefix, 16, lease, None),
        );
        let a: Vec<_> = (0..4).map(|_| job("a")).collect();
        let b: Vec<_> = (0..2).map(|_| job("b")).collect();
        // Tenant a's backlog arrives first, through one instance; b's through the other.
        for job in &a {
            enqueue(&first, job).await.unwrap();
        }
        for job in &b {
            enqueue(&second, job).await.unwrap();
        }
        // Taken alternately by the two instances: the tenants alternate, each in its order.
        let mut taken = Vec::new();
        for index in 0..3 {
            let reader = if index % 2 == 0 { &first } else { &second };
            taken.push(reader.next().await.unwrap().unwrap().job);
        }
        assert_eq!(taken, [a[0].0.id, b[0].0.id, a[1].0.id]);
        // Tenant c arrives now: it has not been served, so it goes before both.
        let c = job("c");
        enqueue(&first, &c).await.unwrap();
        for _ in 0..4 {
            taken.push(second.next().await.unwrap().unwrap().job);
        }
        assert_eq!(
            taken,
            [a[0].0.id, b[0].0.id, a[1].0.id, c.0.id, b[1].0.id, a[2].0.id, a[3].0.id]
        );
        assert_eq!(first.next().await.unwrap(), None, "nothing waits");
    }

    #[tokio::test]
    async fn a_job_handed_back_is_the_next_taken_by_any_instance_and_only_its_owner_hands_it_back()
    {
        let prefix = prefix();
        let lease = Duration::from_secs(30);
        let (first, second) = (
            queue_with_tenant_limit(&prefix, 16, lease, None),
            queue_with_tenant_limit(&prefix, 16, lease, None),
        );
        let records = SharedJobs::new(test_redis(&prefix), Duration::from_secs(60));
        let (one, two, newcomer) = (job("a"), job("a"), job("b"));
        enqueue(&first, &one).await.unwrap();
        enqueue(&first, &two).await.unwrap();
        let taken = first.next().await.unwrap().unwrap();
        assert_eq!(taken.job, one.0.id);
        // Its instance made the record its own, then stops: the record goes back to nobody.
        let Taken::Job(owned) = records.take(one.0.id).await.unwrap() else {
            panic!("not taken")
        };
        let stranger = SharedJobs::new(test_redis(&prefix), Duration::from_secs(60));
        stranger.requeue(one.0.id).await.unwrap();
        assert_eq!(
            records.stored(one.0.id).await.unwrap().unwrap().version,
            owned.version,
            "another instance's requeue changes nothing"
        );
        records.requeue(one.0.id).await.unwrap();
        let requeued = records.stored(one.0.id).await.unwrap().unwrap();
        assert_eq!(
            (requeued.state, requeued.owner, requeued.version),
            (crate::jobs::JobState::Queued, None, owned.version + 1)
        );
        // A tenant never served arrives meanwhile: it would go first.
        enqueue(&first, &newcomer).await.unwrap();
        assert!(
            !second.hand_back(&taken).await.unwrap(),
            "not the second's to give back"
        );
        assert!(first.hand_back(&taken).await.unwrap());
        assert!(!first.hand_back(&taken).await.unwrap(), "given back once");
        // First again, before the newcomer, for whichever instance reads next, as a new take.
        let again = second.next().await.unwrap().unwrap();
        assert_eq!(
            (again.job, again.work.clone(), again.reclaimed),
            (one.0.id, one.1.clone(), false)
        );
        assert!(second.renew(&again).await.unwrap());
        assert_eq!(second.next().await.unwrap().unwrap().job, newcomer.0.id);
        assert_eq!(second.next().await.unwrap().unwrap().job, two.0.id);
        // Its tenant still holds both jobs (share and count unchanged by the hand-back).
        let third = job("a");
        let limited = queue_with_tenant_limit(&prefix, 16, lease, Some(2));
        assert_eq!(
            enqueue(&limited, &third).await,
            Err(PushRefused::TenantFull { held: 2, limit: 2 })
        );
    }

    #[tokio::test]
    async fn the_farms_workers_are_those_of_the_live_instances() {
        let prefix = prefix();
        let lease = Duration::from_secs(30);
        let (first, second) = (queue(&prefix, 4, lease), queue(&prefix, 4, lease));
        first.announce(3).await.unwrap();
        second.announce(4).await.unwrap();
        assert_eq!(second.farm_workers(4), 7);
        // Never fewer than this instance's own (an announcement not made yet).
        assert_eq!(queue(&prefix, 4, lease).farm_workers(2), 2);
        enqueue(&first, &job("a")).await.unwrap();
        first.announce(0).await.unwrap();
        assert_eq!((first.farm_workers(0), first.waiting()), (4, 1));
    }
}
