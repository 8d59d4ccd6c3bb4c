//! `AnalysisShares`: the analysis workers shared between tenants (issue 21, item 5): the pool
//! is small (two workers) and one analysis may burn seconds of CPU, so a tenant sending a
//! CPU-hog template a second held every worker and everyone else's CreateTemplate waited out
//! its 2 s and failed `ANALYSIS_BUSY` (3 of 30 succeeded).
//!
//! Three rules, the first the one fair-share mechanism's:
//! - **Shares:** the workers are a pool of [`FairShare`], keyed by tenant, a worker a unit (it
//!   comes back within the analysis' wall-clock budget): a tenant's share is the shared part
//!   divided among the tenants holding workers, and the mechanism's reserve keeps workers for
//!   tenants holding none (half the pool, at most sixteen), so a tenant alone holds half the
//!   workers (one of two) and the rest is always there for the others; of sixteen, eight
//!   tenants holding all they can leave one free (docs/security.md, Pools).
//! - **Turns:** callers over their share wait, and when a worker frees, the waiting tenants
//!   are served round-robin (a tenant with a hundred waiting calls gets one turn like a
//!   tenant with one), each turn asking the mechanism whether the tenant may take one more.
//! - **CPU:** each analysis' CPU time is charged to its tenant, read from the worker process
//!   whether it finished, breached its budget or was killed because its caller went away (so
//!   hanging up before the budget does not make a hog free). A tenant whose analysis used up
//!   its whole budget (its CPU time, or its wall-clock time on a machine too loaded to give it
//!   that CPU) is backed off: every CreateTemplate it sends is RESOURCE_EXHAUSTED
//!   `ANALYSIS_BACKOFF` with the remaining delay, before any parse or worker, for twice the
//!   budget, doubling with each exhaustion that follows (at most [`BACKOFF_MAX`]). A tenant
//!   whose analyses stay under the budget but keep a worker busy is backed off too once its
//!   CPU debt (drained at [`TENANT_CPU_SECONDS_PER_SECOND`]) passes two budgets.
//!
//! The decision rejected: a shorter wait or a queue of hostile calls shed first would still
//! let one tenant's hogs take every worker for their whole budget; a fixed half per tenant
//! (before this pool joined the mechanism) let two tenants hold every worker whatever the
//! pool's size. Tenants are the callers' tenants (anonymous callers are all the `default`
//! tenant), which the server knows before any analysis.

use crate::auth::TenantId;
use crate::fair_share::{FairShare, ShareGuard, FIRST_SLOTS};
use crate::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Longest backoff of a tenant whose analyses exhaust their budget again and again: the
/// growth stops here, so a tenant that once uploaded a run of too complex templates is not
/// locked out for long (and a hostile one gets one budget per five minutes).
pub const BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);
/// The first backoff, in CPU budgets of one analysis: twice the budget, so a tenant whose
/// every analysis is a hog keeps one worker busy at most a third of the time from the start.
pub const FIRST_BACKOFF_BUDGETS: u32 = 2;
/// A tenant's count of exhausted analyses is forgotten after this long without one more.
const EXHAUSTIONS_FORGOTTEN_AFTER: Duration = Duration::from_secs(10 * 60);
/// CPU seconds of analysis a tenant is credited per second: half a core. An honest tenant
/// creating templates one after another (tens of milliseconds of analysis each) stays well
/// under it; a tenant whose analyses burn just under their budget each, or hang up just
/// before it, runs out of credit and is backed off like one that exhausts it.
pub const TENANT_CPU_SECONDS_PER_SECOND: f64 = 0.5;
/// CPU debt a tenant may run up before it is backed off, in CPU budgets of one analysis: two
/// whole budgets, so bursts of honest work (a deploy creating hundreds of templates) pass.
pub const TENANT_CPU_BURST_BUDGETS: f64 = 2.0;

/// Why no worker was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The tenant is backed off for this long.
    Backoff(Duration),
    /// No worker within the tenant's share was free within the wait.
    Busy,
}

