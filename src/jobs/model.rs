//! A render job as the service tracks it: state, progress, output or classified failure.

use super::Fingerprint;
use crate::auth::TenantId;
use crate::reason::Reason;
use crate::render::OutputInfo;
use crate::spec::{EventType, Format, Modifications, OutputSpec};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// Why a job did not produce its output, classified like every other error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobFailure {
    /// Stable machine-readable reason, stored with its wire spelling (e.g.
    /// `"RENDER_DEADLINE_EXCEEDED"`), as records written before it was typed.
    pub reason: Reason,
    pub message: String,
    /// Whether submitting the same request again may succeed.
    pub retryable: bool,
    /// When retryable: how long to wait first.
    pub retry_after: Option<Duration>,
}

/// A snapshot of a job. `version` grows with every change, so watchers can tell new
/// snapshots from ones they have seen.
/// Serialisable: with Redis, snapshots are shared with the other instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: Uuid,
    /// The tenant whose caller submitted it: only that tenant's callers see it (another
    /// tenant's lookups answer NOT_FOUND). Records written before tenants existed belong to
    /// the default tenant.
    #[serde(default)]
    pub tenant: TenantId,
    pub template_id: Uuid,
    pub fingerprint: Fingerprint,
    /// What the job produces (its output file's extension).
    pub format: Format,
    pub state: JobState,
    pub frames_done: u32,
    pub frames_total: u32,
    pub output: Option<OutputInfo>,
    pub error: Option<JobFailure>,
    pub created_at: SystemTime,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub version: u64,
    /// The instance rendering it (with shared jobs): a job whose owner stopped answering is
    /// treated as failed (retryable) by the others.
    #[serde(default)]
    pub owner: Option<Uuid>,
    /// The job waits in (or was taken from) the shared work queue ([`super::shared::queue`]):
    /// when the instance rendering it stops, another one reclaims and renders it, so readers
    /// never take it for lost. Only the instance holding its queue entry writes it.
    #[serde(default)]
    pub reclaimable: bool,
    /// The webhook told of its events (`RenderRequest.notify`); followers and reuses have
    /// their own (they are other callers' jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<crate::spec::Notify>,
}

impl Job {
    pub(crate) fn queued(
        id: Uuid,
        tenant: TenantId,
        template_id: Uuid,
        fingerprint: Fingerprint,
        format: Format,
        frames_total: u32,
    ) -> Job {
        Job {
            id,
            tenant,
            template_id,
            fingerprint,
            format,
            state: JobState::Queued,
            frames_done: 0,
            frames_total,
            output: None,
            error: None,
            created_at: SystemTime::now(),
            started_at: None,
            finished_at: None,
            version: 0,
            owner: None,
            reclaimable: false,
            notify: None,
        }
    }

    /// The webhook event this snapshot sends, if the job has a webhook that asked for it.
    pub(crate) fn webhook_event(&self) -> Option<EventType> {
        let event = match self.state {
            JobState::Queued => return None,
            JobState::Running => EventType::Started,
            JobState::Succeeded => EventType::Succeeded,
            JobState::Failed => EventType::Failed,
            JobState::Cancelled => EventType::Cancelled,
        };
        self.notify
            .as_ref()
            .filter(|notify| notify.events.contains(&event))
            .map(|_| event)
    }

    /// Moves to a terminal state (once: a terminal job never changes again).
    pub(crate) fn finish(&mut self, state: JobState, error: Option<JobFailure>) {
        if self.state.is_terminal() {
            return;
        }
        self.state = state;
        self.error = error;
        self.finished_at = Some(SystemTime::now());
    }
}

/// What a worker needs to run a job.
#[derive(Debug, Clone)]
pub struct RenderWork {
    pub modifications: Modifications,
    /// The dotLottie animation the template is (None: the archive's own choice, or not an
    /// archive).
    pub animation: Option<String>,
    pub output: OutputSpec,
    /// Wall-clock limit of one worker run.
    pub deadline: Duration,
    /// The template's files (JSON and fonts), copied for this job so that it renders even
    /// if the template is deleted meanwhile; staged on the rendering instance's disk for
    /// each worker run. The board lets go of the work when the job ends, and the copies go
    /// with the last reference.
    pub pin: Option<std::sync::Arc<crate::storage::pins::TemplatePin>>,
    /// The SubmitRender call's span, parent of the render's span; None when untraced. It
    /// travels with a job of the shared queue as a `traceparent` ([`SharedWork`]).
    pub trace_parent: Option<opentelemetry::trace::SpanContext>,
}

