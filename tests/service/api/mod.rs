//! The gRPC service over a real socket: one server per test on a random port, real clients.
//! Many instances on one Redis and one bucket, and the Idempotency-Key against both stores,
//! are in `farm`; hostile callers, limits and fair shares in `hostile`.

mod auth;
mod cli;
pub(crate) mod cli_flags;
mod cli_jobs;
mod dashboards;
pub(crate) mod dotlottie_js;
mod downloads;
mod drain;
mod errors;
mod http_json;
mod identity_sources;
pub(crate) mod image_slots;
mod job_listing;
mod mesh;
mod outputs;
mod panic;
pub(crate) mod pki;
mod process;
mod promises;
mod property_slots;
mod reasons;
mod renders;
mod spare_workers;
mod stickers;
mod templates;
mod theme_rules;
mod tls;
mod traces;
mod webhook_answers;
pub(crate) mod webhooks;
mod webhooks_https;
