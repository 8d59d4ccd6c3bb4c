//! Where the server's traces go ([`super::traces::Tracing`]): an OTLP collector, a handle
//! given in code (tests), or nowhere. Flattened into `serve`'s flags.

/// The traces' destination, from the flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TelemetrySettings {
    /// OpenTelemetry collector to export traces to over OTLP/gRPC (`http://HOST:4317`); no
    /// traces when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Traces go here instead (tests: an in-memory exporter); not a flag.
    #[arg(skip)]
    pub tracing: Option<crate::telemetry::traces::Tracing>,
}
