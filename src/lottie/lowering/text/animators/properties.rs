//! The properties one animator sets (`a` of an animator): read once, then evaluated at
//! each sample time in lottie-web's units.

use super::property::Property;
use serde_json::Value;

/// Declares the properties an animator sets, once each: its field, its key in `a`, how it is
/// read at a time (a `pair`, a `scalar` or a `color`, with the factor to lottie-web's units)
/// and what it reads as. [`Properties`], its parsing and [`PropertiesAt`] come from this
/// one table.
macro_rules! animator_properties {
    ($($field:ident: $key:literal, $kind:ident($($scale:expr)?) -> $value:ty;)*) => {
        /// The properties one animator sets (`a` of an animator), lottie-web's units: scale
        /// and opacities as fractions, angles in degrees.
        #[derive(Debug, Clone, Default)]
        pub(super) struct Properties {
            $(pub(super) $field: Option<Property>,)*
        }

        /// The properties at one time.
        #[derive(Debug, Clone, Copy, Default)]
        pub(super) struct PropertiesAt {
            $(pub(super) $field: Option<$value>,)*
        }

        impl Properties {
            pub(super) fn parse(properties: &Value) -> Properties {
                let get = |key: &str| properties.get(key).and_then(Property::parse);
                Properties {
                    $($field: get($key),)*
                }
            }

            pub(super) fn all(&self) -> impl Iterator<Item = &Option<Property>> {
                [$(&self.$field),*].into_iter()
            }

            pub(super) fn at(&self, time: f64) -> PropertiesAt {
                PropertiesAt {
                    $($field: $kind(&self.$field, time $(, $scale)?),)*
                }
            }
        }
    };
}

/// Two values (x, y) of `property` at `time`, times `scale`.
fn pair(property: &Option<Property>, time: f64, scale: f64) -> Option<[f64; 2]> {
    property.as_ref().map(|property| {
        let value = property.at(time);
        [
            value.first().copied().unwrap_or(0.0) * scale,
            value.get(1).copied().unwrap_or(0.0) * scale,
        ]
    })
}

/// One value of `property` at `time`, times `scale`.
fn scalar(property: &Option<Property>, time: f64, scale: f64) -> Option<f64> {
    property
        .as_ref()
        .map(|property| property.scalar(time) * scale)
}

/// A colour's red, green and blue of `property` at `time`.
fn color(property: &Option<Property>, time: f64) -> Option<[f64; 3]> {
    property.as_ref().map(|property| {
        let value = property.at(time);
        [0, 1, 2].map(|index| value.get(index).copied().unwrap_or(0.0))
    })
}

animator_properties! {
    position: "p", pair(1.0) -> [f64; 2];
    anchor: "a", pair(1.0) -> [f64; 2];
    scale: "s", pair(0.01) -> [f64; 2];
    rotation: "r", scalar(1.0) -> f64;
    skew: "sk", scalar(1.0) -> f64;
    skew_axis: "sa", scalar(1.0) -> f64;
    opacity: "o", scalar(0.01) -> f64;
    fill_color: "fc", color() -> [f64; 3];
    stroke_color: "sc", color() -> [f64; 3];
    stroke_width: "sw", scalar(1.0) -> f64;
    fill_opacity: "fo", scalar(0.01) -> f64;
    stroke_opacity: "so", scalar(0.01) -> f64;
    hue: "fh", scalar(1.0) -> f64;
    saturation: "fs", scalar(0.01) -> f64;
    brightness: "fb", scalar(0.01) -> f64;
    tracking: "t", scalar(1.0) -> f64;
}
