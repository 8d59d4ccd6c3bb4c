//! Pixel conversions from rlottie's premultiplied BGRA to what each encoder takes. They run
//! on the render threads, in parallel, so the encoder thread only encodes.

use rlottie::Bgra;

/// The pixel layout an encoder wants its frames in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PixelLayout {
    /// Opaque BGRA: the frame composited over a background colour (`[r, g, b]`, 0..=255).
    OpaqueBgraOver([u8; 3]),
    /// Straight (un-premultiplied) BGRA, alpha kept.
    StraightBgra,
    /// As rlottie renders it: premultiplied BGRA.
    Premultiplied,
}

/// Converts premultiplied BGRA pixels in place into `layout`.
pub fn convert_in_place(pixels: &mut [Bgra], layout: PixelLayout) {
    match layout {
        PixelLayout::OpaqueBgraOver(background) => composite_over(pixels, background),
        PixelLayout::StraightBgra => pixels.iter_mut().for_each(unpremultiply),
        PixelLayout::Premultiplied => {}
    }
}

/// `out = src + background × (1 − α)` on premultiplied values: the standard "over".
fn composite_over(pixels: &mut [Bgra], [red, green, blue]: [u8; 3]) {
    for pixel in pixels {
        let transparency = 255 - u16::from(pixel.a);
        if transparency == 0 {
            continue;
        }
        let over = |source: u8, background: u8| {
            (u16::from(source) + div255(u16::from(background) * transparency)).min(255) as u8
        };
        pixel.b = over(pixel.b, blue);
        pixel.g = over(pixel.g, green);
        pixel.r = over(pixel.r, red);
        pixel.a = 255;
    }
}

/// Premultiplied → straight alpha, rounding to nearest. Leaving colours premultiplied
/// darkens every anti-aliased edge (the "dark halo").
fn unpremultiply(pixel: &mut Bgra) {
    let alpha = u16::from(pixel.a);
    match alpha {
        0 => {
            pixel.b = 0;
            pixel.g = 0;
            pixel.r = 0;
        }
        255 => {}
        _ => {
            let straight = |c: u8| ((u16::from(c) * 255 + alpha / 2) / alpha).min(255) as u8;
            pixel.b = straight(pixel.b);
            pixel.g = straight(pixel.g);
            pixel.r = straight(pixel.r);
        }
    }
}

/// x / 255 rounded, exact for 0..=65025.
fn div255(x: u16) -> u16 {
    let x = u32::from(x) + 128;
    ((x + (x >> 8)) >> 8) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn px(b: u8, g: u8, r: u8, a: u8) -> Bgra {
        Bgra { b, g, r, a }
    }

    #[test]
    fn half_transparent_red_unpremultiplies_to_full_red() {
        let mut pixels = [px(0, 0, 128, 128), px(7, 7, 7, 0)];
        convert_in_place(&mut pixels, PixelLayout::StraightBgra);
        assert_eq!(pixels, [px(0, 0, 255, 128), px(0, 0, 0, 0)]);
    }

    #[test]
    fn compositing_over_white_lightens_translucent_pixels() {
        let mut pixels = [px(0, 0, 128, 128), px(0, 0, 0, 0), px(1, 2, 3, 255)];
        convert_in_place(&mut pixels, PixelLayout::OpaqueBgraOver([255, 255, 255]));
        assert_eq!(
            pixels,
            [
                px(127, 127, 255, 255),
                px(255, 255, 255, 255),
                px(1, 2, 3, 255)
            ]
        );
    }

    #[test]
    fn div255_rounds_like_floating_point() {
        for x in 0..=65025u32 {
            assert_eq!(
                u32::from(div255(x as u16)),
                (x as f64 / 255.0).round() as u32,
                "{x}"
            );
        }
    }
}
