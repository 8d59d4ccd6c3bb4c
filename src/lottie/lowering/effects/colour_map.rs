//! The colour maps of Fill, Tint and Tritone as lottie-web's SVG filters compute them
//! (luminance in linear light, handed on in sRGB), and a solid's `#rrggbb` colour.

use serde_json::Value;

/// A colour map lowered into a layer's colours.
#[derive(Debug, Clone)]
pub(super) enum ColourMap {
    /// Every colour becomes `colour`; `animated_colour` is the effect's keyframed colour
    /// property, written as is into fills and strokes.
    Fill {
        colour: [f64; 3],
        animated_colour: Option<Value>,
    },
    Tint {
        black: [f64; 3],
        white: [f64; 3],
        amount: f64,
    },
    Tritone {
        highlights: [f64; 3],
        midtones: [f64; 3],
        shadows: [f64; 3],
    },
}

impl ColourMap {
    pub(super) fn map(&self, colour: [f64; 3]) -> [f64; 3] {
        match self {
            ColourMap::Fill { colour: fill, .. } => *fill,
            ColourMap::Tint {
                black,
                white,
                amount,
            } => {
                let light = luminance(colour);
                let tinted: [f64; 3] =
                    std::array::from_fn(|i| black[i] + (white[i] - black[i]) * light);
                // lottie-web 5.x merges, in linear light, the original, the grey at `amount`
                // over it, and the tinted colour at `amount` over that.
                let over = |under: f64, top: f64| under * (1.0 - amount) + top * amount;
                let grey = to_linear(light);
                std::array::from_fn(|i| {
                    to_srgb(over(over(to_linear(colour[i]), grey), to_linear(tinted[i])))
                })
            }
            ColourMap::Tritone {
                highlights,
                midtones,
                shadows,
            } => {
                let light = luminance(colour);
                let (from, to, t) = if light <= 0.5 {
                    (shadows, midtones, light * 2.0)
                } else {
                    (midtones, highlights, light * 2.0 - 1.0)
                };
                std::array::from_fn(|i| from[i] + (to[i] - from[i]) * t)
            }
        }
    }
}

/// lottie-web's grey for Tint and Tritone: the mean of the linear-light channels (the first
/// matrix runs in linearRGB), handed on in sRGB (the next primitive runs in sRGB).
fn luminance(colour: [f64; 3]) -> f64 {
    to_srgb(colour.iter().map(|c| to_linear(*c)).sum::<f64>() / 3.0)
}

fn to_linear(c: f64) -> f64 {
    let c = c.clamp(0.0, 1.0);
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn to_srgb(c: f64) -> f64 {
    let c = c.clamp(0.0, 1.0);
    if c <= 0.003_130_8 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

/// `#rrggbb` (a solid's colour) as 0..=1 channels.
pub(super) fn parse_hex(hex: &str) -> Option<[f64; 3]> {
    let digits = hex.strip_prefix('#')?;
    if digits.len() != 6 || !digits.is_ascii() {
        return None;
    }
    let channel = |i: usize| {
        u8::from_str_radix(&digits[i * 2..i * 2 + 2], 16)
            .ok()
            .map(|v| f64::from(v) / 255.0)
    };
    Some([channel(0)?, channel(1)?, channel(2)?])
}

pub(super) fn to_hex(colour: [f64; 3]) -> String {
    let [r, g, b] = colour.map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8);
    format!("#{r:02x}{g:02x}{b:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tint_maps_black_and_white_to_its_colours_and_grey_between() {
        let tint = ColourMap::Tint {
            black: [1.0, 0.0, 0.0],
            white: [0.0, 0.0, 1.0],
            amount: 1.0,
        };
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(tint.map([0.0, 0.0, 0.0]), [1.0, 0.0, 0.0]));
        assert!(close(tint.map([1.0, 1.0, 1.0]), [0.0, 0.0, 1.0]));
        // Pure red: a third of the linear light, shown in sRGB.
        let light = to_srgb(1.0 / 3.0);
        assert!(close(tint.map([1.0, 0.0, 0.0]), [1.0 - light, 0.0, light]));
    }

    #[test]
    fn tritone_maps_black_grey_and_white_to_shadows_midtones_and_highlights() {
        let tritone = ColourMap::Tritone {
            highlights: [1.0, 1.0, 0.0],
            midtones: [0.0, 1.0, 0.0],
            shadows: [0.0, 0.0, 1.0],
        };
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(tritone.map([0.0, 0.0, 0.0]), [0.0, 0.0, 1.0]));
        assert!(close(tritone.map([1.0, 1.0, 1.0]), [1.0, 1.0, 0.0]));
        // A neutral grey is its own luminance: sRGB 0.5 is exactly the midtones.
        assert!(close(tritone.map([0.5, 0.5, 0.5]), [0.0, 1.0, 0.0]));
    }

    #[test]
    fn solid_colours_round_trip_through_hex() {
        assert_eq!(parse_hex("#ff8000").map(to_hex).as_deref(), Some("#ff8000"));
        assert_eq!(parse_hex("ff8000"), None);
        assert_eq!(parse_hex("#ff80é"), None);
    }
}
