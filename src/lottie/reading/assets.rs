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
//! The header alone does not bound what decoding costs (issue 21, item 11): stb_image inflates
//! a PNG's image data into a buffer it grows as long as the data goes on, so a 1×1 PNG whose
//! data inflates to 1 GiB took 1 GB of worker memory; and it decodes every scan of a JPEG
//! over the whole image, so a progressive JPEG of thousands of empty scans costs thousands of
//! full passes. So the PNG's image data is inflated here (streamed, counting bytes, keeping
//! none) and refused beyond what the header's size needs; a JPEG's scans are counted by
//! walking its markers as stb_image does.
//!
//! The cost is linear in the template's size: one base64 decode per image (into one reused
//! buffer), a walk over the image's chunks or markers, and for a PNG an inflate stopped as
//! soon as it passes what the header allows (at most ~128 MiB of output per image).
//!
//! Here the assets and their data URIs; the PNG and JPEG readers are in `png` and `jpeg`.

mod jpeg;
mod png;

use super::error::TemplateError;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use jpeg::jpeg_dimensions;
pub(crate) use jpeg::jpeg_scan_count;
use png::{png_dimensions, png_image_data_bytes, png_inflated_bytes, PNG_SIGNATURE};
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
/// Scans of one JPEG. stb_image decodes each scan over the whole image (a progressive scan
/// that codes nothing still walks every block), at ~10 bytes a scan for the sender: an 8 MB
/// template holds hundreds of thousands. Encoders write one scan per component (baseline) or
/// about ten (libjpeg's progressive script; optimised ones a few dozen at most).
pub const MAX_JPEG_SCANS: usize = 100;
/// Inflated image data a PNG may have beyond the exact size its header needs: libpng accepts
/// extra data with a warning and stb_image ignores it, so the odd encoder that pads is still
/// accepted; the bound stays a few pages over the header's figure.
pub const PNG_EXTRA_IMAGE_DATA_BYTES: u64 = 64 * 1024;
/// Output buffer of the PNG inflate check: the output is counted, never kept.
const INFLATE_SCRATCH_BYTES: usize = 64 * 1024;
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
pub(crate) struct ImageHeader {
    pub format: ImageFormat,
    pub width: u64,
    pub height: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageFormat {
    Png,
    Jpeg,
}

/// Refuses every image asset that is not an embedded PNG or JPEG within the size limits,
/// naming `$.assets[i]`.
pub(crate) fn check(json: &Value) -> Result<(), TemplateError> {
    let Some(assets) = json.get("assets").and_then(Value::as_array) else {
        return Ok(());
    };
    let mut decoded_total = 0u64;
    let mut buffer = Vec::new();
    let mut scratch = Vec::new();
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
        // Within the size limits only: what the data decodes to, bounded by the header.
        check_image_data(&buffer, header.format, &mut scratch)
            .map_err(|message| TemplateError::invalid(format!("{path}.p"), message))?;
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
pub(crate) fn image_header(bytes: &[u8]) -> Result<ImageHeader, String> {
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

/// What an image's data decodes to, bounded by its header (checked after the header's own
/// limits): a PNG's image data may not inflate beyond what its size needs, a JPEG may not have
/// more than [`MAX_JPEG_SCANS`] scans.
fn check_image_data(
    bytes: &[u8],
    format: ImageFormat,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    match format {
        ImageFormat::Png => {
            let allowed = png_image_data_bytes(bytes)?.saturating_add(PNG_EXTRA_IMAGE_DATA_BYTES);
            let inflated = png_inflated_bytes(bytes, allowed, scratch)?;
            if inflated > allowed {
                return Err(format!(
                    "embedded PNG's image data inflates to more than {allowed} bytes, more than \
                     its size in the header needs"
                ));
            }
            Ok(())
        }
        ImageFormat::Jpeg => {
            let scans = jpeg_scan_count(bytes);
            if scans > MAX_JPEG_SCANS {
                return Err(format!(
                    "embedded JPEG has more than {MAX_JPEG_SCANS} scans; the renderer decodes \
                     every scan over the whole image"
                ));
            }
            Ok(())
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

    /// A PNG of `width`×`height` at colour type `colour`, bit depth `depth`, with `raw` (the
    /// image data before compression) as two IDAT chunks, then IEND. CRCs are left zero:
    /// neither this check nor stb_image reads them.
    fn png_with_data(width: u32, height: u32, colour: u8, depth: u8, raw: &[u8]) -> Vec<u8> {
        let chunk = |bytes: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]| {
            bytes.extend((data.len() as u32).to_be_bytes());
            bytes.extend(kind);
            bytes.extend(data);
            bytes.extend([0; 4]);
        };
        let mut bytes = PNG_SIGNATURE.to_vec();
        let mut header = width.to_be_bytes().to_vec();
        header.extend(height.to_be_bytes());
        header.extend([depth, colour, 0, 0, 0]);
        chunk(&mut bytes, b"IHDR", &header);
        let compressed = miniz_oxide::deflate::compress_to_vec_zlib(raw, 6);
        let (first, second) = compressed.split_at(compressed.len() / 2);
        chunk(&mut bytes, b"IDAT", first);
        chunk(&mut bytes, b"tEXt", b"between the data");
        chunk(&mut bytes, b"IDAT", second);
        chunk(&mut bytes, b"IEND", &[]);
        bytes
    }

    fn image_data_check(bytes: &[u8]) -> Result<(), String> {
        let header = image_header(bytes)?;
        check_image_data(bytes, header.format, &mut Vec::new())
    }

    #[test]
    fn png_image_data_is_sized_from_the_header_rows_and_interlace_passes() {
        let ihdr = |width: u32, height: u32, depth: u8, colour: u8, interlace: u8| {
            let mut bytes = png(width, height);
            bytes[24..29].copy_from_slice(&[depth, colour, 0, 0, interlace]);
            png_image_data_bytes(&bytes)
        };
        // A filter byte per row, then the row's samples.
        assert_eq!(ihdr(3, 2, 8, 6, 0), Ok(2 * (1 + 12)));
        assert_eq!(ihdr(10, 1, 1, 0, 0), Ok(1 + 2));
        assert_eq!(ihdr(5, 5, 16, 2, 0), Ok(5 * (1 + 30)));
        assert_eq!(ihdr(4, 1, 2, 3, 0), Ok(1 + 1));
        // Adam7: 64 pixels and 15 rows over the seven passes; a 1×1 image is pass 1 only.
        assert_eq!(ihdr(8, 8, 8, 0, 1), Ok(64 + 15));
        assert_eq!(ihdr(1, 1, 8, 6, 1), Ok(1 + 4));
        for (depth, colour) in [(16, 3), (4, 2), (8, 1), (8, 7), (3, 0)] {
            let refusal = ihdr(4, 4, depth, colour, 0).unwrap_err();
            assert!(refusal.contains("does not decode"), "{refusal}");
        }
    }

    #[test]
    fn a_png_whose_data_inflates_to_what_its_header_needs_is_accepted() {
        let raw: Vec<u8> = (0..2 * (1 + 12)).map(|i| i as u8).collect();
        image_data_check(&png_with_data(3, 2, 6, 8, &raw)).unwrap();
        // Cut short: counted as far as it goes (stb_image decodes what there is).
        let mut cut = png_with_data(3, 2, 6, 8, &raw);
        cut.truncate(cut.len() - 20);
        image_data_check(&cut).unwrap();
    }

    #[test]
    fn a_png_whose_data_inflates_beyond_its_header_is_refused_without_inflating_it_all() {
        // 1×1 pixel, 16 MiB of image data: stb_image would inflate all of it.
        let bomb = png_with_data(1, 1, 6, 8, &vec![0; 16 * 1024 * 1024]);
        let refused = image_data_check(&bomb).unwrap_err();
        assert!(refused.contains("inflates to more than"), "{refused}");
        let mut scratch = Vec::new();
        let limit = 5 + PNG_EXTRA_IMAGE_DATA_BYTES;
        let counted = png_inflated_bytes(&bomb, limit, &mut scratch).unwrap();
        assert!(counted > limit && counted <= limit + INFLATE_SCRATCH_BYTES as u64);
        // Through the template check, naming the asset.
        let uri = data_uri("image/png", &bomb);
        let message = refusal(&template_with(json!({"id": "i", "e": 1, "p": uri})));
        assert!(message.starts_with("$.assets[1].p: "), "{message}");
    }

    #[test]
    fn png_image_data_that_is_not_zlib_is_refused() {
        let mut bytes = png_with_data(1, 1, 6, 8, &[0; 5]);
        // The first IDAT's data begins after the signature, IHDR (25 bytes) and its length
        // and type: a zlib header with a reserved compression method.
        let data = PNG_SIGNATURE.len() + 25 + 8;
        bytes[data] = 0x7F;
        let refusal = image_data_check(&bytes).unwrap_err();
        assert!(refusal.contains("not a valid zlib stream"), "{refusal}");
    }

    /// A progressive JPEG (SOF2) of 8×8 pixels with `scans` scans, each of a few bytes of
    /// entropy-coded data with a stuffed zero and a restart marker, then EOI.
    fn progressive_jpeg(scans: usize) -> Vec<u8> {
        let mut bytes = vec![0xFF, 0xD8];
        bytes.extend([0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        for _ in 0..scans {
            bytes.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0]);
            bytes.extend([0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]);
        }
        bytes.extend([0xFF, 0xD9]);
        bytes
    }

    #[test]
    fn jpeg_scans_are_counted_the_way_stb_image_meets_them() {
        assert_eq!(jpeg_scan_count(&progressive_jpeg(0)), 0);
        assert_eq!(jpeg_scan_count(&progressive_jpeg(7)), 7);
        // Scans stop counting past the bound.
        assert_eq!(jpeg_scan_count(&progressive_jpeg(5000)), MAX_JPEG_SCANS + 1);
        // A scan header inside an application segment is skipped with it, as stb_image does;
        // nothing after EOI counts.
        let mut bytes = progressive_jpeg(1);
        bytes.truncate(bytes.len() - 2);
        bytes.extend([0xFF, 0xE1, 0, 12, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0]);
        bytes.extend([0xFF, 0xD9, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0]);
        assert_eq!(jpeg_scan_count(&bytes), 1);
    }

    #[test]
    fn a_jpeg_of_many_scans_is_refused_and_an_ordinary_one_accepted() {
        image_data_check(&progressive_jpeg(10)).unwrap();
        let refusal = image_data_check(&progressive_jpeg(MAX_JPEG_SCANS + 1)).unwrap_err();
        assert!(refusal.contains("scans"), "{refusal}");
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
