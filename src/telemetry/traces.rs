//! OpenTelemetry traces of one server: [`Tracing`] holds the server's own tracer provider
//! (none when `--otlp-endpoint` is unset: every span is then skipped before it costs
//! anything), so servers sharing a process (the tests) never share spans. A call's server
//! span is started by [`crate::middleware::TraceContextLayer`] under the caller's W3C
//! `traceparent`; a job keeps its SubmitRender span's context ([`CallSpan`]) and the
//! scheduler runs its render in a [`RenderSpan`], whose `traceparent` the worker receives
//! and whose worker spans come back through the server
//! ([`crate::telemetry::worker_spans`]).

use super::worker_spans::{format_traceparent, AdmittedSpan, WorkerSpan, WorkerSpanCheck};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SimpleSpanProcessor,
    SpanData, SpanEvents, SpanExporter, SpanLinks, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Name of the instrumentation scope and the `service.name` resource.
const SERVICE_NAME: &str = "lottie-render";
/// Finished spans waiting for the exporter; beyond it new spans are dropped (never waited
/// for): a collector that is down costs memory up to here and no request time. 2048 is the
/// SDK's default.
const MAX_QUEUED_SPANS: usize = 2048;
/// How long one export may take before it is abandoned (the SDK's default is 10 s, too long
/// for a queue that must keep moving).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Export failures are logged at most once per this, with the count since the last line: a
/// collector that is down must not flood the logs.
const EXPORT_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("cannot set up the OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
}

/// The traces of one server: off, or a tracer provider with its exporter.
#[derive(Clone, Default)]
pub struct Tracing {
    on: Option<Arc<TracingOn>>,
}

struct TracingOn {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// The provider's processor, also fed the spans workers report (built here, with their
    /// own ids and times, which the tracer API cannot do).
    processor: SharedProcessor,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing")
            .field("on", &self.on.is_some())
            .finish()
    }
}

impl Tracing {
    /// No traces: spans are never built.
    pub fn off() -> Tracing {
        Tracing::default()
    }

