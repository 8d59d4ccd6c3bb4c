//! Settings of the server, from flags and `LOTTIE_RENDER_*` environment variables, with
//! embedded defaults: no flags at all runs one self-contained instance (in-memory job table
//! and queue, templates and outputs under `./data`).

pub(crate) mod connections;
pub(crate) mod mesh;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default job budget, output megapixels (frames × width × height / 10⁶): two minutes of
/// 1920×1920 at 60 fps, about 8 minutes of rendering on two cores.
pub(crate) const DEFAULT_MAX_JOB_MEGAPIXELS: u64 = 26_600;

/// Jobs waiting for a worker: at ~1–10 s a job, a few minutes of work; beyond, callers are
/// better served by RESOURCE_EXHAUSTED and another instance.
pub(crate) const DEFAULT_QUEUE_CAPACITY: u32 = 64;
/// How long finished jobs, their outputs and their idempotency keys are kept: a day covers
/// a caller's retries and a downstream's download.
pub(crate) const DEFAULT_RETENTION_SECONDS: u64 = 24 * 3600;
/// On SIGTERM: Kubernetes' default termination grace period is 30 s.
pub(crate) const DEFAULT_SHUTDOWN_GRACE_SECONDS: f64 = 30.0;
/// Calls in flight before shedding: far above what two cores serve well, so it only cuts in
/// when something is wrong.
pub(crate) const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 512;
/// Redis connections: each call holds one for a round trip or two.
pub(crate) const DEFAULT_REDIS_POOL_SIZE: u32 = 16;
/// A Redis round trip is well under a millisecond on a LAN; 500 ms means it is in trouble.
pub(crate) const DEFAULT_REDIS_TIMEOUT_MS: u64 = 500;
/// Render workers started ahead of their job: a job taken by one skips the process start
/// (30–50 ms of loading shared libraries, most of a small job's time). Spares are forked from
/// the worker zygote (~1 ms), but while a zygote is being replaced they are started by exec,
/// which takes longer than a small job to render: a second spare keeps jobs that come back to
/// back finding one ready (`./dev bench-latency`). Each holds ~12 MiB of private memory.
pub(crate) const DEFAULT_SPARE_WORKERS: u8 = 2;
/// Most spare workers: beyond this they only hold memory.
pub(crate) const MAX_SPARE_WORKERS: u8 = 4;
/// Prefix of the service's Redis keys.
pub(crate) const DEFAULT_REDIS_KEY_PREFIX: &str = "lottie-render:";
/// Lease of a job taken from the shared queue, ms. A dead instance's jobs start again on
/// another one after this, so it is short next to a render (seconds to minutes); it is
/// renewed every third of it, so two renewals in a row may fail (a Redis failover, a paused
/// process) before the job is taken for lost and rendered a second time.
pub(crate) const DEFAULT_JOB_LEASE_MS: u64 = 30_000;
/// A key claimed by a call that died is freed after this (the 300 s).
pub(crate) const DEFAULT_IDEMPOTENCY_LEASE_SECONDS: u64 = 300;
/// Time a caller has to send a whole request body once its headers arrived: the largest
/// request (64 MiB) at about 20 Mbit/s. A call holds no shedding permit meanwhile, but a
/// stream and buffered bytes, so it must end.
pub(crate) const DEFAULT_REQUEST_BODY_TIMEOUT_MS: u64 = 30_000;
/// Request bytes of the large bodies buffered at once, MiB: four of the largest requests and
/// the reserve (`middleware::request_body::REQUEST_BUFFER_BUDGET_BYTES`, which a test there
/// holds this to).
pub(crate) const DEFAULT_REQUEST_BUFFERS_MB: u64 = 272;
/// WatchRenderJob streams open at once on one instance, and health Watch streams apart (health
/// needs no identity): each costs a task, a subscription and a stream; a thousand followers is
/// far beyond an honest deployment.
pub(crate) const DEFAULT_MAX_WATCHERS: u32 = 1024;
/// DownloadRenderOutput streams at once: each holds an open file and up to 4 MiB read ahead.
pub(crate) const DEFAULT_MAX_DOWNLOADS: u32 = 64;
/// A download whose caller reads nothing for this long is ended and frees its file and
/// buffer: a minute covers any honest pause (a proxy, a GC), not a parked stream.
pub(crate) const DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS: u64 = 60_000;

