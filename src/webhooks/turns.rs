//! The sender's slots (`--webhook-concurrency`) shared by tenants in turn, so that one
//! tenant's flood of deliveries to slow receivers delays nobody else's (issue 42, finding 4:
//! 1,200 of one tenant's deliveries held another's for 153 s when they were sent earliest
//! first):
//! - tenants with due deliveries are served one slot at a time, round-robin, starting after
//!   the tenant served last;
//! - while others compete, a tenant holds at most its share: the slots divided by the tenants
//!   that hold slots or have deliveries due (rounded up), so shares shrink as more tenants
//!   compete and grow back as they leave (one tenant alone may use what it finds free);
//! - [`RESERVE_DIVISOR`]: a part of the slots is kept for tenants holding none, so a tenant
//!   whose first delivery comes while others hold every other slot starts at once, not when
//!   one of their receivers answers.
//!
//! Attempts in flight are never cut short for a newcomer: a tenant over its share (it took
//! them alone) takes no more until it is back under it. The plan is a pure function
//! ([`plan`]); [`Slots`] holds what each tenant has in flight.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The part of the slots kept for tenants holding none, as a divisor: an eighth (8 of the
/// default 64) starts eight newcomers at once while the rest is shared; below eight slots
/// there is no reserve (the share alone divides them).
pub const RESERVE_DIVISOR: usize = 8;

/// How many of each tenant's due deliveries to claim now, and who was served last.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Tenant and count, in the order they were first served.
    pub claims: Vec<(String, usize)>,
    /// The tenant that took the last slot: the next turn starts after it.
    pub last: Option<String>,
}

/// The turns: `capacity` slots, `reserve` of them only for tenants holding none, `held` what
/// each tenant has in flight, `due` how many deliveries each tenant has due, and `after` the
/// tenant served last.
pub fn plan(
    capacity: usize,
    reserve: usize,
    held: &HashMap<String, usize>,
    due: &[(String, usize)],
    after: Option<&str>,
) -> Plan {
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
    let competing = order
        .iter()
        .map(|(tenant, _)| *tenant)
        .chain(
            held.iter()
                .filter(|(_, n)| **n > 0)
                .map(|(t, _)| t.as_str()),
        )
        .collect::<std::collections::HashSet<&str>>()
        .len();
    let share = capacity.div_ceil(competing.max(1)).max(1);
    let mut free = capacity.saturating_sub(held.values().sum());
    let mut taken = vec![0usize; order.len()];
    let mut plan = Plan::default();
    let mut granted_in_round = true;
    while free > 0 && granted_in_round {
        granted_in_round = false;
        for (index, (tenant, count)) in order.iter().enumerate() {
            if free == 0 {
                break;
            }
            let holds = held.get(*tenant).copied().unwrap_or(0) + taken[index];
            let may = taken[index] < *count && holds < share && (holds == 0 || free > reserve);
            if !may {
                continue;
            }
            taken[index] += 1;
            free -= 1;
            granted_in_round = true;
            plan.last = Some((*tenant).to_owned());
        }
    }
    plan.claims = order
        .iter()
        .zip(taken)
        .filter(|(_, taken)| *taken > 0)
        .map(|((tenant, _), taken)| ((*tenant).to_owned(), taken))
        .collect();
    plan
}

/// The sender's slots and what each tenant holds of them.
#[derive(Debug)]
pub struct Slots {
    capacity: usize,
    reserve: usize,
    held: Mutex<HashMap<String, usize>>,
}

