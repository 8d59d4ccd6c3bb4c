//! SubmitRender as one call, whatever door it came through (gRPC today, HTTP next): a valid
//! submission is checked against its template ([`admission::admit`]), its Idempotency-Key
//! claimed or an earlier call's job answered again ([`crate::idempotency::once`]), checked
//! against the quarantine, accepted by the scheduler (queued, following an identical render,
//! or reusing its output), and the key bound to the job. Domain types in and out: the door
//! converts the wire request to a [`RenderSubmission`] and the [`Submitted`] job back.

use super::admission::{self, server_draining, JobLimits};
use super::{Job, JobState, RenderWork, Scheduler};
use crate::auth::TenantId;
use crate::error::ServiceError;
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::once::{self, NextAction};
use crate::idempotency::IdempotencyKey;
use crate::spec::Notify;
use crate::spec::RenderSubmission;
use crate::storage::TemplateStore;
use opentelemetry::trace::SpanContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Keys are scoped per method: the same key on another method is another key.
const SUBMIT_RENDER_SCOPE: &str = "SubmitRender";

/// What SubmitRender needs: the templates to admit against, the scheduler, the limits of
/// every job, how keys are kept, and whether the server drains.
#[derive(Debug, Clone)]
pub(crate) struct Intake {
    templates: TemplateStore,
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
        templates: TemplateStore,
        scheduler: Arc<Scheduler>,
        limits: JobLimits,
        keys: KeyPolicy,
        draining: Arc<AtomicBool>,
        webhooks: NotifyCheck,
    ) -> Intake {
        Intake {
            templates,
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
        let (templates, limits) = (self.templates.clone(), self.limits);
        let (job, mut work) = tokio::task::spawn_blocking(move || {
            admission::admit(&templates, tenant, request, limits)
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
        let submitted = match self.scheduler.check_quarantine(&job).await {
            Ok(()) => self.scheduler.accept(job, work).await,
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
}
