//! The request limits the tower stack enforces (`crate::app::stack` builds it): calls in
//! flight before shedding, a body's deadline, the request buffers, the watch streams and each
//! tenant's request rate. Flattened into `serve`'s flags.

use std::time::Duration;

/// Calls in flight before shedding: far above what two cores serve well, so it only cuts in
/// when something is wrong.
pub(crate) const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 512;
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

/// The sustained rate and the burst of one tenant (`middleware::tenant_rate_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantRate {
    pub per_second: u32,
    pub burst: u32,
}

/// The limits of the middleware, from the flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RequestLimitSettings {
    /// Requests handled at once; beyond it calls are answered RESOURCE_EXHAUSTED at once
    /// (load shedding) instead of queueing up inside the server.
    #[arg(long, env = "LOTTIE_RENDER_MAX_CONCURRENT_REQUESTS", default_value_t = DEFAULT_MAX_CONCURRENT_REQUESTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
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
    /// Calls per second one tenant may make (health checks and reflection aside), sustained; beyond it
    /// RESOURCE_EXHAUSTED (TENANT_RATE_LIMITED) with the wait [default: off].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_REQUESTS_PER_SECOND", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_requests_per_second: Option<u32>,
    /// Calls one tenant may make at once above its rate [default: one second's worth].
    #[arg(long, env = "LOTTIE_RENDER_TENANT_BURST", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tenant_burst: Option<u32>,
    /// How long a compressed call waits for its share of the inflation budget (none: the
    /// middleware's `INFLATION_WAIT`); tests shorten it to see the refusal. Not a flag.
    #[arg(skip)]
    pub inflation_wait: Option<Duration>,
}

impl Default for RequestLimitSettings {
    fn default() -> RequestLimitSettings {
        RequestLimitSettings {
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            request_body_timeout_ms: DEFAULT_REQUEST_BODY_TIMEOUT_MS,
            request_buffers_mb: DEFAULT_REQUEST_BUFFERS_MB,
            max_watchers: DEFAULT_MAX_WATCHERS,
            tenant_requests_per_second: None,
            tenant_burst: None,
            inflation_wait: None,
        }
    }
}

impl RequestLimitSettings {
    pub(crate) fn request_body_timeout(&self) -> Duration {
        Duration::from_millis(self.request_body_timeout_ms)
    }

    pub(crate) fn request_buffer_bytes(&self) -> usize {
        usize::try_from(self.request_buffers_mb << 20).unwrap_or(usize::MAX)
    }

    /// The per-tenant request rate in force, when one is set.
    pub fn tenant_rate(&self) -> Option<TenantRate> {
        self.tenant_requests_per_second
            .map(|per_second| TenantRate {
                per_second,
                burst: self.tenant_burst.unwrap_or(per_second),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_defaults_to_one_second_of_the_rate() {
        let mut settings = RequestLimitSettings::default();
        assert_eq!(settings.tenant_rate(), None);
        settings.tenant_requests_per_second = Some(20);
        assert_eq!(settings.tenant_rate().map(|rate| rate.burst), Some(20));
        settings.tenant_burst = Some(50);
        assert_eq!(settings.tenant_rate().map(|rate| rate.burst), Some(50));
    }
}
