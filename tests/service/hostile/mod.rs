//! The service under hostile callers, over real sockets: bombs and oversized or endless
//! templates, assets and expressions, the worker sandbox seen from outside, connections
//! admitted with deadlines, connections and streams held, fair shares of every pool, kept
//! jobs bounded, job listings' walks bounded, a server under an address-space limit, safe
//! defaults, and the limits table of docs/security.md checked against the code.

mod address_space;
mod analysis_shares;
mod connection_admission;
mod connections;
mod contract_bounds;
mod fair_share;
mod hostile_assets;
mod hostile_expressions;
mod hostile_records;
mod hostile_sandbox;
pub(crate) mod hostile_templates;
mod image_bombs;
#[path = "../../engine/kernel_offers.rs"]
mod kernel_offers;
mod limits_table;
mod listing_scans;
mod pools;
mod retained_jobs;
mod safe_defaults;
mod shares;
mod webhook_tenants;
