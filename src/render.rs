//! A render from template bytes to an encoded file: [`prepare`] validates, modifies, lowers
//! ([`crate::lottie::lower`]) and retimes the template, and plans the blurs and shadows drawn
//! on pixels ([`layer_effects`]); [`run`] renders frames in parallel ([`frames`]), converts them for
//! the encoder on the render threads (`encode::FramePreparer`) and feeds them in
//! order to the encoder, reporting progress as it goes.

pub(crate) mod frames;
pub mod layer_effects;

use crate::encode::{self, EncodeError};
use crate::error::{Classified, ErrorClass};
use crate::lottie::lowering::text::{self, fonts::FontBook};
use crate::lottie::modifications::{self, ModificationError};
use crate::lottie::reading::{assets, images};
use crate::lottie::{self, slots, timeline, Lowering, Template, TemplateError};
use crate::reason::Reason;
use crate::spec::output::{self, OutputViolation};
use crate::spec::{Modifications, OutputSpec};
use frames::FrameSource;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Modification(#[from] ModificationError),
    #[error(transparent)]
    Text(#[from] text::TextError),
    #[error("the renderer refused the template (rlottie could not load it)")]
    RendererRefused,
    #[error("a render thread stopped unexpectedly")]
    RenderThreadDied,
    #[error("out of resources: {0}")]
    Resources(String),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// What admission refuses of an output ([`output::check`]), met by a template that changed
    /// since, or by the CLI, which has no admission.
    #[error("{field}: {0}", field = .0.field())]
    Output(OutputViolation),
    #[error(
        "{0}: the expressions of this template need more than a render allows; simplify \
         them (CreateTemplate's warnings name each one)"
    )]
    ExpressionsOverBudget(String),
    #[error("modifications.images[\"{slot}\"]: the image {error}")]
    Image {
        slot: String,
        error: crate::lottie::reading::images::ImageError,
    },
    #[error("modifications.images[\"{slot}\"]: the image's bytes were not given to the worker")]
    ImageMissing { slot: String },
    #[error("output: {0}")]
    WindowOutside(String),
    /// Blurs and shadows over [`layer_effects::MAX_BLURRED_PIXELS_PER_FRAME`].
    #[error("output: {0}")]
    EffectsOverBudget(String),
    #[error("cannot read the template: {0}")]
    ReadTemplate(std::io::Error),
    #[error("cannot read the output: {0}")]
    ReadOutput(std::io::Error),
}

impl Classified for RenderError {
    fn class(&self) -> ErrorClass {
        match self {
            RenderError::Template(error) => error.class(),
            RenderError::Modification(error) => error.class(),
            RenderError::Text(error) => error.class(),
            // Counted work: the same request always runs out the same way.
            RenderError::RendererRefused
            | RenderError::Output(_)
            | RenderError::ExpressionsOverBudget(_)
            | RenderError::EffectsOverBudget(_)
            | RenderError::WindowOutside(_)
            | RenderError::Image { .. } => ErrorClass::Deterministic,
            // Staging lost a file: another attempt stages it again.
            RenderError::ImageMissing { .. } => ErrorClass::Transient,
            // The template was deleted after the job was accepted: it will never come back.
            RenderError::ReadTemplate(error) if error.kind() == std::io::ErrorKind::NotFound => {
                ErrorClass::Deterministic
            }
            RenderError::Encode(error) => error.class(),
            RenderError::RenderThreadDied
            | RenderError::Resources(_)
            | RenderError::ReadTemplate(_)
            | RenderError::ReadOutput(_) => ErrorClass::Transient,
        }
    }
    fn reason(&self) -> Reason {
        match self {
            RenderError::Template(error) => error.reason(),
            RenderError::Modification(error) => error.reason(),
            RenderError::Text(error) => error.reason(),
            RenderError::RendererRefused => Reason::TemplateUnrenderable,
            RenderError::WindowOutside(_) => Reason::RequestInvalid,
            // The job's work (its output's size times its filters), as an output too large
            // for the megapixel budget is.
            RenderError::EffectsOverBudget(_) => Reason::JobTooLarge,
            RenderError::Output(violation) => violation.reason(),
            RenderError::Image { .. } => Reason::ImageInvalid,
            RenderError::ImageMissing { .. } => Reason::StorageUnavailable,
            // Expressions that ran out of their budget (`lottie::lowering::expressions`:
            // `work_budget`, `MAX_EXPRESSION_CPU`): the job fails, not retryable, and its
            // fingerprint is quarantined.
            RenderError::ExpressionsOverBudget(_) => Reason::ExpressionsCpuExceeded,
            RenderError::RenderThreadDied => Reason::RenderThreadDied,
            RenderError::Resources(_) => Reason::ResourcesExhausted,
            RenderError::Encode(error) => error.reason(),
            RenderError::ReadTemplate(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Reason::TemplateNotFound
            }
            // An allocation refused under the worker's address-space limit: the same reason
            // as the parent gives a worker that ran out of memory without noticing.
            RenderError::ReadTemplate(error) | RenderError::ReadOutput(error)
                if error.kind() == std::io::ErrorKind::OutOfMemory =>
            {
                Reason::RenderMemoryExceeded
            }
            RenderError::ReadTemplate(_) | RenderError::ReadOutput(_) => Reason::StorageUnavailable,
        }
    }
}