    /// Spans exported over OTLP/gRPC to `endpoint` (`http://collector:4317`) in batches from
    /// a bounded queue, on a thread of the SDK's own. Must be called within the Tokio
    /// runtime (the exporter's channel lives on it).
    pub(crate) fn otlp(endpoint: &str) -> Result<Tracing, TracingError> {
        use opentelemetry_otlp::WithExportConfig;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| TracingError::Exporter {
                endpoint: endpoint.to_owned(),
                reason: error.to_string(),
            })?;
        let resource = resource();
        exporter.set_resource(&resource);
        let processor = BatchSpanProcessor::builder(LoggedExporter::new(exporter))
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUED_SPANS)
                    .build(),
            )
            .build();
        Ok(Tracing::with_processor(processor, resource))
    }

    /// Spans handed to `exporter` one by one as they end (tests: the SDK's in-memory
    /// exporter).
    pub fn with_exporter(mut exporter: impl SpanExporter + 'static) -> Tracing {
        let resource = resource();
        exporter.set_resource(&resource);
        Tracing::with_processor(SimpleSpanProcessor::new(exporter), resource)
    }

    fn with_processor(processor: impl SpanProcessor + 'static, resource: Resource) -> Tracing {
        let processor = SharedProcessor(Arc::new(processor));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor.clone())
            .with_resource(resource)
            .build();
        let tracer = provider.tracer(SERVICE_NAME);
        Tracing {
            on: Some(Arc::new(TracingOn {
                provider,
                tracer,
                processor,
            })),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    pub(crate) fn tracer(&self) -> Option<&SdkTracer> {
        self.on.as_ref().map(|on| &on.tracer)
    }

    /// Exports what is queued and stops the exporter (blocking: call off the runtime).
    pub(crate) fn shutdown(&self) {
        if let Some(on) = &self.on {
            if let Err(error) = on.provider.shutdown() {
                tracing::warn!(%error, "cannot flush the last spans");
            }
        }
    }

    /// The span of a job's render, child of the job's SubmitRender span (`parent`), or a
    /// no-op when traces are off or the submission was not sampled.
    pub(crate) fn render_span(
        &self,
        parent: Option<&SpanContext>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> RenderSpan {
        let (Some(on), Some(parent)) = (&self.on, parent) else {
            return RenderSpan::default();
        };
        if !parent.is_sampled() {
            return RenderSpan::default();
        }
        let started = SystemTime::now();
        let span = on
            .tracer
            .span_builder("render")
            .with_kind(SpanKind::Internal)
            .with_start_time(started)
            .with_attributes(attributes())
            .start_with_context(
                &on.tracer,
                &Context::new().with_remote_span_context(parent.clone()),
            );
        RenderSpan {
            live: Some(LiveRender {
                span,
                processor: on.processor.clone(),
                started,
            }),
        }
    }
}

fn resource() -> Resource {
    Resource::builder().with_service_name(SERVICE_NAME).build()
}

/// The span context of a call's server span, put in the request's extensions by
/// [`crate::middleware::TraceContextLayer`] (absent when traces are off).
#[derive(Debug, Clone)]
pub(crate) struct CallSpan(pub SpanContext);

impl CallSpan {
    /// The call's span context, when it is traced.
    pub(crate) fn of(extensions: &http::Extensions) -> Option<SpanContext> {
        extensions.get::<CallSpan>().map(|span| span.0.clone())
    }
}

/// A job's render span (a no-op when the job is not traced).
#[derive(Default)]
pub(crate) struct RenderSpan {
    live: Option<LiveRender>,
}

struct LiveRender {
    span: opentelemetry_sdk::trace::Span,
    processor: SharedProcessor,
    started: SystemTime,
}

impl RenderSpan {
    /// The `traceparent` a worker receives, so that its spans descend from this one; none
    /// when this span is not exported (the worker then records nothing).
    pub(crate) fn traceparent(&self) -> Option<String> {
        let live = self.sampled()?;
        let context = live.span.span_context();
        Some(format_traceparent(context.trace_id(), context.span_id()))
    }

    fn sampled(&self) -> Option<&LiveRender> {
        self.live
            .as_ref()
            .filter(|live| live.span.span_context().is_sampled())
    }

    /// Exports the spans one worker run reported, each checked first (the rest is dropped).
    pub(crate) fn export_worker_spans(&self, spans: &[WorkerSpan]) {
        let Some(live) = self.sampled() else {
            return;
        };
        let context = live.span.span_context();
        let mut check = WorkerSpanCheck::new(context.trace_id(), context.span_id(), live.started);
        let now = SystemTime::now();
        let mut dropped = 0;
        for span in spans {
            match check.admit(span, now) {
                Ok(admitted) => live.processor.on_end(worker_span_data(&check, admitted)),
                Err(refused) => {
                    dropped += 1;
                    tracing::debug!(%refused, "worker span dropped");
                }
            }
        }
        if dropped > 0 {
            tracing::warn!(dropped, "worker spans dropped as malformed");
        }
    }

    pub(crate) fn set_attribute(&mut self, attribute: KeyValue) {
        if let Some(live) = &mut self.live {
            live.span.set_attribute(attribute);
        }
    }

    /// Ends the span, an error when `failure` says why the render failed.
    pub(crate) fn end(mut self, failure: Option<&str>) {
        if let Some(live) = &mut self.live {
            if let Some(reason) = failure {
                live.span.set_status(Status::error(reason.to_owned()));
            }
            live.span.end();
        }
    }
}

/// A checked worker span as the exporter receives it: the worker's ids and times, under its
/// reported parent (the render span, which lives in this process, or an earlier worker span).
fn worker_span_data(check: &WorkerSpanCheck, span: AdmittedSpan) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            check.trace_id(),
            span.span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: span.parent_span_id,
        // The worker is another process: its first span's parent is remote to it.
        parent_span_is_remote: span.parent_span_id == check.render_span_id(),
        span_kind: SpanKind::Internal,
        name: Cow::Owned(span.name),
        start_time: span.start,
        end_time: span.end,
        attributes: span.attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if span.failed {
            Status::error("the step failed")
        } else {
            Status::Unset
        },
        instrumentation_scope: InstrumentationScope::builder(SERVICE_NAME).build(),
    }
}

/// The provider's span processor, shared with [`RenderSpan`] for the spans workers report.
/// The resource is given to the exporter before it is wrapped: a shared processor cannot be
/// changed by the provider.
#[derive(Debug, Clone)]
struct SharedProcessor(Arc<dyn SpanProcessor>);

