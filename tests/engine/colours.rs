//! Requested colours come back (DESIGN.md "Colour"): full-frame fills requested through a
//! colour slot, a translucent fill and a horizontal gradient, rendered to MP4, WebM (opaque and
//! with alpha) and GIF at an SD, an HD and an odd size, decoded with the ffmpeg CLI honouring
//! the stream's colour tags (as a player does), and every channel of every checked pixel
//! compared with the requested colour or with the gradient computed from its geometry.

use crate::helpers::{
    self, library_frames, probe, render_in_worker, spec, tempdir, with_background,
};
use lottie_render::encode::gif::MIN_FRAME_DELAY_CS;
use lottie_render::spec::{Format, Modifications, Rgba, Window};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(300);

/// A requested flat colour decodes within this many codes (of 255) per channel: the promise in
/// DESIGN.md "Colour" (limited-range 8-bit YUV cannot carry every sRGB value exactly).
const SOLID_TOLERANCE: f64 = 2.0;

/// GIF fills are exact: a flat colour is one palette entry, with nothing to dither.
const GIF_SOLID_TOLERANCE: f64 = 0.0;

/// A gradient has no flat colour to land on, and misses DESIGN.md's 2/255 by design of the
/// formats, not of our conversion: rlottie draws its ramp from a colour table in 8-bit steps
/// (up to `RLOTTIE_RAMP_TOLERANCE` off before any encoding, measured by
/// `rlottie_draws_the_gradient_ramp_close_to_its_geometry`; its table's alpha of 254 is read as
/// opaque by `src/encode/yuv.rs`), 8-bit limited-range 4:2:0 cannot carry a slope exactly (the
/// exact ramp converted in f64, rounded to 8-bit YUV and encoded losslessly with VP9 decodes up
/// to 2.10 off, at the last column, where the decoder's chroma interpolation runs out), the
/// lossy encoders add about one code on a slope, and GIF dithers over a 256-colour palette.
/// Measured worst pixel over every frame after the SIMD conversion (issue 11): MP4 3.30
/// (640×480), 3.85 (1280×720), 3.76 (333×251, 16 px from the padding); WebM at CRF 18 2.94,
/// 3.30, 3.00; GIF 2.59, 3.03, 2.58 (before: MP4 up to 4.80, WebM 4.35 at CRF 31). Tolerance:
/// the worst of those plus a sixth of a code for encoder variation.
const GRADIENT_TOLERANCE: f64 = 4.0;

/// The gradient's tolerance in `format`: [`GRADIENT_TOLERANCE`] for the lossy ones, rlottie's
/// own ramp for the lossless RGBA ones (PNG, APNG), which add nothing to it.
/// HEVC (x265 `ultrafast`, measured 4.14 at 640×480 whether CRF 22 or 24, so its loop filter
/// rather than its quantiser) and WebP (measured 4.55 at 333×251, decoded by image-webp, which
/// upsamples chroma without libwebp's "fancy" filter) get half a code more.
fn gradient_tolerance(format: Format) -> f64 {
    match format {
        Format::Png | Format::Apng => RLOTTIE_RAMP_TOLERANCE,
        Format::Hevc | Format::Webp => GRADIENT_TOLERANCE + 0.75,
        _ => GRADIENT_TOLERANCE,
    }
}

/// rlottie's own ramp against the geometry, before any encoder: measured 1.86 (640×480).
const RLOTTIE_RAMP_TOLERANCE: f64 = 2.0;

/// MP4 at an odd size carries a column or row of background as padding (4:2:0 needs even
/// sides); H.264's block transform spreads that sharp step into the macroblock beside it
/// (measured: fills up to 38/255 off beside the padding and still 3/255 eight pixels in, the
/// gradient 6/255 eight pixels in; within tolerance 16 pixels in), so the pixels this close to
/// the padding are not checked: one 16-pixel macroblock.
const MP4_PADDING_MARGIN: u32 = 16;

/// HEVC and AV1 code blocks of up to 64×64 pixels, so the padding's step spreads further:
/// measured at 333×251, flat fills up to 6/255 off within 30 pixels of it. One 64-pixel block.
const HEVC_AV1_PADDING_MARGIN: u32 = 64;

