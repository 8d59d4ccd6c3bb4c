//! dotLottie templates (`.lottie`): a zip of a manifest, one or more animations and their
//! images (the dotLottie specification, versions 1 and 2: `manifest.json`, `animations/` or
//! `a/`, `images/` or `i/`). Read in the workers only, as part of [`super::Template::parse`]:
//! the archive's animation becomes the template's JSON with each image it names embedded as
//! a data URI (PNG and JPEG as they are, WebP decoded and written as PNG, which rlottie reads),
//! so what follows is the JSON path's, unchanged.
//!
//! Hostile archives cost a worker a bounded amount: at most [`MAX_ARCHIVE_ENTRIES`] entries
//! (counted from the central directory before anything is inflated), names that stay inside
//! the archive (no absolute path, no `..`: refused, although nothing is extracted to disk), no
//! symbolic link or encrypted entry, and every entry read through a bound (the animation at
//! the template size limit, an image at [`MAX_IMAGE_ENTRY_BYTES`], all of them together at
//! [`MAX_INFLATED_BYTES`]): a zip bomb stops at its bound in milliseconds.
//!
//! The animation is the one CreateTemplate names (`animation_id`, one of the manifest's
//! `animations`), else the manifest's `activeAnimationId` (version 1) or `initial.animation`
//! (version 2), else its first; the template reports every id the archive has, so one
//! archive of several animations registers as one template per animation by naming each.
//! Its themes (version 2: the manifest's `themes`, each `t/<id>.json`, rules of slot values)
//! become named sets of modifications ([`Themes`]) a render may ask for
//! (`RenderRequest.theme`): `Color`, `Scalar`, `Vector`/`Position` and `Gradient` rules with
//! a static `value`, and `Text` rules' `text`. What the service cannot apply per render is
//! left out with a warning in the template's report: keyframed and expression rules (a slot
//! here takes one value), `Image` rules (the images a render shows come with the request) and
//! a text document's other properties (size, colours, …). Its fonts (the animation's `fonts.list` entries whose
//! `fPath` names a file of the archive: `/f/…` as dotlottie-js writes them, `fonts/…` in
//! version 1) become the template's fonts by their `fName`, under the fonts uploaded with
//! CreateTemplate, at most [`MAX_FONTS_PER_TEMPLATE`] of [`MAX_FONT_BYTES`] each.

use super::error::TemplateError;
use super::images;
use crate::lottie::lowering::text::fonts::{MAX_FONTS_PER_TEMPLATE, MAX_FONT_BYTES};
use base64::Engine;
use serde_json::Value;
use std::io::{Cursor, Read};

/// Entries of an archive: a manifest, a few animations, their images and themes; the
/// largest real ones hold some dozens.
pub const MAX_ARCHIVE_ENTRIES: usize = 1000;
/// Bytes of one image entry: the replacement images' limit.
pub const MAX_IMAGE_ENTRY_BYTES: usize = images::MAX_IMAGE_BYTES;
/// Bytes inflated from one archive in all: the animation at the template limit and its
/// images.
pub const MAX_INFLATED_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of the manifest.
const MAX_MANIFEST_BYTES: usize = 1024 * 1024;
/// Themes of one archive: a brand's light and dark, a few seasonal ones.
pub const MAX_THEMES: usize = 32;
/// Bytes of one theme file.
const MAX_THEME_BYTES: usize = 256 * 1024;
/// Characters of a theme's text: a request's own limit (`grpc::convert::MAX_TEXT_CHARS`).
const MAX_THEME_TEXT_CHARS: usize = 200;
/// Rules of one theme reported as left out, at most (the report's warnings are bounded too).
const MAX_SKIPPED_RULES_REPORTED: usize = 8;

/// An archive's themes: name → the slot values it sets.
pub type Themes = std::collections::BTreeMap<String, crate::spec::Modifications>;

