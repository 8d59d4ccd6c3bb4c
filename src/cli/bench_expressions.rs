//! `lottie-render bench-expressions`: what evaluating expressions costs in the worker (the
//! bake a render or an analysis runs, in this process, on this thread). For each common
//! expression ([`loaders::CASES`]) it bakes `--layers` layers carrying it over one frame and
//! over `--frames` frames, and prints the CPU time of a property's first call (finding it,
//! compiling the expression and the first evaluation) and of each further call, in µs, with
//! the work units ([`crate::lottie::lowering::expressions`]) charged per thousand calls; then the
//! generated loaders ([`loaders::loader`]) whole: work units per output frame, against the
//! budget. Each figure is the median of `--repeat` runs.

pub mod loaders;

use crate::lottie::lowering::expressions::{self, ExpressionReport};
use crate::os::current_thread_cpu_time;
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct BenchExpressionsArgs {
    /// Layers carrying the measured expression (one property each).
    #[arg(long, default_value_t = 100)]
    pub layers: usize,
    /// Frames of the templates (at `--fps`, which is also the bake's rate).
    #[arg(long, default_value_t = 60)]
    pub frames: u32,
    /// Frame rate of the templates and of the bake.
    #[arg(long, default_value_t = 60)]
    pub fps: u32,
    /// Runs per figure; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Measure only the expressions whose name contains this (and no loader).
    #[arg(long)]
    pub only: Option<String>,
}

pub(crate) fn run(args: BenchExpressionsArgs) -> ExitCode {
    match bench(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// One bake of `template`: its CPU time on this thread and its report.
fn bake_once(template: &Value, fps: u32) -> (Duration, ExpressionReport) {
    let mut json = template.clone();
    let started = current_thread_cpu_time();
    let report = expressions::bake(&mut json, fps);
    (current_thread_cpu_time().saturating_sub(started), report)
}

/// The median CPU time of `repeat` bakes, with the report of the last (the same every run:
/// work units are counted, not timed).
fn bake_median(
    template: &Value,
    fps: u32,
    repeat: usize,
) -> Result<(Duration, ExpressionReport), String> {
    let mut times = Vec::new();
    let mut last = ExpressionReport::default();
    for _ in 0..repeat.max(1) {
        let (time, report) = bake_once(template, fps);
        times.push(time);
        last = report;
    }
    // A budget running out is a figure too (the template is refused); any other warning is
    // a mistake in the generated template.
    if last.budget_breach.is_none() {
        if let Some(warning) = last.warnings.first() {
            return Err(format!(
                "{} warnings, the first: {warning}",
                last.warnings.len()
            ));
        }
    }
    times.sort_unstable();
    Ok((times[times.len() / 2], last))
}

/// What a breach of the budget looks like in a row: nothing, or which budget ran out.
fn breach(report: &ExpressionReport) -> String {
    match report.budget_breach {
        None => String::new(),
        Some(breach) => format!(
            " (over budget: {breach:?}, {} left static)",
            report.warnings.len()
        ),
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn bench(args: &BenchExpressionsArgs) -> Result<(), String> {
    let (layers, frames) = (args.layers.max(1), args.frames.max(2));
    // What every template with expressions pays once: QuickJS started, the prelude and the
    // metering loaded (measured with one expression over one frame).
    let (start, _) = bake_median(
        &loaders::one_expression(&loaders::CASES[0], 1, 1, args.fps),
        args.fps,
        args.repeat,
    )?;
    println!(
        "expression cost per call: {layers} properties each, 1 and {frames} frames at {} fps, \
         CPU time of the baking thread, median of {}; the engine's start ({:.1} ms a template) \
         left out of the first call",
        args.fps,
        args.repeat,
        start.as_secs_f64() * 1e3
    );
    println!("| expression | first call µs | further call µs | work units per 1,000 calls |");
    println!("|---|---|---|---|");
    let chosen = |case: &&loaders::Case| {
        args.only
            .as_ref()
            .is_none_or(|only| case.name.contains(only.as_str()))
    };
    for case in loaders::CASES.iter().filter(chosen) {
        let (one, _) = bake_median(
            &loaders::one_expression(case, layers, 1, args.fps),
            args.fps,
            args.repeat,
        )?;
        let (many, report) = bake_median(
            &loaders::one_expression(case, layers, frames, args.fps),
            args.fps,
            args.repeat,
        )?;
        let further_calls = (layers * (frames as usize - 1)) as f64;
        let calls = (layers * frames as usize) as f64;
        println!(
            "| {} | {:.1} | {:.2} | {:.1}{} |",
            case.name,
            micros(one.saturating_sub(start)) / layers as f64,
            micros(many.saturating_sub(one)) / further_calls,
            report.work_units as f64 * 1000.0 / calls,
            breach(&report)
        );
    }
    if args.only.is_some() {
        return Ok(());
    }
    println!();
    println!(
        "loaders: six expressions a dot, {frames} frames at {} fps",
        args.fps
    );
    println!("| dots | expressions | CPU ms | work units | units per output frame | µs per unit |");
    println!("|---|---|---|---|---|---|");
    for dots in [50, 100] {
        let template = loaders::loader(dots, frames, args.fps);
        let (time, report) = bake_median(&template, args.fps, args.repeat)?;
        println!(
            "| {dots} | {}{} | {:.1} | {} | {:.1} | {:.1} |",
            report.baked,
            breach(&report),
            time.as_secs_f64() * 1e3,
            report.work_units,
            report.work_units as f64 / f64::from(frames),
            micros(time) / report.work_units.max(1) as f64
        );
    }
    println!();
    println!("hogs: one expression on a {frames}-frame template, stopped by its budget");
    println!("| expression | CPU ms | work units | budget | µs per unit | stopped by |");
    println!("|---|---|---|---|---|---|");
    for (name, source) in loaders::HOGS {
        let template = loaders::hog(source, frames, args.fps);
        let (time, report) = bake_median(&template, args.fps, args.repeat)?;
        println!(
            "| {name} | {:.1} | {} | {} | {:.1} | {} |",
            time.as_secs_f64() * 1e3,
            report.work_units,
            report.work_budget,
            micros(time) / report.work_units.max(1) as f64,
            report
                .budget_breach
                .map_or("nothing: it baked".to_owned(), |breach| format!(
                    "{breach:?}"
                ))
        );
    }
    Ok(())
}
