//! What a call with an idempotency key does before it creates anything, the same for every
//! method that takes a key: claim the key for the request's fingerprint, or find what an
//! earlier call with that key created and answer it again (a replay). The table of issue #4:
//! another payload under the key is INVALID_ARGUMENT (IDEMPOTENCY_KEY_REUSED); a concurrent
//! call still creating is waited for briefly, then ABORTED with a short retry delay; a
//! resource that no longer answers (a job that failed transiently or was cancelled, a deleted
//! template, an expired record) frees the key for this call; an unreachable store is
//! UNAVAILABLE: nothing is created without the check.

use super::key::{IdempotencyKey, IDEMPOTENCY_KEY_HEADER};
use super::store::{Claim, Claimant, IdempotencyStore, KeyRecord, StoreError};
use crate::auth::TenantId;
use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::reason::Reason;
use std::future::Future;
use std::time::Duration;
use uuid::Uuid;

/// How long a call waits for a concurrent call with the same key to create its resource
/// before answering ABORTED (the window is normally microseconds; this absorbs bursts).
pub(crate) const IN_PROGRESS_WAIT: Duration = Duration::from_millis(500);
/// How often it looks meanwhile.
const IN_PROGRESS_POLL: Duration = Duration::from_millis(5);
/// Retry delay of ABORTED (the concurrent call is about to finish).
pub(crate) const IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Retry delay when the store is unreachable.
pub(crate) const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Response metadata of an answer given from an earlier call with the same key.
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";

/// How a service uses idempotency keys.
#[derive(Debug, Clone)]
pub(crate) struct KeyPolicy {
    pub store: std::sync::Arc<dyn IdempotencyStore>,
    /// How long a key stays claimed between recording and creation (a caller that died in
    /// between frees it when this runs out).
    pub lease: Duration,
    /// How long a key answers with what it created.
    pub retention: Duration,
}

/// The name under which the store records `key` sent to `method` by a caller of `tenant`:
/// the same key on another method is another key, and so is the same key from another
/// tenant (it gets its own resource, never another tenant's replay or IDEMPOTENCY_KEY_REUSED).
/// The default tenant's names are the ones used before tenants, so records in Redis survive
/// an upgrade; other tenants' start with `tenant/`, which no method name does.
pub(super) fn scoped_key(tenant: &TenantId, method: &str, key: &IdempotencyKey) -> String {
    if tenant.is_default() {
        format!("{method}:{}", key.as_str())
    } else {
        format!("tenant/{tenant}/{method}:{}", key.as_str())
    }
}

/// What a key says about a call.
pub(super) enum KeyOutcome<T> {
    /// The caller holds the key as this claimant: create the resource, then bind the key
    /// to it (or release it) as the same claimant.
    Owned(Claimant),
    /// An earlier call with this key and payload created this; answer it again.
    Replay(T),
}

pub(crate) fn store_unavailable(error: StoreError) -> ServiceError {
    if let StoreError::Full(_) = error {
        // Keys in progress end within their calls: a short wait finds room.
        return ServiceError::transient(
            ServiceErrorCode::ResourceExhausted,
            Reason::IdempotencyKeysFull,
            format!("cannot record the idempotency key, so nothing was started: {error}"),
            STORE_RETRY_AFTER,
        );
    }
    ServiceError::transient(
        ServiceErrorCode::Unavailable,
        Reason::IdempotencyStoreUnavailable,
        format!("cannot check the idempotency key, so nothing was started: {error}"),
        STORE_RETRY_AFTER,
    )
}