/// Frames per output: two, so that MP4 and WebM carry an inter-coded frame after the key frame
/// and both kinds are checked, while renders stay quick.
const FRAMES: u32 = 2;
const FPS: u32 = 30;

/// The slot the solid fills are requested through (the fill item's `nm`, as templates name them).
const FILL_SLOT: &str = "fill";

/// Opaque fills: brand colours, white, black and a mid grey.
const SOLIDS: [&str; 7] = [
    "#AF52DE", "#34C759", "#FF3B30", "#007AFF", "#FFFFFF", "#000000", "#808080",
];

/// A translucent fill: WebM keeps it as straight colour plus alpha; MP4 composites it over
/// `BACKGROUND`. GIF has one-bit transparency, so it is checked with opaque fills only.
const TRANSLUCENT: &str = "#007AFF80";

/// MP4's background (its padding at odd sizes, and what the translucent fill is composited
/// over); unlike every colour checked, so a fill that let it through would show.
const BACKGROUND: &str = "#202020";

/// The horizontal gradient, start colour at the left edge, end colour at the right.
const GRADIENT: (&str, &str) = ("#AF52DE", "#34C759");

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Solid,
    Translucent,
    Gradient,
}

struct Case {
    kind: Kind,
    /// The requested colour (`#RRGGBB[AA]`); the gradient's start for a gradient.
    colour: &'static str,
}

fn cases(format: Format) -> Vec<Case> {
    let mut cases: Vec<Case> = SOLIDS
        .iter()
        .map(|colour| Case {
            kind: Kind::Solid,
            colour,
        })
        .collect();
    if format != Format::Gif {
        cases.push(Case {
            kind: Kind::Translucent,
            colour: TRANSLUCENT,
        });
    }
    cases.push(Case {
        kind: Kind::Gradient,
        colour: GRADIENT.0,
    });
    cases
}

fn hex(colour: &str) -> [u8; 4] {
    Rgba::parse_hex(colour)
        .unwrap_or_else(|error| panic!("{colour}: {error}"))
        .to_rgba8()
}

fn static_value(value: Value) -> Value {
    json!({"a": 0, "k": value})
}

/// A Lottie file of the output's own size (so nothing is scaled): one shape layer whose
/// rectangle spans `[x0, x1) × [y0, y1)`, painted by `paint`.
fn template(width: u32, height: u32, rectangle: [u32; 4], paint: Value) -> Value {
    let [x0, y0, x1, y1] = rectangle.map(f64::from);
    json!({
        "v": "5.7.0", "fr": FPS, "ip": 0, "op": FRAMES, "w": width, "h": height,
        "nm": "colours", "ddd": 0, "assets": [],
        "layers": [{
            "ddd": 0, "ind": 1, "ty": 4, "nm": "layer", "sr": 1, "ip": 0, "op": FRAMES, "st": 0,
            "bm": 0, "ao": 0,
            "ks": {
                "o": static_value(json!(100)), "r": static_value(json!(0)),
                "p": static_value(json!([0, 0, 0])), "a": static_value(json!([0, 0, 0])),
                "s": static_value(json!([100, 100, 100]))
            },
            "shapes": [{"ty": "gr", "nm": "group", "it": [
                {"ty": "rc", "nm": "rectangle", "d": 1, "r": static_value(json!(0)),
                 "s": static_value(json!([x1 - x0, y1 - y0])),
                 "p": static_value(json!([(x0 + x1) / 2.0, (y0 + y1) / 2.0]))},
                paint,
                {"ty": "tr", "p": static_value(json!([0, 0])), "a": static_value(json!([0, 0])),
                 "s": static_value(json!([100, 100])), "r": static_value(json!(0)),
                 "o": static_value(json!(100)), "sk": static_value(json!(0)),
                 "sa": static_value(json!(0))}
            ]}]
        }]
    })
}

/// Black in the template: the colour comes in through the slot, the way callers' brand
/// colours do, so a modification that did not reach the pixels shows as black.
fn slot_fill() -> Value {
    json!({"ty": "fl", "nm": FILL_SLOT, "c": static_value(json!([0, 0, 0, 1])),
           "o": static_value(json!(100)), "r": 1})
}

