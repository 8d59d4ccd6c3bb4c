//! `OpenConnections`: the connections of the gRPC listener, counted from accept to close
//! (plaintext and TLS, the handshake included), shared between peer addresses (an IPv6 /64
//! as one, [`AddressGroup`]) by the one fair-share mechanism ([`FairShare`]: a connection is
//! a unit, an address a key). Each connection holds a file descriptor, so the capacity is the
//! descriptors the process may open less a reserve for its own files, Redis, webhooks and
//! workers' pipes ([`connection_budget`]). An address's share shrinks as more addresses
//! hold connections, and the mechanism's reserve keeps a first connection for addresses
//! holding none, so a few addresses filling the budget still leave a caller arriving with
//! nothing its first one (this replaced a fixed eighth of the budget kept for newcomers).
//!
//! `--max-connections-per-address` stays as a cap on the share: the budget follows the open
//! files limit (a million on many hosts), so an address alone would otherwise be allowed half
//! of it, and every connection also costs memory (its HTTP/2 state and buffers) whatever the
//! descriptors left; the cap bounds what one address's silent or idle connections cost in
//! absolute terms, while the share bounds it relative to the others.
//!
//! A connection over its address's share or the budget is closed at once after accept: its
//! client sees the close and may retry, instead of hanging in the kernel's backlog behind a
//! server that ran out of descriptors (the issue 42 finding: 20,000 silent connections
//! filled them in 12 s).

use crate::fair_share::{AddressGroup, FairShare, ShareGuard, ShareRefusal, FIRST_SLOTS};
use prometheus_client::metrics::gauge::Gauge;

/// Descriptors kept for everything that is not a connection of the gRPC listener: at the
/// defaults the server holds some 300 at most (64 downloads' files, 64 webhook connections,
/// Redis' 18, three pipes per render and analysis worker, listeners, the runtime's own, files
/// read and written on the blocking pool); 1,024 leaves room for raised flags. Under a limit
/// of less than twice this, half the limit is kept instead, so connections still get half.
pub const DESCRIPTOR_RESERVE: u64 = 1024;

/// Connections the gRPC listener may hold open when the process may open `open_files`
/// descriptors: all of them less [`DESCRIPTOR_RESERVE`] (or less half, under a low limit).
pub(crate) fn connection_budget(open_files: u64) -> usize {
    let reserve = DESCRIPTOR_RESERVE.min(open_files / 2);
    usize::try_from(open_files.saturating_sub(reserve)).unwrap_or(usize::MAX)
}

/// How many connections are allowed, in all and per address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// Connections open at once, all addresses together.
    pub(crate) budget: usize,
    /// Connections open at once from one address, at most (its share may be less).
    pub(crate) per_address: usize,
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionRefusal {
    /// Its address holds its share already (at most `per_address`).
    AddressFull,
    /// The budget is spent (or all but the reserve, for an address holding some).
    BudgetFull,
}

impl ConnectionRefusal {
    /// The `connections_closed` metric's label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ConnectionRefusal::AddressFull => "address_full",
            ConnectionRefusal::BudgetFull => "budget_full",
        }
    }
}

/// The open connections, shared by the accept loop (which admits them) and the connections
/// themselves (each [`ConnectionPermit`] gives its place back when dropped).
#[derive(Debug, Clone)]
pub(crate) struct OpenConnections {
    shares: FairShare<AddressGroup>,
    /// `connections_open`: one more per permit, one less as each is dropped.
    open: Gauge,
}

impl OpenConnections {
    /// None open yet; `open` counts the connections as they come and go.
    pub(crate) fn new(limits: ConnectionLimits, open: Gauge) -> OpenConnections {
        open.set(0);
        OpenConnections {
            shares: FairShare::shrinking_capped(limits.budget, FIRST_SLOTS, limits.per_address),
            open,
        }
    }

