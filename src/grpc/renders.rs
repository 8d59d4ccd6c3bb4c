//! RenderService: submitting, following, cancelling, downloading and listing render jobs
//! ([`listing`]), and the service's status for its operators ([`service_status`]).
//!
//! SubmitRender converts the wire request to a [`RenderSubmission`] (garde,
//! [`super::convert`]) and hands it to [`Intake::submit`], the use case (admission, the
//! Idempotency-Key, the quarantine, the scheduler); what comes back is converted to the
//! answer, with the replay header for a replay. Where a job lives (this instance or another)
//! is the scheduler's business ([`crate::jobs::scheduler::Lookup`]).
//!
//! Everything is scoped to the caller's tenant: its templates, its jobs (another tenant's job
//! is JOB_NOT_FOUND exactly as an unknown id), its idempotency keys, and fingerprints that
//! include the tenant (so de-duplication and the quarantine never cross tenants).

mod download;
mod listing;
mod service_status;

pub use download::{read_chunk, DownloadLimits, DownloadSettings, DownloadStream, StoredOutput};

use super::convert::parse_id;
use super::proto::{self, render_service_server::RenderService};
use crate::auth::{Caller, Operators, TenantId};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::idempotency::IdempotencyKey;
use crate::jobs::intake::{Intake, Submission, Submitted};
use crate::jobs::shared::SharedError;
use crate::jobs::{Job, JobState, Scheduler};
use crate::reason::Reason;
use crate::spec::RenderSubmission;
use crate::storage::{OutputStore, POSTER_EXTENSION};
use crate::telemetry::traces::CallSpan;
use crate::webhooks::delivery::{Delivery, State as DeliveryState};
use crate::webhooks::event::EventType;
use crate::webhooks::store::Deliveries;
use futures_util::StreamExt;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Snapshots buffered for a slow watcher before it is made to wait.
const WATCH_BUFFER: usize = 16;
#[derive(Debug, Clone)]
pub(crate) struct RenderApi {
    intake: Intake,
    scheduler: Arc<Scheduler>,
    downloads: DownloadLimits,
    /// Where the webhook deliveries GetRenderJob shows are kept (none: no webhooks).
    webhooks: Option<Deliveries>,
    /// Who may read the service's status (none until [`RenderApi::with_operators`]).
    operators: Operators,
}

impl RenderApi {
    /// The API over SubmitRender's use case (`intake`) and the scheduler it submits to.
    pub(crate) fn new(intake: Intake) -> RenderApi {
        RenderApi {
            scheduler: intake.scheduler().clone(),
            intake,
            downloads: DownloadLimits::default(),
            webhooks: None,
            operators: Operators::default(),
        }
    }

    /// The same API letting `operators` read the service's status.
    pub(crate) fn with_operators(self, operators: Operators) -> RenderApi {
        RenderApi { operators, ..self }
    }

    /// The same API showing the webhook deliveries kept in `webhooks`.
    pub(crate) fn with_webhook_deliveries(self, webhooks: Deliveries) -> RenderApi {
        RenderApi {
            webhooks: Some(webhooks),
            ..self
        }
    }

    /// The deliveries of `job`'s webhook on the wire; a store that cannot answer leaves
    /// them out (logged): the job itself is still answered.
    async fn webhook_deliveries(&self, job: &Job) -> Vec<proto::WebhookDelivery> {
        let Some(store) = &self.webhooks else {
            return Vec::new();
        };
        match crate::webhooks::dispatch::deliveries_of(store, job).await {
            Ok(deliveries) => deliveries
                .into_iter()
                .map(|(event, delivery)| webhook_delivery_to_proto(event, &delivery))
                .collect(),
            Err(error) => {
                tracing::warn!(job_id = %job.id, %error, "cannot read the job's webhook deliveries");
                Vec::new()
            }
        }
    }

    /// The same API with these download limits.
    pub(crate) fn with_download_limits(self, downloads: DownloadLimits) -> RenderApi {
        RenderApi { downloads, ..self }
    }

