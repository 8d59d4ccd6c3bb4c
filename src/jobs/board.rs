//! The table of jobs: the current snapshot of each, the work it stands for, its cancel token,
//! and, while someone watches a job that has not ended, a broadcast of its changes so
//! WatchRenderJob can follow it (made by the first watcher, dropped once nobody listens or
//! the job ends: a watcher of an ended job reads its final snapshot), and each tenant's jobs
//! in the order ListRenderJobs answers them ([`listing`]). Snapshots are cheap clones; every
//! critical section is a map operation or a bounded walk (no I/O under the lock).
//!
//! The jobs kept are bounded per tenant and per instance ([`super::retention`]): a new job
//! that would go over makes the oldest ended job go first (handed to the scheduler, which
//! removes its output), or is refused when none has ended.
//!
//! Render de-duplication lives here too, because it must be decided atomically with the
//! insertion: the board indexes the job rendering (or having rendered) each fingerprint, and a
//! new job with that fingerprint either follows the running one (its snapshot mirrors the
//! leader's progress and outcome) or starts from the succeeded one's output. A follower
//! takes a slot of the queue's capacity ([`FollowerSlot`]) when it joins and gives it back
//! when it ends, so followers count against admission like queued renders.

use super::listing::ListPosition;
use super::model::{Job, JobFailure, JobState, RenderWork};
use super::queue::{FollowerSlot, PushRefused, RenderQueue};
use super::retention::{RetainedJobs, RetentionLimits};
use super::Fingerprint;
use crate::auth::TenantId;
use crate::metrics::Metrics;
use crate::sandbox::CancelToken;
use crate::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;
use uuid::Uuid;

mod entries;
mod forgetting;
mod listing;
mod mirroring;

use entries::{entry_bytes, BoardState, Entry, WATCH_BACKLOG};
pub(crate) use forgetting::Forgetting;
pub(crate) use mirroring::mirror;

#[derive(Default)]
pub(crate) struct JobBoard {
    state: Mutex<BoardState>,
    /// Every new snapshot goes here too when jobs are shared with other instances (Redis).
    replication: Option<tokio::sync::mpsc::UnboundedSender<Replication>>,
    /// The queue whose capacity followers count against (none: followers are not counted).
    admission: Option<Arc<RenderQueue>>,
    /// Where the jobs kept and evicted are counted.
    metrics: Option<Arc<Metrics>>,
    /// Jobs evicted here whose shared records are not removed yet.
    forgetting: Forgetting,
    /// Every new snapshot of a job with a webhook goes here too, for the webhooks'
    /// announcer ([`crate::webhooks::dispatch`]).
    announcements: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
}

/// What the board (and the scheduler) hand to the task that writes shared records, in order.
#[derive(Debug)]
pub(crate) enum Replication {
    /// A job's new snapshot.
    Snapshot(Box<Job>),
    /// A fingerprint to quarantine for every instance.
    Quarantine(Fingerprint),
    /// A job evicted here ([`super::retention`]) of this tenant at this place in its
    /// listing order: its record goes too, and its place in the tenant's index.
    Forget(TenantId, ListPosition),
    /// Answered once everything sent before has been written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl std::fmt::Debug for JobBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBoard")
            .field("jobs", &lock(&self.state).entries.len())
            .finish()
    }
}

/// How a new job was admitted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// No job renders its fingerprint: it must be queued (it leads from now on).
    Leads,
    /// It follows the render of this (queued or running) job.
    Follows(Uuid),
    /// This job has rendered the same fingerprint: its output can be reused.
    Reuses(Box<Job>),
    /// It would follow a render, but the queue has no slot for it; it is not kept.
    Refused(PushRefused),
}

/// The error of a follower whose leader was cancelled by its own caller.
impl JobBoard {
    /// A board whose every snapshot is also sent to `replication` (in order).
    pub(crate) fn replicated(
        replication: tokio::sync::mpsc::UnboundedSender<Replication>,
    ) -> JobBoard {
        JobBoard {
            state: Mutex::default(),
            replication: Some(replication),
            admission: None,
            metrics: None,
            forgetting: Forgetting::default(),
            announcements: None,
        }
    }

