//! `OpenConnections`: the connections of the gRPC listener, counted from accept to close
//! (plaintext and TLS, the handshake included), in all and per peer address (an IPv6 /64 as
//! one, [`AddressGroup`]). Each connection holds a file descriptor, so the total is bounded by
//! the descriptors the process may open less a reserve for its own files, Redis, webhooks and
//! workers' pipes ([`connection_budget`]); one address holds at most
//! `--max-connections-per-address` of them; and the last part of the budget
//! ([`NEWCOMER_SHARE_DIVISOR`]) is kept for addresses that hold no connection yet, so a few
//! addresses filling the budget still leave a caller arriving with nothing its first one.
//!
//! A connection over any of these is closed at once after accept: its client sees the close
//! and may retry, instead of hanging in the kernel's backlog behind a server that ran out of
//! descriptors (the issue 42 finding: 20,000 silent connections filled them in 12 s).

use crate::fair_share::AddressGroup;
use crate::sync::lock;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Descriptors kept for everything that is not a connection of the gRPC listener: at the
/// defaults the server holds some 300 at most (64 downloads' files, 64 webhook connections,
/// Redis' 18, three pipes per render and analysis worker, listeners, the runtime's own, files
/// read and written on the blocking pool); 1,024 leaves room for raised flags. Under a limit
/// of less than twice this, half the limit is kept instead, so connections still get half.
pub const DESCRIPTOR_RESERVE: u64 = 1024;
/// The last eighth of the connection budget goes only to addresses that hold no connection:
/// a caller arriving while a few addresses hold the rest still gets its first connection,
/// and an address that already has one waits for its own to close.
pub const NEWCOMER_SHARE_DIVISOR: usize = 8;

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
    /// Connections open at once from one address.
    pub(crate) per_address: usize,
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionRefusal {
    /// Its address holds `per_address` connections already.
    AddressFull,
    /// The budget is spent (or all but the newcomers' part, for an address holding some).
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
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    limits: ConnectionLimits,
    state: Mutex<Held>,
    /// `connections_open`, kept equal to `Held::total`.
    open: Gauge,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    /// Only addresses holding at least one connection (the last one's close removes its
    /// entry), so at most `budget` entries whatever number of addresses come and go.
    by_address: HashMap<AddressGroup, usize>,
}

impl OpenConnections {
    /// None open yet; `open` is set to the count as connections come and go.
    pub(crate) fn new(limits: ConnectionLimits, open: Gauge) -> OpenConnections {
        open.set(0);
        OpenConnections {
            inner: Arc::new(Counts {
                limits,
                state: Mutex::new(Held::default()),
                open,
            }),
        }
    }

    /// A place for one more connection from `address`, held until the permit is dropped, or
    /// why not.
    pub(crate) fn try_admit(
        &self,
        address: AddressGroup,
    ) -> Result<ConnectionPermit, ConnectionRefusal> {
        let ConnectionLimits {
            budget,
            per_address,
        } = self.inner.limits;
        let mut held = lock(&self.inner.state);
        let of_address = held.by_address.get(&address).copied().unwrap_or(0);
        if of_address >= per_address {
            return Err(ConnectionRefusal::AddressFull);
        }
        let newcomers_only = budget / NEWCOMER_SHARE_DIVISOR;
        let open_to_address = if of_address == 0 {
            budget
        } else {
            budget - newcomers_only
        };
        if held.total >= open_to_address {
            return Err(ConnectionRefusal::BudgetFull);
        }
        held.total += 1;
        held.by_address.insert(address, of_address + 1);
        self.inner
            .open
            .set(i64::try_from(held.total).unwrap_or(i64::MAX));
        Ok(ConnectionPermit {
            counts: self.inner.clone(),
            address,
        })
    }

    /// Connections open now from `address`.
    #[cfg(test)]
    fn held_by(&self, address: AddressGroup) -> usize {
        lock(&self.inner.state)
            .by_address
            .get(&address)
            .copied()
            .unwrap_or(0)
    }
}

/// One open connection's place, given back when dropped (when the connection closes).
#[derive(Debug)]
pub(crate) struct ConnectionPermit {
    counts: Arc<Counts>,
    address: AddressGroup,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut held = lock(&self.counts.state);
        held.total = held.total.saturating_sub(1);
        if let Some(of_address) = held.by_address.get_mut(&self.address) {
            *of_address = of_address.saturating_sub(1);
            if *of_address == 0 {
                held.by_address.remove(&self.address);
            }
        }
        self.counts
            .open
            .set(i64::try_from(held.total).unwrap_or(i64::MAX));
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
        assert_eq!(connections.held_by(group("2001:db8:0:1::1")), 0);
        assert!(connections.try_admit(group("2001:db8:0:1::1")).is_ok());
    }

    #[test]
    fn the_newcomers_part_of_the_budget_is_left_to_addresses_that_hold_nothing() {
        // A budget of 16: addresses holding a connection fill 14, the last 2 are newcomers'.
        let connections = open(16, 100);
        let gauge = connections.inner.open.clone();
        let flood: Vec<_> = (0..14)
            .map(|_| connections.try_admit(group("192.0.2.1")).unwrap())
            .collect();
        assert_eq!(
            connections.try_admit(group("192.0.2.1")).unwrap_err(),
            ConnectionRefusal::BudgetFull
        );
        let newcomer = connections.try_admit(group("192.0.2.2")).unwrap();
        assert_eq!(
            connections.try_admit(group("192.0.2.2")).unwrap_err(),
            ConnectionRefusal::BudgetFull,
            "a newcomer that holds one is no longer a newcomer"
        );
        let last = connections.try_admit(group("192.0.2.3")).unwrap();
        assert_eq!(
            connections.try_admit(group("192.0.2.4")).unwrap_err(),
            ConnectionRefusal::BudgetFull
        );
        assert_eq!(gauge.get(), 16);
        drop((flood, newcomer, last));
        assert_eq!(gauge.get(), 0);
        assert!(lock(&connections.inner.state).by_address.is_empty());
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
