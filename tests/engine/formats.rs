//! The outputs of issue 26 as players and editors see them: each format's codec, pixel format,
//! sample entry, colour tags and frame count as ffprobe reads them; transparency kept where
//! promised; a segment by marker showing exactly the marker's frames, each the still at its
//! time; loop counts written as each format's specification defines them. The colours of every
//! format are in `colours.rs`.

use crate::helpers::{
    corpus, decode_rgba, decode_webp, executable, render_in_worker, run_in_worker, run_ok, spec,
    tempdir,
};
use crate::moving;
use lottie_render::spec::{Format, Modifications, OutputSpec, Window};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(300);
const SIDE: u32 = moving::SIDE;
const FPS: u32 = moving::FPS;

fn write_template(dir: &Path) -> PathBuf {
    let path = dir.join("moving.json");
    std::fs::write(&path, moving::template().to_string()).unwrap();
    path
}

/// What ffprobe reads of the first video stream: codec, pixel format, sample entry, matrix
/// and frames (counted by decoding).
fn stream_facts(path: &Path) -> (String, String, String, String, u32) {
    let output = run_ok(
        Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-count_frames",
                "-select_streams",
                "v:0",
                "-of",
                "json",
            ])
            .args([
                "-show_entries",
                "stream=codec_name,pix_fmt,codec_tag_string,color_space,nb_read_frames",
            ])
            .arg(path),
        "ffprobe",
        path,
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let stream = &json["streams"][0];
    let text = |key: &str| stream[key].as_str().unwrap_or_default().to_owned();
    let frames = text("nb_read_frames").parse().unwrap_or_default();
    (
        text("codec_name"),
        text("pix_fmt"),
        text("codec_tag_string"),
        text("color_space"),
        frames,
    )
}

fn render(dir: &Path, template: &Path, output: OutputSpec) -> PathBuf {
    let (path, result) =
        render_in_worker(template, Modifications::default(), output, dir, DEADLINE);
    let info = result.unwrap_or_else(|failure| panic!("{:?}: {failure}", output.format));
    let expected_frames = output.window.map_or(60, |window| window.range().1);
    assert_eq!(info.frame_count, expected_frames, "{:?}", output.format);
    path
}

fn windowed(format: Format, window: Window) -> OutputSpec {
    let mut output = spec(format, FPS, SIDE, SIDE);
    output.window = Some(window);
    output
}

const SEGMENT: Window = Window::Segment {
    start: 10,
    count: 20,
};
const STILL: Window = Window::Still { frame: 35 };

