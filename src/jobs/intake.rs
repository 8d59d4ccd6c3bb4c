//! SubmitRender as one call, whatever door it came through (gRPC or the HTTP door): a valid
//! submission is checked against its stored template (the record read, [`admission::admit`]
//! deciding, the disk's room, the template's files pinned), its Idempotency-Key claimed or an
//! earlier call's job answered again ([`crate::idempotency::once`]), checked against the
//! quarantine, submitted to the scheduler (queued, following an identical render, or reusing
//! its output) with its refusals as the caller sees them, and the key bound to the job. Domain
//! types in and out: the door converts the wire request to a [`RenderSubmission`] and the
//! [`Submitted`] job back.

use super::admission::{self, JobLimits};
use super::scheduler::SubmitRefused;
use super::{Job, JobState, RenderWork, Scheduler};
use crate::auth::TenantId;
use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::once::{self, NextAction};
use crate::idempotency::IdempotencyKey;
use crate::jobs::queue::PushRefused;
use crate::reason::Reason;
use crate::spec::Notify;
use crate::spec::RenderSubmission;
use crate::storage::{Pins, StorageError, Templates};
use opentelemetry::trace::SpanContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Retry delay while the server drains: long enough for the mesh to route elsewhere.
const DRAINING_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Keys are scoped per method: the same key on another method is another key.
const SUBMIT_RENDER_SCOPE: &str = "SubmitRender";

/// What SubmitRender needs: the templates to admit against, the scheduler, the limits of
/// every job, how keys are kept, and whether the server drains.
#[derive(Debug, Clone)]
pub(crate) struct Intake {
    templates: Templates,
    pins: Pins,
    scheduler: Arc<Scheduler>,
    limits: JobLimits,
    keys: KeyPolicy,
    draining: Arc<AtomicBool>,
    /// Whether a submission's webhook may be sent (where it goes, who signs it): the
    /// webhooks' own check ([`crate::webhooks::Webhooks::check`]), handed in so that jobs
    /// need not know webhooks (which follow jobs).
    webhooks: NotifyCheck,
}

/// A submission's webhook checked for its tenant: INVALID_ARGUMENT or FAILED_PRECONDITION
/// when it cannot be sent.
#[derive(Clone)]
pub(crate) struct NotifyCheck(pub Arc<CheckNotify>);

/// The function a [`NotifyCheck`] holds.
pub(crate) type CheckNotify = dyn Fn(&TenantId, &Notify) -> Result<(), ServiceError> + Send + Sync;

impl std::fmt::Debug for NotifyCheck {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("NotifyCheck")
    }
}

/// A submission as the door received it, validated ([`RenderSubmission`]).
#[derive(Debug)]
pub(crate) struct Submission {
    pub tenant: TenantId,
    pub key: IdempotencyKey,
    pub request: RenderSubmission,
    /// The call's span: the render's will be its child, wherever it runs.
    pub trace_parent: Option<SpanContext>,
}

/// The job to answer.
#[derive(Debug)]
pub(crate) enum Submitted {
    /// Accepted now: queued, following an identical render, or SUCCEEDED at once with an
    /// identical request's output.
    Accepted(Job),
    /// An earlier call with this key and request created it: answered again, nothing new.
    Replayed(Job),
}

/// A finished job whose key a retry may take over: it failed transiently or was cancelled.
fn releases_key(job: &Job) -> bool {
    match job.state {
        JobState::Failed => job.error.as_ref().is_some_and(|error| error.retryable),
        JobState::Cancelled => true,
        _ => false,
    }
}

impl Intake {
    pub(crate) fn new(
        templates: Templates,
        pins: Pins,
        scheduler: Arc<Scheduler>,
        limits: JobLimits,
        keys: KeyPolicy,
        draining: Arc<AtomicBool>,
        webhooks: NotifyCheck,
    ) -> Intake {
        Intake {
            templates,
            pins,
            scheduler,
            limits,
            keys,
            draining,
            webhooks,
        }
    }

