//! Builds the whole application from its settings, each part by a named function in the
//! order they depend on each other; nothing is served until [`App::run_until_stopped`].

use super::stack::{middleware_with, StackLimits};
use super::transport::{grpc_router, GrpcRouter};
use super::ServerError;
use crate::analysis::settings::AnalysisSettings;
use crate::analysis::AnalysisPool;
use crate::auth::settings::AuthSettings;
use crate::auth::{ApiKeys, Identities, KnownIdentities};
use crate::config::application::ApplicationSettings;
use crate::config::ServerSettings;
use crate::grpc::proto::render_service_server::RenderServiceServer;
use crate::grpc::proto::template_service_server::TemplateServiceServer;
use crate::grpc::proto::FILE_DESCRIPTOR_SET;
use crate::grpc::renders::RenderApi;
use crate::grpc::templates::TemplateApi;
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::redis_store::RedisStore;
use crate::idempotency::settings::IdempotencySettings;
use crate::idempotency::store::{IdempotencyStore, MemoryStore};
use crate::jobs::intake::{Intake, NotifyCheck};
use crate::jobs::scheduler::SchedulerSettings;
use crate::jobs::shared::SharedJobs;
use crate::jobs::Scheduler;
use crate::mesh::probes::{Probes, ReadinessSources};
use crate::metrics::Metrics;
use crate::middleware::inflation_budget::{shared_budget, INFLATION_BUDGET_BYTES, INFLATION_WAIT};
use crate::middleware::request_body::message_limit_of;
use crate::middleware::InflationBudgetLayer;
use crate::redis_client::settings::RedisConnectionSettings;
use crate::redis_client::RedisClient;
use crate::storage::settings::StorageSettings;
use crate::storage::{ObjectStorage, OutputStore, Pins, Stores};
use crate::telemetry::settings::TelemetrySettings;
use crate::telemetry::traces::Tracing;
use crate::tls::watch::{WatchedFiles, Watcher};
use crate::tls::ReloadableTls;
use crate::webhooks::client::Sender as WebhookSender;
use crate::webhooks::dispatch::Dispatcher;
use crate::webhooks::settings::WebhookSettings;
use crate::webhooks::signing::{parse_secrets_file, Secret, SigningSecrets};
use crate::webhooks::store::{Deliveries, DirectoryDeliveries, RedisDeliveries};
use crate::webhooks::Webhooks;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::codec::CompressionEncoding;
use tonic::service::Routes;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tower::Layer;

/// Sockets the server answers on, bound by the caller (port 0 in tests).
#[derive(Debug)]
pub struct Listeners {
    pub grpc: TcpListener,
    /// Prometheus metrics over HTTP; none when metrics are off.
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses of `settings`.
    pub(crate) async fn bind(settings: &ApplicationSettings) -> std::io::Result<Listeners> {
        let grpc = TcpListener::bind(settings.listen).await?;
        let metrics = match settings.metrics_listen {
            Some(address) => Some(TcpListener::bind(address).await?),
            None => None,
        };
        Ok(Listeners { grpc, metrics })
    }
}

/// The application, built and not yet serving.
pub struct App {
    pub(super) listeners: Listeners,
    pub(super) settings: ServerSettings,
    pub(super) tracing: Tracing,
    /// Whether the application built its tracing (and so shuts it down).
    pub(super) own_tracing: bool,
    pub(super) metrics: Arc<Metrics>,
    pub(super) tls: Option<Arc<ReloadableTls>>,
    pub(super) configuration_watcher: Watcher,
    pub(super) scheduler: Arc<Scheduler>,
    pub(super) shared_jobs: Option<Arc<SharedJobs>>,
    /// The jobs' pinned files, swept of those lost jobs left.
    pub(super) pins: Pins,
    pub(super) health: HealthReporter,
    pub(super) probes: Arc<Probes>,
    /// Set on shutdown: new submissions are answered UNAVAILABLE.
    pub(super) draining: Arc<AtomicBool>,
    pub(super) router: GrpcRouter,
    /// The webhook loops, and the job snapshots they read (run by `run_until_stopped`).
    pub(super) webhook_loops: (Dispatcher, mpsc::UnboundedReceiver<crate::jobs::Job>),
}

