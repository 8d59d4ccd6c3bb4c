//! Regression tests for what the fuzz targets (`fuzz/`, `./dev fuzz TARGET`) found, end to
//! end. Findings fixed in one module also have a unit test beside the code.

use crate::helpers::{render_in_worker, spec, tempdir};
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::Template;
use lottie_render::spec::{Format, Modifications};
use serde_json::json;
use std::time::Duration;

/// Worker deadline: a 2 s render at 100×100 on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// What the fuzz targets allow an answer about a template (an error, its warnings, its slot
/// report): it may quote the template, but stays in proportion to it.
fn answer_budget(template_bytes: usize) -> usize {
    4 * template_bytes + 4096
}

#[test]
fn a_keyframe_time_near_the_largest_float_still_renders_after_retiming() {
    // Target `prepare`: 1.7e308 × 30/24 overflowed to infinity, which serde_json writes as
    // null, so the document handed to rlottie held `"t": null`.
    let template = json!({"v": "5.7.4", "fr": 24, "ip": 0, "op": 48, "w": 100, "h": 100,
        "layers": [{"ty": 4, "ind": 1, "ip": 0, "op": 48, "st": 0,
            "ks": {"o": {"a": 1, "k": [{"t": 0, "s": [0], "o": {"x": [0.5], "y": [0.5]},
                "i": {"x": [0.5], "y": [0.5]}}, {"t": 1.7e308, "s": [100]}]}},
            "shapes": [{"ty": "gr", "it": [
                {"ty": "rc", "p": {"a": 0, "k": [50, 50]}, "s": {"a": 0, "k": [80, 80]},
                    "r": {"a": 0, "k": 0}},
                {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100}},
                {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
                    "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0},
                    "o": {"a": 0, "k": 100}}]}]}]});
    let dir = tempdir();
    let path = dir.path().join("huge-keyframe-time.json");
    std::fs::write(&path, template.to_string()).unwrap();
    let (_, result) = render_in_worker(
        &path,
        Modifications::default(),
        spec(Format::Webm, 30, 100, 100),
        dir.path(),
        DEADLINE,
    );
    let info = result.unwrap_or_else(|failure| panic!("refused: {failure:?}"));
    assert_eq!(info.frame_count, 60);
}

#[test]
fn text_warnings_stay_in_proportion_to_the_template() {
    // Target `prepare`: one warning per character no font has, each quoting the layer's
    // name, so an 11 KB template (a 10,000-character name, 300 CJK characters) drew 3 MB of
    // warnings into its report; an 8 MiB one would draw gigabytes in the server.
    let text: String = (0..300u32)
        .filter_map(|offset| char::from_u32(0x4E00 + offset))
        .collect();
    let template = json!({"v": "5.7.4", "fr": 30, "ip": 0, "op": 10, "w": 100, "h": 100,
        "layers": [{"ty": 5, "ind": 1, "nm": "N".repeat(10_000), "ip": 0, "op": 10, "st": 0,
            "ks": {}, "t": {"d": {"k": [{"s": {"t": text, "f": "A", "s": 10}, "t": 0}]}}}]})
    .to_string();
    let parsed = Template::parse(template.as_bytes()).unwrap();
    let report = InspectReport::new(&parsed).unwrap();
    let warning_bytes: usize = report.warnings.iter().map(String::len).sum();
    assert!(
        warning_bytes <= answer_budget(template.len()),
        "{warning_bytes} bytes of warnings for a {} byte template",
        template.len()
    );
}
