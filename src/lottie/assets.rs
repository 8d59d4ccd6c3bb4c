//! Image assets are data, never paths (DESIGN.md, "Trust boundaries").
//!
//! What rlottie does with an asset (Samsung/rlottie `lottieparser.cpp`, `parseAsset`): any
//! asset with a `p` is an image. With a non-zero `e` and a `p` starting `data:`, it
//! base64-decodes whatever follows the first comma (the media type is ignored) and hands the
//! bytes to stb_image, which its image loader builds for PNG and JPEG only (`STBI_ONLY_PNG`,
//! `STBI_ONLY_JPEG`; Debian's `rlottie/image-loader.so` holds no other decoder). Otherwise
//! it opens the file `<resource dir> + u + p`: any path at all, devices included. So every
//! asset with a `p` must be an embedded PNG or JPEG (`"e": 1`), and the dimensions its header
//! declares are checked here, before stb_image allocates for them.
//!
//! The cost is linear in the template's size: one base64 decode per image (into one reused
//! buffer) and a walk over the image's header.

use super::template::TemplateError;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde_json::Value;

/// Side of an embedded image, pixels: the canvas limit (`fence::MAX_CANVAS_SIDE`); an image
/// larger than any canvas cannot show more detail than the canvas has.
pub const MAX_IMAGE_SIDE: u64 = 8192;
/// Pixels of one embedded image: 4096 × 4096, 64 MiB once decoded. Real templates embed
/// images of a few hundred to two thousand pixels a side (the corpus's largest: 844 × 223).
pub const MAX_IMAGE_PIXELS: u64 = 4096 * 4096;
/// Decoded bytes of all of a template's images together. rlottie decodes every image of the
/// template once per render thread and keeps it for the whole render (plus stb_image's own
/// buffers while decoding), so a worker holds a few times this per thread: 128 MiB keeps a
/// many-threaded worker well inside its 4 GiB budget. The corpus's 43-image template needs
/// 15 MiB.
pub const MAX_TEMPLATE_IMAGE_DECODED_BYTES: u64 = 128 * 1024 * 1024;
/// Bytes per decoded pixel: stb_image is asked for RGBA, rlottie copies it to ARGB32.
const DECODED_BYTES_PER_PIXEL: u64 = 4;
/// Caller text quoted in an error message is cut to this many characters.
const QUOTED_CHARS: usize = 80;

/// Media types of the formats rlottie's image loader decodes (`image/jpg` is a common
/// misspelling exporters write).
const SUPPORTED_MEDIA_TYPES: [&str; 3] = ["image/png", "image/jpeg", "image/jpg"];

/// Standard base64 as exporters write it; padding optional and stray low bits tolerated,
/// as rlottie's own decoder does (it reads both the same way).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The format and declared size of an embedded image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHeader {
    pub format: ImageFormat,
    pub width: u64,
    pub height: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
}