    /// A place for one more connection from `address`, held until the permit is dropped, or
    /// why not.
    pub(crate) fn try_admit(
        &self,
        address: AddressGroup,
    ) -> Result<ConnectionPermit, ConnectionRefusal> {
        let place = self
            .shares
            .try_acquire(address, 1)
            .map_err(|refusal| match refusal {
                ShareRefusal::OverShare => ConnectionRefusal::AddressFull,
                ShareRefusal::PoolFull => ConnectionRefusal::BudgetFull,
            })?;
        self.open.inc();
        Ok(ConnectionPermit {
            _place: place,
            open: self.open.clone(),
        })
    }
}

/// One open connection's place, given back when dropped (when the connection closes).
#[derive(Debug)]
pub(crate) struct ConnectionPermit {
    _place: ShareGuard<AddressGroup>,
    open: Gauge,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.open.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(text: &str) -> AddressGroup {
        AddressGroup::of(text.parse().unwrap())
    }

    fn open(budget: usize, per_address: usize) -> OpenConnections {
        OpenConnections::new(
            ConnectionLimits {
                budget,
                per_address,
            },
            Gauge::default(),
        )
    }

    #[test]
    fn an_address_or_ipv6_slash_64_holds_at_most_its_connections_for_as_long_as_they_live() {
        let connections = open(100, 3);
        let held: Vec<_> = (1..=3)
            .map(|host| {
                connections
                    .try_admit(group(&format!("2001:db8:0:1::{host}")))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            connections
                .try_admit(group("2001:db8:0:1::ffff"))
                .unwrap_err(),
            ConnectionRefusal::AddressFull,
            "same /64"
        );
        assert!(connections.try_admit(group("2001:db8:0:2::1")).is_ok());
        assert!(connections.try_admit(group("192.0.2.1")).is_ok());
        drop(held);
        assert_eq!(connections.shares.held_by(&group("2001:db8:0:1::1")), 0);
        assert!(connections.try_admit(group("2001:db8:0:1::1")).is_ok());
    }

    #[test]
    fn an_addresses_share_shrinks_as_others_connect_and_the_reserve_serves_addresses_holding_none()
    {
        // A budget of 64: 16 kept for addresses holding none, 48 shared. One address alone
        // holds half the shared part; the next a third; then the shared part is full.
        let connections = open(64, 1000);
        let gauge = connections.open.clone();
        let admit_all = |address: &str| -> Vec<ConnectionPermit> {
            std::iter::from_fn(|| connections.try_admit(group(address)).ok()).collect()
        };
        let first = admit_all("192.0.2.1");
        assert_eq!(first.len(), 24);
        assert_eq!(
            connections.try_admit(group("192.0.2.1")).unwrap_err(),
            ConnectionRefusal::AddressFull
        );
        let second = admit_all("192.0.2.2");
        assert_eq!(second.len(), 16);
        let third = admit_all("192.0.2.3");
        assert_eq!(third.len(), 8, "the shared part's last 8");
        assert_eq!(
            connections.try_admit(group("192.0.2.3")).unwrap_err(),
            ConnectionRefusal::BudgetFull
        );
        // Sixteen addresses holding none get their first connection from the reserve, and
        // only that; a seventeenth finds the budget spent.
        let newcomers: Vec<_> = (10..26)
            .map(|host| connections.try_admit(group(&format!("192.0.2.{host}"))))
            .collect();
        assert!(newcomers.iter().all(Result::is_ok));
        assert_eq!(
            connections.try_admit(group("192.0.2.10")).unwrap_err(),
            ConnectionRefusal::BudgetFull,
            "a newcomer that holds one is no longer a newcomer"
        );
        assert_eq!(
            connections.try_admit(group("192.0.2.99")).unwrap_err(),
            ConnectionRefusal::BudgetFull
        );
        assert_eq!(gauge.get(), 64);
        drop((first, second, third, newcomers));
        assert_eq!(gauge.get(), 0);
        assert_eq!(connections.shares.held(), 0);
    }

    #[test]
    fn the_budget_is_the_open_files_limit_less_the_reserve_or_half_a_low_limit() {
        assert_eq!(connection_budget(1_048_576), 1_048_576 - 1024);
        assert_eq!(connection_budget(4096), 3072);
        assert_eq!(connection_budget(1024), 512);
        assert_eq!(connection_budget(256), 128);
        assert_eq!(connection_budget(1), 1);
        assert_eq!(connection_budget(0), 0);
    }
}