/// Jobs one tenant may have queued, following or running at once when authentication is on:
/// half the default queue, so one tenant alone can never fill the waiting room and a second
/// tenant always finds the other half.
pub const DEFAULT_TENANT_MAX_JOBS: u32 = 32;

#[derive(Debug, Clone, clap::Args)]
pub struct ServerSettings {
    /// Address to listen on for gRPC.
    #[arg(long, env = "LOTTIE_RENDER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory for templates and outputs (created when missing); with `--storage-url`,
    /// only this instance's scratch files (staged inputs, partial outputs).
    #[arg(long, env = "LOTTIE_RENDER_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Renders running at once, each in its own worker process [default: half the cores, at
    /// least 1].
    #[arg(long, env = "LOTTIE_RENDER_WORKERS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: Option<u16>,
    /// Render workers started ahead of their job (0 to 4), sandboxed and waiting on stdin with
    /// their libraries loaded, so a small job does not wait for a process to start. Each
    /// still runs one job and exits; the next spare starts as one is taken.
    #[arg(long, env = "LOTTIE_RENDER_SPARE_WORKERS", default_value_t = DEFAULT_SPARE_WORKERS, value_parser = clap::value_parser!(u8).range(0..=MAX_SPARE_WORKERS as i64))]
    pub spare_workers: u8,
    /// Jobs waiting for a worker; a submission beyond it is answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "LOTTIE_RENDER_QUEUE_CAPACITY", default_value_t = DEFAULT_QUEUE_CAPACITY, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub queue_capacity: u32,
    /// Address for Prometheus metrics over HTTP (`GET /metrics`); off when unset.
    #[arg(long, env = "LOTTIE_RENDER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// How long finished jobs and their outputs are kept, seconds.
    #[arg(long, env = "LOTTIE_RENDER_RETENTION_SECONDS", default_value_t = DEFAULT_RETENTION_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_seconds: u64,
    /// Largest job accepted, output megapixels (frames × width × height / 10⁶).
    #[arg(long, env = "LOTTIE_RENDER_MAX_JOB_MEGAPIXELS", default_value_t = DEFAULT_MAX_JOB_MEGAPIXELS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_job_megapixels: u64,
    /// Longest a render may run, seconds (its deadline is derived from its size, capped here).
    #[arg(long, env = "LOTTIE_RENDER_MAX_JOB_SECONDS", default_value_t = crate::sandbox::MAX_DEADLINE.as_secs_f64())]
    pub max_job_seconds: f64,
    /// Address space of one worker process, MiB.
    #[arg(long, env = "LOTTIE_RENDER_WORKER_MEMORY_MB", default_value_t = crate::sandbox::DEFAULT_WORKER_MEMORY_BYTES / (1024 * 1024), value_parser = clap::value_parser!(u64).range(64..))]
    pub worker_memory_mb: u64,
    /// On SIGTERM, how long running renders may take to finish before they are cancelled
    /// (and marked retryable), seconds.
    #[arg(
        long,
        env = "LOTTIE_RENDER_SHUTDOWN_GRACE_SECONDS",
        default_value_t = 30.0
    )]
    pub shutdown_grace_seconds: f64,
    /// Requests handled at once; beyond it calls are answered RESOURCE_EXHAUSTED at once
    /// (load shedding) instead of queueing up inside the server.
    #[arg(long, env = "LOTTIE_RENDER_MAX_CONCURRENT_REQUESTS", default_value_t = DEFAULT_MAX_CONCURRENT_REQUESTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
    /// Redis for idempotency keys (`redis://host:6379/0`); in this process's memory when unset.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Prefix of every Redis key this service writes.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_KEY_PREFIX", default_value = DEFAULT_REDIS_KEY_PREFIX)]
    pub redis_key_prefix: String,
    /// Redis connections kept open.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_POOL_SIZE", default_value_t = DEFAULT_REDIS_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub redis_pool_size: u32,
    /// Deadline of one Redis call (pool wait and connecting included), milliseconds; beyond
    /// it the call is answered UNAVAILABLE.
    #[arg(long, env = "LOTTIE_RENDER_REDIS_TIMEOUT_MS", default_value_t = DEFAULT_REDIS_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_timeout_ms: u64,
    /// How long an idempotency key stays claimed while its job is created, seconds (a caller
    /// that died meanwhile frees the key when it runs out).
    #[arg(long, env = "LOTTIE_RENDER_IDEMPOTENCY_LEASE_SECONDS", default_value_t = DEFAULT_IDEMPOTENCY_LEASE_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub idempotency_lease_seconds: u64,
    /// With Redis: how long a job taken from the shared queue stays its instance's without a
    /// renewal of its lease (renewed every third of it), milliseconds. A job whose instance
    /// stopped is rendered by another one after this.
    #[arg(long, env = "LOTTIE_RENDER_JOB_LEASE_MS", default_value_t = DEFAULT_JOB_LEASE_MS, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub job_lease_ms: u64,
    /// The program run as `worker` for each render [default: this executable].
    #[arg(long, env = "LOTTIE_RENDER_WORKER_EXECUTABLE", hide = true)]
    pub worker_executable: Option<PathBuf>,
    /// Template analyses (CreateTemplate's report) running at once, each in its own worker
    /// process with a CPU and memory budget; a pool apart from the render workers.
    #[arg(long, env = "LOTTIE_RENDER_ANALYSIS_WORKERS", default_value_t = crate::analysis::DEFAULT_ANALYSIS_WORKERS, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub analysis_workers: u16,
    /// Address space of one template analysis, MiB; a template whose analysis needs more is
    /// answered INVALID_ARGUMENT (TEMPLATE_TOO_COMPLEX).
    #[arg(long, env = "LOTTIE_RENDER_ANALYSIS_MEMORY_MB", default_value_t = crate::analysis::ANALYSIS_MEMORY_BYTES / (1024 * 1024), value_parser = clap::value_parser!(u64).range(128..))]
    pub analysis_memory_mb: u64,
    /// CPU time of one template analysis, seconds; a template whose analysis needs more is
    /// answered INVALID_ARGUMENT (TEMPLATE_TOO_COMPLEX). Its wall-clock limit is four times
    /// as long. At most ten minutes: past that no honest template is waiting for its answer.
    #[arg(long, env = "LOTTIE_RENDER_ANALYSIS_CPU_SECONDS", default_value_t = crate::analysis::ANALYSIS_CPU_SECONDS, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub analysis_cpu_seconds: u64,
    /// Seconds an analysis worker may use no CPU at all before it is ended as stuck
    /// (UNAVAILABLE, retryable) [default: 10]. Hidden: the tests hold analyses stopped for
    /// longer than a bystander may wait on a loaded machine.
    #[arg(long, env = "LOTTIE_RENDER_ANALYSIS_STALL_SECONDS", default_value_t = crate::analysis::ANALYSIS_STALL_SECONDS, value_parser = clap::value_parser!(u64).range(1..=600), hide = true)]
    pub analysis_stall_seconds: u64,
    /// The program run as `analyze` for each new template's report [default: this
    /// executable; not `--worker-executable`, which may be a render-only stand-in].
    #[arg(long, env = "LOTTIE_RENDER_ANALYSIS_EXECUTABLE", hide = true)]
    pub analysis_executable: Option<PathBuf>,
    /// Templates stored at most; CreateTemplate beyond it is answered RESOURCE_EXHAUSTED
    /// (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(long, env = "LOTTIE_RENDER_MAX_TEMPLATES", default_value_t = crate::storage::DEFAULT_MAX_TEMPLATES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_templates: u64,
    /// Stored template bytes (JSON and fonts) at most, MiB; beyond it CreateTemplate is
    /// answered RESOURCE_EXHAUSTED (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(long, env = "LOTTIE_RENDER_MAX_TEMPLATE_STORAGE_MB", default_value_t = crate::storage::DEFAULT_MAX_TEMPLATE_BYTES / (1024 * 1024), value_parser = clap::value_parser!(u64).range(1..))]
    pub max_template_storage_mb: u64,
    /// Templates one tenant stores at most (within `--max-templates`); 0: no limit of its
    /// own. Beyond it that tenant's CreateTemplate is answered RESOURCE_EXHAUSTED
    /// (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(
        long,
        env = "LOTTIE_RENDER_MAX_TEMPLATES_PER_TENANT",
        default_value_t = 0
    )]
    pub max_templates_per_tenant: u64,
    /// Template bytes one tenant stores at most, MiB (within `--max-template-storage-mb`);
    /// 0: no limit of its own.
    #[arg(
        long,
        env = "LOTTIE_RENDER_MAX_TEMPLATE_STORAGE_MB_PER_TENANT",
        default_value_t = 0
    )]
    pub max_template_storage_mb_per_tenant: u64,
    /// Free space kept on the data directory's file system, MiB: below it SubmitRender and
    /// CreateTemplate are answered RESOURCE_EXHAUSTED (DISK_FULL); 0 turns the check off.
    #[arg(long, env = "LOTTIE_RENDER_MIN_FREE_DISK_MB", default_value_t = crate::storage::DEFAULT_MIN_FREE_DISK_BYTES / (1024 * 1024))]
    pub min_free_disk_mb: u64,
    /// Time a caller has to send a whole request body once its headers arrived,
    /// milliseconds; beyond it the call is answered UNAVAILABLE (REQUEST_BODY_TIMEOUT).
    #[arg(long, env = "LOTTIE_RENDER_REQUEST_BODY_TIMEOUT_MS", default_value_t = DEFAULT_REQUEST_BODY_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub request_body_timeout_ms: u64,
    /// Request bytes of CreateTemplate, SubmitRender and UploadImage buffered at once, MiB,
    /// shared fairly between callers (docs/security.md, Pools); beyond a caller's share or
    /// the whole, a call is answered RESOURCE_EXHAUSTED (REQUEST_BUFFERS_BUSY).
    #[arg(long, env = "LOTTIE_RENDER_REQUEST_BUFFERS_MB", default_value_t = DEFAULT_REQUEST_BUFFERS_MB, value_parser = clap::value_parser!(u64).range(2..=1_048_576))]
    pub request_buffers_mb: u64,
    /// WatchRenderJob streams open at once, and health Watch streams apart, shared fairly
    /// between callers (tenants, or addresses before identity); one more is answered
    /// RESOURCE_EXHAUSTED (TOO_MANY_WATCHERS).
    #[arg(long, env = "LOTTIE_RENDER_MAX_WATCHERS", default_value_t = DEFAULT_MAX_WATCHERS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_watchers: u32,
    /// DownloadRenderOutput streams at once, shared fairly between callers; one more is
    /// answered RESOURCE_EXHAUSTED (TOO_MANY_DOWNLOADS).
    #[arg(long, env = "LOTTIE_RENDER_MAX_DOWNLOADS", default_value_t = DEFAULT_MAX_DOWNLOADS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_downloads: u32,
    /// A download whose caller reads nothing for this long is ended, milliseconds.
    #[arg(long, env = "LOTTIE_RENDER_DOWNLOAD_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub download_idle_timeout_ms: u64,
    /// Whether calls must say who they are: `off` (one anonymous tenant), `optional` (known
    /// identities get their tenant, others the default tenant) or `required` (a call without
    /// a known identity is answered UNAUTHENTICATED).
    #[arg(long, env = "LOTTIE_RENDER_AUTH", value_enum, default_value_t = crate::auth::AuthMode::Off)]
    pub auth: crate::auth::AuthMode,
    /// Serve with `--auth off` on an address beyond loopback: anyone who reaches the port is
    /// the one anonymous tenant and may list, render and delete every template. Refused at
    /// start-up unless this is given (a mesh sidecar or network policy that authenticates
    /// callers in front of the pod is the one case for it).
    #[arg(long, env = "LOTTIE_RENDER_ALLOW_UNAUTHENTICATED_NETWORK")]
    pub allow_unauthenticated_network: bool,
    /// API keys, one a line: `TENANT CALLER SHA256HEX` (the hex SHA-256 of the key callers
    /// send as `authorization: Bearer KEY`).
    #[arg(long, env = "LOTTIE_RENDER_API_KEYS")]
    pub api_keys: Option<PathBuf>,
    /// Jobs one tenant may have queued, following an identical render or running at once;
    /// one more is answered RESOURCE_EXHAUSTED (TENANT_JOB_LIMIT) [default: 32 with `--auth
    /// optional|required`; with `--auth off` (one tenant) only the queue's capacity].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_MAX_JOBS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_max_jobs: Option<u32>,
    /// Calls per second one tenant may make (health checks and reflection aside), sustained; beyond it
    /// RESOURCE_EXHAUSTED (TENANT_RATE_LIMITED) with the wait [default: off].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_REQUESTS_PER_SECOND", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_requests_per_second: Option<u32>,
    /// Calls one tenant may make at once above its rate [default: one second's worth].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_BURST", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_burst: Option<u32>,
    /// OpenTelemetry collector to export traces to over OTLP/gRPC (`http://HOST:4317`); no
    /// traces when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Traces go here instead (tests: an in-memory exporter); not a flag.
    #[arg(skip)]
    pub tracing: Option<crate::telemetry::traces::Tracing>,
    /// How long a compressed call waits for its share of the inflation budget (none: the
    /// middleware's `INFLATION_WAIT`); tests shorten it to see the refusal. Not a flag.
    #[arg(skip)]
    pub inflation_wait: Option<Duration>,
    /// HTTP/2 keepalive, connection age and grace (crate::mesh).
    #[command(flatten)]
    pub mesh: mesh::MeshSettings,
    /// Connections per address and the first request's deadline (crate::app::accept).
    #[command(flatten)]
    pub connections: connections::ConnectionSettings,
    /// Certificate and sidecar identities, one a line: `TENANT IDENTITY` (a SPIFFE id such
    /// as `spiffe://cluster.local/ns/web/sa/billing`, a certificate's subject CN, or a
    /// Linkerd identity name).
    #[arg(long, env = "LOTTIE_RENDER_IDENTITIES")]
    pub identities: Option<PathBuf>,
    /// Believe the identity the mesh sidecar in front of every call puts in its own header:
    /// `envoy` (Envoy, Istio) reads `x-forwarded-client-cert`, `linkerd` reads
    /// `l5d-client-id`, and the other mesh's header is ignored (that sidecar leaves it as the
    /// caller wrote it). Only behind such a sidecar: anyone else could write the header.
    #[arg(long, env = "LOTTIE_RENDER_TRUST_SIDECAR_IDENTITY", value_enum)]
    pub trust_sidecar_identity: Option<crate::auth::TrustedSidecar>,
    /// TLS and mTLS on the gRPC listener (plaintext without them).
    #[command(flatten)]
    pub tls: crate::tls::TlsSettings,
    /// Object storage for templates, fonts and outputs, and its timeouts (crate::storage).
    #[command(flatten)]
    pub storage: crate::storage::settings::StorageSettings,
    /// The bounds of the jobs kept per tenant and per instance (crate::jobs::retention).
    #[command(flatten)]
    pub retained_jobs: crate::jobs::retention::RetainedJobSettings,
    /// Webhook signing, destinations and retries (crate::webhooks).
    #[command(flatten)]
    pub webhooks: crate::webhooks::settings::WebhookSettings,
}

