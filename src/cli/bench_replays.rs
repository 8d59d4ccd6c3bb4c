//! `lottie-render bench-replays`: how fast the service answers idempotent replays, with the
//! in-memory key store and with Redis, measured in one run. For each store it starts the
//! real server in this process on 127.0.0.1:0, registers a template, renders one job with a
//! key, then sends `--calls` SubmitRender calls with that key and payload from
//! `--concurrency` concurrent callers over real gRPC (one HTTP/2 connection each), and prints
//! answers per second and latency percentiles. Every answer is checked: same job, marked
//! replayed.

use crate::app::{self, Listeners};
use crate::cli::square_output;
use crate::config::ServerSettings;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Request;

#[derive(Debug, clap::Args)]
pub struct BenchReplaysArgs {
    /// Replay calls per store.
    #[arg(long, default_value_t = 20_000)]
    pub calls: usize,
    /// Concurrent callers, each on its own connection.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Redis for the Redis half.
    #[arg(long, default_value = "redis://127.0.0.1:6379/0")]
    pub redis_url: String,
    /// The template rendered once and then replayed.
    #[arg(
        long,
        default_value = "../shared/corpus/slots-ball-colors-opacity.json"
    )]
    pub template: PathBuf,
}

pub(crate) fn run(args: BenchReplaysArgs) -> ExitCode {
    super::run_bench(bench(&args))
}

struct Figures {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

async fn bench(args: &BenchReplaysArgs) -> anyhow::Result<()> {
    let template = std::fs::read(&args.template)?;
    let executable = std::env::current_exe()?;
    println!(
        "idempotent replays: {} calls, {} concurrent callers, {} cores",
        args.calls,
        args.concurrency,
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    println!("| store | answers/s | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    for redis in [None, Some(args.redis_url.clone())] {
        let data_dir = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let mut settings = ServerSettings::new(address, data_dir.path().to_path_buf());
        settings.render_workers.worker_executable = Some(executable.clone());
        settings.limits.max_concurrent_requests = (args.concurrency * 4) as u32;
        let label = match &redis {
            Some(_) => "Redis",
            None => "memory",
        };
        if let Some(url) = &redis {
            settings.redis.redis_url = Some(url.clone());
            settings.redis.redis_key_prefix =
                format!("lottie-render-bench:{}:", uuid::Uuid::new_v4());
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(app::run(
            Listeners {
                grpc: listener,
                metrics: None,
            },
            settings,
            async {
                let _ = stopped.await;
            },
        ));
        let figures = replay(address, &template, args).await;
        let _ = stop.send(());
        serving.await??;
        let figures = figures?;
        println!(
            "| {label} | {:.0} | {:.2} | {:.2} | {:.2} |",
            figures.per_second,
            figures.p50.as_secs_f64() * 1e3,
            figures.p99.as_secs_f64() * 1e3,
            figures.max.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

async fn replay(
    address: std::net::SocketAddr,
    template: &[u8],
    args: &BenchReplaysArgs,
) -> anyhow::Result<Figures> {
    let endpoint = format!("http://{address}");
    let channel = Channel::from_shared(endpoint.clone())?.connect().await?;
    let created = TemplateServiceClient::new(channel.clone())
        .create_template(proto::CreateTemplateRequest {
            name: "bench".into(),
            lottie_json: template.to_vec().into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await?
        .into_inner();
    let request = proto::RenderRequest {
        template_id: created.template_id,
        modifications: None,
        output: square_output(proto::Format::Gif, 30, 100),
        notify: None,
        theme: String::new(),
    };
    const KEY: &str = "bench-replay-key";
    let submit = |mut client: RenderServiceClient<Channel>, request: proto::RenderRequest| async move {
        let mut call = Request::new(request);
        call.metadata_mut().insert(
            "idempotency-key",
            tonic::metadata::MetadataValue::from_static(KEY),
        );
        client.submit_render(call).await
    };
    let first = submit(RenderServiceClient::new(channel.clone()), request.clone())
        .await?
        .into_inner();
    let mut watch = RenderServiceClient::new(channel.clone())
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: first.job_id.clone(),
        })
        .await?
        .into_inner();
    while watch.message().await?.is_some() {}

    let per_caller = args.calls.div_ceil(args.concurrency.max(1));
    let mut callers = Vec::new();
    let started = Instant::now();
    for _ in 0..args.concurrency.max(1) {
        let channel = Channel::from_shared(endpoint.clone())?.connect().await?;
        let request = request.clone();
        let job_id = first.job_id.clone();
        callers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_caller);
            for _ in 0..per_caller {
                let sent = Instant::now();
                let response =
                    submit(RenderServiceClient::new(channel.clone()), request.clone()).await?;
                latencies.push(sent.elapsed());
                let replayed = response
                    .metadata()
                    .get(crate::idempotency::claim::REPLAYED_HEADER)
                    .is_some_and(|value| value == "true");
                anyhow::ensure!(
                    replayed && response.get_ref().job_id == job_id,
                    "an answer was not the replay of the first job"
                );
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await??);
    }
    let wall = started.elapsed();
    latencies.sort_unstable();
    let at = |quantile: f64| {
        latencies
            .get(((latencies.len() as f64 * quantile) as usize).min(latencies.len() - 1))
            .copied()
            .unwrap_or_default()
    };
    Ok(Figures {
        per_second: latencies.len() as f64 / wall.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        max: latencies.last().copied().unwrap_or_default(),
    })
}