/// A two-stop linear gradient from the left edge (x = 0) to the right edge (x = width).
fn gradient_fill(width: u32) -> Value {
    let (start, end) = (hex(GRADIENT.0), hex(GRADIENT.1));
    let unit = |c: u8| f64::from(c) / 255.0;
    let stops = [
        0.0,
        unit(start[0]),
        unit(start[1]),
        unit(start[2]),
        1.0,
        unit(end[0]),
        unit(end[1]),
        unit(end[2]),
    ];
    json!({"ty": "gf", "nm": "gradient", "o": static_value(json!(100)), "r": 1, "t": 1,
           "s": static_value(json!([0, 0])), "e": static_value(json!([width, 0])),
           "g": {"p": 2, "k": static_value(json!(stops))}})
}

fn write_template(dir: &Path, name: &str, template: &Value) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, template.to_string()).unwrap();
    path
}

/// Decodes every frame to straight RGBA at the encoded size. The auto-inserted scaler of the
/// ffmpeg CLI takes the YUV matrix and range from the stream's tags (checked by
/// `the_decoder_used_here_honours_the_streams_matrix_tag`); `accurate_rnd` and
/// `full_chroma_int` make it convert in full precision with interpolated chroma, as a player's
/// float shader does (its default fast path is up to 2/255 off on its own). libvpx-vp9 decodes
/// WebM so the alpha plane is decoded too.
fn decode(path: &Path, width: u32, height: u32) -> Vec<Vec<u8>> {
    // FFmpeg has no decoder for animated WebP; the image crate's (image-webp) decodes it.
    if path.extension().is_some_and(|e| e == "webp") {
        return helpers::decode_webp(path);
    }
    helpers::decode_rgba_through(
        path,
        width,
        height,
        &["-vf", "scale=flags=accurate_rnd+full_chroma_int"],
    )
}

/// The largest difference between a decoded channel and the expected one, and where.
#[derive(Debug)]
struct Worst {
    error: f64,
    frame: usize,
    x: u32,
    y: u32,
    got: [u8; 4],
    want: [f64; 4],
}

/// Compares every channel of every pixel in `[0, columns) × [0, rows)` of every frame with
/// `expected(x)` (straight RGBA, 0..=255).
fn worst_error(
    frames: &[Vec<u8>],
    stride: u32,
    columns: u32,
    rows: u32,
    expected: impl Fn(u32) -> [f64; 4],
) -> Worst {
    // Below any error, so the first pixel is always recorded.
    let mut worst = Worst {
        error: -1.0,
        frame: 0,
        x: 0,
        y: 0,
        got: [0; 4],
        want: [0.0; 4],
    };
    // The expectation depends on the column only: computed once per column, not per pixel
    // (the suite's test build is unoptimised, and a 1280×720 video has millions of pixels).
    let wanted: Vec<[f64; 4]> = (0..columns).map(expected).collect();
    for (frame_index, frame) in frames.iter().enumerate() {
        for y in 0..rows {
            for (x, &want) in (0..columns).zip(&wanted) {
                let at = ((y * stride + x) * 4) as usize;
                let got: [u8; 4] = frame[at..at + 4].try_into().unwrap();
                let error = (0..4)
                    .map(|c| (f64::from(got[c]) - want[c]).abs())
                    .fold(0.0, f64::max);
                if error > worst.error {
                    worst = Worst {
                        error,
                        frame: frame_index,
                        x,
                        y,
                        got,
                        want,
                    };
                }
            }
        }
    }
    worst
}

/// The straight-alpha colour as the decoded output must show it: MP4 has no alpha, so the
/// colour composited over its background.
fn expected_colour(format: Format, colour: [u8; 4]) -> [f64; 4] {
    let [r, g, b, a] = colour.map(f64::from);
    if !format.has_alpha() {
        let under = hex(BACKGROUND).map(f64::from);
        let share = a / 255.0;
        let over = |c: f64, u: f64| c * share + u * (1.0 - share);
        [
            over(r, under[0]),
            over(g, under[1]),
            over(b, under[2]),
            255.0,
        ]
    } else {
        [r, g, b, a]
    }
}

