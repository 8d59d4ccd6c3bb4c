//! The sandbox seen from outside, over a real socket: the server proves its worker sandbox at
//! start-up (the self-test) and exports what is in force, and a worker that floods its output
//! costs its own job only.

use crate::helpers::{
    corpus, create_request, get_job_through, renders_on, sample_value, small_request,
    submit_keyed_through, unique_key, ServerProcess,
};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::time::Duration;

/// Every mechanism the self-test proves (`lottie_render_sandbox_protection{mechanism}`).
const MECHANISMS: [&str; 10] = [
    "landlock",
    "seccomp",
    "environment",
    "descriptors",
    "oom_score_adj",
    "resource_limits",
    "network",
    "filesystem",
    "processes",
    "signals",
];
/// What a job whose worker floods its output may cost the server's memory (it reads worker
/// lines of at most 4 KiB; an unbounded reader would grow by the whole flood).
const FLOOD_RSS_BUDGET_BYTES: u64 = 64 * 1024 * 1024;

#[tokio::test]
async fn the_server_proves_its_worker_sandbox_at_start_up_and_exports_every_protection() {
    // A secret in the server's environment, as an operator's credentials would be.
    let server = ServerProcess::start_with_env(&[], &[("AWS_SECRET_ACCESS_KEY", "hunter2")]);
    let metrics = server.metrics_text().await;
    // Every mechanism is exported; each one this kernel offers is in force (what it lacks,
    // an older Landlock ABI or no seccomp, fails here unless the suite is told to pass
    // without it, and is logged as missing).
    for mechanism in MECHANISMS {
        let sample = format!("lottie_render_sandbox_protection{{mechanism=\"{mechanism}\"}}");
        assert!(
            sample_value(&metrics, &sample).is_some(),
            "{mechanism} not exported: {metrics}"
        );
    }
    let offered = crate::hostile::kernel_offers::offered(MECHANISMS);
    for mechanism in &offered {
        let sample = format!("lottie_render_sandbox_protection{{mechanism=\"{mechanism}\"}}");
        assert_eq!(
            sample_value(&metrics, &sample),
            Some(1.0),
            "{mechanism} offered by this kernel, not in force: {metrics}"
        );
    }
    let verdict = if offered.len() == MECHANISMS.len() {
        "worker sandbox self-test: every protection in force"
    } else {
        "worker sandbox self-test: some protections are not in force on this kernel"
    };
    assert!(
        server.log().iter().any(|line| line.contains(verdict)),
        "{verdict}: {:?}",
        server.log()
    );
    assert!(
        server.workers().is_empty(),
        "the self-test's worker is gone"
    );
    assert!(server.stop().await);
}

/// A stand-in worker that reads its job and then writes one endless line on stdout.
fn flooding_worker(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("flooding-worker");
    std::fs::write(
        &script,
        // awk names the script in its arguments, so a survivor is recognisable.
        "#!/bin/sh\ncat > /dev/null\nexec awk 'BEGIN { while (1) printf \"xxxxxxxxxxxxxxxx\" }' \"$0\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[tokio::test]
async fn a_worker_flooding_its_output_fails_its_job_as_a_crash_and_costs_the_server_nothing() {
    let server = ServerProcess::start_with_worker(flooding_worker, &["--workers", "1"], &[]);
    let channel = server.channel().await;
    let template = TemplateServiceClient::new(channel.clone())
        .create_template(create_request(
            "ball",
            corpus("slots-ball-colors-opacity.json"),
        ))
        .await
        .unwrap()
        .into_inner();
    let rss_before = server.peak_rss_bytes();
    let renders = renders_on(channel.clone());
    let request = small_request(&template.template_id, proto::Format::Gif);
    let (job, _) = submit_keyed_through(renders.clone(), &unique_key(), request)
        .await
        .unwrap();
    let mut finished = None;
    for _ in 0..600 {
        let seen = get_job_through(renders.clone(), &job.job_id).await.unwrap();
        if seen.state == proto::JobState::Failed as i32 {
            finished = Some(seen);
            break;
        }
        // Meanwhile another caller on another connection is served (in milliseconds; the
        // limit is a floor for a saturated 2-core machine).
        let bystander = tokio::time::timeout(
            Duration::from_secs(10),
            TemplateServiceClient::new(server.channel().await).list_templates(
                proto::ListTemplatesRequest {
                    page_size: 1,
                    page_token: String::new(),
                },
            ),
        )
        .await;
        assert!(matches!(bystander, Ok(Ok(_))), "bystander: {bystander:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed = finished.expect("the job fails");
    let error = failed.error.expect("a failed job says why");
    assert_eq!(error.reason, "RENDER_CRASHED", "{error:?}");
    assert!(
        error.message.contains("longer than"),
        "the message names the protocol violation: {error:?}"
    );
    let grown = server.peak_rss_bytes().saturating_sub(rss_before);
    assert!(
        grown < FLOOD_RSS_BUDGET_BYTES,
        "the server's peak RSS grew by {grown} bytes"
    );
    assert!(
        server.workers().is_empty() && flooders_left(&server).is_empty(),
        "nothing of the flooding worker is left: {:?}",
        flooders_left(&server)
    );
    assert!(server.stop().await);
}

/// Processes of the flooding worker (the script's shell or its awk) still alive.
fn flooders_left(server: &ServerProcess) -> Vec<String> {
    let marker = server
        .data_dir
        .path()
        .join("flooding-worker")
        .display()
        .to_string();
    crate::helpers::live_processes(|cmdline| cmdline.contains(&marker))
        .into_iter()
        // The server names the script in its own arguments.
        .filter(|(pid, _)| *pid != server.pid())
        .map(|(_, cmdline)| cmdline)
        .collect()
}
