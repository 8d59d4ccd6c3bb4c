//! Text layers that render: rlottie draws no text layers, so before it loads a template every
//! text layer (`ty` 5) becomes a shape layer (`ty` 4) of glyph outlines. The layer keeps
//! everything else (transform, parent, timing, masks, matte, blend mode); each keyframe of its
//! text document becomes a group of glyph paths with its fill and stroke, shown only while
//! that keyframe holds.
//!
//! [`chars`] are the template's own glyph outlines, used when they cover the whole text;
//! otherwise [`fonts`] picks the font (uploaded, else the bundled one). [`layout`] shapes and
//! places the glyphs, [`outline`] turns each font glyph into Lottie paths. Text animators
//! become one group per glyph, keyframed at the output's frame times ([`animators`]). Every
//! fallback and every feature not rendered (text on a path, animators over their budget) is
//! reported as a warning.

pub mod animators;
pub mod chars;
pub mod faces;
pub mod fonts;
pub mod layout;
pub mod outline;

use chars::{CharsLibrary, CharsSource};
use std::collections::HashMap;

use crate::error::{Classified, ErrorClass};
use faces::Style;
use fonts::{FontBook, Synthesis};
use layout::{Document, Justify, Layout};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Glyphs drawn for one template, all its text layers and keyframes together: a title card
/// has dozens to hundreds; the limit keeps a hostile template from making millions of paths.
pub const MAX_GLYPHS_PER_TEMPLATE: usize = 20_000;
/// Text document keyframes drawn per layer (each becomes a group).
pub const MAX_TEXT_KEYFRAMES: usize = 1000;
/// Outline vertices of all glyphs drawn for one template. The glyph budget above at a
/// generous 50 vertices a glyph (DejaVu Sans averages about 25): an honest template never
/// comes near it, while a few glyphs of thousands of vertices each (the template's own
/// `chars`) drawn many times would otherwise make gigabytes of paths. Each vertex costs about
/// 350 bytes as JSON values, so the budget bounds text conversion to about 350 MB.
pub const MAX_TEXT_VERTICES_PER_TEMPLATE: usize = 1_000_000;
/// Distinct text warnings kept per template: a handful is normal; a text of thousands of
/// characters no font has would otherwise make thousands (each naming its layer).
pub const MAX_TEXT_WARNINGS: usize = 256;
/// Characters of a layer name quoted in a warning (names are the caller's and unbounded).
const MAX_NAME_CHARS_IN_WARNINGS: usize = 100;
/// Reason of a template whose text (or whose analysis) is over its budget: the same template
/// always is, so it is deterministic.
pub const TOO_COMPLEX_REASON: &str = "TEMPLATE_TOO_COMPLEX";

/// Text that would cost more than its budget to draw.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TextError {
    #[error(
        "text layer '{layer}': the template's texts make more than \
         {MAX_TEXT_VERTICES_PER_TEMPLATE} glyph outline vertices"
    )]
    TooManyVertices { layer: String },
}

impl Classified for TextError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> &'static str {
        TOO_COMPLEX_REASON
    }
}

/// What converting a template's text layers found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextReport {
    pub converted_layers: usize,
    pub warnings: Vec<String>,
}

/// Characters no font has named in one warning; the rest are counted. One warning per
/// document, not per character, so a long text in a script no font covers (found by the
/// `prepare` fuzz target: 300 CJK characters in an 11 KB template drew 3 MB of warnings)
/// draws one line.
const MAX_MISSING_CHARACTERS_NAMED: usize = 16;

/// The warning for a document whose `missing` characters no font has.
fn missing_characters_warning(name: &str, missing: &[char]) -> String {
    let mut distinct: Vec<char> = missing.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let named: Vec<String> = distinct
        .iter()
        .take(MAX_MISSING_CHARACTERS_NAMED)
        .map(|character| format!("U+{:04X}", u32::from(*character)))
        .collect();
    let more = distinct.len().saturating_sub(MAX_MISSING_CHARACTERS_NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "text layer '{name}': characters {}{more} are in no available font; they are drawn as the font's .notdef",
        named.join(", ")
    )
}

/// Text warnings, distinct and sorted, at most [`MAX_TEXT_WARNINGS`] of them.
#[derive(Default)]
struct TextWarnings {
    kept: BTreeSet<String>,
    dropped: usize,
}

impl TextWarnings {
    fn insert(&mut self, warning: String) {
        if self.kept.len() < MAX_TEXT_WARNINGS || self.kept.contains(&warning) {
            self.kept.insert(warning);
        } else {
            self.dropped += 1;
        }
    }

