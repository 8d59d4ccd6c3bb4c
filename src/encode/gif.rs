//! GIF through gifski (pngquant quantisation, temporal dithering). gifski runs its own
//! pipeline threads; its collector queue is bounded, so `encode` blocks when it is behind.
//! Frame timing comes from presentation timestamps: gifski keeps every delay at 2 cs or more
//! (browsers slow shorter delays down) by merging frames, so a 60 fps render still plays at
//! true speed.

use super::pixels::{convert, PixelLayout};
use super::Frame;
use super::{EncodeError, Encoder, EncoderInput, EncoderSettings, FramePreparer};
use gifski::progress::NoProgress;
use gifski::{Collector, Repeat, Settings};
use imgref::ImgVec;
use rgb::RGBA8;
use rlottie::Bgra;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::thread::JoinHandle;

/// gifski quality, 1..=100: 90 keeps gradients smooth at about a third of quality 100's size.
pub(crate) fn gif_quality(quality: crate::spec::Quality) -> u8 {
    match quality {
        crate::spec::Quality::Standard => 90,
        crate::spec::Quality::High => 100,
        crate::spec::Quality::Small => 70,
    }
}
/// Shortest frame delay browsers honour, centiseconds; shorter ones are slowed to 10 cs.
pub const MIN_FRAME_DELAY_CS: i64 = 2;

pub(crate) struct GifEncoder {
    collector: Option<Collector>,
    writer: Option<JoinHandle<Result<(), gifski::Error>>>,
    fps: f64,
    /// Timestamp of the last frame handed to gifski, centiseconds.
    last_kept_cs: Option<i64>,
    /// Frames handed to gifski so far (its frame indices must have no gaps).
    kept_frames: usize,
}

impl GifEncoder {
    pub(crate) fn open(settings: &EncoderSettings, path: &Path) -> Result<GifEncoder, EncodeError> {
        let (collector, writer) = gifski::new(Settings {
            width: Some(settings.width),
            height: Some(settings.height),
            quality: gif_quality(settings.quality),
            fast: false,
            repeat: gif_repeat(settings.loop_count),
        })
        .map_err(|error| EncodeError::Gif(error.to_string()))?;
        let file = BufWriter::new(File::create(path)?);
        let writer = std::thread::Builder::new()
            .name("gif-writer".into())
            .spawn(move || writer.write(file, &mut NoProgress {}))?;
        Ok(GifEncoder {
            collector: Some(collector),
            writer: Some(writer),
            fps: f64::from(settings.fps),
            last_kept_cs: None,
            kept_frames: 0,
        })
    }

    fn writer_result(&mut self) -> Result<(), EncodeError> {
        self.collector = None; // closes the queue, so the writer can finish
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(error))) => Err(EncodeError::Gif(error.to_string())),
            Some(Err(_)) => Err(EncodeError::Gif("the gif writer thread panicked".into())),
        }
    }
}

/// Straight-alpha RGBA frames, as gifski takes them.
/// GIF's loop count is the repeats after the first play (NETSCAPE2.0; 0 there means forever,
/// so one play is no loop extension at all, which the gif crate writes for `Finite(0)`).
fn gif_repeat(plays: Option<u16>) -> Repeat {
    match plays {
        None | Some(0) => Repeat::Infinite,
        Some(plays) => Repeat::Finite(plays - 1),
    }
}

/// Converts rendered frames to straight RGBA (GIF, APNG, PNG and JPEG).
pub(crate) struct GifPreparer {
    width: usize,
    height: usize,
}

impl GifPreparer {
    pub(crate) fn new(settings: &EncoderSettings) -> GifPreparer {
        GifPreparer {
            width: settings.width as usize,
            height: settings.height as usize,
        }
    }
}

impl FramePreparer for GifPreparer {
    /// gifski keeps the frames it is given, so there is nothing to reuse.
    fn prepare(
        &mut self,
        premultiplied: &[Bgra],
        _previous: Option<&[Bgra]>,
        _reuse: Option<EncoderInput>,
    ) -> Result<EncoderInput, EncodeError> {
        let mut pixels = vec![RGBA8::new(0, 0, 0, 0); self.width * self.height];
        convert(
            premultiplied,
            rgb::bytemuck::cast_slice_mut(&mut pixels),
            PixelLayout::StraightRgba,
        );
        Ok(EncoderInput::Rgba(ImgVec::new(
            pixels,
            self.width,
            self.height,
        )))
    }
}

impl Encoder for GifEncoder {
    fn encode(&mut self, frame: Frame) -> Result<Option<EncoderInput>, EncodeError> {
        let EncoderInput::Rgba(image) = frame.input else {
            return Err(EncodeError::Gif(
                "the gif encoder was given a video frame".into(),
            ));
        };
        // GIF delays are whole centiseconds of at least 2: at 60 fps (1.67 cs a frame) the
        // frames that would land less than 2 cs after the last kept one are dropped, so the
        // GIF plays at true speed (about 40 distinct frames a second).
        let timestamp = f64::from(frame.index) / self.fps;
        let timestamp_cs = (timestamp * 100.0).round() as i64;
        if self
            .last_kept_cs
            .is_some_and(|last| timestamp_cs - last < MIN_FRAME_DELAY_CS)
        {
            return Ok(None);
        }
        self.last_kept_cs = Some(timestamp_cs);
        let frame_index = self.kept_frames;
        self.kept_frames += 1;
        let added = self
            .collector
            .as_ref()
            .map(|collector| collector.add_frame_rgba(frame_index, image, timestamp));
        match added {
            Some(Ok(())) => Ok(None),
            // The writer stopped early: its own error says why.
            _ => Err(self
                .writer_result()
                .err()
                .unwrap_or_else(|| EncodeError::Gif("the gif writer stopped".into()))),
        }
    }

    fn finish(mut self: Box<Self>) -> Result<(), EncodeError> {
        self.writer_result()
    }
}

impl Drop for GifEncoder {
    fn drop(&mut self) {
        let _ = self.writer_result();
    }
}