    /// The jobs evicted here whose shared records are not removed yet (the writer of the
    /// shared records says when it has).
    pub(crate) fn forgetting(&self) -> &Forgetting {
        &self.forgetting
    }

    /// The same board, keeping jobs within `limits` and counting them in `metrics`.
    pub(crate) fn retaining(self, limits: RetentionLimits, metrics: Arc<Metrics>) -> JobBoard {
        lock(&self.state).retained = RetainedJobs::new(limits);
        JobBoard {
            metrics: Some(metrics),
            ..self
        }
    }

    /// The jobs evicted since the last call (their outputs are to be removed; with shared
    /// jobs their records are removed already).
    pub(crate) fn take_evicted(&self) -> Vec<Job> {
        std::mem::take(&mut lock(&self.state).evicted)
    }

    /// Jobs kept now, and their bytes.
    #[cfg(test)]
    pub fn retained(&self) -> super::retention::Usage {
        lock(&self.state).retained.total()
    }

    /// Tells the metrics (and, with shared jobs, the records) what the last change kept and
    /// evicted; under the lock, so that the gauges and the order of records follow it.
    fn account(&self, state: &mut BoardState, evicted_before: usize) {
        let evicted = &state.evicted[evicted_before.min(state.evicted.len())..];
        if let Some(replication) = &self.replication {
            for job in evicted {
                // Before the forget is sent: the writer may do it at once.
                self.forgetting.add(job.id);
                let forgotten = Replication::Forget(job.tenant.clone(), ListPosition::of(job));
                let _ = replication.send(forgotten);
            }
        }
        if let Some(metrics) = &self.metrics {
            let total = state.retained.total();
            metrics.jobs_retained.set(total.jobs as i64);
            metrics.jobs_retained_bytes.set(total.bytes as i64);
            metrics.jobs_evicted.inc_by(evicted.len() as u64);
        }
    }

    /// The same board, with followers counted against `queue`'s capacity.
    pub(crate) fn counting_followers_in(self, queue: Arc<RenderQueue>) -> JobBoard {
        JobBoard {
            admission: Some(queue),
            ..self
        }
    }

    /// A slot of `tenant` for a new follower (always, when followers are not counted).
    fn follower_slot(&self, tenant: &TenantId) -> Result<Option<FollowerSlot>, PushRefused> {
        self.admission
            .as_ref()
            .map(|queue| FollowerSlot::take(queue, tenant))
            .transpose()
    }

    /// After `changed` snapshots were published under the lock (`state` is its guard):
    /// their sizes refreshed, the accounting updated (nothing was evicted), and each queued
    /// for the shared records before the lock goes: a watcher woken by the change reads the
    /// board (takes this lock) before it answers, so a flush it asks for then comes after
    /// this snapshot (a cancel answered by this instance flushes, and the other instances
    /// must read what it answered).
    fn settle_changed(&self, state: &mut BoardState, changed: &[Job]) {
        for job in changed {
            state.refresh(job.id);
        }
        let nothing_evicted = state.evicted.len();
        self.account(state, nothing_evicted);
        for job in changed {
            self.replicate(job);
        }
    }

    /// The board that also sends every new snapshot of a job with a webhook to
    /// `announcements`.
    pub(crate) fn announcing(
        self,
        announcements: tokio::sync::mpsc::UnboundedSender<Job>,
    ) -> JobBoard {
        JobBoard {
            announcements: Some(announcements),
            ..self
        }
    }

    /// Tells the webhooks' announcer of `job`'s new snapshot when it has a webhook and has
    /// left the queue. Every snapshot the board publishes comes here ([`JobBoard::replicate`]);
    /// so does a snapshot written to the shared records without the board (a job cancelled
    /// while it waited in the shared queue).
    pub(crate) fn announce(&self, job: &Job) {
        if let (Some(announcements), Some(_)) = (&self.announcements, &job.notify) {
            if job.state != JobState::Queued {
                // The announcer lives as long as the server, as the replication task.
                let _ = announcements.send(job.clone());
            }
        }
    }

