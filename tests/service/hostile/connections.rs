//! Connections and streams are bounded (issue 9, "One connection locks everyone out" and
//! "Unbounded fan-out"), over real sockets: a raw HTTP/2 client (the `h2` crate) opens
//! streams with headers and no body, stalls downloads and counts what the server allows;
//! Redis-mode tests run a redis-server of their own so that its CLIENT LIST counts exactly
//! the connections of the servers under test.

use crate::helpers::{
    connect, grpc_headers, grpc_message, raw_connection, reason, small_request, spawn_app_with,
    status_of, OwnRedis, ServerProcess, TestApp,
};
use bytes::Bytes;
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";
/// A real template on which rlottie never finishes: its job stays RUNNING until cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";

/// `count` calls to ListTemplates with headers and no body on one raw connection; answers
/// the pending answers and the open request streams (kept, so they stay open).
async fn open_bodiless_streams(
    client: &mut h2::client::SendRequest<Bytes>,
    address: SocketAddr,
    count: usize,
) -> (Vec<h2::client::ResponseFuture>, Vec<h2::SendStream<Bytes>>) {
    let (mut answers, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..count {
        *client = client.clone().ready().await.unwrap();
        let (answer, stream) = client
            .send_request(
                grpc_headers(address, "/lottie.render.v1.TemplateService/ListTemplates"),
                false,
            )
            .unwrap();
        answers.push(answer);
        streams.push(stream);
    }
    (answers, streams)
}

#[tokio::test]
async fn one_connection_of_bodiless_streams_cannot_make_another_caller_overloaded() {
    let server = ServerProcess::start(&[
        "--max-concurrent-requests",
        "16",
        "--request-body-timeout-ms",
        "3000",
    ]);
    let cpu_before = server.cpu_time();
    let mut attacker = raw_connection(server.address, h2::client::Builder::new()).await;
    // The server says how many streams a connection gets in its first SETTINGS.
    for _ in 0..100 {
        if attacker.current_max_send_streams() == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(attacker.current_max_send_streams(), 100);
    let (answers, open) = open_bodiless_streams(&mut attacker, server.address, 100).await;

    // Another caller on another connection: served, every call, while the attack holds.
    let channel = server.channel().await;
    let mut templates = proto::template_service_client::TemplateServiceClient::new(channel.clone());
    let calls = (0..32).map(|_| {
        let mut templates = templates.clone();
        async move {
            templates
                .list_templates(proto::ListTemplatesRequest::default())
                .await
        }
    });
    for answer in futures_util::future::join_all(calls).await {
        if let Err(status) = answer {
            panic!("another caller was refused: {status:?}");
        }
    }
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");

    // The bodies never come: the calls that reached the stack end with the classified
    // error after the deadline (the others wait on their own connection's share).
    let answers = answers.into_iter().map(Box::pin);
    let (first, _, waiting) = tokio::time::timeout(
        Duration::from_secs(20),
        futures_util::future::select_all(answers),
    )
    .await
    .expect("the body deadline fired");
    let status = status_of(&first.unwrap()).expect("a trailers-only answer");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(reason(&status), "REQUEST_BODY_TIMEOUT");
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_some());
    templates
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap();

    let cpu = server.cpu_time().saturating_sub(cpu_before);
    let peak = server.peak_rss_bytes();
    println!(
        "bodiless streams: server cpu {cpu:?}, peak rss {} MiB",
        peak >> 20
    );
    assert!(cpu < Duration::from_secs(2), "server cpu {cpu:?}");
    assert!(peak < 256 << 20, "server peak rss {peak}");
    drop((waiting, open, attacker));
    assert!(server.stop().await, "the server exits 0 on SIGTERM");
}

#[tokio::test]
async fn a_connection_cannot_open_more_streams_than_its_limit_and_others_are_served() {
    // Calls a connection may have in the stack (an eighth of the global limit) above 101,
    // so that only the stream limit can hold the 101st call (at the default, the
    // per-connection concurrency limit queued it even with no stream limit at all).
    let app = spawn_app_with(|settings| {
        settings.limits.request_body_timeout_ms = 60_000;
        settings.limits.max_concurrent_requests = 1024;
    })
    .await;
    // A client that ignores nothing but opens streams before it has read our settings.
    let mut attacker = raw_connection(app.address, h2::client::Builder::new()).await;
    let (answers, open) = open_bodiless_streams(&mut attacker, app.address, 100).await;
    // The 101st is a whole call (headers and its message): served, it would be answered at
    // once. It is held in the client until a stream of the connection ends (h2 keeps to the
    // server's limit once its SETTINGS are read) or refused by the server (REFUSED_STREAM,
    // when sent before them): never served while the hundred are open.
    let mut call = Box::pin(whole_list_templates_call(attacker.clone(), app.address));
    let early = tokio::time::timeout(Duration::from_secs(2), &mut call).await;
    match early {
        Err(_) => println!("the 101st stream is held by the client"),
        Ok(Err(refused)) => println!("the 101st stream was refused by the server: {refused}"),
        Ok(Ok(answer)) => panic!("a 101st stream was served on the connection: {answer:?}"),
    }
    // Others are served.
    app.templates()
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap();
    // The same call on a raw connection of its own is served: what held or refused it on
    // the attacker's connection was that connection's hundred open streams, not the call.
    let other = raw_connection(app.address, h2::client::Builder::new()).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        whole_list_templates_call(other, app.address),
    )
    .await
    .expect("the call was not answered on a connection of its own")
    .expect("the call was refused on a connection of its own");
    assert_eq!(answer.status(), http::StatusCode::OK, "{answer:?}");
    assert!(status_of(&answer).is_none(), "{answer:?}");
    drop((answers, open));
    app.stop().await;
}

