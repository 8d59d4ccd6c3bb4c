//! PNG and JPEG stills through the `image` crate: one frame of straight RGBA (the preparer GIF
//! uses), written when the encode finishes. PNG keeps alpha and is lossless; JPEG is composited
//! over the background. Both are untagged, which every viewer reads as sRGB, as the colours are.

use super::{EncodeError, Encoder, EncoderInput, EncoderSettings, Frame};
use crate::spec::{Format, Quality};
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ExtendedColorType, ImageEncoder};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// JPEG quality (1..=100): 90 keeps flat colours within 2/255 (tests/engine/formats.rs); 95
/// for high; 80 for small.
pub(crate) fn jpeg_quality(quality: Quality) -> u8 {
    match quality {
        Quality::Standard => 90,
        Quality::High => 95,
        Quality::Small => 80,
    }
}

/// PNG is lossless whatever the quality: small spends more time on compression.
fn png_compression(quality: Quality) -> (CompressionType, FilterType) {
    match quality {
        Quality::Standard | Quality::High => (CompressionType::Default, FilterType::Adaptive),
        Quality::Small => (CompressionType::Best, FilterType::Adaptive),
    }
}

pub(crate) struct StillEncoder {
    settings: EncoderSettings,
    path: PathBuf,
    frame: Option<imgref::ImgVec<rgb::RGBA8>>,
}

impl StillEncoder {
    pub(crate) fn open(settings: &EncoderSettings, path: &Path) -> StillEncoder {
        StillEncoder {
            settings: *settings,
            path: path.to_owned(),
            frame: None,
        }
    }

    fn write(&self, image: &imgref::ImgVec<rgb::RGBA8>) -> Result<(), EncodeError> {
        let (width, height) = (image.width() as u32, image.height() as u32);
        let pixels: Vec<rgb::RGBA8> = image.pixels().collect();
        let bytes: &[u8] = rgb::bytemuck::cast_slice(&pixels);
        let mut file = BufWriter::new(std::fs::File::create(&self.path)?);
        let failed = |error: image::ImageError| EncodeError::Image(error.to_string());
        match self.settings.format {
            Format::Jpeg => {
                let [r, g, b, _] = self.settings.background.to_rgba8();
                let rgb = composited(bytes, [r, g, b]);
                JpegEncoder::new_with_quality(&mut file, jpeg_quality(self.settings.quality))
                    .write_image(&rgb, width, height, ExtendedColorType::Rgb8)
                    .map_err(failed)?;
            }
            _ => {
                let (compression, filter) = png_compression(self.settings.quality);
                PngEncoder::new_with_quality(&mut file, compression, filter)
                    .write_image(bytes, width, height, ExtendedColorType::Rgba8)
                    .map_err(failed)?;
            }
        }
        file.flush()?;
        Ok(())
    }
}

/// Writes one rendered frame (premultiplied BGRA, `width × height`) as a PNG: a video's
/// poster, the same pixels a PNG still of its time has.
pub(crate) fn write_png(
    premultiplied: &[rlottie::Bgra],
    (width, height): (u32, u32),
    quality: Quality,
    path: &Path,
) -> Result<(), EncodeError> {
    let mut rgba = vec![0u8; premultiplied.len() * 4];
    super::pixels::convert(
        premultiplied,
        &mut rgba,
        super::pixels::PixelLayout::StraightRgba,
    );
    let mut file = BufWriter::new(std::fs::File::create(path)?);
    let (compression, filter) = png_compression(quality);
    PngEncoder::new_with_quality(&mut file, compression, filter)
        .write_image(&rgba, width, height, ExtendedColorType::Rgba8)
        .map_err(|error| EncodeError::Image(error.to_string()))?;
    file.flush()?;
    Ok(())
}

/// Straight RGBA over an opaque background, rounded: `c·α + u·(255 − α)` / 255.
fn composited(rgba: &[u8], under: [u8; 3]) -> Vec<u8> {
    let (pixels, _) = rgba.as_chunks::<4>();
    let mut rgb = Vec::with_capacity(pixels.len() * 3);
    for [r, g, b, a] in pixels {
        let alpha = u32::from(*a);
        for (colour, under) in [*r, *g, *b].into_iter().zip(under) {
            let mixed = u32::from(colour) * alpha + u32::from(under) * (255 - alpha);
            rgb.push(((mixed + 127) / 255) as u8);
        }
    }
    rgb
}

impl Encoder for StillEncoder {
    fn encode(&mut self, frame: Frame) -> Result<Option<EncoderInput>, EncodeError> {
        match frame.input {
            // The first frame is the still (a window of one frame gives only that one).
            EncoderInput::Rgba(image) if self.frame.is_none() => self.frame = Some(image),
            EncoderInput::Rgba(_) => {}
            EncoderInput::Video(_) => {
                return Err(EncodeError::Image(
                    "the still encoder was given a video frame".into(),
                ))
            }
        }
        Ok(None)
    }

    fn finish(self: Box<Self>) -> Result<(), EncodeError> {
        match &self.frame {
            Some(image) => self.write(image),
            None => Err(EncodeError::Image("no frame was rendered".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compositing_rounds_the_over_operator() {
        // Opaque keeps its colour, transparent shows the background, half mixes them.
        let pixels = [10, 20, 30, 255, 10, 20, 30, 0, 255, 0, 0, 128];
        assert_eq!(
            composited(&pixels, [200, 100, 0]),
            [10, 20, 30, 200, 100, 0, 228, 50, 0]
        );
    }
}
