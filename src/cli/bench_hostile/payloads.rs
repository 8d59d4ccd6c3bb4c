//! Hostile payloads that `bench-hostile` sends and the test suite sends too (`tests/service/hostile`), so
//! that both measure the same attack: a glyph bomb, a zlib stream of zeros, a request body
//! that never completes and the red square the expression hogs are placed in.

use crate::middleware::request_body::MAX_REQUEST_BYTES;
use bytes::Bytes;
use serde_json::{json, Value};

/// Vertices of each path of the glyph bomb's glyph.
const GLYPH_BOMB_VERTICES: u32 = 150;
/// The glyph bomb's text: this many W in each of its keyframes.
const GLYPH_BOMB_CHARACTERS: usize = 5000;
/// The glyph bomb's text keyframes.
const GLYPH_BOMB_KEYFRAMES: u32 = 4;
/// The zlib stream of zeros is built of deflate blocks of this many zeros.
const ZLIB_CHUNK: usize = 1024 * 1024;

/// The glyph bomb at the size the second round sent (`paths` 900: 6.9 MB): the template's
/// own glyph for "W" of `paths` paths of [`GLYPH_BOMB_VERTICES`] vertices each, and
/// [`GLYPH_BOMB_CHARACTERS`] W in [`GLYPH_BOMB_KEYFRAMES`] keyframes.
pub fn glyph_bomb(paths: usize) -> Vec<u8> {
    let path = |offset: f64| {
        let vertices: Vec<Value> = (0..GLYPH_BOMB_VERTICES)
            .map(|i| {
                let angle = f64::from(i) / f64::from(GLYPH_BOMB_VERTICES) * std::f64::consts::TAU;
                json!([offset + 10.0 * angle.cos(), 10.0 * angle.sin()])
            })
            .collect();
        let tangents = vec![json!([0, 0]); GLYPH_BOMB_VERTICES as usize];
        json!({"ty": "sh", "ks": {"a": 0, "k": {"c": true, "v": vertices, "i": tangents,
            "o": tangents}}})
    };
    let shapes: Vec<Value> = (0..paths).map(|i| path(i as f64 * 0.1)).collect();
    let glyph = json!({"ch": "W", "size": 100, "style": "Regular", "w": 60, "fFamily": "Bomb",
        "data": {"shapes": [{"ty": "gr", "it": shapes}]}});
    let documents: Vec<Value> = (0..GLYPH_BOMB_KEYFRAMES)
        .map(|frame| {
            json!({"t": frame * 5, "s": {"s": 12, "f": "Bomb",
                "t": "W".repeat(GLYPH_BOMB_CHARACTERS), "j": 0, "fc": [0, 0, 0]}})
        })
        .collect();
    // A tree of JSON values always serialises.
    serde_json::to_vec(
        &json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "fonts": {"list": [{"fName": "Bomb", "fFamily": "Bomb", "fStyle": "Regular",
            "ascent": 75}]},
        "chars": [glyph],
        "layers": [{"ty": 5, "nm": "bomb", "ind": 1, "ks": {}, "ip": 0, "op": 30, "st": 0,
            "t": {"d": {"k": documents}}}]}),
    )
    .unwrap_or_default()
}

/// A zlib stream of `total` zero bytes (a multiple of [`ZLIB_CHUNK`]) in ~1 KB per MiB: one
/// deflate block of a MiB of zeros, flushed to a byte boundary and repeated (each copy
/// starts with a literal, so it decodes the same wherever it stands), a final empty block,
/// the Adler-32.
pub fn zlib_of_zeros(total: usize) -> Vec<u8> {
    use miniz_oxide::deflate::core::CompressorOxide;
    use miniz_oxide::{DataFormat, MZFlush};
    let mut compressor = CompressorOxide::default();
    compressor.set_format_and_level(DataFormat::Raw, 9);
    let mut block = vec![0; 64 * 1024];
    let result = miniz_oxide::deflate::stream::deflate(
        &mut compressor,
        &vec![0; ZLIB_CHUNK],
        &mut block,
        MZFlush::Sync,
    );
    debug_assert_eq!(result.bytes_consumed, ZLIB_CHUNK);
    block.truncate(result.bytes_written);
    let mut stream = vec![0x78, 0x01];
    for _ in 0..total / ZLIB_CHUNK {
        stream.extend_from_slice(&block);
    }
    stream.extend([0x03, 0x00]);
    let adler = (((total % 65521) as u32) << 16) | 1;
    stream.extend(adler.to_be_bytes());
    stream
}

/// A gRPC message declared at the largest request ([`MAX_REQUEST_BYTES`]) and one byte short
/// of it: the issue's attack (64 MiB + 4 bytes sent, then silence), its body never complete.
pub fn declared_largest_one_byte_short() -> Bytes {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(MAX_REQUEST_BYTES as u32).to_be_bytes());
    framed.resize(5 + MAX_REQUEST_BYTES - 1, 0x0a);
    Bytes::from(framed)
}

/// One red 10×10 square (its group and its fill named `square` and `paint`; the fill is a
/// colour slot) whose layer position is `position` (where the expression hogs go).
pub fn red_square(position: Value) -> Value {
    json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "ddd": 0, "assets": [], "layers": [
        {"ty": 4, "ind": 1, "nm": "square", "ip": 0, "op": 30, "st": 0, "sr": 1,
         "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}, "p": position},
         "shapes": [{"ty": "gr", "nm": "square", "it": [
            {"ty": "rc", "d": 1, "s": {"a": 0, "k": [10, 10]}, "p": {"a": 0, "k": [0, 0]},
             "r": {"a": 0, "k": 0}},
            {"ty": "fl", "nm": "paint", "c": {"a": 0, "k": [1, 0, 0, 1]}, "o": {"a": 0, "k": 100},
             "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}]}]}]})
}
