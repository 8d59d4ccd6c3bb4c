//! What the pictures look like: colour modifications change only their slot's pixels,
//! retiming interpolates, odd sizes work, WebM keeps clean alpha, MP4 composites over the
//! background. Outputs are decoded with ffmpeg and compared pixel by pixel.

use crate::helpers::{
    corpus, decode_rgba, library_frames, probe, render_in_worker, spec, tempdir, with_background,
};
use lottie_render::spec::{Format, Modifications, Rgba};
use std::collections::HashSet;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(300);

fn modifications(colors: &[(&str, Rgba)]) -> Modifications {
    let mut modifications = Modifications::default();
    for (id, color) in colors {
        modifications.colors.insert((*id).to_owned(), *color);
    }
    modifications
}

fn rgb(r: f64, g: f64, b: f64) -> Rgba {
    Rgba::new(r, g, b, None).unwrap()
}

/// Frames rendered by the library directly (exact pixels, no codec), straight alpha.
fn raw_frames(
    file: &str,
    modifications: &Modifications,
    fps: u32,
    size: u32,
    frames: std::ops::Range<u32>,
) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(corpus(file)).unwrap();
    let output = spec(Format::Webm, fps, size, size);
    let fonts = lottie_render::lottie::lowering::text::fonts::FontBook::default();
    library_frames(&bytes, modifications, &fonts, output, frames)
}

/// Where the ball of `slots-ball-colors-opacity.json` is at its frame 60, worked out from the
/// template (not from a render): a 270 × 270 rectangle with roundness 135 (its last
/// keyframe, t 60) is a circle of radius 135, centred on its layer's position (540, 152:
/// x fixed, y's last keyframe at t 60), so its rotation moves nothing. The 1080 × 1080
/// canvas is scaled to 200 × 200.
struct BallAtFrame60;

impl BallAtFrame60 {
    const SCALE: f64 = 200.0 / 1080.0;
    const CENTRE: [f64; 2] = [540.0 * Self::SCALE, 152.0 * Self::SCALE];
    const RADIUS: f64 = 135.0 * Self::SCALE;

    /// Distance of pixel `index`'s centre from the ball's edge: negative inside.
    fn edge_distance(index: usize) -> f64 {
        let (x, y) = ((index % 200) as f64 + 0.5, (index / 200) as f64 + 0.5);
        (x - Self::CENTRE[0]).hypot(y - Self::CENTRE[1]) - Self::RADIUS
    }
}

/// The anti-aliased rim of a drawn edge, pixels either side: neither inside nor outside.
const RIM: f64 = 1.5;
/// What a video codec smears beyond an edge (4:2:0 chroma is at half resolution), pixels.
const CODEC_RIM: f64 = 6.0;
/// How far a decoded channel inside the ball may be from the colour asked for: H.264 at
/// 200 × 200 leaves errors up to about 10 in a small moving ball (measured: 9 from 6 px
/// inside the edge, 13 at 4 px), far below the 60 to 130 between the colour asked for and
/// the template's own there.
const DECODED_TOLERANCE: f64 = 16.0;

