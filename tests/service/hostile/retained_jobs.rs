//! The jobs a caller can make the server keep (issue 21, items 2 and 7): identical requests
//! under fresh idempotency keys, each SUCCEEDED at once from the stored output, stay within
//! the tenant's bound of jobs kept (the oldest ended ones are forgotten) while another tenant
//! is served; with Redis, submissions refused for the tenant's job limit leave nothing there.

use crate::helpers::{
    connect, reason, redis_url, small_request, spawn_app_with_keys, unique_key, unique_prefix,
    with_idempotency_key, Hold, TestApp,
};
use futures_util::StreamExt;
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto::{self, JobState};
use std::collections::HashMap;
use std::time::Duration;
use tonic::Code;

const BALL: &str = "slots-ball-colors-opacity.json";
const ACME: &str = "acme-secret-key";
const GLOBEX: &str = "globex-secret-key";

/// A server with tenants acme and globex (API keys required), its helper clients calling as
/// acme.
async fn acme_app(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    let keys = [("acme", "billing", ACME), ("globex", "ops", GLOBEX)];
    let app = spawn_app_with_keys(dir, &keys, configure).await;
    app.use_api_key(Some(ACME));
    app
}

/// Acme's ball template rendered once: the request and its succeeded job.
async fn rendered_once(app: &TestApp) -> (proto::RenderRequest, proto::RenderJob) {
    let template = app.create_template(BALL).await.template_id;
    let request = small_request(&template, proto::Format::Gif);
    let rendered = app.submit(request.clone()).await.unwrap();
    app.wait_for_state(&rendered.job_id, JobState::Succeeded)
        .await;
    (request, rendered)
}

