//! Where deliveries are kept so that none is lost by a restart, and found by whichever
//! instance is free to send them:
//! - the data directory (the embedded default, one instance): one JSON file per delivery,
//!   `webhooks/<webhook-id>.json`, written to a temporary file and renamed over the old one
//!   (a crash leaves the last whole state); an index of the due ones in memory, rebuilt from
//!   the files at start;
//! - Redis (a farm), beside the job records: `webhooks:d:<id>` holds the delivery,
//!   `webhooks:due` orders the due ones by time. An instance *claims* a due delivery by
//!   moving its time a lease ahead in one script: no other instance sends it meanwhile, and
//!   if the claiming instance stops, the delivery is due again when the lease ends.
//!
//! A delivery's record is created once per `webhook-id` (an event announced twice is kept
//! once) and kept after it ended, for as long as jobs are kept, so GetRenderJob can show
//! how it went.

use super::delivery::{Delivery, State};
use crate::redis_client::{millis, RedisClient, RedisError};
use deadpool_redis::redis::{self, Script};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Deliveries waiting at once: each is a record of a few KiB (the job's JSON); a hundred
/// thousand is a day of a busy instance's events with every receiver down, and a few hundred
/// MiB. One more is refused (the event is logged and counted, the job is unaffected).
pub const MAX_PENDING_DELIVERIES: usize = 100_000;
/// How long a claimed delivery is another instance's: longer than a connect and an answer
/// (10 s each) with room to write the outcome.
pub const CLAIM_LEASE: Duration = Duration::from_secs(60);

/// A delivery with what it sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub delivery: Delivery,
    /// The tenant whose secrets sign it.
    pub tenant: String,
    pub url: String,
    /// The event's body, sent the same on every attempt.
    pub body: String,
}

/// Why a delivery cannot be kept or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{MAX_PENDING_DELIVERIES} deliveries are waiting already")]
    Full,
    #[error("cannot keep a webhook delivery: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot keep a webhook delivery: {0}")]
    Redis(#[from] RedisError),
    #[error("a stored webhook delivery does not read: {0}")]
    Damaged(#[from] serde_json::Error),
}

/// The deliveries of this instance or of the farm.
#[derive(Debug, Clone)]
pub enum Deliveries {
    Directory(Arc<DirectoryDeliveries>),
    Redis(Arc<RedisDeliveries>),
}

impl Deliveries {
    /// Keeps a new delivery; false when one with its id exists already (announced before).
    pub async fn create(&self, stored: &Stored) -> Result<bool, StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let (directory, stored) = (directory.clone(), stored.clone());
                off_runtime(move || directory.create(&stored)).await
            }
            Deliveries::Redis(redis) => redis.create(stored).await,
        }
    }

    /// Deliveries due at `now` (the earliest first, at most `limit`), each now claimed by
    /// the caller until it [`Deliveries::put`]s it back.
    pub async fn claim_due(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> Result<Vec<Stored>, StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let directory = directory.clone();
                off_runtime(move || directory.claim_due(now, limit)).await
            }
            Deliveries::Redis(redis) => redis.claim_due(now, limit).await,
        }
    }

    /// Keeps a claimed delivery after an attempt (or put back untried): due again at its
    /// time, or ended.
    pub async fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let (directory, stored) = (directory.clone(), stored.clone());
                off_runtime(move || directory.put(&stored)).await
            }
            Deliveries::Redis(redis) => redis.put(stored).await,
        }
    }

    /// The deliveries of `ids` that exist.
    pub async fn get(&self, ids: Vec<String>) -> Result<Vec<Stored>, StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let directory = directory.clone();
                off_runtime(move || {
                    let mut found = Vec::new();
                    for id in ids {
                        found.extend(directory.read(&id)?);
                    }
                    Ok(found)
                })
                .await
            }
            Deliveries::Redis(redis) => redis.get(&ids).await,
        }
    }

    /// Deliveries not yet ended.
    pub async fn pending(&self) -> Result<usize, StoreError> {
        match self {
            Deliveries::Directory(directory) => Ok(directory.pending()),
            Deliveries::Redis(redis) => redis.pending().await,
        }
    }

    /// Removes the records of deliveries that ended more than `kept` ago (the Redis records
    /// expire on their own).
    pub async fn sweep(&self, kept: Duration) -> Result<(), StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let directory = directory.clone();
                off_runtime(move || directory.sweep(kept)).await
            }
            Deliveries::Redis(_) => Ok(()),
        }
    }
}

