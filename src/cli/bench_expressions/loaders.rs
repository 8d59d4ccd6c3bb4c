//! Templates for measuring expressions, written here (not copied from any collection): loaders
//! as designers build them, many small layers each with a few short expressions, and one
//! template per common expression for the bench's cost per call.

use serde_json::{json, Value};

/// Canvas side of the generated templates, pixels.
pub const SIDE: u32 = 200;

/// A loader of `dots` dots on a circle, each a shape layer with six short expressions (so
/// `6 × dots` in all), `frames` frames long at `frame_rate`: what loaders from public
/// collections do, in the words After Effects and Bodymovin write them.
/// - rotation: keyframed half turn, `loopOut('cycle')`;
/// - position: `wiggle(3, 2)` around the dot's place;
/// - opacity: its own keyframes delayed by the layer's index (`valueAtTime(time - delay)`);
/// - scale: the previous layer's scale a little earlier (`thisComp.layer(index - 1)`), a chain
///   through all the dots; the first dot's own keyframes ping-pong (`loopOut('pingpong')`);
/// - fill colour: keyframed, `loopOut('pingpong')`;
/// - ellipse size: `linear` of a sine of `time` and `index`.
pub fn loader(dots: usize, frames: u32, frame_rate: u32) -> Value {
    let layers: Vec<Value> = (1..=dots)
        .map(|index| dot_layer(index, dots, frames))
        .collect();
    json!({"v": "5.7.4", "nm": "loader", "fr": frame_rate, "ip": 0, "op": frames, "w": SIDE,
        "h": SIDE, "ddd": 0, "assets": [], "layers": layers})
}

/// Two linear keyframes of `from` at frame 0 and `to` at `at` (one-dimensional values as
/// one-element arrays, as Bodymovin writes them).
fn ramp(from: &[f64], to: &[f64], at: f64) -> Value {
    json!([{"t": 0, "s": from, "i": {"x": [0.5], "y": [1]}, "o": {"x": [0.5], "y": [0]}},
           {"t": at, "s": to}])
}

fn dot_layer(index: usize, dots: usize, frames: u32) -> Value {
    let angle = std::f64::consts::TAU * index as f64 / dots as f64;
    let radius = f64::from(SIDE) * 0.35;
    let centre = f64::from(SIDE) / 2.0;
    let place = [
        centre + radius * angle.cos(),
        centre + radius * angle.sin(),
        0.0,
    ];
    let half = (f64::from(frames) / 2.0).max(1.0);
    let scale = if index == 1 {
        json!({"a": 1, "k": ramp(&[60.0, 60.0, 100.0], &[120.0, 120.0, 100.0], half),
               "x": "var $bm_rt;\n$bm_rt = loopOut('pingpong');"})
    } else {
        json!({"a": 0, "k": [100, 100, 100],
               "x": "var $bm_rt;\n$bm_rt = thisComp.layer($bm_sub(index, 1)).transform.scale.valueAtTime($bm_sub(time, 0.03));"})
    };
    json!({"ty": 4, "ind": index, "nm": format!("dot {index}"), "ip": 0, "op": frames, "st": 0,
        "sr": 1, "ks": {
            "r": {"a": 1, "k": ramp(&[0.0], &[180.0], half),
                  "x": "var $bm_rt;\n$bm_rt = loopOut('cycle');"},
            "p": {"a": 0, "k": place, "x": "var $bm_rt;\n$bm_rt = wiggle(3, 2);"},
            "a": {"a": 0, "k": [0, 0, 0]},
            "s": scale,
            "o": {"a": 1, "k": ramp(&[20.0], &[100.0], half),
                  "x": "var $bm_rt;\nvar delay = $bm_mul($bm_sub(index, 1), 0.02);\n$bm_rt = valueAtTime($bm_sub(time, delay));"}},
        "shapes": [{"ty": "gr", "nm": "dot", "it": [
            {"ty": "el", "nm": "circle", "d": 1, "p": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [10, 10],
                   "x": "var $bm_rt;\nvar size = linear(Math.sin($bm_sum($bm_mul(time, 6.283), index)), -1, 1, 8, 14);\n$bm_rt = [size, size];"}},
            {"ty": "fl", "nm": "paint", "r": 1, "o": {"a": 0, "k": 100},
             "c": {"a": 1, "k": ramp(&[0.2, 0.4, 1.0, 1.0], &[1.0, 0.3, 0.5, 1.0], half),
                   "x": "var $bm_rt;\n$bm_rt = loopOut('pingpong');"}},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}]}]})
}

/// An expression the bench measures: its name, its source, and whether the property it is on
/// has keyframes (loops and `valueAtTime` read them).
pub struct Case {
    pub name: &'static str,
    pub source: &'static str,
    pub keyframed: bool,
}

