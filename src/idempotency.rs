//! Idempotency-Key: a retried SubmitRender must never start a second render.
//!
//! [`key`] is the validated key (the tower layer that refuses a SubmitRender without one before
//! its body is decoded is [`crate::middleware::idempotency_key`]). [`once`] is the steps every keyed use case takes (claim or
//! replay, create, bind or free), [`claim`] what the key says in each case. [`store`] records
//! keys (the interface and the in-memory store), [`redis_store`] in Redis for many instances.
//! The use cases ([`crate::jobs::intake`], [`crate::templates`]) claim the key once
//! the request is validated and its fingerprint known.

pub(crate) mod claim;
pub mod key;
pub(crate) mod once;
pub mod redis_store;
pub mod settings;
pub mod store;

pub use key::IdempotencyKey;
