//! `TlsIncoming`: the connections of a TLS listener, handed to tonic after their handshake.
//! TCP connections come from tonic's own `TcpIncoming` (nodelay and keepalive as on the
//! plaintext listener); each handshake runs in a task of its own, so a slow or silent peer
//! never holds up the accept loop, under a deadline and a bound on handshakes in progress.

use super::ReloadableTls;
use crate::metrics::Metrics;
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::TcpIncoming;

/// A handshake not finished within this is dropped: a real client needs two round trips
/// (well under a second even across continents); a slow-loris peer holds its slot no
/// longer than this.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshakes in progress at once; beyond it new connections wait in the kernel's accept
/// backlog. Each costs a few KiB and one task, and honest ones last milliseconds: 256 is
/// far above any real burst of reconnections while bounding what silent peers can hold
/// (256 slots for at most [`TLS_HANDSHAKE_TIMEOUT`] each).
pub const MAX_TLS_HANDSHAKES_IN_PROGRESS: usize = 256;
/// Finished handshakes waiting for tonic to take them: tonic takes each at once, this only
/// smooths bursts.
const HANDSHAKED_BACKLOG: usize = 64;
/// Pause after a failed accept (such as EMFILE, out of file descriptors) so the loop does
/// not spin while the condition lasts.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// The handshaken connections of one listener, as a stream for
/// `serve_with_incoming_shutdown`. Dropping it stops the accept loop (and closes the
/// listener).
#[derive(Debug)]
pub struct TlsIncoming {
    connections: mpsc::Receiver<TlsStream<TcpStream>>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl TlsIncoming {
    pub fn new(tcp: TcpIncoming, tls: Arc<ReloadableTls>, metrics: Arc<Metrics>) -> TlsIncoming {
        let (sender, connections) = mpsc::channel(HANDSHAKED_BACKLOG);
        TlsIncoming {
            connections,
            accept_loop: tokio::spawn(accept_loop(tcp, tls, sender, metrics)),
        }
    }
}

impl Drop for TlsIncoming {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl futures_util::Stream for TlsIncoming {
    type Item = Result<TlsStream<TcpStream>, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.connections.poll_recv(cx).map(|next| next.map(Ok))
    }
}

async fn accept_loop(
    mut tcp: TcpIncoming,
    tls: Arc<ReloadableTls>,
    handshaken: mpsc::Sender<TlsStream<TcpStream>>,
    metrics: Arc<Metrics>,
) {
    let slots = Arc::new(Semaphore::new(MAX_TLS_HANDSHAKES_IN_PROGRESS));
    loop {
        // The slot is taken before accepting: when all are busy, new peers wait in the
        // backlog instead of costing a task each.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match tcp.next().await {
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                tracing::debug!(%error, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
            None => return,
        };
        // The configuration of this moment: a reload applies to the next connection.
        let acceptor = TlsAcceptor::from(tls.current());
        let (handshaken, metrics) = (handshaken.clone(), metrics.clone());
        tokio::spawn(async move {
            let peer = stream.peer_addr().ok();
            let outcome =
                tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            drop(slot);
            match outcome {
                Ok(Ok(connection)) => {
                    // Fails only when the server stopped; the connection closes then.
                    let _ = handshaken.send(connection).await;
                }
                Ok(Err(error)) => {
                    // A scanner, a plaintext client or (under mTLS) a client without a
                    // good certificate: the peer's problem, not worth more than debug.
                    tracing::debug!(?peer, %error, "tls handshake failed");
                    metrics.tls_handshake_failure("refused");
                }
                Err(_) => {
                    tracing::debug!(?peer, "tls handshake timed out");
                    metrics.tls_handshake_failure("timeout");
                }
            }
        });
    }
}
