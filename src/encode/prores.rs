//! ProRes 4444 with alpha in a QuickTime file, for editing software (FFmpeg's `prores_ks`):
//! 10-bit 4:4:4 YUV with a 10-bit alpha plane, BT.601 matrix and limited range like every
//! other YUV output ([`super::video::tag_colours`], which ProRes carries in its frame header).

use super::pixels::{convert, PixelLayout};
use super::video::{writable_or_new, VideoCodec, VideoEncoder};
use super::{EncodeError, EncoderInput, EncoderSettings, FramePreparer};
use crate::spec::Quality;
use ffmpeg_next::color::{Primaries, Range, Space, TransferCharacteristic};
use ffmpeg_next::format::Pixel;
use rlottie::Bgra;
use std::path::Path;

/// What the encoder consumes (prepared on the render threads).
pub(crate) const PIXEL_FORMAT: Pixel = Pixel::YUVA444P10LE;

/// `prores_ks` profile: 4 is ProRes 4444, the profile with alpha; high takes 4444 XQ (5),
/// about half as many bits again. ProRes has no smaller profile with alpha, so small is 4444.
pub(crate) fn prores_profile(quality: Quality) -> u32 {
    match quality {
        Quality::Standard | Quality::Small => 4,
        Quality::High => 5,
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(crate) fn open(settings: &EncoderSettings, path: &Path) -> Result<VideoEncoder, EncodeError> {
    VideoEncoder::open(
        settings,
        path,
        VideoCodec {
            encoder_name: "prores_ks",
            muxer_name: "mov",
            pixel_format: PIXEL_FORMAT,
            encoder_options: vec![
                ("profile", prores_profile(settings.quality).to_string()),
                // Apple's vendor code: Final Cut Pro and QuickTime read the file as their own.
                ("vendor", "apl0".to_owned()),
                ("alpha_bits", "16".to_owned()),
                // Slice threads, one per core: ProRes codes every frame alone, in slices, so
                // they keep both cores busy without the queue of frames frame threads hold.
                ("thread_type", "slice".to_owned()),
                ("threads", cores().to_string()),
            ],
            // The `colr` atom, so players read the same tags as the frame headers carry.
            muxer_options: vec![("movflags", "+write_colr".to_owned())],
            codec_tag: None,
        },
    )
}

/// BT.601 luma weights (the matrix every YUV output is tagged with).
const KR: f32 = 0.299;
const KB: f32 = 0.114;
const KG: f32 = 1.0 - KR - KB;

/// One straight 8-bit RGBA pixel as 10-bit limited-range Y, Cb, Cr and full-range alpha.
fn yuva10([r, g, b, a]: [u8; 4]) -> [u16; 4] {
    let [r, g, b] = [r, g, b].map(|c| f32::from(c) / 255.0);
    let y = KR * r + KG * g + KB * b;
    let cb = (b - y) / (2.0 * (1.0 - KB));
    let cr = (r - y) / (2.0 * (1.0 - KR));
    let code =
        |value: f32, low: f32, span: f32| (low + value * span).round().clamp(0.0, 1023.0) as u16;
    [
        code(y, 64.0, 876.0),
        code(cb, 512.0, 896.0),
        code(cr, 512.0, 896.0),
        code(f32::from(a) / 255.0, 0.0, 1023.0),
    ]
}

/// Converts rendered frames to 10-bit 4:4:4 YUV with alpha, row by row through straight RGBA
/// (the one un-premultiplication every RGBA output shares, [`super::pixels`]).
pub(crate) struct ProresPreparer {
    width: usize,
    height: usize,
    row: Vec<u8>,
}

impl ProresPreparer {
    pub(crate) fn new(settings: &EncoderSettings) -> ProresPreparer {
        ProresPreparer {
            width: settings.width as usize,
            height: settings.height as usize,
            row: vec![0; settings.width as usize * 4],
        }
    }
}

impl FramePreparer for ProresPreparer {
    fn prepare(
        &mut self,
        premultiplied: &[Bgra],
        _previous: Option<&[Bgra]>,
        reuse: Option<EncoderInput>,
    ) -> Result<EncoderInput, EncodeError> {
        // Reused as the other video outputs do: a fresh 9 MB frame per frame failed the
        // tractor's 534 frames at 1080² near frame 480.
        let mut picture = writable_or_new(reuse, PIXEL_FORMAT, self.width, self.height);
        // prores_ks writes the frame's own colour description into each frame header (not the
        // encoder's), and decoders report that one: the same tags as every YUV output.
        picture.set_color_primaries(Primaries::BT709);
        picture.set_color_transfer_characteristic(TransferCharacteristic::BT709);
        picture.set_color_space(Space::SMPTE170M);
        picture.set_color_range(Range::MPEG);
        let mut planes = crate::os::ffmpeg_frames::frame_planes_mut(&mut picture);
        for (y, source) in premultiplied
            .chunks_exact(self.width)
            .take(self.height)
            .enumerate()
        {
            convert(source, &mut self.row, PixelLayout::StraightRgba);
            let (pixels, _) = self.row.as_chunks::<4>();
            for (x, pixel) in pixels.iter().enumerate() {
                // FFmpeg's plane order for yuva444p: Y, Cb, Cr, A; 16-bit little-endian samples.
                for (plane, sample) in planes.iter_mut().zip(yuva10(*pixel)) {
                    let at = y * plane.1 + x * 2;
                    plane.0[at..at + 2].copy_from_slice(&sample.to_le_bytes());
                }
            }
        }
        drop(planes);
        Ok(EncoderInput::Video(picture))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_colours_have_their_ten_bit_codes() {
        // Limited range: black at 64, white at 940, neutral chroma at 512; full-range alpha.
        assert_eq!(yuva10([0, 0, 0, 255]), [64, 512, 512, 1023]);
        assert_eq!(yuva10([255, 255, 255, 0]), [940, 512, 512, 0]);
        // Pure red: Y = 64 + 876 × 0.299, Cr at its top (512 + 448).
        assert_eq!(yuva10([255, 0, 0, 128]), [326, 361, 960, 514]);
    }
}
