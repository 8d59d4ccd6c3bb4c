//! `lottie-render render TEMPLATE.json --format … -o OUT`: one render through the same
//! worker-process sandbox the service uses, with a progress bar on a terminal and plain
//! progress lines otherwise. The output appears only when complete (temp file + rename).

use super::exit;
use crate::error::ErrorClass;
use crate::lottie::Template;
use crate::sandbox::protocol::{WorkerEvent, WorkerJob};
use crate::sandbox::{self, CancelToken, FailureKind, SandboxSettings};
use crate::spec::{Dimension, Fit, Format, Fps, ImageChoice, Modifications, OutputSpec, Rgba};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The Lottie JSON template.
    pub template: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output frame rate (30 or 60).
    #[arg(long, default_value_t = 30)]
    pub fps: u32,
    /// Output width in pixels (100..=1920); the animation is scaled to fit, centred.
    #[arg(long, default_value_t = 1080)]
    pub width: u32,
    /// Output height in pixels (100..=1920).
    #[arg(long, default_value_t = 1080)]
    pub height: u32,
    #[command(flatten)]
    pub slots: SlotArgs,
    #[command(flatten)]
    pub timing: super::timing::TimingArgs,
    /// A theme of the template (a dotLottie's): its slot values apply first, the slot
    /// flags override them.
    #[arg(long, value_name = "NAME")]
    pub theme: Option<String>,
    /// The animation of a dotLottie archive to render, by its manifest id (default: the
    /// archive's own choice).
    #[arg(long, value_name = "ID")]
    pub animation: Option<String>,
    /// A font for text layers, `FAMILY=FILE.ttf` (matched against the template's font
    /// families; the closest bundled face otherwise). Repeatable.
    #[arg(long = "font", value_name = "FAMILY=FILE")]
    pub fonts: Vec<String>,
    /// Where to write the output.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Render threads (default: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Work budget of the render, seconds: its CPU time (the wall clock only ends a worker that
    /// makes no progress; default: derived from frames, size and images).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Address-space limit of the worker process, MiB.
    #[arg(long, default_value_t = sandbox::DEFAULT_WORKER_MEMORY_BYTES / (1024 * 1024))]
    pub memory_limit_mb: u64,
}

/// The slot values and the background of a render, as `render` and `submit` both take them.
#[derive(Debug, clap::Args)]
pub struct SlotArgs {
    /// Colour slot value, `ID=#RRGGBB` or `ID=#RRGGBBAA` (alpha sets the fill's opacity). Repeatable.
    #[arg(long = "color", value_name = "ID=#RRGGBB[AA]")]
    pub colors: Vec<String>,
    /// Text slot value, `ID=TEXT` (`\n` in TEXT starts a new line). Repeatable.
    #[arg(long = "text", value_name = "ID=TEXT")]
    pub texts: Vec<String>,
    /// Image slot value, `ID=FILE` or `ID=FILE:cover|contain|fill` (PNG, JPEG or WebP, at
    /// most 10 MiB; cover when no fit is given). Repeatable.
    #[arg(long = "image", value_name = "ID=FILE[:FIT]")]
    pub images: Vec<String>,
    /// Scalar slot value, `ID=NUMBER` (an opacity 0..100, a rotation, a stroke width).
    /// Repeatable.
    #[arg(long = "scalar", value_name = "ID=NUMBER")]
    pub scalars: Vec<String>,
    /// Vector slot value, `ID=X,Y` or `ID=X,Y,Z` (a position, a scale in percent). Repeatable.
    #[arg(long = "vector", value_name = "ID=X,Y[,Z]")]
    pub vectors: Vec<String>,
    /// Gradient slot value, `ID=OFFSET:#RRGGBB[AA],OFFSET:#RRGGBB[AA],…` (offsets 0..1).
    /// Repeatable.
    #[arg(long = "gradient", value_name = "ID=OFFSET:#RRGGBB,…")]
    pub gradients: Vec<String>,
    /// Background for MP4 (which has no alpha), `#RRGGBB`; white when unset.
    #[arg(long, value_name = "#RRGGBB")]
    pub background: Option<String>,
}

/// One `--image` argument.
pub(crate) struct ImageArg {
    pub slot: String,
    pub file: PathBuf,
    pub fit: Fit,
}

