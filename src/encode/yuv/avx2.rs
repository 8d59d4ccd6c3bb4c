//! The AVX2 kernel of [`super`]: 16 pixels of each of two rows a step (8 chroma samples), the
//! very arithmetic of the scalar reference, bit for bit. Colour is spread to one u16 lane a
//! channel, multiplied and summed in pairs into i32 by `madd` (coefficients in i16), the
//! WebM division by alpha done in f32 as the scalar code does it. Steps whose 32 pixels are all
//! opaque skip the composite or the division; steps all transparent black write constants
//! (both common in motion graphics, both give what the general path would).
//!
//! Bounds: every load and store goes through a fixed-size array taken from a slice (`&[u8; 64]`,
//! `&mut [u8; 16]`), so the few raw-pointer intrinsics never touch memory outside it.

use super::{
    chroma_of_opaque_sum, composite, luma_of_opaque, AlphaHandling, RowPair, CB_FROM_RGB,
    CHROMA_OFFSET, CHROMA_SHIFT, COEFFICIENT_BITS, CR_FROM_RGB, LUMA_FROM_RGB, LUMA_OFFSET,
    RLOTTIE_OPAQUE_ALPHAS, TRANSPARENT,
};
use rgb::bytemuck::cast_slice;
use rlottie::Bgra;
use std::arch::x86_64::*;

/// Pixels of each row a step.
const STEP: usize = 16;

/// Luma's offset enters `madd` as a constant lane times a coefficient (both i16): 32 × 16896.
const LUMA_OFFSET_UNIT: i32 = 32;
/// Chroma's offset likewise: 1024 × 16448 (1024 also leaves room below it for a block sum).
const CHROMA_OFFSET_UNIT: i32 = 1024;
const _: () =
    assert!(LUMA_OFFSET % LUMA_OFFSET_UNIT == 0 && LUMA_OFFSET / LUMA_OFFSET_UNIT <= 32767);
const _: () =
    assert!(CHROMA_OFFSET % CHROMA_OFFSET_UNIT == 0 && CHROMA_OFFSET / CHROMA_OFFSET_UNIT <= 32767);

pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Converts the leading whole steps of `pair` when both of its source rows are there (the
/// scalar code does the rest); returns how many chroma columns it did.
pub(crate) fn convert_row_pair(pair: &mut RowPair, alpha: AlphaHandling) -> usize {
    if !available() {
        return 0;
    }
    let alpha_lengths = match alpha {
        AlphaHandling::Over(_) => [usize::MAX; 2],
        AlphaHandling::Straight => [pair.alpha_top.len(), pair.alpha_bottom.len()],
    };
    let lengths = [
        pair.top.len(),
        pair.bottom.len(),
        pair.luma_top.len(),
        pair.luma_bottom.len(),
        2 * pair.cb.len(),
        2 * pair.cr.len(),
        alpha_lengths[0],
        alpha_lengths[1],
    ];
    let steps = lengths.into_iter().min().unwrap_or(0) / STEP;
    // SAFETY: AVX2 is available (checked above), which is all these functions require.
    let done = unsafe {
        match alpha {
            AlphaHandling::Over(background) => over_steps(pair, background, steps),
            AlphaHandling::Straight => straight_steps(pair, steps),
        }
    };
    done * STEP / 2
}

/// The slices of one step: 16 pixels of each source row, 16 luma bytes of each output row,
/// 8 bytes of each chroma plane and, when there is an alpha plane, 16 bytes of each of its rows.
struct Step<'a> {
    top: &'a [u8; 64],
    bottom: &'a [u8; 64],
    luma_top: &'a mut [u8; 16],
    luma_bottom: &'a mut [u8; 16],
    cb: &'a mut [u8; 8],
    cr: &'a mut [u8; 8],
    alpha: Option<(&'a mut [u8; 16], &'a mut [u8; 16])>,
}

