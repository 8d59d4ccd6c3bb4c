//! The instance's own settings, read by [`crate::app`]: where it listens (gRPC and metrics),
//! its data directory, and how long its shutdown may take. Flattened into `serve`'s flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// On SIGTERM: Kubernetes' default termination grace period is 30 s.
pub(crate) const DEFAULT_SHUTDOWN_GRACE_SECONDS: f64 = 30.0;

/// Where the instance listens and keeps its files, and its shutdown grace.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplicationSettings {
    /// Address to listen on for gRPC.
    #[arg(long, env = "LOTTIE_RENDER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory for templates and outputs (created when missing); with `--storage-url`,
    /// only this instance's scratch files (staged inputs, partial outputs).
    #[arg(long, env = "LOTTIE_RENDER_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Address for Prometheus metrics over HTTP (`GET /metrics`); off when unset.
    #[arg(long, env = "LOTTIE_RENDER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// On SIGTERM, how long running renders may take to finish before they are cancelled
    /// (and marked retryable), seconds.
    #[arg(
        long,
        env = "LOTTIE_RENDER_SHUTDOWN_GRACE_SECONDS",
        default_value_t = 30.0
    )]
    pub shutdown_grace_seconds: f64,
}

impl ApplicationSettings {
    /// The defaults with another listen address and data directory (tests, tools).
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> ApplicationSettings {
        ApplicationSettings {
            listen,
            data_dir,
            metrics_listen: None,
            shutdown_grace_seconds: DEFAULT_SHUTDOWN_GRACE_SECONDS,
        }
    }

    /// Clamped so that a hostile or mistyped value (NaN, negative, huge) cannot panic.
    pub(crate) fn shutdown_grace(&self) -> Duration {
        Duration::try_from_secs_f64(self.shutdown_grace_seconds)
            .unwrap_or(Duration::from_secs_f64(DEFAULT_SHUTDOWN_GRACE_SECONDS))
    }
}
