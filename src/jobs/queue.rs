//! The bounded queue of jobs waiting for a worker, fair across tenants. Full means
//! RESOURCE_EXHAUSTED at the boundary, with a retry delay from the queue length and recent
//! throughput; a cancelled job leaves the queue at once; closing it (shutdown) hands the
//! waiting jobs back.
//!
//! Its capacity bounds every job waiting on this instance, not only renders: a job that
//! follows an identical render (of this instance or another) holds a [`FollowerSlot`] until
//! it ends. Otherwise identical submissions under new idempotency keys would be accepted
//! without bound, each a job record, a watcher's worth of updates and a shared record. What
//! counts: queued renders + followers that have not ended. What does not: renders running
//! on a worker (bounded by `--workers`) and jobs reusing a finished output (they end at once).
//!
//! Fair share: each tenant has its own FIFO, and a worker takes the next job of the tenant
//! served least recently (a tenant that has not been served since it last had no job at
//! all goes first; ties go to the job queued first). So tenants with waiting jobs take
//! turns, and one tenant's backlog of a thousand jobs delays another tenant's job by at
//! most one job per busy worker. With one tenant this is the plain FIFO. Inside the global
//! capacity each tenant may have at most `tenant_max_jobs` jobs queued, following or
//! running at once; a running job holds its tenant's slot until its [`StartedJob`] is
//! dropped.

use crate::auth::TenantId;
use crate::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use uuid::Uuid;

#[derive(Debug)]
pub struct RenderQueue {
    capacity: usize,
    /// Jobs one tenant may have queued, following or running at once; none: only the
    /// global capacity applies.
    tenant_max_jobs: Option<usize>,
    state: Mutex<QueueState>,
    available: Notify,
}

/// A job to queue: its id, its tenant and the wall-clock limit of its render (which bounds
/// when its tenant's slot frees once it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueuedJob {
    pub id: Uuid,
    pub tenant: TenantId,
    pub deadline: Duration,
}

#[derive(Debug)]
struct Waiting {
    /// Order of arrival, across tenants (ties between tenants go to the older job).
    sequence: u64,
    id: Uuid,
    deadline: Duration,
}

#[derive(Debug)]
struct Running {
    tenant: TenantId,
    started: Instant,
    deadline: Duration,
}

/// What one tenant holds of the queue, and when it was last served.
#[derive(Debug, Default)]
struct TenantJobs {
    queued: usize,
    followers: usize,
    running: usize,
    /// The pop that last took one of its jobs (0: not since it last held nothing).
    last_served: u64,
}

impl TenantJobs {
    fn holds(&self) -> usize {
        self.queued + self.followers + self.running
    }
}

#[derive(Debug, Default)]
struct QueueState {
    /// Waiting jobs, one FIFO per tenant; a tenant without waiting jobs has no entry.
    waiting: HashMap<TenantId, VecDeque<Waiting>>,
    /// Every tenant holding a job (queued, following or running); dropped when it holds none,
    /// so the map is bounded by the jobs on this instance.
    tenants: HashMap<TenantId, TenantJobs>,
    running: HashMap<Uuid, Running>,
    /// Jobs waiting, all tenants.
    queued: usize,
    /// Jobs following a render that holds their slot ([`FollowerSlot`]).
    followers: usize,
    pushes: u64,
    pops: u64,
    closed: bool,
}

impl QueueState {
    fn waiting(&self) -> usize {
        self.queued + self.followers
    }

    /// Refusal of one more job of `tenant`, if any.
    fn refusal(
        &self,
        tenant: &TenantId,
        capacity: usize,
        tenant_max_jobs: Option<usize>,
    ) -> Option<PushRefused> {
        if self.closed {
            return Some(PushRefused::Closed);
        }
        let held = self.tenants.get(tenant).map_or(0, TenantJobs::holds);
        if let Some(limit) = tenant_max_jobs {
            if held >= limit {
                return Some(PushRefused::TenantFull { held, limit });
            }
        }
        if self.waiting() >= capacity {
            return Some(PushRefused::Full {
                length: self.waiting(),
            });
        }
        None
    }

    fn tenant(&mut self, tenant: &TenantId) -> &mut TenantJobs {
        self.tenants.entry(tenant.clone()).or_default()
    }