/// The sustained rate and the burst of one tenant (`middleware::tenant_rate_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantRate {
    pub per_second: u32,
    pub burst: u32,
}

impl ServerSettings {
    /// The embedded defaults with another listen address and data directory (tests, tools).
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> ServerSettings {
        ServerSettings {
            listen,
            data_dir,
            workers: None,
            spare_workers: DEFAULT_SPARE_WORKERS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            metrics_listen: None,
            retention_seconds: DEFAULT_RETENTION_SECONDS,
            max_job_megapixels: DEFAULT_MAX_JOB_MEGAPIXELS,
            max_job_seconds: crate::sandbox::MAX_DEADLINE.as_secs_f64(),
            worker_memory_mb: crate::sandbox::DEFAULT_WORKER_MEMORY_BYTES / (1024 * 1024),
            shutdown_grace_seconds: DEFAULT_SHUTDOWN_GRACE_SECONDS,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            redis_url: None,
            redis_key_prefix: DEFAULT_REDIS_KEY_PREFIX.into(),
            redis_pool_size: DEFAULT_REDIS_POOL_SIZE,
            redis_timeout_ms: DEFAULT_REDIS_TIMEOUT_MS,
            idempotency_lease_seconds: DEFAULT_IDEMPOTENCY_LEASE_SECONDS,
            job_lease_ms: DEFAULT_JOB_LEASE_MS,
            worker_executable: None,
            analysis_workers: crate::analysis::DEFAULT_ANALYSIS_WORKERS,
            analysis_memory_mb: crate::analysis::ANALYSIS_MEMORY_BYTES / (1024 * 1024),
            analysis_cpu_seconds: crate::analysis::ANALYSIS_CPU_SECONDS,
            analysis_stall_seconds: crate::analysis::ANALYSIS_STALL_SECONDS,
            analysis_executable: None,
            max_templates: crate::storage::DEFAULT_MAX_TEMPLATES,
            max_template_storage_mb: crate::storage::DEFAULT_MAX_TEMPLATE_BYTES / (1024 * 1024),
            max_templates_per_tenant: 0,
            max_template_storage_mb_per_tenant: 0,
            min_free_disk_mb: crate::storage::DEFAULT_MIN_FREE_DISK_BYTES / (1024 * 1024),
            request_body_timeout_ms: DEFAULT_REQUEST_BODY_TIMEOUT_MS,
            request_buffers_mb: DEFAULT_REQUEST_BUFFERS_MB,
            max_watchers: DEFAULT_MAX_WATCHERS,
            max_downloads: DEFAULT_MAX_DOWNLOADS,
            download_idle_timeout_ms: DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS,
            auth: crate::auth::AuthMode::Off,
            allow_unauthenticated_network: false,
            api_keys: None,
            tenant_max_jobs: None,
            tenant_requests_per_second: None,
            tenant_burst: None,
            otlp_endpoint: None,
            tracing: None,
            inflation_wait: None,
            mesh: mesh::MeshSettings::default(),
            connections: connections::ConnectionSettings::default(),
            identities: None,
            trust_sidecar_identity: None,
            tls: crate::tls::TlsSettings::default(),
            storage: crate::storage::settings::StorageSettings::default(),
            retained_jobs: crate::jobs::retention::RetainedJobSettings::default(),
            webhooks: crate::webhooks::settings::WebhookSettings::default(),
        }
    }

