//! The connections the gRPC server accepts: our one accept loop ([`super::accept`]: TCP
//! options, the open connections bounded in all and per address, the pause after a failed
//! accept), TLS handshakes after it ([`crate::tls::incoming`]), each connection closed when
//! its first request is late ([`super::first_request`]) and at its age plus the grace
//! ([`crate::mesh::connection_age`]), and tonic's HTTP/2 limits (streams, headers, reset
//! floods, keepalive).

use super::accept::{Admission, AdmittedConnections};
use super::first_request::AdmittedConnection;
use super::open_connections::{connection_budget, ConnectionLimits, OpenConnections};
use super::stack::Middleware;
use crate::config::ServerSettings;
use crate::mesh::connection_age::AgedConnection;
use crate::metrics::Metrics;
use crate::tls::ReloadableTls;
use futures_util::StreamExt;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::server::Router;
use tower::layer::util::{Identity, Stack};

/// The gRPC services behind the tower stack, with the connection limits.
pub(crate) type GrpcRouter = Router<Stack<Middleware, Identity>>;

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
/// The open files limit assumed when it cannot be read: Linux's default soft limit.
const FALLBACK_OPEN_FILES: u64 = 1024;

/// Calls one connection may have in the stack at once: an eighth of the global limit, at
/// least 1.
pub(crate) fn per_connection_concurrency(max_concurrent_requests: usize) -> usize {
    (max_concurrent_requests / PER_CONNECTION_SHARE_DIVISOR).max(1)
}

/// The gRPC server: `routes` behind `stack`, with the HTTP/2 limits of `settings`.
pub(crate) fn grpc_router(
    settings: &ServerSettings,
    stack: Middleware,
    routes: Routes,
) -> GrpcRouter {
    tonic::transport::Server::builder()
        // HTTP/1.1 beside HTTP/2 (h2c by prior knowledge, or h2 by ALPN under TLS), for the
        // HTTP/JSON door (crate::http_json); gRPC itself needs HTTP/2's trailers.
        .accept_http1(true)
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .concurrency_limit_per_connection(per_connection_concurrency(
            settings.limits.max_concurrent_requests as usize,
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
        .add_routes(routes)
}

/// Serves `router` on `listener` until `drained` resolves, its connections admitted among
/// `open` ([`open_connections`]). With TLS, our accept loop hands
/// its connections to the handshakes (so certificates can be replaced while serving); tonic
/// puts the peer's certificates on each request.
pub(crate) async fn serve_connections(
    router: GrpcRouter,
    listener: TcpListener,
    open: OpenConnections,
    tls: Option<Arc<ReloadableTls>>,
    metrics: Arc<Metrics>,
    settings: &ServerSettings,
    drained: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let admitted = AdmittedConnections::start(listener, open, metrics.clone());
    let deadlines = Deadlines {
        first_request: settings.connections.first_request_timeout(),
        // Each connection is closed at its age plus the grace, whatever is still open on it.
        lifetime: settings.mesh.max_connection_age() + settings.mesh.max_connection_age_grace(),
        metrics: metrics.clone(),
    };
    match tls {
        Some(tls) => {
            let handshaken = crate::tls::TlsIncoming::new(admitted, tls, metrics);
            let served = handshaken.map(move |(stream, admission)| deadlines.on(stream, admission));
            router.serve_with_incoming_shutdown(served, drained).await
        }
        None => {
            let served = admitted.map(move |(stream, admission)| deadlines.on(stream, admission));
            router.serve_with_incoming_shutdown(served, drained).await
        }
    }
}

/// The open connections' bounds: the descriptors this process may open (its soft limit
/// raised to the hard one first, so the operator's hard limit is what counts) less the
/// reserve, and `--max-connections-per-address`.
pub(crate) fn open_connections(settings: &ServerSettings, metrics: &Metrics) -> OpenConnections {
    let open_files = match crate::os::open_files_limit() {
        Ok(limit) if limit.soft < limit.hard => {
            match crate::os::set_open_files_soft_limit(limit.hard) {
                Ok(()) => {
                    tracing::info!(
                        from = limit.soft,
                        to = limit.hard,
                        "raised the open files limit"
                    );
                    limit.hard
                }
                Err(error) => {
                    tracing::warn!(%error, soft = limit.soft, hard = limit.hard, "cannot raise the open files limit");
                    limit.soft
                }
            }
        }
        Ok(limit) => limit.soft,
        Err(error) => {
            tracing::warn!(%error, assumed = FALLBACK_OPEN_FILES, "cannot read the open files limit");
            FALLBACK_OPEN_FILES
        }
    };
    let limits = ConnectionLimits {
        budget: connection_budget(open_files),
        per_address: settings.connections.max_connections_per_address as usize,
    };
    tracing::info!(
        open_files,
        connections = limits.budget,
        per_address = limits.per_address,
        "connections bounded"
    );
    OpenConnections::new(limits, metrics.connections_open.clone())
}

/// What every admitted connection is served under: its first request's deadline and its
/// whole life's.
#[derive(Debug)]
struct Deadlines {
    first_request: Duration,
    lifetime: Duration,
    metrics: Arc<Metrics>,
}

impl Deadlines {
    fn on<IO>(
        &self,
        stream: IO,
        admission: Admission,
    ) -> Result<AgedConnection<AdmittedConnection<IO>>, Infallible> {
        let Admission {
            permit,
            accepted_at,
        } = admission;
        let admitted = AdmittedConnection::new(
            stream,
            permit,
            accepted_at,
            self.first_request,
            self.metrics.clone(),
        );
        Ok(AgedConnection::new(admitted, self.lifetime))
    }
}
