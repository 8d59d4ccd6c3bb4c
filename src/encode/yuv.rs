//! Rendered frames to the video encoders' YUV 4:2:0 planes in one pass: rlottie's premultiplied
//! BGRA, two rows at a time, composited over the background (MP4) or un-premultiplied (WebM,
//! whose alpha becomes a fourth plane), to limited-range Y′CbCr with the BT.601 matrix (what
//! the streams are tagged with; `video.rs` says why BT.601). Runs on the render threads.
//!
//! The arithmetic, which the scalar code here (the reference, and the tail of every row) and
//! the AVX2 kernel in [`avx2`] do bit for bit (a unit test holds them to it):
//! - luma per pixel; chroma from each 2×2 block (chroma sited at the block's centre);
//! - coefficients in units of 1/32768 (at most 0.008 of a code off the exact ones over 0..255),
//!   sums in i32, rounding to nearest (halves up); Cb has a 0.42% gain so that Chromium, whose
//!   libyuv decodes blue with a capped coefficient, shows the colour too ([`CB_GAIN`]);
//! - MP4: every pixel composited over the background exactly as `pixels.rs` did (integer
//!   `p + bg·(255 − α)/255`, rounded); the padding of odd sizes is background; chroma from the
//!   mean of the four composited pixels;
//! - WebM: luma of the straight colour `255·p/α`, computed as `255·Y(p)/α` in f32 (one division
//!   a pixel instead of three, and no rounding of the straight colour on the way); chroma of the
//!   alpha-weighted mean colour of the block, `255·Σp/Σα`. Weighting by alpha keeps a block
//!   half covered by a colour at that colour's chroma: a plain mean would mix in the transparent
//!   pixels' black and desaturate every anti-aliased edge once a player composites it. A fully
//!   transparent block gets neutral chroma (it is invisible). Pixels past an odd edge count as
//!   transparent.
//!
//! Why our own kernel rather than a crate (`yuv`, `dcv-color-primitives`): those convert straight
//! RGB(A), so they would need a staging pass to composite or un-premultiply first (another trip
//! over every pixel), and none computes alpha-weighted chroma. Fused, each source byte is read
//! once and the whole conversion costs about what the staging pass alone did.

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2;

use rlottie::Bgra;

/// Luma coefficients for R, G, B: BT.601 (Kr 0.299, Kb 0.114) scaled to limited range
/// (219/255) in units of 1/32768, each rounded to nearest.
const LUMA_FROM_RGB: [i32; 3] = [8414, 16519, 3208];
/// Cb coefficients: 224/255 × (−Kr, −Kg, 1 − Kb) / (2 − 2Kb) in 1/32768, times
/// [`CB_GAIN`], rounded so they sum to 0 (a grey is exactly neutral).
const CB_FROM_RGB: [i32; 3] = [-4877, -9575, 14452];
/// Cb is 0.42% stronger than BT.601's, to split the difference between the two U→B
/// coefficients players decode with: 2.018 (BT.601, ffmpeg, GPU shaders) and 2.0 (Chromium's
/// libyuv, which caps it at what an int8 `pmaddubsw` holds). With exact Cb, 77 832 of the 16.7
/// million opaque 8-bit colours decode more than 2/255 off in libyuv (saturated blues such as
/// #007AFF: blue 252); with this gain every one of them decodes within 2/255 in both libyuv's
/// integer model and an exact BT.601 decoder (checked exhaustively for 1.0042; 1.004 leaves 5
/// colours 3 off in libyuv, 1.005 leaves 140 3 off in the exact decoder). The cost is at most
/// 0.47 of a Cb code (at Cb's extremes) away from the textbook value.
#[cfg_attr(not(test), allow(dead_code))] // Documents CB_FROM_RGB; the tests hold it to it.
const CB_GAIN: f64 = 1.0042;
/// Cr coefficients (224/255 × (1 − Kr, −Kg, −Kb) / (2 − 2Kr) in 1/32768), summing to 0.
const CR_FROM_RGB: [i32; 3] = [14392, -12052, -2340];
/// The coefficients' unit: 2^15 keeps every product and sum of a 2×2 block inside i32 and the
/// coefficients inside i16 (what AVX2's multiply-add takes).
const COEFFICIENT_BITS: u32 = 15;
/// Luma: + 16 (limited range black) + ½ (round to nearest), in coefficient units.
const LUMA_OFFSET: i32 = (16 << COEFFICIENT_BITS) + (1 << (COEFFICIENT_BITS - 1));
/// Chroma is computed from the sum of a 2×2 block: two more bits to divide by 4.
const CHROMA_SHIFT: u32 = COEFFICIENT_BITS + 2;
/// Chroma: + 128 (neutral) + ½ (round to nearest), in units of the block sum.
const CHROMA_OFFSET: i32 = (128 << CHROMA_SHIFT) + (1 << (CHROMA_SHIFT - 1));

