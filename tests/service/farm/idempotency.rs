//! Idempotency keys and render de-duplication over the wire, each scenario against both
//! stores: the in-memory one and Redis (a real server on 127.0.0.1:6379, which `./dev test`
//! starts when none answers; every test uses a key prefix of its own). Worker processes are
//! counted by a wrapper script that logs each start and then runs the real worker.

mod store_contract;

use crate::helpers::{
    counting_worker, on_both_stores, redis_url, refusal_delay, small_request, spawn_app_with,
    state, unique_key, unique_prefix, until_answered, with_idempotency_key, with_replayed,
    worker_starts, OwnRedis, Store, TestApp,
};
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto::{self, JobState};
use lottie_render::idempotency::redis_store::RedisStore;
use lottie_render::idempotency::store::IdempotencyStore;
use lottie_render::redis_client::{RedisClient, RedisSettings};
use std::path::Path;
use std::time::Duration;
use tonic::{Code, Status};
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// Loads in the fence, then rlottie refuses it: a deterministic failure in the worker.
const RENDERER_REFUSES: &str = "malformed/keyframe-empty-easing-arrays.json";

/// A server on `store`, with workers counted in `dir/starts`.
async fn app_on(
    store: Store,
    dir: &Path,
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    let worker = counting_worker(dir, &dir.join("starts"));
    spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(worker);
        store.configure(settings);
        configure(settings);
    })
    .await
}

/// Attempts of [`submit_until_answered`]: ABORTED asks for 200 ms, so 300 cover a minute of
/// a concurrent call creating its job (50, ten seconds, ran out beside two busy loops and
/// five builds on 2 cores, load 30, with 200 calls on two instances); UNAVAILABLE asks for a
/// second, so a slow Redis gets minutes to come back. A call never answered still fails.
const SUBMIT_ATTEMPTS: usize = 300;

/// Submits under `key` until answered (`until_answered`: ABORTED and UNAVAILABLE after the
/// delay asked for, a connection closed under the call).
async fn submit_until_answered(
    app: &TestApp,
    key: &str,
    request: proto::RenderRequest,
) -> proto::RenderJob {
    until_answered(SUBMIT_ATTEMPTS, || async {
        app.submit_keyed(key, request.clone())
            .await
            .map(|(job, _)| job)
    })
    .await
}

fn redis_store(settings: &RedisSettings) -> RedisStore {
    RedisStore::new(std::sync::Arc::new(RedisClient::open(settings).unwrap()))
}

