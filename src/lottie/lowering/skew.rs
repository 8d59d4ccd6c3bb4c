//! Skew (`sk`, `sa`) in group and layer transforms: lottie-web draws it, rlottie 0.1 ignores
//! it. lottie-web's transform is `T(p)·R(r)·K·S(s)·T(-a)` with the skew
//! `K = R(-sa)·Shear(-tan sk)·R(sa)` between rotation and scale; rlottie's has no `K`. A static
//! skew is written as transforms rlottie has: `K`'s singular value decomposition
//! `R(φ)·diag(σ₁, σ₂)·R(θ)` as two nested groups (a rotation and scale, then a rotation),
//! between a group keeping `p`, `r` and `o` and one keeping `s` and `a` around the contents.
//! A shape layer's skew moves into its contents the same way, unless other layers follow it
//! (they would lose its scale and anchor) or masks do (they are drawn in the layer's space).
//! What is not lowered (an animated skew, a skew on another kind of layer) is said in the
//! report.

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// Skew angles (degrees) whose shear is steeper than this are degenerate (After Effects stops
/// at ±85°); they are left out, with a warning.
const MAX_SKEW_DEGREES: f64 = 89.0;
/// Group levels within which a skewed group is lowered. Each lowering nests its contents three
/// groups (six JSON levels) deeper, and rlottie's parser recurses per level: skews below this
/// add at most 192 levels to the template's 256 (`MAX_JSON_DEPTH`). Real files nest groups a
/// handful of levels.
pub const MAX_SKEWED_GROUP_DEPTH: usize = 32;
/// Skew warnings in one report, and characters of a layer name in one (as the effects'
/// warnings quote names).
const MAX_SKEW_WARNINGS: usize = 32;
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;

/// Lowers every static skew of `json` rlottie can be given; answers a warning per skew that
/// stays undrawn.
pub fn lower_skew(json: &mut Value) -> Vec<String> {
    let mut warnings = SkewWarnings::default();
    if let Some(layers) = json.get_mut("layers").and_then(Value::as_array_mut) {
        lower_composition(layers, &mut warnings);
    }
    if let Some(assets) = json.get_mut("assets").and_then(Value::as_array_mut) {
        for asset in assets {
            if let Some(layers) = asset.get_mut("layers").and_then(Value::as_array_mut) {
                lower_composition(layers, &mut warnings);
            }
        }
    }
    warnings.into_vec()
}

/// Distinct skew warnings, at most [`MAX_SKEW_WARNINGS`], the rest counted: a template of
/// thousands of skewed layers with long names says so in a few lines, not megabytes.
#[derive(Default)]
struct SkewWarnings {
    kept: BTreeSet<String>,
    dropped: usize,
}

impl SkewWarnings {
    fn add(&mut self, warning: String) {
        if self.kept.len() < MAX_SKEW_WARNINGS {
            self.kept.insert(warning);
        } else if !self.kept.contains(&warning) {
            self.dropped += 1;
        }
    }

    fn into_vec(self) -> Vec<String> {
        let mut warnings: Vec<String> = self.kept.into_iter().collect();
        if self.dropped > 0 {
            warnings.push(format!(
                "and {} more skews of layers are not drawn",
                self.dropped
            ));
        }
        warnings
    }
}

