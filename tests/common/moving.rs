//! A template whose every frame tells its time (tests/engine/formats.rs and the service's
//! output tests): a rectangle moving right one step a frame, its colour held per ten frames,
//! with markers.

use serde_json::{json, Value};

/// The template's side and frame rate.
pub const SIDE: u32 = 200;
pub const FPS: u32 = 30;

/// The fill's colour over time: held for ten frames each (frames 0–9 red, 10–19 green, …).
pub const COLOURS: [[u8; 3]; 6] = [
    [255, 0, 0],
    [0, 255, 0],
    [0, 0, 255],
    [255, 255, 0],
    [0, 255, 255],
    [255, 0, 255],
];

/// The rectangle's centre moves from x = 60 at frame 0 to x = 140 at frame 60, linearly, so
/// every frame differs from the one before (no encoder may fold two into one).
pub fn centre_x(frame: u32) -> f64 {
    60.0 + 80.0 * f64::from(frame) / 60.0
}

/// A 200² two-second template at 30 fps: a 100×100 rectangle moving right, its colour held per
/// ten frames, the corners never covered; markers `intro` (frames 10–29) and `beat` (frame 35,
/// no duration).
pub fn template() -> Value {
    let colour_keyframes: Vec<Value> = COLOURS
        .iter()
        .enumerate()
        .map(|(index, [r, g, b])| {
            let unit = |c: &u8| f64::from(*c) / 255.0;
            json!({"t": index * 10, "s": [unit(r), unit(g), unit(b), 1], "h": 1})
        })
        .collect();
    json!({
        "v": "5.7.0", "fr": FPS, "ip": 0, "op": 60, "w": SIDE, "h": SIDE,
        "markers": [
            {"cm": "intro", "tm": 10, "dr": 20},
            {"cm": "beat", "tm": 35, "dr": 0}
        ],
        "layers": [{
            "ty": 4, "ind": 1, "ip": 0, "op": 60, "st": 0,
            "ks": {
                "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 1, "k": [
                    {"t": 0, "s": [centre_x(0), 100, 0], "o": {"x": 0, "y": 0}, "i": {"x": 1, "y": 1}},
                    {"t": 60, "s": [centre_x(60), 100, 0]}
                ]},
                "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}
            },
            "shapes": [
                {"ty": "rc", "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}},
                {"ty": "fl", "c": {"a": 1, "k": colour_keyframes}, "o": {"a": 0, "k": 100}}
            ]
        }]
    })
}