const TRANSPARENT: Bgra = Bgra {
    b: 0,
    g: 0,
    r: 0,
    a: 0,
};

/// What happens to alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlphaHandling {
    /// Composite over this opaque background (`[r, g, b]`); no alpha plane (MP4).
    Over([u8; 3]),
    /// Keep it: straight colour, alpha in a fourth plane (WebM).
    Straight,
}

/// One picture's planes, tightly packed (a row's stride is its width); the tests and the bench
/// convert into these, the encoder path straight into the encoder's frame ([`PlanesMut`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YuvPlanes {
    pub width: usize,
    pub height: usize,
    pub luma: Vec<u8>,
    pub cb: Vec<u8>,
    pub cr: Vec<u8>,
    /// Empty when the picture is opaque.
    pub alpha: Vec<u8>,
}

impl YuvPlanes {
    pub(crate) fn new(width: usize, height: usize, with_alpha: bool) -> YuvPlanes {
        let chroma = width.div_ceil(2) * height.div_ceil(2);
        YuvPlanes {
            width,
            height,
            luma: vec![0; width * height],
            cb: vec![0; chroma],
            cr: vec![0; chroma],
            alpha: if with_alpha {
                vec![0; width * height]
            } else {
                Vec::new()
            },
        }
    }

    pub(crate) fn chroma_width(&self) -> usize {
        self.width.div_ceil(2)
    }

    /// These planes as a conversion target.
    pub(crate) fn as_mut(&mut self) -> PlanesMut<'_> {
        let chroma_width = self.chroma_width();
        PlanesMut {
            width: self.width,
            height: self.height,
            luma: Plane::new(&mut self.luma, self.width),
            cb: Plane::new(&mut self.cb, chroma_width),
            cr: Plane::new(&mut self.cr, chroma_width),
            alpha: Plane::new(&mut self.alpha, self.width),
        }
    }
}

/// One plane to write: rows of `stride` bytes (at least the plane's width), as FFmpeg lays out a
/// frame's planes.
pub(crate) struct Plane<'a> {
    pub data: &'a mut [u8],
    pub stride: usize,
}

impl<'a> Plane<'a> {
    pub(crate) fn new(data: &'a mut [u8], stride: usize) -> Plane<'a> {
        Plane { data, stride }
    }

    /// Row `row`'s first `width` bytes; empty past the end.
    fn row(&mut self, row: usize, width: usize) -> &mut [u8] {
        let start = row * self.stride;
        let end = (start + width).min(self.data.len());
        self.data.get_mut(start..end).unwrap_or_default()
    }

    /// Rows `2 × pair` and `2 × pair + 1`, their first `width` bytes each.
    fn row_pair(&mut self, pair: usize, width: usize) -> (&mut [u8], &mut [u8]) {
        let start = (2 * pair * self.stride).min(self.data.len());
        let top_length = self.stride.min(self.data.len() - start);
        let (top, bottom) = self.data[start..].split_at_mut(top_length);
        let top_width = width.min(top.len());
        let bottom_width = width.min(bottom.len());
        (&mut top[..top_width], &mut bottom[..bottom_width])
    }
}

/// A picture's planes to convert into: `width` × `height` luma (and alpha, whose plane is empty
/// for an opaque picture), chroma at half size rounded up.
pub(crate) struct PlanesMut<'a> {
    pub width: usize,
    pub height: usize,
    pub luma: Plane<'a>,
    pub cb: Plane<'a>,
    pub cr: Plane<'a>,
    pub alpha: Plane<'a>,
}

/// Which code converts; [`Kernel::fastest`] outside tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// AVX2 where the CPU has it (detected at run time: the binary targets baseline x86-64).
    pub(crate) fn fastest() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if avx2::available() {
            return Kernel::Avx2;
        }
        Kernel::Scalar
    }
}

