//! Admission: what a valid render request must be against its template, decided by one pure
//! function ([`admit`]) of the request and the template's record: the theme applied, every
//! slot id one of the template's, the times resolved, the output within the job budget and
//! its format's limits ([`crate::spec::output`]). It answers the [`Plan`] of the job or every
//! refusal at once (INVALID_ARGUMENT); reading the record, the disk, the pins, the quarantine
//! and the queue are the intake's steps ([`super::intake`]).

use super::{Fingerprint, Job, RenderWork};
use crate::auth::TenantId;
use crate::error::{Classified, ServiceError, Violations};
use crate::lottie::modifications;
use crate::reason::Reason;
use crate::spec::output;
use crate::spec::{ImageSource, Modifications, Notify, OutputSpec, RenderSubmission};
use crate::storage::pins::TemplatePin;
use crate::storage::AdmissionRecord;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Limits applied to every job.
#[derive(Debug, Clone, Copy)]
pub struct JobLimits {
    /// Output megapixels: frames × width × height / 10⁶.
    pub max_megapixels: u64,
    /// Longest a worker may run (the deadline derived from the job's size is capped here).
    pub max_duration: Duration,
}

/// An admitted request: the job it becomes once the template's files are pinned for it.
#[derive(Debug)]
pub(crate) struct Plan {
    pub tenant: TenantId,
    pub template_id: Uuid,
    /// The theme's values under the caller's, every one checked against the slots.
    pub modifications: Modifications,
    /// The window, loop count and poster resolved against the template.
    pub output: OutputSpec,
    pub notify: Option<Notify>,
    /// The replacement images' bytes, to pin for the worker.
    pub images: BTreeMap<String, ImageSource>,
    /// The dotLottie animation the template's record chose.
    pub animation: Option<String>,
    pub frames: u32,
    pub fingerprint: Fingerprint,
    /// One worker run's budget, from the job's work.
    pub deadline: Duration,
}

impl Plan {
    /// The queued job `job_id` and its work, with the template's files `pin`ned for it.
    pub(crate) fn into_job(self, job_id: Uuid, pin: TemplatePin) -> (Job, RenderWork) {
        let mut job = Job::queued(
            job_id,
            self.tenant,
            self.template_id,
            self.fingerprint,
            self.output.format,
            self.frames,
        );
        job.notify = self.notify;
        let work = RenderWork {
            modifications: self.modifications,
            animation: self.animation,
            output: self.output,
            deadline: self.deadline,
            pin: Some(Arc::new(pin)),
            trace_parent: None,
        };
        (job, work)
    }
}

/// Decides `submission` of a caller of `tenant` against its template's `record`: the plan of
/// its job (fingerprint, frames, deadline), or every refusal at once. Pure: reading the record,
/// the disk and pinning the files are the intake's.
pub(crate) fn admit(
    tenant: TenantId,
    record: &AdmissionRecord,
    mut submission: RenderSubmission,
    limits: JobLimits,
) -> Result<Plan, ServiceError> {
    let frames = check_against_record(record, &mut submission, limits)?;
    let output = submission.output;
    // Replacement images to decode and blurs to draw: work beside the output's frames.
    let image_megapixels = image_megapixels(&submission)
        + crate::render::layer_effects::charged_megapixels(
            record.pixel_filters,
            output.width.get(),
            output.height.get(),
            frames,
        );
    let fingerprint = Fingerprint::of(
        &tenant,
        &record.render_identity,
        &submission.modifications,
        &output,
    );
    let deadline = crate::sandbox::default_deadline(&output, frames, image_megapixels)
        .min(limits.max_duration);
    Ok(Plan {
        tenant,
        template_id: submission.template_id,
        modifications: submission.modifications,
        output,
        notify: submission.notify,
        images: submission.images,
        animation: record.animation.clone(),
        frames,
        fingerprint,
        deadline,
    })
}