    pub(crate) fn worker_count(&self) -> usize {
        match self.workers {
            Some(workers) => usize::from(workers),
            None => (std::thread::available_parallelism().map_or(1, usize::from) / 2).max(1),
        }
    }

    pub(crate) fn job_lease(&self) -> Duration {
        Duration::from_millis(self.job_lease_ms)
    }

    pub(crate) fn idempotency_lease(&self) -> Duration {
        Duration::from_secs(self.idempotency_lease_seconds)
    }

    /// The Redis connection settings, when Redis is configured.
    pub(crate) fn redis(&self) -> Option<crate::redis_client::RedisSettings> {
        self.redis_url
            .as_ref()
            .map(|url| crate::redis_client::RedisSettings {
                url: url.clone(),
                key_prefix: self.redis_key_prefix.clone(),
                pool_size: self.redis_pool_size as usize,
                timeout: Duration::from_millis(self.redis_timeout_ms),
            })
    }

    /// The per-tenant job limit in force: the flag's, else [`DEFAULT_TENANT_MAX_JOBS`] when
    /// callers can be of several tenants, else none (one tenant: the queue is its limit).
    pub fn tenant_job_limit(&self) -> Option<usize> {
        match (self.tenant_max_jobs, self.auth) {
            (Some(limit), _) => Some(limit as usize),
            (None, crate::auth::AuthMode::Off) => None,
            (None, _) => Some(DEFAULT_TENANT_MAX_JOBS as usize),
        }
    }

