//! Which part of the animation an output shows: all of it, one frame (a still), or a segment.
//! A caller names times in seconds, output frames or the template's markers
//! ([`TimingRequest`]); [`resolve`] turns them into output frames ([`Window`]) against the
//! template's duration and markers, once, at admission (the service) or before the worker
//! starts (the CLI). The fingerprint and the worker see only the resolved frames, so two
//! requests naming the same frames one by marker and one by seconds are one render.

use super::output::{frame_count, Window};
use super::{Format, SpecError};
use serde::{Deserialize, Serialize};

/// A moment as a caller names it (`OutputSpec.at`, `--at`).
#[derive(Debug, Clone, PartialEq)]
pub enum TimeRef {
    /// Seconds from the animation's first frame; rounded to the nearest output frame.
    Seconds(f64),
    /// An output frame number (at the output frame rate), from 0.
    Frame(u32),
    /// A marker of the template (its start).
    Marker(String),
}

/// A stretch as a caller names it (`OutputSpec.segment`, `--segment`).
#[derive(Debug, Clone, PartialEq)]
pub enum SegmentRef {
    /// From `from` (included) to `to` (excluded), seconds from the first frame.
    Seconds { from: f64, to: f64 },
    /// A marker of the template: from its start for its duration.
    Marker(String),
}

/// The caller's choice of time, before it is resolved against the template.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimingRequest {
    pub at: Option<TimeRef>,
    pub segment: Option<SegmentRef>,
    /// How many times an animated GIF, WebP or APNG plays (0: forever, the default).
    pub loop_count: Option<u32>,
    /// A poster asked for (`Some`), at a time of the output (`Some(Some(..))`) or its middle
    /// frame (`Some(None)`).
    pub poster: Option<Option<TimeRef>>,
}

/// A request's times resolved against the template: what `OutputSpec` keeps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Resolved {
    pub window: Option<Window>,
    pub loop_count: Option<u16>,
    /// The poster's frame, counted from the output's first frame.
    pub poster: Option<u32>,
}

/// A time marker of a template (Lottie `markers`: `cm` name, `tm` start, `dr` duration, both
/// in template frames), in seconds from the animation's first frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub name: String,
    pub start_seconds: f64,
    pub duration_seconds: f64,
}

/// The most times a loop count may name: GIF's, WebP's and APNG's field is 16 bits.
pub const MAX_LOOP_COUNT: u32 = 65_535;

/// What `resolve` needs of the template: its duration and markers.
pub struct Animation<'a> {
    pub duration_seconds: f64,
    pub markers: &'a [Marker],
}

/// The window, loop count and poster frame of `request` for `format` at `fps`, checked
/// against the animation (a window of `None` is the whole animation). Every refusal names the
/// request's field.
pub fn resolve(
    request: &TimingRequest,
    format: Format,
    fps: u32,
    animation: &Animation<'_>,
) -> Result<Resolved, SpecError> {
    let frames = frame_count(animation.duration_seconds, fps);
    let window = match (&request.at, &request.segment) {
        (Some(_), Some(_)) => {
            return Err(SpecError::invalid(
                "output.at",
                "name either a still's time (at) or a segment, not both",
            ))
        }
        (Some(at), None) => {
            if !format.can_be_still() {
                return Err(SpecError::invalid(
                    "output.at",
                    format!(
                        "only a still ({}) shows one time; {} is an animation: use segment \
                         for part of it",
                        Format::names_where(Format::can_be_still, "or"),
                        format.name()
                    ),
                ));
            }
            Some(Window::Still {
                frame: frame_at(at, fps, frames, animation)?,
            })
        }
        (None, Some(segment)) => {
            if format.is_still_only() {
                return Err(SpecError::invalid(
                    "output.segment",
                    format!("{} is a still: name its time with at", format.name()),
                ));
            }
            let (start, count) = segment_frames(segment, fps, frames, animation)?;
            Some(Window::Segment { start, count })
        }
        (None, None) if format.is_still_only() => {
            return Err(SpecError::invalid(
                "output.at",
                format!(
                    "required for {}: the time of the still (seconds, a frame or a marker)",
                    format.name()
                ),
            ))
        }
        (None, None) => None,
    };
    let still = matches!(window, Some(Window::Still { .. }));
    let loop_count = match request.loop_count {
        None | Some(0) => None,
        Some(count) if !format.loops() || still => {
            return Err(SpecError::invalid(
                "output.loop_count",
                format!(
                    "only animated {} loop; {} cannot (asked {count})",
                    Format::names_where(Format::loops, "and"),
                    if still { "a still" } else { format.name() }
                ),
            ))
        }
        Some(count) => Some(
            u16::try_from(count)
                .ok()
                .filter(|_| count <= MAX_LOOP_COUNT)
                .ok_or_else(|| {
                    SpecError::invalid(
                        "output.loop_count",
                        format!("at most {MAX_LOOP_COUNT} plays (0: forever), got {count}"),
                    )
                })?,
        ),
    };
    let poster = match &request.poster {
        None => None,
        Some(_) if still || format.is_still_only() => {
            return Err(SpecError::invalid(
                "output.poster",
                "a still is its own poster: ask for one with an animation's format",
            ))
        }
        Some(at) => {
            let (start, count) = window.map_or((0, frames), Window::range);
            Some(poster_frame(at.as_ref(), fps, (start, count), animation)?)
        }
    };
    Ok(Resolved {
        window,
        loop_count,
        poster,
    })
}