fn lower_composition(layers: &mut [Value], warnings: &mut SkewWarnings) {
    let parents: BTreeSet<i64> = layers
        .iter()
        .filter_map(|layer| layer.get("parent").and_then(Value::as_i64))
        .collect();
    for layer in layers.iter_mut() {
        let Some(layer) = layer.as_object_mut() else {
            continue;
        };
        let name: String = layer
            .get("nm")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(MAX_NAME_CHARS_IN_WARNINGS)
            .collect();
        let mut warn =
            |why: &str| warnings.add(format!("the skew of layer '{name}' is not drawn ({why})"));
        if let Some(shapes) = layer.get_mut("shapes").and_then(Value::as_array_mut) {
            lower_groups(shapes, 0, &mut warn);
        }
        let Some(transform) = layer.get("ks").and_then(Value::as_object) else {
            continue;
        };
        let skew = match Skew::of(transform) {
            Ok(Some(skew)) => skew,
            Ok(None) => continue,
            Err(why) => {
                warn(why);
                continue;
            }
        };
        let followed = layer
            .get("ind")
            .and_then(Value::as_i64)
            .is_some_and(|ind| parents.contains(&ind));
        let masked = layer
            .get("masksProperties")
            .and_then(Value::as_array)
            .is_some_and(|masks| !masks.is_empty());
        if layer.get("ty").and_then(Value::as_i64) != Some(4) {
            warn("rlottie draws no skew, and only a shape layer's can be moved into its contents");
        } else if followed {
            warn("other layers follow it as their parent");
        } else if masked {
            warn("it has masks");
        } else {
            lower_layer(layer, skew);
        }
    }
}

/// Lowers the skews of the groups in `items` (and the groups nested in them).
fn lower_groups(items: &mut [Value], depth: usize, warn: &mut impl FnMut(&str)) {
    for item in items {
        if item.get("ty").and_then(Value::as_str) != Some("gr") {
            continue;
        }
        let Some(contents) = item.get_mut("it").and_then(Value::as_array_mut) else {
            continue;
        };
        lower_groups(contents, depth + 1, warn);
        let Some(transform) = contents.last().and_then(Value::as_object) else {
            continue;
        };
        if transform.get("ty").and_then(Value::as_str) != Some("tr") {
            continue;
        }
        match Skew::of(transform) {
            Ok(Some(_)) if depth >= MAX_SKEWED_GROUP_DEPTH => {
                warn("its group is nested more than 32 groups deep");
            }
            Ok(Some(skew)) => {
                let Some(Value::Object(transform)) = contents.pop() else {
                    continue;
                };
                let inner = std::mem::take(contents);
                let (wrapped, outer) = skew.wrap(inner, transform);
                contents.push(wrapped);
                contents.push(Value::Object(outer));
            }
            Ok(None) => {}
            Err(why) => warn(why),
        }
    }
}

/// A shape layer's skew, its scale and anchor moved into a group around its shapes.
fn lower_layer(layer: &mut Map<String, Value>, skew: Skew) {
    let Some(Value::Object(transform)) = layer.remove("ks") else {
        return;
    };
    let shapes = match layer.remove("shapes") {
        Some(Value::Array(shapes)) => shapes,
        _ => Vec::new(),
    };
    let (wrapped, outer) = skew.wrap(shapes, transform);
    layer.insert("ks".into(), Value::Object(outer));
    layer.insert("shapes".into(), json!([wrapped]));
}

/// A static skew: its shear's decomposition `R(φ)·diag(σ₁, σ₂)·R(θ)` (degrees, factors).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Skew {
    phi: f64,
    sigma: (f64, f64),
    theta: f64,
}