    /// The per-tenant request rate in force, when one is set.
    pub fn tenant_rate(&self) -> Option<TenantRate> {
        self.tenant_requests_per_second
            .map(|per_second| TenantRate {
                per_second,
                burst: self.tenant_burst.unwrap_or(per_second),
            })
    }

    pub(crate) fn retention(&self) -> Duration {
        Duration::from_secs(self.retention_seconds)
    }

    /// Clamped so that a hostile or mistyped value (NaN, negative, huge) cannot panic.
    pub(crate) fn max_job_duration(&self) -> Duration {
        seconds(self.max_job_seconds, crate::sandbox::MAX_DEADLINE)
    }

    pub(crate) fn shutdown_grace(&self) -> Duration {
        seconds(
            self.shutdown_grace_seconds,
            Duration::from_secs_f64(DEFAULT_SHUTDOWN_GRACE_SECONDS),
        )
    }
}

/// A non-negative finite number of seconds as a duration; `fallback` for anything else.
fn seconds(value: f64, fallback: Duration) -> Duration {
    Duration::try_from_secs_f64(value).unwrap_or(fallback)
}

/// `serve` was asked to answer anonymous callers beyond this machine (DESIGN.md, "Trust
/// boundaries": the shipped deployment is safe by default).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to serve {listen} with --auth off: anyone who reaches it could list, render and \
     delete every template; use --auth required with --api-keys (or --identities), listen on \
     127.0.0.1, or say --allow-unauthenticated-network when something in front of the port \
     authenticates callers"
)]
pub struct UnauthenticatedNetworkListen {
    pub listen: SocketAddr,
}

