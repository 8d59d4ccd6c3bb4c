//! The properties one animator sets (`a` of an animator): read once, then evaluated at
//! each sample time in lottie-web's units.

use super::property::Property;
use serde_json::Value;

/// The properties one animator sets (`a` of an animator), lottie-web's units: scale and
/// opacities as fractions, angles in degrees.
#[derive(Debug, Clone, Default)]
pub(super) struct Properties {
    pub(super) position: Option<Property>,
    pub(super) anchor: Option<Property>,
    pub(super) scale: Option<Property>,
    pub(super) rotation: Option<Property>,
    pub(super) skew: Option<Property>,
    pub(super) skew_axis: Option<Property>,
    pub(super) opacity: Option<Property>,
    pub(super) fill_color: Option<Property>,
    pub(super) stroke_color: Option<Property>,
    pub(super) stroke_width: Option<Property>,
    pub(super) fill_opacity: Option<Property>,
    pub(super) stroke_opacity: Option<Property>,
    pub(super) hue: Option<Property>,
    pub(super) saturation: Option<Property>,
    pub(super) brightness: Option<Property>,
    pub(super) tracking: Option<Property>,
}

impl Properties {
    pub(super) fn parse(properties: &Value) -> Properties {
        let get = |key: &str| properties.get(key).and_then(Property::parse);
        Properties {
            position: get("p"),
            anchor: get("a"),
            scale: get("s"),
            rotation: get("r"),
            skew: get("sk"),
            skew_axis: get("sa"),
            opacity: get("o"),
            fill_color: get("fc"),
            stroke_color: get("sc"),
            stroke_width: get("sw"),
            fill_opacity: get("fo"),
            stroke_opacity: get("so"),
            hue: get("fh"),
            saturation: get("fs"),
            brightness: get("fb"),
            tracking: get("t"),
        }
    }

    pub(super) fn all(&self) -> [&Option<Property>; 16] {
        [
            &self.position,
            &self.anchor,
            &self.scale,
            &self.rotation,
            &self.skew,
            &self.skew_axis,
            &self.opacity,
            &self.fill_color,
            &self.stroke_color,
            &self.stroke_width,
            &self.fill_opacity,
            &self.stroke_opacity,
            &self.hue,
            &self.saturation,
            &self.brightness,
            &self.tracking,
        ]
    }

    pub(super) fn at(&self, time: f64) -> PropertiesAt {
        let pair = |property: &Option<Property>, scale: f64| {
            property.as_ref().map(|property| {
                let value = property.at(time);
                [
                    value.first().copied().unwrap_or(0.0) * scale,
                    value.get(1).copied().unwrap_or(0.0) * scale,
                ]
            })
        };
        let scalar = |property: &Option<Property>, scale: f64| {
            property
                .as_ref()
                .map(|property| property.scalar(time) * scale)
        };
        let color = |property: &Option<Property>| {
            property.as_ref().map(|property| {
                let value = property.at(time);
                [0, 1, 2].map(|index| value.get(index).copied().unwrap_or(0.0))
            })
        };
        PropertiesAt {
            position: pair(&self.position, 1.0),
            anchor: pair(&self.anchor, 1.0),
            scale: pair(&self.scale, 0.01),
            rotation: scalar(&self.rotation, 1.0),
            skew: scalar(&self.skew, 1.0),
            skew_axis: scalar(&self.skew_axis, 1.0),
            opacity: scalar(&self.opacity, 0.01),
            fill_color: color(&self.fill_color),
            stroke_color: color(&self.stroke_color),
            stroke_width: scalar(&self.stroke_width, 1.0),
            fill_opacity: scalar(&self.fill_opacity, 0.01),
            stroke_opacity: scalar(&self.stroke_opacity, 0.01),
            hue: scalar(&self.hue, 1.0),
            saturation: scalar(&self.saturation, 0.01),
            brightness: scalar(&self.brightness, 0.01),
            tracking: scalar(&self.tracking, 1.0),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PropertiesAt {
    pub(super) position: Option<[f64; 2]>,
    pub(super) anchor: Option<[f64; 2]>,
    pub(super) scale: Option<[f64; 2]>,
    pub(super) rotation: Option<f64>,
    pub(super) skew: Option<f64>,
    pub(super) skew_axis: Option<f64>,
    pub(super) opacity: Option<f64>,
    pub(super) fill_color: Option<[f64; 3]>,
    pub(super) stroke_color: Option<[f64; 3]>,
    pub(super) stroke_width: Option<f64>,
    pub(super) fill_opacity: Option<f64>,
    pub(super) stroke_opacity: Option<f64>,
    pub(super) hue: Option<f64>,
    pub(super) saturation: Option<f64>,
    pub(super) brightness: Option<f64>,
    pub(super) tracking: Option<f64>,
}
