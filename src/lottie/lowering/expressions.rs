//! Expressions baked into keyframes. rlottie ignores Bodymovin expressions (`"x": "…"` on a
//! property); lottie-web runs them. Before rlottie loads a template, every property with an
//! expression is evaluated at every time its composition is shown ([`sampling`]) by QuickJS
//! with the After Effects vocabulary of `prelude.js`, and replaced by keyframes of those values.
//!
//! The engine runs in the render (or analysis) worker with no I/O (QuickJS without its libc
//! module: no files, network, timers or modules), a fixed random seed, a memory limit and a
//! budget for the whole template, by its frames ([`work_budget`]): deterministic work units
//! (interrupt polls and the bytes the built-ins of `metering.js` touch) and, behind them, a cap
//! on the thread's CPU time for work neither sees. An expression that fails, uses what is not provided, or is left when the
//! budget runs out keeps its static value and is named in the warnings with its JSON path; the
//! report says whether the budget ran out ([`ExpressionReport::budget_breach`]), which a render
//! treats as a failure of its own. A template without expressions is not touched.
//!
//! Here what is baked where; the QuickJS engine and its work budget are in `engine`.

mod engine;
pub mod paths;
pub(crate) mod sampling;

use engine::Engine;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Duration;

pub use sampling::MAX_SAMPLES_PER_COMPOSITION;

/// Memory QuickJS may allocate for one template: the template's JSON as JavaScript objects
/// (at most 8 MiB of text, images and glyphs left out) and the values being baked fit in a
/// fraction of it; a hostile expression building huge arrays or strings is stopped here, far
/// below the worker's own address-space limit.
pub(crate) const MAX_EXPRESSION_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Native stack QuickJS may use (deep or runaway recursion in an expression stops here with
/// a catchable error, well within the worker thread's stack).
pub(crate) const MAX_EXPRESSION_STACK_BYTES: usize = 1024 * 1024;
/// Work budget of a template's expressions for each of its output frames, in work units:
/// [`POLL_WORK_UNITS`] for each QuickJS interrupt poll (QuickJS polls the interrupt handler
/// every 10,000 calls and jumps, and its regular expressions every 10,000 steps), one for each
/// [`BYTES_PER_WORK_UNIT`] bytes touched by a built-in of `metering.js` (a native search over a
/// megabyte is one call to the polls). Counted, so it measures work the same way on every run
/// and machine (the same template always bakes the same values, whatever the load), unlike a
/// clock. Per frame, because honest expression work grows with the frames: every expression is
/// evaluated at every one. The frames are the template's at the highest output rate (60 fps),
/// whatever the render's: the analysis bakes at that rate, so a template it finds within budget
/// renders at any rate ([`work_budget`]). Measured with `lottie-render bench-expressions`
/// (docs/performance.md): a loader of 300 short expressions (wiggle, loops, `valueAtTime`
/// delayed by the layer's index, each dot reading the previous one) uses 132 units a frame,
/// one of 600 uses 261; 1,500 is eleven times the first.
pub const EXPRESSION_WORK_UNITS_PER_FRAME: u64 = 1_500;
/// Work budget of one template's expressions whatever its length (a second's at 60 fps), so
/// that a bake ends within the CPU the analysis may spend: honest expressions use it up in
/// about 2.4 s of CPU (21–27 µs a unit, measured in a release build), an endless loop in
/// 0.13 s, a loop of function calls in 0.7 s; all under [`MAX_EXPRESSION_CPU`] and inside the
/// analysis worker's 5 s CPU budget (`crate::analysis::ANALYSIS_CPU_SECONDS`: it builds the
/// report, so it bakes too), so a runaway expression is a warning, never a failed analysis.
/// The 300-expression loader of 60 frames uses 7,895 units of it.
pub const MAX_EXPRESSION_WORK_UNITS: u64 = 90_000;
/// Work units an interrupt poll counts. Honest expressions are mostly calls and straight-line
/// code (the prelude around each evaluation: finding the property, interpolating its
/// keyframes, checking the value): 250–320 µs of CPU a poll in a release build, measured on
/// the common expressions and the loaders, where an endless loop, one jump repeated, takes
/// 17 µs. Twelve units a poll make a unit 21–27 µs of honest work, so the budget counts what
/// honest templates cost; hogs of loops and calls are charged more than they cost, and stop
/// sooner.
pub const POLL_WORK_UNITS: u64 = 12;
/// Bytes a metered built-in touches per work unit (an array element counts 8 bytes). Measured
/// in the test build: the whole budget of megabyte `indexOf` calls (180 MiB) takes 0.37 s of
/// CPU, of `split` calls 0.65 s, where honest work takes 30–37 µs a unit there; so a unit of
/// plain searching costs an eighth of a unit of honest work, on purpose: splitting, replacing and building strings and arrays cost more per byte than a
/// search, and honest expressions touch little through built-ins (the prelude calls none per
/// evaluation; the ripple template's six, none).
pub const BYTES_PER_WORK_UNIT: u64 = 2048;
/// CPU time of the baking thread the expressions of one template may use: the backstop for
/// work neither the polls nor the metering count (operators on huge strings or numbers,
/// parsing what an expression hands `eval`, allocating in a loop), checked at every poll and
/// every metered call. Above the ~2 s the most work units take, so an honest template meets
/// the counted budget, not the clock; below the analysis worker's 5 s, so a template over it
/// is a warning, not a failed analysis.
pub const MAX_EXPRESSION_CPU: Duration = Duration::from_secs(3);
/// Baked values per template, all expressions together (each becomes a keyframe of a few
/// hundred bytes until rlottie has parsed it): a 60 s, 60 fps template with 69 expressions,
/// or 10 s with 416. Expressions past it keep their static value, with a warning.
pub(crate) const MAX_BAKED_SAMPLES: usize = 250_000;
/// Characters of an expression's path quoted in a warning; of an error message likewise.
const MAX_WARNING_DETAIL_CHARS: usize = 200;

/// What baking a template's expressions did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpressionReport {
    /// Properties whose expression now is keyframes.
    pub baked: usize,
    /// One line per expression left at its static value, naming its JSON path and why.
    pub warnings: Vec<String>,
    /// Work used, in work units.
    pub work_units: u64,
    /// The template's budget of work units ([`work_budget`]); 0 without expressions.
    pub work_budget: u64,
    /// Which budget ran out, if one did: the properties left keep their static value (and
    /// the warnings say so); a render fails instead (`EXPRESSIONS_CPU_EXCEEDED`).
    pub budget_breach: Option<BudgetBreach>,
}