#[test]
fn a_colour_modification_changes_the_slot_pixels_and_nothing_else() {
    let file = "slots-ball-colors-opacity.json";
    let red = modifications(&[("ball_color", rgb(1.0, 0.0, 0.0))]);
    // The ball's fill keeps its opacity, the `ball_opacity` slot: 0 at t 0 to 100 at t 100
    // with both easing handles on the diagonal (linear), so 60 % at t 60; under it the
    // background square, white (its `bg_color` slot). Red at 60 % over white:
    let expected: [f64; 3] = [255.0, 0.4 * 255.0, 0.4 * 255.0];
    // Opaque: the background square fills the canvas.
    let frame = 60;

    // Raw frames (exact pixels, no codec): the modified render against the unmodified one.
    let unmodified = &raw_frames(file, &Modifications::default(), 30, 200, frame..frame + 1)[0];
    let modified = &raw_frames(file, &red, 30, 200, frame..frame + 1)[0];
    let (mut inside, mut outside) = (0, 0);
    for i in 0..200 * 200 {
        let distance = BallAtFrame60::edge_distance(i);
        let pixel = &modified[i * 4..i * 4 + 4];
        if distance <= -RIM {
            inside += 1;
            for (channel, want) in expected.iter().chain([&255.0]).enumerate() {
                assert!(
                    (f64::from(pixel[channel]) - want).abs() <= 2.0,
                    "pixel {i} inside the ball is {pixel:?}, not {expected:?}"
                );
            }
        } else if distance >= RIM {
            outside += 1;
            assert_eq!(
                pixel,
                &unmodified[i * 4..i * 4 + 4],
                "pixel {i} outside the ball changed"
            );
        }
    }
    // π × 23.5² inside; the rest of 200 × 200 less the rim outside.
    assert!(
        inside > 1600 && outside > 37_000,
        "{inside} in, {outside} out"
    );
    // The unmodified ball is another colour (its slot's green at t 60), so the check above
    // saw a change.
    let centre = (BallAtFrame60::CENTRE[1] as usize) * 200 + BallAtFrame60::CENTRE[0] as usize;
    assert!(
        unmodified[centre * 4 + 1] > unmodified[centre * 4],
        "the unmodified ball is not green: {:?}",
        &unmodified[centre * 4..centre * 4 + 4]
    );

    // Encoded: both as MP4, decoded. Inside the ball (less the codec's rim) the colour
    // asked for; outside it, the unmodified video's pixels up to the codec's noise.
    let dir = tempdir();
    let mut decoded = Vec::new();
    for mods in [Modifications::default(), red] {
        let (path, result) = render_in_worker(
            &corpus(file),
            mods,
            spec(Format::Mp4, 30, 200, 200),
            dir.path(),
            DEADLINE,
        );
        result.unwrap();
        decoded.push(decode_rgba(&path, 200, 200).swap_remove(frame as usize));
    }
    let (mut outside_difference, mut outside_count) = (0f64, 0usize);
    let (mut inside_error, mut inside_count) = (0f64, 0usize);
    for i in 0..200 * 200 {
        let distance = BallAtFrame60::edge_distance(i);
        let pixel = &decoded[1][i * 4..i * 4 + 3];
        if distance <= -CODEC_RIM {
            for (channel, want) in expected.iter().enumerate() {
                let error = (f64::from(pixel[channel]) - want).abs();
                assert!(
                    error <= DECODED_TOLERANCE,
                    "decoded pixel {i} inside the ball is {pixel:?}, not {expected:?}"
                );
                inside_error += error;
            }
            inside_count += 3;
        } else if distance >= CODEC_RIM {
            outside_difference += (0..3)
                .map(|c| (f64::from(decoded[0][i * 4 + c]) - f64::from(pixel[c])).abs())
                .sum::<f64>();
            outside_count += 1;
        }
    }
    let inside = inside_error / inside_count as f64;
    println!("decoded ball: mean error {inside:.2} per channel over {inside_count} channels");
    assert!(
        inside <= 3.0,
        "decoded pixels inside the ball are off by {inside} on average"
    );
    let outside = outside_difference / outside_count as f64;
    assert!(
        outside < 3.0,
        "decoded pixels outside the ball changed: mean difference {outside}"
    );
}

#[test]
fn a_named_fill_slot_recolours_every_fill_with_that_name() {
    let file = "gradient-emoji-named-fills-24fps.json";
    let report = lottie_render::lottie::report::InspectReport::new(
        &lottie_render::lottie::Template::parse(&std::fs::read(corpus(file)).unwrap()).unwrap(),
    )
    .unwrap();
    let slot = report
        .slots
        .colors
        .iter()
        .max_by_key(|slot| slot.binding_count)
        .unwrap()
        .clone();
    let before = raw_frames(file, &Modifications::default(), 30, 128, 0..1);
    let after = raw_frames(
        file,
        &modifications(&[(&slot.id, rgb(0.0, 1.0, 0.0))]),
        30,
        128,
        0..1,
    );
    let green_more = (0..128 * 128)
        .filter(|&i| after[0][i * 4 + 1] > before[0][i * 4 + 1].saturating_add(30))
        .count();
    assert!(
        green_more > 50,
        "slot {} ({} bindings) turned {green_more} pixels green",
        slot.id,
        slot.binding_count
    );
}

