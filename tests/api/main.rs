//! The gRPC service over a real socket: one server per test on a random port, real clients.
//! Hostile callers, limits and fair shares are in `tests/hostile/` (a binary of its own, so
//! the two compile side by side).

// The helpers both service binaries share (tests/common/); each uses a part of them.
mod auth;
mod cli;
mod downloads;
mod drain;
mod errors;
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod helpers;
mod idempotency;
mod identity_sources;
mod key_leases;
mod mesh;
mod object_storage;
mod panic;
mod pki;
mod process;
mod promises;
mod reasons;
mod renders;
mod shared_queue;
mod spare_workers;
mod templates;
mod tenancy;
mod tls;
mod traces;
