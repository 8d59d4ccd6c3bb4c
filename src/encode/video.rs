//! What the FFmpeg formats (MP4s, WebM, WebP, APNG, ProRes) share: an FFmpeg encoder feeding one video stream of a muxer, tagged
//! with our one colour convention ([`tag_colours`]), and [`VideoPreparer`] converting rendered
//! frames to the codec's YUV planes (`yuv.rs`) on the render threads. The codec-specific choices
//! (codec, pixel format, options, padding) come from [`VideoCodec`].

use super::yuv::{self, AlphaHandling, Kernel, Plane, PlanesMut};
use super::Frame;
use super::{EncodeError, Encoder, EncoderInput, EncoderSettings, FramePreparer};
use ffmpeg::color::{Primaries, Range, Space, TransferCharacteristic};
use ffmpeg::format::Pixel;
use ffmpeg::{chroma, codec, encoder, format, frame, Dictionary, Packet, Rational};
use ffmpeg_next as ffmpeg;
use rlottie::Bgra;
use std::path::Path;

/// Codec-specific settings, filled in by `mp4.rs` and `webm.rs`.
pub(crate) struct VideoCodec {
    /// FFmpeg encoder name (`libx264`, `libvpx-vp9`).
    pub encoder_name: &'static str,
    /// FFmpeg muxer name (`mp4`, `webm`).
    pub muxer_name: &'static str,
    pub pixel_format: Pixel,
    pub encoder_options: Vec<(&'static str, String)>,
    pub muxer_options: Vec<(&'static str, String)>,
    /// The sample entry the muxer writes, when not its default (HEVC's `hvc1`).
    pub codec_tag: Option<[u8; 4]>,
}

/// The colour convention of every MP4 and WebM, whatever its size: BT.601 matrix (what
/// `yuv.rs` converts with), BT.709 primaries and transfer (the same as sRGB's primaries; the
/// requested colours are sRGB), limited range, chroma sited at the centre of each 2×2 block
/// (`yuv.rs` averages the block). Set on the encoder before it opens, so it goes into the
/// bitstream (H.264 VUI: all five; VP9: matrix and range, all it can carry) and, through the
/// stream parameters, into the container (MP4 `colr` nclx atom, Matroska `Colour` element).
///
/// Why the BT.601 matrix when DESIGN.md says BT.709: Chromium, where most viewers watch,
/// converts YUV to RGB through libyuv, whose BT.709 constants cap the U→B coefficient at 2.0
/// (an int8 `pmaddubsw` limit; the true limited-range value is 2.112), so saturated blues and
/// purples come out ~4/255 off whatever the encoder does. BT.601's U→B (2.018) capped at 2.0
/// costs under 0.5/255. An earlier session measured it with `./dev check-colours` (headless
/// Chromium, both decode paths): full BT.709 failed there; BT.601 matrix with BT.709
/// primaries and transfer passed 78 of 78 on both paths, and stayed within 2/255 in ffmpeg.
/// Tagging the matrix (rather than leaving it unspecified) matters: browsers guess BT.709
/// for HD video, which was issue 11's 17/255 error. What is left of libyuv's cap with BT.601
/// (exact rounding puts #007AFF at blue 252 there) `yuv.rs` takes up with a 0.42% Cb gain.
pub(crate) fn tag_colours(context: &mut encoder::video::Video) {
    context.set_colorspace(Space::SMPTE170M);
    context.set_color_range(Range::MPEG);
    crate::os::ffmpeg_frames::set_encoder_colour_description(
        context,
        Primaries::BT709,
        TransferCharacteristic::BT709,
        chroma::Location::Center,
    );
}

fn ffmpeg_error(context: &'static str) -> impl FnOnce(ffmpeg::Error) -> EncodeError {
    move |source| EncodeError::Ffmpeg { context, source }
}

pub(crate) struct VideoEncoder {
    output: format::context::Output,
    encoder: encoder::Video,
    encoder_time_base: Rational,
    stream_time_base: Rational,
    pixel_format: Pixel,
}

impl VideoEncoder {
    pub(crate) fn open(
        settings: &EncoderSettings,
        path: &Path,
        codec: VideoCodec,
    ) -> Result<VideoEncoder, EncodeError> {
        ffmpeg::init().map_err(ffmpeg_error("initialising FFmpeg"))?;
        // FFmpeg logs encoder statistics to stderr at the default level; errors are enough.
        ffmpeg::util::log::set_level(ffmpeg::util::log::Level::Error);
        let (width, height) = settings.encoded_size();
        let mut output = format::output_as(&path, codec.muxer_name)
            .map_err(ffmpeg_error("opening the output"))?;
        let global_header = output
            .format()
            .flags()
            .contains(format::Flags::GLOBAL_HEADER);
        let ffmpeg_codec =
            encoder::find_by_name(codec.encoder_name).ok_or(EncodeError::CodecMissing {
                codec: codec.encoder_name,
            })?;
        let mut stream = output
            .add_stream(ffmpeg_codec)
            .map_err(ffmpeg_error("adding the video stream"))?;
        let stream_index = stream.index();
        let mut context = codec::context::Context::new_with_codec(ffmpeg_codec)
            .encoder()
            .video()
            .map_err(ffmpeg_error("creating the encoder"))?;
        let encoder_time_base = Rational::new(1, settings.fps as i32);
        context.set_width(width);
        context.set_height(height);
        context.set_format(codec.pixel_format);
        context.set_time_base(encoder_time_base);
        context.set_frame_rate(Some(Rational::new(settings.fps as i32, 1)));
        // RGBA (APNG, WebP) is sRGB as it is: its frames carry no YUV tags.
        if !matches!(codec.pixel_format, Pixel::RGBA | Pixel::BGRA) {
            tag_colours(&mut context);
        }
        if global_header {
            context.set_flags(codec::Flags::GLOBAL_HEADER);
        }
        let mut options = Dictionary::new();
        for (key, value) in &codec.encoder_options {
            options.set(key, value);
        }
        let encoder = context
            .open_with(options)
            .map_err(ffmpeg_error("opening the encoder"))?;
        stream.set_parameters(&encoder);
        if let Some(tag) = codec.codec_tag {
            crate::os::ffmpeg_frames::set_stream_codec_tag(&mut stream, tag);
        }
        stream.set_time_base(encoder_time_base);
        stream.set_avg_frame_rate(Rational::new(settings.fps as i32, 1));
        let mut muxer_options = Dictionary::new();
        for (key, value) in &codec.muxer_options {
            muxer_options.set(key, value);
        }
        output
            .write_header_with(muxer_options)
            .map_err(ffmpeg_error("writing the header"))?;
        let stream_time_base = output
            .stream(stream_index)
            .map(|stream| stream.time_base())
            .unwrap_or(encoder_time_base);
        Ok(VideoEncoder {
            output,
            encoder,
            encoder_time_base,
            stream_time_base,
            pixel_format: codec.pixel_format,
        })
    }

    fn write_ready_packets(&mut self) -> Result<(), EncodeError> {
        let mut packet = Packet::empty();
        while self.encoder.receive_packet(&mut packet).is_ok() {
            packet.set_stream(0);
            packet.rescale_ts(self.encoder_time_base, self.stream_time_base);
            packet
                .write_interleaved(&mut self.output)
                .map_err(ffmpeg_error("writing a packet"))?;
        }
        Ok(())
    }
}

impl Encoder for VideoEncoder {
    fn encode(&mut self, frame: Frame) -> Result<Option<EncoderInput>, EncodeError> {
        let mut picture = match frame.input {
            EncoderInput::Video(picture) => picture,
            // APNG takes straight RGBA, which its preparer makes as GIF's does.
            EncoderInput::Rgba(image) => rgba_frame(&image, self.pixel_format),
        };
        picture.set_pts(Some(i64::from(frame.index)));
        self.encoder
            .send_frame(&picture)
            .map_err(ffmpeg_error("encoding a frame"))?;
        self.write_ready_packets()?;
        Ok(Some(EncoderInput::Video(picture)))
    }

    fn finish(mut self: Box<Self>) -> Result<(), EncodeError> {
        self.encoder
            .send_eof()
            .map_err(ffmpeg_error("flushing the encoder"))?;
        self.write_ready_packets()?;
        self.output
            .write_trailer()
            .map_err(ffmpeg_error("writing the trailer"))
    }
}

/// Converts rendered frames to the video encoder's pixel format (`yuv.rs`: composite or
/// un-premultiply and convert in one pass) straight into the frame the encoder takes. Runs on a
/// render thread. A frame identical to the one this preparer was given before (holds are common
/// in templates) is not converted again: it is handed on as a second reference to the last
/// converted frame's buffers (no copy). Render threads interleave frames (thread k renders
/// k, k + T, …), so a hold is caught once it lasts longer than the number of threads.
pub(crate) struct VideoPreparer {
    alpha: AlphaHandling,
    source_width: usize,
    /// The encoded size (MP4 pads odd sizes).
    width: usize,
    height: usize,
    kernel: Kernel,
    /// The last frame converted, sharing its buffers with the frame handed to the encoder:
    /// what a held frame is handed on as.
    last: Option<frame::Video>,
    held_frames_reused: u64,
    pixel_format: Pixel,
}

impl VideoPreparer {
    pub(crate) fn new(settings: &EncoderSettings, pixel_format: Pixel) -> VideoPreparer {
        let (encoded_width, encoded_height) = settings.encoded_size();
        VideoPreparer {
            alpha: alpha_handling(settings),
            source_width: settings.width as usize,
            width: encoded_width as usize,
            height: encoded_height as usize,
            kernel: Kernel::fastest(),
            last: None,
            held_frames_reused: 0,
            pixel_format,
        }
    }

    /// Converts with `kernel` instead of the fastest one (the tests compare them).
    #[cfg(test)]
    fn with_kernel(mut self, kernel: Kernel) -> VideoPreparer {
        self.kernel = kernel;
        self
    }

    /// `picture`'s planes as a conversion target (the alpha plane is empty without one).
    fn planes_of<'a>(&self, picture: &'a mut frame::Video) -> PlanesMut<'a> {
        let mut planes = crate::os::ffmpeg_frames::frame_planes_mut(picture).into_iter();
        let mut next = || {
            planes
                .next()
                .map(|(data, stride)| Plane::new(data, stride))
                .unwrap_or(Plane::new(&mut [], 0))
        };
        PlanesMut {
            width: self.width,
            height: self.height,
            luma: next(),
            cb: next(),
            cr: next(),
            alpha: next(),
        }
    }
}

