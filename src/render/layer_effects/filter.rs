//! The filters on a layer's pixels, as Chromium runs lottie-web's SVG filters: in linear light
//! (SVG's default `color-interpolation-filters`, which lottie-web's blur and shadow keep),
//! premultiplied, on `f32`.
//!
//! The Gaussian is approximated as the SVG specification (Filter Effects 1, `feGaussianBlur`)
//! lets a browser do: for σ ≥ 2 three successive box blurs, each a running sum, so the cost
//! does not grow with the radius; below 2 the exact kernel (at most 13 taps). The
//! specification's widths (d = ⌊σ·3·√(2π)/4 + 0.5⌋ for all three) round σ by up to 9 %
//! (σ = 6 blurs as 5.48); here each box is an extended box (Gwosdek, Grewenig, Bruhn and
//! Weickert, "Theoretical foundations of Gaussian convolution by extended box filtering",
//! 2011: a fractional weight on the pixel past each end) whose variance is exactly σ²/3, which
//! keeps a blurred edge within about 1 % of the error function's (the engine tests hold it). Pixels outside the image are transparent (lottie-web's
//! filter region reaches past the layer by its own size, where nothing is drawn).

use super::parameters::{FrameFilter, SIGMAS_OF_REACH};
use rlottie::Bgra;
use std::sync::OnceLock;

/// Premultiplied linear-light RGBA, row-major.
pub(super) struct Image {
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) pixels: Vec<[f32; 4]>,
}

/// A rectangle of pixels: x, y, width, height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Rect {
    pub(super) x: usize,
    pub(super) y: usize,
    pub(super) width: usize,
    pub(super) height: usize,
}

/// Entries of the transfer tables: enough that a step is below a thousandth of a level.
const TABLE_SIZE: usize = 4096;

fn srgb_to_linear(c: f64) -> f64 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn linear_to_srgb(c: f64) -> f64 {
    if c <= 0.003_130_8 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

/// `f` sampled at `TABLE_SIZE + 1` points of 0..=1.
fn table(f: fn(f64) -> f64) -> Vec<f32> {
    (0..=TABLE_SIZE)
        .map(|i| f(i as f64 / TABLE_SIZE as f64) as f32)
        .collect()
}

/// A table lookup with linear interpolation, `x` clamped to 0..=1.
fn lookup(table: &[f32], x: f32) -> f32 {
    let position = x.clamp(0.0, 1.0) * TABLE_SIZE as f32;
    let index = (position as usize).min(TABLE_SIZE - 1);
    let fraction = position - index as f32;
    table[index] + (table[index + 1] - table[index]) * fraction
}

fn to_linear_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| table(srgb_to_linear))
}

/// An opaque pixel's 8-bit level in linear light.
fn opaque_to_linear_table() -> &'static [f32; 256] {
    static TABLE: OnceLock<[f32; 256]> = OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|level| srgb_to_linear(level as f64 / 255.0) as f32))
}

/// Steps of the linear-to-sRGB table, read without interpolation: where the curve is steepest
/// (12.92 near black) a step is a fifth of a level.
const SRGB_STEPS: usize = 16384;

fn to_srgb_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=SRGB_STEPS)
            .map(|i| linear_to_srgb(i as f64 / SRGB_STEPS as f64) as f32)
            .collect()
    })
}

/// The smallest rectangle holding every pixel of `pixels` (`width` wide) with some alpha.
pub(super) fn content_bounds(pixels: &[Bgra], width: usize) -> Option<Rect> {
    let height = pixels.len() / width.max(1);
    let (mut left, mut right, mut top, mut bottom) = (usize::MAX, 0, usize::MAX, 0);
    for (y, row) in pixels.chunks_exact(width.max(1)).enumerate() {
        let Some(first) = row.iter().position(|pixel| pixel.a != 0) else {
            continue;
        };
        let last = row.iter().rposition(|pixel| pixel.a != 0).unwrap_or(first);
        left = left.min(first);
        right = right.max(last + 1);
        top = top.min(y);
        bottom = y + 1;
    }
    (top < height).then(|| Rect {
        x: left,
        y: top,
        width: right - left,
        height: bottom - top,
    })
}

