//! The worker loops of an instance on the shared work queue ([`crate::jobs::shared::queue`]),
//! and the jobs this instance puts there.
//!
//! A free worker loop takes the next entry (a new one, or one whose owner's lease ran out),
//! makes the job its instance's in the job's record ([`crate::jobs::shared::SharedJobs::take`]: a job cancelled
//! while it waited is acknowledged away unrendered), renders it as a local job would be
//! ([`Runner::run_job`]), renewing the lease meanwhile, and acknowledges the entry once
//! the job's terminal record is stored. An instance whose lease was taken over stops its
//! render and forgets the job: the new owner answers for it. Redis failures make the loop
//! back off and resume; nothing is acknowledged before its end is recorded.

use super::Runner;
use crate::jobs::local::MIN_RETRY_AFTER;
use crate::jobs::model::{JobFailure, JobState};
use crate::jobs::shared::queue::{Delivery, SharedQueue};
use crate::jobs::shared::{Shared, Taken};
use crate::metrics::Metrics;
use crate::reason::Reason;
use crate::sandbox::CancelToken;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Pause after a failed read of the shared queue, doubled on each failure up to the maximum:
/// Redis is down or in trouble, and every free worker loop of every instance is reading.
const READ_RETRY_MIN: Duration = Duration::from_millis(200);
const READ_RETRY_MAX: Duration = Duration::from_secs(5);
/// Renewals of a lease within one lease time (see [`crate::jobs::settings::DEFAULT_JOB_LEASE_MS`]).
const RENEWALS_PER_LEASE: u32 = 3;
/// How long a finished job's entry may wait for its terminal record to be stored and for
/// its acknowledgement (Redis down meanwhile), retried with these pauses; past it, the entry
/// is left to the instance that reclaims it (which acknowledges it if the record has ended,
/// or renders the job again if that end was never stored).
const ACK_PATIENCE: Duration = Duration::from_secs(300);
const ACK_RETRY_MIN: Duration = Duration::from_millis(100);
const ACK_RETRY_MAX: Duration = Duration::from_secs(5);

impl Runner {
    /// One worker loop on the shared queue: the next job of the farm, rendered to its end,
    /// until the server shuts down.
    pub(super) async fn shared_worker_loop(self: Arc<Self>, shared: Arc<Shared>) {
        let mut pause = READ_RETRY_MIN;
        while !self.local.queue.is_closed() {
            match shared.queue().next().await {
                Ok(Some(delivery)) => {
                    pause = READ_RETRY_MIN;
                    self.run_delivery(&shared, delivery).await;
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

    async fn run_delivery(self: &Arc<Self>, shared: &Shared, delivery: Delivery) {
        let queue = shared.queue();
        let id = delivery.job;
        if self.local.queue.is_closed() {
            // Taken as this server began to shut down: another instance renders it.
            self.hand_back(shared, &delivery).await;
            return;
        }
        if self
            .local
            .board
            .get(id)
            .is_some_and(|job| !job.state.is_terminal())
        {
            // Reclaimed from this very instance (its renewals failed for a lease): the render
            // here goes on, under the lease it has again.
            return;
        }
        let job = match shared.records().take(id).await {
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
        self.local.metrics.shared_jobs_taken.inc();
        if delivery.reclaimed {
            self.local.metrics.shared_jobs_reclaimed.inc();
            tracing::info!(job_id = %id, template_id = %job.template_id, "job taken over from an instance whose lease ran out");
        }
        // Its render is a child of the SubmitRender call's span, wherever that call was
        // answered (the entry carries its context).
        let work = delivery
            .work
            .clone()
            .into_work(self.local.outputs.objects(), id);
        shared.adopt_taken(job, Arc::new(work));
        let Some((_, cancel)) = self.local.board.work(id) else {
            return;
        };
        let lost = Arc::new(AtomicBool::new(false));
        let lease = tokio::spawn(keep_lease(
            queue.clone(),
            delivery.clone(),
            cancel,
            lost.clone(),
            self.local.metrics.clone(),
        ));
        let runner = self.clone();
        let ran = tokio::task::spawn_blocking(move || runner.run_job(id, None)).await;
        if let Err(error) = ran {
            self.runner_panicked(id, error);
        }
        if lost.load(Ordering::SeqCst) {
            lease.abort();
            // The new owner answers for it; this instance's stopped copy must not.
            self.local.board.remove_refused(
                id,
                JobState::Failed,
                &JobFailure {
                    reason: Reason::SharedRenderLost,
                    message: "the render this job shared moved to another instance; submit again"
                        .into(),
                    retryable: true,
                    retry_after: Some(MIN_RETRY_AFTER),
                },
            );
            return;
        }
        if self.shutting_down.load(Ordering::SeqCst) && self.local.board.get(id).is_none() {
            // Stopped by this instance's shutdown (see `run_job`): another instance renders it.
            lease.abort();
            self.hand_back(shared, &delivery).await;
            return;
        }
        self.acknowledge(shared, &delivery).await;
        lease.abort();
    }

    /// Gives a job this instance will not render (it is shutting down) back to the shared
    /// queue, where the farm's next free worker takes it: its record first (QUEUED, nobody's,
    /// once this instance's last snapshots are written), then its entry. If Redis cannot be
    /// reached, the job is reclaimed once its lease runs out.
    async fn hand_back(&self, shared: &Shared, delivery: &Delivery) {
        let id = delivery.job;
        shared.flush().await;
        if let Err(error) = shared.records().requeue(id).await {
            tracing::warn!(job_id = %id, %error, "cannot give a handed-back job's record back to the queue");
        }
        match shared.queue().hand_back(delivery).await {
            Ok(true) => {
                self.local.metrics.shared_jobs_handed_back.inc();
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
    async fn acknowledge(&self, shared: &Shared, delivery: &Delivery) {
        let id = delivery.job;
        let queue = shared.queue();
        let mut pause = ACK_RETRY_MIN;
        let give_up = tokio::time::Instant::now() + ACK_PATIENCE;
        loop {
            shared.flush().await;
            let ended = match shared.records().stored(id).await {
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
            if tokio::time::Instant::now() + pause > give_up || self.local.queue.is_closed() {
                tracing::warn!(job_id = %id, "a finished job's end is not acknowledged in Redis; its entry is left to be reclaimed");
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(ACK_RETRY_MAX);
        }
    }
}

/// Renews the lease on `delivery` every third of it while its job renders; when another
/// instance took it over, stops the render here (`cancel`) and says so (`lost`).
async fn keep_lease(
    queue: Arc<SharedQueue>,
    delivery: Delivery,
    cancel: CancelToken,
    lost: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
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
                metrics.job_lease_renewals_failed.inc();
                tracing::warn!(job_id = %delivery.job, %error, "cannot renew a job's lease");
            }
        }
    }
}
