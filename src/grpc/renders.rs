//! RenderService: submitting, following, cancelling and downloading render jobs.
//!
//! SubmitRender validates everything before anything is queued: the request itself (garde,
//! [`super::convert`]), then the checks of [`crate::jobs::admission`] (the template, the job
//! budget, the quarantine, capacity); every violation of a stage comes back in one answer. A
//! valid job is queued and answered at once (QUEUED); rendering happens in the scheduler's
//! sandboxed workers. Where a job lives (this instance or another) is the scheduler's
//! business ([`Scheduler::find_job`] and its siblings).
//!
//! Everything is scoped to the caller's tenant: its templates, its jobs (another tenant's job
//! is JOB_NOT_FOUND exactly as an unknown id), its idempotency keys, and fingerprints that
//! include the tenant (so de-duplication and the quarantine never cross tenants).

mod download;

pub use download::{DownloadLimits, DownloadStream, StoredOutput, DOWNLOAD_CHUNK_BYTES};

use super::blocking;
use super::convert::parse_id;
use super::proto::{self, render_service_server::RenderService};
use crate::auth::{Caller, TenantId};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::idempotency::claim::{
    claim_key, scoped_key, settle_key, KeyOutcome, KeyPolicy, REPLAYED_HEADER,
};
use crate::idempotency::IdempotencyKey;
use crate::jobs::admission::{self, server_draining, JobLimits};
use crate::jobs::shared::SharedError;
use crate::jobs::{Job, JobState, RenderWork, Scheduler};
use crate::reason::Reason;
use crate::spec::RenderSubmission;
use crate::storage::{OutputStore, TemplateStore};
use crate::telemetry::traces::CallSpan;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Snapshots buffered for a slow watcher before it is made to wait.
const WATCH_BUFFER: usize = 16;
#[derive(Debug, Clone)]
pub struct RenderApi {
    templates: TemplateStore,
    scheduler: Arc<Scheduler>,
    limits: JobLimits,
    keys: KeyPolicy,
    draining: Arc<AtomicBool>,
    downloads: DownloadLimits,
}

/// Keys are scoped per method: the same key on another method is another key.
const SUBMIT_RENDER_SCOPE: &str = "SubmitRender";

/// A finished job whose key a retry may take over: it failed transiently or was cancelled.
fn releases_key(job: &Job) -> bool {
    match job.state {
        JobState::Failed => job.error.as_ref().is_some_and(|error| error.retryable),
        JobState::Cancelled => true,
        _ => false,
    }
}

impl RenderApi {
    pub fn new(
        templates: TemplateStore,
        scheduler: Arc<Scheduler>,
        limits: JobLimits,
        keys: KeyPolicy,
        draining: Arc<AtomicBool>,
    ) -> RenderApi {
        RenderApi {
            templates,
            scheduler,
            limits,
            keys,
            draining,
            downloads: DownloadLimits::default(),
        }
    }

    /// The same API with these download limits.
    pub fn with_download_limits(self, downloads: DownloadLimits) -> RenderApi {
        RenderApi { downloads, ..self }
    }

    async fn job(&self, tenant: &TenantId, field_value: &str) -> Result<Job, ServiceError> {
        let id = parse_id("job_id", field_value)?;
        self.scheduler
            .find_job(tenant, id)
            .await?
            .ok_or_else(|| job_not_found(id))
    }
}

fn job_not_found(id: Uuid) -> ServiceError {
    ServiceError::not_found(
        Reason::JobNotFound,
        format!("job {id} does not exist (or has expired)"),
    )
}

