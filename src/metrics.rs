//! Prometheus metrics: requests by method and code, request latency by method, rejections by
//! method, code and reason, queue depth and wait, job durations and outcomes, failures by
//! reason, render time and frames per second by format, render time by tenant, worker crashes,
//! quarantined fingerprints, jobs kept and evicted, shared renders (joins, cache hits),
//! idempotent replays, and the shared work queue (jobs taken, reclaimed, lease renewals that
//! failed, renders started), and webhook deliveries (attempts, backlog, lag).
//! `deploy/grafana-dashboard.json` and `deploy/prometheus-rules.yaml` read these names; a
//! service test (tests/service/api/dashboards.rs) scrapes a running server for every name and
//! label they use.
//! Encoded in the OpenMetrics text format (what prometheus-client's text encoder writes,
//! `# EOF` last) and served over HTTP (`GET /metrics`, by `crate::app::http_endpoint`) on
//! `--metrics-listen`, said so by its content type; each server instance has its own
//! registry, so tests running several servers stay apart. Beside the registry, the
//! refusals of the last hour by reason ([`recent_refusals`], for GetServiceStatus).

pub mod recent_refusals;

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
pub struct RefusalLabels {
    /// gRPC method name, as in [`RequestLabels`].
    pub method: String,
    /// gRPC status code name, e.g. `ResourceExhausted`.
    pub code: String,
    /// The ErrorInfo reason, `UNSPECIFIED` when the answer has none.
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookAttemptLabels {
    /// `delivered`, `refused` (a permanent answer or a refused address), `retried`,
    /// `expired` (given up after its window) or `not_kept` (an event never kept to be sent:
    /// its tenant's or the instance's deliveries waiting at their bound, or the store down).
    pub outcome: &'static str,
}

impl WebhookAttemptLabels {
    /// Every outcome, exposed at 0 from the start: a rate over a series that appears with its
    /// first attempt misses that attempt, and an alert on it would see no series at all.
    pub const OUTCOMES: [&'static str; 5] =
        ["delivered", "refused", "retried", "expired", "not_kept"];
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The gRPC method the route stands for (`SubmitRender`), or `none` for no route.
    pub method: String,
    /// The HTTP status answered, e.g. `422`.
    pub status: u16,
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
pub struct FailureLabels {
    /// The failed job's reason (`crate::reason::Reason`: a bounded set).
    pub reason: &'static str,
    /// Whether the same request may succeed later (a transient failure: the service's or its
    /// machine's); `false` for a verdict on the request itself.
    pub retryable: bool,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// A tenant from configuration (API keys) or `default`: a bounded set.
    pub tenant: String,
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

fn wait_histogram() -> Histogram {
    // 10 ms … ~11 min: a job on an idle instance starts within milliseconds; a backlog is
    // minutes.
    Histogram::new(exponential_buckets(0.01, 2.0, 17))
}

fn fps_histogram() -> Histogram {
    // 1 … 2048 frames per second.
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

/// A family of histograms whose buckets are made by a function of ours.
pub(crate) type Histograms<Labels> = Family<Labels, Histogram, fn() -> Histogram>;

/// Declares the metrics once each: its field, type and constructor (`Default` unless given),
/// its name in the registry and its help text, in the order the text format lists them. The
/// struct, its constructor and the registration are made from this one table.
macro_rules! metrics {
    (@init) => { Default::default() };
    (@init $init:expr) => { $init };
    ($(
        $field:ident: $type:ty $(= $init:expr)?, $name:literal,
        $help:expr;
    )*) => {
        #[derive(Debug)]
        pub struct Metrics {
            registry: Registry,
            /// Every refusal [`Metrics::rejection`] counts, in a rolling hour.
            pub refusals_last_hour: recent_refusals::RecentRefusals,
            $(pub $field: $type,)*
        }

        impl Metrics {
            pub fn new() -> Arc<Metrics> {
                let mut metrics = Metrics {
                    registry: Registry::with_prefix("lottie_render"),
                    refusals_last_hour: Default::default(),
                    $($field: metrics!(@init $($init)?),)*
                };
                $(metrics.registry.register($name, $help, metrics.$field.clone());)*
                metrics.expose_known_series();
                Arc::new(metrics)
            }
        }
    };
}

metrics! {
    // Calls answered, timed and refused.
    requests: Family<RequestLabels, Counter>, "grpc_requests",
        "gRPC calls answered, by method and status code";
    request_duration_seconds: Histograms<MethodLabels> =
        Family::new_with_constructor(request_duration_histogram), "request_duration_seconds",
        "Time from a gRPC call's headers to its answer's headers (a unary call's whole \
         handling; a stream's start), by method";
    http_requests: Family<HttpLabels, Counter>, "http_requests",
        "HTTP/JSON calls answered (also counted as the gRPC call they stand for), by method \
         and HTTP status";
    rejections: Family<RefusalLabels, Counter>, "rejections",
        "Calls answered with an error, by method, gRPC status code and ErrorInfo reason";
    // Jobs: queued, running, finished, kept, quarantined, shared.
    queue_depth: Gauge, "queue_depth",
        "Jobs waiting for a worker";
    queue_wait_seconds: Histogram = wait_histogram(), "queue_wait_seconds",
        "Time from a job's submission to the start of its render here (with the shared \
         queue: on whichever instance submitted it; a reclaimed job's whole wait)";
    jobs_running: Gauge, "jobs_running",
        "Jobs being rendered now";
    jobs_finished: Family<OutcomeLabels, Counter>, "jobs_finished",
        "Jobs that reached a terminal state, by outcome";
    jobs_failed: Family<FailureLabels, Counter>, "jobs_failed",
        "Jobs that ended FAILED, by reason and whether the failure is retryable (transient: \
         the service's or its machine's) or a verdict on the request";
    job_duration_seconds: Histograms<OutcomeLabels> =
        Family::new_with_constructor(duration_histogram), "job_duration_seconds",
        "Time from a job's start to its end (all worker attempts), by outcome";
    frames_per_second: Histograms<FormatLabels> =
        Family::new_with_constructor(fps_histogram), "job_frames_per_second",
        "Frames rendered and encoded per second of a succeeded job's worker run";
    render_duration_seconds: Histograms<FormatLabels> =
        Family::new_with_constructor(wait_histogram), "render_duration_seconds",
        "Wall time of a succeeded job's worker run, by output format";
    tenant_render_seconds: Family<TenantLabels, Counter<f64>>, "tenant_render_seconds",
        "Seconds of rendering (from a render's start to its end, all worker attempts) spent \
         on each tenant's jobs here: the tenants' shares of the workers";
    frames_rendered: Counter, "frames_rendered",
        "Frames of succeeded jobs";
    worker_crashes: Counter, "worker_crashes",
        "Worker processes killed by a signal or ended without a result";
    jobs_retained: Gauge, "jobs_retained",
        "Jobs this instance keeps (queued, running and ended within the retention)";
    jobs_retained_bytes: Gauge, "jobs_retained_bytes",
        "Memory the jobs kept hold, estimated per job";
    jobs_evicted: Counter, "jobs_evicted",
        "Ended jobs forgotten before their retention to keep a tenant or the instance \
         within its bound of jobs kept";
    quarantined_fingerprints: Gauge, "quarantined_fingerprints",
        "Job fingerprints refused at the boundary after crashing workers twice";
    render_joins: Counter, "render_joins",
        "Jobs that followed the running render of an identical request (single flight)";
    render_cache_hits: Counter, "render_cache_hits",
        "Jobs that succeeded at once with the stored output of an identical request";
    // Worker processes: started, spares, the zygote.
    workers_started: Counter, "workers_started",
        "Render worker processes started, spares started ahead of their job included";
    spare_worker_hits: Counter, "spare_worker_hits",
        "Renders handed to a worker started ahead of the job (a spare) instead of a new one";
    spare_worker_deaths: Counter, "spare_worker_deaths",
        "Spare workers that died while waiting for a job (each is replaced, with a backoff)";
    spare_workers_forked: Counter, "spare_workers_forked",
        "Spare workers forked from the worker zygote (~1 ms of CPU) rather than started by exec \
         (~33 ms); also counted in workers_started";
    worker_zygote_starts: Counter, "worker_zygote_starts",
        "Worker zygotes started (the process spares are forked from): 1, plus one per replacement";
    worker_zygote_deaths: Counter, "worker_zygote_deaths",
        "Worker zygotes that died, failed to start or stopped answering (each is replaced, with a \
         backoff; spares are started by exec meanwhile)";
    // Renders started and the shared work queue (Redis mode).
    renders_started: Counter, "renders_started",
        "Renders this instance started (one per job rendered here, whatever its worker \
         attempts; a job reclaimed from an instance that stopped counts again where it runs)";
    shared_jobs_taken: Counter, "shared_jobs_taken",
        "Jobs this instance took from the shared work queue (Redis mode), reclaimed ones \
         included";
    shared_jobs_reclaimed: Counter, "shared_jobs_reclaimed",
        "Jobs this instance took over from an instance whose lease on them ran out";
    shared_jobs_handed_back: Counter, "shared_jobs_handed_back",
        "Jobs this instance gave back to the shared work queue as it shut down (taken \
         but not started, or stopped at the end of the grace period) for another instance";
    job_lease_renewals_failed: Counter, "job_lease_renewals_failed",
        "Renewals of the lease on a job being rendered that did not reach Redis (the \
         render goes on; a lease that runs out lets another instance take the job over)";
    // Replays, the sandbox, TLS, configuration reloads and tenants' refusals.
    idempotent_replays: Counter, "idempotent_replays",
        "SubmitRender calls answered with the job of an earlier call with the same key";
    sandbox_protection: Family<MechanismLabels, Gauge>, "sandbox_protection",
        "Worker sandbox protections in force on this kernel, by mechanism (1 in force, \
         0 not), from the sandbox self-test run at start-up";
    tls_handshake_failures: Family<ReasonLabels, Counter>, "tls_handshake_failures",
        "TLS handshakes that failed (reason refused: bad or missing client certificate, \
         not TLS; timeout: not finished in time; address_busy: closed before it began, \
         its address had its share of handshakes in progress)";
    connections_open: Gauge, "connections_open",
        "Connections of the gRPC listener open now (from accept to close, TLS handshakes \
         included)";
    connections_closed: Family<ReasonLabels, Counter>, "connections_closed",
        "Connections the server closed early (address_full: its address held \
         --max-connections-per-address; budget_full: the descriptors for connections were \
         spent; first_request_timeout: no request within --first-request-timeout-ms)";
    accept_failures: Family<ReasonLabels, Counter>, "accept_failures",
        "Failed accepts on the gRPC listener, each followed by a pause (out_of_descriptors: \
         EMFILE or ENFILE)";
    config_reloads: Family<ReloadLabels, Counter>, "config_reloads",
        "Changed configuration files re-read, by file and outcome (kept_previous: the new \
         file was refused and the previous configuration stays)";
    tenant_refusals: Family<TenantRefusalLabels, Counter>, "tenant_refusals",
        "Calls refused for a tenant's fair share (job limit or request rate), by tenant and \
         reason";
    // Webhooks.
    webhook_attempts: Family<WebhookAttemptLabels, Counter>, "webhook_attempts",
        "Webhook delivery attempts, by what came of them (delivered, refused, retried, \
         expired; not_kept: an event never kept to be sent)";
    webhook_deliveries_pending: Gauge, "webhook_deliveries_pending",
        "Webhook deliveries not yet ended, as this instance's store last counted them";
    webhook_delivery_lag_seconds: Gauge, "webhook_delivery_lag_seconds",
        "How long the most overdue pending webhook delivery has been due and not sent (0 \
         when none is overdue), as this instance's store last saw it";
    webhook_breakers_open: Gauge, "webhook_breakers_open",
        "Webhook destinations this instance leaves alone for a while (circuit breaker open)";
}

impl Metrics {
    /// The series of a bounded, known label set, exposed at 0 from the start.
    fn expose_known_series(&self) {
        for outcome in WebhookAttemptLabels::OUTCOMES {
            let _ = self
                .webhook_attempts
                .get_or_create(&WebhookAttemptLabels { outcome });
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    pub(crate) fn request(&self, method: &str, code: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// One answered call of `method` that took `elapsed` to its answer's headers.
    pub(crate) fn request_duration(&self, method: &str, elapsed: std::time::Duration) {
        self.request_duration_seconds
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn record_sandbox_protection(&self, mechanism: &str, in_force: bool) {
        self.sandbox_protection
            .get_or_create(&MechanismLabels {
                mechanism: mechanism.to_owned(),
            })
            .set(i64::from(in_force));
    }

    pub(crate) fn tls_handshake_failure(&self, reason: &str) {
        self.tls_handshake_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(crate) fn connection_closed(&self, reason: &str) {
        self.connections_closed
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(crate) fn tenant_refusal(&self, tenant: &str, reason: crate::reason::Reason) {
        self.tenant_refusals
            .get_or_create(&TenantRefusalLabels {
                tenant: tenant.to_owned(),
                reason: reason.as_str().to_owned(),
            })
            .inc();
    }

    pub(crate) fn config_reload(&self, file: &str, applied: bool) {
        self.config_reloads
            .get_or_create(&ReloadLabels {
                file: file.to_owned(),
                outcome: if applied { "applied" } else { "kept_previous" }.to_owned(),
            })
            .inc();
    }

    /// One call of `method` answered with an error of `code` and `reason` (its ErrorInfo
    /// reason), counted since start and in the last hour.
    pub(crate) fn rejection(&self, method: &str, code: &str, reason: &str) {
        self.refusals_last_hour.record(reason);
        self.rejections
            .get_or_create(&RefusalLabels {
                method: method.to_owned(),
                code: code.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// A job that ended FAILED for `reason`, `retryable` or not.
    pub(crate) fn job_failed(&self, reason: crate::reason::Reason, retryable: bool) {
        self.jobs_failed
            .get_or_create(&FailureLabels {
                reason: reason.as_str(),
                retryable,
            })
            .inc();
    }

    /// `seconds` of rendering spent on a job of `tenant`.
    pub(crate) fn tenant_rendered(&self, tenant: &str, seconds: f64) {
        self.tenant_render_seconds
            .get_or_create(&TenantLabels {
                tenant: tenant.to_owned(),
            })
            .inc_by(seconds);
    }
}

/// The content type of [`Metrics::encode`]'s text: prometheus-client's text encoder writes
/// OpenMetrics 1.0 (`_total` counters, `# EOF`), not Prometheus' 0.0.4 text format.
pub(crate) const METRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