/// A render ready to run: the frame source and what the output will be.
pub struct PreparedRender {
    pub source: FrameSource,
    pub spec: OutputSpec,
    pub frame_count: u32,
}

/// What a render is made of: the template (its bytes and, for a dotLottie archive, the
/// animation its record chose; None: the archive's own choice), the caller's modifications
/// and the bytes of the replacement images they name (SHA-256 → bytes), the output, and the
/// uploaded fonts.
pub struct RenderInput<'a> {
    pub template: &'a [u8],
    pub animation: Option<&'a str>,
    pub modifications: &'a Modifications,
    pub images: &'a BTreeMap<String, Vec<u8>>,
    pub output: OutputSpec,
    pub fonts: &'a FontBook,
}

/// Parses and fences `template_bytes` (image assets included: they must be embedded data),
/// lowers it for rlottie ([`lottie::lower`]: expressions baked into keyframes, text layers
/// turned into glyph shapes in `fonts`, …) with `modifications` applied, and retimes it to the
/// output frame rate. Fails before anything heavy starts
/// when the template or a slot is at fault.
pub fn prepare(
    template_bytes: &[u8],
    modifications: &Modifications,
    spec: OutputSpec,
    fonts: &FontBook,
) -> Result<PreparedRender, RenderError> {
    prepare_with_images(RenderInput {
        template: template_bytes,
        animation: None,
        modifications,
        images: &BTreeMap::new(),
        output: spec,
        fonts,
    })
}

