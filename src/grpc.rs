//! The gRPC boundary. Generated code stays in [`proto`]; nothing outside this module touches
//! generated types. [`status`] is the single mapping from service errors to gRPC statuses.

pub mod proto;
pub mod status;
