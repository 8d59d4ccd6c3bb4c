//! `lottie-render bench-hostile`: replays the hostile set (what an attacker sends: file
//! reads through image assets, memory and CPU bombs at CreateTemplate, streams that never
//! send their body, fan-out, poisoned listings) against a server and prints, per case, the
//! answer, the time it took, the server's peak RSS afterwards and its CPU time per hostile
//! request, and whether a bystander of another tenant on another connection was served
//! meanwhile. Without `--server` it starts `serve` of this executable as a child process
//! (port 0, a data directory of its own, API keys for an attacking and a bystanding tenant,
//! Redis when `--redis-url` is given), so its memory and CPU are measured alone.

mod analysis;
mod archives;
mod expressions;
mod first_round;
mod images;
mod jobs;
mod outputs;
mod parse;
pub mod payloads;
mod raw_calls;
mod server;
mod shares;
mod templates;
mod third_round;
mod third_round_pools;
mod third_round_streams;

use templates::{animation, fonts, image_layer, parent_chain, png_chunk, text_layer};

use crate::grpc::proto;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use server::{start_server, StartedServer, STARTED_SERVER_FLAGS};
use std::net::SocketAddr;
use std::process::ExitCode;
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
    /// Runs the started servers under an address-space limit (RLIMIT_AS, the soft limit) of
    /// this many MiB, as a container's memory limit would hold them (`./dev bench-hostile`
    /// gives 1024; the last one given counts); their workers set their own limits. 0 or
    /// unset: none.
    #[arg(long, overrides_with = "server_address_space_mb")]
    pub server_address_space_mb: Option<u64>,
}

/// API key of the attacking tenant (`attacker`) on the started server.
pub(crate) const ATTACKER_KEY: &str = "bench-hostile-attacker-key";
/// API key of the bystander's tenant (`bystander`) on the started server.
pub(crate) const BYSTANDER_KEY: &str = "bench-hostile-bystander-key";

/// How long one case may take before it is reported as hanging.
const CASE_LIMIT: Duration = Duration::from_secs(120);
/// A bystander call slower than this during a case counts as "slowed" (the promise:
/// every bystander served within a second).
const BYSTANDER_LIMIT: Duration = Duration::from_secs(1);
/// The stock gRPC clients' default largest message.
const STOCK_CLIENT_MESSAGE_LIMIT: usize = 4 * 1024 * 1024;

pub(crate) fn run(args: BenchHostileArgs) -> ExitCode {
    super::run_bench(bench(&args))
}

pub(super) struct Target {
    pub(super) address: SocketAddr,
    pub(super) pid: Option<u32>,
    /// Whether the server knows [`ATTACKER_KEY`] and [`BYSTANDER_KEY`] (the started one).
    pub(super) keys: bool,
    /// The started server's Redis and its key prefix, with `--redis-url`.
    pub(super) redis: Option<RedisTarget>,
    /// The started servers' address-space limit, bytes (`--server-address-space-mb`): a
    /// case that starts a server of its own starts it under the same.
    pub(super) address_space_bytes: Option<u64>,
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

