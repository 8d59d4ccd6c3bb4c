//! The formats for the web and chat: WebP (libwebp through FFmpeg; animated, or a still when
//! the output is one frame) and APNG (FFmpeg's encoder), both with alpha and a loop count.
//! libwebp's animation encoder holds every frame until it writes the file: how large an
//! animated WebP may be is its format's row in [`crate::spec::output`].

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
