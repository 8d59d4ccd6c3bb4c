//! The gRPC boundary. Generated code stays in [`proto`]; nothing outside this module touches
//! generated types. [`codec`] decodes strictly (INVALID_ARGUMENT for undecodable bodies and
//! unknown fields); [`convert`] turns wire requests into domain types exactly once;
//! [`status`] is the single mapping from service errors to gRPC statuses; [`templates`]
//! serves TemplateService.

pub mod codec;
pub mod convert;
pub mod proto;
pub mod status;
pub mod templates;
