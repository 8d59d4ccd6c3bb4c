//! The output formats and their rules, one home per format: each [`Format`] is one row of the
//! `formats!` table with everything true of it wherever it is asked (its name in messages,
//! file extension, content type, alpha, one frame or an animation, loop count, how slow its
//! encoder is, how long or large an animation of it may be). The other places that must
//! change for a new format are the exhaustive matches the compiler names: its encoder
//! (`encode::open`, `encode::preparer_factory`, `EncoderSettings::encoded_size`) and its wire
//! value (`grpc::convert::output`).
//!
//! [`check`] holds an output to its format's limits, once for both sides: admission turns its
//! [`OutputViolation`]s into field violations of the request (INVALID_ARGUMENT), the worker
//! into a failed render (a template changed since admission, or the CLI, which has no
//! admission).

use super::OutputSpec;
use crate::reason::Reason;
use serde::{Deserialize, Serialize};

/// Longest GIF rendered, seconds. gifski caps one frame's delay at 300 s, so a longer GIF
/// whose picture stands still would play short; no real use wants a longer GIF anyway.
pub const MAX_GIF_SECONDS: f64 = 300.0;

/// Output megapixels (frames × width × height / 10⁶) an animated WebP may have. libwebp's
/// animation encoder holds the animation in memory until it writes the file: measured with
/// `./dev bench --format webp` at 1080², peak RSS grew by 1.6 MiB a frame on the emoji file
/// and 3.7 MiB a frame on the tractor (2.3 GiB for its 534 frames, 624 megapixels), about
/// 3.2 bytes a pixel at worst. 600 megapixels keep a worker near 2 GiB, under its 4 GiB
/// limit (17 s at 1080² and 30 fps, 68 s at 540²; chat stickers last 3 s).
pub const MAX_WEBP_ANIMATION_MEGAPIXELS: f64 = 600.0;

/// The encoding cost of the fast encoders (H.264, HEVC, AV1, VP9, GIF, the stills): the unit
/// of [`FormatFacts::encoding_cost`].
const FAST: f64 = 1.0;

/// How many times a fast encoder's time per output megapixel the slow ones take in a render's
/// deadline: WebP, APNG and ProRes 4444 encode 1080² at 10–14 frames a second on two cores
/// (docs/formats.md), against about 100 for H.264, and APNG's `small` quality is slower again;
/// a deadline that ran out on them would fail a job as transient, to be retried to the same
/// end.
pub const SLOW_ENCODING: f64 = 4.0;

/// What an output shows, in output frames: resolved, checked against the animation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// One frame, as a still image.
    Still { frame: u32 },
    /// `count` frames from `start`; the output's first frame shows frame `start`.
    Segment { start: u32, count: u32 },
}

impl Window {
    /// The first output frame of the animation shown and how many follow.
    pub fn range(self) -> (u32, u32) {
        match self {
            Window::Still { frame } => (frame, 1),
            Window::Segment { start, count } => (start, count),
        }
    }
}

/// Number of output frames for a template lasting `duration_seconds` at `fps`: the
/// duration rounded to whole frames, at least one (retiming makes that many,
/// `lottie::timeline`).
pub fn frame_count(duration_seconds: f64, fps: u32) -> u32 {
    let frames = (duration_seconds * f64::from(fps)).round();
    frames.clamp(1.0, f64::from(u32::MAX)) as u32
}

/// How many frames a format holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frames {
    /// Only ever one (`at` is required).
    Still,
    /// An animation (`at` is refused).
    Animation,
    /// One with `at`, else an animation.
    StillOrAnimation,
}

/// How long or large an animation of a format may be, beyond the job budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnimationLimit {
    /// At most this many seconds (frames / fps).
    Seconds(f64),
    /// At most this many megapixels (frames × width × height / 10⁶).
    Megapixels(f64),
}

/// What is true of one format: its row of the `formats!` table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FormatFacts {
    /// As messages name it.
    pub name: &'static str,
    /// Of its output file (and of its object in storage).
    pub extension: &'static str,
    /// What a download of it is served as.
    pub content_type: &'static str,
    /// Keeps transparency; the others are composited over the background.
    pub alpha: bool,
    pub frames: Frames,
    /// An animation of it plays a number of times (`loop_count` is allowed).
    pub loops: bool,
    /// Its encoder's time per output megapixel, in fast encoders' ([`SLOW_ENCODING`]): how
    /// much of a render's deadline ([`crate::sandbox::default_deadline`]) a megapixel earns.
    pub encoding_cost: f64,
    /// How long or large an animation of it may be; none: the job budget alone.
    pub limit: Option<AnimationLimit>,
}