/// `rect` grown by `by` pixels on every side, within `width` × `height`.
pub(super) fn grown(rect: Rect, by: usize, width: usize, height: usize) -> Rect {
    let x = rect.x.saturating_sub(by);
    let y = rect.y.saturating_sub(by);
    let right = (rect.x + rect.width).saturating_add(by).min(width);
    let bottom = (rect.y + rect.height).saturating_add(by).min(height);
    Rect {
        x,
        y,
        width: right - x,
        height: bottom - y,
    }
}

/// The pixels of `rect` of a premultiplied sRGB surface `width` wide, in linear light.
pub(super) fn to_linear(surface: &[Bgra], width: usize, rect: Rect, into: &mut Image) {
    let table = to_linear_table();
    let opaque = opaque_to_linear_table();
    into.width = rect.width;
    into.height = rect.height;
    into.pixels.clear();
    for y in rect.y..rect.y + rect.height {
        let row = &surface[y * width + rect.x..y * width + rect.x + rect.width];
        into.pixels.extend(row.iter().map(|pixel| {
            if pixel.a == 0 {
                return [0.0; 4];
            }
            if pixel.a == 255 {
                let channel = |c: u8| opaque[usize::from(c)];
                return [channel(pixel.r), channel(pixel.g), channel(pixel.b), 1.0];
            }
            let alpha = f32::from(pixel.a) / 255.0;
            let channel = |c: u8| lookup(table, f32::from(c) / 255.0 / alpha) * alpha;
            [channel(pixel.r), channel(pixel.g), channel(pixel.b), alpha]
        }));
    }
}

/// A linear-light pixel back to premultiplied sRGB.
pub(super) fn to_srgb(pixel: [f32; 4]) -> Bgra {
    let alpha = pixel[3].clamp(0.0, 1.0);
    if alpha < 0.5 / 255.0 {
        return Bgra {
            b: 0,
            g: 0,
            r: 0,
            a: 0,
        };
    }
    let table = to_srgb_table();
    let (unpremultiply, premultiply) = (1.0 / alpha, alpha * 255.0);
    let channel = |c: f32| {
        let straight = (c * unpremultiply).clamp(0.0, 1.0);
        (table[(straight * SRGB_STEPS as f32 + 0.5) as usize] * premultiply + 0.5) as u8
    };
    Bgra {
        b: channel(pixel[2]),
        g: channel(pixel[1]),
        r: channel(pixel[0]),
        a: (premultiply + 0.5) as u8,
    }
}

