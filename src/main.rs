//! The `lottie-render` binary: parses the command line, sets up logging and hands over to
//! the library. Every subcommand lives in `lottie_render::cli`.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = lottie_render::cli::Cli::parse();
    lottie_render::telemetry::init(cli.log_format);
    lottie_render::cli::run(cli)
}
