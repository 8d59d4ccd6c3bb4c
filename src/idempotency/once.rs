//! The steps of a call with an Idempotency-Key, written once for every keyed use case (as
//! zero-to-production's `NextAction`): [`begin`] claims the key for the request's fingerprint,
//! or finds what an earlier call with that key created; the use case creates its resource
//! only on [`NextAction::Create`] and then ends the claim with [`Claimed::finish`], which
//! binds the key to what was created or frees it. A claim dropped unfinished (the caller hung
//! up mid-way) is freed at once, so the caller's retry runs instead of meeting the claim until
//! its lease runs out.
//!
//! What the key says in each case (a reuse with another request, a concurrent call still
//! creating, a resource that no longer answers, an unreachable store) is [`super::claim`]'s.

use super::claim::{claim_key, scoped_key, settle_key, KeyOutcome, KeyPolicy};
use super::store::Claimant;
use super::IdempotencyKey;
use crate::auth::TenantId;
use crate::error::ServiceError;
use std::future::Future;
use uuid::Uuid;

/// What a keyed call does next.
pub(crate) enum NextAction<T> {
    /// The key is this call's: create the resource, then [`Claimed::finish`].
    Create(Claimed),
    /// An earlier call with this key and the same request created this: answer it again.
    Replay(T),
}

/// A key this call holds until it says what it created.
pub(crate) struct Claimed {
    keys: KeyPolicy,
    key: String,
    /// Taken by [`Claimed::finish`]; still here on drop means unfinished.
    claimant: Option<Claimant>,
}

/// Claims `key` (sent to `method` by a caller of `tenant`) for a request with `fingerprint`,
/// or finds what an earlier call created with it: `answering(id)` says whether that resource
/// still answers for the key (`Some`) or frees it (`None`: failed transiently, cancelled,
/// deleted, expired).
pub(crate) async fn begin<T, F, Fut>(
    keys: &KeyPolicy,
    tenant: &TenantId,
    method: &str,
    key: &IdempotencyKey,
    fingerprint: &str,
    answering: F,
) -> Result<NextAction<T>, ServiceError>
where
    F: FnMut(Uuid) -> Fut,
    Fut: Future<Output = Result<Option<T>, ServiceError>>,
{
    let key = scoped_key(tenant, method, key);
    let outcome = claim_key(
        keys.store.as_ref(),
        &key,
        fingerprint,
        keys.lease,
        answering,
    )
    .await?;
    Ok(match outcome {
        KeyOutcome::Owned(claimant) => NextAction::Create(Claimed {
            keys: keys.clone(),
            key,
            claimant: Some(claimant),
        }),
        KeyOutcome::Replay(answer) => NextAction::Replay(answer),
    })
}

impl Claimed {
    /// Binds the key to `created` (the id of what this call created), or frees it for the
    /// retry when nothing was created.
    pub(crate) async fn finish(mut self, created: Option<Uuid>) {
        let Some(claimant) = self.claimant.take() else {
            return;
        };
        settle_key(
            self.keys.store.as_ref(),
            &self.key,
            &claimant,
            created,
            self.keys.retention,
        )
        .await;
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        let Some(claimant) = self.claimant.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key) = (self.keys.store.clone(), std::mem::take(&mut self.key));
        runtime.spawn(async move {
            if let Err(error) = store.release(&key, &claimant).await {
                tracing::warn!(%error, "cannot release an idempotency key; its lease will");
            }
        });
    }
}
