//! Glyph outlines (ttf-parser) as Lottie bezier paths: TrueType quadratic curves become
//! cubic ones (exactly: a quadratic is a cubic with control points two thirds along), font
//! units become pixels, and y points down as in Lottie.

/// One closed contour: vertices with their in and out tangents relative to the vertex, as a
/// Lottie path (`{"c": true, "v": …, "i": …, "o": …}`) keeps them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Contour {
    pub vertices: Vec<[f64; 2]>,
    pub in_tangents: Vec<[f64; 2]>,
    pub out_tangents: Vec<[f64; 2]>,
}

/// Collects contours, mapping a font-unit point (x, y) to (origin.x + x·scale,
/// origin.y − y·scale).
struct ContourBuilder {
    origin: [f64; 2],
    scale: f64,
    contours: Vec<Contour>,
    current: Contour,
    /// The current point, in pixels.
    pen: [f64; 2],
}

impl ContourBuilder {
    fn map(&self, x: f32, y: f32) -> [f64; 2] {
        [
            self.origin[0] + f64::from(x) * self.scale,
            self.origin[1] - f64::from(y) * self.scale,
        ]
    }

    fn push_vertex(&mut self, point: [f64; 2], in_tangent: [f64; 2]) {
        self.current.vertices.push(point);
        self.current.in_tangents.push(in_tangent);
        self.current.out_tangents.push([0.0, 0.0]);
        self.pen = point;
    }

    fn set_last_out(&mut self, out: [f64; 2]) {
        if let Some(last) = self.current.out_tangents.last_mut() {
            *last = out;
        }
    }

    fn finish_contour(&mut self) {
        let mut contour = std::mem::take(&mut self.current);
        // A closing segment back onto the first vertex duplicates it: fold its in-tangent
        // into the first vertex and drop it.
        if contour.vertices.len() > 1 {
            let last = contour.vertices.len() - 1;
            let [fx, fy] = contour.vertices[0];
            let [lx, ly] = contour.vertices[last];
            if (fx - lx).abs() < 1e-9 && (fy - ly).abs() < 1e-9 {
                contour.in_tangents[0] = contour.in_tangents[last];
                contour.vertices.pop();
                contour.in_tangents.pop();
                contour.out_tangents.pop();
            }
        }
        if contour.vertices.len() > 1 {
            self.contours.push(contour);
        }
    }
}

fn sub(a: [f64; 2], b: [f64; 2]) -> [f64; 2] {
    [a[0] - b[0], a[1] - b[1]]
}

impl ttf_parser::OutlineBuilder for ContourBuilder {
    fn move_to(&mut self, x: f32, y: f32) {
        if !self.current.vertices.is_empty() {
            self.finish_contour();
        }
        let point = self.map(x, y);
        self.push_vertex(point, [0.0, 0.0]);
    }

    fn line_to(&mut self, x: f32, y: f32) {
        let point = self.map(x, y);
        self.push_vertex(point, [0.0, 0.0]);
    }

    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        let start = self.pen;
        let control = self.map(x1, y1);
        let end = self.map(x, y);
        let two_thirds = |from: [f64; 2]| {
            [
                from[0] + (control[0] - from[0]) * 2.0 / 3.0,
                from[1] + (control[1] - from[1]) * 2.0 / 3.0,
            ]
        };
        self.set_last_out(sub(two_thirds(start), start));
        self.push_vertex(end, sub(two_thirds(end), end));
    }

    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        let start = self.pen;
        let first = self.map(x1, y1);
        let second = self.map(x2, y2);
        let end = self.map(x, y);
        self.set_last_out(sub(first, start));
        self.push_vertex(end, sub(second, end));
    }

    fn close(&mut self) {
        self.finish_contour();
    }
}

/// The contours of glyph `glyph` of `face`, its origin at `origin` (pixels), `scale` pixels
/// per font unit. An empty glyph (a space) has none.
pub(crate) fn glyph_contours(
    face: &ttf_parser::Face<'_>,
    glyph: u16,
    origin: [f64; 2],
    scale: f64,
) -> Vec<Contour> {
    let mut builder = ContourBuilder {
        origin,
        scale,
        contours: Vec::new(),
        current: Contour::default(),
        pen: origin,
    };
    if face
        .outline_glyph(ttf_parser::GlyphId(glyph), &mut builder)
        .is_some()
        && !builder.current.vertices.is_empty()
    {
        builder.finish_contour();
    }
    builder.contours
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glyph_becomes_closed_cubic_contours_in_pixels_with_y_down() {
        let face = ttf_parser::Face::parse(super::super::fonts::BUNDLED_FONT, 0).unwrap();
        let glyph = face.glyph_index('O').unwrap();
        let scale = 100.0 / f64::from(face.units_per_em());
        let contours = glyph_contours(&face, glyph.0, [10.0, 200.0], scale);
        // 'O' has an outer and an inner contour.
        assert_eq!(contours.len(), 2);
        for contour in &contours {
            assert!(contour.vertices.len() >= 4);
            assert_eq!(contour.vertices.len(), contour.in_tangents.len());
            assert_eq!(contour.vertices.len(), contour.out_tangents.len());
            // Above the baseline at y = 200 (round letters overshoot it by a pixel or two at
            // 100 px) and right of the origin.
            assert!(contour
                .vertices
                .iter()
                .all(|[x, y]| *x >= 10.0 && *y < 203.0));
            assert!(
                contour.vertices.iter().any(|[_, y]| *y < 140.0),
                "cap height"
            );
        }
        let space = face.glyph_index(' ').unwrap();
        assert!(glyph_contours(&face, space.0, [0.0, 0.0], scale).is_empty());
    }
}