    /// Forgets `tenant` once it holds nothing (its turn starts afresh next time).
    fn release(&mut self, tenant: &TenantId, change: impl FnOnce(&mut TenantJobs)) {
        if let Some(jobs) = self.tenants.get_mut(tenant) {
            change(jobs);
            if jobs.holds() == 0 {
                self.tenants.remove(tenant);
            }
        }
    }

    /// The next job by the fair order: the waiting tenant served least recently, then the
    /// older head job.
    fn take_next(&mut self) -> Option<(TenantId, Waiting)> {
        let tenant = self
            .waiting
            .iter()
            .filter_map(|(tenant, jobs)| {
                let head = jobs.front()?;
                let served = self.tenants.get(tenant).map_or(0, |jobs| jobs.last_served);
                Some(((served, head.sequence), tenant))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, tenant)| tenant.clone())?;
        let jobs = self.waiting.get_mut(&tenant)?;
        let job = jobs.pop_front()?;
        if jobs.is_empty() {
            self.waiting.remove(&tenant);
        }
        self.queued -= 1;
        self.pops += 1;
        let pops = self.pops;
        let jobs = self.tenant(&tenant);
        jobs.queued = jobs.queued.saturating_sub(1);
        jobs.running += 1;
        jobs.last_served = pops;
        Some((tenant, job))
    }
}

/// A follower's place in the queue's capacity (and its tenant's), given back when dropped.
#[derive(Debug)]
pub(crate) struct FollowerSlot {
    queue: Arc<RenderQueue>,
    tenant: TenantId,
}

impl FollowerSlot {
    /// A slot for a job of `tenant` that follows a render, unless the queue (or the tenant's
    /// share) is full or the queue closed.
    pub(crate) fn take(
        queue: &Arc<RenderQueue>,
        tenant: &TenantId,
    ) -> Result<FollowerSlot, PushRefused> {
        let mut state = lock(&queue.state);
        if let Some(refused) = state.refusal(tenant, queue.capacity, queue.tenant_max_jobs) {
            return Err(refused);
        }
        state.followers += 1;
        state.tenant(tenant).followers += 1;
        Ok(FollowerSlot {
            queue: queue.clone(),
            tenant: tenant.clone(),
        })
    }
}

impl Drop for FollowerSlot {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        state.followers = state.followers.saturating_sub(1);
        state.release(&self.tenant, |jobs| {
            jobs.followers = jobs.followers.saturating_sub(1)
        });
    }
}

/// A job a worker took from the queue; its tenant's slot is held until this is dropped (the
/// job ended).
#[derive(Debug)]
pub(crate) struct StartedJob {
    pub id: Uuid,
    queue: Arc<RenderQueue>,
}

impl Drop for StartedJob {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        if let Some(running) = state.running.remove(&self.id) {
            state.release(&running.tenant, |jobs| {
                jobs.running = jobs.running.saturating_sub(1)
            });
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushRefused {
    /// The queue holds `capacity` jobs already.
    Full { length: usize },
    /// The job's tenant holds its share already (`held` jobs queued, following or running).
    TenantFull { held: usize, limit: usize },
    /// The server is shutting down.
    Closed,
    /// The jobs kept (of the tenant, or of the instance) are at their bound and none of them
    /// has ended, so none can be forgotten to make room ([`super::retention`]).
    RetainedJobsFull(super::retention::RetainedFull),
}

/// What a tenant holds now, for estimating when one of its slots frees.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TenantLoad {
    /// Its running jobs: how long each has run and its deadline.
    pub running: Vec<(Duration, Duration)>,
    /// Tenants with jobs waiting (this one included when it has any).
    pub tenants_waiting: usize,
}

impl TenantLoad {
    /// When a slot of this tenant likely frees, given the recent average job duration and the
    /// number of workers. With a job running: the soonest end among its running jobs, each
    /// expected to take the average and certain to end by its deadline (a job past the
    /// average is due any moment: zero here, the caller's floor applies). With none running
    /// (its slots are queued or following jobs): the workers go round the tenants with
    /// waiting jobs, so its first job starts within one turn of each, and then runs for
    /// the average.
    pub(crate) fn slot_frees_in(&self, average: Duration, workers: usize) -> Duration {
        let soonest = self
            .running
            .iter()
            .map(|&(elapsed, deadline)| {
                average
                    .saturating_sub(elapsed)
                    .min(deadline.saturating_sub(elapsed))
            })
            .min();
        soonest.unwrap_or_else(|| {
            let turns = self.tenants_waiting.max(1).div_ceil(workers.max(1));
            average.saturating_mul(u32::try_from(turns).unwrap_or(u32::MAX).saturating_add(1))
        })
    }
}

impl RenderQueue {
    pub(crate) fn new(capacity: usize) -> RenderQueue {
        RenderQueue {
            capacity,
            tenant_max_jobs: None,
            state: Mutex::new(QueueState::default()),
            available: Notify::new(),
        }
    }

