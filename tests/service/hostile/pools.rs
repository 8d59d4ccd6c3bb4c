//! Every pool of docs/security.md's pools table under eight attackers at once (issue 42,
//! findings 2 and 5): eight addresses before identity (127.0.0.2 to .9, the attackers'
//! sockets bound to them), then eight tenants from one address under `--auth required`, each
//! holding all it can of the pool (bodies sent as fast as the server reads them and left
//! one byte short, so that they never end; streams opened and never read), while a bystander
//! calls on: at least 95 % of its calls are served within a second.
//!
//! The test is a table ([`ROWS`]): a row names its pool as the pools table does, how the
//! server is set (the pool made small enough to fill in a moment), what the attack and the
//! bystander's call are. A new pool is covered by adding a row, and a test checks that every
//! row of the pools table has one.

use crate::api::image_slots::{png, quadrants};
use crate::helpers::{api_keys_file, grpc_headers, grpc_message, reason};
use crate::helpers::{spawn_app_with, status_of, Hold, TestApp};
use base64::Engine as _;
use bytes::Bytes;
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use lottie_render::middleware::request_body::MAX_ID_REQUEST_BYTES;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BALL: &str = "slots-ball-colors-opacity.json";
const ATTACKERS: usize = 8;
/// How soon each bystander call must be answered.
const BYSTANDER_LIMIT: Duration = Duration::from_secs(1);
/// The bystander's calls per row, and the part of them that must be served.
const BYSTANDER_CALLS: usize = 20;
const SERVED_AT_LEAST: f64 = 0.95;
/// The attackers' head start before the bystander calls: enough to fill every pool.
const RAMP: Duration = Duration::from_millis(800);
const BYSTANDER_PAUSE: Duration = Duration::from_millis(60);
/// An attacker's pause between a refused call and its next.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// What a download attacker's connection lets the server send: nearly nothing.
const STALLED_WINDOW: u32 = 1024;
/// Bytes of the outputs downloads hold: far more than the server reads ahead (4 MiB) and
/// buffers on the way out, so an unread download keeps its slot.
const LARGE_OUTPUT_BYTES: usize = 12 << 20;
/// What the large bodies' attackers declare, a gRPC message with its prefix: 4 MiB (issue
/// 42's SubmitRenders), two of them exactly the fixed quarter of the rows' 32 MiB of buffers
/// one caller had, so that declaring held it all.
const DECLARED_LARGE_BODY: usize = 4 << 20;
const GRPC_PREFIX_BYTES: usize = 5;

/// Who attacks, and who the bystander is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Callers {
    /// Anonymous, from eight addresses; the bystander from 127.0.0.1.
    Addresses,
    /// Eight tenants and the bystander's, all from 127.0.0.1 (`--auth required`).
    Tenants,
}

/// What an attacker does, each of its connections holding all it can.
#[derive(Debug, Clone, Copy)]
enum Attack {
    /// gRPC calls to `path` declaring `declared` bytes and sending `sent` (fewer), then
    /// nothing: `streams` of them on one connection, each sent again once refused.
    Bodies {
        path: &'static str,
        declared: usize,
        sent: usize,
        streams: usize,
    },
    /// HTTP/1.1 `POST /v1/templates` declaring `declared` bytes and writing all but the last
    /// as fast as the server reads, on `connections` connections.
    DoorBodies { declared: usize, connections: usize },
    /// `streams` server streams of `path` (a watch, a download) opened and never read.
    Streams { path: &'static str, streams: usize },
}

/// The bystander's call.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// UploadImage and ListTemplates in turn (a large body, then an id-only one).
    UploadAndList,
    /// The same over the HTTP door (HTTP/1.1).
    DoorUploadAndList,
    ListTemplates,
    HealthCheck,
    /// WatchRenderJob of its job, to its first snapshot.
    Watch,
    HealthWatch,
    /// The first 64 KiB of its job's output.
    Download,
}

/// What the row's server holds before the attack, for every caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Nothing,
    /// A job that stays unended (its render held before it starts).
    UnendedJob,
    /// A succeeded job whose output is [`LARGE_OUTPUT_BYTES`].
    LargeOutput,
}

struct Row {
    /// The first cell of the pool's row in docs/security.md's pools table.
    pool: &'static str,
    /// The callers it is tried with: a pool keyed by address only (health needs no
    /// identity) is tried with addresses only.
    callers: &'static [Callers],
    configure: fn(&mut ServerSettings),
    needs: Needs,
    attack: Attack,
    call: Call,
}

const BOTH: &[Callers] = &[Callers::Addresses, Callers::Tenants];
const ADDRESSES: &[Callers] = &[Callers::Addresses];