/// Declares [`Format`] (its variants' docs are the CLI's help), the list of all of them and
/// each one's [`FormatFacts`] from one table, so that a format is one row.
macro_rules! formats {
    ($($(#[$doc:meta])* $variant:ident => $facts:expr,)+) => {
        /// An output format. Serialised (and named on the command line) in lowercase.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
        )]
        #[serde(rename_all = "lowercase")]
        pub enum Format {
            $($(#[$doc])* $variant,)+
        }

        impl Format {
            /// Every format, in the table's order.
            pub const ALL: [Format; [$(Format::$variant,)+].len()] = [$(Format::$variant,)+];

            /// Everything true of this format.
            pub const fn facts(self) -> FormatFacts {
                match self {
                    $(Format::$variant => $facts,)+
                }
            }
        }
    };
}

formats! {
    /// H.264 in MP4, yuv420p, composited over the background colour.
    Mp4 => FormatFacts {
        name: "MP4",
        extension: "mp4",
        content_type: "video/mp4",
        alpha: false,
        frames: Frames::Animation,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
    /// VP9 in WebM with an alpha channel.
    Webm => FormatFacts {
        name: "WebM",
        extension: "webm",
        content_type: "video/webm",
        alpha: true,
        frames: Frames::Animation,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
    /// Animated GIF (gifski), binary transparency.
    Gif => FormatFacts {
        name: "GIF",
        extension: "gif",
        content_type: "image/gif",
        alpha: true,
        frames: Frames::Animation,
        loops: true,
        encoding_cost: FAST,
        limit: Some(AnimationLimit::Seconds(MAX_GIF_SECONDS)),
    },
    /// A still PNG with alpha (`at` names its time).
    Png => FormatFacts {
        name: "PNG",
        extension: "png",
        content_type: "image/png",
        alpha: true,
        frames: Frames::Still,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
    /// A still JPEG, composited over the background colour (`at` names its time).
    Jpeg => FormatFacts {
        name: "JPEG",
        extension: "jpg",
        content_type: "image/jpeg",
        alpha: false,
        frames: Frames::Still,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
    /// WebP with alpha: a still with `at`, else animated.
    Webp => FormatFacts {
        name: "WebP",
        extension: "webp",
        content_type: "image/webp",
        alpha: true,
        frames: Frames::StillOrAnimation,
        loops: true,
        encoding_cost: SLOW_ENCODING,
        limit: Some(AnimationLimit::Megapixels(MAX_WEBP_ANIMATION_MEGAPIXELS)),
    },
    /// Animated PNG with alpha.
    Apng => FormatFacts {
        name: "APNG",
        extension: "png",
        content_type: "image/apng",
        alpha: true,
        frames: Frames::Animation,
        loops: true,
        encoding_cost: SLOW_ENCODING,
        limit: None,
    },
    /// ProRes 4444 with alpha in a QuickTime file, for editing software.
    Mov => FormatFacts {
        name: "ProRes 4444 MOV",
        extension: "mov",
        content_type: "video/quicktime",
        alpha: true,
        frames: Frames::Animation,
        loops: false,
        encoding_cost: SLOW_ENCODING,
        limit: None,
    },
    /// H.265 (HEVC) in MP4, tagged `hvc1`, composited over the background colour.
    Hevc => FormatFacts {
        name: "HEVC MP4",
        extension: "mp4",
        content_type: "video/mp4",
        alpha: false,
        frames: Frames::Animation,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
    /// AV1 (SVT-AV1) in MP4, composited over the background colour.
    Av1 => FormatFacts {
        name: "AV1 MP4",
        extension: "mp4",
        content_type: "video/mp4",
        alpha: false,
        frames: Frames::Animation,
        loops: false,
        encoding_cost: FAST,
        limit: None,
    },
}

impl Format {
    pub(crate) fn content_type(self) -> &'static str {
        self.facts().content_type
    }

    pub fn extension(self) -> &'static str {
        self.facts().extension
    }

    /// As messages name it.
    pub fn name(self) -> &'static str {
        self.facts().name
    }

    /// Whether the output keeps transparency; the others are composited over the background.
    pub fn has_alpha(self) -> bool {
        self.facts().alpha
    }

    /// Only ever one frame (`at` is required).
    pub fn is_still_only(self) -> bool {
        self.facts().frames == Frames::Still
    }

    /// May be one frame (`at` is allowed).
    pub fn can_be_still(self) -> bool {
        matches!(
            self.facts().frames,
            Frames::Still | Frames::StillOrAnimation
        )
    }

    /// Animated, with a loop count (`loop_count` is allowed).
    pub fn loops(self) -> bool {
        self.facts().loops
    }

    /// The names of the formats `which` holds for, as a message lists them: "A, B or C" with
    /// `last` "or".
    pub(crate) fn names_where(which: fn(Format) -> bool, last: &str) -> String {
        let names: Vec<&str> = Format::ALL
            .iter()
            .filter(|format| which(**format))
            .map(|format| format.name())
            .collect();
        match names.split_last() {
            None => String::new(),
            Some((only, [])) => (*only).to_owned(),
            Some((final_name, rest)) => format!("{} {last} {final_name}", rest.join(", ")),
        }
    }
}

/// An output its format refuses; the request's field it is about is [`Self::field`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputViolation {
    #[error(
        "a {name} may last at most {max_seconds} s; this one would last {seconds:.1} s (a \
         segment can shorten it)",
        name = .format.name()
    )]
    TooLong {
        format: Format,
        seconds: f64,
        max_seconds: f64,
    },
    #[error(
        "an animated {name} may have at most {max_megapixels} megapixels (frames × width × \
         height; its encoder holds them all in memory); this one would have {megapixels:.0}: \
         a segment, a smaller size or 30 fps shortens it",
        name = .format.name()
    )]
    TooLarge {
        format: Format,
        megapixels: f64,
        max_megapixels: f64,
    },
}

