//! The table of jobs: the current snapshot of each, the work it stands for, its cancel token,
//! and a broadcast of every change so WatchRenderJob can follow it. Snapshots are cheap
//! clones; every critical section is a map operation (no I/O under the lock).
//!
//! Render de-duplication lives here too, because it must be decided atomically with the
//! insertion: the board indexes the job rendering (or having rendered) each fingerprint, and a
//! new job with that fingerprint either follows the running one (its snapshot mirrors the
//! leader's progress and outcome) or starts from the succeeded one's output. A follower
//! takes a slot of the queue's capacity ([`FollowerSlot`]) when it joins and gives it back
//! when it ends, so followers count against admission like queued renders.

use super::model::{Job, JobFailure, JobState, RenderWork};
use super::quarantine::lock;
use super::queue::{FollowerSlot, PushRefused, RenderQueue};
use super::Fingerprint;
use crate::auth::TenantId;
use crate::reason::Reason;
use crate::sandbox::CancelToken;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;
use uuid::Uuid;

/// Changes a watcher may fall behind by before it re-reads the snapshot: a job publishes
/// its state changes (≤ 4) and at most one progress change per percent.
const WATCH_BACKLOG: usize = 128;

struct Entry {
    job: Job,
    /// Until the job ends: then its template files may go ([`RenderWork::pin`]).
    work: Option<Arc<RenderWork>>,
    cancel: CancelToken,
    changes: broadcast::Sender<Job>,
    /// Jobs of the same fingerprint that follow this one's render.
    followers: Vec<Uuid>,
    /// The job whose render this one follows.
    leader: Option<Uuid>,
    /// A follower's place in the queue's capacity, until it ends.
    slot: Option<FollowerSlot>,
}

impl Entry {
    fn new(mut job: Job, work: Arc<RenderWork>, leader: Option<Uuid>) -> Entry {
        let (changes, _) = broadcast::channel(WATCH_BACKLOG);
        // Above the version a job is shared with before it is admitted (0).
        job.version = job.version.max(1);
        let work = (!job.state.is_terminal()).then_some(work);
        Entry {
            job,
            work,
            cancel: CancelToken::default(),
            changes,
            followers: Vec::new(),
            leader,
            slot: None,
        }
    }

    fn publish(&mut self) {
        if self.job.state.is_terminal() {
            // Every change of a job is published: an ended follower waits for nothing, and
            // an ended job renders nothing.
            self.slot = None;
            self.work = None;
        }
        self.job.version += 1;
        // No receiver is fine: nobody is watching.
        let _ = self.changes.send(self.job.clone());
    }
}

#[derive(Default)]
struct BoardState {
    entries: HashMap<Uuid, Entry>,
    /// Fingerprint → the job that renders it (queued or running) or rendered it (succeeded).
    renders: HashMap<Fingerprint, Uuid>,
}

#[derive(Default)]
pub struct JobBoard {
    state: Mutex<BoardState>,
    /// Every new snapshot goes here too when jobs are shared with other instances (Redis).
    replication: Option<tokio::sync::mpsc::UnboundedSender<Replication>>,
    /// The queue whose capacity followers count against (none: followers are not counted).
    admission: Option<Arc<RenderQueue>>,
}

/// What the board (and the scheduler) hand to the task that writes shared records, in order.
#[derive(Debug)]
pub enum Replication {
    /// A job's new snapshot.
    Snapshot(Box<Job>),
    /// A fingerprint to quarantine for every instance.
    Quarantine(Fingerprint),
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
pub enum Admission {
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
fn shared_render_cancelled() -> JobFailure {
    JobFailure {
        reason: Reason::SharedRenderCancelled.into(),
        message: "this job shared the render of an identical request, which its caller \
                  cancelled; submit again"
            .into(),
        retryable: true,
        retry_after: Some(Duration::from_secs(1)),
    }
}

/// What a follower takes over from its leader's snapshot.
pub fn mirror(follower: &mut Job, leader: &Job) {
    follower.state = leader.state;
    follower.frames_done = leader.frames_done;
    follower.frames_total = leader.frames_total;
    follower.output = leader.output.clone();
    follower.error = match (leader.state, &leader.error) {
        (JobState::Cancelled, None) => Some(shared_render_cancelled()),
        (_, error) => error.clone(),
    };
    follower.started_at = leader.started_at;
    follower.finished_at = leader.finished_at;
}

impl JobBoard {
    /// A board whose every snapshot is also sent to `replication` (in order).
    pub fn replicated(replication: tokio::sync::mpsc::UnboundedSender<Replication>) -> JobBoard {
        JobBoard {
            state: Mutex::default(),
            replication: Some(replication),
            admission: None,
        }
    }

