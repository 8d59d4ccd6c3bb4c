//! Colour space conversions of the hue, saturation and brightness animators, as lottie-web
//! makes them (`RGBtoHSV`, `HSVtoRGB`).

/// HSV of an RGB colour (0..=1), lottie-web's `RGBtoHSV`.
pub(super) fn rgb_to_hsv(color: [f64; 3]) -> [f64; 3] {
    let [r, g, b] = color;
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let d = max - min;
    let s = if max == 0.0 { 0.0 } else { d / max };
    let h = if d == 0.0 {
        0.0
    } else if max == r {
        (g - b + d * if g < b { 6.0 } else { 0.0 }) / (6.0 * d)
    } else if max == g {
        (b - r + d * 2.0) / (6.0 * d)
    } else {
        (r - g + d * 4.0) / (6.0 * d)
    };
    [h, s, max]
}

/// RGB of an HSV colour, lottie-web's `HSVtoRGB`.
pub(super) fn hsv_to_rgb([h, s, v]: [f64; 3]) -> [f64; 3] {
    let i = (h * 6.0).floor();
    let f = h * 6.0 - i;
    let p = v * (1.0 - s);
    let q = v * (1.0 - f * s);
    let t = v * (1.0 - (1.0 - f) * s);
    match (i as i64).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}