impl App {
    /// Every part of the application from `settings`; a part that cannot be built stops the
    /// start-up with its reason.
    pub(crate) async fn build(
        listeners: Listeners,
        settings: ServerSettings,
    ) -> Result<App, ServerError> {
        // Before anything starts: a deployment that would answer anyone is not served at all.
        let listen = settings.application.listen;
        (settings.auth).check_exposure(listeners.grpc.local_addr().unwrap_or(listen))?;
        let metrics = Metrics::new();
        let (tracing, own_tracing) = tracing_of(&settings.telemetry)?;
        let identities = identities(&settings.auth)?;
        let tls = match settings.tls.files() {
            Some(files) => Some(Arc::new(ReloadableTls::load(files)?)),
            None => None,
        };
        let stores = stores(&settings.storage, &settings.application.data_dir)?;
        let executable = executable(settings.render_workers.worker_executable.clone())?;
        sandbox_self_test(&executable, &metrics).await;
        let redis = redis(&settings.redis)?;
        let retention = settings.jobs.retention();
        let shared_jobs = redis
            .as_ref()
            .map(|redis| Arc::new(SharedJobs::new(redis.clone(), retention)));
        let analysis = analysis_pool(&settings.analysis)?;
        let webhooks = webhooks(&settings, redis.as_ref())?;
        let (announcements, snapshots) = mpsc::unbounded_channel();
        let scheduler = scheduler(
            &settings,
            executable,
            stores.outputs.clone(),
            &metrics,
            &tracing,
            &shared_jobs,
            announcements,
        );
        let dispatcher = dispatcher(&settings.webhooks, retention, &webhooks, &metrics)?;
        let webhook_loops = (dispatcher, snapshots);
        let configuration_watcher =
            configuration_watcher(&settings, &identities, tls.as_ref(), &webhooks);
        let keys = key_policy(&settings.idempotency, retention, redis.as_ref());
        let draining = Arc::new(AtomicBool::new(false));
        let health = HealthReporter::new();
        let services = Services {
            stores: stores.clone(),
            scheduler: scheduler.clone(),
            analysis,
            keys,
            draining: draining.clone(),
            health: health.clone(),
            webhooks,
        };
        let routes = with_reflection(services.routes(&settings))?;
        health
            .set_serving::<TemplateServiceServer<TemplateApi>>()
            .await;
        health.set_serving::<RenderServiceServer<RenderApi>>().await;
        // The `liveness` and `readiness` services of Kubernetes' probes (crate::mesh::probes).
        let readiness = ReadinessSources {
            queue: scheduler.queue().clone(),
            redis,
            draining: draining.clone(),
        };
        let probes = Arc::new(Probes::start(health.clone(), readiness).await);
        let stack = middleware_with(
            tracing.clone(),
            metrics.clone(),
            identities,
            StackLimits::from(&settings.limits),
        );
        let router = grpc_router(&settings, stack, routes);
        Ok(App {
            listeners,
            settings,
            tracing,
            own_tracing,
            metrics,
            tls,
            configuration_watcher,
            scheduler,
            shared_jobs,
            pins: stores.pins,
            health,
            probes,
            draining,
            router,
            webhook_loops,
        })
    }
}