impl OutputViolation {
    /// The request's field at fault: the format (another could hold this output).
    pub fn field(&self) -> &'static str {
        "output.format"
    }

    pub fn reason(&self) -> Reason {
        match self {
            OutputViolation::TooLong { .. } | OutputViolation::TooLarge { .. } => {
                Reason::OutputTooLong
            }
        }
    }
}

/// The output's frames: its window's, else those of the whole animation (lasting
/// `duration_seconds`) at its frame rate.
pub fn frames(spec: &OutputSpec, duration_seconds: f64) -> u32 {
    match spec.window {
        Some(window) => window.range().1,
        None => frame_count(duration_seconds, spec.fps.get()),
    }
}

/// Megapixels of `frames` frames of `spec`'s size (frames × width × height / 10⁶).
pub fn megapixels(spec: &OutputSpec, frames: u32) -> f64 {
    f64::from(frames) * f64::from(spec.width.get()) * f64::from(spec.height.get()) / 1e6
}

/// What `spec`'s format refuses of an output of `frames` frames ([`frames`]): every
/// violation of its limits; none for a still.
pub fn check(spec: &OutputSpec, frames: u32) -> Vec<OutputViolation> {
    let still = matches!(spec.window, Some(Window::Still { .. }));
    let format = spec.format;
    let violation = match format.facts().limit {
        None => None,
        Some(_) if still => None,
        Some(AnimationLimit::Seconds(max_seconds)) => {
            let seconds = f64::from(frames) / f64::from(spec.fps.get());
            (seconds > max_seconds).then_some(OutputViolation::TooLong {
                format,
                seconds,
                max_seconds,
            })
        }
        Some(AnimationLimit::Megapixels(max_megapixels)) => {
            let megapixels = megapixels(spec, frames);
            (megapixels > max_megapixels).then_some(OutputViolation::TooLarge {
                format,
                megapixels,
                max_megapixels,
            })
        }
    };
    violation.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Dimension, Fps};

    fn output(format: Format, side: u32, window: Option<Window>) -> OutputSpec {
        let side = Dimension::try_from(side).unwrap();
        OutputSpec {
            format,
            width: side,
            height: side,
            window,
            ..OutputSpec::default()
        }
    }

    #[test]
    fn a_gif_may_last_300_seconds_and_not_a_frame_more() {
        let gif = output(Format::Gif, 100, None);
        assert!(check(&gif, 300 * 30).is_empty());
        let refused = check(&gif, 300 * 30 + 3);
        assert_eq!(
            refused,
            [OutputViolation::TooLong {
                format: Format::Gif,
                seconds: 300.1,
                max_seconds: 300.0
            }]
        );
        assert_eq!(refused[0].reason(), Reason::OutputTooLong);
        assert_eq!(
            refused[0].to_string(),
            "a GIF may last at most 300 s; this one would last 300.1 s (a segment can shorten it)"
        );
    }

    #[test]
    fn an_animated_webp_is_held_to_its_megapixels_and_a_still_one_is_not() {
        let animated = output(Format::Webp, 1000, None);
        assert!(check(&animated, 600).is_empty());
        let refused = check(&animated, 601);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].field(), "output.format");
        assert_eq!(
            refused[0].to_string(),
            "an animated WebP may have at most 600 megapixels (frames × width × height; its \
             encoder holds them all in memory); this one would have 601: a segment, a smaller \
             size or 30 fps shortens it"
        );
        let still = output(Format::Webp, 1000, Some(Window::Still { frame: 0 }));
        assert!(check(&still, 100_000).is_empty());
    }

    #[test]
    fn the_frames_are_the_windows_else_the_whole_animations_at_the_frame_rate() {
        let mut spec = output(Format::Mp4, 100, None);
        spec.fps = Fps::try_from(60).unwrap();
        assert_eq!(frames(&spec, 2.0), 120);
        spec.window = Some(Window::Segment {
            start: 10,
            count: 7,
        });
        assert_eq!(frames(&spec, 2.0), 7);
    }

    #[test]
    fn messages_list_the_formats_of_a_kind_from_the_table() {
        assert_eq!(
            Format::names_where(Format::can_be_still, "or"),
            "PNG, JPEG or WebP"
        );
        assert_eq!(
            Format::names_where(Format::loops, "and"),
            "GIF, WebP and APNG"
        );
    }

    #[test]
    fn every_format_has_one_row_and_a_distinct_name() {
        let mut names: Vec<&str> = Format::ALL.iter().map(|format| format.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Format::ALL.len());
        assert_eq!(
            <Format as clap::ValueEnum>::value_variants(),
            Format::ALL,
            "the command line offers every format"
        );
    }
}
