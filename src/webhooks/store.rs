//! Where deliveries are kept so that none is lost by a restart, and found by whichever
//! instance is free to send them:
//! - [`directory`]: the data directory (the embedded default, one instance), one JSON file
//!   per delivery and an index of the due ones in memory, rebuilt from the files at start;
//! - [`redis`]: Redis (a farm), beside the job records, one due index per tenant; an instance
//!   *claims* a due delivery by moving its time a lease ahead in one script, so no other
//!   instance sends it meanwhile, and it is due again if the claiming instance stops.
//!
//! A delivery's record is created once per `webhook-id` (an event announced twice is kept
//! once) and kept after it ended, for as long as jobs are kept, so GetRenderJob can show
//! how it went. Deliveries waiting are bounded per tenant (`--webhook-max-pending-per-tenant`)
//! and per instance ([`MAX_PENDING_DELIVERIES`]), so that one tenant's flood of events cannot
//! take the room of another's. An event past a bound is not kept to be sent, but a small
//! record of it is ([`State::NotKept`]: its job shows it, REFUSED with no attempt), in the
//! same step as the check, so that it is never silently dropped.
//!
//! Due deliveries are counted and claimed by tenant ([`Deliveries::due`],
//! [`Deliveries::claim`]): the sender decides how many of each tenant's it takes
//! ([`super::turns`]), the store does not choose for it by time across tenants.

pub mod directory;
pub mod redis;

pub use self::redis::RedisDeliveries;
pub use directory::DirectoryDeliveries;

use super::delivery::{Delivery, State};
use crate::redis_client::RedisError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Deliveries waiting at once on an instance (or a farm): each is a record of a few KiB (the
/// job's JSON); a hundred thousand is ten tenants at their own bound, and a few hundred MiB.
/// One more is not kept (shown on its job, logged and counted).
pub const MAX_PENDING_DELIVERIES: usize = 100_000;
/// How long a claimed delivery is another instance's: longer than a connect and an answer
/// (10 s each) with room to write the outcome.
pub const CLAIM_LEASE: Duration = Duration::from_secs(60);

/// The bounds of the deliveries waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCaps {
    /// Of one tenant (`--webhook-max-pending-per-tenant`).
    pub per_tenant: usize,
    /// Of the instance, or of the farm on Redis ([`MAX_PENDING_DELIVERIES`]).
    pub instance: usize,
}

impl PendingCaps {
    /// `per_tenant` for each tenant, [`MAX_PENDING_DELIVERIES`] in all.
    pub fn per_tenant(per_tenant: usize) -> PendingCaps {
        PendingCaps {
            per_tenant,
            instance: MAX_PENDING_DELIVERIES,
        }
    }
}

/// A delivery with what it sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub delivery: Delivery,
    /// The tenant whose secrets sign it, and whose share of the sender it takes.
    pub tenant: String,
    pub url: String,
    /// The event's body, sent the same on every attempt.
    pub body: String,
}

impl Stored {
    /// The record kept instead of a delivery that could not be kept: its id, tenant and URL,
    /// ended, without a body.
    fn not_kept(&self) -> Stored {
        Stored {
            delivery: Delivery {
                state: State::NotKept,
                ..self.delivery.clone()
            },
            tenant: self.tenant.clone(),
            url: self.url.clone(),
            body: String::new(),
        }
    }
}

/// The bound a new delivery would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Its tenant's deliveries waiting (`--webhook-max-pending-per-tenant`).
    Tenant,
    /// The instance's ([`MAX_PENDING_DELIVERIES`]).
    Instance,
}

/// What became of a new delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Kept, due.
    New,
    /// One with its id was kept before (the event announced again).
    Before,
    /// Past a bound: only its [`State::NotKept`] record is kept.
    NotKept(Full),
}