/// Refuses every image asset that is not an embedded PNG or JPEG within the size limits,
/// naming `$.assets[i]`.
pub fn check(json: &Value) -> Result<(), TemplateError> {
    let Some(assets) = json.get("assets").and_then(Value::as_array) else {
        return Ok(());
    };
    let mut decoded_total = 0u64;
    let mut buffer = Vec::new();
    for (index, asset) in assets.iter().enumerate() {
        let path = format!("$.assets[{index}]");
        // rlottie treats an asset as an image as soon as it has a `p`, layers or not.
        let Some(reference) = asset.get("p") else {
            continue;
        };
        let Some(reference) = reference.as_str() else {
            return Err(TemplateError::invalid(
                format!("{path}.p"),
                "must be a string",
            ));
        };
        let embedded_flag = asset.get("e").and_then(Value::as_i64) == Some(1);
        let Some(data_uri) = reference.strip_prefix("data:") else {
            let folder = asset.get("u").and_then(Value::as_str).unwrap_or_default();
            return Err(TemplateError::invalid(
                path,
                format!(
                    "image asset names a file or URL ('{}'); only embedded images are accepted: \
                     a data:image/png or data:image/jpeg base64 URI in \"p\" with \"e\": 1",
                    quoted(&format!("{folder}{reference}"))
                ),
            ));
        };
        if !embedded_flag {
            return Err(TemplateError::invalid(
                format!("{path}.e"),
                "an embedded image needs \"e\": 1 (without it the renderer reads \"p\" as a file path)",
            ));
        }
        let header = embedded_image_header(data_uri, &mut buffer)
            .map_err(|message| TemplateError::invalid(format!("{path}.p"), message))?;
        let pixels = header.width * header.height;
        if header.width > MAX_IMAGE_SIDE
            || header.height > MAX_IMAGE_SIDE
            || pixels > MAX_IMAGE_PIXELS
        {
            return Err(TemplateError::invalid(
                format!("{path}.p"),
                format!(
                    "embedded image is {}×{} pixels; at most {MAX_IMAGE_SIDE} a side and \
                     {MAX_IMAGE_PIXELS} pixels are accepted",
                    header.width, header.height
                ),
            ));
        }
        decoded_total += pixels * DECODED_BYTES_PER_PIXEL;
        if decoded_total > MAX_TEMPLATE_IMAGE_DECODED_BYTES {
            return Err(TemplateError::invalid(
                format!("{path}.p"),
                format!(
                    "the template's images decode to more than {MAX_TEMPLATE_IMAGE_DECODED_BYTES} \
                     bytes together (this one brings the total to {decoded_total})"
                ),
            ));
        }
    }
    Ok(())
}

/// The header of the image in a data URI (what follows `data:`), decoded into `buffer`.
fn embedded_image_header(data_uri: &str, buffer: &mut Vec<u8>) -> Result<ImageHeader, String> {
    let Some((media, payload)) = data_uri.split_once(',') else {
        return Err("data URI has no ',' before its data".to_owned());
    };
    let Some(media_type) = media.strip_suffix(";base64") else {
        return Err(format!(
            "embedded image must be base64 (data:image/png;base64,…), got 'data:{}'",
            quoted(media)
        ));
    };
    if !SUPPORTED_MEDIA_TYPES
        .iter()
        .any(|supported| media_type.eq_ignore_ascii_case(supported))
    {
        return Err(format!(
            "embedded image must be PNG or JPEG (the renderer decodes no other format), got \
             media type '{}'",
            quoted(media_type)
        ));
    }
    buffer.clear();
    BASE64
        .decode_vec(payload, buffer)
        .map_err(|error| format!("embedded image is not valid base64: {error}"))?;
    image_header(buffer)
}

