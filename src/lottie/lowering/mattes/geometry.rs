//! The geometry of a matte turned into masks: layer and group transforms composed as
//! lottie-web composes them (`TransformProperty.js`: anchor, scale, rotation, position, a
//! child inside its parent), and the outlines of rectangles, ellipses and paths as the Bézier
//! contours lottie-web draws for them (`ShapeProperty.js`, its `roundCorner` 0.5519).

use crate::lottie::lowering::text::animators::Property;
use serde_json::{json, Value};

/// The length of a quarter circle's Bézier handles, as a fraction of its radius: lottie-web's
/// `roundCorner`, for ellipses and rounded rectangle corners.
const ROUND_CORNER: f64 = 0.5519;

/// A 2D affine map: `x' = a·x + c·y + e`, `y' = b·x + d·y + f`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Affine([f64; 6]);

impl Affine {
    pub(super) const IDENTITY: Affine = Affine([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]);

    /// A layer's or group's transform: the point moved by `-anchor`, scaled by `scale` %,
    /// rotated by `degrees` (clockwise on screen, y pointing down) and moved to `position`.
    pub(super) fn from_parts(
        position: [f64; 2],
        anchor: [f64; 2],
        scale: [f64; 2],
        degrees: f64,
    ) -> Affine {
        let (sin, cos) = degrees.to_radians().sin_cos();
        let (sx, sy) = (scale[0] / 100.0, scale[1] / 100.0);
        let [a, b, c, d] = [cos * sx, sin * sx, -sin * sy, cos * sy];
        let e = position[0] - (a * anchor[0] + c * anchor[1]);
        let f = position[1] - (b * anchor[0] + d * anchor[1]);
        Affine([a, b, c, d, e, f])
    }

    /// `self` applied first, then `outer`.
    pub(super) fn then(self, outer: Affine) -> Affine {
        let [a, b, c, d, e, f] = self.0;
        let [oa, ob, oc, od, oe, of] = outer.0;
        Affine([
            oa * a + oc * b,
            ob * a + od * b,
            oa * c + oc * d,
            ob * c + od * d,
            oa * e + oc * f + oe,
            ob * e + od * f + of,
        ])
    }

    /// The map undoing `self`; `None` when it collapses the plane (a scale of 0).
    pub(super) fn inverse(self) -> Option<Affine> {
        let [a, b, c, d, e, f] = self.0;
        let determinant = a * d - b * c;
        if !determinant.is_finite() || determinant.abs() < 1e-12 {
            return None;
        }
        let [ia, ib, ic, id] = [
            d / determinant,
            -b / determinant,
            -c / determinant,
            a / determinant,
        ];
        Some(Affine([
            ia,
            ib,
            ic,
            id,
            -(ia * e + ic * f),
            -(ib * e + id * f),
        ]))
    }

    pub(super) fn point(self, [x, y]: [f64; 2]) -> [f64; 2] {
        let [a, b, c, d, e, f] = self.0;
        [a * x + c * y + e, b * x + d * y + f]
    }

    /// A tangent (a difference of points): the linear part alone.
    fn vector(self, [x, y]: [f64; 2]) -> [f64; 2] {
        let [a, b, c, d, _, _] = self.0;
        [a * x + c * y, b * x + d * y]
    }
}

/// A transform (a layer's `ks` or a group's `tr`) over time.
#[derive(Debug, Clone)]
pub(super) struct Transform {
    position: Position,
    anchor: Property,
    scale: Property,
    rotation: Property,
}

#[derive(Debug, Clone)]
enum Position {
    Together(Property),
    Split(Property, Property),
}