/// WatchRenderJob's answer: `current` at once, then each newer snapshot of `updates` until a
/// terminal one (or an error, or the watcher going away).
fn forward_snapshots(
    current: Job,
    updates: impl futures_util::Stream<Item = Result<Job, Status>> + Send + 'static,
    outputs: OutputStore,
) -> ReceiverStream<Result<proto::RenderJob, Status>> {
    let (sender, receiver) = mpsc::channel(WATCH_BUFFER);
    tokio::spawn(async move {
        let mut updates = std::pin::pin!(updates);
        let mut last_version = current.version;
        let mut terminal = current.state.is_terminal();
        let first = job_with_download_url(&outputs, &current).await;
        if sender.send(Ok(first)).await.is_err() {
            return;
        }
        while !terminal {
            let next = tokio::select! {
                // The watcher went away: stop following (and let go of its subscription)
                // now, not at the job's next change, which may be hours away.
                _ = sender.closed() => return,
                next = updates.next() => next,
            };
            let job = match next {
                Some(Ok(job)) => job,
                Some(Err(status)) => {
                    let _ = sender.send(Err(status)).await;
                    return;
                }
                None => return,
            };
            if job.version <= last_version {
                continue;
            }
            last_version = job.version;
            terminal = job.state.is_terminal();
            // The watcher went away: stop following.
            let snapshot = job_with_download_url(&outputs, &job).await;
            if sender.send(Ok(snapshot)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(receiver)
}

/// `job` on the wire, its output with a signed download URL when it succeeded and the store
/// signs URLs. A URL that cannot be signed is left out (logged): the output still downloads
/// through DownloadRenderOutput.
pub async fn job_with_download_url(outputs: &OutputStore, job: &Job) -> proto::RenderJob {
    let mut answer = job_to_proto(job);
    if job.state != JobState::Succeeded || !outputs.signs_urls() {
        return answer;
    }
    let Some(output) = answer.output.as_mut() else {
        return answer;
    };
    match outputs.download_url(job.id, job.format.extension()).await {
        Ok(Some((url, expires_at))) => {
            output.download_url = Some(url);
            output.download_url_expires_at = Some(expires_at.into());
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(job_id = %job.id, %error, "cannot sign a download URL; the output still downloads through the service");
        }
    }
    answer
}

pub fn job_to_proto(job: &Job) -> proto::RenderJob {
    let state = match job.state {
        JobState::Queued => proto::JobState::Queued,
        JobState::Running => proto::JobState::Running,
        JobState::Succeeded => proto::JobState::Succeeded,
        JobState::Failed => proto::JobState::Failed,
        JobState::Cancelled => proto::JobState::Cancelled,
    };
    proto::RenderJob {
        job_id: job.id.to_string(),
        template_id: job.template_id.to_string(),
        state: state as i32,
        frames_done: job.frames_done,
        frames_total: job.frames_total,
        output: job.output.as_ref().map(|output| proto::RenderOutput {
            content_type: output.content_type.clone(),
            size_bytes: output.size_bytes,
            sha256: output.sha256.clone(),
            width: output.width,
            height: output.height,
            fps: output.fps,
            frame_count: output.frame_count,
            duration_seconds: output.duration_seconds,
            download_url: None,
            download_url_expires_at: None,
        }),
        error: job.error.as_ref().map(|error| proto::JobError {
            reason: error.reason.clone(),
            message: error.message.clone(),
            retryable: error.retryable,
            retry_after: error
                .retry_after
                .and_then(|delay| prost_types::Duration::try_from(delay).ok()),
        }),
        created_at: Some(job.created_at.into()),
        started_at: job.started_at.map(Into::into),
        finished_at: job.finished_at.map(Into::into),
    }
}

impl RenderApi {
    /// SubmitRender once the request is valid: the idempotency key, the quarantine, the job.
    async fn accept(
        &self,
        key: IdempotencyKey,
        job: Job,
        work: RenderWork,
    ) -> Result<Response<proto::RenderJob>, Status> {
        let key = scoped_key(&job.tenant, SUBMIT_RENDER_SCOPE, &key);
        let tenant = job.tenant.clone();
        let fingerprint = job.fingerprint.as_str().to_owned();
        let outcome = claim_key(
            self.keys.store.as_ref(),
            &key,
            &fingerprint,
            self.keys.lease,
            |id| {
                let tenant = tenant.clone();
                async move {
                    // A job that failed transiently or was cancelled frees its key.
                    Ok(self
                        .scheduler
                        .find_job(&tenant, id)
                        .await?
                        .filter(|job| !releases_key(job)))
                }
            },
        )
        .await?;
        let claimant = match outcome {
            KeyOutcome::Owned(claimant) => claimant,
            KeyOutcome::Replay(job) => {
                self.scheduler.metrics().idempotent_replays.inc();
                tracing::info!(job_id = %job.id, template_id = %job.template_id, "idempotent replay");
                let answer = job_with_download_url(self.scheduler.outputs(), &job).await;
                let mut response = Response::new(answer);
                response
                    .metadata_mut()
                    .insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
                return Ok(response);
            }
        };
        // After the key: a retry of a request that crashed the renderer replays its failed
        // job; only a new request with a quarantined fingerprint is refused.
        let submitted = match self.scheduler.check_quarantine(&job).await {
            Ok(()) => self.scheduler.accept(job, work).await,
            Err(refused) => Err(refused),
        }
        .map_err(Status::from);
        // Bound to the job, or freed for the retry when no job was created.
        settle_key(
            self.keys.store.as_ref(),
            &key,
            &claimant,
            submitted.as_ref().ok().map(|job| job.id),
            self.keys.retention,
        )
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
        // A job reusing an identical request's output is SUCCEEDED at once.
        let answer = job_with_download_url(self.scheduler.outputs(), &job).await;
        Ok(Response::new(answer))
    }

    /// WatchRenderJob for a job of `tenant` on another instance: its shared snapshots.
    async fn watch_shared_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Response<ReceiverStream<Result<proto::RenderJob, Status>>>, Status> {
        let (current, updates) = self
            .scheduler
            .watch_shared_job(tenant, id)
            .await
            .map_err(ServiceError::from)?
            .ok_or_else(|| job_not_found(id))?;
        let updates = updates.map(|update| {
            update.map_err(|_lost| {
                Status::from(ServiceError::from(SharedError::Unavailable(
                    "lost the job's updates; watch it again".into(),
                )))
            })
        });
        let outputs = self.scheduler.outputs().clone();
        Ok(Response::new(forward_snapshots(current, updates, outputs)))
    }
}

#[tonic::async_trait]
impl RenderService for RenderApi {
    async fn submit_render(
        &self,
        request: Request<proto::RenderRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(server_draining().into());
        }
        let key = match request.extensions().get::<IdempotencyKey>() {
            Some(key) => key.clone(),
            // The layer refuses calls without a key; a stack without the layer still must not
            // render without one.
            None => {
                return Err(IdempotencyKey::from_header(None)
                    .err()
                    .map_or_else(|| Status::internal("no idempotency key"), Status::from))
            }
        };
        let caller_extensions = request.extensions();
        let tenant = Caller::of(caller_extensions).tenant;
        let trace_parent = CallSpan::of(caller_extensions);
        let submission = RenderSubmission::try_from(request.into_inner())?;
        let templates = self.templates.clone();
        let limits = self.limits;
        let (job, mut work) =
            blocking(move || admission::admit(&templates, tenant, submission, limits)).await?;
        // The render's span will be a child of this call's.
        work.trace_parent = trace_parent;
        // From here on the call records and creates things: it runs to its end on its own
        // task even if the caller goes away (a timed-out call is exactly what gets retried).
        let api = self.clone();
        let accepted = tokio::spawn(async move { api.accept(key, job, work).await });
        match accepted.await {
            Ok(answer) => answer,
            Err(join_error) => Err(ServiceError::internal(join_error).into()),
        }
    }

    async fn get_render_job(
        &self,
        request: Request<proto::GetRenderJobRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let job = self.job(&tenant, &request.get_ref().job_id).await?;
        let answer = job_with_download_url(self.scheduler.outputs(), &job).await;
        Ok(Response::new(answer))
    }

    type WatchRenderJobStream = ReceiverStream<Result<proto::RenderJob, Status>>;

    async fn watch_render_job(
        &self,
        request: Request<proto::WatchRenderJobRequest>,
    ) -> Result<Response<Self::WatchRenderJobStream>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("job_id", &request.get_ref().job_id)?;
        // Another tenant's job here is looked for in the shared records, as an unknown id.
        let Some((job, changes)) = self.scheduler.watch_local_job(&tenant, id) else {
            return self.watch_shared_job(&tenant, id).await;
        };
        let updates = changes.map(Ok);
        let outputs = self.scheduler.outputs().clone();
        Ok(Response::new(forward_snapshots(job, updates, outputs)))
    }

    async fn cancel_render_job(
        &self,
        request: Request<proto::CancelRenderJobRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("job_id", &request.get_ref().job_id)?;
        let job = self
            .scheduler
            .cancel_job(&tenant, id)
            .await
            .map_err(ServiceError::from)?
            .ok_or_else(|| job_not_found(id))?;
        tracing::info!(job_id = %id, template_id = %job.template_id, state = job.state.label(), "cancel requested");
        Ok(Response::new(job_to_proto(&job)))
    }

    type DownloadRenderOutputStream = DownloadStream;

    async fn download_render_output(
        &self,
        request: Request<proto::DownloadRenderOutputRequest>,
    ) -> Result<Response<Self::DownloadRenderOutputStream>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let share = crate::fair_share::CallerKey::of(request.extensions());
        let job = self.job(&tenant, &request.get_ref().job_id).await?;
        if job.state != JobState::Succeeded {
            return Err(ServiceError::deterministic(
                ServiceErrorCode::FailedPrecondition,
                Reason::JobNotSucceeded,
                format!(
                    "job {} is {}; only a succeeded job has an output (watch it first)",
                    job.id,
                    job.state.label()
                ),
            )
            .into());
        }
        // Taken before the file is opened: a refused download costs nothing.
        let slot = self.downloads.slot(share)?;
        let output = StoredOutput {
            outputs: self.scheduler.outputs().clone(),
            job_id: job.id,
            extension: job.format.extension(),
        };
        let size = output
            .outputs
            .size(job.id, output.extension)
            .await
            .map_err(|error| download::read_failure(job.id, error))?;
        let mut response = Response::new(self.downloads.stream(output, size, slot));
        // MP4, WebM and GIF are compressed already: gzip would only spend CPU (on the
        // runtime) for nothing, whatever the client accepts.
        response.disable_compression();
        Ok(response)
    }
}
