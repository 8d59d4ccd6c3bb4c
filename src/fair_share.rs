//! `FairShare`: a pool of units (request-body bytes, watch slots, download slots) that
//! callers take under a key, no key holding more than its share of the pool, so that no
//! one caller can hold everything and starve the others. A key is the caller: its tenant
//! once it is identified, its peer address before ([`CallerKey`]; an IPv6 /64 counts as one
//! address, [`AddressGroup`]). What a caller takes comes back when its guard is dropped.
//!
//! The alternative, one FIFO semaphore per pool, is what let four silent 64 MiB bodies hold
//! every request buffer for the body deadline (issue 21): a FIFO is fair between requests,
//! not between callers.

use crate::auth::{Caller, IdentitySource, TenantId};
use crate::sync::lock;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// The share of a pool one key may hold by default: a quarter, so that at least four
/// callers must together hold a pool before a fifth waits.
pub const DEFAULT_SHARE_DIVISOR: usize = 4;

/// Why units were not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShareRefusal {
    /// The key already holds its share (or asked for more than a share at once).
    OverShare,
    /// The pool has not that many units free (within the wait, for [`FairShare::acquire`]).
    PoolFull,
}

/// A pool of `capacity` units, each key holding at most `per_key` of them.
#[derive(Debug)]
pub(crate) struct FairShare<K> {
    inner: Arc<Pool<K>>,
}

impl<K> Clone for FairShare<K> {
    fn clone(&self) -> Self {
        FairShare {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Pool<K> {
    capacity: usize,
    per_key: usize,
    state: Mutex<Held<K>>,
    released: Notify,
}

#[derive(Debug)]
struct Held<K> {
    available: usize,
    /// Only keys holding at least one unit (a guard's drop removes a key at zero), so at
    /// most `capacity` entries whatever number of callers come and go.
    by_key: HashMap<K, usize>,
}

impl<K: Hash + Eq + Clone> FairShare<K> {
    /// `capacity` units, at most `per_key` (at least 1, at most `capacity`) per key.
    pub(crate) fn new(capacity: usize, per_key: usize) -> FairShare<K> {
        FairShare {
            inner: Arc::new(Pool {
                capacity,
                per_key: per_key.clamp(1, capacity.max(1)),
                state: Mutex::new(Held {
                    available: capacity,
                    by_key: HashMap::new(),
                }),
                released: Notify::new(),
            }),
        }
    }

    /// `capacity` units, a key holding at most a [`DEFAULT_SHARE_DIVISOR`]th (at least 1).
    pub(crate) fn with_default_share(capacity: usize) -> FairShare<K> {
        FairShare::new(capacity, capacity / DEFAULT_SHARE_DIVISOR)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// The most one key may hold.
    pub(crate) fn per_key(&self) -> usize {
        self.inner.per_key
    }

    /// What `key` holds now.
    #[cfg(test)]
    pub fn held_by(&self, key: &K) -> usize {
        lock(&self.inner.state)
            .by_key
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// `units` for `key` now, or why not.
    pub(crate) fn try_acquire(&self, key: K, units: usize) -> Result<ShareGuard<K>, ShareRefusal> {
        let mut held = lock(&self.inner.state);
        let of_key = held.by_key.get(&key).copied().unwrap_or(0);
        if of_key.saturating_add(units) > self.inner.per_key {
            return Err(ShareRefusal::OverShare);
        }
        if held.available < units {
            return Err(ShareRefusal::PoolFull);
        }
        held.available -= units;
        held.by_key.insert(key.clone(), of_key + units);
        Ok(ShareGuard {
            pool: self.inner.clone(),
            key,
            units,
        })
    }

    /// `units` for `key`, waiting up to `wait` for units to come back when the key is at
    /// its share or the pool is full (an honest caller's own earlier calls end quickly);
    /// then the last refusal. More than a share at once is refused at once: it never fits.
    /// Waiters are not served in order, so small requests are not held behind a large one.
    pub(crate) async fn acquire(
        &self,
        key: K,
        units: usize,
        wait: Duration,
    ) -> Result<ShareGuard<K>, ShareRefusal> {
        if units > self.inner.per_key {
            return Err(ShareRefusal::OverShare);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the attempt, so a release between the two is not missed.
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let refusal = match self.try_acquire(key.clone(), units) {
                Ok(guard) => return Ok(guard),
                Err(refusal) => refusal,
            };
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(refusal);
            }
        }
    }
}

/// Units held by one key, given back when dropped.
#[derive(Debug)]
pub(crate) struct ShareGuard<K: Hash + Eq> {
    pool: Arc<Pool<K>>,
    key: K,
    units: usize,
}

impl<K: Hash + Eq> ShareGuard<K> {
    #[cfg(test)]
    pub fn units(&self) -> usize {
        self.units
    }
}

impl<K: Hash + Eq> Drop for ShareGuard<K> {
    fn drop(&mut self) {
        {
            let mut held = lock(&self.pool.state);
            held.available = held.available.saturating_add(self.units);
            if let Some(of_key) = held.by_key.get_mut(&self.key) {
                *of_key = of_key.saturating_sub(self.units);
                if *of_key == 0 {
                    held.by_key.remove(&self.key);
                }
            }
        }
        self.pool.released.notify_waiters();
    }
}

/// A peer address as shares count it: an IPv4 address (an IPv4-mapped IPv6 one as its IPv4
/// address), or an IPv6 /64, which one subscriber or host holds whole (2^64 addresses), so
/// counting its addresses apart would give it unbounded shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AddressGroup(IpAddr);

/// Bits of an IPv6 address that name its group: the /64 a single site or host is given.
const IPV6_GROUP_PREFIX_BITS: u32 = 64;

impl AddressGroup {
    pub(crate) fn of(address: IpAddr) -> AddressGroup {
        match address {
            IpAddr::V4(v4) => AddressGroup(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddressGroup(IpAddr::V4(v4)),
                None => {
                    let mask = u128::MAX << (128 - IPV6_GROUP_PREFIX_BITS);
                    AddressGroup(IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)))
                }
            },
        }
    }
}

impl std::fmt::Display for AddressGroup {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(formatter, "{v4}"),
            IpAddr::V6(v6) => write!(formatter, "{v6}/{IPV6_GROUP_PREFIX_BITS}"),
        }
    }
}

