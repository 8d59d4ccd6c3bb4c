//! Bytes → [`Template`]: the size, nesting and value-count limits, JSON parsing, integer
//! normalisation, the typed model, the image assets and the fence, in that order, so that
//! nothing downstream (least of all rlottie) ever sees a document that failed one of them.
//!
//! The server itself runs only the first part ([`Template::check_syntax`]: size, nesting,
//! syntax, value count, a JSON object at the root), which allocates nothing per value; the
//! tree, the model and the fence (hundreds of bytes per template byte for crafted input) are
//! built in the analysis worker and the render worker, under their memory budgets.
//!
//! Key order is preserved through every rewrite (serde_json `preserve_order`): rlottie's
//! streaming parser skips the keys of a shape item that come before its `ty`.

use super::error::TemplateError;
use super::model::Animation;
use super::{assets, fence};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Largest template accepted, in bytes. Real templates are tens to hundreds of KiB; the
/// largest in our corpus (43 embedded images) is 1.1 MiB. 8 MiB leaves room for embedded
/// images while keeping parse time and memory per template small.
pub const MAX_TEMPLATE_BYTES: usize = 8 * 1024 * 1024;

/// Deepest JSON nesting accepted. Real files nest about 20 levels; rlottie's parser
/// recurses per level, so a bound keeps its stack (and ours) safe.
pub const MAX_JSON_DEPTH: usize = 256;

/// Most JSON values (objects, arrays, strings, numbers, booleans, nulls) a template may hold.
/// A parsed value costs a worker's tree and model about 100 to 350 bytes (an 8 MB template of
/// tiny values would need gigabytes): two million keep the largest parse well within the
/// analysis and render workers' memory budgets. Real templates hold one value per 5 to 7
/// bytes (the corpus' median 6.8, its densest 4.7): 1.2 to 1.7 million at the size limit,
/// where real templates are a tenth of it; a dense 8 MB template of 119,000 shape fills
/// holds 1.55 million.
pub const MAX_JSON_VALUES: usize = 2_000_000;

/// A parsed, fenced template: the JSON tree (what gets rewritten and rendered) and the
/// typed model of it (what the service reasons about).
#[derive(Debug)]
pub struct Template {
    pub json: Value,
    pub model: Animation,
    /// Hex sha256 of the bytes as uploaded.
    pub sha256: String,
    pub byte_len: usize,
    pub warnings: Vec<String>,
    /// A dotLottie's themes (none for JSON and `.tgs`).
    pub themes: super::dotlottie::Themes,
    /// A dotLottie's font files by `fName` (none for JSON and `.tgs`).
    pub fonts: std::collections::BTreeMap<String, Vec<u8>>,
    /// A dotLottie's animation ids, in its manifest's order, and the one this template is.
    pub animations: Vec<String>,
    pub animation: Option<String>,
}

impl Template {
    /// The checks the server runs on a new template before handing it to an analysis worker:
    /// the size limit, the nesting depth, JSON syntax, at most [`MAX_JSON_VALUES`] values, an
    /// object at the root. Nothing is kept per value (keys and values are skipped as they are
    /// read, escaped strings through one reused buffer), so it costs no more memory than the
    /// longest string, whatever the document. Every template [`Template::parse`] accepts
    /// passes it, and every error it answers is the one `parse` would answer.
    pub fn check_syntax(bytes: &[u8]) -> Result<(), TemplateError> {
        if bytes.len() > MAX_TEMPLATE_BYTES {
            return Err(TemplateError::TooLarge {
                size: bytes.len(),
                max: MAX_TEMPLATE_BYTES,
            });
        }
        check_nesting_depth(bytes, MAX_JSON_DEPTH)?;
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        // Depth is bounded above, so the counter's recursion is too.
        deserializer.disable_recursion_limit();
        let mut count = ValueCount {
            values: 0,
            max: MAX_JSON_VALUES,
        };
        let root = Counted(&mut count)
            .deserialize(&mut deserializer)
            .and_then(|root| deserializer.end().map(|()| root));
        match root {
            _ if count.values > count.max => Err(TemplateError::TooManyValues { max: count.max }),
            Err(error) => Err(TemplateError::NotJson(error.to_string())),
            Ok(Kind::Object) => Ok(()),
            Ok(Kind::Other) => Err(TemplateError::invalid(
                "$",
                "a Lottie animation must be a JSON object",
            )),
        }
    }