impl Transform {
    /// Reads `transform`; `None` for what lottie-web composes otherwise or what is not read
    /// here: skew, 3D rotations, position keyframes moving along a curve (`ti`/`to`).
    pub(super) fn parse(transform: &Value) -> Option<Transform> {
        let property = |key: &str, default: Vec<f64>| match transform.get(key) {
            None => Some(Property::constant(default)),
            Some(value) => Property::parse(value),
        };
        if ["sk", "rx", "ry"].iter().any(|key| {
            transform
                .get(key)
                .is_some_and(|value| !all_values_are(value, 0.0))
        }) || transform
            .get("or")
            .is_some_and(|value| !all_values_are(value, 0.0))
        {
            return None;
        }
        let position = match transform.get("p") {
            Some(split) if split.get("s").and_then(Value::as_bool) == Some(true) => {
                Position::Split(
                    Property::parse(split.get("x")?)?,
                    Property::parse(split.get("y")?)?,
                )
            }
            Some(together) if moves_along_a_curve(together) => return None,
            Some(together) => Position::Together(Property::parse(together)?),
            None => Position::Together(Property::constant(vec![0.0, 0.0])),
        };
        let rotation = match (transform.get("r"), transform.get("rz")) {
            (None, Some(rz)) => Property::parse(rz)?,
            _ => property("r", vec![0.0])?,
        };
        Some(Transform {
            position,
            anchor: property("a", vec![0.0, 0.0])?,
            scale: property("s", vec![100.0, 100.0])?,
            rotation,
        })
    }

    pub(super) fn is_animated(&self) -> bool {
        let position = match &self.position {
            Position::Together(p) => p.is_animated(),
            Position::Split(x, y) => x.is_animated() || y.is_animated(),
        };
        position
            || self.anchor.is_animated()
            || self.scale.is_animated()
            || self.rotation.is_animated()
    }

    /// The map at `time` (the composition's frames, as keyframe times are).
    pub(super) fn at(&self, time: f64) -> Affine {
        let pair = |values: Vec<f64>, default: f64| {
            [
                values.first().copied().unwrap_or(default),
                values.get(1).copied().unwrap_or(default),
            ]
        };
        let position = match &self.position {
            Position::Together(p) => pair(p.at(time), 0.0),
            Position::Split(x, y) => [x.scalar(time), y.scalar(time)],
        };
        Affine::from_parts(
            position,
            pair(self.anchor.at(time), 0.0),
            pair(self.scale.at(time), 100.0),
            self.rotation.scalar(time),
        )
    }
}

/// Whether every value (static, or each keyframe's) of `property` is `expected` (each
/// number of an array value).
pub(super) fn all_values_are(property: &Value, expected: f64) -> bool {
    crate::lottie::reading::model::property_values(property)
        .into_iter()
        .all(|value| match value {
            Value::Array(items) => items.iter().all(|item| item.as_f64() == Some(expected)),
            other => other.as_f64() == Some(expected),
        })
}

/// Position keyframes with spatial tangents: lottie-web moves along a Bézier curve there.
fn moves_along_a_curve(position: &Value) -> bool {
    let Some(keyframes) = position.get("k").and_then(Value::as_array) else {
        return false;
    };
    keyframes.iter().any(|keyframe| {
        ["ti", "to"].iter().any(|key| {
            keyframe.get(key).is_some_and(|tangent| {
                tangent
                    .as_array()
                    .is_some_and(|items| items.iter().any(|item| item.as_f64() != Some(0.0)))
            })
        })
    })
}

/// A closed Bézier contour as Lottie writes one: vertices, each with its in and out
/// tangents relative to it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Contour {
    vertices: Vec<[f64; 2]>,
    in_tangents: Vec<[f64; 2]>,
    out_tangents: Vec<[f64; 2]>,
}

impl Contour {
    pub(super) fn len(&self) -> usize {
        self.vertices.len()
    }

    /// Reads a Lottie path value (`{"c", "v", "i", "o"}`). An open path is filled as if closed
    /// by a straight line, so its closing segment gets no tangents. `None` when malformed.
    pub(super) fn from_path(path: &Value) -> Option<Contour> {
        let points = |key: &str| -> Option<Vec<[f64; 2]>> {
            path.get(key)?
                .as_array()?
                .iter()
                .map(|point| {
                    let x = point.get(0)?.as_f64()?;
                    let y = point.get(1)?.as_f64()?;
                    (x.is_finite() && y.is_finite()).then_some([x, y])
                })
                .collect()
        };
        let vertices = points("v")?;
        let mut in_tangents = points("i")?;
        let mut out_tangents = points("o")?;
        if vertices.len() < 2
            || in_tangents.len() != vertices.len()
            || out_tangents.len() != vertices.len()
        {
            return None;
        }
        if path.get("c").and_then(Value::as_bool) != Some(true) {
            in_tangents[0] = [0.0, 0.0];
            if let Some(last) = out_tangents.last_mut() {
                *last = [0.0, 0.0];
            }
        }
        Some(Contour {
            vertices,
            in_tangents,
            out_tangents,
        })
    }