#[test]
fn a_24_fps_template_at_60_fps_shows_more_than_24_distinct_frames_per_second() {
    let file = "gradient-emoji-named-fills-24fps.json";
    let raw = raw_frames(file, &Modifications::default(), 60, 128, 0..60);
    let distinct: HashSet<&Vec<u8>> = raw.iter().collect();
    assert!(
        distinct.len() > 24,
        "{} distinct frames in the first second",
        distinct.len()
    );
    let dir = tempdir();
    let (path, result) = render_in_worker(
        &corpus(file),
        Modifications::default(),
        spec(Format::Mp4, 60, 128, 128),
        dir.path(),
        DEADLINE,
    );
    assert_eq!(result.unwrap().frame_count, 120);
    let decoded = decode_rgba(&path, 128, 128);
    let moving = decoded[..60]
        .windows(2)
        .filter(|pair| {
            pair[0]
                .iter()
                .zip(&pair[1])
                .map(|(a, b)| u64::from(a.abs_diff(*b)))
                .sum::<u64>()
                > 128 * 128 / 4
        })
        .count();
    assert!(
        moving + 1 > 24,
        "only {} of the first 60 decoded frames differ from the previous one",
        moving + 1
    );
}

#[test]
fn an_odd_size_of_101_by_777_works_in_every_format() {
    let dir = tempdir();
    for format in [Format::Mp4, Format::Webm, Format::Gif] {
        let background = rgb(0.0, 1.0, 0.0);
        let (path, result) = render_in_worker(
            &corpus("simple-bouncy-ball-60fps.json"),
            Modifications::default(),
            with_background(spec(format, 30, 101, 777), background),
            dir.path(),
            DEADLINE,
        );
        let output = result.unwrap();
        let probed = probe(&path);
        let expected = if format == Format::Mp4 {
            (102, 778)
        } else {
            (101, 777)
        };
        assert_eq!((probed.width, probed.height), expected, "{format:?}");
        assert_eq!((output.width, output.height), expected, "{format:?}");
        if format == Format::Mp4 {
            // The padding column and row carry the background, like the letterbox.
            let frame = &decode_rgba(&path, 102, 778)[0];
            for (x, y) in [(101usize, 10usize), (101, 700), (50, 777)] {
                let px = &frame[(y * 102 + x) * 4..(y * 102 + x) * 4 + 3];
                assert!(
                    px[1] > 200 && px[0] < 60 && px[2] < 60,
                    "padding at ({x},{y}) is {px:?}, not the green background"
                );
            }
        }
    }
}

#[test]
fn webm_keeps_alpha_without_dark_halos() {
    let dir = tempdir();
    let file = "simple-bouncy-ball-60fps.json";
    let (path, result) = render_in_worker(
        &corpus(file),
        Modifications::default(),
        spec(Format::Webm, 30, 256, 256),
        dir.path(),
        DEADLINE,
    );
    result.unwrap();
    assert!(
        probe(&path).tags.contains("alpha_mode"),
        "no alpha_mode tag"
    );
    let frame = &decode_rgba(&path, 256, 256)[0];
    let alpha: Vec<u8> = frame.chunks(4).map(|px| px[3]).collect();
    assert!(
        alpha.iter().filter(|a| **a == 0).count() > 256 * 256 / 2,
        "most of the frame should be transparent"
    );
    assert!(
        alpha.iter().filter(|a| **a == 255).count() > 1000,
        "the ball should be opaque"
    );
    // Edge pixels (partial alpha) must carry the ball's colour, not a darkened one.
    let opaque_luma: Vec<f64> = frame
        .chunks(4)
        .filter(|px| px[3] == 255)
        .map(luma)
        .collect();
    let ball_luma = opaque_luma.iter().sum::<f64>() / opaque_luma.len() as f64;
    let edge_luma: Vec<f64> = frame
        .chunks(4)
        .filter(|px| px[3] > 64 && px[3] < 192)
        .map(luma)
        .collect();
    assert!(!edge_luma.is_empty(), "no anti-aliased edge pixels");
    let mean_edge = edge_luma.iter().sum::<f64>() / edge_luma.len() as f64;
    assert!(
        (mean_edge - ball_luma).abs() < 30.0,
        "edge luma {mean_edge} vs ball luma {ball_luma}: halo"
    );
}

fn luma(px: &[u8]) -> f64 {
    0.299 * f64::from(px[0]) + 0.587 * f64::from(px[1]) + 0.114 * f64::from(px[2])
}

