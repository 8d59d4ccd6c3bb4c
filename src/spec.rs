//! What a render asks for, as domain types that can only hold valid values: colours with
//! channels in 0..=1, output sizes and frame rates from the supported sets, the output
//! format ([`output`]: each format's facts and limits). Wire and file forms become these
//! exactly once (parse, don't validate).

use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

pub mod notify;
pub mod output;
pub mod timing;
pub use notify::{EventType, Notify};
pub use output::{Format, Window};
pub use timing::{Marker, SegmentRef, TimeRef, TimingRequest};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl SpecError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl Classified for SpecError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> Reason {
        Reason::RequestInvalid
    }
}

/// A colour with channels in 0..=1; alpha is optional (unset = leave the template's opacity).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RgbaFields")]
pub struct Rgba {
    r: f64,
    g: f64,
    b: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    a: Option<f64>,
}

#[derive(Deserialize)]
struct RgbaFields {
    r: f64,
    g: f64,
    b: f64,
    #[serde(default)]
    a: Option<f64>,
}

impl TryFrom<RgbaFields> for Rgba {
    type Error = SpecError;
    fn try_from(fields: RgbaFields) -> Result<Self, SpecError> {
        Rgba::new(fields.r, fields.g, fields.b, fields.a)
    }
}

impl Rgba {
    pub(crate) const OPAQUE_BLACK: Rgba = Rgba {
        r: 0.0,
        g: 0.0,
        b: 0.0,
        a: None,
    };
    pub(crate) const WHITE: Rgba = Rgba {
        r: 1.0,
        g: 1.0,
        b: 1.0,
        a: None,
    };

    pub fn new(r: f64, g: f64, b: f64, a: Option<f64>) -> Result<Rgba, SpecError> {
        let channels = [("r", Some(r)), ("g", Some(g)), ("b", Some(b)), ("a", a)];
        for (name, value) in channels {
            if let Some(value) = value {
                if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
                    return Err(SpecError::invalid(
                        name,
                        format!("colour channels are 0..=1, got {value}"),
                    ));
                }
            }
        }
        // Adding +0.0 turns -0.0 into 0.0: one colour, one canonical form (fingerprints).
        let canonical = |value: f64| value + 0.0;
        Ok(Rgba {
            r: canonical(r),
            g: canonical(g),
            b: canonical(b),
            a: a.map(canonical),
        })
    }

    pub fn r(&self) -> f64 {
        self.r
    }
    pub fn g(&self) -> f64 {
        self.g
    }
    pub fn b(&self) -> f64 {
        self.b
    }
    pub fn a(&self) -> Option<f64> {
        self.a
    }

    /// Parses `#RRGGBB` or `#RRGGBBAA` (the `#` is optional).
    pub fn parse_hex(text: &str) -> Result<Rgba, SpecError> {
        let digits = text.strip_prefix('#').unwrap_or(text);
        let bad = || {
            SpecError::invalid(
                "color",
                format!("expected #RRGGBB or #RRGGBBAA, got '{text}'"),
            )
        };
        if !(digits.len() == 6 || digits.len() == 8) || !digits.is_ascii() {
            return Err(bad());
        }
        let channel = |index: usize| {
            u8::from_str_radix(&digits[index..index + 2], 16)
                .map(|byte| f64::from(byte) / 255.0)
                .map_err(|_| bad())
        };
        let alpha = if digits.len() == 8 {
            Some(channel(6)?)
        } else {
            None
        };
        Rgba::new(channel(0)?, channel(2)?, channel(4)?, alpha)
    }

    /// Reads a Lottie colour value (`[r, g, b]` or `[r, g, b, a]`, 0..=1). Values written
    /// as 0..=255 by old exporters are scaled down.
    pub(crate) fn from_lottie(value: &Value) -> Option<Rgba> {
        let channels: Vec<f64> = value.as_array()?.iter().filter_map(Value::as_f64).collect();
        if channels.len() < 3 || channels.iter().any(|c| !c.is_finite()) {
            return None;
        }
        let scale = if channels[..3].iter().any(|c| *c > 1.0) {
            255.0
        } else {
            1.0
        };
        let unit = |c: f64| (c / scale).clamp(0.0, 1.0);
        Some(Rgba {
            r: unit(channels[0]),
            g: unit(channels[1]),
            b: unit(channels[2]),
            a: None,
        })
    }

    /// 8-bit channels, alpha 255 when unset.
    pub fn to_rgba8(&self) -> [u8; 4] {
        let byte = |c: f64| (c * 255.0).round() as u8;
        [
            byte(self.r),
            byte(self.g),
            byte(self.b),
            byte(self.a.unwrap_or(1.0)),
        ]
    }
}