/// The gradient at column `x` from its geometry alone: a linear ramp in sRGB from the start
/// colour at x = 0 to the end colour at x = width, sampled at the pixel's centre.
fn expected_gradient(width: u32, x: u32) -> [f64; 4] {
    let (start, end) = (hex(GRADIENT.0), hex(GRADIENT.1));
    let t = (f64::from(x) + 0.5) / f64::from(width);
    let ramp = |c: usize| f64::from(start[c]) + (f64::from(end[c]) - f64::from(start[c])) * t;
    [ramp(0), ramp(1), ramp(2), 255.0]
}

struct Measured {
    case: String,
    tolerance: f64,
    worst: Worst,
}

/// Renders every case of `format` at `width × height`, decodes each output and compares it;
/// fails with the whole table when any case is out of tolerance.
fn colours_come_back(format: Format, width: u32, height: u32) {
    colours_come_back_in(format, None, width, height);
}

/// The MP4s round odd sides up to even with a pixel of background (4:2:0 chroma is 2×2).
fn padded(format: Format) -> bool {
    matches!(format, Format::Mp4 | Format::Hevc | Format::Av1)
}

/// [`colours_come_back`] for `format` showing `window` (a still: one frame).
pub(crate) fn colours_come_back_in(
    format: Format,
    window: Option<Window>,
    width: u32,
    height: u32,
) {
    let dir = tempdir();
    let (encoded_width, encoded_height) = if padded(format) {
        (width + width % 2, height + height % 2)
    } else {
        (width, height)
    };
    // The pixels checked: all of them, except in the MP4s at an odd size those beside the
    // padding.
    let beside_padding = |side: u32| {
        if padded(format) && side % 2 == 1 {
            side - if format == Format::Mp4 {
                MP4_PADDING_MARGIN
            } else {
                HEVC_AV1_PADDING_MARGIN
            }
        } else {
            side
        }
    };
    let (columns, rows) = (beside_padding(width), beside_padding(height));
    let full_frame = [0, 0, width, height];
    let solid_template = write_template(
        dir.path(),
        "solid",
        &template(width, height, full_frame, slot_fill()),
    );
    let gradient_template = write_template(
        dir.path(),
        "gradient",
        &template(width, height, full_frame, gradient_fill(width)),
    );
    let mut output = with_background(
        spec(format, FPS, width, height),
        Rgba::parse_hex(BACKGROUND).unwrap(),
    );
    output.window = window;
    let mut measured = Vec::new();
    for case in cases(format) {
        let mut modifications = Modifications::default();
        let template = if case.kind == Kind::Gradient {
            &gradient_template
        } else {
            modifications
                .colors
                .insert(FILL_SLOT.to_owned(), Rgba::parse_hex(case.colour).unwrap());
            &solid_template
        };
        let (path, result) =
            render_in_worker(template, modifications, output, dir.path(), DEADLINE);
        result.unwrap_or_else(|failure| panic!("{format:?} {}: {failure}", case.colour));
        let frames = decode(&path, encoded_width, encoded_height);
        // A still is one frame (GIF, APNG and WebP fold a held frame into the one before).
        if window.is_some() {
            assert_eq!(frames.len(), 1, "{format:?} {}", case.colour);
        }
        let (label, tolerance, worst) = match case.kind {
            Kind::Gradient => (
                format!("{}→{}", GRADIENT.0, GRADIENT.1),
                gradient_tolerance(format),
                worst_error(&frames, encoded_width, columns, rows, |x| {
                    expected_gradient(width, x)
                }),
            ),
            Kind::Solid | Kind::Translucent => {
                let want = expected_colour(format, hex(case.colour));
                let tolerance = match format {
                    Format::Gif | Format::Png | Format::Apng => GIF_SOLID_TOLERANCE,
                    _ => SOLID_TOLERANCE,
                };
                (
                    case.colour.to_owned(),
                    tolerance,
                    worst_error(&frames, encoded_width, columns, rows, |_| want),
                )
            }
        };
        measured.push(Measured {
            case: label,
            tolerance,
            worst,
        });
    }
    let mut table = String::new();
    for Measured {
        case,
        tolerance,
        worst,
    } in &measured
    {
        let _ = writeln!(
            table,
            "{format:?} {width}×{height} {case:<18} max error {:>5.2} (tolerance {tolerance}) at frame {} ({}, {}): got {:?}, want [{:.1}, {:.1}, {:.1}, {:.1}]",
            worst.error, worst.frame, worst.x, worst.y, worst.got,
            worst.want[0], worst.want[1], worst.want[2], worst.want[3],
        );
    }
    println!("{table}");
    assert!(
        measured
            .iter()
            .all(|measured| measured.worst.error <= measured.tolerance),
        "colours off by more than the tolerance:\n{table}"
    );
}