/// The poster's frame among the output's `count` frames from `start`: `at` counts from the
/// output's first frame (a marker names a frame of the animation, which must lie in the
/// output); none is the middle frame.
fn poster_frame(
    at: Option<&TimeRef>,
    fps: u32,
    (start, count): (u32, u32),
    animation: &Animation<'_>,
) -> Result<u32, SpecError> {
    const FIELD: &str = "output.poster.at";
    let frame = match at {
        None => return Ok(count / 2),
        Some(TimeRef::Frame(frame)) => i64::from(*frame),
        Some(TimeRef::Seconds(seconds)) => {
            let seconds = checked_seconds(FIELD, *seconds)?;
            (seconds * f64::from(fps))
                .round()
                .clamp(-1.0, f64::from(u32::MAX)) as i64
        }
        Some(TimeRef::Marker(name)) => {
            let seconds = marker(animation, name, FIELD)?.start_seconds;
            let absolute = (seconds * f64::from(fps))
                .round()
                .clamp(-1.0, f64::from(u32::MAX));
            absolute as i64 - i64::from(start)
        }
    };
    u32::try_from(frame)
        .ok()
        .filter(|frame| *frame < count)
        .ok_or_else(|| {
            SpecError::invalid(
                FIELD,
                format!("the poster's frame lies outside the output's {count} frames"),
            )
        })
}

/// The output frame `at` names, which must lie inside the animation's `frames`.
fn frame_at(
    at: &TimeRef,
    fps: u32,
    frames: u32,
    animation: &Animation<'_>,
) -> Result<u32, SpecError> {
    let past_end = |what: String| {
        SpecError::invalid(
            "output.at",
            format!(
                "{what} lies past the animation's end ({:.3} s, frames 0..={} at {fps} fps)",
                animation.duration_seconds,
                frames - 1
            ),
        )
    };
    let seconds = match at {
        TimeRef::Frame(frame) if *frame < frames => return Ok(*frame),
        TimeRef::Frame(frame) => return Err(past_end(format!("frame {frame}"))),
        TimeRef::Seconds(seconds) => checked_seconds("output.at", *seconds)?,
        TimeRef::Marker(name) => marker(animation, name, "output.at")?.start_seconds,
    };
    if seconds < 0.0 {
        return Err(past_end(format!("{seconds} s (before the start)")));
    }
    let frame = (seconds * f64::from(fps)).round();
    if frame >= f64::from(frames) {
        return Err(past_end(format!("{seconds} s")));
    }
    Ok(frame as u32)
}

