//! The service tests: real servers (one, or three on one Redis and one bucket) over real
//! sockets, real clients. One binary with three parts, each run as a phase of its own by
//! `./dev test` (`cargo test --test service -- api::`, then `farm::`, `hostile::`, and
//! `helpers::` for the helpers' own tests): the part names are the filters, so no test name
//! outside its part contains them. One binary, not three, so that the helpers and the client
//! stacks they instantiate compile once.
//! - `api`: the contract, one server per test.
//! - `farm`: several instances on one Redis and one bucket; the Idempotency-Key and tenants
//!   against both stores.
//! - `hostile`: hostile callers, limits and fair shares.
//! - `load`: verdicts with the machine saturated on purpose (busy loops on every core).
//! - `console`: the web console's answers, and a person's walk through it in headless
//!   Chromium.

/// The helpers every part uses (tests/common/).
#[path = "../common/mod.rs"]
mod helpers;

mod api;
mod console;
mod farm;
mod hostile;
mod load;