fn step_slices<'a>(pair: &'a mut RowPair, index: usize) -> Option<Step<'a>> {
    let pixels = index * STEP;
    let bytes = |row: &'a [Bgra]| -> Option<&'a [u8; 64]> {
        cast_slice::<Bgra, u8>(row).get(pixels * 4..)?.first_chunk()
    };
    let alpha = pair
        .alpha_top
        .get_mut(pixels..)
        .and_then(|row| row.first_chunk_mut())
        .zip(
            pair.alpha_bottom
                .get_mut(pixels..)
                .and_then(|row| row.first_chunk_mut()),
        );
    Some(Step {
        top: bytes(pair.top)?,
        bottom: bytes(pair.bottom)?,
        luma_top: pair.luma_top.get_mut(pixels..)?.first_chunk_mut()?,
        luma_bottom: pair.luma_bottom.get_mut(pixels..)?.first_chunk_mut()?,
        cb: pair.cb.get_mut(pixels / 2..)?.first_chunk_mut()?,
        cr: pair.cr.get_mut(pixels / 2..)?.first_chunk_mut()?,
        alpha,
    })
}

/// MP4: composite over `background`. Returns the steps done.
#[target_feature(enable = "avx2")]
fn over_steps(pair: &mut RowPair, background: [u8; 3], steps: usize) -> usize {
    // What a transparent pixel becomes: the background.
    let clear = composite(TRANSPARENT, background);
    let clear_luma = luma_of_opaque(clear);
    let clear_sum = clear.map(|channel| 4 * channel);
    let (clear_cb, clear_cr) = (
        chroma_of_opaque_sum(clear_sum, CB_FROM_RGB),
        chroma_of_opaque_sum(clear_sum, CR_FROM_RGB),
    );
    let [red, green, blue] = background.map(i16::from);
    let background = [
        _mm256_set1_epi16(red),
        _mm256_set1_epi16(green),
        _mm256_set1_epi16(blue),
    ];
    for index in 0..steps {
        let Some(step) = step_slices(pair, index) else {
            return index;
        };
        let (top, bottom) = (load(step.top), load(step.bottom));
        if is_zero(top) && is_zero(bottom) {
            step.luma_top.fill(clear_luma);
            step.luma_bottom.fill(clear_luma);
            step.cb.fill(clear_cb);
            step.cr.fill(clear_cr);
            continue;
        }
        let (mut top, top_alpha) = deinterleave(top);
        let (mut bottom, bottom_alpha) = deinterleave(bottom);
        if !all_opaque(top_alpha, bottom_alpha) {
            top = composite_over(top, &background);
            bottom = composite_over(bottom, &background);
        }
        store_opaque(&top, &bottom, step);
    }
    steps
}

/// Luma and chroma of opaque (or composited) pixels: integer arithmetic throughout.
#[target_feature(enable = "avx2")]
fn store_opaque(top: &Channels, bottom: &Channels, step: Step) {
    store_luma(
        luma_of_opaque_pixels(top),
        luma_of_opaque_pixels(bottom),
        step.luma_top,
        step.luma_bottom,
    );
    let sums = block_sums(top, bottom);
    let offset = CHROMA_OFFSET / CHROMA_OFFSET_UNIT;
    store_chroma(
        _mm256_srai_epi32::<{ CHROMA_SHIFT as i32 }>(chroma_sums(&sums, CB_FROM_RGB, offset)),
        _mm256_srai_epi32::<{ CHROMA_SHIFT as i32 }>(chroma_sums(&sums, CR_FROM_RGB, offset)),
        step.cb,
        step.cr,
    );
}

/// WebM: straight colour and an alpha plane. Returns the steps done.
#[target_feature(enable = "avx2")]
fn straight_steps(pair: &mut RowPair, steps: usize) -> usize {
    for index in 0..steps {
        let Some(mut step) = step_slices(pair, index) else {
            return index;
        };
        let Some((alpha_top, alpha_bottom)) = step.alpha.take() else {
            return index;
        };
        let (top, bottom) = (load(step.top), load(step.bottom));
        if is_zero(top) && is_zero(bottom) {
            step.luma_top.fill(16);
            step.luma_bottom.fill(16);
            step.cb.fill(128);
            step.cr.fill(128);
            alpha_top.fill(0);
            alpha_bottom.fill(0);
            continue;
        }
        let (top, top_alpha) = deinterleave(top);
        let (bottom, bottom_alpha) = deinterleave(bottom);
        store_bytes(alpha_codes(top_alpha), alpha_top);
        store_bytes(alpha_codes(bottom_alpha), alpha_bottom);
        if all_opaque(top_alpha, bottom_alpha) {
            // The straight colour is the premultiplied colour: exactly MP4's arithmetic.
            store_opaque(&top, &bottom, step);
            continue;
        }
        store_luma(
            luma_of_premultiplied_pixels(&top),
            luma_of_premultiplied_pixels(&bottom),
            step.luma_top,
            step.luma_bottom,
        );
        let sums = block_sums(&top, &bottom);
        let neutral = _mm256_set1_epi32(128);
        store_chroma(
            _mm256_add_epi32(
                unpremultiply(chroma_sums(&sums, CB_FROM_RGB, 0), sums.alpha),
                neutral,
            ),
            _mm256_add_epi32(
                unpremultiply(chroma_sums(&sums, CR_FROM_RGB, 0), sums.alpha),
                neutral,
            ),
            step.cb,
            step.cr,
        );
    }
    steps
}

