//! Retiming a template to the output frame rate. rlottie only renders whole template
//! frames, so rendering a 24 fps template at 60 fps directly would repeat frames. Instead
//! every time value is scaled by `output fps / template fps` (frame rate, in/out points,
//! layer in/out/start times, every keyframe time, markers, in precomps too) so that output
//! frame *i* is template frame *i* and rlottie interpolates between the original keyframes.
//! Time-remap values are seconds and stay as they are. Scaling (never shifting) keeps
//! keyframe times consistent whichever time base a player evaluates them in.

use serde_json::Value;

/// The result of retiming: how many output frames the animation has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeline {
    pub frame_count: u32,
    pub fps: u32,
}

pub use crate::spec::output::frame_count;

/// Rescales `json` (a fenced template) in place to `fps`.
pub fn retime(json: &mut Value, fps: u32) -> Timeline {
    let template_fps = json
        .get("fr")
        .and_then(Value::as_f64)
        .unwrap_or(f64::from(fps));
    let ip = json.get("ip").and_then(Value::as_f64).unwrap_or(0.0);
    let op = json.get("op").and_then(Value::as_f64).unwrap_or(ip + 1.0);
    // Finite even for a frame rate of 5e-324 fps, which the fence lets through (it only asks
    // for more than zero).
    let factor = (f64::from(fps) / template_fps).min(f64::MAX);
    let frames = frame_count((op - ip) / template_fps, fps);
    if let Some(root) = json.as_object_mut() {
        root.insert("fr".to_owned(), Value::from(fps));
        scale_field(root, "ip", factor);
        scale_field(root, "op", factor);
    }
    crate::lottie::reading::model::for_each_layer_list(json, |layers| scale_layers(layers, factor));
    if let Some(markers) = json.get_mut("markers").and_then(Value::as_array_mut) {
        for marker in markers.iter_mut().filter_map(Value::as_object_mut) {
            scale_field(marker, "tm", factor);
            scale_field(marker, "dr", factor);
        }
    }
    Timeline {
        frame_count: frames,
        fps,
    }
}

/// Scales one time. A product beyond the largest float is clamped to it: serde_json writes
/// infinity as `null`, which rlottie refuses (caught by the `prepare` fuzz target's check: a
/// keyframe at 1.7e308 of a 24 fps template rendered at 30 fps). A time that large lies past
/// any timeline either way.
fn scale_field(object: &mut serde_json::Map<String, Value>, key: &str, factor: f64) {
    if let Some(value) = object.get(key).and_then(Value::as_f64) {
        // Both finite, so the product is never NaN.
        let scaled = (value * factor).clamp(-f64::MAX, f64::MAX);
        object.insert(key.to_owned(), Value::from(scaled));
    }
}

fn scale_layers(layers: &mut [Value], factor: f64) {
    for layer in layers.iter_mut() {
        let Some(object) = layer.as_object_mut() else {
            continue;
        };
        for key in ["ip", "op", "st"] {
            scale_field(object, key, factor);
        }
        scale_keyframe_times(layer, factor);
    }
}

/// Every keyframe list inside a layer (`"k": [{"t": …}, …]`): transforms, shapes, masks,
/// effects, text documents, time remap.
fn scale_keyframe_times(layer: &mut Value, factor: f64) {
    let mut stack = vec![layer];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::Array(keyframes)) = map.get_mut("k") {
                    let is_keyframe_list = !keyframes.is_empty()
                        && keyframes
                            .iter()
                            .all(|k| k.get("t").is_some_and(Value::is_number));
                    if is_keyframe_list {
                        for keyframe in keyframes.iter_mut().filter_map(Value::as_object_mut) {
                            scale_field(keyframe, "t", factor);
                        }
                    }
                }
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_24_fps_template_at_60_fps_has_its_times_scaled_by_two_and_a_half() {
        let mut json = json!({"fr": 24, "ip": 0, "op": 48, "w": 10, "h": 10,
            "layers": [{"ty": 4, "ind": 1, "ip": 0, "op": 48, "st": 2,
                "ks": {"o": {"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 24, "s": [100]}]}}}]});
        let timeline = retime(&mut json, 60);
        assert_eq!(
            timeline,
            Timeline {
                frame_count: 120,
                fps: 60
            }
        );
        assert_eq!(json["fr"], json!(60));
        assert_eq!(json["op"], json!(120.0));
        assert_eq!(json.pointer("/layers/0/st"), Some(&json!(5.0)));
        assert_eq!(json.pointer("/layers/0/ks/o/k/1/t"), Some(&json!(60.0)));
        assert_eq!(
            json.pointer("/layers/0/ind"),
            Some(&json!(1)),
            "integers untouched"
        );
    }

    #[test]
    fn times_that_would_overflow_when_scaled_stay_numbers() {
        // Caught by the `prepare` fuzz target: 1.7e308 × 30/24 is infinite, written as null.
        let mut json = json!({"fr": 24, "ip": 0, "op": 48, "w": 10, "h": 10,
            "layers": [{"ty": 4, "ip": 0, "op": 48, "st": -1.7e308,
                "ks": {"o": {"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 1.7e308, "s": [100]}]}}}]});
        retime(&mut json, 30);
        assert_eq!(json.pointer("/layers/0/ks/o/k/1/t"), Some(&json!(f64::MAX)));
        assert_eq!(json.pointer("/layers/0/st"), Some(&json!(-f64::MAX)));

        // A frame rate of 5e-324 makes the factor itself infinite; times stay finite too.
        let mut json = json!({"fr": 5e-324, "ip": 0, "op": 5e-324, "w": 10, "h": 10,
            "layers": [{"ty": 4, "ip": 0, "op": 5e-324, "st": 0,
                "ks": {"o": {"a": 1, "k": [{"t": 0, "s": [0]}, {"t": 5e-324, "s": [100]}]}}}]});
        let timeline = retime(&mut json, 60);
        assert_eq!(timeline.frame_count, 60);
        assert!(!json.to_string().contains("null"), "{json}");
    }

    #[test]
    fn frame_count_rounds_the_duration_to_whole_frames() {
        assert_eq!(frame_count(76.0 / 29.97, 30), 76);
        assert_eq!(frame_count(0.001, 30), 1);
    }
}