impl SpanProcessor for SharedProcessor {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// An exporter whose failures are logged, at most once per
/// [`EXPORT_FAILURE_LOG_INTERVAL`] with the count since the last line.
#[derive(Debug)]
struct LoggedExporter<E> {
    inner: E,
    failures: Mutex<FailureLog>,
}

/// Failures since the last line, and when that line was written.
#[derive(Debug, Default)]
struct FailureLog {
    unlogged: u64,
    last_line: Option<Instant>,
}

impl FailureLog {
    /// Counts a failure at `now`; answers the count to log when a line is due.
    fn failed(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        let due = self
            .last_line
            .is_none_or(|last| now.saturating_duration_since(last) >= EXPORT_FAILURE_LOG_INTERVAL);
        if !due {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl<E> LoggedExporter<E> {
    fn new(inner: E) -> LoggedExporter<E> {
        LoggedExporter {
            inner,
            failures: Mutex::new(FailureLog::default()),
        }
    }
}

impl<E: SpanExporter> SpanExporter for LoggedExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            // Exports never run concurrently; a poisoned count is still a count.
            let due = self
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .failed(Instant::now());
            if let Some(failures) = due {
                tracing::warn!(%error, failures, "cannot export spans");
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::worker_spans::{SpanValue, WorkerTrace};
    use opentelemetry::trace::{SpanId, TraceId};
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    #[test]
    fn export_failures_are_logged_at_most_once_an_interval_with_their_count() {
        let mut log = FailureLog::default();
        let start = Instant::now();
        assert_eq!(log.failed(start), Some(1));
        assert_eq!(log.failed(start + Duration::from_secs(1)), None);
        assert_eq!(log.failed(start + Duration::from_secs(30)), None);
        let next = start + EXPORT_FAILURE_LOG_INTERVAL;
        assert_eq!(log.failed(next), Some(3));
        assert_eq!(log.failed(next + Duration::from_secs(1)), None);
    }

    #[test]
    fn with_traces_off_no_render_span_is_built_and_the_worker_gets_no_traceparent() {
        let parent = SpanContext::new(
            TraceId::from_hex(TRACE).unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let span = Tracing::off().render_span(Some(&parent), || unreachable!());
        assert_eq!(span.traceparent(), None);
    }

    fn client_span(flags: TraceFlags) -> SpanContext {
        SpanContext::new(
            TraceId::from_hex(TRACE).unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            flags,
            true,
            TraceState::default(),
        )
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn worker_spans_are_exported_with_their_own_ids_and_times_and_garbage_is_not() {
        let exporter = InMemorySpanExporter::default();
        let tracing = Tracing::with_exporter(exporter.clone());
        let render = tracing.render_span(Some(&client_span(TraceFlags::SAMPLED)), Vec::new);
        let traceparent = render.traceparent().unwrap();
        let mut trace = WorkerTrace::from_traceparent(Some(&traceparent)).unwrap();
        let step = trace.start(None);
        let step_id = step.span_id;
        trace.finish(step, "prepare", [("frames", SpanValue::Int(3))], true);
        let mut spans = trace.into_spans();
        let reported = spans[0].clone();
        spans.push(WorkerSpan {
            trace_id: "1".repeat(32),
            span_id: "0000000000000009".into(),
            ..reported.clone()
        });
        render.export_worker_spans(&spans);
        render.end(None);
        let exported = exporter.get_finished_spans().unwrap();
        assert_eq!(exported.len(), 2, "{exported:#?}");
        let worker = exported.iter().find(|span| span.name == "prepare").unwrap();
        let render = exported.iter().find(|span| span.name == "render").unwrap();
        assert_eq!(worker.span_context.span_id(), step_id);
        assert_eq!(
            worker.span_context.trace_id(),
            TraceId::from_hex(TRACE).unwrap()
        );
        assert_eq!(worker.parent_span_id, render.span_context.span_id());
        assert!(worker.parent_span_is_remote);
        assert_eq!(
            worker.start_time,
            std::time::UNIX_EPOCH + Duration::from_nanos(reported.start_unix_nanos)
        );
        assert_eq!(worker.status, Status::error("the step failed"));
        assert_eq!(
            render.parent_span_id,
            client_span(TraceFlags::SAMPLED).span_id()
        );
    }

    #[test]
    fn a_caller_that_does_not_sample_gets_no_render_or_worker_spans() {
        let exporter = InMemorySpanExporter::default();
        let tracing = Tracing::with_exporter(exporter.clone());
        let render = tracing.render_span(Some(&client_span(TraceFlags::default())), Vec::new);
        assert_eq!(render.traceparent(), None);
        render.end(None);
        assert!(exporter.get_finished_spans().unwrap().is_empty());
    }
}
