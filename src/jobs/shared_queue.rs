//! The work queue every instance on one Redis shares (`--redis-url`): a Redis Stream read by
//! one consumer group, so that any instance with a free worker takes the next job, wherever
//! it was accepted.
//!
//! - `{prefix}queue` is the stream; each entry names a job (`job`), its tenant (`tenant`) and
//!   what to render (`work`, [`SharedWork`] as JSON). Its consumer group is
//!   [`CONSUMER_GROUP`]; each instance reads as a consumer named by its instance id.
//! - `{prefix}queue-tenants` counts, per tenant, the entries in the stream (waiting or being
//!   rendered): the per-tenant limit reads it.
//!
//! A job is accepted by one script ([`ENQUEUE`]) that checks the capacity (entries not yet
//! delivered) and the tenant's share, adds the entry and writes the job's record together:
//! either both exist or neither. A worker takes an entry (XREADGROUP), keeps a lease on it by
//! resetting its idle time every third of the lease ([`RENEW`]), and acknowledges and deletes
//! it once the job's terminal record is written ([`ACK`]). An entry idle for a whole lease
//! belongs to an instance that stopped (or lost Redis for that long): another instance
//! reclaims it (XAUTOCLAIM) and renders the job again. An instance only reclaims after it has
//! itself reached Redis for a whole lease, so that after an outage every live owner has had
//! the time to renew its leases first.

use super::model::{Job, SharedWork};
use super::queue::PushRefused;
use super::shared::SharedError;
use crate::auth::TenantId;
use crate::redis_client::{millis, RedisClient};
use deadpool_redis::redis::{self, Script, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The consumer group every instance reads the queue in.
pub const CONSUMER_GROUP: &str = "renderers";
/// How long one read waits for a new entry before the reader looks for entries to reclaim
/// (and whether the server is shutting down): short enough that a dead instance's job waits
/// at most a second past its lease, long enough that an idle farm costs Redis one call a
/// second per free worker.
pub const READ_BLOCK: Duration = Duration::from_secs(1);
/// Adds a job to the queue if the queue and the tenant's share have room, and writes its
/// record, atomically.
/// KEYS: stream, tenant counts, job record, job events channel.
/// ARGV: group, capacity, tenant, tenant limit (0: none), job id, work JSON, record JSON,
/// record expiry (ms), jobs the tenant holds on this instance outside the queue (followers).
/// Answers {'queued', waiting}, {'full', waiting} or {'tenant', held}.
const ENQUEUE: &str = r"
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])[1]
local waiting = redis.call('XLEN', KEYS[1]) - pending
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0') + tonumber(ARGV[9])
local limit = tonumber(ARGV[4])
if limit > 0 and held >= limit then
  return {'tenant', held}
end
if waiting >= tonumber(ARGV[2]) then
  return {'full', waiting}
end
redis.call('XADD', KEYS[1], '*', 'job', ARGV[5], 'tenant', ARGV[3], 'work', ARGV[6])
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
redis.call('PUBLISH', KEYS[4], ARGV[7])
return {'queued', waiting + 1}";

/// Resets the idle time of entry ARGV[2] if consumer ARGV[3] still holds it (answers 1),
/// else answers 0: it was reclaimed by another instance, or acknowledged.
/// KEYS: stream. ARGV: group, entry id, consumer.
const RENEW: &str = r"
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 or pending[1][2] ~= ARGV[3] then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1";

/// Acknowledges and deletes entry ARGV[2]; the first deletion gives the tenant's count back.
/// KEYS: stream, tenant counts. ARGV: group, entry id, tenant.
const ACK: &str = r"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 1 then
  if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) <= 0 then
    redis.call('HDEL', KEYS[2], ARGV[3])
  end
end
return 1";

/// Why a job was not added to the shared queue.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueRefused {
    #[error("the shared queue refused the job")]
    Refused(PushRefused),
    #[error(transparent)]
    Shared(#[from] SharedError),
}

/// What the queue's capacity and the tenants' shares are.
#[derive(Debug, Clone, Copy)]
pub struct SharedQueueSettings {
    /// Entries waiting (not yet taken) across the farm.
    pub capacity: usize,
    /// Jobs one tenant may have in the queue (waiting or rendering) across the farm, plus
    /// its followers on the accepting instance.
    pub tenant_max_jobs: Option<usize>,
    /// See [`crate::config::DEFAULT_JOB_LEASE_MS`].
    pub lease: Duration,
    /// How long job records are kept (the record written with an entry expires with it).
    pub retention: Duration,
}

/// An entry this instance took from the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub entry: String,
    pub job: Uuid,
    pub tenant: TenantId,
    pub work: SharedWork,
    /// Taken over from an instance whose lease ran out.
    pub reclaimed: bool,
}

pub struct SharedQueue {
    redis: Arc<RedisClient>,
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
    enqueue: Script,
    renew: Script,
    ack: Script,
}

impl std::fmt::Debug for SharedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedQueue")
            .field("consumer", &self.consumer)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn unavailable(error: impl std::fmt::Display) -> SharedError {
    SharedError::Unavailable(error.to_string())
}

