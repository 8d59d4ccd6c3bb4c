//! What the `prepare` target's input bytes become past the template's upload (`upload`): a
//! render request on the wire naming every kind of modification, a theme, the output's
//! format, size, frame rate, still time, segment, loop count and poster. Values are drawn
//! mostly from what the template offers (its slots, their ranges, its themes and markers),
//! so most inputs reach the render, and freely otherwise.

use arbitrary::Arbitrary;
use lottie_render::grpc::proto;
use lottie_render::lottie::report::InspectReport;
use lottie_render::lottie::slots::{Slots, MAX_PROPERTY_MAGNITUDE};

/// Texts that stress shaping, bidi, line breaking and fallback.
const SAMPLE_TEXTS: &[&str] = &[
    "",
    " ",
    "Hello\nWorld",
    "\n\n\n\n",
    "Supercalifragilisticexpialidociousantidisestablishmentarianism",
    "مرحبا بالعالم hello عالم",
    "שלום עולם 123",
    "日本語のテキストは単語の間に空白がありません",
    "한국어 텍스트",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "e\u{301}\u{302}\u{303}\u{304}\u{305}\u{306}\u{307}\u{308}",
    "👩‍👩‍👧‍👦🏳️‍🌈👍🏽",
    "\u{202E}override\u{202C} \u{2067}isolate\u{2069}",
    "\u{200B}\u{200B}\u{FEFF}\u{00AD}\u{2028}\u{2029}",
    "ﷺ ﷽ ﬀﬁﬂﬃﬄ",
    "\u{10FFFF}\u{E000}\u{FFFD}",
];

/// The whole input past the template.
#[derive(Debug, Arbitrary)]
pub struct Request {
    pub packing: super::upload::Packing,
    theme: Option<NameChoice>,
    texts: Vec<(NameChoice, TextChoice)>,
    colors: Vec<(NameChoice, ColorChoice)>,
    images: Vec<(NameChoice, ImageChoice)>,
    scalars: Vec<(NameChoice, NumberChoice)>,
    vectors: Vec<(NameChoice, VectorChoice)>,
    gradients: Vec<(NameChoice, GradientChoice)>,
    output: OutputChoice,
}

/// A name among those the template has (a slot id of the kind at hand, a theme, a marker):
/// the `index`-th (modulo their number), or from [`MADE_UP_FROM`] on, `made` (mostly one the
/// template lacks). Mostly existing names, so that most requests pass admission.
#[derive(Debug, Arbitrary)]
pub(super) struct NameChoice {
    index: u8,
    pub(super) made: String,
}

/// Indices of a [`NameChoice`] from which it names its made-up name.
const MADE_UP_FROM: u8 = 248;

#[derive(Debug, Arbitrary)]
pub(super) enum TextChoice {
    Sample(u8),
    Repeated(u8, u8),
    Free(String),
}

/// A colour of 8-bit channels, or from [`WILD_FROM`] on one channel replaced by a wild
/// number (out of range, not finite).
#[derive(Debug, Arbitrary)]
pub(super) struct ColorChoice {
    rgb: [u8; 3],
    alpha: Option<u8>,
    wild: u8,
}

/// A number: a fraction of the range at hand (a scalar slot's min..=max, 0..=1 for an
/// offset, ±[`MAX_PROPERTY_MAGNITUDE`] otherwise), or from [`WILD_FROM`] on one of
/// [`WILD_NUMBERS`] or `free`.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) struct NumberChoice {
    step: u8,
    wild: u8,
    free: f64,
}

/// Values of [`ColorChoice::wild`] and [`NumberChoice::wild`] from which they are wild.
const WILD_FROM: u8 = 248;

/// Numbers at and past the edges of every range.
const WILD_NUMBERS: [f64; 10] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.0,
    -1.0,
    1.000_000_1,
    MAX_PROPERTY_MAGNITUDE * 1.000_001,
    f64::MAX,
    f64::MIN_POSITIVE,
    255.0,
];

fn wild_number(wild: u8, free: f64) -> f64 {
    WILD_NUMBERS
        .get(usize::from(wild - WILD_FROM))
        .copied()
        .unwrap_or(free)
}

