//! Redis mode (`--redis-url`): what the instances on one Redis share, owned by one
//! [`Shared`]: the job records and the render index in Redis ([`records`]), the work queue
//! every instance reads with its Lua scripts ([`queue`]), which render a
//! new job joins ([`joining`]), jobs following another instance's render ([`following`]),
//! the ordered writer of this instance's snapshots ([`replication`]), and their loops. It
//! holds this instance's jobs ([`LocalJobs`]), never the runner: the runner takes the jobs
//! it renders from here.

mod following;
mod joining;
pub(crate) mod queue;
pub(crate) mod records;
mod replication;

pub use following::{follow_shared_job, FollowLost};
pub use records::{RenderClaim, SharedError, SharedJobs, Taken};

use super::board::Replication;
use super::local::{LocalJobs, SubmitRefused};
use super::model::{Job, RenderWork, SharedWork};
use super::Fingerprint;
use crate::sync::lock;
use queue::{EnqueueRefused, SharedQueue, SharedQueueSettings, ANNOUNCE_EVERY};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use uuid::Uuid;

/// How long a cancel request for a job not on this board is kept (see
/// [`Shared::cancel_requested`]): far longer than taking a job lasts (two Redis calls)…
const UNCLAIMED_CANCEL_MEMORY: Duration = Duration::from_secs(10);
/// …and at most this many (every instance hears every cancel request).
const MAX_UNCLAIMED_CANCELS: usize = 1024;
/// How often the work of jobs accepted here is checked for jobs that ended elsewhere (to
/// unpin their template files): files of an ended job linger this long at most.
const ACCEPTED_CHECK_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Shared {
    local: Arc<LocalJobs>,
    records: Arc<SharedJobs>,
    queue: Arc<SharedQueue>,
    /// The ordered writer of shared records ([`replication::replicate`]).
    replication: UnboundedSender<Replication>,
    /// The work of jobs this instance accepted, kept (with the template files it pins)
    /// until the job ends wherever it renders.
    accepted: Mutex<HashMap<Uuid, Arc<RenderWork>>>,
    /// Cancel requests of other instances for jobs not on this board, kept for
    /// [`UNCLAIMED_CANCEL_MEMORY`]: one may be for a job this instance is taking from the
    /// queue at that very moment (its record names this instance already, its board entry
    /// is not made yet).
    unclaimed_cancels: Mutex<HashMap<Uuid, Instant>>,
}

/// The channel of the ordered writer of shared records: made first, since the board that
/// writes to it is made before [`Shared::start`].
pub(crate) fn replication_channel() -> (UnboundedSender<Replication>, UnboundedReceiver<Replication>)
{
    tokio::sync::mpsc::unbounded_channel()
}

impl Shared {
    /// Starts the shared part over `local` (whose board writes to `replication`): the
    /// writer of shared records, the queue, and their loops on the current runtime.
    pub(crate) fn start(
        local: Arc<LocalJobs>,
        records: Arc<SharedJobs>,
        queue: SharedQueueSettings,
        replication: (UnboundedSender<Replication>, UnboundedReceiver<Replication>),
    ) -> Arc<Shared> {
        let (sender, receiver) = replication;
        let forgetting = local.board.forgetting().clone();
        tokio::spawn(replication::replicate(
            records.clone(),
            receiver,
            forgetting,
        ));
        let queue = Arc::new(SharedQueue::new(
            records.redis().clone(),
            records.instance(),
            queue,
        ));
        let shared = Arc::new(Shared {
            local,
            records,
            queue,
            replication: sender,
            accepted: Mutex::default(),
            unclaimed_cancels: Mutex::default(),
        });
        tokio::spawn(release_ended_work(Arc::downgrade(&shared)));
        tokio::spawn(announce_workers(Arc::downgrade(&shared)));
        shared
    }

    pub(crate) fn records(&self) -> &Arc<SharedJobs> {
        &self.records
    }

    pub(crate) fn queue(&self) -> &Arc<SharedQueue> {
        &self.queue
    }

    /// The workers of every live instance, as last announced.
    pub(crate) fn farm_workers(&self) -> usize {
        self.queue.farm_workers(self.local.workers)
    }

    /// How long a caller refused for a full queue should wait: the farm's workers through
    /// the shared queue at this instance's recent pace.
    pub(crate) fn queue_retry_after(&self) -> Duration {
        self.local
            .retry_after_waiting(self.queue.waiting(), self.farm_workers())
    }

    /// Whether `fingerprint` is quarantined by any instance.
    pub(crate) async fn is_quarantined(
        &self,
        fingerprint: &Fingerprint,
    ) -> Result<bool, SharedError> {
        self.records.is_quarantined(fingerprint).await
    }