/// rlottie's gradient alone, before any encoder: the frame the library renders against the
/// ramp computed from the geometry. The encoded gradients' tolerance builds on this.
#[test]
fn rlottie_draws_the_gradient_ramp_close_to_its_geometry() {
    let (width, height) = (640, 480);
    let template = template(width, height, [0, 0, width, height], gradient_fill(width));
    let output = spec(Format::Webm, FPS, width, height);
    let fonts = lottie_render::lottie::lowering::text::fonts::FontBook::default();
    let bytes = template.to_string().into_bytes();
    let rgba = library_frames(&bytes, &Modifications::default(), &fonts, output, [0]).remove(0);
    let worst = worst_error(&[rgba], width, width, height, |x| {
        expected_gradient(width, x)
    });
    println!(
        "rlottie's ramp: max error {:.2} at ({}, {})",
        worst.error, worst.x, worst.y
    );
    assert!(
        worst.error <= RLOTTIE_RAMP_TOLERANCE,
        "rlottie's ramp is {:.2} off at ({}, {}): got {:?}, want {:?}",
        worst.error,
        worst.x,
        worst.y,
        worst.got,
        worst.want
    );
}

/// GIF transparency is one bit: where the template draws nothing the GIF must decode as
/// alpha 0, and the fill, exactly its colour. The rectangle's edges are on whole pixels, so
/// every pixel is either fully inside or fully outside (no anti-aliased edge to excuse).
#[test]
fn gif_keeps_a_transparent_background_transparent_and_the_fill_exact() {
    let dir = tempdir();
    let (width, height) = (333, 251);
    let rectangle = [width / 4, height / 4, 3 * width / 4, 3 * height / 4];
    let template = write_template(
        dir.path(),
        "centred",
        &template(width, height, rectangle, slot_fill()),
    );
    let colour = "#34C759";
    let mut modifications = Modifications::default();
    modifications
        .colors
        .insert(FILL_SLOT.to_owned(), Rgba::parse_hex(colour).unwrap());
    let (path, result) = render_in_worker(
        &template,
        modifications,
        spec(Format::Gif, FPS, width, height),
        dir.path(),
        DEADLINE,
    );
    result.unwrap();
    let frames = decode(&path, width, height);
    let want = hex(colour);
    let [x0, y0, x1, y1] = rectangle;
    let (mut inside, mut outside) = (0usize, 0usize);
    for (index, frame) in frames.iter().enumerate() {
        for (pixel, got) in frame.chunks_exact(4).enumerate() {
            let (x, y) = (pixel as u32 % width, pixel as u32 / width);
            if (x0..x1).contains(&x) && (y0..y1).contains(&y) {
                inside += 1;
                assert_eq!(got, want, "frame {index} ({x}, {y}) inside the fill");
            } else {
                outside += 1;
                assert_eq!(
                    got[3], 0,
                    "frame {index} ({x}, {y}) outside the fill: {got:?}"
                );
            }
        }
    }
    assert!(
        inside > 0 && outside > 0,
        "{inside} inside, {outside} outside"
    );
}

/// Template frames of the frame-count test that each show the next colour of `SOLIDS`.
const CHANGING_FRAMES: u32 = 30;
/// Template frames after those that hold one colour (a still stretch gifski must fold).
const STILL_FRAMES: u32 = 30;

