//! The rules of a render request's output (format, size, frame rate, background, the still's
//! time, the segment, quality, loop count, poster), as garde runs them on the draft of
//! [`super`], and the draft into the domain's [`OutputSpec`] and [`TimingRequest`].

use super::ColorDraft;
use crate::grpc::proto;
use crate::spec::{
    Dimension, Format, Fps, OutputSpec, Quality, Rgba, SegmentRef, TimeRef, TimingRequest,
};
use garde::Validate;

/// Output size when the request leaves it 0.
const DEFAULT_SIZE: u32 = 1080;

#[derive(Debug, Validate)]
pub(super) struct OutputDraft {
    #[garde(custom(known_format))]
    format: i32,
    #[garde(custom(fps_choice))]
    fps: u32,
    #[garde(custom(size_choice))]
    width: u32,
    #[garde(custom(size_choice))]
    height: u32,
    #[garde(dive)]
    background: Option<ColorDraft>,
    #[garde(custom(valid_time_point))]
    at: Option<proto::TimePoint>,
    #[garde(custom(valid_segment))]
    segment: Option<proto::Segment>,
    #[garde(custom(known_quality))]
    quality: i32,
    // Checked against the format at admission (`spec::timing::resolve`).
    #[garde(skip)]
    loop_count: Option<u32>,
    #[garde(custom(valid_poster))]
    poster: Option<proto::Poster>,
}

impl From<proto::OutputSpec> for OutputDraft {
    fn from(output: proto::OutputSpec) -> OutputDraft {
        OutputDraft {
            format: output.format,
            fps: output.fps,
            width: output.width,
            height: output.height,
            background: output.background.map(ColorDraft::from),
            at: output.at,
            segment: output.segment,
            quality: output.quality,
            loop_count: output.loop_count,
            poster: output.poster,
        }
    }
}

impl OutputDraft {
    /// A valid draft only: the output (its window, loop count and poster resolved at
    /// admission, against the template) and the times as asked.
    pub(super) fn into_domain(
        self,
        color: &dyn Fn(ColorDraft) -> Result<Rgba, String>,
    ) -> Result<(OutputSpec, TimingRequest), String> {
        let format = domain_format(self.format)
            .ok_or_else(|| format!("format {} after validation", self.format))?;
        let quality = domain_quality(self.quality).ok_or("quality after validation")?;
        let time_ref = |point| match point {
            proto::time_point::Point::Seconds(seconds) => TimeRef::Seconds(seconds),
            proto::time_point::Point::Frame(frame) => TimeRef::Frame(frame),
            proto::time_point::Point::Marker(name) => TimeRef::Marker(name),
        };
        let timing = TimingRequest {
            at: self.at.and_then(|at| at.point).map(time_ref),
            poster: self
                .poster
                .map(|poster| poster.at.and_then(|at| at.point).map(time_ref)),
            segment: self
                .segment
                .and_then(|segment| segment.range)
                .map(|range| match range {
                    proto::segment::Range::Seconds(seconds) => SegmentRef::Seconds {
                        from: seconds.from,
                        to: seconds.to,
                    },
                    proto::segment::Range::Marker(name) => SegmentRef::Marker(name),
                }),
            loop_count: self.loop_count,
        };
        let size = |value: u32| {
            Dimension::try_from(if value == 0 { DEFAULT_SIZE } else { value })
                .map_err(|e| e.to_string())
        };
        let output = OutputSpec {
            format,
            fps: if self.fps == 0 {
                Fps::DEFAULT
            } else {
                Fps::try_from(self.fps).map_err(|e| e.to_string())?
            },
            width: size(self.width)?,
            height: size(self.height)?,
            background: self.background.map(color).transpose()?,
            quality,
            // Resolved from `timing` at admission, against the template.
            window: None,
            loop_count: None,
            poster: None,
        };
        Ok((output, timing))
    }
}

/// The domain's format of a wire value; None for FORMAT_UNSPECIFIED and unknown values.
pub(crate) fn domain_format(value: i32) -> Option<Format> {
    Some(match proto::Format::try_from(value).ok()? {
        proto::Format::Unspecified => return None,
        proto::Format::Mp4 => Format::Mp4,
        proto::Format::Webm => Format::Webm,
        proto::Format::Gif => Format::Gif,
        proto::Format::Png => Format::Png,
        proto::Format::Jpeg => Format::Jpeg,
        proto::Format::Webp => Format::Webp,
        proto::Format::Apng => Format::Apng,
        proto::Format::MovProres4444 => Format::Mov,
        proto::Format::Mp4Hevc => Format::Hevc,
        proto::Format::Mp4Av1 => Format::Av1,
    })
}

