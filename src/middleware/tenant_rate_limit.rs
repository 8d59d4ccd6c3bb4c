//! `TenantRateLimitLayer`: at most `--tenant-requests-per-second` calls per tenant, with
//! bursts of `--tenant-burst`; one more is answered RESOURCE_EXHAUSTED (reason
//! TENANT_RATE_LIMITED) with the exact wait the limiter reports, from the headers, before the
//! body is received. It sits after the identity layer, which put the caller (and so its
//! tenant) on the request; without one every call is the default tenant's. The calls the
//! identity layer leaves open are not limited: health checks (probes and the mesh must always
//! see the instance) and reflection (it carries no identity, so charging it to the default
//! tenant would make a keyed caller's grpcurl spend another tenant's allowance; load shedding
//! bounds it).
//!
//! The limiter is governor's keyed GCRA limiter, keyed by tenant. Its memory is bounded: the
//! keys are the tenants of callers the identity layer let through, that is tenants from
//! configuration plus `default` (an unknown credential is refused before it gets here), and
//! every [`FORGET_IDLE_TENANTS_EVERY`] the tenants whose allowance is full again are
//! forgotten (`retain_recent`) and the map shrunk, so tenants removed from the configuration
//! do not stay either.

use super::{AroundCall, AroundLayer, Next, Reply};
use crate::auth::identity::OPEN_PATH_PREFIXES;
use crate::auth::Caller;
use crate::error::{ServiceError, ServiceErrorCode};
use crate::metrics::Metrics;
use crate::reason::Reason;
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};
use http::Request;
use std::num::NonZeroU32;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tonic::Status;

/// How often idle tenants are forgotten: a minute keeps the map at the tenants active lately
/// at the cost of one short lock a minute.
pub(crate) const FORGET_IDLE_TENANTS_EVERY: Duration = Duration::from_secs(60);
/// Shortest wait a refusal names: the limiter may report a wait that rounds to nothing, and a
/// pushback of 0 would mean "retry at once".
const MIN_WAIT: Duration = Duration::from_millis(1);

pub(crate) use super::settings::TenantRate;

type TenantLimiter = DefaultKeyedRateLimiter<crate::auth::TenantId>;

/// Limits the request rate of each tenant; with no rate it lets every call through.
#[derive(Clone)]
pub struct TenantRateLimit {
    limiter: Option<Arc<TenantLimiter>>,
    metrics: Arc<Metrics>,
}

pub(crate) type TenantRateLimitLayer = AroundLayer<TenantRateLimit>;

impl std::fmt::Debug for TenantRateLimit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TenantRateLimit")
            .field("tenants", &self.tenants())
            .finish()
    }
}

impl TenantRateLimitLayer {
    /// A limiter of `rate` per tenant (none: no limit). Forgetting idle tenants runs on the
    /// current runtime, for as long as the layer or a service of it lives.
    pub(crate) fn new(rate: Option<TenantRate>, metrics: Arc<Metrics>) -> TenantRateLimitLayer {
        let limiter = rate.map(|rate| {
            let per_second = NonZeroU32::new(rate.per_second).unwrap_or(NonZeroU32::MIN);
            let burst = NonZeroU32::new(rate.burst).unwrap_or(NonZeroU32::MIN);
            Arc::new(TenantLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ))
        });
        if let Some(limiter) = &limiter {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(forget_idle_tenants(Arc::downgrade(limiter)));
            }
        }
        AroundLayer(TenantRateLimit { limiter, metrics })
    }

    /// Tenants the limiter remembers now.
    pub fn tenants(&self) -> usize {
        self.0.tenants()
    }

    /// Forgets the tenants whose allowance is full again (what the timer does).
    pub fn forget_idle(&self) {
        if let Some(limiter) = &self.0.limiter {
            forget_idle(limiter);
        }
    }
}

fn forget_idle(limiter: &TenantLimiter) {
    limiter.retain_recent();
    limiter.shrink_to_fit();
}

/// Every [`FORGET_IDLE_TENANTS_EVERY`], drops the tenants whose allowance is full again (their
/// next call behaves the same without an entry); ends with the limiter.
async fn forget_idle_tenants(limiter: Weak<TenantLimiter>) {
    let mut interval = tokio::time::interval(FORGET_IDLE_TENANTS_EVERY);
    interval.tick().await;
    loop {
        interval.tick().await;
        let Some(limiter) = limiter.upgrade() else {
            return;
        };
        forget_idle(&limiter);
    }
}

impl TenantRateLimit {
    /// Tenants the limiter remembers now.
    fn tenants(&self) -> usize {
        self.limiter.as_ref().map_or(0, |limiter| limiter.len())
    }