    /// The same board, with followers counted against `queue`'s capacity.
    pub fn counting_followers_in(self, queue: Arc<RenderQueue>) -> JobBoard {
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

    fn replicate(&self, job: &Job) {
        if let Some(replication) = &self.replication {
            // The receiver lives as long as the server; after it, nobody needs the copy.
            let _ = replication.send(Replication::Snapshot(Box::new(job.clone())));
        }
    }

    /// Adds `job`, deciding atomically whether it renders, follows a running render of its
    /// fingerprint, or may reuse a succeeded one. A job that follows is inserted already
    /// (mirroring its leader); the others are inserted by [`JobBoard::insert`].
    /// A follower counts against its tenant's share of the queue.
    pub fn admit(&self, job: &Job, work: &Arc<RenderWork>) -> Admission {
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
    pub fn admit_following(&self, job: &Job, work: &Arc<RenderWork>) -> Option<Admission> {
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
    pub fn adopt(&self, job: Job, work: Arc<RenderWork>) {
        let mut state = lock(&self.state);
        state.renders.insert(job.fingerprint.clone(), job.id);
        state.entries.insert(job.id, Entry::new(job, work, None));
    }

    fn admit_locally(
        &self,
        job: &Job,
        work: &Arc<RenderWork>,
        may_lead: bool,
    ) -> Option<Admission> {
        let mut state = lock(&self.state);
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
                let slot = match self.follower_slot(&job.tenant) {
                    Ok(slot) => slot,
                    Err(refused) => return Some(Admission::Refused(refused)),
                };
                let mut follower = job.clone();
                mirror(&mut follower, &leader);
                let mut entry = Entry::new(follower, work.clone(), Some(leader.id));
                entry.slot = slot;
                state.entries.insert(job.id, entry);
                if let Some(entry) = state.entries.get_mut(&leader.id) {
                    entry.followers.push(job.id);
                }
                Admission::Follows(leader.id)
            }
            _ if !may_lead => return None,
            _ => {
                let entry = Entry::new(job.clone(), work.clone(), None);
                state.renders.insert(job.fingerprint.clone(), job.id);
                state.entries.insert(job.id, entry);
                Admission::Leads
            }
        })
    }

    /// Adds a job outside de-duplication (a job reusing an output).
    pub fn insert(&self, job: Job, work: Arc<RenderWork>) {
        self.replicate(&job);
        lock(&self.state)
            .entries
            .insert(job.id, Entry::new(job, work, None));
    }

    /// Adds a job that follows the render of `leader`, a job of another instance, unless
    /// the queue has no slot for it.
    pub fn insert_following(
        &self,
        job: Job,
        work: Arc<RenderWork>,
        leader: Uuid,
    ) -> Result<(), PushRefused> {
        let slot = self.follower_slot(&job.tenant)?;
        self.replicate(&job);
        let mut entry = Entry::new(job, work, Some(leader));
        entry.slot = slot;
        lock(&self.state).entries.insert(entry.job.id, entry);
        Ok(())
    }

    /// Removes a job the queue refused, or that this instance no longer renders (its
    /// fingerprint is free again here); jobs that joined it meanwhile end in state `end` with
    /// `failure`.
    pub fn remove_refused(&self, id: Uuid, end: JobState, failure: &JobFailure) -> Option<Job> {
        let mut ended = Vec::new();
        let removed = {
            let mut state = lock(&self.state);
            let entry = state.entries.remove(&id)?;
            if state.renders.get(&entry.job.fingerprint) == Some(&id) {
                state.renders.remove(&entry.job.fingerprint);
            }
            for follower in &entry.followers {
                if let Some(follower) = state.entries.get_mut(follower) {
                    follower.leader = None;
                    if !follower.job.state.is_terminal() {
                        follower.job.finish(end, Some(failure.clone()));
                        follower.publish();
                        ended.push(follower.job.clone());
                    }
                }
            }
            // Before the lock goes, as in `update`.
            for job in &ended {
                self.replicate(job);
            }
            entry.job
        };
        Some(removed)
    }

    /// Forgets a succeeded render whose output turned out to be gone, so the fingerprint
    /// renders again.
    pub fn forget_render(&self, fingerprint: &Fingerprint, id: Uuid) {
        let mut state = lock(&self.state);
        if state.renders.get(fingerprint) == Some(&id) {
            state.renders.remove(fingerprint);
        }
    }

    pub fn get(&self, id: Uuid) -> Option<Job> {
        lock(&self.state)
            .entries
            .get(&id)
            .map(|entry| entry.job.clone())
    }

