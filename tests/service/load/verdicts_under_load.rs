//! A verdict is a function of the request, never of the machine's load (issue 43): a template
//! over the analysis CPU budget and a render over its CPU budget get the same answer with the
//! machine idle and with it saturated by CPU hogs (four busy loops on this machine's cores,
//! beside whatever else the suite runs), because the budgets that decide them are counted in
//! CPU time and the wall clock only backstops a worker that gets almost nothing. Before, on a
//! 2-core machine at load average 6, a too-complex template was answered UNAVAILABLE
//! `ANALYSIS_DEADLINE_EXCEEDED`, "retry".

use crate::helpers::{
    corpus, create_request, reason, small_request, unique_key, with_idempotency_key, ServerProcess,
};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::process::{Child, Command};
use std::time::Duration;

/// Busy loops that keep every core of this machine busy while they live.
struct Hogs(Vec<Child>);

impl Hogs {
    /// Two busy loops per core: the workers under test get well under a core each.
    fn start() -> Hogs {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Hogs(
            (0..2 * cores)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// The reason and retryability of a CreateTemplate of a template over the analysis budget
/// (box text that never fits: seconds of shaping for its one-second CPU budget here).
async fn too_complex_verdict(server: &ServerProcess) -> (String, bool) {
    let mut templates = TemplateServiceClient::new(server.channel().await)
        .max_encoding_message_size(64 * 1024 * 1024);
    let status = templates
        .create_template(create_request(
            "bomb",
            crate::hostile::hostile_templates::cpu_bomb(1000, 5000),
        ))
        .await
        .unwrap_err();
    let retryable = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .map(|v| v.to_str().unwrap().to_owned())
        != Some("-1".to_owned());
    (reason(&status), retryable)
}

#[tokio::test]
async fn a_template_over_the_analysis_budget_is_too_complex_idle_and_saturated() {
    // A server each: the first verdict backs its tenant off for a while (ANALYSIS_BACKOFF).
    let idle_server = ServerProcess::start(&["--analysis-cpu-seconds", "1"]);
    let idle = too_complex_verdict(&idle_server).await;
    assert_eq!(idle, ("TEMPLATE_TOO_COMPLEX".to_owned(), false), "idle");
    assert!(idle_server.stop().await);
    let server = ServerProcess::start(&["--analysis-cpu-seconds", "1"]);
    let hogs = Hogs::start();
    let saturated = too_complex_verdict(&server).await;
    drop(hogs);
    assert_eq!(
        saturated, idle,
        "the same verdict with the machine saturated"
    );
    assert!(server.stop().await);
}

/// The end of a render `width` wide of a template that never finishes, with a one-second
/// budget (another width is another request: the first one's is quarantined).
async fn never_finishing_render_verdict(
    renders: &mut RenderServiceClient<tonic::transport::Channel>,
    template_id: &str,
    width: u32,
) -> (String, bool) {
    let mut request = small_request(template_id, proto::Format::Gif);
    if let Some(output) = request.output.as_mut() {
        output.width = width;
    }
    let job = renders
        .submit_render(with_idempotency_key(request, &unique_key()))
        .await
        .unwrap()
        .into_inner();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let seen = renders
            .get_render_job(proto::GetRenderJobRequest {
                job_id: job.job_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if seen.state == proto::JobState::Failed as i32 {
            let error = seen.error.unwrap();
            return (error.reason, error.retryable);
        }
        assert!(tokio::time::Instant::now() < deadline, "{seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_render_over_its_cpu_budget_fails_for_good_idle_and_saturated() {
    let server = ServerProcess::start(&["--max-job-seconds", "1", "--workers", "1"]);
    let mut templates = TemplateServiceClient::new(server.channel().await);
    let template = templates
        .create_template(create_request(
            "loop",
            corpus("malformed/real-rlottie-repro-infinite-loop.json"),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut renders = RenderServiceClient::new(server.channel().await);
    let idle = never_finishing_render_verdict(&mut renders, &template.template_id, 100).await;
    assert_eq!(idle, ("RENDER_CPU_EXCEEDED".to_owned(), false), "idle");
    let hogs = Hogs::start();
    let saturated = never_finishing_render_verdict(&mut renders, &template.template_id, 101).await;
    drop(hogs);
    assert_eq!(
        saturated, idle,
        "the same verdict with the machine saturated"
    );
    assert!(server.stop().await);
}
