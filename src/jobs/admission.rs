//! Admission: the checks a valid render request passes before it becomes a queued job.
//! Against its template ([`admit`]: the template exists, every slot id is one of its slots,
//! frames × pixels within the job budget, the GIF length, disk room for the output), then
//! against the quarantine ([`Scheduler::check_quarantine`]), then for capacity (the queue and
//! the tenant's share, [`Scheduler::accept`]). Every refusal comes back as the
//! [`ServiceError`] the caller sees, with its retry delay when it is worth retrying.

use super::scheduler::SubmitRefused;
use super::{Fingerprint, Job, RenderWork, Scheduler};
use crate::auth::TenantId;
use crate::encode::gif::MAX_GIF_SECONDS;
use crate::error::{Classified, FieldViolation, ServiceError, ServiceErrorCode};
use crate::jobs::queue::PushRefused;
use crate::lottie::modifications::{self, ModificationError};
use crate::lottie::timeline;
use crate::reason::Reason;
use crate::spec::{Format, RenderSubmission};
use crate::storage::{AdmissionRecord, StorageError, TemplateStore};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Retry delay while the server drains: long enough for the mesh to route elsewhere.
pub(crate) const DRAINING_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Limits applied to every job.
#[derive(Debug, Clone, Copy)]
pub struct JobLimits {
    /// Output megapixels: frames × width × height / 10⁶.
    pub max_megapixels: u64,
    /// Longest a worker may run (the deadline derived from the job's size is capped here).
    pub max_duration: Duration,
}

/// The refusal of a server that is shutting down.
pub(crate) fn server_draining() -> ServiceError {
    ServiceError::transient(
        ServiceErrorCode::Unavailable,
        Reason::ServerDraining,
        "the server is shutting down; submit to another instance or retry later",
        DRAINING_RETRY_AFTER,
    )
}

/// A template id that is well-formed but names no template of the caller's tenant (unknown,
/// deleted, or another tenant's: the same answer): the request is wrong (DESIGN.md), not a
/// missing resource.
fn template_not_found(template_id: Uuid) -> ServiceError {
    let description = format!("template {template_id} does not exist");
    ServiceError::invalid_argument(
        Reason::TemplateNotFound,
        description.clone(),
        vec![FieldViolation {
            field: "template_id".into(),
            description,
        }],
    )
}

/// Checks `submission` of a caller of `tenant` against its template; answers the job and
/// the work to queue (with the template's files pinned for it). Blocking (reads the
/// template's record, checks the disk).
pub(crate) fn admit(
    templates: &TemplateStore,
    tenant: TenantId,
    mut submission: RenderSubmission,
    limits: JobLimits,
) -> Result<(Job, RenderWork), ServiceError> {
    let template_id = submission.template_id;
    let record = match templates.admission_record(&tenant, template_id) {
        Ok(record) => record,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(error.into()),
    };
    let frames = check_against_record(&record, &mut submission, limits)?;
    let spec = submission.output;
    let image_megapixels = image_megapixels(&submission);
    // Outputs need disk: a nearly full data directory refuses new renders until it has room.
    templates.check_disk_space()?;
    let fingerprint = Fingerprint::of(
        &tenant,
        &record.render_identity,
        &submission.modifications,
        &spec,
    );
    let job_id = Uuid::new_v4();
    // Deleted since the record was read: refused as if the deletion came first.
    let pin = match templates.pin_files(
        record.id,
        &record.fonts,
        &tenant,
        &submission.images,
        job_id,
    ) {
        Ok(pin) => pin,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(error.into()),
    };
    let mut job = Job::queued(
        job_id,
        tenant,
        template_id,
        fingerprint,
        spec.format,
        frames,
    );
    job.notify = submission.notify;
    let deadline =
        crate::sandbox::default_deadline(&spec, frames, image_megapixels).min(limits.max_duration);
    let work = RenderWork {
        modifications: submission.modifications,
        animation: record.animation.clone(),
        output: spec,
        deadline,
        pin: Some(Arc::new(pin)),
        trace_parent: None,
    };
    Ok((job, work))
}

