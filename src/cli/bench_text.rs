//! `lottie-render bench-text`: what drawing text costs. For each text template it renders
//! the whole in-process pipeline (render threads + encoder) twice in one run: as is (text
//! layers turned into glyph shapes) and with its text layers hidden (`hd`), and prints the
//! ratio (issue #5's bound: at most 1.3×), each the median of `--repeat` runs.

use crate::lottie::lowering::text::fonts::FontBook;
use crate::render;
use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The corpus's text templates with the most text (MANIFEST.md marks the first for this).
const TEXT_FILES: &[&str] = &[
    "text-multiline-1920x1080.json",
    "text-banner-ad-970x250.json",
];

#[derive(Debug, clap::Args)]
pub struct BenchTextArgs {
    /// Directory holding the templates.
    #[arg(long, default_value = "../shared/corpus")]
    pub corpus: PathBuf,
    /// Output width and height.
    #[arg(long, default_value_t = 1080)]
    pub size: u32,
    #[arg(long, value_enum, default_value_t = Format::Mp4)]
    pub format: Format,
    /// Runs per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

pub(crate) fn run(args: BenchTextArgs) -> ExitCode {
    match bench(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The template with every text layer hidden.
fn hide_text(json: &mut Value) {
    crate::lottie::reading::model::for_each_layer_list(json, |layers| {
        for layer in layers.iter_mut() {
            if layer.get("ty").and_then(Value::as_i64) == Some(5) {
                if let Value::Object(layer) = layer {
                    layer.insert("hd".into(), Value::Bool(true));
                }
            }
        }
    });
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values[values.len() / 2]
}

fn pipeline_wall(bytes: &[u8], spec: OutputSpec, args: &BenchTextArgs) -> Result<Duration, String> {
    let fonts = FontBook::default();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let output = dir
        .path()
        .join(format!("bench.{}", spec.format.extension()));
    let mut walls = Vec::new();
    for _ in 0..args.repeat.max(1) {
        let started = Instant::now();
        let prepared = render::prepare(bytes, &Modifications::default(), spec, &fonts)
            .map_err(|e| e.to_string())?;
        render::run(&prepared, &output, 0, &mut |_, _| {}).map_err(|e| e.to_string())?;
        walls.push(started.elapsed());
    }
    Ok(median(walls))
}

fn bench(args: &BenchTextArgs) -> Result<(), String> {
    let size = Dimension::try_from(args.size).map_err(|e| e.to_string())?;
    let spec = OutputSpec {
        format: args.format,
        fps: Fps::DEFAULT,
        width: size,
        height: size,
        background: None,
        ..Default::default()
    };
    println!(
        "text cost: {}×{} {} at 30 fps, whole pipeline in this process, median of {}",
        args.size,
        args.size,
        args.format.extension(),
        args.repeat
    );
    println!("| template | text layers | with text s | text hidden s | ratio |");
    println!("|---|---|---|---|---|");
    for file in TEXT_FILES {
        let path = args.corpus.join(file);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut json: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let mut converted = json.clone();
        let layers = crate::lottie::lowering::text::convert_text_layers(
            &mut converted,
            &FontBook::default(),
        )
        .map_err(|e| e.to_string())?
        .converted_layers;
        hide_text(&mut json);
        let hidden = serde_json::to_vec(&json).map_err(|e| e.to_string())?;
        let with_text = pipeline_wall(&bytes, spec, args)?;
        let without = pipeline_wall(&hidden, spec, args)?;
        println!(
            "| {file} | {layers} | {:.2} | {:.2} | **{:.2}** |",
            with_text.as_secs_f64(),
            without.as_secs_f64(),
            with_text.as_secs_f64() / without.as_secs_f64()
        );
    }
    Ok(())
}