/// The budget a template's expressions ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetBreach {
    /// Its work units ([`work_budget`]), of which it had `limit`.
    WorkUnits { limit: u64 },
    /// [`MAX_EXPRESSION_CPU`].
    CpuTime,
}

/// The work units a template's expressions may use: [`EXPRESSION_WORK_UNITS_PER_FRAME`] for
/// each output frame it has at `frames_at_highest_rate`, at most [`MAX_EXPRESSION_WORK_UNITS`].
pub fn work_budget(frames_at_highest_rate: usize) -> u64 {
    (frames_at_highest_rate as u64)
        .max(1)
        .saturating_mul(EXPRESSION_WORK_UNITS_PER_FRAME)
        .min(MAX_EXPRESSION_WORK_UNITS)
}

/// The highest output rate: the analysis bakes at it, and every budget is counted in its
/// frames.
fn highest_fps() -> u32 {
    crate::spec::Fps::SUPPORTED
        .iter()
        .copied()
        .max()
        .unwrap_or(60)
}

impl BudgetBreach {
    /// Why the expressions stopped, as warnings and errors say it.
    pub(crate) fn describe(self) -> String {
        match self {
            BudgetBreach::WorkUnits { limit } => format!(
                "the template's expressions used up their work budget of {limit} units \
                 ({EXPRESSION_WORK_UNITS_PER_FRAME} a frame at {} fps, at most \
                 {MAX_EXPRESSION_WORK_UNITS})",
                highest_fps()
            ),
            BudgetBreach::CpuTime => format!(
                "the template's expressions used up their work budget: {} s of CPU time",
                MAX_EXPRESSION_CPU.as_secs()
            ),
        }
    }
}

