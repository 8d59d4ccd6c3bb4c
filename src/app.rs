//! The application: built from its settings ([`startup`]: every part, each by a named
//! function), then run until stopped ([`serve`]: the background tasks, the drain on shutdown,
//! the listener closed last). The tower stack in front of every service is in [`stack`], the
//! connection-level limits in [`transport`] (with the one accept loop, [`accept`], the bound
//! on open connections, [`open_connections`], and the first request's deadline,
//! [`first_request`]), the HTTP endpoint of metrics and probes in [`http_endpoint`]. `main` and the tests run the very same entry point, [`run`], on
//! listeners they bound (port 0 in tests).

pub mod accept;
pub(crate) mod first_request;
pub(crate) mod http_endpoint;
pub mod open_connections;
pub(crate) mod serve;
pub(crate) mod stack;
pub(crate) mod startup;
pub mod transport;

pub use serve::{shutdown_signal, OPEN_CALLS_AFTER_DRAIN};
pub use stack::{middleware, middleware_with, Middleware, StackLimits};
pub use startup::{App, Listeners};

use crate::config::ServerSettings;
use crate::telemetry::traces::TracingError;
use std::future::Future;
use std::pin::Pin;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot open the object store or the data directory: {0}")]
    Storage(#[from] crate::storage::StorageError),
    #[error("cannot find this executable to run workers: {0}")]
    Executable(std::io::Error),
    #[error("cannot set up Redis: {0}")]
    Redis(crate::redis_client::RedisError),
    #[error("cannot build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("cannot read the API keys file {path}: {reason}")]
    ApiKeys {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("cannot read the identities file {path}: {reason}")]
    KnownIdentities {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(transparent)]
    UnauthenticatedNetwork(#[from] crate::auth::settings::UnauthenticatedNetworkListen),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::tls::TlsFilesError),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Tracing(#[from] TracingError),
    #[error("cannot set up webhooks: {0}")]
    Webhooks(String),
}

/// Builds the application and serves until `shutdown` resolves, then drains: health
/// NOT_SERVING, new submissions UNAVAILABLE, running renders get the grace period, and the
/// listener closes last.
pub async fn run(
    listeners: Listeners,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    run_boxed(listeners, settings, Box::pin(shutdown)).await
}

/// The signal that stops a server, boxed: the whole server (tonic's, hyper's and our tasks)
/// is compiled once, not once per caller's future type. With `impl Future` all the way down,
/// the service tests' 110 servers were 110 copies of it: three quarters of that binary's
/// build (61 s, 15 s without them).
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

async fn run_boxed(
    listeners: Listeners,
    settings: ServerSettings,
    shutdown: Shutdown,
) -> Result<(), ServerError> {
    App::build(listeners, settings)
        .await?
        .run_until_stopped(shutdown)
        .await
}