/// The common expressions: what loaders and other UI animations are made of.
pub const CASES: &[Case] = &[
    Case {
        name: "arithmetic on time",
        source: "time * 100",
        keyframed: false,
    },
    Case {
        name: "arithmetic on value ($bm_sum)",
        source: "var $bm_rt;\n$bm_rt = $bm_sum(value, 10);",
        keyframed: false,
    },
    Case {
        name: "wiggle(3, 20)",
        source: "wiggle(3, 20)",
        keyframed: false,
    },
    Case {
        name: "loopOut('cycle')",
        source: "var $bm_rt;\n$bm_rt = loopOut('cycle');",
        keyframed: true,
    },
    Case {
        name: "loopOut('pingpong')",
        source: "loopOut('pingpong')",
        keyframed: true,
    },
    Case {
        name: "loopOut('offset')",
        source: "loopOut('offset')",
        keyframed: true,
    },
    Case {
        name: "loopOut('continue')",
        source: "loopOut('continue')",
        keyframed: true,
    },
    Case {
        name: "loopIn('cycle')",
        source: "loopIn('cycle')",
        keyframed: true,
    },
    Case {
        name: "valueAtTime(time - 0.1)",
        source: "valueAtTime(time - 0.1)",
        keyframed: true,
    },
    Case {
        name: "index offset: valueAtTime(time - index * 0.02)",
        source: "var $bm_rt;\n$bm_rt = valueAtTime($bm_sub(time, $bm_mul(index, 0.02)));",
        keyframed: true,
    },
    Case {
        name: "index offset: previous layer's value earlier",
        source: "var $bm_rt;\n$bm_rt = thisComp.layer(Math.max(1, index - 1)).transform.rotation.valueAtTime($bm_sub(time, 0.03));",
        keyframed: true,
    },
    Case {
        name: "another layer's value: thisComp.layer(1).transform.rotation",
        source: "thisComp.layer(1).transform.rotation",
        keyframed: true,
    },
    Case {
        name: "linear(time, 0, 1, 0, 360)",
        source: "linear(time, 0, 1, 0, 360)",
        keyframed: false,
    },
    Case {
        name: "ease(time, 0, 1, 0, 360)",
        source: "ease(time, 0, 1, 0, 360)",
        keyframed: false,
    },
];

/// `layers` shape layers, each with `case`'s expression on its rotation, `frames` frames long
/// at `frame_rate`.
pub fn one_expression(case: &Case, layers: usize, frames: u32, frame_rate: u32) -> Value {
    let half = (f64::from(frames) / 2.0).max(1.0);
    let layers: Vec<Value> = (1..=layers)
        .map(|index| {
            let rotation = if case.keyframed {
                json!({"a": 1, "k": ramp(&[0.0], &[90.0], half), "x": case.source})
            } else {
                json!({"a": 0, "k": 10, "x": case.source})
            };
            json!({"ty": 4, "ind": index, "nm": format!("layer {index}"), "ip": 0, "op": frames,
                "st": 0, "sr": 1, "ks": {"r": rotation, "p": {"a": 0, "k": [100, 100, 0]},
                    "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]},
                    "o": {"a": 0, "k": 100}},
                "shapes": [{"ty": "gr", "nm": "bar", "it": [
                    {"ty": "rc", "d": 1, "s": {"a": 0, "k": [40, 4]}, "p": {"a": 0, "k": [20, 0]},
                     "r": {"a": 0, "k": 0}},
                    {"ty": "fl", "c": {"a": 0, "k": [0.2, 0.4, 1, 1]}, "o": {"a": 0, "k": 100}, "r": 1},
                    {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
                     "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0},
                     "o": {"a": 0, "k": 100}}]}]})
        })
        .collect();
    json!({"v": "5.7.4", "nm": case.name, "fr": frame_rate, "ip": 0, "op": frames, "w": SIDE,
        "h": SIDE, "ddd": 0, "assets": [], "layers": layers})
}

/// Expressions that never end, each doing a different kind of work between two polls.
pub const HOGS: &[(&str, &str)] = &[
    ("endless loop", "while (true) {}"),
    (
        "endless loop of calls",
        "function f(x) { return x + 1; } var n = 0; while (true) { n = f(n); }",
    ),
    (
        "endless loop of allocations",
        "var a; while (true) { a = [time, time, {x: time}]; }",
    ),
];

/// A `frames`-frame template at `frame_rate` whose one layer's rotation is `source`.
pub fn hog(source: &str, frames: u32, frame_rate: u32) -> Value {
    let case = Case {
        name: "hog",
        source: "0",
        keyframed: false,
    };
    let mut json = one_expression(&case, 1, frames, frame_rate);
    json["layers"][0]["ks"]["r"]["x"] = Value::String(source.to_owned());
    json
}