/// Claims `key` for `fingerprint`, or finds what an earlier call created with it:
/// `answering(id)` says whether the resource still answers for the key (`Some`) or frees it
/// (`None`).
pub(super) async fn claim_key<T, F, Fut>(
    store: &dyn IdempotencyStore,
    key: &str,
    fingerprint: &str,
    lease: Duration,
    mut answering: F,
) -> Result<KeyOutcome<T>, ServiceError>
where
    F: FnMut(Uuid) -> Fut,
    Fut: Future<Output = Result<Option<T>, ServiceError>>,
{
    let give_up = tokio::time::Instant::now() + IN_PROGRESS_WAIT;
    let claimant = Claimant::new(fingerprint);
    loop {
        let claimed = match store.claim(key, &claimant, lease).await {
            Ok(claimed) => claimed,
            Err(error) => return Err(unclaimed(store, key, &claimant, error).await),
        };
        let record = match claimed {
            Claim::Claimed => return Ok(KeyOutcome::Owned(claimant)),
            Claim::Existing(record) => record,
        };
        if record.fingerprint() != fingerprint {
            return Err(ServiceError::invalid_argument(
                Reason::IdempotencyKeyReused,
                "this idempotency-key was used with a different request; use a new key for a \
                 new request",
                vec![FieldViolation {
                    field: IDEMPOTENCY_KEY_HEADER.into(),
                    description: "already used with a different request".into(),
                }],
            ));
        }
        match &record {
            KeyRecord::InProgress { .. } => {
                if tokio::time::Instant::now() >= give_up {
                    return Err(ServiceError::transient(
                        ServiceErrorCode::Aborted,
                        Reason::IdempotencyKeyInProgress,
                        "a call with this idempotency-key is being handled right now; retry \
                         shortly to get its answer",
                        IN_PROGRESS_RETRY_AFTER,
                    ));
                }
                tokio::time::sleep(IN_PROGRESS_POLL).await;
            }
            KeyRecord::Bound { id, .. } => match answering(*id).await? {
                Some(answer) => return Ok(KeyOutcome::Replay(answer)),
                // Released: the first caller to swap the record creates anew.
                None => match store.replace(key, &record, &claimant, lease).await {
                    Ok(true) => return Ok(KeyOutcome::Owned(claimant)),
                    Ok(false) => {}
                    Err(error) => return Err(unclaimed(store, key, &claimant, error).await),
                },
            },
        }
    }
}

/// The answer to a claim (or replace) that failed: it may have been recorded all the same
/// (a reply that timed out), so `claimant`'s token frees it if so, and nothing else, lest
/// the caller's retry meet its own claim until the lease runs out.
async fn unclaimed(
    store: &dyn IdempotencyStore,
    key: &str,
    claimant: &Claimant,
    error: StoreError,
) -> ServiceError {
    if let Err(error) = store.release(key, claimant).await {
        tracing::warn!(%error, "cannot release a claim that may have been recorded; its lease will");
    }
    store_unavailable(error)
}

/// After the call created `id` (or failed to): binds the key to it, or frees the key, as
/// the claimant that claimed it.
///
/// A call that outlived its lease may find the key claimed since by another call with the
/// same request (its caller's retry, most likely). Then neither is rebound: the key stays
/// with the later claimant, which answers every retry from then on, and this call's own
/// resource (created, and answered to this call's caller, who asked for it and may be
/// waiting on it) is not tied to the key. What a caller sees: the call that lost its lease
/// still answers what it created; the key answers one resource for its whole retention, the
/// later claimant's; nothing the later claimant holds is overwritten or freed.
pub(super) async fn settle_key(
    store: &dyn IdempotencyStore,
    key: &str,
    claimant: &Claimant,
    created: Option<Uuid>,
    retention: Duration,
) {
    match created {
        Some(id) => match store.bind(key, claimant, id, retention).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                %id,
                "the idempotency key's lease ran out before the call ended; the key stays \
                 with whoever claimed it since"
            ),
            // The resource exists and is answered; a retry meets the claim (ABORTED) until
            // its lease runs out.
            Err(error) => tracing::warn!(%id, %error, "cannot bind an idempotency key"),
        },
        None => {
            if let Err(error) = store.release(key, claimant).await {
                tracing::warn!(%error, "cannot release an idempotency key; its lease will");
            }
        }
    }
}
