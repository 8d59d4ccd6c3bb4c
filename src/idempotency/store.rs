//! Where idempotency keys are recorded: the interface every store implements, the record it
//! keeps per key, and the in-memory store (the embedded default). The Redis store is in
//! [`super::redis_store`]; both pass the same contract (`tests/service/farm/idempotency/store_contract.rs`).
//!
//! A key's life: [`IdempotencyStore::claim`] records it atomically as in progress with the
//! request fingerprint and a lease (so a caller that died between recording and creating the
//! job frees the key when the lease runs out); [`IdempotencyStore::bind`] then ties it to the
//! job for the retention period; [`IdempotencyStore::replace`] re-claims a key whose job was
//! released (failed transiently, cancelled, or gone), compare-and-set, so two retries cannot
//! both win; [`IdempotencyStore::release`] drops a claim whose job was never created.
//!
//! Every claim carries a token of its own ([`Claimant`]): only the call holding the current
//! claim may bind or release the key. A call whose lease ran out while it was still creating,
//! and whose key another call with the same request claimed since, holds the same fingerprint
//! but not the same token, so it can no longer tie the key to its own resource (nor free the
//! other call's claim).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// What a store keeps per key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeyRecord {
    /// Recorded; the job is being created (under a lease) by the call holding `claim`.
    InProgress {
        fingerprint: String,
        /// The claimant's token (nil in a record written before tokens: nobody holds it,
        /// so it only ends with its lease).
        #[serde(default)]
        claim: Uuid,
    },
    /// The key answered with this job (SubmitRender) or template (CreateTemplate).
    Bound { fingerprint: String, id: Uuid },
}

impl KeyRecord {
    pub(crate) fn fingerprint(&self) -> &str {
        match self {
            KeyRecord::InProgress { fingerprint, .. } | KeyRecord::Bound { fingerprint, .. } => {
                fingerprint
            }
        }
    }

    /// The stored form (compared byte for byte by compare-and-set).
    pub(crate) fn encode(&self) -> String {
        // A two-variant enum of strings and a UUID always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub(crate) fn decode(text: &str) -> Result<KeyRecord, StoreError> {
        serde_json::from_str(text).map_err(|error| StoreError::Damaged(error.to_string()))
    }
}

/// One call's claim of a key: its request's fingerprint and a token no other call has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    pub fingerprint: String,
    pub token: Uuid,
}

impl Claimant {
    /// A new claimant for a request with `fingerprint`.
    pub fn new(fingerprint: &str) -> Claimant {
        Claimant {
            fingerprint: fingerprint.to_owned(),
            token: Uuid::new_v4(),
        }
    }

    /// The record of a key while this claimant holds it.
    pub fn record(&self) -> KeyRecord {
        KeyRecord::InProgress {
            fingerprint: self.fingerprint.clone(),
            claim: self.token,
        }
    }