/// The first output frame and frame count of `segment`.
fn segment_frames(
    segment: &SegmentRef,
    fps: u32,
    frames: u32,
    animation: &Animation<'_>,
) -> Result<(u32, u32), SpecError> {
    const FIELD: &str = "output.segment";
    let (from, to, clamp_end) = match segment {
        SegmentRef::Seconds { from, to } => {
            let (from, to) = (checked_seconds(FIELD, *from)?, checked_seconds(FIELD, *to)?);
            if to <= from {
                return Err(SpecError::invalid(
                    FIELD,
                    format!("its end ({to} s) must come after its start ({from} s)"),
                ));
            }
            (from, to, false)
        }
        SegmentRef::Marker(name) => {
            let marker = marker(animation, name, FIELD)?;
            if marker.duration_seconds <= 0.0 {
                return Err(SpecError::invalid(
                    FIELD,
                    format!("marker {name:?} has no duration: name it as a still's time (at)"),
                ));
            }
            // A marker's end past the animation's is the designer's: the segment ends with it.
            let start = marker.start_seconds;
            (start, start + marker.duration_seconds, true)
        }
    };
    let to_frame = |seconds: f64| (seconds * f64::from(fps)).round();
    let (start, end) = (to_frame(from), to_frame(to));
    let end = if clamp_end {
        end.min(f64::from(frames))
    } else {
        end
    };
    if from < 0.0 || start >= f64::from(frames) || end > f64::from(frames) {
        return Err(SpecError::invalid(
            FIELD,
            format!(
                "{from} s to {to} s does not lie inside the animation (0 s to {:.3} s)",
                animation.duration_seconds
            ),
        ));
    }
    if end <= start {
        return Err(SpecError::invalid(
            FIELD,
            format!("{from} s to {to} s is shorter than one frame at {fps} fps"),
        ));
    }
    Ok((start as u32, (end - start) as u32))
}

fn checked_seconds(field: &str, seconds: f64) -> Result<f64, SpecError> {
    if seconds.is_finite() {
        Ok(seconds + 0.0)
    } else {
        Err(SpecError::invalid(
            field,
            format!("seconds must be a finite number, got {seconds}"),
        ))
    }
}

