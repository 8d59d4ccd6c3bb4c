//! The gRPC server: builds the services, the job scheduler and the tower stack and serves
//! them on already-bound listeners until a shutdown future resolves, so `main` and the tests
//! run the very same entry point. On shutdown it drains (health NOT_SERVING, submissions
//! UNAVAILABLE, running renders finish within the grace period or are cancelled retryable)
//! before the listener closes.

use crate::analysis::{AnalysisBudget, AnalysisPool};
use crate::auth::{ApiKeys, Identities, IdentityLayer, KnownIdentities};
use crate::config::{ServerSettings, MAX_RENDER_REQUEST_BYTES, MAX_REQUEST_BYTES};
use crate::grpc::proto::render_service_server::RenderServiceServer;
use crate::grpc::proto::template_service_server::TemplateServiceServer;
use crate::grpc::proto::FILE_DESCRIPTOR_SET;
use crate::grpc::renders::{DownloadLimits, RenderApi};
use crate::grpc::templates::TemplateApi;
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::redis_store::RedisStore;
use crate::idempotency::store::{IdempotencyStore, MemoryStore};
use crate::idempotency::IdempotencyKeyLayer;
use crate::jobs::admission::JobLimits;
use crate::jobs::scheduler::SchedulerSettings;
use crate::jobs::shared::SharedJobs;
use crate::jobs::Scheduler;
use crate::mesh::connection_age::AgedConnection;
use crate::mesh::probes::{Probes, ReadinessSources};
use crate::metrics::Metrics;
use crate::middleware::inflation_budget::{shared_budget, INFLATION_BUDGET_BYTES};
use crate::middleware::request_body::{
    MAX_HEALTH_REQUEST_BYTES, MAX_REFLECTION_REQUEST_BYTES, REQUEST_BUFFER_BUDGET_BYTES,
};
use crate::middleware::stream_limit::{HEALTH_WATCH_PATHS, RENDER_WATCH_PATHS};
use crate::middleware::tenant_rate_limit::TenantRate;
use crate::middleware::{CatchPanicLayer, LoadShedLayer, RequestMetricsLayer, RequestSizeLayer};
use crate::middleware::{
    InflationBudgetLayer, RequestBodyLayer, StreamLimitLayer, TenantRateLimitLayer,
    TraceContextLayer,
};
use crate::reason::Reason;
use crate::redis_client::RedisClient;
use crate::storage::{ObjectStorage, OutputStore, TemplateStore};
use crate::telemetry::traces::{Tracing, TracingError};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tower::layer::util::{Identity, Stack};
use tower::Layer;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot open the object store or the data directory: {0}")]
    Storage(#[from] crate::storage::StorageError),
    #[error("cannot find this executable to run workers: {0}")]
    Executable(std::io::Error),
    #[error("cannot set up Redis: {0}")]
    Redis(crate::redis_client::RedisError),
    #[error("cannot build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("cannot read the API keys file {path}: {reason}")]
    ApiKeys {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("cannot read the identities file {path}: {reason}")]
    KnownIdentities {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(transparent)]
    UnauthenticatedNetwork(#[from] crate::config::UnauthenticatedNetworkListen),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::tls::TlsFilesError),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Tracing(#[from] TracingError),
}

/// Sockets the server answers on, bound by the caller (port 0 in tests).
#[derive(Debug)]
pub struct Listeners {
    pub grpc: TcpListener,
    /// Prometheus metrics over HTTP; none when metrics are off.
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses of `settings`.
    pub async fn bind(settings: &ServerSettings) -> std::io::Result<Listeners> {
        let grpc = TcpListener::bind(settings.listen).await?;
        let metrics = match settings.metrics_listen {
            Some(address) => Some(TcpListener::bind(address).await?),
            None => None,
        };
        Ok(Listeners { grpc, metrics })
    }
}

/// Serves until `shutdown` resolves, then drains: health NOT_SERVING, new submissions
/// UNAVAILABLE, running renders get the grace period, and the listener closes last.
pub async fn run(
    listeners: Listeners,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    // Before anything starts: a deployment that would answer anyone is not served at all.
    settings.check_exposure(listeners.grpc.local_addr().unwrap_or(settings.listen))?;
    let metrics = Metrics::new();
    let (tracing, own_tracing) = tracing_of(&settings)?;
    let mut identities = Identities::new(settings.auth, load_api_keys(&settings)?)
        .trusting_sidecar_identity(settings.trust_sidecar_identity);
    if let Some(known) = load_known_identities(&settings)? {
        identities = identities.with_known_identities(known);
    }
    let identities = Arc::new(identities);
    let tls = match settings.tls.files() {
        Some(files) => Some(Arc::new(crate::tls::ReloadableTls::load(files)?)),
        None => None,
    };
    // Changed certificates, keys and identity files are put in force without a restart.
    let mut watched = crate::auth::files::watches(
        settings.api_keys.as_deref(),
        settings.identities.as_deref(),
        &identities,
    );
    watched.extend(tls.as_ref().map(crate::tls::watch));
    // Their state now is the baseline; the watcher starts once nothing below can fail.
    let configuration_watcher = crate::tls::watch::Watcher::new(watched);
    let objects = ObjectStorage::open(
        &settings.storage,
        &settings.data_dir,
        tokio::runtime::Handle::current(),
    )?;
    tracing::info!(
        store = objects.describe(),
        "templates and outputs in object storage"
    );
    let templates_store =
        TemplateStore::new(objects.clone())?.with_limits(settings.storage_limits());
    let outputs = OutputStore::open(objects, settings.storage.download_url_expiry())?;
    {
        // The index's repair lists the templates: off the runtime and not waited for, so a
        // store that is slow or down at start-up delays nothing (calls meanwhile are answered
        // as the store allows: UNAVAILABLE while it is down).
        let store = templates_store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(error) = store.complete_index() {
                tracing::warn!(%error, "cannot repair the template index; the next start tries again");
            }
        });
    }
    let executable = match settings.worker_executable.clone() {
        Some(executable) => executable,
        None => std::env::current_exe().map_err(ServerError::Executable)?,
    };
    // The sandbox self-test runs once before serving (a fraction of a second, off the async
    // runtime, its worker gone before the first request); what it finds is logged and
    // exported as lottie_render_sandbox_protection.
    {
        let (executable, metrics) = (executable.clone(), metrics.clone());
        let _ = tokio::task::spawn_blocking(move || {
            for (mechanism, in_force) in crate::sandbox::self_test::check_at_start_up(&executable) {
                metrics.record_sandbox_protection(mechanism, in_force);
            }
        })
        .await;
    }
    let redis = match settings.redis() {
        Some(redis) => {
            tracing::info!(prefix = %redis.key_prefix, "keys and job records in Redis");
            Some(Arc::new(
                RedisClient::open(&redis).map_err(ServerError::Redis)?,
            ))
        }
        None => None,
    };
    let shared_jobs = redis
        .as_ref()
        .map(|redis| Arc::new(SharedJobs::new(redis.clone(), settings.retention())));
    let analysis_executable = match settings.analysis_executable.clone() {
        Some(executable) => executable,
        None => std::env::current_exe().map_err(ServerError::Executable)?,
    };
    let analysis = AnalysisPool::new(
        analysis_executable,
        usize::from(settings.analysis_workers),
        AnalysisBudget {
            memory_bytes: settings.analysis_memory_mb.saturating_mul(1024 * 1024),
            cpu_seconds: settings.analysis_cpu_seconds,
        },
    );
    let scheduler = Scheduler::start(
        SchedulerSettings {
            workers: settings.worker_count(),
            executable,
            worker_memory_bytes: settings.worker_memory_mb.saturating_mul(1024 * 1024),
            tenant_max_jobs: settings.tenant_job_limit(),
            tracing: tracing.clone(),
            spare_workers: usize::from(settings.spare_workers),
            job_lease: settings.job_lease(),
            retained: settings.retained_jobs.limits(),
        },
        settings.queue_capacity as usize,
        outputs,
        metrics.clone(),
        shared_jobs.clone(),
    );
    let cancel_listener = shared_jobs
        .as_ref()
        .map(|shared| tokio::spawn(serve_remote_cancels(shared.clone(), scheduler.clone())));
    let heartbeat = shared_jobs
        .as_ref()
        .map(|shared| tokio::spawn(shared.clone().beat()));
    let key_store: Arc<dyn IdempotencyStore> = match &redis {
        Some(redis) => Arc::new(RedisStore::new(redis.clone())),
        None => Arc::new(MemoryStore::default()),
    };
    let draining = Arc::new(AtomicBool::new(false));
    let keys = KeyPolicy {
        store: key_store,
        lease: settings.idempotency_lease(),
        retention: settings.retention(),
    };
    // Inflated bytes of compressed requests, shared by the services (middleware::inflation_budget).
    let inflation = shared_budget(INFLATION_BUDGET_BYTES);
    let templates = TemplateServiceServer::new(TemplateApi::new(
        templates_store.clone(),
        keys.clone(),
        analysis,
    ))
    .max_decoding_message_size(MAX_REQUEST_BYTES)
    // gzip both ways (responses only to clients that accept it); tonic bounds the inflated
    // size by max_decoding_message_size.
    .accept_compressed(CompressionEncoding::Gzip)
    .send_compressed(CompressionEncoding::Gzip);
    let templates =
        InflationBudgetLayer::new(inflation.clone(), MAX_REQUEST_BYTES).layer(templates);
    let renders = RenderServiceServer::new(
        RenderApi::new(
            templates_store.clone(),
            scheduler.clone(),
            JobLimits {
                max_megapixels: settings.max_job_megapixels,
                max_duration: settings.max_job_duration(),
            },
            keys,
            draining.clone(),
        )
        .with_download_limits(DownloadLimits::new(
            settings.max_downloads as usize,
            settings.download_idle_timeout(),
        )),
    )
    .max_decoding_message_size(MAX_RENDER_REQUEST_BYTES)
    .accept_compressed(CompressionEncoding::Gzip)
    .send_compressed(CompressionEncoding::Gzip);
    let renders =
        InflationBudgetLayer::new(inflation.clone(), MAX_RENDER_REQUEST_BYTES).layer(renders);
    let (health, health_service) = tonic_health::server::health_reporter();
    let health_service = health_service
        .max_decoding_message_size(MAX_HEALTH_REQUEST_BYTES)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let health_service =
        InflationBudgetLayer::new(inflation, MAX_HEALTH_REQUEST_BYTES).layer(health_service);
    health
        .set_serving::<TemplateServiceServer<TemplateApi>>()
        .await;
    health.set_serving::<RenderServiceServer<RenderApi>>().await;
    // The `liveness` and `readiness` services of Kubernetes' probes (crate::mesh::probes).
    let probes = Arc::new(
        Probes::start(
            health.clone(),
            ReadinessSources {
                queue: scheduler.queue().clone(),
                redis: redis.clone(),
                draining: draining.clone(),
            },
        )
        .await,
    );
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo, BadRequest, RetryInfo: lets grpcurl show error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?
        // Requests name a file or a symbol; tonic's default would let each message be 4 MiB.
        .max_decoding_message_size(MAX_REFLECTION_REQUEST_BYTES);
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo, BadRequest, RetryInfo: lets grpcurl show error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?
        .max_decoding_message_size(MAX_REFLECTION_REQUEST_BYTES);
    let metrics_server = listeners.metrics.map(|listener| {
        tracing::info!(listen = ?listener.local_addr().ok(), "serving metrics");
        let probes = crate::mesh::probes::HttpProbes::new(health.clone());
        tokio::spawn(crate::metrics::serve(listener, metrics.clone(), probes))
    });
    let sweeper = tokio::spawn(sweep_expired(
        scheduler.clone(),
        templates_store,
        settings.retention(),
    ));
    let configuration_watcher = configuration_watcher.spawn(metrics.clone());
    let local = listeners.grpc.local_addr().ok();
    tracing::info!(
        listen = ?local,
        data_dir = %settings.data_dir.display(),
        workers = settings.worker_count(),
        queue_capacity = settings.queue_capacity,
        tls = match (&tls, &settings.tls.tls_client_ca) {
            (None, _) => "off",
            (Some(_), None) => "tls",
            (Some(_), Some(_)) => "mtls",
        },
        tenant_max_jobs = ?settings.tenant_job_limit(),
        tenant_rate = ?settings.tenant_rate(),
        "serving"
    );
    let (drained_signal, drained_done) = tokio::sync::oneshot::channel::<()>();
    let drained = {
        let (health, scheduler, draining) = (health.clone(), scheduler.clone(), draining.clone());
        let probes = probes.clone();
        let grace = settings.shutdown_grace();
        let reachable_for = settings.mesh.drain_min();
        async move {
            shutdown.await;
            let shutdown_began = tokio::time::Instant::now();
            tracing::info!(
                grace_seconds = grace.as_secs_f64(),
                "shutting down: health NOT_SERVING, refusing submissions, draining renders"
            );
            draining.store(true, Ordering::SeqCst);
            probes.drain().await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            health
                .set_not_serving::<TemplateServiceServer<TemplateApi>>()
                .await;
            health
                .set_not_serving::<RenderServiceServer<RenderApi>>()
                .await;
            scheduler.drain(grace).await;
            // Callers routed here before every node forgot this endpoint are still answered
            // (crate::mesh: why no preStop hook is needed).
            tokio::time::sleep_until(shutdown_began + reachable_for).await;
            tracing::info!("renders drained; closing the listener");
            let _ = drained_signal.send(());
        }
    };
    let stack = middleware_with(
        tracing.clone(),
        metrics.clone(),
        identities,
        StackLimits {
            max_concurrent_requests: settings.max_concurrent_requests as usize,
            request_body_timeout: settings.request_body_timeout(),
            max_watchers: settings.max_watchers as usize,
            tenant_rate: settings.tenant_rate(),
        },
    );
    let incoming = tonic::transport::server::TcpIncoming::from(listeners.grpc)
        .with_nodelay(Some(true))
        .with_keepalive(Some(TCP_KEEPALIVE));
    // Each connection is closed at its age plus the grace, whatever is still open on it.
    let lifetime = settings.mesh.max_connection_age() + settings.mesh.max_connection_age_grace();
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .concurrency_limit_per_connection(per_connection_concurrency(
            settings.max_concurrent_requests as usize,
        ))
        .http2_keepalive_interval(Some(settings.mesh.http2_keepalive_interval()))
        .http2_keepalive_timeout(Some(settings.mesh.http2_keepalive_timeout()))
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_ACCEPT_RESET_STREAMS))
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESET_STREAMS))
        // GOAWAY at the age: the client reconnects, maybe to another replica, and its calls
        // in flight go on (tonic's own grace is not used: see crate::mesh::connection_age).
        .max_connection_age(settings.mesh.max_connection_age())
        .layer(stack)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(templates)
        .add_service(renders);
    // With TLS, our accept loop hands tonic handshaken connections (so certificates can be
    // replaced while serving); tonic puts the peer's certificates on each request.
    let serving = match tls {
        Some(tls) => {
            let handshaken = crate::tls::TlsIncoming::new(incoming, tls, metrics.clone());
            let aged = futures_util::StreamExt::map(handshaken, move |accepted| {
                accepted.map(|stream| AgedConnection::new(stream, lifetime))
            });
            futures_util::future::Either::Left(router.serve_with_incoming_shutdown(aged, drained))
        }
        None => {
            let aged = futures_util::StreamExt::map(incoming, move |accepted| {
                accepted.map(|stream| AgedConnection::new(stream, lifetime))
            });
            futures_util::future::Either::Right(router.serve_with_incoming_shutdown(aged, drained))
        }
    };
    // After the drain, calls still open (a health Watch never ends by itself; an idle peer
    // may never close) get a moment, then the server stops regardless.
    let served = tokio::select! {
        served = serving => served,
        _ = async {
            if drained_done.await.is_ok() {
                tokio::time::sleep(OPEN_CALLS_AFTER_DRAIN).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => {
            tracing::warn!(
                seconds = OPEN_CALLS_AFTER_DRAIN.as_secs_f64(),
                "calls still open after the drain; closing them"
            );
            Ok(())
        }
    };
    if served.is_err() {
        // The transport failed without a shutdown: no render may outlive the server.
        scheduler.drain(Duration::ZERO).await;
    }
    sweeper.abort();
    if let Some(listener) = cancel_listener {
        listener.abort();
    }
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
    }
    if let Some(watcher) = configuration_watcher {
        watcher.abort();
    }
    if let Some(metrics_server) = metrics_server {
        metrics_server.abort();
    }
    if own_tracing {
        // The last spans (the drain's) are exported; the exporter may wait on the network.
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// The tower stack in front of every service, outermost first.
pub type Middleware = Stack<
    StreamLimitLayer,
    Stack<
        StreamLimitLayer,
        Stack<
            RequestSizeLayer,
            Stack<
                LoadShedLayer,
                Stack<
                    RequestBodyLayer,
                    Stack<
                        IdempotencyKeyLayer,
                        Stack<
                            TenantRateLimitLayer,
                            Stack<
                                IdentityLayer,
                                Stack<
                                    CatchPanicLayer,
                                    Stack<RequestMetricsLayer, Stack<TraceContextLayer, Identity>>,
                                >,
                            >,
                        >,
                    >,
                >,
            >,
        >,
    >,
>;

/// What the tower stack bounds.
#[derive(Debug, Clone, Copy)]
pub struct StackLimits {
    /// Calls in flight (bodies received) before shedding.
    pub max_concurrent_requests: usize,
    /// Time a caller has to send its request message once its headers arrived.
    pub request_body_timeout: Duration,
    /// Watch streams (ours and health's) open at once.
    pub max_watchers: usize,
    /// Calls per second of one tenant (none: not limited).
    pub tenant_rate: Option<TenantRate>,
}

/// Builds the tower stack with the default body deadline and watcher cap (public so tests
/// can put it in front of services of their own).
pub fn middleware(metrics: Arc<Metrics>, max_concurrent_requests: usize) -> Middleware {
    middleware_with(
        Tracing::off(),
        metrics,
        Arc::new(Identities::new(
            crate::auth::AuthMode::Off,
            ApiKeys::default(),
        )),
        StackLimits {
            max_concurrent_requests,
            request_body_timeout: Duration::from_millis(
                crate::config::DEFAULT_REQUEST_BODY_TIMEOUT_MS,
            ),
            max_watchers: crate::config::DEFAULT_MAX_WATCHERS as usize,
            tenant_rate: None,
        },
    )
}

/// Builds the tower stack. Each layer sees what the ones inside it answer.
pub fn middleware_with(
    tracing: Tracing,
    metrics: Arc<Metrics>,
    identities: Arc<Identities>,
    limits: StackLimits,
) -> Middleware {
    tower::ServiceBuilder::new()
        // A server span per call, child of the caller's `traceparent`: outermost, so that
        // every refusal below is traced with its status.
        .layer(TraceContextLayer::new(tracing))
        // Counts every answer as the caller sees it, refusals of the layers below included.
        .layer(RequestMetricsLayer::new(metrics.clone()))
        // A bug of ours answers INTERNAL and never takes the connection (or server) down.
        .layer(CatchPanicLayer)
        // Says who is calling (its tenant scopes everything below) from the headers and the
        // connection; a call that must and cannot is refused before its body is received.
        .layer(IdentityLayer::new(identities))
        // A tenant over its request rate is told how long to wait, from the headers: its
        // calls cost no body, no permit and no handler while others' are served.
        .layer(TenantRateLimitLayer::new(limits.tenant_rate, metrics))
        // Refuses a SubmitRender without a well-formed idempotency-key from its headers,
        // before its body is even received; the handlers claim it once the request is valid.
        .layer(IdempotencyKeyLayer)
        // Receives the request message whole (deadline, per-method limit, a byte budget
        // shared fairly per caller, health's apart) before anything below counts the call: a
        // caller that sends headers and no body holds no permit. Inside the identity layer,
        // so an identified caller's share is its tenant's.
        .layer(RequestBodyLayer::new(
            limits.request_body_timeout,
            REQUEST_BUFFER_BUDGET_BYTES,
        ))
        // Beyond the in-flight limit, RESOURCE_EXHAUSTED with a delay instead of queueing.
        .layer(LoadShedLayer::new(limits.max_concurrent_requests))
        // tonic answers an oversized message OUT_OF_RANGE; it is the caller's mistake.
        .layer(RequestSizeLayer)
        // Watch streams live long and load shedding forgets them once their headers are
        // answered: they have a cap of their own, a slot held for the stream's life. Health
        // watchers (who need no identity) have theirs apart from WatchRenderJob's, so peers
        // that are no tenant's cannot take the slots the tenants need.
        .layer(StreamLimitLayer::new(
            &RENDER_WATCH_PATHS,
            limits.max_watchers,
            Reason::TooManyWatchers,
        ))
        .layer(StreamLimitLayer::new(
            &HEALTH_WATCH_PATHS,
            limits.max_watchers,
            Reason::TooManyWatchers,
        ))
        .into_inner()
}

/// The server's traces: the settings' own handle (tests), or OTLP export to
/// `--otlp-endpoint`, or off. Also answers whether the server built it (and so shuts it down).
fn tracing_of(settings: &ServerSettings) -> Result<(Tracing, bool), ServerError> {
    if let Some(tracing) = &settings.tracing {
        return Ok((tracing.clone(), false));
    }
    match &settings.otlp_endpoint {
        Some(endpoint) => {
            let tracing = Tracing::otlp(endpoint)?;
            tracing::info!(%endpoint, "exporting traces over OTLP");
            Ok((tracing, true))
        }
        None => Ok((Tracing::off(), false)),
    }
}

/// The API keys of `--api-keys`, none when unset.
fn load_api_keys(settings: &ServerSettings) -> Result<ApiKeys, ServerError> {
    let Some(path) = &settings.api_keys else {
        return Ok(ApiKeys::default());
    };
    let keys = crate::auth::files::read_api_keys(path).map_err(|error| ServerError::ApiKeys {
        path: path.clone(),
        reason: error.reason,
    })?;
    tracing::info!(path = %path.display(), keys = keys.len(), mode = ?settings.auth, "api keys loaded");
    Ok(keys)
}

/// The certificate and sidecar identities of `--identities`, none when unset.
fn load_known_identities(
    settings: &ServerSettings,
) -> Result<Option<KnownIdentities>, ServerError> {
    let Some(path) = &settings.identities else {
        return Ok(None);
    };
    let known = crate::auth::files::read_known_identities(path).map_err(|error| {
        ServerError::KnownIdentities {
            path: path.clone(),
            reason: error.reason,
        }
    })?;
    tracing::info!(path = %path.display(), identities = known.len(), "identities loaded");
    Ok(Some(known))
}

/// HTTP/2 streams one connection may have open (SETTINGS_MAX_CONCURRENT_STREAMS): gRPC-Go's
/// and most proxies' 100. An honest client multiplexing more waits for a stream to end
/// (its transport queues); a hostile one is refused by h2 (REFUSED_STREAM).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 100;
/// Share of `--max-concurrent-requests` one connection may have in the stack at once (its
/// further calls wait on their stream): one connection cannot take the whole instance.
pub const PER_CONNECTION_SHARE_DIVISOR: usize = 8;
/// Largest header list of one request: our metadata is a few hundred bytes (an
/// idempotency key of at most 255, tracing headers); 16 KiB is hyper's default, said here.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// Streams a peer may open and reset before we accept them before the connection is closed
/// (GOAWAY): h2's default, the rapid-reset (CVE-2023-44487) guard, said here.
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams we reset for the peer's protocol errors before the connection is closed: a
/// conforming client causes none; hyper's 1024 lets one connection cost a lot of work
/// first (the "MadeYouReset" family).
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 128;
/// TCP keepalive probes on an idle socket, so a half-open connection is found even when
/// HTTP/2 is quiet.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Calls one connection may have in the stack at once: an eighth of the global limit, at
/// least 1.
pub fn per_connection_concurrency(max_concurrent_requests: usize) -> usize {
    (max_concurrent_requests / PER_CONNECTION_SHARE_DIVISOR).max(1)
}

/// How long calls still open after the drain (streams such as a health Watch) may take to
/// end before the server stops anyway.
pub const OPEN_CALLS_AFTER_DRAIN: Duration = Duration::from_secs(5);

/// How often expired jobs and outputs are looked for: a quarter of the retention, within
/// these bounds.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(200);
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Cancels the jobs of this instance that another instance was asked to cancel.
async fn serve_remote_cancels(shared: Arc<SharedJobs>, scheduler: Arc<Scheduler>) {
    let mut requests = shared.cancel_requests();
    while let Some(id) = requests.recv().await {
        let scheduler = scheduler.clone();
        tokio::spawn(async move { scheduler.cancel_requested(id).await });
    }
}

async fn sweep_expired(scheduler: Arc<Scheduler>, templates: TemplateStore, retention: Duration) {
    let mut interval =
        tokio::time::interval((retention / 4).clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL));
    loop {
        interval.tick().await;
        let (scheduler, templates) = (scheduler.clone(), templates.clone());
        // File removal blocks; it runs off the runtime.
        let _ = tokio::task::spawn_blocking(move || {
            scheduler.expire(retention);
            // Template files pinned by jobs of an instance that stopped without ending them.
            match templates.sweep_pins(retention) {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed template files of lost jobs"),
                Err(error) => tracing::warn!(%error, "cannot sweep template files of lost jobs"),
            }
        })
        .await;
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is called (not when
/// the future is first polled), so a signal during start-up is not lost to the default
/// action.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (terminate, interrupt) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            (terminate, interrupt) => {
                tracing::warn!(
                    sigterm = terminate.is_ok(),
                    sigint = interrupt.is_ok(),
                    "cannot listen for shutdown signals; falling back to Ctrl-C only"
                );
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
