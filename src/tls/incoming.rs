//! `TlsIncoming`: the connections of a TLS listener, handed to tonic after their handshake.
//! TCP connections come from the listener's one accept loop (`crate::app::accept`: TCP
//! options, the bound on open connections, the pause after a failed accept), each with what
//! it holds for its whole life (`H`, passed through); each handshake runs in a task of its
//! own, so a slow or silent peer never holds up the others, under a deadline and a bound on
//! handshakes in progress shared between peer addresses (an IPv6 /64 counts as one) by the
//! one fair-share mechanism ([`FairShare`]): an address's share shrinks as more addresses
//! have handshakes in progress, and a reserve keeps a slot for addresses that have none.
//!
//! An address that has handshakes in progress and is refused one more (over its share, or
//! the shared part full) has that connection closed at once, never waiting, so a few
//! addresses' silent connections cannot keep honest clients in the kernel's backlog. Only an
//! address with none in progress waits for a slot, when even the reserve is spent: more
//! addresses than the reserve has slots are handshaking, which is load, not a hold.

use super::ReloadableTls;
use crate::fair_share::{AddressGroup, FairShare, ShareRefusal, FIRST_SLOTS};
use crate::metrics::Metrics;
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A handshake not finished within this is dropped: a real client needs two round trips
/// (well under a second even across continents); a slow-loris peer holds its slot no
/// longer than this.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshakes in progress at once, shared between addresses (module documentation). Each
/// costs a few KiB and one task, and honest ones last milliseconds: 256 is far above any
/// real burst of reconnections while bounding what silent peers can hold (256 slots for at
/// most [`TLS_HANDSHAKE_TIMEOUT`] each). An address alone may have 120 in progress, each of
/// eight addresses 26 (issue 21 measured eight addresses' 64 silent connections each); a
/// connection over its address's share is closed at once (counted as `address_busy`), and
/// its client reconnects.
pub const MAX_TLS_HANDSHAKES_IN_PROGRESS: usize = 256;
/// Finished handshakes waiting for tonic to take them: tonic takes each at once, this only
/// smooths bursts.
const HANDSHAKED_BACKLOG: usize = 64;

/// The handshaken connections of one listener, each with what it holds (`H`). Dropping it
/// stops taking connections (and drops the accepted ones' source, which closes the listener).
#[derive(Debug)]
pub struct TlsIncoming<H> {
    connections: mpsc::Receiver<(TlsStream<TcpStream>, H)>,
    handshakes: tokio::task::JoinHandle<()>,
}

/// Why a handshake failed, as the `tls_handshake_failures` metric labels it.
const HANDSHAKE_REFUSED: &str = "refused";
const HANDSHAKE_TIMEOUT: &str = "timeout";
const HANDSHAKE_ADDRESS_BUSY: &str = "address_busy";

impl<H: Send + 'static> TlsIncoming<H> {
    /// Handshakes the connections of `accepted` under the configuration `tls` has at each
    /// one's start.
    pub fn new<S>(accepted: S, tls: Arc<ReloadableTls>, metrics: Arc<Metrics>) -> TlsIncoming<H>
    where
        S: Stream<Item = (TcpStream, H)> + Send + Unpin + 'static,
    {
        // Every reason is exposed from the start, at 0: a failure that never happened reads
        // 0, and a reason nobody exposes (a misspelt query) reads as absent, not as 0.
        for reason in [HANDSHAKE_REFUSED, HANDSHAKE_TIMEOUT, HANDSHAKE_ADDRESS_BUSY] {
            let _exposed =
                metrics
                    .tls_handshake_failures
                    .get_or_create(&crate::metrics::ReasonLabels {
                        reason: reason.to_owned(),
                    });
        }
        let (sender, connections) = mpsc::channel(HANDSHAKED_BACKLOG);
        TlsIncoming {
            connections,
            handshakes: tokio::spawn(start_handshakes(accepted, tls, sender, metrics)),
        }
    }
}

impl<H> Drop for TlsIncoming<H> {
    fn drop(&mut self) {
        self.handshakes.abort();
    }
}