/// The cursor XAUTOCLAIM starts a scan with.
const SCAN_START: &str = "0-0";

impl SharedQueue {
    pub fn new(redis: Arc<RedisClient>, instance: Uuid, settings: SharedQueueSettings) -> Self {
        SharedQueue {
            redis,
            consumer: instance.to_string(),
            settings,
            reader: tokio::sync::Mutex::new(None),
            healthy_since: Mutex::new(None),
            reclaim_cursor: Mutex::new(SCAN_START.into()),
            enqueue: Script::new(ENQUEUE),
            renew: Script::new(RENEW),
            ack: Script::new(ACK),
        }
    }

    pub fn lease(&self) -> Duration {
        self.settings.lease
    }

    fn stream_key(&self) -> String {
        self.redis.key("queue")
    }

    fn tenants_key(&self) -> String {
        self.redis.key("queue-tenants")
    }

    /// Adds `record`'s job (its record written at once, as `record` says) with `work`;
    /// answers the jobs waiting in the queue, this one included. `local_held`: jobs its
    /// tenant holds on this instance outside the queue (followers).
    pub async fn enqueue(
        &self,
        record: &Job,
        work: &SharedWork,
        local_held: usize,
    ) -> Result<usize, EnqueueRefused> {
        let work = serde_json::to_string(work).map_err(|e| SharedError::Damaged(e.to_string()))?;
        let json =
            serde_json::to_string(record).map_err(|e| SharedError::Damaged(e.to_string()))?;
        let (stream, tenants) = (self.stream_key(), self.tenants_key());
        let record_key = self.redis.key(&format!("job:{}", record.id));
        let channel = self.redis.key(&format!("job-events:{}", record.id));
        let limit = self.settings.tenant_max_jobs.unwrap_or(0);
        let (answer, count): (String, i64) = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                self.enqueue
                    .key(&stream)
                    .key(&tenants)
                    .key(&record_key)
                    .key(&channel)
                    .arg(CONSUMER_GROUP)
                    .arg(self.settings.capacity)
                    .arg(record.tenant.as_str())
                    .arg(limit)
                    .arg(record.id.to_string())
                    .arg(&work)
                    .arg(&json)
                    .arg(millis(self.settings.retention))
                    .arg(local_held)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await?;
        let count = usize::try_from(count).unwrap_or(0);
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
    pub async fn next(&self) -> Result<Option<Delivery>, SharedError> {
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
        let read = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(CONSUMER_GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(millis(READ_BLOCK))
            .arg("STREAMS")
            .arg(self.stream_key())
            .arg(">")
            .query_async::<Value>(connection)
            .await;
        let reply = match read {
            Ok(reply) => reply,
            Err(error) if error.code() == Some("NOGROUP") => {
                // A new (or emptied and restarted) Redis: the group is made, the next read
                // finds it.
                self.create_group().await?;
                return Ok(None);
            }
            Err(error) => return Err(unavailable(error)),
        };
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
        let stream = self.stream_key();
        let reply: Value = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::cmd("XAUTOCLAIM")
                    .arg(&stream)
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

    async fn create_group(&self) -> Result<(), SharedError> {
        let stream = self.stream_key();
        self.redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                let created = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(&stream)
                    .arg(CONSUMER_GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async::<()>(&mut connection)
                    .await;
                match created {
                    Err(error) if error.code() != Some("BUSYGROUP") => Err(unavailable(error)),
                    _ => Ok(()),
                }
            })
            .await
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
    pub async fn renew(&self, delivery: &Delivery) -> Result<bool, SharedError> {
        let stream = self.stream_key();
        let renewed: i64 = self.observe(
            self.redis
                .within_deadline(async {
                    let mut connection = self.redis.connection().await?;
                    self.renew
                        .key(&stream)
                        .arg(CONSUMER_GROUP)
                        .arg(&delivery.entry)
                        .arg(&self.consumer)
                        .invoke_async(&mut connection)
                        .await
                        .map_err(unavailable)
                })
                .await,
        )?;
        Ok(renewed == 1)
    }

    /// Acknowledges and deletes the entry of a job that has ended (or that nobody renders).
    pub async fn ack(&self, delivery: &Delivery) -> Result<(), SharedError> {
        self.ack_entry(&delivery.entry, delivery.tenant.as_str())
            .await
    }

    async fn ack_entry(&self, entry: &str, tenant: &str) -> Result<(), SharedError> {
        let (stream, tenants) = (self.stream_key(), self.tenants_key());
        let acked = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                self.ack
                    .key(&stream)
                    .key(&tenants)
                    .arg(CONSUMER_GROUP)
                    .arg(entry)
                    .arg(tenant)
                    .invoke_async::<i64>(&mut connection)
                    .await
                    .map(|_| ())
                    .map_err(unavailable)
            })
            .await;
        self.observe(acked)
    }

    /// Gives an entry taken while shutting down back at once: its idle time is set to the
    /// lease, so the next instance that looks reclaims it.
    pub async fn hand_back(&self, delivery: &Delivery) -> Result<(), SharedError> {
        let stream = self.stream_key();
        self.redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::cmd("XCLAIM")
                    .arg(&stream)
                    .arg(CONSUMER_GROUP)
                    .arg(&self.consumer)
                    .arg(0)
                    .arg(&delivery.entry)
                    .arg("IDLE")
                    .arg(millis(self.settings.lease))
                    .arg("JUSTID")
                    .query_async::<Value>(&mut connection)
                    .await
                    .map(|_| ())
                    .map_err(unavailable)
            })
            .await
    }
}

