//! The service under hostile callers, over real sockets: bombs and oversized or endless
//! templates, assets and expressions, the worker sandbox seen from outside, connections and
//! streams held, fair shares of every pool, kept jobs bounded, safe defaults, and the limits
//! table of docs/security.md checked against the code.

// The helpers the service binaries share (tests/common/); each uses a part of them.
mod analysis_shares;
mod connections;
mod fair_share;
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod helpers;
mod hostile_assets;
mod hostile_expressions;
mod hostile_records;
mod hostile_sandbox;
mod hostile_templates;
mod image_bombs;
#[path = "../engine/kernel_offers.rs"]
mod kernel_offers;
mod limits_table;
mod retained_jobs;
mod safe_defaults;
mod shares;
