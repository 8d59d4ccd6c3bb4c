//! Idempotency-Key: a retried SubmitRender must never start a second render.
//!
//! [`key`] is the validated key; [`layer`] is the tower layer in front of RenderService that
//! refuses a SubmitRender without a well-formed key before its body is even decoded, and
//! hands the key to the handler. The key store (replays, concurrency, Redis) slots in behind
//! the layer (issue #4).

pub mod key;
pub mod layer;

pub use key::IdempotencyKey;
pub use layer::{IdempotencyKeyLayer, IdempotencyKeyService};
