//! Traces over a real socket with real workers: the spans a server exports (to the SDK's
//! in-memory exporter, through the server's own provider) under the caller's `traceparent`,
//! and over OTLP/gRPC to a small collector of the test's own (`--otlp-endpoint`).

use crate::helpers::{small_request, spawn_app, spawn_app_with, unique_key, TestApp, WATCH_LIMIT};
use lottie_render::grpc::proto;
use lottie_render::telemetry::traces::Tracing;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::Value;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Request;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

async fn traced_app() -> (TestApp, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let tracing = Tracing::with_exporter(exporter.clone());
    let app = spawn_app_with(move |settings| settings.telemetry.tracing = Some(tracing)).await;
    (app, exporter)
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| &attribute.value)
}

/// The one exported span named `name` in `trace`.
fn only_span<'a>(spans: &'a [SpanData], trace: TraceId, name: &str) -> &'a SpanData {
    let found: Vec<_> = spans
        .iter()
        .filter(|span| span.span_context.trace_id() == trace && span.name == name)
        .collect();
    assert_eq!(found.len(), 1, "spans named {name} in {trace}: {spans:#?}");
    found[0]
}

#[tokio::test]
async fn a_client_traceparent_is_the_parent_of_the_server_render_and_worker_spans() {
    let (app, exporter) = traced_app().await;
    let template = app.create_template("tiny-solid-layer.json").await;
    let mut request = Request::new(small_request(&template.template_id, proto::Format::Gif));
    let metadata = request.metadata_mut();
    metadata.insert("idempotency-key", unique_key().parse().unwrap());
    metadata.insert(
        "traceparent",
        format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
            .parse()
            .unwrap(),
    );
    let job = app
        .renders()
        .submit_render(request)
        .await
        .unwrap()
        .into_inner();
    let last = app.watch(&job.job_id, WATCH_LIMIT).await.pop().unwrap();
    assert_eq!(last.state, proto::JobState::Succeeded as i32, "{last:?}");

    let spans = exporter.get_finished_spans().unwrap();
    let trace = TraceId::from_hex(CLIENT_TRACE).unwrap();
    let submit = only_span(&spans, trace, "lottie.render.v1.RenderService/SubmitRender");
    assert_eq!(
        submit.parent_span_id,
        SpanId::from_hex(CLIENT_SPAN).unwrap()
    );
    assert!(submit.parent_span_is_remote);
    assert_eq!(submit.span_kind, SpanKind::Server);
    assert_eq!(attribute(submit, "rpc.system"), Some(&Value::from("grpc")));
    assert_eq!(
        attribute(submit, "rpc.method"),
        Some(&Value::from("SubmitRender"))
    );
    assert_eq!(
        attribute(submit, "rpc.grpc.status_code"),
        Some(&Value::I64(0))
    );

    let render = only_span(&spans, trace, "render");
    assert_eq!(render.parent_span_id, submit.span_context.span_id());
    assert_eq!(
        attribute(render, "job.id"),
        Some(&Value::from(job.job_id.clone()))
    );

    // Measured inside the worker process, exported by the server with the worker's ids.
    let worker = only_span(&spans, trace, "worker");
    assert_eq!(worker.parent_span_id, render.span_context.span_id());
    assert_eq!(attribute(worker, "process"), Some(&Value::from("worker")));
    let Some(Value::I64(pid)) = attribute(worker, "process.pid") else {
        panic!("no worker pid: {worker:?}");
    };
    assert!(*pid > 0 && *pid != i64::from(std::process::id()), "{pid}");
    assert!(worker.start_time >= render.start_time);
    assert!(worker.end_time <= render.end_time);
    for step in ["read_inputs", "prepare", "render_encode"] {
        let step = only_span(&spans, trace, step);
        assert_eq!(step.parent_span_id, worker.span_context.span_id());
        assert!(step.start_time >= worker.start_time && step.end_time <= worker.end_time);
    }
    app.stop().await;
}

#[tokio::test]
async fn a_call_without_traceparent_starts_a_new_trace() {
    let (app, exporter) = traced_app().await;
    app.templates()
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let list: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "lottie.render.v1.TemplateService/ListTemplates")
        .collect();
    assert_eq!(list.len(), 1, "{spans:#?}");
    assert_eq!(list[0].parent_span_id, SpanId::INVALID);
    let trace = list[0].span_context.trace_id();
    assert_ne!(trace, TraceId::INVALID);
    assert_ne!(trace, TraceId::from_hex(CLIENT_TRACE).unwrap());
    app.stop().await;
}

#[tokio::test]
async fn a_call_the_stack_refuses_is_traced_with_its_status() {
    let (app, exporter) = traced_app().await;
    let mut request = Request::new(small_request(
        &uuid::Uuid::new_v4().to_string(),
        proto::Format::Gif,
    ));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
            .parse()
            .unwrap(),
    );
    // No idempotency key: refused by its layer before any handler runs.
    let refused = app.renders().submit_render(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let spans = exporter.get_finished_spans().unwrap();
    let submit = only_span(
        &spans,
        TraceId::from_hex(CLIENT_TRACE).unwrap(),
        "lottie.render.v1.RenderService/SubmitRender",
    );
    assert_eq!(
        attribute(submit, "rpc.grpc.status_code"),
        Some(&Value::I64(tonic::Code::InvalidArgument as i64))
    );
    app.stop().await;
}