    /// A job's new snapshot goes to the shared records and to the webhooks' announcer
    /// (every path that publishes a snapshot ends here).
    fn replicate(&self, job: &Job) {
        self.announce(job);
        if let Some(replication) = &self.replication {
            // The receiver lives as long as the server; after it, nobody needs the copy.
            let _ = replication.send(Replication::Snapshot(Box::new(job.clone())));
        }
    }

    /// Adds `job`, deciding atomically whether it renders, follows a running render of its
    /// fingerprint, or may reuse a succeeded one. A job that follows is inserted already
    /// (mirroring its leader); the others are inserted by [`JobBoard::insert`].
    /// A follower counts against its tenant's share of the queue.
    pub(crate) fn admit(&self, job: &Job, work: &Arc<RenderWork>) -> Admission {
        let Some(admission) = self.admit_locally(job, work, true) else {
            // Never: a job that may lead is always admitted one way or another.
            return Admission::Leads;
        };
        match &admission {
            Admission::Leads | Admission::Follows(_) => {
                if let Some(job) = self.get(job.id) {
                    self.replicate(&job);
                }
            }
            Admission::Reuses(_) | Admission::Refused(_) => {}
        }
        admission
    }

    /// Adds `job` as [`JobBoard::admit`] does if a render of its fingerprint is live or has
    /// succeeded here; `None` (nothing added) when none is: the caller leads elsewhere (the
    /// shared queue).
    pub(crate) fn admit_following(&self, job: &Job, work: &Arc<RenderWork>) -> Option<Admission> {
        let admission = self.admit_locally(job, work, false)?;
        if let Admission::Follows(_) = admission {
            if let Some(job) = self.get(job.id) {
                self.replicate(&job);
            }
        }
        Some(admission)
    }

    /// Adds `job`, taken from the shared queue, as the render of its fingerprint on this
    /// instance (its snapshot is already shared: nothing is replicated until it changes).
    /// It was accepted already, so it is kept even over the bounds.
    pub(crate) fn adopt(&self, job: Job, work: Arc<RenderWork>) {
        let mut state = lock(&self.state);
        let evicted_before = state.evicted.len();
        state.renders.insert(job.fingerprint.clone(), job.id);
        // Never refused with `must`.
        let _ = state.put(Entry::new(job, work, None), true);
        self.account(&mut state, evicted_before);
    }

    fn admit_locally(
        &self,
        job: &Job,
        work: &Arc<RenderWork>,
        may_lead: bool,
    ) -> Option<Admission> {
        let mut state = lock(&self.state);
        let evicted_before = state.evicted.len();
        let admission = self.admit_locked(&mut state, job, work, may_lead);
        self.account(&mut state, evicted_before);
        admission
    }

    fn admit_locked(
        &self,
        state: &mut BoardState,
        job: &Job,
        work: &Arc<RenderWork>,
        may_lead: bool,
    ) -> Option<Admission> {
        let leader = state
            .renders
            .get(&job.fingerprint)
            .and_then(|id| state.entries.get(id))
            .map(|entry| entry.job.clone());
        Some(match leader {
            Some(leader) if leader.state == JobState::Succeeded => {
                Admission::Reuses(Box::new(leader))
            }
            Some(leader) if !leader.state.is_terminal() => {
                let mut follower = job.clone();
                mirror(&mut follower, &leader);
                let mut entry = Entry::new(follower, work.clone(), Some(leader.id));
                // Room first: a refused follower must not hold a slot.
                let bytes = entry_bytes(&entry);
                if let Err(refused) = state.make_room(&job.tenant, bytes, false) {
                    return Some(Admission::Refused(refused));
                }
                entry.slot = match self.follower_slot(&job.tenant) {
                    Ok(slot) => slot,
                    Err(refused) => return Some(Admission::Refused(refused)),
                };
                if let Err(refused) = state.put(entry, false) {
                    return Some(Admission::Refused(refused));
                }
                if let Some(entry) = state.entries.get_mut(&leader.id) {
                    entry.followers.push(job.id);
                }
                state.refresh(leader.id);
                Admission::Follows(leader.id)
            }
            _ if !may_lead => return None,
            _ => {
                let entry = Entry::new(job.clone(), work.clone(), None);
                if let Err(refused) = state.put(entry, false) {
                    return Some(Admission::Refused(refused));
                }
                state.renders.insert(job.fingerprint.clone(), job.id);
                Admission::Leads
            }
        })
    }

