//! Idempotency-Key: a retried SubmitRender must never start a second render.
//!
//! [`key`] is the validated key; [`layer`] is the tower layer in front of RenderService that
//! refuses a SubmitRender without a well-formed key before its body is even decoded, and
//! hands the key to the handler. [`once`] is the steps every keyed use case takes (claim or
//! replay, create, bind or free), [`claim`] what the key says in each case. [`store`] records
//! keys (the interface and the in-memory store), [`redis_store`] in Redis for many instances.
//! The use cases ([`crate::jobs::intake`], [`crate::templates::intake`]) claim the key once
//! the request is validated and its fingerprint known.

pub mod claim;
pub mod key;
pub mod layer;
pub mod once;
pub mod redis_store;
pub mod store;

pub use key::IdempotencyKey;
pub use layer::{IdempotencyKeyLayer, IdempotencyKeyService};
