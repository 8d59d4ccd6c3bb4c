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
//!
//! This file converts each layer, keyframe by keyframe; `document` reads a keyframe's
//! document, `glyph_paths` makes a font's glyph paths, `groups` puts paths, fill and stroke
//! into the groups drawn, and `warnings` keeps what is reported bounded.

pub mod animators;
pub(crate) mod chars;
mod document;
pub(crate) mod faces;
pub mod fonts;
mod glyph_paths;
mod groups;
pub mod layout;
pub(crate) mod outline;
mod warnings;

use chars::{CharsLibrary, CharsSource};
use std::collections::HashMap;

use crate::error::{Classified, ErrorClass};
use crate::reason::Reason;
use document::{document, number, shrink_factor};
use faces::Style;
use fonts::{FontBook, Synthesis};
use glyph_paths::{drawable, font_paths};
use groups::{document_group, glyph_group, hold_opacity, DocumentParts};
use layout::{Document, Layout};
use serde_json::{json, Value};
use warnings::{missing_characters_warning, named_characters, quoted_layer_name, TextWarnings};

/// Glyphs drawn for one template, all its text layers and keyframes together: a title card
/// has dozens to hundreds; the limit keeps a hostile template from making millions of paths.
pub(crate) const MAX_GLYPHS_PER_TEMPLATE: usize = 20_000;
/// Text document keyframes drawn per layer (each becomes a group).
pub(crate) const MAX_TEXT_KEYFRAMES: usize = 1000;
/// Outline vertices of all glyphs drawn for one template. The glyph budget above at a
/// generous 50 vertices a glyph (DejaVu Sans averages about 25): an honest template never
/// comes near it, while a few glyphs of thousands of vertices each (the template's own
/// `chars`) drawn many times would otherwise make gigabytes of paths. Each vertex costs about
/// 350 bytes as JSON values, so the budget bounds text conversion to about 350 MB.
pub const MAX_TEXT_VERTICES_PER_TEMPLATE: usize = 1_000_000;
/// Distinct text warnings kept per template: a handful is normal; a text of thousands of
/// characters no font has would otherwise make thousands (each naming its layer).
pub(crate) const MAX_TEXT_WARNINGS: usize = 256;

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
    /// A template whose text is over its budget always is.
    fn class(&self) -> ErrorClass {
        ErrorClass::Deterministic
    }
    fn reason(&self) -> Reason {
        Reason::TemplateTooComplex
    }
}

