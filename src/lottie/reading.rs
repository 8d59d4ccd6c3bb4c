//! Reading a template: bytes (Bodymovin JSON, a gzipped `.tgs`, a dotLottie archive) become a
//! [`Template`] whose JSON tree, typed model and images every later step can trust, or a
//! [`TemplateError`] saying why not. Nothing here draws or rewrites for rlottie beyond the
//! parse-time quirks every reader must see alike; that is [`super::lowering`]'s. One bullet
//! per module (a test of `./dev structure` holds this map to the `mod` list below):
//!
//! - [`template`]: bytes → [`Template`]: the size, nesting and value-count limits, parsing,
//!   the typed model, the image assets and the fence, in that order.
//! - [`dotlottie`]: a `.lottie` archive unpacked into the template's JSON, its fonts and themes.
//! - [`model`]: the typed Bodymovin model, only what validation, the fence and slots need.
//! - [`fence`]: the semantic limits in front of rlottie (canvas, layers, precomps, shapes).
//! - [`assets`]: image assets are embedded PNG or JPEG data, their headers and decoded cost
//!   checked before rlottie's decoder sees them.
//! - [`images`]: a caller's replacement image decoded and fitted to its asset's box (in the
//!   render worker only).
//! - `quirks`: what rlottie reads unlike lottie-web, written the way it reads it at parse time.
//! - `error`: [`TemplateError`], the error every step above returns.

pub mod assets;
pub mod dotlottie;
mod error;
pub mod fence;
pub mod images;
pub mod model;
mod quirks;
pub mod template;

pub use error::TemplateError;
pub use template::Template;
