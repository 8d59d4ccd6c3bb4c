//! The DESIGN.md error table over the wire: every refusal's code, ErrorInfo reason, field
//! paths and retry signals, including what prost would never send (unknown fields, bytes
//! that do not decode, oversized bodies) and a stock gRPC client whose retry policy retries
//! every code.

use crate::helpers::{
    color, create_request, small_request, spawn_app, spawn_app_with, unique_key, violated_fields,
    TestApp,
};
use lottie_render::grpc::proto;
use prost::Message;
use std::collections::HashMap;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";

/// What a refusal must say.
struct Refusal {
    code: Code,
    reason: &'static str,
    fields: &'static [&'static str],
}

fn assert_refusal(case: &str, status: &Status, expected: &Refusal) {
    assert_eq!(status.code(), expected.code, "{case}: {status:?}");
    let details = status.get_error_details();
    let info = details
        .error_info()
        .unwrap_or_else(|| panic!("{case}: no ErrorInfo"));
    assert_eq!(info.reason, expected.reason, "{case}: {status:?}");
    assert_eq!(info.domain, "lottie-render", "{case}");
    // As a set: garde reports in its own (path) order.
    let mut fields = violated_fields(status);
    fields.sort_unstable();
    let mut expected_fields = expected.fields.to_vec();
    expected_fields.sort_unstable();
    assert_eq!(fields, expected_fields, "{case}: {status:?}");
    let pushback = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(pushback.as_deref(), Some("-1"), "{case}: deterministic");
    assert!(details.retry_info().is_none(), "{case}");
}

fn with_colors(
    mut request: proto::RenderRequest,
    colors: &[(&str, proto::Color)],
) -> proto::RenderRequest {
    request.modifications = Some(proto::Modifications {
        texts: HashMap::new(),
        colors: colors
            .iter()
            .map(|(id, c)| ((*id).to_owned(), *c))
            .collect(),
        ..Default::default()
    });
    request
}

