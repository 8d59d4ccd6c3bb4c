//! `lottie-render serve`: the gRPC service on its embedded defaults (see [`crate::config`]).

use crate::config::ServerSettings;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub settings: ServerSettings,
}

pub(crate) fn run(args: ServeArgs) -> ExitCode {
    // Before any thread allocates: arenas are made as threads contend.
    if let Some((limit, arenas)) = crate::os::fit_malloc_arenas_to_address_space_limit() {
        tracing::info!(
            address_space_limit_mib = limit >> 20,
            arenas,
            "under an address-space limit: malloc arenas capped"
        );
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        // Before the socket exists: a client may connect (and an orchestrator signal) at once.
        let shutdown = crate::app::shutdown_signal();
        let listeners = match crate::app::Listeners::bind(&args.settings.application).await {
            Ok(listeners) => listeners,
            Err(error) => {
                eprintln!(
                    "error: cannot listen on {} (or the metrics address): {error}",
                    args.settings.application.listen
                );
                return ExitCode::FAILURE;
            }
        };
        match crate::app::run(listeners, args.settings, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        }
    })
}
