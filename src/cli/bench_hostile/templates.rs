//! Building blocks of the hostile templates, shared by the cases of both rounds: a minimal
//! animation, image and text layers, PNG chunks, a deep parent chain.

use serde_json::{json, Value};

/// A minimal valid animation: 100×100, 30 fps, one second, with `layers` and `assets`.
pub(super) fn animation(layers: Vec<Value>, assets: Vec<Value>) -> Value {
    json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "assets": assets, "layers": layers,
    })
}

fn transform() -> Value {
    json!({
        "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [50, 50, 0]},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}
    })
}

pub(super) fn image_layer(reference: &str) -> Value {
    json!({"ddd": 0, "ind": 1, "ty": 2, "refId": reference, "ks": transform(),
           "ip": 0, "op": 30, "st": 0, "sr": 1})
}

pub(super) fn png_chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE) as PNG chunks need it (flate2's, already a dependency).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// A text layer (`ty` 5) showing `documents` (text document keyframes).
pub(super) fn text_layer(documents: Vec<Value>) -> Value {
    json!({"ddd": 0, "ind": 1, "ty": 5, "nm": "title", "ks": transform(),
           "ip": 0, "op": 30, "st": 0, "sr": 1,
           "t": {"d": {"k": documents}, "p": {}, "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}}, "a": []}})
}

pub(super) fn fonts() -> Value {
    json!({"list": [{"fName": "Bomb", "fFamily": "Bomb", "fStyle": "Regular", "ascent": 75}]})
}

/// `count` null layers, each the parent of the next: an honest large template.
pub(super) fn parent_chain(count: u32) -> Value {
    let layers = (1..=count)
        .map(|index| {
            let mut layer = json!({"ddd": 0, "ind": index, "ty": 3, "ks": transform(),
                                    "ip": 0, "op": 30, "st": 0, "sr": 1});
            if index > 1 {
                layer["parent"] = json!(index - 1);
            }
            layer
        })
        .collect();
    animation(layers, vec![])
}