/// The formats without alpha are composited over the background; the others keep it.
pub(crate) fn alpha_handling(settings: &EncoderSettings) -> AlphaHandling {
    if settings.format.has_alpha() {
        AlphaHandling::Straight
    } else {
        let [r, g, b, _] = settings.background.to_rgba8();
        AlphaHandling::Over([r, g, b])
    }
}

/// `image` copied row by row into an FFmpeg frame of `pixel_format`, RGBA or BGRA (whose rows
/// may be padded).
fn rgba_frame(image: &imgref::ImgVec<rgb::RGBA8>, pixel_format: Pixel) -> frame::Video {
    let (width, height) = (image.width(), image.height());
    let mut picture = frame::Video::new(pixel_format, width as u32, height as u32);
    let stride = picture.stride(0);
    let data = picture.data_mut(0);
    for (row, pixels) in image.rows().enumerate() {
        let out = &mut data[row * stride..row * stride + pixels.len() * 4];
        let (out, _) = out.as_chunks_mut::<4>();
        for (out, pixel) in out.iter_mut().zip(pixels) {
            *out = if pixel_format == Pixel::BGRA {
                [pixel.b, pixel.g, pixel.r, pixel.a]
            } else {
                [pixel.r, pixel.g, pixel.b, pixel.a]
            };
        }
    }
    picture
}

