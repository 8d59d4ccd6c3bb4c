//! A caller's replacement image for an image slot, made into what the asset holds: decoded
//! (PNG, JPEG, WebP), turned upright by its EXIF orientation, fitted to the asset's box
//! (`w` × `h`) and written as a PNG of exactly that size, embedded as a data URI. rlottie
//! draws an image asset at its own pixel size, clipped to the box, so the fit is done here.
//!
//! Runs only in the render worker: an image decoder is attack surface, and a decode's cost
//! (memory for the pixels, time for the resampling) is the worker's budget, never the
//! server's. Before anything is allocated the header's size is checked against the limits of
//! embedded images ([`MAX_IMAGE_SIDE`], [`MAX_IMAGE_PIXELS`]) and the decoder is given an
//! allocation limit, so a header that lies about its size cannot make it allocate more.
//!
//! Colour: pixels are taken as sRGB, as rlottie and lottie-web take every image. An embedded
//! ICC profile is not applied (a Display P3 phone photo looks slightly less saturated than
//! on the phone); the PNG written carries none.

use super::assets::{jpeg_scan_count, MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE, MAX_JPEG_SCANS};
pub use crate::spec::Fit;
use base64::Engine;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::{self, FilterType};
use image::{
    DynamicImage, ImageDecoder, ImageEncoder, ImageFormat, ImageReader, Limits, RgbaImage,
};
use std::io::Cursor;

/// Bytes of one replacement image as sent: a 12-megapixel phone JPEG is 3–6 MB, a PNG
/// screenshot of a 4K screen under 10; larger files are not logos or photos for a video.
pub const MAX_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// Decoder allocations for one image beyond its decoded pixels (row buffers, Huffman tables,
/// the WebP decoder's frame): the pixels themselves are bounded by [`MAX_IMAGE_PIXELS`].
const DECODER_OVERHEAD_BYTES: u64 = 64 * 1024 * 1024;

/// Why a replacement image cannot be used; always the caller's image at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImageError {
    #[error("is not a PNG, JPEG or WebP file")]
    UnsupportedFormat,
    #[error("is {bytes} bytes; at most {MAX_IMAGE_BYTES} are accepted")]
    TooManyBytes { bytes: usize },
    #[error(
        "is {width}×{height} pixels; at most {MAX_IMAGE_SIDE} a side and {MAX_IMAGE_PIXELS} \
         pixels are accepted"
    )]
    TooLarge { width: u64, height: u64 },
    #[error(
        "is a JPEG of more than {MAX_JPEG_SCANS} scans; each scan is a pass over the whole \
         image (save it as a baseline JPEG)"
    )]
    TooManyScans,
    #[error("cannot be decoded: {0}")]
    Undecodable(String),
}

/// The format and size an image's header declares, read without decoding its pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
}

/// Reads the header of `bytes` (at most a few KiB of it; linear, allocation-free beyond the
/// header's own tables) and checks it against the limits: what the server may do at submit,
/// so the most common mistakes (a GIF, a 20,000-pixel scan) are refused before any queue.
pub fn header(bytes: &[u8]) -> Result<Header, ImageError> {
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(ImageError::TooManyBytes { bytes: bytes.len() });
    }
    let format = image::guess_format(bytes).map_err(|_| ImageError::UnsupportedFormat)?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP
    ) {
        return Err(ImageError::UnsupportedFormat);
    }
    // A decoder passes over the whole image once per scan: a JPEG of thousands of empty
    // progressive scans (a few bytes each) costs thousands of decodes. Counted by walking
    // the markers (linear, nothing decoded), as for the templates' own images.
    if format == ImageFormat::Jpeg && jpeg_scan_count(bytes) > MAX_JPEG_SCANS {
        return Err(ImageError::TooManyScans);
    }
    // Reading the dimensions allocates nothing for pixels: no limits needed (they would
    // answer a size past them with a less telling error than ours).
    let (width, height) = ImageReader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    check_size(u64::from(width), u64::from(height))?;
    Ok(Header {
        format,
        width,
        height,
    })
}

fn check_size(width: u64, height: u64) -> Result<(), ImageError> {
    if width == 0
        || height == 0
        || width > MAX_IMAGE_SIDE
        || height > MAX_IMAGE_SIDE
        || width * height > MAX_IMAGE_PIXELS
    {
        return Err(ImageError::TooLarge { width, height });
    }
    Ok(())
}

