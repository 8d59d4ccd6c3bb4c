//! Idempotency keys and render de-duplication over the wire, each scenario against both
//! stores: the in-memory one and Redis (a real server on 127.0.0.1:6379, which `./dev test`
//! starts when none answers; every test uses a key prefix of its own). Worker processes are
//! counted by a wrapper script that logs each start and then runs the real worker.

use crate::helpers::{small_request, spawn_app_with, unique_key, TestApp, WATCH_LIMIT};
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto::{self, JobState};
use lottie_render::idempotency::redis_store::RedisStore;
use lottie_render::idempotency::store::{contract, IdempotencyStore};
use lottie_render::redis_client::{RedisClient, RedisSettings};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// Loads in the fence, then rlottie refuses it: a deterministic failure in the worker.
const RENDERER_REFUSES: &str = "malformed/keyframe-empty-easing-arrays.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Memory,
    Redis,
}

pub(crate) fn redis_url() -> String {
    std::env::var("LOTTIE_RENDER_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

static PREFIXES: AtomicU64 = AtomicU64::new(0);

/// A Redis key prefix no other test (or run) uses.
pub(crate) fn unique_prefix() -> String {
    format!(
        "lottie-render-test:{}:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
        PREFIXES.fetch_add(1, Ordering::SeqCst)
    )
}

/// A worker stand-in that logs its start to `count_file`, then runs the real worker.
pub(crate) fn counting_worker(dir: &Path, count_file: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("counting-worker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho started >> '{}'\nexec '{}' \"$@\"\n",
            count_file.display(),
            env!("CARGO_BIN_EXE_lottie-render")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A server on `store`, with workers counted in `dir/starts`.
async fn app_on(store: Store, dir: &Path, configure: impl FnOnce(&mut ServerSettings)) -> TestApp {
    let worker = counting_worker(dir, &dir.join("starts"));
    spawn_app_with(|settings| {
        settings.worker_executable = Some(worker);
        if store == Store::Redis {
            settings.redis_url = Some(redis_url());
            settings.redis_key_prefix = unique_prefix();
        }
        configure(settings);
    })
    .await
}

pub(crate) fn worker_starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

async fn submit_with_key(
    app: &TestApp,
    key: &str,
    request: proto::RenderRequest,
) -> Result<(proto::RenderJob, bool), Status> {
    let mut request = Request::new(request);
    request
        .metadata_mut()
        .insert("idempotency-key", key.parse().unwrap());
    let response = app.renders().submit_render(request).await?;
    let replayed = response
        .metadata()
        .get("idempotent-replayed")
        .is_some_and(|value| value == "true");
    Ok((response.into_inner(), replayed))
}

/// Submits, retrying ABORTED (a concurrent call with the key is creating its job) after the
/// delay the server asks for, as a well-behaved client does.
async fn submit_until_answered(
    app: &TestApp,
    key: &str,
    request: proto::RenderRequest,
) -> proto::RenderJob {
    for _ in 0..50 {
        match submit_with_key(app, key, request.clone()).await {
            Ok((job, _)) => return job,
            Err(status) if status.code() == Code::Aborted => {
                let delay = status
                    .get_error_details()
                    .retry_info()
                    .and_then(|info| info.retry_delay)
                    .unwrap();
                tokio::time::sleep(delay).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    panic!("still ABORTED after 50 attempts");
}

fn state(job: &proto::RenderJob) -> JobState {
    JobState::try_from(job.state).unwrap()
}

async fn finished(app: &TestApp, job_id: &str) -> proto::RenderJob {
    app.watch(job_id, WATCH_LIMIT).await.pop().unwrap()
}

fn redis_store(settings: &RedisSettings) -> RedisStore {
    RedisStore::new(std::sync::Arc::new(RedisClient::open(settings).unwrap()))
}

#[tokio::test]
async fn the_redis_store_keeps_the_store_contract() {
    let store = redis_store(&RedisSettings {
        url: redis_url(),
        key_prefix: unique_prefix(),
        pool_size: 4,
        timeout: Duration::from_secs(2),
    });
    contract::run(&store, "contract").await.unwrap();
}

async fn a_replay_answers_the_same_job_without_a_worker(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    let key = unique_key();
    let (first, replayed) = submit_with_key(&app, &key, request.clone()).await.unwrap();
    assert!(!replayed);
    let done = finished(&app, &first.job_id).await;
    assert_eq!(state(&done), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);

    let (again, replayed) = submit_with_key(&app, &key, request.clone()).await.unwrap();
    assert!(replayed, "{again:?}");
    assert_eq!(again.job_id, first.job_id);
    assert_eq!(again.output, done.output);
    assert_eq!(worker_starts(dir.path()), 1, "a replay started a worker");
    let bytes = app.download(&again.job_id).await.unwrap();
    assert_eq!(bytes.len() as u64, done.output.unwrap().size_bytes);

    // The same key with another payload is refused, do-not-retry.
    let mut other = request;
    other.output.as_mut().unwrap().fps = 60;
    let status = submit_with_key(&app, &key, other).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_REUSED"
    );
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
    assert_eq!(
        app.metric("lottie_render_idempotent_replays_total").await,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_replay_answers_the_same_job_without_a_worker_in_memory() {
    a_replay_answers_the_same_job_without_a_worker(Store::Memory).await;
}

#[tokio::test]
async fn a_replay_answers_the_same_job_without_a_worker_with_redis() {
    a_replay_answers_the_same_job_without_a_worker(Store::Redis).await;
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
                    output: request.output,
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
    let mut request = Request::new(bytes);
    request
        .metadata_mut()
        .insert("idempotency-key", key.parse().unwrap());
    let response = app.raw_unary(SUBMIT_RENDER, request).await?;
    let replayed = response
        .metadata()
        .get("idempotent-replayed")
        .is_some_and(|value| value == "true");
    let job = proto::RenderJob::decode(response.into_inner().as_slice()).unwrap();
    Ok((job, replayed))
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
    assert_eq!(
        state(&finished(&app, &first.job_id).await),
        JobState::Succeeded
    );
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

#[tokio::test]
async fn the_same_request_in_another_wire_order_is_a_replay_in_memory() {
    the_same_request_in_another_wire_order_is_a_replay(Store::Memory).await;
}

#[tokio::test]
async fn the_same_request_in_another_wire_order_is_a_replay_with_redis() {
    the_same_request_in_another_wire_order_is_a_replay(Store::Redis).await;
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
    let done = finished(&app, first).await;
    assert_eq!(state(&done), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    app.stop().await;
}

#[tokio::test]
async fn two_hundred_concurrent_calls_with_one_key_make_one_job_in_memory() {
    two_hundred_concurrent_calls_with_one_key_make_one_job(Store::Memory).await;
}

#[tokio::test]
async fn two_hundred_concurrent_calls_with_one_key_make_one_job_with_redis() {
    two_hundred_concurrent_calls_with_one_key_make_one_job(Store::Redis).await;
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
        let done = finished(&app, &job.job_id).await;
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
    let (late, _) = submit_with_key(&app, &unique_key(), request).await.unwrap();
    assert_eq!(state(&late), JobState::Succeeded);
    assert_eq!(worker_starts(dir.path()), 1);
    let joins = app.metric("lottie_render_render_joins_total").await;
    let hits = app.metric("lottie_render_render_cache_hits_total").await;
    assert_eq!(joins + hits, 50.0, "joins {joins}, cache hits {hits}");
    app.stop().await;
}

#[tokio::test]
async fn fifty_keys_with_one_payload_share_one_render_in_memory() {
    fifty_keys_with_one_payload_share_one_render(Store::Memory).await;
}

#[tokio::test]
async fn fifty_keys_with_one_payload_share_one_render_with_redis() {
    fifty_keys_with_one_payload_share_one_render(Store::Redis).await;
}

async fn a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it(store: Store) {
    // A 1 s deadline makes the hanging render fail (transiently) quickly; it cannot be the
    // deadline of the deterministic failure below, which a slow machine could take longer
    // than 1 s to reach (and would then see as a transient timeout).
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |settings| settings.max_job_seconds = 1.0).await;
    let hangs = app.create_template(NEVER_FINISHES).await;

    let key = unique_key();
    let request = small_request(&hangs.template_id, proto::Format::Mp4);
    let (first, _) = submit_with_key(&app, &key, request.clone()).await.unwrap();
    let done = finished(&app, &first.job_id).await;
    assert_eq!(state(&done), JobState::Failed);
    assert!(done.error.unwrap().retryable);
    let (retry, replayed) = submit_with_key(&app, &key, request).await.unwrap();
    assert!(!replayed);
    assert_ne!(
        retry.job_id, first.job_id,
        "a transient failure released the key"
    );
    assert_eq!(
        state(&finished(&app, &retry.job_id).await),
        JobState::Failed
    );
    assert_eq!(worker_starts(dir.path()), 2);
    app.stop().await;

    // The deterministic failure on a server with the default deadline.
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let refused = app.create_template(RENDERER_REFUSES).await;
    let key = unique_key();
    let request = small_request(&refused.template_id, proto::Format::Mp4);
    let (first, _) = submit_with_key(&app, &key, request.clone()).await.unwrap();
    let done = finished(&app, &first.job_id).await;
    assert_eq!(state(&done), JobState::Failed);
    let error = done.error.clone().unwrap();
    assert!(!error.retryable, "{error:?}");
    let (retry, replayed) = submit_with_key(&app, &key, request).await.unwrap();
    assert!(replayed);
    assert_eq!(retry.job_id, first.job_id);
    assert_eq!(retry.error, done.error);
    assert_eq!(worker_starts(dir.path()), 1, "no run for the replay");
    app.stop().await;
}

#[tokio::test]
async fn a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it_in_memory() {
    a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it(Store::Memory).await;
}

#[tokio::test]
async fn a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it_with_redis() {
    a_transient_failure_frees_the_key_and_a_deterministic_one_pins_it(Store::Redis).await;
}

async fn a_cancelled_job_frees_its_key(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = app_on(store, dir.path(), |_| {}).await;
    let hangs = app.create_template(NEVER_FINISHES).await;
    let key = unique_key();
    let request = small_request(&hangs.template_id, proto::Format::Gif);
    let (first, _) = submit_with_key(&app, &key, request.clone()).await.unwrap();
    app.wait_for_state(&first.job_id, JobState::Running).await;
    let cancelled = app.cancel(&first.job_id).await;
    assert_eq!(state(&cancelled), JobState::Cancelled);
    let (retry, replayed) = submit_with_key(&app, &key, request).await.unwrap();
    assert!(!replayed);
    assert_ne!(retry.job_id, first.job_id);
    app.stop().await;
}

#[tokio::test]
async fn a_cancelled_job_frees_its_key_in_memory() {
    a_cancelled_job_frees_its_key(Store::Memory).await;
}

#[tokio::test]
async fn a_cancelled_job_frees_its_key_with_redis() {
    a_cancelled_job_frees_its_key(Store::Redis).await;
}

/// A redis-server of this test's own on a spare port, stopped when dropped.
struct OwnRedis {
    port: u16,
    process: std::process::Child,
}

impl OwnRedis {
    fn start(port: u16) -> OwnRedis {
        let mut process = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (./dev installs it)");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return OwnRedis { port, process };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = process.kill();
        let _ = process.wait();
        panic!("redis-server did not listen on {port}");
    }

    fn stop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn with_redis_down_submissions_are_unavailable_and_start_nothing_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = OwnRedis::start(spare_port());
    let port = redis.port;
    let worker = counting_worker(dir.path(), &dir.path().join("starts"));
    let app = spawn_app_with(|settings| {
        settings.worker_executable = Some(worker);
        settings.redis_url = Some(format!("redis://127.0.0.1:{port}/0"));
        settings.redis_key_prefix = unique_prefix();
        settings.redis_timeout_ms = 300;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Gif);
    let (job, _) = submit_with_key(&app, &unique_key(), request.clone())
        .await
        .unwrap();
    assert_eq!(
        state(&finished(&app, &job.job_id).await),
        JobState::Succeeded
    );

    redis.stop();
    let mut other = request.clone();
    other.output.as_mut().unwrap().fps = 60;
    let status = submit_with_key(&app, &unique_key(), other.clone())
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

    let _redis = OwnRedis::start(port);
    // Nothing rendered without the check: a job the refused call had queued anyway would be
    // ahead of this one (one worker, first in first out), so it would have started a worker
    // by the time this one is done. Another request (another fingerprint), so that it
    // cannot join such a job instead.
    let mut barrier = request;
    barrier.output.as_mut().unwrap().width = 101;
    let (job, _) = submit_with_key(&app, &unique_key(), barrier).await.unwrap();
    assert_eq!(
        state(&finished(&app, &job.job_id).await),
        JobState::Succeeded
    );
    assert_eq!(
        worker_starts(dir.path()),
        2,
        "the refused call rendered after all"
    );
    let (job, _) = submit_with_key(&app, &unique_key(), other).await.unwrap();
    assert_eq!(
        state(&finished(&app, &job.job_id).await),
        JobState::Succeeded
    );
    assert_eq!(worker_starts(dir.path()), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_key_whose_first_call_died_is_freed_when_its_lease_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let worker = counting_worker(dir.path(), &dir.path().join("starts"));
    let app = spawn_app_with(|settings| {
        settings.worker_executable = Some(worker);
        settings.redis_url = Some(redis_url());
        settings.redis_key_prefix = prefix.clone();
        settings.idempotency_lease_seconds = 3;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Mp4);
    // What a call that died between recording its key and creating its job leaves behind:
    // the key claimed for this request's fingerprint.
    let fingerprint = lottie_render::jobs::Fingerprint::of(
        &lottie_render::auth::TenantId::default_tenant(),
        &template.sha256,
        &Default::default(),
        &lottie_render::spec::OutputSpec {
            format: lottie_render::spec::Format::Mp4,
            fps: lottie_render::spec::Fps::DEFAULT,
            width: 100.try_into().unwrap(),
            height: 100.try_into().unwrap(),
            background: None,
        },
    );
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
            fingerprint.as_str(),
            Duration::from_secs(3),
        )
        .await
        .unwrap();
    let status = submit_with_key(&app, &key, request.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_some());
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let (job, replayed) = submit_with_key(&app, &key, request).await.unwrap();
    assert!(!replayed);
    assert_eq!(
        state(&finished(&app, &job.job_id).await),
        JobState::Succeeded
    );
    assert_eq!(worker_starts(dir.path()), 1);
    app.stop().await;
}

/// Two servers sharing one Redis (one key prefix) and one data directory, their workers
/// counted in `dir/starts`.
async fn two_instances(dir: &Path, configure: fn(&mut ServerSettings)) -> (TestApp, TestApp) {
    let prefix = unique_prefix();
    let first = app_on(Store::Redis, dir, |settings| {
        settings.redis_key_prefix = prefix.clone();
        configure(settings);
    })
    .await;
    let shared_data = first.data_dir.path().to_path_buf();
    let second = app_on(Store::Redis, dir, |settings| {
        settings.redis_key_prefix = prefix.clone();
        settings.data_dir = shared_data;
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
    let done = finished(&b, first).await;
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
        let done = finished(app, &job.job_id).await;
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
    let (job, _) = submit_with_key(
        &a,
        &unique_key(),
        small_request(&template.template_id, proto::Format::Webm),
    )
    .await
    .unwrap();
    b.wait_for_state(&job.job_id, JobState::Running).await;
    let (subscribed, subscribed_rx) = tokio::sync::oneshot::channel::<()>();
    let watching = {
        let b_watch = b.renders();
        let job_id = job.job_id.clone();
        tokio::spawn(async move {
            let mut b_watch = b_watch;
            let mut stream = b_watch
                .watch_render_job(proto::WatchRenderJobRequest { job_id })
                .await
                .unwrap()
                .into_inner();
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
