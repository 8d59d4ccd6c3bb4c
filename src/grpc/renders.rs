//! RenderService: submitting, following, cancelling and downloading render jobs.
//!
//! SubmitRender validates everything before anything is queued: the request itself (garde,
//! [`super::convert`]), then against the template (it exists, every slot id is one of its
//! slots, frames × pixels within the job budget, GIF length), then the quarantine; every
//! violation of a stage comes back in one answer. A valid job is queued and answered at once
//! (QUEUED); rendering happens in the scheduler's sandboxed workers.
//!
//! Everything is scoped to the caller's tenant: its templates, its jobs (another tenant's job
//! is JOB_NOT_FOUND exactly as an unknown id), its idempotency keys, and fingerprints that
//! include the tenant (so de-duplication and the quarantine never cross tenants).

mod download;

pub use download::{DownloadLimits, DownloadStream, DOWNLOAD_CHUNK_BYTES};

use super::blocking;
use super::convert::{parse_id, RenderSubmission};
use super::proto::{self, render_service_server::RenderService};
use super::templates::storage_error;
use crate::auth::{Caller, TenantId};
use crate::encode::gif::MAX_GIF_SECONDS;
use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::idempotency::claim::{
    claim_key, scoped_key, settle_key, KeyOutcome, KeyPolicy, REPLAYED_HEADER,
};
use crate::idempotency::IdempotencyKey;
use crate::jobs::queue::PushRefused;
use crate::jobs::scheduler::{
    SubmitRefused, CANCEL_SETTLE, OWNER_CHECK_INTERVAL, TENANT_JOB_LIMIT_REASON,
};
use crate::jobs::shared::SharedError;
use crate::jobs::{Fingerprint, Job, JobState, RenderWork, Scheduler};
use crate::lottie::modifications::{self, ModificationError};
use crate::lottie::timeline;
use crate::spec::Format;
use crate::storage::{StorageError, TemplateStore};
use crate::telemetry::traces::CallSpan;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Snapshots buffered for a slow watcher before it is made to wait.
const WATCH_BUFFER: usize = 16;
/// Retry delay while the server drains: long enough for the mesh to route elsewhere.
pub const DRAINING_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Limits applied to every job.
#[derive(Debug, Clone, Copy)]
pub struct JobLimits {
    /// Output megapixels: frames × width × height / 10⁶.
    pub max_megapixels: u64,
    /// Longest a worker may run (the deadline derived from the job's size is capped here).
    pub max_duration: Duration,
}

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
/// Retry delay when shared job records are unreachable.
const SHARED_RETRY_AFTER: Duration = Duration::from_secs(1);

fn shared_unavailable(error: SharedError) -> ServiceError {
    ServiceError::transient(
        ServiceErrorCode::Unavailable,
        "JOB_STORE_UNAVAILABLE",
        format!("shared job records are unreachable: {error}"),
        SHARED_RETRY_AFTER,
    )
}

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

    /// A job of `tenant` on this instance, or on another one sharing Redis (another
    /// tenant's job is not found, as an unknown one).
    async fn find_job(&self, tenant: &TenantId, id: Uuid) -> Result<Option<Job>, ServiceError> {
        let job = match self.local_job(tenant, id) {
            Some(job) => Some(job),
            None => match &self.scheduler.shared {
                Some(shared) => shared.get(id).await.map_err(shared_unavailable)?,
                None => None,
            },
        };
        Ok(job.filter(|job| job.tenant == *tenant))
    }

    /// A job of `tenant` on this instance's board. Another tenant's job here is absent for
    /// the caller, exactly as an unknown id: the lookup goes on to the shared records as an
    /// unknown id's does, so that neither the answer (UNAVAILABLE while Redis is down) nor
    /// its time (a Redis round trip) tells that the id is a job of this instance.
    fn local_job(&self, tenant: &TenantId, id: Uuid) -> Option<Job> {
        self.scheduler
            .board
            .get(id)
            .filter(|job| job.tenant == *tenant)
    }

    async fn job(&self, tenant: &TenantId, field_value: &str) -> Result<Job, ServiceError> {
        let id = parse_id("job_id", field_value)?;
        self.find_job(tenant, id)
            .await?
            .ok_or_else(|| job_not_found(id))
    }
}

