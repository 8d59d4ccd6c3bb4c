//! Traces over a real socket with real workers: the spans a server exports (to the SDK's
//! in-memory exporter, through the server's own provider) under the caller's `traceparent`.

use crate::helpers::{small_request, spawn_app_with, unique_key, TestApp, WATCH_LIMIT};
use lottie_render::grpc::proto;
use lottie_render::telemetry::traces::Tracing;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tonic::Request;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

async fn traced_app() -> (TestApp, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let tracing = Tracing::with_exporter(exporter.clone());
    let app = spawn_app_with(move |settings| settings.tracing = Some(tracing)).await;
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
