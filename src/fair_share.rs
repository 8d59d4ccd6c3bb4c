//! `FairShare`: the one mechanism by which every pool a caller can hold is shared (the pools
//! table of docs/security.md lists them: open connections and TLS handshakes per address, the
//! request buffers' three lanes, watch and download slots, the webhook sender's slots and the
//! analysis workers per tenant). A pool has `capacity` units (bytes, slots, connections);
//! callers take them under a key and give them back when their guard is dropped. A key is the
//! caller: its tenant once it is identified, its peer address before ([`CallerKey`]; an IPv6
//! /64 counts as one address, [`AddressGroup`]).
//!
//! Three rules, so that neither one caller nor eight can lock out another (only more callers
//! than the reserve has first amounts, each holding one, fill a pool: that is load, not a
//! hold):
//! - **Charged for what is held**, as it is taken: a guard grows unit by unit
//!   ([`ShareGuard::grow`]); a request body is charged for the bytes that arrived, never
//!   for the length it declares (issue 42: four addresses declaring 64 MiB and sending
//!   nothing held every buffer).
//! - **Shares shrink as callers compete**: a key holds at most
//!   `(capacity - reserve) / (keys holding + 1)`, itself counted among the keys holding, and
//!   never less than the pool's first amount; so eight keys growing together hold at most
//!   eight ninths of what is shared and a ninth still finds room. A fixed quarter let four
//!   callers hold everything (issue 42, findings 2 and 5). A pool may also cap a key's share
//!   whatever the others hold ([`FairShare::shrinking_capped`]: the open connections, whose
//!   capacity follows the descriptors the process may open, not what one address needs). A
//!   pool whose units come back on their own within a bounded time (a webhook attempt, an
//!   analysis) divides the shared part among the keys holding only
//!   ([`FairShare::shrinking_bounded_holds`]): a key alone may use all of it, and a newcomer
//!   starts from the reserve while the others' units come back.
//! - **A reserve for callers holding nothing**: [`RESERVE_FIRST_AMOUNTS`] first amounts
//!   (at most half the pool) are given only to keys that hold no more than one first amount
//!   with them, so a caller that holds nothing always gets a first amount (a small call,
//!   one slot) whatever the others hold, even when they grabbed the shared part one after
//!   another before the shares could shrink.
//!
//! The fourth rule of the pools table, a minimum rate for what is held open, is each pool
//! owner's: a request body's idle timeout (`middleware::request_body`), a download's
//! (`grpc::renders`), a connection's first request (`app::first_request`), a handshake's
//! deadline (`tls::incoming`), a webhook receiver's answer (`webhooks::client`), an
//! analysis' CPU and wall-clock budget (`analysis`).
//!
//! The alternative, one FIFO semaphore per pool, is what let four silent 64 MiB bodies hold
//! every request buffer for the body deadline (issue 21): a FIFO is fair between requests,
//! not between callers. Taking units back from a holder (preemption) was rejected: a body
//! half received or a stream open cannot be taken back without failing an honest call, and
//! the reserve gives newcomers room without it. Pools that serve waiting callers in turn
//! (the webhook sender, the analysis workers) keep their turns and ask this mechanism, turn
//! by turn, whether the tenant may take one more.

use crate::auth::{Caller, IdentitySource, TenantId};
use crate::sync::lock;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// The reserve of a shrinking pool, in first amounts: sixteen callers holding nothing get
/// theirs at once whatever the others hold, twice the eight attackers the pools are tested
/// against (issue 42); at most half of the pool, the rest being what shares are cut from.
pub const RESERVE_FIRST_AMOUNTS: usize = 16;
/// What a caller holding no slot of a pool of slots (watchers, downloads) can always take:
/// one stream.
pub const FIRST_SLOTS: usize = 1;

/// Why units were not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShareRefusal {
    /// The key already holds its share (or asked for more than a share at once).
    OverShare,
    /// The pool has not that many units free (within the wait, for the waiting calls).
    PoolFull,
}

/// A pool of `capacity` units shared between keys.
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

/// Whom the shared part of a pool is divided among.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Division {
    /// The keys holding and one more: a key alone holds half of it.
    HoldersAndOneMore,
    /// The keys holding: a key alone may hold all of it.
    Holders,
}