/// The server's traces: the settings' own handle (tests), or OTLP export to
/// `--otlp-endpoint`, or off. Also answers whether the server built it (and so shuts it down).
fn tracing_of(settings: &TelemetrySettings) -> Result<(Tracing, bool), ServerError> {
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

/// Who may call: the auth mode, the API keys and the known identities of the settings.
fn identities(settings: &AuthSettings) -> Result<Arc<Identities>, ServerError> {
    let mut identities = Identities::new(settings.mode, load_api_keys(settings)?)
        .trusting_sidecar_identity(settings.trust_sidecar_identity);
    if let Some(known) = load_known_identities(settings)? {
        identities = identities.with_known_identities(known);
    }
    Ok(Arc::new(identities))
}

/// The API keys of `--api-keys`, none when unset.
fn load_api_keys(settings: &AuthSettings) -> Result<ApiKeys, ServerError> {
    let Some(path) = &settings.api_keys else {
        return Ok(ApiKeys::default());
    };
    let keys = crate::auth::files::read_api_keys(path).map_err(|error| ServerError::ApiKeys {
        path: path.clone(),
        reason: error.reason,
    })?;
    tracing::info!(path = %path.display(), keys = keys.len(), mode = ?settings.mode, "api keys loaded");
    Ok(keys)
}

/// The certificate and sidecar identities of `--identities`, none when unset.
fn load_known_identities(settings: &AuthSettings) -> Result<Option<KnownIdentities>, ServerError> {
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

/// Changed certificates, keys and identity files are put in force without a restart. Their
/// state now is the baseline; the watcher starts once nothing else can fail.
fn configuration_watcher(
    settings: &ServerSettings,
    identities: &Arc<Identities>,
    tls: Option<&Arc<ReloadableTls>>,
    webhooks: &Webhooks,
) -> Watcher {
    let mut watched = identity_file_watches(
        settings.auth.api_keys.as_deref(),
        settings.auth.identities.as_deref(),
        identities,
    );
    watched.extend(tls.map(crate::tls::watch));
    watched.extend(settings.webhooks.webhook_secrets.as_ref().map(|path| {
        let (path, secrets) = (path.clone(), webhooks.secrets.clone());
        WatchedFiles {
            name: "webhook_secrets",
            paths: vec![path.clone()],
            reload: Box::new(move || {
                let read = read_webhook_secrets(&path)?;
                let summary = format!("{} tenants", read.len());
                secrets.replace(read);
                Ok(summary)
            }),
        }
    }));
    Watcher::new(watched)
}

/// The secrets of a `--webhook-secrets` file, or why it does not read.
fn read_webhook_secrets(
    path: &Path,
) -> Result<std::collections::HashMap<crate::auth::TenantId, Vec<Secret>>, String> {
    let text = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    parse_secrets_file(&text)
}

/// Where webhooks may go, who signs them, and where their deliveries are kept (beside the
/// job records: Redis when there is one, else the data directory).
fn webhooks(
    settings: &ServerSettings,
    redis: Option<&Arc<RedisClient>>,
) -> Result<Webhooks, ServerError> {
    let secrets = match &settings.webhooks.webhook_secrets {
        Some(path) => {
            let secrets = read_webhook_secrets(path)
                .map_err(|reason| ServerError::Webhooks(format!("{}: {reason}", path.display())))?;
            tracing::info!(path = %path.display(), tenants = secrets.len(), "webhook secrets loaded");
            SigningSecrets::from_file(secrets)
        }
        None => SigningSecrets::generated(),
    };
    let caps = settings
        .webhooks
        .pending_caps(settings.jobs.retained.max_retained_jobs_per_tenant);
    let store = match redis {
        // Kept through their retry window, then as long as jobs are.
        Some(redis) => Deliveries::Redis(Arc::new(RedisDeliveries::new(
            redis.clone(),
            settings.webhooks.window() + settings.jobs.retention(),
            caps,
        ))),
        None => Deliveries::Directory(Arc::new(
            DirectoryDeliveries::open(&settings.application.data_dir, caps)
                .map_err(|error| ServerError::Webhooks(error.to_string()))?,
        )),
    };
    Ok(Webhooks {
        policy: Arc::new(settings.webhooks.policy()),
        secrets: Arc::new(secrets),
        store,
    })
}

/// The webhooks' check of a submission's `notify`, for the intake.
fn notify_check(webhooks: &Webhooks) -> NotifyCheck {
    let webhooks = webhooks.clone();
    NotifyCheck(Arc::new(move |tenant, notify| {
        webhooks.check(tenant, notify)
    }))
}

/// The loops that deliver webhooks; what they delivered is kept as long as jobs are
/// (`retention`).
fn dispatcher(
    settings: &WebhookSettings,
    retention: Duration,
    webhooks: &Webhooks,
    metrics: &Arc<Metrics>,
) -> Result<Dispatcher, ServerError> {
    let mut sender = WebhookSender::new(webhooks.policy.clone())
        .map_err(|error| ServerError::Webhooks(error.to_string()))?;
    if let Some(timeout) = settings.answer_timeout {
        sender = sender.with_answer_timeout(timeout);
    }
    Ok(Dispatcher {
        store: webhooks.store.clone(),
        sender,
        policy: webhooks.policy.clone(),
        secrets: webhooks.secrets.clone(),
        metrics: metrics.clone(),
        job_json: Arc::new(crate::grpc::renders::job_json),
        window: settings.window(),
        concurrency: settings.webhook_concurrency as usize,
        kept: retention,
    })
}

/// The watches that put changed files in force in `identities`.
fn identity_file_watches(
    api_keys: Option<&Path>,
    known_identities: Option<&Path>,
    identities: &Arc<Identities>,
) -> Vec<WatchedFiles> {
    let api_keys = api_keys.map(|path| {
        identity_file_watch("api_keys", path, identities, |path, identities| {
            let keys =
                crate::auth::files::read_api_keys(path).map_err(|error| error.to_string())?;
            let summary = format!("{} keys", keys.len());
            identities.replace_api_keys(keys);
            Ok(summary)
        })
    });
    let known_identities = known_identities.map(|path| {
        identity_file_watch("identities", path, identities, |path, identities| {
            let known = crate::auth::files::read_known_identities(path)
                .map_err(|error| error.to_string())?;
            let summary = format!("{} identities", known.len());
            identities.replace_known_identities(known);
            Ok(summary)
        })
    });
    api_keys.into_iter().chain(known_identities).collect()
}

/// The watch of one file `name` at `path` whose `reload` puts it in force in `identities`
/// and says what it holds.
fn identity_file_watch(
    name: &'static str,
    path: &Path,
    identities: &Arc<Identities>,
    reload: fn(&Path, &Identities) -> Result<String, String>,
) -> WatchedFiles {
    let (path, identities) = (path.to_path_buf(), identities.clone());
    WatchedFiles {
        name,
        paths: vec![path.clone()],
        reload: Box::new(move || reload(&path, &identities)),
    }
}

/// Templates, images, pins and outputs in the object store of the settings (`data_dir`
/// holds the objects locally, and the scratch files in either mode).
fn stores(settings: &StorageSettings, data_dir: &Path) -> Result<Stores, ServerError> {
    let objects = ObjectStorage::open(settings, data_dir, tokio::runtime::Handle::current())?;
    tracing::info!(
        store = objects.describe(),
        "templates and outputs in object storage"
    );
    let stores = Stores::open(objects, settings)?;
    // The index's repair lists the templates: off the runtime and not waited for, so a
    // store that is slow or down at start-up delays nothing (calls meanwhile are answered
    // as the store allows: UNAVAILABLE while it is down).
    let store = stores.templates.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(error) = store.complete_index() {
            tracing::warn!(%error, "cannot repair the template index; the next start tries again");
        }
    });
    Ok(stores)
}

