//! Issue 46, class 3: small outputs keep their detail. The codec's loss alone is measured: the
//! decoded MP4 against the very frames the renderer handed to the encoder (rlottie in this
//! process, composited over the same background), by FFmpeg's own SSIM filter on luma; the
//! rate factor is read back from the encoder's settings that x264 writes into the stream.

use crate::helpers::{
    corpus, library_frames, render_in_worker, run_ok, spec, tempdir, with_background,
};
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::spec::{Format, Modifications, Rgba};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(300);
/// The busiest file of the corpus at small sizes: a repeater of thin strokes spinning fast.
const SPINNING: &str = "repeater-abstract-circle-15fps.json";
/// What the rule keeps at 100×100, with a margin for FFmpeg's SSIM (8×8 blocks on luma) against
/// the measurement's (scikit-image's Gaussian windows): 0.992 was measured there at CRF 12, and
/// 0.957 at CRF 20, the rate factor before the rule. Here (FFmpeg's SSIM on these very frames)
/// CRF 12 keeps 0.993 and CRF 20 kept 0.965, so this fails without the rule.
const SMALL_FRAME_SSIM: f64 = 0.98;

fn white() -> Rgba {
    Rgba::parse_hex("#ffffff").unwrap()
}

/// The rate factor x264 wrote into its settings string (`… crf=12.0 …`) in `path`.
fn x264_crf(path: &Path) -> f64 {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let at = text
        .find(" crf=")
        .expect("x264's settings string in the stream")
        + 5;
    let value: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    value.parse().unwrap()
}

/// Straight RGBA composited over white, as RGB.
fn over_white(rgba: &[u8]) -> Vec<u8> {
    rgba.chunks(4)
        .flat_map(|pixel| {
            let alpha = u32::from(pixel[3]);
            let blend = |c: u8| ((u32::from(c) * alpha + 255 * (255 - alpha) + 127) / 255) as u8;
            [blend(pixel[0]), blend(pixel[1]), blend(pixel[2])]
        })
        .collect()
}

/// The lowest per-frame luma SSIM of `encoded` against `raw` (RGB frames of `side`²), by
/// FFmpeg's `ssim` filter.
fn min_ssim(encoded: &Path, raw: &Path, side: u32, dir: &Path) -> (f64, usize) {
    let stats = dir.join("ssim.log");
    let size = format!("{side}x{side}");
    let filter = format!(
        "[0:v]format=gray[a];[1:v]format=gray[b];[a][b]ssim=stats_file={}",
        stats.display()
    );
    run_ok(
        Command::new("ffmpeg")
            .args(["-v", "error", "-i"])
            .arg(encoded)
            .args([
                "-f",
                "rawvideo",
                "-pix_fmt",
                "rgb24",
                "-s",
                &size,
                "-framerate",
                "30",
                "-i",
            ])
            .arg(raw)
            .args(["-lavfi", &filter, "-f", "null", "-"]),
        "ffmpeg ssim",
        encoded,
    );
    let log = std::fs::read_to_string(&stats).unwrap();
    let scores: Vec<f64> = log
        .lines()
        .filter_map(|line| {
            line.split(" All:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let lowest = scores.iter().copied().fold(f64::INFINITY, f64::min);
    (lowest, scores.len())
}

#[test]
fn a_100_pixel_mp4_of_a_fast_spinning_reel_keeps_its_detail_through_the_codec() {
    let dir = tempdir();
    let side = 100;
    let output = with_background(spec(Format::Mp4, 30, side, side), white());
    let template = corpus(SPINNING);
    let (path, result) = render_in_worker(
        &template,
        Modifications::default(),
        output,
        dir.path(),
        DEADLINE,
    );
    let info = result.unwrap_or_else(|failure| panic!("{failure}"));

    // The rule of docs/formats.md: four steps below 400×400, two CRF a step.
    assert_eq!(x264_crf(&path), 12.0);

    let bytes = std::fs::read(&template).unwrap();
    let frames = library_frames(
        &bytes,
        &Modifications::default(),
        &FontBook::default(),
        output,
        0..info.frame_count,
    );
    let raw = dir.path().join("raw.rgb");
    std::fs::write(
        &raw,
        frames
            .iter()
            .flat_map(|frame| over_white(frame))
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let (lowest, compared) = min_ssim(&path, &raw, side, dir.path());
    assert_eq!(compared, info.frame_count as usize, "every frame compared");
    assert!(
        lowest >= SMALL_FRAME_SSIM,
        "the codec lost detail: lowest luma SSIM {lowest:.4} over {compared} frames"
    );
}

#[test]
fn a_large_mp4_keeps_the_tabled_rate_factor() {
    let dir = tempdir();
    let output = with_background(spec(Format::Mp4, 30, 480, 480), white());
    let (path, result) = render_in_worker(
        &corpus("tiny-solid-layer.json"),
        Modifications::default(),
        output,
        dir.path(),
        DEADLINE,
    );
    result.unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(x264_crf(&path), 20.0);
}
