//! The gRPC boundary. Generated code stays in [`proto`]; nothing outside this module touches
//! generated types.

pub mod proto;