/// Numbers cut or padded to the slot's dimension, or from [`WILD_FROM`] on as they are.
#[derive(Debug, Arbitrary)]
struct VectorChoice {
    numbers: Vec<NumberChoice>,
    shape: u8,
}

/// As many stops as the slot has, offsets in order, or from [`WILD_FROM`] on as they are.
#[derive(Debug, Arbitrary)]
struct GradientChoice {
    stops: Vec<(NumberChoice, ColorChoice)>,
    shape: u8,
}

/// A replacement image: encoded here in a format the service takes, cut short, or any
/// bytes; its fit one of the contract's, from [`WILD_FROM`] on one past them.
#[derive(Debug, Arbitrary)]
struct ImageChoice {
    source: ImageSource,
    fit: u8,
}

#[derive(Debug, Arbitrary)]
enum ImageSource {
    Png(ImageSize),
    Jpeg(ImageSize),
    Webp(ImageSize),
    CutPng(ImageSize, u8),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
struct ImageSize {
    width: u8,
    height: u8,
    seed: u8,
}

/// The output: a format of the window's kind (a still format for a still, an animated one
/// otherwise), or from [`WILD_FROM`] on one of the other kind; numbers mostly valid, from
/// [`WILD_FROM`] on the wild ones of [`WILD_FPS`] and [`WILD_SIZES`].
#[derive(Debug, Arbitrary)]
struct OutputChoice {
    window: WindowChoice,
    format: u8,
    format_wild: u8,
    fps: u8,
    width: u8,
    height: u8,
    /// From 224 on: 0 to 31 plays.
    loop_count: u8,
    poster: PosterChoice,
    quality: u8,
    background: Option<ColorChoice>,
}

#[derive(Debug, Arbitrary)]
enum WindowChoice {
    Whole,
    Still(TimeChoice),
    Segment(SegmentChoice),
}

#[derive(Debug, Arbitrary)]
enum PosterChoice {
    None,
    Middle,
    At(TimeChoice),
}

const WILD_FPS: [u32; 6] = [24, 25, 1, 120, 29, u32::MAX];
const WILD_SIZES: [u32; 6] = [99, 1921, 1, 4096, 65_536, u32::MAX];

/// A moment: a fraction of the duration (seconds), an output frame, a marker or any
/// seconds.
#[derive(Debug, Arbitrary)]
enum TimeChoice {
    Fraction(u8),
    Frame(u8),
    Marker(NameChoice),
    Seconds(NumberChoice),
}

#[derive(Debug, Arbitrary)]
enum SegmentChoice {
    /// From and to as fractions of the duration, in either order.
    Fractions(u8, u8),
    Marker(NameChoice),
    Seconds(NumberChoice, NumberChoice),
}

/// The formats of the contract that make stills, and those that make animations
/// (FORMAT_UNSPECIFIED is the request target's).
const STILL_FORMATS: [proto::Format; 3] =
    [proto::Format::Png, proto::Format::Jpeg, proto::Format::Webp];
const ANIMATED_FORMATS: [proto::Format; 8] = [
    proto::Format::Mp4,
    proto::Format::Webm,
    proto::Format::Gif,
    proto::Format::Webp,
    proto::Format::Apng,
    proto::Format::MovProres4444,
    proto::Format::Mp4Hevc,
    proto::Format::Mp4Av1,
];

/// The name `choice` picks of `names`; None when it names an existing one and there is
/// none (the request then leaves that part out, as a caller would).
pub(super) fn pick(choice: &NameChoice, names: &[&str]) -> Option<String> {
    match names.len() {
        _ if choice.index >= MADE_UP_FROM => Some(choice.made.clone()),
        0 => None,
        count => Some(names[usize::from(choice.index) % count].to_owned()),
    }
}

pub(super) fn text(choice: &TextChoice) -> String {
    let sample = |index: u8| SAMPLE_TEXTS[usize::from(index) % SAMPLE_TEXTS.len()];
    match choice {
        TextChoice::Sample(index) => sample(*index).to_owned(),
        TextChoice::Repeated(index, times) => sample(*index).repeat(usize::from(*times % 16)),
        TextChoice::Free(text) => text.clone(),
    }
}

pub(super) fn color(choice: &ColorChoice) -> proto::Color {
    let unit = |byte: u8| f64::from(byte) / 255.0;
    let [r, g, b] = choice.rgb;
    let mut color = proto::Color {
        r: unit(r),
        g: unit(g),
        b: unit(b),
        a: choice.alpha.map(unit),
    };
    if choice.wild >= WILD_FROM {
        let wild = wild_number(choice.wild, f64::from(choice.wild));
        match choice.wild % 4 {
            0 => color.r = wild,
            1 => color.g = wild,
            2 => color.b = wild,
            _ => color.a = Some(wild),
        }
    }
    color
}

/// `choice` within `min..=max` (infinite bounds taken at [`MAX_PROPERTY_MAGNITUDE`]).
pub(super) fn number(choice: NumberChoice, min: f64, max: f64) -> f64 {
    if choice.wild >= WILD_FROM {
        return wild_number(choice.wild, choice.free);
    }
    let min = min.max(-MAX_PROPERTY_MAGNITUDE);
    let max = max.min(MAX_PROPERTY_MAGNITUDE);
    min + (max - min) * f64::from(choice.step) / 255.0
}

/// The stops `choice` makes for a slot of `count` stops.
fn stops(choice: &GradientChoice, count: Option<usize>) -> Vec<proto::GradientStop> {
    let mut stops: Vec<proto::GradientStop> = choice
        .stops
        .iter()
        .map(|(offset, stop_color)| proto::GradientStop {
            offset: number(*offset, 0.0, 1.0),
            color: Some(color(stop_color)),
        })
        .collect();
    if let (true, Some(count)) = (choice.shape < WILD_FROM, count) {
        let fill = stops
            .last()
            .and_then(|stop| stop.color)
            .or(Some(proto::Color {
                r: 0.0,
                g: 0.0,
                b: 0.0,
                a: None,
            }));
        stops.resize(
            count,
            proto::GradientStop {
                offset: 1.0,
                color: fill,
            },
        );
        stops.sort_by(|a, b| a.offset.total_cmp(&b.offset));
    }
    stops
}

fn time_point(choice: &TimeChoice, duration: f64, markers: &[&str]) -> proto::TimePoint {
    use proto::time_point::Point;
    let point = match choice {
        TimeChoice::Fraction(step) => Point::Seconds(duration * f64::from(*step) / 255.0),
        TimeChoice::Frame(frame) => Point::Frame(u32::from(*frame)),
        TimeChoice::Marker(name) => match pick(name, markers) {
            Some(marker) => Point::Marker(marker),
            None => Point::Seconds(0.0),
        },
        TimeChoice::Seconds(seconds) => Point::Seconds(number(*seconds, 0.0, duration)),
    };
    proto::TimePoint { point: Some(point) }
}

fn segment(choice: &SegmentChoice, duration: f64, markers: &[&str]) -> proto::Segment {
    use proto::segment::Range;
    let seconds = |from: f64, to: f64| Range::Seconds(proto::SecondsRange { from, to });
    let range = match choice {
        SegmentChoice::Fractions(from, to) => {
            let at = |step: u8| duration * f64::from(step) / 255.0;
            seconds(at(*from.min(to)), at(*from.max(to)))
        }
        SegmentChoice::Marker(name) => match pick(name, markers) {
            Some(marker) => Range::Marker(marker),
            None => seconds(0.0, duration),
        },
        SegmentChoice::Seconds(from, to) => {
            seconds(number(*from, 0.0, duration), number(*to, 0.0, duration))
        }
    };
    proto::Segment { range: Some(range) }
}

/// `choice` of `valid`, or from [`WILD_FROM`] on of `wild`.
fn valid_or_wild(choice: u8, valid: &[u32], wild: &[u32]) -> u32 {
    match choice.checked_sub(WILD_FROM) {
        Some(index) => wild[usize::from(index) % wild.len()],
        None => valid[usize::from(choice) % valid.len()],
    }
}

fn size(choice: u8) -> u32 {
    match choice.checked_sub(WILD_FROM) {
        Some(index) => WILD_SIZES[usize::from(index) % WILD_SIZES.len()],
        // Unset (1080), or 100 + 7 × n pixels: within 100..=1920.
        None if choice == 0 => 0,
        None => 100 + 7 * u32::from(choice),
    }
}

fn output(choice: &OutputChoice, duration: f64, markers: &[&str]) -> proto::OutputSpec {
    let formats: &[proto::Format] = match (&choice.window, choice.format_wild >= WILD_FROM) {
        (WindowChoice::Still(_), false) => &STILL_FORMATS,
        (_, false) => &ANIMATED_FORMATS,
        (WindowChoice::Still(_), true) => &ANIMATED_FORMATS,
        (_, true) => &STILL_FORMATS,
    };
    let (at, segment) = match &choice.window {
        WindowChoice::Whole => (None, None),
        WindowChoice::Still(at) => (Some(time_point(at, duration, markers)), None),
        WindowChoice::Segment(range) => (None, Some(self::segment(range, duration, markers))),
    };
    // A still is its own poster: one asked for with it is refused (a wild format aside).
    let still = matches!(choice.window, WindowChoice::Still(_));
    let poster = match &choice.poster {
        _ if still && choice.format_wild < WILD_FROM => None,
        PosterChoice::None => None,
        PosterChoice::Middle => Some(proto::Poster { at: None }),
        PosterChoice::At(at) => Some(proto::Poster {
            at: Some(time_point(at, duration, markers)),
        }),
    };
    proto::OutputSpec {
        format: formats[usize::from(choice.format) % formats.len()] as i32,
        fps: valid_or_wild(choice.fps, &[30, 60, 0], &WILD_FPS),
        width: size(choice.width),
        height: size(choice.height),
        background: choice.background.as_ref().map(color),
        at,
        segment,
        quality: i32::from(choice.quality % 4),
        loop_count: choice.loop_count.checked_sub(224).map(u32::from),
        poster,
    }
}

/// A small image of `size` (at least 1×1) in a pattern of its seed, encoded as `encode`
/// writes it.
fn encoded(size: ImageSize, encode: fn(&image::RgbaImage, &mut Vec<u8>)) -> Vec<u8> {
    let (width, height) = (u32::from(size.width.max(1)), u32::from(size.height.max(1)));
    let seed = u32::from(size.seed);
    let pixels = image::RgbaImage::from_fn(width, height, |x, y| {
        let shade = |k: u32| ((x * k + y * (k + seed)) % 256) as u8;
        image::Rgba([shade(3), shade(5), shade(7), shade(11) | 0x80])
    });
    let mut bytes = Vec::new();
    encode(&pixels, &mut bytes);
    bytes
}

fn png(pixels: &image::RgbaImage, out: &mut Vec<u8>) {
    use image::ImageEncoder;
    let encoder = image::codecs::png::PngEncoder::new(out);
    // Encoding a well-formed buffer into memory does not fail; an empty image would be
    // refused downstream all the same.
    let _ = encoder.write_image(
        pixels.as_raw(),
        pixels.width(),
        pixels.height(),
        image::ExtendedColorType::Rgba8,
    );
}

fn jpeg(pixels: &image::RgbaImage, out: &mut Vec<u8>) {
    use image::ImageEncoder;
    let rgb = image::DynamicImage::ImageRgba8(pixels.clone()).into_rgb8();
    let _ = image::codecs::jpeg::JpegEncoder::new(out).write_image(
        rgb.as_raw(),
        rgb.width(),
        rgb.height(),
        image::ExtendedColorType::Rgb8,
    );
}

fn webp(pixels: &image::RgbaImage, out: &mut Vec<u8>) {
    use image::ImageEncoder;
    let _ = image::codecs::webp::WebPEncoder::new_lossless(out).write_image(
        pixels.as_raw(),
        pixels.width(),
        pixels.height(),
        image::ExtendedColorType::Rgba8,
    );
}

fn image_input(choice: &ImageChoice) -> proto::ImageInput {
    let data = match &choice.source {
        ImageSource::Png(size) => encoded(*size, png),
        ImageSource::Jpeg(size) => encoded(*size, jpeg),
        ImageSource::Webp(size) => encoded(*size, webp),
        ImageSource::CutPng(size, keep) => {
            let mut bytes = encoded(*size, png);
            bytes.truncate(bytes.len() * usize::from(*keep) / 256);
            bytes
        }
        ImageSource::Bytes(bytes) => bytes.clone(),
    };
    proto::ImageInput {
        source: Some(proto::image_input::Source::Data(data.into())),
        fit: match choice.fit.checked_sub(WILD_FROM) {
            Some(past) => 4 + i32::from(past),
            None => i32::from(choice.fit % 4),
        },
    }
}

/// The ids of each kind of slot of `slots`, by kind.
pub(super) struct SlotIds<'a> {
    pub(super) texts: Vec<&'a str>,
    pub(super) colors: Vec<&'a str>,
    pub(super) images: Vec<&'a str>,
    pub(super) scalars: Vec<&'a str>,
    pub(super) vectors: Vec<&'a str>,
    pub(super) gradients: Vec<&'a str>,
}

