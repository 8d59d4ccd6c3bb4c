//! The command line: one file per subcommand (`client` holds what the client verbs
//! `template`, `submit` and `job` share).

pub(crate) mod analyze;
pub(crate) mod bench;
pub mod bench_expressions;
pub mod bench_hostile;
pub(crate) mod bench_replays;
pub(crate) mod bench_text;
pub(crate) mod client;
pub(crate) mod inspect;
pub(crate) mod job;
pub(crate) mod render;
pub(crate) mod serve;
pub(crate) mod submit;
pub(crate) mod template;
pub(crate) mod timing;
pub(crate) mod worker;

use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "lottie-render",
    version,
    about = "Render Lottie templates with typed modifications to video, animated images and stills"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "LOTTIE_RENDER_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC service.
    // Boxed: its settings are far larger than any other verb's arguments.
    Serve(Box<serve::ServeArgs>),
    /// Register, show, list or delete templates on a server.
    Template(template::TemplateArgs),
    /// Submit a render to a server (optionally wait for it and save the output).
    Submit(submit::SubmitArgs),
    /// Show, follow, cancel or download a render job on a server.
    Job(job::JobArgs),
    /// Render a template to a video, an animated image or a still (in a sandboxed worker
    /// process).
    Render(render::RenderArgs),
    /// Print a JSON report of a template: size, timing, layers, slots, warnings.
    Inspect(inspect::InspectArgs),
    /// Run one render job read from stdin (the sandbox protocol; not for people).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Measure rendering, encoding and the whole pipeline on the benchmark templates.
    Bench(bench::BenchArgs),
    /// Measure what evaluating expressions costs per call, and the generated loaders whole.
    BenchExpressions(bench_expressions::BenchExpressionsArgs),
    /// Measure how fast idempotent replays are answered (memory and Redis key stores).
    BenchReplays(bench_replays::BenchReplaysArgs),
    /// Measure what drawing text costs (with text versus text layers hidden).
    BenchText(bench_text::BenchTextArgs),
    /// Build one template's report read from stdin (the analysis protocol; not for people).
    #[command(hide = true)]
    Analyze,
    /// Replay the hostile set against a server: answer, time and the server's peak RSS.
    BenchHostile(bench_hostile::BenchHostileArgs),
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Template(args) => template::run(args),
        Command::Submit(args) => submit::run(args),
        Command::Job(args) => job::run(args),
        Command::Render(args) => render::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Bench(args) => bench::run(args),
        Command::BenchExpressions(args) => bench_expressions::run(args),
        Command::BenchReplays(args) => bench_replays::run(args),
        Command::BenchText(args) => bench_text::run(args),
        Command::Analyze => analyze::run(),
        Command::BenchHostile(args) => bench_hostile::run(args),
    }
}

/// Runs a benchmark's future on a fresh runtime: exit 0, or 1 with the error on stderr.
fn run_bench(bench: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit codes of the subcommands for people: the worker's, so scripts can tell a bad
/// input (65) from a failure worth retrying (75) or a crash (70).
pub mod exit {
    pub use crate::sandbox::protocol::exit_code::{DETERMINISTIC, SUCCESS, TRANSIENT};
    /// EX_SOFTWARE: the render crashed.
    pub(crate) const CRASHED: u8 = 70;
    /// EX_USAGE: the command line itself is wrong.
    pub(crate) const USAGE: u8 = 64;
}

/// The output the benches ask for: `format` at `fps`, `size`×`size`, no background.
fn square_output(
    format: crate::grpc::proto::Format,
    fps: u32,
    size: u32,
) -> Option<crate::grpc::proto::OutputSpec> {
    Some(crate::grpc::proto::OutputSpec {
        format: format as i32,
        fps,
        width: size,
        height: size,
        background: None,
        ..Default::default()
    })
}