    /// Adds a job outside de-duplication (a job reusing an output), unless the jobs kept
    /// are at their bound with none ended.
    pub(crate) fn insert(&self, job: Job, work: Arc<RenderWork>) -> Result<(), PushRefused> {
        let mut state = lock(&self.state);
        let evicted_before = state.evicted.len();
        let put = state.put(Entry::new(job.clone(), work, None), false);
        if put.is_ok() {
            // The newest reuse stands for the render from now on: it is the last of them in
            // the eviction order, so evicting the oldest jobs never forgets the output of a
            // request that is still being reused (only one that is no longer is rendered
            // again).
            let named = state
                .renders
                .get(&job.fingerprint)
                .and_then(|id| state.entries.get(id));
            if job.state == JobState::Succeeded
                && named.is_none_or(|entry| entry.job.state == JobState::Succeeded)
            {
                state.renders.insert(job.fingerprint.clone(), job.id);
            }
            // Under the lock, as in `update`: its record comes after the evictions'.
            self.replicate(&job);
        }
        self.account(&mut state, evicted_before);
        put
    }

    /// Adds a job that follows the render of `leader`, a job of another instance, unless
    /// the queue has no slot for it.
    pub(crate) fn insert_following(
        &self,
        job: Job,
        work: Arc<RenderWork>,
        leader: Uuid,
    ) -> Result<(), PushRefused> {
        let mut state = lock(&self.state);
        let evicted_before = state.evicted.len();
        let mut entry = Entry::new(job.clone(), work, Some(leader));
        let made_room = state.make_room(&job.tenant, entry_bytes(&entry), false);
        let put = made_room.and_then(|()| {
            entry.slot = self.follower_slot(&job.tenant)?;
            state.put(entry, false)
        });
        if put.is_ok() {
            self.replicate(&job);
        }
        self.account(&mut state, evicted_before);
        put
    }

    /// Removes a job the queue refused, or that this instance no longer renders (its
    /// fingerprint is free again here); jobs that joined it meanwhile end in state `end` with
    /// `failure`.
    pub(crate) fn remove_refused(
        &self,
        id: Uuid,
        end: JobState,
        failure: &JobFailure,
    ) -> Option<Job> {
        let mut ended = Vec::new();
        let removed = {
            let mut state = lock(&self.state);
            let followers = state.entries.get(&id)?.followers.clone();
            let removed = state.forget(id)?;
            for follower in &followers {
                if let Some(follower) = state.entries.get_mut(follower) {
                    follower.leader = None;
                    if !follower.job.state.is_terminal() {
                        follower.job.finish(end, Some(failure.clone()));
                        follower.publish();
                        ended.push(follower.job.clone());
                    }
                }
            }
            self.settle_changed(&mut state, &ended);
            removed
        };
        Some(removed)
    }

    /// Forgets a succeeded render whose output turned out to be gone, so the fingerprint
    /// renders again.
    pub(crate) fn forget_render(&self, fingerprint: &Fingerprint, id: Uuid) {
        let mut state = lock(&self.state);
        if state.renders.get(fingerprint) == Some(&id) {
            state.renders.remove(fingerprint);
        }
    }

    /// The job that renders `fingerprint` here (queued or running) or stands for its
    /// succeeded render (the render or its newest reuse), if any.
    pub(crate) fn render_of(&self, fingerprint: &Fingerprint) -> Option<Uuid> {
        let state = lock(&self.state);
        let id = *state.renders.get(fingerprint)?;
        state
            .entries
            .get(&id)
            .filter(|entry| !matches!(entry.job.state, JobState::Failed | JobState::Cancelled))
            .map(|_| id)
    }

    pub(crate) fn get(&self, id: Uuid) -> Option<Job> {
        lock(&self.state)
            .entries
            .get(&id)
            .map(|entry| entry.job.clone())
    }