    /// The same queue with at most `limit` jobs of one tenant queued, following or running.
    pub(crate) fn with_tenant_limit(self, limit: Option<usize>) -> RenderQueue {
        RenderQueue {
            tenant_max_jobs: limit,
            ..self
        }
    }

    /// Queues `job` at the end of its tenant's FIFO; answers the number of jobs waiting.
    pub(crate) fn try_push(&self, job: QueuedJob) -> Result<usize, PushRefused> {
        let mut state = lock(&self.state);
        if let Some(refused) = state.refusal(&job.tenant, self.capacity, self.tenant_max_jobs) {
            return Err(refused);
        }
        state.pushes += 1;
        let sequence = state.pushes;
        state.tenant(&job.tenant).queued += 1;
        state.queued += 1;
        state
            .waiting
            .entry(job.tenant)
            .or_default()
            .push_back(Waiting {
                sequence,
                id: job.id,
                deadline: job.deadline,
            });
        let length = state.queued;
        drop(state);
        self.available.notify_one();
        Ok(length)
    }

    /// The next job by the fair order, waiting for one; `None` once the queue is closed.
    pub(crate) async fn pop(self: &Arc<Self>) -> Option<StartedJob> {
        loop {
            // Registered before looking, so a push between the look and the wait is not lost.
            let notified = self.available.notified();
            {
                let mut state = lock(&self.state);
                if state.closed {
                    return None;
                }
                if let Some((tenant, job)) = state.take_next() {
                    state.running.insert(
                        job.id,
                        Running {
                            tenant,
                            started: Instant::now(),
                            deadline: job.deadline,
                        },
                    );
                    return Some(StartedJob {
                        id: job.id,
                        queue: self.clone(),
                    });
                }
            }
            notified.await;
        }
    }

    /// Takes a waiting job out (cancel); false when it was not waiting.
    pub(crate) fn remove(&self, job: Uuid) -> bool {
        let mut state = lock(&self.state);
        let found = state.waiting.iter_mut().find_map(|(tenant, jobs)| {
            let position = jobs.iter().position(|waiting| waiting.id == job)?;
            jobs.remove(position);
            Some((tenant.clone(), jobs.is_empty()))
        });
        let Some((tenant, emptied)) = found else {
            return false;
        };
        if emptied {
            state.waiting.remove(&tenant);
        }
        state.queued -= 1;
        state.release(&tenant, |jobs| jobs.queued = jobs.queued.saturating_sub(1));
        true
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.state).queued
    }

    /// Whether the queue was closed (the server is shutting down).
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Jobs following a render, holding a slot.
    pub fn followers(&self) -> usize {
        lock(&self.state).followers
    }

    /// Jobs `tenant` holds: queued, following or running.
    pub(crate) fn tenant_jobs(&self, tenant: &TenantId) -> usize {
        lock(&self.state)
            .tenants
            .get(tenant)
            .map_or(0, TenantJobs::holds)
    }

    /// The per-tenant limit, if any.
    pub fn tenant_max_jobs(&self) -> Option<usize> {
        self.tenant_max_jobs
    }

    /// What `tenant` holds now (for the retry delay of a refusal).
    pub(crate) fn tenant_load(&self, tenant: &TenantId) -> TenantLoad {
        let state = lock(&self.state);
        let now = Instant::now();
        TenantLoad {
            running: state
                .running
                .values()
                .filter(|running| &running.tenant == tenant)
                .map(|running| (now.duration_since(running.started), running.deadline))
                .collect(),
            tenants_waiting: state.waiting.len(),
        }
    }

    /// Whether a new job would be refused for want of room (readiness reads it).
    pub(crate) fn is_full(&self) -> bool {
        lock(&self.state).waiting() >= self.capacity
    }