fn job_not_found(id: Uuid) -> ServiceError {
    ServiceError::not_found(
        "JOB_NOT_FOUND",
        format!("job {id} does not exist (or has expired)"),
    )
}

fn draining() -> ServiceError {
    ServiceError::transient(
        ServiceErrorCode::Unavailable,
        "SERVER_DRAINING",
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
        "TEMPLATE_NOT_FOUND",
        description.clone(),
        vec![FieldViolation {
            field: "template_id".into(),
            description,
        }],
    )
}

/// Checks `submission` of a caller of `tenant` against its template; answers the job and
/// the work to queue (with the template's files pinned for it).
fn admit(
    templates: &TemplateStore,
    tenant: TenantId,
    submission: RenderSubmission,
    limits: JobLimits,
) -> Result<(Job, RenderWork), ServiceError> {
    let template_id = submission.template_id;
    let record = match templates.cached_record(&tenant, template_id) {
        Ok(record) => record,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(storage_error(error)),
    };
    let report = &record.report;
    let spec = submission.output;
    let mut violations = Vec::new();
    let mut reason = None;
    for error in modifications::check(&report.slots, &submission.modifications) {
        let field = match &error {
            ModificationError::UnknownColorSlot { id, .. } => {
                format!("modifications.colors[{id:?}]")
            }
            ModificationError::UnknownTextSlot { id, .. }
            | ModificationError::ControlCharacter { id, .. } => {
                format!("modifications.texts[{id:?}]")
            }
        };
        reason.get_or_insert(crate::error::Classified::reason(&error));
        violations.push(FieldViolation {
            field,
            description: error.to_string(),
        });
    }
    let frames = timeline::frame_count(report.duration_seconds, spec.fps.get());
    let megapixels =
        f64::from(frames) * f64::from(spec.width.get()) * f64::from(spec.height.get()) / 1e6;
    if megapixels > limits.max_megapixels as f64 {
        reason.get_or_insert("JOB_TOO_LARGE");
        violations.push(FieldViolation {
            field: "output".into(),
            description: format!(
                "{frames} frames of {}×{} are {megapixels:.0} megapixels, more than the {} \
                 megapixel job budget; lower fps, width or height",
                spec.width.get(),
                spec.height.get(),
                limits.max_megapixels
            ),
        });
    }
    if spec.format == Format::Gif && report.duration_seconds > MAX_GIF_SECONDS {
        reason.get_or_insert("OUTPUT_TOO_LONG");
        violations.push(FieldViolation {
            field: "output.format".into(),
            description: format!(
                "a GIF may last at most {MAX_GIF_SECONDS} s; this template lasts {:.1} s",
                report.duration_seconds
            ),
        });
    }
    if let Some(reason) = reason {
        let message = violations
            .iter()
            .map(|v| format!("{}: {}", v.field, v.description))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ServiceError::invalid_argument(reason, message, violations));
    }
    // Outputs need disk: a nearly full data directory refuses new renders until it has room.
    templates.check_disk_space().map_err(storage_error)?;
    let fingerprint = Fingerprint::of(
        &tenant,
        &record.render_identity(),
        &submission.modifications,
        &spec,
    );
    let job_id = Uuid::new_v4();
    // Deleted since the record was read: refused as if the deletion came first.
    let pin = match templates.pin(&record, job_id) {
        Ok(pin) => pin,
        Err(StorageError::NotFound(_)) => return Err(template_not_found(template_id)),
        Err(error) => return Err(storage_error(error)),
    };
    let job = Job::queued(
        job_id,
        tenant,
        template_id,
        fingerprint,
        spec.format,
        frames,
    );
    let deadline = crate::sandbox::default_deadline(frames, spec.width.get(), spec.height.get())
        .min(limits.max_duration);
    let work = RenderWork {
        template_path: pin.template_path.clone(),
        modifications: submission.modifications,
        output: spec,
        deadline,
        fonts: pin.fonts.clone(),
        pin: Some(Arc::new(pin)),
        trace_parent: None,
    };
    Ok((job, work))
}