impl Slots {
    /// `capacity` slots (`--webhook-concurrency`), a [`RESERVE_DIVISOR`]th kept.
    pub fn new(capacity: usize) -> Arc<Slots> {
        Arc::new(Slots {
            capacity,
            reserve: capacity / RESERVE_DIVISOR,
            held: Mutex::new(HashMap::new()),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots no attempt holds.
    pub fn free(&self) -> usize {
        self.capacity
            .saturating_sub(lock(&self.held).values().sum::<usize>())
    }

    /// The turns for `due` now ([`plan`]).
    pub fn plan(&self, due: &[(String, usize)], after: Option<&str>) -> Plan {
        plan(self.capacity, self.reserve, &lock(&self.held), due, after)
    }

    /// A slot for an attempt of `tenant`'s, given back when the guard drops.
    pub fn take(self: &Arc<Self>, tenant: &str) -> SlotGuard {
        *lock(&self.held).entry(tenant.to_owned()).or_default() += 1;
        SlotGuard {
            slots: self.clone(),
            tenant: tenant.to_owned(),
        }
    }
}

/// One slot held by one tenant's attempt.
#[derive(Debug)]
pub struct SlotGuard {
    slots: Arc<Slots>,
    tenant: String,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut held = lock(&self.slots.held);
        if let Some(count) = held.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // Only tenants holding slots stay: the map is at most the slots.
                held.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(list: &[(&str, usize)]) -> Vec<(String, usize)> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn held(list: &[(&str, usize)]) -> HashMap<String, usize> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn claims(plan: &Plan) -> Vec<(&str, usize)> {
        plan.claims.iter().map(|(t, n)| (t.as_str(), *n)).collect()
    }

    #[test]
    fn a_tenant_alone_takes_what_is_free_but_the_reserve() {
        let plan = plan(64, 8, &held(&[]), &due(&[("flood", 1200)]), None);
        assert_eq!(claims(&plan), [("flood", 56)]);
        assert_eq!(plan.last.as_deref(), Some("flood"));
        // Fewer due than free: all of them.
        let plan = super::plan(64, 8, &held(&[]), &due(&[("flood", 5)]), None);
        assert_eq!(claims(&plan), [("flood", 5)]);
    }

    #[test]
    fn a_newcomer_starts_at_once_from_the_reserve_while_the_flood_holds_the_rest() {
        let plan = plan(
            64,
            8,
            &held(&[("flood", 56)]),
            &due(&[("flood", 1144), ("victim", 1)]),
            Some("flood"),
        );
        assert_eq!(
            claims(&plan),
            [("victim", 1)],
            "the flood is over its share"
        );
        // Eight newcomers at once fill the reserve; a ninth waits.
        let newcomers: Vec<(String, usize)> = (0..9).map(|i| (format!("t{i}"), 1)).collect();
        let plan = super::plan(64, 8, &held(&[("flood", 56)]), &newcomers, None);
        assert_eq!(plan.claims.len(), 8);
    }

    #[test]
    fn shares_shrink_as_tenants_compete_and_turns_go_round() {
        // Three tenants with plenty due and nothing held: 64 / 3 rounded up, one at a time
        // in turn, each the same give or take one.
        let plan = plan(
            64,
            8,
            &held(&[]),
            &due(&[("a", 100), ("b", 100), ("c", 100)]),
            None,
        );
        let counts: Vec<usize> = plan.claims.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts.iter().sum::<usize>(), 56, "the reserve stays free");
        assert!(counts.iter().all(|n| (18..=19).contains(n)), "{counts:?}");
        // A tenant holding its share takes no more while two others wait.
        let plan = super::plan(
            64,
            8,
            &held(&[("a", 22), ("b", 10)]),
            &due(&[("a", 100), ("b", 100), ("c", 100)]),
            None,
        );
        let got: HashMap<&str, usize> = claims(&plan).into_iter().collect();
        assert_eq!(got.get("a"), None);
        assert_eq!(got.get("b"), Some(&12), "b up to its share of 22");
        // One free slot goes round: after a, b; after b, c; after c, a.
        let one = |after| {
            super::plan(
                4,
                0,
                &held(&[("a", 1), ("b", 1), ("c", 1)]),
                &due(&[("a", 9), ("b", 9), ("c", 9)]),
                after,
            )
        };
        assert_eq!(one(Some("a")).claims, [("b".to_owned(), 1)]);
        assert_eq!(one(Some("b")).claims, [("c".to_owned(), 1)]);
        assert_eq!(one(Some("c")).claims, [("a".to_owned(), 1)]);
        assert_eq!(one(Some("zzz")).claims, [("a".to_owned(), 1)]);
    }

    #[test]
    fn slots_are_counted_by_tenant_and_given_back() {
        let slots = Slots::new(8);
        assert_eq!(slots.free(), 8);
        let first = slots.take("a");
        let second = slots.take("a");
        assert_eq!(slots.free(), 6);
        // a holds 2 of 8 and is the only one competing with b: shares of 4, one reserved.
        let plan = slots.plan(&due(&[("a", 9), ("b", 9)]), None);
        assert_eq!(claims(&plan), [("a", 2), ("b", 3)]);
        drop((first, second));
        assert_eq!(slots.free(), 8);
        assert!(lock(&slots.held).is_empty());
    }
}