/// One property with an expression, as the prelude found it.
#[derive(Debug, Deserialize)]
struct Found {
    /// JSON pointer of the property object.
    path: String,
    /// Its composition: `None` the root, else the precomposition asset id.
    comp: Option<String>,
    /// Set when the property is of a kind not baked (text documents, paths).
    unsupported: Option<String>,
}

/// Evaluates every expression of `json` at the output frame times of an `fps` render and
/// replaces each property's expression by keyframes of its values.
pub fn bake(json: &mut Value, fps: u32) -> ExpressionReport {
    bake_metered(json, fps, Metering::On)
}

/// Whether the built-ins are metered: always, but for the test that shows metering changes
/// no honest value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Metering {
    On,
    #[cfg(test)]
    Off,
}

fn bake_metered(json: &mut Value, fps: u32, metering: Metering) -> ExpressionReport {
    if !has_expression(json) {
        return ExpressionReport::default();
    }
    let mut report = ExpressionReport::default();
    let frame_rate = json
        .get("fr")
        .and_then(Value::as_f64)
        .unwrap_or(f64::from(fps));
    let samplings = sampling::compositions(json, fps);
    let budget = work_budget(sampling::root(json, highest_fps()).count);
    let engine = match Engine::start(&evaluated_copy(json), frame_rate, budget, metering) {
        Ok(engine) => engine,
        Err(error) => {
            report.warnings.push(format!(
                "expressions are not evaluated (each property shows its static value): {}",
                shorten(&error)
            ));
            return report;
        }
    };
    let mut samples_left = MAX_BAKED_SAMPLES;
    let mut path_vertices_left = paths::MAX_BAKED_PATH_VERTICES;
    for (index, found) in engine.found.iter().enumerate() {
        let path = json_path(&found.path);
        let not_evaluated = |why: &str| {
            format!("expression at {path} is not evaluated ({why}); the property shows its static value")
        };
        if let Some(kind) = &found.unsupported {
            report.warnings.push(not_evaluated(&format!(
                "expressions on {kind} are not supported"
            )));
            continue;
        }
        // A composition never shown draws nothing: nothing to bake, nothing to warn about.
        let Some(grid) = samplings.get(&found.comp) else {
            continue;
        };
        if let Some(breach) = engine.budget.breach() {
            report.warnings.push(not_evaluated(&over_budget(breach)));
            continue;
        }
        let Some(left) = samples_left.checked_sub(grid.count) else {
            report.warnings.push(not_evaluated(&format!(
                "the template's expressions would bake more than {MAX_BAKED_SAMPLES} values"
            )));
            continue;
        };
        let baked = engine.bake(index, grid).and_then(|values| {
            paths::charge(&values, &mut path_vertices_left)?;
            Ok(values)
        });
        match baked {
            Ok(values) => {
                if let Some(property) = json.pointer_mut(&found.path) {
                    replace_with_keyframes(property, grid, values);
                    report.baked += 1;
                    samples_left = left;
                }
            }
            Err(error) => report.warnings.push(not_evaluated(&shorten(&error))),
        }
    }
    report.work_units = engine.budget.units();
    report.work_budget = engine.budget.limit();
    report.budget_breach = engine.budget.breach();
    report
}

/// Why an expression left when the budget ran out is not evaluated.
fn over_budget(breach: BudgetBreach) -> String {
    format!(
        "{}; a render that needs more fails with EXPRESSIONS_CPU_EXCEEDED",
        breach.describe()
    )
}