    /// The record of a key this claimant bound to `id`.
    pub fn bound(&self, id: Uuid) -> KeyRecord {
        KeyRecord::Bound {
            fingerprint: self.fingerprint.clone(),
            id,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free: it is now recorded as in progress for the caller.
    Claimed,
    /// The key is recorded already.
    Existing(KeyRecord),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the idempotency store is unreachable: {0}")]
    Unavailable(String),
    #[error("the idempotency store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("an idempotency record is damaged: {0}")]
    Damaged(String),
    /// The memory store holds its most keys and every one is being used by a call right now.
    #[error("the idempotency store holds {0} keys, all in use by calls in progress")]
    Full(usize),
}

/// What a store call answers.
pub(crate) type Stored<T> = Result<T, StoreError>;

#[tonic::async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Records `key` as in progress for `claimant` with a `lease`, unless it is recorded.
    async fn claim(&self, key: &str, claimant: &Claimant, lease: Duration) -> Stored<Claim>;

    /// Ties a key `claimant` holds to `id` for `ttl`; false when the claim was lost
    /// meanwhile (its lease ran out and another caller took the key, even one with the
    /// same request).
    async fn bind(&self, key: &str, claimant: &Claimant, id: Uuid, ttl: Duration) -> Stored<bool>;

    /// Compare-and-set: when the key still holds `expected`, claims it (in progress, lease)
    /// for `claimant`; false when something else changed it first.
    async fn replace(
        &self,
        key: &str,
        expected: &KeyRecord,
        claimant: &Claimant,
        lease: Duration,
    ) -> Stored<bool>;

    /// Drops the claim `claimant` holds (its job was never created); a claim it no longer
    /// holds is left alone.
    async fn release(&self, key: &str, claimant: &Claimant) -> Stored<()>;
}

/// Claims between two sweeps of expired entries in the memory store.
const MEMORY_SWEEP_EVERY: u64 = 1024;
/// Keys the memory store holds at most. A caller sending a fresh key with every call would
/// otherwise grow it for the whole retention (a day). Twice the jobs an instance keeps
/// (`--max-retained-jobs`), so that every kept job's key answers, with CreateTemplate's keys
/// beside them; at ~400 bytes a key (up to 255 bytes of key, its scope, a fingerprint, the
/// map's slot and its place in the order) under 80 MiB. When full, the oldest key that no
/// call is using goes first: an expired one, else the oldest bound to what it created (a retry
/// with it then creates anew, or replays nothing: it is the oldest of 200,000).
pub const MAX_MEMORY_KEYS: usize = 200_000;

/// Keys in this process's memory: correct under concurrency (every operation is one critical
/// section), forgotten on restart, at most [`MAX_MEMORY_KEYS`].
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<MemoryState>,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::with_capacity(MAX_MEMORY_KEYS)
    }
}

#[derive(Debug)]
struct Entry {
    record: KeyRecord,
    expires: Instant,
    /// Its place in the order of writes.
    written: u64,
}

#[derive(Debug, Default)]
struct MemoryState {
    records: HashMap<Arc<str>, Entry>,
    /// Keys by their last write, oldest first: the order keys go in when the store is full.
    order: BTreeMap<u64, Arc<str>>,
    writes: u64,
    claims: u64,
    capacity: usize,
}

impl MemoryStore {
    /// A store of at most `capacity` keys.
    pub(crate) fn with_capacity(capacity: usize) -> MemoryStore {
        MemoryStore {
            state: Mutex::new(MemoryState {
                capacity: capacity.max(1),
                ..MemoryState::default()
            }),
        }
    }

    /// Keys held now (expired ones not swept yet included).
    pub fn len(&self) -> usize {
        self.with_state(|state, _| state.records.len())
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn with_state<T>(&self, work: impl FnOnce(&mut MemoryState, Instant) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        work(&mut state, now)
    }
}

impl MemoryState {
    /// The live record of `key` (an expired one is removed).
    fn live(&mut self, key: &str, now: Instant) -> Option<&KeyRecord> {
        if self
            .records
            .get(key)
            .is_some_and(|stored| stored.expires <= now)
        {
            self.remove(key);
        }
        self.records.get(key).map(|stored| &stored.record)
    }

    fn remove(&mut self, key: &str) {
        if let Some(stored) = self.records.remove(key) {
            self.order.remove(&stored.written);
        }
    }

    /// Writes `record` for `key` until `expires`, as its newest write.
    fn put(&mut self, key: &str, record: KeyRecord, expires: Instant) {
        let key: Arc<str> = match self.records.get_key_value(key) {
            Some((key, stored)) => {
                let key = key.clone();
                self.order.remove(&stored.written);
                key
            }
            None => Arc::from(key),
        };
        let written = self.writes;
        self.writes += 1;
        self.order.insert(written, key.clone());
        self.records.insert(
            key,
            Entry {
                record,
                expires,
                written,
            },
        );
    }

