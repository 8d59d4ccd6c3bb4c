//! Who is calling: the [`Caller`] resolved once per request by the [`IdentityLayer`] (from
//! an API key today; mTLS peer certificates and trusted sidecar headers are resolved the
//! same way) and the [`TenantId`] that scopes every template, job, output and idempotency
//! key it can see.

pub mod api_keys;
pub mod caller;
pub mod identity;
pub mod layer;

pub use api_keys::ApiKeys;
pub use caller::{Caller, IdentitySource, TenantId, TenantIdError};
pub use identity::{AuthMode, Identities};
pub use layer::IdentityLayer;