/// One row per pool (and per door where a pool has two).
const ROWS: &[Row] = &[
    Row {
        pool: "request buffers: large bodies",
        callers: BOTH,
        configure: |settings| settings.request_buffers_mb = 32,
        needs: Needs::Nothing,
        attack: Attack::Bodies {
            path: "/lottie.render.v1.TemplateService/CreateTemplate",
            declared: DECLARED_LARGE_BODY - GRPC_PREFIX_BYTES,
            sent: DECLARED_LARGE_BODY - GRPC_PREFIX_BYTES - 1,
            streams: 6,
        },
        call: Call::UploadAndList,
    },
    Row {
        pool: "request buffers: large bodies",
        callers: BOTH,
        configure: |settings| settings.request_buffers_mb = 32,
        needs: Needs::Nothing,
        attack: Attack::DoorBodies {
            declared: DECLARED_LARGE_BODY,
            connections: 3,
        },
        call: Call::DoorUploadAndList,
    },
    Row {
        pool: "request buffers: id-only calls",
        callers: BOTH,
        configure: |_| {},
        needs: Needs::Nothing,
        attack: Attack::Bodies {
            path: "/lottie.render.v1.TemplateService/GetTemplate",
            declared: MAX_ID_REQUEST_BYTES,
            sent: MAX_ID_REQUEST_BYTES - 1,
            streams: 48,
        },
        call: Call::ListTemplates,
    },
    Row {
        pool: "request buffers: health probes",
        callers: ADDRESSES,
        configure: |_| {},
        needs: Needs::Nothing,
        attack: Attack::Bodies {
            path: "/grpc.health.v1.Health/Check",
            declared: MAX_ID_REQUEST_BYTES,
            sent: MAX_ID_REQUEST_BYTES - 1,
            streams: 48,
        },
        call: Call::HealthCheck,
    },
    Row {
        pool: "watch streams",
        callers: BOTH,
        configure: |settings| settings.max_watchers = 64,
        needs: Needs::UnendedJob,
        attack: Attack::Streams {
            path: "/lottie.render.v1.RenderService/WatchRenderJob",
            streams: 16,
        },
        call: Call::Watch,
    },
    Row {
        pool: "health watch streams",
        callers: ADDRESSES,
        configure: |settings| settings.max_watchers = 64,
        needs: Needs::Nothing,
        attack: Attack::Streams {
            path: "/grpc.health.v1.Health/Watch",
            streams: 16,
        },
        call: Call::HealthWatch,
    },
    Row {
        pool: "downloads",
        callers: BOTH,
        configure: |settings| {
            settings.max_downloads = 32;
            settings.workers = Some(2);
        },
        needs: Needs::LargeOutput,
        attack: Attack::Streams {
            path: "/lottie.render.v1.RenderService/DownloadRenderOutput",
            streams: 8,
        },
        call: Call::Download,
    },
];

/// One caller: where it calls from, and its API key (tenants only).
#[derive(Debug, Clone)]
struct Caller {
    address: IpAddr,
    key: Option<String>,
}

impl Caller {
    fn attackers(callers: Callers) -> Vec<Caller> {
        (0..ATTACKERS)
            .map(|index| match callers {
                Callers::Addresses => Caller {
                    address: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + index as u8)),
                    key: None,
                },
                Callers::Tenants => Caller {
                    address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                    key: Some(format!("attacker-{index}-key")),
                },
            })
            .collect()
    }

    fn bystander(callers: Callers) -> Caller {
        Caller {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            key: (callers == Callers::Tenants).then(|| "bystander-key".to_owned()),
        }
    }
}

/// The server of one row, set for `callers`, with a render hold (engaged by the rows that
/// need an unended job).
async fn row_server(row: &Row, callers: Callers, dir: &std::path::Path, hold: &Hold) -> TestApp {
    let keys: Vec<(String, String)> = Caller::attackers(callers)
        .into_iter()
        .chain([Caller::bystander(callers)])
        .filter_map(|caller| caller.key)
        .enumerate()
        .map(|(index, key)| (format!("tenant{index}"), key))
        .collect();
    let keys: Vec<(&str, &str, &str)> = keys
        .iter()
        .map(|(tenant, key)| (tenant.as_str(), "caller", key.as_str()))
        .collect();
    let keys = (!keys.is_empty()).then(|| api_keys_file(dir, &keys));
    let script = hold.script.clone();
    let configure = row.configure;
    spawn_app_with(move |settings| {
        if let Some(keys) = keys {
            settings.auth = lottie_render::auth::AuthMode::Required;
            settings.api_keys = Some(keys);
        }
        settings.worker_executable = Some(script);
        settings.shutdown_grace_seconds = 0.1;
        configure(settings);
    })
    .await
}