/// Format and declared dimensions of PNG or JPEG bytes, read the way stb_image reads them.
pub fn image_header(bytes: &[u8]) -> Result<ImageHeader, String> {
    let (format, (width, height)) = if bytes.starts_with(PNG_SIGNATURE) {
        (ImageFormat::Png, png_dimensions(bytes)?)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        (ImageFormat::Jpeg, jpeg_dimensions(bytes)?)
    } else {
        return Err("embedded image is neither PNG nor JPEG".to_owned());
    };
    if width == 0 || height == 0 {
        return Err(format!("embedded image is {width}×{height} pixels"));
    }
    Ok(ImageHeader {
        format,
        width,
        height,
    })
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A PNG's size from its IHDR, which must be the first chunk. (stb_image also skips Apple's
/// `CgBI` chunks before IHDR; those are refused here rather than walked, so the size read is
/// always the one stb_image uses.)
fn png_dimensions(bytes: &[u8]) -> Result<(u64, u64), String> {
    const IHDR_LENGTH: u32 = 13;
    let damaged = || "embedded PNG does not start with its IHDR header".to_owned();
    let length = read_u32(bytes, 8).ok_or_else(damaged)?;
    if length != IHDR_LENGTH || bytes.get(12..16) != Some(b"IHDR") {
        return Err(damaged());
    }
    let width = read_u32(bytes, 16).ok_or_else(damaged)?;
    let height = read_u32(bytes, 20).ok_or_else(damaged)?;
    Ok((u64::from(width), u64::from(height)))
}

/// A JPEG's size from its first frame header (SOF0, SOF1 or SOF2: the kinds stb_image
/// decodes). Hand-written rather than taken from an image-size crate because it must walk the
/// markers exactly as stb_image does (fill bytes before a marker code, padding between
/// segments, the segment kinds it accepts): a walker that reads another frame header than the
/// decoder's would let a small declared size hide a huge one.
fn jpeg_dimensions(bytes: &[u8]) -> Result<(u64, u64), String> {
    let truncated = || "embedded JPEG ends before its frame header".to_owned();
    let mut at = 2; // after SOI (FF D8)
    loop {
        // A marker: 0xFF, any number of 0xFF fill bytes, the code. stb_image skips bytes
        // that are not 0xFF between segments.
        while *bytes.get(at).ok_or_else(truncated)? != 0xFF {
            at += 1;
        }
        while *bytes.get(at).ok_or_else(truncated)? == 0xFF {
            at += 1;
        }
        let code = bytes[at];
        at += 1;
        let length = usize::from(read_u16(bytes, at).ok_or_else(truncated)?);
        match code {
            // Baseline, extended and progressive frame headers: length, precision, height,
            // width.
            0xC0..=0xC2 => {
                let height = read_u16(bytes, at + 3).ok_or_else(truncated)?;
                let width = read_u16(bytes, at + 5).ok_or_else(truncated)?;
                return Ok((u64::from(width), u64::from(height)));
            }
            // Tables, restart interval, application data, comments: skipped by length.
            0xC4 | 0xDB | 0xDD | 0xE0..=0xEF | 0xFE if length >= 2 => at += length,
            _ => {
                return Err(format!(
                    "embedded JPEG has a marker the renderer does not decode (0x{code:02X}) \
                     before its frame header"
                ))
            }
        }
    }
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let pair = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([pair[0], pair[1]]))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let quad = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]))
}