fn marker<'a>(
    animation: &'a Animation<'_>,
    name: &str,
    field: &str,
) -> Result<&'a Marker, SpecError> {
    animation
        .markers
        .iter()
        .find(|marker| marker.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = animation.markers.iter().map(|m| m.name.as_str()).collect();
            let names = if names.is_empty() {
                "(none)".to_owned()
            } else {
                names.join(", ")
            };
            SpecError::invalid(
                field,
                format!("the template has no marker {name:?}; its markers: {names}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn animation(markers: &[Marker]) -> Animation<'_> {
        Animation {
            duration_seconds: 3.0,
            markers,
        }
    }

    fn intro() -> Vec<Marker> {
        vec![
            Marker {
                name: "intro".into(),
                start_seconds: 0.5,
                duration_seconds: 1.0,
            },
            Marker {
                name: "tail".into(),
                start_seconds: 2.5,
                duration_seconds: 5.0,
            },
            Marker {
                name: "point".into(),
                start_seconds: 1.5,
                duration_seconds: 0.0,
            },
        ]
    }

    fn request(at: Option<TimeRef>, segment: Option<SegmentRef>) -> TimingRequest {
        TimingRequest {
            at,
            segment,
            loop_count: None,
            poster: None,
        }
    }

    #[test]
    fn times_resolve_to_output_frames() {
        let markers = intro();
        let animation = animation(&markers);
        let still = |at| resolve(&request(Some(at), None), Format::Png, 30, &animation);
        assert_eq!(
            still(TimeRef::Seconds(1.5)).unwrap().window,
            Some(Window::Still { frame: 45 })
        );
        assert_eq!(
            still(TimeRef::Frame(89)).unwrap().window,
            Some(Window::Still { frame: 89 })
        );
        assert_eq!(
            still(TimeRef::Marker("point".into())).unwrap().window,
            Some(Window::Still { frame: 45 })
        );
        for past in [
            TimeRef::Frame(90),
            TimeRef::Seconds(2.99),
            TimeRef::Seconds(-0.1),
        ] {
            assert!(still(past.clone()).is_err(), "{past:?}");
        }
        let segment = |segment| resolve(&request(None, Some(segment)), Format::Mp4, 60, &animation);
        assert_eq!(
            segment(SegmentRef::Marker("intro".into())).unwrap().window,
            Some(Window::Segment {
                start: 30,
                count: 60
            })
        );
        // Past the end by the designer's marker: cut at the end.
        assert_eq!(
            segment(SegmentRef::Marker("tail".into())).unwrap().window,
            Some(Window::Segment {
                start: 150,
                count: 30
            })
        );
        assert_eq!(
            segment(SegmentRef::Seconds { from: 0.5, to: 2.0 })
                .unwrap()
                .window,
            Some(Window::Segment {
                start: 30,
                count: 90
            })
        );
        for bad in [
            SegmentRef::Seconds { from: 1.0, to: 1.0 },
            SegmentRef::Seconds { from: 0.0, to: 3.5 },
            SegmentRef::Seconds {
                from: f64::NAN,
                to: 1.0,
            },
            SegmentRef::Seconds {
                from: 1.0,
                to: 1.001,
            },
            SegmentRef::Marker("point".into()),
            SegmentRef::Marker("outro".into()),
        ] {
            assert!(segment(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formats_take_only_the_times_and_loops_they_can_show() {
        let markers = intro();
        let animation = animation(&markers);
        let at = || Some(TimeRef::Seconds(1.0));
        // A PNG needs its time; an MP4 cannot take one; a WebP with one is a still.
        assert!(resolve(&request(None, None), Format::Png, 30, &animation).is_err());
        assert!(resolve(&request(at(), None), Format::Mp4, 30, &animation).is_err());
        assert_eq!(
            resolve(&request(at(), None), Format::Webp, 30, &animation).unwrap(),
            Resolved {
                window: Some(Window::Still { frame: 30 }),
                ..Resolved::default()
            }
        );
        assert_eq!(
            resolve(&request(None, None), Format::Webp, 30, &animation).unwrap(),
            Resolved::default()
        );
        let segment = Some(SegmentRef::Marker("intro".into()));
        assert!(resolve(
            &request(at(), segment.clone()),
            Format::Webp,
            30,
            &animation
        )
        .is_err());
        assert!(resolve(&request(None, segment), Format::Jpeg, 30, &animation).is_err());
        let looping = |format, count| {
            let mut request = request(None, None);
            request.loop_count = Some(count);
            resolve(&request, format, 30, &animation).map(|resolved| resolved.loop_count)
        };
        assert_eq!(looping(Format::Gif, 3).unwrap(), Some(3));
        assert_eq!(looping(Format::Apng, 0).unwrap(), None);
        assert!(looping(Format::Mp4, 2).is_err());
        assert!(looping(Format::Gif, MAX_LOOP_COUNT + 1).is_err());
        // Zero is the default everywhere: asked of an MP4 it asks for nothing.
        assert_eq!(looping(Format::Mp4, 0).unwrap(), None);
    }

    #[test]
    fn posters_are_frames_of_the_output_the_middle_one_by_default() {
        let markers = intro();
        let animation = animation(&markers);
        let poster = |segment, at: Option<TimeRef>| {
            let mut request = request(None, segment);
            request.poster = Some(at);
            resolve(&request, Format::Mp4, 30, &animation).map(|resolved| resolved.poster)
        };
        // The whole animation (90 frames): its middle; a time counts from the first frame.
        assert_eq!(poster(None, None).unwrap(), Some(45));
        assert_eq!(poster(None, Some(TimeRef::Seconds(0.5))).unwrap(), Some(15));
        // A segment of frames 15..75: its middle, and a marker's frame counted from its start.
        let segment = || Some(SegmentRef::Seconds { from: 0.5, to: 2.5 });
        assert_eq!(poster(segment(), None).unwrap(), Some(30));
        assert_eq!(
            poster(segment(), Some(TimeRef::Marker("point".into()))).unwrap(),
            Some(30)
        );
        for outside in [
            TimeRef::Frame(60),
            TimeRef::Marker("tail".into()),
            TimeRef::Seconds(-1.0),
        ] {
            assert!(
                poster(segment(), Some(outside.clone())).is_err(),
                "{outside:?}"
            );
        }
        // A still has none.
        let mut request = request(Some(TimeRef::Frame(3)), None);
        request.poster = Some(None);
        assert!(resolve(&request, Format::Png, 30, &animation).is_err());
    }
}
