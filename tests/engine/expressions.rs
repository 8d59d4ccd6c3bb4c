//! Expressions baked into keyframes, seen in the pixels rlottie draws: each expected position
//! is computed from the expression and the template's keyframes, never read from our output.

use lottie_render::error::{Classified, ErrorClass};
use lottie_render::lottie::lowering::expressions::MAX_EXPRESSION_CPU;
use lottie_render::lottie::lowering::text::fonts::FontBook;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use lottie_render::os::current_thread_cpu_time;
use lottie_render::render::{self, RenderError};
use lottie_render::spec::{Format, Modifications, Rgba};
use serde_json::{json, Value};
use std::time::Duration;

use crate::helpers::{library_frames, spec};

const WIDTH: u32 = 200;
const HEIGHT: u32 = 100;
const FPS: u32 = 30;
/// Side of the square each layer draws, pixels.
const SQUARE: f64 = 10.0;

/// A shape layer drawing a square of `colour` centred on its position, which is `position`
/// (a property object, possibly with an expression).
fn square_layer(index: i64, name: &str, colour: [f64; 3], position: Value) -> Value {
    json!({"ty": 4, "ind": index, "nm": name, "ip": 0, "op": 60, "st": 0, "sr": 1,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "a": {"a": 0, "k": [0, 0, 0]},
               "s": {"a": 0, "k": [100, 100, 100]}, "p": position},
        "shapes": [{"ty": "gr", "nm": "square", "it": [
            {"ty": "rc", "d": 1, "s": {"a": 0, "k": [SQUARE, SQUARE]}, "p": {"a": 0, "k": [0, 0]},
             "r": {"a": 0, "k": 0}},
            {"ty": "fl", "c": {"a": 0, "k": [colour[0], colour[1], colour[2], 1]}, "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]},
             "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}]}]})
}

fn template(layers: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"v": "5.7.0", "fr": FPS, "ip": 0, "op": 60, "w": WIDTH, "h": HEIGHT,
        "ddd": 0, "assets": [], "layers": layers}),
    )
    .unwrap()
}

fn expression(static_value: [f64; 3], source: &str) -> Value {
    json!({"a": 0, "k": static_value, "x": source})
}

/// Straight RGBA frames rendered by the library (rlottie, no codec) at `FPS`.
fn frames(template: &[u8], indices: &[u32]) -> Vec<Vec<u8>> {
    modified_frames(template, &Modifications::default(), indices)
}

/// Straight RGBA frames of `template` with `modifications` at `FPS`.
fn modified_frames(
    template: &[u8],
    modifications: &Modifications,
    indices: &[u32],
) -> Vec<Vec<u8>> {
    let output = spec(Format::Webm, FPS, WIDTH, HEIGHT);
    let fonts = FontBook::default();
    library_frames(
        template,
        modifications,
        &fonts,
        output,
        indices.iter().copied(),
    )
}

/// Centre of the opaque pixels whose dominant channel is `channel` (0 red, 1 green, 2 blue).
fn centre(rgba: &[u8], channel: usize) -> Option<(f64, f64)> {
    let (mut sum_x, mut sum_y, mut count) = (0.0, 0.0, 0.0);
    for (index, pixel) in rgba.chunks(4).enumerate() {
        let dominant =
            (0..3).all(|c| c == channel || pixel[channel] > pixel[c].saturating_add(100));
        if pixel[3] > 200 && dominant {
            sum_x += (index as u32 % WIDTH) as f64 + 0.5;
            sum_y += (index as u32 / WIDTH) as f64 + 0.5;
            count += 1.0;
        }
    }
    (count > 0.0).then(|| (sum_x / count, sum_y / count))
}

fn assert_near(actual: (f64, f64), expected: (f64, f64), what: &str) {
    let distance = ((actual.0 - expected.0).powi(2) + (actual.1 - expected.1).powi(2)).sqrt();
    assert!(
        distance < 1.0,
        "{what}: square centred at {actual:?}, expected {expected:?}"
    );
}

/// A red square whose position expression moves it 100 px a second to the right.
fn moving_square() -> Vec<u8> {
    let position = expression([20.0, 20.0, 0.0], "[time * 100, 50]");
    template(vec![square_layer(1, "mover", [1.0, 0.0, 0.0], position)])
}

#[test]
fn a_position_expression_of_time_moves_the_shape_where_the_expression_says() {
    let bytes = moving_square();
    let indices = [3, 9, 15];
    for (index, rgba) in indices.iter().zip(frames(&bytes, &indices)) {
        let seconds = f64::from(*index) / f64::from(FPS);
        let found = centre(&rgba, 0).expect("the square is drawn");
        assert_near(found, (seconds * 100.0, 50.0), &format!("frame {index}"));
    }
}

#[test]
fn loop_out_cycle_repeats_the_keyframes() {
    // x goes 20 → 80 linearly over frames 0..10, then the expression cycles it.
    let keyframed = json!({"a": 1, "x": "var $bm_rt;\n$bm_rt = loopOut('cycle');", "k": [
        {"t": 0, "s": [20, 50, 0], "i": {"x": 1, "y": 1}, "o": {"x": 0, "y": 0}},
        {"t": 10, "s": [80, 50, 0]}]});
    let bytes = template(vec![square_layer(1, "cycler", [1.0, 0.0, 0.0], keyframed)]);
    let indices = [4, 14, 27];
    for (index, rgba) in indices.iter().zip(frames(&bytes, &indices)) {
        let phase = f64::from(index % 10) / 10.0;
        let found = centre(&rgba, 0).expect("the square is drawn");
        assert_near(
            found,
            (20.0 + 60.0 * phase, 50.0),
            &format!("frame {index}"),
        );
    }
}

#[test]
fn wiggle_is_the_same_on_every_render_and_stays_within_its_amplitude() {
    let bytes = template(vec![square_layer(
        1,
        "wiggler",
        [0.0, 0.0, 1.0],
        expression([100.0, 50.0, 0.0], "wiggle(3, 20)"),
    )]);
    let indices: Vec<u32> = (0..60).step_by(3).collect();
    let first = frames(&bytes, &indices);
    let second = frames(&bytes, &indices);
    assert!(first == second, "two renders of a wiggle differ");
    let centres: Vec<(f64, f64)> = first
        .iter()
        .map(|rgba| centre(rgba, 2).expect("the square is drawn"))
        .collect();
    for (x, y) in &centres {
        assert!(
            (x - 100.0).abs() <= 20.5 && (y - 50.0).abs() <= 20.5,
            "wiggled out of its amplitude: {centres:?}"
        );
    }
    let moved = centres
        .iter()
        .filter(|(x, y)| (x - 100.0).abs() > 2.0 || (y - 50.0).abs() > 2.0)
        .count();
    assert!(moved > indices.len() / 2, "it hardly wiggles: {centres:?}");
}

#[test]
fn an_endless_expression_is_a_warning_of_the_analysis_and_a_deterministic_render_failure() {
    let bytes = template(vec![square_layer(
        1,
        "stuck",
        [1.0, 0.0, 0.0],
        expression(
            [40.0, 60.0, 0.0],
            "var $bm_rt;\nwhile (true) {}\n$bm_rt = [0, 0];",
        ),
    )]);
    let error = prepare_error(&bytes, &Modifications::default());
    assert_eq!(
        error.reason().as_str(),
        "EXPRESSIONS_CPU_EXCEEDED",
        "{error}"
    );
    assert_eq!(error.class(), ErrorClass::Deterministic);
    let template = Template::parse(&bytes).expect("fenced");
    let warnings = InspectReport::new(&template).expect("report").warnings;
    assert!(
        warnings.iter().any(|warning| warning
            .starts_with("expression at $.layers[0].ks.p is not evaluated")
            && warning.contains("work budget")),
        "{warnings:?}"
    );
}

#[test]
fn a_layer_follows_another_layers_position_through_this_comp() {
    // A moves from (20, 30) to (180, 30) over frames 0..30 (linear); B follows A through an
    // expression, 40 px lower via an effect slider.
    let a_position = json!({"a": 1, "k": [
        {"t": 0, "s": [20, 30, 0], "i": {"x": 1, "y": 1}, "o": {"x": 0, "y": 0}},
        {"t": 30, "s": [180, 30, 0]}]});
    let mut follower = square_layer(
        2,
        "B",
        [0.0, 1.0, 0.0],
        expression(
            [0.0, 0.0, 0.0],
            "var $bm_rt;\n$bm_rt = add(thisComp.layer(\"A\").transform.position, [0, effect('Gap')('Slider')]);",
        ),
    );
    follower["ef"] = json!([{"ty": 5, "nm": "Gap", "mn": "ADBE Slider Control", "ix": 1, "en": 1,
        "ef": [{"ty": 0, "nm": "Slider", "mn": "ADBE Slider Control-0001", "ix": 1,
                "v": {"a": 0, "k": 40}}]}]);
    let bytes = template(vec![
        square_layer(1, "A", [1.0, 0.0, 0.0], a_position),
        follower,
    ]);
    let indices = [0, 12, 24, 40];
    for (index, rgba) in indices.iter().zip(frames(&bytes, &indices)) {
        let progress = (f64::from(*index) / 30.0).min(1.0);
        let a = (20.0 + 160.0 * progress, 30.0);
        assert_near(
            centre(&rgba, 0).expect("A drawn"),
            a,
            &format!("A at {index}"),
        );
        assert_near(
            centre(&rgba, 1).expect("B drawn"),
            (a.0, a.1 + 40.0),
            &format!("B at {index}"),
        );
    }
}

#[test]
fn every_expression_of_the_ripple_template_bakes() {
    let bytes = std::fs::read(crate::helpers::corpus("expressions-ripple-precomps.json")).unwrap();
    assert_every_expression_bakes(&bytes);
}

#[test]
fn expressions_bake_inside_the_sandboxed_worker_too() {
    // The same time expression, rendered by a real worker process (seccomp, Landlock, rlimits)
    // to WebM and decoded by ffmpeg: QuickJS runs under the worker's confinement.
    let bytes = moving_square();
    let dir = crate::helpers::tempdir();
    let path = dir.path().join("moving.json");
    std::fs::write(&path, bytes).unwrap();
    let (output, result) = crate::helpers::render_in_worker(
        &path,
        Modifications::default(),
        spec(Format::Webm, FPS, WIDTH, HEIGHT),
        dir.path(),
        std::time::Duration::from_secs(300),
    );
    result.expect("the worker renders it");
    let decoded = crate::helpers::decode_rgba(&output, WIDTH, HEIGHT);
    for index in [6u32, 18] {
        let seconds = f64::from(index) / f64::from(FPS);
        let found = centre(&decoded[index as usize], 0).expect("the square is drawn");
        let expected = (seconds * 100.0, 50.0);
        let distance = ((found.0 - expected.0).powi(2) + (found.1 - expected.1).powi(2)).sqrt();
        // VP9 blurs edges a little; the centre stays within a pixel and a half.
        assert!(
            distance < 1.5,
            "frame {index}: {found:?}, expected {expected:?}"
        );
    }
}

/// Why `render::prepare` refuses `template`.
fn prepare_error(template: &[u8], modifications: &Modifications) -> RenderError {
    match render::prepare(
        template,
        modifications,
        spec(Format::Webm, FPS, WIDTH, HEIGHT),
        &FontBook::default(),
    ) {
        Ok(_) => panic!("the template prepared"),
        Err(error) => error,
    }
}

/// CPU time an analysis or a render of a hog may take: the expressions' cap, a little past it
/// (from one check to the next in a debug build) and the rest of the work.
const WITHIN_THE_CAP: Duration = MAX_EXPRESSION_CPU.saturating_add(Duration::from_secs(1));

/// An expression searching a megabyte string again and again: one native call each time, a
/// gigabyte of work between two interrupt polls.
const STRING_SEARCH_HOG: &str =
    "var s = 'a'.repeat(1 << 20), n = 0; while (true) { n += s.indexOf('b'); } [n, n]";

#[test]
fn a_loop_of_megabyte_string_searches_is_a_warning_within_the_cpu_cap_not_a_failed_analysis() {
    let bytes = template(vec![
        square_layer(
            1,
            "hog",
            [1.0, 0.0, 0.0],
            expression([40.0, 60.0, 0.0], STRING_SEARCH_HOG),
        ),
        square_layer(
            2,
            "mover",
            [0.0, 1.0, 0.0],
            expression([20.0, 20.0, 0.0], "[time * 100, 50]"),
        ),
    ]);
    let template = Template::parse(&bytes).expect("fenced");
    let started = current_thread_cpu_time();
    let warnings = InspectReport::new(&template).expect("report").warnings;
    let took = current_thread_cpu_time() - started;
    assert!(took < WITHIN_THE_CAP, "the analysis took {took:?}");
    assert!(
        warnings.iter().any(|warning| warning
            .starts_with("expression at $.layers[0].ks.p is not evaluated")
            && warning.contains("work budget")),
        "{warnings:?}"
    );
    // A render of it ends as quickly, classified: it would fail the same way every time.
    let started = current_thread_cpu_time();
    let error = prepare_error(&bytes, &Modifications::default());
    let took = current_thread_cpu_time() - started;
    assert!(took < WITHIN_THE_CAP, "the render took {took:?}");
    assert_eq!(
        error.reason().as_str(),
        "EXPRESSIONS_CPU_EXCEEDED",
        "{error}"
    );
}

/// A template whose layer takes its opacity from the root `slots` object, with an expression.
fn root_slot_template(slot_expression: &str) -> Vec<u8> {
    let mut layer = square_layer(
        1,
        "slotted",
        [1.0, 0.0, 0.0],
        json!({"a": 0, "k": [40, 60, 0]}),
    );
    layer["ks"]["o"] = json!({"a": 0, "k": 100, "sid": "fade"});
    let mut json: Value = serde_json::from_slice(&template(vec![layer])).unwrap();
    json["slots"] = json!({"fade": {"p": {"a": 0, "k": 100, "x": slot_expression}}});
    serde_json::to_vec(&json).unwrap()
}

#[test]
fn an_expression_in_the_root_slots_object_is_evaluated_by_the_analysis() {
    let bytes = root_slot_template(STRING_SEARCH_HOG);
    let template = Template::parse(&bytes).expect("fenced");
    let started = current_thread_cpu_time();
    let warnings = InspectReport::new(&template).expect("report").warnings;
    assert!(current_thread_cpu_time() - started < WITHIN_THE_CAP);
    assert!(
        warnings.iter().any(|warning| warning
            .starts_with("expression at $.layers[0].ks.o is not evaluated")
            && warning.contains("work budget")),
        "{warnings:?}"
    );
    // An honest one bakes as the render bakes it: no warning.
    assert_every_expression_bakes(&root_slot_template("time * 50"));
}

/// Checks that the analysis of `template` warns of no expression (every one bakes).
fn assert_every_expression_bakes(template: &[u8]) {
    let template = Template::parse(template).expect("fenced");
    let warnings = InspectReport::new(&template).expect("report").warnings;
    assert!(
        !warnings
            .iter()
            .any(|warning| warning.contains("expression")),
        "{warnings:?}"
    );
}

#[test]
fn expressions_see_the_templates_colours_not_the_callers() {
    // The square moves right when its own fill (a colour slot) is red: the caller's blue
    // must neither move it nor start the hog gated on blue.
    let mut square = square_layer(
        1,
        "gated",
        [1.0, 0.0, 0.0],
        expression(
            [0.0, 0.0, 0.0],
            &format!(
                "var c = content('square').content('paint').color;\n\
                 if (c[2] > 0.5) {{ {STRING_SEARCH_HOG} }}\n\
                 c[0] > 0.5 ? [150, 50] : [50, 50]"
            ),
        ),
    );
    square["shapes"][0]["it"][1]["nm"] = json!("paint");
    let bytes = template(vec![square]);
    let blue = Modifications {
        colors: [("paint".to_owned(), Rgba::new(0.0, 0.0, 1.0, None).unwrap())].into(),
        ..Modifications::default()
    };
    let started = current_thread_cpu_time();
    let rendered = modified_frames(&bytes, &blue, &[0, 30]);
    let took = current_thread_cpu_time() - started;
    assert!(took < MAX_EXPRESSION_CPU / 2, "{took:?}: the hog ran");
    for rgba in &rendered {
        assert_near(
            centre(rgba, 2).expect("blue drawn"),
            (150.0, 50.0),
            "the template's red decides",
        );
    }
}

#[test]
fn a_loader_of_600_short_expressions_renders_at_60_fps() {
    // A hundred dots, six expressions each (wiggle, loopOut, valueAtTime delayed by the
    // layer's index, each dot's scale reading the previous dot's a little earlier), 40 frames
    // at 60 fps: the bake used to follow each chain back through every dot before it.
    use lottie_render::cli::bench_expressions::loaders::{loader, SIDE};
    let bytes = serde_json::to_vec(&loader(100, 40, 60)).unwrap();
    let template = Template::parse(&bytes).expect("fenced");
    let warnings = InspectReport::new(&template).expect("report").warnings;
    assert!(
        !warnings
            .iter()
            .any(|warning| warning.contains("expression")),
        "{warnings:?}"
    );
    let output = spec(Format::Webm, 60, SIDE, SIDE);
    let rendered = library_frames(
        &bytes,
        &Modifications::default(),
        &FontBook::default(),
        output,
        [0, 20, 39],
    );
    for rgba in &rendered {
        let drawn = rgba.chunks(4).filter(|pixel| pixel[3] > 20).count();
        assert!(drawn > 100 * 20, "{drawn} pixels drawn");
    }
    assert!(rendered[0] != rendered[1], "the loader does not move");
}
