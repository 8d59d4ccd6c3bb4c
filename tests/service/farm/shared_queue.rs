//! Many instances, one farm: three `lottie-render serve` processes on one Redis (a key prefix
//! of their own on the shared Redis, or a redis-server of the test's own where it must be
//! restarted) and one bucket on the test S3 server, each with a data directory of its own
//! (scratch only: no shared file system), every accepted job in the shared work queue. Renders
//! are counted by each instance's `renders_started` and `workers_started` metrics.

use crate::farm::object_storage::{s3_endpoint, TestBucket};
use crate::helpers::{
    corpus, create_request, redis_url, sample_value, small_request, state, unique_key,
    unique_prefix, until_answered, with_idempotency_key, Hold, OwnRedis, ServerProcess,
};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::grpc::proto::JobState;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Status};

const BALL: &str = "slots-ball-colors-opacity.json";
/// Short leases, so that a dead instance's jobs start again within seconds.
const LEASE_MS: &str = "2000";
/// How long a test waits for all its jobs to end.
const FARM_LIMIT: Duration = Duration::from_secs(240);
/// How many times `Instance::submit` retries a retryable refusal: a minute of the second the
/// server asks for, so a Redis slowed by a saturated machine (two busy loops and builds on 2
/// cores, load 17, missed the 300 and 500 ms timeouts) gets time to answer; a call never
/// answered still fails.
const SUBMIT_ATTEMPTS: usize = 60;

/// One instance of the farm under test.
pub(super) struct Instance {
    server: ServerProcess,
    channel: Channel,
}

impl Instance {
    async fn start(
        redis: &str,
        prefix: &str,
        bucket: &TestBucket,
        worker: Option<PathBuf>,
        extra: &[&str],
    ) -> Instance {
        let storage_url = format!("s3://{}/farm", bucket.name);
        let endpoint = s3_endpoint();
        let mut args = vec![
            "--redis-url",
            redis,
            "--redis-key-prefix",
            prefix,
            "--workers",
            "1",
            "--queue-capacity",
            "128",
            "--job-lease-ms",
            LEASE_MS,
            "--storage-url",
            &storage_url,
            "--storage-endpoint",
            &endpoint,
            "--storage-region",
            "us-east-1",
            "--storage-allow-http",
        ];
        args.extend_from_slice(extra);
        // Each instance keeps its own data directory (scratch only); templates, fonts and
        // outputs are in the one bucket.
        let server = ServerProcess::start_in(
            None,
            |dir| worker.unwrap_or_else(|| crate::helpers::own_worker_executable(dir)),
            &args,
            &[
                ("AWS_ACCESS_KEY_ID", "lottie-test"),
                ("AWS_SECRET_ACCESS_KEY", "lottie-test-secret"),
            ],
        );
        let channel = server.channel().await;
        Instance { server, channel }
    }

    fn renders(&self) -> RenderServiceClient<Channel> {
        RenderServiceClient::new(self.channel.clone())
    }

    async fn submit_with_key(
        &self,
        key: &str,
        request: proto::RenderRequest,
    ) -> Result<proto::RenderJob, Status> {
        self.renders()
            .submit_render(with_idempotency_key(request, key))
            .await
            .map(|answer| answer.into_inner())
    }

    /// Submits under a key of its own, retrying as a well-behaved client does what the server says is
    /// worth retrying (UNAVAILABLE: the shared job records or the key store did not answer in
    /// the instance's Redis timeout, 300 ms in the restart test, which a loaded machine
    /// misses; ABORTED: a concurrent call with the key), after the delay it asks for, for at
    /// most `SUBMIT_ATTEMPTS`. The key is kept, so a retry never makes a second job.
    pub(super) async fn submit(&self, request: proto::RenderRequest) -> proto::RenderJob {
        self.submit_keyed(&unique_key(), request).await
    }

    /// `submit` under a key of the caller's.
    async fn submit_keyed(&self, key: &str, request: proto::RenderRequest) -> proto::RenderJob {
        until_answered(SUBMIT_ATTEMPTS, || {
            self.submit_with_key(key, request.clone())
        })
        .await
    }

    async fn get(&self, job_id: &str) -> Result<proto::RenderJob, Status> {
        self.renders()
            .get_render_job(proto::GetRenderJobRequest {
                job_id: job_id.into(),
            })
            .await
            .map(|answer| answer.into_inner())
    }