    /// The current snapshot and a receiver of every later change (closed at once for a job
    /// that has ended: its snapshot is final).
    pub(crate) fn subscribe(&self, id: Uuid) -> Option<(Job, broadcast::Receiver<Job>)> {
        let mut state = lock(&self.state);
        let entry = state.entries.get_mut(&id)?;
        let changes = if entry.job.state.is_terminal() {
            broadcast::channel(1).1
        } else {
            entry
                .changes
                .get_or_insert_with(|| broadcast::channel(WATCH_BACKLOG).0)
                .subscribe()
        };
        Some((entry.job.clone(), changes))
    }

    /// What a job that has not ended renders, and its cancel token.
    pub(crate) fn work(&self, id: Uuid) -> Option<(Arc<RenderWork>, CancelToken)> {
        lock(&self.state)
            .entries
            .get(&id)
            .and_then(|entry| Some((entry.work.clone()?, entry.cancel.clone())))
    }

    /// The jobs following `id`'s render.
    pub(crate) fn followers(&self, id: Uuid) -> Vec<Uuid> {
        lock(&self.state)
            .entries
            .get(&id)
            .map(|entry| entry.followers.clone())
            .unwrap_or_default()
    }

    /// The job whose render `id` follows, if any.
    pub(crate) fn leader_of(&self, id: Uuid) -> Option<Uuid> {
        lock(&self.state)
            .entries
            .get(&id)
            .and_then(|entry| entry.leader)
    }

    /// Applies `change` unless the job is terminal already; publishes the new snapshot when
    /// `change` answers true (something a watcher should see), to the job's followers too.
    /// A render that failed or was cancelled frees its fingerprint. Answers the snapshot.
    pub(crate) fn update(&self, id: Uuid, change: impl FnOnce(&mut Job) -> bool) -> Option<Job> {
        let mut published = Vec::new();
        let job = {
            let mut state = lock(&self.state);
            let entry = state.entries.get_mut(&id)?;
            if entry.job.state.is_terminal() {
                return Some(entry.job.clone());
            }
            if !change(&mut entry.job) {
                return Some(entry.job.clone());
            }
            entry.publish();
            let job = entry.job.clone();
            let followers = entry.followers.clone();
            published.push(job.clone());
            for follower in followers {
                if let Some(entry) = state.entries.get_mut(&follower) {
                    if !entry.job.state.is_terminal() {
                        mirror(&mut entry.job, &job);
                        entry.publish();
                        published.push(entry.job.clone());
                    }
                }
            }
            if matches!(job.state, JobState::Failed | JobState::Cancelled)
                && state.renders.get(&job.fingerprint) == Some(&id)
            {
                state.renders.remove(&job.fingerprint);
            }
            self.settle_changed(&mut state, &published);
            job
        };
        Some(job)
    }

    /// Ends a job that follows another's render on its own (its caller cancelled it); the
    /// render goes on for the others.
    pub(crate) fn detach(&self, id: Uuid, finish: impl FnOnce(&mut Job)) -> Option<Job> {
        let mut state = lock(&self.state);
        let leader = state.entries.get_mut(&id)?.leader.take();
        if let Some(leader) = leader.and_then(|leader| state.entries.get_mut(&leader)) {
            leader.followers.retain(|follower| *follower != id);
        }
        let entry = state.entries.get_mut(&id)?;
        // No longer following anything: it waits for nothing.
        entry.slot = None;
        if !entry.job.state.is_terminal() {
            finish(&mut entry.job);
            entry.publish();
        }
        let job = entry.job.clone();
        state.refresh(id);
        let nothing_evicted = state.evicted.len();
        self.account(&mut state, nothing_evicted);
        // Before the lock goes, as in `update`.
        self.replicate(&job);
        drop(state);
        Some(job)
    }

    /// Asks the job's worker to stop (the scheduler marks the job when it has).
    pub(crate) fn request_cancel(&self, id: Uuid) -> Option<Job> {
        let state = lock(&self.state);
        let entry = state.entries.get(&id)?;
        entry.cancel.cancel();
        Some(entry.job.clone())
    }

    /// Jobs that follow a render of another instance and have not ended.
    pub(crate) fn remote_followers(&self) -> Vec<Uuid> {
        let state = lock(&self.state);
        state
            .entries
            .values()
            .filter(|entry| {
                !entry.job.state.is_terminal()
                    && entry
                        .leader
                        .is_some_and(|leader| !state.entries.contains_key(&leader))
            })
            .map(|entry| entry.job.id)
            .collect()
    }