/// A whole ListTemplates call on the raw connection `client` (its headers, then its one
/// message ending the stream); answers the response headers.
async fn whole_list_templates_call(
    client: h2::client::SendRequest<Bytes>,
    address: SocketAddr,
) -> Result<http::Response<h2::RecvStream>, h2::Error> {
    let mut client = client.ready().await?;
    let (answer, mut stream) = client.send_request(
        grpc_headers(address, "/lottie.render.v1.TemplateService/ListTemplates"),
        false,
    )?;
    stream.send_data(grpc_message(&proto::ListTemplatesRequest::default()), true)?;
    answer.await
}

/// Health Watch streams on `channel`, each kept open (its first answer read).
async fn open_health_watch(
    channel: &tonic::transport::Channel,
) -> Result<tonic::Streaming<tonic_health::pb::HealthCheckResponse>, Status> {
    let mut stream = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest::default())
        .await?
        .into_inner();
    stream.message().await?;
    Ok(stream)
}

#[tokio::test]
async fn watchers_beyond_the_cap_are_resource_exhausted_until_one_closes_and_health_has_its_own_cap(
) {
    // Twelve slots, of which one caller (this test's address) may hold a quarter, three.
    let app = spawn_app_with(|settings| settings.limits.max_watchers = 12).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(open_health_watch(&app.channel).await.unwrap());
    }
    let refused = open_health_watch(&app.channel).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TOO_MANY_WATCHERS");
    assert!(refused
        .get_error_details()
        .retry_info()
        .and_then(|info| info.retry_delay)
        .is_some());
    // Health needs no identity: its watchers do not take WatchRenderJob's slots (the call
    // gets as far as its handler, which knows no such job).
    let past_the_cap = app
        .renders()
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: uuid::Uuid::new_v4().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&past_the_cap), "JOB_NOT_FOUND");
    // One closes: its slot comes back (once the server has seen the stream reset).
    drop(open.pop());
    let mut reopened = None;
    for _ in 0..100 {
        match open_health_watch(&app.channel).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(status) => assert_eq!(reason(&status), "TOO_MANY_WATCHERS"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        reopened.is_some(),
        "the closed watcher's slot never came back"
    );
    // Health Check (unary) is not a watcher.
    HealthClient::new(app.channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap();
    app.stop().await;
}

/// A job of `app` rendered to its end.
async fn succeeded_job(app: &TestApp) -> proto::RenderJob {
    let template = app.create_template(BALL).await;
    let job = app.submit_small(&template, proto::Format::Gif).await;
    app.wait_for_state(&job.job_id, proto::JobState::Succeeded)
        .await
}

#[tokio::test]
async fn a_stalled_download_is_ended_and_its_slot_freed() {
    let app = spawn_app_with(|settings| {
        settings.downloads.max_downloads = 1;
        settings.downloads.download_idle_timeout_ms = 3000;
    })
    .await;
    let job = succeeded_job(&app).await;
    // A large output, so that the read-ahead fills up behind a caller that reads nothing.
    let output = app
        .data_dir
        .path()
        .join(format!("outputs/{}.gif", job.job_id));
    let large: Vec<u8> = (0..12u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&output, &large).unwrap();

    let mut builder = h2::client::Builder::new();
    // The client grants the server almost nothing to send and never grants more.
    builder.initial_window_size(1024);
    let mut staller = raw_connection(app.address, builder).await;
    let (answer, mut request) = staller
        .send_request(
            grpc_headers(
                app.address,
                "/lottie.render.v1.RenderService/DownloadRenderOutput",
            ),
            false,
        )
        .unwrap();
    request
        .send_data(
            grpc_message(&proto::DownloadRenderOutputRequest {
                job_id: job.job_id.clone(),
                ..Default::default()
            }),
            true,
        )
        .unwrap();
    let stalled = answer.await.unwrap();
    assert!(status_of(&stalled).is_none(), "the download started");

    // Its slot is taken: another download is refused with the cap's reason…
    let refused = app.download(&job.job_id).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TOO_MANY_DOWNLOADS");
    // …until the stalled one is ended after its idle timeout.
    let mut downloaded = None;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match app.download(&job.job_id).await {
            Ok(bytes) => {
                downloaded = Some(bytes);
                break;
            }
            Err(status) => assert_eq!(reason(&status), "TOO_MANY_DOWNLOADS"),
        }
    }
    assert_eq!(downloaded.as_deref(), Some(large.as_slice()));

    // Read now, the stalled stream gives what was in flight and ends classified.
    let mut body = stalled.into_body();
    let mut received = 0usize;
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        received += data.len();
        let _ = body.flow_control().release_capacity(data.len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    let status = Status::from_header_map(&trailers).expect("a status");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(reason(&status), "DOWNLOAD_STALLED");
    assert!(received < large.len(), "received {received}");
    app.stop().await;
}

/// What these tests read of a redis-server of their own (so CLIENT LIST counts only the
/// servers under test).
impl OwnRedis {
    /// Clients connected now, this test's own connection excluded.
    async fn clients(&self) -> usize {
        let mut connection = self.connection().await;
        let list: String = deadpool_redis::redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await
            .unwrap();
        list.lines().count() - 1
    }

    /// Connections made since the server started, this test's own included.
    async fn connections_received(&self) -> u64 {
        let mut connection = self.connection().await;
        let info: String = deadpool_redis::redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut connection)
            .await
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Connections subscribed to `channel`.
    async fn subscribers(&self, channel: &str) -> i64 {
        subscribers_at(self.port, channel).await
    }
}

/// Connections subscribed to `channel` on the Redis at `port`.
async fn subscribers_at(port: u16, channel: &str) -> i64 {
    let mut connection = connect(&format!("redis://127.0.0.1:{port}/0")).await;
    let answer: Vec<deadpool_redis::redis::Value> = deadpool_redis::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut connection)
        .await
        .unwrap();
    match answer.get(1) {
        Some(deadpool_redis::redis::Value::Int(count)) => *count,
        other => panic!("PUBSUB NUMSUB answered {other:?}"),
    }
}

