//! The connections the gRPC server accepts: TCP options, HTTP/2 limits (streams, headers,
//! reset floods, keepalive), each connection closed at its age plus the grace
//! ([`crate::mesh::connection_age`]), and TLS handshakes made by our own accept loop.

use super::stack::Middleware;
use crate::config::ServerSettings;
use crate::mesh::connection_age::AgedConnection;
use crate::metrics::Metrics;
use crate::tls::ReloadableTls;
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
/// TCP keepalive probes on an idle socket, so a half-open connection is found even when
/// HTTP/2 is quiet.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

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
        .add_routes(routes)
}

/// Serves `router` on `listener` until `drained` resolves. With TLS, our accept loop hands
/// tonic handshaken connections (so certificates can be replaced while serving); tonic puts
/// the peer's certificates on each request.
pub(crate) async fn serve_connections(
    router: GrpcRouter,
    listener: TcpListener,
    tls: Option<Arc<ReloadableTls>>,
    metrics: Arc<Metrics>,
    settings: &ServerSettings,
    drained: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(TCP_KEEPALIVE));
    // Each connection is closed at its age plus the grace, whatever is still open on it.
    let lifetime = settings.mesh.max_connection_age() + settings.mesh.max_connection_age_grace();
    match tls {
        Some(tls) => {
            let handshaken = crate::tls::TlsIncoming::new(incoming, tls, metrics);
            let aged = futures_util::StreamExt::map(handshaken, move |accepted| {
                accepted.map(|stream| AgedConnection::new(stream, lifetime))
            });
            router.serve_with_incoming_shutdown(aged, drained).await
        }
        None => {
            let aged = futures_util::StreamExt::map(incoming, move |accepted| {
                accepted.map(|stream| AgedConnection::new(stream, lifetime))
            });
            router.serve_with_incoming_shutdown(aged, drained).await
        }
    }
}
