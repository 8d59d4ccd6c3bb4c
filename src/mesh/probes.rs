//! The `liveness` and `readiness` gRPC health services (besides the overall one, `""`, whose
//! meaning is unchanged: SERVING until shutdown begins), for Kubernetes' gRPC probes.
//!
//! - **readiness** is NOT_SERVING while this instance should get no new calls: Redis (when
//!   configured) does not answer a PING within the Redis deadline, the render queue is full,
//!   or the server is draining. It is checked every [`READINESS_CHECK_INTERVAL`] and turns
//!   SERVING again as soon as the cause is gone; draining sets it at once, for good.
//! - **liveness** is NOT_SERVING only when the process is *wedged*: the async runtime has not
//!   run a heartbeat task for [`LIVENESS_STALL`]. Nothing of ours holds a runtime thread for
//!   long (CPU work runs on blocking threads or in worker processes; the longest stretch on
//!   the runtime is tonic decoding one request, under 0.1 s for a 64 MiB gzip message), so a
//!   heartbeat that late means the runtime's threads are stuck (a blocking call or a deadlock
//!   in a bug of ours): calls are accepted by the kernel but answered late or never, and only
//!   a restart cures it. The scheduler's loops are not watched: a panic in a job's runner is
//!   caught and fails that job, and every render has a deadline the sandbox enforces. A full queue, a slow Redis or a long
//!   render is not wedged (restarting would only lose work), so none of those touch liveness.
//!   The heartbeat's age is judged on a thread of its own, outside the runtime it watches.

use crate::jobs::queue::RenderQueue;
use crate::redis_client::{unavailable, RedisClient};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Health service name of the liveness probe.
pub const LIVENESS: &str = "liveness";
/// Health service name of the readiness probe.
pub const READINESS: &str = "readiness";
/// How often readiness is evaluated (a Redis PING, two atomic reads): a probe every 10 s
/// (Kubernetes' default period) then sees a state at most a second old.
pub(crate) const READINESS_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How often the runtime heartbeat beats.
pub(crate) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// A heartbeat this late means the runtime is wedged: forty missed beats, far beyond any
/// scheduling hiccup of a loaded machine, still well before the kubelet's third failed probe.
pub(crate) const LIVENESS_STALL: Duration = Duration::from_secs(20);

/// Why readiness is NOT_SERVING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    Draining,
    QueueFull,
    RedisUnreachable,
}

/// What readiness depends on.
#[derive(Debug, Clone)]
pub(crate) struct ReadinessSources {
    pub queue: Arc<RenderQueue>,
    pub redis: Option<Arc<RedisClient>>,
    pub draining: Arc<AtomicBool>,
}

impl ReadinessSources {
    /// Ready, or the first reason not to be.
    pub(crate) async fn check(&self) -> Result<(), NotReady> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(NotReady::Draining);
        }
        if self.queue.is_full() {
            return Err(NotReady::QueueFull);
        }
        if let Some(redis) = &self.redis {
            if !redis_answers(redis).await {
                return Err(NotReady::RedisUnreachable);
            }
        }
        Ok(())
    }
}

/// A PING answered within the Redis deadline (pool wait and connecting included).
async fn redis_answers(redis: &RedisClient) -> bool {
    redis
        .within_deadline(async {
            let mut connection = redis.connection().await?;
            deadpool_redis::redis::cmd("PING")
                .query_async::<()>(&mut connection)
                .await
                .map_err(unavailable)
        })
        .await
        .is_ok()
}

/// The probes of one server: their tasks and watchdog end when this is dropped.
#[derive(Debug)]
pub(crate) struct Probes {
    health: HealthReporter,
    readiness: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
    watchdog: Option<Watchdog>,
}

impl Probes {
    /// Sets liveness SERVING and readiness as it is now, then keeps both up to date.
    pub(crate) async fn start(health: HealthReporter, sources: ReadinessSources) -> Probes {
        health
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        let first = sources.check().await;
        health
            .set_service_status(READINESS, serving_status(first))
            .await;
        let readiness = tokio::spawn(follow_readiness(health.clone(), sources, first));
        let beat = Arc::new(Heartbeat::new());
        let heartbeat = tokio::spawn(beat_forever(beat.clone()));
        let watchdog = match Watchdog::start(beat, LIVENESS_STALL, health.clone()) {
            Ok(watchdog) => Some(watchdog),
            Err(error) => {
                tracing::warn!(%error, "cannot start the liveness watchdog; liveness stays serving");
                None
            }
        };
        Probes {
            health,
            readiness,
            heartbeat,
            watchdog,
        }
    }

    /// Readiness NOT_SERVING at once (the readiness loop keeps it so: it sees the draining
    /// flag the caller set first).
    pub(crate) async fn drain(&self) {
        self.health
            .set_service_status(READINESS, ServingStatus::NotServing)
            .await;
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.readiness.abort();
        self.heartbeat.abort();
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
    }
}

fn serving_status(readiness: Result<(), NotReady>) -> ServingStatus {
    match readiness {
        Ok(()) => ServingStatus::Serving,
        Err(_) => ServingStatus::NotServing,
    }
}

async fn follow_readiness(
    health: HealthReporter,
    sources: ReadinessSources,
    mut last: Result<(), NotReady>,
) {
    let mut interval = tokio::time::interval(READINESS_CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let now = sources.check().await;
        if now != last {
            match now {
                Ok(()) => tracing::info!("ready again"),
                // Asked for: the drain is logged where it begins.
                Err(NotReady::Draining) => tracing::info!("not ready: draining"),
                Err(reason) => tracing::warn!(?reason, "not ready"),
            }
            health
                .set_service_status(READINESS, serving_status(now))
                .await;
            last = now;
        }
    }
}