    fn into_vec(self) -> Vec<String> {
        let dropped = self.dropped;
        let mut warnings: Vec<String> = self.kept.into_iter().collect();
        if dropped > 0 {
            warnings.push(format!("… and {dropped} more text warnings"));
        }
        warnings
    }
}

/// What is left of a template's text budgets.
struct TextBudget {
    glyphs: usize,
    vertices: usize,
    animators: animators::AnimatorBudget,
}

impl TextBudget {
    /// Takes `count` vertices, or fails for `layer` when they are not left.
    fn spend_vertices(&mut self, count: usize, layer: &str) -> Result<(), TextError> {
        self.vertices =
            self.vertices
                .checked_sub(count)
                .ok_or_else(|| TextError::TooManyVertices {
                    layer: layer.to_owned(),
                })?;
        Ok(())
    }
}

/// The template's fonts, read once: font name (`fName`) → family (`fFamily`) and style
/// (`fStyle`, `fWeight`), the first entry naming the font wins, and the template's own glyphs
/// of the font (the last entry wins).
struct TemplateFonts {
    families: HashMap<String, (String, Style)>,
    chars: HashMap<String, CharsSource>,
}

impl TemplateFonts {
    fn new(json: &Value) -> TemplateFonts {
        let library = CharsLibrary::new(json);
        let mut families = HashMap::new();
        let mut chars = HashMap::new();
        for font in json
            .pointer("/fonts/list")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(name), Some(family)) = (
                font.get("fName").and_then(Value::as_str),
                font.get("fFamily").and_then(Value::as_str),
            ) else {
                continue;
            };
            families
                .entry(name.to_owned())
                .or_insert_with(|| (family.to_owned(), Style::of_font_entry(font)));
            let style = font.get("fStyle").and_then(Value::as_str);
            if let Some(source) = library.source(family, style) {
                chars.insert(name.to_owned(), source);
            }
        }
        TemplateFonts { families, chars }
    }
}

/// Converts every text layer of `json` (top level and precomps) into a shape layer, text
/// animators sampled at every template frame. Fails, leaving `json` partly converted, when
/// the texts are over the vertex budget.
pub fn convert_text_layers(json: &mut Value, fonts: &FontBook) -> Result<TextReport, TextError> {
    convert_text_layers_at(json, fonts, None)
}

