//! README promises about failures that no other test provoked, each over the wire with its
//! reason and its exact retry delay: an analysis worker that cannot be run
//! (ANALYSIS_UNAVAILABLE, UNAVAILABLE after 2 s), a render worker killed from outside, as
//! the OOM killer does (RENDER_MEMORY_EXCEEDED: the job FAILED, retryable after the queue's
//! delay), and one that ran out of its CPU budget (RENDER_CPU_EXCEEDED: not retryable, the
//! request quarantined).

use crate::helpers::{
    corpus, get_job_through, refusal_delay, renders_on, small_request, submit_keyed_through,
    unique_key, ServerProcess,
};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;

const BALL: &str = "slots-ball-colors-opacity.json";
/// How long a job of a stand-in worker may take to end.
const JOB_END_LIMIT: Duration = Duration::from_secs(60);
/// The retry delay of a failed render on a fresh server with one worker and nothing waiting:
/// the queue's delay (README: "from the queue length and the recent job durations"), the
/// jobs waiting plus this one (1) times the average job time a server starts from (10 s),
/// over its one worker.
const FIRST_FAILED_RENDER_RETRY_AFTER: Duration = Duration::from_secs(10);

/// An executable shell script `name` in `dir` that reads its input (a job, as a worker is
/// given one) and then runs `then`.
fn stand_in(dir: &Path, name: &str, then: &str) -> PathBuf {
    crate::helpers::stand_in(&dir.join(name), &format!("cat > /dev/null\n{then}"))
}

async fn create_ball(server: &ServerProcess) -> Result<proto::Template, tonic::Status> {
    TemplateServiceClient::new(server.channel().await)
        .create_template(proto::CreateTemplateRequest {
            name: "ball".into(),
            lottie_json: corpus(BALL).into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn an_analysis_worker_killed_from_outside_is_analysis_unavailable_retried_after_two_seconds()
{
    // An analysis worker killed by SIGKILL, as the kernel's OOM killer does: the machine's
    // fault, not the template's.
    let dir = tempfile::tempdir().unwrap();
    let analysis = stand_in(dir.path(), "killed-analysis", "kill -KILL $$");
    let server = ServerProcess::start(&["--analysis-executable", analysis.to_str().unwrap()]);
    let status = create_ball(&server).await.unwrap_err();
    let delay = refusal_delay(&status, Code::Unavailable, "ANALYSIS_UNAVAILABLE");
    assert_eq!(delay, Some(Duration::from_secs(2)), "{status:?}");
    assert!(server.stop().await);
}

/// Creates the ball, submits one small render and waits until it has ended; answers its
/// last snapshot.
async fn render_until_ended(server: &ServerProcess) -> proto::RenderJob {
    let template = create_ball(server).await.unwrap();
    let renders = renders_on(server.channel().await);
    let request = small_request(&template.template_id, proto::Format::Gif);
    let (job, _) = submit_keyed_through(renders.clone(), &unique_key(), request)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + JOB_END_LIMIT;
    loop {
        let seen = get_job_through(renders.clone(), &job.job_id).await.unwrap();
        let state = proto::JobState::try_from(seen.state).unwrap();
        if matches!(
            state,
            proto::JobState::Succeeded | proto::JobState::Failed | proto::JobState::Cancelled
        ) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job did not end: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A FAILED job with `reason`, retryable after [`FIRST_FAILED_RENDER_RETRY_AFTER`].
fn assert_failed_retryable(job: &proto::RenderJob, reason: &str) {
    assert_eq!(job.state, proto::JobState::Failed as i32, "{job:?}");
    let error = job.error.as_ref().expect("a failed job says why");
    assert_eq!(error.reason, reason, "{error:?}");
    assert!(error.retryable, "{error:?}");
    let retry_after = error.retry_after.expect("a retryable failure has a delay");
    assert_eq!(
        Duration::try_from(retry_after).unwrap(),
        FIRST_FAILED_RENDER_RETRY_AFTER,
        "{error:?}"
    );
}

/// A server of one render worker, a stand-in named `name` that ends with `then`: its render
/// ends FAILED with `reason`, retryable after [`FIRST_FAILED_RENDER_RETRY_AFTER`].
async fn assert_worker_fails_its_job_retryable(name: &str, then: &str, reason: &str) {
    let server =
        ServerProcess::start_with_worker(|dir| stand_in(dir, name, then), &["--workers", "1"], &[]);
    let job = render_until_ended(&server).await;
    assert_failed_retryable(&job, reason);
    assert!(server.stop().await);
}

/// A worker that waits (no CPU) past its deadline was slowed by the machine, not by its
/// work: retryable, with the delay (issue 42: a deadline is a verdict only when the worker
/// had the CPU).
#[tokio::test]
async fn a_render_worker_that_sleeps_past_its_deadline_fails_its_job_retryable() {
    let server = ServerProcess::start_with_worker(
        |dir| stand_in(dir, "sleeping-worker", "sleep 30"),
        &["--workers", "1", "--max-job-seconds", "1"],
        &[],
    );
    let job = render_until_ended(&server).await;
    assert_failed_retryable(&job, "RENDER_DEADLINE_EXCEEDED");
    let message = &job.error.as_ref().unwrap().message;
    assert!(message.contains("retry after the delay"), "{message}");
    assert!(server.stop().await);
}

/// The kernel sends SIGXCPU at the worker's RLIMIT_CPU, its CPU budget: the request is more
/// work than its budget on any machine (issue 43), so the job fails for good and the same
/// request is refused at once afterwards, costing no worker.
#[tokio::test]
async fn a_render_worker_out_of_its_cpu_budget_fails_its_job_for_good_and_is_quarantined() {
    let server = ServerProcess::start_with_worker(
        |dir| stand_in(dir, "out-of-cpu-worker", "kill -XCPU $$"),
        &["--workers", "1"],
        &[],
    );
    let job = render_until_ended(&server).await;
    assert_eq!(job.state, proto::JobState::Failed as i32, "{job:?}");
    let error = job.error.as_ref().expect("a failed job says why");
    assert_eq!(error.reason, "RENDER_CPU_EXCEEDED", "{error:?}");
    assert!(!error.retryable, "{error:?}");
    assert!(error.retry_after.is_none(), "{error:?}");
    assert!(error.message.contains("quarantined"), "{error:?}");
    assert!(server.stop().await);
}

#[tokio::test]
async fn a_render_worker_killed_from_outside_fails_its_job_as_render_memory_exceeded_retryable() {
    // SIGKILL from outside: nearly always the kernel's OOM killer under memory pressure.
    assert_worker_fails_its_job_retryable(
        "oom-killed-worker",
        "kill -KILL $$",
        "RENDER_MEMORY_EXCEEDED",
    )
    .await;
}
