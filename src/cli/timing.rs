//! The output flags `render` and `submit` share beyond size and frame rate: the still's time
//! (`--at`), the segment (`--segment`), `--quality` and `--loop`, parsed into the request's
//! [`TimingRequest`] (resolved against the template's duration and markers later, as the
//! service does) and the wire's messages.

use crate::grpc::proto;
use crate::spec::{Quality, SegmentRef, TimeRef, TimingRequest};

#[derive(Debug, Clone, clap::Args)]
pub struct TimingArgs {
    /// A still's time (PNG, JPEG, WebP): seconds (`1.5s`), an output frame (`45`) or a
    /// marker of the template (`intro`, or `marker:45` for a marker named like a number).
    #[arg(long, value_name = "1.5s|FRAME|MARKER")]
    pub at: Option<String>,
    /// Only part of the animation: seconds (`0.5s-2s`) or a marker with a duration.
    #[arg(long, value_name = "FROMs-TOs|MARKER")]
    pub segment: Option<String>,
    /// Size against quality, per codec (docs/formats.md).
    #[arg(long, value_enum, default_value_t = Quality::Standard)]
    pub quality: Quality,
    /// How many times an animated GIF, WebP or APNG plays (0 = forever).
    #[arg(long = "loop", value_name = "N")]
    pub loop_count: Option<u32>,
    /// Also write a PNG poster of one frame of the animation here (`submit`: with --wait).
    #[arg(long, value_name = "FILE.png")]
    pub poster: Option<std::path::PathBuf>,
    /// The poster's time, counted from the output's first frame [default: its middle frame].
    #[arg(long, value_name = "1.5s|FRAME|MARKER", requires = "poster")]
    pub poster_at: Option<String>,
}

/// `1.5s` as seconds; None when `text` is not a number followed by `s`.
fn seconds(text: &str) -> Option<f64> {
    text.strip_suffix('s')?.parse::<f64>().ok()
}

fn time_ref(text: &str) -> TimeRef {
    if let Some(name) = text.strip_prefix("marker:") {
        TimeRef::Marker(name.to_owned())
    } else if let Some(seconds) = seconds(text) {
        TimeRef::Seconds(seconds)
    } else if let Ok(frame) = text.parse::<u32>() {
        TimeRef::Frame(frame)
    } else {
        TimeRef::Marker(text.to_owned())
    }
}

fn segment_ref(text: &str) -> SegmentRef {
    if let Some(name) = text.strip_prefix("marker:") {
        return SegmentRef::Marker(name.to_owned());
    }
    let range = text
        .split_once('-')
        .and_then(|(from, to)| Some((seconds(from)?, seconds(to)?)));
    match range {
        Some((from, to)) => SegmentRef::Seconds { from, to },
        None => SegmentRef::Marker(text.to_owned()),
    }
}

fn wire_point(at: TimeRef) -> proto::time_point::Point {
    match at {
        TimeRef::Seconds(seconds) => proto::time_point::Point::Seconds(seconds),
        TimeRef::Frame(frame) => proto::time_point::Point::Frame(frame),
        TimeRef::Marker(name) => proto::time_point::Point::Marker(name),
    }
}

impl TimingArgs {
    pub(crate) fn request(&self) -> TimingRequest {
        TimingRequest {
            at: self.at.as_deref().map(time_ref),
            segment: self.segment.as_deref().map(segment_ref),
            loop_count: self.loop_count,
            poster: self
                .poster
                .as_ref()
                .map(|_| self.poster_at.as_deref().map(time_ref)),
        }
    }

    /// The fields of the wire's `OutputSpec` these flags fill.
    pub(crate) fn fill(&self, output: &mut proto::OutputSpec) {
        let request = self.request();
        output.at = request.at.map(|at| proto::TimePoint {
            point: Some(wire_point(at)),
        });
        output.segment = request.segment.map(|segment| proto::Segment {
            range: Some(match segment {
                SegmentRef::Seconds { from, to } => {
                    proto::segment::Range::Seconds(proto::SecondsRange { from, to })
                }
                SegmentRef::Marker(name) => proto::segment::Range::Marker(name),
            }),
        });
        output.quality = match self.quality {
            Quality::Standard => proto::Quality::Standard,
            Quality::High => proto::Quality::High,
            Quality::Small => proto::Quality::Small,
        } as i32;
        output.loop_count = request.loop_count;
        output.poster = request.poster.map(|at| proto::Poster {
            at: at.map(|at| proto::TimePoint {
                point: Some(wire_point(at)),
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_segments_read_as_the_help_says() {
        assert_eq!(time_ref("1.5s"), TimeRef::Seconds(1.5));
        assert_eq!(time_ref("45"), TimeRef::Frame(45));
        assert_eq!(time_ref("intro"), TimeRef::Marker("intro".into()));
        assert_eq!(time_ref("marker:45"), TimeRef::Marker("45".into()));
        assert_eq!(
            segment_ref("0.5s-2s"),
            SegmentRef::Seconds { from: 0.5, to: 2.0 }
        );
        assert_eq!(segment_ref("loop-a"), SegmentRef::Marker("loop-a".into()));
        assert_eq!(
            segment_ref("marker:1s-2s"),
            SegmentRef::Marker("1s-2s".into())
        );
    }
}
