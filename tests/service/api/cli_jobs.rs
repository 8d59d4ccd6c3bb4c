//! The client's job verbs and its exit codes as the README states them, run as a person
//! runs them (the real binary against a real server): `job watch` exits as its job ended (0
//! succeeded, 75 cancelled: worth submitting again), `job cancel` cancels, a refusal worth
//! retrying exits 75 and prints its delay, `LOTTIE_RENDER_SERVER` names the server when
//! `--server` does not, `job download` checks the bytes against the job's sha256 and
//! leaves nothing behind when they do not match, and `job list` prints the jobs newest first.

use super::cli_flags::{assert_exit, field, lottie_render};
use crate::helpers::*;
use lottie_render::grpc::proto;

const BALL: &str = "slots-ball-colors-opacity.json";
/// A real template on which rlottie never finishes: its job runs until cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn job_watch_and_cancel_exit_as_the_job_ended_and_a_full_queue_exits_75_with_its_delay() {
    let app = spawn_app_with(|settings| settings.jobs.queue_capacity = 1).await;
    let never = app.create_template(NEVER_FINISHES).await;
    let running = app
        .start_running(small_request(&never.template_id, proto::Format::Gif))
        .await;
    let submit = |width: &'static str| {
        let (template_id, app) = (never.template_id.clone(), &app);
        async move {
            lottie_render(
                Some(app.address),
                &[
                    "submit",
                    "--template",
                    &template_id,
                    "--format",
                    "gif",
                    "--width",
                    width,
                    "--height",
                    "100",
                ],
                &[],
            )
            .await
        }
    };
    // The one queue slot: taken by a job that waits behind the running one.
    let queued = submit("101").await;
    assert_exit(&queued, 0);
    assert_eq!(field(&queued, "state"), "QUEUED");
    let queued_id = field(&queued, "job");
    let refused = submit("102").await;
    assert_exit(&refused, 75);
    let said = stderr(&refused);
    assert!(said.contains("[QUEUE_FULL]"), "{said}");
    assert!(said.contains("retry after"), "the delay is printed: {said}");

    let cancelled = lottie_render(Some(app.address), &["job", "cancel", &queued_id], &[]).await;
    assert_exit(&cancelled, 0);
    assert_eq!(field(&cancelled, "state"), "CANCELLED");
    assert_eq!(
        state(&app.get_job(&queued_id).await),
        proto::JobState::Cancelled
    );
    let watched = lottie_render(Some(app.address), &["job", "watch", &queued_id], &[]).await;
    assert_exit(&watched, 75);
    assert_eq!(field(&watched, "state"), "CANCELLED");

    // A watch followed to a success.
    app.cancel(&running.job_id).await;
    let ball = app.create_template(BALL).await;
    let job = app.submit_small(&ball, proto::Format::Gif).await;
    let watched = lottie_render(Some(app.address), &["job", "watch", &job.job_id], &[]).await;
    assert_exit(&watched, 0);
    assert_eq!(field(&watched, "state"), "SUCCEEDED");
    assert!(field(&watched, "output").starts_with("image/gif"));
    app.stop().await;
}

#[tokio::test]
async fn lottie_render_server_names_the_server_and_a_download_that_does_not_match_is_refused() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let ball = app.create_template(BALL).await;
    let job = app
        .render(small_request(&ball.template_id, proto::Format::Gif))
        .await;
    let server = format!("http://{}", app.address);
    let from_env = [("LOTTIE_RENDER_SERVER", server.as_str())];

    // Without --server: the variable's server, or a refusal naming the server it named.
    let listed = lottie_render(None, &["template", "list"], &from_env).await;
    assert_exit(&listed, 0);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&ball.template_id),
        "{listed:?}"
    );
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = lottie_render(
        None,
        &["template", "list"],
        &[("LOTTIE_RENDER_SERVER", nobody.as_str())],
    )
    .await;
    assert_exit(&unreachable, 75);
    assert!(
        stderr(&unreachable).contains(&format!("cannot connect to {nobody}")),
        "{}",
        stderr(&unreachable)
    );

    let good = dir.path().join("ball.gif");
    let downloaded = lottie_render(
        None,
        &["job", "download", &job.job_id, "-o", good.to_str().unwrap()],
        &from_env,
    )
    .await;
    assert_exit(&downloaded, 0);
    let expected = app.download(&job.job_id).await.unwrap();
    assert!(std::fs::read(&good).unwrap() == expected);

    // The stored output changed under the server (one byte, the size kept): the server
    // streams what it has; the client refuses it against the job's sha256.
    let stored = files_under(app.data_dir.path())
        .into_iter()
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy() == format!("{}.gif", job.job_id))
        })
        .expect("the output in the data directory");
    let mut bytes = std::fs::read(&stored).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&stored, &bytes).unwrap();
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    let target = damaged.join("ball.gif");
    let refused = lottie_render(
        None,
        &[
            "job",
            "download",
            &job.job_id,
            "-o",
            target.to_str().unwrap(),
        ],
        &from_env,
    )
    .await;
    assert_exit(&refused, 75);
    assert!(
        stderr(&refused).contains("does not match the job's output"),
        "{}",
        stderr(&refused)
    );
    let left: Vec<_> = std::fs::read_dir(&damaged).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    app.stop().await;
}

#[tokio::test]
async fn job_list_prints_the_jobs_newest_first_and_its_filters_keep_their_own() {
    let app = spawn_app().await;
    let ball = app.create_template(BALL).await;
    let first = app
        .render(small_request(&ball.template_id, proto::Format::Gif))
        .await;
    let second = app.submit_small(&ball, proto::Format::Gif).await;
    let listed = lottie_render(Some(app.address), &["job", "list"], &[]).await;
    assert_exit(&listed, 0);
    let lines: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with(&second.job_id), "{lines:?}");
    assert!(lines[1].starts_with(&first.job_id), "{lines:?}");
    assert!(lines[0].contains("SUCCEEDED"), "{lines:?}");
    let failed = lottie_render(
        Some(app.address),
        &["job", "list", "--state", "failed"],
        &[],
    )
    .await;
    assert_exit(&failed, 0);
    assert!(
        failed.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&failed.stdout)
    );
    let bad = lottie_render(Some(app.address), &["job", "list", "--state", "done"], &[]).await;
    // Refused by the command line's parser (clap's own exit code), naming the states.
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("one of queued, running"),
        "{}",
        stderr(&bad)
    );
    let refused = lottie_render(Some(app.address), &["job", "list", "--reason", "NOPE"], &[]).await;
    assert_exit(&refused, 65);
    assert!(
        stderr(&refused).contains("[REQUEST_INVALID]"),
        "{}",
        stderr(&refused)
    );
    app.stop().await;
}
