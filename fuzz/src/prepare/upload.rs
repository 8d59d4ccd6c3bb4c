//! The template as a caller uploads it: its JSON as it is, or a dotLottie archive of it
//! (manifest version 1 or 2) with generated themes of every rule type and a second
//! animation, and the animation CreateTemplate names.

use super::generate::{
    color, number, pick, text, ColorChoice, NameChoice, NumberChoice, SlotIds, TextChoice,
};
use arbitrary::Arbitrary;
use lottie_render::lottie::slots::Slots;
use serde_json::{json, Value};
use std::io::Write;

/// Themes and rules of one generated archive, at most: enough for every rule type and
/// a few themes; the archive's own limits are the `template` target's business.
const MAX_GENERATED_THEMES: usize = 4;
const MAX_GENERATED_RULES: usize = 12;

/// How the template is uploaded.
#[derive(Debug, Arbitrary)]
pub enum Packing {
    Json,
    DotLottie(Archive),
}

/// A dotLottie archive of the template: manifest version 2 (`a/`, `initial`) or 1
/// (`animations/`, `activeAnimationId`), its themes, a second animation (the template cut to
/// half its length, so the frame count tells which one is rendered) and the one CreateTemplate
/// names.
#[derive(Debug, Arbitrary)]
pub struct Archive {
    version_two: bool,
    themes: Vec<Vec<RuleChoice>>,
    second_animation: bool,
    second_first: bool,
    chosen: AnimationChoice,
}

#[derive(Debug, Arbitrary)]
enum AnimationChoice {
    /// The archive's own choice.
    Default,
    /// The n-th of its animations (modulo their number).
    Listed(u8),
    Made(String),
}

/// One rule of a theme: its type, the slot it names (of that kind, or any id) and its value.
#[derive(Debug, Arbitrary)]
struct RuleChoice {
    kind: RuleKind,
    slot: NameChoice,
    value: RuleValue,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum RuleKind {
    Color,
    Scalar,
    Vector,
    Position,
    Gradient,
    Text,
    Image,
    Unknown,
}

#[derive(Debug, Arbitrary)]
enum RuleValue {
    Color(ColorChoice),
    Number(NumberChoice),
    Numbers(Vec<NumberChoice>),
    Stops(Vec<(NumberChoice, ColorChoice)>),
    Text(TextChoice),
    Keyframed,
    Expression,
    Missing,
}

/// The template as uploaded, and the animation CreateTemplate names (None: the archive's
/// own choice, or a JSON template). `json` is the template's first JSON value, `slots` its
/// slots (the themes' rules name them).
pub fn upload(json: &[u8], packing: &Packing, slots: &Slots) -> (Vec<u8>, Option<String>) {
    let archive = match packing {
        Packing::Json => return (json.to_vec(), None),
        Packing::DotLottie(archive) => archive,
    };
    let mut animations = vec![("main".to_owned(), json.to_vec())];
    if archive.second_animation {
        let half = half_length(json);
        if archive.second_first {
            animations.insert(0, ("half".to_owned(), half));
        } else {
            animations.push(("half".to_owned(), half));
        }
    }
    let ids: Vec<&str> = animations.iter().map(|(id, _)| id.as_str()).collect();
    let chosen = match &archive.chosen {
        AnimationChoice::Default => None,
        AnimationChoice::Listed(index) => Some(ids[usize::from(*index) % ids.len()].to_owned()),
        AnimationChoice::Made(id) => Some(id.clone()),
    };
    let themes: Vec<(String, Value)> = archive
        .themes
        .iter()
        .take(MAX_GENERATED_THEMES)
        .enumerate()
        .map(|(index, rules)| (format!("theme{index}"), theme(rules, slots)))
        .collect();
    (dotlottie(archive.version_two, &animations, &themes), chosen)
}

/// The template with its out point halfway: a second animation another frame count tells
/// apart. Left as it is when it has no numeric `ip` and `op`.
fn half_length(json: &[u8]) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<Value>(json) else {
        return json.to_vec();
    };
    let ip = value.get("ip").and_then(Value::as_f64);
    let op = value.get("op").and_then(Value::as_f64);
    if let (Some(ip), Some(op), Some(root)) = (ip, op, value.as_object_mut()) {
        root.insert("op".to_owned(), json!(ip + ((op - ip) / 2.0).max(1.0)));
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| json.to_vec())
}

