//! Font glyphs as Lottie paths: each laid-out glyph's outline in its font, slanted for a
//! synthesized oblique, its vertices taken from the template's budget.

use super::layout::Layout;
use super::{fonts, outline, TextBudget, TextError};
use serde_json::{json, Value};

/// Whether a glyph at `origin` can be drawn: glyphs pushed beyond the fence's coordinate
/// limit (absurd tracking, line height or shift) are far off any canvas and left out, as
/// huge coordinates make rlottie crawl.
pub(super) fn drawable(origin: [f64; 2]) -> bool {
    origin
        .iter()
        .all(|v| v.is_finite() && v.abs() <= crate::lottie::reading::fence::MAX_PATH_COORDINATE)
}

/// Slants `contour` about the baseline through `origin` by [`fonts::OBLIQUE_SLANT`]: a
/// synthesized oblique (y points down, so ink above the baseline moves right).
fn slant(contour: &mut outline::Contour, origin: [f64; 2]) {
    for vertex in &mut contour.vertices {
        vertex[0] += fonts::OBLIQUE_SLANT * (origin[1] - vertex[1]);
    }
    for tangent in contour
        .in_tangents
        .iter_mut()
        .chain(contour.out_tangents.iter_mut())
    {
        tangent[0] -= fonts::OBLIQUE_SLANT * tangent[1];
    }
}

/// The `sh` items of each glyph of `layout` (in its order; none for a glyph not drawn) in
/// the font `data` (font 0) and the bundled font (font 1, drawing what `data` lacks),
/// slanted when `oblique`, their vertices taken from `budget`.
pub(super) fn font_paths(
    layout: &Layout,
    data: &[u8],
    oblique: bool,
    budget: &mut TextBudget,
    layer: &str,
) -> Result<Vec<Vec<Value>>, TextError> {
    let mut glyphs = Vec::with_capacity(layout.glyphs.len());
    let faces: Vec<Option<ttf_parser::Face<'_>>> = [data, fonts::BUNDLED_FONT]
        .iter()
        .map(|data| ttf_parser::Face::parse(data, 0).ok())
        .collect();
    let Some(Some(primary)) = faces.first() else {
        return Ok(glyphs);
    };
    let primary_units = f64::from(primary.units_per_em());
    for glyph in &layout.glyphs {
        let mut items = Vec::new();
        let face = match faces.get(usize::from(glyph.font)) {
            Some(Some(face)) if drawable(glyph.origin) => face,
            _ => {
                glyphs.push(items);
                continue;
            }
        };
        // The layout's scale is per unit of the first font's em.
        let scale = layout.scale * primary_units / f64::from(face.units_per_em());
        let mut contours = outline::glyph_contours(face, glyph.glyph, glyph.origin, scale);
        if oblique {
            for contour in &mut contours {
                slant(contour, glyph.origin);
            }
        }
        budget.spend_vertices(
            contours.iter().map(|contour| contour.vertices.len()).sum(),
            layer,
        )?;
        for contour in contours {
            items.push(json!({
                "ty": "sh",
                "ks": {
                    "a": 0,
                    "k": {
                        "c": true,
                        "v": contour.vertices,
                        "i": contour.in_tangents,
                        "o": contour.out_tangents,
                    }
                }
            }));
        }
        glyphs.push(items);
    }
    Ok(glyphs)
}