/// WatchRenderJob's answer: `current` at once, then each newer snapshot of `updates` until a
/// terminal one (or an error, or the watcher going away).
fn forward_snapshots(
    current: Job,
    updates: impl futures_util::Stream<Item = Result<Job, Status>> + Send + 'static,
) -> ReceiverStream<Result<proto::RenderJob, Status>> {
    let (sender, receiver) = mpsc::channel(WATCH_BUFFER);
    tokio::spawn(async move {
        let mut updates = std::pin::pin!(updates);
        let mut last_version = current.version;
        let mut terminal = current.state.is_terminal();
        if sender.send(Ok(job_to_proto(&current))).await.is_err() {
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
            if sender.send(Ok(job_to_proto(&job))).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(receiver)
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
                let mut response = Response::new(job_to_proto(&job));
                response
                    .metadata_mut()
                    .insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
                return Ok(response);
            }
        };
        // After the key: a retry of a request that crashed the renderer replays its failed
        // job; only a new request with a quarantined fingerprint is refused.
        let quarantined = match self.scheduler.is_quarantined(&job.fingerprint).await {
            Ok(quarantined) => quarantined,
            Err(error) => {
                settle_key(
                    self.keys.store.as_ref(),
                    &key,
                    &claimant,
                    None,
                    self.keys.retention,
                )
                .await;
                return Err(shared_unavailable(error).into());
            }
        };
        if quarantined {
            settle_key(
                self.keys.store.as_ref(),
                &key,
                &claimant,
                None,
                self.keys.retention,
            )
            .await;
            tracing::warn!(
                template_id = %job.template_id,
                fingerprint = %job.fingerprint,
                "refused a quarantined request"
            );
            return Err(ServiceError::invalid_argument(
                "RENDER_QUARANTINED",
                "this exact request crashed the renderer twice and is quarantined; change \
                 the template or the modifications",
                Vec::new(),
            )
            .into());
        }
        let submitted = self
            .scheduler
            .submit(job, work)
            .await
            .map_err(|refused| match refused {
                SubmitRefused::Queue(PushRefused::TenantFull { held, limit }) => {
                    ServiceError::transient(
                        ServiceErrorCode::ResourceExhausted,
                        TENANT_JOB_LIMIT_REASON,
                        format!(
                            "tenant {tenant} has {held} jobs queued or running, its limit \
                             ({limit}); retry when one has ended"
                        ),
                        self.scheduler.tenant_retry_after(&tenant),
                    )
                }
                SubmitRefused::Queue(PushRefused::Full { length }) => ServiceError::transient(
                    ServiceErrorCode::ResourceExhausted,
                    "QUEUE_FULL",
                    format!("the render queue is full ({length} jobs waiting)"),
                    self.scheduler.queue_retry_after(),
                ),
                SubmitRefused::Queue(PushRefused::Closed) => draining(),
                SubmitRefused::Shared(error) => shared_unavailable(error),
                SubmitRefused::Internal(error) => ServiceError::internal(error),
            })
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
        Ok(Response::new(job_to_proto(&job)))
    }

    /// WatchRenderJob for a job of `tenant` on another instance: its shared snapshots.
    async fn watch_shared_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Response<ReceiverStream<Result<proto::RenderJob, Status>>>, Status> {
        let Some(shared) = self.scheduler.shared.clone() else {
            return Err(job_not_found(id).into());
        };
        let (current, changes) = shared.watch(id).await.map_err(shared_unavailable)?;
        let current = current
            .filter(|job| job.tenant == *tenant)
            .ok_or_else(|| job_not_found(id))?;
        let updates = futures_util::stream::unfold(
            (Box::pin(changes), shared),
            move |(mut changes, shared)| async move {
                let next = match tokio::time::timeout(OWNER_CHECK_INTERVAL, changes.next()).await {
                    Ok(Some(job)) => Ok(job),
                    // Quiet, or the subscription dropped: the record tells (a job whose owner
                    // stopped reads as failed).
                    quiet => match shared.get(id).await {
                        Ok(Some(job)) if job.state.is_terminal() || quiet.is_err() => Ok(job),
                        _ => Err(shared_unavailable(SharedError::Unavailable(
                            "lost the job's updates; watch it again".into(),
                        ))
                        .into()),
                    },
                };
                Some((next, (changes, shared)))
            },
        );
        Ok(Response::new(forward_snapshots(current, updates)))
    }

    /// CancelRenderJob for a job of `tenant` on another instance: its owner is asked, and
    /// the answer is the job once it has ended (or as it is after [`CANCEL_SETTLE`]).
    async fn cancel_shared_job(&self, tenant: &TenantId, id: Uuid) -> Result<Job, ServiceError> {
        let Some(shared) = self.scheduler.shared.clone() else {
            return Err(job_not_found(id));
        };
        let (current, changes) = shared.watch(id).await.map_err(shared_unavailable)?;
        // Another tenant's job: not found, and its owner is never asked.
        let current = current
            .filter(|job| job.tenant == *tenant)
            .ok_or_else(|| job_not_found(id))?;
        if current.state.is_terminal() {
            return Ok(current);
        }
        shared
            .request_cancel(id)
            .await
            .map_err(shared_unavailable)?;
        let mut changes = std::pin::pin!(changes);
        let mut latest = current;
        let _ = tokio::time::timeout(CANCEL_SETTLE, async {
            while let Some(job) = changes.next().await {
                let terminal = job.state.is_terminal();
                if job.version > latest.version {
                    latest = job;
                }
                if terminal {
                    break;
                }
            }
        })
        .await;
        Ok(latest)
    }
}

