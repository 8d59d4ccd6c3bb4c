//! The gRPC service over a real socket: one server per test on a random port, real clients.

mod auth;
mod cli;
mod connections;
mod downloads;
mod drain;
mod errors;
mod fair_share;
mod helpers;
mod hostile_assets;
mod hostile_sandbox;
mod hostile_templates;
mod idempotency;
mod identity_sources;
mod key_leases;
mod mesh;
mod object_storage;
mod panic;
mod pki;
mod process;
mod reasons;
mod renders;
mod spare_workers;
mod templates;
mod tenancy;
mod tls;
mod traces;
