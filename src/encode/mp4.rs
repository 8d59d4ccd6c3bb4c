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

/// x264 constant rate factor for `quality` at `width`×`height`: 20 is visually lossless for
/// flat motion graphics at 400×400 and up (standard); 16 for gradients and photos (high); 26
/// halves the size again (small). Smaller frames step down by [`small_frame_steps`].
pub(crate) fn h264_crf(quality: Quality, width: u32, height: u32) -> u32 {
    let crf = match quality {
        Quality::Standard => 20,
        Quality::High => 16,
        Quality::Small => 26,
    };
    crf - 2 * small_frame_steps(width, height)
}

/// Frames this size and up take each codec's rate factor as tabled (400×400): at it, x264's
/// CRF 20 keeps the busiest corpus file (a fast-spinning repeater) at SSIM 0.990 against
/// lottie-web's frames, codec loss alone.
pub(crate) const FULL_DETAIL_PIXELS: u32 = 400 * 400;
/// At most this many steps: a 100×100 frame (16 times fewer pixels than 400×400) takes 4.
pub(crate) const MAX_SMALL_FRAME_STEPS: u32 = 4;

/// How many steps below its tabled rate factor a frame of `width`×`height` is encoded: one per
/// halving of the pixel count below [`FULL_DETAIL_PIXELS`] (rounded), at most
/// [`MAX_SMALL_FRAME_STEPS`]. A step is 2 on x264's and x265's scale, 4 on SVT-AV1's (0..=63).
///
/// Why: the same rate factor loses more of a small frame. Measured on lottie-web's frames of
/// `repeater-abstract-circle-15fps` (120 frames at 60 fps, min SSIM, x264 `veryfast`):
/// 100×100 0.957 at CRF 20, 0.979 at 16, 0.992 at 12; 200×200 0.982 at 20, 0.991 at 16;
/// 400×400 0.990 at 20. SVT-AV1 at 100×100: 0.958 at 32, 0.974 at 24, 0.990 at 16. Small
/// frames cost little to encode and store either way (100×100 at CRF 12: 103 kB for the two
/// seconds, against 38 kB at 20). VP9 (realtime, CRF 18) already keeps 0.991 at 100×100, so
/// it is not stepped. docs/formats.md has the table.
pub(crate) fn small_frame_steps(width: u32, height: u32) -> u32 {
    let pixels = f64::from(width.max(1)) * f64::from(height.max(1));
    let halvings = (f64::from(FULL_DETAIL_PIXELS) / pixels).log2().round();
    // In 0..=MAX_SMALL_FRAME_STEPS after the clamp, so the conversion is exact.
    halvings.clamp(0.0, f64::from(MAX_SMALL_FRAME_STEPS)) as u32
}
/// x264 preset: `veryfast` keeps encoding ahead of the renderer at 1080p on two cores.
pub(crate) const MP4_PRESET: &str = "veryfast";

/// x265 constant rate factor. x265's scale runs a few steps above x264's for the same picture;
/// at 24 a flat purple of tests/engine/colours.rs decoded 2/255 off (the promise's edge), at
/// 22 1/255, so 22; high and small move as x264's do, and so do small frames
/// ([`small_frame_steps`]: 100×100 went from SSIM 0.894 at 22 to 0.966 at 14 on the repeater).
pub(crate) fn hevc_crf(quality: Quality, width: u32, height: u32) -> u32 {
    let crf = match quality {
        Quality::Standard => 22,
        Quality::High => 18,
        Quality::Small => 28,
    };
    crf - 2 * small_frame_steps(width, height)
}
/// x265 preset: `ultrafast`, the only one near x264 `veryfast`'s speed at 1080p on two cores
/// (x265 is several times slower per frame); its files are still smaller than H.264's.
pub(crate) const HEVC_PRESET: &str = "ultrafast";

/// SVT-AV1 constant rate factor (0..=63), four to a step of [`small_frame_steps`] (its scale
/// moves about half as fast as x264's).
pub(crate) fn av1_crf(quality: Quality, width: u32, height: u32) -> u32 {
    let crf = match quality {
        Quality::Standard => 32,
        Quality::High => 24,
        Quality::Small => 40,
    };
    crf - 4 * small_frame_steps(width, height)
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
        (
            "crf",
            h264_crf(settings.quality, settings.width, settings.height).to_string(),
        ),
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
        (
            "crf",
            hevc_crf(settings.quality, settings.width, settings.height).to_string(),
        ),
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
        (
            "crf",
            av1_crf(settings.quality, settings.width, settings.height).to_string(),
        ),
        ("preset", AV1_PRESET.to_string()),
    ];
    VideoEncoder::open(settings, path, mp4_codec("libsvtav1", options, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_frames_step_down_one_step_per_halving_of_their_pixels() {
        for (width, height, steps) in [
            (1920, 1080, 0),
            (400, 400, 0),
            // 90,000 pixels: log2(1.78) = 0.83, one step.
            (300, 300, 1),
            (283, 283, 1),
            (200, 200, 2),
            (100, 200, 3),
            (100, 100, 4),
            (64, 64, 4),
            (1, 1, 4),
        ] {
            assert_eq!(small_frame_steps(width, height), steps, "{width}×{height}");
        }
    }

    #[test]
    fn each_codec_moves_by_its_own_step_from_its_table() {
        assert_eq!(h264_crf(Quality::Standard, 1920, 1080), 20);
        assert_eq!(h264_crf(Quality::Standard, 100, 100), 12);
        assert_eq!(h264_crf(Quality::High, 200, 200), 12);
        assert_eq!(h264_crf(Quality::Small, 100, 100), 18);
        assert_eq!(hevc_crf(Quality::Standard, 100, 100), 14);
        assert_eq!(av1_crf(Quality::Standard, 100, 100), 16);
        assert_eq!(av1_crf(Quality::High, 100, 100), 8);
        assert_eq!(av1_crf(Quality::Standard, 720, 720), 32);
    }
}