    /// A rectangle centred on `centre`, its corners rounded by `roundness` (at most half the
    /// shorter side), clockwise from the top right corner.
    pub(super) fn rectangle(centre: [f64; 2], size: [f64; 2], roundness: f64) -> Contour {
        let (half_w, half_h) = (size[0].abs() / 2.0, size[1].abs() / 2.0);
        let round = roundness.max(0.0).min(half_w).min(half_h);
        let [x, y] = centre;
        // Each corner with the directions of the edges into and out of it.
        let corners = [
            ([x + half_w, y - half_h], [1.0, 0.0], [0.0, 1.0]),
            ([x + half_w, y + half_h], [0.0, 1.0], [-1.0, 0.0]),
            ([x - half_w, y + half_h], [-1.0, 0.0], [0.0, -1.0]),
            ([x - half_w, y - half_h], [0.0, -1.0], [1.0, 0.0]),
        ];
        let mut contour = Contour {
            vertices: Vec::new(),
            in_tangents: Vec::new(),
            out_tangents: Vec::new(),
        };
        let handle = round * ROUND_CORNER;
        for ([cx, cy], into, out) in corners {
            if round == 0.0 {
                contour.push([cx, cy], [0.0, 0.0], [0.0, 0.0]);
                continue;
            }
            contour.push(
                [cx - into[0] * round, cy - into[1] * round],
                [0.0, 0.0],
                [into[0] * handle, into[1] * handle],
            );
            contour.push(
                [cx + out[0] * round, cy + out[1] * round],
                [-out[0] * handle, -out[1] * handle],
                [0.0, 0.0],
            );
        }
        contour
    }

    /// An ellipse of `size` centred on `centre`, clockwise from its top.
    pub(super) fn ellipse(centre: [f64; 2], size: [f64; 2]) -> Contour {
        let (rx, ry) = (size[0] / 2.0, size[1] / 2.0);
        let (hx, hy) = (rx * ROUND_CORNER, ry * ROUND_CORNER);
        let [x, y] = centre;
        let mut contour = Contour {
            vertices: Vec::new(),
            in_tangents: Vec::new(),
            out_tangents: Vec::new(),
        };
        contour.push([x, y - ry], [-hx, 0.0], [hx, 0.0]);
        contour.push([x + rx, y], [0.0, -hy], [0.0, hy]);
        contour.push([x, y + ry], [hx, 0.0], [-hx, 0.0]);
        contour.push([x - rx, y], [0.0, hy], [0.0, -hy]);
        contour
    }

    fn push(&mut self, vertex: [f64; 2], in_tangent: [f64; 2], out_tangent: [f64; 2]) {
        self.vertices.push(vertex);
        self.in_tangents.push(in_tangent);
        self.out_tangents.push(out_tangent);
    }

    /// The contour mapped by `map` (exact: an affine map of a Bézier curve is the curve of
    /// its mapped control points).
    pub(super) fn transformed(&self, map: Affine) -> Contour {
        Contour {
            vertices: self.vertices.iter().map(|v| map.point(*v)).collect(),
            in_tangents: self.in_tangents.iter().map(|t| map.vector(*t)).collect(),
            out_tangents: self.out_tangents.iter().map(|t| map.vector(*t)).collect(),
        }
    }

    /// The same number of vertices, all at the origin: a layer collapsed to nothing draws
    /// nothing whatever its mask.
    pub(super) fn collapsed(&self) -> Contour {
        let zeros = vec![[0.0, 0.0]; self.len()];
        Contour {
            vertices: zeros.clone(),
            in_tangents: zeros.clone(),
            out_tangents: zeros,
        }
    }

