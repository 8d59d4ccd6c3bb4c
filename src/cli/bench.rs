//! `lottie-render bench`: measures, in one run and per benchmark template, (a) rlottie
//! rendering every frame on one thread, (b) for each format its conversion on the render
//! threads (one thread) and the encoder alone on pre-converted frames, (c) the whole pipeline,
//! in this process and through a worker: a spare forked from the zygote and handed the job,
//! as the service runs it ([`workers`]), and a fresh one (which also starts and loads its
//! libraries). It prints fps, CPU time, the pipeline's ratio to its bound (issue #2: max(encoder
//! alone, (render + conversion + encoder CPU) ÷ cores)) and the worker's peak RSS, each the
//! median of `--repeat` runs; what a blurred layer costs per frame ([`blur`]); then that its
//! peak RSS stays flat as an animation grows.

mod blur;
mod measure;
mod workers;

use measure::{measure, median_of, Measure};

use crate::encode::Frame;
use crate::encode::{self, yuv, EncoderInput, EncoderSettings, PreparerFactory};
use crate::render::frames::FRAMES_IN_FLIGHT_PER_THREAD;
use crate::render::{self, PreparedRender};
use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};
use rlottie::Bgra;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    /// Runs per figure; the median is reported (the machines are shared and noisy).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Durations (seconds, at 60 fps, MP4) for the peak-RSS-versus-length check.
    #[arg(long = "rss-seconds", value_delimiter = ',', default_value = "10,30")]
    pub rss_seconds: Vec<u32>,
    /// Skip the peak-RSS-versus-length check.
    #[arg(long)]
    pub no_rss: bool,
    /// Only what a blurred layer costs per frame.
    #[arg(long)]
    pub blur_only: bool,
}