/// What admission decides of `submission` against its template's record, storage aside:
/// the theme's values go under the caller's (into `submission.modifications`), every
/// modification is checked against the slots, the times are resolved into
/// `submission.output`, and the output is checked against the job budget and the formats'
/// limits. Answers the output's frame count, or every refusal at once. Public for the
/// `prepare` fuzz target, which runs it between the request's conversion and the worker's
/// `render::prepare_with_images` as the service does.
pub fn check_against_record(
    record: &AdmissionRecord,
    submission: &mut RenderSubmission,
    limits: JobLimits,
) -> Result<u32, ServiceError> {
    let mut violations = Vec::new();
    let mut reason = None;
    if let Some(theme) = submission.theme.take() {
        match record.themes.get(&theme) {
            Some(values) => {
                submission.modifications =
                    values.overridden_by(std::mem::take(&mut submission.modifications));
            }
            None => {
                reason.get_or_insert(Reason::ThemeUnknown);
                violations.push(unknown_theme(&theme, &record.themes));
            }
        }
    }
    for error in modifications::check(&record.slots, &submission.modifications) {
        reason.get_or_insert(error.reason());
        violations.push(FieldViolation {
            field: modification_field(&error),
            description: error.to_string(),
        });
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
        (&mut reason, &mut violations),
    );
    match reason {
        None => Ok(frames),
        Some(reason) => {
            let message = violations
                .iter()
                .map(|v| format!("{}: {}", v.field, v.description))
                .collect::<Vec<_>>()
                .join("; ");
            Err(ServiceError::invalid_argument(reason, message, violations))
        }
    }
}

/// Megapixels of replacement images the worker decodes and fits for `submission`, once per
/// slot that shows one: work of the job as much as its output's frames are.
fn image_megapixels(submission: &RenderSubmission) -> f64 {
    let pixels: u64 = submission
        .modifications
        .images
        .values()
        .filter_map(|choice| submission.images.get(&choice.sha256))
        .map(crate::lottie::images::decoded_pixels)
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
/// checks the output against the job budget and the formats' own limits (GIF length, animated
/// WebP size); each refusal goes into `refusal` (the first reason, every violation). Answers
/// the output's frame count.
fn check_output(
    spec: &mut crate::spec::OutputSpec,
    timing: &crate::spec::TimingRequest,
    report: &AdmissionRecord,
    Budget {
        limits,
        image_megapixels,
    }: Budget,
    (reason, violations): (&mut Option<Reason>, &mut Vec<FieldViolation>),
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
            reason.get_or_insert(Reason::RequestInvalid);
            violations.push(FieldViolation {
                field,
                description: message,
            });
        }
    }
    let frames = match spec.window {
        Some(window) => window.range().1,
        None => timeline::frame_count(report.duration_seconds, spec.fps.get()),
    };
    let output_megapixels =
        f64::from(frames) * f64::from(spec.width.get()) * f64::from(spec.height.get()) / 1e6;
    let megapixels = output_megapixels + image_megapixels;
    if megapixels > limits.max_megapixels as f64 {
        reason.get_or_insert(Reason::JobTooLarge);
        let images = if image_megapixels > 0.0 {
            format!(" and its replacement images {image_megapixels:.0} more")
        } else {
            String::new()
        };
        violations.push(FieldViolation {
            field: "output".into(),
            description: format!(
                "{frames} frames of {}×{} are {output_megapixels:.0} megapixels{images}, more \
                 than the {} megapixel job budget; lower fps, width or height, or send smaller \
                 images",
                spec.width.get(),
                spec.height.get(),
                limits.max_megapixels
            ),
        });
    }
    let seconds = f64::from(frames) / f64::from(spec.fps.get());
    if spec.format == Format::Gif && seconds > MAX_GIF_SECONDS {
        reason.get_or_insert(Reason::OutputTooLong);
        violations.push(FieldViolation {
            field: "output.format".into(),
            description: format!(
                "a GIF may last at most {MAX_GIF_SECONDS} s; this one would last {seconds:.1} s \
                 (a segment can shorten it)"
            ),
        });
    }
    let still = matches!(spec.window, Some(crate::spec::Window::Still { .. }));
    if spec.format == Format::Webp && !still {
        if let Some(megapixels) = crate::encode::web::webp_animation_over_limit(
            frames,
            spec.width.get(),
            spec.height.get(),
        ) {
            reason.get_or_insert(Reason::OutputTooLong);
            violations.push(FieldViolation {
                field: "output.format".into(),
                description: format!(
                    "an animated WebP may have at most {} megapixels (frames × width × height; \
                     its encoder holds them all in memory); this one would have {megapixels:.0}: \
                     a segment, a smaller size or 30 fps shortens it",
                    crate::encode::web::MAX_WEBP_ANIMATION_MEGAPIXELS
                ),
            });
        }
    }
    frames
}