/// Converts `source` (premultiplied BGRA, rows of `source_width`) into `planes`, which are at
/// least as large (MP4 pads odd sizes to even: the padding is background).
pub(crate) fn convert(
    source: &[Bgra],
    source_width: usize,
    alpha: AlphaHandling,
    mut planes: PlanesMut,
    kernel: Kernel,
) {
    let width = planes.width;
    let chroma_width = width.div_ceil(2);
    let source_row = |row: usize| -> &[Bgra] {
        source
            .get(row * source_width..(row + 1) * source_width)
            .unwrap_or_default()
    };
    for pair_index in 0..planes.height.div_ceil(2) {
        let (luma_top, luma_bottom) = planes.luma.row_pair(pair_index, width);
        // An odd height's last pair has one row: its bottom row is not written.
        let bottom_width = if 2 * pair_index + 1 < planes.height {
            width
        } else {
            0
        };
        let (alpha_top, alpha_bottom) = planes.alpha.row_pair(pair_index, width);
        let (luma_bottom_length, alpha_bottom_length) = (luma_bottom.len(), alpha_bottom.len());
        let pair = RowPair {
            top: source_row(2 * pair_index),
            bottom: source_row(2 * pair_index + 1),
            luma_top,
            luma_bottom: &mut luma_bottom[..bottom_width.min(luma_bottom_length)],
            cb: planes.cb.row(pair_index, chroma_width),
            cr: planes.cr.row(pair_index, chroma_width),
            alpha_top,
            alpha_bottom: &mut alpha_bottom[..bottom_width.min(alpha_bottom_length)],
        };
        convert_row_pair(pair, alpha, kernel);
    }
}

/// Two source rows and what they become. A missing source row (past the bottom) is empty and
/// reads as transparent; a missing output row (odd-height WebM) is empty and is not written.
struct RowPair<'a> {
    top: &'a [Bgra],
    bottom: &'a [Bgra],
    luma_top: &'a mut [u8],
    luma_bottom: &'a mut [u8],
    cb: &'a mut [u8],
    cr: &'a mut [u8],
    /// Empty for MP4.
    alpha_top: &'a mut [u8],
    alpha_bottom: &'a mut [u8],
}

fn convert_row_pair(mut pair: RowPair, alpha: AlphaHandling, kernel: Kernel) {
    let done = match kernel {
        Kernel::Scalar => 0,
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => avx2::convert_row_pair(&mut pair, alpha),
    };
    convert_row_pair_scalar(&mut pair, alpha, done);
}

/// The reference: chroma columns `first_column..` of `pair`, one 2×2 block at a time.
fn convert_row_pair_scalar(pair: &mut RowPair, alpha: AlphaHandling, first_column: usize) {
    let pixel = |row: &[Bgra], x: usize| row.get(x).copied().unwrap_or(TRANSPARENT);
    for column in first_column..pair.cb.len() {
        let mut colour_sum = [0i32; 3];
        let mut alpha_sum = 0;
        for x in [2 * column, 2 * column + 1] {
            for (source, luma, alpha_plane) in [
                (pair.top, &mut *pair.luma_top, &mut *pair.alpha_top),
                (pair.bottom, &mut *pair.luma_bottom, &mut *pair.alpha_bottom),
            ] {
                let pixel = pixel(source, x);
                let (colour, value) = match alpha {
                    AlphaHandling::Over(background) => {
                        let colour = composite(pixel, background);
                        (colour, luma_of_opaque(colour))
                    }
                    AlphaHandling::Straight => {
                        let colour = [pixel.r, pixel.g, pixel.b].map(i32::from);
                        (colour, luma_of_premultiplied(colour, pixel.a))
                    }
                };
                for (sum, channel) in colour_sum.iter_mut().zip(colour) {
                    *sum += channel;
                }
                alpha_sum += i32::from(pixel.a);
                if let Some(slot) = luma.get_mut(x) {
                    *slot = value;
                }
                if let Some(slot) = alpha_plane.get_mut(x) {
                    *slot = alpha_code(pixel.a);
                }
            }
        }
        let (cb, cr) = match alpha {
            AlphaHandling::Over(_) => (
                chroma_of_opaque_sum(colour_sum, CB_FROM_RGB),
                chroma_of_opaque_sum(colour_sum, CR_FROM_RGB),
            ),
            AlphaHandling::Straight => (
                chroma_of_premultiplied_sum(colour_sum, alpha_sum, CB_FROM_RGB),
                chroma_of_premultiplied_sum(colour_sum, alpha_sum, CR_FROM_RGB),
            ),
        };
        pair.cb[column] = cb;
        pair.cr[column] = cr;
    }
}