impl ServerSettings {
    /// Whether callers on `listen` (the address actually bound) are authenticated, or
    /// reachable only from this machine, or the operator said that exposure is meant.
    pub fn check_exposure(&self, listen: SocketAddr) -> Result<(), UnauthenticatedNetworkListen> {
        let anonymous = self.auth == crate::auth::AuthMode::Off;
        if anonymous && !listen.ip().is_loopback() && !self.allow_unauthenticated_network {
            return Err(UnauthenticatedNetworkListen { listen });
        }
        Ok(())
    }

    /// The template quota.
    pub(crate) fn template_quota(&self) -> crate::storage::TemplateQuota {
        const MIB: u64 = 1024 * 1024;
        crate::storage::TemplateQuota {
            max_templates: self.max_templates,
            max_template_bytes: self.max_template_storage_mb.saturating_mul(MIB),
            max_templates_per_tenant: self.max_templates_per_tenant,
            max_template_bytes_per_tenant: self
                .max_template_storage_mb_per_tenant
                .saturating_mul(MIB),
        }
    }

    /// The disk watermark, bytes (0: none).
    pub(crate) fn min_free_disk_bytes(&self) -> u64 {
        self.min_free_disk_mb.saturating_mul(1024 * 1024)
    }

    pub(crate) fn request_body_timeout(&self) -> Duration {
        Duration::from_millis(self.request_body_timeout_ms)
    }