impl fmt::Display for Rgba {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [r, g, b, a] = self.to_rgba8();
        write!(f, "#{r:02x}{g:02x}{b:02x}")?;
        if self.a.is_some() {
            write!(f, "{a:02x}")?;
        }
        Ok(())
    }
}

/// How each codec trades size for quality (`OutputSpec.quality`); each maps to documented
/// settings per codec (docs/formats.md), and is part of the fingerprint.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    /// Today's settings: flat colours within 2/255 of what was asked.
    #[default]
    Standard,
    /// Fewer artefacts on gradients and images, larger files.
    High,
    /// Smaller files; flat colours may drift past 2/255.
    Small,
}

impl Quality {
    fn is_standard(&self) -> bool {
        *self == Quality::Standard
    }
}

/// A whole number that exists only when valid (its `TryFrom<u32>` checks it), read with
/// `get`, written in JSON as the number itself.
macro_rules! checked_number {
    ($(#[$attribute:meta])* $name:ident) => {
        $(#[$attribute])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "u32", into = "u32")]
        pub struct $name(u32);

        impl $name {
            pub fn get(self) -> u32 {
                self.0
            }
        }

        impl From<$name> for u32 {
            fn from(value: $name) -> u32 {
                value.0
            }
        }
    };
}

checked_number! {
    /// Output frame rate: 30 or 60 frames per second.
    Fps
}

impl Fps {
    pub(crate) const SUPPORTED: [u32; 2] = [30, 60];
    pub const DEFAULT: Fps = Fps(30);
}

impl TryFrom<u32> for Fps {
    type Error = SpecError;
    fn try_from(value: u32) -> Result<Fps, SpecError> {
        if Fps::SUPPORTED.contains(&value) {
            Ok(Fps(value))
        } else {
            Err(SpecError::invalid(
                "fps",
                format!("must be 30 or 60, got {value}"),
            ))
        }
    }
}

checked_number! {
    /// Output width or height in pixels, 100..=1920.
    Dimension
}

impl Dimension {
    pub(crate) const MIN: u32 = 100;
    pub(crate) const MAX: u32 = 1920;
    pub const DEFAULT: Dimension = Dimension(1080);
}

impl TryFrom<u32> for Dimension {
    type Error = SpecError;
    fn try_from(value: u32) -> Result<Dimension, SpecError> {
        if (Dimension::MIN..=Dimension::MAX).contains(&value) {
            Ok(Dimension(value))
        } else {
            Err(SpecError::invalid(
                "size",
                format!(
                    "must be {}..={} pixels, got {value}",
                    Dimension::MIN,
                    Dimension::MAX
                ),
            ))
        }
    }
}

/// The output a render produces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub format: Format,
    pub fps: Fps,
    pub width: Dimension,
    pub height: Dimension,
    /// What the formats without alpha are composited over; white when unset.
    #[serde(default)]
    pub background: Option<Rgba>,
    /// One frame or a segment of the animation; the whole when unset. Left out of the
    /// serialised form when unset (as the two below), so fingerprints of earlier requests stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    #[serde(default, skip_serializing_if = "Quality::is_standard")]
    pub quality: Quality,
    /// How many times an animated GIF, WebP or APNG plays; forever when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_count: Option<u16>,
    /// A PNG of this frame (counted from the output's first) written beside the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poster: Option<u32>,
}

impl Default for OutputSpec {
    /// What a request naming nothing else gets: 1080² at 30 fps, the whole animation, in MP4.
    fn default() -> OutputSpec {
        OutputSpec {
            format: Format::Mp4,
            fps: Fps::DEFAULT,
            width: Dimension::DEFAULT,
            height: Dimension::DEFAULT,
            background: None,
            window: None,
            quality: Quality::Standard,
            loop_count: None,
            poster: None,
        }
    }
}

impl OutputSpec {
    pub(crate) fn background_or_default(&self) -> Rgba {
        self.background.unwrap_or(Rgba::WHITE)
    }
}

/// Slot values a render fills in: a map (slot id → value) per kind of slot. Each kind's row
/// in `lottie::slots` names its map here and the map's value type, and does not compile
/// until they agree. The fields' order is the fingerprint's (serialised in this order): a
/// new map goes last, left out when empty, so fingerprints of requests without it stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Modifications {
    #[serde(default)]
    pub texts: BTreeMap<String, String>,
    #[serde(default)]
    pub colors: BTreeMap<String, Rgba>,
    /// Left out when empty, so the fingerprints of requests without images are the ones
    /// they had before image slots.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageChoice>,
    /// Slot id → one number (left out when empty, as `images`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    /// Slot id → two or three numbers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vectors: BTreeMap<String, Vec<f64>>,
    /// Slot id → the gradient's stops, in order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gradients: BTreeMap<String, Vec<GradientStop>>,
}

