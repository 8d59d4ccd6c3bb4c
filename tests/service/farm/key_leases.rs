//! Idempotency keys while a call is still creating, over the wire and against both stores
//! (memory and Redis): a second call with the key is ABORTED `IDEMPOTENCY_KEY_IN_PROGRESS`
//! with a 200 ms retry delay after waiting 0.5 s; the lease the server itself took runs out
//! and frees the key; a bound key that expires makes the next call a new job; a Redis that is
//! slow (paused, so connections open but nothing answers) is UNAVAILABLE with a delay and
//! leaves the key usable once it answers again; a call that outlived its lease neither binds
//! nor frees the key another call claimed since.
//!
//! A call is held "still creating" by holding CreateTemplate's analysis worker at its start
//! (`helpers::Hold`): the one place where the server itself spends a while between claiming
//! a key and binding it, and the claim code is the same for every method.

use crate::helpers::{
    connect, corpus, counting_worker, create_request, redis_url, refusal_delay, small_request,
    spawn_app_with, unique_key, unique_prefix, with_idempotency_key, with_replayed, worker_starts,
    Hold, Intercepted, OwnRedis, Store, TestApp,
};
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::grpc::proto::{self, JobState};
use std::time::{Duration, Instant};
use tonic::{Code, Status};

const BALL: &str = "slots-ball-colors-opacity.json";
/// How long a call waits on a concurrent one with its key before ABORTED (docs/operations.md).
const IN_PROGRESS_WAIT: Duration = Duration::from_millis(500);
/// The retry delay of that ABORTED (docs/operations.md).
const IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long the tests wait for a key or a job to expire before failing.
const PATIENCE: Duration = Duration::from_secs(60);

/// A server on `store` (a key prefix of its own on Redis) whose analyses run through `hold`.
async fn app_on(
    store: Store,
    hold: &Hold,
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    let script = hold.script.clone();
    spawn_app_with(|settings| {
        settings.analysis.analysis_executable = Some(script);
        // Two analyses of the one tenant are held at once, and a tenant holds at most half
        // of the analysis workers.
        settings.analysis.analysis_workers = 4;
        store.configure(settings);
        configure(settings);
    })
    .await
}

/// CreateTemplate of the ball with idempotency key `key`: the template and whether it was
/// replayed.
async fn create_with_key(app: &TestApp, key: &str) -> Result<(proto::Template, bool), Status> {
    create_through(app.templates(), key.to_owned()).await
}

async fn create_through(
    mut templates: TemplateServiceClient<Intercepted>,
    key: String,
) -> Result<(proto::Template, bool), Status> {
    let request = with_idempotency_key(create_request(BALL, corpus(BALL)), &key);
    Ok(with_replayed(templates.create_template(request).await?))
}

type HeldCall = tokio::task::JoinHandle<Result<(proto::Template, bool), Status>>;

/// Starts CreateTemplate with `key` on its own task and waits until its analysis is held:
/// the call has claimed the key and is creating. Answers the held analysis and the call.
async fn held_create(app: &TestApp, hold: &Hold, key: &str) -> (u32, HeldCall) {
    hold.engage();
    let call = tokio::spawn(create_through(app.templates(), key.to_owned()));
    let analysis = hold.wait_for_held(1).await[0];
    hold.disengage();
    (analysis, call)
}

/// Checks that `status` is the ABORTED of a key in progress, with its 200 ms delay.
fn assert_in_progress(status: &Status) {
    assert_eq!(
        refusal_delay(status, Code::Aborted, "IDEMPOTENCY_KEY_IN_PROGRESS"),
        Some(IN_PROGRESS_RETRY_AFTER)
    );
}