/// The alphas rlottie gives pixels it means as opaque, read as opaque. rlottie multiplies by
/// alpha with Qt's fixed-point helpers (`src/vector/vdrawhelper.h`), which divide by 256 where
/// the weights sum to 255, and floors: a gradient's colour table (`(x·(255 − t) + y·t) >> 8`)
/// turns alpha 255 into 254, and a track matte's three or four compositing steps (the matte's
/// destination-in, the matted layer's buffer drawn over the canvas; `BYTE_MUL`, `x·a >> 8`)
/// turn it into 251 (measured: an opaque solid under an opaque alpha, luma or inverted matte
/// comes out 251, where lottie-web draws 255 and black showed as (3, 3, 3) over white). Each
/// colour is premultiplied by the same factor, so un-premultiplying by the alpha recovers the
/// intended colour (255/256 · 255/254 = 1.00002). Composited as the translucent pixels they
/// claim to be, they came out up to 5/255 light or dark, and WebM carried alphas players
/// composite. The renderer is Debian's librlottie (system library), so it is corrected here,
/// where every pixel is read anyway. A genuine 251–254 (an anti-aliased edge covering over
/// 98.4%) cannot be told apart; reading it as opaque costs at most 4 codes: MP4 shows
/// `p·255/α` instead of `p + bg·(255 − α)/255`; WebM's alpha plane says 255 instead of α.
pub(crate) const RLOTTIE_OPAQUE_ALPHAS: std::ops::RangeInclusive<u8> = 251..=254;

/// Whether rlottie meant `alpha` as opaque ([`RLOTTIE_OPAQUE_ALPHAS`]).
pub(crate) fn rlottie_opaque(alpha: u8) -> bool {
    RLOTTIE_OPAQUE_ALPHAS.contains(&alpha)
}

/// Alpha as it goes into WebM's alpha plane ([`RLOTTIE_OPAQUE_ALPHAS`] are opaque).
fn alpha_code(alpha: u8) -> u8 {
    if rlottie_opaque(alpha) {
        255
    } else {
        alpha
    }
}

/// `p + bg·(255 − α)/255` per channel, `[r, g, b]`: "over" on a premultiplied pixel. A pixel of
/// [`RLOTTIE_OPAQUE_ALPHAS`] is un-premultiplied instead, as `p + p·(255 − α)/255` (the same
/// formula with the pixel's own colour as background: within half a code of `p·255/α`).
fn composite(pixel: Bgra, background: [u8; 3]) -> [i32; 3] {
    let [red, green, blue] = if rlottie_opaque(pixel.a) {
        [pixel.r, pixel.g, pixel.b]
    } else {
        background
    };
    let transparency = 255 - u16::from(pixel.a);
    let over = |channel: u8, background: u8| {
        i32::from(channel) + i32::from(div255(u16::from(background) * transparency))
    };
    [
        over(pixel.r, red),
        over(pixel.g, green),
        over(pixel.b, blue),
    ]
}

/// x / 255 rounded to nearest, exact for 0..=65025 (the AVX2 kernel does the same in u16).
fn div255(x: u16) -> u16 {
    let x = x + 128;
    (x + (x >> 8)) >> 8
}

fn weighted(colour: [i32; 3], coefficients: [i32; 3]) -> i32 {
    colour
        .iter()
        .zip(coefficients)
        .map(|(channel, coefficient)| channel * coefficient)
        .sum()
}

fn to_byte(value: i32) -> u8 {
    value.clamp(0, 255) as u8
}

fn luma_of_opaque(colour: [i32; 3]) -> u8 {
    to_byte((weighted(colour, LUMA_FROM_RGB) + LUMA_OFFSET) >> COEFFICIENT_BITS)
}

fn chroma_of_opaque_sum(colour_sum: [i32; 3], coefficients: [i32; 3]) -> u8 {
    to_byte((weighted(colour_sum, coefficients) + CHROMA_OFFSET) >> CHROMA_SHIFT)
}

/// `linear · 255 / (α · 32768)` rounded to nearest (halves up), in f32 exactly as the AVX2
/// kernel computes it: `linear` is a weighted sum of premultiplied colour (of one pixel or of a
/// block; `alpha` is its alpha or the block's alpha sum), so this is the weighted sum of the
/// straight colour. Zero alpha counts as 1 (its colour is 0 too: the result is 0).
fn unpremultiplied(linear: i32, alpha: i32) -> i32 {
    let scale = 255.0f32 / (alpha.max(1) as f32 * (1 << COEFFICIENT_BITS) as f32);
    (linear as f32 * scale + 0.5).floor() as i32
}