impl<'a> SlotIds<'a> {
    pub(super) fn of(slots: &'a Slots) -> SlotIds<'a> {
        // No `..`: a new kind of slot fails to compile here until it is generated.
        let Slots {
            colors,
            texts,
            images,
            scalars,
            vectors,
            gradients,
        } = slots;
        SlotIds {
            texts: texts.iter().map(|slot| slot.id.as_str()).collect(),
            colors: colors.iter().map(|slot| slot.id.as_str()).collect(),
            images: images.iter().map(|slot| slot.id.as_str()).collect(),
            scalars: scalars.iter().map(|slot| slot.id.as_str()).collect(),
            vectors: vectors.iter().map(|slot| slot.id.as_str()).collect(),
            gradients: gradients.iter().map(|slot| slot.id.as_str()).collect(),
        }
    }
}

/// The render request `request` describes for a template of `report`.
pub fn render_request(request: &Request, report: &InspectReport) -> proto::RenderRequest {
    let slots = &report.slots;
    let ids = SlotIds::of(slots);
    let themes: Vec<&str> = report.themes.keys().map(String::as_str).collect();
    let markers: Vec<&str> = report
        .markers
        .iter()
        .map(|marker| marker.name.as_str())
        .collect();
    let scalar_range = |id: &str| {
        slots
            .scalar(id)
            .map_or((-MAX_PROPERTY_MAGNITUDE, MAX_PROPERTY_MAGNITUDE), |slot| {
                (slot.min, slot.max)
            })
    };
    let vector = |id: &str, choice: &VectorChoice| {
        let mut values: Vec<f64> = choice
            .numbers
            .iter()
            .map(|value| number(*value, -MAX_PROPERTY_MAGNITUDE, MAX_PROPERTY_MAGNITUDE))
            .collect();
        if let (true, Some(slot)) = (choice.shape < WILD_FROM, slots.vector(id)) {
            values.resize(slot.default_value.len(), 0.0);
        }
        proto::Vector { values }
    };
    // Every field of the wire's modifications, no `..`: a new kind fails to compile here
    // until it is generated.
    let modifications = proto::Modifications {
        texts: request
            .texts
            .iter()
            .filter_map(|(slot, value)| Some((pick(slot, &ids.texts)?, text(value))))
            .collect(),
        colors: request
            .colors
            .iter()
            .filter_map(|(slot, value)| Some((pick(slot, &ids.colors)?, color(value))))
            .collect(),
        images: request
            .images
            .iter()
            .filter_map(|(slot, value)| Some((pick(slot, &ids.images)?, image_input(value))))
            .collect(),
        scalars: request
            .scalars
            .iter()
            .filter_map(|(slot, value)| {
                let id = pick(slot, &ids.scalars)?;
                let (min, max) = scalar_range(&id);
                let value = number(*value, min, max);
                Some((id, value))
            })
            .collect(),
        vectors: request
            .vectors
            .iter()
            .filter_map(|(slot, value)| {
                let id = pick(slot, &ids.vectors)?;
                let value = vector(&id, value);
                Some((id, value))
            })
            .collect(),
        gradients: request
            .gradients
            .iter()
            .filter_map(|(slot, value)| {
                let id = pick(slot, &ids.gradients)?;
                let count = slots.gradient(&id).map(|slot| slot.stop_count);
                let value = proto::Gradient {
                    stops: stops(value, count),
                };
                Some((id, value))
            })
            .collect(),
    };
    proto::RenderRequest {
        template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11".to_owned(),
        modifications: Some(modifications),
        output: Some(output(&request.output, report.duration_seconds, &markers)),
        notify: None,
        theme: request
            .theme
            .as_ref()
            .and_then(|theme| pick(theme, &themes))
            .unwrap_or_default(),
    }
}
