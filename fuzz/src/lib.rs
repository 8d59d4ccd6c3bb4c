//! The fuzz targets' bodies, one module each (`fuzz_targets/NAME.rs` hands libFuzzer's
//! inputs to `NAME::run`), and what they share: the budgets they hold the code to.
//!
//! Plain Rust on stable: besides this crate (which `cargo fuzz` builds on nightly), the
//! engine tests compile these files into their own binary (`tests/engine/fuzz_seeds.rs`) and
//! run every target on seeds, so a change of the library they call fails `./dev test`, in the
//! same build as everything else.

pub mod image;
pub mod prepare;
pub mod request;
pub mod slots;
pub mod template;

/// A template's answer (an error, its warnings, its slot report) may quote the template
/// (ids, names, texts) and name JSON paths, but stays in proportion to the upload: at most
/// this many bytes per template byte, plus [`ANSWER_SLACK_BYTES`].
pub const ANSWER_BYTES_PER_INPUT_BYTE: usize = 4;
/// Fixed texts of an answer (messages, limits), whatever the input size.
pub const ANSWER_SLACK_BYTES: usize = 4096;

/// The largest answer allowed for an input of `input_len` bytes.
pub fn answer_budget(input_len: usize) -> usize {
    ANSWER_BYTES_PER_INPUT_BYTE * input_len + ANSWER_SLACK_BYTES
}

/// Whether `data` is a packed template (a gzipped `.tgs` or a dotLottie archive), which the
/// workers unpack before anything else.
pub fn is_packed(data: &[u8]) -> bool {
    lottie_render::lottie::reading::template::is_gzip(data)
        || lottie_render::lottie::reading::dotlottie::is_zip(data)
}

/// The largest answer allowed for the template `data`: in proportion to it, or for a packed
/// one (a few bytes may inflate to the whole size limit) to what it may unpack to.
pub fn template_answer_budget(data: &[u8]) -> usize {
    if is_packed(data) {
        answer_budget(lottie_render::lottie::reading::template::MAX_TEMPLATE_BYTES)
    } else {
        answer_budget(data.len())
    }
}

/// Splits a fuzz input into the first JSON value (the template) and the bytes after it
/// (which drive the structured part), so plain template files from the corpus are valid
/// seeds and the fuzzer can grow the tail on its own.
pub fn split_template(data: &[u8]) -> (&[u8], &[u8]) {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<serde_json::Value>();
    match values.next() {
        Some(Ok(_)) => data.split_at(values.byte_offset()),
        _ => (data, &[]),
    }
}

/// The JSON pointer of the first place where `a` and `b` differ, with both values there.
/// Numbers that differ in their last bits count as equal: serde_json (without its slower
/// `float_roundtrip` feature, as the service builds it) may read a float it wrote one unit
/// in the last place off, which no renderer can tell apart.
pub fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: &mut String,
) -> Option<String> {
    use serde_json::Value;
    let descend = |key: &str, a: &Value, b: &Value, path: &mut String| {
        let length = path.len();
        path.push('/');
        path.push_str(key);
        let found = first_difference(a, b, path);
        path.truncate(length);
        found
    };
    match (a, b) {
        (Value::Object(left), Value::Object(right)) if left.len() == right.len() => {
            left.iter().find_map(|(key, value)| match right.get(key) {
                Some(other) => descend(key, value, other, path),
                None => Some(format!("{path}/{key}: missing on the right")),
            })
        }
        (Value::Array(left), Value::Array(right)) if left.len() == right.len() => left
            .iter()
            .zip(right)
            .enumerate()
            .find_map(|(index, (value, other))| descend(&index.to_string(), value, other, path)),
        (Value::Number(left), Value::Number(right)) => {
            let (x, y) = (left.as_f64()?, right.as_f64()?);
            let close = (x - y).abs() <= 1e-15 * x.abs().max(y.abs());
            (!close).then(|| format!("{path}: {a} vs {b}"))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}
