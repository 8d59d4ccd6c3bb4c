//! A render request's slot values (`modifications`): a draft per kind of slot mirroring the
//! wire, with the garde rules of its values (the images' and the property values' rules
//! below), then its domain value ([`IntoValue`]), into `spec::Modifications`. The wire's and
//! the domain's maps are destructured, so a new kind of slot is a compile error here.

use super::{
    unit_channel, ColorDraft, MAX_GRADIENTS_PER_REQUEST, MAX_IMAGES_PER_REQUEST,
    MAX_MODIFICATIONS_PER_MAP, MAX_REQUEST_IMAGE_BYTES, MAX_SLOT_ID_CHARS, MAX_TEXT_CHARS,
};
use crate::error::FieldViolation;
use crate::grpc::proto;
use crate::lottie::reading::images;
use crate::lottie::reading::template::hex_sha256;
use crate::lottie::slots::{GradientStop, MAX_GRADIENT_STOPS, MAX_PROPERTY_MAGNITUDE};
use crate::spec::{Fit, ImageChoice, ImageSource, Modifications, Rgba};
use garde::Validate;
use std::collections::BTreeMap;

/// A slot id as a map key: garde shows it as `["id"]` in violation paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SlotKey(String);

impl std::fmt::Display for SlotKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Debug-quoting escapes quotes and control characters in hostile keys.
        write!(f, "{:?}", self.0)
    }
}

impl garde::error::PathComponentKind for SlotKey {
    fn component_kind() -> garde::error::Kind {
        garde::error::Kind::Index
    }
}

/// `modifications` as the wire has it, a map per kind of slot.
#[derive(Debug, Default, Validate)]
pub(super) struct ModificationsDraft {
    #[garde(length(max = MAX_MODIFICATIONS_PER_MAP), custom(slot_ids), dive)]
    texts: BTreeMap<SlotKey, TextDraft>,
    #[garde(length(max = MAX_MODIFICATIONS_PER_MAP), custom(slot_ids), dive)]
    colors: BTreeMap<SlotKey, ColorDraft>,
    #[garde(
        length(max = MAX_IMAGES_PER_REQUEST),
        custom(slot_ids),
        custom(image_bytes_together),
        dive
    )]
    images: BTreeMap<SlotKey, ImageDraft>,
    #[garde(length(max = MAX_MODIFICATIONS_PER_MAP), custom(slot_ids), dive)]
    scalars: BTreeMap<SlotKey, ScalarDraft>,
    #[garde(length(max = MAX_MODIFICATIONS_PER_MAP), custom(slot_ids), dive)]
    vectors: BTreeMap<SlotKey, VectorDraft>,
    #[garde(length(max = MAX_GRADIENTS_PER_REQUEST), custom(slot_ids), dive)]
    gradients: BTreeMap<SlotKey, GradientDraft>,
}

