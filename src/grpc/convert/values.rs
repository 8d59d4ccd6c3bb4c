//! The rules of a render request's images and property values (image slots, scalar,
//! vector and gradient slots), as garde runs them on the drafts of [`super`].

use super::{GradientStopDraft, ImageDraft, SlotKey, MAX_REQUEST_IMAGE_BYTES};
use crate::grpc::proto;
use crate::lottie::reading::images;
use crate::lottie::slots::MAX_PROPERTY_MAGNITUDE;
use crate::spec::Fit;
use std::collections::BTreeMap;

pub(super) fn image_fit(value: i32) -> Option<Fit> {
    match proto::ImageFit::try_from(value).ok()? {
        proto::ImageFit::Unspecified | proto::ImageFit::Cover => Some(Fit::Cover),
        proto::ImageFit::Contain => Some(Fit::Contain),
        proto::ImageFit::Fill => Some(Fit::Fill),
    }
}

pub(super) fn known_fit(value: &i32, _: &()) -> garde::Result {
    match image_fit(*value) {
        Some(_) => Ok(()),
        None => Err(garde::Error::new(format!(
            "must be IMAGE_FIT_COVER, _CONTAIN or _FILL, got {value}"
        ))),
    }
}

/// The header of a replacement image (read, never decoded: the worker decodes it).
pub(super) fn image_header(data: &Option<bytes::Bytes>, _: &()) -> garde::Result {
    // A missing source is the source rule's to report; the size limit is the header's.
    let Some(data) = data else { return Ok(()) };
    images::header(data)
        .map(|_| ())
        .map_err(|error| garde::Error::new(format!("image {error}")))
}

pub(super) fn uploaded_image_id(id: &Option<String>, _: &()) -> garde::Result {
    match id {
        Some(id) if !crate::storage::images::is_image_id(id) => Err(garde::Error::new(format!(
            "must be an image_id UploadImage answered (64 lowercase hex digits), got {:?}",
            id.chars().take(80).collect::<String>()
        ))),
        _ => Ok(()),
    }
}

/// A number a property can hold: finite, within ±[`MAX_PROPERTY_MAGNITUDE`] (the slot's own
/// range is the template's, checked at admission).
pub(super) fn finite_magnitude(value: &f64, _: &()) -> garde::Result {
    if value.is_finite() && value.abs() <= MAX_PROPERTY_MAGNITUDE {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "must be a finite number within ±{MAX_PROPERTY_MAGNITUDE}, got {value}"
        )))
    }
}

pub(super) fn ascending_offsets(stops: &[GradientStopDraft], _: &()) -> garde::Result {
    if stops
        .windows(2)
        .all(|pair| pair[0].offset <= pair[1].offset)
    {
        Ok(())
    } else {
        Err(garde::Error::new("stop offsets must not decrease"))
    }
}

pub(super) fn image_bytes_together(
    images: &BTreeMap<SlotKey, ImageDraft>,
    _: &(),
) -> garde::Result {
    let total: usize = images
        .values()
        .filter_map(|image| image.data.as_ref())
        .map(bytes::Bytes::len)
        .sum();
    if total > MAX_REQUEST_IMAGE_BYTES {
        return Err(garde::Error::new(format!(
            "images are {total} bytes together; at most {MAX_REQUEST_IMAGE_BYTES} are accepted"
        )));
    }
    Ok(())
}