impl Skew {
    /// The skew of `transform`: None without one (absent or zero); Err with why when it cannot
    /// be lowered.
    fn of(transform: &Map<String, Value>) -> Result<Option<Skew>, &'static str> {
        let static_value = |key: &str| -> Result<f64, &'static str> {
            let Some(property) = transform.get(key) else {
                return Ok(0.0);
            };
            let value = match property.get("k") {
                Some(Value::Array(items)) if items.iter().all(Value::is_number) => items.first(),
                Some(other @ Value::Number(_)) => Some(other),
                Some(_) => return Err("an animated skew is not lowered; rlottie draws no skew"),
                None => None,
            };
            Ok(value.and_then(Value::as_f64).unwrap_or(0.0))
        };
        let skew = static_value("sk")?;
        let axis = static_value("sa")?;
        if skew == 0.0 {
            return Ok(None);
        }
        if !(skew.abs() <= MAX_SKEW_DEGREES && axis.is_finite()) {
            return Err("a skew steeper than 89° is degenerate");
        }
        Ok(Some(Skew::decompose(skew_matrix(skew, axis))))
    }

    /// The singular value decomposition of a 2×2 matrix of positive determinant (closed form:
    /// Blinn, "Consider the lowly 2×2 matrix").
    fn decompose([[a, b], [c, d]]: [[f64; 2]; 2]) -> Skew {
        let (e, f) = ((a + d) / 2.0, (a - d) / 2.0);
        let (g, h) = ((c + b) / 2.0, (c - b) / 2.0);
        let (q, r) = (e.hypot(h), f.hypot(g));
        let (a1, a2) = (g.atan2(f), h.atan2(e));
        Skew {
            phi: ((a2 + a1) / 2.0).to_degrees(),
            sigma: (q + r, q - r),
            theta: ((a2 - a1) / 2.0).to_degrees(),
        }
    }

    /// `contents` inside the skew's groups, inside a group with `transform`'s scale and
    /// anchor; and `transform` without them (nor the skew), for the outside.
    fn wrap(
        self,
        contents: Vec<Value>,
        mut transform: Map<String, Value>,
    ) -> (Value, Map<String, Value>) {
        let scale = transform.remove("s");
        let anchor = transform.remove("a");
        transform.remove("sk");
        transform.remove("sa");
        let mut inner_transform = plain_transform(0.0, [100.0, 100.0]);
        if let Some(scale) = scale {
            inner_transform["s"] = scale;
        }
        if let Some(anchor) = anchor {
            inner_transform["a"] = anchor;
        }
        let group = |mut items: Vec<Value>, transform: Value| {
            items.push(transform);
            json!({"ty": "gr", "nm": "skew", "it": items})
        };
        let scaled = group(contents, inner_transform);
        let turned = group(vec![scaled], plain_transform(self.theta, [100.0, 100.0]));
        let sigma = [self.sigma.0 * 100.0, self.sigma.1 * 100.0];
        let skewed = group(vec![turned], plain_transform(self.phi, sigma));
        transform.insert("a".into(), json!({"a": 0, "k": [0, 0, 0]}));
        transform.insert("s".into(), json!({"a": 0, "k": [100, 100, 100]}));
        (skewed, transform)
    }
}

/// lottie-web's skew matrix (`skewFromAxis(-sk, sa)`, column vectors, y down): `R(-sa)·
/// Shear(-tan sk)·R(sa)`, angles in degrees.
fn skew_matrix(skew: f64, axis: f64) -> [[f64; 2]; 2] {
    let (sin, cos) = axis.to_radians().sin_cos();
    let shear = -skew.to_radians().tan();
    let rotate = |sin: f64, cos: f64| [[cos, -sin], [sin, cos]];
    multiply(
        multiply(rotate(-sin, cos), [[1.0, shear], [0.0, 1.0]]),
        rotate(sin, cos),
    )
}

fn multiply(x: [[f64; 2]; 2], y: [[f64; 2]; 2]) -> [[f64; 2]; 2] {
    std::array::from_fn(|row| {
        std::array::from_fn(|col| x[row][0] * y[0][col] + x[row][1] * y[1][col])
    })
}

