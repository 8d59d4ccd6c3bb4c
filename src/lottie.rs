//! The Bodymovin side of a render, in three rooms and two steps that use them:
//!
//! - [`reading`]: bytes → a [`Template`] (parsing, the fence in front of rlottie, image assets,
//!   dotLottie archives), or the [`TemplateError`] saying why not.
//! - [`slots`]: what a template offers to modify; [`modifications`]: a caller's values checked
//!   against those slots and written into the JSON.
//! - [`lowering`]: what rlottie cannot draw rewritten into what it can (expressions, text,
//!   mattes, effects and rlottie's reading differences).
//! - [`timeline`]: retiming to the output frame rate.
//! - [`report`]: the `inspect` report (slots, warnings, markers, themes) of a template.

pub mod lowering;
pub mod modifications;
pub mod reading;
pub mod report;
pub mod slots;
pub mod timeline;

pub use lowering::{lower, Lowering};
pub use reading::{Template, TemplateError};
// The slots room names `super::assets` and `super::model`; its files are being rewritten
// beside this change (issue 44, item 1), so the two names stay visible inside `lottie` until
// they name `reading::` themselves. Private: the rest of the crate writes `reading::`.
use reading::{assets, model};