/// Whose share a call takes: its tenant once identified; before (an anonymous call, which
/// with authentication off is every call), its connection's peer address; a call with
/// neither (a service used without a socket, in tests) shares one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CallerKey {
    Tenant(TenantId),
    Address(AddressGroup),
    Unplaced,
}

impl CallerKey {
    /// The key of the request with these extensions (the identity layer's caller, tonic's
    /// connection information).
    pub(crate) fn of(extensions: &http::Extensions) -> CallerKey {
        let caller = Caller::of(extensions);
        if caller.source != IdentitySource::Anonymous {
            return CallerKey::Tenant(caller.tenant);
        }
        match peer_address(extensions) {
            Some(address) => CallerKey::Address(AddressGroup::of(address)),
            None => CallerKey::Unplaced,
        }
    }
}

impl std::fmt::Display for CallerKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallerKey::Tenant(tenant) => write!(formatter, "tenant {tenant}"),
            CallerKey::Address(address) => write!(formatter, "address {address}"),
            CallerKey::Unplaced => formatter.write_str("this caller"),
        }
    }
}

/// The peer address of the connection a request came on (plaintext or TLS).
pub(crate) fn peer_address(extensions: &http::Extensions) -> Option<IpAddr> {
    let tcp = extensions.get::<TcpConnectInfo>().or_else(|| {
        extensions
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .map(|tls| tls.get_ref())
    })?;
    tcp.remote_addr().map(|address| address.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_share_and_others_are_served_until_the_pool_is_full() {
        let pool = FairShare::new(100, 25);
        let one = pool.try_acquire("a", 20).unwrap();
        assert_eq!(
            pool.try_acquire("a", 6).unwrap_err(),
            ShareRefusal::OverShare
        );
        let two = pool.try_acquire("a", 5).unwrap();
        assert_eq!(pool.held_by(&"a"), 25);
        let others: Vec<_> = ["b", "c", "d"]
            .into_iter()
            .map(|key| pool.try_acquire(key, 25).unwrap())
            .collect();
        assert_eq!(
            pool.try_acquire("e", 1).unwrap_err(),
            ShareRefusal::PoolFull
        );
        drop(one);
        assert_eq!(pool.held_by(&"a"), 5);
        assert!(pool.try_acquire("e", 20).is_ok());
        drop((two, others));
        assert!(lock(&pool.inner.state).by_key.is_empty(), "no key kept");
        assert_eq!(lock(&pool.inner.state).available, 100);
    }

    #[test]
    fn more_than_a_share_at_once_is_refused_and_the_share_is_at_least_one() {
        let pool = FairShare::<u8>::new(100, 25);
        assert_eq!(
            pool.try_acquire(1, 26).unwrap_err(),
            ShareRefusal::OverShare
        );
        let small = FairShare::<u8>::with_default_share(3);
        assert_eq!(small.per_key(), 1);
        let _held = small.try_acquire(1, 1).unwrap();
        assert_eq!(
            small.try_acquire(1, 1).unwrap_err(),
            ShareRefusal::OverShare
        );
    }

    #[tokio::test]
    async fn a_waiter_is_served_when_units_come_back_and_refused_after_its_wait() {
        let pool = FairShare::new(10, 10);
        let held = pool.try_acquire("a", 10).unwrap();
        let refused = pool.acquire("b", 1, Duration::from_millis(20)).await;
        assert_eq!(refused.unwrap_err(), ShareRefusal::PoolFull);
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.acquire("b", 4, Duration::from_secs(10))
                    .await
                    .map(|guard| guard.units())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap(), Ok(4));
        // At its share, a key waits for its own units too; more than a share never fits.
        let pool = FairShare::new(10, 5);
        let held = pool.try_acquire("a", 5).unwrap();
        let refused = pool.acquire("a", 1, Duration::from_millis(20)).await;
        assert_eq!(refused.unwrap_err(), ShareRefusal::OverShare);
        drop(held);
        let refused = pool.acquire("a", 6, Duration::from_secs(10)).await;
        assert_eq!(refused.unwrap_err(), ShareRefusal::OverShare);
    }

    #[test]
    fn an_ipv6_slash_64_is_one_address_and_mapped_ipv4_is_its_ipv4() {
        let group = |text: &str| AddressGroup::of(text.parse().unwrap());
        assert_eq!(group("2001:db8:1:2::1"), group("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(group("2001:db8:1:2::1"), group("2001:db8:1:3::1"));
        assert_eq!(group("::ffff:192.0.2.1"), group("192.0.2.1"));
        assert_ne!(group("192.0.2.1"), group("192.0.2.2"));
        assert_eq!(group("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn an_identified_caller_is_its_tenant_and_an_anonymous_one_its_address() {
        let mut extensions = http::Extensions::new();
        assert_eq!(CallerKey::of(&extensions), CallerKey::Unplaced);
        extensions.insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some("192.0.2.7:4000".parse().unwrap()),
        });
        assert_eq!(
            CallerKey::of(&extensions),
            CallerKey::Address(AddressGroup::of("192.0.2.7".parse().unwrap()))
        );
        extensions.insert(Caller {
            tenant: TenantId::parse("acme").unwrap(),
            name: Arc::from("billing"),
            source: IdentitySource::ApiKey,
        });
        assert_eq!(
            CallerKey::of(&extensions),
            CallerKey::Tenant(TenantId::parse("acme").unwrap())
        );
    }
}