#[tokio::test]
async fn every_invalid_submission_is_invalid_argument_naming_its_fields_and_told_not_to_retry() {
    // A small job budget, so that a 1080×1080 render of a 2 s template is over it.
    let app = spawn_app_with(|settings| settings.jobs.max_job_megapixels = 50).await;
    let template = app.create_template(BALL).await;
    let id = template.template_id.as_str();
    let base = small_request(id, proto::Format::Mp4);
    let every_violation = proto::RenderRequest {
        template_id: "not-a-uuid".into(),
        modifications: Some(proto::Modifications {
            texts: [
                (String::new(), "x".into()),
                ("title".into(), "y".repeat(201)),
            ]
            .into(),
            colors: [("bg".to_owned(), color(2.0, 0.0, 0.0))].into(),
            ..Default::default()
        }),
        output: Some(proto::OutputSpec {
            format: proto::Format::Unspecified as i32,
            fps: 24,
            width: 99,
            height: 1921,
            background: Some(color(0.0, -1.0, 0.0)),
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    };
    let big = proto::RenderRequest {
        output: Some(proto::OutputSpec {
            width: 1080,
            height: 1080,
            ..base.output.clone().unwrap()
        }),
        ..base.clone()
    };
    let cases: Vec<(&str, proto::RenderRequest, Refusal)> = vec![
        (
            "a colour channel of 255 (0..255 instead of 0..1)",
            with_colors(base.clone(), &[("ball_color", color(255.0, 0.0, 0.0))]),
            Refusal {
                code: Code::InvalidArgument,
                reason: "REQUEST_INVALID",
                fields: &["modifications.colors[\"ball_color\"].r"],
            },
        ),
        (
            "NaN, infinity, below 0 and just above 1",
            with_colors(
                base.clone(),
                &[(
                    "ball_color",
                    proto::Color {
                        r: f64::NAN,
                        g: f64::INFINITY,
                        b: -0.1,
                        a: Some(1.000_000_1),
                    },
                )],
            ),
            Refusal {
                code: Code::InvalidArgument,
                reason: "REQUEST_INVALID",
                fields: &[
                    "modifications.colors[\"ball_color\"].r",
                    "modifications.colors[\"ball_color\"].g",
                    "modifications.colors[\"ball_color\"].b",
                    "modifications.colors[\"ball_color\"].a",
                ],
            },
        ),
        (
            "every violation at once",
            every_violation,
            Refusal {
                code: Code::InvalidArgument,
                reason: "REQUEST_INVALID",
                fields: &[
                    "template_id",
                    "modifications.texts",
                    "modifications.texts[\"title\"]",
                    "modifications.colors[\"bg\"].r",
                    "output.format",
                    "output.fps",
                    "output.width",
                    "output.height",
                    "output.background.g",
                ],
            },
        ),
        (
            "no output",
            proto::RenderRequest {
                output: None,
                ..base.clone()
            },
            Refusal {
                code: Code::InvalidArgument,
                reason: "REQUEST_INVALID",
                fields: &["output"],
            },
        ),
        (
            "slot ids the template does not have",
            proto::RenderRequest {
                modifications: Some(proto::Modifications {
                    texts: [("headline".to_owned(), "hi".to_owned())].into(),
                    colors: [("primary_bg".to_owned(), color(0.0, 0.0, 0.0))].into(),
                    ..Default::default()
                }),
                ..base.clone()
            },
            Refusal {
                code: Code::InvalidArgument,
                reason: "SLOT_UNKNOWN",
                fields: &[
                    "modifications.colors[\"primary_bg\"]",
                    "modifications.texts[\"headline\"]",
                ],
            },
        ),
        (
            "a well-formed but unknown template",
            small_request(&uuid::Uuid::new_v4().to_string(), proto::Format::Gif),
            Refusal {
                code: Code::InvalidArgument,
                reason: "TEMPLATE_NOT_FOUND",
                fields: &["template_id"],
            },
        ),
        (
            "a job over the frames × pixels budget",
            big,
            Refusal {
                code: Code::InvalidArgument,
                reason: "JOB_TOO_LARGE",
                fields: &["output"],
            },
        ),
    ];
    for (case, request, expected) in cases {
        let status = app.submit(request).await.unwrap_err();
        assert_refusal(case, &status, &expected);
    }
    // Nothing was queued, no worker ran (counters exposed from the start: a misspelt name
    // fails instead of reading 0).
    assert_eq!(app.metric("lottie_render_queue_depth").await, 0.0);
    assert_eq!(app.metric("lottie_render_workers_started_total").await, 0.0);
    assert_eq!(
        app.metric("lottie_render_rejections_total{method=\"SubmitRender\",code=\"InvalidArgument\",reason=\"REQUEST_INVALID\"}")
            .await,
        4.0
    );
    app.stop().await;
}

#[tokio::test]
async fn unknown_and_malformed_job_ids_are_not_found_and_invalid_argument() {
    let app = spawn_app().await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let not_found = Refusal {
        code: Code::NotFound,
        reason: "JOB_NOT_FOUND",
        fields: &[],
    };
    let mut renders = app.renders();
    let job_id = || unknown.clone();
    let answers = [
        (
            "get",
            renders
                .get_render_job(proto::GetRenderJobRequest { job_id: job_id() })
                .await
                .map(drop),
        ),
        (
            "watch",
            renders
                .watch_render_job(proto::WatchRenderJobRequest { job_id: job_id() })
                .await
                .map(drop),
        ),
        (
            "cancel",
            renders
                .cancel_render_job(proto::CancelRenderJobRequest { job_id: job_id() })
                .await
                .map(drop),
        ),
        ("download", app.download(&unknown).await.map(drop)),
    ];
    for (case, answer) in answers {
        assert_refusal(case, &answer.unwrap_err(), &not_found);
    }
    let status = renders
        .get_render_job(proto::GetRenderJobRequest {
            job_id: "42".into(),
        })
        .await
        .unwrap_err();
    assert_refusal(
        "malformed id",
        &status,
        &Refusal {
            code: Code::InvalidArgument,
            reason: "REQUEST_INVALID",
            fields: &["job_id"],
        },
    );
    app.stop().await;
}

#[tokio::test]
async fn a_malformed_idempotency_key_is_refused_before_decoding() {
    let app = spawn_app().await;
    // The body would not even decode: the key is judged first.
    let mut request = Request::new(vec![0xff, 0xff, 0xff]);
    request
        .metadata_mut()
        .insert("idempotency-key", "has spaces".parse().unwrap());
    let status = raw_call(&app, SUBMIT, request).await.unwrap_err();
    assert_refusal(
        "key with spaces",
        &status,
        &Refusal {
            code: Code::InvalidArgument,
            reason: "IDEMPOTENCY_KEY_INVALID",
            fields: &["idempotency-key"],
        },
    );
    app.stop().await;
}

const SUBMIT: &str = "/lottie.render.v1.RenderService/SubmitRender";
const CREATE_TEMPLATE: &str = "/lottie.render.v1.TemplateService/CreateTemplate";

async fn raw_call(
    app: &TestApp,
    path: &'static str,
    request: Request<Vec<u8>>,
) -> Result<Vec<u8>, Status> {
    app.raw_unary(path, request)
        .await
        .map(|response| response.into_inner())
}

fn keyed(bytes: Vec<u8>) -> Request<Vec<u8>> {
    let mut request = Request::new(bytes);
    request
        .metadata_mut()
        .insert("idempotency-key", unique_key().parse().unwrap());
    request
}

#[tokio::test]
async fn undecodable_bodies_unknown_fields_and_oversized_requests_are_invalid_argument() {
    let app = spawn_app().await;
    let template = app.create_template(BALL).await;
    let valid = small_request(&template.template_id, proto::Format::Mp4).encode_to_vec();

    // Field 2 (modifications) declared 100 bytes long, with 3 bytes present.
    let status = raw_call(&app, SUBMIT, keyed(vec![0x12, 100, 1, 2, 3]))
        .await
        .unwrap_err();
    assert_refusal(
        "undecodable",
        &status,
        &Refusal {
            code: Code::InvalidArgument,
            reason: "BODY_UNDECODABLE",
            fields: &["(body)"],
        },
    );

    // Field 99 at the top and field 15 inside output: what `.strict()` refused in JSON.
    let mut unknown = valid.clone();
    unknown.extend_from_slice(&[0x98, 0x06, 0x01]);
    let mut output = proto::OutputSpec::decode(
        &*proto::RenderRequest::decode(&*valid)
            .unwrap()
            .output
            .unwrap()
            .encode_to_vec(),
    )
    .unwrap()
    .encode_to_vec();
    output.extend_from_slice(&[0x78, 0x01]);
    let mut nested = proto::RenderRequest::decode(&*valid).unwrap();
    nested.output = None;
    let mut nested = nested.encode_to_vec();
    nested.push(0x1a);
    nested.push(output.len() as u8);
    nested.extend_from_slice(&output);
    for (case, bytes, field) in [("top", unknown, "#99"), ("nested", nested, "output.#15")] {
        let status = raw_call(&app, SUBMIT, keyed(bytes)).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        let details = status.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "UNKNOWN_FIELDS");
        assert_eq!(violated_fields(&status), [field], "{case}");
    }

    // One byte above the 64 MiB limit, refused before it is buffered.
    let oversized = create_request(
        "huge",
        vec![b' '; lottie_render::middleware::request_body::MAX_REQUEST_BYTES],
    )
    .encode_to_vec();
    let status = raw_call(&app, CREATE_TEMPLATE, Request::new(oversized))
        .await
        .unwrap_err();
    assert_refusal(
        "oversized",
        &status,
        &Refusal {
            code: Code::InvalidArgument,
            reason: "REQUEST_TOO_LARGE",
            fields: &["(request)"],
        },
    );
    app.stop().await;
}

/// A stock gRPC client (Debian's python3-grpcio) whose retry policy retries every status
/// code, five attempts, 100 ms backoff. It prints the final status code.
const RETRYING_CLIENT: &str = r#"
import grpc, json, sys
address, method, payload = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
codes = ["CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
         "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
         "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
         "UNAUTHENTICATED"]
config = {"methodConfig": [{"name": [{"service": "lottie.render.v1.RenderService"}],
          "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "0.2s",
                          "backoffMultiplier": 1.5, "retryableStatusCodes": codes}}]}
