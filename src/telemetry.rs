//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as text
//! for people or JSON lines for log collectors. OpenTelemetry traces (per server, exported
//! over OTLP) are in [`traces`]; the spans a worker reports back, in [`worker_spans`].

pub mod settings;
pub mod traces;
pub(crate) mod worker_spans;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for people at a terminal, never in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Another subscriber may already be installed (tests); keeping it is fine.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