    pub(crate) fn request_buffer_bytes(&self) -> usize {
        usize::try_from(self.request_buffers_mb << 20).unwrap_or(usize::MAX)
    }

    pub(crate) fn download_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.download_idle_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthMode;

    #[test]
    fn anonymous_callers_beyond_loopback_are_refused_unless_the_operator_says_so() {
        for (listen, auth, allowed, expected_ok) in [
            ("127.0.0.1:50051", AuthMode::Off, false, true),
            ("[::1]:50051", AuthMode::Off, false, true),
            ("0.0.0.0:50051", AuthMode::Off, false, false),
            ("[::]:50051", AuthMode::Off, false, false),
            ("10.1.2.3:50051", AuthMode::Off, false, false),
            ("0.0.0.0:50051", AuthMode::Off, true, true),
            ("0.0.0.0:50051", AuthMode::Required, false, true),
            ("0.0.0.0:50051", AuthMode::Optional, false, true),
        ] {
            let listen: SocketAddr = listen.parse().unwrap();
            let mut settings = ServerSettings::new(listen, PathBuf::from("data"));
            settings.auth = auth;
            settings.allow_unauthenticated_network = allowed;
            assert_eq!(
                settings.check_exposure(listen).is_ok(),
                expected_ok,
                "{listen} {auth:?} allowed={allowed}"
            );
        }
    }

    #[test]
    fn the_default_job_limit_applies_only_where_there_can_be_several_tenants() {
        for (auth, flag, expected) in [
            (AuthMode::Off, None, None),
            (
                AuthMode::Optional,
                None,
                Some(DEFAULT_TENANT_MAX_JOBS as usize),
            ),
            (
                AuthMode::Required,
                None,
                Some(DEFAULT_TENANT_MAX_JOBS as usize),
            ),
            (AuthMode::Off, Some(5), Some(5)),
            (AuthMode::Required, Some(7), Some(7)),
        ] {
            let mut settings = ServerSettings::new(
                "127.0.0.1:0".parse().unwrap(),
                PathBuf::from("/nonexistent"),
            );
            settings.auth = auth;
            settings.tenant_max_jobs = flag;
            assert_eq!(settings.tenant_job_limit(), expected, "{auth:?} {flag:?}");
        }
    }

    #[test]
    fn the_burst_defaults_to_one_second_of_the_rate() {
        let mut settings = ServerSettings::new(
            "127.0.0.1:0".parse().unwrap(),
            PathBuf::from("/nonexistent"),
        );
        assert_eq!(settings.tenant_rate(), None);
        settings.tenant_requests_per_second = Some(20);
        assert_eq!(settings.tenant_rate().map(|rate| rate.burst), Some(20));
        settings.tenant_burst = Some(50);
        assert_eq!(settings.tenant_rate().map(|rate| rate.burst), Some(50));
    }
}