/// 16 pixels, one u16 lane a channel, in pixel order.
struct Channels {
    red: __m256i,
    green: __m256i,
    blue: __m256i,
    alpha: __m256i,
}

/// Sums of 2×2 blocks (8 blocks, one i32 lane each, in order).
struct BlockSums {
    red: __m256i,
    green: __m256i,
    blue: __m256i,
    alpha: __m256i,
}

#[target_feature(enable = "avx2")]
fn load(pixels: &[u8; 64]) -> (__m256i, __m256i) {
    // SAFETY: each load reads 32 bytes inside `pixels`; loadu needs no alignment.
    unsafe {
        (
            _mm256_loadu_si256(pixels.as_ptr().cast()),
            _mm256_loadu_si256(pixels.as_ptr().add(32).cast()),
        )
    }
}

#[target_feature(enable = "avx2")]
fn store_bytes(bytes: __m128i, out: &mut [u8; 16]) {
    // SAFETY: writes 16 bytes inside `out`; storeu needs no alignment.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), bytes) }
}

#[target_feature(enable = "avx2")]
fn is_zero((low, high): (__m256i, __m256i)) -> bool {
    let any = _mm256_or_si256(low, high);
    _mm256_testz_si256(any, any) == 1
}

#[target_feature(enable = "avx2")]
fn all_opaque(top_alpha: __m128i, bottom_alpha: __m128i) -> bool {
    let both = _mm_and_si128(top_alpha, bottom_alpha);
    _mm_movemask_epi8(_mm_cmpeq_epi8(both, _mm_set1_epi8(-1))) == 0xffff
}

/// 16 BGRA pixels → their channels, and the 16 alpha bytes as they are.
#[target_feature(enable = "avx2")]
fn deinterleave((low, high): (__m256i, __m256i)) -> (Channels, __m128i) {
    // Within each 128-bit lane (4 pixels): b0 b1 b2 b3 g0 … a3.
    let group = _mm256_setr_epi8(
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10,
        14, 3, 7, 11, 15,
    );
    // Then across lanes: the 8 blues, 8 greens, 8 reds, 8 alphas of the 8 pixels.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let low = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(low, group), order);
    let high = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(high, group), order);
    // 16 blues | 16 reds, and 16 greens | 16 alphas.
    let blue_red = _mm256_unpacklo_epi64(low, high);
    let green_alpha = _mm256_unpackhi_epi64(low, high);
    let alpha_bytes = _mm256_extracti128_si256::<1>(green_alpha);
    let channels = Channels {
        red: _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(blue_red)),
        green: _mm256_cvtepu8_epi16(_mm256_castsi256_si128(green_alpha)),
        blue: _mm256_cvtepu8_epi16(_mm256_castsi256_si128(blue_red)),
        alpha: _mm256_cvtepu8_epi16(alpha_bytes),
    };
    (channels, alpha_bytes)
}

/// `p + div255(bg · (255 − α))` per channel, in u16 as the scalar `composite` (every
/// intermediate stays below 65536: bg·(255 − α) + 128 + 254 ≤ 65407).
/// `super::alpha_code` on 16 alphas: 251–254 become 255 (α | 0xff), the rest stay.
#[target_feature(enable = "avx2")]
fn alpha_codes(alpha: __m128i) -> __m128i {
    // α ≥ 251 (unsigned: max(α, 251) == α); 255 | 0xff is 255 anyway.
    let least = _mm_set1_epi8(*RLOTTIE_OPAQUE_ALPHAS.start() as i8);
    _mm_or_si128(alpha, _mm_cmpeq_epi8(_mm_max_epu8(alpha, least), alpha))
}