/// A theme file (`{"rules": [...]}`) of `rules`, naming slots of `slots` by their kind.
fn theme(rules: &[RuleChoice], slots: &Slots) -> Value {
    let ids = SlotIds::of(slots);
    let rules: Vec<Value> = rules
        .iter()
        .take(MAX_GENERATED_RULES)
        .map(|rule| {
            let (kind, names) = match rule.kind {
                RuleKind::Color => ("Color", &ids.colors),
                RuleKind::Scalar => ("Scalar", &ids.scalars),
                RuleKind::Vector => ("Vector", &ids.vectors),
                RuleKind::Position => ("Position", &ids.vectors),
                RuleKind::Gradient => ("Gradient", &ids.gradients),
                RuleKind::Text => ("Text", &ids.texts),
                RuleKind::Image => ("Image", &ids.images),
                RuleKind::Unknown => ("Sparkle", &ids.colors),
            };
            let id = pick(&rule.slot, names).unwrap_or_else(|| rule.slot.made.clone());
            let mut written = json!({"id": id, "type": kind});
            let channels = |choice: &ColorChoice| {
                let c = color(choice);
                let mut channels = vec![c.r, c.g, c.b];
                channels.extend(c.a);
                json!(channels)
            };
            let value = match &rule.value {
                RuleValue::Color(choice) => Some(channels(choice)),
                RuleValue::Number(choice) => Some(json!(number(*choice, 0.0, 100.0))),
                RuleValue::Numbers(choices) => Some(json!(choices
                    .iter()
                    .map(|choice| number(*choice, -1000.0, 1000.0))
                    .collect::<Vec<_>>())),
                RuleValue::Stops(stops) => Some(json!(stops
                    .iter()
                    .map(|(offset, stop_color)| json!({
                        "offset": number(*offset, 0.0, 1.0),
                        "color": channels(stop_color),
                    }))
                    .collect::<Vec<_>>())),
                RuleValue::Text(choice) => Some(json!({"text": text(choice)})),
                RuleValue::Keyframed => {
                    written["keyframes"] = json!([{"frame": 0, "value": [1, 0, 0]}]);
                    None
                }
                RuleValue::Expression => {
                    written["expression"] = json!("time * 10");
                    None
                }
                RuleValue::Missing => None,
            };
            if let Some(value) = value {
                written["value"] = value;
            }
            written
        })
        .collect();
    json!({ "rules": rules })
}

/// A dotLottie archive of `animations` (id, JSON) and `themes` (id, file).
fn dotlottie(
    version_two: bool,
    animations: &[(String, Vec<u8>)],
    themes: &[(String, Value)],
) -> Vec<u8> {
    let folder = if version_two { "a" } else { "animations" };
    let listed: Vec<Value> = animations.iter().map(|(id, _)| json!({"id": id})).collect();
    let theme_ids: Vec<Value> = themes.iter().map(|(id, _)| json!({"id": id})).collect();
    let manifest = if version_two {
        json!({"version": "2", "animations": listed, "themes": theme_ids})
    } else {
        json!({"version": "1", "animations": listed, "themes": theme_ids})
    };
    let mut files = vec![(
        "manifest.json".to_owned(),
        manifest.to_string().into_bytes(),
    )];
    files.extend(
        animations
            .iter()
            .map(|(id, json)| (format!("{folder}/{id}.json"), json.clone())),
    );
    files.extend(
        themes
            .iter()
            .map(|(id, theme)| (format!("t/{id}.json"), theme.to_string().into_bytes())),
    );
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in files {
        // Writing into memory fails only past zip's own size limits, far above a seed's.
        if zip.start_file(name, options).is_err() || zip.write_all(&bytes).is_err() {
            break;
        }
    }
    zip.finish()
        .map(std::io::Cursor::into_inner)
        .unwrap_or_default()
}