/// The attack: `request` `count` times, each under a key of its own, `concurrency` at once;
/// the jobs, every one accepted.
async fn reused_under_fresh_keys(
    app: &TestApp,
    request: &proto::RenderRequest,
    count: usize,
    concurrency: usize,
) -> Vec<proto::RenderJob> {
    let client = app.renders();
    let answers: Vec<_> = futures_util::stream::iter(0..count)
        .map(|_| {
            let (mut client, request) = (client.clone(), request.clone());
            async move {
                client
                    .submit_render(with_idempotency_key(request, &unique_key()))
                    .await
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    answers
        .into_iter()
        .map(|answer| {
            answer
                .expect("a reuse is accepted: old ended jobs make room")
                .into_inner()
        })
        .collect()
}

/// Checks that each of `ids` is NOT_FOUND.
async fn assert_gone<'a>(app: &TestApp, ids: impl IntoIterator<Item = &'a String>) {
    for gone in ids {
        let status = app.try_get_job(gone).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{gone}: {status:?}");
    }
}

#[tokio::test]
async fn a_thousand_instant_reuses_under_fresh_keys_keep_the_tenants_bound_and_evict_the_oldest() {
    const BOUND: u32 = 40;
    const REUSES: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let app = acme_app(dir.path(), |settings| {
        settings.jobs.retained.max_retained_jobs_per_tenant = BOUND;
    })
    .await;
    let (request, rendered) = rendered_once(&app).await;

    // The attack: the same request again and again, each under a key of its own.
    let mut reused = Vec::new();
    for job in reused_under_fresh_keys(&app, &request, REUSES, 8).await {
        assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
        reused.push(job.job_id);
    }

    // The tenant keeps its bound, no more: the oldest went, the newest answer.
    assert_eq!(
        app.metric("lottie_render_jobs_retained").await,
        f64::from(BOUND)
    );
    assert_eq!(
        app.metric("lottie_render_jobs_evicted_total").await,
        (REUSES + 1) as f64 - f64::from(BOUND)
    );
    let bytes = app.metric("lottie_render_jobs_retained_bytes").await;
    assert!(
        bytes > 0.0 && bytes < f64::from(BOUND) * 4096.0,
        "{bytes} bytes for {BOUND} jobs"
    );
    assert_gone(&app, [&rendered.job_id, &reused[0], &reused[REUSES / 2]]).await;
    let newest = app.get_job(&reused[REUSES - 1]).await;
    assert_eq!(newest.state, JobState::Succeeded as i32);
    app.download(&newest.job_id).await.unwrap();
    // Every one of them reused the output (the evicted render was not rendered again).
    assert_eq!(
        app.metric("lottie_render_render_cache_hits_total").await,
        REUSES as f64
    );

    // Another tenant is served, and its job is counted apart.
    app.use_api_key(Some(GLOBEX));
    let other_template = app.create_template(BALL).await.template_id;
    let other = app
        .submit(small_request(&other_template, proto::Format::Gif))
        .await
        .unwrap();
    app.wait_for_state(&other.job_id, JobState::Succeeded).await;
    assert_eq!(
        app.metric("lottie_render_jobs_retained").await,
        f64::from(BOUND) + 1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_submission_is_refused_with_a_delay_while_every_job_the_tenant_keeps_is_unended() {
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let app = acme_app(dir.path(), |settings| {
        settings.render_workers.worker_executable = Some(hold.script.clone());
        settings.application.shutdown_grace_seconds = 0.1;
        settings.jobs.retained.max_retained_jobs_per_tenant = 2;
    })
    .await;
    let (request, _) = rendered_once(&app).await;
    // Two renders held (one running, one queued): the second makes the ended one go, and
    // then the tenant's two jobs kept have not ended.
    hold.engage();
    let mut unended = Vec::new();
    for width in [101, 102] {
        let mut other = request.clone();
        other.output.as_mut().unwrap().width = width;
        unended.push(app.submit(other).await.unwrap().job_id);
    }
    hold.wait_for_held(1).await;
    let refused = app.submit(request.clone()).await.unwrap_err();
    let delay =
        crate::helpers::refusal_delay(&refused, Code::ResourceExhausted, "RETAINED_JOBS_FULL");
    assert!(
        delay.is_some_and(|delay| delay >= Duration::from_secs(1)),
        "{refused:?}"
    );
    hold.let_go();
    for id in &unended {
        app.wait_for_state(id, JobState::Succeeded).await;
    }
    // Ended now, they make room again.
    app.submit(request).await.unwrap();
    app.stop().await;
}

/// Every key under `prefix` with its time to live in ms (-1: none).
async fn keys_under(prefix: &str) -> HashMap<String, i64> {
    use deadpool_redis::redis::AsyncCommands;
    let mut connection = connect(&redis_url()).await;
    let keys: Vec<String> = connection.keys(format!("{prefix}*")).await.unwrap();
    let mut ttls = HashMap::new();
    for key in keys {
        let ttl: i64 = connection.pttl(&key).await.unwrap();
        ttls.insert(key, ttl);
    }
    ttls
}

#[tokio::test]
async fn submissions_refused_for_the_job_limit_leave_nothing_in_redis() {
    const REFUSALS: u32 = 200;
    let prefix = unique_prefix();
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let app = acme_app(dir.path(), |settings| {
        settings.render_workers.worker_executable = Some(hold.script.clone());
        settings.application.shutdown_grace_seconds = 0.1;
        settings.redis.redis_url = Some(redis_url());
        settings.redis.redis_key_prefix = prefix.clone();
        settings.jobs.tenant_max_jobs = Some(1);
    })
    .await;
    let template = app.create_template(BALL).await.template_id;
    hold.engage();
    let held = app
        .submit(small_request(&template, proto::Format::Gif))
        .await
        .unwrap();
    hold.wait_for_held(1).await;
    app.wait_for_state(&held.job_id, JobState::Running).await;
    let before = keys_under(&prefix).await;

    // Each another request (another width, another render), each refused for the limit.
    for refusal in 0..REFUSALS {
        let mut request = small_request(&template, proto::Format::Gif);
        request.output.as_mut().unwrap().width = 120 + refusal;
        let refused = app.submit(request).await.unwrap_err();
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert_eq!(reason(&refused), "TENANT_JOB_LIMIT");
    }

    let after = keys_under(&prefix).await;
    let left: Vec<_> = after
        .iter()
        .filter(|(key, _)| !before.contains_key(*key))
        .collect();
    assert!(
        left.is_empty(),
        "{} keys left by {REFUSALS} refusals: {left:?}",
        left.len()
    );
    let job_records = after.keys().filter(|key| key.contains(":job:")).count();
    assert_eq!(job_records, 1, "only the admitted job's record: {after:?}");
    hold.let_go();
    app.wait_for_state(&held.job_id, JobState::Succeeded).await;
    app.stop().await;
}

/// With Redis (issue 21, item 2): the jobs evicted from the board are gone for every
/// lookup at once (their shared records, written by a task that may lag behind a burst of
/// reuses, must not answer for them meanwhile), their records are removed, and a reuse after
/// the render was evicted reuses the newest reuse's output instead of rendering again.
#[tokio::test]
async fn instant_reuses_with_redis_evict_the_oldest_jobs_and_their_shared_records() {
    const BOUND: u32 = 40;
    const REUSES: usize = 400;
    // Reuses sent at once: the server may admit them in another order than they were sent,
    // so which of the reuses this close to the bound were evicted is not known.
    const CONCURRENCY: usize = 8;
    let prefix = unique_prefix();
    let dir = tempfile::tempdir().unwrap();
    let app = acme_app(dir.path(), |settings| {
        settings.redis.redis_url = Some(redis_url());
        settings.redis.redis_key_prefix = prefix.clone();
        settings.jobs.retained.max_retained_jobs_per_tenant = BOUND;
    })
    .await;
    let (request, rendered) = rendered_once(&app).await;

    let mut reused = Vec::new();
    for job in reused_under_fresh_keys(&app, &request, REUSES, CONCURRENCY).await {
        assert_eq!(
            job.state,
            JobState::Succeeded as i32,
            "every one reuses the output, the evicted render's too: {job:?}"
        );
        reused.push(job.job_id);
    }

    // At once, whatever the shared records have caught up with: the oldest went.
    let evicted: Vec<&String> = std::iter::once(&rendered.job_id)
        .chain(&reused[..REUSES - BOUND as usize - CONCURRENCY])
        .collect();
    let kept = &reused[REUSES - BOUND as usize + CONCURRENCY..];
    let sampled = [
        evicted[0],
        evicted[1],
        evicted[evicted.len() / 2],
        evicted[evicted.len() - 2],
        evicted[evicted.len() - 1],
    ];
    assert_gone(&app, sampled).await;
    let newest = app.get_job(&reused[REUSES - 1]).await;
    assert_eq!(newest.state, JobState::Succeeded as i32);
    app.download(&newest.job_id).await.unwrap();
    assert_eq!(
        app.metric("lottie_render_jobs_retained").await,
        f64::from(BOUND)
    );
    assert_eq!(
        app.metric("lottie_render_render_cache_hits_total").await,
        REUSES as f64,
        "nothing rendered again"
    );

    // Their records go too (once the writer of shared records has caught up): only the
    // kept jobs' stay.
    let job_key = |id: &str| format!("{prefix}job:{id}");
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    let (left, missing) = loop {
        let records = keys_under(&prefix).await;
        let left: Vec<&String> = evicted
            .iter()
            .copied()
            .filter(|gone| records.contains_key(&job_key(gone)))
            .collect();
        let missing: Vec<&String> = kept
            .iter()
            .filter(|kept| !records.contains_key(&job_key(kept)))
            .collect();
        if (left.is_empty() && missing.is_empty()) || std::time::Instant::now() > give_up {
            break (left, missing);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(left.is_empty(), "evicted jobs still in Redis: {left:?}");
    assert!(missing.is_empty(), "kept jobs not in Redis: {missing:?}");
    app.stop().await;
}
