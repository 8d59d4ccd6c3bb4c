//! Wire → domain, exactly once (parse, don't validate). A request is first copied into a
//! draft that mirrors the wire and carries the garde rules of the seed contract; garde checks
//! every field and reports every violation at once, with paths such as
//! `modifications.colors["primary_bg"].r`; only then is the draft turned into domain types,
//! which cannot hold invalid values.

mod output;
mod values;

use super::proto;
use crate::error::{FieldViolation, ServiceError};
use crate::lottie::reading::template::hex_sha256;
use crate::lottie::slots::{GradientStop, MAX_GRADIENT_STOPS};
use crate::reason::Reason;
use crate::spec::{ImageChoice, ImageSource, Modifications, Notify, RenderSubmission, Rgba};
use crate::webhooks::destination::MAX_WEBHOOK_URL_BYTES;
use crate::webhooks::event::EventType;
use garde::Validate;
pub(crate) use output::wire_format;
use output::OutputDraft;
use std::collections::BTreeMap;
use values::{
    ascending_offsets, finite_magnitude, image_bytes_together, image_fit, image_header, known_fit,
    uploaded_image_id,
};

/// Entries allowed in `modifications.texts` and in `modifications.colors`.
pub const MAX_MODIFICATIONS_PER_MAP: usize = 256;
/// Length of a slot id, characters.
pub const MAX_SLOT_ID_CHARS: usize = 64;
/// Length of a text value, characters.
pub const MAX_TEXT_CHARS: usize = 200;
/// Entries allowed in `modifications.gradients`: each is up to 64 stops.
pub const MAX_GRADIENTS_PER_REQUEST: usize = 64;
/// Entries allowed in `modifications.images`: a template's logos, photos and avatars; each
/// is decoded, resampled and encoded once per worker run.
pub const MAX_IMAGES_PER_REQUEST: usize = 16;
/// Bytes of all of a request's images together: three phone photos at their largest, and
/// what a SubmitRender may buffer beside its other fields
/// (`middleware::request_body::MAX_RENDER_REQUEST_BYTES`).
pub const MAX_REQUEST_IMAGE_BYTES: usize = 32 * 1024 * 1024;

impl TryFrom<proto::RenderRequest> for RenderSubmission {
    type Error = ServiceError;

    fn try_from(request: proto::RenderRequest) -> Result<RenderSubmission, ServiceError> {
        let draft = RenderRequestDraft::from(request);
        let mut violations: Vec<FieldViolation> = match draft.validate() {
            Ok(()) => Vec::new(),
            Err(report) => report
                .iter()
                .map(|(path, error)| FieldViolation {
                    field: path.to_string(),
                    description: error.to_string(),
                })
                .collect(),
        };
        // The one rule garde cannot say per field: an image names its source.
        for (slot, image) in &draft.modifications.images {
            if image.data.is_none() && image.image_id.is_none() {
                violations.push(FieldViolation {
                    field: format!("modifications.images[{slot}].data"),
                    description: "an image needs its data or the image_id of an uploaded one"
                        .into(),
                });
            }
        }
        if !violations.is_empty() {
            let message = match violations.as_slice() {
                [only] => format!("{}: {}", only.field, only.description),
                all => format!("{} invalid fields", all.len()),
            };
            return Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                message,
                violations,
            ));
        }
        draft.into_domain().map_err(ServiceError::internal)
    }
}

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

#[derive(Debug, Validate)]
struct RenderRequestDraft {
    #[garde(custom(hyphenated_uuid))]
    template_id: String,
    #[garde(dive)]
    modifications: ModificationsDraft,
    #[garde(required, dive)]
    output: Option<OutputDraft>,
    #[garde(dive)]
    notify: Option<NotifyDraft>,
    #[garde(length(chars, max = MAX_SLOT_ID_CHARS))]
    theme: String,
}

#[derive(Debug, Validate)]
struct NotifyDraft {
    // The destination policy (https, no private address) needs the server's settings: it is
    // applied by the intake, after these checks.
    #[garde(length(min = 1, max = MAX_WEBHOOK_URL_BYTES))]
    webhook_url: String,
    #[garde(custom(distinct_known_events))]
    events: Vec<i32>,
}