/// What converting a template's text layers found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextReport {
    pub converted_layers: usize,
    pub warnings: Vec<String>,
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
    crate::lottie::reading::model::for_each_layer_list(json, |layers| {
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

/// Takes `layout`'s glyphs from the template's budget (cutting the layout when it runs out).
fn spend(layout: &mut Layout, budget: &mut TextBudget) {
    layout.glyphs.truncate(budget.glyphs);
    budget.glyphs -= layout.glyphs.len();
}

/// Converts one text layer into a shape layer: a group per text keyframe's document.
fn convert_layer(
    layer: &mut Value,
    fonts: &FontBook,
    template_fonts: &TemplateFonts,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
    step: f64,
) -> Result<(), TextError> {
    let name = quoted_layer_name(layer);
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
    let keyframes = text_keyframes(&text_data, &name, warnings);
    let times: Vec<f64> = keyframes.iter().map(|(time, _)| *time).collect();
    let mut groups = Vec::new();
    for (index, (_, text_document)) in keyframes.iter().enumerate() {
        let keyframe = KeyframeDocument {
            parts: DocumentParts {
                name: &name,
                animators: layer_animators.as_ref(),
                sampling: sampling.as_ref(),
                times: &times,
                index,
                bold_width: None,
            },
            text_document,
            document: document(text_document),
        };
        if let Some(group) = keyframe_group(&keyframe, fonts, template_fonts, budget, warnings)? {
            groups.push(group);
        }
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

/// The layer's text keyframes (time, document), at most [`MAX_TEXT_KEYFRAMES`] of them.
fn text_keyframes(text_data: &Value, name: &str, warnings: &mut TextWarnings) -> Vec<(f64, Value)> {
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
    keyframes.into_iter().take(MAX_TEXT_KEYFRAMES).collect()
}

/// One text keyframe's document being drawn.
struct KeyframeDocument<'a> {
    parts: DocumentParts<'a>,
    /// Its JSON (`t.d.k[].s`).
    text_document: &'a Value,
    document: Document,
}

/// The group of one text keyframe's document: in the template's own glyphs when they cover
/// its text, else in a font; an empty group once the template's glyph budget is spent;
/// `None` when no font can be read.
fn keyframe_group(
    keyframe: &KeyframeDocument<'_>,
    fonts: &FontBook,
    template_fonts: &TemplateFonts,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
) -> Result<Option<Value>, TextError> {
    let (name, text_document, document) = (
        keyframe.parts.name,
        keyframe.text_document,
        &keyframe.document,
    );
    let font_name = text_document
        .get("f")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (family, style) = match template_fonts.families.get(font_name) {
        Some((family, style)) => (Some(family.as_str()), *style),
        None => (None, Style::default()),
    };
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
        return Ok(Some(glyph_group(
            Vec::new(),
            text_document,
            1.0,
            None,
            hold_opacity(keyframe.parts.times, keyframe.parts.index),
        )));
    }
    // The designer's own outlines whenever the template has them for this font, as
    // lottie-web draws them: a character they lack is skipped (lottie-web draws an empty
    // glyph of no width in its place), never drawn in another font.
    if let Some(source) = template_fonts.chars.get(font_name) {
        let missing = source.missing_characters(&shown_text);
        if !missing.is_empty() {
            warnings.insert(format!(
                "text layer '{name}': the template's glyphs lack {}; they are skipped, as lottie-web skips them",
                named_characters(&missing)
            ));
        }
        return chars_group(keyframe, source, budget, warnings).map(Some);
    }
    let chosen = fonts.choose(font_name, family, style);
    font_group(keyframe, fonts, chosen, style, budget, warnings)
}

/// The group of a document drawn in the template's own glyphs (`source` covers its text).
fn chars_group(
    keyframe: &KeyframeDocument<'_>,
    source: &CharsSource,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
) -> Result<Value, TextError> {
    let mut laid_out = layout::lay_out_with(&keyframe.document, source);
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
        keyframe.parts.name,
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
    Ok(document_group(
        &keyframe.parts,
        &laid_out,
        glyph_paths,
        keyframe.text_document,
        shrink_factor(&laid_out, &keyframe.document),
        budget,
        warnings,
    ))
}

/// The group of a document drawn in the `chosen` font (the bundled one when it cannot be
/// read, `None` when neither can), what the face lacks of `style` synthesized.
fn font_group(
    keyframe: &KeyframeDocument<'_>,
    fonts: &FontBook,
    mut chosen: fonts::ChosenFont,
    style: Style,
    budget: &mut TextBudget,
    warnings: &mut TextWarnings,
) -> Result<Option<Value>, TextError> {
    let (name, document) = (keyframe.parts.name, &keyframe.document);
    let mut laid_out = layout::lay_out_shared(document, &chosen.data);
    if laid_out.is_none() {
        warnings.insert(format!(
            "font '{}' cannot be read; its text is drawn in the bundled {}",
            chosen.family,
            fonts::BUNDLED_FAMILY
        ));
        chosen = fonts.bundled_fallback(style);
        laid_out = layout::lay_out_shared(document, &chosen.data);
    }
    let Some(mut laid_out) = laid_out else {
        return Ok(None);
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
        warnings.insert(missing_characters_warning(name, &laid_out.missing));
    }
    if laid_out.overflows {
        warnings.insert(format!(
            "text layer '{name}': the text does not fit its box even at half its size; the lines below the box are left out"
        ));
    }
    let glyph_paths = font_paths(&laid_out, &chosen.data, oblique, budget, name)?;
    Ok(Some(document_group(
        &DocumentParts {
            bold_width,
            ..keyframe.parts
        },
        &laid_out,
        glyph_paths,
        keyframe.text_document,
        shrink_factor(&laid_out, document),
        budget,
        warnings,
    )))
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
    fn the_templates_own_glyphs_draw_a_text_and_skip_what_they_lack() {
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
        // A character the glyphs lack takes no room and draws nothing (lottie-web's empty
        // glyph): the second I is where the first I's advance ends.
        let mut uncovered = with_chars("IJI");
        let report = convert_text_layers(&mut uncovered, &FontBook::default()).unwrap();
        let paths: Vec<&Value> = uncovered["layers"][0]["shapes"][0]["it"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["ty"] == "sh")
            .collect();
        assert_eq!(paths.len(), 2, "one box per I, none for J");
        assert_eq!(paths[1]["ks"]["k"]["v"][0], json!([15.0, 0.0]));
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(
            report.warnings[0].contains("lack U+004A;"),
            "{:?}",
            report.warnings
        );
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
        let limit = crate::lottie::reading::fence::MAX_PATH_COORDINATE;
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