/// [`prepare`] of a whole [`RenderInput`]: with the replacement images, each decoded and
/// fitted to its slot's box here, in the worker ([`crate::lottie::reading::images`]), and the
/// animation of a dotLottie archive. The output is held to its format's limits
/// ([`output::check`]) before anything heavy starts.
pub fn prepare_with_images(input: RenderInput<'_>) -> Result<PreparedRender, RenderError> {
    let RenderInput {
        template: template_bytes,
        animation,
        modifications,
        images: image_bytes,
        output: spec,
        fonts,
    } = input;
    let mut template = Template::parse_animation(template_bytes, animation)?;
    // A dotLottie's own fonts, under the uploaded ones.
    let fonts = &fonts.with_template_fonts(std::mem::take(&mut template.fonts));
    let frames = output::frames(&spec, template.duration_seconds());
    if let Some(violation) = output::check(&spec, frames).into_iter().next() {
        return Err(RenderError::Output(violation));
    }
    let mut json = template.json;
    let slots = slots::discover(&json);
    if let Some(error) = modifications::check(&slots, modifications)
        .into_iter()
        .next()
    {
        return Err(error.into());
    }
    // What rlottie cannot draw, rewritten into what it can: the passes in their order
    // (`lottie::lower`), the caller's values written once expressions are baked.
    lottie::lower(
        &mut json,
        Lowering::for_render(fonts, spec.fps),
        |json, breach| {
            // A budget that runs out fails the render (it would show static values nobody was
            // warned of, and cost its CPU again on every retry).
            if let Some(breach) = breach {
                return Err(RenderError::ExpressionsOverBudget(breach.describe()));
            }
            write_modifications(json, &slots, modifications, image_bytes)
        },
    )?;
    let timeline = timeline::retime(&mut json, spec.fps.get());
    let frame_count = match spec.window {
        Some(window) => show_window(&mut json, window, timeline.frame_count)?,
        None => timeline.frame_count,
    };
    let (width, height) = (spec.width.get() as usize, spec.height.get() as usize);
    // Blurs and shadows on pixels: the composition in parts, their cost checked first.
    let effects = layer_effects::plan(&json, width, height, frame_count)?;
    let source = FrameSource {
        json: Arc::new(json.to_string()),
        width,
        height,
        frame_count,
        effects,
    };
    Ok(PreparedRender {
        source,
        spec,
        frame_count,
    })
}

/// Narrows a retimed template (one template frame per output frame) to `window`: its in and
/// out points move to the window's frames, so rlottie's frame 0 (counted from the in point)
/// is the window's first. Answers the window's frame count. The window was resolved against
/// this template's duration at admission; a template that changed since fails here.
fn show_window(
    json: &mut serde_json::Value,
    window: crate::spec::Window,
    frames: u32,
) -> Result<u32, RenderError> {
    let (start, count) = window.range();
    if u64::from(start) + u64::from(count) > u64::from(frames) {
        return Err(RenderError::WindowOutside(format!(
            "frames {start}..{} lie past the animation's {frames} frames",
            u64::from(start) + u64::from(count)
        )));
    }
    if let Some(root) = json.as_object_mut() {
        let in_point = root
            .get("ip")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        let first = in_point + f64::from(start);
        root.insert("ip".to_owned(), serde_json::Value::from(first));
        root.insert(
            "op".to_owned(),
            serde_json::Value::from(first + f64::from(count)),
        );
    }
    Ok(count)
}

/// The caller's modifications written into the template, its replacement images decoded and
/// fitted to their slots' boxes.
fn write_modifications(
    json: &mut serde_json::Value,
    slots: &slots::Slots,
    modifications: &Modifications,
    image_bytes: &BTreeMap<String, Vec<u8>>,
) -> Result<(), RenderError> {
    modifications::write(json, slots, modifications);
    let images = fitted_images(slots, modifications, image_bytes)?;
    if !images.is_empty() {
        modifications::write_images(json, slots, &images);
        // The replacements' sizes count against the template's image budget as its own
        // images did (`assets::MAX_TEMPLATE_IMAGE_DECODED_BYTES`).
        assets::check(json)?;
    }
    Ok(())
}

/// Each replacement image decoded and fitted to its slot's box: slot id → PNG data URI.
/// An image two slots show is decoded once per slot (each has its own box).
fn fitted_images(
    slots: &slots::Slots,
    modifications: &Modifications,
    image_bytes: &BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, String>, RenderError> {
    let mut fitted = BTreeMap::new();
    for (id, choice) in &modifications.images {
        // Checked against the slots by the caller.
        let Some(slot) = slots.image(id) else {
            continue;
        };
        let Some(bytes) = image_bytes.get(&choice.sha256) else {
            return Err(RenderError::ImageMissing { slot: id.clone() });
        };
        let image_error = |error| RenderError::Image {
            slot: id.clone(),
            error,
        };
        let pixels =
            images::fitted(bytes, slot.width, slot.height, choice.fit).map_err(image_error)?;
        fitted.insert(
            id.clone(),
            images::png_data_uri(&pixels).map_err(image_error)?,
        );
    }
    Ok(fitted)
}

/// What was produced, as the job reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputInfo {
    pub content_type: String,
    pub size_bytes: u64,
    pub sha256: String,
    /// Encoded size (MP4 rounds odd sizes up to even, padding with the background).
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub frame_count: u32,
    pub duration_seconds: f64,
    /// The poster PNG written beside the output (`OutputSpec.poster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poster: Option<PosterInfo>,
}

