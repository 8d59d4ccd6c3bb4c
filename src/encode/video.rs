//! What MP4 and WebM share: an FFmpeg encoder feeding one video stream of a muxer, with
//! [`VideoPreparer`] converting rendered frames to the codec's YUV layout with swscale on the
//! render threads. The codec-specific choices (codec, pixel format, options, padding) come
//! from [`VideoCodec`].

use super::{EncodeError, Encoder, EncoderInput, EncoderSettings, FramePreparer};
use crate::render::frames::Frame;
use crate::render::pixels::{convert, PixelLayout};
use crate::spec::Format;
use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg::{codec, encoder, format, frame, Dictionary, Packet, Rational};
use ffmpeg_next as ffmpeg;
use rlottie::Bgra;
use std::path::Path;

/// Codec-specific settings, filled in by `mp4.rs` and `webm.rs`.
pub struct VideoCodec {
    /// FFmpeg encoder name (`libx264`, `libvpx-vp9`).
    pub encoder_name: &'static str,
    /// FFmpeg muxer name (`mp4`, `webm`).
    pub muxer_name: &'static str,
    pub pixel_format: Pixel,
    pub encoder_options: Vec<(&'static str, String)>,
    pub muxer_options: Vec<(&'static str, &'static str)>,
    /// Tag the stream as BT.601 limited range, which is what swscale's default
    /// RGB → YUV conversion produces (players then convert back with the same matrix).
    pub tag_bt601: bool,
}

fn ffmpeg_error(context: &'static str) -> impl FnOnce(ffmpeg::Error) -> EncodeError {
    move |source| EncodeError::Ffmpeg { context, source }
}

pub struct VideoEncoder {
    output: format::context::Output,
    encoder: encoder::Video,
    encoder_time_base: Rational,
    stream_time_base: Rational,
}

impl VideoEncoder {
    pub fn open(
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
        if codec.tag_bt601 {
            context.set_colorspace(ffmpeg::color::Space::SMPTE170M);
            context.set_color_range(ffmpeg::color::Range::MPEG);
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

/// Fills a BGRA frame with one colour (the padding MP4 needs for odd sizes).
fn fill_bgra(frame: &mut frame::Video, [r, g, b, a]: [u8; 4]) {
    let stride = frame.stride(0);
    let width = frame.width() as usize;
    for row in frame.data_mut(0).chunks_mut(stride) {
        for pixel in row[..width * 4].chunks_exact_mut(4) {
            pixel.copy_from_slice(&[b, g, r, a]);
        }
    }
}

impl Encoder for VideoEncoder {
    fn encode(&mut self, frame: Frame) -> Result<Option<EncoderInput>, EncodeError> {
        let EncoderInput::Video(mut picture) = frame.input else {
            return Err(EncodeError::Ffmpeg {
                context: "encoding a frame",
                source: ffmpeg::Error::InvalidData,
            });
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

/// Converts rendered frames to the video encoder's pixel format: composite or un-premultiply
/// straight into a BGRA staging frame at the encoded size (its padding, for odd MP4 sizes,
/// holds the background), then swscale to YUV. Runs on a render thread.
pub struct VideoPreparer {
    layout: PixelLayout,
    width: usize,
    staging: frame::Video,
    scaler: scaling::Context,
    pixel_format: Pixel,
    encoded_width: u32,
    encoded_height: u32,
}

impl VideoPreparer {
    pub fn new(
        settings: &EncoderSettings,
        pixel_format: Pixel,
    ) -> Result<VideoPreparer, EncodeError> {
        let (encoded_width, encoded_height) = settings.encoded_size();
        let scaler = scaling::Context::get(
            Pixel::BGRA,
            encoded_width,
            encoded_height,
            pixel_format,
            encoded_width,
            encoded_height,
            scaling::Flags::BILINEAR,
        )
        .map_err(ffmpeg_error("creating the pixel converter"))?;
        let mut staging = frame::Video::new(Pixel::BGRA, encoded_width, encoded_height);
        let layout = match settings.format {
            Format::Mp4 => {
                let [r, g, b, _] = settings.background.to_rgba8();
                fill_bgra(&mut staging, [r, g, b, 255]);
                PixelLayout::OpaqueBgraOver([r, g, b])
            }
            Format::Webm | Format::Gif => PixelLayout::StraightBgra,
        };
        Ok(VideoPreparer {
            layout,
            width: settings.width as usize,
            staging,
            scaler,
            pixel_format,
            encoded_width,
            encoded_height,
        })
    }
}

impl FramePreparer for VideoPreparer {
    fn prepare(
        &mut self,
        premultiplied: &[Bgra],
        reuse: Option<EncoderInput>,
    ) -> Result<EncoderInput, EncodeError> {
        let stride = self.staging.stride(0);
        let row_bytes = self.width * 4;
        let staging = self.staging.data_mut(0);
        for (row, source_row) in premultiplied.chunks_exact(self.width).enumerate() {
            let start = row * stride;
            convert(
                source_row,
                &mut staging[start..start + row_bytes],
                self.layout,
            );
        }
        // Reusing the encoder's earlier frames keeps memory flat: fresh 2 MB frames allocated
        // on render threads and freed on the encoder thread fragment the heap.
        let reusable = match reuse {
            Some(EncoderInput::Video(mut picture)) => {
                crate::os::make_frame_writable(&mut picture).then_some(picture)
            }
            _ => None,
        };
        let mut picture = reusable.unwrap_or_else(|| {
            frame::Video::new(self.pixel_format, self.encoded_width, self.encoded_height)
        });
        self.scaler
            .run(&self.staging, &mut picture)
            .map_err(ffmpeg_error("converting pixels"))?;
        Ok(EncoderInput::Video(picture))
    }
}