/// The analysis workers of one server, shared fairly between tenants.
#[derive(Debug, Clone)]
pub(crate) struct AnalysisShares {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The workers, as the mechanism shares them. Its lock is only ever taken inside
    /// `state`'s or alone, never the other way round.
    workers: FairShare<TenantId>,
    state: Mutex<State>,
    cpu_budget: Duration,
}

#[derive(Debug)]
struct State {
    tenants: HashMap<TenantId, TenantState>,
    /// Tenants with waiting calls, in the order they are served next.
    turns: VecDeque<TenantId>,
    next_waiter: u64,
}

#[derive(Debug)]
struct TenantState {
    waiting: VecDeque<Waiter>,
    in_turns: bool,
    /// CPU seconds charged and not yet drained, as of `debt_at`.
    cpu_debt: f64,
    debt_at: Instant,
    exhaustions: u32,
    last_exhaustion: Option<Instant>,
    backoff_until: Option<Instant>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    grant: oneshot::Sender<AnalysisSlot>,
}

impl TenantState {
    fn new(now: Instant) -> TenantState {
        TenantState {
            waiting: VecDeque::new(),
            in_turns: false,
            cpu_debt: 0.0,
            debt_at: now,
            exhaustions: 0,
            last_exhaustion: None,
            backoff_until: None,
        }
    }

    fn debt(&self, now: Instant) -> f64 {
        let drained = now.saturating_duration_since(self.debt_at).as_secs_f64()
            * TENANT_CPU_SECONDS_PER_SECOND;
        (self.cpu_debt - drained).max(0.0)
    }

    /// How long this tenant is still backed off at `now` (zero: not at all).
    fn backoff(&self, now: Instant, cpu_budget: Duration) -> Duration {
        let exhausted = self
            .backoff_until
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        let burst = cpu_budget.as_secs_f64() * TENANT_CPU_BURST_BUDGETS;
        let over = self.debt(now) - burst;
        let indebted = if over > 0.0 {
            Duration::from_secs_f64(over / TENANT_CPU_SECONDS_PER_SECOND)
        } else {
            Duration::ZERO
        };
        exhausted.max(indebted)
    }

    /// Nothing awaited or remembered (the caller checks that nothing is held): the entry
    /// can go.
    fn forgettable(&self, now: Instant, cpu_budget: Duration) -> bool {
        self.waiting.is_empty()
            && !self.in_turns
            && self.debt(now) == 0.0
            && self.backoff(now, cpu_budget).is_zero()
            && self.last_exhaustion.is_none_or(|last| {
                now.saturating_duration_since(last) >= EXHAUSTIONS_FORGOTTEN_AFTER
            })
    }
}

impl State {
    fn tenant(&mut self, tenant: &TenantId, now: Instant) -> &mut TenantState {
        self.tenants
            .entry(tenant.clone())
            .or_insert_with(|| TenantState::new(now))
    }

    /// The next waiting call to serve, with the worker the mechanism gave its tenant: tenants
    /// in turn, skipping those it refuses one more (at their share, or the pool full).
    fn next_grant(
        &mut self,
        workers: &FairShare<TenantId>,
    ) -> Option<(TenantId, Waiter, ShareGuard<TenantId>)> {
        for _ in 0..self.turns.len() {
            let tenant = self.turns.pop_front()?;
            let Some(state) = self.tenants.get_mut(&tenant) else {
                continue;
            };
            if state.waiting.is_empty() {
                state.in_turns = false;
                continue;
            }
            let Ok(worker) = workers.try_acquire(tenant.clone(), 1) else {
                self.turns.push_back(tenant);
                continue;
            };
            let waiter = state.waiting.pop_front()?;
            if state.waiting.is_empty() {
                state.in_turns = false;
            } else {
                self.turns.push_back(tenant.clone());
            }
            return Some((tenant, waiter, worker));
        }
        None
    }

    fn forget_if_idle(
        &mut self,
        tenant: &TenantId,
        now: Instant,
        cpu_budget: Duration,
        workers: &FairShare<TenantId>,
    ) {
        if workers.held_by(tenant) == 0
            && self
                .tenants
                .get(tenant)
                .is_some_and(|state| state.forgettable(now, cpu_budget))
        {
            self.tenants.remove(tenant);
        }
    }
}