/// [`convert_text_layers`] for an output of `output_fps` frames a second: text animators are
/// sampled at the output's frame times (`None`: at the template's frames).
pub fn convert_text_layers_at(
    json: &mut Value,
    fonts: &FontBook,
    output_fps: Option<f64>,
) -> Result<TextReport, TextError> {
    let template_fonts = TemplateFonts::new(json);
    let mut report = TextReport::default();
    let mut warnings = TextWarnings::default();
    let mut budget = TextBudget {
        glyphs: MAX_GLYPHS_PER_TEMPLATE,
        vertices: MAX_TEXT_VERTICES_PER_TEMPLATE,
        animators: animators::AnimatorBudget::default(),
    };
    // One output frame, in template frames.
    let template_fps = number(json.get("fr")).filter(|fr| *fr > 0.0);
    let step = match (template_fps, output_fps) {
        (Some(template), Some(output)) if output > 0.0 => template / output,
        _ => 1.0,
    };
    let mut failure = None;
    super::model::for_each_layer_list(json, |layers| {
        for layer in layers.iter_mut() {
            if failure.is_some() {
                return;
            }
            let hidden = layer.get("hd").and_then(Value::as_bool) == Some(true);
            // A hidden layer draws nothing: no glyphs to make.
            if layer.get("ty").and_then(Value::as_i64) == Some(5) && !hidden {
                match convert_layer(
                    layer,
                    fonts,
                    &template_fonts,
                    &mut budget,
                    &mut warnings,
                    step,
                ) {
                    Ok(()) => report.converted_layers += 1,
                    Err(error) => failure = Some(error),
                }
            }
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    report.warnings = warnings.into_vec();
    Ok(report)
}

fn number(value: Option<&Value>) -> Option<f64> {
    value.and_then(Value::as_f64).filter(|v| v.is_finite())
}

fn pair(value: Option<&Value>) -> Option<[f64; 2]> {
    let array = value?.as_array()?;
    Some([number(array.first())?, number(array.get(1))?])
}

/// A colour array (`[r, g, b]` or `[r, g, b, a]`, 0..=1) as Lottie's `[r, g, b, 1]`.
fn color(value: Option<&Value>) -> Option<Value> {
    let array = value?.as_array()?;
    let channel = |index: usize| number(array.get(index)).map(|v| v.clamp(0.0, 1.0));
    Some(json!([channel(0)?, channel(1)?, channel(2)?, 1]))
}

fn document(text_document: &Value) -> Document {
    // Box text: `sz` sets it; a missing `ps` puts the box at the layer's origin and, as
    // lottie-web draws it (`yPos` starts at 0 unless `ps` is set), its first baseline there.
    let box_position = pair(text_document.get("ps"));
    let text_box = match pair(text_document.get("sz")) {
        Some(size) if size[0] > 0.0 && size[1] > 0.0 => {
            Some((box_position.unwrap_or([0.0, 0.0]), size))
        }
        _ => None,
    };
    Document {
        text: text_document
            .get("t")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        size: number(text_document.get("s")).unwrap_or(0.0),
        justify: Justify::from_lottie(text_document.get("j").and_then(Value::as_i64).unwrap_or(0)),
        tracking: number(text_document.get("tr")).unwrap_or(0.0),
        line_height: number(text_document.get("lh")),
        baseline_shift: number(text_document.get("ls")).unwrap_or(0.0),
        all_caps: text_document.get("ca").and_then(Value::as_i64).unwrap_or(0) != 0,
        text_box,
        first_baseline_on_box_top: box_position.is_none(),
    }
}

/// How much box text was shrunk to fit (1 when it was not).
fn shrink_factor(layout: &Layout, document: &Document) -> f64 {
    if document.size > 0.0 {
        (layout.size / document.size).clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// Takes `layout`'s glyphs from the template's budget (cutting the layout when it runs out).
fn spend(layout: &mut Layout, budget: &mut TextBudget) {
    layout.glyphs.truncate(budget.glyphs);
    budget.glyphs -= layout.glyphs.len();
}

/// Whether a glyph at `origin` can be drawn: glyphs pushed beyond the fence's coordinate
/// limit (absurd tracking, line height or shift) are far off any canvas and left out, as
/// huge coordinates make rlottie crawl.
fn drawable(origin: [f64; 2]) -> bool {
    origin
        .iter()
        .all(|v| v.is_finite() && v.abs() <= super::fence::MAX_PATH_COORDINATE)
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
fn font_paths(
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

/// The name of the stroke that synthesizes a bold face (see [`fonts::synthetic_bold_width`]).
const SYNTHESIZED_BOLD: &str = "synthesized bold";

/// The group of glyph paths (`items`), fill and stroke of one laid-out document, with a
/// stroke `bold_width` wide in the fill's colour under both when bold is synthesized.
fn glyph_group(
    mut items: Vec<Value>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    opacity: Value,
) -> Value {
    let bold = bold_width
        .filter(|width| *width > 0.0)
        .zip(color(text_document.get("fc")))
        .map(|(width, color)| {
            json!({
                "ty": "st", "nm": SYNTHESIZED_BOLD, "c": {"a": 0, "k": color},
                "o": {"a": 0, "k": 100}, "w": {"a": 0, "k": width}, "lc": 2, "lj": 2, "ml": 4
            })
        });
    let fill = color(text_document.get("fc")).map(|color| {
        // Non-zero winding: TrueType and CFF outlines are drawn so.
        json!({"ty": "fl", "c": {"a": 0, "k": color}, "o": {"a": 0, "k": 100}, "r": 1})
    });
    // Box text shrunk to fit keeps its stroke in proportion.
    let stroke_width = number(text_document.get("sw")).unwrap_or(0.0) * stroke_scale;
    let stroke = color(text_document.get("sc"))
        .filter(|_| stroke_width > 0.0)
        .map(|color| {
            json!({
                "ty": "st", "c": {"a": 0, "k": color}, "o": {"a": 0, "k": 100},
                "w": {"a": 0, "k": stroke_width}, "lc": 2, "lj": 2, "ml": 4
            })
        });
    let stroke_over_fill = text_document
        .get("of")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // Items earlier in a group paint over later ones.
    let paints: Vec<Value> = match (fill, stroke, stroke_over_fill) {
        (fill, Some(stroke), true) => [Some(stroke), fill].into_iter().flatten().collect(),
        (fill, stroke, false) => [fill, stroke].into_iter().flatten().collect(),
        (fill, None, true) => fill.into_iter().collect(),
    };
    items.extend(paints);
    items.extend(bold);
    items.push(json!({
        "ty": "tr",
        "p": {"a": 0, "k": [0, 0]},
        "a": {"a": 0, "k": [0, 0]},
        "s": {"a": 0, "k": [100, 100]},
        "r": {"a": 0, "k": 0},
        "o": opacity,
    }));
    json!({"ty": "gr", "nm": "text", "it": items})
}

/// A colour array's red, green and blue (0..=1).
fn rgb(value: Option<&Value>) -> Option<[f64; 3]> {
    let array = value?.as_array()?;
    let channel = |index: usize| number(array.get(index)).map(|v| v.clamp(0.0, 1.0));
    Some([channel(0)?, channel(1)?, channel(2)?])
}

/// The group of one glyph's paths under text animators: the document's fill and stroke, its
/// colours, opacities and width replaced by the animated ones, and its transform by the
/// glyph's.
fn animated_glyph_group(
    paths: Vec<Value>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    channels: animators::GlyphChannels,
) -> Value {
    let mut group = glyph_group(
        paths,
        text_document,
        stroke_scale,
        bold_width,
        json!({"a": 0, "k": 100}),
    );
    if let Some(items) = group.get_mut("it").and_then(Value::as_array_mut) {
        for item in items.iter_mut() {
            let Some(object) = item.as_object_mut() else {
                continue;
            };
            // A synthesized bold stroke is ink of the fill: it follows the fill's channels.
            let bold = object.get("nm").and_then(Value::as_str) == Some(SYNTHESIZED_BOLD);
            let replacements: Vec<(&str, &Option<Value>)> =
                match object.get("ty").and_then(Value::as_str) {
                    Some("st") if bold => {
                        vec![("c", &channels.fill_color), ("o", &channels.fill_opacity)]
                    }
                    Some("fl") => vec![("c", &channels.fill_color), ("o", &channels.fill_opacity)],
                    Some("st") => vec![
                        ("c", &channels.stroke_color),
                        ("o", &channels.stroke_opacity),
                        ("w", &channels.stroke_width),
                    ],
                    Some("tr") => {
                        *item = channels.transform.clone();
                        continue;
                    }
                    _ => Vec::new(),
                };
            for (key, value) in replacements {
                if let Some(value) = value {
                    object.insert(key.to_owned(), value.clone());
                }
            }
        }
    }
    if let Some(object) = group.as_object_mut() {
        object.insert("nm".into(), json!("glyph"));
    }
    group
}

/// The group of one laid-out document under text animators: a group per drawn glyph (later
/// glyphs over earlier ones, as lottie-web draws them), shown by `opacity`. `None` when the
/// animators are over the template's budget.
#[allow(clippy::too_many_arguments)]
fn animated_document_group(
    layer_animators: &animators::Animators,
    layout: &Layout,
    glyph_paths: Vec<Vec<Value>>,
    text_document: &Value,
    stroke_scale: f64,
    bold_width: Option<f64>,
    sampling: &animators::Sampling,
    opacity: Value,
    budget: &mut TextBudget,
) -> Option<Value> {
    let stroke_width = number(text_document.get("sw")).unwrap_or(0.0) * stroke_scale;
    let style = animators::DocumentStyle {
        fill: rgb(text_document.get("fc")),
        stroke: rgb(text_document.get("sc")).filter(|_| stroke_width > 0.0),
        stroke_width,
        justify: text_document.get("j").and_then(Value::as_i64).unwrap_or(0),
    };
    let drawn: Vec<bool> = glyph_paths.iter().map(|paths| !paths.is_empty()).collect();
    let channels = animators::lower(
        layer_animators,
        layout,
        &style,
        sampling,
        &drawn,
        &mut budget.animators,
    )
    .ok()?;
    let mut items: Vec<Value> = glyph_paths
        .into_iter()
        .zip(channels)
        .filter_map(|(paths, channels)| {
            Some(animated_glyph_group(
                paths,
                text_document,
                stroke_scale,
                bold_width,
                channels?,
            ))
        })
        .collect();
    // Items earlier in a group paint over later ones.
    items.reverse();
    items.push(json!({
        "ty": "tr",
        "p": {"a": 0, "k": [0, 0]},
        "a": {"a": 0, "k": [0, 0]},
        "s": {"a": 0, "k": [100, 100]},
        "r": {"a": 0, "k": 0},
        "o": opacity,
    }));
    Some(json!({"ty": "gr", "nm": "text", "it": items}))
}

/// Opacity of keyframe `index`'s group: shown from its time until the next keyframe's.
fn hold_opacity(times: &[f64], index: usize) -> Value {
    if times.len() < 2 {
        return json!({"a": 0, "k": 100});
    }
    let mut keyframes = Vec::new();
    let start = times[index];
    keyframes
        .push(json!({"t": times[0].min(start), "s": [if index == 0 { 100 } else { 0 }], "h": 1}));
    if index > 0 {
        keyframes.push(json!({"t": start, "s": [100], "h": 1}));
    }
    if let Some(next) = times.get(index + 1) {
        keyframes.push(json!({"t": next, "s": [0], "h": 1}));
    }
    json!({"a": 1, "k": keyframes})
}

/// Where one text keyframe's document sits in its layer.
struct DocumentParts<'a> {
    name: &'a str,
    animators: Option<&'a animators::Animators>,
    sampling: Option<&'a animators::Sampling>,
    /// The layer's text keyframe times, and which one this document is.
    times: &'a [f64],
    index: usize,
    /// The width of the stroke that synthesizes bold, when the face lacks it.
    bold_width: Option<f64>,
}

/// The group of one laid-out document: its glyphs under the layer's animators (sampled while
/// the document shows), or all its glyph paths in one group when there are none or they are
/// over their budget (with a warning).
fn document_group(
    parts: &DocumentParts<'_>,
    layout: &Layout,
    glyph_paths: Vec<Vec<Value>>,
    text_document: &Value,
    stroke_scale: f64,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
) -> Value {
    let bold_width = parts.bold_width;
    let opacity = hold_opacity(parts.times, parts.index);
    if let (Some(layer_animators), Some(sampling)) = (parts.animators, parts.sampling) {
        // The first document shows from the layer's start, the others from their time.
        let from = if parts.index == 0 {
            f64::NEG_INFINITY
        } else {
            parts.times.get(parts.index).copied().unwrap_or(0.0)
        };
        let shown = sampling.within(from, parts.times.get(parts.index + 1).copied());
        if let Some(group) = animated_document_group(
            layer_animators,
            layout,
            glyph_paths.clone(),
            text_document,
            stroke_scale,
            bold_width,
            &shown,
            opacity.clone(),
            budget,
        ) {
            return group;
        }
        warnings.insert(format!(
            "text layer '{}': its text animators exceed the template's budget ({} glyph samples, {} keyframes); the text renders without them",
            parts.name,
            animators::MAX_ANIMATOR_SAMPLES,
            animators::MAX_ANIMATOR_KEYFRAMES
        ));
    }
    glyph_group(
        glyph_paths.into_iter().flatten().collect(),
        text_document,
        stroke_scale,
        bold_width,
        opacity,
    )
}

fn convert_layer(
    layer: &mut Value,
    fonts: &FontBook,
    template_fonts: &TemplateFonts,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
    step: f64,
) -> Result<(), TextError> {
    let name = layer
        .get("nm")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    let name: String = if name.chars().count() > MAX_NAME_CHARS_IN_WARNINGS {
        name.chars()
            .take(MAX_NAME_CHARS_IN_WARNINGS)
            .chain(['…'])
            .collect()
    } else {
        name.to_owned()
    };
    let text_data = layer.get("t").cloned().unwrap_or(Value::Null);
    let layer_animators = animators::Animators::parse(&text_data);
    if let Some(layer_animators) = &layer_animators {
        for feature in &layer_animators.unsupported {
            warnings.insert(format!(
                "text layer '{name}': text animators' {feature} are not supported; the text renders without that part"
            ));
        }
    }
    // The layer's frames in its composition, on the output's frame grid.
    let sampling = layer_animators.as_ref().map(|_| {
        let field = |key: &str| number(layer.get(key));
        let from = field("ip").unwrap_or(0.0);
        animators::Sampling::new(from, field("op").unwrap_or(from), step)
    });
    if text_data
        .get("p")
        .and_then(Value::as_object)
        .is_some_and(|path| path.contains_key("m"))
    {
        warnings.insert(format!(
            "text layer '{name}': text on a path is not supported; the text renders on a straight line"
        ));
    }
    let keyframes: Vec<(f64, Value)> = text_data
        .pointer("/d/k")
        .and_then(Value::as_array)
        .map(|keyframes| {
            keyframes
                .iter()
                .filter_map(|keyframe| {
                    Some((
                        number(keyframe.get("t")).unwrap_or(0.0),
                        keyframe.get("s")?.clone(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if keyframes.len() > MAX_TEXT_KEYFRAMES {
        warnings.insert(format!(
            "text layer '{name}': only its first {MAX_TEXT_KEYFRAMES} text keyframes are drawn"
        ));
    }
    let keyframes: Vec<(f64, Value)> = keyframes.into_iter().take(MAX_TEXT_KEYFRAMES).collect();
    let times: Vec<f64> = keyframes.iter().map(|(time, _)| *time).collect();
    let mut groups = Vec::new();
    for (index, (_, text_document)) in keyframes.iter().enumerate() {
        let font_name = text_document
            .get("f")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (family, style) = match template_fonts.families.get(font_name) {
            Some((family, style)) => (Some(family.as_str()), *style),
            None => (None, Style::default()),
        };
        let document = document(text_document);
        if document.text.chars().count() > layout::MAX_TEXT_CHARS {
            warnings.insert(format!(
                "text layer '{name}': only the first {} characters are drawn",
                layout::MAX_TEXT_CHARS
            ));
        }
        let shown_text = if document.all_caps {
            document.text.to_uppercase()
        } else {
            document.text.clone()
        };
        if budget.glyphs == 0 {
            warnings.insert(format!(
                "the template's texts exceed {MAX_GLYPHS_PER_TEMPLATE} glyphs; the rest are not drawn"
            ));
            groups.push(glyph_group(
                Vec::new(),
                text_document,
                1.0,
                None,
                hold_opacity(&times, index),
            ));
            continue;
        }
        // The designer's own outlines when they cover the whole text.
        if let Some(source) = template_fonts
            .chars
            .get(font_name)
            .filter(|c| c.covers(&shown_text))
        {
            let mut laid_out = layout::lay_out_with(&document, source);
            spend(&mut laid_out, budget);
            // Counted before any path is made: a glyph of thousands of vertices drawn many
            // times fails here, not after the memory is spent.
            budget.spend_vertices(
                laid_out
                    .glyphs
                    .iter()
                    .filter(|glyph| drawable(glyph.origin))
                    .map(|glyph| source.vertices(glyph.glyph))
                    .sum(),
                &name,
            )?;
            let glyph_paths: Vec<Vec<Value>> = laid_out
                .glyphs
                .iter()
                .map(|glyph| {
                    if drawable(glyph.origin) {
                        source.paths(glyph.glyph, glyph.origin, laid_out.size)
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            groups.push(document_group(
                &DocumentParts {
                    name: &name,
                    animators: layer_animators.as_ref(),
                    sampling: sampling.as_ref(),
                    times: &times,
                    index,
                    bold_width: None,
                },
                &laid_out,
                glyph_paths,
                text_document,
                shrink_factor(&laid_out, &document),
                budget,
                warnings,
            ));
            continue;
        }
        if template_fonts.chars.contains_key(font_name) {
            warnings.insert(format!(
                "text layer '{name}': the template's glyphs do not cover the text; it is drawn in a font instead"
            ));
        }
        let mut chosen = fonts.choose(font_name, family, style);
        let mut laid_out = layout::lay_out_shared(&document, &chosen.data);
        if laid_out.is_none() {
            warnings.insert(format!(
                "font '{}' cannot be read; its text is drawn in the bundled {}",
                chosen.family,
                fonts::BUNDLED_FAMILY
            ));
            chosen = fonts.bundled_fallback(style);
            laid_out = layout::lay_out_shared(&document, &chosen.data);
        }
        let Some(mut laid_out) = laid_out else {
            continue;
        };
        spend(&mut laid_out, budget);
        if let Some(warning) = chosen.fallback_warning {
            warnings.insert(warning);
        }
        if let Some(warning) = chosen.synthesis_warning {
            warnings.insert(warning);
        }
        let Synthesis { bold, oblique } = chosen.synthesis;
        let bold_width = bold.then(|| fonts::synthetic_bold_width(laid_out.size));
        if !laid_out.missing.is_empty() {
            warnings.insert(missing_characters_warning(&name, &laid_out.missing));
        }
        if laid_out.overflows {
            warnings.insert(format!(
                "text layer '{name}': the text does not fit its box even at half its size; the lines below the box are left out"
            ));
        }
        let glyph_paths = font_paths(&laid_out, &chosen.data, oblique, budget, &name)?;
        groups.push(document_group(
            &DocumentParts {
                name: &name,
                animators: layer_animators.as_ref(),
                sampling: sampling.as_ref(),
                times: &times,
                index,
                bold_width,
            },
            &laid_out,
            glyph_paths,
            text_document,
            shrink_factor(&laid_out, &document),
            budget,
            warnings,
        ));
    }
    if let Value::Object(object) = layer {
        // Keys before "ty" are kept in place (rlottie reads "ty" first in shapes, not
        // layers, but keeping the order is harmless and stable).
        object.insert("ty".into(), json!(4));
        object.remove("t");
        object.insert("shapes".into(), Value::Array(groups));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_chars(text: &str) -> Value {
        serde_json::from_str(&format!(
            r#"{{"v":"5.7","fr":30,"ip":0,"op":30,"w":100,"h":100,
              "fonts":{{"list":[{{"fName":"Box-Regular","fFamily":"Box","fStyle":"Regular","ascent":70}}]}},
              "chars":[{{"ch":"I","size":50,"style":"Regular","w":30,"fFamily":"Box",
                "data":{{"shapes":[{{"ty":"gr","it":[{{"ty":"sh","ks":{{"a":0,"k":{{"c":true,
                  "v":[[0,0],[20,0],[20,-70],[0,-70]],"i":[[0,0],[0,0],[0,0],[0,0]],"o":[[0,0],[0,0],[0,0],[0,0]]}}}}}}]}}]}}}}],
              "layers":[{{"ty":5,"nm":"t","ks":{{}},"ip":0,"op":30,"st":0,
                "t":{{"d":{{"k":[{{"s":{{"s":50,"f":"Box-Regular","t":"{text}","j":0,"fc":[0,0,0]}},"t":0}}]}}}}}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_templates_own_glyphs_draw_a_text_they_cover_and_a_font_the_rest() {
        let mut covered = with_chars("II");
        let report = convert_text_layers(&mut covered, &FontBook::default()).unwrap();
        let paths: Vec<&Value> = covered["layers"][0]["shapes"][0]["it"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["ty"] == "sh")
            .collect();
        assert_eq!(paths.len(), 2, "one box per I");
        // Size 50 of 100: the second I starts one advance (30 × 0.5) on, 70 × 0.5 tall.
        assert_eq!(paths[1]["ks"]["k"]["v"][0], json!([15.0, 0.0]));
        assert_eq!(paths[1]["ks"]["k"]["v"][2], json!([25.0, -35.0]));
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let mut uncovered = with_chars("IJ");
        let report = convert_text_layers(&mut uncovered, &FontBook::default()).unwrap();
        assert!(report.warnings.iter().any(|w| w.contains("do not cover")));
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("'Box'") && w.contains("Liberation Serif")));
    }

    /// A template of one text layer showing `text` in the bundled font with the document
    /// fields `fields` (size, tracking, line height, shift, justification).
    fn one_text_layer(text: &str, fields: Value) -> Value {
        let mut document = json!({"f": "x", "t": text, "fc": [0, 0, 0]});
        if let (Some(document), Some(fields)) = (document.as_object_mut(), fields.as_object()) {
            document.extend(fields.clone());
        }
        json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
            "layers": [{"ty": 5, "nm": "evil", "ks": {}, "ip": 0, "op": 30, "st": 0,
                "t": {"d": {"k": [{"s": document, "t": 0}]}}}]})
    }

    /// The vertices of the glyph paths of the converted layer's first group.
    fn glyph_paths(json: &Value) -> Vec<Vec<[f64; 2]>> {
        json["layers"][0]["shapes"][0]["it"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["ty"] == "sh")
            .map(|item| {
                item["ks"]["k"]["v"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|point| [point[0].as_f64().unwrap(), point[1].as_f64().unwrap()])
                    .collect()
            })
            .collect()
    }

    #[test]
    fn hostile_text_documents_are_bounded() {
        let long = "W".repeat(20_000);
        let limit = super::super::fence::MAX_PATH_COORDINATE;
        // Absurd size and tracking, centred: the size is cut to MAX_FONT_SIZE, the tracking
        // to 10 em, the text to MAX_TEXT_CHARS; each W then stands its advance plus 10 em
        // after the one before, and the line is centred on x = 0.
        let absurd = json!({"s": 1e300, "tr": 1e12, "lh": 1e200, "j": 2});
        let mut on_the_baseline = one_text_layer(&long, absurd.clone());
        let report = convert_text_layers(&mut on_the_baseline, &FontBook::default()).unwrap();
        assert!(report.warnings.iter().any(|w| w.contains("only the first")));
        let paths = glyph_paths(&on_the_baseline);
        let coordinates: Vec<f64> = paths.iter().flatten().flatten().copied().collect();
        assert!(
            coordinates.iter().all(|v| v.abs() <= limit * 1.01),
            "coordinates bounded"
        );
        // Exactly the glyphs whose origin is within the limit are drawn. By the font's own
        // advance of W: glyph i of n stands at i pitches from the left end of a centred line
        // n advances plus n − 1 trackings wide (no tracking after the last glyph, as
        // lottie-web measures a line).
        let face = ttf_parser::Face::parse(fonts::BUNDLED_FONT, 0).unwrap();
        let w = face.glyph_index('W').unwrap();
        let size = layout::MAX_FONT_SIZE;
        let advance =
            f64::from(face.glyph_hor_advance(w).unwrap()) / f64::from(face.units_per_em()) * size;
        let pitch = advance + 10.0 * size;
        let count = layout::MAX_TEXT_CHARS;
        let width = count as f64 * advance + (count - 1) as f64 * 10.0 * size;
        let expected_glyphs = (0..count)
            .filter(|&i| (i as f64 * pitch - width / 2.0).abs() <= limit)
            .count();
        let mut lone = one_text_layer("W", json!({"s": size}));
        convert_text_layers(&mut lone, &FontBook::default()).unwrap();
        let contours_per_glyph = glyph_paths(&lone).len();
        assert!(contours_per_glyph > 0);
        assert_eq!(
            paths.len(),
            expected_glyphs * contours_per_glyph,
            "{expected_glyphs} glyphs of {contours_per_glyph} contours each"
        );

        // The same with its baseline shifted 1e300 px: every glyph lies beyond the limit,
        // so none is drawn; the layer is still a shape layer with its fill.
        let mut shifted = absurd;
        shifted["ls"] = json!(-1e300);
        let mut off_the_canvas = one_text_layer(&long, shifted);
        let report = convert_text_layers(&mut off_the_canvas, &FontBook::default()).unwrap();
        assert_eq!(report.converted_layers, 1);
        assert!(report.warnings.iter().any(|w| w.contains("only the first")));
        assert_eq!(glyph_paths(&off_the_canvas), Vec::<Vec<[f64; 2]>>::new());
        let layer = &off_the_canvas["layers"][0];
        assert_eq!(layer["ty"], 4);
        assert!(layer["shapes"][0]["it"]
            .as_array()
            .unwrap()
            .iter()
            .any(|item| item["ty"] == "fl"));
    }

    #[test]
    fn a_text_layer_becomes_a_shape_layer_keeping_its_transform_and_timing() {
        let mut json: Value = serde_json::from_str(
            r#"{"v":"5.7","fr":30,"ip":0,"op":60,"w":200,"h":100,"layers":[
              {"ddd":0,"ind":1,"ty":5,"nm":"title","parent":2,"ks":{"p":{"a":0,"k":[10,50,0]}},
               "ip":0,"op":60,"st":0,"bm":0,"masksProperties":[],
               "t":{"d":{"k":[{"s":{"s":20,"f":"Nope","t":"Hi","j":0,"fc":[1,0,0]},"t":0},
                              {"s":{"s":20,"f":"Nope","t":"Bye","j":0,"fc":[0,0,1]},"t":30}]},
                    "p":{},"m":{"g":1,"a":{"a":0,"k":[0,0]}},"a":[]}}]}"#,
        )
        .unwrap();
        let report = convert_text_layers(&mut json, &FontBook::default()).unwrap();
        assert_eq!(report.converted_layers, 1);
        let layer = &json["layers"][0];
        assert_eq!(layer["ty"], 4);
        assert!(layer.get("t").is_none());
        assert_eq!(layer["parent"], 2);
        assert_eq!(layer["ks"]["p"]["k"][0], 10);
        assert!(layer.get("masksProperties").is_some());
        let groups = layer["shapes"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "one group per text keyframe");
        let paths = |group: &Value| {
            group["it"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|item| item["ty"] == "sh")
                .count()
        };
        assert!(paths(&groups[0]) >= 2 && paths(&groups[1]) >= 3);
        // "Bye" shows from frame 30 on; "Hi" until then.
        assert_eq!(
            groups[1]["it"].as_array().unwrap().last().unwrap()["o"]["k"][1]["t"],
            30.0
        );
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("'Nope'") && w.contains("Liberation Serif")));
    }
}
