//! Pixel conversions from rlottie's premultiplied BGRA to straight RGBA, what GIF takes and
//! what the tests compare (video frames go straight to YUV in [`super::yuv`]). They run on the
//! render threads (see [`super::FramePreparer`]), in parallel, so the encoder thread only
//! encodes.

use rlottie::Bgra;

/// The pixel layout an encoder wants its frames in (4 bytes a pixel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PixelLayout {
    /// Straight (un-premultiplied) RGBA, alpha kept.
    StraightRgba,
}

/// Writes `source` (premultiplied BGRA, as rlottie renders) into `destination` (4 bytes a
/// pixel) in `layout`. One pass: a 1080² frame is 4.7 MB, far larger than the caches, so
/// every extra pass over it costs a full trip through memory.
pub fn convert(source: &[Bgra], destination: &mut [u8], layout: PixelLayout) {
    let (destination, _) = destination.as_chunks_mut::<4>();
    let pairs = source.iter().zip(destination.iter_mut());
    match layout {
        PixelLayout::StraightRgba => {
            let table = unpremultiply_table();
            pairs.for_each(|(pixel, out)| {
                let Bgra { b, g, r, a } = straight(*pixel, table);
                *out = [r, g, b, a];
            });
        }
    }
}

/// Premultiplied → straight alpha, rounding to nearest. Leaving colours premultiplied
/// darkens every anti-aliased edge (the "dark halo"). Fully transparent pixels become
/// transparent black.
/// The alphas rlottie means as opaque (`super::yuv::RLOTTIE_OPAQUE_ALPHAS`) become 255.
fn straight(pixel: Bgra, table: &UnpremultiplyTable) -> Bgra {
    match pixel.a {
        255 => pixel,
        alpha => {
            let row = &table[usize::from(alpha)];
            Bgra {
                b: row[usize::from(pixel.b)],
                g: row[usize::from(pixel.g)],
                r: row[usize::from(pixel.r)],
                a: if super::yuv::rlottie_opaque(alpha) {
                    255
                } else {
                    alpha
                },
            }
        }
    }
}

/// `table[α][c]` = round(c × 255 / α), clamped to 255 (row 0 is all zero): 64 KiB that
/// replace three divisions per translucent pixel.
type UnpremultiplyTable = [[u8; 256]; 256];

fn unpremultiply_table() -> &'static UnpremultiplyTable {
    static TABLE: std::sync::OnceLock<Box<UnpremultiplyTable>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Box::new([[0u8; 256]; 256]);
        for (alpha, row) in table.iter_mut().enumerate().skip(1) {
            for (colour, entry) in row.iter_mut().enumerate() {
                *entry = ((colour * 255 + alpha / 2) / alpha).min(255) as u8;
            }
        }
        table
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn px(b: u8, g: u8, r: u8, a: u8) -> Bgra {
        Bgra { b, g, r, a }
    }

    fn converted(pixels: &[Bgra], layout: PixelLayout) -> Vec<[u8; 4]> {
        let mut bytes = vec![0u8; pixels.len() * 4];
        convert(pixels, &mut bytes, layout);
        bytes.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
    }

    #[test]
    fn half_transparent_red_unpremultiplies_to_full_red() {
        let pixels = [px(0, 0, 128, 128), px(7, 7, 7, 0)];
        assert_eq!(
            converted(&pixels, PixelLayout::StraightRgba),
            [[255, 0, 0, 128], [0, 0, 0, 0]]
        );
    }

    #[test]
    fn unpremultiplying_matches_exact_division_for_every_alpha_and_colour() {
        for alpha in 0..=255u8 {
            let pixels: Vec<Bgra> = (0..=alpha)
                .map(|colour| px(colour, colour, colour, alpha))
                .collect();
            for (colour, pixel) in (0..=alpha).zip(converted(&pixels, PixelLayout::StraightRgba)) {
                let exact = if alpha == 0 {
                    0
                } else {
                    ((f64::from(colour) * 255.0 / f64::from(alpha)) + 0.5)
                        .floor()
                        .min(255.0) as u8
                };
                // rlottie's opaque alphas (a gradient's 254, a matte's 251) read as opaque.
                let alpha = if (251..=254).contains(&alpha) {
                    255
                } else {
                    alpha
                };
                assert_eq!(pixel, [exact, exact, exact, alpha], "{colour}/{alpha}");
            }
        }
    }
}