    async fn job(&self, tenant: &TenantId, field_value: &str) -> Result<Job, ServiceError> {
        let id = parse_id("job_id", field_value)?;
        self.scheduler
            .lookup()
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
pub(crate) async fn job_with_download_url(outputs: &OutputStore, job: &Job) -> proto::RenderJob {
    let mut answer = job_to_proto(job);
    if job.state != JobState::Succeeded || !outputs.signs_urls() {
        return answer;
    }
    let Some(output) = answer.output.as_mut() else {
        return answer;
    };
    if let Some(poster) = output.poster.as_deref_mut() {
        if let Ok(Some((url, expires_at))) = outputs.download_url(job.id, POSTER_EXTENSION).await {
            poster.download_url = Some(url);
            poster.download_url_expires_at = Some(expires_at.into());
        }
    }
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

fn webhook_delivery_to_proto(event: EventType, delivery: &Delivery) -> proto::WebhookDelivery {
    let event = match event {
        EventType::Started => proto::WebhookEvent::Started,
        EventType::Succeeded => proto::WebhookEvent::Succeeded,
        EventType::Failed => proto::WebhookEvent::Failed,
        EventType::Cancelled => proto::WebhookEvent::Cancelled,
    };
    let (state, next_attempt_at) = match delivery.state {
        DeliveryState::Due(at) => (proto::WebhookDeliveryState::Pending, Some(at.into())),
        DeliveryState::Delivered => (proto::WebhookDeliveryState::Delivered, None),
        // A delivery never kept: refused before any attempt (attempts 0 tells it apart).
        DeliveryState::Refused | DeliveryState::NotKept => {
            (proto::WebhookDeliveryState::Refused, None)
        }
        DeliveryState::Expired => (proto::WebhookDeliveryState::Expired, None),
    };
    proto::WebhookDelivery {
        event: event as i32,
        webhook_id: delivery.id.clone(),
        state: state as i32,
        attempts: delivery.attempts,
        last_status: delivery.last_status.map_or(0, u32::from),
        next_attempt_at,
    }
}

/// `job` as GetRenderJob answers it (without its webhook deliveries), in canonical JSON:
/// the data of its webhook events.
pub(crate) fn job_json(job: &Job) -> serde_json::Value {
    use prost::Message;
    let bytes = job_to_proto(job).encode_to_vec();
    let json = super::proto::descriptor_pool()
        .ok()
        .and_then(|pool| pool.get_message_by_name("lottie.render.v1.RenderJob"))
        .and_then(|descriptor| prost_reflect::DynamicMessage::decode(descriptor, &*bytes).ok())
        .and_then(|message| {
            message
                .serialize_with_options(
                    serde_json::value::Serializer,
                    &prost_reflect::SerializeOptions::new(),
                )
                .ok()
        });
    // Our own message always converts; should it not, the event still names the job.
    json.unwrap_or_else(|| serde_json::json!({ "jobId": job.id.to_string() }))
}

pub(crate) fn job_to_proto(job: &Job) -> proto::RenderJob {
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
            poster: output.poster.as_ref().map(|poster| {
                Box::new(proto::RenderOutput {
                    content_type: "image/png".into(),
                    size_bytes: poster.size_bytes,
                    sha256: poster.sha256.clone(),
                    width: poster.width,
                    height: poster.height,
                    frame_count: 1,
                    poster_frame: poster.frame,
                    ..Default::default()
                })
            }),
            poster_frame: 0,
        }),
        error: job.error.as_ref().map(|error| proto::JobError {
            reason: error.reason.as_str().into(),
            message: error.message.clone(),
            retryable: error.retryable,
            retry_after: error
                .retry_after
                .and_then(|delay| prost_types::Duration::try_from(delay).ok()),
        }),
        created_at: Some(job.created_at.into()),
        started_at: job.started_at.map(Into::into),
        finished_at: job.finished_at.map(Into::into),
        webhooks: Vec::new(),
    }
}

impl RenderApi {
    /// WatchRenderJob for a job of `tenant` on another instance: its shared snapshots.
    async fn watch_shared_job(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Response<ReceiverStream<Result<proto::RenderJob, Status>>>, Status> {
        let (current, updates) = self
            .scheduler
            .lookup()
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
        let request = request.into_inner();
        // Replacement images are hashed and their headers read (up to 32 MiB of work): on a
        // blocking thread, never on the runtime.
        let request = if request
            .modifications
            .as_ref()
            .is_some_and(|modifications| !modifications.images.is_empty())
        {
            super::blocking(move || RenderSubmission::try_from(request)).await?
        } else {
            RenderSubmission::try_from(request)?
        };
        let submitted = self
            .intake
            .submit(Submission {
                tenant,
                key,
                request,
                trace_parent,
            })
            .await?;
        let (job, replayed) = match submitted {
            Submitted::Accepted(job) => (job, false),
            Submitted::Replayed(job) => (job, true),
        };
        // A job reusing an identical request's output is SUCCEEDED at once.
        let answer = job_with_download_url(self.scheduler.outputs(), &job).await;
        Ok(super::keyed_answer(answer, replayed))
    }

    async fn get_render_job(
        &self,
        request: Request<proto::GetRenderJobRequest>,
    ) -> Result<Response<proto::RenderJob>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let job = self.job(&tenant, &request.get_ref().job_id).await?;
        let mut answer = job_with_download_url(self.scheduler.outputs(), &job).await;
        answer.webhooks = self.webhook_deliveries(&job).await;
        Ok(Response::new(answer))
    }

