//! Runs the built application until stopped: its background tasks in one `JoinSet`, the
//! gRPC server on its listener, and on shutdown the drain (health NOT_SERVING, submissions
//! UNAVAILABLE, running renders finish within the grace period or are cancelled retryable)
//! before the listener closes; then every background task ends on the one path out.

use super::http_endpoint;
use super::startup::App;
use super::transport::{open_connections, serve_connections};
use super::{ServerError, Shutdown};
use crate::config::ServerSettings;
use crate::grpc::proto::render_service_server::RenderServiceServer;
use crate::grpc::proto::template_service_server::TemplateServiceServer;
use crate::grpc::renders::RenderApi;
use crate::grpc::templates::TemplateApi;
use crate::jobs::shared::SharedJobs;
use crate::jobs::Scheduler;
use crate::mesh::probes::{HttpProbes, Probes};
use crate::storage::Pins;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tonic_health::server::HealthReporter;

/// How long calls still open after the drain (streams such as a health Watch) may take to
/// end before the server stops anyway.
pub const OPEN_CALLS_AFTER_DRAIN: Duration = Duration::from_secs(5);

/// How often expired jobs and outputs are looked for: a quarter of the retention, within
/// these bounds.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(200);
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

impl App {
    /// Serves until `shutdown` resolves, then drains: health NOT_SERVING, new submissions
    /// UNAVAILABLE, running renders get the grace period, and the listener closes last.
    pub(crate) async fn run_until_stopped(self, shutdown: Shutdown) -> Result<(), ServerError> {
        let mut background = JoinSet::new();
        if let Some(shared) = &self.shared_jobs {
            background.spawn(serve_remote_cancels(shared.clone(), self.scheduler.clone()));
            background.spawn(shared.clone().beat());
        }
        if let Some(listener) = self.listeners.metrics {
            tracing::info!(listen = ?listener.local_addr().ok(), "serving metrics");
            let probes = HttpProbes::new(self.health.clone());
            background.spawn(http_endpoint::serve(listener, self.metrics.clone(), probes));
        }
        let (dispatcher, snapshots) = self.webhook_loops;
        let webhook_sender = dispatcher.start(snapshots, &mut background);
        let (scheduler, retention) = (self.scheduler.clone(), self.settings.jobs.retention());
        background.spawn(sweep_expired(scheduler, self.pins, retention));
        self.configuration_watcher
            .spawn_in(self.metrics.clone(), &mut background);
        // Before "serving" is logged: the open files limit is raised and read once.
        let connections = open_connections(&self.settings, &self.metrics);
        log_serving(&self.settings, &self.listeners.grpc, self.tls.is_some());
        let (drained_signal, drained_done) = oneshot::channel::<()>();
        let drain = Drain {
            health: self.health,
            probes: self.probes,
            scheduler: self.scheduler.clone(),
            draining: self.draining,
            grace: self.settings.application.shutdown_grace(),
            reachable_for: self.settings.mesh.drain_min(),
        };
        let drained = async move {
            shutdown.await;
            drain.run().await;
            let _ = drained_signal.send(());
        };
        let (router, listener, tls) = (self.router, self.listeners.grpc, self.tls);
        // Boxed: the transport's future nests tonic's and hyper's deep enough that laying it
        // out inside this one passed rustc's query depth limit.
        let serving = Box::pin(serve_connections(
            router,
            listener,
            connections,
            tls,
            self.metrics,
            &self.settings,
            drained,
        ));
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
            self.scheduler.drain(Duration::ZERO).await;
        }
        // Webhook attempts in flight end (or are put back) before the store is let go of.
        webhook_sender.stop().await;
        // The one way out for every background task.
        background.shutdown().await;
        if self.own_tracing {
            // The last spans (the drain's) are exported; the exporter may wait on the network.
            let tracing = self.tracing;
            let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
        }
        served?;
        tracing::info!("stopped");
        Ok(())
    }
}

fn log_serving(settings: &ServerSettings, listener: &TcpListener, tls: bool) {
    tracing::info!(
        listen = ?listener.local_addr().ok(),
        data_dir = %settings.application.data_dir.display(),
        workers = settings.render_workers.worker_count(),
        queue_capacity = settings.jobs.queue_capacity,
        tls = match (tls, &settings.tls.tls_client_ca) {
            (false, _) => "off",
            (true, None) => "tls",
            (true, Some(_)) => "mtls",
        },
        tenant_max_jobs = ?settings.tenant_job_limit(),
        tenant_rate = ?settings.limits.tenant_rate(),
        "serving"
    );
}

/// What the drain on shutdown acts on.
struct Drain {
    health: HealthReporter,
    probes: Arc<Probes>,
    scheduler: Arc<Scheduler>,
    draining: Arc<AtomicBool>,
    grace: Duration,
    /// The least time the listener stays open after the shutdown (`--drain-min-seconds`).
    reachable_for: Duration,
}

impl Drain {
    async fn run(self) {
        let shutdown_began = tokio::time::Instant::now();
        tracing::info!(
            grace_seconds = self.grace.as_secs_f64(),
            "shutting down: health NOT_SERVING, refusing submissions, draining renders"
        );
        self.draining.store(true, Ordering::SeqCst);
        self.probes.drain().await;
        self.health
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        self.health
            .set_not_serving::<TemplateServiceServer<TemplateApi>>()
            .await;
        self.health
            .set_not_serving::<RenderServiceServer<RenderApi>>()
            .await;
        self.scheduler.drain(self.grace).await;
        // Callers routed here before every node forgot this endpoint are still answered
        // (crate::mesh: why no preStop hook is needed).
        tokio::time::sleep_until(shutdown_began + self.reachable_for).await;
        tracing::info!("renders drained; closing the listener");
    }
}

/// Cancels the jobs of this instance that another instance was asked to cancel.
async fn serve_remote_cancels(shared: Arc<SharedJobs>, scheduler: Arc<Scheduler>) {
    let mut requests = shared.cancel_requests();
    while let Some(id) = requests.recv().await {
        let scheduler = scheduler.clone();
        tokio::spawn(async move { scheduler.cancel_requested(id).await });
    }
}

async fn sweep_expired(scheduler: Arc<Scheduler>, pins: Pins, retention: Duration) {
    let mut interval =
        tokio::time::interval((retention / 4).clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL));
    loop {
        interval.tick().await;
        let (scheduler, pins) = (scheduler.clone(), pins.clone());
        // File removal blocks; it runs off the runtime.
        let _ = tokio::task::spawn_blocking(move || {
            scheduler.expire(retention);
            // Template files pinned by jobs of an instance that stopped without ending them.
            match pins.sweep(retention) {
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
