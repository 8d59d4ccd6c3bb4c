//! The formats for the web and chat: WebP (libwebp through FFmpeg; animated, or a still when
//! the output is one frame) and APNG (FFmpeg's encoder), both with alpha and a loop count.

use super::video::{VideoCodec, VideoEncoder};
use super::{EncodeError, EncoderSettings};
use crate::spec::Quality;
use ffmpeg_next::format::Pixel;
use std::path::Path;

/// What the WebP encoder consumes: straight BGRA, which libwebp converts to its 4:2:0 YUV
/// with the rounding its own decoder undoes. Handing it `yuv.rs`'s planes instead (the same
/// BT.601 limited-range matrix) decoded 3/255 further off on flat purples, as `yuv.rs` tunes
/// its chroma for Chromium's video path, not libwebp's.
pub(crate) const WEBP_PIXEL_FORMAT: Pixel = Pixel::BGRA;

/// Output megapixels (frames × width × height / 10⁶) an animated WebP may have. libwebp's
/// animation encoder holds the animation in memory until it writes the file: measured with
/// `./dev bench --format webp` at 1080², peak RSS grew by 1.6 MiB a frame on the emoji file
/// and 3.7 MiB a frame on the tractor (2.3 GiB for its 534 frames, 624 megapixels), about
/// 3.2 bytes a pixel at worst. 600 megapixels keep a worker near 2 GiB, under its 4 GiB
/// limit (17 s at 1080² and 30 fps, 68 s at 540²; chat stickers last 3 s).
pub const MAX_WEBP_ANIMATION_MEGAPIXELS: f64 = 600.0;

/// Whether an animated WebP of `frames` frames of `width` × `height` is within
/// [`MAX_WEBP_ANIMATION_MEGAPIXELS`]; the megapixels it has otherwise.
pub(crate) fn webp_animation_over_limit(frames: u32, width: u32, height: u32) -> Option<f64> {
    let megapixels = f64::from(frames) * f64::from(width) * f64::from(height) / 1e6;
    (megapixels > MAX_WEBP_ANIMATION_MEGAPIXELS).then_some(megapixels)
}

/// libwebp's lossy quality (0..=100). 95 is the lowest that keeps flat colours within 2/255:
/// measured on #AF52DE with libwebp's own decoder, 90 leaves chroma blocks 3/255 off, 95 and
/// 100 decode within 1 (tests/engine/colours.rs checks every colour). 100 for high; 80 for
/// small.
pub(crate) fn webp_quality(quality: Quality) -> u32 {
    match quality {
        Quality::Standard => 95,
        Quality::High => 100,
        Quality::Small => 80,
    }
}

/// The loop count as the muxers take it: times played, 0 forever.
fn plays(settings: &EncoderSettings) -> String {
    settings.loop_count.map_or(0, u32::from).to_string()
}

pub(crate) fn open_webp(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<VideoEncoder, EncodeError> {
    VideoEncoder::open(
        settings,
        path,
        VideoCodec {
            // One frame is a plain (not animated) WebP.
            encoder_name: if settings.still {
                "libwebp"
            } else {
                "libwebp_anim"
            },
            muxer_name: "webp",
            pixel_format: WEBP_PIXEL_FORMAT,
            encoder_options: vec![("quality", webp_quality(settings.quality).to_string())],
            muxer_options: vec![("loop", plays(settings))],
            codec_tag: None,
        },
    )
}

pub(crate) fn open_apng(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<VideoEncoder, EncodeError> {
    // Lossless whatever the quality: small tries every row filter per row (`mixed`, about
    // twice as slow), the others take FFmpeg's default (paeth).
    let mut encoder_options = vec![];
    if settings.quality == Quality::Small {
        encoder_options.push(("pred", "mixed".to_owned()));
    }
    VideoEncoder::open(
        settings,
        path,
        VideoCodec {
            encoder_name: "apng",
            muxer_name: "apng",
            pixel_format: Pixel::RGBA,
            encoder_options,
            muxer_options: vec![("plays", plays(settings))],
            codec_tag: None,
        },
    )
}
