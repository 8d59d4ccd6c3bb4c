//! `lottie-render bench`: measures, in one run and per benchmark template, (a) rlottie
//! rendering every frame on one thread, (b) each encoder alone on those pre-rendered
//! frames, (c) the whole pipeline through a real worker process, and prints fps, CPU time,
//! the pipeline's ratio to its bound and peak RSS. The bound (issue #2's acceptance) is
//! max(encoder alone, (render CPU + encoder CPU) ÷ cores): the pipeline cannot beat the
//! encoder, nor do the total work faster than the cores allow. Then it checks that the
//! pipeline's peak RSS stays flat as an animation gets longer.

use crate::encode::{self, EncoderSettings};
use crate::os::{own_usage, ResourceUsage};
use crate::render::frames::Frame;
use crate::render::pixels::convert_in_place;
use crate::render::{self, PreparedRender};
use crate::sandbox::protocol::WorkerJob;
use crate::sandbox::{self, CancelToken, SandboxSettings};
use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The corpus files MANIFEST.md marks `bench` for rendering (light, medium, heavy).
const BENCH_FILES: &[&str] = &[
    "simple-bouncy-ball-60fps.json",
    "gradient-emoji-named-fills-24fps.json",
    "heavy-tractor-263-layers.json",
];

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Directory holding the benchmark templates.
    #[arg(long, default_value = "../shared/corpus")]
    pub corpus: PathBuf,
    /// Templates to measure (file names in the corpus); default: the bench set.
    #[arg(long = "file")]
    pub files: Vec<String>,
    /// Output width and height.
    #[arg(long, default_value_t = 1080)]
    pub size: u32,
    /// Output frame rate.
    #[arg(long, default_value_t = 30)]
    pub fps: u32,
    /// Formats to measure.
    #[arg(long = "format", value_enum)]
    pub formats: Vec<Format>,
    /// Durations (seconds, at 60 fps, MP4) for the peak-RSS-versus-length check; none skips it.
    #[arg(long = "rss-seconds", value_delimiter = ',', default_value = "10,30")]
    pub rss_seconds: Vec<u32>,
}