channel = grpc.insecure_channel(address, options=[("grpc.service_config", json.dumps(config)),
                                                  ("grpc.enable_retries", 1)])
call = channel.unary_unary(method)
try:
    call(payload, metadata=[("idempotency-key", "retry-storm-1")], timeout=20)
    print("OK")
except grpc.RpcError as error:
    print(error.code().name)
"#;

#[tokio::test]
async fn a_client_retrying_every_code_makes_exactly_one_attempt_on_a_deterministic_error() {
    let app = spawn_app().await;
    let template = app.create_template(BALL).await;
    let poisoned = with_colors(
        small_request(&template.template_id, proto::Format::Mp4),
        &[("ball_color", color(255.0, 0.0, 0.0))],
    )
    .encode_to_vec();
    let answer = tokio::task::spawn_blocking({
        let app_address = app.address;
        let poisoned = poisoned.clone();
        move || {
            let probe = TestAppAddress(app_address);
            probe.call(SUBMIT, &poisoned)
        }
    })
    .await
    .unwrap();
    assert_eq!(answer, "INVALID_ARGUMENT");
    assert_eq!(
        app.metric(
            "lottie_render_grpc_requests_total{method=\"SubmitRender\",code=\"InvalidArgument\"}"
        )
        .await,
        1.0,
        "the server saw more than one attempt"
    );
    // Control: the same client does retry an error that carries no pushback (an unknown
    // method of the service, counted as method "unknown"), so the single attempt above is
    // the pushback's doing.
    let method = "/lottie.render.v1.RenderService/NoSuchMethod";
    let answer = tokio::task::spawn_blocking({
        let app_address = app.address;
        move || TestAppAddress(app_address).call(method, &poisoned)
    })
    .await
    .unwrap();
    assert_eq!(answer, "UNIMPLEMENTED");
    assert_eq!(
        app.metric("lottie_render_grpc_requests_total{method=\"unknown\",code=\"Unimplemented\"}")
            .await,
        5.0,
        "the retry policy is not in effect"
    );
    app.stop().await;
}

/// The server's address, for the blocking client (TestApp itself stays on the runtime).
struct TestAppAddress(std::net::SocketAddr);

impl TestAppAddress {
    fn call(&self, method: &str, payload: &[u8]) -> String {
        let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        let output = std::process::Command::new("/usr/bin/python3")
            .args(["-c", RETRYING_CLIENT, &self.0.to_string(), method, &hex])
            .output()
            .expect("python3 with grpcio (./dev installs python3-grpcio)");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}