/// The wire value of a domain format (what the client verbs send).
pub(crate) fn wire_format(format: Format) -> proto::Format {
    match format {
        Format::Mp4 => proto::Format::Mp4,
        Format::Webm => proto::Format::Webm,
        Format::Gif => proto::Format::Gif,
        Format::Png => proto::Format::Png,
        Format::Jpeg => proto::Format::Jpeg,
        Format::Webp => proto::Format::Webp,
        Format::Apng => proto::Format::Apng,
        Format::Mov => proto::Format::MovProres4444,
        Format::Hevc => proto::Format::Mp4Hevc,
        Format::Av1 => proto::Format::Mp4Av1,
    }
}

fn known_format(value: &i32, _: &()) -> garde::Result {
    match domain_format(*value) {
        Some(_) => Ok(()),
        None => Err(garde::Error::new(format!(
            "must be one of {}, got {value}",
            wire_format_names()
        ))),
    }
}

/// The wire names of every format, as a refusal lists them: `FORMAT_MP4, _WEBM, … or
/// _MP4_AV1` (the formats' table order, [`Format::ALL`]).
fn wire_format_names() -> String {
    let mut names: Vec<&str> = Format::ALL
        .iter()
        .map(|format| wire_format(*format).as_str_name())
        .enumerate()
        .map(|(index, name)| match name.strip_prefix("FORMAT") {
            Some(rest) if index > 0 => rest,
            _ => name,
        })
        .collect();
    let last = names.pop().unwrap_or_default();
    format!("{} or {last}", names.join(", "))
}

fn domain_quality(value: i32) -> Option<Quality> {
    match proto::Quality::try_from(value).ok()? {
        proto::Quality::Unspecified | proto::Quality::Standard => Some(Quality::Standard),
        proto::Quality::High => Some(Quality::High),
        proto::Quality::Small => Some(Quality::Small),
    }
}

fn known_quality(value: &i32, _: &()) -> garde::Result {
    match domain_quality(*value) {
        Some(_) => Ok(()),
        None => Err(garde::Error::new(format!(
            "must be QUALITY_STANDARD, _HIGH or _SMALL, got {value}"
        ))),
    }
}

/// A marker name as a request may give it: what a report lists.
fn marker_name(name: &str) -> garde::Result {
    let length = name.chars().count();
    if (1..=crate::lottie::report::MAX_MARKER_NAME_CHARS).contains(&length) {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "a marker name has 1..={} characters, got {length}",
            crate::lottie::report::MAX_MARKER_NAME_CHARS
        )))
    }
}

fn seconds_value(seconds: f64) -> garde::Result {
    if seconds.is_finite() && seconds >= 0.0 {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "seconds are finite and at least 0, got {seconds}"
        )))
    }
}

fn valid_time_point(value: &Option<proto::TimePoint>, _: &()) -> garde::Result {
    match value.as_ref().map(|at| &at.point) {
        None => Ok(()),
        Some(None) => Err(garde::Error::new("set one of seconds, frame or marker")),
        Some(Some(proto::time_point::Point::Seconds(seconds))) => seconds_value(*seconds),
        Some(Some(proto::time_point::Point::Frame(_))) => Ok(()),
        Some(Some(proto::time_point::Point::Marker(name))) => marker_name(name),
    }
}

fn valid_poster(value: &Option<proto::Poster>, context: &()) -> garde::Result {
    match value {
        Some(poster) if poster.at.is_some() => valid_time_point(&poster.at, context),
        _ => Ok(()),
    }
}

fn valid_segment(value: &Option<proto::Segment>, _: &()) -> garde::Result {
    match value.as_ref().map(|segment| &segment.range) {
        None => Ok(()),
        Some(None) => Err(garde::Error::new("set one of seconds or marker")),
        Some(Some(proto::segment::Range::Seconds(range))) => {
            seconds_value(range.from)?;
            seconds_value(range.to)?;
            if range.to > range.from {
                Ok(())
            } else {
                Err(garde::Error::new(format!(
                    "its end ({} s) must come after its start ({} s)",
                    range.to, range.from
                )))
            }
        }
        Some(Some(proto::segment::Range::Marker(name))) => marker_name(name),
    }
}

fn fps_choice(value: &u32, _: &()) -> garde::Result {
    if *value == 0 || Fps::SUPPORTED.contains(value) {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "must be 30 or 60 (0 means 30), got {value}"
        )))
    }
}

fn size_choice(value: &u32, _: &()) -> garde::Result {
    if *value == 0 || (Dimension::MIN..=Dimension::MAX).contains(value) {
        Ok(())
    } else {
        Err(garde::Error::new(format!(
            "must be {}..={} pixels (0 means {DEFAULT_SIZE}), got {value}",
            Dimension::MIN,
            Dimension::MAX
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_format_is_told_every_wire_name() {
        assert_eq!(
            wire_format_names(),
            "FORMAT_MP4, _WEBM, _GIF, _PNG, _JPEG, _WEBP, _APNG, _MOV_PRORES_4444, _MP4_HEVC \
             or _MP4_AV1"
        );
    }
}