impl Modifications {
    /// These values (a theme's) under `explicit` ones: each slot `explicit` fills is its.
    pub fn overridden_by(&self, explicit: Modifications) -> Modifications {
        // Destructured so that a new kind of slot (`lottie::slots`) is a compile error here.
        let Modifications {
            texts,
            colors,
            images,
            scalars,
            vectors,
            gradients,
        } = explicit;
        let mut merged = self.clone();
        merged.texts.extend(texts);
        merged.colors.extend(colors);
        merged.images.extend(images);
        merged.scalars.extend(scalars);
        merged.vectors.extend(vectors);
        merged.gradients.extend(gradients);
        merged
    }
}

/// One stop of a gradient: where it is (0..=1) and its colour (alpha from the opacity stops).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct GradientStop {
    pub offset: f64,
    pub color: Rgba,
}

/// A replacement image as a job keeps it: the SHA-256 of its bytes (lowercase hex: what
/// the fingerprint and the Idempotency-Key's request hash see) and its fit. The bytes go
/// to the job's pinned files at admission ([`RenderSubmission::images`]) and from there to
/// the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageChoice {
    pub sha256: String,
    pub fit: Fit,
}

/// How a replacement image fills its asset's box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// Scaled to cover the box, keeping its proportions; what passes the box is cut off,
    /// centred (lottie-web's default, `xMidYMid slice`).
    #[default]
    Cover,
    /// Scaled to lie inside the box, keeping its proportions, centred; the rest transparent.
    Contain,
    /// Stretched to the box.
    Fill,
}

/// A validated render request: the template, its modifications, the output, the webhook
/// to tell (none: the caller watches or polls), and the bytes of its replacement images.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSubmission {
    pub template_id: uuid::Uuid,
    pub modifications: Modifications,
    pub output: OutputSpec,
    pub notify: Option<Notify>,
    /// SHA-256 (as in [`ImageChoice::sha256`]) → where the image's bytes are; one entry for
    /// an image several slots show.
    pub images: BTreeMap<String, ImageSource>,
    /// A theme of the template, applied under `modifications` at admission.
    pub theme: Option<String>,
    /// The still's time, the segment and the loop count as asked: resolved into
    /// `output.window` and `output.loop_count` at admission, against the template.
    pub timing: TimingRequest,
}

/// Where a replacement image's bytes are.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageSource {
    /// Sent with the request.
    Sent(bytes::Bytes),
    /// Uploaded earlier (UploadImage) by the caller's tenant: its id is its SHA-256.
    Uploaded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_channels_outside_unit_range_are_refused() {
        for bad in [f64::NAN, f64::INFINITY, -0.1, 1.000_000_1, 255.0] {
            assert!(Rgba::new(bad, 0.0, 0.0, None).is_err(), "{bad} accepted");
        }
        assert!(Rgba::new(0.0, 1.0, 0.5, Some(1.0)).is_ok());
    }

    #[test]
    fn hex_colours_parse_with_and_without_alpha() {
        assert_eq!(
            Rgba::parse_hex("#ff0000").unwrap().to_rgba8(),
            [255, 0, 0, 255]
        );
        assert_eq!(
            Rgba::parse_hex("00ff0080").unwrap().to_rgba8(),
            [0, 255, 0, 128]
        );
        for bad in ["#fff", "#gg0000", "#ff00000", "#ÿÿÿ"] {
            assert!(Rgba::parse_hex(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn json_colours_are_validated_on_deserialisation() {
        assert!(serde_json::from_str::<Rgba>(r#"{"r":255,"g":0,"b":0}"#).is_err());
        assert!(serde_json::from_str::<Fps>("24").is_err());
        assert!(serde_json::from_str::<Dimension>("99").is_err());
        assert!(serde_json::from_str::<Dimension>("101").is_ok());
    }
}