/// The encoder's earlier frame when nothing else holds it, else a fresh one of `format`.
/// Reusing keeps a worker's memory flat: fresh frames allocated on render threads and freed on
/// the encoder thread fragment glibc's heaps (ProRes's 9 MB frames at 1080² grew the tractor's
/// worker ~7 MB a frame until it failed near frame 480 with EINVAL), and their first touch
/// costs page faults. A frame still referenced elsewhere (the encoder, or a hold sharing it)
/// is not overwritten.
pub(super) fn writable_or_new(
    reuse: Option<EncoderInput>,
    format: Pixel,
    width: usize,
    height: usize,
) -> frame::Video {
    let reusable = match reuse {
        Some(EncoderInput::Video(mut picture)) => {
            crate::os::ffmpeg_frames::frame_is_writable(&mut picture).then_some(picture)
        }
        _ => None,
    };
    reusable.unwrap_or_else(|| frame::Video::new(format, width as u32, height as u32))
}

impl FramePreparer for VideoPreparer {
    fn prepare(
        &mut self,
        premultiplied: &[Bgra],
        previous: Option<&[Bgra]>,
        reuse: Option<EncoderInput>,
    ) -> Result<EncoderInput, EncodeError> {
        let bytes = rgb::bytemuck::cast_slice::<Bgra, u8>;
        let held = previous.is_some_and(|previous| bytes(previous) == bytes(premultiplied));
        if let Some(last) = self.last.as_ref().filter(|_| held) {
            if let Some(reference) = crate::os::ffmpeg_frames::new_frame_reference(last) {
                self.held_frames_reused += 1;
                return Ok(EncoderInput::Video(reference));
            }
        }
        let mut picture = writable_or_new(reuse, self.pixel_format, self.width, self.height);
        let planes = self.planes_of(&mut picture);
        yuv::convert(
            premultiplied,
            self.source_width,
            self.alpha,
            planes,
            self.kernel,
        );
        self.last = crate::os::ffmpeg_frames::new_frame_reference(&picture);
        Ok(EncoderInput::Video(picture))
    }

    fn held_frames_reused(&self) -> u64 {
        self.held_frames_reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Format, Rgba};