/// The executable that runs as a worker: the one given, or this one.
fn executable(given: Option<PathBuf>) -> Result<PathBuf, ServerError> {
    match given {
        Some(executable) => Ok(executable),
        None => std::env::current_exe().map_err(ServerError::Executable),
    }
}

/// The sandbox self-test runs once before serving (a fraction of a second, off the async
/// runtime, its worker gone before the first request); what it finds is logged and
/// exported as lottie_render_sandbox_protection.
async fn sandbox_self_test(executable: &std::path::Path, metrics: &Arc<Metrics>) {
    let (executable, metrics) = (executable.to_path_buf(), metrics.clone());
    let _ = tokio::task::spawn_blocking(move || {
        for (mechanism, in_force) in crate::sandbox::self_test::check_at_start_up(&executable) {
            metrics.record_sandbox_protection(mechanism, in_force);
        }
    })
    .await;
}

/// The Redis client of `--redis-url`, none when unset.
fn redis(settings: &RedisConnectionSettings) -> Result<Option<Arc<RedisClient>>, ServerError> {
    let Some(redis) = settings.connection() else {
        return Ok(None);
    };
    tracing::info!(prefix = %redis.key_prefix, "keys and job records in Redis");
    Ok(Some(Arc::new(
        RedisClient::open(&redis).map_err(ServerError::Redis)?,
    )))
}

/// The pool of `analyze` processes that build new templates' reports.
fn analysis_pool(settings: &AnalysisSettings) -> Result<AnalysisPool, ServerError> {
    Ok(AnalysisPool::new(
        executable(settings.analysis_executable.clone())?,
        usize::from(settings.analysis_workers),
        settings.budget(),
    ))
}