/// A tiny OTLP/gRPC trace collector on 127.0.0.1:0 that keeps the spans it receives.
struct Collector {
    endpoint: String,
    received: Arc<Mutex<Vec<ResourceSpans>>>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct TraceService(Arc<Mutex<Vec<ResourceSpans>>>);

impl tonic::server::NamedService for TraceService {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl tonic::server::UnaryService<ExportTraceServiceRequest> for TraceService {
    type Response = ExportTraceServiceResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, request: Request<ExportTraceServiceRequest>) -> Self::Future {
        self.0
            .lock()
            .unwrap()
            .extend(request.into_inner().resource_spans);
        std::future::ready(Ok(tonic::Response::new(
            ExportTraceServiceResponse::default(),
        )))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for TraceService {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(service, request).await)
        })
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let service = TraceService(received.clone());
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Collector {
            endpoint,
            received,
            server,
        }
    }

    /// (service.name, span name, trace id) of every span received.
    fn spans(&self) -> Vec<(String, String, Vec<u8>)> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for resource_spans in received.iter() {
            let service_name = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
                .map(|value| format!("{value:?}"))
                .unwrap_or_default();
            for scope in &resource_spans.scope_spans {
                for span in &scope.spans {
                    spans.push((
                        service_name.clone(),
                        span.name.clone(),
                        span.trace_id.clone(),
                    ));
                }
            }
        }
        spans
    }
}

#[tokio::test]
async fn spans_reach_the_otlp_endpoint_and_the_last_ones_are_flushed_on_shutdown() {
    let collector = Collector::start().await;
    let endpoint = collector.endpoint.clone();
    let app =
        spawn_app_with(move |settings| settings.telemetry.otlp_endpoint = Some(endpoint)).await;
    let mut request = Request::new(proto::ListTemplatesRequest::default());
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
            .parse()
            .unwrap(),
    );
    app.templates().list_templates(request).await.unwrap();
    // Batched: the span is sent when the server stops, if not before.
    app.stop().await;
    let trace = TraceId::from_hex(CLIENT_TRACE).unwrap().to_bytes().to_vec();
    let spans = collector.spans();
    assert!(
        spans.iter().any(|(service, name, trace_id)| {
            service.contains("lottie-render")
                && name == "lottie.render.v1.TemplateService/ListTemplates"
                && *trace_id == trace
        }),
        "{spans:?}"
    );
    collector.server.abort();
}

/// Listings of a server with and without a silent collector: the one with must take no
/// more than this many times as long as the one without (measured in the same run), plus
/// [`SLOWDOWN_FLOOR`]; an export waited for would cost its 5 s timeout on top. The floor
/// is for a saturated 2-core machine (load about 6), still under that one timeout.
const SLOWDOWN_FACTOR: u32 = 3;
const SLOWDOWN_FLOOR: Duration = Duration::from_secs(4);

/// Twenty listings on `app`, timed.
async fn twenty_listings(app: &TestApp) -> Duration {
    let started = std::time::Instant::now();
    for _ in 0..20 {
        app.templates()
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap();
    }
    started.elapsed()
}

#[tokio::test]
async fn a_collector_that_never_answers_does_not_slow_calls() {
    // The baseline: the same calls on a server that exports nothing.
    let quiet = spawn_app().await;
    let baseline = twenty_listings(&quiet).await;
    quiet.stop().await;
    // Accepts connections (the kernel's backlog) and never speaks: every export hangs until
    // its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let app =
        spawn_app_with(move |settings| settings.telemetry.otlp_endpoint = Some(endpoint)).await;
    let spent = twenty_listings(&app).await;
    assert!(
        spent < baseline * SLOWDOWN_FACTOR + SLOWDOWN_FLOOR,
        "{spent:?} with a silent collector, {baseline:?} without"
    );
    app.stop().await;
}

/// An HTTP/JSON call is traced as the gRPC call it stands for, under its `traceparent`.
#[tokio::test]
async fn an_http_json_call_is_traced_under_its_traceparent() {
    let (app, exporter) = traced_app().await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/renders", app.address))
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let spans = exporter.get_finished_spans().unwrap();
    let submit = only_span(
        &spans,
        TraceId::from_hex(CLIENT_TRACE).unwrap(),
        "lottie.render.v1.RenderService/SubmitRender",
    );
    assert_eq!(
        submit.parent_span_id,
        SpanId::from_hex(CLIENT_SPAN).unwrap()
    );
    assert_eq!(
        attribute(submit, "rpc.grpc.status_code"),
        Some(&Value::I64(tonic::Code::InvalidArgument as i64))
    );
    app.stop().await;
}
