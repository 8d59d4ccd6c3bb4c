//! The worker loops of an instance on the shared work queue ([`crate::jobs::shared_queue`]),
//! and the jobs this instance puts there.
//!
//! A free worker loop takes the next entry (a new one, or one whose owner's lease ran out),
//! makes the job its instance's in the job's record ([`SharedJobs::take`]: a job cancelled
//! while it waited is acknowledged away unrendered), renders it as a local job would be
//! ([`Scheduler::run_job`]), renewing the lease meanwhile, and acknowledges the entry once
//! the job's terminal record is stored. An instance whose lease was taken over stops its
//! render and forgets the job: the new owner answers for it. Redis failures make the loop
//! back off and resume; nothing is acknowledged before its end is recorded.

use super::{Scheduler, SubmitRefused};
use crate::jobs::board::Admission;
use crate::jobs::model::{Job, JobFailure, JobState, RenderWork, SharedWork};
use crate::jobs::queue::PushRefused;
use crate::jobs::shared::{SharedJobs, Taken};
use crate::jobs::shared_queue::{Delivery, EnqueueRefused, SharedQueue, ANNOUNCE_EVERY};
use crate::reason::Reason;
use crate::sandbox::CancelToken;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Pause after a failed read of the shared queue, doubled on each failure up to the maximum:
/// Redis is down or in trouble, and every free worker loop of every instance is reading.
const READ_RETRY_MIN: Duration = Duration::from_millis(200);
const READ_RETRY_MAX: Duration = Duration::from_secs(5);
/// Renewals of a lease within one lease time (see [`crate::config::DEFAULT_JOB_LEASE_MS`]).
const RENEWALS_PER_LEASE: u32 = 3;
/// How long a finished job's entry may wait for its terminal record to be stored and for
/// its acknowledgement (Redis down meanwhile), retried with these pauses; past it, the entry
/// is left to the instance that reclaims it (which acknowledges it if the record has ended,
/// or renders the job again if that end was never stored).
const ACK_PATIENCE: Duration = Duration::from_secs(300);
const ACK_RETRY_MIN: Duration = Duration::from_millis(100);
const ACK_RETRY_MAX: Duration = Duration::from_secs(5);
/// How often the work of jobs accepted here is checked for jobs that ended elsewhere (to
/// unpin their template files): files of an ended job linger this long at most.
const ACCEPTED_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl Scheduler {
    /// One worker loop on the shared queue: the next job of the farm, rendered to its end,
    /// until the server shuts down.
    pub(super) async fn shared_worker_loop(self: Arc<Self>, queue: Arc<SharedQueue>) {
        let mut pause = READ_RETRY_MIN;
        while !self.queue.is_closed() {
            match queue.next().await {
                Ok(Some(delivery)) => {
                    pause = READ_RETRY_MIN;
                    self.run_delivery(&queue, delivery).await;
                }
                Ok(None) => pause = READ_RETRY_MIN,
                Err(error) => {
                    tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "cannot read the shared queue");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(READ_RETRY_MAX);
                }
            }
        }
    }

    async fn run_delivery(self: &Arc<Self>, queue: &Arc<SharedQueue>, delivery: Delivery) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let id = delivery.job;
        if self.queue.is_closed() {
            // Taken as this server began to shut down: another instance renders it.
            self.hand_back(queue, &delivery).await;
            return;
        }
        if self
            .board
            .get(id)
            .is_some_and(|job| !job.state.is_terminal())
        {
            // Reclaimed from this very instance (its renewals failed for a lease): the render
            // here goes on, under the lease it has again.
            return;
        }
        let job = match shared.take(id).await {
            Ok(Taken::Job(job)) => *job,
            Ok(Taken::Ended) => {
                tracing::info!(job_id = %id, "a job of the shared queue ended before it was rendered (cancelled)");
                if let Err(error) = queue.ack(&delivery).await {
                    tracing::warn!(job_id = %id, %error, "cannot acknowledge an ended job; the next reader will");
                }
                return;
            }
            Err(error) => {
                // Its entry stays this instance's until the lease runs out; then another
                // instance (or this one) takes it again.
                tracing::warn!(job_id = %id, %error, "cannot take a job of the shared queue");
                return;
            }
        };
        self.metrics.shared_jobs_taken.inc();
        if delivery.reclaimed {
            self.metrics.shared_jobs_reclaimed.inc();
            tracing::info!(job_id = %id, template_id = %job.template_id, "job taken over from an instance whose lease ran out");
        }
        // Its render is a child of the SubmitRender call's span, wherever that call was
        // answered (the entry carries its context).
        let work = delivery.work.clone().into_work(self.outputs.objects(), id);
        self.adopt_taken(job, Arc::new(work));
        let Some((_, cancel)) = self.board.work(id) else {
            return;
        };
        let lost = Arc::new(AtomicBool::new(false));
        let lease = tokio::spawn(keep_lease(
            queue.clone(),
            delivery.clone(),
            cancel,
            lost.clone(),
            self.clone(),
        ));
        let scheduler = self.clone();
        let ran = tokio::task::spawn_blocking(move || scheduler.run_job(id, None)).await;
        if let Err(error) = ran {
            self.runner_panicked(id, error);
        }
        if lost.load(Ordering::SeqCst) {
            lease.abort();
            // The new owner answers for it; this instance's stopped copy must not.
            self.board.remove_refused(
                id,
                JobState::Failed,
                &JobFailure {
                    reason: Reason::SharedRenderLost,
                    message: "the render this job shared moved to another instance; submit again"
                        .into(),
                    retryable: true,
                    retry_after: Some(super::MIN_RETRY_AFTER),
                },
            );
            return;
        }
        if self.shutting_down.load(Ordering::SeqCst) && self.board.get(id).is_none() {
            // Stopped by this instance's shutdown (see `run_job`): another instance renders it.
            lease.abort();
            self.hand_back(queue, &delivery).await;
            return;
        }
        self.acknowledge(queue, &shared, &delivery).await;
        lease.abort();
    }

    /// Gives a job this instance will not render (it is shutting down) back to the shared
    /// queue, where the farm's next free worker takes it: its record first (QUEUED, nobody's,
    /// once this instance's last snapshots are written), then its entry. If Redis cannot be
    /// reached, the job is reclaimed once its lease runs out.
    async fn hand_back(&self, queue: &SharedQueue, delivery: &Delivery) {
        let id = delivery.job;
        if let Some(shared) = &self.shared {
            self.flush_shared().await;
            if let Err(error) = shared.requeue(id).await {
                tracing::warn!(job_id = %id, %error, "cannot give a handed-back job's record back to the queue");
            }
        }
        match queue.hand_back(delivery).await {
            Ok(true) => {
                self.metrics.shared_jobs_handed_back.inc();
                tracing::info!(job_id = %id, "job handed back to the shared queue (shutdown)");
            }
            Ok(false) => {
                tracing::info!(job_id = %id, "a job to hand back was no longer this instance's");
            }
            Err(error) => {
                tracing::warn!(job_id = %id, %error, "cannot hand a job back to the shared queue; it is reclaimed after its lease");
            }
        }
    }

    /// Acknowledges the entry of a job rendered here once its terminal record is stored
    /// (the lease is kept meanwhile), within [`ACK_PATIENCE`] (one attempt once the server
    /// shuts down).
    async fn acknowledge(&self, queue: &SharedQueue, shared: &SharedJobs, delivery: &Delivery) {
        let id = delivery.job;
        let mut pause = ACK_RETRY_MIN;
        let give_up = tokio::time::Instant::now() + ACK_PATIENCE;
        loop {
            self.flush_shared().await;
            let ended = match shared.stored(id).await {
                // Expired records (a retention shorter than the render) end it too.
                Ok(record) => record.is_none_or(|job| job.state.is_terminal()),
                Err(_) => false,
            };
            if ended {
                match queue.ack(delivery).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(job_id = %id, %error, "cannot acknowledge a finished job; retrying");
                    }
                }
            }
            // A server shutting down does not wait for Redis: the instance that reclaims the
            // entry finishes the job's bookkeeping.
            if tokio::time::Instant::now() + pause > give_up || self.queue.is_closed() {
                tracing::warn!(job_id = %id, "a finished job's end is not acknowledged in Redis; its entry is left to be reclaimed");
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(ACK_RETRY_MAX);
        }
    }

    /// Puts `job` (admitted, its record published and its fingerprint claimed) in the shared
    /// queue: its entry and its record (queued, owned by nobody until an instance takes it)
    /// are written together, or neither when the queue or the tenant's share is full.
    pub(super) async fn enqueue_shared(
        self: &Arc<Self>,
        queue: &SharedQueue,
        job: Job,
        work: Arc<RenderWork>,
    ) -> Result<Job, SubmitRefused> {
        let mut record = job.clone();
        record.owner = None;
        record.reclaimable = true;
        // Above the snapshot published before the fingerprint was claimed.
        record.version = job.version + 1;
        let followers = self.queue.tenant_jobs(&job.tenant);
        // Admission pins every render's files; work without them is a bug of ours.
        let Some(shared_work) = SharedWork::of(&work) else {
            return Err(SubmitRefused::Internal(
                "a render without pinned template files".into(),
            ));
        };
        match queue.enqueue(&record, &shared_work, followers).await {
            Ok(waiting) => {
                self.metrics.queue_depth.set(waiting as i64);
                super::lock(&self.accepted).insert(job.id, work);
                Ok(record)
            }
            Err(EnqueueRefused::Refused(refused)) => {
                self.count_tenant_refusal(&job.tenant, refused);
                self.share_refusal(&job, refused).await;
                Err(SubmitRefused::Queue(refused))
            }
            Err(EnqueueRefused::Shared(error)) => Err(SubmitRefused::Shared(error)),
        }
    }

    /// Adds `job` as a follower (or reuser) of this instance's render of its fingerprint;
    /// `None` when there is none (any more). Blocking (it may link an output file).
    pub(super) fn join_local_render(
        &self,
        job: &Job,
        work: Arc<RenderWork>,
    ) -> Option<Result<Job, PushRefused>> {
        match self.board.admit_following(job, &work)? {
            Admission::Follows(leader) => {
                self.metrics.render_joins.inc();
                tracing::info!(job_id = %job.id, template_id = %job.template_id, leader_job_id = %leader, "job joins the render of an identical request");
                Some(Ok(self.board.get(job.id).unwrap_or_else(|| job.clone())))
            }
            Admission::Refused(refused) => Some(Err(refused)),
            Admission::Reuses(leader) => match self.reuse(job, work, &leader) {
                Ok(Some(reused)) => Some(Ok(reused)),
                Err(refused) => Some(Err(refused)),
                Ok(None) => {
                    self.board.forget_render(&job.fingerprint, leader.id);
                    None
                }
            },
            Admission::Leads => None,
        }
    }

    /// Lets go of the work (and template files) of jobs accepted here once they have ended
    /// wherever they rendered (or their records expired), until the scheduler goes.
    pub(super) async fn release_ended_work(self: Arc<Self>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let scheduler = Arc::downgrade(&self);
        drop(self);
        loop {
            tokio::time::sleep(ACCEPTED_CHECK_INTERVAL).await;
            let Some(scheduler) = scheduler.upgrade() else {
                return;
            };
            let ids: Vec<_> = super::lock(&scheduler.accepted).keys().copied().collect();
            for id in ids {
                if let Ok(record) = shared.stored(id).await {
                    if record.is_none_or(|job| job.state.is_terminal()) {
                        super::lock(&scheduler.accepted).remove(&id);
                    }
                }
            }
        }
    }
}

