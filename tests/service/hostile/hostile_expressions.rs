//! Expressions that burn CPU (issue 21, item 6): a loop of native string searches is charged
//! by the bytes it touches, so CreateTemplate answers with a warning in well under a second
//! instead of failing after the analysis' whole CPU budget; the root `slots` object is
//! analysed as a render resolves it; a caller's colours never reach an expression; and a render
//! whose expressions run out of their budget fails at once, not retryable, and is quarantined.
//! Meanwhile what designers write fits the budget many times over (issue 43, item 2): a loader
//! of 300 short expressions renders at 60 fps.

use crate::helpers::{assert_warns, color, small_request, spawn_app, TestApp, WATCH_LIMIT};
use lottie_render::cli::bench_expressions::loaders::loader;
use lottie_render::cli::bench_hostile::payloads::red_square;
use lottie_render::grpc::proto::{self, JobState};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic_types::StatusExt;

/// An expression searching a megabyte string again and again: one native call each time, a
/// gigabyte of work between two of QuickJS's interrupt polls.
const STRING_SEARCH_HOG: &str =
    "var s = 'a'.repeat(1 << 20), n = 0; while (true) { n += s.indexOf('b'); } n";
/// How long CreateTemplate of a hog may take: the analysis starts a worker and bakes until the
/// budget runs out (a fraction of a second of CPU in a release build, 1.4 s in this debug
/// build, on a test machine that may be loaded several times over: 2 cores, load about 6);
/// before, it burnt the analysis' whole 5 s of CPU and failed, which the template's warning
/// (the work budget stopped it) rules out whatever the machine's load.
const CREATE_LIMIT: Duration = Duration::from_secs(30);
/// How long a render of a hog may take to fail: a worker, the template's parse and the bake
/// until the budget runs out; before, it spun until the job deadline (minutes).
const FAILURE_LIMIT: Duration = Duration::from_secs(20);
/// How long the refusal of a quarantined request may take: a submission answered at the
/// boundary (its answer, RENDER_QUARANTINED instead of a job, is the proof no render ran),
/// milliseconds, within a floor for a saturated test machine.
const QUARANTINE_REFUSAL_LIMIT: Duration = Duration::from_secs(10);

/// One red square (its fill named `paint`, a colour slot) whose position is `position`.
fn template(position: Value, extra: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut json = red_square(position);
    extra(&mut json);
    serde_json::to_vec(&json).unwrap()
}