/// File work off the async runtime (STYLE.md: nothing that blocks runs on it).
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| StoreError::Io(std::io::Error::other(error)))?
}

/// The deliveries of this instance's data directory.
#[derive(Debug)]
pub struct DirectoryDeliveries {
    dir: PathBuf,
    index: Mutex<DueIndex>,
}

/// The due deliveries by time, and the ones claimed (being sent).
#[derive(Debug, Default)]
struct DueIndex {
    due: BTreeSet<(SystemTime, String)>,
    claimed: HashSet<String>,
}

impl DirectoryDeliveries {
    /// The deliveries under `data_dir` (the folder is made when missing), their index rebuilt
    /// from the files. A file that does not read (a damaged one) is skipped and logged.
    pub fn open(data_dir: &Path) -> std::io::Result<DirectoryDeliveries> {
        let dir = data_dir.join("webhooks");
        std::fs::create_dir_all(&dir)?;
        let mut index = DueIndex::default();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|extension| extension != "json") {
                continue;
            }
            match read_file(&path) {
                Ok(Some(stored)) => {
                    if let State::Due(at) = stored.delivery.state {
                        index.due.insert((at, stored.delivery.id));
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping an unreadable webhook delivery")
                }
            }
        }
        Ok(DirectoryDeliveries {
            dir,
            index: Mutex::new(index),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        // Ids are ours (`msg_`, a UUID, an event name): no separator can reach the path.
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        self.dir.join(format!("{safe}.json"))
    }

    fn write(&self, stored: &Stored) -> Result<(), StoreError> {
        let path = self.path(&stored.delivery.id);
        let partial = path.with_extension("partial");
        std::fs::write(&partial, serde_json::to_vec(stored)?)?;
        std::fs::rename(partial, path)?;
        Ok(())
    }

    fn create(&self, stored: &Stored) -> Result<bool, StoreError> {
        let id = &stored.delivery.id;
        if self.path(id).exists() {
            return Ok(false);
        }
        if self.pending() >= MAX_PENDING_DELIVERIES {
            return Err(StoreError::Full);
        }
        self.write(stored)?;
        if let State::Due(at) = stored.delivery.state {
            crate::sync::lock(&self.index).due.insert((at, id.clone()));
        }
        Ok(true)
    }

    fn claim_due(&self, now: SystemTime, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let ids: Vec<String> = {
            let mut index = crate::sync::lock(&self.index);
            let ids: Vec<(SystemTime, String)> = index
                .due
                .iter()
                .take_while(|(at, _)| *at <= now)
                .take(limit)
                .cloned()
                .collect();
            for entry in &ids {
                index.due.remove(entry);
                index.claimed.insert(entry.1.clone());
            }
            ids.into_iter().map(|(_, id)| id).collect()
        };
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            match self.read(&id) {
                Ok(Some(stored)) => claimed.push(stored),
                Ok(None) => {
                    crate::sync::lock(&self.index).claimed.remove(&id);
                }
                Err(error) => {
                    crate::sync::lock(&self.index).claimed.remove(&id);
                    tracing::warn!(webhook_id = %id, %error, "dropping an unreadable webhook delivery");
                }
            }
        }
        Ok(claimed)
    }

    fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        self.write(stored)?;
        let mut index = crate::sync::lock(&self.index);
        index.claimed.remove(&stored.delivery.id);
        if let State::Due(at) = stored.delivery.state {
            index.due.insert((at, stored.delivery.id.clone()));
        }
        Ok(())
    }

    fn read(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        read_file(&self.path(id))
    }

    fn pending(&self) -> usize {
        let index = crate::sync::lock(&self.index);
        index.due.len() + index.claimed.len()
    }

    fn sweep(&self, kept: Duration) -> Result<(), StoreError> {
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let old = entry
                .metadata()
                .and_then(|metadata| metadata.modified())
                .is_ok_and(|modified| now.duration_since(modified).unwrap_or_default() > kept);
            if !old {
                continue;
            }
            let ended = match read_file(&entry.path()) {
                Ok(Some(stored)) => !matches!(stored.delivery.state, State::Due(_)),
                // Damaged and old: nobody will read it.
                Ok(None) | Err(_) => true,
            };
            if ended {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<Option<Stored>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Creates a delivery once: KEYS record, due; ARGV json, due time (ms), ttl (ms), id, cap.
/// Answers 1 created, 0 exists, -1 full.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
return 1
";

/// Claims due deliveries: KEYS due; ARGV now (ms), limit, lease end (ms), record prefix.
/// Answers the records (a missing one, expired, leaves the index).
const CLAIM: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local found = {}
for _, id in ipairs(ids) do
  local record = redis.call('GET', ARGV[4] .. id)
  if record then
    redis.call('ZADD', KEYS[1], ARGV[3], id)
    table.insert(found, record)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return found
";

/// Keeps a delivery: KEYS record, due; ARGV json, ttl (ms), id, due time (ms) or '' (ended).
const PUT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
end
return 1
";

/// The deliveries of every instance on one Redis.
#[derive(Debug)]
pub struct RedisDeliveries {
    redis: Arc<RedisClient>,
    due: String,
    record_prefix: String,
    /// How long a record is kept: its retry window and, after it, as long as jobs are.
    ttl: Duration,
    create: Script,
    claim: Script,
    put: Script,
}

fn unix_millis(time: SystemTime) -> u64 {
    millis(
        time.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

impl RedisDeliveries {
    pub fn new(redis: Arc<RedisClient>, ttl: Duration) -> RedisDeliveries {
        RedisDeliveries {
            due: redis.key("webhooks:due"),
            record_prefix: redis.key("webhooks:d:"),
            redis,
            ttl,
            create: Script::new(CREATE),
            claim: Script::new(CLAIM),
            put: Script::new(PUT),
        }
    }

    fn record_key(&self, id: &str) -> String {
        format!("{}{id}", self.record_prefix)
    }

    async fn create(&self, stored: &Stored) -> Result<bool, StoreError> {
        let at = match stored.delivery.state {
            State::Due(at) => at,
            _ => SystemTime::now(),
        };
        let answer: i64 = self
            .redis
            .run_script(
                self.create
                    .key(self.record_key(&stored.delivery.id))
                    .key(&self.due)
                    .arg(serde_json::to_string(stored)?)
                    .arg(unix_millis(at))
                    .arg(millis(self.ttl))
                    .arg(&stored.delivery.id)
                    .arg(MAX_PENDING_DELIVERIES),
            )
            .await?;
        match answer {
            -1 => Err(StoreError::Full),
            created => Ok(created == 1),
        }
    }

    async fn claim_due(&self, now: SystemTime, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let records: Vec<String> = self
            .redis
            .run_script(
                self.claim
                    .key(&self.due)
                    .arg(unix_millis(now))
                    .arg(limit)
                    .arg(unix_millis(now + CLAIM_LEASE))
                    .arg(&self.record_prefix),
            )
            .await?;
        Ok(records
            .iter()
            .filter_map(|record| match serde_json::from_str(record) {
                Ok(stored) => Some(stored),
                Err(error) => {
                    tracing::warn!(%error, "skipping an unreadable webhook delivery");
                    None
                }
            })
            .collect())
    }

    async fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        let due = match stored.delivery.state {
            State::Due(at) => unix_millis(at).to_string(),
            _ => String::new(),
        };
        let _: i64 = self
            .redis
            .run_script(
                self.put
                    .key(self.record_key(&stored.delivery.id))
                    .key(&self.due)
                    .arg(serde_json::to_string(stored)?)
                    .arg(millis(self.ttl))
                    .arg(&stored.delivery.id)
                    .arg(due),
            )
            .await?;
        Ok(())
    }

    async fn get(&self, ids: &[String]) -> Result<Vec<Stored>, StoreError> {
        let mut found = Vec::new();
        for id in ids {
            if let Some(record) = self.redis.get(&self.record_key(id)).await? {
                found.push(serde_json::from_str(&record)?);
            }
        }
        Ok(found)
    }

    async fn pending(&self) -> Result<usize, StoreError> {
        let due = self.due.clone();
        let count: usize = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::cmd("ZCARD")
                    .arg(&due)
                    .query_async(&mut connection)
                    .await
                    .map_err(crate::redis_client::unavailable)
            })
            .await?;
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::retry::Outcome;

    fn stored(id: &str, at: SystemTime) -> Stored {
        Stored {
            delivery: Delivery::new(id.into(), at),
            tenant: "acme".into(),
            url: "https://example.com/hook".into(),
            body: "{}".into(),
        }
    }

    #[tokio::test]
    async fn deliveries_outlive_the_store_are_claimed_once_and_keep_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let store = Deliveries::Directory(Arc::new(DirectoryDeliveries::open(dir.path()).unwrap()));
        let later = start + Duration::from_secs(3600);
        for (id, at) in [
            ("msg_b", start + Duration::from_secs(5)),
            ("msg_a", start),
            ("msg_later", later),
        ] {
            assert!(store.create(&stored(id, at)).await.unwrap());
        }
        assert!(
            !store.create(&stored("msg_a", start)).await.unwrap(),
            "an event announced twice is kept once"
        );
        // A new store on the same directory (a restart) finds them, the earliest first.
        let reopened =
            Deliveries::Directory(Arc::new(DirectoryDeliveries::open(dir.path()).unwrap()));
        assert_eq!(reopened.pending().await.unwrap(), 3);
        let due = reopened
            .claim_due(start + Duration::from_secs(10), 10)
            .await
            .unwrap();
        let ids: Vec<&str> = due.iter().map(|s| s.delivery.id.as_str()).collect();
        assert_eq!(ids, ["msg_a", "msg_b"]);
        assert!(
            reopened
                .claim_due(start + Duration::from_secs(10), 10)
                .await
                .unwrap()
                .is_empty(),
            "claimed ones are not claimed again"
        );
        // Delivered: ended, still readable; retried: due at its new time.
        let mut delivered = due[0].clone();
        delivered.delivery = delivered.delivery.after(
            Outcome::Answered {
                status: 200,
                retry_after: None,
            },
            start,
            0.5,
            Duration::from_secs(86_400),
        );
        reopened.put(&delivered).await.unwrap();
        let mut retried = due[1].clone();
        retried.delivery = retried.delivery.after(
            Outcome::NoAnswer,
            start + Duration::from_secs(10),
            1.0,
            Duration::from_secs(86_400),
        );
        reopened.put(&retried).await.unwrap();
        assert_eq!(reopened.pending().await.unwrap(), 2);
        let ended = reopened.get(vec!["msg_a".into()]).await.unwrap();
        assert_eq!(ended[0].delivery.state, State::Delivered);
        let due = reopened
            .claim_due(start + Duration::from_secs(15), 10)
            .await
            .unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].delivery.attempts, 1);
        // A damaged file is skipped at start, not fatal.
        std::fs::write(dir.path().join("webhooks/broken.json"), b"{").unwrap();
        let again = DirectoryDeliveries::open(dir.path()).unwrap();
        assert_eq!(again.pending(), 2);
    }
}
