//! Scalar, vector and gradient slots (the Lottie slots specification's other kinds) in a
//! real worker process: each changes exactly the property it names, checked in decoded
//! frames against geometry and colours computed here, and an animated property a slot fills
//! becomes the slot's value for the whole render.

use crate::helpers::{decode_rgba, render_in_worker, spec, tempdir};
use lottie_render::lottie::slots::{self, GradientStop};
use lottie_render::lottie::Template;
use lottie_render::spec::{Format, Modifications, Rgba};
use std::time::Duration;

const SIZE: u32 = 200;
const FRAMES: u32 = 10;

/// A 200² template: a red 80² square (layer position `where`, 100,100; fill opacity `fade`,
/// animated 100 → 0 over the render) and a band 200×40 at the bottom filled by gradient
/// `sky` (black → white, left to right).
fn template() -> Vec<u8> {
    let transform = |position: serde_json::Value| {
        serde_json::json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": position,
            "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}})
    };
    let group_transform = serde_json::json!({"ty": "tr", "p": {"a": 0, "k": [0, 0]},
        "a": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0},
        "o": {"a": 0, "k": 100}});
    let fade = serde_json::json!({"a": 1, "sid": "fade", "k": [
        {"t": 0, "s": [100], "i": {"x": [1], "y": [1]}, "o": {"x": [0], "y": [0]}},
        {"t": FRAMES - 1, "s": [0]}]});
    let square_shapes = serde_json::json!([{"ty": "gr", "it": [
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": [80, 80]},
         "r": {"a": 0, "k": 0}},
        {"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "r": 1, "o": fade},
        group_transform.clone()
    ]}]);
    let gradient = serde_json::json!({"ty": "gf", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
        "s": {"a": 0, "k": [0, 180]}, "e": {"a": 0, "k": [200, 180]},
        "g": {"p": 2, "k": {"a": 0, "k": [0, 0, 0, 0, 1, 1, 1, 1]}, "sid": "sky"}});
    let band_shapes = serde_json::json!([{"ty": "gr", "it": [
        {"ty": "rc", "d": 1, "p": {"a": 0, "k": [100, 180]}, "s": {"a": 0, "k": [200, 40]},
         "r": {"a": 0, "k": 0}},
        gradient,
        group_transform
    ]}]);
    let layer = |index: u32, name: &str, position: serde_json::Value, shapes: serde_json::Value| {
        serde_json::json!({"ddd": 0, "ind": index, "ty": 4, "nm": name, "sr": 1, "ip": 0,
            "op": FRAMES, "st": 0, "bm": 0, "ks": transform(position), "shapes": shapes})
    };
    let layers = vec![
        layer(
            1,
            "square",
            serde_json::json!({"a": 0, "k": [100, 100, 0], "sid": "where"}),
            square_shapes,
        ),
        layer(
            2,
            "band",
            serde_json::json!({"a": 0, "k": [0, 0, 0]}),
            band_shapes,
        ),
    ];
    serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": FRAMES, "w": SIZE, "h": SIZE, "layers": layers
    })
    .to_string()
    .into_bytes()
}

/// Every frame of the template rendered to WebM (alpha kept) with `modifications`.
fn frames(modifications: Modifications) -> Vec<Vec<u8>> {
    let dir = tempdir();
    let path = dir.path().join("slots.json");
    std::fs::write(&path, template()).unwrap();
    let (output, result) = render_in_worker(
        &path,
        modifications,
        spec(Format::Webm, 30, SIZE, SIZE),
        dir.path(),
        Duration::from_secs(120),
    );
    result.unwrap();
    decode_rgba(&output, SIZE, SIZE)
}

fn pixel(frame: &[u8], x: u32, y: u32) -> [u8; 4] {
    let at = ((y * SIZE + x) * 4) as usize;
    [frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]
}

#[test]
fn the_slots_are_found_with_their_kinds_defaults_and_ranges() {
    let found = slots::discover(&Template::parse(&template()).unwrap().json);
    let fade = found.scalar("fade").unwrap();
    assert_eq!(
        (
            fade.property.as_str(),
            fade.default_value,
            fade.min,
            fade.max
        ),
        ("opacity", 100.0, 0.0, 100.0)
    );
    let position = found.vector("where").unwrap();
    assert_eq!(position.property, "position");
    assert_eq!(position.default_value, [100.0, 100.0, 0.0]);
    let sky = found.gradient("sky").unwrap();
    assert_eq!(sky.stop_count, 2);
    assert_eq!(sky.default_stops[1].offset, 1.0);
    assert_eq!(sky.default_stops[1].color.r(), 1.0);
}

#[test]
fn each_slot_changes_exactly_its_property() {
    let plain = frames(Modifications::default());
    // The default: the square at the centre, opaque at frame 0 and fading to nothing; the
    // band black on the left, white on the right.
    assert!(pixel(&plain[0], 100, 100)[0] > 200 && pixel(&plain[0], 100, 100)[3] > 230);
    assert!(
        pixel(&plain[FRAMES as usize - 1], 100, 100)[3] < 30,
        "it fades"
    );
    assert!(pixel(&plain[0], 10, 180)[0] < 40);
    assert!(pixel(&plain[0], 190, 180)[0] > 215);

    let mut moved = Modifications::default();
    moved.vectors.insert("where".into(), vec![50.0, 50.0, 0.0]);
    let moved = frames(moved);
    // Centred at (50, 50): it spans 10..90; the old centre is empty.
    assert!(pixel(&moved[0], 50, 50)[0] > 200 && pixel(&moved[0], 50, 50)[3] > 230);
    assert!(pixel(&moved[0], 100, 100)[3] < 30);
    // The band did not move or change.
    assert!(pixel(&moved[0], 190, 180)[0] > 215);

    let mut faded = Modifications::default();
    faded.scalars.insert("fade".into(), 60.0);
    let faded = frames(faded);
    // The whole animated opacity is replaced: 60 % at the first frame and the last.
    for frame in [&faded[0], &faded[FRAMES as usize - 1]] {
        let alpha = pixel(frame, 100, 100)[3];
        assert!((133..=173).contains(&alpha), "alpha {alpha}, expected ~153");
    }

    let mut recoloured = Modifications::default();
    let stop = |offset: f64, r, g, b| GradientStop {
        offset,
        color: Rgba::new(r, g, b, None).unwrap(),
    };
    recoloured.gradients.insert(
        "sky".into(),
        vec![stop(0.0, 0.0, 0.0, 1.0), stop(1.0, 0.0, 1.0, 0.0)],
    );
    let recoloured = frames(recoloured);
    let left = pixel(&recoloured[0], 5, 180);
    let right = pixel(&recoloured[0], 195, 180);
    assert!(
        left[2] > 200 && left[1] < 60,
        "left end {left:?}, expected blue"
    );
    assert!(
        right[1] > 200 && right[2] < 60,
        "right end {right:?}, expected green"
    );
    // The square is as it was.
    assert!(pixel(&recoloured[0], 100, 100)[0] > 200);
}