    /// The Lottie path value (closed).
    pub(super) fn to_json(&self) -> Value {
        json!({"c": true, "v": self.vertices, "i": self.in_tangents, "o": self.out_tangents})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [f64; 2], b: [f64; 2]) -> bool {
        (a[0] - b[0]).abs() < 1e-9 && (a[1] - b[1]).abs() < 1e-9
    }

    #[test]
    fn a_transform_moves_the_anchor_to_the_position_after_scaling_and_rotating() {
        // A quarter turn clockwise on screen takes +x to +y.
        let map = Affine::from_parts([50.0, 40.0], [10.0, 0.0], [200.0, 100.0], 90.0);
        assert!(close(map.point([10.0, 0.0]), [50.0, 40.0]));
        assert!(close(map.point([11.0, 0.0]), [50.0, 42.0]));
        assert!(close(map.point([10.0, 1.0]), [49.0, 40.0]));
        let back = map.inverse().unwrap();
        assert!(close(back.point(map.point([3.0, -7.0])), [3.0, -7.0]));
        assert!(Affine::from_parts([0.0; 2], [0.0; 2], [0.0, 100.0], 0.0)
            .inverse()
            .is_none());
    }

    #[test]
    fn then_applies_the_inner_map_first() {
        let inner = Affine::from_parts([5.0, 0.0], [0.0; 2], [100.0; 2], 0.0);
        let outer = Affine::from_parts([0.0; 2], [0.0; 2], [200.0, 200.0], 0.0);
        assert!(close(inner.then(outer).point([1.0, 1.0]), [12.0, 2.0]));
    }

    #[test]
    fn transforms_read_split_positions_and_refuse_skew_and_curved_motion() {
        let split = Transform::parse(
            &json!({"p": {"s": true, "x": {"a": 0, "k": 3}, "y": {"a": 0, "k": 4}}}),
        )
        .unwrap();
        assert!(close(split.at(0.0).point([0.0, 0.0]), [3.0, 4.0]));
        assert!(Transform::parse(&json!({"sk": {"a": 0, "k": 10}})).is_none());
        assert!(Transform::parse(&json!({"p": {"a": 1, "k": [
            {"t": 0, "s": [0, 0], "to": [5, 0], "ti": [0, 0]}, {"t": 10, "s": [10, 0]}]}}))
        .is_none());
        let moving = Transform::parse(&json!({"p": {"a": 1, "k": [
            {"t": 0, "s": [0, 0], "o": {"x": 0, "y": 0}, "i": {"x": 1, "y": 1}}, {"t": 10, "s": [10, 0]}]}}))
        .unwrap();
        assert!(moving.is_animated());
        assert!(close(moving.at(5.0).point([0.0, 0.0]), [5.0, 0.0]));
    }

    #[test]
    fn rectangles_round_their_corners_with_lottie_webs_handles() {
        let square = Contour::rectangle([0.0, 0.0], [20.0, 10.0], 0.0);
        assert_eq!(
            square.vertices,
            vec![[10.0, -5.0], [10.0, 5.0], [-10.0, 5.0], [-10.0, -5.0]]
        );
        let rounded = Contour::rectangle([0.0, 0.0], [20.0, 10.0], 100.0);
        assert_eq!(rounded.len(), 8);
        // Roundness is limited to half the shorter side: the right side is a half circle.
        assert!(close(rounded.vertices[0], [5.0, -5.0]));
        assert!(close(rounded.out_tangents[0], [5.0 * ROUND_CORNER, 0.0]));
        assert!(close(rounded.vertices[1], [10.0, 0.0]));
    }

    #[test]
    fn an_open_path_is_closed_by_a_straight_line() {
        let path = json!({"c": false, "v": [[0, 0], [10, 0], [10, 10]],
            "i": [[1, 1], [0, 0], [0, -2]], "o": [[2, 0], [0, 0], [3, 3]]});
        let contour = Contour::from_path(&path).unwrap();
        assert_eq!(contour.in_tangents[0], [0.0, 0.0]);
        assert_eq!(contour.out_tangents[2], [0.0, 0.0]);
        assert_eq!(contour.to_json()["c"], json!(true));
        assert!(Contour::from_path(&json!({"v": [[0, 0]], "i": [], "o": []})).is_none());
    }
}