pub(crate) fn run(args: BenchArgs) -> ExitCode {
    match execute(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn execute(args: &BenchArgs) -> Result<(), String> {
    // The in-process AV1 encoder logs as the worker's does (SVT-AV1 reads it when it first
    // logs; no other thread runs yet).
    std::env::set_var("SVT_LOG", crate::sandbox::SVT_LOG_ERRORS_ONLY);
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
    let bench = Bench {
        args,
        cores,
        repeat: args.repeat.max(1),
        scratch: tempfile::tempdir()
            .map_err(|e| format!("cannot create a scratch directory: {e}"))?,
        executable: std::env::current_exe().map_err(|e| e.to_string())?,
    };
    println!(
        "lottie-render bench: {}×{} at {} fps, {cores} cores, release={}, median of {} runs per figure",
        args.size,
        args.size,
        args.fps,
        !cfg!(debug_assertions),
        bench.repeat,
    );
    if args.blur_only {
        return bench.blurred_layer();
    }
    let mut first_render: Option<(String, u32, Measure)> = None;
    for file in &files {
        let subject = bench.subject(file)?;
        for &format in &formats {
            bench.format(&subject, format)?;
        }
        if first_render.is_none() {
            first_render = Some((file.clone(), subject.frames, subject.render_cost));
        }
    }
    if let Some(render) = &first_render {
        bench.image_slots(render)?;
    }
    bench.blurred_layer()?;
    if !args.no_rss {
        rss_versus_length(args, &bench.executable, bench.scratch.path())?;
    }
    Ok(())
}

/// What every figure of one run shares.
struct Bench<'a> {
    args: &'a BenchArgs,
    cores: usize,
    /// Runs per figure (the median is printed).
    repeat: usize,
    scratch: tempfile::TempDir,
    executable: PathBuf,
}

/// One benchmark template, rendered once (untimed) for the encoders.
struct Subject {
    bytes: Vec<u8>,
    template_path: PathBuf,
    frames: u32,
    /// Every frame, premultiplied, as the render threads hand them on.
    rendered: Vec<Vec<Bgra>>,
    render_cost: Measure,
}

/// What the parts of one format cost, for the pipeline's bound.
struct PartCosts {
    prepare: Measure,
    encode: Measure,
}

impl Bench<'_> {
    fn spec(&self, format: Format) -> Result<OutputSpec, String> {
        output_spec(format, self.args.size, self.args.fps)
    }

    /// Reads and prepares `file`, prints its single-threaded rendering and keeps its frames.
    fn subject(&self, file: &str) -> Result<Subject, String> {
        let path = self.args.corpus.join(file);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let template_path = std::fs::canonicalize(&path).map_err(|e| e.to_string())?;
        let prepared = render::prepare(
            &bytes,
            &Modifications::default(),
            self.spec(Format::Webm)?,
            &crate::lottie::lowering::text::fonts::FontBook::default(),
        )
        .map_err(|e| format!("{file}: {e}"))?;
        let frames = prepared.frame_count;
        println!("\n{file}: {frames} frames");
        let render_cost = median_of(self.repeat, || {
            measure(|| render_single_threaded(&prepared)).map(|((), cost)| cost)
        })?;
        print_line("render, 1 thread", frames, &render_cost, None);
        // Frames for the encoders, rendered outside any timed part, premultiplied.
        let rendered = keep_all_frames(&prepared)?;
        Ok(Subject {
            bytes,
            template_path,
            frames,
            rendered,
            render_cost,
        })
    }

    /// What one image slot costs the worker (decode, turn upright, fit to a box of the bench
    /// size, encode as the PNG rlottie reads), for a phone photo and a screenshot-sized PNG
    /// and WebP, next to the render of the first template (`render`: its name, frames and
    /// single-threaded cost). A slot's image is fitted once per render.
    fn image_slots(&self, render: &(String, u32, Measure)) -> Result<(), String> {
        use crate::lottie::reading::images;
        use image::{ImageEncoder, RgbImage};
        let (file, frames, render_cost) = render;
        let side = self.args.size;
        println!("\nimage slots: one image fitted to a {side}×{side} box (cover), once per render");
        // Smooth colour fields with detail, so the codecs work as on a photo.
        let photo = |width: u32, height: u32| {
            RgbImage::from_fn(width, height, |x, y| {
                let (fx, fy) = (f64::from(x) / 37.0, f64::from(y) / 53.0);
                let wave = |phase: f64| (127.0 + 120.0 * (fx.sin() * fy.cos() + phase).sin()) as u8;
                image::Rgb([wave(0.0), wave(2.1), wave(4.2)])
            })
        };
        let encode_error = |e: image::ImageError| e.to_string();
        let mut jpeg = Vec::new();
        let source = photo(4032, 3024);
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
            .write_image(source.as_raw(), 4032, 3024, image::ExtendedColorType::Rgb8)
            .map_err(encode_error)?;
        let screenshot = photo(1920, 1080);
        let mut png = Vec::new();
        image::codecs::png::PngEncoder::new(&mut png)
            .write_image(
                screenshot.as_raw(),
                1920,
                1080,
                image::ExtendedColorType::Rgb8,
            )
            .map_err(encode_error)?;
        let mut webp = Vec::new();
        let rgba = image::DynamicImage::ImageRgb8(screenshot).into_rgba8();
        image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
            .write_image(rgba.as_raw(), 1920, 1080, image::ExtendedColorType::Rgba8)
            .map_err(encode_error)?;
        let cases = [
            ("JPEG 4032×3024 (12 MP photo)", jpeg),
            ("PNG 1920×1080", png),
            ("WebP 1920×1080 (lossless)", webp),
        ];
        for (label, bytes) in &cases {
            let cost = median_of(self.repeat, || {
                measure(|| {
                    let pixels = images::fitted(bytes, side, side, crate::spec::Fit::Cover)
                        .map_err(|e| e.to_string())?;
                    images::png_data_uri(&pixels).map_err(|e| e.to_string())
                })
                .map(|(_, cost)| cost)
            })?;
            println!(
                "  {label:<30} {:>8} bytes  wall {:>7.1} ms  cpu {:>7.1} ms  = {:.2}× the rlottie render alone of {file} ({frames} frames, 1 thread, {:.3} s)",
                bytes.len(),
                cost.wall.as_secs_f64() * 1e3,
                cost.cpu.as_secs_f64() * 1e3,
                cost.wall.as_secs_f64() / render_cost.wall.as_secs_f64().max(1e-9),
                render_cost.wall.as_secs_f64(),
            );
        }
        Ok(())
    }

    /// Every figure of `subject` in `format`: its parts, then the pipeline against their bound.
    fn format(&self, subject: &Subject, format: Format) -> Result<(), String> {
        let parts = self.parts(subject, format)?;
        self.pipeline(subject, format, &parts)
    }

    /// The conversion for `format`'s encoder and the encoder alone, each on one thread.
    fn parts(&self, subject: &Subject, format: Format) -> Result<PartCosts, String> {
        let (frames, rendered) = (subject.frames, &subject.rendered);
        let spec = self.spec(format)?;
        let settings = EncoderSettings::new(&spec);
        // The conversion the render threads do for this encoder, on one thread.
        let preparers = encode::preparer_factory(&settings);
        let mut reused = 0;
        let prepare_cost = median_of(self.repeat, || {
            let (held, cost) = measure(|| prepare_recycling(&preparers, rendered))?;
            reused = held;
            Ok(cost)
        })?;
        let mut inputs = prepare_all(&preparers, rendered)?;
        print_line(
            &format!("{} convert, 1 thread", format.extension()),
            frames,
            &prepare_cost,
            None,
        );
        println!(
            "    {:.2} ms/frame; {reused} of {frames} frames identical to the one before, conversion reused",
            prepare_cost.wall.as_secs_f64() * 1000.0 / f64::from(frames.max(1))
        );
        if matches!(
            format,
            Format::Mp4 | Format::Hevc | Format::Av1 | Format::Webm
        ) {
            let kernel_cost = median_of(self.repeat, || {
                measure(|| convert_every_frame(&settings, rendered)).map(|((), cost)| cost)
            })?;
            println!(
                "    {:.2} ms/frame converting every frame ({:?} kernel, no reuse, no copy into the encoder's frame)",
                kernel_cost.wall.as_secs_f64() * 1000.0 / f64::from(frames.max(1)),
                yuv::Kernel::fastest()
            );
        }
        let encode_path = self
            .scratch
            .path()
            .join(format!("encode.{}", format.extension()));
        let encode_cost = median_of(self.repeat, || {
            // Each run consumes its inputs; the next run gets fresh ones (untimed).
            let run_inputs = std::mem::take(&mut inputs);
            let cost = measure(|| {
                let mut encoder =
                    encode::open(&settings, &encode_path).map_err(|e| e.to_string())?;
                for (index, input) in (0u32..).zip(run_inputs) {
                    encoder
                        .encode(Frame { index, input })
                        .map_err(|e| e.to_string())?;
                }
                encoder.finish().map_err(|e| e.to_string())
            })
            .map(|((), cost)| cost);
            inputs = prepare_all(&preparers, rendered)?;
            cost
        })?;
        drop(std::mem::take(&mut inputs));
        print_line(
            &format!("{} encoder alone", format.extension()),
            frames,
            &encode_cost,
            None,
        );
        Ok(PartCosts {
            prepare: prepare_cost,
            encode: encode_cost,
        })
    }

    /// The whole pipeline in this process and in a worker, and its ratio to the bound.
    fn pipeline(&self, subject: &Subject, format: Format, parts: &PartCosts) -> Result<(), String> {
        let (frames, cores, spec) = (subject.frames, self.cores, self.spec(format)?);
        // The pipeline in this process (same code the worker runs), comparable with the
        // parts above, which are measured in this process too.
        let pipeline_path = self
            .scratch
            .path()
            .join(format!("pipeline.{}", format.extension()));
        // Timed apart: the pipeline alone (comparable with the parts), and with the
        // preparation (what a worker does from the template's bytes: the same work).
        let mut prepare_costs = Vec::new();
        let pipeline_cost = median_of(self.repeat, || {
            let (prepared, prepare_cost) = measure(|| {
                render::prepare(
                    &subject.bytes,
                    &Modifications::default(),
                    spec,
                    &crate::lottie::lowering::text::fonts::FontBook::default(),
                )
                .map_err(|e| e.to_string())
            })?;
            prepare_costs.push(prepare_cost);
            measure(|| {
                render::run(&prepared, &pipeline_path, cores, &mut |_, _| {})
                    .map_err(|e| e.to_string())
            })
            .map(|(_, cost)| cost)
        })?;
        print_line(
            &format!("{} pipeline", format.extension()),
            frames,
            &pipeline_cost,
            None,
        );
        prepare_costs.sort_by_key(|cost| cost.wall);
        let prepare = &prepare_costs[prepare_costs.len() / 2];
        let same_work = Measure {
            wall: prepare.wall + pipeline_cost.wall,
            cpu: prepare.cpu + pipeline_cost.cpu,
        };
        print_line(
            &format!("{} prepare + pipeline", format.extension()),
            frames,
            &same_work,
            None,
        );
        // The same on a spare worker, as the service runs a job (timed from the hand-over).
        let mut spares = workers::Spares::start(self.executable.clone());
        let spare_cost = median_of(self.repeat, || {
            let job =
                workers::pipeline_job(subject.template_path.clone(), spec, self.scratch.path());
            let (usage, wall) = spares.run(&job)?;
            Ok(Measure {
                wall,
                cpu: usage.cpu,
            })
        })?;
        drop(spares);
        print_line(
            &format!("{} pipeline on a spare", format.extension()),
            frames,
            &spare_cost,
            None,
        );
        // Through a fresh worker process: adds process start, dynamic loading and
        // first-touch memory; gives the peak RSS.
        let mut peak_rss = 0;
        let worker_cost = median_of(self.repeat, || {
            let (usage, wall) = workers::run_pipeline(
                &self.executable,
                subject.template_path.clone(),
                spec,
                self.scratch.path(),
            )?;
            peak_rss = peak_rss.max(usage.max_rss_bytes);
            Ok(Measure {
                wall,
                cpu: usage.cpu,
            })
        })?;
        print_line(
            &format!("{} pipeline, fresh worker", format.extension()),
            frames,
            &worker_cost,
            Some(peak_rss),
        );
        self.print_ratio(
            subject,
            parts,
            [&pipeline_cost, &same_work, &spare_cost, &worker_cost],
        );
        Ok(())
    }

    /// The pipeline against its bound, and the workers against the same work here.
    fn print_ratio(
        &self,
        subject: &Subject,
        parts: &PartCosts,
        [pipeline_cost, same_work, spare_cost, worker_cost]: [&Measure; 4],
    ) {
        let cores = self.cores;
        // All work the pipeline does, spread over the cores: rendering, the conversion
        // (on the render threads) and encoding.
        let (render_cost, prepare_cost, encode_cost) =
            (&subject.render_cost, &parts.prepare, &parts.encode);
        let work = render_cost.cpu + prepare_cost.cpu + encode_cost.cpu;
        let cpu_bound = work.as_secs_f64() / cores as f64;
        let bound = encode_cost.wall.as_secs_f64().max(cpu_bound);
        println!(
            "    ratio {:.2} = pipeline {:.2} s / max(encoder alone {:.2} s, (render {:.2} + convert {:.2} + encode {:.2} cpu s) / {cores} cores = {:.2} s)   [target ≤ 1.20]; on a spare {:+.1} % against prepare + pipeline here [target ≤ +10 %], a fresh worker adds {:+.2} s",
            pipeline_cost.wall.as_secs_f64() / bound,
            pipeline_cost.wall.as_secs_f64(),
            encode_cost.wall.as_secs_f64(),
            render_cost.cpu.as_secs_f64(),
            prepare_cost.cpu.as_secs_f64(),
            encode_cost.cpu.as_secs_f64(),
            cpu_bound,
            (spare_cost.wall.as_secs_f64() / same_work.wall.as_secs_f64() - 1.0) * 100.0,
            worker_cost.wall.as_secs_f64() - same_work.wall.as_secs_f64(),
        );
    }
}