    /// Cancel tokens of every running job.
    pub(crate) fn running_cancel_tokens(&self) -> Vec<CancelToken> {
        lock(&self.state)
            .entries
            .values()
            .filter(|entry| entry.job.state == JobState::Running && entry.leader.is_none())
            .map(|entry| entry.cancel.clone())
            .collect()
    }

    /// Removes terminal jobs finished more than `retention` ago; answers them.
    pub(crate) fn expire(&self, retention: Duration) -> Vec<Job> {
        let now = SystemTime::now();
        let mut state = lock(&self.state);
        let expired: Vec<Uuid> = state
            .entries
            .values()
            .filter(|entry| {
                entry.job.finished_at.is_some_and(|finished| {
                    now.duration_since(finished).unwrap_or_default() >= retention
                })
            })
            .map(|entry| entry.job.id)
            .collect();
        let removed: Vec<Job> = expired
            .into_iter()
            .filter_map(|id| state.forget(id))
            .collect();
        let nothing_evicted = state.evicted.len();
        self.account(&mut state, nothing_evicted);
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{gif_fingerprint, gif_output, queued_job};
    use crate::reason::Reason;
    use crate::spec::Modifications;

    fn fingerprint(template_sha256: &str) -> Fingerprint {
        gif_fingerprint(&TenantId::default(), template_sha256)
    }

    fn job(fingerprint: &Fingerprint) -> (Job, Arc<RenderWork>) {
        let work = Arc::new(RenderWork {
            modifications: Modifications::default(),
            animation: None,
            output: gif_output(),
            deadline: Duration::from_secs(30),
            pin: None,
            trace_parent: None,
        });
        (queued_job(TenantId::default(), fingerprint.clone()), work)
    }

    #[test]
    fn identical_jobs_follow_the_first_and_end_with_it() {
        let board = JobBoard::default();
        let fingerprint = fingerprint("t");
        let (leader, work) = job(&fingerprint);
        let (follower, _) = job(&fingerprint);
        assert_eq!(board.admit(&leader, &work), Admission::Leads);
        assert_eq!(board.admit(&follower, &work), Admission::Follows(leader.id));
        board.update(leader.id, |job| {
            job.state = JobState::Running;
            job.frames_done = 5;
            true
        });
        let mirrored = board.get(follower.id).unwrap();
        assert_eq!(
            (mirrored.state, mirrored.frames_done),
            (JobState::Running, 5)
        );
        board.update(leader.id, |job| {
            job.finish(JobState::Succeeded, None);
            true
        });
        assert_eq!(board.get(follower.id).unwrap().state, JobState::Succeeded);
        let (late, _) = job(&fingerprint);
        assert!(
            matches!(board.admit(&late, &work), Admission::Reuses(source) if source.id == leader.id)
        );
    }

    #[test]
    fn an_ended_job_lets_go_of_its_work_and_so_of_its_template_files() {
        let board = JobBoard::default();
        let (job, work) = job(&fingerprint("w"));
        assert_eq!(board.admit(&job, &work), Admission::Leads);
        assert_eq!(Arc::strong_count(&work), 2, "the board keeps the work");
        board.update(job.id, |job| {
            job.finish(JobState::Cancelled, None);
            true
        });
        assert_eq!(Arc::strong_count(&work), 1, "and lets go of it at the end");
        assert!(board.work(job.id).is_none());
        assert_eq!(board.get(job.id).unwrap().state, JobState::Cancelled);
    }

    #[test]
    fn a_job_has_a_broadcast_only_while_watched_and_none_once_it_ended() {
        let board = JobBoard::default();
        let (job, work) = job(&fingerprint("b"));
        board.admit(&job, &work);
        let broadcasting = |board: &JobBoard| lock(&board.state).entries[&job.id].changes.is_some();
        assert!(!broadcasting(&board), "nobody watches yet");
        let (_, mut changes) = board.subscribe(job.id).unwrap();
        assert!(broadcasting(&board));
        board.update(job.id, |job| {
            job.finish(JobState::Succeeded, None);
            true
        });
        assert!(!broadcasting(&board), "the end drops it");
        assert_eq!(changes.try_recv().unwrap().state, JobState::Succeeded);
        assert!(matches!(
            changes.try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
        let (ended, mut late) = board.subscribe(job.id).unwrap();
        assert_eq!(ended.state, JobState::Succeeded);
        assert!(matches!(
            late.try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
        assert!(
            !broadcasting(&board),
            "a watcher of an ended job reads its snapshot"
        );
    }

    #[test]
    fn a_tenant_over_its_bound_loses_its_oldest_ended_job_and_reuses_stay_reusable() {
        let limits = RetentionLimits {
            max_jobs_per_tenant: 3,
            ..RetentionLimits::UNBOUNDED
        };
        let metrics = Metrics::new();
        let board = JobBoard::default().retaining(limits, metrics.clone());
        let fingerprint = fingerprint("r");
        let (leader, work) = job(&fingerprint);
        board.admit(&leader, &work);
        board.update(leader.id, |job| {
            job.finish(JobState::Succeeded, None);
            true
        });
        let mut reuses = Vec::new();
        for _ in 0..5 {
            let (reuse, _) = job(&fingerprint);
            let Admission::Reuses(source) = board.admit(&reuse, &work) else {
                panic!("a reuse");
            };
            let mut reused = reuse.clone();
            reused.finish(JobState::Succeeded, None);
            reused.output = source.output.clone();
            board.insert(reused, work.clone()).unwrap();
            reuses.push(reuse.id);
        }
        assert_eq!(board.retained().jobs, 3);
        assert_eq!(metrics.jobs_retained.get(), 3);
        assert_eq!(metrics.jobs_evicted.get(), 3);
        let evicted: Vec<Uuid> = board.take_evicted().iter().map(|job| job.id).collect();
        assert_eq!(evicted, [leader.id, reuses[0], reuses[1]]);
        assert!(board.get(leader.id).is_none());
        // The jobs evicted have left their tenant's listing too; another tenant has none.
        let everything = crate::jobs::listing::JobQuery {
            after: None,
            filter: Default::default(),
            limit: 10,
        };
        let mut listed: Vec<Uuid> = (board.list(&TenantId::default(), &everything).jobs)
            .iter()
            .map(|job| job.id)
            .collect();
        listed.sort();
        let mut kept = reuses[2..].to_vec();
        kept.sort();
        assert_eq!(listed, kept);
        let other = TenantId::parse("other").unwrap();
        assert!(board.list(&other, &everything).jobs.is_empty());
        let (next, _) = job(&fingerprint);
        assert!(
            matches!(board.admit(&next, &work), Admission::Reuses(source) if source.id == reuses[4]),
            "the newest reuse stands for the evicted render"
        );
        // Three jobs that have not ended: nothing can go.
        let board = JobBoard::default().retaining(limits, Metrics::new());
        for name in ["x", "y", "z"] {
            let (live, work) = job(&self::fingerprint(name));
            assert_eq!(board.admit(&live, &work), Admission::Leads);
        }
        let (refused, work) = job(&self::fingerprint("w"));
        assert!(matches!(
            board.admit(&refused, &work),
            Admission::Refused(PushRefused::RetainedJobsFull(full)) if full.per_tenant
        ));
        assert!(board.get(refused.id).is_none());
    }

    #[test]
    fn followers_of_a_refused_render_fail_retryably_and_free_the_fingerprint() {
        let board = JobBoard::default();
        let (leader, work) = job(&fingerprint("a"));
        let (follower, _) = job(&leader.fingerprint);
        board.admit(&leader, &work);
        board.admit(&follower, &work);
        let failure = JobFailure {
            reason: Reason::QueueFull,
            message: "full".into(),
            retryable: true,
            retry_after: Some(Duration::from_secs(1)),
        };
        board.remove_refused(leader.id, JobState::Failed, &failure);
        let ended = board.get(follower.id).unwrap();
        assert_eq!(ended.state, JobState::Failed);
        assert!(ended.error.unwrap().retryable);
        let (next, _) = job(&leader.fingerprint);
        assert_eq!(board.admit(&next, &work), Admission::Leads);
    }
}