    fn settings(format: Format, width: u32, height: u32) -> EncoderSettings {
        EncoderSettings {
            format,
            width,
            height,
            fps: 30,
            background: Rgba::new(0.0, 0.0, 1.0, None).unwrap(),
            quality: Default::default(),
            loop_count: None,
            still: false,
        }
    }

    fn planes_of(input: &EncoderInput) -> Vec<Vec<u8>> {
        let EncoderInput::Video(picture) = input else {
            panic!("not a video frame");
        };
        // Row by row: the bytes past a row's width are the allocator's.
        (0..picture.planes())
            .map(|index| {
                let width = picture.plane_width(index) as usize;
                picture
                    .data(index)
                    .chunks(picture.stride(index))
                    .take(picture.plane_height(index) as usize)
                    .flat_map(|row| row[..width].to_vec())
                    .collect()
            })
            .collect()
    }

    fn frame(width: usize, height: usize, alpha: u8) -> Vec<Bgra> {
        (0..width * height)
            .map(|index| Bgra {
                b: ((index % 7) * usize::from(alpha) / 8) as u8,
                g: ((index % 5) * usize::from(alpha) / 8) as u8,
                r: alpha,
                a: alpha,
            })
            .collect()
    }

    /// The conversion into tightly packed planes (`yuv::convert` alone), plane by plane.
    fn tight_planes(settings: &EncoderSettings, source: &[Bgra]) -> Vec<Vec<u8>> {
        let (width, height) = settings.encoded_size();
        let alpha = alpha_handling(settings);
        let mut planes = yuv::YuvPlanes::new(
            width as usize,
            height as usize,
            alpha == AlphaHandling::Straight,
        );
        let source_width = settings.width as usize;
        yuv::convert(source, source_width, alpha, planes.as_mut(), Kernel::Scalar);
        [planes.luma, planes.cb, planes.cr, planes.alpha]
            .into_iter()
            .filter(|plane| !plane.is_empty())
            .collect()
    }

    #[test]
    fn a_held_frame_shares_the_conversion_and_a_changed_pixel_is_converted_again() {
        for format in [Format::Mp4, Format::Webm] {
            // Odd sizes: MP4 pads them, WebM keeps an odd last row; FFmpeg's strides are wider.
            let (width, height) = (37, 9);
            let settings = settings(format, width, height);
            let pixel_format = match format {
                Format::Mp4 => super::super::mp4::PIXEL_FORMAT,
                _ => super::super::webm::PIXEL_FORMAT,
            };
            let mut preparer = VideoPreparer::new(&settings, pixel_format);
            let first = frame(width as usize, height as usize, 200);
            let first_output = preparer.prepare(&first, None, None).unwrap();
            let converted = planes_of(&first_output);
            // Converted into the encoder's strided frame exactly as into tight planes.
            assert_eq!(converted, tight_planes(&settings, &first), "{format:?}");
            assert_eq!(preparer.held_frames_reused(), 0);
            // The same pixels again (the renderer's other surface): shared, not converted.
            let copy = first.clone();
            let held = preparer.prepare(&first, Some(&copy), None).unwrap();
            assert_eq!(planes_of(&held), converted, "{format:?}");
            assert_eq!(preparer.held_frames_reused(), 1);
            // One pixel changes (the last one, so a compare that stops early would miss it),
            // and the held frame comes back for reuse: it shares its buffers with the first
            // output, which the encoder may still hold, so it must not be written over.
            let mut changed = first.clone();
            *changed.last_mut().unwrap() = Bgra {
                b: 255,
                g: 255,
                r: 255,
                a: 255,
            };
            let reconverted = planes_of(
                &preparer
                    .prepare(&changed, Some(&first), Some(held))
                    .unwrap(),
            );
            assert_eq!(preparer.held_frames_reused(), 1);
            assert_ne!(reconverted, converted, "{format:?}");
            assert_eq!(
                planes_of(&first_output),
                converted,
                "{format:?}: overwritten"
            );
            assert_eq!(reconverted, tight_planes(&settings, &changed), "{format:?}");
            // A frame nothing else holds is reused and written over completely.
            drop(first_output);
            let mut fresh = VideoPreparer::new(&settings, pixel_format).with_kernel(Kernel::Scalar);
            let spent = fresh.prepare(&changed, None, None).unwrap();
            fresh.last = None;
            let EncoderInput::Video(spent_picture) = &spent else {
                panic!("not a video frame");
            };
            let spent_luma = spent_picture.data(0).as_ptr();
            let again = fresh.prepare(&first, None, Some(spent)).unwrap();
            let EncoderInput::Video(again_picture) = &again else {
                panic!("not a video frame");
            };
            assert_eq!(
                again_picture.data(0).as_ptr(),
                spent_luma,
                "{format:?}: not reused"
            );
            assert_eq!(planes_of(&again), converted, "{format:?}");
        }
    }
}