/// A poster as the job reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PosterInfo {
    pub size_bytes: u64,
    pub sha256: String,
    pub width: u32,
    pub height: u32,
    /// The output frame it shows.
    pub frame: u32,
}

/// Writes the poster `prepared.spec.poster` asks for (a PNG of that output frame, alpha kept,
/// as a PNG still of the same time) to `path`; `None` when none is asked. One more rlottie
/// load and one frame: the pipeline's frames went to the encoder as its pixel format.
pub(crate) fn write_poster(
    prepared: &PreparedRender,
    path: &Path,
) -> Result<Option<PosterInfo>, RenderError> {
    let Some(frame) = prepared.spec.poster else {
        return Ok(None);
    };
    let mut renderer = prepared.source.renderer()?;
    let premultiplied = renderer.render(frame);
    let (width, height) = (prepared.spec.width.get(), prepared.spec.height.get());
    encode::still::write_png(premultiplied, (width, height), prepared.spec.quality, path)?;
    let (size_bytes, sha256) = hash_file(path).map_err(RenderError::ReadOutput)?;
    Ok(Some(PosterInfo {
        size_bytes,
        sha256,
        width,
        height,
        frame,
    }))
}

/// Renders `prepared` into `output_path` with `threads` render threads. `on_progress` is
/// called with (frames encoded, frames in total) after every frame.
pub(crate) fn run(
    prepared: &PreparedRender,
    output_path: &Path,
    threads: usize,
    on_progress: &mut dyn FnMut(u32, u32),
) -> Result<OutputInfo, RenderError> {
    let spec = prepared.spec;
    let settings = encode::EncoderSettings::new(&spec);
    let mut encoder = encode::open(&settings, output_path)?;
    let total = prepared.frame_count;
    let mut frames = prepared
        .source
        .render_in_parallel(threads, encode::preparer_factory(&settings));
    while let Some(frame) = frames.next() {
        let frame = frame?;
        let index = frame.index;
        if let Some(spent) = encoder.encode(frame)? {
            frames.recycle(index, spent);
        }
        on_progress(index + 1, total);
    }
    encoder.finish()?;
    let (size_bytes, sha256) = hash_file(output_path).map_err(RenderError::ReadOutput)?;
    let (width, height) = settings.encoded_size();
    Ok(OutputInfo {
        content_type: spec.format.content_type().to_owned(),
        size_bytes,
        sha256,
        width,
        height,
        fps: spec.fps.get(),
        frame_count: total,
        duration_seconds: f64::from(total) / f64::from(spec.fps.get()),
        poster: None,
    })
}

/// Size and hex sha256 of a file, streamed.
pub(crate) fn hash_file(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        size += read as u64;
        hasher.update(&buffer[..read]);
    }
    let hex = crate::lottie::reading::template::lowercase_hex(&hasher.finalize());
    Ok((size, hex))
}

/// The resource directory rlottie is given. rlottie opens a non-embedded image at
/// `resource dir + u + p`, joined as strings (`lottieparser.cpp`, `parseAsset`); an empty
/// directory would resolve relative names against the worker's working directory and take
/// absolute ones as they are. `/dev/null` is a character device, never a directory, so the
/// kernel refuses every path through it with ENOTDIR, `..` included: whatever slipped past
/// [`crate::lottie::reading::assets`], rlottie can read no file with it.
pub(crate) const NO_RESOURCE_DIR: &str = "/dev/null/";
