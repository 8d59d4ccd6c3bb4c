//! Settings of the server, from flags and `LOTTIE_RENDER_*` environment variables, with
//! embedded defaults: no flags at all runs one self-contained instance.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Largest request body accepted: a template (8 MiB) plus its fonts. Above it, gRPC answers
/// RESOURCE_EXHAUSTED before decoding (tonic's limit).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, clap::Args)]
pub struct ServerSettings {
    /// Address to listen on for gRPC.
    #[arg(long, env = "LOTTIE_RENDER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory for templates and outputs (created when missing).
    #[arg(long, env = "LOTTIE_RENDER_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
}
