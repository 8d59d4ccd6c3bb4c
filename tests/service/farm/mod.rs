//! The service as a farm: several instances on one Redis and one S3-compatible bucket (the
//! shared work queue, objects in the bucket), and what a key or a tenant means across them:
//! the Idempotency-Key and its leases against both stores (memory and Redis), tenants kept
//! apart in both, a tenant's jobs listed by every instance; and the KEDA ScaledObject of
//! `deploy/` held to the queue's real keys. Over real sockets, one server (or three) per
//! test. The single-instance contract is in `api`, hostile callers in `hostile`.

mod idempotency;
mod job_listing;
mod key_leases;
mod object_storage;
mod scaling;
mod shared_queue;
mod signed_urls;
mod tenancy;