#[target_feature(enable = "avx2")]
fn composite_over(pixels: Channels, background: &[__m256i; 3]) -> Channels {
    let transparency = _mm256_sub_epi16(_mm256_set1_epi16(255), pixels.alpha);
    // As `super::composite`: a pixel of RLOTTIE_OPAQUE_ALPHAS goes over its own colour (and
    // one of 255 over anything: its transparency is 0).
    let nearly = _mm256_cmpgt_epi16(
        pixels.alpha,
        _mm256_set1_epi16(i16::from(*RLOTTIE_OPAQUE_ALPHAS.start()) - 1),
    );
    Channels {
        red: over(
            pixels.red,
            _mm256_blendv_epi8(background[0], pixels.red, nearly),
            transparency,
        ),
        green: over(
            pixels.green,
            _mm256_blendv_epi8(background[1], pixels.green, nearly),
            transparency,
        ),
        blue: over(
            pixels.blue,
            _mm256_blendv_epi8(background[2], pixels.blue, nearly),
            transparency,
        ),
        alpha: _mm256_set1_epi16(255),
    }
}

#[target_feature(enable = "avx2")]
fn over(channel: __m256i, background: __m256i, transparency: __m256i) -> __m256i {
    let x = _mm256_add_epi16(
        _mm256_mullo_epi16(background, transparency),
        _mm256_set1_epi16(128),
    );
    let term = _mm256_srli_epi16::<8>(_mm256_add_epi16(x, _mm256_srli_epi16::<8>(x)));
    _mm256_add_epi16(channel, term)
}

/// Two i16 coefficients as one i32 lane for `madd`: `low` multiplies the even i16 lane.
fn coefficient_pair(low: i32, high: i32) -> i32 {
    (low & 0xffff) | (high << 16)
}

/// `madd` of two pairs of vectors, summed: i32 lanes of a·x + b·y + c·z + d·w.
#[target_feature(enable = "avx2")]
fn multiply_add(
    first: __m256i,
    first_coefficients: i32,
    second: __m256i,
    second_coefficients: i32,
) -> __m256i {
    _mm256_add_epi32(
        _mm256_madd_epi16(first, _mm256_set1_epi32(first_coefficients)),
        _mm256_madd_epi16(second, _mm256_set1_epi32(second_coefficients)),
    )
}

/// LUMA_FROM_RGB · colour + `offset_coefficient` · LUMA_OFFSET_UNIT for 16 pixels as two
/// halves of i32 (pixels 0–3 and 8–11, pixels 4–7 and 12–15: `packs` restores the order).
#[target_feature(enable = "avx2")]
fn luma_sums(pixels: &Channels, offset_coefficient: i32) -> [__m256i; 2] {
    let red_green = coefficient_pair(LUMA_FROM_RGB[0], LUMA_FROM_RGB[1]);
    let blue_offset = coefficient_pair(LUMA_FROM_RGB[2], offset_coefficient);
    let unit = _mm256_set1_epi16(LUMA_OFFSET_UNIT as i16);
    [
        multiply_add(
            _mm256_unpacklo_epi16(pixels.red, pixels.green),
            red_green,
            _mm256_unpacklo_epi16(pixels.blue, unit),
            blue_offset,
        ),
        multiply_add(
            _mm256_unpackhi_epi16(pixels.red, pixels.green),
            red_green,
            _mm256_unpackhi_epi16(pixels.blue, unit),
            blue_offset,
        ),
    ]
}

/// Luma of 16 opaque (or composited) pixels as i16 in pixel order.
#[target_feature(enable = "avx2")]
fn luma_of_opaque_pixels(pixels: &Channels) -> __m256i {
    let [low, high] = luma_sums(pixels, LUMA_OFFSET / LUMA_OFFSET_UNIT);
    _mm256_packs_epi32(
        _mm256_srai_epi32::<{ COEFFICIENT_BITS as i32 }>(low),
        _mm256_srai_epi32::<{ COEFFICIENT_BITS as i32 }>(high),
    )
}