#[tokio::test]
async fn a_call_meeting_its_key_in_progress_waits_half_a_second_then_is_aborted_with_200_ms() {
    for store in [Store::Memory, Store::Redis] {
        let dir = tempfile::tempdir().unwrap();
        let hold = Hold::new(dir.path());
        let app = app_on(store, &hold, |_| {}).await;
        let key = unique_key();
        let (analysis, first) = held_create(&app, &hold, &key).await;

        let asked = Instant::now();
        let status = create_with_key(&app, &key).await.unwrap_err();
        assert!(
            asked.elapsed() >= IN_PROGRESS_WAIT,
            "{store:?}: answered after {:?}, before the wait",
            asked.elapsed()
        );
        assert_in_progress(&status);

        hold.release(analysis);
        let (created, replayed) = first.await.unwrap().unwrap();
        assert!(!replayed, "{store:?}");
        // The call the key was waiting on answers the retry.
        let (again, replayed) = create_with_key(&app, &key).await.unwrap();
        assert!(replayed, "{store:?}");
        assert_eq!(again.template_id, created.template_id, "{store:?}");
        app.stop().await;
    }
}

#[tokio::test]
async fn the_lease_the_server_took_runs_out_and_the_key_is_first_use_again() {
    const LEASE: Duration = Duration::from_secs(5);
    for store in [Store::Memory, Store::Redis] {
        let dir = tempfile::tempdir().unwrap();
        let hold = Hold::new(dir.path());
        let app = app_on(store, &hold, |settings| {
            settings.idempotency.idempotency_lease_seconds = LEASE.as_secs();
        })
        .await;
        let key = unique_key();
        let claimed = Instant::now();
        let (analysis, first) = held_create(&app, &hold, &key).await;
        assert_in_progress(&create_with_key(&app, &key).await.unwrap_err());

        // Retried as the server asks until the key is free: only once the lease ran out.
        let deadline = Instant::now() + PATIENCE;
        let (second, replayed) = loop {
            match create_with_key(&app, &key).await {
                Ok(answer) => break answer,
                Err(status) => {
                    assert_in_progress(&status);
                    assert!(
                        Instant::now() < deadline,
                        "{store:?}: the lease never ran out"
                    );
                    tokio::time::sleep(IN_PROGRESS_RETRY_AFTER).await;
                }
            }
        };
        assert!(
            claimed.elapsed() >= LEASE,
            "{store:?}: the key was free after {:?}, within its lease",
            claimed.elapsed()
        );
        assert!(!replayed, "{store:?}: a new creation, not a replay");

        // The first call still ends with a template of its own; the key answers the second's.
        hold.release(analysis);
        let (first, _) = first.await.unwrap().unwrap();
        assert_ne!(first.template_id, second.template_id, "{store:?}");
        let (again, replayed) = create_with_key(&app, &key).await.unwrap();
        assert!(replayed, "{store:?}");
        assert_eq!(again.template_id, second.template_id, "{store:?}");
        app.stop().await;
    }
}

async fn succeeded(app: &TestApp, job_id: &str) {
    let last = app.finished(job_id).await;
    assert_eq!(last.state, JobState::Succeeded as i32, "{last:?}");
}

/// Whether `key` (as the server names it) is still in Redis under `prefix`.
async fn redis_has_key(prefix: &str, key: &str) -> bool {
    let mut connection = connect(&redis_url()).await;
    let exists: i64 = deadpool_redis::redis::cmd("EXISTS")
        .arg(format!("{prefix}idempotency:SubmitRender:{key}"))
        .query_async(&mut connection)
        .await
        .unwrap();
    exists == 1
}