impl AnalysisShares {
    /// `workers` analysis workers, each analysis within `cpu_budget`.
    pub(crate) fn new(workers: usize, cpu_budget: Duration) -> AnalysisShares {
        AnalysisShares {
            shared: Arc::new(Shared {
                workers: FairShare::shrinking_bounded_holds(workers.max(1), FIRST_SLOTS),
                state: Mutex::new(State {
                    tenants: HashMap::new(),
                    turns: VecDeque::new(),
                    next_waiter: 0,
                }),
                cpu_budget,
            }),
        }
    }

    /// `Err(delay)` while `tenant` is backed off.
    pub(crate) fn check_backoff(&self, tenant: &TenantId) -> Result<(), Duration> {
        let now = Instant::now();
        let state = lock(&self.shared.state);
        match state.tenants.get(tenant) {
            Some(tenant) => {
                let delay = tenant.backoff(now, self.shared.cpu_budget);
                if delay.is_zero() {
                    Ok(())
                } else {
                    Err(delay)
                }
            }
            None => Ok(()),
        }
    }

    /// A worker slot for `tenant` within its share, waiting at most `wait`: refused at once
    /// while the tenant is backed off (also when it became so while waiting).
    pub(crate) async fn acquire(
        &self,
        tenant: &TenantId,
        wait: Duration,
    ) -> Result<AnalysisSlot, Refusal> {
        self.check_backoff(tenant).map_err(Refusal::Backoff)?;
        let (id, granted) = {
            let now = Instant::now();
            let mut state = lock(&self.shared.state);
            let entry = state.tenant(tenant, now);
            if entry.waiting.is_empty() {
                if let Ok(worker) = self.shared.workers.try_acquire(tenant.clone(), 1) {
                    drop(state);
                    return Ok(AnalysisSlot::new(
                        self.shared.clone(),
                        tenant.clone(),
                        worker,
                    ));
                }
            }
            let id = state.next_waiter;
            state.next_waiter += 1;
            let (grant, granted) = oneshot::channel();
            let entry = state.tenant(tenant, now);
            entry.waiting.push_back(Waiter { id, grant });
            if !entry.in_turns {
                entry.in_turns = true;
                state.turns.push_back(tenant.clone());
            }
            (id, granted)
        };
        let mut waiting = StopWaitingOnDrop {
            shared: &self.shared,
            tenant,
            id,
            granted,
        };
        let slot = match tokio::time::timeout(wait, &mut waiting.granted).await {
            Ok(Ok(slot)) => slot,
            _ => {
                waiting.leave_queue();
                // Granted in the instant the wait ended: take it rather than waste it.
                waiting.granted.try_recv().map_err(|_| Refusal::Busy)?
            }
        };
        drop(waiting);
        // Backed off while it waited (its earlier analysis exhausted its budget): the slot
        // goes back at once.
        self.check_backoff(tenant).map_err(Refusal::Backoff)?;
        Ok(slot)
    }

    /// Serves waiting calls while workers are free.
    fn dispatch(shared: &Arc<Shared>) {
        loop {
            let next = lock(&shared.state).next_grant(&shared.workers);
            let Some((tenant, waiter, worker)) = next else {
                return;
            };
            // A waiter that has just gone away hands the slot back (its drop releases it
            // and dispatches again).
            let _ = waiter
                .grant
                .send(AnalysisSlot::new(shared.clone(), tenant, worker));
        }
    }
}

/// Takes a waiting call out of its tenant's queue when it stops waiting (answered, timed
/// out, or its caller went away).
struct StopWaitingOnDrop<'a> {
    shared: &'a Arc<Shared>,
    tenant: &'a TenantId,
    id: u64,
    granted: oneshot::Receiver<AnalysisSlot>,
}

impl StopWaitingOnDrop<'_> {
    fn leave_queue(&mut self) {
        let mut state = lock(&self.shared.state);
        let Some(entry) = state.tenants.get_mut(self.tenant) else {
            return;
        };
        entry.waiting.retain(|waiter| waiter.id != self.id);
        if entry.waiting.is_empty() && entry.in_turns {
            entry.in_turns = false;
            state.turns.retain(|tenant| tenant != self.tenant);
        }
        state.forget_if_idle(
            self.tenant,
            Instant::now(),
            self.shared.cpu_budget,
            &self.shared.workers,
        );
    }
}