/// Characters of an animation id kept (ids name files of the archive; real ones are short).
pub const MAX_ANIMATION_ID_CHARS: usize = 128;

/// Animation ids a template lists (its record keeps them): an icon set's archive holds
/// some dozens; one further down its manifest can still be chosen.
pub const MAX_LISTED_ANIMATIONS: usize = 64;

/// What an archive unpacks to.
pub(crate) struct Unpacked {
    pub json: Vec<u8>,
    pub themes: Themes,
    /// What of the themes is left out, as report warnings.
    pub theme_warnings: Vec<String>,
    /// Font files of the archive by the `fName` the animation's font list gives them.
    pub fonts: std::collections::BTreeMap<String, Vec<u8>>,
    /// The manifest's animation ids, in its order (the first [`MAX_LISTED_ANIMATIONS`]).
    pub animations: Vec<String>,
}

/// Whether `bytes` are a zip archive (a local file header first).
pub fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

/// The animation `chosen` (else the manifest's own choice) of a dotLottie archive as
/// Bodymovin JSON, its images embedded, with its themes and fonts. The animation is at most
/// `max_json_bytes` and passes `check_syntax` (the template's own limits) before a tree of
/// it is built.
pub(crate) fn unpack(
    bytes: &[u8],
    chosen: Option<&str>,
    max_json_bytes: usize,
    check_syntax: impl Fn(&[u8]) -> Result<(), TemplateError>,
) -> Result<Unpacked, TemplateError> {
    let refused = |message: String| TemplateError::invalid("$ (.lottie)", message);
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|error| refused(format!("not a readable zip archive: {error}")))?;
    if archive.len() > MAX_ARCHIVE_ENTRIES {
        return Err(refused(format!(
            "the archive has {} entries; at most {MAX_ARCHIVE_ENTRIES} are accepted",
            archive.len()
        )));
    }
    for index in 0..archive.len() {
        let entry = archive
            .by_index(index)
            .map_err(|error| refused(format!("entry {index} is unreadable: {error}")))?;
        let name = entry.name().to_owned();
        if entry.enclosed_name().is_none() || name.contains('\\') {
            return Err(refused(format!(
                "entry {name:?} names a path outside the archive"
            )));
        }
        if entry.is_symlink() {
            return Err(refused(format!("entry {name:?} is a symbolic link")));
        }
        if entry.encrypted() {
            return Err(refused(format!("entry {name:?} is encrypted")));
        }
    }
    let mut budget = MAX_INFLATED_BYTES;
    let manifest: Value = {
        let bytes = read_entry(
            &mut archive,
            "manifest.json",
            MAX_MANIFEST_BYTES,
            &mut budget,
        )?
        .ok_or_else(|| refused("the archive has no manifest.json".into()))?;
        serde_json::from_slice(&bytes)
            .map_err(|error| refused(format!("manifest.json is not JSON: {error}")))?
    };
    let ids: Vec<&str> = manifest
        .get("animations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|animation| animation.get("id").and_then(Value::as_str))
        .collect();
    let animations: Vec<String> = ids
        .iter()
        .take(MAX_LISTED_ANIMATIONS)
        .map(|id| id.chars().take(MAX_ANIMATION_ID_CHARS).collect())
        .collect();
    let id = match chosen {
        Some(chosen) if ids.contains(&chosen) => chosen.to_owned(),
        Some(chosen) => {
            return Err(TemplateError::AnimationUnknown {
                id: chosen.chars().take(MAX_ANIMATION_ID_CHARS).collect(),
                animations,
            })
        }
        None => manifest
            .get("activeAnimationId")
            .and_then(Value::as_str)
            .or_else(|| {
                manifest
                    .pointer("/initial/animation")
                    .and_then(Value::as_str)
            })
            .or_else(|| animations.first().map(String::as_str))
            .ok_or_else(|| refused("manifest.json names no animation".into()))?
            .to_owned(),
    };
    let mut animation = None;
    for folder in ["a", "animations"] {
        let name = format!("{folder}/{id}.json");
        if let Some(bytes) = read_entry(&mut archive, &name, max_json_bytes, &mut budget)? {
            animation = Some(bytes);
            break;
        }
    }
    let animation = animation.ok_or_else(|| {
        refused(format!(
            "the manifest's animation {id:?} is not in the archive"
        ))
    })?;
    // Within the template's syntax limits before a tree is built.
    check_syntax(&animation)?;
    let mut json: Value = serde_json::from_slice(&animation)
        .map_err(|error| TemplateError::NotJson(error.to_string()))?;
    embed_images(&mut json, &mut archive, &mut budget)?;
    let fonts = read_fonts(&json, &mut archive, &mut budget)?;
    let (themes, theme_warnings) = read_themes(&manifest, &mut archive, &mut budget)?;
    let json =
        serde_json::to_vec(&json).map_err(|error| TemplateError::NotJson(error.to_string()))?;
    Ok(Unpacked {
        json,
        themes,
        theme_warnings,
        fonts,
        animations,
    })
}

