//! What the pictures look like: colour modifications change only their slot's pixels,
//! retiming interpolates, odd sizes work, WebM keeps clean alpha, MP4 composites over the
//! background. Outputs are decoded with ffmpeg and compared pixel by pixel.

use crate::helpers::{
    corpus, decode_rgba, probe, render_in_worker, spec, tempdir, with_background,
};
use lottie_render::render::pixels::{convert, PixelLayout};
use lottie_render::render::{self};
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
    let prepared = render::prepare(
        &bytes,
        modifications,
        spec(Format::Webm, fps, size, size),
        &lottie_render::lottie::text::fonts::FontBook::default(),
    )
    .unwrap();
    let mut renderer = prepared.source.renderer().unwrap();
    frames
        .map(|index| {
            let premultiplied = renderer.render(index);
            let mut rgba = vec![0u8; premultiplied.len() * 4];
            convert(premultiplied, &mut rgba, PixelLayout::StraightRgba);
            rgba
        })
        .collect()
}

#[test]
fn a_colour_modification_changes_the_slot_pixels_and_nothing_else() {
    // Two named slots of the slots template: the ball and the background square.
    let file = "slots-ball-colors-opacity.json";
    let red = modifications(&[("ball_color", rgb(1.0, 0.0, 0.0))]);
    let blue = modifications(&[("ball_color", rgb(0.0, 0.0, 1.0))]);
    // Exact check on raw frames: pixels differ only where the ball is.
    let (raw_red, raw_blue) = (
        raw_frames(file, &red, 30, 200, 45..46),
        raw_frames(file, &blue, 30, 200, 45..46),
    );
    let changed: Vec<usize> = (0..200 * 200)
        .filter(|&i| raw_red[0][i * 4..i * 4 + 4] != raw_blue[0][i * 4..i * 4 + 4])
        .collect();
    assert!(
        changed.len() > 1000,
        "the ball should cover many pixels, {} changed",
        changed.len()
    );
    for &i in &changed {
        let (red_px, blue_px) = (
            &raw_red[0][i * 4..i * 4 + 3],
            &raw_blue[0][i * 4..i * 4 + 3],
        );
        assert!(
            red_px[0] >= red_px[2] && blue_px[2] >= blue_px[0],
            "pixel {i} changed but is not the ball: {red_px:?} / {blue_px:?}"
        );
    }
    // Encoded check: decode both MP4s; the ball area swaps red for blue, the rest stays.
    let dir = tempdir();
    let mut decoded = Vec::new();
    for mods in [red, blue] {
        let (path, result) = render_in_worker(
            &corpus(file),
            mods,
            spec(Format::Mp4, 30, 200, 200),
            dir.path(),
            DEADLINE,
        );
        result.unwrap();
        decoded.push(decode_rgba(&path, 200, 200).swap_remove(45));
    }
    let changed_set: HashSet<usize> = changed.iter().copied().collect();
    let (mut inside, mut outside, mut outside_count) = (0f64, 0f64, 0usize);
    for i in 0..200 * 200 {
        let difference: f64 = (0..3)
            .map(|c| (f64::from(decoded[0][i * 4 + c]) - f64::from(decoded[1][i * 4 + c])).abs())
            .sum();
        if changed_set.contains(&i) {
            inside += difference;
        } else {
            outside += difference;
            outside_count += 1;
        }
    }
    let (inside, outside) = (
        inside / changed.len() as f64,
        outside / outside_count as f64,
    );
    assert!(
        inside > 150.0,
        "ball pixels barely changed: mean difference {inside}"
    );
    assert!(
        outside < 3.0,
        "pixels outside the ball changed: mean difference {outside}"
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