/// Announces this instance's workers to the farm every [`ANNOUNCE_EVERY`] (the retry delay
/// of a full queue counts every live instance's workers) until the server shuts down (the
/// drain says it leaves) or the scheduler goes.
pub(super) async fn announce_workers(scheduler: Weak<Scheduler>, queue: Arc<SharedQueue>) {
    loop {
        let Some(current) = scheduler.upgrade() else {
            return;
        };
        if current.queue.is_closed() {
            return;
        }
        match queue.announce(current.settings.workers).await {
            Ok(()) => {
                current.metrics.queue_depth.set(queue.waiting() as i64);
            }
            Err(error) => tracing::debug!(%error, "cannot announce this instance's workers"),
        }
        if current.queue.is_closed() {
            // The drain said it leaves while this announcement was on its way: say it again.
            let _ = queue.announce(0).await;
            return;
        }
        drop(current);
        tokio::time::sleep(ANNOUNCE_EVERY).await;
    }
}

/// Renews the lease on `delivery` every third of it while its job renders; when another
/// instance took it over, stops the render here (`cancel`) and says so (`lost`).
async fn keep_lease(
    queue: Arc<SharedQueue>,
    delivery: Delivery,
    cancel: CancelToken,
    lost: Arc<AtomicBool>,
    scheduler: Arc<Scheduler>,
) {
    let every = queue.lease() / RENEWALS_PER_LEASE;
    loop {
        tokio::time::sleep(every).await;
        match queue.renew(&delivery).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(job_id = %delivery.job, "another instance took this job over (its lease ran out); stopping its render here");
                lost.store(true, Ordering::SeqCst);
                cancel.cancel();
                return;
            }
            Err(error) => {
                scheduler.metrics.job_lease_renewals_failed.inc();
                tracing::warn!(job_id = %delivery.job, %error, "cannot renew a job's lease");
            }
        }
    }
}