fn luma_of_premultiplied(colour: [i32; 3], alpha: u8) -> u8 {
    to_byte(unpremultiplied(weighted(colour, LUMA_FROM_RGB), i32::from(alpha)) + 16)
}

fn chroma_of_premultiplied_sum(colour_sum: [i32; 3], alpha_sum: i32, coefficients: [i32; 3]) -> u8 {
    to_byte(unpremultiplied(weighted(colour_sum, coefficients), alpha_sum) + 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn px(r: u8, g: u8, b: u8, a: u8) -> Bgra {
        Bgra { b, g, r, a }
    }

    /// Deterministic pseudo-random bytes (xorshift64*): fixed frames, no dependency.
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn byte(&mut self) -> u8 {
            (self.next() >> 56) as u8
        }
        fn below(&mut self, bound: u8) -> u8 {
            ((self.next() >> 32) % (u64::from(bound) + 1)) as u8
        }
    }

    /// A premultiplied frame (colour ≤ α, rlottie's invariant) mixing runs of the cases the
    /// kernel treats differently: opaque, fully transparent, and any alpha (every value
    /// 0..=255 occurs), runs not aligned with the kernel's 16 pixels.
    fn random_frame(random: &mut Random, width: usize, height: usize) -> Vec<Bgra> {
        let mut pixels = Vec::with_capacity(width * height);
        while pixels.len() < width * height {
            let kind = random.below(2);
            let run = 1 + usize::from(random.below(40));
            for _ in 0..run {
                let alpha = match kind {
                    0 => 255,
                    1 => 0,
                    _ => random.byte(),
                };
                pixels.push(px(
                    random.below(alpha),
                    random.below(alpha),
                    random.below(alpha),
                    alpha,
                ));
            }
        }
        pixels.truncate(width * height);
        pixels
    }

    /// BT.601 limited range in f64 from 0..255 RGB (with [`CB_GAIN`]).
    fn reference_ycbcr([r, g, b]: [f64; 3]) -> [f64; 3] {
        let (kr, kb) = (0.299, 0.114);
        let kg = 1.0 - kr - kb;
        let y = kr * r + kg * g + kb * b;
        [
            16.0 + 219.0 / 255.0 * y,
            128.0 + CB_GAIN * 224.0 / 255.0 * (b - y) / (2.0 - 2.0 * kb),
            128.0 + 224.0 / 255.0 * (r - y) / (2.0 - 2.0 * kr),
        ]
    }

    /// The planes computed in f64 from the definitions: composite (integer, as MP4 does) or
    /// exact straight colour, 2×2 mean (alpha-weighted for straight).
    fn reference(
        source: &[Bgra],
        source_width: usize,
        alpha: AlphaHandling,
        width: usize,
        height: usize,
    ) -> [Vec<f64>; 3] {
        let source_height = source.len() / source_width;
        let pixel = |x: usize, y: usize| {
            if x < source_width && y < source_height {
                source[y * source_width + x]
            } else {
                TRANSPARENT
            }
        };
        // (colour, weight) of one pixel.
        let colour = |p: Bgra| -> ([f64; 3], f64) {
            match alpha {
                AlphaHandling::Over(background) => (composite(p, background).map(f64::from), 1.0),
                AlphaHandling::Straight => {
                    let a = f64::from(p.a);
                    let straight = |c: u8| {
                        if p.a == 0 {
                            0.0
                        } else {
                            f64::from(c) * 255.0 / a
                        }
                    };
                    ([straight(p.r), straight(p.g), straight(p.b)], a)
                }
            }
        };
        let mut luma = Vec::new();
        for y in 0..height {
            for x in 0..width {
                luma.push(reference_ycbcr(colour(pixel(x, y)).0)[0]);
            }
        }
        let (mut cb, mut cr) = (Vec::new(), Vec::new());
        for y in (0..height).step_by(2) {
            for x in (0..width).step_by(2) {
                let mut sum = [0.0; 3];
                let mut weights = 0.0;
                for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    let (c, weight) = colour(pixel(x + dx, y + dy));
                    for (s, c) in sum.iter_mut().zip(c) {
                        *s += c * weight;
                    }
                    weights += weight;
                }
                let mean = if weights == 0.0 {
                    [0.0; 3]
                } else {
                    sum.map(|s| s / weights)
                };
                let [_, u, v] = reference_ycbcr(mean);
                cb.push(u);
                cr.push(v);
            }
        }
        [luma, cb, cr]
    }

    fn kernels() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Scalar];
        if Kernel::fastest() != Kernel::Scalar {
            kernels.push(Kernel::fastest());
        }
        kernels
    }

    fn converted(
        source: &[Bgra],
        source_width: usize,
        alpha: AlphaHandling,
        kernel: Kernel,
    ) -> YuvPlanes {
        let source_height = source.len() / source_width;
        let (width, height) = match alpha {
            AlphaHandling::Over(_) => (
                source_width.next_multiple_of(2),
                source_height.next_multiple_of(2),
            ),
            AlphaHandling::Straight => (source_width, source_height),
        };
        let mut planes = YuvPlanes::new(width, height, alpha == AlphaHandling::Straight);
        convert(source, source_width, alpha, planes.as_mut(), kernel);
        planes
    }

    const HANDLINGS: [AlphaHandling; 3] = [
        AlphaHandling::Straight,
        AlphaHandling::Over([255, 255, 255]),
        AlphaHandling::Over([32, 200, 97]),
    ];

    #[test]
    fn every_kernel_is_within_one_code_of_the_float_reference_and_all_agree_exactly() {
        let mut random = Random(0x005e_ed0f_c010);
        // Odd and even, below, at and past multiples of the kernel's 16 pixels.
        for (width, height) in [(1, 1), (3, 2), (15, 3), (16, 2), (17, 5), (33, 4), (70, 9)] {
            let source = random_frame(&mut random, width, height);
            for alpha in HANDLINGS {
                let outputs: Vec<YuvPlanes> = kernels()
                    .into_iter()
                    .map(|kernel| converted(&source, width, alpha, kernel))
                    .collect();
                let planes = &outputs[0];
                let expected = reference(&source, width, alpha, planes.width, planes.height);
                let actual = [&planes.luma, &planes.cb, &planes.cr];
                for ((name, expected), actual) in
                    ["Y", "Cb", "Cr"].iter().zip(&expected).zip(actual)
                {
                    assert_eq!(expected.len(), actual.len(), "{name} {width}×{height}");
                    for (index, (e, a)) in expected.iter().zip(actual.iter()).enumerate() {
                        assert!(
                            (e - f64::from(*a)).abs() <= 1.0,
                            "{name}[{index}] of {width}×{height} {alpha:?}: {a}, reference {e:.3}"
                        );
                    }
                }
                if alpha == AlphaHandling::Straight {
                    // rlottie's opaque alphas (251–254) are opaque; every other as rendered.
                    let alphas: Vec<u8> = source
                        .iter()
                        .map(|p| if rlottie_opaque(p.a) { 255 } else { p.a })
                        .collect();
                    assert_eq!(planes.alpha, alphas);
                }
                for other in &outputs[1..] {
                    assert_eq!(
                        other, planes,
                        "{width}×{height} {alpha:?}: kernels disagree"
                    );
                }
            }
        }
    }

    #[test]
    fn the_kernels_agree_exactly_on_a_large_frame_with_every_alpha() {
        let mut random = Random(0x00ff_1ce5);
        let (width, height) = (1000 + 7, 64 + 1);
        let mut source = random_frame(&mut random, width, height);
        // Every alpha with every colour bound, in one row.
        for (index, pixel) in source[..256 * 3].iter_mut().enumerate() {
            let alpha = (index / 3) as u8;
            *pixel = px(alpha, alpha / 2, 0, alpha);
        }
        for alpha in HANDLINGS {
            let outputs: Vec<YuvPlanes> = kernels()
                .into_iter()
                .map(|kernel| converted(&source, width, alpha, kernel))
                .collect();
            for other in &outputs[1..] {
                assert!(other == &outputs[0], "{alpha:?}: kernels disagree");
            }
        }
    }

    #[test]
    fn solid_colours_convert_to_their_textbook_bt601_codes() {
        // (r, g, b) → (Y, Cb, Cr): the limited-range BT.601 values, worked by hand from
        // Y = 16 + 219·(0.299 R + 0.587 G + 0.114 B)/255, Cb = 128 + 1.0042 (the gain) ·
        // 224·(B − Y′)/255/1.772, Cr = 128 + 224·(R − Y′)/255/1.402 (Y′ = 0.299 R + …).
        let cases = [
            ([255, 255, 255], [235, 128, 128]),
            ([0, 0, 0], [16, 128, 128]),
            // Cb 90.04, Cr 240.
            ([255, 0, 0], [81, 90, 240]),
            // Y 144.55, Cb 53.49 (53.80 without the gain), Cr 34.21.
            ([0, 255, 0], [145, 53, 34]),
            // Y 40.97, Cb 240.47, Cr 109.79.
            ([0, 0, 255], [41, 240, 110]),
            ([128, 128, 128], [126, 128, 128]),
            // #AF52DE: Y = 16 + 219·(0.299·175 + 0.587·82 + 0.114·222)/255 = 124.01,
            // Cb = 128 + 1.0042·224·(222 − 125.77)/255/1.772 = 175.91, Cr = … = 158.85.
            ([175, 82, 222], [124, 176, 159]),
            // #007AFF, the colour issue 11's Chromium check failed: Y 102.47, Cb 204.82 (204.499
            // without the gain, which rounds to 204 and decodes to blue 252 in Chromium).
            ([0, 122, 255], [102, 205, 65]),
        ];
        for kernel in kernels() {
            for ([r, g, b], expected) in cases {
                // Even, so MP4 has no padding of background here.
                let (width, height) = (22, 4);
                for (alpha, source) in [
                    (
                        AlphaHandling::Over([9, 9, 9]),
                        vec![px(r, g, b, 255); width * height],
                    ),
                    (
                        AlphaHandling::Straight,
                        vec![px(r, g, b, 255); width * height],
                    ),
                    // Transparent pixels over the colour: the background colour itself.
                    (
                        AlphaHandling::Over([r, g, b]),
                        vec![TRANSPARENT; width * height],
                    ),
                ] {
                    let planes = converted(&source, width, alpha, kernel);
                    for (plane, code) in [&planes.luma, &planes.cb, &planes.cr].iter().zip(expected)
                    {
                        assert!(
                            plane.iter().all(|&value| value == code),
                            "{:?} {alpha:?} {kernel:?}: {plane:?}, expected {code}",
                            [r, g, b]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_half_covered_block_keeps_its_colours_chroma_and_transparent_blocks_are_neutral() {
        // Two opaque red pixels, two transparent ones, then a fully transparent block.
        let source = [
            px(255, 0, 0, 255),
            TRANSPARENT,
            TRANSPARENT,
            TRANSPARENT,
            TRANSPARENT,
            px(255, 0, 0, 255),
            TRANSPARENT,
            TRANSPARENT,
        ];
        for kernel in kernels() {
            let planes = converted(&source, 4, AlphaHandling::Straight, kernel);
            assert_eq!(planes.luma, [81, 16, 16, 16, 16, 81, 16, 16]);
            assert_eq!(planes.alpha, [255, 0, 0, 0, 0, 255, 0, 0]);
            assert_eq!((planes.cb, planes.cr), (vec![90, 128], vec![240, 128]));
            // Half-transparent red is red too.
            let planes = converted(&[px(128, 0, 0, 128); 4], 2, AlphaHandling::Straight, kernel);
            assert_eq!((planes.luma[0], planes.cb[0], planes.cr[0]), (81, 90, 240));
        }
    }

    #[test]
    fn mp4_pads_odd_sizes_with_the_background() {
        let background = [0, 0, 255];
        for kernel in kernels() {
            let planes = converted(
                &[px(255, 255, 255, 255); 3],
                3,
                AlphaHandling::Over(background),
                kernel,
            );
            assert_eq!((planes.width, planes.height), (4, 2));
            // White, then blue in the padding column and the padding row.
            assert_eq!(planes.luma, [235, 235, 235, 41, 41, 41, 41, 41]);
            // The second block is one quarter white, three quarters blue.
            // Blue's Cb is 128 + 112 (times the gain), white's 128.
            let cb = |blue_share: f64| (128.0 + blue_share * 112.0 * CB_GAIN).round() as u8;
            assert_eq!(planes.cb, [cb(0.5), cb(0.75)]);
        }
    }

    #[test]
    fn compositing_is_the_rounded_over_of_every_alpha() {
        assert_eq!(
            composite(px(128, 0, 0, 128), [255, 255, 255]),
            [255, 127, 127]
        );
        for background in [0u8, 1, 100, 254, 255] {
            for alpha in 0..=255u8 {
                for colour in [0, alpha / 3, alpha] {
                    let exact = if rlottie_opaque(alpha) {
                        // Un-premultiplied (opaque), not composited: see RLOTTIE_OPAQUE_ALPHAS.
                        f64::from(colour) * 255.0 / f64::from(alpha)
                    } else {
                        f64::from(colour) + f64::from(background) * f64::from(255 - alpha) / 255.0
                    };
                    let [r, _, _] = composite(px(colour, 0, 0, alpha), [background, 0, 0]);
                    assert!(
                        (f64::from(r) - exact).abs() <= 0.5,
                        "{colour}/{alpha} over {background}"
                    );
                }
            }
        }
    }

    /// What rlottie draws an opaque gradient with (its colour table: `(x·(255 − t) + y·t) >> 8`
    /// per premultiplied channel) comes out as the colour the table's stops interpolate to, in
    /// both MP4 and WebM, by every kernel: within one code of the exact ramp.
    #[test]
    fn rlottie_gradient_pixels_of_alpha_254_convert_as_the_opaque_colour_they_mean() {
        let (from, to) = ([0xAFu32, 0x52, 0xDE], [0x34u32, 0xC7, 0x59]);
        let (width, height) = (256, 2);
        let mut source = Vec::new();
        let mut intended = Vec::new();
        for _ in 0..height {
            for t in 0..width as u32 {
                // Qt's interpolate_pixel on the opaque stops (alpha 255 → 254).
                let table = |x: u32, y: u32| ((x * (255 - t) + y * t) >> 8) as u8;
                let [r, g, b] = [0, 1, 2].map(|i| table(from[i], to[i]));
                source.push(px(r, g, b, table(255, 255)));
                intended
                    .push([0, 1, 2].map(|i| f64::from(from[i] * (255 - t) + to[i] * t) / 255.0));
            }
        }
        assert!(source[1..width - 1].iter().all(|p| p.a == 254));
        let opaque: Vec<Bgra> = intended
            .iter()
            .map(|[r, g, b]| px(r.round() as u8, g.round() as u8, b.round() as u8, 255))
            .collect();
        for alpha in [
            AlphaHandling::Over([0x20, 0x20, 0x20]),
            AlphaHandling::Straight,
        ] {
            for kernel in kernels() {
                let got = converted(&source, width, alpha, kernel);
                let want = converted(&opaque, width, alpha, Kernel::Scalar);
                for (plane, (got, want)) in [
                    (&got.luma, &want.luma),
                    (&got.cb, &want.cb),
                    (&got.cr, &want.cr),
                ]
                .into_iter()
                .enumerate()
                {
                    for (index, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            g.abs_diff(*w) <= 1,
                            "{alpha:?} {kernel:?} plane {plane}[{index}]: {g}, opaque {w}"
                        );
                    }
                }
                if alpha == AlphaHandling::Straight {
                    assert!(got.alpha.iter().all(|&a| a == 255), "{kernel:?}");
                }
            }
        }
    }

    #[test]
    fn div255_rounds_like_floating_point() {
        for x in 0..=65025u32 {
            assert_eq!(
                u32::from(div255(x as u16)),
                (f64::from(x) / 255.0).round() as u32,
                "{x}"
            );
        }
    }

    #[test]
    fn the_coefficients_are_the_bt601_ones_rounded() {
        let (kr, kb) = (0.299, 0.114);
        let kg = 1.0 - kr - kb;
        let unit = f64::from(1 << COEFFICIENT_BITS);
        let luma = [kr, kg, kb].map(|k| k * 219.0 / 255.0 * unit);
        let cb =
            [-kr, -kg, 1.0 - kb].map(|k| k / (2.0 - 2.0 * kb) * 224.0 / 255.0 * CB_GAIN * unit);
        let cr = [1.0 - kr, -kg, -kb].map(|k| k / (2.0 - 2.0 * kr) * 224.0 / 255.0 * unit);
        // Each rounded to nearest, except that one chroma coefficient may be a whole unit off
        // so that the three sum to 0.
        for (exact, used) in [(luma, LUMA_FROM_RGB), (cb, CB_FROM_RGB), (cr, CR_FROM_RGB)] {
            for (exact, used) in exact.iter().zip(used) {
                assert!((exact - f64::from(used)).abs() <= 1.0, "{used} for {exact}");
            }
        }
        assert_eq!(CB_FROM_RGB.iter().sum::<i32>(), 0);
        assert_eq!(CR_FROM_RGB.iter().sum::<i32>(), 0);
    }
}