/// Luma of 16 premultiplied pixels' straight colour as i16 in pixel order.
#[target_feature(enable = "avx2")]
fn luma_of_premultiplied_pixels(pixels: &Channels) -> __m256i {
    let [low, high] = luma_sums(pixels, 0);
    let zero = _mm256_setzero_si256();
    let black = _mm256_set1_epi32(16);
    _mm256_packs_epi32(
        _mm256_add_epi32(
            unpremultiply(low, _mm256_unpacklo_epi16(pixels.alpha, zero)),
            black,
        ),
        _mm256_add_epi32(
            unpremultiply(high, _mm256_unpackhi_epi16(pixels.alpha, zero)),
            black,
        ),
    )
}

/// The scalar `unpremultiplied`, 8 lanes at a time, the same f32 operations in the same order
/// (division and multiplication are correctly rounded in both; `floor` of an exact sum).
#[target_feature(enable = "avx2")]
fn unpremultiply(linear: __m256i, alpha: __m256i) -> __m256i {
    let denominator = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_max_epi32(alpha, _mm256_set1_epi32(1))),
        _mm256_set1_ps((1 << COEFFICIENT_BITS) as f32),
    );
    let scale = _mm256_div_ps(_mm256_set1_ps(255.0), denominator);
    let value = _mm256_mul_ps(_mm256_cvtepi32_ps(linear), scale);
    _mm256_cvtps_epi32(_mm256_floor_ps(_mm256_add_ps(value, _mm256_set1_ps(0.5))))
}

/// Per 2×2 block: the sum of each channel of its two pixels in `top` and two in `bottom`.
#[target_feature(enable = "avx2")]
fn block_sums(top: &Channels, bottom: &Channels) -> BlockSums {
    BlockSums {
        red: pairwise(_mm256_add_epi16(top.red, bottom.red)),
        green: pairwise(_mm256_add_epi16(top.green, bottom.green)),
        blue: pairwise(_mm256_add_epi16(top.blue, bottom.blue)),
        alpha: pairwise(_mm256_add_epi16(top.alpha, bottom.alpha)),
    }
}

/// Adds neighbouring u16 lanes into one i32 lane.
#[target_feature(enable = "avx2")]
fn pairwise(columns: __m256i) -> __m256i {
    _mm256_add_epi32(
        _mm256_and_si256(columns, _mm256_set1_epi32(0xffff)),
        _mm256_srli_epi32::<16>(columns),
    )
}

/// `coefficients` · block sums + `offset_coefficient` · CHROMA_OFFSET_UNIT, i32 per block. A
/// block sum is at most 4 × 510 (a composite can reach 510 if a pixel breaks rlottie's
/// colour ≤ α), inside an i16 lane.
#[target_feature(enable = "avx2")]
fn chroma_sums(sums: &BlockSums, coefficients: [i32; 3], offset_coefficient: i32) -> __m256i {
    multiply_add(
        _mm256_or_si256(sums.red, _mm256_slli_epi32::<16>(sums.green)),
        coefficient_pair(coefficients[0], coefficients[1]),
        _mm256_or_si256(sums.blue, _mm256_set1_epi32(CHROMA_OFFSET_UNIT << 16)),
        coefficient_pair(coefficients[2], offset_coefficient),
    )
}

/// Stores two rows of 16 luma values (i16, clamped to 0..=255 like the scalar code).
#[target_feature(enable = "avx2")]
fn store_luma(top: __m256i, bottom: __m256i, top_out: &mut [u8; 16], bottom_out: &mut [u8; 16]) {
    // packus interleaves the rows per 128-bit lane; the permute puts each row's halves together.
    let bytes = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi16(top, bottom));
    store_bytes(_mm256_castsi256_si128(bytes), top_out);
    store_bytes(_mm256_extracti128_si256::<1>(bytes), bottom_out);
}

/// Stores 8 Cb and 8 Cr values (i32, clamped to 0..=255 like the scalar code).
#[target_feature(enable = "avx2")]
fn store_chroma(cb: __m256i, cr: __m256i, cb_out: &mut [u8; 8], cr_out: &mut [u8; 8]) {
    // packs/packus work per 128-bit lane: cb 0–3, cr 0–3 | cb 4–7, cr 4–7 (then zeros).
    let bytes = _mm256_packus_epi16(_mm256_packs_epi32(cb, cr), _mm256_setzero_si256());
    let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    *cb_out = _mm256_extract_epi64::<0>(ordered).to_le_bytes();
    *cr_out = _mm256_extract_epi64::<1>(ordered).to_le_bytes();
}