fn output_spec(format: Format, size: u32, fps: u32) -> Result<OutputSpec, String> {
    let dimension = Dimension::try_from(size).map_err(|e| e.to_string())?;
    Ok(OutputSpec {
        format,
        fps: Fps::try_from(fps).map_err(|e| e.to_string())?,
        width: dimension,
        height: dimension,
        background: None,
        ..Default::default()
    })
}

/// rlottie alone: every frame on one thread into one reused surface, as a render thread of
/// the pipeline does.
fn render_single_threaded(prepared: &PreparedRender) -> Result<(), String> {
    let mut renderer = prepared.source.renderer().map_err(|e| e.to_string())?;
    for index in 0..prepared.source.frame_count {
        renderer.render(index);
    }
    Ok(())
}

/// Every frame converted for an encoder, on this thread, kept (the encoder's input).
fn prepare_all(
    preparers: &PreparerFactory,
    rendered: &[Vec<Bgra>],
) -> Result<Vec<EncoderInput>, String> {
    let mut preparer = preparers().map_err(|e| e.to_string())?;
    (0..rendered.len())
        .map(|index| {
            let previous = index
                .checked_sub(1)
                .map(|before| rendered[before].as_slice());
            preparer
                .prepare(&rendered[index], previous, None)
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Every frame converted for an encoder on this thread as a render thread converts them: each
/// beside the frame before it (a held frame is told from it) and into the buffers of the frame
/// the encoder would have handed back by then. How many held frames reused the conversion.
fn prepare_recycling(preparers: &PreparerFactory, rendered: &[Vec<Bgra>]) -> Result<u64, String> {
    let mut preparer = preparers().map_err(|e| e.to_string())?;
    let mut in_flight = std::collections::VecDeque::new();
    for (index, frame) in rendered.iter().enumerate() {
        let previous = index
            .checked_sub(1)
            .map(|before| rendered[before].as_slice());
        let reuse = if in_flight.len() >= FRAMES_IN_FLIGHT_PER_THREAD {
            in_flight.pop_front()
        } else {
            None
        };
        let input = preparer
            .prepare(frame, previous, reuse)
            .map_err(|e| e.to_string())?;
        in_flight.push_back(input);
    }
    Ok(preparer.held_frames_reused())
}

/// The video conversion alone (`encode::yuv`), every frame into the same planes.
fn convert_every_frame(settings: &EncoderSettings, rendered: &[Vec<Bgra>]) -> Result<(), String> {
    let (width, height) = settings.encoded_size();
    let alpha = encode::video::alpha_handling(settings);
    let mut planes = yuv::YuvPlanes::new(
        width as usize,
        height as usize,
        alpha == yuv::AlphaHandling::Straight,
    );
    for frame in rendered {
        yuv::convert(
            frame,
            settings.width as usize,
            alpha,
            planes.as_mut(),
            yuv::Kernel::fastest(),
        );
    }
    Ok(())
}

fn keep_all_frames(prepared: &PreparedRender) -> Result<Vec<Vec<Bgra>>, String> {
    let mut renderer = prepared.source.renderer().map_err(|e| e.to_string())?;
    Ok((0..prepared.source.frame_count)
        .map(|index| renderer.render(index).to_vec())
        .collect())
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
        let (usage, wall) = workers::run_pipeline(executable, path, spec, scratch)?;
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
