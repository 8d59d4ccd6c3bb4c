//! WebM: VP9 (libvpx-vp9) with an alpha channel (yuva420p; FFmpeg stores alpha as a second
//! VP9 stream in the Matroska block additions, which browsers composite).

use super::video::{VideoCodec, VideoEncoder};
use super::{EncodeError, EncoderSettings};
use crate::spec::Quality;
use ffmpeg_next::format::Pixel;
use std::path::Path;

/// What the encoder consumes (prepared on the render threads).
pub(crate) const PIXEL_FORMAT: Pixel = Pixel::YUVA420P;

/// VP9 constant quality (0..=63, lower is better). 18 rather than libvpx's recommended 31 for
/// 1080p because flat brand colours must come back within 2/255 (DESIGN.md "Colour"): at 31 the
/// realtime encoder moves a flat area's luma by 1–2 codes (the top row always), which decodes up
/// to 3/255 off even though the YUV handed to it is exact. Measured on the seven solid fills of
/// tests/engine/colours.rs (640×480, ffmpeg's accurate decode), worst channel: CRF 31, 25 and 20:
/// 3; 18, 17, 16: 2; 15: 1. The cost is size, not speed: re-encoding two bench files at 720×720
/// (single thread, realtime, speed 8) CRF 31 → 18 gave 152 → 223 kB and 541 → 813 kB (+46%,
/// +50%; CRF 15: +60%, +65%) in the same time within noise. `deadline=good` keeps colours exact
/// at 31 and halves the size, but encodes 3–6× slower.
/// High and small move by the same steps as x264's (small gives up the 2/255 promise).
pub(crate) fn webm_crf(quality: Quality) -> u32 {
    match quality {
        Quality::Standard => 18,
        Quality::High => 12,
        Quality::Small => 31,
    }
}
/// libvpx speed for the realtime deadline (0..=8); 8 is the fastest.
pub(crate) const WEBM_CPU_USED: u32 = 8;

pub(crate) fn open(settings: &EncoderSettings, path: &Path) -> Result<VideoEncoder, EncodeError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    VideoEncoder::open(
        settings,
        path,
        VideoCodec {
            encoder_name: "libvpx-vp9",
            muxer_name: "webm",
            pixel_format: PIXEL_FORMAT,
            encoder_options: vec![
                ("crf", webm_crf(settings.quality).to_string()),
                ("b", "0".to_owned()),
                ("deadline", "realtime".to_owned()),
                ("cpu-used", WEBM_CPU_USED.to_string()),
                ("row-mt", "1".to_owned()),
                // No look-ahead: realtime encoding gains little from it, and each frame of it
                // (two encoders with alpha) costs megabytes that every worker must fault in.
                ("lag-in-frames", "0".to_owned()),
                ("threads", threads.to_string()),
            ],
            muxer_options: vec![],
            codec_tag: None,
        },
    )
}