/// Waits (up to 10 s) until `count` connections subscribe to `channel`.
async fn wait_for_subscribers(port: u16, channel: &str, count: i64) {
    for _ in 0..500 {
        if subscribers_at(port, channel).await == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{channel} never had {count} subscribers");
}

/// Redis connections one instance may hold in these tests: its pool, one for pub/sub and one
/// for the shared queue's blocking reads.
const POOL_SIZE: u32 = 4;

fn on_redis(settings: &mut ServerSettings, redis: &OwnRedis, prefix: &str, data: &Path) {
    // Instances on one Redis render each other's jobs (one shared queue), so on the default
    // file store they share one data directory.
    settings.application.data_dir = data.to_path_buf();
    settings.redis.redis_url = Some(redis.url());
    settings.redis.redis_key_prefix = prefix.to_owned();
    settings.redis.redis_pool_size = POOL_SIZE;
    settings.application.shutdown_grace_seconds = 0.5;
    // Sixty calls at once on two loaded cores may wait longer than the default 500 ms for a
    // pooled connection: these tests are about counts and subscriptions, not Redis being
    // slow (a slow Redis has its own tests), so a timed-out call must not stand for one.
    settings.redis.redis_timeout_ms = 5_000;
}

#[tokio::test]
async fn remote_watches_and_cancels_share_one_redis_subscription_and_unknown_ids_open_nothing() {
    let redis = OwnRedis::start();
    let data = tempfile::tempdir().unwrap();
    let prefix = "connections-test:";
    let a = spawn_app_with(|settings| on_redis(settings, &redis, prefix, data.path())).await;
    let b = spawn_app_with(|settings| on_redis(settings, &redis, prefix, data.path())).await;
    let template = a.create_template(NEVER_FINISHES).await;
    let running = a.submit_small(&template, proto::Format::Webm).await;
    b.wait_for_state(&running.job_id, proto::JobState::Running)
        .await;
    // A second one keeps the other instance's one worker busy too (the instances share
    // one queue)…
    let also_running = a.submit_small(&template, proto::Format::Mp4).await;
    b.wait_for_state(&also_running.job_id, proto::JobState::Running)
        .await;
    // …so behind them waits a job that does not change until it is cancelled.
    let job = a.submit_small(&template, proto::Format::Gif).await;
    b.wait_for_state(&job.job_id, proto::JobState::Queued).await;

    // Fifty callers of B watch A's job.
    let mut watches = Vec::new();
    for _ in 0..50 {
        let mut stream = b.open_watch(&job.job_id).await;
        assert_eq!(
            stream.message().await.unwrap().unwrap().state,
            proto::JobState::Queued as i32
        );
        watches.push(stream);
    }
    let channel = format!("{prefix}job-events:{}", job.job_id);
    assert_eq!(
        redis.subscribers(&channel).await,
        1,
        "one subscription for fifty watchers"
    );
    let clients = redis.clients().await;
    println!("redis clients with 50 remote watchers: {clients}");
    assert!(
        clients <= 2 * (POOL_SIZE as usize + 2),
        "{clients} Redis connections for two instances"
    );

    // Watchers that hang up let go of the subscription at once, though the job runs on.
    drop(watches);
    wait_for_subscribers(redis.port, &channel, 0).await;
    let mut watches = Vec::new();
    for _ in 0..5 {
        let mut stream = b.open_watch(&job.job_id).await;
        stream.message().await.unwrap().unwrap();
        watches.push(stream);
    }
    assert_eq!(redis.subscribers(&channel).await, 1);

    // Watches and cancels of ids nobody knows: answered NOT_FOUND, no connection made.
    let received = redis.connections_received().await;
    let unknown = (0..100).map(|i| {
        let renders = b.renders();
        async move {
            let id = uuid::Uuid::new_v4().to_string();
            let mut renders = renders;
            let status = if i % 2 == 0 {
                renders
                    .watch_render_job(proto::WatchRenderJobRequest { job_id: id })
                    .await
                    .map(|_| ())
                    .unwrap_err()
            } else {
                renders
                    .cancel_render_job(proto::CancelRenderJobRequest { job_id: id })
                    .await
                    .map(|_| ())
                    .unwrap_err()
            };
            assert_eq!(status.code(), Code::NotFound, "{status:?}");
        }
    });
    futures_util::future::join_all(unknown).await;
    // Our own two look-ups of the count, and at most a pool's worth the calls needed.
    let made = redis.connections_received().await - received;
    println!("redis connections made for 100 unknown watches and cancels: {made}");
    assert!(made <= 2 + u64::from(POOL_SIZE), "{made} connections");

    // Cancelled through B while it waits in the shared queue, every watcher sees it end.
    let cancelled = b.cancel(&job.job_id).await;
    assert_eq!(
        cancelled.state,
        proto::JobState::Cancelled as i32,
        "{cancelled:?}"
    );
    for mut stream in watches {
        let mut last = None;
        while let Some(snapshot) = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .unwrap()
            .unwrap()
        {
            last = Some(snapshot.state);
        }
        assert_eq!(last, Some(proto::JobState::Cancelled as i32));
    }
    // The last watcher gone, the channel is unsubscribed.
    wait_for_subscribers(redis.port, &channel, 0).await;
    b.cancel(&running.job_id).await;
    b.cancel(&also_running.job_id).await;
    a.stop().await;
    b.stop().await;
}

/// Sixty identical submissions under new keys while their render runs, answered: accepted
/// and refused (QUEUE_FULL) counts.
async fn sixty_identical(app: &TestApp, request: &proto::RenderRequest) -> (usize, usize) {
    let calls = (0..60).map(|_| app.submit(request.clone()));
    let (mut accepted, mut full) = (0, 0);
    for answer in futures_util::future::join_all(calls).await {
        match answer {
            Ok(_) => accepted += 1,
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert_eq!(reason(&status), "QUEUE_FULL");
                full += 1;
            }
        }
    }
    (accepted, full)
}

