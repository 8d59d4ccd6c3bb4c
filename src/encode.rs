//! One encoder interface over every format: GIF through gifski ([`gif`]); H.264, HEVC and AV1
//! in MP4 ([`mp4`]), VP9 WebM ([`webm`]), animated WebP and APNG ([`web`]) and ProRes 4444
//! ([`prores`]) through the system FFmpeg libraries, sharing [`video`]; PNG and JPEG stills
//! through the `image` crate ([`still`]).
//! Each encoder comes with a [`FramePreparer`] that runs on the render threads, one per
//! thread: it converts rlottie's premultiplied BGRA into exactly what the encoder consumes
//! (straight RGBA for GIF, [`pixels`]; YUV planes for video, [`yuv`]), so the encoder thread, the pipeline's
//! critical path, does nothing but encode. Encoders take the prepared frames in order.

pub mod gif;
pub(crate) mod mp4;
pub mod pixels;
pub(crate) mod prores;
pub(crate) mod still;
pub(crate) mod video;
pub mod web;
pub(crate) mod webm;
pub(crate) mod yuv;

use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;
use crate::spec::{Format, OutputSpec, Quality, Rgba, Window};
use rlottie::Bgra;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("the {codec} encoder is not available in this FFmpeg build")]
    CodecMissing { codec: &'static str },
    #[error("{context}: {source}")]
    Ffmpeg {
        context: &'static str,
        source: ffmpeg_next::Error,
    },
    #[error("gif encoder: {0}")]
    Gif(String),
    #[error("image encoder: {0}")]
    Image(String),
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),
}

impl Classified for EncodeError {
    fn class(&self) -> ErrorClass {
        match self {
            // A missing codec is a broken installation; it will not fix itself on retry
            // of the same request, but it is not the caller's fault either. The service
            // reports it as transient so callers retry against a healthy instance.
            EncodeError::CodecMissing { .. } => ErrorClass::Transient,
            EncodeError::Ffmpeg { .. }
            | EncodeError::Gif(_)
            | EncodeError::Image(_)
            | EncodeError::Io(_) => ErrorClass::Transient,
        }
    }
    fn reason(&self) -> Reason {
        match self {
            EncodeError::CodecMissing { .. } => Reason::EncoderUnavailable,
            EncodeError::Io(_) => Reason::OutputWriteFailed,
            EncodeError::Ffmpeg { .. } | EncodeError::Gif(_) | EncodeError::Image(_) => {
                Reason::EncoderFailed
            }
        }
    }
}

/// A started encode: frames in order, then `finish` writes the trailer.
pub(crate) trait Encoder {
    /// Encodes the next frame; may hand its buffers back for the render threads to reuse.
    fn encode(&mut self, frame: Frame) -> Result<Option<EncoderInput>, EncodeError>;
    fn finish(self: Box<Self>) -> Result<(), EncodeError>;
}

/// One frame, rendered and converted for the encoder.
pub(crate) struct Frame {
    pub index: u32,
    pub input: EncoderInput,
}

/// A frame converted for its encoder.
pub(crate) enum EncoderInput {
    /// Straight-alpha RGBA (GIF, APNG, PNG and JPEG).
    Rgba(imgref::ImgVec<rgb::RGBA8>),
    /// A frame in the video encoder's pixel format, at the encoded size.
    Video(ffmpeg_next::frame::Video),
}

/// Converts rendered frames for one encoder; one per render thread.
pub(crate) trait FramePreparer {
    /// `premultiplied` is one whole frame as rlottie renders it (BGRA, row-major);
    /// `previous` the frame this preparer was given before, when its pixels are still at hand
    /// (the renderer alternates two surfaces), so a held frame can be told without keeping a
    /// copy; `reuse` is an earlier frame's buffers the encoder handed back.
    fn prepare(
        &mut self,
        premultiplied: &[Bgra],
        previous: Option<&[Bgra]>,
        reuse: Option<EncoderInput>,
    ) -> Result<EncoderInput, EncodeError>;

    /// Frames given that were identical to the one before, whose conversion was reused
    /// (the bench prints it).
    fn held_frames_reused(&self) -> u64 {
        0
    }
}

/// Makes a [`FramePreparer`] inside each render thread (FFmpeg's converter is not `Send`).
pub(crate) type PreparerFactory =
    Arc<dyn Fn() -> Result<Box<dyn FramePreparer>, EncodeError> + Send + Sync>;

/// The preparers for `settings`' encoder.
pub(crate) fn preparer_factory(settings: &EncoderSettings) -> PreparerFactory {
    let settings = *settings;
    Arc::new(move || -> Result<Box<dyn FramePreparer>, EncodeError> {
        Ok(match settings.format {
            Format::Gif | Format::Apng | Format::Png | Format::Jpeg | Format::Webp => {
                Box::new(gif::GifPreparer::new(&settings))
            }
            Format::Mp4 | Format::Hevc | Format::Av1 => {
                Box::new(video::VideoPreparer::new(&settings, mp4::PIXEL_FORMAT))
            }
            Format::Webm => Box::new(video::VideoPreparer::new(&settings, webm::PIXEL_FORMAT)),
            Format::Mov => Box::new(prores::ProresPreparer::new(&settings)),
        })
    })
}

/// Everything an encoder needs to know about the output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EncoderSettings {
    pub format: Format,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub background: Rgba,
    pub quality: Quality,
    /// How many times an animation plays (GIF, WebP, APNG); None: forever.
    pub loop_count: Option<u16>,
    /// One frame: a still image rather than an animation (WebP).
    pub still: bool,
}

impl EncoderSettings {
    pub(crate) fn new(spec: &OutputSpec) -> EncoderSettings {
        EncoderSettings {
            format: spec.format,
            width: spec.width.get(),
            height: spec.height.get(),
            fps: spec.fps.get(),
            background: spec.background_or_default(),
            quality: spec.quality,
            loop_count: spec.loop_count,
            still: matches!(spec.window, Some(Window::Still { .. })),
        }
    }

    /// The size of the encoded picture. H.264, HEVC and AV1 in 4:2:0 cannot code odd sizes
    /// (even their cropping works in 2-pixel steps, and browsers ignore AV1's render size), so
    /// MP4s pad odd sides by one pixel of background.
    pub(crate) fn encoded_size(&self) -> (u32, u32) {
        match self.format {
            Format::Mp4 | Format::Hevc | Format::Av1 => (
                self.width.next_multiple_of(2),
                self.height.next_multiple_of(2),
            ),
            Format::Webm
            | Format::Gif
            | Format::Png
            | Format::Jpeg
            | Format::Webp
            | Format::Apng
            | Format::Mov => (self.width, self.height),
        }
    }
}

/// Opens the encoder for `settings.format`, writing to `path`.
pub(crate) fn open(
    settings: &EncoderSettings,
    path: &Path,
) -> Result<Box<dyn Encoder>, EncodeError> {
    Ok(match settings.format {
        Format::Gif => Box::new(gif::GifEncoder::open(settings, path)?),
        Format::Mp4 => Box::new(mp4::open_h264(settings, path)?),
        Format::Hevc => Box::new(mp4::open_hevc(settings, path)?),
        Format::Av1 => Box::new(mp4::open_av1(settings, path)?),
        Format::Webm => Box::new(webm::open(settings, path)?),
        Format::Webp => Box::new(web::open_webp(settings, path)?),
        Format::Apng => Box::new(web::open_apng(settings, path)?),
        Format::Mov => Box::new(prores::open(settings, path)?),
        Format::Png | Format::Jpeg => Box::new(still::StillEncoder::open(settings, path)),
    })
}