pub fn run(args: BenchArgs) -> ExitCode {
    match execute(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

struct Measure {
    wall: Duration,
    cpu: Duration,
}

fn measure<T>(work: impl FnOnce() -> Result<T, String>) -> Result<(T, Measure), String> {
    let (cpu_before, started) = (own_usage().cpu, Instant::now());
    let value = work()?;
    Ok((
        value,
        Measure {
            wall: started.elapsed(),
            cpu: own_usage().cpu.saturating_sub(cpu_before),
        },
    ))
}

fn execute(args: &BenchArgs) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let files: Vec<String> = if args.files.is_empty() {
        BENCH_FILES.iter().map(|f| (*f).to_owned()).collect()
    } else {
        args.files.clone()
    };
    let formats = if args.formats.is_empty() {
        vec![Format::Mp4, Format::Webm, Format::Gif]
    } else {
        args.formats.clone()
    };
    let scratch =
        tempfile::tempdir().map_err(|e| format!("cannot create a scratch directory: {e}"))?;
    let executable = std::env::current_exe().map_err(|e| e.to_string())?;
    println!(
        "lottie-render bench: {}×{} at {} fps, {cores} cores, release={}",
        args.size,
        args.size,
        args.fps,
        !cfg!(debug_assertions)
    );
    for file in &files {
        let path = args.corpus.join(file);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let spec_for = |format| output_spec(format, args.size, args.fps);
        let prepared = render::prepare(
            &bytes,
            &Modifications::default(),
            spec_for(Format::Webm)?,
            &args.corpus,
        )
        .map_err(|e| format!("{file}: {e}"))?;
        let frames = prepared.frame_count;
        println!("\n{file}: {frames} frames");
        let (rendered, render_cost) = measure(|| render_single_threaded(&prepared))?;
        print_line("render, 1 thread", frames, &render_cost, None);
        for &format in &formats {
            let spec = spec_for(format)?;
            let settings = EncoderSettings::new(&spec);
            let layout = encode::pixel_layout(format, spec.background_or_default());
            // Convert outside the timed part: in the pipeline this runs on render threads.
            let converted: Vec<Frame> = rendered
                .iter()
                .map(|frame| {
                    let mut pixels = frame.pixels.clone();
                    convert_in_place(&mut pixels, layout);
                    Frame {
                        index: frame.index,
                        width: frame.width,
                        height: frame.height,
                        pixels,
                    }
                })
                .collect();
            let encode_path = scratch
                .path()
                .join(format!("encode.{}", format.extension()));
            let ((), encode_cost) = measure(|| {
                let mut encoder =
                    encode::open(&settings, &encode_path).map_err(|e| e.to_string())?;
                for frame in &converted {
                    encoder.encode(frame).map_err(|e| e.to_string())?;
                }
                encoder.finish().map_err(|e| e.to_string())
            })?;
            drop(converted);
            print_line(
                &format!("{} encoder alone", format.extension()),
                frames,
                &encode_cost,
                None,
            );
            let template_path = std::fs::canonicalize(&path).map_err(|e| e.to_string())?;
            let run = run_pipeline(&executable, template_path, spec, scratch.path())?;
            let pipeline_cost = Measure {
                wall: run.1,
                cpu: run.0.cpu,
            };
            print_line(
                &format!("{} pipeline (worker)", format.extension()),
                frames,
                &pipeline_cost,
                Some(run.0.max_rss_bytes),
            );
            let cpu_bound = (render_cost.cpu + encode_cost.cpu).as_secs_f64() / cores as f64;
            let bound = encode_cost.wall.as_secs_f64().max(cpu_bound);
            println!(
                "    ratio {:.2} = pipeline {:.2} s / max(encoder alone {:.2} s, (render cpu {:.2} s + encoder cpu {:.2} s) / {cores} cores = {:.2} s)   [target ≤ 1.20]",
                pipeline_cost.wall.as_secs_f64() / bound,
                pipeline_cost.wall.as_secs_f64(),
                encode_cost.wall.as_secs_f64(),
                render_cost.cpu.as_secs_f64(),
                encode_cost.cpu.as_secs_f64(),
                cpu_bound,
            );
        }
    }
    if !args.rss_seconds.is_empty() {
        rss_versus_length(args, &executable, scratch.path())?;
    }
    Ok(())
}

fn output_spec(format: Format, size: u32, fps: u32) -> Result<OutputSpec, String> {
    let dimension = Dimension::try_from(size).map_err(|e| e.to_string())?;
    Ok(OutputSpec {
        format,
        fps: Fps::try_from(fps).map_err(|e| e.to_string())?,
        width: dimension,
        height: dimension,
        background: None,
    })
}

fn render_single_threaded(prepared: &PreparedRender) -> Result<Vec<Frame>, String> {
    let source = &prepared.source;
    let mut animation = source.load().map_err(|e| e.to_string())?;
    // Frames stay premultiplied here; each encoder's conversion is applied per format.
    let raw = render::frames::FrameSource {
        layout: crate::render::pixels::PixelLayout::Premultiplied,
        ..source.clone()
    };
    Ok((0..source.frame_count)
        .map(|index| raw.render(&mut animation, index))
        .collect())
}

fn run_pipeline(
    executable: &Path,
    template_path: PathBuf,
    spec: OutputSpec,
    scratch: &Path,
) -> Result<(ResourceUsage, Duration), String> {
    let job = WorkerJob {
        template_path,
        modifications: Modifications::default(),
        output: spec,
        output_path: scratch.join(format!("pipeline.{}", spec.format.extension())),
        threads: 0,
    };
    let settings = SandboxSettings {
        executable: executable.to_path_buf(),
        memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
        deadline: sandbox::MAX_DEADLINE,
    };
    let run = sandbox::run_worker(&job, &settings, &CancelToken::default(), &mut |_| {});
    run.result.map_err(|failure| failure.to_string())?;
    Ok((run.usage, run.wall))
}

fn print_line(label: &str, frames: u32, cost: &Measure, rss: Option<u64>) {
    let fps = f64::from(frames) / cost.wall.as_secs_f64().max(1e-9);
    let rss = rss
        .map(|bytes| format!("  peak RSS {:.0} MiB", bytes as f64 / 1048576.0))
        .unwrap_or_default();
    println!(
        "  {label:<28} wall {:>7.2} s  cpu {:>7.2} s  {fps:>7.1} fps{rss}",
        cost.wall.as_secs_f64(),
        cost.cpu.as_secs_f64()
    );
}

/// Peak RSS of 1080×1080 60 fps MP4 pipelines of growing length: the light bench template
/// with its timeline stretched (the last pose holds), so only the length changes.
fn rss_versus_length(args: &BenchArgs, executable: &Path, scratch: &Path) -> Result<(), String> {
    let source = args.corpus.join(BENCH_FILES[0]);
    let bytes = std::fs::read(&source).map_err(|e| format!("{}: {e}", source.display()))?;
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    println!(
        "\npeak RSS versus length ({}, {}×{}, mp4, 60 fps):",
        BENCH_FILES[0], args.size, args.size
    );
    for &seconds in &args.rss_seconds {
        let mut stretched = json.clone();
        let frame_rate = stretched.get("fr").and_then(Value::as_f64).unwrap_or(60.0);
        let out_point = Value::from(frame_rate * f64::from(seconds));
        stretched["op"] = out_point.clone();
        if let Some(layers) = stretched.get_mut("layers").and_then(Value::as_array_mut) {
            for layer in layers {
                layer["op"] = out_point.clone();
            }
        }
        let path = scratch.join(format!("stretched-{seconds}s.json"));
        std::fs::write(&path, stretched.to_string()).map_err(|e| e.to_string())?;
        let spec = output_spec(Format::Mp4, args.size, 60)?;
        let (usage, wall) = run_pipeline(executable, path, spec, scratch)?;
        println!(
            "  {seconds:>4} s ({:>5} frames): wall {:>7.2} s  cpu {:>7.2} s  peak RSS {:.0} MiB",
            seconds * 60,
            wall.as_secs_f64(),
            usage.cpu.as_secs_f64(),
            usage.max_rss_bytes as f64 / 1048576.0
        );
    }
    Ok(())
}