    /// The scheduler this use case submits to.
    pub(crate) fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// SubmitRender: everything is validated before anything is recorded; every violation
    /// of a stage comes back in one error.
    pub(crate) async fn submit(&self, submission: Submission) -> Result<Submitted, ServiceError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(server_draining());
        }
        let Submission {
            tenant,
            key,
            request,
            trace_parent,
        } = submission;
        if let Some(notify) = &request.notify {
            (self.webhooks.0)(&tenant, notify)?;
        }
        let (templates, pins, limits) = (self.templates.clone(), self.pins.clone(), self.limits);
        let (job, mut work) = tokio::task::spawn_blocking(move || {
            admit_stored(&templates, &pins, tenant, request, limits)
        })
        .await
        .map_err(ServiceError::internal)??;
        work.trace_parent = trace_parent;
        // From here on the call records and creates things: it runs to its end on its own
        // task even if the caller goes away (a timed-out call is exactly what gets retried).
        let intake = self.clone();
        tokio::spawn(async move { intake.accept(key, job, work).await })
            .await
            .map_err(ServiceError::internal)?
    }

    /// The submission once admitted: the idempotency key, the quarantine, the job.
    async fn accept(
        &self,
        key: IdempotencyKey,
        job: Job,
        work: RenderWork,
    ) -> Result<Submitted, ServiceError> {
        let tenant = job.tenant.clone();
        // What was asked: what is rendered, and who is told.
        let request_hash = match &job.notify {
            None => job.fingerprint.as_str().to_owned(),
            Some(notify) => format!("{}|{}", job.fingerprint, notify.request_hash_part()),
        };
        let next = once::begin(
            &self.keys,
            &job.tenant,
            SUBMIT_RENDER_SCOPE,
            &key,
            &request_hash,
            |id| {
                let tenant = tenant.clone();
                async move {
                    // A job that failed transiently or was cancelled frees its key.
                    Ok(self
                        .scheduler
                        .lookup()
                        .find_job(&tenant, id)
                        .await?
                        .filter(|job| !releases_key(job)))
                }
            },
        )
        .await?;
        let claimed = match next {
            NextAction::Create(claimed) => claimed,
            NextAction::Replay(job) => {
                self.scheduler.metrics().idempotent_replays.inc();
                tracing::info!(job_id = %job.id, template_id = %job.template_id, "idempotent replay");
                return Ok(Submitted::Replayed(job));
            }
        };
        // After the key: a retry of a request that crashed the renderer replays its failed
        // job; only a new request with a quarantined fingerprint is refused.
        let submitted = match self.check_quarantine(&job).await {
            Ok(()) => self.submit_to_scheduler(job, work).await,
            Err(refused) => Err(refused),
        };
        // Bound to the job, or freed for the retry when no job was created.
        claimed
            .finish(submitted.as_ref().ok().map(|job| job.id))
            .await;
        let job = submitted?;
        tracing::info!(
            job_id = %job.id,
            tenant = %job.tenant,
            template_id = %job.template_id,
            fingerprint = %job.fingerprint,
            frames_total = job.frames_total,
            state = job.state.label(),
            "job accepted"
        );
        Ok(Submitted::Accepted(job))
    }

    /// Refuses `job` when its fingerprint is quarantined (here or, with shared jobs, by any
    /// instance): this exact request crashed the renderer twice, or its expressions ran out
    /// of their budget.
    async fn check_quarantine(&self, job: &Job) -> Result<(), ServiceError> {
        if !self.scheduler.is_quarantined(&job.fingerprint).await? {
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
    async fn submit_to_scheduler(&self, job: Job, work: RenderWork) -> Result<Job, ServiceError> {
        let tenant = job.tenant.clone();
        self.scheduler
            .submit(job, work)
            .await
            .map_err(|refused| refusal(&self.scheduler, &tenant, refused))
    }
}

/// The refusal of a server that is shutting down.
fn server_draining() -> ServiceError {
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

/// Admits `submission` of a caller of `tenant` against its stored template
/// ([`admission::admit`]) and answers the job and the work to queue, with the template's
/// files pinned for it. Blocking (reads the template's record, checks the disk, copies the
/// files).
fn admit_stored(
    templates: &Templates,
    pins: &Pins,
    tenant: TenantId,
    submission: RenderSubmission,
    limits: JobLimits,
) -> Result<(Job, RenderWork), ServiceError> {
    let template_id = submission.template_id;
    let record = match templates.admission_record(&tenant, template_id) {
        Ok(record) => record,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(error.into()),
    };
    let plan = admission::admit(tenant, &record, submission, limits)?;
    let job_id = Uuid::new_v4();
    // Outputs need disk: a nearly full data directory refuses new renders until it has room
    // (the pins' first step). Deleted since the record was read: refused as if the deletion
    // came first.
    let pin = match pins.pin_files(record.id, &record.fonts, &plan.tenant, &plan.images, job_id) {
        Ok(pin) => pin,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(error.into()),
    };
    Ok(plan.into_job(job_id, pin))
}

/// What the caller sees of the scheduler's refusal of a job of `tenant`: the queue or the
/// tenant's share full (with the delay after which it likely has room), the server draining.
fn refusal(scheduler: &Scheduler, tenant: &TenantId, refused: SubmitRefused) -> ServiceError {
    match refused {
        SubmitRefused::Queue(PushRefused::TenantFull { held, limit }) => ServiceError::transient(
            ServiceErrorCode::ResourceExhausted,
            Reason::TenantJobLimit,
            format!(
                "tenant {tenant} has {held} jobs queued or running, its limit ({limit}); retry \
                 when one has ended"
            ),
            scheduler.tenant_retry_after(tenant),
        ),
        SubmitRefused::Queue(PushRefused::Full { length }) => ServiceError::transient(
            ServiceErrorCode::ResourceExhausted,
            Reason::QueueFull,
            format!("the render queue is full ({length} jobs waiting)"),
            scheduler.retry_after_waiting(length),
        ),
        SubmitRefused::Queue(PushRefused::Closed) => server_draining(),
        SubmitRefused::Queue(PushRefused::RetainedJobsFull(full)) => {
            let (whose, delay) = if full.per_tenant {
                (
                    format!("tenant {tenant}"),
                    scheduler.tenant_retry_after(tenant),
                )
            } else {
                ("this instance".to_owned(), scheduler.queue_retry_after())
            };
            ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::RetainedJobsFull,
                format!(
                    "{whose} keeps {} jobs, its limit ({}), and none of them has ended (ended \
                     jobs would be forgotten to make room); retry when one has ended",
                    full.retained, full.limit
                ),
                delay,
            )
        }
        SubmitRefused::Shared(error) => error.into(),
        SubmitRefused::Internal(error) => ServiceError::internal(error),
    }
}
