//! Webhooks (issue 23, part 2), built bottom-up; not yet wired to `RenderRequest.notify` and a
//! delivery loop (docs/http.md, Webhooks):
//! - [`destination`]: where a webhook may be sent (https, and no address of this machine or
//!   its private networks, checked at submit and again on the resolved address);
//! - [`client`]: one bounded request, through a resolver that keeps only allowed addresses;
//! - [`signing`]: Standard Webhooks signatures and the secrets file;
//! - [`retry`]: a receiver's answer classified as we ask our callers to classify ours, and the
//!   backoff with full jitter;
//! - [`delivery`]: one event's delivery as a state machine, and a destination's breaker;
//! - [`event`]: the body (type, timestamp, the job in canonical JSON);
//! - [`store`]: deliveries kept in the data directory across restarts.
//!
//! All but the client are pure and unit-tested; the client is tested against a real receiver.

pub mod client;
pub mod delivery;
pub mod destination;
pub mod event;
pub mod retry;
pub mod signing;
pub mod store;