/// The queue's bookkeeping stays consistent whatever panicked while a lock was held (each
/// change is one assignment), so a poisoned lock is used as it is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A string reply's text.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// The entries of an XREADGROUP reply (`[[stream, [entry…]]…]`, or a map of stream to
/// entries in RESP3).
fn collect_entries(reply: &Value, entries: &mut Vec<(String, Vec<(String, String)>)>) {
    match reply {
        Value::Array(streams) => {
            for stream in streams {
                if let Value::Array(parts) = stream {
                    if let Some(list) = parts.get(1) {
                        collect_entry_list(list, entries);
                    }
                }
            }
        }
        Value::Map(streams) => {
            for (_, list) in streams {
                collect_entry_list(list, entries);
            }
        }
        _ => {}
    }
}

/// Entries `[[id, [field, value…]]…]`; an entry deleted meanwhile (no fields) is skipped.
fn collect_entry_list(list: &Value, entries: &mut Vec<(String, Vec<(String, String)>)>) {
    let Value::Array(list) = list else {
        return;
    };
    for entry in list {
        let Value::Array(parts) = entry else {
            continue;
        };
        let (Some(id), Some(Value::Array(values))) = (parts.first().and_then(text), parts.get(1))
        else {
            continue;
        };
        let fields = values
            .chunks(2)
            .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
            .collect();
        entries.push((id, fields));
    }
}

#[cfg(test)]
mod tests {
    //! Against the real Redis of the test machine (127.0.0.1:6379), each test under its own
    //! key prefix.

    use super::*;
    use crate::jobs::shared::SharedJobs;
    use crate::jobs::Fingerprint;
    use crate::redis_client::RedisSettings;
    use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};

    fn redis(prefix: &str) -> Arc<RedisClient> {
        let settings = RedisSettings {
            url: "redis://127.0.0.1:6379/0".into(),
            key_prefix: prefix.into(),
            pool_size: 2,
            timeout: Duration::from_secs(2),
        };
        Arc::new(RedisClient::open(&settings).unwrap())
    }

    fn prefix() -> String {
        format!("lottie-render-test:shared-queue:{}:", Uuid::new_v4())
    }

    fn queue(prefix: &str, capacity: usize, lease: Duration) -> SharedQueue {
        SharedQueue::new(
            redis(prefix),
            Uuid::new_v4(),
            SharedQueueSettings {
                capacity,
                tenant_max_jobs: Some(2),
                lease,
                retention: Duration::from_secs(60),
            },
        )
    }

    fn output() -> OutputSpec {
        OutputSpec {
            format: Format::Gif,
            fps: Fps::DEFAULT,
            width: Dimension::try_from(100).unwrap(),
            height: Dimension::try_from(100).unwrap(),
            background: None,
        }
    }

    /// A queued record of `tenant` as it goes into the queue, and its work.
    fn job(tenant: &str) -> (Job, SharedWork) {
        let tenant = TenantId::parse(tenant).unwrap();
        let fingerprint = Fingerprint::of(
            &tenant,
            &Uuid::new_v4().to_string(),
            &Modifications::default(),
            &output(),
        );
        let mut job = Job::queued(
            Uuid::new_v4(),
            tenant,
            Uuid::new_v4(),
            fingerprint,
            Format::Gif,
            10,
        );
        job.reclaimable = true;
        let work = SharedWork {
            template_key: "templates/.jobs/t/template.json".into(),
            modifications: Modifications::default(),
            output: output(),
            deadline: Duration::from_secs(30),
            fonts: Default::default(),
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
        let records = SharedJobs::new(redis(&prefix), Duration::from_secs(60));
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

    #[tokio::test]
    async fn an_entry_whose_lease_ran_out_is_reclaimed_and_its_first_owner_learns_it() {
        let prefix = prefix();
        let lease = Duration::from_millis(300);
        let (first, second) = (queue(&prefix, 8, lease), queue(&prefix, 8, lease));
        let job = job("a");
        enqueue(&first, &job).await.unwrap();
        let delivery = first.next().await.unwrap().unwrap();
        // The second instance reaches Redis for a whole lease before it may reclaim.
        assert_eq!(second.next().await.unwrap(), None);
        tokio::time::sleep(lease).await;
        // Renewed just now: not reclaimed.
        assert!(first.renew(&delivery).await.unwrap());
        assert_eq!(second.next().await.unwrap(), None);
        // Not renewed for a lease: reclaimed.
        tokio::time::sleep(lease).await;
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
}