impl Drop for StopWaitingOnDrop<'_> {
    fn drop(&mut self) {
        self.leave_queue();
    }
}

/// One analysis worker held by a tenant; released (and the next waiting call served) when
/// dropped. What the analysis cost is charged with [`AnalysisSlot::charge`].
#[derive(Debug)]
pub(crate) struct AnalysisSlot {
    shared: Arc<Shared>,
    tenant: TenantId,
    /// The worker, as the mechanism counts it: given back first when the slot is dropped.
    worker: Option<ShareGuard<TenantId>>,
}

impl AnalysisSlot {
    fn new(shared: Arc<Shared>, tenant: TenantId, worker: ShareGuard<TenantId>) -> AnalysisSlot {
        AnalysisSlot {
            shared,
            tenant,
            worker: Some(worker),
        }
    }

    /// The tenant's analysis used `cpu`; `exhausted`: it used up its whole budget (CPU or
    /// wall-clock).
    pub(crate) fn charge(&self, cpu: Duration, exhausted: bool) {
        self.charge_at(cpu, exhausted, Instant::now());
    }

    fn charge_at(&self, cpu: Duration, exhausted: bool, now: Instant) {
        tracing::info!(
            tenant = %self.tenant,
            cpu_ms = cpu.as_millis() as u64,
            exhausted,
            "template analysis charged to its tenant"
        );
        let budget = self.shared.cpu_budget;
        let mut state = lock(&self.shared.state);
        let entry = state.tenant(&self.tenant, now);
        entry.cpu_debt = entry.debt(now) + cpu.as_secs_f64();
        entry.debt_at = now;
        if !exhausted {
            return;
        }
        if entry
            .last_exhaustion
            .is_some_and(|last| now.saturating_duration_since(last) >= EXHAUSTIONS_FORGOTTEN_AFTER)
        {
            entry.exhaustions = 0;
        }
        entry.exhaustions = entry.exhaustions.saturating_add(1);
        entry.last_exhaustion = Some(now);
        let backoff = exhaustion_backoff(budget, entry.exhaustions);
        entry.backoff_until = Some(now + backoff);
        tracing::info!(
            tenant = %self.tenant,
            exhaustions = entry.exhaustions,
            backoff_s = backoff.as_secs(),
            "a tenant's template analysis used up its CPU budget; its analyses are backed off"
        );
    }
}

impl Drop for AnalysisSlot {
    fn drop(&mut self) {
        drop(self.worker.take());
        {
            let now = Instant::now();
            let mut state = lock(&self.shared.state);
            state.forget_if_idle(
                &self.tenant,
                now,
                self.shared.cpu_budget,
                &self.shared.workers,
            );
        }
        AnalysisShares::dispatch(&self.shared);
    }
}