    /// The wait before the caller's tenant may call again, when it must wait.
    fn wait<B>(&self, request: &http::Request<B>) -> Option<(Duration, Caller)> {
        let limiter = self.limiter.as_ref()?;
        let path = request.uri().path();
        if OPEN_PATH_PREFIXES
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            return None;
        }
        let caller = Caller::of(request.extensions());
        let not_until = limiter.check_key(&caller.tenant).err()?;
        let wait = not_until.wait_time_from(limiter.clock().now());
        Some((wait.max(MIN_WAIT), caller))
    }
}

impl<B, R: Default + Send + 'static> AroundCall<B, R> for TenantRateLimit {
    fn around<S: Next<B, R>>(&self, call: Request<B>, mut next: S) -> Reply<R, S::Error> {
        if let Some((wait, caller)) = self.wait(&call) {
            self.metrics
                .tenant_refusal(caller.tenant.as_str(), Reason::TenantRateLimited);
            tracing::debug!(tenant = %caller.tenant, caller = %caller.name, wait_ms = wait.as_millis() as u64, "call refused: the tenant is over its request rate");
            let response = Status::from(ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::TenantRateLimited,
                format!(
                    "tenant {} is over its request rate; retry after the delay",
                    caller.tenant
                ),
                wait,
            ));
            return super::refuse(response);
        }
        Box::pin(next.call(call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{IdentitySource, TenantId};
    use crate::middleware::BoxFuture;
    use std::convert::Infallible;
    use tower::{service_fn, Layer, Service, ServiceExt};

    fn served(_: http::Request<()>) -> BoxFuture<Result<http::Response<String>, Infallible>> {
        Box::pin(async { Ok(http::Response::new("served".to_owned())) })
    }

    fn request(path: &str, tenant: Option<&str>) -> http::Request<()> {
        let mut request = http::Request::builder().uri(path).body(()).unwrap();
        if let Some(tenant) = tenant {
            request.extensions_mut().insert(Caller {
                tenant: TenantId::parse(tenant).unwrap(),
                name: Arc::from("test"),
                source: IdentitySource::ApiKey,
            });
        }
        request
    }

    /// The status of a refused answer, `None` when served.
    async fn call<S>(service: &S, path: &str, tenant: Option<&str>) -> Option<Status>
    where
        S: Service<http::Request<()>, Response = http::Response<String>, Error = Infallible>
            + Clone,
    {
        let response = service
            .clone()
            .oneshot(request(path, tenant))
            .await
            .unwrap();
        (response.body() != "served").then(|| Status::from_header_map(response.headers()).unwrap())
    }

    #[tokio::test]
    async fn a_tenant_over_its_rate_waits_while_other_tenants_health_and_reflection_are_served() {
        let metrics = Metrics::new();
        let rate = TenantRate {
            per_second: 1,
            burst: 2,
        };
        let service =
            TenantRateLimitLayer::new(Some(rate), metrics.clone()).layer(service_fn(served));
        for _ in 0..2 {
            assert!(call(&service, "/a/B", Some("acme")).await.is_none());
        }
        let refused = call(&service, "/a/B", Some("acme")).await.unwrap();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        let pushback: u64 = refused
            .metadata()
            .get("grpc-retry-pushback-ms")
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=1000).contains(&pushback), "{pushback} ms");
        let details = tonic_types::StatusExt::get_error_details(&refused);
        assert_eq!(details.error_info().unwrap().reason, "TENANT_RATE_LIMITED");
        // Another tenant, and anonymous callers (the default tenant), have their own allowance.
        assert!(call(&service, "/a/B", Some("globex")).await.is_none());
        assert!(call(&service, "/a/B", None).await.is_none());
        for open in [
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            for _ in 0..5 {
                assert!(call(&service, open, Some("acme")).await.is_none(), "{open}");
            }
        }
        assert!(metrics.encode().contains(
            r#"lottie_render_tenant_refusals_total{tenant="acme",reason="TENANT_RATE_LIMITED"} 1"#
        ));
    }

    #[tokio::test]
    async fn tenants_whose_allowance_is_full_again_are_forgotten() {
        let rate = TenantRate {
            per_second: 1000,
            burst: 1,
        };
        let layer = TenantRateLimitLayer::new(Some(rate), Metrics::new());
        let service = layer.layer(service_fn(served));
        for tenant in ["acme", "globex"] {
            assert!(call(&service, "/a/B", Some(tenant)).await.is_none());
        }
        assert_eq!(layer.tenants(), 2);
        // Each allowance refills within a millisecond; then nothing is remembered.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while layer.tenants() > 0 {
            assert!(std::time::Instant::now() < deadline, "{layer:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
            layer.forget_idle();
        }
        // A forgotten tenant starts with a full allowance.
        assert!(call(&service, "/a/B", Some("acme")).await.is_none());
    }

    #[tokio::test]
    async fn without_a_rate_every_call_is_served() {
        let service = TenantRateLimitLayer::new(None, Metrics::new()).layer(service_fn(served));
        for _ in 0..100 {
            assert!(call(&service, "/a/B", Some("acme")).await.is_none());
        }
    }
}