/// Runs `filter` on `image` in place; `scratch` is reused between calls.
pub(super) fn apply(filter: &FrameFilter, image: &mut Image, scratch: &mut Vec<[f32; 4]>) {
    match *filter {
        FrameFilter::Blur { sigma } => gaussian_blur(image, sigma, scratch),
        FrameFilter::Shadow {
            colour,
            opacity,
            offset,
            sigma,
        } => {
            // The flood colour in linear light, premultiplied by the layer's alpha.
            let flood = colour.map(|c| srgb_to_linear(c) as f32);
            let opacity = opacity as f32;
            let mut shadow = Image {
                width: image.width,
                height: image.height,
                pixels: image
                    .pixels
                    .iter()
                    .map(|pixel| {
                        let alpha = pixel[3] * opacity;
                        [flood[0] * alpha, flood[1] * alpha, flood[2] * alpha, alpha]
                    })
                    .collect(),
            };
            gaussian_blur(&mut shadow, sigma, scratch);
            // The layer over its shadow, moved by the offset (sampled bilinearly).
            let (width, height) = (image.width, image.height);
            let sample = |x: f64, y: f64| -> [f32; 4] {
                let (x0, y0) = (x.floor(), y.floor());
                let (fx, fy) = ((x - x0) as f32, (y - y0) as f32);
                let at = |xi: f64, yi: f64| {
                    if xi < 0.0 || yi < 0.0 || xi >= width as f64 || yi >= height as f64 {
                        [0.0; 4]
                    } else {
                        shadow.pixels[yi as usize * width + xi as usize]
                    }
                };
                let (a, b, c, d) = (
                    at(x0, y0),
                    at(x0 + 1.0, y0),
                    at(x0, y0 + 1.0),
                    at(x0 + 1.0, y0 + 1.0),
                );
                std::array::from_fn(|i| {
                    let top = a[i] + (b[i] - a[i]) * fx;
                    let bottom = c[i] + (d[i] - c[i]) * fx;
                    top + (bottom - top) * fy
                })
            };
            for y in 0..height {
                for x in 0..width {
                    let under = sample(x as f64 - offset[0], y as f64 - offset[1]);
                    let pixel = &mut image.pixels[y * width + x];
                    let keep = 1.0 - pixel[3];
                    *pixel = std::array::from_fn(|i| pixel[i] + under[i] * keep);
                }
            }
        }
    }
}

/// How far beyond the layer's pixels `filters` draw, in whole pixels.
pub(super) fn reach(filters: &[FrameFilter]) -> usize {
    let reach: f64 = filters.iter().map(FrameFilter::reach).sum();
    // Box blurs reach 1.5 d ≈ 2.82 σ, the exact kernel 3 σ: a pixel more for rounding.
    (reach.ceil() as usize).saturating_add(2)
}

