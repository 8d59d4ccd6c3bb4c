//! Who is calling: the [`Caller`] resolved once per request (from the mTLS peer certificate,
//! a trusted sidecar's header or an API key; the layer that does it is
//! [`crate::middleware::identity`]) and the [`TenantId`] that scopes every template, job,
//! output and idempotency key it can see; and which callers operate the service
//! ([`operators`]: they may read the whole instance's status).

pub mod api_keys;
pub(crate) mod caller;
pub mod files;
pub(crate) mod identity;
pub mod known_identities;
pub mod operators;
pub(crate) mod peer_certificate;
pub mod settings;
pub(crate) mod sidecar;

pub use api_keys::ApiKeys;
pub use caller::{Caller, IdentitySource, TenantId, TenantIdError};
pub use identity::{AuthMode, Identities};
pub use known_identities::KnownIdentities;
pub use operators::{OperatorPattern, Operators};
pub use sidecar::TrustedSidecar;