impl SlotArgs {
    /// The modifications and the background, or the usage error in them.
    pub(crate) fn parse(&self) -> Result<(Modifications, Option<Rgba>), String> {
        let mut modifications = parse_modifications(&self.colors, &self.texts)?;
        for pair in &self.scalars {
            let (id, value) = split_pair("--scalar", pair)?;
            let value = value
                .trim()
                .parse::<f64>()
                .map_err(|e| format!("--scalar {pair}: {e}"))?;
            modifications.scalars.insert(id, value);
        }
        for pair in &self.vectors {
            let (id, value) = split_pair("--vector", pair)?;
            let values = value
                .split(',')
                .map(|number| number.trim().parse::<f64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--vector {pair}: {e}"))?;
            modifications.vectors.insert(id, values);
        }
        for pair in &self.gradients {
            let (id, value) = split_pair("--gradient", pair)?;
            let stops = value
                .split(',')
                .map(|stop| {
                    let (offset, color) = stop
                        .split_once(':')
                        .ok_or_else(|| format!("--gradient {pair}: expected OFFSET:#RRGGBB"))?;
                    Ok(crate::lottie::slots::GradientStop {
                        offset: offset
                            .trim()
                            .parse()
                            .map_err(|e| format!("--gradient {pair}: {e}"))?,
                        color: Rgba::parse_hex(color.trim())
                            .map_err(|e| format!("--gradient {pair}: {e}"))?,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            modifications.gradients.insert(id, stops);
        }
        let background = self
            .background
            .as_deref()
            .map(Rgba::parse_hex)
            .transpose()
            .map_err(|e| format!("--background: {e}"))?;
        Ok((modifications, background))
    }

    /// The `--image` arguments, or the usage error in them.
    pub(crate) fn image_args(&self) -> Result<Vec<ImageArg>, String> {
        self.images
            .iter()
            .map(|pair| {
                let (slot, value) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--image {pair}: expected ID=FILE[:FIT]"))?;
                let (file, fit) = match value.rsplit_once(':') {
                    Some((file, "cover")) => (file, Fit::Cover),
                    Some((file, "contain")) => (file, Fit::Contain),
                    Some((file, "fill")) => (file, Fit::Fill),
                    _ => (value, Fit::Cover),
                };
                Ok(ImageArg {
                    slot: slot.to_owned(),
                    file: PathBuf::from(file),
                    fit,
                })
            })
            .collect()
    }
}

/// The `--image` files by SHA-256, each named in `modifications.images` under its slot, and
/// the megapixels they decode to (for the deadline, as the service counts them).
fn image_files(
    slots: &SlotArgs,
    modifications: &mut Modifications,
) -> Result<(std::collections::BTreeMap<String, PathBuf>, f64), String> {
    let mut images = std::collections::BTreeMap::new();
    let mut megapixels = 0.0;
    for image in slots.image_args()? {
        let bytes = std::fs::read(&image.file)
            .map_err(|e| format!("--image {}: {e}", image.file.display()))?;
        megapixels += crate::lottie::reading::images::decoded_pixels(
            &crate::spec::ImageSource::Sent(bytes.clone().into()),
        ) as f64
            / 1e6;
        let sha256 = crate::lottie::reading::template::hex_sha256(&bytes);
        let file = std::fs::canonicalize(&image.file)
            .map_err(|e| format!("--image {}: {e}", image.file.display()))?;
        modifications.images.insert(
            image.slot,
            ImageChoice {
                sha256: sha256.clone(),
                fit: image.fit,
            },
        );
        images.insert(sha256, file);
    }
    Ok((images, megapixels))
}

pub(crate) fn run(args: RenderArgs) -> ExitCode {
    match execute(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::USAGE)
        }
    }
}

/// `Err` is a usage error; render failures are reported and turned into exit codes here.
fn execute(args: &RenderArgs) -> Result<ExitCode, String> {
    let fps = Fps::try_from(args.fps).map_err(|e| e.to_string())?;
    let width = Dimension::try_from(args.width).map_err(|e| format!("--width {e}"))?;
    let height = Dimension::try_from(args.height).map_err(|e| format!("--height {e}"))?;
    let (mut modifications, background) = args.slots.parse()?;
    let (images, image_megapixels) = image_files(&args.slots, &mut modifications)?;
    let mut spec = OutputSpec {
        format: args.format,
        fps,
        width,
        height,
        background,
        quality: args.timing.quality,
        ..Default::default()
    };
    let template_path = std::fs::canonicalize(&args.template)
        .map_err(|e| format!("{}: {e}", args.template.display()))?;
    // Parsing here (our own code, bounded) fails fast on a bad template and gives the frame
    // count for the deadline; the worker parses again and is what touches rlottie.
    let bytes =
        std::fs::read(&template_path).map_err(|e| format!("{}: {e}", args.template.display()))?;
    let template = match Template::parse_animation(&bytes, args.animation.as_deref()) {
        Ok(template) => template,
        Err(error) => {
            eprintln!("error: {}: {error}", args.template.display());
            return Ok(ExitCode::from(exit::DETERMINISTIC as u8));
        }
    };
    if let Err(error) = resolve_times(&mut spec, &args.timing, &template) {
        eprintln!("error: {error}");
        return Ok(ExitCode::from(exit::DETERMINISTIC as u8));
    }
    if let Some(name) = &args.theme {
        // What the service's admission applies: the theme's values its slots take.
        let slots = crate::lottie::slots::discover(&template.json);
        let (themes, _) = crate::lottie::report::valid_themes(&template.themes, &slots);
        let theme = themes.get(name).ok_or_else(|| {
            let names: Vec<&String> = themes.keys().collect();
            format!("--theme {name}: the template has no such theme; its themes: {names:?}")
        })?;
        modifications = theme.overridden_by(modifications);
    }
    let frames = crate::spec::output::frames(&spec, template.duration_seconds());
    let image_megapixels = image_megapixels + filter_megapixels(&template, &spec, frames);
    let deadline = args
        .timeout
        .map(Duration::from_secs)
        .unwrap_or_else(|| sandbox::default_deadline(&spec, frames, image_megapixels));
    let settings = SandboxSettings {
        executable: std::env::current_exe()
            .map_err(|e| format!("cannot find own executable: {e}"))?,
        memory_bytes: args.memory_limit_mb.saturating_mul(1024 * 1024),
        deadline,
    };
    let partial = partial_beside(&args.output)?;
    let mut fonts = std::collections::BTreeMap::new();
    for pair in &args.fonts {
        let (family, file) = pair
            .split_once('=')
            .ok_or_else(|| format!("--font {pair}: expected FAMILY=FILE"))?;
        let file = std::fs::canonicalize(file).map_err(|e| format!("--font {file}: {e}"))?;
        fonts.insert(family.to_owned(), file);
    }
    let poster = match &args.timing.poster {
        Some(path) => Some(partial_beside(path)?),
        None => None,
    };
    let job = WorkerJob {
        template_path,
        modifications,
        output: spec,
        output_path: partial.path().to_path_buf(),
        poster_path: poster.as_ref().map(|partial| partial.path().to_path_buf()),
        threads: args.threads,
        fonts,
        images,
        animation: args.animation.clone(),
        traceparent: None,
    };
    let mut progress = Progress::new(frames);
    let result = sandbox::run_worker(&job, &settings, &CancelToken::default(), &mut |event| {
        progress.update(event)
    })
    .result;
    progress.finish();
    match result {
        Ok(output) => {
            partial
                .persist(&args.output)
                .map_err(|e| format!("cannot write {}: {}", args.output.display(), e.error))?;
            persist_poster(poster, args.timing.poster.as_deref(), &output)?;
            eprintln!(
                "wrote {} ({} bytes, {}×{}, {} frames at {} fps, {:.2} s)",
                display(&args.output),
                output.size_bytes,
                output.width,
                output.height,
                output.frame_count,
                output.fps,
                output.duration_seconds
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            eprintln!("error: {}: {failure}", args.template.display());
            let code = match (&failure.kind, failure.class) {
                (FailureKind::Crashed { .. }, _) => exit::CRASHED,
                (_, ErrorClass::Deterministic) => exit::DETERMINISTIC as u8,
                (_, ErrorClass::Transient) => exit::TRANSIENT as u8,
            };
            Ok(ExitCode::from(code))
        }
    }
}

/// The still's time, the segment, the loop count and the poster of `timing`, against this
/// template's duration and markers, into `spec`, as the service's admission resolves them.
fn resolve_times(
    spec: &mut OutputSpec,
    timing: &super::timing::TimingArgs,
    template: &Template,
) -> Result<(), crate::spec::SpecError> {
    let (markers, _) = crate::lottie::report::markers(template);
    let animation = crate::spec::timing::Animation {
        duration_seconds: template.duration_seconds(),
        markers: &markers,
    };
    let resolved =
        crate::spec::timing::resolve(&timing.request(), spec.format, spec.fps.get(), &animation)?;
    spec.window = resolved.window;
    spec.loop_count = resolved.loop_count;
    spec.poster = resolved.poster;
    Ok(())
}

/// Renames the poster's temporary file to `path` when the render wrote one.
fn persist_poster(
    partial: Option<tempfile::NamedTempFile>,
    path: Option<&Path>,
    output: &crate::render::OutputInfo,
) -> Result<(), String> {
    if let (Some(partial), Some(path), Some(info)) = (partial, path, &output.poster) {
        partial
            .persist(path)
            .map_err(|e| format!("cannot write {}: {}", path.display(), e.error))?;
        eprintln!(
            "wrote {} (poster of frame {}, {} bytes)",
            display(path),
            info.frame,
            info.size_bytes
        );
    }
    Ok(())
}

/// A temporary file beside `path`, renamed to it once complete.
fn partial_beside(path: &Path) -> Result<tempfile::NamedTempFile, String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    tempfile::Builder::new()
        .prefix(".lottie-render-")
        .suffix(".partial")
        .tempfile_in(&dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// `ID=VALUE` of the flag `flag`.
fn split_pair(flag: &str, pair: &str) -> Result<(String, String), String> {
    let (id, value) = pair
        .split_once('=')
        .ok_or_else(|| format!("{flag} {pair}: expected ID=VALUE"))?;
    Ok((id.to_owned(), value.to_owned()))
}

/// `ID=VALUE` pairs into modifications; `\n` in texts becomes a line break.
pub(crate) fn parse_modifications(
    colors: &[String],
    texts: &[String],
) -> Result<Modifications, String> {
    let mut modifications = Modifications::default();
    for pair in colors {
        let (id, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--color {pair}: expected ID=#RRGGBB"))?;
        let color = Rgba::parse_hex(value).map_err(|e| format!("--color {id}: {e}"))?;
        modifications.colors.insert(id.to_owned(), color);
    }
    for pair in texts {
        let (id, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--text {pair}: expected ID=TEXT"))?;
        modifications
            .texts
            .insert(id.to_owned(), value.replace("\\n", "\n"));
    }
    Ok(modifications)
}

/// A progress bar on a terminal; otherwise a plain line every tenth of the frames.
pub(crate) enum Progress {
    Bar(ProgressBar),
    Lines { total: u32, next_report: u32 },
}

impl Progress {
    pub(crate) fn new(total: u32) -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(u64::from(total));
            if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} frames ({per_sec}, eta {eta})") {
                bar.set_style(style);
            }
            Progress::Bar(bar)
        } else {
            Progress::Lines {
                total,
                next_report: 0,
            }
        }
    }

    fn update(&mut self, event: &WorkerEvent) {
        if let WorkerEvent::Progress {
            frames_done,
            frames_total,
        } = *event
        {
            self.frames(frames_done, frames_total);
        }
    }

    pub(crate) fn frames(&mut self, frames_done: u32, frames_total: u32) {
        match self {
            Progress::Bar(bar) => {
                bar.set_length(u64::from(frames_total));
                bar.set_position(u64::from(frames_done));
            }
            Progress::Lines { total, next_report } => {
                *total = frames_total;
                if frames_done >= *next_report {
                    eprintln!("rendered {frames_done}/{frames_total} frames");
                    *next_report = frames_done + (*total / 10).max(1);
                }
            }
        }
    }

    pub(crate) fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Megapixels the blurs and shadows drawn on pixels are charged, as admission charges them
/// (`jobs::admission`).
fn filter_megapixels(template: &Template, spec: &OutputSpec, frames: u32) -> f64 {
    let filters = template
        .json
        .get("layers")
        .and_then(serde_json::Value::as_array)
        .map_or(0, |layers| {
            crate::lottie::lowering::effects::rendered::rendered_filter_count(layers)
        });
    crate::render::layer_effects::charged_megapixels(
        filters,
        spec.width.get(),
        spec.height.get(),
        frames,
    )
}