impl Division {
    /// The divisor of the shared part when `holders` keys hold units.
    fn divisor(self, holders: usize) -> usize {
        match self {
            Division::HoldersAndOneMore => holders + 1,
            Division::Holders => holders.max(1),
        }
    }
}

/// A pool and its rule: the shared part (`capacity - reserve`) divided as `division` says,
/// never below `first_amount` nor above `most_per_key`; `reserve` units only for keys that
/// hold at most `first_amount`.
#[derive(Debug)]
struct Pool<K> {
    capacity: usize,
    first_amount: usize,
    reserve: usize,
    most_per_key: usize,
    division: Division,
    state: Mutex<Held<K>>,
    released: Notify,
}

#[derive(Debug)]
struct Held<K> {
    total: usize,
    /// Only keys holding at least one unit (a key at zero is removed), so at most
    /// `capacity` entries whatever number of callers come and go.
    by_key: HashMap<K, usize>,
}

impl<K: Hash + Eq + Clone> FairShare<K> {
    /// `capacity` units shared by the three rules of this module: a caller holding nothing
    /// can always take `first_amount` (at least 1), and no key's share shrinks below it.
    /// The shared part is divided among the keys holding and one more, so that a newcomer
    /// finds room to grow beside keys that hold for as long as they like (a body, a stream).
    pub(crate) fn shrinking(capacity: usize, first_amount: usize) -> FairShare<K> {
        FairShare::build(
            capacity,
            first_amount,
            usize::MAX,
            Division::HoldersAndOneMore,
        )
    }

    /// As [`FairShare::shrinking`], and a key never holds more than `most_per_key` (at least
    /// the first amount) whatever the others hold.
    pub(crate) fn shrinking_capped(
        capacity: usize,
        first_amount: usize,
        most_per_key: usize,
    ) -> FairShare<K> {
        FairShare::build(
            capacity,
            first_amount,
            most_per_key,
            Division::HoldersAndOneMore,
        )
    }

    /// As [`FairShare::shrinking`], for units that come back on their own within a bounded
    /// time (a webhook attempt, an analysis): the shared part is divided among the keys
    /// holding only, so a key alone may use all of it (the pool's throughput is not halved
    /// for a lone caller), and a newcomer starts from the reserve while the others' units
    /// come back.
    pub(crate) fn shrinking_bounded_holds(capacity: usize, first_amount: usize) -> FairShare<K> {
        FairShare::build(capacity, first_amount, usize::MAX, Division::Holders)
    }

