//! The one accept loop of the gRPC listener, plaintext and TLS alike: TCP options (nodelay,
//! keepalive), each connection admitted among the [`OpenConnections`] or closed at once, and
//! a pause after a failed accept. Admitted connections are handed on with their
//! [`Admission`]: to tonic as they are (plaintext), or to the TLS handshakes
//! ([`crate::tls::TlsIncoming`]) first.
//!
//! A failed accept is retried after [`ACCEPT_ERROR_BACKOFF`], never at once: out of
//! descriptors (EMFILE, ENFILE) the listener stays readable and the accept fails again at
//! once, which spun a core (the issue 42 finding). The first failure of a run is logged as a
//! warning and the run's end with its count; every failure is counted
//! (`accept_failures_total`).

use super::first_request::FIRST_REQUEST_TIMEOUT;
use super::open_connections::{ConnectionPermit, ConnectionRefusal, OpenConnections};
use crate::fair_share::AddressGroup;
use crate::metrics::{Metrics, ReasonLabels};
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::server::TcpIncoming;

/// Pause after a failed accept: while the process is out of descriptors, 20 tries a second
/// cost nothing, and a descriptor that frees up is used within 50 ms.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// TCP keepalive probes on an idle socket, so a half-open connection is found even when
/// HTTP/2 is quiet.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);
/// Admitted connections waiting to be taken (by tonic, or the TLS handshakes): each is taken
/// at once, this only smooths bursts; when it is full, new connections wait in the kernel's
/// backlog.
const ADMITTED_BACKLOG: usize = 64;

/// The `accept_failures` metric's labels.
const OUT_OF_DESCRIPTORS: &str = "out_of_descriptors";
const OTHER_FAILURE: &str = "other";

/// What an admitted connection carries for its whole life: its place among the open
/// connections, and when it was accepted (its first request's deadline counts from then).
#[derive(Debug)]
pub(crate) struct Admission {
    pub(crate) permit: ConnectionPermit,
    pub(crate) accepted_at: Instant,
}

/// The admitted connections of one listener, as a stream. Dropping it stops the accept loop
/// and closes the listener.
#[derive(Debug)]
pub(crate) struct AdmittedConnections {
    connections: mpsc::Receiver<(TcpStream, Admission)>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl AdmittedConnections {
    /// Accepts on `listener` until dropped, admitting connections among `open`.
    pub(crate) fn start(
        listener: TcpListener,
        open: OpenConnections,
        metrics: Arc<Metrics>,
    ) -> AdmittedConnections {
        // Every label is exposed from the start, at 0 (a reason that never happened reads 0).
        for reason in [OUT_OF_DESCRIPTORS, OTHER_FAILURE] {
            let _exposed = metrics.accept_failures.get_or_create(&labels(reason));
        }
        let closed = [
            ConnectionRefusal::AddressFull,
            ConnectionRefusal::BudgetFull,
        ]
        .map(ConnectionRefusal::label);
        for reason in closed.into_iter().chain([FIRST_REQUEST_TIMEOUT]) {
            let _exposed = metrics.connections_closed.get_or_create(&labels(reason));
        }
        let tcp = TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(TCP_KEEPALIVE));
        let (sender, connections) = mpsc::channel(ADMITTED_BACKLOG);
        AdmittedConnections {
            connections,
            accept_loop: tokio::spawn(accept_loop(tcp, open, sender, metrics)),
        }
    }
}

impl Drop for AdmittedConnections {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl futures_util::Stream for AdmittedConnections {
    type Item = (TcpStream, Admission);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.connections.poll_recv(cx)
    }
}

fn labels(reason: &str) -> ReasonLabels {
    ReasonLabels {
        reason: reason.to_owned(),
    }
}

async fn accept_loop(
    mut tcp: TcpIncoming,
    open: OpenConnections,
    admitted: mpsc::Sender<(TcpStream, Admission)>,
    metrics: Arc<Metrics>,
) {
    let mut failures = FailedAccepts::default();
    loop {
        let stream = match tcp.next().await {
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                failures.note(&error, &metrics);
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
            None => return,
        };
        failures.ended();
        let accepted_at = Instant::now();
        // An accepted TCP stream has a peer address; one whose address cannot be read (it
        // reset meanwhile) is closed.
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let address = AddressGroup::of(peer.ip());
        match open.try_admit(address) {
            Ok(permit) => {
                let admission = Admission {
                    permit,
                    accepted_at,
                };
                // Fails only when the server stopped; the connection closes then.
                if admitted.send((stream, admission)).await.is_err() {
                    return;
                }
            }
            Err(refusal) => {
                tracing::debug!(%peer, %address, reason = refusal.label(), "connection closed at once");
                metrics.connection_closed(refusal.label());
                // The stream goes with this iteration: the connection is closed.
            }
        }
    }
}

/// A run of failed accepts: logged at its start and its end, not once per failure.
#[derive(Debug, Default)]
struct FailedAccepts {
    count: u64,
    since: Option<Instant>,
}

impl FailedAccepts {
    fn note(&mut self, error: &std::io::Error, metrics: &Metrics) {
        let out_of_descriptors = matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        let reason = if out_of_descriptors {
            OUT_OF_DESCRIPTORS
        } else {
            OTHER_FAILURE
        };
        metrics.accept_failures.get_or_create(&labels(reason)).inc();
        if self.count == 0 {
            self.since = Some(Instant::now());
            if out_of_descriptors {
                tracing::warn!(
                    %error,
                    retry_ms = ACCEPT_ERROR_BACKOFF.as_millis(),
                    "cannot accept connections: out of file descriptors"
                );
            } else {
                tracing::debug!(%error, "cannot accept a connection");
            }
        }
        self.count += 1;
    }

    /// An accept succeeded: the run, if any, is over.
    fn ended(&mut self) {
        if let Some(since) = self.since.take() {
            if self.count > 1 {
                tracing::info!(
                    failed = self.count,
                    seconds = since.elapsed().as_secs_f64(),
                    "accepting connections again"
                );
            }
        }
        self.count = 0;
    }
}