#[test]
fn every_format_probes_with_its_codec_pixel_format_tags_and_frames() {
    let dir = tempdir();
    let template = write_template(dir.path());
    // (format, window, codec, pixel format as decoded, sample entry, matrix tag, frames).
    let cases: &[(Format, Window, &str, &str, &str, &str, u32)] = &[
        (
            Format::Mp4,
            SEGMENT,
            "h264",
            "yuv420p",
            "avc1",
            "smpte170m",
            20,
        ),
        (
            Format::Hevc,
            SEGMENT,
            "hevc",
            "yuv420p",
            "hvc1",
            "smpte170m",
            20,
        ),
        (
            Format::Av1,
            SEGMENT,
            "av1",
            "yuv420p",
            "av01",
            "smpte170m",
            20,
        ),
        (
            Format::Webm,
            SEGMENT,
            "vp9",
            "yuv420p",
            "[0][0][0][0]",
            "smpte170m",
            20,
        ),
        // ProRes 4444 decodes to 12 bits whatever was coded; the alpha plane is there.
        (
            Format::Mov,
            SEGMENT,
            "prores",
            "yuva444p12le",
            "ap4h",
            "smpte170m",
            20,
        ),
        (Format::Gif, SEGMENT, "gif", "bgra", "[0][0][0][0]", "", 20),
        (
            Format::Apng,
            SEGMENT,
            "apng",
            "rgba",
            "[0][0][0][0]",
            "",
            20,
        ),
        (Format::Png, STILL, "png", "rgba", "[0][0][0][0]", "", 1),
        // JFIF's matrix is BT.601's, which ffprobe names bt470bg.
        (
            Format::Jpeg,
            STILL,
            "mjpeg",
            "yuvj444p",
            "[0][0][0][0]",
            "bt470bg",
            1,
        ),
        // WebP's lossy picture is BT.601 YUV too (libwebp converted our RGBA).
        (
            Format::Webp,
            STILL,
            "webp",
            "yuva420p",
            "[0][0][0][0]",
            "bt470bg",
            1,
        ),
    ];
    for &(format, window, codec, pixels, tag, matrix, frames) in cases {
        let path = render(dir.path(), &template, windowed(format, window));
        let facts = stream_facts(&path);
        assert_eq!(
            facts,
            (
                codec.into(),
                pixels.into(),
                tag.into(),
                matrix.into(),
                frames
            ),
            "{format:?}"
        );
        // The alpha of WebM is a second VP9 stream, announced in the stream's tags.
        if format == Format::Webm {
            let probed = crate::helpers::probe(&path);
            assert!(
                probed.tags.contains("\"alpha_mode\":\"1\""),
                "{}",
                probed.tags
            );
        }
    }
    // FFmpeg cannot decode animated WebP: image-webp counts its frames.
    let path = render(dir.path(), &template, windowed(Format::Webp, SEGMENT));
    assert_eq!(decode_webp(&path).len(), 20);
    assert_eq!(&std::fs::read(&path).unwrap()[..4], b"RIFF");
}

/// The first frame of each output decoded to straight RGBA.
fn first_frame(path: &Path, format: Format) -> Vec<u8> {
    match format {
        Format::Webp => decode_webp(path).swap_remove(0),
        Format::Webm => {
            // libvpx-vp9, so the alpha stream is decoded too (decode_rgba picks it).
            decode_rgba(path, SIDE, SIDE).swap_remove(0)
        }
        _ => {
            let output = run_ok(
                Command::new("ffmpeg")
                    .args(["-v", "error", "-i"])
                    .arg(path)
                    .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgba", "-"]),
                "ffmpeg",
                path,
            );
            output.stdout
        }
    }
}

#[test]
fn corners_stay_transparent_where_alpha_is_promised_and_show_the_background_elsewhere() {
    let dir = tempdir();
    let template = write_template(dir.path());
    for format in Format::ALL {
        let window = if format.is_still_only() {
            STILL
        } else {
            SEGMENT
        };
        let path = render(dir.path(), &template, windowed(format, window));
        let frame = first_frame(&path, format);
        assert_eq!(frame.len(), (SIDE * SIDE * 4) as usize, "{format:?}");
        // (2, 2): far from the rectangle (x 10..190 at most, y 50..150).
        let corner = &frame[(2 * SIDE as usize + 2) * 4..][..4];
        if format.has_alpha() {
            assert_eq!(corner[3], 0, "{format:?} corner {corner:?}");
        } else {
            // White, the default background, within the 2/255 of DESIGN.md "Colour".
            assert!(
                corner.iter().all(|c| *c >= 253),
                "{format:?} corner {corner:?}"
            );
        }
        // The rectangle's middle is opaque in every format.
        let middle = &frame[(100 * SIDE as usize + 100) * 4..][..4];
        assert!(middle[3] >= 253, "{format:?} middle {middle:?}");
    }
}