/// The part of a job's [`RenderWork`] that travels with it through the shared work queue, so
/// that whichever instance takes the job can render it: the store keys of the template files
/// the accepting instance pinned for it (read from the shared store) and the SubmitRender
/// call's span as a W3C `traceparent`, so that the render is its child wherever it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SharedWork {
    pub template_key: String,
    pub modifications: Modifications,
    pub output: OutputSpec,
    pub deadline: Duration,
    /// Family → store key of the pinned font.
    pub fonts: std::collections::BTreeMap<String, String>,
    /// [`RenderWork::animation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub animation: Option<String>,
    /// The SubmitRender call's span (none when untraced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl SharedWork {
    /// None for work without pinned files (nothing another instance could render).
    pub(crate) fn of(work: &RenderWork) -> Option<SharedWork> {
        let pin = work.pin.as_deref()?;
        Some(SharedWork {
            template_key: pin.template_key().to_owned(),
            modifications: work.modifications.clone(),
            output: work.output,
            deadline: work.deadline,
            fonts: pin.font_keys().clone(),
            animation: work.animation.clone(),
            // Only a sampled call's span: the taking instance marks its parent sampled.
            traceparent: work
                .trace_parent
                .as_ref()
                .filter(|context| context.is_sampled())
                .map(|context| {
                    crate::telemetry::worker_spans::format_traceparent(
                        context.trace_id(),
                        context.span_id(),
                    )
                }),
        })
    }

    /// The work to render on the taking instance, reading job `job`'s pinned files from
    /// `objects`; the files stay owned by the instance that accepted the job (until the job
    /// ends) or, if it stopped, by the pin sweep. Without valid keys the work has no files
    /// and its render fails as staging failed.
    pub(crate) fn into_work(
        self,
        objects: &crate::storage::objects::ObjectStorage,
        job: uuid::Uuid,
    ) -> RenderWork {
        let images = self
            .modifications
            .images
            .values()
            .map(|choice| choice.sha256.as_str());
        let pin = match crate::storage::pins::TemplatePin::borrowed(
            objects.clone(),
            job,
            self.template_key,
            self.fonts,
            images,
        ) {
            Ok(pin) => Some(std::sync::Arc::new(pin)),
            Err(error) => {
                tracing::warn!(job_id = %job, %error, "a shared queue entry names no usable template files");
                None
            }
        };
        let trace_parent = self
            .traceparent
            .as_deref()
            .and_then(crate::telemetry::worker_spans::parse_traceparent)
            .map(|(trace_id, span_id)| {
                opentelemetry::trace::SpanContext::new(
                    trace_id,
                    span_id,
                    opentelemetry::trace::TraceFlags::SAMPLED,
                    true,
                    opentelemetry::trace::TraceState::default(),
                )
            });
        RenderWork {
            modifications: self.modifications,
            animation: self.animation,
            output: self.output,
            deadline: self.deadline,
            pin,
            trace_parent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Dimension, Fps};
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    #[tokio::test]
    async fn the_submit_calls_span_travels_with_shared_work_to_the_taking_instance() {
        let data = tempfile::tempdir().unwrap();
        let objects = crate::storage::objects::ObjectStorage::local(
            data.path(),
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let job = uuid::Uuid::new_v4();
        let parent = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let shared = SharedWork {
            template_key: format!("templates/.jobs/{job}/template.json"),
            modifications: Modifications::default(),
            output: OutputSpec {
                format: Format::Mp4,
                fps: Fps::DEFAULT,
                width: Dimension::try_from(100).unwrap(),
                height: Dimension::try_from(100).unwrap(),
                background: None,
                ..Default::default()
            },
            deadline: Duration::from_secs(10),
            fonts: Default::default(),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            animation: None,
        };
        // Through the queue's JSON, as another instance reads it.
        let json = serde_json::to_string(&shared).unwrap();
        let read: SharedWork = serde_json::from_str(&json).unwrap();
        let work = read.into_work(&objects, job);
        let context = work.trace_parent.unwrap();
        assert_eq!(
            (context.trace_id(), context.span_id(), context.is_sampled()),
            (parent.trace_id(), parent.span_id(), true)
        );
        // Untraced work carries none, and an entry of an older version (no field) reads.
        let mut untraced: serde_json::Value = serde_json::from_str(&json).unwrap();
        untraced.as_object_mut().unwrap().remove("traceparent");
        let read: SharedWork = serde_json::from_value(untraced).unwrap();
        assert!(read.into_work(&objects, job).trace_parent.is_none());
    }

    #[test]
    fn a_failure_is_stored_as_before_its_reason_was_typed() {
        // A job record in Redis as an instance of the string-typed version wrote it: read and
        // written back byte for byte, so instances of both versions share records.
        let record = r#"{"reason":"RENDER_DEADLINE_EXCEEDED","message":"too slow","retryable":true,"retry_after":{"secs":2,"nanos":0}}"#;
        let failure: JobFailure = serde_json::from_str(record).unwrap();
        assert_eq!(failure.reason, Reason::RenderDeadlineExceeded);
        assert_eq!(serde_json::to_string(&failure).unwrap(), record);
        // A reason this version does not know is a record it cannot read, not a guess.
        let unknown = record.replace("RENDER_DEADLINE_EXCEEDED", "NO_SUCH_REASON");
        assert!(serde_json::from_str::<JobFailure>(&unknown).is_err());
    }
}