    type WatchRenderJobStream = ReceiverStream<Result<proto::RenderJob, Status>>;

    async fn watch_render_job(
        &self,
        request: Request<proto::WatchRenderJobRequest>,
    ) -> Result<Response<Self::WatchRenderJobStream>, Status> {
        let (tenant, id) = super::tenant_and_id(&request, "job_id", &request.get_ref().job_id)?;
        // Another tenant's job here is looked for in the shared records, as an unknown id.
        let Some((job, changes)) = self.scheduler.lookup().watch_local_job(&tenant, id) else {
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
        let (tenant, id) = super::tenant_and_id(&request, "job_id", &request.get_ref().job_id)?;
        let job = self
            .scheduler
            .lookup()
            .cancel_job(&tenant, id)
            .await
            .map_err(ServiceError::from)?
            .ok_or_else(|| job_not_found(id))?;
        tracing::info!(job_id = %id, template_id = %job.template_id, state = job.state.label(), "cancel requested");
        Ok(Response::new(job_to_proto(&job)))
    }

    async fn list_render_jobs(
        &self,
        request: Request<proto::ListRenderJobsRequest>,
    ) -> Result<Response<proto::ListRenderJobsResponse>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let query = listing::job_query(request.get_ref())?;
        let page = self
            .scheduler
            .lookup()
            .list_jobs(&tenant, &query)
            .await
            .map_err(ServiceError::from)?;
        Ok(Response::new(listing::page_answer(&page)))
    }

    async fn get_service_status(
        &self,
        request: Request<proto::GetServiceStatusRequest>,
    ) -> Result<Response<proto::ServiceStatus>, Status> {
        let caller = Caller::of(request.extensions());
        let status =
            service_status::service_status(&self.scheduler, &self.operators, &caller).await?;
        Ok(Response::new(status))
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
        let poster = match proto::OutputPart::try_from(request.get_ref().part) {
            Ok(proto::OutputPart::Unspecified | proto::OutputPart::Main) => false,
            Ok(proto::OutputPart::Poster) => true,
            Err(_) => {
                return Err(ServiceError::invalid_argument(
                    Reason::RequestInvalid,
                    format!(
                        "part: must be OUTPUT_PART_MAIN or OUTPUT_PART_POSTER, got {}",
                        request.get_ref().part
                    ),
                    vec![crate::error::FieldViolation {
                        field: "part".into(),
                        description: "must be OUTPUT_PART_MAIN or OUTPUT_PART_POSTER".into(),
                    }],
                )
                .into())
            }
        };
        if poster
            && job
                .output
                .as_ref()
                .is_none_or(|output| output.poster.is_none())
        {
            return Err(ServiceError::not_found(
                Reason::OutputNotFound,
                format!(
                    "job {} has no poster (OutputSpec.poster was not set)",
                    job.id
                ),
            )
            .into());
        }
        // Taken before the file is opened: a refused download costs nothing.
        let slot = self.downloads.slot(share)?;
        let output = StoredOutput {
            outputs: self.scheduler.outputs().clone(),
            job_id: job.id,
            extension: if poster {
                POSTER_EXTENSION
            } else {
                job.format.extension()
            },
        };
        let size = output
            .outputs
            .size(job.id, output.extension)
            .await
            .map_err(|error| download::read_failure(job.id, error))?;
        let range = download::range(request.get_ref(), size)?;
        let described = job_to_proto(&job).output.and_then(|described| {
            if poster {
                described.poster.map(|poster| *poster)
            } else {
                Some(described)
            }
        });
        let described = described.map(|mut described| {
            // The size read now is the file's (the record's is the same unless replaced).
            described.size_bytes = size;
            described
        });
        let mut response = Response::new(self.downloads.stream(output, range, described, slot));
        // MP4, WebM and GIF are compressed already: gzip would only spend CPU (on the
        // runtime) for nothing, whatever the client accepts.
        response.disable_compression();
        Ok(response)
    }
}
