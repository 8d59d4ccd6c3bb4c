//! The `render` and `inspect` commands as a person runs them: exit codes, messages, and
//! no partial output left behind.

use crate::helpers::{corpus, executable, probe, tempdir};
use std::process::Command;

fn render(args: &[&str]) -> std::process::Output {
    Command::new(executable())
        .arg("render")
        .args(args)
        .output()
        .unwrap()
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn render_writes_the_output_with_modifications_and_exits_zero() {
    let dir = tempdir();
    let out = dir.path().join("ball.mp4");
    let template = corpus("slots-ball-colors-opacity.json");
    let result = render(&[
        template.to_str().unwrap(),
        "--format",
        "mp4",
        "--width",
        "200",
        "--height",
        "200",
        "--color",
        "ball_color=#00ff00",
        "--background",
        "#000000",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(String::from_utf8_lossy(&result.stderr).contains("wrote"));
    assert_eq!(probe(&out).codec, "h264");
    assert_eq!(files_in(dir.path()), ["ball.mp4"]);
}

#[test]
fn invalid_command_line_values_are_usage_errors() {
    let dir = tempdir();
    let out = dir.path().join("x.gif");
    let template = corpus("simple-bouncy-ball-60fps.json");
    let cases: &[(&[&str], &str)] = &[
        (&["--color", "Fill=#ff00zz"], "expected #RRGGBB"),
        (&["--color", "Fill"], "expected ID=#RRGGBB"),
        (&["--fps", "24"], "must be 30 or 60"),
        (&["--width", "99"], "--width size: must be 100..=1920"),
        (&["--background", "red"], "--background"),
    ];
    for (extra, message) in cases {
        let mut args = vec![
            template.to_str().unwrap(),
            "--format",
            "gif",
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let result = render(&args);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(64), "{extra:?}: {stderr}");
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
    }
    assert!(files_in(dir.path()).is_empty());
}

/// Runs `render` with `args` (plus `-o` into a fresh directory) and checks that it fails
/// with `code`, says `message`, and leaves no file behind.
fn assert_render_fails_cleanly(template: &str, args: &[&str], code: i32, message: &str) {
    let dir = tempdir();
    let out = dir.path().join("out");
    let template = corpus(template);
    let mut all = vec![template.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let result = render(&all);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
    assert!(
        files_in(dir.path()).is_empty(),
        "left behind: {:?}",
        files_in(dir.path())
    );
}

#[test]
fn an_unknown_slot_is_a_deterministic_failure_listing_the_valid_slots_with_no_output() {
    assert_render_fails_cleanly(
        "slots-ball-colors-opacity.json",
        &["--format", "webm", "--color", "nope=#ffffff"],
        65,
        "valid colour slots: ball_color, bg_color",
    );
}

#[test]
/// rlottie looping forever: the worker uses up its CPU budget (the `--timeout` budget's), a
/// verdict on the template whatever the machine's load (issue 43): exit 65, not 75.
fn a_template_that_hangs_rlottie_uses_up_its_cpu_budget_and_leaves_nothing_behind() {
    assert_render_fails_cleanly(
        "malformed/real-rlottie-repro-infinite-loop.json",
        &[
            "--format",
            "gif",
            "--width",
            "100",
            "--height",
            "100",
            "--timeout",
            "3",
        ],
        65,
        "used up its CPU budget",
    );
}

#[test]
fn a_hostile_template_is_refused_with_its_json_path() {
    assert_render_fails_cleanly(
        "malformed/canvas-negative.json",
        &["--format", "mp4"],
        65,
        "$.w: canvas size must be 1..=8192 pixels, got -100",
    );
}

#[test]
fn a_worker_that_runs_out_of_memory_is_a_transient_failure() {
    // 200 MiB of address space loads the worker but cannot hold a 1080×1080 H.264 encode;
    // 40 MiB cannot even map its libraries. Neither is the caller's fault.
    for (limit, message) in [
        ("200", "ran out of memory under its 200 MiB limit"),
        ("40", "ran out of memory under its 40 MiB limit"),
    ] {
        assert_render_fails_cleanly(
            "heavy-tractor-263-layers.json",
            &["--format", "mp4", "--memory-limit-mb", limit],
            75,
            message,
        );
    }
}

#[test]
fn inspect_reports_timing_layers_slots_and_warnings_as_json() {
    let output = Command::new(executable())
        .arg("inspect")
        .arg(corpus("ui-toggle-on-off-text.json"))
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["width"], 700);
    assert_eq!(report["frame_rate"], 60.0);
    assert_eq!(
        (report["in_frame"].as_f64(), report["out_frame"].as_f64()),
        (Some(50.0), Some(170.0))
    );
    assert_eq!(report["duration_seconds"], 2.0);
    assert_eq!(report["layer_count"], 4);
    let texts: Vec<&str> = report["slots"]["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["OFF", "ON"]);
    assert_eq!(report["slots"]["texts"][0]["default_text"], "OFF");
    assert_eq!(report["slots"]["colors"][0]["id"], "Fill 1");
    assert_eq!(report["slots"]["colors"][0]["binding_count"], 4);
    // Its texts are drawn in its own glyphs (`chars`), so no font fallback is reported; its
    // merge paths are.
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("merge paths"), "{warnings}");
    assert!(!warnings.contains("was not uploaded"), "{warnings}");
    let bad = Command::new(executable())
        .arg("inspect")
        .arg(corpus("malformed/parent-cycle.json"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(65));
}