impl<H> Stream for TlsIncoming<H> {
    type Item = (TlsStream<TcpStream>, H);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.connections.poll_recv(cx)
    }
}

async fn start_handshakes<H: Send + 'static>(
    mut accepted: impl Stream<Item = (TcpStream, H)> + Unpin,
    tls: Arc<ReloadableTls>,
    handshaken: mpsc::Sender<(TlsStream<TcpStream>, H)>,
    metrics: Arc<Metrics>,
) {
    let slots = handshake_slots();
    while let Some((stream, held)) = accepted.next().await {
        // An accepted TCP stream has a peer address; one whose address cannot be read (it
        // reset meanwhile) is closed.
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let address = AddressGroup::of(peer.ip());
        // Refused while it has handshakes in progress: closed at once, whatever the others
        // hold. With none in progress and every slot busy (the reserve too), a slot is
        // waited for here: no other connection is taken meanwhile, so the accept loop's
        // queue fills and new peers wait in the backlog instead of costing a task each.
        // Every slot frees within the handshake deadline, so the wait ends.
        let mut slot = slots.try_acquire(address, 1);
        while matches!(slot, Err(ShareRefusal::PoolFull)) && slots.held_by(&address) == 0 {
            slot = slots.acquire(address, 1, TLS_HANDSHAKE_TIMEOUT).await;
        }
        let Ok(slot) = slot else {
            tracing::debug!(%peer, %address, "tls handshake refused: too many in progress from its address");
            metrics.tls_handshake_failure(HANDSHAKE_ADDRESS_BUSY);
            // The stream goes with this iteration: the connection is closed.
            continue;
        };
        // The configuration of this moment: a reload applies to the next connection.
        let acceptor = TlsAcceptor::from(tls.current());
        let (handshaken, metrics) = (handshaken.clone(), metrics.clone());
        tokio::spawn(async move {
            let outcome =
                tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            drop(slot);
            match outcome {
                Ok(Ok(connection)) => {
                    // Fails only when the server stopped; the connection closes then.
                    let _ = handshaken.send((connection, held)).await;
                }
                Ok(Err(error)) => {
                    // A scanner, a plaintext client or (under mTLS) a client without a
                    // good certificate: the peer's problem, not worth more than debug.
                    tracing::debug!(?peer, %error, "tls handshake failed");
                    metrics.tls_handshake_failure(HANDSHAKE_REFUSED);
                }
                Err(_) => {
                    tracing::debug!(?peer, "tls handshake timed out");
                    metrics.tls_handshake_failure(HANDSHAKE_TIMEOUT);
                }
            }
        });
    }
}

/// The handshake slots: [`MAX_TLS_HANDSHAKES_IN_PROGRESS`] in all, a slot each as a first
/// amount, shares shrinking as addresses compete.
fn handshake_slots() -> FairShare<AddressGroup> {
    FairShare::shrinking(MAX_TLS_HANDSHAKES_IN_PROGRESS, FIRST_SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_or_ipv6_slash_64_holds_at_most_its_share_of_the_slots() {
        let slots = handshake_slots();
        let group = |text: &str| AddressGroup::of(text.parse().unwrap());
        // Alone, half the shared part: (256 - 16) / 2.
        let alone = (MAX_TLS_HANDSHAKES_IN_PROGRESS - crate::fair_share::RESERVE_FIRST_AMOUNTS) / 2;
        let held: Vec<_> = (0..alone as u16)
            .map(|host| {
                let address = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, host);
                slots
                    .try_acquire(AddressGroup::of(address.into()), 1)
                    .unwrap()
            })
            .collect();
        let refused = slots.try_acquire(group("2001:db8:0:1::ffff"), 1);
        assert_eq!(refused.unwrap_err(), ShareRefusal::OverShare, "same /64");
        assert!(slots.try_acquire(group("2001:db8:0:2::1"), 1).is_ok());
        assert!(slots.try_acquire(group("192.0.2.1"), 1).is_ok());
        drop(held);
        assert!(slots.try_acquire(group("2001:db8:0:1::1"), 1).is_ok());
    }
}