#[tonic::async_trait]
impl RenderService for RenderApi {
    async fn submit_render(
        &self,
        request: Request<proto::RenderRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(draining().into());
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
            blocking(move || admit(&templates, tenant, submission, limits)).await?;
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
        Ok(Response::new(job_to_proto(&job)))
    }

    type WatchRenderJobStream = ReceiverStream<Result<proto::RenderJob, Status>>;

    async fn watch_render_job(
        &self,
        request: Request<proto::WatchRenderJobRequest>,
    ) -> Result<Response<Self::WatchRenderJobStream>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("job_id", &request.get_ref().job_id)?;
        let board = self.scheduler.board.clone();
        // Another tenant's job here is looked for in the shared records, as an unknown id.
        let Some((job, changes)) = board.subscribe(id).filter(|(job, _)| job.tenant == tenant)
        else {
            return self.watch_shared_job(&tenant, id).await;
        };
        let updates = futures_util::stream::unfold(
            (changes, board),
            move |(mut changes, board)| async move {
                let next = match changes.recv().await {
                    Ok(job) => job,
                    // Fell behind: the snapshot is the truth (progress is monotonic).
                    Err(broadcast::error::RecvError::Lagged(_)) => board.get(id)?,
                    // The job expired.
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((Ok(next), (changes, board)))
            },
        );
        Ok(Response::new(forward_snapshots(job, updates)))
    }

    async fn cancel_render_job(
        &self,
        request: Request<proto::CancelRenderJobRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("job_id", &request.get_ref().job_id)?;
        // Another tenant's job here is left alone and looked for in the shared records, as
        // an unknown id (where it is not found for this tenant either, and never cancelled).
        let job = match self.local_job(&tenant, id) {
            Some(_) => match self.scheduler.cancel(id).await {
                Some(job) => job,
                None => return Err(job_not_found(id).into()),
            },
            None => self.cancel_shared_job(&tenant, id).await?,
        };
        tracing::info!(job_id = %id, template_id = %job.template_id, state = job.state.label(), "cancel requested");
        Ok(Response::new(job_to_proto(&job)))
    }

    type DownloadRenderOutputStream = DownloadStream;

    async fn download_render_output(
        &self,
        request: Request<proto::DownloadRenderOutputRequest>,
    ) -> Result<Response<Self::DownloadRenderOutputStream>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let job = self.job(&tenant, &request.get_ref().job_id).await?;
        if job.state != JobState::Succeeded {
            return Err(ServiceError::deterministic(
                ServiceErrorCode::FailedPrecondition,
                "JOB_NOT_SUCCEEDED",
                format!(
                    "job {} is {}; only a succeeded job has an output (watch it first)",
                    job.id,
                    job.state.label()
                ),
            )
            .into());
        }
        // Taken before the file is opened: a refused download costs nothing.
        let slot = self.downloads.slot()?;
        let path = self
            .scheduler
            .outputs()
            .path(job.id, job.format.extension());
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(ServiceError::not_found(
                    "OUTPUT_NOT_FOUND",
                    format!("the output of job {} is gone (expired or removed)", job.id),
                )
                .into())
            }
            Err(error) => return Err(storage_error(StorageError::Io(error)).into()),
        };
        let mut response = Response::new(self.downloads.stream(file, job.id, slot));
        // MP4, WebM and GIF are compressed already: gzip would only spend CPU (on the
        // runtime) for nothing, whatever the client accepts.
        response.disable_compression();
        Ok(response)
    }
}