async fn a_replay_answers_the_same_job_without_a_worker(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    let key = unique_key();
    let (first, replayed) = app.submit_keyed(&key, request.clone()).await.unwrap();
    assert!(!replayed);
    let done = app.finished(&first.job_id).await;
    assert_eq!(state(&done), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);

    let (again, replayed) = app.submit_keyed(&key, request.clone()).await.unwrap();
    assert!(replayed, "{again:?}");
    assert_eq!(again.job_id, first.job_id);
    assert_eq!(again.output, done.output);
    assert_eq!(worker_starts(dir.path()), 1, "a replay started a worker");
    let bytes = app.download(&again.job_id).await.unwrap();
    assert_eq!(bytes.len() as u64, done.output.unwrap().size_bytes);

    // The same key with another payload is refused, do-not-retry.
    let mut other = request;
    other.output.as_mut().unwrap().fps = 60;
    let status = app.submit_keyed(&key, other).await.unwrap_err();
    let reused = refusal_delay(&status, Code::InvalidArgument, "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(reused, None, "do not retry");
    assert_eq!(
        app.metric("lottie_render_idempotent_replays_total").await,
        1.0
    );
    app.stop().await;
}

const SUBMIT_RENDER: &str = "/lottie.render.v1.RenderService/SubmitRender";

/// `request` as bytes on the wire with its fields in the order `fields` names them
/// (1 template_id, 2 modifications, 3 output) and its colour map entries in the order
/// `colors` names them: protobuf lets a sender write both in any order, and prost always
/// writes fields by number and map entries in its map's order.
fn wire_bytes(request: &proto::RenderRequest, fields: [u32; 3], colors: &[&str]) -> Vec<u8> {
    use prost::encoding::{encode_key, encode_varint, WireType};
    use prost::Message;
    let modifications = request.modifications.clone().unwrap_or_default();
    assert!(modifications.texts.is_empty(), "texts are not reordered");
    assert_eq!(colors.len(), modifications.colors.len());
    let mut entries = Vec::new();
    for id in colors {
        // A Modifications holding one entry is that entry as the map field writes it.
        let mut one = proto::Modifications::default();
        one.colors
            .insert((*id).to_owned(), modifications.colors[*id]);
        entries.extend(one.encode_to_vec());
    }
    let mut bytes = Vec::new();
    for field in fields {
        match field {
            1 => bytes.extend(
                proto::RenderRequest {
                    template_id: request.template_id.clone(),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
            2 => {
                encode_key(2, WireType::LengthDelimited, &mut bytes);
                encode_varint(entries.len() as u64, &mut bytes);
                bytes.extend(&entries);
            }
            3 => bytes.extend(
                proto::RenderRequest {
                    output: request.output.clone(),
                    ..Default::default()
                }
                .encode_to_vec(),
            ),
            _ => unreachable!("RenderRequest has fields 1 to 3"),
        }
    }
    bytes
}

/// SubmitRender of `bytes` as they are, with `key`: the job and whether it was a replay.
async fn submit_bytes_with_key(
    app: &TestApp,
    key: &str,
    bytes: Vec<u8>,
) -> Result<(proto::RenderJob, bool), Status> {
    use prost::Message;
    let response = app
        .raw_unary(SUBMIT_RENDER, with_idempotency_key(bytes, key))
        .await?;
    let (bytes, replayed) = with_replayed(response);
    Ok((
        proto::RenderJob::decode(bytes.as_slice()).unwrap(),
        replayed,
    ))
}

async fn the_same_request_in_another_wire_order_is_a_replay(store: Store) {
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let template = app.create_template(BALL).await;
    let mut request = small_request(&template.template_id, proto::Format::Mp4);
    let mut modifications = proto::Modifications::default();
    modifications
        .colors
        .insert("ball_color".into(), crate::helpers::color(1.0, 0.0, 0.0));
    modifications
        .colors
        .insert("bg_color".into(), crate::helpers::color(0.0, 0.0, 1.0));
    request.modifications = Some(modifications);
    let in_order = wire_bytes(&request, [1, 2, 3], &["ball_color", "bg_color"]);
    let reordered = wire_bytes(&request, [3, 2, 1], &["bg_color", "ball_color"]);
    assert_ne!(in_order, reordered);
    // The same message, as any protobuf reader sees it.
    assert_eq!(
        proto::RenderRequest::decode(in_order.as_slice()).unwrap(),
        request
    );
    assert_eq!(
        proto::RenderRequest::decode(reordered.as_slice()).unwrap(),
        request
    );

    let key = unique_key();
    let (first, replayed) = submit_bytes_with_key(&app, &key, in_order).await.unwrap();
    assert!(!replayed);
    let (again, replayed) = submit_bytes_with_key(&app, &key, reordered).await.unwrap();
    assert!(replayed, "not answered as a replay: {again:?}");
    assert_eq!(again.job_id, first.job_id);
    assert_eq!(app.finished_state(&first.job_id).await, JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1, "the replay started a worker");

    // The key is tied to the payload all the same: other colours (in either order) are
    // another payload.
    let mut other = request;
    other
        .modifications
        .as_mut()
        .unwrap()
        .colors
        .insert("bg_color".into(), crate::helpers::color(0.0, 1.0, 0.0));
    let status = submit_bytes_with_key(
        &app,
        &key,
        wire_bytes(&other, [3, 2, 1], &["bg_color", "ball_color"]),
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_REUSED"
    );
    app.stop().await;
}

async fn two_hundred_concurrent_calls_with_one_key_make_one_job(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Gif);
    let key = unique_key();
    let calls: Vec<_> = (0..200)
        .map(|_| submit_until_answered(&app, &key, request.clone()))
        .collect();
    let jobs = futures_util::future::join_all(calls).await;
    let first = &jobs[0].job_id;
    assert!(jobs.iter().all(|job| &job.job_id == first));
    let done = app.finished(first).await;
    assert_eq!(state(&done), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    app.stop().await;
}

async fn fifty_keys_with_one_payload_share_one_render(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let keys: Vec<String> = (0..50).map(|_| unique_key()).collect();
    let calls: Vec<_> = keys
        .iter()
        .map(|key| submit_until_answered(&app, key, request.clone()))
        .collect();
    let jobs = futures_util::future::join_all(calls).await;
    let mut ids: Vec<&str> = jobs.iter().map(|job| job.job_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 50, "one job per key");
    let mut sha256s = Vec::new();
    for job in &jobs {
        let done = app.finished(&job.job_id).await;
        assert_eq!(state(&done), JobState::Succeeded, "{done:?}");
        let output = done.output.unwrap();
        let bytes = app.download(&job.job_id).await.unwrap();
        assert_eq!(bytes.len() as u64, output.size_bytes);
        sha256s.push(output.sha256);
    }
    sha256s.dedup();
    assert_eq!(sha256s.len(), 1, "identical outputs");
    assert_eq!(worker_starts(dir.path()), 1, "one render for all");
    // Once it has succeeded, the next one is SUCCEEDED at once.
    let late = app.submit(request).await.unwrap();
    assert_eq!(state(&late), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    let joins = app.metric("lottie_render_render_joins_total").await;
    let hits = app.metric("lottie_render_render_cache_hits_total").await;
    assert_eq!(joins + hits, 50.0, "joins {joins}, cache hits {hits}");
    app.stop().await;
}

async fn a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it(store: Store) {
    // A worker that logs its start and then waits, using no CPU: stuck, ended after its
    // one-second budget's stall limit (5 s) and failed transiently, RENDER_DEADLINE_EXCEEDED.
    // (A render that runs out of its CPU budget fails for good: issue 43.)
    let dir = tempfile::tempdir().unwrap();
    let stuck = crate::helpers::stand_in(
        &dir.path().join("stuck-worker"),
        &format!(
            "echo started >> '{}'\ncat > /dev/null\nsleep 60",
            dir.path().join("starts").display()
        ),
    );
    let app = spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(stuck);
        store.configure(settings);
        settings.jobs.max_job_seconds = 1.0;
    })
    .await;
    let hangs = app.create_template(NEVER_FINISHES).await;

    let key = unique_key();
    let request = small_request(&hangs.template_id, proto::Format::Mp4);
    let (first, _) = app.submit_keyed(&key, request.clone()).await.unwrap();
    let done = app.finished(&first.job_id).await;
    assert_eq!(state(&done), JobState::Failed);
    let error = done.error.unwrap();
    assert!(error.retryable, "{error:?}");
    let (retry, replayed) = app.submit_keyed(&key, request).await.unwrap();
    assert!(!replayed);
    assert_ne!(
        retry.job_id, first.job_id,
        "a transient failure released the key"
    );
    assert_eq!(app.finished_state(&retry.job_id).await, JobState::Failed);
    assert_eq!(worker_starts(dir.path()), 2);
    app.stop().await;

    // The deterministic failure on a server with the default deadline.
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let refused = app.create_template(RENDERER_REFUSES).await;
    let key = unique_key();
    let request = small_request(&refused.template_id, proto::Format::Mp4);
    let (first, _) = app.submit_keyed(&key, request.clone()).await.unwrap();
    let done = app.finished(&first.job_id).await;
    assert_eq!(state(&done), JobState::Failed);
    let error = done.error.clone().unwrap();
    assert!(!error.retryable, "{error:?}");
    let (retry, replayed) = app.submit_keyed(&key, request).await.unwrap();
    assert!(replayed);
    assert_eq!(retry.job_id, first.job_id);
    assert_eq!(retry.error, done.error);
    assert_eq!(worker_starts(dir.path()), 1, "no run for the replay");
    app.stop().await;
}

async fn a_cancelled_job_frees_its_key(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    // The retry's render never finishes: the server stops without waiting the default grace
    // (30 s) for it.
    let app = app_on(store, dir.path(), |settings| {
        settings.application.shutdown_grace_seconds = 0.1;
    })
    .await;
    let hangs = app.create_template(NEVER_FINISHES).await;
    let key = unique_key();
    let request = small_request(&hangs.template_id, proto::Format::Gif);
    let (first, _) = app.submit_keyed(&key, request.clone()).await.unwrap();
    app.wait_for_state(&first.job_id, JobState::Running).await;
    let cancelled = app.cancel(&first.job_id).await;
    assert_eq!(state(&cancelled), JobState::Cancelled);
    let (retry, replayed) = app.submit_keyed(&key, request).await.unwrap();
    assert!(!replayed);
    assert_ne!(retry.job_id, first.job_id);
    app.stop().await;
}

#[tokio::test]
async fn with_redis_down_submissions_are_unavailable_and_start_nothing_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = OwnRedis::start();
    let url = redis.url();
    let app = app_on(Store::Redis, dir.path(), |settings| {
        settings.redis.redis_url = Some(url);
        settings.redis.redis_timeout_ms = 300;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Gif);
    let job = app.submit(request.clone()).await.unwrap();
    assert_eq!(app.finished_state(&job.job_id).await, JobState::Succeeded);

    redis.stop();
    let mut other = request.clone();
    other.output.as_mut().unwrap().fps = 60;
    let status = app
        .submit_keyed(&unique_key(), other.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(
        details.error_info().unwrap().reason,
        "IDEMPOTENCY_STORE_UNAVAILABLE"
    );
    assert!(details.retry_info().unwrap().retry_delay.is_some());
    assert!(status.metadata().get("retry-after").is_some());

    redis.restart();
    // Nothing rendered without the check: a job the refused call had queued anyway would be
    // ahead of this one (one worker, first in first out), so it would have started a worker
    // by the time this one is done. Another request (another fingerprint), so that it
    // cannot join such a job instead.
    let mut barrier = request;
    barrier.output.as_mut().unwrap().width = 101;
    let job = app.submit(barrier).await.unwrap();
    assert_eq!(app.finished_state(&job.job_id).await, JobState::Succeeded);
    assert_eq!(
        worker_starts(dir.path()),
        2,
        "the refused call rendered after all"
    );
    let job = app.submit(other).await.unwrap();
    assert_eq!(app.finished_state(&job.job_id).await, JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_key_whose_first_call_died_is_freed_when_its_lease_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let app = app_on(Store::Redis, dir.path(), |settings| {
        settings.redis.redis_key_prefix = prefix.clone();
        settings.idempotency.idempotency_lease_seconds = 3;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    // What a call that died between recording its key and creating its job leaves behind:
    // the key claimed for this request's fingerprint.
    let fingerprint = small_mp4_fingerprint(&template);
    let store = redis_store(&RedisSettings {
        url: redis_url(),
        key_prefix: prefix,
        pool_size: 1,
        timeout: Duration::from_secs(2),
    });
    let key = unique_key();
    store
        .claim(
            &format!("SubmitRender:{key}"),
            &lottie_render::idempotency::store::Claimant::new(fingerprint.as_str()),
            Duration::from_secs(3),
        )
        .await
        .unwrap();
    let status = app.submit_keyed(&key, request.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_some());
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let (job, replayed) = app.submit_keyed(&key, request).await.unwrap();
    assert!(!replayed);
    assert_eq!(app.finished_state(&job.job_id).await, JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    app.stop().await;
}

/// Two servers sharing one Redis (one key prefix) and one data directory, their workers
/// counted in `dir/starts`.
async fn two_instances(dir: &Path, configure: fn(&mut ServerSettings)) -> (TestApp, TestApp) {
    let prefix = unique_prefix();
    let first = app_on(Store::Redis, dir, |settings| {
        settings.redis.redis_key_prefix = prefix.clone();
        configure(settings);
    })
    .await;
    let shared_data = first.data_dir.path().to_path_buf();
    let second = app_on(Store::Redis, dir, |settings| {
        settings.redis.redis_key_prefix = prefix.clone();
        settings.application.data_dir = shared_data;
        configure(settings);
    })
    .await;
    (first, second)
}

#[tokio::test]
async fn two_hundred_calls_with_one_key_spread_over_two_instances_make_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_instances(dir.path(), |_| {}).await;
    let template = a.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Gif);
    let key = unique_key();
    let calls: Vec<_> = (0..200)
        .map(|index| {
            let app = if index % 2 == 0 { &a } else { &b };
            submit_until_answered(app, &key, request.clone())
        })
        .collect();
    let jobs = futures_util::future::join_all(calls).await;
    let first = &jobs[0].job_id;
    assert!(jobs.iter().all(|job| &job.job_id == first));
    // Either instance follows it to the end and serves its output.
    let done = b.finished(first).await;
    assert_eq!(state(&done), JobState::Succeeded, "{done:?}");
    // The other instance reads the shared record, written a moment after the owner's own
    // state changes (replication is asynchronous): it converges.
    a.wait_for_state(first, JobState::Succeeded).await;
    b.wait_for_state(first, JobState::Succeeded).await;
    for app in [&a, &b] {
        let bytes = app.download(first).await.unwrap();
        assert_eq!(bytes.len() as u64, done.output.as_ref().unwrap().size_bytes);
    }
    assert_eq!(worker_starts(dir.path()), 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn fifty_keys_with_one_payload_over_two_instances_share_one_render() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_instances(dir.path(), |_| {}).await;
    let template = a.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    let keys: Vec<String> = (0..50).map(|_| unique_key()).collect();
    let calls: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(index, key)| {
            let app = if index % 2 == 0 { &a } else { &b };
            submit_until_answered(app, key, request.clone())
        })
        .collect();
    let jobs = futures_util::future::join_all(calls).await;
    let mut sha256s = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let app = if index % 2 == 0 { &a } else { &b };
        let done = app.finished(&job.job_id).await;
        assert_eq!(state(&done), JobState::Succeeded, "{done:?}");
        let bytes = app.download(&job.job_id).await.unwrap();
        assert_eq!(bytes.len() as u64, done.output.as_ref().unwrap().size_bytes);
        sha256s.push(done.output.unwrap().sha256);
    }
    sha256s.sort_unstable();
    sha256s.dedup();
    assert_eq!(sha256s.len(), 1, "identical outputs");
    assert_eq!(
        worker_starts(dir.path()),
        1,
        "one render for both instances"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_job_of_one_instance_is_watched_and_cancelled_through_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_instances(dir.path(), |_| {}).await;
    let template = a.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let job = a.submit(request).await.unwrap();
    b.wait_for_state(&job.job_id, JobState::Running).await;
    let (subscribed, subscribed_rx) = tokio::sync::oneshot::channel::<()>();
    let mut stream = b.open_watch(&job.job_id).await;
    let watching = {
        tokio::spawn(async move {
            let mut states = vec![state(&stream.message().await.unwrap().unwrap())];
            let _ = subscribed.send(());
            while let Some(snapshot) = stream.message().await.unwrap() {
                states.push(state(&snapshot));
            }
            states
        })
    };
    // The watch has its first snapshot before the cancel goes out.
    subscribed_rx.await.unwrap();
    let cancelled = b.cancel(&job.job_id).await;
    assert_eq!(state(&cancelled), JobState::Cancelled, "{cancelled:?}");
    let states = tokio::time::timeout(Duration::from_secs(30), watching)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(states.first(), Some(&JobState::Running));
    assert_eq!(states.last(), Some(&JobState::Cancelled));
    assert_eq!(state(&a.get_job(&job.job_id).await), JobState::Cancelled);
    a.stop().await;
    b.stop().await;
}

/// The fingerprint of `small_request(template, Mp4)` (the default tenant's), as the server
/// computes it.
fn small_mp4_fingerprint(template: &proto::Template) -> lottie_render::jobs::Fingerprint {
    lottie_render::jobs::Fingerprint::of(
        &lottie_render::auth::TenantId::default_tenant(),
        &template.sha256,
        &Default::default(),
        &lottie_render::spec::OutputSpec {
            format: lottie_render::spec::Format::Mp4,
            fps: lottie_render::spec::Fps::DEFAULT,
            width: 100.try_into().unwrap(),
            height: 100.try_into().unwrap(),
            background: None,
            ..Default::default()
        },
    )
}

/// Every job record under `prefix` in Redis.
async fn shared_job_records(prefix: &str) -> Vec<lottie_render::jobs::Job> {
    let mut connection = crate::helpers::connect(&redis_url()).await;
    let keys: Vec<String> = deadpool_redis::redis::cmd("KEYS")
        .arg(format!("{prefix}job:*"))
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for key in keys {
        let json: String = deadpool_redis::redis::cmd("GET")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        jobs.push(serde_json::from_str(&json).unwrap());
    }
    jobs
}

/// A SubmitRender refused JOB_STORE_UNAVAILABLE after its key was claimed and its job record
/// published (the render index failed next) leaves neither its key claimed nor a record of a
/// job nobody will run: the retry with the same key is a new job at once (not ABORTED until
/// the lease runs out), rendered once, and the refused job's record ends failed (a retry
/// that found it in the render index would otherwise follow it for an hour).
#[tokio::test]
async fn a_job_refused_half_shared_frees_its_key_and_ends_its_record() {
    use deadpool_redis::redis::AsyncCommands;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let app = app_on(Store::Redis, dir.path(), |settings| {
        settings.redis.redis_key_prefix = prefix.clone();
        // The record must be written and the claim refused; on a loaded machine the record's
        // write could time out at the default 500 ms, which answers the same code without a
        // record. This test is about the claim, not a slow Redis.
        settings.redis.redis_timeout_ms = 5_000;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    // This request's render index entry made unreadable (a hash where a job id belongs):
    // publishing the job's record works, claiming its render fails.
    let render_key = format!("{prefix}render:{}", small_mp4_fingerprint(&template));
    let mut redis = crate::helpers::connect(&redis_url()).await;
    let _: i64 = redis.hset(&render_key, "not", "a job id").await.unwrap();

    let key = unique_key();
    let status = app.submit_keyed(&key, request.clone()).await.unwrap_err();
    crate::helpers::refusal_delay(&status, Code::Unavailable, "JOB_STORE_UNAVAILABLE")
        .expect("a retry delay");
    // Ended in the background, at once when Redis answers: polled with a generous deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let records = shared_job_records(&prefix).await;
        assert_eq!(records.len(), 1, "{records:?}");
        if records[0].state == lottie_render::jobs::JobState::Failed {
            break records;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the refused job's record never ended: {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        refused[0].error.as_ref().map(|error| error.reason.as_str()),
        Some("JOB_STORE_UNAVAILABLE")
    );

    let _: i64 = redis.del(&render_key).await.unwrap();
    let (job, replayed) = app.submit_keyed(&key, request).await.unwrap();
    assert!(!replayed);
    assert_ne!(job.job_id, refused[0].id.to_string());
    assert_eq!(app.finished_state(&job.job_id).await, JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    app.stop().await;
}

on_both_stores!(
    a_replay_answers_the_same_job_without_a_worker,
    the_same_request_in_another_wire_order_is_a_replay,
    two_hundred_concurrent_calls_with_one_key_make_one_job,
    fifty_keys_with_one_payload_share_one_render,
    a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it,
    a_cancelled_job_frees_its_key,
);