    /// A job's snapshot, riding out UNAVAILABLE (the shared records slow on a loaded machine)
    /// as `submit` does.
    async fn current(&self, job_id: &str) -> proto::RenderJob {
        until_answered(SUBMIT_ATTEMPTS, || self.get(job_id)).await
    }

    /// A counter of this instance (exposed from the start, at 0): a name it does not expose
    /// (misspelt, or renamed in the server) fails here instead of reading 0.
    async fn counter(&self, name: &str) -> f64 {
        let text = self.server.metrics_text().await;
        let sample = format!("lottie_render_{name}_total");
        sample_value(&text, &sample)
            .unwrap_or_else(|| panic!("no sample {sample} in the metrics:\n{text}"))
    }
}

async fn create_template(instance: &Instance) -> String {
    TemplateServiceClient::new(instance.channel.clone())
        .create_template(create_request(BALL, corpus(BALL)))
        .await
        .unwrap()
        .into_inner()
        .template_id
}

/// A small, quick render; `variant` makes its fingerprint its own.
pub(super) fn request(template_id: &str, variant: u32) -> proto::RenderRequest {
    let mut request = small_request(template_id, proto::Format::Gif);
    if let Some(output) = request.output.as_mut() {
        output.width = 100 + variant;
    }
    request
}

/// Waits until every job of `job_ids` has ended, seen through `instance`, and checks that
/// each one succeeded.
pub(super) async fn assert_all_succeed(instance: &Instance, job_ids: &[String]) {
    for job in wait_until_ended(instance, job_ids).await {
        assert_eq!(state(&job), JobState::Succeeded, "{job:?}");
    }
}

