//! Path values baked from expressions (`content('Shape 1').content('Path 1').path`, a
//! `createPath`): made after the fence looked at the template, so each is held to the
//! fence's path limits here, and all of a template's together to
//! [`MAX_BAKED_PATH_VERTICES`], before rlottie sees them.

use crate::lottie::reading::fence::{MAX_PATH_COORDINATE, MAX_PATH_VERTICES};
use serde_json::Value;

/// Vertices of all the paths a template's expressions bake: a rigged character's dozen
/// path expressions of 20 vertices over 600 frames bake 144,000; each baked vertex is a few
/// hundred bytes of JSON until rlottie has parsed it, so the bound keeps a hostile template
/// (long paths, every frame) to some tens of MiB. Past it the expression keeps its
/// static value, with a warning.
pub const MAX_BAKED_PATH_VERTICES: usize = 250_000;

/// Whether `value` is a path as the prelude gives one (`{c, v, i, o}`).
pub(super) fn is_path(value: &Value) -> bool {
    value.as_object().is_some_and(|path| path.contains_key("v"))
}

/// The vertices of `values`, all paths within the fence's limits (vertex count, finite
/// coordinates within ±[`MAX_PATH_COORDINATE`], tangents for every vertex); why not otherwise.
pub(super) fn vertex_count(values: &[Value]) -> Result<usize, String> {
    let mut total = 0usize;
    for value in values {
        let points = |key: &str| value.get(key).and_then(Value::as_array);
        let (Some(vertices), Some(ins), Some(outs)) = (points("v"), points("i"), points("o"))
        else {
            return Err("the expression gave a path without vertices and tangents".to_owned());
        };
        if vertices.len() > MAX_PATH_VERTICES {
            return Err(format!(
                "the expression gave a path of {} vertices, more than {MAX_PATH_VERTICES}",
                vertices.len()
            ));
        }
        if ins.len() != vertices.len() || outs.len() != vertices.len() {
            return Err(
                "the expression gave a path whose tangents do not match its vertices".to_owned(),
            );
        }
        let within = |point: &Value| {
            point.as_array().is_some_and(|xy| {
                xy.len() == 2
                    && xy.iter().all(|c| {
                        c.as_f64()
                            .is_some_and(|c| c.is_finite() && c.abs() <= MAX_PATH_COORDINATE)
                    })
            })
        };
        if !vertices.iter().chain(ins).chain(outs).all(within) {
            return Err(format!(
                "the expression gave a path coordinate beyond ±{MAX_PATH_COORDINATE}"
            ));
        }
        total = total.saturating_add(vertices.len());
    }
    Ok(total)
}

/// Takes the vertices of `values` (when they are paths) from what is `left` of
/// [`MAX_BAKED_PATH_VERTICES`]; why not, leaving `left` as it was, when they are not within
/// the limits or not all left.
pub(super) fn charge(values: &[Value], left: &mut usize) -> Result<(), String> {
    if !values.first().is_some_and(is_path) {
        return Ok(());
    }
    let vertices = vertex_count(values)?;
    *left = left.checked_sub(vertices).ok_or_else(|| {
        format!("the template's expressions would bake paths of more than {MAX_BAKED_PATH_VERTICES} vertices")
    })?;
    Ok(())
}

/// Whether rlottie can interpolate from path `from` to path `to` (the same vertex count);
/// other consecutive baked paths are held.
pub(super) fn interpolable(from: &Value, to: &Value) -> bool {
    let count = |path: &Value| path.get("v").and_then(Value::as_array).map(Vec::len);
    count(from) == count(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn square(side: f64) -> Value {
        json!({"c": true, "v": [[0, 0], [side, 0], [side, side], [0, side]],
            "i": [[0, 0], [0, 0], [0, 0], [0, 0]], "o": [[0, 0], [0, 0], [0, 0], [0, 0]]})
    }

    #[test]
    fn paths_within_the_fence_count_their_vertices_and_others_are_refused() {
        assert_eq!(vertex_count(&[square(1.0), square(2.0)]), Ok(8));
        assert!(vertex_count(&[square(2e6)]).unwrap_err().contains("beyond"));
        let mut short = square(1.0);
        short["i"] = json!([[0, 0]]);
        assert!(vertex_count(&[short]).unwrap_err().contains("tangents"));
        let long = json!({"v": vec![[0, 0]; MAX_PATH_VERTICES + 1],
            "i": vec![[0, 0]; MAX_PATH_VERTICES + 1], "o": vec![[0, 0]; MAX_PATH_VERTICES + 1]});
        assert!(vertex_count(&[long]).unwrap_err().contains("vertices"));
    }

    #[test]
    fn a_templates_baked_paths_share_one_vertex_bound() {
        let mut left = 10;
        assert_eq!(charge(&[square(1.0), square(2.0)], &mut left), Ok(()));
        assert_eq!(left, 2);
        assert!(charge(&[square(3.0)], &mut left)
            .unwrap_err()
            .contains("more than 250000"));
        assert_eq!(left, 2, "nothing taken by a refused bake");
        assert_eq!(
            charge(&[json!(1.0), json!(2.0)], &mut left),
            Ok(()),
            "numbers are free"
        );
    }
}