/// A group transform rotating by `rotation` degrees and scaling by `scale` percent.
fn plain_transform(rotation: f64, scale: [f64; 2]) -> Value {
    json!({"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
        "s": {"a": 0, "k": scale}, "r": {"a": 0, "k": rotation}, "o": {"a": 0, "k": 100}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decomposition_recomposes_lottie_webs_skew_matrix() {
        for (skew, axis) in [(45.0, 0.0), (30.0, 20.0), (-60.0, 135.0), (10.0, -90.0)] {
            let matrix = skew_matrix(skew, axis);
            let Skew { phi, sigma, theta } = Skew::decompose(matrix);
            let rotate = |degrees: f64| {
                let (sin, cos) = degrees.to_radians().sin_cos();
                [[cos, -sin], [sin, cos]]
            };
            let recomposed = multiply(
                multiply(rotate(phi), [[sigma.0, 0.0], [0.0, sigma.1]]),
                rotate(theta),
            );
            for row in 0..2 {
                for col in 0..2 {
                    assert!(
                        (recomposed[row][col] - matrix[row][col]).abs() < 1e-9,
                        "{skew} {axis}"
                    );
                }
            }
        }
        // sk 45°, axis 0: x' = x - y (lottie-web's shear leans the top to the right).
        assert_eq!(
            skew_matrix(45.0, 0.0).map(|row| row.map(|v| (v * 1e9).round() / 1e9)),
            [[1.0, -1.0], [0.0, 1.0]]
        );
    }

    #[test]
    fn what_cannot_be_lowered_is_warned_about() {
        let skewed = |ty: i64, extra: Value| {
            let mut layer = json!({"ty": ty, "ind": 1, "nm": "L",
                "ks": {"sk": {"a": 0, "k": 20}, "sa": {"a": 0, "k": 0}}, "shapes": []});
            if let (Some(layer), Value::Object(extra)) = (layer.as_object_mut(), extra) {
                layer.extend(extra);
            }
            layer
        };
        let animated = json!({"ty": 4, "nm": "A", "ks": {"sk": {"a": 1, "k": [
            {"t": 0, "s": [0]}, {"t": 10, "s": [30]}]}}, "shapes": []});
        let mut json = json!({"layers": [
            skewed(2, json!({})),
            skewed(4, json!({"masksProperties": [{}]})),
            skewed(4, json!({"ind": 2})), {"ty": 4, "ind": 3, "parent": 2, "shapes": []},
            animated,
            skewed(4, json!({"ind": 5, "nm": "fine"}))]});
        let warnings = lower_skew(&mut json);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(json["layers"][5]["ks"].get("sk").is_none());
        assert_eq!(json["layers"][5]["shapes"][0]["ty"], "gr");
    }

    #[test]
    fn thousands_of_skewed_layers_with_long_names_make_a_few_short_warnings() {
        let name = "n".repeat(10_000);
        let layers: Vec<Value> = (0..1000)
            .map(|index| {
                json!({"ty": 2, "ind": index, "nm": format!("{index}{name}"),
                "ks": {"sk": {"a": 0, "k": 20}}})
            })
            .collect();
        let mut json = json!({"layers": layers});
        let warnings = lower_skew(&mut json);
        assert_eq!(warnings.len(), MAX_SKEW_WARNINGS + 1);
        assert!(warnings.iter().all(|w| w.chars().count() < 300));
        assert_eq!(
            warnings[MAX_SKEW_WARNINGS],
            "and 968 more skews of layers are not drawn"
        );
    }

    #[test]
    fn skewed_groups_nested_past_the_bound_are_left_and_warned_about() {
        let transform = json!({"ty": "tr", "sk": {"a": 0, "k": 10}});
        let mut group = json!({"ty": "gr", "it": [transform.clone()]});
        for _ in 0..MAX_SKEWED_GROUP_DEPTH + 5 {
            group = json!({"ty": "gr", "it": [group, transform.clone()]});
        }
        let mut json = json!({"layers": [{"ty": 4, "nm": "deep", "shapes": [group]}]});
        let warnings = lower_skew(&mut json);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        // The lowered levels hold four groups each where there was one.
        let mut depth = 0;
        let mut item = &json["layers"][0]["shapes"][0];
        while let Some(first) = item.get("it").and_then(|it| it.get(0)) {
            depth += 1;
            item = first;
        }
        assert_eq!(depth, 6 + MAX_SKEWED_GROUP_DEPTH * 4);
    }
}
