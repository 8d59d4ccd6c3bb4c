//! The sender's slots (`--webhook-concurrency`) shared by tenants, so that one tenant's flood
//! of deliveries to slow receivers delays nobody else's (issue 42, finding 4: 1,200 of one
//! tenant's deliveries held another's for 153 s when they were sent earliest first):
//! - the slots are a pool of the one fair-share mechanism ([`FairShare`], keyed by tenant, a
//!   slot a unit, an attempt's slot back within its timeouts): a tenant's share is the shared
//!   part divided among the tenants holding slots, so a tenant alone may use all of it and
//!   the shares shrink as more tenants send; the mechanism's reserve keeps slots for tenants
//!   holding none, so a tenant whose first delivery comes while others hold every other slot
//!   starts at once, not when one of their receivers answers;
//! - tenants with due deliveries take their slots one at a time, round-robin, starting after
//!   the tenant served last, each turn asking the mechanism for one more slot: so tenants
//!   arriving together share the shared part evenly, not in the order the store lists them.
//!
//! Attempts in flight are never cut short for a newcomer: a tenant over its share (it took
//! them while alone) takes no more until it is back under it. A turn ([`Slots::turn`]) takes
//! its slots before the store claims the deliveries, and hands one to each delivery claimed
//! ([`Turn::slot_for`]); those it could not use go back when the turn is dropped.

use crate::fair_share::{FairShare, ShareGuard, FIRST_SLOTS};
use std::collections::HashMap;

/// How many of each tenant's due deliveries to claim now, with a slot for each.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// Tenant and count, in the order they were first served.
    pub(crate) claims: Vec<(String, usize)>,
    /// The tenant that took the last slot: the next turn starts after it.
    pub(crate) last: Option<String>,
    /// The slots taken, by tenant.
    slots: HashMap<String, Vec<SlotGuard>>,
}

impl Turn {
    /// A slot taken for a delivery of `tenant`'s, if this turn took one for it.
    pub(crate) fn slot_for(&mut self, tenant: &str) -> Option<SlotGuard> {
        self.slots.get_mut(tenant)?.pop()
    }
}

/// One slot held by one tenant's attempt, given back when dropped.
pub(crate) type SlotGuard = ShareGuard<String>;

/// The sender's slots and what each tenant holds of them.
#[derive(Debug)]
pub(crate) struct Slots {
    shares: FairShare<String>,
}