/// Runs the `render` command and answers the output's path.
fn cli_render(dir: &Path, template: &Path, name: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let result = Command::new(executable())
        .arg("render")
        .arg(template)
        .args(["--width", "200", "--height", "200", "-o"])
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

fn decode_all(path: &Path) -> Vec<Vec<u8>> {
    decode_rgba(path, SIDE, SIDE)
}

/// The left edge of the opaque rectangle on row 100 of a straight-RGBA frame.
fn left_edge(frame: &[u8]) -> usize {
    (0..SIDE as usize)
        .find(|x| frame[(100 * SIDE as usize + x) * 4 + 3] >= 128)
        .unwrap_or_else(|| panic!("no rectangle on row 100"))
}

#[test]
fn a_segment_by_marker_shows_exactly_the_markers_frames_each_the_still_at_its_time() {
    let dir = tempdir();
    let template = write_template(dir.path());
    // Lossless both: APNG for the segment, PNG for the stills, so frames compare exactly.
    let segment = cli_render(
        dir.path(),
        &template,
        "intro.png",
        &["--format", "apng", "--segment", "intro"],
    );
    let frames = decode_all(&segment);
    assert_eq!(frames.len(), 20, "the marker lasts 20 frames");
    let still = |name: &str, at: &str| {
        let path = cli_render(
            dir.path(),
            &template,
            name,
            &["--format", "png", "--at", at],
        );
        decode_all(&path).swap_remove(0)
    };
    assert!(
        frames[0] == still("first.png", "10"),
        "the first frame is frame 10"
    );
    assert!(
        frames[19] == still("last.png", "29"),
        "the last frame is frame 29"
    );
    // By name and by seconds, the same still as by frame number.
    assert!(frames[0] == still("by-marker.png", "intro"));
    assert!(frames[0] == still("by-seconds.png", "0.3333s"));
    // Independently of any render: frame 10 is green, its rectangle's left edge where the
    // linear motion puts it (centre − 50, rlottie rounds the edge's coverage at 50 %).
    let pixel = &frames[0][(100 * SIDE as usize + 100) * 4..][..4];
    assert_eq!(pixel, [0, 255, 0, 255]);
    for (index, frame) in [(0, &frames[0]), (19, &frames[19])] {
        let expected = moving::centre_x(10 + index) - 50.0;
        let edge = left_edge(frame) as f64;
        assert!(
            (edge - expected).abs() <= 1.0,
            "frame {index}: edge {edge}, expected {expected}"
        );
    }
    // The point marker names a still, and a segment cannot use it.
    let beat = still("beat.png", "beat");
    assert_eq!(
        &beat[(100 * SIDE as usize + 100) * 4..][..4],
        [255, 255, 0, 255]
    );
    let refused = Command::new(executable())
        .arg("render")
        .arg(&template)
        .args(["--format", "apng", "--segment", "beat", "-o"])
        .arg(dir.path().join("never.png"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("output.segment") && message.contains("no duration"),
        "{message}"
    );
    assert!(!dir.path().join("never.png").exists());
}

/// The loop field of each format, read from the file as its specification lays it out:
/// GIF's NETSCAPE2.0 application extension (repeats after the first play; absent: once),
/// APNG's `acTL` num_plays, WebP's `ANIM` loop count (0: forever in all three).
fn loop_field(path: &Path, format: Format) -> Option<u16> {
    let bytes = std::fs::read(path).unwrap();
    let after = |marker: &[u8]| {
        bytes
            .windows(marker.len())
            .position(|window| window == marker)
            .map(|at| at + marker.len())
    };
    match format {
        // "NETSCAPE2.0", sub-block size 3, id 1, then the count (little-endian).
        Format::Gif => {
            after(b"NETSCAPE2.0\x03\x01").map(|at| u16::from_le_bytes([bytes[at], bytes[at + 1]]))
        }
        // acTL: num_frames then num_plays, big-endian u32 each.
        Format::Apng => after(b"acTL")
            .map(|at| u32::from_be_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as u16),
        // ANIM: chunk size (u32), background colour (4 bytes), loop count (u16 LE).
        Format::Webp => after(b"ANIM").map(|at| u16::from_le_bytes([bytes[at + 8], bytes[at + 9]])),
        _ => unreachable!(),
    }
}

#[test]
fn loop_counts_are_written_as_each_format_defines_them() {
    let dir = tempdir();
    let template = write_template(dir.path());
    for format in [Format::Gif, Format::Apng, Format::Webp] {
        let mut output = windowed(format, SEGMENT);
        let forever = render(dir.path(), &template, output);
        assert_eq!(loop_field(&forever, format), Some(0), "{format:?} forever");
        output.loop_count = Some(3);
        let three = render(dir.path(), &template, output);
        // GIF counts the repeats after the first play.
        let expected = if format == Format::Gif { 2 } else { 3 };
        assert_eq!(
            loop_field(&three, format),
            Some(expected),
            "{format:?} three plays"
        );
        output.loop_count = Some(1);
        let once = render(dir.path(), &template, output);
        let expected = if format == Format::Gif { None } else { Some(1) };
        assert_eq!(loop_field(&once, format), expected, "{format:?} once");
    }
}

#[test]
fn a_poster_is_the_still_at_its_time() {
    let dir = tempdir();
    let template = write_template(dir.path());
    // Frame 5 of a segment starting at frame 10: the animation's frame 15.
    let mut output = windowed(Format::Mp4, SEGMENT);
    output.poster = Some(5);
    let video = render(dir.path(), &template, output);
    let poster = decode_all(&video.with_extension("poster.png")).swap_remove(0);
    let still = render(
        dir.path(),
        &template,
        windowed(Format::Png, Window::Still { frame: 15 }),
    );
    assert!(
        poster == decode_all(&still).swap_remove(0),
        "poster ≠ the still of frame 15"
    );
    // Through the command line, the default: the middle of the marker's 20 frames, frame 20.
    let cli_poster = dir.path().join("poster.png");
    cli_render(
        dir.path(),
        &template,
        "intro.webm",
        &[
            "--format",
            "webm",
            "--segment",
            "intro",
            "--poster",
            cli_poster.to_str().unwrap(),
        ],
    );
    let middle = cli_render(
        dir.path(),
        &template,
        "twenty.png",
        &["--format", "png", "--at", "20"],
    );
    assert!(
        decode_all(&cli_poster) == decode_all(&middle),
        "the default poster is not frame 20"
    );
    // Its colour, independently: frame 20 is in the third hold, blue.
    let frame = decode_all(&cli_poster).swap_remove(0);
    assert_eq!(
        &frame[(100 * SIDE as usize + 100) * 4..][..4],
        [0, 0, 255, 255]
    );
}

/// A ProRes render's memory does not grow with its length. Each frame is 1.8 MB at 480²
/// (10-bit 4:4:4 with alpha); when every frame was a fresh one, freed on another thread than
/// the one that allocated it, glibc's heaps grew by ~2 MB a frame of the tractor at 720² (177
/// MB of peak RSS for 30 frames, 353 MB for 120; 0.5 MB a frame of a simple template), and its
/// 534 frames at 1080² reached the worker's 4 GiB address space and failed with EINVAL. The
/// bound is independent of the encoder: sixteen frames (the leak took 93 MiB for these 60
/// more at 480², 213 MiB at 720²; with the frames reused, 96.6 MB at both lengths at 480²).
#[test]
fn a_long_prores_render_keeps_the_workers_memory_flat() {
    const SIDE: u32 = 480;
    const FRAME_BYTES: u64 = SIDE as u64 * SIDE as u64 * 4 * 2;
    let dir = tempdir();
    let template = corpus("heavy-tractor-263-layers.json");
    let peak_rss = |count: u32| {
        let mut output = spec(Format::Mov, 30, SIDE, SIDE);
        output.window = Some(Window::Segment { start: 0, count });
        let (_, run) = run_in_worker(
            &template,
            Modifications::default(),
            Default::default(),
            output,
            dir.path(),
            DEADLINE,
        );
        let info = run.result.unwrap_or_else(|failure| panic!("{failure}"));
        assert_eq!(info.frame_count, count);
        run.usage.max_rss_bytes
    };
    let (short, long) = (peak_rss(15), peak_rss(75));
    println!("ProRes {SIDE}² of the tractor, peak RSS: 15 frames {short} B, 75 frames {long} B");
    assert!(
        long < short + 16 * FRAME_BYTES,
        "60 frames more took {} MiB more ({short} → {long} B)",
        long.saturating_sub(short) >> 20
    );
}
