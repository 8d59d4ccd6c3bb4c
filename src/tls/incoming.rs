//! `TlsIncoming`: the connections of a TLS listener, handed to tonic after their handshake.
//! TCP connections come from tonic's own `TcpIncoming` (nodelay and keepalive as on the
//! plaintext listener); each handshake runs in a task of its own, so a slow or silent peer
//! never holds up the accept loop, under a deadline, a bound on handshakes in progress and a
//! smaller one per peer address.

use super::ReloadableTls;
use crate::metrics::Metrics;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
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
/// Handshakes in progress from one peer address: a quarter of all, so one address's silent
/// connections cannot take every slot and keep every other client waiting in the backlog.
/// Honest handshakes last milliseconds, so even many clients behind one NAT or load-balancer
/// address rarely have more than a few in progress; a connection over it is closed at once
/// (counted as `address_busy`), and its client reconnects.
pub const MAX_TLS_HANDSHAKES_PER_ADDRESS: usize = MAX_TLS_HANDSHAKES_IN_PROGRESS / 4;
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
    let addresses = AddressSlots::default();
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
        // An accepted TCP stream has a peer address; one whose address cannot be read (it
        // reset meanwhile) is closed.
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let Some(address_slot) = addresses.take(peer.ip()) else {
            tracing::debug!(%peer, "tls handshake refused: too many in progress from its address");
            metrics.tls_handshake_failure("address_busy");
            // The stream and the slot go with this iteration: the connection is closed.
            continue;
        };
        // The configuration of this moment: a reload applies to the next connection.
        let acceptor = TlsAcceptor::from(tls.current());
        let (handshaken, metrics) = (handshaken.clone(), metrics.clone());
        tokio::spawn(async move {
            let outcome =
                tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            drop(address_slot);
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

/// The handshakes in progress per peer address (at most [`MAX_TLS_HANDSHAKES_IN_PROGRESS`]
/// addresses, as each holds a global slot).
#[derive(Debug, Default, Clone)]
struct AddressSlots {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl AddressSlots {
    /// One of `address`'s [`MAX_TLS_HANDSHAKES_PER_ADDRESS`] slots, given back when dropped;
    /// `None` when they are all taken.
    fn take(&self, address: IpAddr) -> Option<AddressSlot> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(address).or_insert(0);
        if *count >= MAX_TLS_HANDSHAKES_PER_ADDRESS {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            slots: self.clone(),
            address,
        })
    }
}

struct AddressSlot {
    slots: AddressSlots,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.slots.counts);
        if let Some(count) = counts.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// The counts stay consistent whatever panicked while the lock was held (each change is one
/// assignment), so a poisoned lock is used as it is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_at_most_its_share_of_the_slots_and_gets_them_back() {
        let slots = AddressSlots::default();
        let (one, other): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let held: Vec<_> = (0..MAX_TLS_HANDSHAKES_PER_ADDRESS)
            .map(|_| slots.take(one).unwrap())
            .collect();
        assert!(slots.take(one).is_none(), "over its share");
        assert!(slots.take(other).is_some(), "another address is served");
        drop(held);
        assert!(slots.take(one).is_some(), "given back when dropped");
        assert!(
            lock(&slots.counts).is_empty(),
            "no address kept once none is held"
        );
    }
}