    /// Parses and fences a template: Bodymovin JSON, the same gzipped (a Telegram sticker,
    /// `.tgs`), inflated here first within [`MAX_TEMPLATE_BYTES`], or a dotLottie archive
    /// ([`super::dotlottie`]), all told apart by their content. Runs in the workers only
    /// (the server checks the syntax of JSON uploads; a packed one is unpacked and checked by
    /// its analysis worker).
    pub fn parse(bytes: &[u8]) -> Result<Template, TemplateError> {
        Template::parse_animation(bytes, None)
    }

    /// [`Template::parse`] of the dotLottie animation `animation` (by its manifest id; the
    /// archive's own choice when None). Only an archive has animations to choose from.
    pub fn parse_animation(
        bytes: &[u8],
        animation: Option<&str>,
    ) -> Result<Template, TemplateError> {
        let zip = super::dotlottie::is_zip(bytes);
        if animation.is_some() && !zip {
            return Err(TemplateError::invalid(
                "animation_id",
                "names an animation of a .lottie archive; this template is not one",
            ));
        }
        let mut template = if is_gzip(bytes) {
            Template::parse_json(&inflate(bytes)?)?
        } else if zip {
            let unpacked = super::dotlottie::unpack(
                bytes,
                animation,
                MAX_TEMPLATE_BYTES,
                Template::check_syntax,
            )?;
            let mut template = Template::parse_json(&unpacked.json)?;
            template.themes = unpacked.themes;
            template.warnings.extend(unpacked.theme_warnings);
            template.fonts = unpacked.fonts;
            template.animations = unpacked.animations;
            template.animation = animation.map(str::to_owned);
            template
        } else {
            return Template::parse_json(bytes);
        };
        // The template is what was uploaded.
        template.sha256 = hex_sha256(bytes);
        template.byte_len = bytes.len();
        Ok(template)
    }

    fn parse_json(bytes: &[u8]) -> Result<Template, TemplateError> {
        // The value count before the tree: a document of millions of tiny values is refused
        // before it costs its tree.
        Template::check_syntax(bytes)?;
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        // Depth is already bounded above (serde_json's own limit of 128 is too low for
        // some real files), so its recursion limit can go.
        deserializer.disable_recursion_limit();
        let mut json = Value::deserialize(&mut deserializer)
            .and_then(|value| deserializer.end().map(|()| value))
            .map_err(|error| TemplateError::NotJson(error.to_string()))?;
        if !json.is_object() {
            return Err(TemplateError::invalid(
                "$",
                "a Lottie animation must be a JSON object",
            ));
        }
        normalize_integer_fields(&mut json)?;
        super::quirks::lower_parse_time_quirks(&mut json);
        let model: Animation = serde_path_to_error::deserialize(&json).map_err(|error| {
            let path = error.path().to_string();
            TemplateError::invalid(json_path(&path), error.into_inner().to_string())
        })?;
        // Images are data, never paths: before the fence, so rlottie never sees a file name.
        assets::check(&json)?;
        let warnings = fence::check(&model, &json)?;
        Ok(Template {
            sha256: hex_sha256(bytes),
            byte_len: bytes.len(),
            json,
            model,
            warnings,
            themes: Default::default(),
            fonts: Default::default(),
            animations: Vec::new(),
            animation: None,
        })
    }

    pub fn duration_seconds(&self) -> f64 {
        (self.model.op - self.model.ip) / self.model.fr
    }

    pub fn layer_count(&self) -> usize {
        fence::total_layer_count(&self.model)
    }
}

/// The gzip magic number a Telegram sticker (`.tgs`) starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `bytes` are gzip (a `.tgs` template) rather than JSON (which cannot start so).
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// The JSON of a gzipped template, inflated to at most [`MAX_TEMPLATE_BYTES`]: a gzip bomb
/// stops there (a few milliseconds of inflating, the limit's memory), whatever it would
/// grow to.
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, TemplateError> {
    use std::io::Read;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_TEMPLATE_BYTES as u64 + 1)
        .read_to_end(&mut json)
        .map_err(|error| TemplateError::NotGzip(error.to_string()))?;
    if json.len() > MAX_TEMPLATE_BYTES {
        return Err(TemplateError::InflatesTooLarge {
            max: MAX_TEMPLATE_BYTES,
        });
    }
    Ok(json)
}

pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    lowercase_hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest, as every sha256 this service reports is written.
pub(crate) fn lowercase_hex(digest: &[u8]) -> String {
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `layers[3].ks` → `$.layers[3].ks`; serde_path_to_error says `.` for the root.
pub(crate) fn json_path(path: &str) -> String {
    if path.is_empty() || path == "." {
        "$".to_owned()
    } else {
        format!("$.{path}")
    }
}

/// Rejects documents nested deeper than `max` before any recursive parser sees them.
/// Hand-written because serde_json only offers a fixed limit (128) or none at all; this is a
/// single linear scan that skips string contents.
fn check_nesting_depth(bytes: &[u8], max: usize) -> Result<(), TemplateError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &byte) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(TemplateError::TooDeep { max, offset });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Values read so far by [`Template::check_syntax`], and the most allowed.
struct ValueCount {
    values: usize,
    max: usize,
}

/// What a counted value was: only the root's kind matters.
enum Kind {
    Object,
    Other,
}

/// Reads one JSON value (and everything inside it) without keeping any of it, counting
/// values; fails once there are more than the count's `max`.
struct Counted<'a>(&'a mut ValueCount);

impl Counted<'_> {
    fn count<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.0.values += 1;
        if self.0.values > self.0.max {
            return Err(E::custom(format!("more than {} JSON values", self.0.max)));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = Kind;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = Kind;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_i64<E: serde::de::Error>(mut self, _: i64) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_u64<E: serde::de::Error>(mut self, _: u64) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_f64<E: serde::de::Error>(mut self, _: f64) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_str<E: serde::de::Error>(mut self, _: &str) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_unit<E: serde::de::Error>(mut self) -> Result<Kind, E> {
        self.count().map(|()| Kind::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Kind, A::Error> {
        self.count()?;
        while seq.next_element_seed(Counted(&mut *self.0))?.is_some() {}
        Ok(Kind::Other)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Kind, A::Error> {
        self.count()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Counted(&mut *self.0))?;
        }
        Ok(Kind::Object)
    }
}

/// Fields rlottie only accepts as JSON integers (it refuses `"w": 200.0`): root canvas,
/// and per layer.
const STRICT_INTEGER_LAYER_FIELDS: &[&str] = &["ind", "parent", "ty", "ddd"];
/// Sizes that may be fractional in the wild (`"w": 375.0`, `"h": 58.84`), the root canvas's
/// included; rounding them to whole pixels is invisible, so they are rounded rather than
/// refused.
const ROUNDED_SIZE_FIELDS: &[&str] = &["w", "h"];

/// Writes integral floats as integers where rlottie insists on integers, so templates from
/// float-typed exporters render instead of being refused.
fn normalize_integer_fields(json: &mut Value) -> Result<(), TemplateError> {
    for field in ROUNDED_SIZE_FIELDS {
        normalize_field(json, field, "$", true)?;
    }
    if let Some(layers) = json.get_mut("layers").and_then(Value::as_array_mut) {
        normalize_layers(layers, "$.layers")?;
    }
    if let Some(assets) = json.get_mut("assets").and_then(Value::as_array_mut) {
        for (index, asset) in assets.iter_mut().enumerate() {
            let path = format!("$.assets[{index}]");
            for field in ROUNDED_SIZE_FIELDS {
                normalize_field(asset, field, &path, true)?;
            }
            if let Some(layers) = asset.get_mut("layers").and_then(Value::as_array_mut) {
                normalize_layers(layers, &format!("{path}.layers"))?;
            }
        }
    }
    Ok(())
}

fn normalize_layers(layers: &mut [Value], path: &str) -> Result<(), TemplateError> {
    for (index, layer) in layers.iter_mut().enumerate() {
        let path = format!("{path}[{index}]");
        for field in STRICT_INTEGER_LAYER_FIELDS {
            normalize_field(layer, field, &path, false)?;
        }
        for field in ROUNDED_SIZE_FIELDS {
            normalize_field(layer, field, &path, true)?;
        }
    }
    Ok(())
}

fn normalize_field(
    object: &mut Value,
    field: &str,
    path: &str,
    round: bool,
) -> Result<(), TemplateError> {
    let Some(slot) = object.get_mut(field) else {
        return Ok(());
    };
    if slot.is_i64() || slot.is_u64() {
        return Ok(());
    }
    let Some(number) = slot.as_f64() else {
        return Ok(()); // wrong types are reported by the typed model, with their path
    };
    let whole = if round { number.round() } else { number };
    // 2^53: the largest range in which every integer is exact in an f64.
    const EXACT_INTEGER_LIMIT: f64 = 9_007_199_254_740_992.0;
    if whole.fract() != 0.0 || !whole.is_finite() || whole.abs() > EXACT_INTEGER_LIMIT {
        return Err(TemplateError::invalid(
            format!("{path}.{field}"),
            format!("must be a whole number, got {number}"),
        ));
    }
    *slot = Value::from(whole as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_gzipped_template_tgs_parses_as_its_json_and_keeps_its_own_hash() {
        let json = br#"{"v":"5.7.0","fr":60,"ip":0,"op":180,"w":512,"h":512,"layers":[]}"#;
        let tgs = gzip(json);
        let plain = Template::parse(json).unwrap();
        let sticker = Template::parse(&tgs).unwrap();
        assert_eq!(sticker.json, plain.json);
        assert_eq!(sticker.sha256, hex_sha256(&tgs));
    }

    /// 64 MiB of spaces gzipped to some 64 KiB: refused once 8 MiB are inflated.
    #[test]
    fn a_gzip_bomb_is_refused_at_the_size_limit_and_a_broken_gzip_is_invalid() {
        let bomb = gzip(&vec![b' '; 64 * 1024 * 1024]);
        assert!(bomb.len() < 128 * 1024, "{}", bomb.len());
        let started = std::time::Instant::now();
        let error = Template::parse(&bomb).unwrap_err();
        assert_eq!(
            error,
            TemplateError::InflatesTooLarge {
                max: MAX_TEMPLATE_BYTES
            }
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let mut broken = gzip(b"{}");
        broken.truncate(12);
        assert!(matches!(
            Template::parse(&broken),
            Err(TemplateError::NotGzip(_))
        ));
    }

    #[test]
    fn nesting_depth_counts_brackets_outside_strings_only() {
        assert!(check_nesting_depth(br#"{"a":"[[[[[[["}"#, 2).is_ok());
        assert!(check_nesting_depth(br#"[[["x"]]]"#, 2).is_err());
        assert!(check_nesting_depth(br#"{"a":"\"[[[["}"#, 1).is_ok());
    }

    #[test]
    fn the_syntax_check_answers_what_the_parse_would_and_counts_every_value() {
        let valid = br#"{"v":"5.7","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        assert_eq!(Template::check_syntax(valid), Ok(()));
        for bad in [
            &b"{"[..],
            b"[1,2]",
            b"{} {}",
            br#"{"a":"\u12"}"#,
            br#"{"a":[[[[]]]],}"#,
        ] {
            let checked = Template::check_syntax(bad).unwrap_err();
            assert_eq!(Template::parse(bad).unwrap_err(), checked, "{bad:?}");
        }
        // Every value is one: the root, keys' values, array elements, strings with escapes.
        let mut count = ValueCount {
            values: 0,
            max: usize::MAX,
        };
        let mut deserializer = serde_json::Deserializer::from_slice(
            br#"{"a":[1,2.5,"x\"y",null,true,{}],"b":{"c":[]}}"#,
        );
        assert!(matches!(
            Counted(&mut count).deserialize(&mut deserializer),
            Ok(Kind::Object)
        ));
        assert_eq!(count.values, 10);
        let many = format!("{{\"a\":[{}0]}}", "0,".repeat(MAX_JSON_VALUES));
        assert_eq!(
            Template::check_syntax(many.as_bytes()),
            Err(TemplateError::TooManyValues {
                max: MAX_JSON_VALUES
            })
        );
        assert_eq!(
            Template::parse(many.as_bytes()).unwrap_err(),
            TemplateError::TooManyValues {
                max: MAX_JSON_VALUES
            }
        );
    }

    #[test]
    fn integral_floats_become_integers_and_fractions_are_refused() {
        let mut json = serde_json::json!({"w": 200.0, "h": 100, "layers": [{"ind": 1.0, "ty": 4.0, "w": 375.4}]});
        normalize_integer_fields(&mut json).unwrap();
        assert_eq!(
            json.to_string(),
            r#"{"w":200,"h":100,"layers":[{"ind":1,"ty":4,"w":375}]}"#
        );
        // A fractional canvas is rounded as asset and layer sizes are; a fractional index
        // is no index.
        let mut canvas = serde_json::json!({"w": 200.5, "h": 58.84, "layers": []});
        normalize_integer_fields(&mut canvas).unwrap();
        assert_eq!(canvas.to_string(), r#"{"w":201,"h":59,"layers":[]}"#);
        let mut bad = serde_json::json!({"w": 200, "layers": [{"ind": 1.5}]});
        assert_eq!(
            normalize_integer_fields(&mut bad),
            Err(TemplateError::invalid(
                "$.layers[0].ind",
                "must be a whole number, got 1.5"
            ))
        );
    }
}