#[tokio::test]
async fn a_bound_key_that_expired_makes_the_next_call_a_new_job() {
    const RETENTION_SECONDS: u64 = 2;
    for store in [Store::Memory, Store::Redis] {
        let dir = tempfile::tempdir().unwrap();
        let worker = counting_worker(dir.path(), &dir.path().join("starts"));
        let prefix = unique_prefix();
        let app = spawn_app_with(|settings| {
            settings.render_workers.worker_executable = Some(worker);
            settings.jobs.retention_seconds = RETENTION_SECONDS;
            if store == Store::Redis {
                settings.redis.redis_url = Some(redis_url());
                settings.redis.redis_key_prefix = prefix.clone();
            }
        })
        .await;
        let template = app.create_template(BALL).await;
        let request = small_request(&template.template_id, proto::Format::Gif);
        let key = unique_key();
        let (job, _) = app.submit_keyed(&key, request.clone()).await.unwrap();
        succeeded(&app, &job.job_id).await;
        let (replay, replayed) = app.submit_keyed(&key, request.clone()).await.unwrap();
        assert!(replayed, "{store:?}: bound to its job");
        assert_eq!(replay.job_id, job.job_id);

        // Gone: the key itself from Redis; in memory, the job (bound before it finished, the
        // key expires no later than its job).
        let deadline = Instant::now() + PATIENCE;
        loop {
            let gone = match store {
                Store::Redis => !redis_has_key(&prefix, &key).await,
                Store::Memory => app
                    .renders()
                    .get_render_job(proto::GetRenderJobRequest {
                        job_id: job.job_id.clone(),
                    })
                    .await
                    .is_err_and(|status| status.code() == Code::NotFound),
            };
            if gone {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{store:?}: the key never expired"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let (new_job, replayed) = app.submit_keyed(&key, request).await.unwrap();
        assert!(!replayed, "{store:?}");
        assert_ne!(new_job.job_id, job.job_id, "{store:?}");
        // Rendered again, or SUCCEEDED from the stored output if that outlived the key.
        succeeded(&app, &new_job.job_id).await;
        app.stop().await;
    }
}

#[tokio::test]
async fn a_slow_redis_is_unavailable_with_a_delay_and_the_key_works_once_it_answers() {
    const REDIS_TIMEOUT_MS: u64 = 300;
    let redis = OwnRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let worker = counting_worker(dir.path(), &dir.path().join("starts"));
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        settings.render_workers.worker_executable = Some(worker);
        settings.redis.redis_url = Some(url);
        settings.redis.redis_key_prefix = unique_prefix();
        settings.redis.redis_timeout_ms = REDIS_TIMEOUT_MS;
    })
    .await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Gif);
    // Connections are open and in use before Redis slows down.
    let job = app.submit(request.clone()).await.unwrap();
    succeeded(&app, &job.job_id).await;

    // Paused: it accepts connections and reads nothing, as a Redis stuck on a slow command.
    let paused = std::process::Command::new("kill")
        .args(["-STOP", &redis.pid().to_string()])
        .status()
        .unwrap();
    assert!(paused.success());
    let mut other = request;
    other.output.as_mut().unwrap().fps = 60;
    let key = unique_key();
    let asked = Instant::now();
    let status = app.submit_keyed(&key, other.clone()).await.unwrap_err();
    let waited = asked.elapsed();
    let resumed = std::process::Command::new("kill")
        .args(["-CONT", &redis.pid().to_string()])
        .status()
        .unwrap();
    assert!(resumed.success());
    let delay = refusal_delay(&status, Code::Unavailable, "IDEMPOTENCY_STORE_UNAVAILABLE")
        .expect("a retry delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    assert!(
        status.message().contains("did not answer within"),
        "a timeout, not a refused connection: {status:?}"
    );
    assert!(
        waited >= Duration::from_millis(REDIS_TIMEOUT_MS),
        "answered after {waited:?}, before the Redis deadline"
    );

    // Answering again, the same key is a first use: nothing was claimed or started for it.
    let (job, replayed) = app.submit_keyed(&key, other).await.unwrap();
    assert!(!replayed);
    succeeded(&app, &job.job_id).await;
    assert_eq!(worker_starts(dir.path()), 2, "one render per accepted job");
    app.stop().await;
}

/// How the first of two calls with one key ends after its lease ran out and the second
/// claimed the key.
#[derive(Debug, Clone, Copy)]
enum FirstCall {
    /// Its analysis goes on: it creates a template and tries to bind the key to it.
    Creates,
    /// Its analysis is killed: it fails and tries to free the key.
    Fails,
}

/// Tries of one case whose check came too late to conclude (the second call's own lease may
/// have run out by then, which frees the key rightly): a loaded machine gets a few more.
const CONCLUSIVE_TRIES: usize = 5;