/// The job each of `callers` watches or downloads (one for all when they are one tenant).
async fn jobs_for(app: &TestApp, hold: &Hold, needs: Needs, callers: &[Caller]) -> Vec<String> {
    if needs == Needs::Nothing {
        return Vec::new();
    }
    if needs == Needs::UnendedJob {
        hold.engage();
    }
    let mut jobs: Vec<String> = Vec::new();
    for caller in callers {
        if caller.key.is_none() && !jobs.is_empty() {
            jobs.push(jobs[0].clone());
            continue;
        }
        app.use_api_key(caller.key.as_deref());
        let template = app.create_template(BALL).await;
        let job = app.submit_small(&template, proto::Format::Gif).await;
        jobs.push(job.job_id);
    }
    if needs == Needs::LargeOutput {
        for (caller, job) in callers.iter().zip(&jobs) {
            app.use_api_key(caller.key.as_deref());
            app.wait_for_state(job, proto::JobState::Succeeded).await;
            let output = app.data_dir.path().join(format!("outputs/{job}.gif"));
            std::fs::write(&output, vec![7u8; LARGE_OUTPUT_BYTES]).unwrap();
        }
    }
    app.use_api_key(None);
    jobs
}

/// A TCP connection to `server` from `from`.
async fn connect_from(from: IpAddr, server: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(server).await
}

/// The headers of a gRPC call to `path` by `caller`.
fn headers_of(server: SocketAddr, path: &str, caller: &Caller) -> http::Request<()> {
    let mut headers = grpc_headers(server, path);
    if let Some(key) = &caller.key {
        let bearer = format!("Bearer {key}").parse().unwrap();
        headers.headers_mut().insert("authorization", bearer);
    }
    headers
}

/// A gRPC prefix declaring `declared` bytes and `sent` bytes of the message.
fn partial_message(declared: usize, sent: usize) -> Bytes {
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(&(declared as u32).to_be_bytes());
    bytes.resize(GRPC_PREFIX_BYTES + sent, 0);
    Bytes::from(bytes)
}

/// The request message a server stream of `path` opens with.
fn stream_request(path: &str, job: Option<&str>) -> Bytes {
    let job_id = job.unwrap_or_default().to_owned();
    if path.ends_with("/WatchRenderJob") {
        grpc_message(&proto::WatchRenderJobRequest { job_id })
    } else if path.ends_with("/DownloadRenderOutput") {
        grpc_message(&proto::DownloadRenderOutputRequest {
            job_id,
            ..Default::default()
        })
    } else {
        grpc_message(&HealthCheckRequest::default())
    }
}

