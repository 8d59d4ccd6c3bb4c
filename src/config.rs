//! Settings of the server, from flags and `LOTTIE_RENDER_*` environment variables, with
//! embedded defaults: no flags at all runs one self-contained instance (in-memory job table
//! and queue, templates and outputs under `./data`).
//!
//! [`ServerSettings`] only groups: each group is a `clap::Args` struct beside the module that
//! reads it (flattened, so the flags and variables are each group's own), with its defaults
//! and the values derived from its flags; `app::startup` hands each module its group. A new
//! setting is a field of its module's group and a line in `docs/operations.md`.

pub mod application;
pub(crate) mod connections;
pub(crate) mod mesh;

use std::net::SocketAddr;
use std::path::PathBuf;

/// Every setting of `serve`, by the module that reads it.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerSettings {
    /// Listen addresses, data directory and shutdown grace (crate::app).
    #[command(flatten)]
    pub application: application::ApplicationSettings,
    /// Render worker processes (crate::sandbox).
    #[command(flatten)]
    pub render_workers: crate::sandbox::settings::RenderWorkerSettings,
    /// The queue, the job budget, the retention and the jobs kept (crate::jobs).
    #[command(flatten)]
    pub jobs: crate::jobs::settings::JobSettings,
    /// Template analyses (crate::analysis).
    #[command(flatten)]
    pub analysis: crate::analysis::settings::AnalysisSettings,
    /// Redis, when instances share their state (crate::redis_client).
    #[command(flatten)]
    pub redis: crate::redis_client::settings::RedisConnectionSettings,
    /// The Idempotency-Key's lease (crate::idempotency).
    #[command(flatten)]
    pub idempotency: crate::idempotency::settings::IdempotencySettings,
    /// Load shedding, request bodies and buffers, watch streams, tenants' rates
    /// (crate::middleware).
    #[command(flatten)]
    pub limits: crate::middleware::settings::RequestLimitSettings,
    /// DownloadRenderOutput streams (crate::grpc::renders).
    #[command(flatten)]
    pub downloads: crate::grpc::renders::DownloadSettings,
    /// Who may call: authentication, API keys, identities (crate::auth).
    #[command(flatten)]
    pub auth: crate::auth::settings::AuthSettings,
    /// Traces (crate::telemetry).
    #[command(flatten)]
    pub telemetry: crate::telemetry::settings::TelemetrySettings,
    /// HTTP/2 keepalive, connection age and grace (crate::mesh).
    #[command(flatten)]
    pub mesh: mesh::MeshSettings,
    /// Connections per address and the first request's deadline (crate::app::accept).
    #[command(flatten)]
    pub connections: connections::ConnectionSettings,
    /// TLS and mTLS on the gRPC listener (plaintext without them).
    #[command(flatten)]
    pub tls: crate::tls::TlsSettings,
    /// Object storage for templates, fonts and outputs, its timeouts, and what the stores
    /// keep at most (crate::storage).
    #[command(flatten)]
    pub storage: crate::storage::settings::StorageSettings,
    /// Webhook signing, destinations and retries (crate::webhooks).
    #[command(flatten)]
    pub webhooks: crate::webhooks::settings::WebhookSettings,
}

impl ServerSettings {
    /// The embedded defaults with another listen address and data directory (tests, tools).
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> ServerSettings {
        ServerSettings {
            application: application::ApplicationSettings::new(listen, data_dir),
            render_workers: Default::default(),
            jobs: Default::default(),
            analysis: Default::default(),
            redis: Default::default(),
            idempotency: Default::default(),
            limits: Default::default(),
            downloads: Default::default(),
            auth: Default::default(),
            telemetry: Default::default(),
            mesh: Default::default(),
            connections: Default::default(),
            tls: Default::default(),
            storage: Default::default(),
            webhooks: Default::default(),
        }
    }

    /// The per-tenant job limit in force: the jobs' rule under the authentication mode (one
    /// tenant when authentication is off).
    pub fn tenant_job_limit(&self) -> Option<usize> {
        self.jobs.tenant_job_limit(self.auth.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    /// Each group writes its defaults twice (the flags' and its `Default`): they must agree,
    /// or a server built with [`ServerSettings::new`] (the tests', the benches') would run
    /// other settings than `serve` with no flags.
    #[test]
    fn the_embedded_defaults_are_what_serve_parses_with_no_flags() {
        let mut command = ServerSettings::augment_args(clap::Command::new("serve"));
        // The variables of the environment the test runs in are not the defaults.
        let ids: Vec<clap::Id> = command
            .get_arguments()
            .map(|arg| arg.get_id().clone())
            .collect();
        for id in ids {
            command = command.mut_arg(id, |arg| arg.env(None));
        }
        let matches = command.try_get_matches_from(["serve"]).unwrap();
        let parsed = ServerSettings::from_arg_matches(&matches).unwrap();
        let embedded = ServerSettings::new("127.0.0.1:50051".parse().unwrap(), "./data".into());
        assert_eq!(format!("{parsed:?}"), format!("{embedded:?}"));
    }
}