/// The claim belongs to the call that made it (a token of its own): a call that outlived its
/// lease, whose key a second call with the same request claimed since, can neither bind the
/// key to its own template nor free it while the second is still creating. It still answers
/// its own template (or its own failure).
///
/// Leases are short here, so the second call's may run out too; the checks hold whatever
/// the timing (the key never answers the first call's template), or are made only while the
/// second call's claim is certainly live (a third call finds it in progress), the case tried
/// again when it came too late.
#[tokio::test]
async fn a_call_that_outlived_its_lease_neither_binds_nor_frees_the_key_claimed_since() {
    const LEASE: Duration = Duration::from_secs(3);
    for store in [Store::Memory, Store::Redis] {
        for first_call in [FirstCall::Creates, FirstCall::Fails] {
            let case = format!("{store:?}, first call {first_call:?}");
            let concluded = 'tries: {
                for _ in 0..CONCLUSIVE_TRIES {
                    if outlived_lease_case(store, first_call, LEASE, &case).await {
                        break 'tries true;
                    }
                }
                false
            };
            assert!(
                concluded,
                "{case}: never checked within the second call's lease"
            );
        }
    }
}

/// One try of the case above; false when its check came too late to conclude.
async fn outlived_lease_case(
    store: Store,
    first_call: FirstCall,
    lease: Duration,
    case: &str,
) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let app = app_on(store, &hold, |settings| {
        settings.idempotency.idempotency_lease_seconds = lease.as_secs();
    })
    .await;
    let key = unique_key();
    hold.engage();
    let first = tokio::spawn(create_through(app.templates(), key.clone()));
    let first_analysis = hold.wait_for_held(1).await[0];

    // The same request again, retried as the server asks until the first call's lease has
    // run out and it claims the key (no earlier than its last attempt began); its analysis
    // is held in turn.
    let last_attempt = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
    let second = tokio::spawn({
        let (templates, key, last_attempt) = (app.templates(), key.clone(), last_attempt.clone());
        async move {
            let deadline = Instant::now() + PATIENCE;
            loop {
                *last_attempt.lock().unwrap() = Instant::now();
                match create_through(templates.clone(), key.clone()).await {
                    Err(status) if status.code() == Code::Aborted => {
                        assert_in_progress(&status);
                        assert!(Instant::now() < deadline, "the lease never ran out");
                        tokio::time::sleep(IN_PROGRESS_RETRY_AFTER).await;
                    }
                    answer => return answer,
                }
            }
        }
    });
    let held = hold.wait_for_held(2).await;
    hold.disengage();
    let second_claimed_after = *last_attempt.lock().unwrap();
    let second_analysis = *held
        .iter()
        .find(|pid| **pid != first_analysis)
        .expect("the second call's analysis");

    // The first call ends while the second may still hold the key.
    let first_template = match first_call {
        FirstCall::Creates => {
            hold.release(first_analysis);
            let (template, replayed) = first.await.unwrap().unwrap();
            assert!(!replayed, "{case}: its own template");
            Some(template.template_id)
        }
        FirstCall::Fails => {
            let killed = std::process::Command::new("kill")
                .args(["-KILL", &first_analysis.to_string()])
                .status()
                .unwrap();
            assert!(killed.success(), "{case}");
            let answer = first.await.unwrap();
            assert!(
                answer.is_err(),
                "{case}: its analysis was killed: {answer:?}"
            );
            None
        }
    };
    // A third call: never the first call's template; and while the second call's claim is
    // certainly live, the key is in progress (neither bound by the first call nor freed).
    let third = create_with_key(&app, &key).await;
    let conclusive = Instant::now() < second_claimed_after + lease;
    match &third {
        Ok((template, replayed)) => {
            assert!(
                !(*replayed && Some(&template.template_id) == first_template.as_ref()),
                "{case}: the key answers the call whose lease ran out"
            );
            assert!(
                !conclusive,
                "{case}: the second call's claim was freed: {template:?}"
            );
        }
        Err(status) => assert_in_progress(status),
    }

    hold.release(second_analysis);
    let (second, replayed) = second.await.unwrap().unwrap();
    let bound_within_its_lease = Instant::now() < second_claimed_after + lease;
    assert!(
        !replayed,
        "{case}: the second call created its own template"
    );
    let (again, _) = create_with_key(&app, &key).await.unwrap();
    assert_ne!(Some(&again.template_id), first_template.as_ref(), "{case}");
    if bound_within_its_lease {
        assert_eq!(again.template_id, second.template_id, "{case}");
    }
    app.stop().await;
    conclusive
}