/// Calls `path` on `client` with `message` again and again: each call accepted is held
/// (never read) for as long as the attack lasts, each refused is counted in `refused` and
/// made again. Returns when the connection fails.
async fn hold_calls(
    client: h2::client::SendRequest<Bytes>,
    (server, refused): (SocketAddr, Arc<AtomicUsize>),
    (path, caller): (&'static str, Caller),
    (message, ends_there): (Bytes, bool),
) {
    loop {
        let Ok(mut ready) = client.clone().ready().await else {
            return;
        };
        let headers = headers_of(server, path, &caller);
        let Ok((answer, mut stream)) = ready.send_request(headers, false) else {
            return;
        };
        if stream.send_data(message.clone(), ends_there).is_err() {
            return;
        }
        match answer.await {
            Ok(response) if status_of(&response).is_none() => {
                let _held = (response, stream);
                std::future::pending::<()>().await;
            }
            _ => {
                refused.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// One `POST /v1/templates` declaring `declared` bytes, all but the last written, until the
/// server answers (a refusal: the body never ends).
async fn door_body(server: SocketAddr, caller: &Caller, declared: usize) -> std::io::Result<()> {
    let (mut read, mut write) = connect_from(caller.address, server).await?.into_split();
    let authorization = caller
        .key
        .as_ref()
        .map(|key| format!("authorization: Bearer {key}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /v1/templates HTTP/1.1\r\nhost: {server}\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n{authorization}\r\n"
    );
    let spaces = vec![b' '; declared - 1];
    let writing = async {
        write.write_all(head.as_bytes()).await?;
        write.write_all(&spaces).await?;
        std::future::pending::<std::io::Result<()>>().await
    };
    let mut answer = [0u8; 1024];
    tokio::select! {
        written = writing => written,
        read = read.read(&mut answer) => match read {
            Ok(read) if read > 0 => Err(std::io::Error::other("refused")),
            _ => Ok(()),
        },
    }
}

/// One attacker, holding all it can until it is aborted, counting its calls refused.
async fn attacker(
    attack: Attack,
    (server, refused): (SocketAddr, Arc<AtomicUsize>),
    caller: Caller,
    job: Option<String>,
) {
    let (path, message, ends_there, streams, window) = match attack {
        Attack::DoorBodies {
            declared,
            connections,
        } => {
            let bodies = (0..connections).map(|_| async {
                loop {
                    if door_body(server, &caller, declared).await.is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            });
            futures_util::future::join_all(bodies).await;
            return;
        }
        Attack::Bodies {
            path,
            declared,
            sent,
            streams,
        } => (path, partial_message(declared, sent), false, streams, None),
        Attack::Streams { path, streams } => {
            let message = stream_request(path, job.as_deref());
            (path, message, true, streams, Some(STALLED_WINDOW))
        }
    };
    loop {
        if let Ok(tcp) = connect_from(caller.address, server).await {
            let mut builder = h2::client::Builder::new();
            if let Some(window) = window {
                builder.initial_window_size(window);
            }
            if let Ok((client, connection)) = builder.handshake::<_, Bytes>(tcp).await {
                let connection = tokio::spawn(connection);
                let calls = (0..streams).map(|_| {
                    let call = (path, caller.clone());
                    let counted = (server, refused.clone());
                    hold_calls(client.clone(), counted, call, (message.clone(), ends_there))
                });
                futures_util::future::join_all(calls).await;
                connection.abort();
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// A small PNG, the bystander's upload.
fn small_png() -> Vec<u8> {
    png(&quadrants(8, 8))
}

/// The bystander's `turn`th call of kind `call`; an error says why it was not served.
async fn bystander_call(
    call: Call,
    app: &TestApp,
    (caller, job): (&Caller, Option<&str>),
    (turn, door): (usize, &reqwest::Client),
) -> Result<(), String> {
    let key = caller.key.as_deref();
    let refused = |status: tonic::Status| format!("{:?} {}", status.code(), reason(&status));
    match call {
        Call::UploadAndList if turn % 2 == 0 => {
            let upload = proto::UploadImageRequest {
                data: small_png().into(),
            };
            let uploaded = app.templates_as(key).upload_image(upload).await;
            uploaded.map(drop).map_err(refused)
        }
        Call::UploadAndList | Call::ListTemplates => {
            let listing = proto::ListTemplatesRequest::default();
            let listed = app.templates_as(key).list_templates(listing).await;
            listed.map(drop).map_err(refused)
        }
        Call::DoorUploadAndList => {
            let url = format!("http://{}", app.address);
            let request = if turn % 2 == 0 {
                let data = base64::engine::general_purpose::STANDARD.encode(small_png());
                door.post(format!("{url}/v1/images"))
                    .json(&serde_json::json!({ "data": data }))
            } else {
                door.get(format!("{url}/v1/templates"))
            };
            let request = match key {
                Some(key) => request.bearer_auth(key),
                None => request,
            };
            let response = request.send().await.map_err(|error| error.to_string())?;
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        }
        Call::HealthCheck => {
            let checked = HealthClient::new(app.channel.clone())
                .check(HealthCheckRequest::default())
                .await;
            checked.map(drop).map_err(refused)
        }
        Call::HealthWatch => {
            let mut health = HealthClient::new(app.channel.clone());
            let mut watch = health
                .watch(HealthCheckRequest::default())
                .await
                .map_err(refused)?
                .into_inner();
            watch.message().await.map(drop).map_err(refused)
        }
        Call::Watch => {
            let job_id = job.unwrap_or_default().to_owned();
            let watching = proto::WatchRenderJobRequest { job_id };
            let mut renders = app.renders_as(key);
            let mut watch = renders
                .watch_render_job(watching)
                .await
                .map_err(refused)?
                .into_inner();
            watch.message().await.map(drop).map_err(refused)
        }
        Call::Download => {
            let asked = proto::DownloadRenderOutputRequest {
                job_id: job.unwrap_or_default().to_owned(),
                length: 64 * 1024,
                ..Default::default()
            };
            let mut renders = app.renders_as(key);
            let mut chunks = renders
                .download_render_output(asked)
                .await
                .map_err(refused)?
                .into_inner();
            while chunks.message().await.map_err(refused)?.is_some() {}
            Ok(())
        }
    }
}

/// What the bystander saw during one row's attack, and how often the attackers were
/// refused (none would mean they never reached their share: the attack did not attack).
struct Seen {
    served: usize,
    worst: Duration,
    unserved: Vec<String>,
    attackers_refused: usize,
}

/// Runs `row` with `callers`: its server, the eight attackers, and the bystander's calls.
async fn run(row: &Row, callers: Callers) -> Seen {
    let dir = tempfile::tempdir().unwrap();
    let hold = Hold::new(dir.path());
    let app = row_server(row, callers, dir.path(), &hold).await;
    let attackers = Caller::attackers(callers);
    let bystander = Caller::bystander(callers);
    let everyone: Vec<Caller> = attackers
        .iter()
        .cloned()
        .chain([bystander.clone()])
        .collect();
    let jobs = jobs_for(&app, &hold, row.needs, &everyone).await;
    let job_of = |index: usize| jobs.get(index).cloned();
    let refused = Arc::new(AtomicUsize::new(0));
    let attacks: Vec<_> = attackers
        .into_iter()
        .enumerate()
        .map(|(index, caller)| {
            let counted = (app.address, refused.clone());
            tokio::spawn(attacker(row.attack, counted, caller, job_of(index)))
        })
        .collect();
    tokio::time::sleep(RAMP).await;
    let door = reqwest::Client::builder().http1_only().build().unwrap();
    let job = job_of(ATTACKERS);
    let mut seen = Seen {
        served: 0,
        worst: Duration::ZERO,
        unserved: Vec::new(),
        attackers_refused: 0,
    };
    for turn in 0..BYSTANDER_CALLS {
        let started = tokio::time::Instant::now();
        let call = bystander_call(row.call, &app, (&bystander, job.as_deref()), (turn, &door));
        match tokio::time::timeout(BYSTANDER_LIMIT, call).await {
            Ok(Ok(())) => seen.served += 1,
            Ok(Err(why)) => seen.unserved.push(why),
            Err(_) => seen
                .unserved
                .push(format!("not answered within {BYSTANDER_LIMIT:?}")),
        }
        seen.worst = seen.worst.max(started.elapsed());
        tokio::time::sleep(BYSTANDER_PAUSE).await;
    }
    seen.attackers_refused = refused.load(Ordering::Relaxed);
    for attack in attacks {
        attack.abort();
    }
    hold.let_go();
    app.stop().await;
    seen
}

/// Runs every row that applies to `callers`, and asserts the bystander was served in each.
async fn every_pool_leaves_the_bystander_served(callers: Callers) {
    let mut failures = Vec::new();
    for row in ROWS.iter().filter(|row| row.callers.contains(&callers)) {
        let seen = run(row, callers).await;
        eprintln!(
            "{} ({:?}, {callers:?}): {}/{BYSTANDER_CALLS} served, worst {:?}, unserved {:?}; \
             attackers refused {} times",
            row.pool, row.call, seen.served, seen.worst, seen.unserved, seen.attackers_refused
        );
        if (seen.served as f64) < SERVED_AT_LEAST * BYSTANDER_CALLS as f64 {
            failures.push(format!(
                "{} ({:?}): {}/{BYSTANDER_CALLS} served, {:?}",
                row.pool, row.call, seen.served, seen.unserved
            ));
        }
        if seen.attackers_refused == 0 {
            failures.push(format!(
                "{} ({:?}): the attackers were never refused, so never held all they could",
                row.pool, row.call
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn eight_addresses_holding_all_they_can_of_each_pool_leave_a_bystander_served() {
    every_pool_leaves_the_bystander_served(Callers::Addresses).await;
}

#[tokio::test]
async fn eight_tenants_from_one_address_holding_all_they_can_of_each_pool_leave_a_bystander_served()
{
    every_pool_leaves_the_bystander_served(Callers::Tenants).await;
}

/// The pools table's first column, below its header.
fn pools_of_the_security_doc() -> Vec<String> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md"),
    )
    .unwrap();
    let table = doc
        .split("\n### Pools\n")
        .nth(1)
        .expect("a \"### Pools\" section in docs/security.md");
    table
        .lines()
        .skip_while(|line| !line.starts_with("| pool |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .map(|cell| cell.trim().to_owned())
        .collect()
}

#[test]
fn every_pool_of_the_security_docs_table_has_a_row_here_and_every_row_a_pool_there() {
    let documented = pools_of_the_security_doc();
    assert!(documented.len() >= 6, "{documented:?}");
    for pool in &documented {
        assert!(
            ROWS.iter().any(|row| row.pool == pool),
            "the pool {pool:?} of docs/security.md has no row in ROWS"
        );
    }
    for row in ROWS {
        assert!(
            documented.iter().any(|pool| pool == row.pool),
            "the row {:?} names no pool of docs/security.md",
            row.pool
        );
    }
}