/// Polls each job through `instance` until it has ended (riding out UNAVAILABLE while Redis
/// is away); answers the last snapshots.
async fn wait_until_ended(instance: &Instance, job_ids: &[String]) -> Vec<proto::RenderJob> {
    let mut ended = Vec::new();
    let deadline = tokio::time::Instant::now() + FARM_LIMIT;
    for id in job_ids {
        loop {
            match instance.get(id).await {
                Ok(job) if !matches!(state(&job), JobState::Queued | JobState::Running) => {
                    ended.push(job);
                    break;
                }
                Ok(_) => {}
                Err(status) if status.code() == Code::Unavailable => {}
                Err(status) => panic!("{status:?}"),
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} did not end within {FARM_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    ended
}

async fn counters(farm: &[&Instance], name: &str) -> Vec<f64> {
    let mut values = Vec::new();
    for instance in farm {
        values.push(instance.counter(name).await);
    }
    values
}

#[tokio::test]
async fn a_hundred_jobs_submitted_round_robin_render_once_each_spread_over_three_instances() {
    let bucket = TestBucket::create().await;
    let farm = start_farm(&bucket).await;
    let template = create_template(&farm[0]).await;
    let mut ids = Vec::new();
    for variant in 0..100u32 {
        let instance = &farm[variant as usize % 3];
        ids.push(instance.submit(request(&template, variant)).await.job_id);
    }
    // Followed through an instance that accepted only a third of them.
    let ended = wait_until_ended(&farm[1], &ids).await;
    for job in &ended {
        assert_eq!(state(job), JobState::Succeeded, "{job:?}");
    }
    let everyone: Vec<&Instance> = farm.iter().collect();
    let renders = counters(&everyone, "renders_started").await;
    let workers = counters(&everyone, "workers_started").await;
    let taken = counters(&everyone, "shared_jobs_taken").await;
    println!("renders per instance {renders:?}, workers {workers:?}, taken {taken:?}");
    assert_eq!(renders.iter().sum::<f64>(), 100.0, "each job rendered once");
    assert_eq!(workers.iter().sum::<f64>(), 100.0, "one worker per render");
    assert_eq!(taken.iter().sum::<f64>(), 100.0);
    assert!(
        renders.iter().all(|count| *count > 0.0),
        "every instance rendered some: {renders:?}"
    );
}

#[tokio::test]
async fn twenty_identical_requests_across_three_instances_render_once() {
    let bucket = TestBucket::create().await;
    let farm = start_farm(&bucket).await;
    let template = create_template(&farm[0]).await;
    // Each job is asked for at once through the next instance: an accepted job is known to
    // the whole farm as soon as its submission is answered (a follower's record once reached
    // Redis only after the answer, and was NOT_FOUND there meanwhile).
    let submissions = (0..20).map(|call| {
        let (submitted_to, asked) = (&farm[call % 3], &farm[(call + 1) % 3]);
        let template = template.clone();
        async move {
            let job = submitted_to.submit(request(&template, 7)).await;
            match asked.get(&job.job_id).await {
                Ok(seen) => assert_eq!(seen.job_id, job.job_id),
                Err(status) => panic!("job {call} unknown to the next instance: {status:?}"),
            }
            job.job_id
        }
    });
    let ids: Vec<String> = futures_util::future::join_all(submissions).await;
    let ended = wait_until_ended(&farm[2], &ids).await;
    let mut digests: Vec<String> = ended
        .iter()
        .map(|job| {
            assert_eq!(state(job), JobState::Succeeded, "{job:?}");
            job.output.as_ref().unwrap().sha256.clone()
        })
        .collect();
    digests.dedup();
    assert_eq!(digests.len(), 1, "one output for all");
    let everyone: Vec<&Instance> = farm.iter().collect();
    let renders = counters(&everyone, "renders_started").await;
    assert_eq!(renders.iter().sum::<f64>(), 1.0, "{renders:?}");
    assert_eq!(
        counters(&everyone, "workers_started")
            .await
            .iter()
            .sum::<f64>(),
        1.0
    );
}

/// The id of the job whose render `server` logged as started.
fn job_started_on(server: &ServerProcess) -> Option<String> {
    server.log().iter().find_map(|line| {
        if !line.contains("render started") {
            return None;
        }
        let start = line.find("job_id=")? + "job_id=".len();
        Some(line.get(start..start + 36)?.to_owned())
    })
}

/// Watches job `job_id` through `instance` in a task of its own: every snapshot, to the end
/// of the stream (or until it breaks, as when the instance stops).
async fn watch_snapshots(
    instance: &Instance,
    job_id: &str,
) -> tokio::task::JoinHandle<Vec<proto::RenderJob>> {
    let mut watch = instance
        .renders()
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: job_id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    tokio::spawn(async move {
        let mut snapshots = Vec::new();
        while let Ok(Some(job)) = watch.message().await {
            snapshots.push(job);
        }
        snapshots
    })
}

/// Watches job `job_id` through `instance`: the states of every snapshot, to the end of the
/// stream.
async fn watch_states(instance: &Instance, job_id: &str) -> tokio::task::JoinHandle<Vec<JobState>> {
    let snapshots = watch_snapshots(instance, job_id).await;
    tokio::spawn(async move { snapshots.await.unwrap().iter().map(state).collect() })
}

/// What a caller watching a job that went back to the queue sees (within [`FARM_LIMIT`]):
/// RUNNING, QUEUED again, RUNNING again and at last SUCCEEDED, never FAILED or CANCELLED.
async fn assert_went_back_to_the_queue(watcher: tokio::task::JoinHandle<Vec<JobState>>) {
    let states = tokio::time::timeout(FARM_LIMIT, watcher)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(states.first(), Some(&JobState::Running), "{states:?}");
    assert_eq!(states.last(), Some(&JobState::Succeeded), "{states:?}");
    let back_in_queue = states
        .iter()
        .position(|state| *state == JobState::Queued)
        .unwrap_or_else(|| panic!("the caller saw the job queued again: {states:?}"));
    assert!(
        states[back_in_queue..].contains(&JobState::Running),
        "{states:?}"
    );
    assert!(
        !states.contains(&JobState::Failed) && !states.contains(&JobState::Cancelled),
        "{states:?}"
    );
}

/// Three instances on one Redis (a key prefix of their own) and `bucket`.
async fn start_farm(bucket: &TestBucket) -> Vec<Instance> {
    let (redis, prefix) = (redis_url(), unique_prefix());
    let mut farm = Vec::new();
    for _ in 0..3 {
        farm.push(Instance::start(&redis, &prefix, bucket, None, &[]).await);
    }
    farm
}

/// `count` instances whose workers each hold their render until released ([`Hold`],
/// engaged), on one Redis and `bucket`; the hold directories must outlive the farm.
pub(super) async fn start_held_farm(
    count: usize,
    redis: &str,
    prefix: &str,
    bucket: &TestBucket,
    extra: &[&str],
) -> (Vec<tempfile::TempDir>, Vec<Hold>, Vec<Instance>, String) {
    let hold_dirs: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
    let holds: Vec<Hold> = hold_dirs.iter().map(|dir| Hold::new(dir.path())).collect();
    let mut farm = Vec::new();
    for hold in &holds {
        hold.engage();
        let worker = Some(hold.script.clone());
        farm.push(Instance::start(redis, prefix, bucket, worker, extra).await);
    }
    let template = create_template(&farm[0]).await;
    (hold_dirs, holds, farm, template)
}

#[tokio::test]
async fn the_jobs_of_an_instance_killed_mid_render_finish_on_the_others() {
    let bucket = TestBucket::create().await;
    let (redis, prefix) = (redis_url(), unique_prefix());
    let (_hold_dirs, holds, mut farm, template) =
        start_held_farm(3, &redis, &prefix, &bucket, &[]).await;
    // One render held on each instance (one worker each), three more queued behind them,
    // all accepted by the instance about to die.
    let mut jobs = Vec::new();
    for variant in 0..3 {
        jobs.push((
            unique_key(),
            request(&template, variant),
            String::new(), // filled below
        ));
    }
    for (key, request, id) in jobs.iter_mut() {
        *id = farm[0].submit_keyed(key, request.clone()).await.job_id;
    }
    for hold in &holds {
        hold.wait_for_held(1).await;
    }
    for variant in 3..6 {
        let (key, request) = (unique_key(), request(&template, variant));
        let id = farm[0].submit_keyed(&key, request.clone()).await.job_id;
        assert_eq!(state(&farm[0].current(&id).await), JobState::Queued);
        jobs.push((key, request, id));
    }
    let orphan = job_started_on(&farm[0].server).expect("the doomed instance started a render");
    // A caller watching the doomed instance's render through a survivor.
    let watcher = watch_states(&farm[1], &orphan).await;
    farm[0].server.kill();
    for hold in &holds[1..] {
        hold.let_go();
    }
    let ids: Vec<String> = jobs.iter().map(|(_, _, id)| id.clone()).collect();
    assert_all_succeed(&farm[2], &ids).await;
    assert_went_back_to_the_queue(watcher).await;
    let survivors: Vec<&Instance> = farm[1..].iter().collect();
    // Two held renders, three queued ones and the orphan, each once.
    let renders = counters(&survivors, "renders_started").await;
    assert_eq!(renders.iter().sum::<f64>(), 6.0, "{renders:?}");
    let reclaimed = counters(&survivors, "shared_jobs_reclaimed").await;
    assert_eq!(reclaimed.iter().sum::<f64>(), 1.0, "{reclaimed:?}");
    // Nothing stuck: the orphan's key replays its result, and its fingerprint serves a new
    // key at once.
    let (key, orphan_request, _) = jobs.iter().find(|(_, _, id)| *id == orphan).unwrap();
    let replay = farm[2].submit_keyed(key, orphan_request.clone()).await;
    assert_eq!(
        (replay.job_id.as_str(), state(&replay)),
        (orphan.as_str(), JobState::Succeeded)
    );
    let again = farm[1].submit(orphan_request.clone()).await;
    assert_eq!(state(&again), JobState::Succeeded, "{again:?}");
    assert_eq!(
        counters(&survivors, "renders_started")
            .await
            .iter()
            .sum::<f64>(),
        6.0
    );
}

#[tokio::test]
async fn a_redis_restarted_mid_run_loses_nothing_and_renders_nothing_twice() {
    let bucket = TestBucket::create().await;
    let mut redis = OwnRedis::start_persistent();
    let prefix = unique_prefix();
    let (_hold_dirs, holds, farm, template) = start_held_farm(
        3,
        &redis.url(),
        &prefix,
        &bucket,
        &["--redis-timeout-ms", "300"],
    )
    .await;
    let mut ids = Vec::new();
    for variant in 0..3u32 {
        ids.push(
            farm[variant as usize]
                .submit(request(&template, variant))
                .await
                .job_id,
        );
    }
    for hold in &holds {
        hold.wait_for_held(1).await;
    }
    for variant in 3..6u32 {
        ids.push(
            farm[variant as usize % 3]
                .submit(request(&template, variant))
                .await
                .job_id,
        );
    }
    redis.stop();
    // During the outage: UNAVAILABLE with a delay, and nothing created.
    let refused = farm[1]
        .submit_with_key(&unique_key(), request(&template, 6))
        .await
        .unwrap_err();
    // The key store is the first part of Redis a submission reaches.
    let delay =
        crate::helpers::refusal_delay(&refused, Code::Unavailable, "IDEMPOTENCY_STORE_UNAVAILABLE");
    assert!(
        delay.is_some_and(|delay| delay > Duration::ZERO),
        "{refused:?}"
    );
    // The held renders finish while Redis is away; their ends wait for it.
    for hold in &holds {
        hold.let_go();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.restart();
    // The refused request, retried once Redis is back.
    let mut retried = None;
    for _ in 0..100 {
        match farm[1]
            .submit_with_key(&unique_key(), request(&template, 6))
            .await
        {
            Ok(job) => {
                retried = Some(job.job_id);
                break;
            }
            Err(status) if status.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    ids.push(retried.expect("accepted once Redis is back"));
    assert_all_succeed(&farm[0], &ids).await;
    let everyone: Vec<&Instance> = farm.iter().collect();
    let renders = counters(&everyone, "renders_started").await;
    assert_eq!(renders.iter().sum::<f64>(), 7.0, "{renders:?}");
}

/// The entries left in the farm's queue and its per-tenant counts.
async fn queue_left(prefix: &str) -> (i64, i64) {
    let mut connection = deadpool_redis::redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let entries: i64 = deadpool_redis::redis::cmd("XLEN")
        .arg(format!("{prefix}queue"))
        .query_async(&mut connection)
        .await
        .unwrap();
    let tenants: i64 = deadpool_redis::redis::cmd("HLEN")
        .arg(format!("{prefix}queue-tenants"))
        .query_async(&mut connection)
        .await
        .unwrap();
    (entries, tenants)
}

#[tokio::test]
async fn a_job_cancelled_while_it_waits_in_the_shared_queue_is_never_rendered() {
    let bucket = TestBucket::create().await;
    let (redis, prefix) = (redis_url(), unique_prefix());
    let (_hold_dirs, holds, farm, template) =
        start_held_farm(2, &redis, &prefix, &bucket, &[]).await;
    let mut ids = Vec::new();
    for variant in 0..2 {
        ids.push(farm[0].submit(request(&template, variant)).await.job_id);
    }
    for hold in &holds {
        hold.wait_for_held(1).await;
    }
    let waiting = farm[0].submit(request(&template, 2)).await;
    assert_eq!(state(&waiting), JobState::Queued);
    // Cancelled through the instance that did not accept it.
    let cancelled = farm[1]
        .renders()
        .cancel_render_job(proto::CancelRenderJobRequest {
            job_id: waiting.job_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state(&cancelled), JobState::Cancelled, "{cancelled:?}");
    for hold in &holds {
        hold.let_go();
    }
    assert_all_succeed(&farm[0], &ids).await;
    // Its entry is read by a free worker and acknowledged away, unrendered.
    let mut left = queue_left(&prefix).await;
    for _ in 0..200 {
        if left == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = queue_left(&prefix).await;
    }
    assert_eq!(left, (0, 0), "entries and tenant counts left in the queue");
    assert_eq!(
        state(&farm[0].current(&waiting.job_id).await),
        JobState::Cancelled
    );
    let everyone: Vec<&Instance> = farm.iter().collect();
    let renders = counters(&everyone, "renders_started").await;
    assert_eq!(renders.iter().sum::<f64>(), 2.0, "{renders:?}");
}

/// Two instances on one farm (0.5 s shutdown grace), each holding one render: two variants
/// submitted through the first. `stopping` is the job the first instance holds.
struct TwoHolding {
    _hold_dirs: Vec<tempfile::TempDir>,
    holds: Vec<Hold>,
    farm: Vec<Instance>,
    template: String,
    ids: Vec<String>,
    stopping: String,
}

async fn two_instances_each_holding_a_render(bucket: &TestBucket) -> TwoHolding {
    let (redis, prefix) = (redis_url(), unique_prefix());
    let (hold_dirs, holds, farm, template) = start_held_farm(
        2,
        &redis,
        &prefix,
        bucket,
        &["--shutdown-grace-seconds", "0.5"],
    )
    .await;
    let mut ids = Vec::new();
    for variant in 0..2 {
        ids.push(farm[0].submit(request(&template, variant)).await.job_id);
    }
    for hold in &holds {
        hold.wait_for_held(1).await;
    }
    let stopping = job_started_on(&farm[0].server).expect("the stopping instance started one");
    TwoHolding {
        _hold_dirs: hold_dirs,
        holds,
        farm,
        template,
        ids,
        stopping,
    }
}

/// SIGTERM to `instance`, which must stop cleanly and hand its held render back to the shared
/// queue (not leave it to its lease).
async fn stop_handing_back(instance: &mut Instance) {
    instance.server.terminate();
    assert!(
        instance
            .server
            .wait_for_exit(Duration::from_secs(60))
            .await
            .is_some_and(|status| status.success()),
        "the first instance stops cleanly"
    );
    assert!(
        instance
            .server
            .log()
            .iter()
            .any(|line| line.contains("job handed back to the shared queue")),
        "handed back, not left to its lease"
    );
}

#[tokio::test]
async fn a_render_still_running_when_its_instance_stops_is_handed_back_and_finishes_on_another() {
    let bucket = TestBucket::create().await;
    // One render held on each instance.
    let TwoHolding {
        _hold_dirs,
        holds,
        mut farm,
        ids,
        stopping,
        ..
    } = two_instances_each_holding_a_render(&bucket).await;
    // Its caller watches through the instance that stays.
    let watcher = watch_states(&farm[1], &stopping).await;
    // SIGTERM: the held render outlives the grace period and is stopped.
    stop_handing_back(&mut farm[0]).await;
    // The other instance finishes its own render, then takes the handed-back one.
    holds[1].let_go();
    assert_all_succeed(&farm[1], &ids).await;
    assert_went_back_to_the_queue(watcher).await;
    // Taken from the queue, not reclaimed after a lease; rendered there once more.
    assert_eq!(farm[1].counter("shared_jobs_reclaimed").await, 0.0);
    assert_eq!(farm[1].counter("renders_started").await, 2.0);
}

/// The last snapshot a watch of `job_id` through `instance` sees before its stream ends.
async fn watch_to_the_end(
    instance: &Instance,
    job_id: &str,
) -> tokio::task::JoinHandle<Option<proto::RenderJob>> {
    let snapshots = watch_snapshots(instance, job_id).await;
    tokio::spawn(async move { snapshots.await.unwrap().pop() })
}

#[tokio::test]
async fn followers_of_a_render_handed_back_at_shutdown_end_cancelled_retryable_after_five_seconds()
{
    // README ("Shutdown"): jobs that followed a handed-back render on the stopping instance
    // end CANCELLED, retryable (SERVER_SHUTTING_DOWN); the render itself goes back to the
    // queue and finishes on another instance.
    let bucket = TestBucket::create().await;
    let TwoHolding {
        _hold_dirs,
        holds,
        mut farm,
        template,
        ids,
        stopping,
    } = two_instances_each_holding_a_render(&bucket).await;
    let variant = ids.iter().position(|id| *id == stopping).unwrap() as u32;
    // The same request under a new key, on the stopping instance: it follows that render.
    let follower = farm[0].submit(request(&template, variant)).await;
    assert_ne!(follower.job_id, stopping);
    let watcher = watch_to_the_end(&farm[0], &follower.job_id).await;
    stop_handing_back(&mut farm[0]).await;
    let last = tokio::time::timeout(FARM_LIMIT, watcher)
        .await
        .unwrap()
        .unwrap()
        .expect("the follower's watcher saw a snapshot");
    assert_eq!(state(&last), JobState::Cancelled, "{last:?}");
    let error = last.error.expect("a cancelled follower says why");
    assert_eq!(error.reason, "SERVER_SHUTTING_DOWN", "{error:?}");
    assert!(error.retryable, "{error:?}");
    assert_eq!(
        error
            .retry_after
            .map(|delay| Duration::try_from(delay).unwrap()),
        Some(Duration::from_secs(5)),
        "{error:?}"
    );
    // The render it followed finishes on the other instance.
    holds[1].let_go();
    assert_all_succeed(&farm[1], &ids).await;
}