/// Whether any property of `json` carries an expression (a linear walk, no allocation but the
/// stack).
fn has_expression(json: &Value) -> bool {
    let mut stack = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if map.get("x").is_some_and(Value::is_string) && map.contains_key("k") {
                    return true;
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    false
}

/// The template as the engine sees it: without embedded image data and glyph outlines, which
/// no expression reads and which would take most of the engine's memory.
fn evaluated_copy(json: &Value) -> String {
    let mut copy = Map::new();
    let Some(root) = json.as_object() else {
        return "{}".to_owned();
    };
    for (key, value) in root {
        match key.as_str() {
            "chars" | "fonts" => {}
            "assets" => {
                let assets: Vec<Value> = value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|asset| match asset.get("layers") {
                        Some(_) => asset.clone(),
                        None => json!({"id": asset.get("id")}),
                    })
                    .collect();
                copy.insert(key.clone(), Value::Array(assets));
            }
            _ => {
                copy.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(copy).to_string()
}

/// `/assets/1/layers/0/ks/p` → `$.assets[1].layers[0].ks.p`, as the fence names paths.
fn json_path(pointer: &str) -> String {
    let mut path = String::from("$");
    for part in pointer.split('/').skip(1) {
        let part = part.replace("~1", "/").replace("~0", "~");
        if part.bytes().all(|byte| byte.is_ascii_digit()) && !part.is_empty() {
            path.push_str(&format!("[{part}]"));
        } else {
            path.push('.');
            path.push_str(&part);
        }
    }
    shorten(&path)
}

fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(MAX_WARNING_DETAIL_CHARS).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short.replace('\n', " ")
}

/// Replaces `property`'s expression by keyframes of `values` sampled on `grid`: a run of equal
/// values becomes one held keyframe, changes are linear in between, and a property that never
/// changes becomes static.
fn replace_with_keyframes(property: &mut Value, grid: &sampling::Sampling, values: Vec<Value>) {
    let Some(object) = property.as_object_mut() else {
        return;
    };
    object.remove("x");
    let as_keyframe_value = |value: &Value| match value {
        Value::Array(_) => value.clone(),
        other => Value::Array(vec![other.clone()]),
    };
    if values.windows(2).all(|pair| pair[0] == pair[1]) {
        if let Some(first) = values.first() {
            // A static one-dimensional value is a number: rlottie 0.1 reads a static `[30]`
            // as no value at all (and draws nothing), whatever the property was before.
            let value = match first.as_array().map(Vec::as_slice) {
                Some([single]) if single.is_number() => single.clone(),
                _ => first.clone(),
            };
            object.insert("a".to_owned(), json!(0));
            object.insert("k".to_owned(), value);
        }
        return;
    }
    let mut keyframes = Vec::new();
    for (index, value) in values.iter().enumerate() {
        let previous = index.checked_sub(1).and_then(|i| values.get(i));
        let next = values.get(index + 1);
        // Consecutive paths of different vertex counts do not interpolate: held.
        let holds = next.is_some_and(|next| next == value || !paths::interpolable(value, next));
        if previous == Some(value) && next == Some(value) {
            continue;
        }
        let time = grid.start + grid.step * index as f64;
        let mut keyframe = Map::new();
        keyframe.insert("t".to_owned(), json!(time));
        keyframe.insert("s".to_owned(), as_keyframe_value(value));
        if next.is_some() {
            if holds {
                keyframe.insert("h".to_owned(), json!(1));
            } else {
                keyframe.insert("i".to_owned(), json!({"x": 1, "y": 1}));
                keyframe.insert("o".to_owned(), json!({"x": 0, "y": 0}));
            }
        }
        keyframes.push(Value::Object(keyframe));
    }
    object.insert("a".to_owned(), json!(1));
    object.insert("k".to_owned(), Value::Array(keyframes));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer_with_position(expression: &str) -> Value {
        json!({"fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100, "layers": [
            {"ty": 4, "ind": 1, "nm": "A", "ip": 0, "op": 30, "st": 0, "shapes": [],
             "ks": {"p": {"a": 0, "k": [10, 20, 0], "x": expression}}}]})
    }

    #[test]
    fn a_template_without_expressions_is_left_as_it_is() {
        let mut json =
            json!({"fr": 30, "ip": 0, "op": 30, "layers": [{"ks": {"p": {"a": 0, "k": [1, 2]}}}]});
        let before = json.clone();
        assert_eq!(bake(&mut json, 30), ExpressionReport::default());
        assert_eq!(json, before);
    }

    #[test]
    fn a_time_expression_becomes_one_keyframe_per_output_frame() {
        let mut json = layer_with_position("[time * 100, 50]");
        let report = bake(&mut json, 30);
        assert_eq!(report.warnings, Vec::<String>::new());
        assert_eq!(report.baked, 1);
        let keyframes = json.pointer("/layers/0/ks/p/k").and_then(Value::as_array);
        let keyframes = keyframes.expect("keyframes");
        assert_eq!(keyframes.len(), 30);
        assert_eq!(keyframes[3]["t"], json!(3.0));
        // Missing components come from the static value (z = 0).
        assert_eq!(keyframes[3]["s"], json!([10, 50, 0]));
        assert!(json.pointer("/layers/0/ks/p/x").is_none());
    }

    #[test]
    fn bodymovin_expressions_with_bm_rt_and_helpers_evaluate() {
        let mut json = layer_with_position("var $bm_rt;\n$bm_rt = $bm_sum(value, mul([1, 2], 3));");
        let report = bake(&mut json, 30);
        assert_eq!(report.warnings, Vec::<String>::new());
        assert_eq!(json.pointer("/layers/0/ks/p/k"), Some(&json!([13, 26, 0])));
    }

    #[test]
    fn a_failing_expression_keeps_its_static_value_and_is_reported_with_its_path() {
        let mut json = layer_with_position("footage('x.png').sourceText");
        let report = bake(&mut json, 30);
        assert_eq!(report.baked, 0);
        assert_eq!(report.warnings.len(), 1);
        assert!(
            report.warnings[0]
                .starts_with("expression at $.layers[0].ks.p is not evaluated (ReferenceError"),
            "{:?}",
            report.warnings
        );
        assert_eq!(json.pointer("/layers/0/ks/p/k"), Some(&json!([10, 20, 0])));
    }

    /// The work budget ran out baking `expression` (the position's): said in the warnings,
    /// the position left at its static value.
    fn assert_budget_ran_out(report: &ExpressionReport, json: &Value, expression: &str) {
        assert!(
            report.warnings[0].contains("work budget"),
            "{expression}: {:?}",
            report.warnings
        );
        let position = json.pointer("/layers/0/ks/p/k");
        assert_eq!(position, Some(&json!([10, 20, 0])), "{expression}");
    }

    #[test]
    fn an_endless_expression_uses_up_the_budget_and_the_rest_keep_their_values() {
        let mut json = layer_with_position("while (true) {}");
        let report = bake(&mut json, 30);
        assert_eq!(report.baked, 0);
        assert_budget_ran_out(&report, &json, "while (true) {}");
    }

    #[test]
    fn the_ripple_template_bakes_within_a_small_part_of_the_work_budget() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/corpus/expressions-ripple-precomps.json"
        );
        let mut json: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let report = bake(&mut json, 60);
        println!(
            "ripple at 60 fps: {} expressions baked, {} work units",
            report.baked, report.work_units
        );
        assert_eq!(
            (report.baked, report.warnings.len()),
            (6, 0),
            "{:?}",
            report.warnings
        );
        assert!(report.work_units < report.work_budget / 20);
        assert_eq!(report.budget_breach, None);
    }

    #[test]
    fn metering_changes_no_value_an_honest_template_bakes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/corpus/expressions-ripple-precomps.json"
        );
        let original: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let (mut metered, mut unmetered) = (original.clone(), original);
        let metered_report = bake_metered(&mut metered, 60, Metering::On);
        let unmetered_report = bake_metered(&mut unmetered, 60, Metering::Off);
        assert_eq!(metered_report.baked, 6);
        assert_eq!(metered_report.warnings, unmetered_report.warnings);
        assert!(metered == unmetered, "metering changed a baked value");
        // Strings, arrays and typed arrays through the metered built-ins and constructors.
        let source = "var n, parts = 'a,bb,ccc'.split(','); var t = new Float64Array([1, 2, 3]);\n\
                      var a = new Array(3).fill(2).concat([1]).slice(1);\n\
                      n = parts.join('-').indexOf('c') + 'x'.repeat(3).length + t.slice(1)[0] +\n\
                      a.length + [3, 1, 2].sort()[0] + (a instanceof Array ? 100 : 0);\n\
                      [n + time * 30, 0]";
        for metering in [Metering::On, Metering::Off] {
            let mut json = layer_with_position(source);
            let report = bake_metered(&mut json, 30, metering);
            assert_eq!(report.warnings, Vec::<String>::new());
            assert_eq!(
                json["layers"][0]["ks"]["p"]["k"][1]["s"],
                json!([115, 0, 0])
            );
        }
    }

    /// How far past the CPU cap a bake may go: from one check to the next (a metered call,
    /// or a poll) in a debug build.
    const CPU_CAP_OVERSHOOT: Duration = Duration::from_millis(500);

    #[test]
    fn a_loop_of_megabyte_string_searches_ends_within_the_cpu_cap_with_a_warning() {
        for loop_body in [
            "n += s.indexOf('b');",
            // A caught refusal: the next poll ends the loop.
            "try { n += s.includes('b') ? 1 : 0; } catch (e) {}",
            "n += s.split('a').length;",
            "n += s.replace('a', 'b').length;",
            "n += s.padStart(1 << 20, 'x').length + s.search(/b/);",
        ] {
            let mut json = layer_with_position(&format!(
                "var s = 'a'.repeat(1 << 20), n = 0; while (true) {{ {loop_body} }} n"
            ));
            let started = crate::os::current_thread_cpu_time();
            let report = bake(&mut json, 30);
            let used = crate::os::current_thread_cpu_time().saturating_sub(started);
            println!(
                "{loop_body}: {used:?} of CPU, {} work units, {:?}",
                report.work_units, report.budget_breach
            );
            // Work units end it (in a release build, in a fraction of a second); in a debug
            // build QuickJS is slower than the units assume and the CPU cap may come first.
            assert!(
                used < MAX_EXPRESSION_CPU + CPU_CAP_OVERSHOOT,
                "{loop_body}: {used:?}"
            );
            assert!(report.budget_breach.is_some(), "{loop_body}");
            assert_budget_ran_out(&report, &json, loop_body);
        }
    }

    #[test]
    fn an_expression_cannot_reach_an_unmetered_built_in() {
        let mut json = layer_with_position(
            "var leaked = [];\n\
             Reflect.apply = function (f) { leaked.push(f); return 0; };\n\
             Reflect.construct = function (f) { leaked.push(f); return []; };\n\
             'ab'.indexOf('b'); new Uint8Array(4); [1].join();\n\
             [leaked.length, String.prototype.indexOf.toString().indexOf('native code') < 0 ? 1 : 0]",
        );
        let report = bake(&mut json, 30);
        assert_eq!(report.warnings, Vec::<String>::new());
        assert_eq!(json.pointer("/layers/0/ks/p/k"), Some(&json!([0, 1, 0])));
    }

    /// The baked opacity of a one-layer template (30 fps, frames 0..60) at `frame`.
    fn baked_opacity(opacity: Value, frame: f64) -> f64 {
        let mut json = json!({"fr": 30, "ip": 0, "op": 60, "w": 10, "h": 10, "layers": [
            {"ty": 4, "ind": 1, "nm": "A", "ip": 0, "op": 60, "st": 0, "shapes": [],
             "ks": {"o": opacity}}]});
        let report = bake(&mut json, 30);
        assert_eq!(report.warnings, Vec::<String>::new());
        baked_value(&json["layers"][0]["ks"]["o"], frame)
    }

    /// The value of a baked one-dimensional `property` at `frame`.
    fn baked_value(property: &Value, frame: f64) -> f64 {
        let number = |value: &Value| {
            value
                .as_f64()
                .or_else(|| value.get(0).and_then(Value::as_f64))
                .unwrap()
        };
        let Some(keyframes) = property["k"].as_array() else {
            return number(&property["k"]);
        };
        let at = keyframes
            .iter()
            .rposition(|k| k["t"].as_f64().unwrap() <= frame)
            .unwrap();
        let (key, next) = (&keyframes[at], keyframes.get(at + 1));
        let start = number(&key["s"]);
        match next {
            Some(next) if key.get("h").is_none() => {
                let (t0, t1) = (key["t"].as_f64().unwrap(), next["t"].as_f64().unwrap());
                start + (number(&next["s"]) - start) * (frame - t0) / (t1 - t0)
            }
            _ => start,
        }
    }

    #[test]
    fn the_expression_vocabulary_gives_the_values_after_effects_defines() {
        let ramp = |from: f64, to: f64| {
            json!([{"t": from, "s": [0], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
                   {"t": to, "s": [100]}])
        };
        let cases: Vec<(&str, Value, f64, f64)> = vec![
            ("linear(time, 0, 1, 0, 100)", json!(0), 15.0, 50.0),
            ("clamp(time * 200, 0, 100)", json!(0), 6.0, 40.0),
            ("clamp(time * 200, 0, 100)", json!(0), 15.0, 100.0),
            ("ease(time, 0.5, 1, 20, 100)", json!(0), 6.0, 20.0),
            ("ease(time, 0, 1, 0, 100)", json!(0), 30.0, 100.0),
            ("length([3, 4]) + normalize([3, 4])[0]", json!(0), 3.0, 5.6),
            (
                "thisComp.layer(1).name == 'A' ? index * 7 : 0",
                json!(0),
                3.0,
                7.0,
            ),
            ("Math.max(thisLayer.index, 3)", json!(0), 3.0, 3.0),
            ("valueAtTime(time / 2)", ramp(0.0, 30.0), 20.0, 100.0 / 3.0),
            ("loopOut('cycle')", ramp(0.0, 10.0), 14.0, 40.0),
            ("loopOut('pingpong')", ramp(0.0, 10.0), 15.0, 50.0),
            ("loopOut('pingpong')", ramp(0.0, 10.0), 12.0, 80.0),
            ("loopOut('offset')", ramp(0.0, 10.0), 15.0, 150.0),
            ("loopOut('continue')", ramp(0.0, 10.0), 15.0, 150.0),
            ("loopIn('cycle')", ramp(10.0, 20.0), 5.0, 50.0),
            (
                "var $bm_rt;\n$bm_rt = $bm_div($bm_sum(value, 10), 2);",
                json!(30),
                3.0,
                20.0,
            ),
            ("random() === random() ? 0 : 1", json!(0), 3.0, 1.0),
            // One expression compiled once, a trailing semicolon and all; statements and a
            // block evaluated as statements (their completion value).
            ("time * 30;", json!(0), 12.0, 12.0),
            ("var x = time * 30; x + 1", json!(0), 12.0, 13.0),
            ("{ 42 }", json!(0), 12.0, 42.0),
            ("if (time > 0.5) { 7 } else { 3 }", json!(0), 12.0, 3.0),
        ];
        for (source, k, frame, expected) in cases {
            let animated = k.is_array();
            let opacity = json!({"a": i32::from(animated), "k": k, "x": source});
            let value = baked_opacity(opacity, frame);
            assert!(
                (value - expected).abs() < 0.01,
                "{source} at frame {frame}: {value}, expected {expected}"
            );
        }
    }

    #[test]
    fn another_propertys_value_at_a_time_is_its_keyframes_as_lottie_web_reads_it() {
        // A turns 0 → 90° over frames 0..30 and its expression adds 100; B reads A at a time
        // (its keyframes: lottie-web's `valueAtTime`), C reads A now (its expression's value).
        let layer = |index: i64, rotation: Value| {
            json!({"ty": 4, "ind": index, "nm": format!("L{index}"), "ip": 0, "op": 60, "st": 0,
                   "shapes": [], "ks": {"r": rotation}})
        };
        let mut json = json!({"fr": 30, "ip": 0, "op": 60, "w": 10, "h": 10, "layers": [
            layer(1, json!({"a": 1, "x": "value + 100", "k": [
                {"t": 0, "s": [0], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
                {"t": 30, "s": [90]}]})),
            layer(2, json!({"a": 0, "k": 0,
                "x": "thisComp.layer(1).transform.rotation.valueAtTime(time)"})),
            layer(3, json!({"a": 0, "k": 0, "x": "thisComp.layer(1).transform.rotation"}))]});
        let report = bake(&mut json, 30);
        assert_eq!(report.warnings, Vec::<String>::new());
        let rotation = |layer: usize| baked_value(&json["layers"][layer]["ks"]["r"], 15.0);
        assert!((rotation(0) - 145.0).abs() < 0.01, "{}", rotation(0));
        assert!((rotation(1) - 45.0).abs() < 0.01, "{}", rotation(1));
        assert!((rotation(2) - 145.0).abs() < 0.01, "{}", rotation(2));
    }

    #[test]
    fn loaders_of_300_short_expressions_bake_at_60_fps_within_a_tenth_of_their_budget() {
        for frames in [40, 60] {
            let mut json = crate::cli::bench_expressions::loaders::loader(50, frames, 60);
            let report = bake(&mut json, 60);
            println!(
                "{frames} frames: {} units of {}",
                report.work_units, report.work_budget
            );
            assert_eq!(
                (report.baked, report.warnings.len()),
                (300, 0),
                "{:?}",
                report.warnings
            );
            assert!(
                report.work_units * 10 <= report.work_budget,
                "{frames} frames: {} units of {}",
                report.work_units,
                report.work_budget
            );
        }
    }

    #[test]
    fn an_endless_expression_in_a_short_template_stops_at_the_budget_of_its_frames() {
        // Ten frames at 60 fps: a render at 30 fps has the same budget as the analysis.
        let mut template = layer_with_position("while (true) {}");
        template["fr"] = json!(60);
        template["op"] = json!(10);
        for fps in [60, 30] {
            let mut json = template.clone();
            let report = bake(&mut json, fps);
            let limit = 10 * EXPRESSION_WORK_UNITS_PER_FRAME;
            assert_eq!(report.work_budget, limit);
            assert_eq!(
                report.budget_breach,
                Some(BudgetBreach::WorkUnits { limit })
            );
            assert!(report.work_units >= limit && report.work_units < limit + POLL_WORK_UNITS);
            assert_budget_ran_out(&report, &json, "while (true) {}");
        }
    }

    #[test]
    fn random_numbers_are_the_same_on_every_bake() {
        let opacity = json!({"a": 0, "k": 0, "x": "random(0, 100)"});
        let first: Vec<f64> = (0..30)
            .map(|f| baked_opacity(opacity.clone(), f64::from(f)))
            .collect();
        let second: Vec<f64> = (0..30)
            .map(|f| baked_opacity(opacity.clone(), f64::from(f)))
            .collect();
        assert_eq!(first, second);
        assert!(first.iter().all(|v| (0.0..=100.0).contains(v)));
        assert!(first.windows(2).any(|pair| pair[0] != pair[1]), "{first:?}");
    }

    #[test]
    fn an_expression_over_the_memory_limit_is_reported_and_the_next_one_still_bakes() {
        let mut json = json!({"fr": 30, "ip": 0, "op": 30, "w": 10, "h": 10, "layers": [
            {"ty": 4, "ind": 1, "nm": "hog", "ip": 0, "op": 30, "st": 0, "shapes": [],
             "ks": {"o": {"a": 0, "k": 100,
                "x": "var a = []; for (;;) { a.push(a.length); } 0"}}},
            {"ty": 4, "ind": 2, "nm": "fine", "ip": 0, "op": 30, "st": 0, "shapes": [],
             "ks": {"o": {"a": 0, "k": 100, "x": "time * 10"}}}]});
        let report = bake(&mut json, 30);
        assert_eq!(report.baked, 1, "{:?}", report.warnings);
        assert_eq!(report.warnings.len(), 1);
        assert!(
            report.warnings[0].contains("out of memory"),
            "{:?}",
            report.warnings
        );
        assert_eq!(report.budget_breach, None);
        assert_eq!(json["layers"][0]["ks"]["o"]["k"], json!(100));
    }

    #[test]
    fn keyframe_runs_of_equal_values_are_held() {
        let mut property = json!({"a": 0, "k": 0, "x": "1"});
        let grid = sampling::Sampling {
            start: 0.0,
            step: 1.0,
            count: 5,
        };
        let values = [0, 0, 0, 5, 5].map(|v| json!(v)).to_vec();
        replace_with_keyframes(&mut property, &grid, values);
        let keyframes = property["k"].as_array().expect("keyframes");
        let times: Vec<_> = keyframes.iter().map(|k| k["t"].clone()).collect();
        assert_eq!(times, [json!(0.0), json!(2.0), json!(3.0), json!(4.0)]);
        assert_eq!(keyframes[0]["h"], json!(1));
        assert!(keyframes[1].get("h").is_none());
    }
}