    fn sweep(&mut self, now: Instant) {
        let expired: Vec<Arc<str>> = self
            .records
            .iter()
            .filter(|(_, stored)| stored.expires <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
    }

    /// Room for one more key: the oldest key no call is using goes (expired, or bound to
    /// what it created); `false` when every key is in progress.
    fn make_room(&mut self, now: Instant) -> bool {
        while self.records.len() >= self.capacity {
            // Keys in progress are few (one per call being handled) and skipped.
            let oldest_idle = self.order.values().find(|key| {
                self.records.get(&***key).is_some_and(|stored| {
                    stored.expires <= now || matches!(stored.record, KeyRecord::Bound { .. })
                })
            });
            match oldest_idle.cloned() {
                Some(key) => self.remove(&key),
                None => return false,
            }
        }
        true
    }
}

#[tonic::async_trait]
impl IdempotencyStore for MemoryStore {
    async fn claim(&self, key: &str, claimant: &Claimant, lease: Duration) -> Stored<Claim> {
        self.with_state(|state, now| {
            state.claims += 1;
            if state.claims.is_multiple_of(MEMORY_SWEEP_EVERY) {
                state.sweep(now);
            }
            if let Some(record) = state.live(key, now) {
                return Ok(Claim::Existing(record.clone()));
            }
            if !state.make_room(now) {
                return Err(StoreError::Full(state.records.len()));
            }
            state.put(key, claimant.record(), now + lease);
            Ok(Claim::Claimed)
        })
    }

    async fn bind(&self, key: &str, claimant: &Claimant, id: Uuid, ttl: Duration) -> Stored<bool> {
        let claimed = claimant.record();
        Ok(self.with_state(|state, now| {
            if state.live(key, now) != Some(&claimed) {
                return false;
            }
            state.put(key, claimant.bound(id), now + ttl);
            true
        }))
    }

    async fn replace(
        &self,
        key: &str,
        expected: &KeyRecord,
        claimant: &Claimant,
        lease: Duration,
    ) -> Stored<bool> {
        Ok(self.with_state(|state, now| {
            if state.live(key, now) != Some(expected) {
                return false;
            }
            state.put(key, claimant.record(), now + lease);
            true
        }))
    }

    async fn release(&self, key: &str, claimant: &Claimant) -> Stored<()> {
        let claimed = claimant.record();
        self.with_state(|state, now| {
            if state.live(key, now) == Some(&claimed) {
                state.remove(key);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_claim_recorded_before_tokens_decodes_with_a_token_nobody_holds() {
        let record = KeyRecord::decode(r#"{"state":"in_progress","fingerprint":"f"}"#).unwrap();
        assert_eq!(
            record,
            KeyRecord::InProgress {
                fingerprint: "f".into(),
                claim: Uuid::nil(),
            }
        );
        assert_ne!(record, Claimant::new("f").record());
    }

    #[tokio::test]
    async fn a_full_memory_store_forgets_its_oldest_idle_key_and_never_one_in_use() {
        let store = MemoryStore::with_capacity(3);
        let long = Duration::from_secs(60);
        let busy = Claimant::new("f");
        store.claim("busy", &busy, long).await.unwrap();
        for key in ["old", "newer"] {
            let claimant = Claimant::new("f");
            store.claim(key, &claimant, long).await.unwrap();
            assert!(store
                .bind(key, &claimant, Uuid::new_v4(), long)
                .await
                .unwrap());
        }
        let fresh = Claimant::new("f");
        assert_eq!(
            store.claim("fresh", &fresh, long).await.unwrap(),
            Claim::Claimed
        );
        assert_eq!(store.len(), 3);
        assert_eq!(
            store.claim("old", &Claimant::new("g"), long).await.unwrap(),
            Claim::Claimed,
            "the oldest bound key went first"
        );
        assert!(
            matches!(store.claim("busy", &Claimant::new("f"), long).await.unwrap(), Claim::Existing(record) if record == busy.record()),
            "the key in progress stayed"
        );
        // Now three keys in progress ("busy", "fresh", "old") and one bound ("newer") went.
        assert!(matches!(
            store.claim("another", &Claimant::new("f"), long).await,
            Err(StoreError::Full(3))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_many_concurrent_claims_of_one_key_exactly_one_wins() {
        let store = Arc::new(MemoryStore::default());
        let claims = (0..200).map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .claim("k", &Claimant::new("f"), Duration::from_secs(60))
                    .await
                    .unwrap()
            })
        });
        let mut winners = 0;
        for claim in claims {
            if claim.await.unwrap() == Claim::Claimed {
                winners += 1;
            }
        }
        assert_eq!(winners, 1);
    }
}