/// GIF frame counts exact (docs/architecture.md, "Render and encode"): a 2 s template whose fill takes the next of
/// the seven `SOLIDS` every frame for 1 s (no colour back within gifski's five-frame look-ahead,
/// so nothing looks like flicker to its denoiser) and then holds one colour for 1 s. The
/// expected frames come from the plan alone: at 60 fps a frame is kept when it lands 2 cs or
/// more after the last kept one, and a kept frame showing the same colour as the one before is
/// folded into it. The GIF's frames are decoded one by one (no frame-rate conversion) and must
/// show exactly that sequence of colours, exactly.
#[test]
fn gif_frames_are_exactly_the_kept_changes_at_30_and_60_fps() {
    let dir = tempdir();
    let (width, height) = (100, 100);
    let total = CHANGING_FRAMES + STILL_FRAMES;
    let colour_of = |template_frame: u32| {
        if template_frame < CHANGING_FRAMES {
            SOLIDS[template_frame as usize % SOLIDS.len()]
        } else {
            "#FFCC00"
        }
    };
    let keyframes: Vec<Value> = (0..=CHANGING_FRAMES)
        .map(|frame| {
            let [r, g, b, _] = hex(colour_of(frame)).map(|c| f64::from(c) / 255.0);
            json!({"t": frame, "s": [r, g, b, 1], "h": 1})
        })
        .collect();
    let paint = json!({"ty": "fl", "nm": "changing", "o": static_value(json!(100)), "r": 1,
                       "c": {"a": 1, "k": keyframes}});
    let mut plan = template(width, height, [0, 0, width, height], paint);
    plan["op"] = json!(total);
    plan["layers"][0]["op"] = json!(total);
    let path = write_template(dir.path(), "changing", &plan);
    for fps in [30, 60] {
        // Output frame `index` shows template frame `index × 30 / fps` (hold keyframes).
        let mut expected: Vec<&str> = Vec::new();
        let mut last_kept_cs: Option<i64> = None;
        for index in 0..total * fps / FPS {
            let timestamp_cs = (f64::from(index) * 100.0 / f64::from(fps)).round() as i64;
            if last_kept_cs.is_some_and(|last| timestamp_cs - last < MIN_FRAME_DELAY_CS) {
                continue;
            }
            last_kept_cs = Some(timestamp_cs);
            let colour = colour_of(index * FPS / fps);
            if expected.last() != Some(&colour) {
                expected.push(colour);
            }
        }
        let (output, result) = render_in_worker(
            &path,
            Modifications::default(),
            spec(Format::Gif, fps, width, height),
            dir.path(),
            DEADLINE,
        );
        assert_eq!(result.unwrap().frame_count, total * fps / FPS);
        assert_eq!(
            probe(&output).frames as usize,
            expected.len(),
            "{fps} fps: frames in the gif"
        );
        let decoded = Command::new("ffmpeg")
            .args(["-v", "error", "-i"])
            .arg(&output)
            .args([
                "-fps_mode",
                "passthrough",
                "-f",
                "rawvideo",
                "-pix_fmt",
                "rgba",
                "-",
            ])
            .output()
            .expect("ffmpeg runs");
        assert!(decoded.status.success());
        let shown: Vec<[u8; 4]> = decoded
            .stdout
            .chunks((width * height * 4) as usize)
            .map(|frame| {
                let first: [u8; 4] = frame[..4].try_into().unwrap();
                assert!(
                    frame.chunks(4).all(|pixel| pixel == first),
                    "{fps} fps: a frame is not one flat colour"
                );
                first
            })
            .collect();
        let wanted: Vec<[u8; 4]> = expected.iter().map(|colour| hex(colour)).collect();
        assert_eq!(shown, wanted, "{fps} fps: colours of the gif's frames");
    }
}