    /// Refuses new jobs, wakes every waiting worker loop and answers the jobs left waiting.
    pub(crate) fn close(&self) -> Vec<Uuid> {
        let mut state = lock(&self.state);
        state.closed = true;
        let mut left: Vec<Waiting> = state.waiting.drain().flat_map(|(_, jobs)| jobs).collect();
        left.sort_by_key(|waiting| waiting.sequence);
        state.queued = 0;
        for jobs in state.tenants.values_mut() {
            jobs.queued = 0;
        }
        state.tenants.retain(|_, jobs| jobs.holds() > 0);
        drop(state);
        self.available.notify_waiters();
        left.into_iter().map(|waiting| waiting.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(30);

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap()
    }

    fn job(id: Uuid, of: &str) -> QueuedJob {
        QueuedJob {
            id,
            tenant: tenant(of),
            deadline: DEADLINE,
        }
    }

    fn of_default(id: Uuid) -> QueuedJob {
        job(id, "default")
    }

    /// Pushes one job per name (a job of the tenant before the dash: `a-1` is tenant `a`'s)
    /// and answers the names by id.
    fn push_all(queue: &RenderQueue, names: &[&'static str]) -> HashMap<Uuid, &'static str> {
        names
            .iter()
            .map(|name| {
                let id = Uuid::new_v4();
                let (owner, _) = name.split_once('-').unwrap();
                queue.try_push(job(id, owner)).unwrap();
                (id, *name)
            })
            .collect()
    }

    /// The next `count` jobs by name, each ended as soon as it is taken.
    async fn pop_names(
        queue: &Arc<RenderQueue>,
        names: &HashMap<Uuid, &'static str>,
        count: usize,
    ) -> Vec<&'static str> {
        let mut order = Vec::new();
        for _ in 0..count {
            let started = queue.pop().await.unwrap();
            order.push(names[&started.id]);
        }
        order
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_closed_one_hands_back_what_waits() {
        let queue = Arc::new(RenderQueue::new(2));
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(queue.try_push(of_default(a)), Ok(1));
        assert_eq!(queue.try_push(of_default(b)), Ok(2));
        assert_eq!(
            queue.try_push(of_default(c)),
            Err(PushRefused::Full { length: 2 })
        );
        assert!(queue.is_full());
        assert_eq!(queue.pop().await.map(|job| job.id), Some(a));
        assert!(!queue.is_full());
        assert!(queue.remove(b));
        assert!(!queue.remove(b));
        assert_eq!(queue.try_push(of_default(c)), Ok(1));
        assert_eq!(queue.close(), vec![c]);
        assert!(queue.pop().await.is_none());
        assert_eq!(queue.try_push(of_default(a)), Err(PushRefused::Closed));
    }

    #[test]
    fn followers_take_the_capacity_renders_would_and_give_it_back_when_they_end() {
        let queue = Arc::new(RenderQueue::new(2));
        let default = tenant("default");
        let follower = FollowerSlot::take(&queue, &default).unwrap();
        assert_eq!(queue.try_push(of_default(Uuid::new_v4())), Ok(1));
        assert_eq!(
            FollowerSlot::take(&queue, &default).unwrap_err(),
            PushRefused::Full { length: 2 }
        );
        assert_eq!(
            queue.try_push(of_default(Uuid::new_v4())),
            Err(PushRefused::Full { length: 2 })
        );
        drop(follower);
        assert_eq!(queue.followers(), 0);
        let _again = FollowerSlot::take(&queue, &default).unwrap();
    }

    #[tokio::test]
    async fn a_waiting_pop_wakes_on_push_and_on_close() {
        let queue = Arc::new(RenderQueue::new(4));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move {
                let first = queue.pop().await.map(|job| job.id);
                (first, queue.pop().await.map(|job| job.id))
            }
        });
        tokio::task::yield_now().await;
        let job = Uuid::new_v4();
        queue.try_push(of_default(job)).unwrap();
        tokio::task::yield_now().await;
        queue.close();
        assert_eq!(waiter.await.unwrap(), (Some(job), None));
    }

    #[tokio::test]
    async fn tenants_with_waiting_jobs_take_turns() {
        let queue = Arc::new(RenderQueue::new(64));
        let names = push_all(
            &queue,
            &["a-1", "a-2", "a-3", "b-1", "c-1", "c-2", "a-4", "b-2"],
        );
        assert_eq!(
            pop_names(&queue, &names, 8).await,
            ["a-1", "b-1", "c-1", "a-2", "b-2", "c-2", "a-3", "a-4"]
        );
    }

    #[tokio::test]
    async fn one_job_of_a_new_tenant_runs_next_even_behind_a_thousand_of_another() {
        let queue = Arc::new(RenderQueue::new(2000));
        let backlog: Vec<&'static str> = vec!["a-backlog"; 1000];
        let mut names = push_all(&queue, &backlog);
        let first = queue.pop().await.unwrap();
        assert_eq!(names[&first.id], "a-backlog");
        names.extend(push_all(&queue, &["b-single"]));
        assert_eq!(
            pop_names(&queue, &names, 3).await,
            ["b-single", "a-backlog", "a-backlog"]
        );
        // Even before any of the backlog ran: the new tenant is second, not 1001st.
        let queue = Arc::new(RenderQueue::new(2000));
        let mut names = push_all(&queue, &backlog);
        names.extend(push_all(&queue, &["b-single"]));
        assert_eq!(
            pop_names(&queue, &names, 2).await,
            ["a-backlog", "b-single"]
        );
    }

    #[tokio::test]
    async fn with_one_tenant_the_order_is_first_in_first_out() {
        let queue = Arc::new(RenderQueue::new(8));
        let names = push_all(&queue, &["a-1", "a-2", "a-3"]);
        let removed = names.iter().find(|(_, name)| **name == "a-2").unwrap().0;
        assert!(queue.remove(*removed));
        let mut names = names;
        names.extend(push_all(&queue, &["a-4"]));
        assert_eq!(pop_names(&queue, &names, 3).await, ["a-1", "a-3", "a-4"]);
    }

    #[tokio::test]
    async fn a_tenant_holds_queued_following_and_running_jobs_against_its_share_only() {
        let queue = Arc::new(RenderQueue::new(8).with_tenant_limit(Some(3)));
        let (a, b) = (tenant("a"), tenant("b"));
        let follower = FollowerSlot::take(&queue, &a).unwrap();
        queue.try_push(job(Uuid::new_v4(), "a")).unwrap();
        queue.try_push(job(Uuid::new_v4(), "a")).unwrap();
        let full = PushRefused::TenantFull { held: 3, limit: 3 };
        assert_eq!(queue.try_push(job(Uuid::new_v4(), "a")), Err(full));
        assert_eq!(FollowerSlot::take(&queue, &a).unwrap_err(), full);
        // Another tenant is not refused for it.
        queue.try_push(job(Uuid::new_v4(), "b")).unwrap();
        // A running job still holds its slot; it frees when the job ends.
        let running = queue.pop().await.unwrap();
        assert_eq!(queue.tenant_jobs(&a), 3);
        assert_eq!(queue.tenant_load(&a).running.len(), 1);
        assert_eq!(queue.try_push(job(Uuid::new_v4(), "a")), Err(full));
        drop(running);
        assert_eq!(queue.tenant_jobs(&a), 2);
        queue.try_push(job(Uuid::new_v4(), "a")).unwrap();
        drop(follower);
        assert_eq!(queue.tenant_jobs(&a), 2);
        assert_eq!(queue.tenant_jobs(&b), 1);
        // Everything handed back: nothing of either tenant is remembered.
        queue.close();
        assert_eq!(queue.tenant_jobs(&a), 0);
        assert!(lock(&queue.state).tenants.is_empty());
    }

    #[test]
    fn a_tenant_slot_frees_at_the_soonest_expected_end_of_its_running_jobs() {
        let second = Duration::from_secs(1);
        let average = 10 * second;
        for (case, running, tenants_waiting, workers, expected) in [
            (
                "one job 4 s in",
                vec![(4 * second, 60 * second)],
                1,
                1,
                6 * second,
            ),
            (
                "the soonest of two",
                vec![(2 * second, 60 * second), (9 * second, 60 * second)],
                0,
                2,
                second,
            ),
            (
                "its deadline is nearer",
                vec![(4 * second, 5 * second)],
                0,
                1,
                second,
            ),
            (
                "past the average",
                vec![(30 * second, 60 * second)],
                0,
                1,
                Duration::ZERO,
            ),
            ("nothing running, alone", vec![], 1, 1, 20 * second),
            (
                "nothing running, 3 tenants, 2 workers",
                vec![],
                3,
                2,
                30 * second,
            ),
        ] {
            let load = TenantLoad {
                running,
                tenants_waiting,
            };
            assert_eq!(load.slot_frees_in(average, workers), expected, "{case}");
        }
    }
}
