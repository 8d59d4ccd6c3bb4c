//! Every hostile file in the corpus gets a clear, classified rejection or renders; none
//! crashes or hangs the caller. Each runs in a real worker process.

use crate::helpers::{corpus, probe, render_in_worker, spec, tempdir};
use lottie_render::error::ErrorClass;
use lottie_render::sandbox::FailureKind;
use lottie_render::spec::{Format, Modifications};
use std::time::Duration;

/// Worker deadline of the files that render or are refused: far more than a legitimate 2 s
/// render at 100×100 takes on a saturated 2-core machine (load about 6).
const DEADLINE: Duration = Duration::from_secs(60);
/// Worker deadline of the file that hangs rlottie: short, so the case stays quick (it ends
/// at this deadline whatever the machine).
const HANG_DEADLINE: Duration = Duration::from_secs(8);

#[derive(Debug, Clone, Copy)]
enum Expect {
    Renders,
    /// Refused before rendering; the message must contain this text.
    Rejected(&'static str),
    /// Loaded, then refused by rlottie itself.
    RendererRefuses,
    /// Never finishes: the worker runs out of its CPU budget (or, on a machine too loaded to
    /// give it a quarter of a core, passes its wall-clock backstop).
    DeadlineKills,
}

const CASES: &[(&str, Expect)] = &[
    ("bezier-10k-points.json", Expect::Renders),
    (
        "bezier-12k-points-dropped.json",
        Expect::Rejected("path has 12000 vertices"),
    ),
    (
        "bezier-huge-tangents-1e9-slow.json",
        Expect::Rejected("path coordinate beyond"),
    ),
    (
        "bezier-huge-tangents-3e10-hang.json",
        Expect::Rejected("path coordinate beyond"),
    ),
    (
        "bezier-mismatched-arrays.json",
        Expect::Rejected("path has 4 vertices but 1 entries in 'i'"),
    ),
    (
        "canvas-huge-100000.json",
        Expect::Rejected("$.w: canvas size must be 1..=8192"),
    ),
    (
        "canvas-negative.json",
        Expect::Rejected("$.w: canvas size must be 1..=8192"),
    ),
    (
        "canvas-zero.json",
        Expect::Rejected("$.w: canvas size must be 1..=8192"),
    ),
    ("control-valid-minimal.json", Expect::Renders),
    ("empty-layers.json", Expect::Renders),
    (
        "fr-zero.json",
        Expect::Rejected("$.fr: frame rate must be above 0"),
    ),
    (
        "frames-huge-op.json",
        Expect::Rejected("longer than the 600 s limit"),
    ),
    ("frames-negative.json", Expect::Renders),
    (
        "gradient-stop-count-mismatch.json",
        Expect::Rejected("gradient stop count"),
    ),
    (
        "group-nesting-deep-5000.json",
        Expect::Rejected("nests deeper than 256 levels"),
    ),
    ("int-fields-written-as-float.json", Expect::Renders),
    ("keyframe-empty-easing-arrays.json", Expect::RendererRefuses),
    ("keyframe-value-wrong-types.json", Expect::RendererRefuses),
    ("keyframes-unsorted-and-empty.json", Expect::Renders),
    ("matte-orphan.json", Expect::Renders),
    (
        "missing-layers-key.json",
        Expect::Rejected("missing field `layers`"),
    ),
    ("missing-w-h-fr-op.json", Expect::Rejected("missing field")),
    (
        "nulls-everywhere.json",
        Expect::Rejected("invalid type: null"),
    ),
    (
        "number-overflow-1e999.json",
        Expect::Rejected("number out of range"),
    ),
    ("numbers-1e308.json", Expect::Renders),
    (
        "op-before-ip.json",
        Expect::Rejected("out point 10 must be after in point 100"),
    ),
    (
        "parent-cycle.json",
        Expect::Rejected("parent cycle between layers 1 → 2 → 1"),
    ),
    (
        "parent-self.json",
        Expect::Rejected("parent cycle between layers 1 → 1"),
    ),
    (
        "polystar-billion-points.json",
        Expect::Rejected("star/polygon has 1000000000 points"),
    ),
    (
        "precomp-deep-nesting-2000.json",
        Expect::Rejected("precomps nest deeper than 32 levels"),
    ),
    (
        "precomp-mutual-cycle.json",
        Expect::Rejected("precomp reference cycle: a → b → a"),
    ),
    (
        "precomp-self-reference.json",
        Expect::Rejected("precomp reference cycle: loop → loop"),
    ),
    (
        "real-rlottie-repro-infinite-loop.json",
        Expect::DeadlineKills,
    ),
    (
        "refid-missing-asset.json",
        Expect::Rejected("names asset 'nope', which does not exist"),
    ),
    (
        "refid-wrong-asset-kind.json",
        Expect::Rejected("which is an image, not a precomposition"),
    ),
    (
        "repeater-billion-copies.json",
        Expect::Rejected("repeater makes 1000000000 copies"),
    ),
    (
        "strings-for-numbers.json",
        Expect::Rejected("invalid type: string \"30\""),
    ),
    ("stroke-dash-zero.json", Expect::Renders),
    ("text-layer-no-font.json", Expect::Renders),
    ("trim-path-extreme.json", Expect::Renders),
    ("unknown-types.json", Expect::Renders),
];

#[test]
fn every_malformed_file_has_an_expected_outcome() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/malformed");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CASES.iter().map(|(file, _)| (*file).to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn hostile_files_are_rejected_clearly_or_render_and_never_take_the_caller_down() {
    let dir = tempdir();
    let mut failures = Vec::new();
    for &(file, expect) in CASES {
        let template = corpus(&format!("malformed/{file}"));
        let (path, result) = render_in_worker(
            &template,
            Modifications::default(),
            spec(Format::Mp4, 30, 100, 100),
            dir.path(),
            match expect {
                Expect::DeadlineKills => HANG_DEADLINE,
                _ => DEADLINE,
            },
        );
        let verdict = match (expect, &result) {
            (Expect::Renders, Ok(output)) => {
                let probed = probe(&path);
                (probed.codec == "h264" && probed.frames == output.frame_count)
                    .then_some(())
                    .ok_or(format!("bad output {probed:?}"))
            }
            (Expect::Rejected(text), Err(failure)) => (failure.kind == FailureKind::Reported
                && failure.class == ErrorClass::Deterministic
                && failure.message.contains(text)
                && !path.exists())
            .then_some(())
            .ok_or(format!("{failure:?}")),
            (Expect::RendererRefuses, Err(failure)) => (failure.kind == FailureKind::Reported
                && failure.class == ErrorClass::Deterministic
                && failure.reason.as_str() == "TEMPLATE_UNRENDERABLE")
                .then_some(())
                .ok_or(format!("{failure:?}")),
            // Its CPU budget used up: not retryable, whatever the load; only a machine too
            // loaded to give it a quarter of a core makes the wall backstop come first.
            (Expect::DeadlineKills, Err(failure)) => ((failure.kind == FailureKind::CpuLimit
                && failure.class == ErrorClass::Deterministic
                && failure.reason.as_str() == "RENDER_CPU_EXCEEDED")
                || (failure.kind == FailureKind::DeadlineExceeded
                    && failure.class == ErrorClass::Transient
                    && failure.message.contains("the machine is loaded")))
            .then_some(())
            .ok_or(format!("{failure:?}")),
            (_, other) => Err(format!("{other:?}")),
        };
        if let Err(why) = verdict {
            failures.push(format!("{file}: expected {expect:?}, got {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