fn limits() -> Limits {
    let mut limits = Limits::default();
    // MAX_IMAGE_SIDE is 8192: it fits u32.
    limits.max_image_width = Some(MAX_IMAGE_SIDE as u32);
    limits.max_image_height = Some(MAX_IMAGE_SIDE as u32);
    // RGBA at 16 bits a channel (a 16-bit PNG) is the largest pixel a decoder makes.
    limits.max_alloc = Some(MAX_IMAGE_PIXELS * 8 + DECODER_OVERHEAD_BYTES);
    limits
}

/// Decodes `bytes`, turns them upright, and fits them to a `width` × `height` box: the
/// RGBA pixels of exactly that size. The box is the asset's, within the embedded images'
/// limits (checked by slot discovery).
pub fn fitted(bytes: &[u8], width: u32, height: u32, fit: Fit) -> Result<RgbaImage, ImageError> {
    let header = header(bytes)?;
    let mut reader = ImageReader::with_format(Cursor::new(bytes), header.format);
    reader.limits(limits());
    let undecodable = |error: image::ImageError| ImageError::Undecodable(error.to_string());
    let mut decoder = reader.into_decoder().map_err(undecodable)?;
    // A missing or unreadable EXIF block means upright, as every viewer takes it.
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut decoded = DynamicImage::from_decoder(decoder).map_err(undecodable)?;
    decoded.apply_orientation(orientation);
    let source = decoded.into_rgba8();
    Ok(fit_to_box(&source, width.max(1), height.max(1), fit))
}

/// `source` fitted to `width` × `height` (both at least 1).
fn fit_to_box(source: &RgbaImage, width: u32, height: u32, fit: Fit) -> RgbaImage {
    let (source_width, source_height) = (f64::from(source.width()), f64::from(source.height()));
    let (box_width, box_height) = (f64::from(width), f64::from(height));
    match fit {
        Fit::Fill => resample(source, width, height),
        Fit::Cover => {
            // The largest part of the source with the box's proportions, centred, then
            // scaled to the box: no rounding leaves a transparent line at an edge.
            let scale = (source_width / box_width).min(source_height / box_height);
            let crop_width = (box_width * scale).round().clamp(1.0, source_width);
            let crop_height = (box_height * scale).round().clamp(1.0, source_height);
            let x = ((source_width - crop_width) / 2.0).round();
            let y = ((source_height - crop_height) / 2.0).round();
            // The casts are of values clamped to the source's u32 size.
            let cropped = imageops::crop_imm(
                source,
                x as u32,
                y as u32,
                crop_width as u32,
                crop_height as u32,
            )
            .to_image();
            resample(&cropped, width, height)
        }
        Fit::Contain => {
            let scale = (box_width / source_width).min(box_height / source_height);
            let scaled_width = (source_width * scale).round().clamp(1.0, box_width) as u32;
            let scaled_height = (source_height * scale).round().clamp(1.0, box_height) as u32;
            let scaled = resample(source, scaled_width, scaled_height);
            let mut canvas = RgbaImage::new(width, height);
            let x = i64::from((width - scaled_width) / 2);
            let y = i64::from((height - scaled_height) / 2);
            imageops::overlay(&mut canvas, &scaled, x, y);
            canvas
        }
    }
}

/// `source` resampled to `width` × `height` (Catmull-Rom: sharp downscales, no ringing to
/// speak of), or copied when the size is already right.
fn resample(source: &RgbaImage, width: u32, height: u32) -> RgbaImage {
    if source.dimensions() == (width, height) {
        return source.clone();
    }
    imageops::resize(source, width, height, FilterType::CatmullRom)
}

/// `pixels` as a PNG data URI, the form an embedded image asset's `p` takes.
pub fn png_data_uri(pixels: &RgbaImage) -> Result<String, ImageError> {
    let mut png = Vec::new();
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, PngFilter::Adaptive)
        .write_image(
            pixels.as_raw(),
            pixels.width(),
            pixels.height(),
            image::ExtendedColorType::Rgba8,
        )
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
    Ok(format!("data:image/png;base64,{encoded}"))
}