impl Slots {
    /// `capacity` slots (`--webhook-concurrency`), a slot the first amount.
    pub(crate) fn new(capacity: usize) -> Slots {
        Slots {
            shares: FairShare::shrinking_bounded_holds(capacity, FIRST_SLOTS),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shares.capacity()
    }

    /// Slots no attempt holds.
    pub(crate) fn free(&self) -> usize {
        self.shares.capacity().saturating_sub(self.shares.held())
    }

    /// Slots for the deliveries `due` (tenant and count), taken one at a time in turn from
    /// the tenant after `after`, while the mechanism gives each tenant one more.
    pub(crate) fn turn(&self, due: &[(String, usize)], after: Option<&str>) -> Turn {
        let mut order: Vec<(&str, usize)> = due
            .iter()
            .filter(|(_, count)| *count > 0)
            .map(|(tenant, count)| (tenant.as_str(), *count))
            .collect();
        order.sort_unstable();
        // Round-robin: the first turn is the tenant after the one served last.
        let first = after.map_or(0, |after| {
            order
                .iter()
                .position(|(tenant, _)| *tenant > after)
                .unwrap_or(0)
        });
        order.rotate_left(first);
        let mut turn = Turn::default();
        let mut taken = vec![0usize; order.len()];
        // Each round gives every tenant still asking one slot; a tenant refused (at its
        // share, or the shared part full while it holds some) asks no more this turn.
        let mut asking = vec![true; order.len()];
        while asking.iter().any(|asks| *asks) {
            for (index, (tenant, count)) in order.iter().enumerate() {
                if !asking[index] {
                    continue;
                }
                match self.shares.try_acquire((*tenant).to_owned(), 1) {
                    Ok(slot) => {
                        taken[index] += 1;
                        asking[index] = taken[index] < *count;
                        turn.slots
                            .entry((*tenant).to_owned())
                            .or_default()
                            .push(slot);
                        turn.last = Some((*tenant).to_owned());
                    }
                    Err(_) => asking[index] = false,
                }
            }
        }
        turn.claims = order
            .iter()
            .zip(taken)
            .filter(|(_, taken)| *taken > 0)
            .map(|((tenant, _), taken)| ((*tenant).to_owned(), taken))
            .collect();
        turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(list: &[(&str, usize)]) -> Vec<(String, usize)> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn claims(turn: &Turn) -> Vec<(&str, usize)> {
        turn.claims.iter().map(|(t, n)| (t.as_str(), *n)).collect()
    }

    /// `count` slots held by `tenant`, as attempts in flight hold them.
    fn hold(slots: &Slots, tenant: &str, count: usize) -> Turn {
        let turn = slots.turn(&due(&[(tenant, count)]), None);
        assert_eq!(claims(&turn), [(tenant, count)]);
        turn
    }

    #[test]
    fn a_tenant_alone_takes_the_shared_part_and_gives_back_what_it_does_not_use() {
        // 64 slots: 16 kept for tenants holding none, 48 shared.
        let slots = Slots::new(64);
        let mut turn = slots.turn(&due(&[("flood", 1200)]), None);
        assert_eq!(claims(&turn), [("flood", 48)]);
        assert_eq!(turn.last.as_deref(), Some("flood"));
        assert_eq!(slots.free(), 16);
        // The store claimed fewer than asked: the slots not handed out go back.
        let attempts: Vec<_> = (0..20).filter_map(|_| turn.slot_for("flood")).collect();
        assert!(turn.slot_for("acme").is_none());
        drop(turn);
        assert_eq!(slots.free(), 44);
        drop(attempts);
        assert_eq!(slots.free(), 64);
        // Fewer due than its share: all of them.
        let turn = slots.turn(&due(&[("flood", 5)]), None);
        assert_eq!(claims(&turn), [("flood", 5)]);
    }

    #[test]
    fn newcomers_start_at_once_from_the_reserve_while_a_flood_holds_the_shared_part() {
        let slots = Slots::new(64);
        let _flood = hold(&slots, "flood", 48);
        let turn = slots.turn(
            &due(&[("flood", 1000), ("other", 1000), ("victim", 1)]),
            Some("flood"),
        );
        assert_eq!(
            claims(&turn),
            [("other", 1), ("victim", 1)],
            "a first slot each; the flood is over its share of 16"
        );
        // Fifteen newcomers at once take the rest of the reserve, a first slot each; the
        // next ones wait for the flood's attempts to end.
        let newcomers: Vec<(String, usize)> = (0..17).map(|i| (format!("t{i:02}"), 5)).collect();
        let turn = slots.turn(&newcomers, None);
        assert_eq!(turn.claims.len(), 14, "other and victim hold two of the 16");
        assert!(turn.claims.iter().all(|(_, count)| *count == 1));
        assert_eq!(slots.free(), 0);
    }

    #[test]
    fn shares_shrink_as_tenants_compete_and_turns_go_round() {
        // Three tenants with plenty due and nothing held, one slot at a time in turn: each
        // takes a first slot, then grows while its share (48 / 3 = 16) lets it.
        let slots = Slots::new(64);
        let turn = slots.turn(&due(&[("a", 100), ("b", 100), ("c", 100)]), None);
        assert_eq!(claims(&turn), [("a", 16), ("b", 16), ("c", 16)]);
        assert_eq!(slots.free(), 16, "the reserve stays free");
        drop(turn);
        // Two slots, one of them the reserve: two tenants of three get one, in turn from the
        // tenant after the one served last.
        let small = Slots::new(2);
        let served = |after| {
            let turn = small.turn(&due(&[("a", 9), ("b", 9), ("c", 9)]), after);
            let tenants: Vec<String> = turn.claims.iter().map(|(t, _)| t.clone()).collect();
            (tenants, turn.last.clone())
        };
        let pair = |first: &str, second: &str| {
            (
                vec![first.to_owned(), second.to_owned()],
                Some(second.to_owned()),
            )
        };
        assert_eq!(served(Some("a")), pair("b", "c"));
        assert_eq!(served(Some("b")), pair("c", "a"));
        assert_eq!(served(Some("c")), pair("a", "b"));
        assert_eq!(served(Some("zzz")), pair("a", "b"));
        assert_eq!(served(None), pair("a", "b"));
    }
}
