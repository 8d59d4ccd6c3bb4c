//! Shared test helpers: corpus paths, running a render through the worker sandbox, probing
//! and decoding outputs with the real ffprobe/ffmpeg.

use lottie_render::encode::pixels::{convert, PixelLayout};
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::render::OutputInfo;
use lottie_render::sandbox::protocol::WorkerJob;
use lottie_render::sandbox::{self, CancelToken, SandboxSettings, WorkerFailure};
use lottie_render::spec::{Dimension, Format, Fps, Modifications, OutputSpec, Rgba};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus")
        .join(name)
}

pub fn executable() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lottie-render"))
}

pub fn spec(format: Format, fps: u32, width: u32, height: u32) -> OutputSpec {
    OutputSpec {
        format,
        fps: Fps::try_from(fps).unwrap(),
        width: Dimension::try_from(width).unwrap(),
        height: Dimension::try_from(height).unwrap(),
        background: None,
        ..Default::default()
    }
}

/// Frames `indices` of `template` as the library renders them (rlottie in this process: no
/// codec, no worker) for `output`, straight RGBA.
pub fn library_frames(
    template: &[u8],
    modifications: &Modifications,
    fonts: &FontBook,
    output: OutputSpec,
    indices: impl IntoIterator<Item = u32>,
) -> Vec<Vec<u8>> {
    let prepared = lottie_render::render::prepare(template, modifications, output, fonts)
        .expect("the template prepares");
    let mut renderer = prepared.source.renderer().expect("rlottie loads it");
    indices
        .into_iter()
        .map(|index| {
            let premultiplied = renderer.render(index);
            let mut rgba = vec![0u8; premultiplied.len() * 4];
            convert(premultiplied, &mut rgba, PixelLayout::StraightRgba);
            rgba
        })
        .collect()
}

/// Frame `index` of `template` as the library renders it at `width`×`height` (30 fps, no
/// modifications, the bundled fonts), straight RGBA.
pub fn library_frame(template: &[u8], (width, height): (u32, u32), index: u32) -> Vec<u8> {
    let output = spec(Format::Webm, 30, width, height);
    let fonts = FontBook::default();
    library_frames(template, &Modifications::default(), &fonts, output, [index]).remove(0)
}

/// A template of one text layer, 30 fps, `size` and `frames` long: the text at `position`
/// with its keyframe-0 `document` (the text layer's `"s"`) in the `fonts.list` entry `font`,
/// with `animators`.
pub fn text_layer_template(
    size: (u32, u32),
    frames: u32,
    font: serde_json::Value,
    position: [f64; 2],
    document: serde_json::Value,
    animators: serde_json::Value,
) -> Vec<u8> {
    serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": frames, "w": size.0, "h": size.1,
        "fonts": {"list": [font]},
        "layers": [{
            "ddd": 0, "ind": 1, "ty": 5, "nm": "title", "sr": 1,
            "ks": {
                "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 0, "k": [position[0], position[1], 0]},
                "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}
            },
            "ip": 0, "op": frames, "st": 0, "bm": 0,
            "t": {"d": {"k": [{"s": document, "t": 0}]}, "p": {},
                "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}}, "a": animators}
        }]
    })
    .to_string()
    .into_bytes()
}

/// The `fonts.list` entry "Sans": DejaVu Sans Book.
pub fn sans_font() -> serde_json::Value {
    serde_json::json!({"fName": "Sans", "fFamily": "DejaVu Sans", "fStyle": "Book", "ascent": 75})
}

pub fn with_background(mut spec: OutputSpec, background: Rgba) -> OutputSpec {
    spec.background = Some(background);
    spec
}

/// Renders through a real worker process, as the service and the CLI do.
pub fn render_in_worker(
    template: &Path,
    modifications: Modifications,
    output: OutputSpec,
    dir: &Path,
    deadline: Duration,
) -> (PathBuf, Result<OutputInfo, WorkerFailure>) {
    let (path, run) = run_in_worker(
        template,
        modifications,
        Default::default(),
        output,
        dir,
        deadline,
    );
    (path, run.result)
}