    /// Quarantines `fingerprint` for every instance (after this one's own quarantine).
    pub(crate) fn quarantine(&self, fingerprint: &Fingerprint) {
        let _ = self
            .replication
            .send(Replication::Quarantine(fingerprint.clone()));
    }

    /// Puts `job` (admitted, its record published and its fingerprint claimed) in the shared
    /// queue: its entry and its record (queued, owned by nobody until an instance takes it)
    /// are written together, or neither when the queue or the tenant's share is full.
    async fn enqueue(&self, job: Job, work: Arc<RenderWork>) -> Result<Job, SubmitRefused> {
        let mut record = job.clone();
        record.owner = None;
        record.reclaimable = true;
        // Above the snapshot published before the fingerprint was claimed.
        record.version = job.version + 1;
        let followers = self.local.queue.tenant_jobs(&job.tenant);
        // Admission pins every render's files; work without them is a bug of ours.
        let Some(shared_work) = SharedWork::of(&work) else {
            return Err(SubmitRefused::Internal(
                "a render without pinned template files".into(),
            ));
        };
        match self.queue.enqueue(&record, &shared_work, followers).await {
            Ok(waiting) => {
                self.local.metrics.queue_depth.set(waiting as i64);
                lock(&self.accepted).insert(job.id, work);
                Ok(record)
            }
            Err(EnqueueRefused::Refused(refused)) => {
                self.local.count_tenant_refusal(&job.tenant, refused);
                self.share_refusal(&job, refused).await;
                Err(SubmitRefused::Queue(refused))
            }
            Err(EnqueueRefused::Shared(error)) => Err(SubmitRefused::Shared(error)),
        }
    }

    /// Puts a job taken from the shared queue on the board (as its render here), cancelled
    /// at once if a cancel request came for it while it was being taken.
    pub(crate) fn adopt_taken(&self, job: Job, work: Arc<RenderWork>) {
        let id = job.id;
        let mut unclaimed = lock(&self.unclaimed_cancels);
        self.local.board.adopt(job, work);
        if unclaimed.remove(&id).is_some() {
            self.local.board.request_cancel(id);
        }
        drop(unclaimed);
        self.local.discard_evicted();
    }

    /// Acts on another instance's request to cancel `id`: cancels it when it is this
    /// instance's, else keeps the request a moment, in case this instance is taking that
    /// job right now ([`Shared::adopt_taken`] looks).
    pub(crate) async fn cancel_requested(&self, id: Uuid) {
        {
            let mut unclaimed = lock(&self.unclaimed_cancels);
            if self.local.board.get(id).is_none() {
                unclaimed.retain(|_, heard| heard.elapsed() < UNCLAIMED_CANCEL_MEMORY);
                if unclaimed.len() < MAX_UNCLAIMED_CANCELS {
                    unclaimed.insert(id, Instant::now());
                }
                return;
            }
        }
        self.local.cancel(id).await;
    }

    /// This instance stops: the jobs it accepted are the farm's (their template files must
    /// outlive this process for whichever instance renders them; the pin sweep removes them
    /// after the retention), and its workers stop counting towards the farm's at once.
    pub(crate) async fn leave(&self) {
        for (_, work) in lock(&self.accepted).drain() {
            std::mem::forget(work);
        }
        if let Err(error) = self.queue.announce(0).await {
            tracing::debug!(%error, "cannot tell the farm this instance leaves");
        }
    }
}

/// Lets go of the work (and template files) of jobs accepted here once they have ended
/// wherever they rendered (or their records expired), until the shared part goes.
async fn release_ended_work(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(ACCEPTED_CHECK_INTERVAL).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let ids: Vec<_> = lock(&shared.accepted).keys().copied().collect();
        for id in ids {
            if let Ok(record) = shared.records.stored(id).await {
                if record.is_none_or(|job| job.state.is_terminal()) {
                    lock(&shared.accepted).remove(&id);
                }
            }
        }
    }
}

/// Announces this instance's workers to the farm every [`ANNOUNCE_EVERY`] (the retry delay
/// of a full queue counts every live instance's workers) until the server shuts down (the
/// drain says it leaves) or the shared part goes.
async fn announce_workers(shared: Weak<Shared>) {
    loop {
        let Some(current) = shared.upgrade() else {
            return;
        };
        let (local, queue) = (&current.local, &current.queue);
        if local.queue.is_closed() {
            return;
        }
        match queue.announce(local.workers).await {
            Ok(()) => {
                local.metrics.queue_depth.set(queue.waiting() as i64);
            }
            Err(error) => tracing::debug!(%error, "cannot announce this instance's workers"),
        }
        if local.queue.is_closed() {
            // The drain said it leaves while this announcement was on its way: say it again.
            let _ = queue.announce(0).await;
            return;
        }
        drop(current);
        tokio::time::sleep(ANNOUNCE_EVERY).await;
    }
}
