//! The FFmpeg calls ffmpeg-next's safe wrapper lacks, for the video encoder
//! ([`crate::encode::video`]): whether a frame may be overwritten, a second reference to a
//! frame's buffers, every plane borrowed at once, and the colour description fields.

/// Whether `frame`'s buffers are referenced by nothing else (FFmpeg's `av_frame_is_writable`):
/// an encoder may still hold a reference to a frame it was sent, and a held frame shares its
/// buffers with the one before ([`new_frame_reference`]), so a frame is overwritten only when
/// this is true.
pub(crate) fn frame_is_writable(frame: &mut ffmpeg_next::frame::Video) -> bool {
    // SAFETY: the pointer comes from a live, owned frame; av_frame_is_writable only reads the
    // reference counts of its buffers.
    unsafe { ffmpeg_next::sys::av_frame_is_writable(frame.as_mut_ptr()) > 0 }
}

/// A second frame sharing `frame`'s buffers (FFmpeg's `av_frame_ref`, reference counted, no
/// copy); `None` when FFmpeg cannot allocate the new frame or `frame` has no buffers.
pub(crate) fn new_frame_reference(
    frame: &ffmpeg_next::frame::Video,
) -> Option<ffmpeg_next::frame::Video> {
    let mut reference = ffmpeg_next::frame::Video::empty();
    // SAFETY: both pointers come from live frames we own (a null one, from a failed
    // av_frame_alloc, is refused first); `reference` is freshly allocated with no buffers, as
    // av_frame_ref requires of its destination, and av_frame_ref only adds references to
    // `frame`'s buffers, reading `frame` without changing it.
    unsafe {
        if reference.as_ptr().is_null() || frame.is_empty() {
            return None;
        }
        (ffmpeg_next::sys::av_frame_ref(reference.as_mut_ptr(), frame.as_ptr()) >= 0)
            .then_some(reference)
    }
}

/// Every plane of `frame` as its bytes (`stride × rows` of that plane) and its stride, all
/// borrowed at once (ffmpeg-next lends one plane at a time), for a conversion that writes all
/// planes in one pass.
pub(crate) fn frame_planes_mut(frame: &mut ffmpeg_next::frame::Video) -> Vec<(&mut [u8], usize)> {
    (0..frame.planes())
        .map(|index| {
            let stride = frame.stride(index);
            let data = frame.data_mut(index);
            let (pointer, length) = (data.as_mut_ptr(), data.len());
            // SAFETY: FFmpeg's planes of one frame never overlap (separate buffers, or disjoint
            // parts of one buffer, laid out by av_frame_get_buffer), each slice covers exactly
            // what `data_mut` lent for that plane, and all of them borrow `frame` mutably for
            // their whole life, so nothing else can reach these bytes meanwhile.
            let plane = unsafe { std::slice::from_raw_parts_mut(pointer, length) };
            (plane, stride)
        })
        .collect()
}

/// Sets the colour description fields ffmpeg-next has no encoder setters for (primaries,
/// transfer characteristics, chroma location); the encoder copies them into its bitstream
/// headers when it opens and `Stream::set_parameters` into the container.
pub(crate) fn set_encoder_colour_description(
    encoder: &mut ffmpeg_next::encoder::video::Video,
    primaries: ffmpeg_next::color::Primaries,
    transfer: ffmpeg_next::color::TransferCharacteristic,
    chroma_location: ffmpeg_next::chroma::Location,
) {
    // SAFETY: the pointer is the live codec context this encoder owns (not yet opened); these
    // are plain enum fields of it, written with valid values of their C enums.
    unsafe {
        let context = encoder.as_mut_ptr();
        (*context).color_primaries = primaries.into();
        (*context).color_trc = transfer.into();
        (*context).chroma_sample_location = chroma_location.into();
    }
}

/// Sets the sample entry a muxer writes for `stream` (its codec tag, which ffmpeg-next has no
/// setter for): HEVC's `hvc1` rather than FFmpeg's default `hev1`. Called after the stream's
/// parameters are set and before the header is written.
pub(crate) fn set_stream_codec_tag(
    stream: &mut ffmpeg_next::format::stream::StreamMut,
    tag: [u8; 4],
) {
    // SAFETY: the stream belongs to a live output context borrowed mutably here, and every
    // stream FFmpeg adds has its `codecpar` allocated (avformat_new_stream); the tag is a
    // plain integer field, read by the muxer when it writes the header.
    unsafe {
        let parameters = (*stream.as_mut_ptr()).codecpar;
        if !parameters.is_null() {
            (*parameters).codec_tag = u32::from_le_bytes(tag);
        }
    }
}