/// The scheduler with its worker loops started: the render workers' settings, the jobs', and
/// each tenant's job limit under the authentication mode.
fn scheduler(
    settings: &ServerSettings,
    executable: PathBuf,
    outputs: OutputStore,
    metrics: &Arc<Metrics>,
    tracing: &Tracing,
    shared_jobs: &Option<Arc<SharedJobs>>,
    announcements: mpsc::UnboundedSender<crate::jobs::Job>,
) -> Arc<Scheduler> {
    Scheduler::start(
        SchedulerSettings {
            workers: settings.render_workers.worker_count(),
            executable,
            worker_memory_bytes: settings.render_workers.worker_memory_bytes(),
            tenant_max_jobs: settings.tenant_job_limit(),
            tracing: tracing.clone(),
            spare_workers: usize::from(settings.render_workers.spare_workers),
            job_lease: settings.jobs.job_lease(),
            retained: settings.jobs.retained.limits(),
            announcements: Some(announcements),
        },
        settings.jobs.queue_capacity as usize,
        outputs,
        metrics.clone(),
        shared_jobs.clone(),
    )
}

/// Idempotency keys in Redis when there is one, else in memory; a key's record is kept as
/// long as jobs are (`retention`).
fn key_policy(
    settings: &IdempotencySettings,
    retention: Duration,
    redis: Option<&Arc<RedisClient>>,
) -> KeyPolicy {
    let store: Arc<dyn IdempotencyStore> = match redis {
        Some(redis) => Arc::new(RedisStore::new(redis.clone())),
        None => Arc::new(MemoryStore::default()),
    };
    KeyPolicy {
        store,
        lease: settings.lease(),
        retention,
    }
}

/// What the gRPC services are built from.
struct Services {
    stores: Stores,
    scheduler: Arc<Scheduler>,
    analysis: AnalysisPool,
    keys: KeyPolicy,
    draining: Arc<AtomicBool>,
    health: HealthReporter,
    webhooks: Webhooks,
}

impl Services {
    /// The template, render and health services, each with its message limit (the largest
    /// of its methods', [`message_limit_of`]), gzip both ways, and that limit held from one
    /// shared inflation budget.
    fn routes(self, settings: &ServerSettings) -> Routes {
        // Inflated bytes of compressed requests, shared by the services (middleware::inflation_budget).
        let inflation = shared_budget(INFLATION_BUDGET_BYTES);
        let inflation_wait = settings.limits.inflation_wait.unwrap_or(INFLATION_WAIT);
        let inflation_layer =
            |limit| InflationBudgetLayer::new(inflation.clone(), limit).with_wait(inflation_wait);
        let templates = TemplateServiceServer::new(TemplateApi::new(
            self.stores.templates.clone(),
            self.stores.images,
            self.keys.clone(),
            self.analysis,
        ));
        let templates_limit = message_limit_of(&templates);
        let templates = templates
            .max_decoding_message_size(templates_limit)
            // gzip both ways (responses only to clients that accept it); tonic bounds the
            // inflated size by max_decoding_message_size.
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip);
        let templates = inflation_layer(templates_limit).layer(templates);
        let renders = RenderServiceServer::new(
            RenderApi::new(Intake::new(
                self.stores.templates,
                self.stores.pins,
                self.scheduler,
                settings.jobs.job_limits(),
                self.keys,
                self.draining,
                notify_check(&self.webhooks),
            ))
            .with_download_limits(settings.downloads.limits())
            .with_webhook_deliveries(self.webhooks.store)
            .with_operators(settings.auth.operators()),
        );
        let renders_limit = message_limit_of(&renders);
        let renders = renders
            .max_decoding_message_size(renders_limit)
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip);
        let renders = inflation_layer(renders_limit).layer(renders);
        let health = HealthServer::new(HealthService::from_health_reporter(self.health));
        let health_limit = message_limit_of(&health);
        let health = health
            .max_decoding_message_size(health_limit)
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip);
        let health = inflation_layer(health_limit).layer(health);
        Routes::new(health)
            .add_service(templates)
            .add_service(renders)
    }
}

/// Server reflection, both versions grpcurl may ask for.
fn with_reflection(routes: Routes) -> Result<Routes, ServerError> {
    // Requests name a file or a symbol; tonic's default would let each message be 4 MiB.
    let reflection_v1 = reflection().build_v1()?;
    let limit = message_limit_of(&reflection_v1);
    let reflection_v1 = reflection_v1.max_decoding_message_size(limit);
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let limit = message_limit_of(&reflection_v1alpha);
    let reflection_v1alpha = reflection_v1alpha.max_decoding_message_size(limit);
    Ok(routes
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha))
}

/// What reflection describes: our contract, health's, and the error details.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo, BadRequest, RetryInfo: lets grpcurl show error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
}