/// Blurs `image` by `sigma` (x, y) in place.
pub(super) fn gaussian_blur(image: &mut Image, sigma: [f64; 2], scratch: &mut Vec<[f32; 4]>) {
    let (width, height) = (image.width, image.height);
    if width == 0 || height == 0 {
        return;
    }
    scratch.resize(image.pixels.len(), [0.0; 4]);
    for pass in passes(sigma[0]) {
        pass.run(&image.pixels, scratch, width, height, Axis::Rows);
        std::mem::swap(&mut image.pixels, scratch);
    }
    for pass in passes(sigma[1]) {
        pass.run(&image.pixels, scratch, width, height, Axis::Columns);
        std::mem::swap(&mut image.pixels, scratch);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Axis {
    Rows,
    Columns,
}

/// One pass along an axis: a box of `radius` pixels either side, with `end_weight` on the
/// pixel just past each end, or a kernel.
#[derive(Debug, Clone, PartialEq)]
enum Pass {
    Box { radius: usize, end_weight: f32 },
    Kernel(Vec<f32>),
}

/// Below this σ the exact kernel is used (the specification's threshold for boxes).
const BOX_SIGMA: f64 = 2.0;

/// The passes that blur by `sigma` along one axis (none for a σ too small to move a level).
fn passes(sigma: f64) -> Vec<Pass> {
    if sigma.is_nan() || sigma <= 0.05 {
        return Vec::new();
    }
    if sigma < BOX_SIGMA {
        let radius = (SIGMAS_OF_REACH * sigma).ceil() as i32;
        let weights: Vec<f64> = (-radius..=radius)
            .map(|i| (-f64::from(i * i) / (2.0 * sigma * sigma)).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        return vec![Pass::Kernel(
            weights.iter().map(|w| (w / total) as f32).collect(),
        )];
    }
    // Three extended boxes of σ²/3 each: a box of radius r with a fractional weight α on the
    // two pixels just past it, r and α solved for the variance (Gwosdek et al.).
    let variance = sigma * sigma / 3.0;
    let radius = ((0.5 * (12.0 * variance + 1.0).sqrt() - 0.5).floor()).max(0.0);
    let end_weight = (2.0 * radius + 1.0) * (radius * (radius + 1.0) - 3.0 * variance)
        / (6.0 * (variance - (radius + 1.0).powi(2)));
    vec![
        Pass::Box {
            radius: radius as usize,
            end_weight: end_weight.clamp(0.0, 1.0) as f32,
        };
        3
    ]
}

impl Pass {
    fn run(
        &self,
        input: &[[f32; 4]],
        output: &mut [[f32; 4]],
        width: usize,
        height: usize,
        axis: Axis,
    ) {
        match axis {
            Axis::Rows => {
                let mut padded = Vec::new();
                for (input, output) in input
                    .chunks_exact(width)
                    .zip(output.chunks_exact_mut(width))
                {
                    self.run_line(input, output, &mut padded);
                }
            }
            Axis::Columns => self.run_columns(input, output, width, height),
        }
    }

    /// Along one row; `padded` is reused between rows.
    fn run_line(&self, input: &[[f32; 4]], output: &mut [[f32; 4]], padded: &mut Vec<[f32; 4]>) {
        let length = input.len();
        match self {
            Pass::Box { radius, end_weight } => {
                let (radius, end_weight) = (*radius, *end_weight);
                let scale = 1.0 / (2.0 * radius as f32 + 1.0 + 2.0 * end_weight);
                // The row with r + 1 transparent pixels either side: the window of output i is
                // padded[i + 1 ..= i + 2r + 1], its two ends padded[i] and padded[i + 2r + 2].
                padded.clear();
                padded.resize(radius + 1, [0.0; 4]);
                padded.extend_from_slice(input);
                padded.resize(length + 2 * radius + 2, [0.0; 4]);
                let mut sum = [0.0f32; 4];
                for pixel in &padded[1..=2 * radius] {
                    add(&mut sum, pixel, 1.0);
                }
                for (i, out) in output.iter_mut().enumerate() {
                    add(&mut sum, &padded[i + 2 * radius + 1], 1.0);
                    let (before, after) = (padded[i], padded[i + 2 * radius + 2]);
                    *out = std::array::from_fn(|c| {
                        (sum[c] + end_weight * (before[c] + after[c])) * scale
                    });
                    add(&mut sum, &padded[i + 1], -1.0);
                }
            }
            Pass::Kernel(weights) => {
                let radius = weights.len() / 2;
                for (i, out) in output.iter_mut().enumerate() {
                    let mut sum = [0.0f32; 4];
                    let first = i.saturating_sub(radius);
                    let last = (i + radius).min(length - 1);
                    for (j, pixel) in input.iter().enumerate().take(last + 1).skip(first) {
                        add(&mut sum, pixel, weights[j + radius - i]);
                    }
                    *out = sum;
                }
            }
        }
    }

    /// Down the columns, a row at a time (each step reads and writes whole rows, in order).
    fn run_columns(
        &self,
        input: &[[f32; 4]],
        output: &mut [[f32; 4]],
        width: usize,
        height: usize,
    ) {
        let row_at = |y: isize| {
            usize::try_from(y)
                .ok()
                .filter(|y| *y < height)
                .map(|y| &input[y * width..(y + 1) * width])
        };
        match self {
            Pass::Box { radius, end_weight } => {
                let (radius, end_weight) = (*radius as isize, *end_weight);
                let scale = 1.0 / (2.0 * radius as f32 + 1.0 + 2.0 * end_weight);
                let mut sums = vec![[0.0f32; 4]; width];
                let add_row = |sums: &mut [[f32; 4]], y: isize, weight: f32| {
                    if let Some(row) = row_at(y) {
                        for (sum, pixel) in sums.iter_mut().zip(row) {
                            add(sum, pixel, weight);
                        }
                    }
                };
                for y in 0..radius {
                    add_row(&mut sums, y, 1.0);
                }
                for y in 0..height as isize {
                    add_row(&mut sums, y + radius, 1.0);
                    let out = &mut output[y as usize * width..(y as usize + 1) * width];
                    for (out, sum) in out.iter_mut().zip(&sums) {
                        *out = sum.map(|s| s * scale);
                    }
                    for edge in [y - radius - 1, y + radius + 1] {
                        if let (Some(row), true) = (row_at(edge), end_weight > 0.0) {
                            for (out, pixel) in out.iter_mut().zip(row) {
                                add(out, pixel, end_weight * scale);
                            }
                        }
                    }
                    add_row(&mut sums, y - radius, -1.0);
                }
            }
            Pass::Kernel(weights) => {
                let radius = weights.len() as isize / 2;
                for y in 0..height as isize {
                    let out = &mut output[y as usize * width..(y as usize + 1) * width];
                    out.fill([0.0; 4]);
                    for (offset, weight) in (-radius..=radius).zip(weights) {
                        if let Some(row) = row_at(y + offset) {
                            for (out, pixel) in out.iter_mut().zip(row) {
                                add(out, pixel, *weight);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn add(sum: &mut [f32; 4], pixel: &[f32; 4], weight: f32) {
    for c in 0..4 {
        sum[c] += pixel[c] * weight;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_extended_boxes_add_up_to_the_variance() {
        for sigma in [2.0, 3.3, 6.0, 10.0, 41.7] {
            let variance: f64 = passes(sigma)
                .iter()
                .map(|pass| match pass {
                    Pass::Box { radius, end_weight } => {
                        let (r, a) = (*radius as f64, f64::from(*end_weight));
                        ((2.0 * r + 1.0) * r * (r + 1.0) / 3.0 + 2.0 * a * (r + 1.0).powi(2))
                            / (2.0 * r + 1.0 + 2.0 * a)
                    }
                    Pass::Kernel(_) => panic!("boxes from σ 2"),
                })
                .sum();
            let spread = variance.sqrt();
            assert!((spread - sigma).abs() < 1e-4 * sigma, "σ {sigma}: {spread}");
        }
        assert!(passes(0.0).is_empty());
        assert!(matches!(passes(1.0)[..], [Pass::Kernel(_)]));
    }

    #[test]
    fn a_blur_keeps_the_total_and_spreads_a_point_by_sigma() {
        for sigma in [1.0, 3.0, 8.0] {
            let size = 121;
            let mut image = Image {
                width: size,
                height: 1,
                pixels: vec![[0.0; 4]; size],
            };
            image.pixels[60] = [1.0; 4];
            gaussian_blur(&mut image, [sigma, 0.0], &mut Vec::new());
            let total: f64 = image.pixels.iter().map(|p| f64::from(p[3])).sum();
            let variance: f64 = image
                .pixels
                .iter()
                .enumerate()
                .map(|(i, p)| f64::from(p[3]) * (i as f64 - 60.0).powi(2))
                .sum();
            assert!((total - 1.0).abs() < 1e-4, "σ {sigma}: total {total}");
            assert!(
                (variance.sqrt() - sigma).abs() < 0.01 * sigma,
                "σ {sigma}: {}",
                variance.sqrt()
            );
        }
    }

    #[test]
    fn linear_light_goes_there_and_back() {
        for level in [0u8, 1, 64, 128, 200, 255] {
            for alpha in [255u8, 128, 10] {
                let value = ((u32::from(level) * u32::from(alpha)) / 255) as u8;
                let pixel = Bgra {
                    b: value,
                    g: value,
                    r: value,
                    a: alpha,
                };
                let mut image = Image {
                    width: 0,
                    height: 0,
                    pixels: Vec::new(),
                };
                to_linear(
                    &[pixel],
                    1,
                    Rect {
                        x: 0,
                        y: 0,
                        width: 1,
                        height: 1,
                    },
                    &mut image,
                );
                let back = to_srgb(image.pixels[0]);
                assert!(
                    back.a == alpha && back.r.abs_diff(value) <= 1,
                    "{level} {alpha}: {back:?}"
                );
            }
        }
    }
}