/// Caller text for an error message, cut to [`QUOTED_CHARS`] characters.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = PNG_SIGNATURE.to_vec();
        bytes.extend(13u32.to_be_bytes());
        bytes.extend(b"IHDR");
        bytes.extend(width.to_be_bytes());
        bytes.extend(height.to_be_bytes());
        bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        bytes
    }

    fn jpeg(segments: &[u8], width: u16, height: u16) -> Vec<u8> {
        let mut bytes = vec![0xFF, 0xD8];
        bytes.extend(segments);
        bytes.extend([0xFF, 0xC0, 0, 11, 8]);
        bytes.extend(height.to_be_bytes());
        bytes.extend(width.to_be_bytes());
        bytes.extend([1, 1, 0x11, 0]);
        bytes
    }

    fn template_with(asset: Value) -> Value {
        json!({"assets": [{"id": "precomp", "layers": []}, asset]})
    }

    fn data_uri(media: &str, bytes: &[u8]) -> String {
        format!("data:{media};base64,{}", BASE64.encode(bytes))
    }

    fn refusal(json: &Value) -> String {
        match check(json) {
            Err(TemplateError::Invalid { path, message }) => format!("{path}: {message}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_embedded_png_or_jpeg_within_the_limits_is_accepted() {
        for uri in [
            data_uri("image/png", &png(400, 300)),
            data_uri("image/jpeg", &jpeg(&[0xFF, 0xE0, 0, 4, 1, 2], 640, 480)),
        ] {
            check(&template_with(
                json!({"id": "i", "e": 1, "u": "", "p": uri}),
            ))
            .unwrap();
        }
    }

    #[test]
    fn paths_urls_devices_and_unflagged_data_are_refused_naming_the_asset() {
        let png = data_uri("image/png", &png(4, 4));
        let cases = [
            (
                json!({"id": "i", "u": "/../../../../etc/", "p": "passwd"}),
                "$.assets[1]: image asset names a file or URL ('/../../../../etc/passwd')",
            ),
            (
                json!({"id": "i", "e": 1, "u": "", "p": "/dev/ptmx"}),
                "$.assets[1]: image asset names a file or URL",
            ),
            (
                json!({"id": "i", "e": 0, "u": "https://example.com/", "p": "a.png"}),
                "$.assets[1]: image asset names a file or URL",
            ),
            (
                json!({"id": "i", "p": png}),
                "$.assets[1].e: an embedded image needs \"e\": 1",
            ),
            (json!({"id": "i", "e": true, "p": png}), "$.assets[1].e:"),
            (
                json!({"id": "i", "layers": [], "p": "images/x.png"}),
                "$.assets[1]: image asset names a file",
            ),
        ];
        for (asset, expected) in cases {
            let message = refusal(&template_with(asset));
            assert!(message.starts_with(expected), "{message}");
        }
    }

    #[test]
    fn data_that_is_not_a_png_or_jpeg_is_refused() {
        let cases = [
            ("data:image/png,rawbytes".to_owned(), "must be base64"),
            (data_uri("image/webp", b"RIFF...."), "must be PNG or JPEG"),
            (
                data_uri("image/png", b"GIF89a......"),
                "neither PNG nor JPEG",
            ),
            ("data:image/png;base64,!!!!".to_owned(), "not valid base64"),
            (data_uri("image/png", &png(0, 10)), "0×10"),
            (data_uri("image/png", PNG_SIGNATURE), "IHDR"),
            (
                data_uri("image/jpeg", &[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]),
                "0xDA",
            ),
        ];
        for (uri, expected) in cases {
            let message = refusal(&template_with(json!({"id": "i", "e": 1, "p": uri})));
            assert!(message.starts_with("$.assets[1].p: "), "{message}");
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn declared_sizes_over_the_limits_are_refused_before_decoding() {
        let huge_png = data_uri("image/png", &png(100_000, 100_000));
        let message = refusal(&template_with(json!({"id": "i", "e": 1, "p": huge_png})));
        assert!(message.contains("100000×100000"), "{message}");
        let huge_jpeg = data_uri("image/jpeg", &jpeg(&[], 60_000, 60_000));
        assert!(
            refusal(&template_with(json!({"id": "i", "e": 1, "p": huge_jpeg})))
                .contains("60000×60000")
        );
        // Nine images of 4096² are each allowed, together over the template's budget.
        let big = data_uri("image/png", &png(4096, 4096));
        let assets: Vec<Value> = (0..9)
            .map(|i| json!({"id": format!("i{i}"), "e": 1, "p": big}))
            .collect();
        let message = refusal(&json!({ "assets": assets }));
        assert!(message.starts_with("$.assets[2].p: "), "{message}");
    }

    #[test]
    fn a_jpeg_frame_header_is_found_the_way_stb_image_finds_it() {
        // A decoy frame header (16×16) inside an application segment, padding between
        // segments and fill bytes before a marker code: the walk skips the segment by its
        // length, as stb_image does, and finds the real frame header (9000×9000).
        let mut segments = vec![0xFF, 0xE1, 0, 11];
        segments.extend([0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 16]);
        segments.extend([0x00, 0x00]); // padding
        segments.extend([0xFF, 0xFF]); // fill before the next marker's 0xFF
        let header = image_header(&jpeg(&segments, 9000, 9000)).unwrap();
        assert_eq!((header.width, header.height), (9000, 9000));
        assert_eq!(header.format, ImageFormat::Jpeg);
    }

    #[test]
    fn the_corpus_images_are_accepted() {
        for name in [
            "image-base64-heart.json",
            "image-base64-43-images-precomps.json",
        ] {
            let bytes = std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../shared/corpus")
                    .join(name),
            )
            .unwrap();
            let json: Value = serde_json::from_slice(&bytes).unwrap();
            check(&json).unwrap();
        }
    }
}
