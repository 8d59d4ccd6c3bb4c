//! Prometheus metrics: requests by method and code, request latency by method, rejections by
//! reason, queue depth, job durations and outcomes, frames per second, worker crashes,
//! quarantined fingerprints, jobs kept and evicted, shared renders (joins, cache hits),
//! idempotent replays, and the shared work queue (jobs taken, reclaimed, lease renewals that
//! failed, renders started).
//! Encoded in the OpenMetrics text format (what prometheus-client's text encoder writes,
//! `# EOF` last) and served over HTTP (`GET /metrics`, by `crate::app::http_endpoint`) on
//! `--metrics-listen`, said so by its content type; each server instance has its own
//! registry, so tests running several servers stay apart.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// gRPC method name, e.g. `SubmitRender`.
    pub method: String,
    /// gRPC status code name, e.g. `InvalidArgument`.
    pub code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// gRPC method name, e.g. `SubmitRender`; one of a fixed set, `unknown` for the rest.
    pub method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantRefusalLabels {
    /// A tenant from configuration (API keys) or `default`: a bounded set.
    pub tenant: String,
    /// `TENANT_JOB_LIMIT` or `TENANT_RATE_LIMITED`.
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// Terminal state: succeeded, failed or cancelled.
    pub outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FormatLabels {
    pub format: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MechanismLabels {
    /// A sandbox protection, one of `sandbox::self_test::MECHANISMS`.
    pub mechanism: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// What was re-read: `tls`, `api_keys` or `identities`.
    pub file: String,
    /// `applied`, or `kept_previous` when the new file was refused.
    pub outcome: String,
}

fn duration_histogram() -> Histogram {
    // 0.25 s … ~17 min.
    Histogram::new(exponential_buckets(0.25, 2.0, 13))
}

fn request_duration_histogram() -> Histogram {
    // 1 ms … ~33 s: a health check or a GetRenderJob takes about a millisecond, a
    // CreateTemplate with its analysis seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn fps_histogram() -> Histogram {
    // 1 … 2048 frames per second.
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration_seconds: Family<MethodLabels, Histogram, fn() -> Histogram>,
    pub rejections: Family<ReasonLabels, Counter>,
    pub queue_depth: Gauge,
    pub jobs_running: Gauge,
    pub jobs_finished: Family<OutcomeLabels, Counter>,
    pub job_duration_seconds: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    pub frames_per_second: Family<FormatLabels, Histogram, fn() -> Histogram>,
    pub frames_rendered: Counter,
    pub worker_crashes: Counter,
    pub quarantined_fingerprints: Gauge,
    pub jobs_retained: Gauge,
    pub jobs_retained_bytes: Gauge,
    pub jobs_evicted: Counter,
    pub render_joins: Counter,
    pub render_cache_hits: Counter,
    pub idempotent_replays: Counter,
    pub sandbox_protection: Family<MechanismLabels, Gauge>,
    pub tls_handshake_failures: Family<ReasonLabels, Counter>,
    pub config_reloads: Family<ReloadLabels, Counter>,
    pub tenant_refusals: Family<TenantRefusalLabels, Counter>,
    pub workers_started: Counter,
    pub spare_worker_hits: Counter,
    pub spare_worker_deaths: Counter,
    pub spare_workers_forked: Counter,
    pub worker_zygote_starts: Counter,
    pub worker_zygote_deaths: Counter,
    pub renders_started: Counter,
    pub shared_jobs_taken: Counter,
    pub shared_jobs_reclaimed: Counter,
    pub shared_jobs_handed_back: Counter,
    pub job_lease_renewals_failed: Counter,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("lottie_render"),
            requests: Default::default(),
            request_duration_seconds: Family::new_with_constructor(request_duration_histogram),
            rejections: Default::default(),
            queue_depth: Default::default(),
            jobs_running: Default::default(),
            jobs_finished: Default::default(),
            job_duration_seconds: Family::new_with_constructor(duration_histogram),
            frames_per_second: Family::new_with_constructor(fps_histogram),
            frames_rendered: Default::default(),
            worker_crashes: Default::default(),
            jobs_retained: Default::default(),
            jobs_retained_bytes: Default::default(),
            jobs_evicted: Default::default(),
            quarantined_fingerprints: Default::default(),
            render_joins: Default::default(),
            render_cache_hits: Default::default(),
            workers_started: Default::default(),
            spare_worker_hits: Default::default(),
            spare_worker_deaths: Default::default(),
            spare_workers_forked: Default::default(),
            worker_zygote_starts: Default::default(),
            worker_zygote_deaths: Default::default(),
            renders_started: Default::default(),
            shared_jobs_taken: Default::default(),
            shared_jobs_reclaimed: Default::default(),
            shared_jobs_handed_back: Default::default(),
            job_lease_renewals_failed: Default::default(),
            idempotent_replays: Default::default(),
            sandbox_protection: Default::default(),
            tls_handshake_failures: Default::default(),
            config_reloads: Default::default(),
            tenant_refusals: Default::default(),
        };
        metrics.register_calls();
        metrics.register_jobs();
        metrics.register_workers();
        metrics.register_shared_queue();
        metrics.register_guards();
        Arc::new(metrics)
    }

    /// Calls answered, timed and refused.
    fn register_calls(&mut self) {
        self.registry.register(
            "grpc_requests",
            "gRPC calls answered, by method and status code",
            self.requests.clone(),
        );
        self.registry.register(
            "request_duration_seconds",
            "Time from a gRPC call's headers to its answer's headers (a unary call's whole \
             handling; a stream's start), by method",
            self.request_duration_seconds.clone(),
        );
        self.registry.register(
            "rejections",
            "Calls answered with an error, by ErrorInfo reason",
            self.rejections.clone(),
        );
    }

    /// Jobs: queued, running, finished, kept, quarantined, shared.
    fn register_jobs(&mut self) {
        self.registry.register(
            "queue_depth",
            "Jobs waiting for a worker",
            self.queue_depth.clone(),
        );
        self.registry.register(
            "jobs_running",
            "Jobs being rendered now",
            self.jobs_running.clone(),
        );
        self.registry.register(
            "jobs_finished",
            "Jobs that reached a terminal state, by outcome",
            self.jobs_finished.clone(),
        );
        self.registry.register(
            "job_duration_seconds",
            "Time from a job's start to its end (all worker attempts), by outcome",
            self.job_duration_seconds.clone(),
        );
        self.registry.register(
            "job_frames_per_second",
            "Frames rendered and encoded per second of a succeeded job's worker run",
            self.frames_per_second.clone(),
        );
        self.registry.register(
            "frames_rendered",
            "Frames of succeeded jobs",
            self.frames_rendered.clone(),
        );
        self.registry.register(
            "worker_crashes",
            "Worker processes killed by a signal or ended without a result",
            self.worker_crashes.clone(),
        );
        self.registry.register(
            "jobs_retained",
            "Jobs this instance keeps (queued, running and ended within the retention)",
            self.jobs_retained.clone(),
        );
        self.registry.register(
            "jobs_retained_bytes",
            "Memory the jobs kept hold, estimated per job",
            self.jobs_retained_bytes.clone(),
        );
        self.registry.register(
            "jobs_evicted",
            "Ended jobs forgotten before their retention to keep a tenant or the instance \
             within its bound of jobs kept",
            self.jobs_evicted.clone(),
        );
        self.registry.register(
            "quarantined_fingerprints",
            "Job fingerprints refused at the boundary after crashing workers twice",
            self.quarantined_fingerprints.clone(),
        );
        self.registry.register(
            "render_joins",
            "Jobs that followed the running render of an identical request (single flight)",
            self.render_joins.clone(),
        );
        self.registry.register(
            "render_cache_hits",
            "Jobs that succeeded at once with the stored output of an identical request",
            self.render_cache_hits.clone(),
        );
    }

    /// Worker processes: started, spares, the zygote.
    fn register_workers(&mut self) {
        self.registry.register(
            "workers_started",
            "Render worker processes started, spares started ahead of their job included",
            self.workers_started.clone(),
        );
        self.registry.register(
            "spare_worker_hits",
            "Renders handed to a worker started ahead of the job (a spare) instead of a new one",
            self.spare_worker_hits.clone(),
        );
        self.registry.register(
            "spare_worker_deaths",
            "Spare workers that died while waiting for a job (each is replaced, with a backoff)",
            self.spare_worker_deaths.clone(),
        );
        self.registry.register(
            "spare_workers_forked",
            "Spare workers forked from the worker zygote (~1 ms of CPU) rather than started by exec (~33 ms); also counted in workers_started",
            self.spare_workers_forked.clone(),
        );
        self.registry.register(
            "worker_zygote_starts",
            "Worker zygotes started (the process spares are forked from): 1, plus one per replacement",
            self.worker_zygote_starts.clone(),
        );
        self.registry.register(
            "worker_zygote_deaths",
            "Worker zygotes that died, failed to start or stopped answering (each is replaced, with a backoff; spares are started by exec meanwhile)",
            self.worker_zygote_deaths.clone(),
        );
    }

    /// Renders started and the shared work queue (Redis mode).
    fn register_shared_queue(&mut self) {
        self.registry.register(
            "renders_started",
            "Renders this instance started (one per job rendered here, whatever its worker \
             attempts; a job reclaimed from an instance that stopped counts again where it runs)",
            self.renders_started.clone(),
        );
        self.registry.register(
            "shared_jobs_taken",
            "Jobs this instance took from the shared work queue (Redis mode), reclaimed ones \
             included",
            self.shared_jobs_taken.clone(),
        );
        self.registry.register(
            "shared_jobs_reclaimed",
            "Jobs this instance took over from an instance whose lease on them ran out",
            self.shared_jobs_reclaimed.clone(),
        );
        self.registry.register(
            "shared_jobs_handed_back",
            "Jobs this instance gave back to the shared work queue as it shut down (taken \
             but not started, or stopped at the end of the grace period) for another instance",
            self.shared_jobs_handed_back.clone(),
        );
        self.registry.register(
            "job_lease_renewals_failed",
            "Renewals of the lease on a job being rendered that did not reach Redis (the \
             render goes on; a lease that runs out lets another instance take the job over)",
            self.job_lease_renewals_failed.clone(),
        );
    }

    /// Replays, the sandbox, TLS, configuration reloads and tenants' refusals.
    fn register_guards(&mut self) {
        self.registry.register(
            "idempotent_replays",
            "SubmitRender calls answered with the job of an earlier call with the same key",
            self.idempotent_replays.clone(),
        );
        self.registry.register(
            "sandbox_protection",
            "Worker sandbox protections in force on this kernel, by mechanism (1 in force, \
             0 not), from the sandbox self-test run at start-up",
            self.sandbox_protection.clone(),
        );
        self.registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed (reason refused: bad or missing client certificate, \
             not TLS; timeout: not finished in time; address_busy: closed before it began, \
             its address had its share of handshakes in progress)",
            self.tls_handshake_failures.clone(),
        );
        self.registry.register(
            "config_reloads",
            "Changed configuration files re-read, by file and outcome (kept_previous: the new \
             file was refused and the previous configuration stays)",
            self.config_reloads.clone(),
        );
        self.registry.register(
            "tenant_refusals",
            "Calls refused for a tenant's fair share (job limit or request rate), by tenant and \
             reason",
            self.tenant_refusals.clone(),
        );
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    pub fn request(&self, method: &str, code: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// One answered call of `method` that took `elapsed` to its answer's headers.
    pub fn request_duration(&self, method: &str, elapsed: std::time::Duration) {
        self.request_duration_seconds
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn record_sandbox_protection(&self, mechanism: &str, in_force: bool) {
        self.sandbox_protection
            .get_or_create(&MechanismLabels {
                mechanism: mechanism.to_owned(),
            })
            .set(i64::from(in_force));
    }

    pub fn tls_handshake_failure(&self, reason: &str) {
        self.tls_handshake_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn tenant_refusal(&self, tenant: &str, reason: crate::reason::Reason) {
        self.tenant_refusals
            .get_or_create(&TenantRefusalLabels {
                tenant: tenant.to_owned(),
                reason: reason.as_str().to_owned(),
            })
            .inc();
    }

    pub fn config_reload(&self, file: &str, applied: bool) {
        self.config_reloads
            .get_or_create(&ReloadLabels {
                file: file.to_owned(),
                outcome: if applied { "applied" } else { "kept_previous" }.to_owned(),
            })
            .inc();
    }

    pub fn rejection(&self, reason: &str) {
        self.rejections
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }
}

/// The content type of [`Metrics::encode`]'s text: prometheus-client's text encoder writes
/// OpenMetrics 1.0 (`_total` counters, `# EOF`), not Prometheus' 0.0.4 text format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The spare worker pool's events, counted.
impl crate::sandbox::spare::SpareWorkerEvents for Metrics {
    fn worker_started(&self) {
        self.workers_started.inc();
    }
    fn spare_worker_forked(&self) {
        self.spare_workers_forked.inc();
    }
    fn spare_worker_died(&self) {
        self.spare_worker_deaths.inc();
    }
    fn worker_zygote_started(&self) {
        self.worker_zygote_starts.inc();
    }
    fn worker_zygote_died(&self) {
        self.worker_zygote_deaths.inc();
    }
}