/// Path of the liveness probe over HTTP (the metrics listener).
pub const HTTP_LIVENESS_PATH: &str = "/livez";
/// Path of the readiness probe over HTTP (the metrics listener).
pub const HTTP_READINESS_PATH: &str = "/readyz";

/// The same two probes over plain HTTP/1.1 on the metrics listener, for a gRPC port that
/// speaks TLS: Kubernetes' gRPC (and HTTP) probes cannot present or check certificates, so a
/// TLS listener cannot be probed directly, and a probe must not need an identity either.
/// The answer is the health service's own status (one truth), 200 when SERVING, 503 when not;
/// a wedged runtime answers nothing, which the kubelet counts as a failure too.
#[derive(Debug, Clone)]
pub(crate) struct HttpProbes {
    health: Arc<tonic_health::server::HealthService>,
}

impl HttpProbes {
    pub(crate) fn new(health: HealthReporter) -> HttpProbes {
        HttpProbes {
            health: Arc::new(tonic_health::server::HealthService::from_health_reporter(
                health,
            )),
        }
    }

    /// Whether the probe at `path` is serving; none for a path that is not a probe's.
    pub(crate) async fn serving(&self, path: &str) -> Option<bool> {
        use tonic_health::pb::health_server::Health;
        let service = match path {
            HTTP_LIVENESS_PATH => LIVENESS,
            HTTP_READINESS_PATH => READINESS,
            _ => return None,
        };
        let request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        });
        let status = match self.health.check(request).await {
            Ok(answer) => answer.into_inner().status,
            // Unknown service: the probes were not started (cannot happen once serving).
            Err(_) => return Some(false),
        };
        Some(status == ServingStatus::Serving as i32)
    }
}

/// When the async runtime last ran the heartbeat task.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    origin: Instant,
    /// Milliseconds from `origin` to the last beat.
    last: AtomicU64,
}

impl Heartbeat {
    pub(crate) fn new() -> Heartbeat {
        Heartbeat {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    pub(crate) fn beat(&self) {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::SeqCst);
    }

    /// Time since the last beat.
    pub(crate) fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::SeqCst));
        self.origin.elapsed().saturating_sub(last)
    }
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat::new()
    }
}

async fn beat_forever(heartbeat: Arc<Heartbeat>) {
    let mut interval = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        interval.tick().await;
        heartbeat.beat();
    }
}

/// A thread outside the runtime that sets liveness from the heartbeat's age.
#[derive(Debug)]
pub(crate) struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl Watchdog {
    /// Watches `heartbeat`: liveness NOT_SERVING while it is older than `stall`, SERVING
    /// again when it beats.
    pub(crate) fn start(
        heartbeat: Arc<Heartbeat>,
        stall: Duration,
        health: HealthReporter,
    ) -> std::io::Result<Watchdog> {
        // Its own small runtime only drives the reporter's futures (a lock and a watch
        // channel), never the server's work, so it cannot be wedged with it.
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        // Looks often enough to notice within a tenth of the stall (and back within as much).
        let look_every = (stall / 10).max(Duration::from_millis(10));
        let handle = std::thread::Builder::new()
            .name("liveness-watchdog".into())
            .spawn(move || {
                let mut wedged = false;
                while !stopped.load(Ordering::SeqCst) {
                    let age = heartbeat.age();
                    if (age > stall) != wedged {
                        wedged = !wedged;
                        let status = if wedged {
                            tracing::error!(
                                heartbeat_age_seconds = age.as_secs_f64(),
                                "the async runtime is wedged; liveness NOT_SERVING"
                            );
                            ServingStatus::NotServing
                        } else {
                            tracing::warn!("the async runtime runs again; liveness SERVING");
                            ServingStatus::Serving
                        };
                        runtime.block_on(health.set_service_status(LIVENESS, status));
                    }
                    std::thread::park_timeout(look_every);
                }
            })?;
        Ok(Watchdog {
            stop,
            thread: handle.thread().clone(),
        })
    }

    /// Ends the thread (at its next look, woken now).
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::health_server::Health;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::server::HealthService;

    async fn liveness_of(service: &HealthService) -> i32 {
        service
            .check(tonic::Request::new(HealthCheckRequest {
                service: LIVENESS.into(),
            }))
            .await
            .unwrap()
            .into_inner()
            .status
    }

    async fn wait_for_liveness(service: &HealthService, status: ServingStatus) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while liveness_of(service).await != status as i32 {
            assert!(
                Instant::now() < deadline,
                "liveness never became {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_heartbeat_older_than_the_stall_makes_liveness_not_serving_until_it_beats() {
        let (health, _) = tonic_health::server::health_reporter();
        health
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        let service = HealthService::from_health_reporter(health.clone());
        let heartbeat = Arc::new(Heartbeat::new());
        let watchdog =
            Watchdog::start(heartbeat.clone(), Duration::from_millis(200), health).unwrap();
        // Nobody beats: the stall passes.
        wait_for_liveness(&service, ServingStatus::NotServing).await;
        heartbeat.beat();
        wait_for_liveness(&service, ServingStatus::Serving).await;
        watchdog.stop();
    }
}