#[tokio::test]
async fn followers_of_a_running_render_count_against_the_queue() {
    let app = spawn_app_with(|settings| {
        settings.jobs.queue_capacity = 1;
        settings.application.shutdown_grace_seconds = 0.5;
    })
    .await;
    let template = app.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let leader = app.start_running(request.clone()).await;
    // The queue is empty (its render runs): one follower fits, the rest is refused.
    assert_eq!(sixty_identical(&app, &request).await, (1, 59));
    app.cancel(&leader.job_id).await;
    app.stop().await;
}

#[tokio::test]
async fn followers_of_another_instances_render_count_against_the_queue() {
    let redis = OwnRedis::start();
    let data = tempfile::tempdir().unwrap();
    let prefix = "connections-followers:";
    let a = spawn_app_with(|settings| on_redis(settings, &redis, prefix, data.path())).await;
    let b = spawn_app_with(|settings| {
        on_redis(settings, &redis, prefix, data.path());
        settings.jobs.queue_capacity = 1;
    })
    .await;
    let template = a.create_template(NEVER_FINISHES).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let leader = a.submit(request.clone()).await.unwrap();
    b.wait_for_state(&leader.job_id, proto::JobState::Running)
        .await;
    let (accepted, full) = sixty_identical(&b, &request).await;
    assert_eq!((accepted, full), (1, 59));
    a.cancel(&leader.job_id).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn after_redis_comes_back_the_shared_subscription_is_made_again_and_cancels_arrive() {
    let redis = OwnRedis::start();
    let data = tempfile::tempdir().unwrap();
    let port = redis.port;
    let prefix = "connections-restart:";
    let a = spawn_app_with(|settings| {
        on_redis(settings, &redis, prefix, data.path());
        settings.redis.redis_timeout_ms = 300;
    })
    .await;
    let b = spawn_app_with(|settings| {
        on_redis(settings, &redis, prefix, data.path());
        settings.redis.redis_timeout_ms = 300;
    })
    .await;
    let cancel_channel = format!("{prefix}cancel");
    wait_for_subscribers(port, &cancel_channel, 2).await;
    drop(redis);
    let _redis = OwnRedis::start_on(port);
    // The new Redis knows nothing: both instances subscribe again by themselves.
    wait_for_subscribers(port, &cancel_channel, 2).await;
    let template = a.create_template(NEVER_FINISHES).await;
    let job = a.submit_small(&template, proto::Format::Webm).await;
    b.wait_for_state(&job.job_id, proto::JobState::Running)
        .await;
    let cancelled = b.cancel(&job.job_id).await;
    assert_eq!(
        cancelled.state,
        proto::JobState::Cancelled as i32,
        "{cancelled:?}"
    );
    assert_eq!(
        a.get_job(&job.job_id).await.state,
        proto::JobState::Cancelled as i32
    );
    a.stop().await;
    b.stop().await;
}