/// The pixels the worker decodes `source` to: a sent image's from its header (checked at
/// submit); an uploaded one's is not read again at submit, so it counts as the largest an
/// upload may be ([`crate::lottie::reading::assets::MAX_IMAGE_PIXELS`]).
pub fn decoded_pixels(source: &crate::spec::ImageSource) -> u64 {
    let largest = crate::lottie::reading::assets::MAX_IMAGE_PIXELS;
    match source {
        crate::spec::ImageSource::Sent(bytes) => header(bytes).map_or(largest, |header| {
            u64::from(header.width) * u64::from(header.height)
        }),
        crate::spec::ImageSource::Uploaded => largest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::codecs::jpeg::JpegEncoder;
    use image::Rgba;

    const RED: Rgba<u8> = Rgba([255, 0, 0, 255]);
    const GREEN: Rgba<u8> = Rgba([0, 255, 0, 255]);
    const BLUE: Rgba<u8> = Rgba([0, 0, 255, 255]);
    const WHITE: Rgba<u8> = Rgba([255, 255, 255, 255]);

    /// A `width` × `height` image of four solid quadrants: red, green / blue, white.
    fn quadrants(width: u32, height: u32) -> RgbaImage {
        RgbaImage::from_fn(width, height, |x, y| {
            match (x < width / 2, y < height / 2) {
                (true, true) => RED,
                (false, true) => GREEN,
                (true, false) => BLUE,
                (false, false) => WHITE,
            }
        })
    }

    fn png(image: &RgbaImage) -> Vec<u8> {
        let mut bytes = Vec::new();
        PngEncoder::new(&mut bytes)
            .write_image(
                image.as_raw(),
                image.width(),
                image.height(),
                image::ExtendedColorType::Rgba8,
            )
            .unwrap();
        bytes
    }

    fn near(actual: Rgba<u8>, expected: Rgba<u8>) -> bool {
        actual
            .0
            .iter()
            .zip(expected.0)
            .all(|(a, e)| a.abs_diff(e) <= 24)
    }

    #[track_caller]
    fn assert_pixel(image: &RgbaImage, x: u32, y: u32, expected: Rgba<u8>) {
        let actual = *image.get_pixel(x, y);
        assert!(
            near(actual, expected),
            "({x}, {y}): {actual:?}, expected {expected:?}"
        );
    }

    #[test]
    fn fill_stretches_the_quadrants_to_the_box() {
        let out = fitted(&png(&quadrants(40, 20)), 100, 100, Fit::Fill).unwrap();
        assert_eq!(out.dimensions(), (100, 100));
        assert_pixel(&out, 10, 10, RED);
        assert_pixel(&out, 90, 10, GREEN);
        assert_pixel(&out, 10, 90, BLUE);
        assert_pixel(&out, 90, 90, WHITE);
    }

    #[test]
    fn cover_keeps_the_proportions_and_cuts_the_sides_off() {
        // 200×100 into 100×100: the middle 100×100 of the source, so the quadrant edges
        // stay at the box's middle and the outer halves of each quadrant are cut.
        let source = RgbaImage::from_fn(
            200,
            100,
            |x, _| if (50..150).contains(&x) { RED } else { BLUE },
        );
        let out = fitted(&png(&source), 100, 100, Fit::Cover).unwrap();
        assert_eq!(out.dimensions(), (100, 100));
        for x in [2, 50, 97] {
            assert_pixel(&out, x, 50, RED);
        }
    }

    #[test]
    fn contain_keeps_the_proportions_and_leaves_the_rest_transparent() {
        let out = fitted(&png(&quadrants(200, 100)), 100, 100, Fit::Contain).unwrap();
        assert_eq!(out.dimensions(), (100, 100));
        // The image spans y 25..75 of the box.
        assert_eq!(out.get_pixel(50, 10).0[3], 0);
        assert_eq!(out.get_pixel(50, 90).0[3], 0);
        assert_pixel(&out, 10, 30, RED);
        assert_pixel(&out, 90, 30, GREEN);
        assert_pixel(&out, 10, 70, BLUE);
        assert_pixel(&out, 90, 70, WHITE);
    }

    #[test]
    fn alpha_is_kept() {
        let source =
            RgbaImage::from_fn(10, 10, |x, _| if x < 5 { Rgba([0, 0, 0, 0]) } else { RED });
        let out = fitted(&png(&source), 10, 10, Fit::Fill).unwrap();
        assert_eq!(out.get_pixel(1, 5).0[3], 0);
        assert_pixel(&out, 8, 5, RED);
    }

    /// A JPEG as a phone writes it: the pixels stored sideways and EXIF orientation 6 (turn
    /// 90° clockwise to show). Stored: left half red, right half blue; shown: top red,
    /// bottom blue.
    #[test]
    fn a_jpeg_with_exif_orientation_6_is_turned_upright() {
        let stored = RgbaImage::from_fn(64, 32, |x, _| if x < 32 { RED } else { BLUE });
        let rgb = DynamicImage::ImageRgba8(stored).into_rgb8();
        let mut jpeg = Vec::new();
        let mut encoder = JpegEncoder::new_with_quality(&mut jpeg, 95);
        // A little-endian TIFF header and one IFD entry: tag 0x0112 (orientation), SHORT, 6.
        let mut exif =
            b"II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00".to_vec();
        exif.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]);
        encoder.set_exif_metadata(exif).unwrap();
        encoder
            .write_image(rgb.as_raw(), 64, 32, image::ExtendedColorType::Rgb8)
            .unwrap();
        let out = fitted(&jpeg, 32, 64, Fit::Fill).unwrap();
        // Turned clockwise, the stored left (red) is on top.
        assert_pixel(&out, 16, 8, RED);
        assert_pixel(&out, 16, 56, BLUE);
    }

    #[test]
    fn a_webp_is_decoded() {
        let mut webp = Vec::new();
        let source = quadrants(20, 20);
        image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
            .write_image(source.as_raw(), 20, 20, image::ExtendedColorType::Rgba8)
            .unwrap();
        let out = fitted(&webp, 20, 20, Fit::Fill).unwrap();
        assert_pixel(&out, 2, 2, RED);
        assert_pixel(&out, 18, 18, WHITE);
    }

    /// A progressive JPEG (8×8) of 5,000 scans of a few bytes each: refused from its markers.
    #[test]
    fn a_jpeg_of_thousands_of_scans_is_refused_before_decoding() {
        let mut bytes = vec![0xFF, 0xD8];
        bytes.extend([0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        for _ in 0..5000 {
            bytes.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x12, 0x34]);
        }
        bytes.extend([0xFF, 0xD9]);
        assert_eq!(header(&bytes), Err(ImageError::TooManyScans));
    }

    #[test]
    fn other_formats_and_garbage_are_refused() {
        assert_eq!(
            header(b"GIF89a\x01\x00\x01\x00"),
            Err(ImageError::UnsupportedFormat)
        );
        assert_eq!(header(b"not an image"), Err(ImageError::UnsupportedFormat));
        let mut cut = png(&quadrants(20, 20));
        cut.truncate(cut.len() / 2);
        assert!(matches!(
            fitted(&cut, 10, 10, Fit::Cover),
            Err(ImageError::Undecodable(_))
        ));
        assert_eq!(
            header(&vec![0; MAX_IMAGE_BYTES + 1]),
            Err(ImageError::TooManyBytes {
                bytes: MAX_IMAGE_BYTES + 1
            })
        );
    }

    /// Images past a side or the pixel limit are refused from their header, before their
    /// pixels are allocated (a real PNG of 9,000 × 1; one whose header says 5,000 × 4,000).
    #[test]
    fn a_header_over_the_limits_is_refused_before_decoding() {
        let wide = png(&RgbaImage::new(9000, 1));
        assert_eq!(
            fitted(&wide, 10, 10, Fit::Cover),
            Err(ImageError::TooLarge {
                width: 9000,
                height: 1
            })
        );
        let mut many = png(&RgbaImage::new(1, 1));
        rewrite_png_size(&mut many, 5000, 4000);
        assert_eq!(
            header(&many),
            Err(ImageError::TooLarge {
                width: 5000,
                height: 4000
            })
        );
    }

    /// Sets a PNG's IHDR size and its CRC (a header that lies about the data that follows).
    fn rewrite_png_size(png: &mut [u8], width: u32, height: u32) {
        png[16..20].copy_from_slice(&width.to_be_bytes());
        png[20..24].copy_from_slice(&height.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
    }

    /// CRC-32 (IEEE), as PNG chunks need it.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = flate2::Crc::new();
        crc.update(bytes);
        crc.sum()
    }

    /// A PNG whose header is within the limits but lies about its data (4,000 × 4,000 said,
    /// 4 × 4 sent) is an error, not a panic, a hang or 64 MiB kept.
    #[test]
    fn a_png_whose_header_lies_about_its_data_is_refused() {
        let mut bytes = png(&quadrants(4, 4));
        rewrite_png_size(&mut bytes, 4000, 4000);
        assert!(matches!(
            fitted(&bytes, 10, 10, Fit::Cover),
            Err(ImageError::Undecodable(_))
        ));
    }

    #[test]
    fn the_data_uri_is_a_png_of_the_boxs_size_that_the_template_check_accepts() {
        let pixels = fitted(&png(&quadrants(30, 30)), 12, 8, Fit::Cover).unwrap();
        let uri = png_data_uri(&pixels).unwrap();
        let template =
            serde_json::json!({"assets": [{"id": "a", "w": 12, "h": 8, "e": 1, "p": uri}]});
        super::super::assets::check(&template).unwrap();
        let payload = uri.strip_prefix("data:image/png;base64,").unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(payload)
            .unwrap();
        let back = image::load_from_memory(&bytes).unwrap();
        assert_eq!((back.width(), back.height()), (12, 8));
    }
}