#[derive(Debug, Default, Validate)]
struct ModificationsDraft {
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

#[derive(Debug, Clone, Copy, Validate)]
struct ColorDraft {
    #[garde(custom(unit_channel))]
    r: f64,
    #[garde(custom(unit_channel))]
    g: f64,
    #[garde(custom(unit_channel))]
    b: f64,
    #[garde(custom(optional_unit_channel))]
    a: Option<f64>,
}

impl From<proto::RenderRequest> for RenderRequestDraft {
    fn from(request: proto::RenderRequest) -> RenderRequestDraft {
        let modifications = request.modifications.unwrap_or_default();
        RenderRequestDraft {
            template_id: request.template_id,
            modifications: ModificationsDraft {
                texts: modifications
                    .texts
                    .into_iter()
                    .map(|(k, v)| (SlotKey(k), TextDraft(v)))
                    .collect(),
                colors: modifications
                    .colors
                    .into_iter()
                    .map(|(k, v)| (SlotKey(k), ColorDraft::from(v)))
                    .collect(),
                images: modifications
                    .images
                    .into_iter()
                    .map(|(k, v)| (SlotKey(k), ImageDraft::from(v)))
                    .collect(),
                scalars: modifications
                    .scalars
                    .into_iter()
                    .map(|(k, v)| (SlotKey(k), ScalarDraft(v)))
                    .collect(),
                vectors: modifications
                    .vectors
                    .into_iter()
                    .map(|(k, v)| (SlotKey(k), VectorDraft { values: v.values }))
                    .collect(),
                gradients: modifications
                    .gradients
                    .into_iter()
                    .map(|(k, v)| {
                        let stops = v
                            .stops
                            .into_iter()
                            .map(|stop| GradientStopDraft {
                                offset: stop.offset,
                                color: stop.color.map(ColorDraft::from),
                            })
                            .collect();
                        (SlotKey(k), GradientDraft { stops })
                    })
                    .collect(),
            },
            output: request.output.map(OutputDraft::from),
            notify: request.notify.map(|notify| NotifyDraft {
                webhook_url: notify.webhook_url,
                events: notify.events,
            }),
            theme: request.theme,
        }
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

/// Domain → wire: a colour as answers and the client verbs send it.
impl From<Rgba> for proto::Color {
    fn from(color: Rgba) -> proto::Color {
        proto::Color {
            r: color.r(),
            g: color.g(),
            b: color.b(),
            a: color.a(),
        }
    }
}

impl From<proto::Color> for ColorDraft {
    fn from(color: proto::Color) -> ColorDraft {
        ColorDraft {
            r: color.r,
            g: color.g,
            b: color.b,
            a: color.a,
        }
    }
}

impl RenderRequestDraft {
    /// Valid drafts only: every conversion below was checked by the rules above.
    fn into_domain(self) -> Result<RenderSubmission, String> {
        let template_id =
            parse_hyphenated_uuid(&self.template_id).ok_or("template_id after validation")?;
        let color = |draft: ColorDraft| {
            Rgba::new(draft.r, draft.g, draft.b, draft.a).map_err(|e| e.to_string())
        };
        let texts = self
            .modifications
            .texts
            .into_iter()
            .map(|(key, text)| (key.0, text.0))
            .collect();
        let colors = self
            .modifications
            .colors
            .into_iter()
            .map(|(key, draft)| Ok((key.0, color(draft)?)))
            .collect::<Result<_, String>>()?;
        let mut image_bytes = BTreeMap::new();
        let mut images = BTreeMap::new();
        for (key, draft) in self.modifications.images {
            let fit = image_fit(draft.fit).ok_or("image fit after validation")?;
            let (sha256, source) = match (draft.data, draft.image_id) {
                (Some(data), _) => (hex_sha256(&data), ImageSource::Sent(data)),
                (None, Some(id)) => (id, ImageSource::Uploaded),
                (None, None) => return Err("image source missing after validation".into()),
            };
            images.insert(
                key.0,
                ImageChoice {
                    sha256: sha256.clone(),
                    fit,
                },
            );
            // Bytes sent with the request win over an upload of the same bytes.
            match image_bytes.get(&sha256) {
                Some(ImageSource::Sent(_)) => {}
                _ => {
                    image_bytes.insert(sha256, source);
                }
            }
        }
        let scalars = self
            .modifications
            .scalars
            .into_iter()
            .map(|(key, value)| (key.0, value.0))
            .collect();
        let vectors = self
            .modifications
            .vectors
            .into_iter()
            .map(|(key, value)| (key.0, value.values))
            .collect();
        let gradients = self
            .modifications
            .gradients
            .into_iter()
            .map(|(key, gradient)| {
                let stops = gradient
                    .stops
                    .into_iter()
                    .map(|stop| {
                        let draft = stop.color.ok_or("stop colour after validation")?;
                        Ok(GradientStop {
                            offset: stop.offset,
                            color: color(draft)?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok((key.0, stops))
            })
            .collect::<Result<_, String>>()?;
        let (output, timing) = self
            .output
            .ok_or("output missing after validation")?
            .into_domain(&color)?;
        Ok(RenderSubmission {
            template_id,
            modifications: Modifications {
                texts,
                colors,
                images,
                scalars,
                vectors,
                gradients,
            },
            output,
            notify: self.notify.map(NotifyDraft::into_domain).transpose()?,
            images: image_bytes,
            theme: (!self.theme.is_empty()).then_some(self.theme),
            timing,
        })
    }
}

impl NotifyDraft {
    fn into_domain(self) -> Result<Notify, String> {
        let mut events = self
            .events
            .into_iter()
            .map(webhook_event)
            .collect::<Option<Vec<_>>>()
            .ok_or("webhook event after validation")?;
        if events.is_empty() {
            events = EventType::TERMINAL.to_vec();
        }
        events.sort();
        Ok(Notify {
            url: self.webhook_url,
            events,
        })
    }
}

fn webhook_event(value: i32) -> Option<EventType> {
    match proto::WebhookEvent::try_from(value).ok()? {
        proto::WebhookEvent::Started => Some(EventType::Started),
        proto::WebhookEvent::Succeeded => Some(EventType::Succeeded),
        proto::WebhookEvent::Failed => Some(EventType::Failed),
        proto::WebhookEvent::Cancelled => Some(EventType::Cancelled),
        proto::WebhookEvent::Unspecified => None,
    }
}

fn distinct_known_events(events: &[i32], _: &()) -> garde::Result {
    for (index, value) in events.iter().enumerate() {
        if webhook_event(*value).is_none() {
            return Err(garde::Error::new(format!(
                "must be WEBHOOK_EVENT_STARTED, _SUCCEEDED, _FAILED or _CANCELLED, got {value}"
            )));
        }
        if events[..index].contains(value) {
            return Err(garde::Error::new(format!("event {value} is listed twice")));
        }
    }
    Ok(())
}

/// Parses a UUID in its hyphenated form only (`Uuid::try_parse` also takes the simple and
/// braced forms; the contract says hyphenated).
pub(crate) fn parse_hyphenated_uuid(value: &str) -> Option<uuid::Uuid> {
    uuid::Uuid::try_parse(value)
        .ok()
        .filter(|_| value.len() == 36)
}

/// An id field of a request (`template_id`, `job_id`): INVALID_ARGUMENT naming the field
/// unless it is a hyphenated UUID.
pub fn parse_id(field: &str, value: &str) -> Result<uuid::Uuid, ServiceError> {
    match parse_hyphenated_uuid(value) {
        Some(id) => Ok(id),
        None => {
            let description = format!("must be a hyphenated UUID, got {value:?}");
            Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                format!("{field}: {description}"),
                vec![FieldViolation {
                    field: field.to_owned(),
                    description,
                }],
            ))
        }
    }
}

fn hyphenated_uuid(value: &str, _: &()) -> garde::Result {
    match parse_hyphenated_uuid(value) {
        Some(_) => Ok(()),
        None => Err(garde::Error::new(format!(
            "must be a hyphenated UUID, got {value:?}"
        ))),
    }
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

fn unit_channel(value: &f64, _: &()) -> garde::Result {
    // Written as a positive check so NaN fails it.
    if value.is_finite() && (0.0..=1.0).contains(value) {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "must be a number in 0..=1 (fractions, not 0..=255), got {value}"
        )))
    }
}

fn optional_unit_channel(value: &Option<f64>, context: &()) -> garde::Result {
    value
        .as_ref()
        .map_or(Ok(()), |value| unit_channel(value, context))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServiceErrorCode;
    use crate::spec::Format;

    const TEMPLATE: &str = "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11";

    fn color(r: f64, g: f64, b: f64, a: Option<f64>) -> proto::Color {
        proto::Color { r, g, b, a }
    }

    fn valid() -> proto::RenderRequest {
        proto::RenderRequest {
            template_id: TEMPLATE.into(),
            modifications: Some(proto::Modifications {
                texts: [("title".to_owned(), "Hello\nWorld".to_owned())].into(),
                colors: [("primary_bg".to_owned(), color(0.0, 1.0, 0.5, Some(1.0)))].into(),
                ..Default::default()
            }),
            output: Some(proto::OutputSpec {
                format: proto::Format::Mp4 as i32,
                fps: 0,
                width: 0,
                height: 0,
                background: None,
                ..Default::default()
            }),
            notify: None,
            theme: String::new(),
        }
    }

    /// [`valid`] with one more colour slot value.
    fn valid_with_color(slot: String, value: proto::Color) -> proto::RenderRequest {
        let mut request = valid();
        let modifications = request.modifications.as_mut().unwrap();
        modifications.colors.insert(slot, value);
        request
    }

    fn violations(request: proto::RenderRequest) -> Vec<(String, String)> {
        match RenderSubmission::try_from(request) {
            Ok(submission) => panic!("accepted: {submission:?}"),
            Err(error) => {
                assert_eq!(error.code, ServiceErrorCode::InvalidArgument);
                error
                    .violations
                    .into_iter()
                    .map(|v| (v.field, v.description))
                    .collect()
            }
        }
    }

    #[test]
    fn a_valid_request_becomes_domain_types_with_defaults_filled_in() {
        let submission = RenderSubmission::try_from(valid()).unwrap();
        assert_eq!(submission.template_id.to_string(), TEMPLATE);
        assert_eq!(
            (
                submission.output.fps.get(),
                submission.output.width.get(),
                submission.output.height.get()
            ),
            (30, 1080, 1080)
        );
        assert_eq!(submission.output.format, Format::Mp4);
        assert_eq!(submission.modifications.texts["title"], "Hello\nWorld");
        assert_eq!(
            submission.modifications.colors["primary_bg"],
            Rgba::new(0.0, 1.0, 0.5, Some(1.0)).unwrap()
        );
    }

    #[test]
    fn colour_channels_outside_zero_to_one_are_rejected_and_the_bounds_accepted() {
        let cases: &[(f64, bool, &str)] = &[
            (255.0, false, "a channel of 255 (the classic mistake)"),
            (f64::NAN, false, "NaN"),
            (f64::INFINITY, false, "+Inf"),
            (f64::NEG_INFINITY, false, "-Inf"),
            (-0.1, false, "below zero"),
            (1.000_000_1, false, "just above one"),
            (0.0, true, "zero"),
            (1.0, true, "one"),
        ];
        for &(value, accepted, case) in cases {
            let request = valid_with_color("primary_bg".into(), color(value, 0.0, 0.0, None));
            let result = RenderSubmission::try_from(request);
            assert_eq!(result.is_ok(), accepted, "{case}: {result:?}");
            if let Err(error) = result {
                assert_eq!(
                    error.violations[0].field, "modifications.colors[\"primary_bg\"].r",
                    "{case}"
                );
            }
        }
    }

    #[test]
    fn every_violation_is_reported_at_once_with_its_path() {
        let mut request = valid();
        request.template_id = "not-a-uuid".into();
        let modifications = request.modifications.as_mut().unwrap();
        modifications
            .colors
            .insert("bg".into(), color(255.0, 0.5, f64::NAN, Some(2.0)));
        modifications.texts.insert("name".into(), "x".repeat(201));
        modifications.texts.insert("tab".into(), "a\tb".into());
        request.output = Some(proto::OutputSpec {
            format: 0,
            fps: 24,
            width: 99,
            height: 1921,
            background: Some(color(0.0, -1.0, 0.0, None)),
            ..Default::default()
        });
        let fields: Vec<String> = violations(request)
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        for expected in [
            "template_id",
            "modifications.colors[\"bg\"].r",
            "modifications.colors[\"bg\"].b",
            "modifications.colors[\"bg\"].a",
            "modifications.texts[\"name\"]",
            "modifications.texts[\"tab\"]",
            "output.format",
            "output.fps",
            "output.width",
            "output.height",
            "output.background.g",
        ] {
            assert!(
                fields.iter().any(|field| field == expected),
                "{expected} missing from {fields:?}"
            );
        }
        assert_eq!(fields.len(), 11, "{fields:?}");
    }

    #[test]
    fn a_webhook_names_known_events_once_and_defaults_to_every_terminal_one() {
        let notify = |url: &str, events: Vec<i32>| {
            let mut request = valid();
            request.notify = Some(proto::Notify {
                webhook_url: url.into(),
                events,
            });
            request
        };
        let submission =
            RenderSubmission::try_from(notify("https://example.com/hook", vec![])).unwrap();
        let defaulted = submission.notify.unwrap();
        assert_eq!(defaulted.events, EventType::TERMINAL);
        let asked = vec![
            proto::WebhookEvent::Succeeded as i32,
            proto::WebhookEvent::Started as i32,
        ];
        let submission =
            RenderSubmission::try_from(notify("https://example.com/h", asked)).unwrap();
        assert_eq!(
            submission.notify.unwrap().events,
            [EventType::Started, EventType::Succeeded]
        );
        let cases: &[(&str, Vec<i32>, &str)] = &[
            ("", vec![], "notify.webhook_url"),
            (
                &"h".repeat(MAX_WEBHOOK_URL_BYTES + 1),
                vec![],
                "notify.webhook_url",
            ),
            ("https://example.com/h", vec![0], "notify.events"),
            ("https://example.com/h", vec![9], "notify.events"),
            ("https://example.com/h", vec![2, 2], "notify.events"),
        ];
        for (url, events, field) in cases {
            let found = violations(notify(url, events.clone()));
            assert_eq!(found.len(), 1, "{url:.20} {events:?}: {found:?}");
            assert_eq!(found[0].0, *field, "{found:?}");
        }
    }

    #[test]
    fn missing_output_and_oversized_maps_and_ids_are_rejected() {
        let mut request = valid();
        request.output = None;
        assert_eq!(violations(request)[0].0, "output");
        let mut request = valid();
        let texts = &mut request.modifications.as_mut().unwrap().texts;
        texts.extend((0..=MAX_MODIFICATIONS_PER_MAP).map(|i| (format!("t{i}"), "x".to_owned())));
        assert_eq!(violations(request)[0].0, "modifications.texts");
        for bad_key in [String::new(), "k".repeat(65)] {
            let found = violations(valid_with_color(bad_key, color(0.0, 0.0, 0.0, None)));
            assert_eq!(found[0].0, "modifications.colors");
            assert!(
                found[0].1.contains("must be 1..=64 characters"),
                "{found:?}"
            );
        }
        let mut request = valid();
        request.template_id = "0b8f2f4e3f6e4a5e9a516c0d1d7b2c11".into();
        assert_eq!(
            violations(request)[0].0,
            "template_id",
            "simple (unhyphenated) form refused"
        );
    }
}