/// [`render_in_worker`] with replacement images (SHA-256 → file, as the job's pin stages
/// them), answering the whole run: the result and the worker's resource usage.
pub fn run_in_worker(
    template: &Path,
    modifications: Modifications,
    images: std::collections::BTreeMap<String, PathBuf>,
    output: OutputSpec,
    dir: &Path,
    deadline: Duration,
) -> (PathBuf, sandbox::WorkerRun) {
    let output_path = dir.join(format!("out-{}.{}", unique(), output.format.extension()));
    let job = WorkerJob {
        template_path: template.to_path_buf(),
        modifications,
        output,
        output_path: output_path.clone(),
        poster_path: Some(output_path.with_extension("poster.png")),
        threads: 2,
        fonts: Default::default(),
        images,
        animation: None,
        traceparent: None,
    };
    let settings = SandboxSettings {
        executable: executable(),
        memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
        deadline,
    };
    let run = sandbox::run_worker(&job, &settings, &CancelToken::default(), &mut |_| {});
    (output_path, run)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// Runs `command` (the program `what`) to its end and checks that it succeeded, naming
/// `path` and what the program wrote to stderr when it did not; answers its output.
pub fn run_ok(command: &mut Command, what: &str, path: &Path) -> std::process::Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what} does not run: {error}"));
    assert!(
        output.status.success(),
        "{what} failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[derive(Debug, PartialEq)]
pub struct Probe {
    pub codec: String,
    pub width: u32,
    pub height: u32,
    pub frame_rate: String,
    pub frames: u32,
    pub duration: f64,
    pub tags: String,
}

/// ffprobe's view of the first video stream, frames counted by decoding.
pub fn probe(path: &Path) -> Probe {
    let output = run_ok(
        Command::new("ffprobe")
            .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-of", "json"])
            .args(["-show_entries", "stream=codec_name,width,height,r_frame_rate,nb_read_frames:stream_tags:format=duration"])
            .arg(path),
        "ffprobe",
        path,
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stream = &json["streams"][0];
    Probe {
        codec: stream["codec_name"].as_str().unwrap_or_default().to_owned(),
        width: stream["width"].as_u64().unwrap_or_default() as u32,
        height: stream["height"].as_u64().unwrap_or_default() as u32,
        frame_rate: stream["r_frame_rate"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        frames: stream["nb_read_frames"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or_default(),
        duration: json["format"]["duration"]
            .as_str()
            .and_then(|d| d.parse().ok())
            .unwrap_or_default(),
        tags: stream["tags"].to_string(),
    }
}

/// Decodes every frame to RGBA (`libvpx-vp9` for WebM, so alpha is decoded too).
pub fn decode_rgba(path: &Path, width: u32, height: u32) -> Vec<Vec<u8>> {
    decode_rgba_through(path, width, height, &[])
}

/// [`decode_rgba`] with extra ffmpeg output options (`filter`, e.g. a `-vf` scaler setting).
pub fn decode_rgba_through(path: &Path, width: u32, height: u32, filter: &[&str]) -> Vec<Vec<u8>> {
    let mut command = Command::new("ffmpeg");
    command.args(["-v", "error"]);
    if path.extension().is_some_and(|e| e == "webm") {
        command.args(["-c:v", "libvpx-vp9"]);
    }
    command.arg("-i").arg(path).args(filter);
    // Every decoded APNG frame once: the CLI's constant-rate output otherwise repeats frames
    // to fill APNG's 1/100000 s time base.
    if path.extension().is_some_and(|e| e == "png") {
        command.args(["-fps_mode", "passthrough"]);
    }
    command.args(["-f", "rawvideo", "-pix_fmt", "rgba", "-"]);
    let output = run_ok(&mut command, "ffmpeg", path);
    let frame_bytes = (width * height * 4) as usize;
    assert!(
        !output.stdout.is_empty() && output.stdout.len().is_multiple_of(frame_bytes),
        "{} decoded to {} bytes, not whole {width}×{height} frames",
        path.display(),
        output.stdout.len()
    );
    output
        .stdout
        .chunks(frame_bytes)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Every frame of a WebP, still or animated, as straight RGBA, decoded by the image crate
/// (image-webp, not the libwebp that encoded it; FFmpeg cannot decode animated WebP).
pub fn decode_webp(path: &Path) -> Vec<Vec<u8>> {
    use image::AnimationDecoder;
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let decoder = image::codecs::webp::WebPDecoder::new(file).unwrap();
    if decoder.has_animation() {
        decoder
            .into_frames()
            .map(|frame| frame.unwrap().into_buffer().into_raw())
            .collect()
    } else {
        vec![image::open(path).unwrap().to_rgba8().into_raw()]
    }
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}
