//! MP4: H.264 (libx264), yuv420p, constant quality, `moov` at the front so browsers start
//! playing before the download ends. No alpha: frames arrive composited over the background.

use super::video::{VideoCodec, VideoEncoder};
use super::{EncodeError, EncoderSettings};
use ffmpeg_next::format::Pixel;
use std::path::Path;

/// What the encoder consumes (prepared on the render threads).
pub(crate) const PIXEL_FORMAT: Pixel = Pixel::YUV420P;

/// x264 constant rate factor: 20 is visually lossless for flat motion graphics.
pub(crate) const MP4_CRF: u32 = 20;
/// x264 preset: `veryfast` keeps encoding ahead of the renderer at 1080p on two cores.
pub(crate) const MP4_PRESET: &str = "veryfast";

pub(crate) fn open(settings: &EncoderSettings, path: &Path) -> Result<VideoEncoder, EncodeError> {
    VideoEncoder::open(
        settings,
        path,
        VideoCodec {
            encoder_name: "libx264",
            muxer_name: "mp4",
            pixel_format: PIXEL_FORMAT,
            encoder_options: vec![
                ("crf", MP4_CRF.to_string()),
                ("preset", MP4_PRESET.to_owned()),
                // Main-compatible High profile, which every browser decodes.
                ("profile", "high".to_owned()),
            ],
            muxer_options: vec![("movflags", "+faststart")],
        },
    )
}
