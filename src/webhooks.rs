//! Webhooks: a job submitted with `RenderRequest.notify` has its events POSTed to the
//! caller's receiver, signed, retried the way we ask our own callers to retry, never lost by
//! a restart (docs/http.md, Webhooks). [`Webhooks`] is what the render API needs (the check
//! at submit, the deliveries for GetRenderJob); [`dispatch`] runs the deliveries:
//! - [`destination`]: where a webhook may be sent (https, read as browsers read URLs, and only
//!   globally reachable addresses, checked at submit and again on the resolved address);
//! - [`addresses`]: which addresses are globally reachable (IANA's special-purpose registries);
//! - [`client`]: one bounded request;
//! - [`resolver`]: names resolved on a bounded pool of their own, keeping only allowed
//!   addresses;
//! - [`signing`]: Standard Webhooks signatures and the secrets file;
//! - [`retry`]: a receiver's answer classified as we ask our callers to classify ours, and the
//!   backoff with full jitter;
//! - [`delivery`]: one event's delivery as a state machine, and a destination's breaker;
//! - [`event`]: the body (type, timestamp, the job in canonical JSON);
//! - [`store`]: deliveries kept in the data directory or Redis across restarts, a bound of
//!   them waiting per tenant;
//! - [`turns`]: the sender's slots shared by tenants in turn;
//! - [`dispatch`]: the loop that keeps a delivery per event and the one that sends them;
//! - [`settings`]: the flags.

pub mod addresses;
pub mod client;
pub mod delivery;
pub mod destination;
pub mod dispatch;
pub mod event;
pub mod resolver;
pub mod retry;
pub mod settings;
pub mod signing;
pub mod store;
pub mod turns;

use crate::auth::TenantId;
use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;
use crate::spec::Notify;
use std::sync::Arc;

/// What the render API asks of webhooks.
#[derive(Debug, Clone)]
pub struct Webhooks {
    pub policy: Arc<destination::Policy>,
    pub secrets: Arc<signing::SigningSecrets>,
    pub store: store::Deliveries,
}

impl Webhooks {
    /// A submission's webhook under the destination policy, for `tenant`: INVALID_ARGUMENT
    /// naming `notify.webhook_url` for a destination refused (http, a private address…);
    /// FAILED_PRECONDITION when the secrets file names no secret for the tenant (nothing
    /// could sign its deliveries: the operator's to fix, not a retry's).
    pub fn check(&self, tenant: &TenantId, notify: &Notify) -> Result<(), ServiceError> {
        if let Err(refused) = self.policy.destination(&notify.url) {
            let description = refused.to_string();
            return Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                format!("notify.webhook_url: {description}"),
                vec![FieldViolation {
                    field: "notify.webhook_url".into(),
                    description,
                }],
            ));
        }
        if !self.secrets.has(tenant) {
            return Err(ServiceError::deterministic(
                crate::error::ServiceErrorCode::FailedPrecondition,
                Reason::WebhookSecretMissing,
                format!(
                    "no webhook secret for tenant {tenant}: the operator adds one to --webhook-secrets"
                ),
            ));
        }
        Ok(())
    }
}
