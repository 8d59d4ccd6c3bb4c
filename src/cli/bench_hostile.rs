//! `lottie-render bench-hostile`: replays the hostile set (what an attacker sends: file
//! reads through image assets, memory and CPU bombs at CreateTemplate, streams that never
//! send their body, fan-out, poisoned listings) against a server and prints, per case, the
//! answer, the time it took, the server's peak RSS afterwards and its CPU time per hostile
//! request, and whether a bystander of another tenant on another connection was served
//! meanwhile. Without `--server` it starts `serve` of this executable as a child process
//! (port 0, a data directory of its own, API keys for an attacking and a bystanding tenant,
//! Redis when `--redis-url` is given), so its memory and CPU are measured alone.

mod analysis;
mod expressions;
mod jobs;
mod parse;
pub mod payloads;
mod shares;

use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::{Request, Status};
use tonic_types::StatusExt;

#[derive(Debug, clap::Args)]
pub struct BenchHostileArgs {
    /// A running server to attack; when unset, this executable's `serve` is started for the
    /// run with its own data directory and [`STARTED_SERVER_FLAGS`].
    #[arg(long)]
    pub server: Option<SocketAddr>,
    /// The process id of `--server`, to read its peak RSS from /proc (same machine only).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Only the cases whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Redis for the started server (`redis://127.0.0.1:6379/0`), under a key prefix of the
    /// run's own: the cases that weigh what an attack leaves in Redis need it and say so
    /// without it.
    #[arg(long)]
    pub redis_url: Option<String>,
}

/// API key of the attacking tenant (`attacker`) on the started server.
pub const ATTACKER_KEY: &str = "bench-hostile-attacker-key";
/// API key of the bystander's tenant (`bystander`) on the started server.
pub const BYSTANDER_KEY: &str = "bench-hostile-bystander-key";

/// Flags of the server the bench starts: one worker and a short queue so the fan-out case
/// shows the bound at small numbers, a 2 s body deadline and 64 watchers so the slow-body
/// and watcher cases finish quickly (the defaults are 30 s and 1,024), and API keys
/// optional, so anonymous attacks are the `default` tenant's and the bystander is a tenant
/// of its own (`--api-keys` is added with the file).
const STARTED_SERVER_FLAGS: [&str; 10] = [
    "--workers",
    "1",
    "--queue-capacity",
    "2",
    "--request-body-timeout-ms",
    "2000",
    "--max-watchers",
    "64",
    "--auth",
    "optional",
];
/// Watch streams the watcher case opens (the started server allows 64).
const WATCH_STREAMS: usize = 80;
/// How long the started server may take to log that it serves.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How long one case may take before it is reported as hanging.
const CASE_LIMIT: Duration = Duration::from_secs(120);
/// A bystander call slower than this during a case counts as "slowed" (the issue's promise:
/// every bystander served within a second).
const BYSTANDER_LIMIT: Duration = Duration::from_secs(1);
/// Streams opened without a body by the stream-flood case (the old global in-flight limit).
const FLOOD_STREAMS: usize = 512;
/// Identical submissions with fresh keys in the fan-out case.
const IDENTICAL_SUBMISSIONS: usize = 60;
/// The stock gRPC clients' default largest message.
const STOCK_CLIENT_MESSAGE_LIMIT: usize = 4 * 1024 * 1024;

pub fn run(args: BenchHostileArgs) -> ExitCode {
    super::run_bench(bench(&args))
}

/// A server started for the run, killed when the run ends.
pub(super) struct StartedServer {
    child: Child,
    _data_dir: tempfile::TempDir,
}