    /// The current snapshot and a receiver of every later change.
    pub fn subscribe(&self, id: Uuid) -> Option<(Job, broadcast::Receiver<Job>)> {
        lock(&self.state)
            .entries
            .get(&id)
            .map(|entry| (entry.job.clone(), entry.changes.subscribe()))
    }

    /// What a job that has not ended renders, and its cancel token.
    pub fn work(&self, id: Uuid) -> Option<(Arc<RenderWork>, CancelToken)> {
        lock(&self.state)
            .entries
            .get(&id)
            .and_then(|entry| Some((entry.work.clone()?, entry.cancel.clone())))
    }

    /// The jobs following `id`'s render.
    pub fn followers(&self, id: Uuid) -> Vec<Uuid> {
        lock(&self.state)
            .entries
            .get(&id)
            .map(|entry| entry.followers.clone())
            .unwrap_or_default()
    }

    /// The job whose render `id` follows, if any.
    pub fn leader_of(&self, id: Uuid) -> Option<Uuid> {
        lock(&self.state)
            .entries
            .get(&id)
            .and_then(|entry| entry.leader)
    }

    /// Applies `change` unless the job is terminal already; publishes the new snapshot when
    /// `change` answers true (something a watcher should see), to the job's followers too.
    /// A render that failed or was cancelled frees its fingerprint. Answers the snapshot.
    pub fn update(&self, id: Uuid, change: impl FnOnce(&mut Job) -> bool) -> Option<Job> {
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
            // Queued for the shared records before the lock goes: a watcher woken by the
            // change reads the board (takes this lock) before it answers, so a flush it asks
            // for then comes after this snapshot (a cancel answered by this instance flushes,
            // and the other instances must read what it answered).
            for snapshot in &published {
                self.replicate(snapshot);
            }
            job
        };
        Some(job)
    }

    /// Ends a job that follows another's render on its own (its caller cancelled it); the
    /// render goes on for the others.
    pub fn detach(&self, id: Uuid, finish: impl FnOnce(&mut Job)) -> Option<Job> {
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
        // Before the lock goes, as in `update`.
        self.replicate(&job);
        drop(state);
        Some(job)
    }

    /// Asks the job's worker to stop (the scheduler marks the job when it has).
    pub fn request_cancel(&self, id: Uuid) -> Option<Job> {
        let state = lock(&self.state);
        let entry = state.entries.get(&id)?;
        entry.cancel.cancel();
        Some(entry.job.clone())
    }

    /// Jobs that follow a render of another instance and have not ended.
    pub fn remote_followers(&self) -> Vec<Uuid> {
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
    pub fn running_cancel_tokens(&self) -> Vec<CancelToken> {
        lock(&self.state)
            .entries
            .values()
            .filter(|entry| entry.job.state == JobState::Running && entry.leader.is_none())
            .map(|entry| entry.cancel.clone())
            .collect()
    }

    /// Removes terminal jobs finished more than `retention` ago; answers them.
    pub fn expire(&self, retention: Duration) -> Vec<Job> {
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
        let mut removed = Vec::new();
        for id in expired {
            if let Some(entry) = state.entries.remove(&id) {
                if state.renders.get(&entry.job.fingerprint) == Some(&id) {
                    state.renders.remove(&entry.job.fingerprint);
                }
                removed.push(entry.job);
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};

    fn output() -> OutputSpec {
        OutputSpec {
            format: Format::Gif,
            fps: Fps::DEFAULT,
            width: Dimension::try_from(100).unwrap(),
            height: Dimension::try_from(100).unwrap(),
            background: None,
        }
    }

    fn fingerprint(template_sha256: &str) -> Fingerprint {
        Fingerprint::of(
            &crate::auth::TenantId::default(),
            template_sha256,
            &Modifications::default(),
            &output(),
        )
    }

    fn job(fingerprint: &Fingerprint) -> (Job, Arc<RenderWork>) {
        let work = Arc::new(RenderWork {
            modifications: Modifications::default(),
            output: output(),
            deadline: Duration::from_secs(30),
            pin: None,
            trace_parent: None,
        });
        let job = Job::queued(
            Uuid::new_v4(),
            crate::auth::TenantId::default(),
            Uuid::new_v4(),
            fingerprint.clone(),
            Format::Gif,
            10,
        );
        (job, work)
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
    fn followers_of_a_refused_render_fail_retryably_and_free_the_fingerprint() {
        let board = JobBoard::default();
        let (leader, work) = job(&fingerprint("a"));
        let (follower, _) = job(&leader.fingerprint);
        board.admit(&leader, &work);
        board.admit(&follower, &work);
        let failure = JobFailure {
            reason: "QUEUE_FULL".into(),
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
