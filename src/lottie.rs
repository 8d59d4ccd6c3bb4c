//! The Bodymovin side of a render: parsing and fencing templates ([`template`], [`fence`],
//! [`assets`], [`model`], and the [`TemplateError`] they return), finding their slots
//! ([`slots`]), writing modifications ([`modifications`]), baking expressions into keyframes
//! ([`expressions`]), turning text layers into glyph shapes ([`text`]), drawing mattes and
//! masks as lottie-web does ([`mattes`]), writing layer effects into colours and layers
//! ([`effects`]), what else rlottie reads unlike lottie-web ([`lowering`]), retiming to the output frame rate ([`timeline`]) and the `inspect` report
//! ([`report`]).

pub mod assets;
pub mod dotlottie;
pub mod effects;
mod error;
pub mod expressions;
pub mod fence;
pub mod images;
pub mod lowering;
pub mod mattes;
pub mod model;
pub mod modifications;
mod quirks;
pub mod report;
pub mod slots;
pub mod template;
pub mod text;
pub mod timeline;

pub use error::TemplateError;
pub use template::Template;