/// The font files the animation's font list names (`fPath` a file of the archive, not a
/// URL or data), by `fName`: at most [`MAX_FONTS_PER_TEMPLATE`], each a TrueType or
/// OpenType font of at most [`MAX_FONT_BYTES`]. A listed file the archive lacks is left to
/// the fallback fonts (as an unuploaded font is); one that is not a font is refused.
fn read_fonts(
    json: &Value,
    archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
    budget: &mut usize,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, TemplateError> {
    let mut fonts = std::collections::BTreeMap::new();
    let list = json
        .pointer("/fonts/list")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate();
    for (index, font) in list {
        let (Some(name), Some(path)) = (
            font.get("fName").and_then(Value::as_str),
            font.get("fPath").and_then(Value::as_str),
        ) else {
            continue;
        };
        if path.contains(':') || fonts.contains_key(name) {
            continue;
        }
        let path = path.trim_start_matches('/');
        let file = path.rsplit('/').next().unwrap_or(path);
        let mut found = None;
        for candidate in [
            path.to_owned(),
            format!("f/{file}"),
            format!("fonts/{file}"),
        ] {
            if let Some(bytes) = read_entry(archive, &candidate, MAX_FONT_BYTES, budget)? {
                found = Some(bytes);
                break;
            }
        }
        let Some(bytes) = found else { continue };
        let field = format!("$.fonts.list[{index}].fPath");
        if !crate::lottie::lowering::text::fonts::is_font_file(&bytes) {
            return Err(TemplateError::invalid(
                field,
                "names a file of the archive that is not a TrueType or OpenType font",
            ));
        }
        if fonts.len() == MAX_FONTS_PER_TEMPLATE {
            return Err(TemplateError::invalid(
                field,
                format!("the archive holds more than {MAX_FONTS_PER_TEMPLATE} fonts"),
            ));
        }
        fonts.insert(name.chars().take(MAX_ANIMATION_ID_CHARS).collect(), bytes);
    }
    Ok(fonts)
}

/// The manifest's themes (`t/<id>.json`), at most [`MAX_THEMES`], and the warnings of what
/// is left out of them; a theme whose file is missing or not JSON is left out.
fn read_themes(
    manifest: &Value,
    archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
    budget: &mut usize,
) -> Result<(Themes, Vec<String>), TemplateError> {
    let mut themes = Themes::new();
    let mut warnings = Vec::new();
    let ids = manifest
        .get("themes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|theme| theme.get("id").and_then(Value::as_str))
        .take(MAX_THEMES);
    for id in ids {
        let Some(bytes) = read_entry(archive, &format!("t/{id}.json"), MAX_THEME_BYTES, budget)?
        else {
            continue;
        };
        let name: String = id.chars().take(64).collect();
        let Ok(theme) = serde_json::from_slice::<Value>(&bytes) else {
            warnings.push(format!("theme '{name}' is not JSON; it is left out"));
            continue;
        };
        let (modifications, skipped) = theme_modifications(&theme);
        if !skipped.is_empty() {
            let shown: Vec<&str> = skipped
                .iter()
                .take(MAX_SKIPPED_RULES_REPORTED)
                .map(String::as_str)
                .collect();
            let more = skipped.len().saturating_sub(MAX_SKIPPED_RULES_REPORTED);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            warnings.push(format!(
                "theme '{name}': {}{more} not applied (the service applies static values of \
                 colour, scalar, vector, position and gradient rules and a text rule's text)",
                shown.join("; ")
            ));
        }
        themes.insert(name, modifications);
    }
    Ok((themes, warnings))
}

/// A theme's rules as modifications: `Color`, `Scalar`, `Vector`/`Position` and `Gradient`
/// rules with a static `value`, `Text` rules' `text`; and what is left out, rule by rule.
fn theme_modifications(theme: &Value) -> (crate::spec::Modifications, Vec<String>) {
    let mut modifications = crate::spec::Modifications::default();
    let mut skipped = Vec::new();
    let rules = theme
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for rule in rules {
        let (Some(id), Some(kind)) = (
            rule.get("id").and_then(Value::as_str),
            rule.get("type").and_then(Value::as_str),
        ) else {
            continue;
        };
        let shown: String = id.chars().take(64).collect();
        let Some(value) = rule.get("value") else {
            let how = if rule.get("keyframes").is_some() {
                "keyframed"
            } else if rule.get("expression").is_some() {
                "an expression"
            } else {
                "without a value"
            };
            skipped.push(format!("{kind} rule '{shown}' ({how})"));
            continue;
        };
        if let Err(why) = apply_rule(&mut modifications, id, kind, value) {
            skipped.push(format!("{kind} rule '{shown}' ({why})"));
        }
    }
    (modifications, skipped)
}

/// Adds one static rule's value to `modifications`; why not, when it cannot.
fn apply_rule(
    modifications: &mut crate::spec::Modifications,
    id: &str,
    kind: &str,
    value: &Value,
) -> Result<(), &'static str> {
    let numbers = || -> Option<Vec<f64>> { value.as_array()?.iter().map(Value::as_f64).collect() };
    let id = id.to_owned();
    match kind.to_ascii_lowercase().as_str() {
        "color" => {
            let color = numbers()
                .and_then(|n| theme_color(&n))
                .ok_or("not a colour")?;
            modifications.colors.insert(id, color);
        }
        "scalar" => {
            let number = value
                .as_f64()
                .or_else(|| numbers().and_then(|n| n.first().copied()))
                .ok_or("not a number")?;
            modifications.scalars.insert(id, number);
        }
        "vector" | "position" => {
            modifications
                .vectors
                .insert(id, numbers().ok_or("not numbers")?);
        }
        "gradient" => {
            let stops = theme_stops(value).ok_or("not colour stops")?;
            modifications.gradients.insert(id, stops);
        }
        "text" => {
            let text = value
                .get("text")
                .and_then(Value::as_str)
                .ok_or("no text; a text document's other properties are not applied")?;
            if text.chars().count() > MAX_THEME_TEXT_CHARS {
                return Err("a text longer than a request's 200 characters");
            }
            modifications.texts.insert(id, text.to_owned());
        }
        "image" => return Err("the images a render shows come with its request"),
        _ => return Err("a kind the service has no slot for"),
    }
    Ok(())
}

/// A gradient rule's `[{"offset", "color"}, …]` as stops.
fn theme_stops(value: &Value) -> Option<Vec<crate::spec::GradientStop>> {
    value
        .as_array()?
        .iter()
        .map(|stop| {
            let color: Vec<f64> = stop
                .get("color")?
                .as_array()?
                .iter()
                .map(Value::as_f64)
                .collect::<Option<_>>()?;
            Some(crate::spec::GradientStop {
                offset: stop.get("offset")?.as_f64()?,
                color: theme_color(&color)?,
            })
        })
        .collect()
}

/// `[r, g, b]` or `[r, g, b, a]` in 0..=1.
fn theme_color(channels: &[f64]) -> Option<crate::spec::Rgba> {
    match channels {
        [r, g, b] => crate::spec::Rgba::new(*r, *g, *b, None).ok(),
        [r, g, b, a] => crate::spec::Rgba::new(*r, *g, *b, Some(*a)).ok(),
        _ => None,
    }
}

/// Replaces every image asset that names a file of the archive with that file as a data URI.
fn embed_images(
    json: &mut Value,
    archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
    budget: &mut usize,
) -> Result<(), TemplateError> {
    let Some(assets) = json.get_mut("assets").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for (index, asset) in assets.iter_mut().enumerate() {
        let Some(file) = asset.get("p").and_then(Value::as_str) else {
            continue;
        };
        if file.starts_with("data:") {
            continue;
        }
        let folder = asset.get("u").and_then(Value::as_str).unwrap_or_default();
        let file = file.to_owned();
        let mut names = vec![format!("{folder}{file}").trim_start_matches('/').to_owned()];
        names.extend(["i/", "images/"].map(|folder| format!("{folder}{file}")));
        let mut found = None;
        for name in &names {
            if let Some(bytes) = read_entry(archive, name, MAX_IMAGE_ENTRY_BYTES, budget)? {
                found = Some(bytes);
                break;
            }
        }
        // Not in the archive: left as it is, for the template's own check to refuse.
        let Some(bytes) = found else { continue };
        let uri = data_uri(&bytes)
            .map_err(|message| TemplateError::invalid(format!("$.assets[{index}].p"), message))?;
        if let Some(map) = asset.as_object_mut() {
            map.insert("e".into(), Value::from(1));
            map.insert("u".into(), Value::from(""));
            map.insert("p".into(), Value::from(uri));
        }
    }
    Ok(())
}

/// An archive image as the data URI rlottie reads: PNG and JPEG as they are, WebP as PNG.
fn data_uri(bytes: &[u8]) -> Result<String, String> {
    let header = images::header(bytes).map_err(|error| format!("the archive's image {error}"))?;
    let encode = |media: &str, bytes: &[u8]| {
        format!(
            "data:{media};base64,{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    };
    match header.format {
        image::ImageFormat::Png => Ok(encode("image/png", bytes)),
        image::ImageFormat::Jpeg => Ok(encode("image/jpeg", bytes)),
        _ => {
            let pixels = images::fitted(bytes, header.width, header.height, crate::spec::Fit::Fill)
                .map_err(|error| format!("the archive's image {error}"))?;
            images::png_data_uri(&pixels).map_err(|error| format!("the archive's image {error}"))
        }
    }
}

/// The entry `name`, inflated to at most `limit` bytes and what is left of `budget`; `None`
/// when the archive has no such entry.
fn read_entry(
    archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
    limit: usize,
    budget: &mut usize,
) -> Result<Option<Vec<u8>>, TemplateError> {
    let refused = |message: String| TemplateError::invalid("$ (.lottie)", message);
    let entry = match archive.by_name(name) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(error) => return Err(refused(format!("entry {name:?} is unreadable: {error}"))),
    };
    let bound = limit.min(*budget);
    let mut bytes = Vec::new();
    entry
        .take(bound as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| refused(format!("entry {name:?} does not inflate: {error}")))?;
    if bytes.len() > bound {
        return Err(TemplateError::InflatesTooLarge {
            max: if bound == limit {
                limit
            } else {
                MAX_INFLATED_BYTES
            },
        });
    }
    *budget -= bytes.len();
    Ok(Some(bytes))
}
