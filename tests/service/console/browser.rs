//! A person's walk through the console in Debian's headless Chromium, driven over WebDriver
//! (`tests/console/walk_console.py`: Debian's python3-selenium and chromium-driver, which
//! `./dev test` installs), against the real server: with API keys (the key refused, then
//! entered; hostile texts in every field a caller controls; a refused request's field errors;
//! a failed job's reason; a cancel; a webhook delivery's attempts; the status page shown to an operator and refused to a
//! caller that is none), and with authentication off (a download; where everyone may read the
//! status). Each walk leaves a screenshot of each
//! page in `target/console-screenshots/` (those in docs/images/console/ were taken so).

use crate::api::webhooks::{secrets_file, SECRET};
use crate::helpers::*;
use lottie_render::webhooks::settings::Networks;
use std::path::PathBuf;

/// An operator's key (it may read the service's status), and a key of the same tenant that
/// is no operator's.
const KEY: &str = "console-walk-key-0123456789abcdef";
const OTHER_KEY: &str = "console-walk-other-key-0123456789";
/// Renders forever (an rlottie loop): it fails once its budget is spent, or is cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// A render's longest run here: the template that never finishes fails after some 4 s of
/// CPU (its budget plus a second) instead of the default half minute; the walk's own renders
/// (a 1 s 320×180 MP4 and PNG stills) take a fraction of it.
const MAX_JOB_SECONDS: f64 = 3.0;
/// An image asset, so an image slot.
const IMAGE_SLOT: &str = "image-base64-heart.json";
/// Uploaded beside the walk's template when authentication is off.
const GALLERY: [&str; 2] = [
    "slots-ball-colors-opacity.json",
    "slots-transform-lottie-docs.json",
];

fn screenshots(walk: &str) -> PathBuf {
    // CARGO_TARGET_TMPDIR is target/tmp: the screenshots go beside it.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("console-screenshots")
        .join(walk)
}

/// Runs the walk against `app` (blocking, off the runtime that serves it) and fails with its
/// report when a step was not seen.
async fn walk(app: &TestApp, walk: &str, extra: Vec<String>) {
    let mut args = vec![
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/console/walk_console.py").to_owned(),
        "--base".to_owned(),
        format!("http://{}", app.address),
        "--screenshots".to_owned(),
        screenshots(walk).display().to_string(),
    ];
    args.extend(extra);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("/usr/bin/python3")
            .args(&args)
            .output()
            .expect("python3 with selenium (./dev installs python3-selenium)")
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    assert!(
        output.status.success(),
        "the walk failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn a_person_walks_the_console_in_chromium_with_an_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let keys = [("acme", "alice", KEY), ("acme", "bob", OTHER_KEY)];
    let secrets = secrets_file(dir.path(), &format!("acme {SECRET}\n"));
    let app = spawn_app_with_keys(dir.path(), &keys, |settings| {
        settings.render_workers.workers = Some(2);
        settings.jobs.max_job_seconds = MAX_JOB_SECONDS;
        settings.auth.operators = vec!["acme/alice".parse().unwrap()];
        // The walk's webhook receiver listens on 127.0.0.1, over plain HTTP.
        settings.webhooks.webhook_secrets = Some(secrets);
        settings.webhooks.webhook_allow_http = true;
        settings.webhooks.webhook_allow_networks =
            Some(Networks(vec!["127.0.0.0/8".parse().unwrap()]));
    })
    .await;
    let hang = corpus_path(NEVER_FINISHES);
    walk(
        &app,
        "with-key",
        vec![
            "--key".into(),
            KEY.into(),
            "--other-key".into(),
            OTHER_KEY.into(),
            "--full".into(),
            "--hang-template".into(),
            hang.display().to_string(),
        ],
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_person_walks_the_console_in_chromium_without_authentication() {
    let app = spawn_app_with(|settings| {
        settings.render_workers.workers = Some(2);
        settings.jobs.max_job_seconds = MAX_JOB_SECONDS;
    })
    .await;
    // Two templates of the corpus beside the walk's own, so the gallery shows slots of
    // every kind.
    let mut extra = Vec::new();
    for file in GALLERY {
        extra.extend([
            "--also-upload".to_owned(),
            corpus_path(file).display().to_string(),
        ]);
    }
    // A template with an image slot: the walk uploads a picture for it.
    extra.extend([
        "--image-template".to_owned(),
        corpus_path(IMAGE_SLOT).display().to_string(),
    ]);
    walk(&app, "no-auth", extra).await;
    app.stop().await;
}