    fn build(
        capacity: usize,
        first_amount: usize,
        most_per_key: usize,
        division: Division,
    ) -> FairShare<K> {
        let first_amount = first_amount.clamp(1, capacity.max(1));
        let reserve = first_amount
            .saturating_mul(RESERVE_FIRST_AMOUNTS)
            .min(capacity / 2);
        FairShare {
            inner: Arc::new(Pool {
                capacity,
                first_amount,
                reserve,
                most_per_key: most_per_key.max(first_amount),
                division,
                state: Mutex::new(Held {
                    total: 0,
                    by_key: HashMap::new(),
                }),
                released: Notify::new(),
            }),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// The most `key` may hold now: shrinks as more keys hold units.
    pub(crate) fn share_of(&self, key: &K) -> usize {
        self.inner.share(&lock(&self.inner.state), key)
    }

    /// What all keys hold now.
    pub(crate) fn held(&self) -> usize {
        lock(&self.inner.state).total
    }

    /// What `key` holds now.
    pub(crate) fn held_by(&self, key: &K) -> usize {
        lock(&self.inner.state)
            .by_key
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// A guard of `key` holding nothing yet, to grow as what it holds arrives.
    pub(crate) fn hold(&self, key: K) -> ShareGuard<K> {
        ShareGuard {
            pool: self.inner.clone(),
            key,
            units: 0,
        }
    }

    /// `units` for `key` now, or why not.
    pub(crate) fn try_acquire(&self, key: K, units: usize) -> Result<ShareGuard<K>, ShareRefusal> {
        let mut guard = self.hold(key);
        guard.try_grow(units)?;
        Ok(guard)
    }

    /// `units` for `key`, waiting up to `wait` for room (see [`ShareGuard::grow`]).
    pub(crate) async fn acquire(
        &self,
        key: K,
        units: usize,
        wait: Duration,
    ) -> Result<ShareGuard<K>, ShareRefusal> {
        let mut guard = self.hold(key);
        guard.grow(units, wait).await?;
        Ok(guard)
    }
}

impl<K: Hash + Eq + Clone> Pool<K> {
    /// The most `key` may hold in the state `held`.
    fn share(&self, held: &Held<K>, key: &K) -> usize {
        let holders = held.by_key.len() + usize::from(!held.by_key.contains_key(key));
        ((self.capacity - self.reserve) / self.division.divisor(holders))
            .max(self.first_amount)
            .min(self.most_per_key)
    }

    /// Whether a key could never hold `units` at once, even alone in the pool.
    fn never_fits(&self, units: usize) -> bool {
        let most = ((self.capacity - self.reserve) / self.division.divisor(1))
            .max(self.first_amount)
            .min(self.most_per_key);
        units > most.min(self.capacity)
    }

    /// Gives `units` more to `key` (on top of what all its guards hold), or says why not.
    fn grant(&self, key: &K, units: usize) -> Result<(), ShareRefusal> {
        if units == 0 {
            return Ok(());
        }
        let mut held = lock(&self.state);
        let after = held
            .by_key
            .get(key)
            .copied()
            .unwrap_or(0)
            .saturating_add(units);
        if after > self.share(&held, key) {
            return Err(ShareRefusal::OverShare);
        }
        let room = if after > self.first_amount {
            self.capacity - self.reserve
        } else {
            self.capacity
        };
        if held.total.saturating_add(units) > room {
            return Err(ShareRefusal::PoolFull);
        }
        held.total += units;
        held.by_key.insert(key.clone(), after);
        Ok(())
    }
}

impl<K: Hash + Eq> Pool<K> {
    fn give_back(&self, key: &K, units: usize) {
        if units == 0 {
            return;
        }
        {
            let mut held = lock(&self.state);
            held.total = held.total.saturating_sub(units);
            if let Some(of_key) = held.by_key.get_mut(key) {
                *of_key = of_key.saturating_sub(units);
                if *of_key == 0 {
                    held.by_key.remove(key);
                }
            }
        }
        self.released.notify_waiters();
    }
}

/// Units held by one key, given back when dropped; it grows as its holder takes more.
#[derive(Debug)]
pub(crate) struct ShareGuard<K: Hash + Eq> {
    pool: Arc<Pool<K>>,
    key: K,
    units: usize,
}

impl<K: Hash + Eq + Clone> ShareGuard<K> {
    /// What this guard holds.
    pub(crate) fn units(&self) -> usize {
        self.units
    }

    /// `units` more now, or why not.
    pub(crate) fn try_grow(&mut self, units: usize) -> Result<(), ShareRefusal> {
        self.pool.grant(&self.key, units)?;
        self.units += units;
        Ok(())
    }

    /// `units` more, waiting up to `wait` for room when the key is at its share or the pool
    /// is full (others' units come back, or fewer keys hold and the share grows); then the
    /// last refusal. More than a key could ever hold at once is refused at once. Waiters
    /// are not served in order, so small growths are not held behind a large one.
    pub(crate) async fn grow(&mut self, units: usize, wait: Duration) -> Result<(), ShareRefusal> {
        if self.pool.never_fits(self.units.saturating_add(units)) {
            return Err(ShareRefusal::OverShare);
        }
        let deadline = tokio::time::Instant::now() + wait;
        let pool = self.pool.clone();
        loop {
            // Registered before the attempt, so a release between the two is not missed.
            let released = pool.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let refusal = match self.try_grow(units) {
                Ok(()) => return Ok(()),
                Err(refusal) => refusal,
            };
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(refusal);
            }
        }
    }
}

impl<K: Hash + Eq> Drop for ShareGuard<K> {
    fn drop(&mut self) {
        self.pool.give_back(&self.key, self.units);
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

    /// Grows a guard of `key` one unit at a time until it is refused; the guard.
    fn take_all<K: Hash + Eq + Clone>(pool: &FairShare<K>, key: K) -> ShareGuard<K> {
        let mut guard = pool.hold(key);
        while guard.try_grow(1).is_ok() {}
        guard
    }

    #[test]
    fn shares_shrink_as_keys_compete_so_eight_growing_together_leave_room_for_a_ninth() {
        // 100 slots, a first amount of 1: 16 kept in reserve, 84 shared.
        let pool = FairShare::<u8>::shrinking(100, 1);
        assert_eq!(pool.share_of(&99), 42, "alone: half the shared part");
        let mut guards: Vec<_> = (0..8).map(|key| pool.hold(key)).collect();
        // Every key takes a slot in turn, as concurrent callers would, until none can.
        let mut grew = true;
        while grew {
            grew = false;
            for guard in &mut guards {
                grew |= guard.try_grow(1).is_ok();
            }
        }
        for guard in &guards {
            assert_eq!(
                guard.units(),
                84 / 9,
                "each holds a ninth of the shared part"
            );
        }
        let ninth = take_all(&pool, 8);
        assert!(ninth.units() >= 84 / 10, "the ninth got {}", ninth.units());
        drop(guards);
        assert_eq!(pool.held_by(&8), ninth.units());
        drop(ninth);
        assert!(lock(&pool.inner.state).by_key.is_empty(), "no key kept");
        assert_eq!(lock(&pool.inner.state).total, 0);
    }

    #[test]
    fn keys_that_grabbed_the_shared_part_in_turn_leave_a_newcomer_its_first_amount() {
        let pool = FairShare::shrinking(100, 1);
        // One after another, before the shares could shrink: the first three fill the
        // shared part (42, 28, 14), the five after them get a first amount each.
        let grabbers: Vec<_> = (0..8).map(|key| take_all(&pool, key)).collect();
        let held: Vec<usize> = grabbers.iter().map(ShareGuard::units).collect();
        assert_eq!(held, [42, 28, 14, 1, 1, 1, 1, 1]);
        // The first one's share has shrunk to a ninth; none of them takes more from the
        // reserve, each holding a first amount already.
        assert_eq!(pool.share_of(&0), 84 / 9);
        let mut grabbers = grabbers.into_iter();
        let mut first = grabbers.next().unwrap();
        assert_eq!(first.try_grow(1), Err(ShareRefusal::OverShare));
        let mut last = grabbers.next_back().unwrap();
        assert_eq!(last.try_grow(1), Err(ShareRefusal::PoolFull));
        // A caller holding nothing gets its first amount, and only that.
        let mut newcomer = pool.try_acquire(100, 1).unwrap();
        assert_eq!(newcomer.try_grow(1), Err(ShareRefusal::PoolFull));
        // The reserve's sixteen first amounts serve ten more newcomers, then it is empty.
        let newcomers: Vec<_> = (101..111).map(|key| pool.try_acquire(key, 1)).collect();
        assert!(newcomers.iter().all(Result::is_ok));
        assert_eq!(
            pool.try_acquire(111, 1).unwrap_err(),
            ShareRefusal::PoolFull
        );
    }

    #[test]
    fn a_guard_grows_as_units_arrive_and_gives_all_back_when_dropped() {
        // Bytes: a first amount of 10, a reserve of 160, 840 shared.
        let pool = FairShare::shrinking(1000, 10);
        let mut body = pool.hold("a");
        assert_eq!(pool.held_by(&"a"), 0);
        for _ in 0..42 {
            body.try_grow(10).unwrap();
        }
        assert_eq!((body.units(), pool.held_by(&"a")), (420, 420));
        assert_eq!(body.try_grow(1), Err(ShareRefusal::OverShare));
        // Another guard of the same key counts against the same share.
        let mut other = pool.hold("a");
        assert_eq!(other.try_grow(1), Err(ShareRefusal::OverShare));
        drop(body);
        other.try_grow(10).unwrap();
        drop(other);
        assert!(lock(&pool.inner.state).by_key.is_empty());
    }

    #[test]
    fn more_than_a_key_could_ever_hold_is_refused_and_a_first_amount_is_at_least_one() {
        let pool = FairShare::<u8>::shrinking(100, 0);
        let mut guard = pool.hold(1);
        let refused = futures_util::FutureExt::now_or_never(guard.grow(43, Duration::ZERO));
        assert_eq!(refused, Some(Err(ShareRefusal::OverShare)));
        // A pool of one slot keeps nothing in reserve: its one slot is for whoever comes.
        let single = FairShare::<u8>::shrinking(1, 1);
        let _held = single.try_acquire(1, 1).unwrap();
        assert_eq!(
            single.try_acquire(2, 1).unwrap_err(),
            ShareRefusal::PoolFull
        );
    }

    #[tokio::test]
    async fn a_waiter_is_served_when_units_come_back_and_refused_after_its_wait() {
        // Two slots, one of them the reserve: two keys holding one each fill it.
        let pool = FairShare::shrinking(2, 1);
        let held = pool.try_acquire("a", 1).unwrap();
        let _other = pool.try_acquire("b", 1).unwrap();
        let refused = pool.acquire("c", 1, Duration::from_millis(20)).await;
        assert_eq!(refused.unwrap_err(), ShareRefusal::PoolFull);
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.acquire("c", 1, Duration::from_secs(10))
                    .await
                    .map(|guard| guard.units())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap(), Ok(1));
        // A shrinking share grows back when another key lets go: its waiter is served.
        let pool = FairShare::shrinking(116, 1);
        let other = pool.try_acquire("a", 10).unwrap();
        let mut grower = take_all(&pool, "b");
        assert_eq!(grower.units(), 100 / 3);
        let wait = grower.grow(10, Duration::from_secs(10));
        let let_go = async {
            tokio::task::yield_now().await;
            drop(other);
        };
        let (grown, ()) = tokio::join!(wait, let_go);
        assert_eq!(grown, Ok(()));
    }

    #[test]
    fn a_capped_share_never_passes_its_cap_and_shrinks_below_it_as_keys_compete() {
        // 100 connections, at most 5 per address: alone, 5 rather than half the shared part.
        let pool = FairShare::<u8>::shrinking_capped(100, 1, 5);
        assert_eq!(pool.share_of(&200), 5);
        let alone = take_all(&pool, 200);
        assert_eq!(alone.units(), 5);
        let mut other = pool.hold(201);
        let refused = futures_util::FutureExt::now_or_never(other.grow(6, Duration::ZERO));
        assert_eq!(refused, Some(Err(ShareRefusal::OverShare)), "never fits");
        // Among 20 keys holding, the share is the shared part's: 84 / 21.
        let many: Vec<_> = (0..19).map(|key| pool.try_acquire(key, 1)).collect();
        assert!(many.iter().all(Result::is_ok));
        assert_eq!(pool.share_of(&200), 84 / 21);
        assert_eq!(pool.held(), 5 + 19);
        // A cap under the first amount is the first amount.
        let tiny = FairShare::<u8>::shrinking_capped(100, 10, 1);
        assert_eq!(tiny.share_of(&1), 10);
        drop((alone, many));
        assert_eq!(pool.held(), 0);
    }

    #[test]
    fn bounded_holds_lend_a_key_alone_the_whole_shared_part_and_newcomers_start_from_the_reserve() {
        // 64 slots: 16 kept, 48 shared, all of it for a key alone.
        let pool = FairShare::<u8>::shrinking_bounded_holds(64, 1);
        let alone = take_all(&pool, 0);
        assert_eq!(alone.units(), 48);
        // Eight newcomers get a first slot each from the reserve and no more while the
        // shared part is taken; half the reserve stays for the next ones.
        let newcomers: Vec<_> = (1..=8).map(|key| take_all(&pool, key)).collect();
        assert!(newcomers.iter().all(|guard| guard.units() == 1));
        assert_eq!(pool.held(), 56);
        // As the first key's units come back, the shares are the shared part by nine.
        drop(alone);
        assert_eq!(pool.share_of(&1), 48 / 8);
        let grown = take_all(&pool, 9);
        assert_eq!(grown.units(), 48 / 9);
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