/// The refusal of a theme the template has not, naming those it has.
fn unknown_theme(theme: &str, themes: &crate::lottie::dotlottie::Themes) -> FieldViolation {
    let names: Vec<&str> = themes.keys().map(String::as_str).collect();
    let names = if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    };
    FieldViolation {
        field: "theme".into(),
        description: format!("the template has no theme {theme:?}; its themes: {names}"),
    }
}

/// The request field a modification error is about.
fn modification_field(error: &ModificationError) -> String {
    match error {
        ModificationError::UnknownColorSlot { id, .. } => format!("modifications.colors[{id:?}]"),
        ModificationError::UnknownTextSlot { id, .. }
        | ModificationError::ControlCharacter { id, .. } => {
            format!("modifications.texts[{id:?}]")
        }
        ModificationError::UnknownImageSlot { id, .. } => format!("modifications.images[{id:?}]"),
        ModificationError::UnknownSlot { kind, id, .. } => format!("modifications.{kind}[{id:?}]"),
        ModificationError::ScalarOutOfRange { id, .. } => {
            format!("modifications.scalars[{id:?}]")
        }
        ModificationError::VectorShape { id, .. } => format!("modifications.vectors[{id:?}]"),
        ModificationError::GradientStopCount { id, .. } => {
            format!("modifications.gradients[{id:?}]")
        }
    }
}

impl Scheduler {
    /// Refuses `job` when its fingerprint is quarantined (here or, with shared jobs, by any
    /// instance): this exact request crashed the renderer twice, or its expressions ran out
    /// of their budget.
    pub(crate) async fn check_quarantine(&self, job: &Job) -> Result<(), ServiceError> {
        if !self.is_quarantined(&job.fingerprint).await? {
            return Ok(());
        }
        tracing::warn!(
            template_id = %job.template_id,
            fingerprint = %job.fingerprint,
            "refused a quarantined request"
        );
        Err(ServiceError::invalid_argument(
            Reason::RenderQuarantined,
            "this exact request crashed the renderer twice or ran its expressions out of \
             their budget, and is quarantined; change the template or the modifications",
            Vec::new(),
        ))
    }

    /// Adds an admitted job ([`Scheduler::submit`]); a refusal comes back as the caller sees
    /// it, with the delay after which the queue or the tenant's share likely has room.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        job: Job,
        work: RenderWork,
    ) -> Result<Job, ServiceError> {
        let tenant = job.tenant.clone();
        self.submit(job, work)
            .await
            .map_err(|refused| self.refusal(&tenant, refused))
    }

    fn refusal(&self, tenant: &TenantId, refused: SubmitRefused) -> ServiceError {
        match refused {
            SubmitRefused::Queue(PushRefused::TenantFull { held, limit }) => {
                ServiceError::transient(
                    ServiceErrorCode::ResourceExhausted,
                    Reason::TenantJobLimit,
                    format!(
                        "tenant {tenant} has {held} jobs queued or running, its limit \
                         ({limit}); retry when one has ended"
                    ),
                    self.tenant_retry_after(tenant),
                )
            }
            SubmitRefused::Queue(PushRefused::Full { length }) => ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::QueueFull,
                format!("the render queue is full ({length} jobs waiting)"),
                self.retry_after_waiting(length),
            ),
            SubmitRefused::Queue(PushRefused::Closed) => server_draining(),
            SubmitRefused::Queue(PushRefused::RetainedJobsFull(full)) => {
                let (whose, delay) = if full.per_tenant {
                    (format!("tenant {tenant}"), self.tenant_retry_after(tenant))
                } else {
                    ("this instance".to_owned(), self.queue_retry_after())
                };
                ServiceError::transient(
                    ServiceErrorCode::ResourceExhausted,
                    Reason::RetainedJobsFull,
                    format!(
                        "{whose} keeps {} jobs, its limit ({}), and none of them has ended \
                         (ended jobs would be forgotten to make room); retry when one has ended",
                        full.retained, full.limit
                    ),
                    delay,
                )
            }
            SubmitRefused::Shared(error) => error.into(),
            SubmitRefused::Internal(error) => ServiceError::internal(error),
        }
    }
}