/// The backoff after a tenant's `exhaustions`-th exhausted analysis in a row: twice the
/// budget, doubling each time, at most [`BACKOFF_MAX`].
fn exhaustion_backoff(cpu_budget: Duration, exhaustions: u32) -> Duration {
    let doublings = exhaustions.saturating_sub(1).min(16);
    cpu_budget
        .saturating_mul(FIRST_BACKOFF_BUDGETS)
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap()
    }

    const WAIT: Duration = Duration::from_secs(2);
    const BUDGET: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_tenant_holds_its_share_of_the_workers_and_the_reserve_serves_the_others() {
        // Two workers: one kept for tenants holding none, so a tenant holds one.
        let share = AnalysisShares::new(2, BUDGET);
        let (hog, other) = (tenant("hog"), tenant("other"));
        let _first = share.acquire(&hog, WAIT).await.unwrap();
        let second = share.acquire(&hog, Duration::from_millis(20)).await;
        assert_eq!(second.unwrap_err(), Refusal::Busy);
        let _others = share
            .acquire(&other, Duration::from_millis(20))
            .await
            .unwrap();
        // Sixteen workers, eight kept: a tenant alone holds the other eight, and eight tenants
        // holding all they can leave one free.
        let share = AnalysisShares::new(16, BUDGET);
        let mut held = Vec::new();
        for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            while let Ok(slot) = share.acquire(&tenant(name), Duration::ZERO).await {
                held.push(slot);
            }
        }
        assert_eq!(
            held.len(),
            15,
            "the first alone took eight, the others one each"
        );
        let _bystander = share
            .acquire(&tenant("bystander"), Duration::ZERO)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_freed_worker_goes_to_the_waiting_tenants_in_turn() {
        let share = AnalysisShares::new(2, BUDGET);
        let (a, b) = (tenant("a"), tenant("b"));
        let held_a = share.acquire(&a, WAIT).await.unwrap();
        let held_b = share.acquire(&b, WAIT).await.unwrap();
        // Two more calls of a wait, then one of b: b's turn comes before a's second.
        let waiting_a1 = tokio::spawn({
            let (share, a) = (share.clone(), a.clone());
            async move { share.acquire(&a, WAIT).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        let waiting_b = tokio::spawn({
            let (share, b) = (share.clone(), b.clone());
            async move { share.acquire(&b, WAIT).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        drop(held_b);
        // b's waiting call takes b's freed worker (a is at its share); a's waits on.
        assert_eq!(waiting_b.await.unwrap(), Ok(()));
        drop(held_a);
        assert_eq!(waiting_a1.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_waiting_call_that_goes_away_leaves_no_trace() {
        let share = AnalysisShares::new(1, BUDGET);
        let a = tenant("a");
        let held = share.acquire(&a, WAIT).await.unwrap();
        let gone = tokio::spawn({
            let (share, a) = (share.clone(), a.clone());
            async move { share.acquire(&a, WAIT).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        let _again = share.acquire(&a, Duration::from_millis(20)).await.unwrap();
        assert_eq!(share.shared.workers.held(), 1);
        assert!(lock(&share.shared.state).tenants[&a].waiting.is_empty());
    }

    #[tokio::test]
    async fn an_exhausted_budget_backs_the_tenant_off_longer_each_time_up_to_the_bound() {
        let share = AnalysisShares::new(2, BUDGET);
        let (hog, other) = (tenant("hog"), tenant("other"));
        let now = Instant::now();
        let slot = share.acquire(&hog, WAIT).await.unwrap();
        slot.charge_at(BUDGET, true, now);
        drop(slot);
        let delay = share.check_backoff(&hog).unwrap_err();
        assert!(delay > BUDGET && delay <= 2 * BUDGET, "{delay:?}");
        let refused = share.acquire(&hog, WAIT).await.unwrap_err();
        assert!(
            matches!(refused, Refusal::Backoff(left) if left <= delay && left > BUDGET),
            "{refused:?}"
        );
        share.check_backoff(&other).unwrap();
        let expected: Vec<u64> = vec![10, 20, 40, 80, 160, 300, 300];
        let got: Vec<u64> = (1..=7)
            .map(|exhaustions| exhaustion_backoff(BUDGET, exhaustions).as_secs())
            .collect();
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn cpu_under_the_budget_is_charged_and_drains_at_the_tenants_share() {
        let share = AnalysisShares::new(2, BUDGET);
        let hog = tenant("hog");
        let start = Instant::now();
        let state = || lock(&share.shared.state);
        let slot = share.acquire(&hog, WAIT).await.unwrap();
        // Three analyses of 4.9 s each, back to back: 14.7 s of debt over a burst of 10 s.
        slot.charge_at(Duration::from_millis(4900), false, start);
        slot.charge_at(Duration::from_millis(4900), false, start);
        assert!(state().tenants[&hog].backoff(start, BUDGET).is_zero());
        slot.charge_at(Duration::from_millis(4900), false, start);
        let delay = state().tenants[&hog].backoff(start, BUDGET);
        assert!((9.3..9.5).contains(&delay.as_secs_f64()), "{delay:?}");
        // Drained at half a CPU second a second.
        let later = start + Duration::from_secs(10);
        assert!(state().tenants[&hog].backoff(later, BUDGET).is_zero());
        drop(slot);
    }
}
