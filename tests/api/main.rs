//! The gRPC service over a real socket: one server per test on a random port, real clients.

mod analysis_shares;
mod auth;
mod cli;
mod connections;
mod downloads;
mod drain;
mod errors;
mod fair_share;
mod helpers;
mod hostile_assets;
mod hostile_expressions;
mod hostile_records;
mod hostile_sandbox;
mod hostile_templates;
mod idempotency;
#[path = "../engine/kernel_offers.rs"]
mod kernel_offers;
mod identity_sources;
mod image_bombs;
mod key_leases;
mod mesh;
mod object_storage;
mod panic;
mod pki;
mod process;
mod reasons;
mod renders;
mod retained_jobs;
mod safe_defaults;
mod shared_queue;
mod shares;
mod spare_workers;
mod templates;
mod tenancy;
mod tls;
mod traces;
