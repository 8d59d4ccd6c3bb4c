//! Webhooks (issue 23, part 2), the parts that decide, each pure and unit-tested:
//! [`destination`] (where a webhook may be sent: https, and no address of this machine or its
//! private networks, at submit and at connect time), [`client`] (one bounded request, the
//! resolved addresses checked), [`signing`] (Standard Webhooks
//! signatures and the secrets file) and [`retry`] (a receiver's answer classified as we ask
//! our callers to classify ours, backoff with full jitter). Not yet wired to
//! `RenderRequest.notify` and a delivery loop: see docs/http.md, Webhooks.

pub mod client;
pub mod destination;
pub mod retry;
pub mod signing;