#[test]
fn mp4_is_composited_over_the_background_and_other_sizes_are_letterboxed() {
    let dir = tempdir();
    let background = rgb(0.0, 0.0, 1.0);
    // The tractor is 400×310; in a 200×100 frame it is pillarboxed left and right.
    let (path, result) = render_in_worker(
        &corpus("heavy-tractor-263-layers.json"),
        Modifications::default(),
        with_background(spec(Format::Mp4, 30, 200, 100), background),
        dir.path(),
        DEADLINE,
    );
    result.unwrap();
    let frame = &decode_rgba(&path, 200, 100)[0];
    let at = |x: usize, y: usize| &frame[(y * 200 + x) * 4..(y * 200 + x) * 4 + 3];
    for (x, y) in [(5, 50), (194, 50)] {
        let px = at(x, y);
        assert!(
            px[2] > 200 && px[0] < 60 && px[1] < 60,
            "({x},{y}) = {px:?}, expected the blue background"
        );
    }
    // The template's own sky is drawn in the middle.
    let centre = at(100, 30);
    assert!(
        centre[0] > 150,
        "centre {centre:?} should show the template"
    );
}

#[test]
fn gif_at_60_fps_plays_at_true_speed() {
    let dir = tempdir();
    let (path, result) = render_in_worker(
        &corpus("simple-bouncy-ball-60fps.json"),
        Modifications::default(),
        spec(Format::Gif, 60, 128, 128),
        dir.path(),
        DEADLINE,
    );
    assert_eq!(result.unwrap().frame_count, 120);
    let probed = probe(&path);
    assert!(
        (probed.duration - 2.0).abs() <= 1.0 / 60.0 + 1e-3,
        "gif lasts {} s, template 2 s",
        probed.duration
    );
}

/// ffprobe's colour description of the first video stream: matrix, primaries, transfer,
/// range, chroma location.
fn colour_description(path: &std::path::Path) -> [String; 5] {
    let mut command = std::process::Command::new("ffprobe");
    command
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-of",
            "json",
            "-show_entries",
        ])
        .arg("stream=color_space,color_primaries,color_transfer,color_range,chroma_location")
        .arg(path);
    let output = crate::helpers::run_ok(&mut command, "ffprobe", path);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stream = &json["streams"][0];
    [
        "color_space",
        "color_primaries",
        "color_transfer",
        "color_range",
        "chroma_location",
    ]
    .map(|key| stream[key].as_str().unwrap_or("absent").to_owned())
}

#[test]
fn mp4_and_webm_are_tagged_bt601_matrix_bt709_primaries_and_transfer_limited_centred_chroma() {
    // The convention `encode::video::tag_colours` documents, in the bitstream and the container.
    let expected = ["smpte170m", "bt709", "bt709", "tv", "center"].map(str::to_owned);
    let dir = tempdir();
    for (format, width, height) in [
        (Format::Mp4, 1280, 720),
        (Format::Mp4, 321, 100),
        (Format::Webm, 1280, 720),
        (Format::Webm, 101, 123),
    ] {
        let (path, result) = render_in_worker(
            &corpus("simple-bouncy-ball-60fps.json"),
            Modifications::default(),
            spec(format, 30, width, height),
            dir.path(),
            DEADLINE,
        );
        result.unwrap();
        let case = format!("{format:?} {width}×{height}");
        assert_eq!(colour_description(&path), expected, "{case}");
        if format == Format::Mp4 {
            // The container's own `colr` box (nclx: primaries 1 = BT.709, transfer 1 = BT.709,
            // matrix 6 = BT.601, then the full-range flag clear).
            let bytes = std::fs::read(&path).unwrap();
            let at = bytes
                .windows(8)
                .position(|window| window == b"colrnclx")
                .unwrap_or_else(|| panic!("{case}: no colr nclx box"));
            assert_eq!(bytes[at + 8..at + 15], [0, 1, 0, 1, 0, 6, 0], "{case}");
            // The H.264 stream alone (no container): its VUI says the same.
            let elementary = dir.path().join(format!("{width}x{height}.h264"));
            let status = std::process::Command::new("ffmpeg")
                .args(["-v", "error", "-y", "-i"])
                .arg(&path)
                .args(["-c:v", "copy", "-bsf:v", "h264_mp4toannexb", "-f", "h264"])
                .arg(&elementary)
                .status()
                .expect("ffmpeg runs");
            assert!(
                status.success(),
                "{case}: extracting the H.264 stream failed"
            );
            assert_eq!(
                colour_description(&elementary),
                expected,
                "{case}: H.264 VUI"
            );
        }
    }
}
