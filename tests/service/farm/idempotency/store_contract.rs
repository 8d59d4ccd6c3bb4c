//! The behaviour every idempotency store must have, as named cases, each run against the
//! memory store and against the Redis store (a real server, a key prefix of its own per case):
//! `idempotency::store_contract::{memory_store,redis_store}::CASE`.

use lottie_render::idempotency::store::{
    Claim, Claimant, IdempotencyStore, KeyRecord, MemoryStore,
};
use std::time::Duration;
use uuid::Uuid;

/// The lease and retention of a key no case waits out.
const LONG: Duration = Duration::from_secs(60);
/// A lease or retention a case waits out ([`OUTLIVED`] later).
const SHORT: Duration = Duration::from_millis(150);
/// How long a case sleeps to see [`SHORT`] run out, with room for a slow Redis.
const OUTLIVED: Duration = Duration::from_millis(400);

/// Claims `key` for `claimant` and binds it to `id`: the record it answers since.
async fn claimed_and_bound(
    store: &dyn IdempotencyStore,
    key: &str,
    claimant: &Claimant,
    id: Uuid,
) -> KeyRecord {
    assert_eq!(
        store.claim(key, claimant, LONG).await.unwrap(),
        Claim::Claimed
    );
    assert!(store.bind(key, claimant, id, LONG).await.unwrap());
    claimant.bound(id)
}

async fn only_the_claimant_binds_a_claimed_key(store: &dyn IdempotencyStore, key: &str) {
    let job = Uuid::new_v4();
    let first = Claimant::new("f1");
    assert_eq!(
        store.claim(key, &first, LONG).await.unwrap(),
        Claim::Claimed,
        "a free key is claimed"
    );
    assert_eq!(
        store.claim(key, &Claimant::new("f1"), LONG).await.unwrap(),
        Claim::Existing(first.record()),
        "a claimed key is reported in progress, with its claimant's token"
    );
    for (other, case) in [
        ("f2", "bind with another fingerprint fails"),
        (
            "f1",
            "bind by another claimant with the same fingerprint fails",
        ),
    ] {
        let bound = store.bind(key, &Claimant::new(other), job, LONG).await;
        assert!(!bound.unwrap(), "{case}");
    }
    assert!(
        store.bind(key, &first, job, LONG).await.unwrap(),
        "bind of the claim succeeds"
    );
    let bound = KeyRecord::Bound {
        fingerprint: "f1".into(),
        id: job,
    };
    assert_eq!(
        store.claim(key, &Claimant::new("f9"), LONG).await.unwrap(),
        Claim::Existing(bound),
        "a bound key answers its job"
    );
}

async fn bind_without_a_claim_fails(store: &dyn IdempotencyStore, key: &str) {
    assert!(
        !store
            .bind(key, &Claimant::new("f1"), Uuid::new_v4(), LONG)
            .await
            .unwrap(),
        "bind without a claim fails"
    );
}

async fn replace_is_compare_and_set_with_one_winner(store: &dyn IdempotencyStore, key: &str) {
    let first = Claimant::new("f1");
    let bound = claimed_and_bound(store, key, &first, Uuid::new_v4()).await;
    let retry = Claimant::new("f1");
    assert!(
        !store
            .replace(key, &first.record(), &retry, LONG)
            .await
            .unwrap(),
        "replace with a stale expectation fails"
    );
    assert!(
        store.replace(key, &bound, &retry, LONG).await.unwrap(),
        "replace of the current record succeeds"
    );
    assert!(
        !store
            .replace(key, &bound, &Claimant::new("f1"), LONG)
            .await
            .unwrap(),
        "a second replace of the same record fails (one winner)"
    );
    assert_eq!(
        store.claim(key, &Claimant::new("f1"), LONG).await.unwrap(),
        Claim::Existing(retry.record()),
        "the winner holds the key"
    );
}

async fn release_frees_only_the_releasing_claimants_claim(store: &dyn IdempotencyStore, key: &str) {
    let retry = Claimant::new("f1");
    let bound = claimed_and_bound(store, key, &Claimant::new("f1"), Uuid::new_v4()).await;
    assert!(store.replace(key, &bound, &retry, LONG).await.unwrap());
    store.release(key, &retry).await.unwrap();
    let third = Claimant::new("f3");
    assert_eq!(
        store.claim(key, &third, LONG).await.unwrap(),
        Claim::Claimed,
        "a released key is free"
    );
    store.release(key, &Claimant::new("other")).await.unwrap();
    store.release(key, &Claimant::new("f3")).await.unwrap();
    assert_eq!(
        store.claim(key, &Claimant::new("f3"), LONG).await.unwrap(),
        Claim::Existing(third.record()),
        "release by another claimant (same fingerprint or not) leaves the claim"
    );
}

async fn a_claimant_whose_lease_ran_out_neither_binds_nor_releases_its_successors_key(
    store: &dyn IdempotencyStore,
    key: &str,
) {
    let expired = Claimant::new("f1");
    assert_eq!(
        store.claim(key, &expired, SHORT).await.unwrap(),
        Claim::Claimed,
        "claim with a short lease"
    );
    tokio::time::sleep(OUTLIVED).await;
    // The same request again, while the first claimant may still be creating.
    let successor = Claimant::new("f1");
    assert_eq!(
        store.claim(key, &successor, LONG).await.unwrap(),
        Claim::Claimed,
        "an expired lease frees the key"
    );
    assert!(
        !store
            .bind(key, &expired, Uuid::new_v4(), LONG)
            .await
            .unwrap(),
        "a claimant whose lease ran out cannot bind the key its successor holds"
    );
    store.release(key, &expired).await.unwrap();
    assert!(
        store
            .bind(key, &successor, Uuid::new_v4(), LONG)
            .await
            .unwrap(),
        "nor release it: the successor still binds it"
    );
}

async fn an_expired_binding_is_treated_as_first_use(store: &dyn IdempotencyStore, key: &str) {
    let binder = Claimant::new("f1");
    store.claim(key, &binder, LONG).await.unwrap();
    assert!(store
        .bind(key, &binder, Uuid::new_v4(), SHORT)
        .await
        .unwrap());
    tokio::time::sleep(OUTLIVED).await;
    assert_eq!(
        store.claim(key, &Claimant::new("f2"), LONG).await.unwrap(),
        Claim::Claimed,
        "an expired record is treated as first use"
    );
}

fn redis_store() -> lottie_render::idempotency::redis_store::RedisStore {
    super::redis_store(&lottie_render::redis_client::RedisSettings {
        url: crate::helpers::redis_url(),
        key_prefix: crate::helpers::unique_prefix(),
        pool_size: 4,
        timeout: Duration::from_secs(2),
    })
}

/// One test per case and store, the case's name its key.
macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod memory_store {
            $(
                #[tokio::test]
                async fn $case() {
                    let store = super::MemoryStore::default();
                    super::$case(&store, stringify!($case)).await;
                }
            )*
        }

        mod redis_store {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(&super::redis_store(), stringify!($case)).await;
                }
            )*
        }
    };
}

contract!(
    only_the_claimant_binds_a_claimed_key,
    bind_without_a_claim_fails,
    replace_is_compare_and_set_with_one_winner,
    release_frees_only_the_releasing_claimants_claim,
    a_claimant_whose_lease_ran_out_neither_binds_nor_releases_its_successors_key,
    an_expired_binding_is_treated_as_first_use,
);