/// What admission decides of `submission` against its template's record, storage aside:
/// the theme's values go under the caller's (into `submission.modifications`), every
/// modification is checked against the slots, the times are resolved into
/// `submission.output`, and the output is checked against the job budget and its format's
/// limits. Answers the output's frame count, or every refusal at once. Public for the
/// `prepare` fuzz target, which runs it between the request's conversion and the worker's
/// `render::prepare_with_images` as the service does.
pub fn check_against_record(
    record: &AdmissionRecord,
    submission: &mut RenderSubmission,
    limits: JobLimits,
) -> Result<u32, ServiceError> {
    let mut violations = Violations::default();
    if let Some(theme) = submission.theme.take() {
        match record.themes.get(&theme) {
            Some(values) => {
                submission.modifications =
                    values.overridden_by(std::mem::take(&mut submission.modifications));
            }
            None => violations.push(
                Reason::ThemeUnknown,
                "theme",
                unknown_theme(&theme, &record.themes),
            ),
        }
    }
    for error in modifications::check(&record.slots, &submission.modifications) {
        violations.push(error.reason(), error.field(), error.to_string());
    }
    let image_megapixels = image_megapixels(submission);
    let frames = check_output(
        &mut submission.output,
        &submission.timing,
        record,
        Budget {
            limits,
            image_megapixels,
        },
        &mut violations,
    );
    violations.into_result(frames)
}

/// Megapixels of replacement images the worker decodes and fits for `submission`, once per
/// slot that shows one: work of the job as much as its output's frames are.
fn image_megapixels(submission: &RenderSubmission) -> f64 {
    let pixels: u64 = submission
        .modifications
        .images
        .values()
        .filter_map(|choice| submission.images.get(&choice.sha256))
        .map(crate::lottie::reading::images::decoded_pixels)
        .sum();
    pixels as f64 / 1e6
}

/// What a job may cost: the limits, and the work its replacement images add to its output's.
#[derive(Debug, Clone, Copy)]
struct Budget {
    limits: JobLimits,
    image_megapixels: f64,
}

/// Resolves `spec`'s window, loop count and poster from `timing` against the template, and
/// checks the output against the job budget and its format's limits ([`output::check`]);
/// each refusal goes into `violations`. Answers the output's frame count.
fn check_output(
    spec: &mut OutputSpec,
    timing: &crate::spec::TimingRequest,
    report: &AdmissionRecord,
    Budget {
        limits,
        image_megapixels,
    }: Budget,
    violations: &mut Violations,
) -> u32 {
    let animation = crate::spec::timing::Animation {
        duration_seconds: report.duration_seconds,
        markers: &report.markers,
    };
    match crate::spec::timing::resolve(timing, spec.format, spec.fps.get(), &animation) {
        Ok(resolved) => {
            spec.window = resolved.window;
            spec.loop_count = resolved.loop_count;
            spec.poster = resolved.poster;
        }
        Err(crate::spec::SpecError::Invalid { field, message }) => {
            violations.push(Reason::RequestInvalid, field, message);
        }
    }
    let frames = output::frames(spec, report.duration_seconds);
    let output_megapixels = output::megapixels(spec, frames);
    let megapixels = output_megapixels + image_megapixels;
    if megapixels > limits.max_megapixels as f64 {
        let images = if image_megapixels > 0.0 {
            format!(" and its replacement images {image_megapixels:.0} more")
        } else {
            String::new()
        };
        violations.push(
            Reason::JobTooLarge,
            "output",
            format!(
                "{frames} frames of {}×{} are {output_megapixels:.0} megapixels{images}, more \
                 than the {} megapixel job budget; lower fps, width or height, or send smaller \
                 images",
                spec.width.get(),
                spec.height.get(),
                limits.max_megapixels
            ),
        );
    }
    for violation in output::check(spec, frames) {
        violations.push(violation.reason(), violation.field(), violation.to_string());
    }
    frames
}

/// The refusal of a theme the template has not, naming those it has.
fn unknown_theme(theme: &str, themes: &crate::lottie::reading::dotlottie::Themes) -> String {
    let names: Vec<&str> = themes.keys().map(String::as_str).collect();
    let names = if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    };
    format!("the template has no theme {theme:?}; its themes: {names}")
}