    /// CreateTemplate of `lottie_json` (no fonts) named `name`, as the tenant of `key`.
    pub(super) fn template_request(
        &self,
        name: impl Into<String>,
        lottie_json: Vec<u8>,
        key: &str,
    ) -> anyhow::Result<Request<proto::CreateTemplateRequest>> {
        let message = proto::CreateTemplateRequest {
            name: name.into(),
            lottie_json: lottie_json.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        };
        self.as_tenant(message, key)
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

/// The started server of a run (None against `--server`) and the target it makes.
fn started_target(args: &BenchHostileArgs) -> anyhow::Result<(Option<StartedServer>, Target)> {
    let address_space_bytes = args
        .server_address_space_mb
        .filter(|mib| *mib > 0)
        .map(|mib| mib << 20);
    if let Some(address) = args.server {
        let target = Target {
            address,
            pid: args.server_pid,
            keys: false,
            redis: None,
            address_space_bytes: None,
        };
        return Ok((None, target));
    }
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
    let (server, address) = start_server(&redis_flags, address_space_bytes)?;
    let target = Target {
        address,
        pid: Some(server.pid()),
        keys: true,
        redis,
        address_space_bytes,
    };
    Ok((Some(server), target))
}

async fn bench(args: &BenchHostileArgs) -> anyhow::Result<()> {
    let (mut server, mut target) = started_target(args)?;
    println!(
        "hostile set against {} ({} cores){}",
        target.address,
        std::thread::available_parallelism().map_or(1, usize::from),
        if args.server.is_none() {
            format!(
                ", started with {} --api-keys (tenants attacker, bystander){}{}",
                STARTED_SERVER_FLAGS.join(" "),
                if target.redis.is_some() {
                    " --redis-url"
                } else {
                    ""
                },
                target
                    .address_space_bytes
                    .map_or(String::new(), |bytes| format!(
                        ", under an address-space limit (RLIMIT_AS) of {} MiB",
                        bytes >> 20
                    ))
            )
        } else {
            String::new()
        }
    );
    println!(
        "| case | expected | answer | ms | bystander worst ms | server peak RSS MiB | server CPU ms per hostile request |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut bystander_channel = target.channel().await?;
    let mut exits = 0;
    for case in cases() {
        if args
            .only
            .as_deref()
            .is_some_and(|only| !case.name.contains(only))
        {
            continue;
        }
        println!(
            "{}",
            run_case(&target, &case, bystander_channel.clone()).await
        );
        // A server that did not survive the case is reported, and a fresh one takes the rest.
        if let Some(exit) = server.as_mut().and_then(StartedServer::exited) {
            exits += 1;
            println!("\n**the server exited during {}**: {exit}\n", case.name);
            (server, target) = started_target(args)?;
            bystander_channel = target.channel().await?;
        }
    }
    let address_space = target
        .pid
        .and_then(server::peak_address_space_mib)
        .map_or("?".into(), |mib| format!("{mib:.0} MiB"));
    println!(
        "\nserver exits: {exits}; the last server's peak address space (VmPeak): {address_space}"
    );
    Ok(())
}

/// Runs one case against `target` while the bystander calls on `bystander_channel`; its row.
async fn run_case(target: &Target, case: &Case, bystander_channel: Channel) -> String {
    // Each case's peak RSS its own (the run's high-water mark where it cannot be reset).
    let peak_reset = target.pid.is_some_and(server::reset_peak_rss);
    let started = Instant::now();
    let cpu_before = target.pid.and_then(|pid| crate::os::cpu_time_of(pid).ok());
    let (done, finished) = tokio::sync::watch::channel(false);
    let (answer, bystander) = tokio::join!(
        async {
            let answer = tokio::time::timeout(CASE_LIMIT, (case.attack)(target)).await;
            let _ = done.send(true);
            answer
        },
        bystander_until(target, bystander_channel, finished),
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
        .and_then(server::peak_rss_mib)
        .map_or("?".into(), |mib| {
            format!("{mib:.0}{}", if peak_reset { "" } else { " (run)" })
        });
    let cpu_per_request = match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => format!(
            "{:.1}",
            after.saturating_sub(before).as_secs_f64() * 1e3 / f64::from(case.requests.max(1))
        ),
        _ => "?".into(),
    };
    format!(
        "| {} | {} | {} | {:.0} | {} | {} | {} |",
        case.name,
        case.expected,
        answer,
        elapsed.as_secs_f64() * 1e3,
        bystander,
        rss,
        cpu_per_request
    )
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

/// "3× OK, 2× CODE REASON": how many times each answer came, in the order given.
pub(super) fn counted<A: std::fmt::Display, C: std::fmt::Display>(
    counts: impl IntoIterator<Item = (A, C)>,
) -> String {
    counts
        .into_iter()
        .map(|(answer, count)| format!("{count}× {answer}"))
        .collect::<Vec<_>>()
        .join(", ")
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
    let mut cases = first_round::cases();
    // The second round (issue 21), one module a surface.
    cases.extend(shares::cases());
    cases.extend(jobs::cases());
    cases.extend(parse::cases());
    cases.extend(expressions::cases());
    // Issue 24: image slots.
    cases.extend(images::cases());
    cases.extend(archives::cases());
    // Issue 26: the new outputs.
    cases.extend(outputs::cases());
    // Issue 42, the third round: what one request can do, then the pools and the streams
    // from eight addresses.
    cases.extend(third_round::cases());
    cases.extend(third_round_pools::cases());
    cases.extend(third_round_streams::cases());
    // Last: its hog case leaves the attacking tenant backed off.
    cases.extend(analysis::cases());
    cases
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