impl Drop for StartedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve` of this executable with [`STARTED_SERVER_FLAGS`], the two tenants' API keys
/// and `extra` flags (a case that needs a server of its own, TLS say, starts one too).
pub(super) fn start_server(extra: &[String]) -> anyhow::Result<(StartedServer, SocketAddr)> {
    let data_dir = tempfile::tempdir()?;
    let api_keys = data_dir.path().join("api-keys");
    std::fs::write(
        &api_keys,
        format!(
            "attacker bench {}\nbystander bench {}\n",
            crate::auth::api_keys::sha256_hex(ATTACKER_KEY),
            crate::auth::api_keys::sha256_hex(BYSTANDER_KEY)
        ),
    )?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(STARTED_SERVER_FLAGS)
        .arg("--api-keys")
        .arg(&api_keys)
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir.path().join("data"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && line.contains(" serving ") {
                if let Some(listen) = logged_address(&line) {
                    let _ = found.send(listen);
                    sent = true;
                }
            }
        }
    });
    let server = StartedServer {
        child,
        _data_dir: data_dir,
    };
    let address = address
        .recv_timeout(START_LIMIT)
        .map_err(|_| anyhow::anyhow!("the server did not start within {START_LIMIT:?}"))?;
    Ok((server, address))
}

/// `listen=Some(ADDR)` of a text log line.
fn logged_address(line: &str) -> Option<SocketAddr> {
    let start = line.find("listen=Some(")? + "listen=Some(".len();
    let end = line[start..].find(')')? + start;
    line[start..end].parse().ok()
}

/// Peak RSS of a process, MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

pub(super) struct Target {
    pub(super) address: SocketAddr,
    pub(super) pid: Option<u32>,
    /// Whether the server knows [`ATTACKER_KEY`] and [`BYSTANDER_KEY`] (the started one).
    pub(super) keys: bool,
    /// The started server's Redis and its key prefix, with `--redis-url`.
    pub(super) redis: Option<RedisTarget>,
}

pub(super) struct RedisTarget {
    pub(super) url: String,
    pub(super) key_prefix: String,
}

impl Target {
    pub(super) async fn channel(&self) -> anyhow::Result<Channel> {
        Ok(Channel::from_shared(format!("http://{}", self.address))?
            .connect()
            .await?)
    }

    /// `message` as a call of the tenant whose API key is `key` (anonymous, the `default`
    /// tenant, against a server that does not know the bench's keys).
    pub(super) fn as_tenant<T>(&self, message: T, key: &str) -> anyhow::Result<Request<T>> {
        let mut request = Request::new(message);
        if self.keys {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {key}").parse()?);
        }
        Ok(request)
    }
}

/// One hostile case: its name, what the service should answer, how many hostile requests
/// it sends (the server's CPU time is shown per request), and the attack.
pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) expected: &'static str,
    pub(super) requests: u32,
    pub(super) attack: fn(&Target) -> futures_util::future::BoxFuture<'_, anyhow::Result<String>>,
}

async fn bench(args: &BenchHostileArgs) -> anyhow::Result<()> {
    let (_server, target) = match args.server {
        Some(address) => (
            None,
            Target {
                address,
                pid: args.server_pid,
                keys: false,
                redis: None,
            },
        ),
        None => {
            let redis = args.redis_url.as_ref().map(|url| RedisTarget {
                url: url.clone(),
                key_prefix: format!("bench-hostile-{}:", std::process::id()),
            });
            let redis_flags: Vec<String> = match &redis {
                Some(redis) => vec![
                    "--redis-url".into(),
                    redis.url.clone(),
                    "--redis-key-prefix".into(),
                    redis.key_prefix.clone(),
                ],
                None => Vec::new(),
            };
            let (server, address) = start_server(&redis_flags)?;
            let pid = server.child.id();
            (
                Some(server),
                Target {
                    address,
                    pid: Some(pid),
                    keys: true,
                    redis,
                },
            )
        }
    };
    println!(
        "hostile set against {} ({} cores){}",
        target.address,
        std::thread::available_parallelism().map_or(1, usize::from),
        if args.server.is_none() {
            format!(
                ", started with {} --api-keys (tenants attacker, bystander){}",
                STARTED_SERVER_FLAGS.join(" "),
                if target.redis.is_some() {
                    " --redis-url"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        }
    );
    println!(
        "| case | expected | answer | ms | bystander worst ms | server peak RSS MiB | server CPU ms per hostile request |"
    );
    println!("|---|---|---|---|---|---|---|");
    let bystander_channel = target.channel().await?;
    for case in cases() {
        if args
            .only
            .as_deref()
            .is_some_and(|only| !case.name.contains(only))
        {
            continue;
        }
        let started = Instant::now();
        let cpu_before = target.pid.and_then(|pid| crate::os::cpu_time_of(pid).ok());
        let (done, finished) = tokio::sync::watch::channel(false);
        let (answer, bystander) = tokio::join!(
            async {
                let answer = tokio::time::timeout(CASE_LIMIT, (case.attack)(&target)).await;
                let _ = done.send(true);
                answer
            },
            bystander_until(&target, bystander_channel.clone(), finished),
        );
        let cpu_after = target.pid.and_then(|pid| crate::os::cpu_time_of(pid).ok());
        let elapsed = started.elapsed();
        let answer = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => format!("bench error: {error:#}"),
            Err(_) => format!("no answer within {CASE_LIMIT:?}"),
        };
        let bystander = match bystander {
            Some(worst) if worst <= BYSTANDER_LIMIT => format!("{:.0}", worst.as_secs_f64() * 1e3),
            Some(worst) => format!("{:.0} (slowed)", worst.as_secs_f64() * 1e3),
            None => "refused".into(),
        };
        let rss = target
            .pid
            .and_then(peak_rss_mib)
            .map_or("?".into(), |mib| format!("{mib:.0}"));
        let cpu_per_request = match (cpu_before, cpu_after) {
            (Some(before), Some(after)) => format!(
                "{:.1}",
                after.saturating_sub(before).as_secs_f64() * 1e3 / f64::from(case.requests.max(1))
            ),
            _ => "?".into(),
        };
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} |",
            case.name,
            case.expected,
            answer,
            elapsed.as_secs_f64() * 1e3,
            bystander,
            rss,
            cpu_per_request
        );
    }
    Ok(())
}

/// A bystander of its own tenant on its own connection calls ListTemplates every 50 ms until
/// the case has finished (at least once); answers its slowest call, or None when it was
/// refused.
async fn bystander_until(
    target: &Target,
    channel: Channel,
    mut finished: tokio::sync::watch::Receiver<bool>,
) -> Option<Duration> {
    let mut client = TemplateServiceClient::new(channel);
    let mut worst = Duration::ZERO;
    loop {
        let started = Instant::now();
        let request = target
            .as_tenant(
                proto::ListTemplatesRequest {
                    page_size: 1,
                    page_token: String::new(),
                },
                BYSTANDER_KEY,
            )
            .ok()?;
        let answer =
            tokio::time::timeout(BYSTANDER_LIMIT * 5, client.list_templates(request)).await;
        match answer {
            Ok(Ok(_)) => worst = worst.max(started.elapsed()),
            _ => return None,
        }
        if *finished.borrow() {
            return Some(worst);
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), finished.changed()).await;
    }
}

/// "OK" or "CODE REASON" of an answer.
fn outcome<T>(answer: &Result<T, Status>) -> String {
    match answer {
        Ok(_) => "OK".into(),
        Err(status) => {
            let reason = status
                .get_error_details()
                .error_info()
                .map(|info| info.reason.clone())
                .unwrap_or_default();
            format!("{:?} {reason}", status.code())
        }
    }
}

fn cases() -> Vec<Case> {
    let mut cases = first_round_cases();
    // The second round (issue 21), one module a surface.
    cases.extend(shares::cases());
    cases.extend(jobs::cases());
    cases.extend(parse::cases());
    cases.extend(expressions::cases());
    // Last: its hog case leaves the attacking tenant backed off.
    cases.extend(analysis::cases());
    cases
}

/// The first round of attacks: paths, devices, decoder and glyph bombs, stream floods.
fn first_round_cases() -> Vec<Case> {
    vec![
        Case {
            name: "image-asset-path-traversal",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| {
                Box::pin(create(
                    target,
                    image_path_template("/../../../../usr/share/", "debian-logo.png"),
                ))
            },
        },
        Case {
            name: "image-asset-device-path",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| Box::pin(create(target, image_path_template("/dev/", "ptmx"))),
        },
        Case {
            name: "image-asset-url",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| {
                Box::pin(create(
                    target,
                    image_path_template("http://169.254.169.254/", "x.png"),
                ))
            },
        },
        Case {
            name: "embedded-png-100000x100000",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| Box::pin(create(target, huge_png_template())),
        },
        Case {
            name: "chars-glyph-memory-bomb",
            expected: "InvalidArgument TEMPLATE_TOO_COMPLEX",
            requests: 1,
            attack: |target| Box::pin(create(target, chars_memory_bomb())),
        },
        Case {
            name: "box-text-cpu-bomb",
            expected: "bounded (OK or TEMPLATE_TOO_COMPLEX)",
            requests: 1,
            attack: |target| Box::pin(create(target, box_text_cpu_bomb())),
        },
        Case {
            name: "parent-chain-5000-layers",
            expected: "OK, fast",
            requests: 1,
            attack: |target| Box::pin(create(target, parent_chain(5000))),
        },
        Case {
            name: "512-streams-without-body",
            expected: "bystander served",
            requests: FLOOD_STREAMS as u32,
            attack: |target| Box::pin(streams_without_body(target)),
        },
        Case {
            name: "headers-then-silence",
            expected: "REQUEST_BODY_TIMEOUT at the body deadline",
            requests: 1,
            attack: |target| Box::pin(headers_then_silence(target)),
        },
        Case {
            name: "80-health-watches",
            expected: "TOO_MANY_WATCHERS beyond the caller's share (16 of 64)",
            requests: WATCH_STREAMS as u32,
            attack: |target| Box::pin(many_watches(target)),
        },
        Case {
            name: "60-identical-submissions-new-keys",
            expected: "QUEUE_FULL beyond capacity",
            requests: IDENTICAL_SUBMISSIONS as u32 + 1,
            attack: |target| Box::pin(identical_submissions(target)),
        },
        Case {
            name: "7mb-default-text-then-list",
            expected: "create TEMPLATE_RECORD_TOO_LARGE (record over 1 MiB); list < 4 MiB",
            requests: 2,
            attack: |target| Box::pin(huge_default_text_listing(target)),
        },
    ]
}

/// CreateTemplate of `template`; answers the outcome.
async fn create(target: &Target, template: Value) -> anyhow::Result<String> {
    let mut client = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let answer = client
        .create_template(proto::CreateTemplateRequest {
            name: "hostile".into(),
            lottie_json: serde_json::to_vec(&template)?,
            fonts: Default::default(),
        })
        .await;
    Ok(outcome(&answer))
}

/// A minimal valid animation: 100×100, 30 fps, one second, with `layers` and `assets`.
fn animation(layers: Vec<Value>, assets: Vec<Value>) -> Value {
    json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "assets": assets, "layers": layers,
    })
}

fn transform() -> Value {
    json!({
        "o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [50, 50, 0]},
        "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}
    })
}

fn image_layer(reference: &str) -> Value {
    json!({"ddd": 0, "ind": 1, "ty": 2, "refId": reference, "ks": transform(),
           "ip": 0, "op": 30, "st": 0, "sr": 1})
}

fn image_path_template(directory: &str, file: &str) -> Value {
    animation(
        vec![image_layer("image")],
        vec![json!({"id": "image", "w": 64, "h": 64, "u": directory, "p": file, "e": 0})],
    )
}

/// A PNG whose header claims 100000×100000 pixels (40 GB decoded): only the signature,
/// IHDR and IEND, with correct CRCs, so a decoder believes it.
fn huge_png_template() -> Value {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    png_chunk(&mut png, b"IHDR", &ihdr);
    png_chunk(&mut png, b"IEND", &[]);
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    animation(
        vec![image_layer("image")],
        vec![json!({"id": "image", "w": 100000, "h": 100000, "u": "", "p": uri, "e": 1})],
    )
}

fn png_chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE) as PNG chunks need it. Hand-written: eight lines for a bench input do not
/// justify a dependency.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A text layer (`ty` 5) showing `documents` (text document keyframes).
fn text_layer(documents: Vec<Value>) -> Value {
    json!({"ddd": 0, "ind": 1, "ty": 5, "nm": "title", "ks": transform(),
           "ip": 0, "op": 30, "st": 0, "sr": 1,
           "t": {"d": {"k": documents}, "p": {}, "m": {"g": 1, "a": {"a": 0, "k": [0, 0]}}, "a": []}})
}

fn fonts() -> Value {
    json!({"list": [{"fName": "Bomb", "fFamily": "Bomb", "fStyle": "Regular", "ascent": 75}]})
}

/// The template's own glyph for "W": 64 paths of 150 vertices each, and a text of 5,000 W
/// in 4 keyframes: ~20,000 glyphs of 9,600 vertices each if expanded naively (hundreds of
/// millions of points), from a template under 1 MB.
fn chars_memory_bomb() -> Value {
    let path = |offset: f64| {
        let vertices: Vec<Value> = (0..150)
            .map(|i| {
                let angle = f64::from(i) / 150.0 * std::f64::consts::TAU;
                json!([offset + 10.0 * angle.cos(), 10.0 * angle.sin()])
            })
            .collect();
        let tangents = vec![json!([0, 0]); 150];
        json!({"ty": "sh", "ks": {"a": 0, "k": {"c": true, "v": vertices, "i": tangents, "o": tangents}}})
    };
    let shapes: Vec<Value> = (0..64).map(|i| path(f64::from(i) * 0.1)).collect();
    let glyph = json!({"ch": "W", "size": 100, "style": "Regular", "w": 60, "fFamily": "Bomb",
                       "data": {"shapes": [{"ty": "gr", "it": shapes}]}});
    let text = "W".repeat(5000);
    let documents = (0..4)
        .map(|frame| {
            json!({"s": {"s": 12, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 14,
                                   "ls": 0, "fc": [0, 0, 0]}, "t": frame * 5})
        })
        .collect();
    let mut template = animation(vec![text_layer(documents)], vec![]);
    template["fonts"] = fonts();
    template["chars"] = json!([glyph]);
    template
}

/// Box text that never fits (a 1×1 px box) in 1,000 keyframes: each document is shrunk and
/// wrapped again and again.
fn box_text_cpu_bomb() -> Value {
    let text = "lorem ipsum dolor sit amet ".repeat(8);
    let documents = (0..1000)
        .map(|frame| {
            json!({"s": {"s": 400, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 400,
                                   "ls": 0, "fc": [0, 0, 0], "sz": [1, 1], "ps": [0, 0]},
                            "t": frame})
        })
        .collect();
    let mut template = animation(vec![text_layer(documents)], vec![]);
    template["fonts"] = fonts();
    template
}

/// `count` null layers, each the parent of the next: an honest large template.
fn parent_chain(count: u32) -> Value {
    let layers = (1..=count)
        .map(|index| {
            let mut layer = json!({"ddd": 0, "ind": index, "ty": 3, "ks": transform(),
                                    "ip": 0, "op": 30, "st": 0, "sr": 1});
            if index > 1 {
                layer["parent"] = json!(index - 1);
            }
            layer
        })
        .collect();
    animation(layers, vec![])
}

/// A raw HTTP/2 connection to the target (for calls a gRPC client would not make) and the
/// task that drives it (abort it to close the connection).
async fn raw_connection(
    target: &Target,
) -> anyhow::Result<(
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
)> {
    let tcp = tokio::net::TcpStream::connect(target.address).await?;
    let (client, connection) = h2::client::handshake(tcp).await?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client.ready().await?, driver))
}

/// The headers of a ListTemplates call, whose body the caller then sends or withholds.
fn list_templates_headers(target: &Target) -> anyhow::Result<http::Request<()>> {
    Ok(http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/lottie.render.v1.TemplateService/ListTemplates",
            target.address
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?)
}

/// One HTTP/2 connection opens [`FLOOD_STREAMS`] calls with headers and no body; another
/// connection's call must still be served.
async fn streams_without_body(target: &Target) -> anyhow::Result<String> {
    let (mut client, driver) = raw_connection(target).await?;
    let mut opened = 0;
    let mut streams = Vec::new();
    for _ in 0..FLOOD_STREAMS {
        let request = list_templates_headers(target)?;
        // Beyond the server's stream limit, h2 makes the caller wait: stop there.
        match tokio::time::timeout(Duration::from_millis(200), client.clone().ready()).await {
            Ok(Ok(ready)) => client = ready,
            _ => break,
        }
        match client.send_request(request, false) {
            Ok(stream) => {
                streams.push(stream);
                opened += 1;
            }
            Err(_) => break,
        }
    }
    // Let the server receive every stream's headers before the bystander calls.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bystander = TemplateServiceClient::new(target.channel().await?);
    let started = Instant::now();
    let answer = bystander
        .list_templates(proto::ListTemplatesRequest {
            page_size: 1,
            page_token: String::new(),
        })
        .await;
    let waited = started.elapsed();
    drop(streams);
    driver.abort();
    Ok(format!(
        "{opened} calls started without a body on one connection (h2 holds those beyond the server's stream limit); bystander {} in {:.0} ms",
        outcome(&answer),
        waited.as_secs_f64() * 1e3
    ))
}

/// One call whose headers arrive and whose body never does; answers what the server said.
async fn headers_then_silence(target: &Target) -> anyhow::Result<String> {
    let (mut client, driver) = raw_connection(target).await?;
    let request = list_templates_headers(target)?;
    let (response, _body_sender) = client.send_request(request, false)?;
    let started = Instant::now();
    let response = response.await?;
    // A refusal comes as trailers-only headers; a served call would need a body first.
    let status = Status::from_header_map(response.headers());
    let answer = match status {
        Some(status) => outcome::<()>(&Err(status)),
        None => format!("HTTP {}", response.status()),
    };
    driver.abort();
    Ok(format!(
        "{answer} after {:.1} s",
        started.elapsed().as_secs_f64()
    ))
}

/// Opens [`WATCH_STREAMS`] health Watch streams over four connections and holds them; counts
/// the answers.
async fn many_watches(target: &Target) -> anyhow::Result<String> {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(target.channel().await?);
    }
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut held = Vec::new();
    for index in 0..WATCH_STREAMS {
        let mut health = HealthClient::new(channels[index % channels.len()].clone());
        let answer = health
            .watch(HealthCheckRequest {
                service: String::new(),
            })
            .await;
        *counts.entry(outcome(&answer)).or_default() += 1;
        if let Ok(stream) = answer {
            held.push(stream.into_inner());
        }
    }
    drop(held);
    Ok(counts
        .iter()
        .map(|(answer, count)| format!("{count}× {answer}"))
        .collect::<Vec<_>>()
        .join(", "))
}

/// Registers a template that renders for a few seconds, then sends
/// [`IDENTICAL_SUBMISSIONS`] identical renders with fresh keys; counts the answers.
async fn identical_submissions(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates = TemplateServiceClient::new(channel.clone());
    let mut slow = parent_chain(20);
    slow["op"] = json!(1800);
    for layer in slow["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(1800);
    }
    let template = templates
        .create_template(proto::CreateTemplateRequest {
            name: "slow".into(),
            lottie_json: serde_json::to_vec(&slow)?,
            fonts: Default::default(),
        })
        .await?
        .into_inner();
    let mut renders = RenderServiceClient::new(channel);
    let run = std::process::id();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut accepted = Vec::new();
    for index in 0..IDENTICAL_SUBMISSIONS {
        let mut request = Request::new(proto::RenderRequest {
            template_id: template.template_id.clone(),
            modifications: None,
            output: Some(proto::OutputSpec {
                format: proto::Format::Mp4 as i32,
                fps: 60,
                width: 1920,
                height: 1920,
                background: None,
            }),
        });
        request.metadata_mut().insert(
            "idempotency-key",
            format!("bench-hostile-{run}-{index}").parse()?,
        );
        let answer = renders.submit_render(request).await;
        *counts.entry(outcome(&answer)).or_default() += 1;
        if let Ok(job) = answer {
            accepted.push(job.into_inner().job_id);
        }
    }
    for job_id in accepted {
        let _ = renders
            .cancel_render_job(proto::CancelRenderJobRequest { job_id })
            .await;
    }
    Ok(counts
        .iter()
        .map(|(answer, count)| format!("{count}× {answer}"))
        .collect::<Vec<_>>()
        .join(", "))
}

/// A template whose text slot's default is 7 MB, then ListTemplates with a stock client's
/// 4 MiB message limit.
async fn huge_default_text_listing(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates =
        TemplateServiceClient::new(channel).max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let text = "x".repeat(7 * 1000 * 1000);
    let document = json!({"s": {"s": 12, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 14,
                               "ls": 0, "fc": [0, 0, 0]}, "t": 0});
    let mut template = animation(vec![text_layer(vec![document])], vec![]);
    template["fonts"] = fonts();
    let created = templates
        .create_template(proto::CreateTemplateRequest {
            name: "huge default".into(),
            lottie_json: serde_json::to_vec(&template)?,
            fonts: Default::default(),
        })
        .await;
    let listed = templates
        .list_templates(proto::ListTemplatesRequest {
            page_size: 100,
            page_token: String::new(),
        })
        .await;
    let size = listed
        .as_ref()
        .map(|page| prost::Message::encoded_len(page.get_ref()))
        .unwrap_or_default();
    Ok(format!(
        "create {}; list {} ({:.1} KiB)",
        outcome(&created),
        outcome(&listed),
        size as f64 / 1024.0
    ))
}
