//! Images are data, never paths, in the worker too: embedded PNGs are drawn (their pixels
//! reach the output), and a template naming a file (stored before the check existed, or
//! written into the data directory by other means) fails at once, deterministically, instead
//! of rlottie opening the file (a device such as /dev/ptmx used to hold the worker until its
//! deadline).

use crate::helpers::{corpus, decode_rgba, render_in_worker, spec, tempdir};
use lottie_render::error::ErrorClass;
use lottie_render::spec::{Format, Modifications};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIZE: u32 = 100;

/// The heart template cut to its first second (it lasts nine minutes), written to `dir`,
/// with `edit` applied to its image asset.
fn short_heart(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut json: Value =
        serde_json::from_slice(&std::fs::read(corpus("image-base64-heart.json")).unwrap()).unwrap();
    json["op"] = 60.into();
    for layer in json["layers"].as_array_mut().unwrap() {
        layer["op"] = 60.into();
    }
    edit(&mut json["assets"][0]);
    let path = dir.join(format!("heart-{}.json", std::process::id()));
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

/// `template` rendered to a WebM of [`SIZE`]² by a worker process, its output in `dir`.
fn render_webm(
    template: &std::path::Path,
    dir: &std::path::Path,
) -> (
    std::path::PathBuf,
    Result<lottie_render::render::OutputInfo, lottie_render::sandbox::WorkerFailure>,
) {
    let output = spec(Format::Webm, 30, SIZE, SIZE);
    let deadline = Duration::from_secs(120);
    render_in_worker(template, Modifications::default(), output, dir, deadline)
}

#[test]
fn the_embedded_hearts_own_red_appears_in_the_rendered_video() {
    let dir = tempdir();
    let template = short_heart(dir.path(), |_| {});
    let (output, result) = render_webm(&template, dir.path());
    result.unwrap();
    let frames = decode_rgba(&output, SIZE, SIZE);
    // The PNG's heart is (255, 7, 7); the solid layer behind it is blue (#0600ff).
    let red = frames[0]
        .chunks(4)
        .filter(|pixel| pixel[0] > 220 && pixel[1] < 60 && pixel[2] < 60 && pixel[3] > 200)
        .count();
    let total = (SIZE * SIZE) as usize;
    assert!(
        red > total / 5,
        "only {red} of {total} pixels show the heart's red"
    );
}

#[test]
fn a_template_naming_a_device_or_a_file_is_refused_by_the_worker_at_once() {
    let dir = tempdir();
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 3] = [
        ("device", |asset| {
            asset["e"] = 0.into();
            asset["u"] = "/dev/".into();
            asset["p"] = "ptmx".into();
        }),
        ("file outside", |asset| {
            asset["e"] = 0.into();
            asset["u"] = "/../../../../usr/share/".into();
            asset["p"] = "logo.png".into();
        }),
        ("data without e", |asset| {
            asset.as_object_mut().unwrap().remove("e");
        }),
    ];
    for (case, edit) in cases {
        let template = short_heart(dir.path(), edit);
        let started = Instant::now();
        let (_, result) = render_webm(&template, dir.path());
        let failure = result.expect_err(case);
        assert_eq!(
            (failure.reason.as_str(), failure.class),
            ("TEMPLATE_INVALID", ErrorClass::Deterministic),
            "{case}: {failure}"
        );
        assert!(
            failure.message.contains("$.assets[0]"),
            "{case}: {}",
            failure.message
        );
        // Budget with a wide margin: the refusal is a parse, the old hang lasted the deadline.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{case}: {:?}",
            started.elapsed()
        );
    }
}