#[derive(Debug, Validate)]
#[garde(transparent)]
struct ScalarDraft(#[garde(custom(finite_magnitude))] f64);

#[derive(Debug, Validate)]
struct VectorDraft {
    #[garde(length(min = 2, max = 3), inner(custom(finite_magnitude)))]
    values: Vec<f64>,
}

#[derive(Debug, Validate)]
struct GradientDraft {
    #[garde(length(min = 1, max = MAX_GRADIENT_STOPS), custom(ascending_offsets), dive)]
    stops: Vec<GradientStopDraft>,
}

#[derive(Debug, Validate)]
struct GradientStopDraft {
    #[garde(custom(unit_channel))]
    offset: f64,
    #[garde(required, dive)]
    color: Option<ColorDraft>,
}

#[derive(Debug, Validate)]
struct ImageDraft {
    /// The bytes of `source.data` (none when the source is another or missing).
    #[garde(custom(image_header))]
    data: Option<bytes::Bytes>,
    /// `source.image_id`.
    #[garde(custom(uploaded_image_id))]
    image_id: Option<String>,
    #[garde(custom(known_fit))]
    fit: i32,
}

#[derive(Debug, Validate)]
#[garde(transparent)]
struct TextDraft(
    #[garde(length(chars, max = MAX_TEXT_CHARS), custom(no_control_characters))] String,
);

impl From<proto::Modifications> for ModificationsDraft {
    fn from(modifications: proto::Modifications) -> ModificationsDraft {
        // Destructured so that a new kind of slot on the wire is a compile error here.
        let proto::Modifications {
            texts,
            colors,
            images,
            scalars,
            vectors,
            gradients,
        } = modifications;
        ModificationsDraft {
            texts: drafts(texts),
            colors: drafts(colors),
            images: drafts(images),
            scalars: drafts(scalars),
            vectors: drafts(vectors),
            gradients: drafts(gradients),
        }
    }
}

/// A wire map of slot values as drafts, by slot id.
fn drafts<W, D: From<W>>(values: impl IntoIterator<Item = (String, W)>) -> BTreeMap<SlotKey, D> {
    values
        .into_iter()
        .map(|(id, value)| (SlotKey(id), D::from(value)))
        .collect()
}

impl From<String> for TextDraft {
    fn from(text: String) -> TextDraft {
        TextDraft(text)
    }
}

impl From<f64> for ScalarDraft {
    fn from(value: f64) -> ScalarDraft {
        ScalarDraft(value)
    }
}

impl From<proto::Vector> for VectorDraft {
    fn from(vector: proto::Vector) -> VectorDraft {
        VectorDraft {
            values: vector.values,
        }
    }
}

impl From<proto::Gradient> for GradientDraft {
    fn from(gradient: proto::Gradient) -> GradientDraft {
        let stops = gradient
            .stops
            .into_iter()
            .map(|stop| GradientStopDraft {
                offset: stop.offset,
                color: stop.color.map(ColorDraft::from),
            })
            .collect();
        GradientDraft { stops }
    }
}

impl From<proto::ImageInput> for ImageDraft {
    fn from(image: proto::ImageInput) -> ImageDraft {
        // Moved, never copied: the data may be 10 MiB.
        let (data, image_id) = match image.source {
            Some(proto::image_input::Source::Data(data)) => (Some(data), None),
            Some(proto::image_input::Source::ImageId(id)) => (None, Some(id)),
            None => (None, None),
        };
        ImageDraft {
            data,
            image_id,
            fit: image.fit,
        }
    }
}

impl ModificationsDraft {
    /// The one rule garde cannot say per field: an image names its source.
    pub(super) fn images_without_source(&self) -> impl Iterator<Item = FieldViolation> + '_ {
        self.images
            .iter()
            .filter(|(_, image)| image.data.is_none() && image.image_id.is_none())
            .map(|(slot, _)| FieldViolation {
                field: format!("modifications.images[{slot}].data"),
                description: "an image needs its data or the image_id of an uploaded one".into(),
            })
    }

    /// The request's slot values, and where its images' bytes are (by SHA-256).
    pub(super) fn into_domain(
        self,
    ) -> Result<(Modifications, BTreeMap<String, ImageSource>), String> {
        let ModificationsDraft {
            texts,
            colors,
            images,
            scalars,
            vectors,
            gradients,
        } = self;
        let (images, image_bytes) = image_choices(values(images)?);
        let modifications = Modifications {
            texts: values(texts)?,
            colors: values(colors)?,
            images,
            scalars: values(scalars)?,
            vectors: values(vectors)?,
            gradients: values(gradients)?,
        };
        Ok((modifications, image_bytes))
    }
}

/// A slot value's draft as its domain value (valid drafts only).
pub(super) trait IntoValue {
    type Value;
    fn into_value(self) -> Result<Self::Value, String>;
}

/// A map of valid slot value drafts as domain values, by slot id.
fn values<D: IntoValue>(
    drafts: BTreeMap<SlotKey, D>,
) -> Result<BTreeMap<String, D::Value>, String> {
    drafts
        .into_iter()
        .map(|(key, draft)| Ok((key.0, draft.into_value()?)))
        .collect()
}

impl IntoValue for TextDraft {
    type Value = String;
    fn into_value(self) -> Result<String, String> {
        Ok(self.0)
    }
}

impl IntoValue for ColorDraft {
    type Value = Rgba;
    fn into_value(self) -> Result<Rgba, String> {
        Rgba::new(self.r, self.g, self.b, self.a).map_err(|e| e.to_string())
    }
}

impl IntoValue for ScalarDraft {
    type Value = f64;
    fn into_value(self) -> Result<f64, String> {
        Ok(self.0)
    }
}

impl IntoValue for VectorDraft {
    type Value = Vec<f64>;
    fn into_value(self) -> Result<Vec<f64>, String> {
        Ok(self.values)
    }
}

