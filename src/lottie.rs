//! The Bodymovin side of a render, in rooms: what reads a template, what it offers to modify,
//! what lowers it for rlottie; then the steps that use them. One bullet per module (a test of
//! `./dev structure` holds this map to the `mod` list below):
//!
//! - [`reading`]: bytes (JSON, `.tgs`, a dotLottie archive) → a [`Template`]: parsing, the
//!   fence in front of rlottie, image assets, dotLottie archives, replacement images and the
//!   parse-time quirks; or the [`TemplateError`] saying why not.
//! - [`slots`]: what a template offers to modify (colour, text, image, scalar, vector and
//!   gradient slots, and a dotLottie's themes of them).
//! - [`modifications`]: a caller's values checked against those slots and written into the
//!   template's JSON.
//! - [`lowering`]: what rlottie cannot draw rewritten into what it can, every pass in its
//!   order by [`lower`] (expressions, the caller's modifications, text, mattes, effects, and
//!   what else rlottie reads unlike lottie-web).
//! - [`timeline`]: retiming a lowered template to the output frame rate.
//! - [`report`]: the `inspect` report (slots, warnings from the lowering, markers, themes).

pub mod lowering;
pub mod modifications;
pub mod reading;
pub mod report;
pub mod slots;
pub mod timeline;

pub use lowering::{lower, Lowering};
pub use reading::{Template, TemplateError};