/// The colour tests above rely on the decoder taking the YUV matrix from the stream's tags,
/// as players do, so that they hold whichever matrix the encoders use. ffmpeg itself encodes
/// a known colour here with the BT.709 and with the BT.601 matrix, each tagged as such
/// (lossless, accurate conversion); both must decode to that colour. A decoder that ignored
/// the tag would put one of them about 19/255 off in green.
#[test]
fn the_decoder_used_here_honours_the_streams_matrix_tag() {
    let dir = tempdir();
    let (width, height) = (64u32, 64u32);
    let colour = hex("#AF52DE");
    let raw = dir.path().join("frame.rgb");
    std::fs::write(&raw, colour[..3].repeat((width * height) as usize)).unwrap();
    for (matrix, tag) in [("bt709", "bt709"), ("bt601", "smpte170m")] {
        let path = dir.path().join(format!("{tag}.mp4"));
        let mut command = Command::new("ffmpeg");
        command
            .args(["-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24"])
            .args(["-s", &format!("{width}x{height}"), "-r", "30", "-i"])
            .arg(&raw)
            .args([
                "-vf",
                &format!(
                    "scale=out_color_matrix={matrix}:out_range=tv:flags=accurate_rnd+full_chroma_int,format=yuv420p"
                ),
            ])
            .args(["-c:v", "libx264", "-qp", "0", "-colorspace", tag, "-color_range", "tv"])
            .arg(&path);
        helpers::run_ok(&mut command, "ffmpeg", &path);
        let frames = decode(&path, width, height);
        // Lossless YUV at 8 bits: the exact inverse lands within half a code, rounding adds one.
        let worst = worst_error(&frames, width, width, height, |_| colour.map(f64::from));
        assert!(
            worst.error <= 1.0,
            "tagged {tag}: decoded {:?}, want {colour:?}",
            worst.got
        );
    }
}

macro_rules! colour_tests {
    ($($name:ident => ($format:expr, $width:literal, $height:literal),)*) => {
        $(
            #[test]
            fn $name() {
                colours_come_back($format, $width, $height);
            }
        )*
    };
}

colour_tests! {
    mp4_at_640_by_480_decodes_to_the_requested_colours => (Format::Mp4, 640, 480),
    mp4_at_1280_by_720_decodes_to_the_requested_colours => (Format::Mp4, 1280, 720),
    mp4_at_333_by_251_decodes_to_the_requested_colours => (Format::Mp4, 333, 251),
    webm_at_640_by_480_decodes_to_the_requested_colours_and_alpha => (Format::Webm, 640, 480),
    webm_at_1280_by_720_decodes_to_the_requested_colours_and_alpha => (Format::Webm, 1280, 720),
    webm_at_333_by_251_decodes_to_the_requested_colours_and_alpha => (Format::Webm, 333, 251),
    gif_at_640_by_480_decodes_to_the_requested_colours => (Format::Gif, 640, 480),
    gif_at_1280_by_720_decodes_to_the_requested_colours => (Format::Gif, 1280, 720),
    gif_at_333_by_251_decodes_to_the_requested_colours => (Format::Gif, 333, 251),
    apng_at_333_by_251_decodes_to_the_requested_colours_and_alpha => (Format::Apng, 333, 251),
    webp_at_333_by_251_decodes_to_the_requested_colours_and_alpha => (Format::Webp, 333, 251),
    prores_at_333_by_251_decodes_to_the_requested_colours_and_alpha => (Format::Mov, 333, 251),
    hevc_at_333_by_251_decodes_to_the_requested_colours => (Format::Hevc, 333, 251),
    av1_at_333_by_251_decodes_to_the_requested_colours => (Format::Av1, 333, 251),
    hevc_at_640_by_480_decodes_to_the_requested_colours => (Format::Hevc, 640, 480),
}

macro_rules! still_colour_tests {
    ($($name:ident => $format:expr,)*) => {
        $(
            #[test]
            fn $name() {
                // The second frame, so a still of the first would not pass unseen.
                colours_come_back_in($format, Some(Window::Still { frame: 1 }), 333, 251);
            }
        )*
    };
}

still_colour_tests! {
    png_still_at_333_by_251_decodes_to_the_requested_colours_and_alpha => Format::Png,
    jpeg_still_at_333_by_251_decodes_to_the_requested_colours => Format::Jpeg,
    webp_still_at_333_by_251_decodes_to_the_requested_colours_and_alpha => Format::Webp,
}