impl IntoValue for GradientDraft {
    type Value = Vec<GradientStop>;
    fn into_value(self) -> Result<Vec<GradientStop>, String> {
        self.stops
            .into_iter()
            .map(|stop| {
                let color = stop.color.ok_or("stop colour after validation")?;
                Ok(GradientStop {
                    offset: stop.offset,
                    color: color.into_value()?,
                })
            })
            .collect()
    }
}

impl IntoValue for ImageDraft {
    /// The slot's choice, and where the image's bytes are.
    type Value = (ImageChoice, ImageSource);
    fn into_value(self) -> Result<(ImageChoice, ImageSource), String> {
        let fit = image_fit(self.fit).ok_or("image fit after validation")?;
        let (sha256, source) = match (self.data, self.image_id) {
            (Some(data), _) => (hex_sha256(&data), ImageSource::Sent(data)),
            (None, Some(id)) => (id, ImageSource::Uploaded),
            (None, None) => return Err("image source missing after validation".into()),
        };
        Ok((ImageChoice { sha256, fit }, source))
    }
}

/// Each image slot's choice, and each image's bytes once, by SHA-256.
fn image_choices(
    images: BTreeMap<String, (ImageChoice, ImageSource)>,
) -> (BTreeMap<String, ImageChoice>, BTreeMap<String, ImageSource>) {
    let mut image_bytes = BTreeMap::new();
    let choices = images
        .into_iter()
        .map(|(slot, (choice, source))| {
            // Bytes sent with the request win over an upload of the same bytes.
            if !matches!(image_bytes.get(&choice.sha256), Some(ImageSource::Sent(_))) {
                image_bytes.insert(choice.sha256.clone(), source);
            }
            (slot, choice)
        })
        .collect();
    (choices, image_bytes)
}

fn slot_ids<V>(map: &BTreeMap<SlotKey, V>, _: &()) -> garde::Result {
    match map
        .keys()
        .find(|key| !(1..=MAX_SLOT_ID_CHARS).contains(&key.0.chars().count()))
    {
        Some(key) => Err(garde::Error::new(format!(
            "slot id {key} must be 1..={MAX_SLOT_ID_CHARS} characters"
        ))),
        None => Ok(()),
    }
}

fn no_control_characters(text: &str, _: &()) -> garde::Result {
    match text.chars().find(|c| c.is_control() && *c != '\n') {
        Some(c) => Err(garde::Error::new(format!(
            "control character U+{:04X} is not allowed (only \\n)",
            u32::from(c)
        ))),
        None => Ok(()),
    }
}

fn image_fit(value: i32) -> Option<Fit> {
    match proto::ImageFit::try_from(value).ok()? {
        proto::ImageFit::Unspecified | proto::ImageFit::Cover => Some(Fit::Cover),
        proto::ImageFit::Contain => Some(Fit::Contain),
        proto::ImageFit::Fill => Some(Fit::Fill),
    }
}

fn known_fit(value: &i32, _: &()) -> garde::Result {
    match image_fit(*value) {
        Some(_) => Ok(()),
        None => Err(garde::Error::new(format!(
            "must be IMAGE_FIT_COVER, _CONTAIN or _FILL, got {value}"
        ))),
    }
}

/// The header of a replacement image (read, never decoded: the worker decodes it).
fn image_header(data: &Option<bytes::Bytes>, _: &()) -> garde::Result {
    // A missing source is the source rule's to report; the size limit is the header's.
    let Some(data) = data else { return Ok(()) };
    images::header(data)
        .map(|_| ())
        .map_err(|error| garde::Error::new(format!("image {error}")))
}

fn uploaded_image_id(id: &Option<String>, _: &()) -> garde::Result {
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
fn finite_magnitude(value: &f64, _: &()) -> garde::Result {
    if value.is_finite() && value.abs() <= MAX_PROPERTY_MAGNITUDE {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "must be a finite number within ±{MAX_PROPERTY_MAGNITUDE}, got {value}"
        )))
    }
}

fn ascending_offsets(stops: &[GradientStopDraft], _: &()) -> garde::Result {
    if stops
        .windows(2)
        .all(|pair| pair[0].offset <= pair[1].offset)
    {
        Ok(())
    } else {
        Err(garde::Error::new("stop offsets must not decrease"))
    }
}

fn image_bytes_together(images: &BTreeMap<SlotKey, ImageDraft>, _: &()) -> garde::Result {
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