/// Why a delivery cannot be kept or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
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
    /// Keeps a new delivery, or its [`State::NotKept`] record when a bound is reached.
    pub async fn create(&self, stored: &Stored) -> Result<Kept, StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let (directory, stored) = (directory.clone(), stored.clone());
                off_runtime(move || directory.create(&stored)).await
            }
            Deliveries::Redis(redis) => redis.create(stored).await,
        }
    }

    /// The tenants with deliveries due at `now`, and how many each (at most `cap`).
    pub async fn due(
        &self,
        now: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, usize)>, StoreError> {
        match self {
            Deliveries::Directory(directory) => Ok(directory.due(now, cap)),
            Deliveries::Redis(redis) => redis.due(now, cap).await,
        }
    }

    /// Of each `(tenant, count)` of `claims`, at most `count` of the tenant's deliveries due at
    /// `now` (its earliest first), each now claimed by the caller until it
    /// [`Deliveries::put`]s it back.
    pub async fn claim(
        &self,
        claims: &[(String, usize)],
        now: SystemTime,
    ) -> Result<Vec<Stored>, StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let (directory, claims) = (directory.clone(), claims.to_vec());
                off_runtime(move || directory.claim(&claims, now)).await
            }
            Deliveries::Redis(redis) => redis.claim(claims, now).await,
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

    /// The earliest time a pending delivery is due at (none: nothing pending): the dispatcher
    /// is behind by `now` minus it when that is in the past.
    pub async fn earliest_due(&self) -> Result<Option<SystemTime>, StoreError> {
        match self {
            Deliveries::Directory(directory) => Ok(directory.earliest_due()),
            Deliveries::Redis(redis) => redis.earliest_due().await,
        }
    }

    /// Removes the records of deliveries that ended more than `kept` ago (the Redis records
    /// expire on their own; there it takes over the due index of an earlier version).
    pub async fn sweep(&self, kept: Duration) -> Result<(), StoreError> {
        match self {
            Deliveries::Directory(directory) => {
                let directory = directory.clone();
                off_runtime(move || directory.sweep(kept)).await
            }
            Deliveries::Redis(redis) => redis.adopt_single_index().await,
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

#[cfg(test)]
pub(crate) mod tests {
    //! One contract, run against the data directory and against the test machine's Redis
    //! (127.0.0.1:6379, a key prefix of each test's own).

    use super::*;
    use crate::webhooks::retry::Outcome;

    pub(crate) fn stored(id: &str, at: SystemTime) -> Stored {
        stored_of("acme", id, at)
    }

    fn stored_of(tenant: &str, id: &str, at: SystemTime) -> Stored {
        Stored {
            delivery: Delivery::new(id.into(), at),
            tenant: tenant.into(),
            url: "https://example.com/hook".into(),
            body: "{}".into(),
        }
    }

    fn directory_store(dir: &std::path::Path, caps: PendingCaps) -> Deliveries {
        Deliveries::Directory(Arc::new(DirectoryDeliveries::open(dir, caps).unwrap()))
    }

    fn redis_store(prefix: &str, caps: PendingCaps) -> Deliveries {
        let settings = crate::redis_client::RedisSettings {
            url: "redis://127.0.0.1:6379/0".into(),
            key_prefix: prefix.into(),
            pool_size: 2,
            timeout: Duration::from_secs(2),
        };
        let client = Arc::new(crate::redis_client::RedisClient::open(&settings).unwrap());
        Deliveries::Redis(Arc::new(RedisDeliveries::new(
            client,
            Duration::from_secs(600),
            caps,
        )))
    }

    fn prefix() -> String {
        format!("lottie-render-test:webhooks:{}:", uuid::Uuid::new_v4())
    }

    fn start() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    fn ids(claimed: &[Stored]) -> Vec<&str> {
        claimed.iter().map(|s| s.delivery.id.as_str()).collect()
    }

    /// Deliveries are claimed by tenant, the earliest first, once; they keep their end.
    async fn claims_by_tenant_the_earliest_first_once(store: &Deliveries) {
        let start = start();
        let later = start + Duration::from_secs(3600);
        assert_eq!(store.earliest_due().await.unwrap(), None, "nothing pending");
        for (tenant, id, at) in [
            ("acme", "msg_b", start + Duration::from_secs(5)),
            ("acme", "msg_a", start),
            ("acme", "msg_later", later),
            ("globex", "msg_g", start + Duration::from_secs(7)),
        ] {
            assert_eq!(
                store.create(&stored_of(tenant, id, at)).await.unwrap(),
                Kept::New
            );
        }
        assert_eq!(
            store.create(&stored("msg_a", start)).await.unwrap(),
            Kept::Before,
            "an event announced twice is kept once"
        );
        assert_eq!(store.pending().await.unwrap(), 4);
        // What the lag gauge reads: the earliest due, of any tenant.
        assert_eq!(store.earliest_due().await.unwrap(), Some(start));
        let now = start + Duration::from_secs(10);
        let mut due = store.due(now, 10).await.unwrap();
        due.sort();
        assert_eq!(due, [("acme".to_owned(), 2), ("globex".to_owned(), 1)]);
        assert_eq!(
            store.due(now, 1).await.unwrap().iter().map(|d| d.1).max(),
            Some(1)
        );
        let claimed = store.claim(&[("acme".into(), 1)], now).await.unwrap();
        assert_eq!(ids(&claimed), ["msg_a"]);
        assert_eq!(
            store.earliest_due().await.unwrap(),
            Some(start + Duration::from_secs(5)),
            "a delivery being sent is not behind"
        );
        let claimed_too = store
            .claim(&[("acme".into(), 5), ("globex".into(), 5)], now)
            .await
            .unwrap();
        assert_eq!(ids(&claimed_too), ["msg_b", "msg_g"]);
        assert!(
            store
                .claim(&[("acme".into(), 5)], now)
                .await
                .unwrap()
                .is_empty(),
            "claimed ones are not claimed again"
        );
        assert_eq!(store.pending().await.unwrap(), 4, "claimed ones still wait");
        // Delivered: ended, still readable; retried: due at its new time.
        let mut delivered = claimed[0].clone();
        delivered.delivery = delivered.delivery.after(
            Outcome::Answered {
                status: 200,
                retry_after: None,
            },
            start,
            0.5,
            Duration::from_secs(86_400),
        );
        store.put(&delivered).await.unwrap();
        let mut retried = claimed_too[0].clone();
        retried.delivery =
            retried
                .delivery
                .after(Outcome::NoAnswer, now, 1.0, Duration::from_secs(86_400));
        store.put(&retried).await.unwrap();
        assert_eq!(store.pending().await.unwrap(), 3);
        let ended = store.get(vec!["msg_a".into()]).await.unwrap();
        assert_eq!(ended[0].delivery.state, State::Delivered);
        let again = store
            .claim(&[("acme".into(), 10)], start + Duration::from_secs(15))
            .await
            .unwrap();
        assert_eq!(ids(&again), ["msg_b"]);
        assert_eq!(again[0].delivery.attempts, 1);
    }

    /// A tenant's bound keeps its own events out, not another's; what is not kept shows.
    async fn a_tenant_at_its_bound_keeps_a_record_of_what_it_could_not_keep(store: &Deliveries) {
        let start = start();
        for index in 0..3 {
            let id = format!("msg_flood_{index}");
            assert_eq!(
                store.create(&stored_of("flood", &id, start)).await.unwrap(),
                Kept::New
            );
        }
        assert_eq!(
            store
                .create(&stored_of("flood", "msg_flood_3", start))
                .await
                .unwrap(),
            Kept::NotKept(Full::Tenant)
        );
        assert_eq!(
            store
                .create(&stored_of("flood", "msg_flood_3", start))
                .await
                .unwrap(),
            Kept::Before,
            "not kept is final: announced again, it is not kept either"
        );
        let shown = store.get(vec!["msg_flood_3".into()]).await.unwrap();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].delivery.state, State::NotKept);
        assert_eq!(shown[0].delivery.attempts, 0);
        assert!(shown[0].body.is_empty());
        // Another tenant still has its room, until the instance's bound.
        assert_eq!(
            store
                .create(&stored_of("victim", "msg_v", start))
                .await
                .unwrap(),
            Kept::New
        );
        assert_eq!(
            store
                .create(&stored_of("third", "msg_t", start))
                .await
                .unwrap(),
            Kept::New
        );
        assert_eq!(
            store
                .create(&stored_of("fourth", "msg_f", start))
                .await
                .unwrap(),
            Kept::NotKept(Full::Instance)
        );
        assert_eq!(
            store.get(vec!["msg_f".into()]).await.unwrap()[0]
                .delivery
                .state,
            State::NotKept
        );
        assert_eq!(store.pending().await.unwrap(), 5);
        let mut due = store.due(start, 10).await.unwrap();
        due.sort();
        assert_eq!(
            due,
            [
                ("flood".to_owned(), 3),
                ("third".to_owned(), 1),
                ("victim".to_owned(), 1)
            ]
        );
        // An ended delivery frees its tenant's room.
        let mut claimed = store.claim(&[("flood".into(), 1)], start).await.unwrap();
        let mut ended = claimed.remove(0);
        ended.delivery =
            ended
                .delivery
                .after(Outcome::Refused, start, 0.5, Duration::from_secs(60));
        store.put(&ended).await.unwrap();
        assert_eq!(
            store
                .create(&stored_of("flood", "msg_flood_4", start))
                .await
                .unwrap(),
            Kept::New
        );
    }

    /// Three a tenant, five in all.
    const SMALL: PendingCaps = PendingCaps {
        per_tenant: 3,
        instance: 5,
    };

    #[tokio::test]
    async fn directory_store_claims_by_tenant_the_earliest_first_once() {
        let dir = tempfile::tempdir().unwrap();
        claims_by_tenant_the_earliest_first_once(&directory_store(
            dir.path(),
            PendingCaps::per_tenant(10),
        ))
        .await;
        // A new store on the same directory (a restart) finds the deliveries, by tenant.
        let reopened = directory_store(dir.path(), PendingCaps::per_tenant(10));
        assert_eq!(reopened.pending().await.unwrap(), 3);
        let due = reopened
            .due(start() + Duration::from_secs(86_400), 10)
            .await
            .unwrap();
        assert_eq!(due.iter().map(|d| d.1).sum::<usize>(), 3);
        // A damaged file is skipped at start, not fatal.
        std::fs::write(dir.path().join("webhooks/broken.json"), b"{").unwrap();
        assert_eq!(
            directory_store(dir.path(), PendingCaps::per_tenant(10))
                .pending()
                .await
                .unwrap(),
            3
        );
    }

    #[tokio::test]
    async fn redis_store_claims_by_tenant_the_earliest_first_once() {
        claims_by_tenant_the_earliest_first_once(&redis_store(
            &prefix(),
            PendingCaps::per_tenant(10),
        ))
        .await;
    }

    #[tokio::test]
    async fn redis_store_takes_over_the_single_due_index_of_an_earlier_version() {
        use deadpool_redis::redis;
        let prefix = prefix();
        let store = redis_store(&prefix, PendingCaps::per_tenant(10));
        let Deliveries::Redis(redis_store) = &store else {
            unreachable!()
        };
        // What an earlier version left: a record, and its id in `webhooks:due`.
        let waiting = stored_of("globex", "msg_old", start());
        let mut connection = redis_store.client().connection().await.unwrap();
        redis::pipe()
            .set(
                format!("{prefix}webhooks:d:msg_old"),
                serde_json::to_string(&waiting).unwrap(),
            )
            .zadd(format!("{prefix}webhooks:due"), "msg_old", 1_000_000_000u64)
            .query_async::<()>(&mut connection)
            .await
            .unwrap();
        assert!(store.due(start(), 10).await.unwrap().is_empty());
        store.sweep(Duration::from_secs(60)).await.unwrap();
        assert_eq!(
            store.due(start(), 10).await.unwrap(),
            [("globex".to_owned(), 1)]
        );
        let claimed = store.claim(&[("globex".into(), 1)], start()).await.unwrap();
        assert_eq!(claimed, [waiting]);
        let left: bool = redis::cmd("EXISTS")
            .arg(format!("{prefix}webhooks:due"))
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(!left);
    }

    #[tokio::test]
    async fn directory_store_keeps_a_record_of_what_a_tenant_at_its_bound_could_not_keep() {
        let dir = tempfile::tempdir().unwrap();
        a_tenant_at_its_bound_keeps_a_record_of_what_it_could_not_keep(&directory_store(
            dir.path(),
            SMALL,
        ))
        .await;
    }

    #[tokio::test]
    async fn redis_store_keeps_a_record_of_what_a_tenant_at_its_bound_could_not_keep() {
        a_tenant_at_its_bound_keeps_a_record_of_what_it_could_not_keep(&redis_store(
            &prefix(),
            SMALL,
        ))
        .await;
    }
}
