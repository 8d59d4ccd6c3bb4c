//! MP4s: H.264 (libx264), HEVC (libx265, tagged `hvc1`) and AV1 (SVT-AV1), all yuv420p at
//! constant quality with `moov` at the front so browsers start playing before the download
//! ends. No alpha: frames arrive composited over the background. Each codec's settings per
//! [`Quality`] are named here and tabled in docs/formats.md.

use super::video::{VideoCodec, VideoEncoder};
use super::{EncodeError, EncoderSettings};
use crate::spec::Quality;
use ffmpeg_next::format::Pixel;
use std::path::Path;

/// What the encoders consume (prepared on the render threads).
pub(crate) const PIXEL_FORMAT: Pixel = Pixel::YUV420P;

/// x264 constant rate factor: 20 is visually lossless for flat motion graphics (standard);
/// 16 for gradients and photos (high); 26 halves the size again (small).
pub(crate) fn h264_crf(quality: Quality) -> u32 {
    match quality {
        Quality::Standard => 20,
        Quality::High => 16,
        Quality::Small => 26,
    }
}
/// x264 preset: `veryfast` keeps encoding ahead of the renderer at 1080p on two cores.
pub(crate) const MP4_PRESET: &str = "veryfast";

/// x265 constant rate factor. x265's scale runs a few steps above x264's for the same picture;
/// at 24 a flat purple of tests/engine/colours.rs decoded 2/255 off (the promise's edge), at
/// 22 1/255, so 22; high and small move as x264's do.
pub(crate) fn hevc_crf(quality: Quality) -> u32 {
    match quality {
        Quality::Standard => 22,
        Quality::High => 18,
        Quality::Small => 28,
    }
}
/// x265 preset: `ultrafast`, the only one near x264 `veryfast`'s speed at 1080p on two cores
/// (x265 is several times slower per frame); its files are still smaller than H.264's.
pub(crate) const HEVC_PRESET: &str = "ultrafast";

/// SVT-AV1 constant rate factor (0..=63).
pub(crate) fn av1_crf(quality: Quality) -> u32 {
    match quality {
        Quality::Standard => 32,
        Quality::High => 24,
        Quality::Small => 40,
    }
}
/// SVT-AV1 preset (0 slowest ..= 13 fastest): 10 is the fastest that keeps flat colours
/// within 2/255 (measured in tests/engine/formats.rs) while encoding 1080p on two cores.
pub(crate) const AV1_PRESET: u32 = 10;

fn mp4_codec(
    encoder_name: &'static str,
    encoder_options: Vec<(&'static str, String)>,
    codec_tag: Option<[u8; 4]>,
) -> VideoCodec {
    VideoCodec {
        encoder_name,
        muxer_name: "mp4",
        pixel_format: PIXEL_FORMAT,
        encoder_options,
        muxer_options: vec![("movflags", "+faststart".to_owned())],
        codec_tag,
    }
}

pub(crate) fn open_h264(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<VideoEncoder, EncodeError> {
    let options = vec![
        ("crf", h264_crf(settings.quality).to_string()),
        ("preset", MP4_PRESET.to_owned()),
        // Main-compatible High profile, which every browser decodes.
        ("profile", "high".to_owned()),
    ];
    VideoEncoder::open(settings, path, mp4_codec("libx264", options, None))
}

pub(crate) fn open_hevc(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<VideoEncoder, EncodeError> {
    let options = vec![
        ("crf", hevc_crf(settings.quality).to_string()),
        ("preset", HEVC_PRESET.to_owned()),
        // x265 writes its banner and statistics to stderr otherwise.
        ("x265-params", "log-level=error".to_owned()),
    ];
    // `hvc1` (parameter sets in the sample description) rather than FFmpeg's default `hev1`:
    // Safari and QuickTime play only `hvc1`.
    VideoEncoder::open(
        settings,
        path,
        mp4_codec("libx265", options, Some(*b"hvc1")),
    )
}

pub(crate) fn open_av1(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<VideoEncoder, EncodeError> {
    let options = vec![
        ("crf", av1_crf(settings.quality).to_string()),
        ("preset", AV1_PRESET.to_string()),
    ];
    VideoEncoder::open(settings, path, mp4_codec("libsvtav1", options, None))
}
