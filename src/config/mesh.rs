//! Settings of the mesh and Kubernetes fit ([`crate::mesh`]): HTTP/2 keepalive, connection
//! age and grace, the least time a shutdown stays reachable.

use std::time::Duration;

/// A connection is asked to go away (HTTP/2 GOAWAY) after this long, seconds. Behind a plain
/// Kubernetes Service (kube-proxy balances connections, not calls) a client keeps the replica
/// it first reached for as long as its connection lives, so a new replica would get no
/// traffic from clients already connected; five minutes rebalances soon after a scale-up,
/// and one TCP and HTTP/2 handshake per client every five minutes costs nothing.
pub(crate) const DEFAULT_MAX_CONNECTION_AGE_SECONDS: u64 = 300;
/// Calls in flight when a connection reaches its age get this long to end before the
/// connection is closed under them, seconds: the longest render (`sandbox::MAX_DEADLINE`), so
/// a WatchRenderJob of a running render, or a download at any honest speed, ends on its own.
/// A long grace costs no rebalancing: after the GOAWAY every *new* call goes to a new
/// connection; the grace only bounds how long a stream that never ends (a health Watch)
/// keeps the old one.
pub(crate) const DEFAULT_MAX_CONNECTION_AGE_GRACE_SECONDS: u64 =
    crate::sandbox::MAX_DEADLINE.as_secs();
/// After SIGTERM the listener stays open at least this long, seconds, even with nothing to
/// drain: off by default (outside Kubernetes nobody routes by endpoint lists); see
/// [`MeshSettings::drain_min_seconds`].
pub(crate) const DEFAULT_DRAIN_MIN_SECONDS: u64 = 0;
/// HTTP/2 PING after this much silence on a connection: well under the idle timeouts of
/// cloud load balancers and NATs (350 s and more), so a quiet connection (a client waiting
/// on a long WatchRenderJob) is neither dropped by them nor kept for a peer that vanished.
pub(crate) const DEFAULT_HTTP2_KEEPALIVE_INTERVAL_SECONDS: u64 = 30;
/// The connection (with every stream and slot it holds) is closed when the PING is not
/// answered within this: a peer that vanished holds nothing for long, while a loaded but
/// live peer answers a PING within milliseconds.
pub(crate) const DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_SECONDS: u64 = 10;

/// Settings of the mesh and Kubernetes fit (flattened into `serve`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct MeshSettings {
    /// A connection older than this is sent GOAWAY (its client reconnects, maybe to another
    /// replica), seconds.
    #[arg(long, env = "LOTTIE_RENDER_MAX_CONNECTION_AGE_SECONDS", default_value_t = DEFAULT_MAX_CONNECTION_AGE_SECONDS, value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub max_connection_age_seconds: u64,
    /// Calls in flight at a connection's age get this long to end before the connection is
    /// closed, seconds.
    #[arg(long, env = "LOTTIE_RENDER_MAX_CONNECTION_AGE_GRACE_SECONDS", default_value_t = DEFAULT_MAX_CONNECTION_AGE_GRACE_SECONDS, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub max_connection_age_grace_seconds: u64,
    /// HTTP/2 PING after this much silence on a connection, seconds.
    #[arg(long, env = "LOTTIE_RENDER_HTTP2_KEEPALIVE_INTERVAL_SECONDS", default_value_t = DEFAULT_HTTP2_KEEPALIVE_INTERVAL_SECONDS, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub http2_keepalive_interval_seconds: u64,
    /// A connection whose peer does not answer the PING within this is closed, seconds.
    #[arg(long, env = "LOTTIE_RENDER_HTTP2_KEEPALIVE_TIMEOUT_SECONDS", default_value_t = DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub http2_keepalive_timeout_seconds: u64,
    /// After SIGTERM, keep answering (and accepting connections) at least this long, seconds,
    /// even when there is nothing to drain. Kubernetes removes a terminating pod's endpoint
    /// while it sends SIGTERM, but every node's kube-proxy (and a mesh's endpoint discovery)
    /// learns it a few seconds later; a caller routed here meanwhile is then answered instead
    /// of refused at the socket. This is what a preStop `sleep` hook is usually for.
    #[arg(long, env = "LOTTIE_RENDER_DRAIN_MIN_SECONDS", default_value_t = DEFAULT_DRAIN_MIN_SECONDS, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub drain_min_seconds: u64,
}

impl Default for MeshSettings {
    fn default() -> MeshSettings {
        MeshSettings {
            max_connection_age_seconds: DEFAULT_MAX_CONNECTION_AGE_SECONDS,
            max_connection_age_grace_seconds: DEFAULT_MAX_CONNECTION_AGE_GRACE_SECONDS,
            http2_keepalive_interval_seconds: DEFAULT_HTTP2_KEEPALIVE_INTERVAL_SECONDS,
            http2_keepalive_timeout_seconds: DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_SECONDS,
            drain_min_seconds: DEFAULT_DRAIN_MIN_SECONDS,
        }
    }
}

impl MeshSettings {
    pub(crate) fn max_connection_age(&self) -> Duration {
        Duration::from_secs(self.max_connection_age_seconds)
    }

    pub(crate) fn max_connection_age_grace(&self) -> Duration {
        Duration::from_secs(self.max_connection_age_grace_seconds)
    }

    pub(crate) fn http2_keepalive_interval(&self) -> Duration {
        Duration::from_secs(self.http2_keepalive_interval_seconds)
    }

    pub(crate) fn drain_min(&self) -> Duration {
        Duration::from_secs(self.drain_min_seconds)
    }

    pub(crate) fn http2_keepalive_timeout(&self) -> Duration {
        Duration::from_secs(self.http2_keepalive_timeout_seconds)
    }
}