async fn create(app: &TestApp, lottie_json: Vec<u8>) -> Result<proto::Template, tonic::Status> {
    app.templates()
        .create_template(proto::CreateTemplateRequest {
            name: "hostile expressions".into(),
            lottie_json: lottie_json.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The job's last snapshot once it has ended, within `limit`.
async fn ended(app: &TestApp, job_id: &str, limit: Duration) -> proto::RenderJob {
    tokio::time::timeout(limit, async {
        loop {
            let job = app.get_job(job_id).await;
            let state = JobState::try_from(job.state).unwrap();
            if matches!(
                state,
                JobState::Succeeded | JobState::Failed | JobState::Cancelled
            ) {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("job {job_id} did not end within {limit:?}"))
}

#[tokio::test]
async fn a_string_search_hog_is_a_template_with_a_warning_within_seconds() {
    let app = spawn_app().await;
    let bytes = template(
        json!({"a": 0, "k": [50, 50, 0], "x": STRING_SEARCH_HOG}),
        |_| {},
    );
    let started = Instant::now();
    let created = create(&app, bytes).await.expect("a warning, not a failure");
    let took = started.elapsed();
    assert!(took < CREATE_LIMIT, "CreateTemplate took {took:?}");
    assert!(
        created.warnings.iter().any(|warning| warning
            .starts_with("expression at $.layers[0].ks.p is not evaluated")
            && warning.contains("work budget")),
        "{:?}",
        created.warnings
    );
    app.stop().await;
}

#[tokio::test]
async fn a_hog_in_the_root_slots_object_is_analysed_and_its_render_fails_at_once_then_is_quarantined(
) {
    let app = spawn_app().await;
    let bytes = template(json!({"a": 0, "k": [50, 50, 0], "sid": "place"}), |json| {
        json["slots"] = json!({"place": {"p": {"a": 0, "k": [50, 50, 0], "x": STRING_SEARCH_HOG}}});
    });
    let started = Instant::now();
    let created = create(&app, bytes).await.unwrap();
    assert!(started.elapsed() < CREATE_LIMIT, "{:?}", started.elapsed());
    assert_warns(
        &created.warnings,
        "work budget",
        "the analysis evaluates the root slots",
    );

    let request = small_request(&created.template_id, proto::Format::Gif);
    let started = Instant::now();
    let job = app.submit(request.clone()).await.unwrap();
    let job = ended(&app, &job.job_id, FAILURE_LIMIT).await;
    assert_eq!(JobState::try_from(job.state).unwrap(), JobState::Failed);
    let error = job.error.unwrap();
    assert_eq!(
        error.reason, "EXPRESSIONS_CPU_EXCEEDED",
        "{}",
        error.message
    );
    assert!(!error.retryable && error.retry_after.is_none(), "{error:?}");
    assert!(started.elapsed() < FAILURE_LIMIT);

    // The same request under a new idempotency key is refused at the boundary.
    let started = Instant::now();
    let status = app.submit(request).await.unwrap_err();
    assert!(
        started.elapsed() < QUARANTINE_REFUSAL_LIMIT,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.get_error_details().error_info().unwrap().reason,
        "RENDER_QUARANTINED"
    );
    assert_eq!(
        app.metric("lottie_render_quarantined_fingerprints").await,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_hog_gated_on_a_colour_the_caller_sets_never_runs() {
    let app = spawn_app().await;
    // Red (the template's colour) draws the square on the right; blue would start the hog.
    let gated = format!(
        "var c = content('square').content('paint').color;\n\
         if (c[2] > 0.5) {{ {STRING_SEARCH_HOG} }}\n\
         c[0] > 0.5 ? [75, 50] : [25, 50]"
    );
    let bytes = template(json!({"a": 0, "k": [50, 50, 0], "x": gated}), |_| {});
    let created = create(&app, bytes).await.unwrap();
    assert!(
        !created
            .warnings
            .iter()
            .any(|warning| warning.contains("expression")),
        "{:?}",
        created.warnings
    );
    let mut request = small_request(&created.template_id, proto::Format::Gif);
    request.modifications = Some(proto::Modifications {
        colors: [("paint".to_owned(), color(0.0, 0.0, 1.0))].into(),
        ..Default::default()
    });
    let job = app.submit(request).await.unwrap();
    let job = ended(&app, &job.job_id, WATCH_LIMIT.min(FAILURE_LIMIT)).await;
    assert_eq!(
        JobState::try_from(job.state).unwrap(),
        JobState::Succeeded,
        "{:?}",
        job.error
    );
    app.stop().await;
}

#[tokio::test]
async fn a_loader_of_300_short_expressions_is_created_without_warnings_and_renders_at_60_fps() {
    let app = spawn_app().await;
    let bytes = serde_json::to_vec(&loader(50, 60, 60)).unwrap();
    let created = create(&app, bytes).await.expect("created");
    assert!(
        !created
            .warnings
            .iter()
            .any(|warning| warning.contains("expression")),
        "{:?}",
        created.warnings
    );
    let mut request = small_request(&created.template_id, proto::Format::Gif);
    if let Some(output) = request.output.as_mut() {
        output.fps = 60;
    }
    let job = app.submit(request).await.unwrap();
    let job = ended(&app, &job.job_id, WATCH_LIMIT).await;
    assert_eq!(
        JobState::try_from(job.state).unwrap(),
        JobState::Succeeded,
        "{:?}",
        job.error
    );
    app.stop().await;
}
