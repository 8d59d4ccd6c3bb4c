//! What the board keeps per job ([`Entry`]: its snapshot, work, cancel token, watchers'
//! broadcast, followers) and the table of them ([`BoardState`]) with its accounting against
//! the bounds of the jobs kept: each entry's bytes, room made by evicting ended jobs; and
//! each tenant's jobs in the listing order (ListRenderJobs).

use crate::auth::TenantId;
use crate::jobs::listing::ListPosition;
use crate::jobs::model::{Job, RenderWork};
use crate::jobs::queue::{FollowerSlot, PushRefused};
use crate::jobs::retention::{RetainedJobs, Room};
use crate::jobs::Fingerprint;
use crate::sandbox::CancelToken;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast;
use uuid::Uuid;

/// Changes a watcher may fall behind by before it re-reads the snapshot: a job publishes
/// its state changes (≤ 4) and at most one progress change per percent. The channel (~45 KB
/// of slots) exists only while the job is watched, so at most `--max-watchers` of them.
pub(super) const WATCH_BACKLOG: usize = 128;
/// What the allocator adds to each heap allocation (its header and size-class rounding).
const ALLOCATION_OVERHEAD: u64 = 16;
/// A B-tree item of the eviction order (an order number and an id) with its share of a
/// node's slack; each ended job has one in the instance's order and one in its tenant's.
const EVICTION_ORDER_ITEM: u64 = 48;
/// A B-tree item of its tenant's listing order (a [`ListPosition`]: a time and an id, the
/// same size) with its share of a node's slack; every job has one.
const LISTING_ORDER_ITEM: u64 = EVICTION_ORDER_ITEM;

pub(super) struct Entry {
    pub(super) job: Job,
    /// Until the job ends: then its template files may go ([`RenderWork::pin`]).
    pub(super) work: Option<Arc<RenderWork>>,
    pub(super) cancel: CancelToken,
    /// While someone watches the job and it has not ended.
    pub(super) changes: Option<broadcast::Sender<Job>>,
    /// Jobs of the same fingerprint that follow this one's render.
    pub(super) followers: Vec<Uuid>,
    /// The job whose render this one follows.
    pub(super) leader: Option<Uuid>,
    /// A follower's place in the queue's capacity, until it ends.
    pub(super) slot: Option<FollowerSlot>,
    /// What it holds, as counted in the board's retained jobs ([`entry_bytes`]).
    pub(super) bytes: u64,
    /// Its place in the order ended jobs are evicted in, once it has ended.
    pub(super) ended: Option<u64>,
}

/// A heap string of `length` bytes.
fn string_bytes(length: usize) -> u64 {
    length as u64 + ALLOCATION_OVERHEAD
}

/// The memory an entry holds, estimated from what it allocates: the entry and its id in the
/// map of entries (a slot costs 16/7 of its size right after the map grew, 8/7 when full,
/// plus a control byte: counted at the worst), the cancel token's allocation, its
/// fingerprint (again in the render index: counted for every job), the output's strings and
/// the failure's message (its reason is a [`crate::reason::Reason`], held in the entry), its
/// followers' ids, its place in the eviction order and in its tenant's listing order. The
/// work of a
/// job that has not ended (its modifications) is bounded by the job limits, not here.
pub(super) fn entry_bytes(entry: &Entry) -> u64 {
    let slot = (std::mem::size_of::<Uuid>() + std::mem::size_of::<Entry>()) as u64 * 16 / 7 + 1;
    let cancel = 2 * std::mem::size_of::<usize>() as u64 + 8 + ALLOCATION_OVERHEAD;
    let job = &entry.job;
    let fingerprint = string_bytes(job.fingerprint.as_str().len());
    let render_index = fingerprint
        + (std::mem::size_of::<Fingerprint>() + std::mem::size_of::<Uuid>()) as u64 * 16 / 7
        + 1;
    let output = job.output.as_ref().map_or(0, |output| {
        string_bytes(output.content_type.len()) + string_bytes(output.sha256.len())
    });
    let error = job
        .error
        .as_ref()
        .map_or(0, |error| string_bytes(error.message.len()));
    let followers = match entry.followers.capacity() {
        0 => 0,
        capacity => capacity as u64 * std::mem::size_of::<Uuid>() as u64 + ALLOCATION_OVERHEAD,
    };
    slot + cancel
        + fingerprint
        + render_index
        + output
        + error
        + followers
        + 2 * EVICTION_ORDER_ITEM
        + LISTING_ORDER_ITEM
}

impl Entry {
    pub(super) fn new(mut job: Job, work: Arc<RenderWork>, leader: Option<Uuid>) -> Entry {
        // Above the version a job is shared with before it is admitted (0).
        job.version = job.version.max(1);
        let work = (!job.state.is_terminal()).then_some(work);
        Entry {
            job,
            work,
            cancel: CancelToken::default(),
            changes: None,
            followers: Vec::new(),
            leader,
            slot: None,
            bytes: 0,
            ended: None,
        }
    }

    pub(super) fn publish(&mut self) {
        if self.job.state.is_terminal() {
            // Every change of a job is published: an ended follower waits for nothing, and
            // an ended job renders nothing.
            self.slot = None;
            self.work = None;
        }
        self.job.version += 1;
        if let Some(changes) = &self.changes {
            // No receiver is fine: the watchers went away.
            let _ = changes.send(self.job.clone());
            // The last watcher gone, or the end sent (watchers read it before the channel
            // closes; later ones read the snapshot): the channel and its backlog go.
            if self.job.state.is_terminal() || changes.receiver_count() == 0 {
                self.changes = None;
            }
        }
    }
}

#[derive(Default)]
pub(super) struct BoardState {
    pub(super) entries: HashMap<Uuid, Entry>,
    /// Fingerprint → the job that renders it (queued or running) or rendered it (succeeded).
    pub(super) renders: HashMap<Fingerprint, Uuid>,
    /// The count of the entries, per tenant and in all, against their bounds.
    pub(super) retained: RetainedJobs,
    /// Jobs evicted to make room, until the scheduler takes them (to remove their outputs).
    pub(super) evicted: Vec<Job>,
    /// Each tenant's jobs in the listing order (ascending: read from the end for newest
    /// first); a tenant with no job has no set.
    pub(super) listing: HashMap<TenantId, BTreeSet<ListPosition>>,
}

impl BoardState {
    /// Removes job `id` (and its render index entry); answers it.
    pub(super) fn forget(&mut self, id: Uuid) -> Option<Job> {
        let entry = self.entries.remove(&id)?;
        if self.renders.get(&entry.job.fingerprint) == Some(&id) {
            self.renders.remove(&entry.job.fingerprint);
        }
        self.unlist(&entry.job);
        self.retained
            .remove(&entry.job.tenant, entry.bytes, entry.ended);
        Some(entry.job)
    }

    /// Makes room for a new job of `tenant` of `bytes` by evicting ended jobs (kept in
    /// `evicted`); `Err` when a bound is reached and nothing can go. With `must`, never
    /// refused (a job taken from the shared queue was accepted already): it goes over.
    pub(super) fn make_room(
        &mut self,
        tenant: &TenantId,
        bytes: u64,
        must: bool,
    ) -> Result<(), PushRefused> {
        // Each eviction lowers the count: at most one per job kept (the bound guards
        // against bookkeeping out of step, which would otherwise loop).
        for _ in 0..=self.entries.len() {
            match self.retained.room_for(tenant, bytes) {
                Room::Enough => return Ok(()),
                Room::Evict(id) => match self.forget(id) {
                    Some(job) => self.evicted.push(job),
                    None => return Ok(()),
                },
                Room::Full(_) if must => return Ok(()),
                Room::Full(full) => return Err(PushRefused::RetainedJobsFull(full)),
            }
        }
        Ok(())
    }

    /// Puts `entry` on the board, counted; refused (nothing changed but evictions) when
    /// there is no room for it, unless `must`.
    pub(super) fn put(&mut self, mut entry: Entry, must: bool) -> Result<(), PushRefused> {
        entry.bytes = entry_bytes(&entry);
        self.make_room(&entry.job.tenant, entry.bytes, must)?;
        let (id, tenant) = (entry.job.id, entry.job.tenant.clone());
        self.retained.add(&tenant, entry.bytes);
        if entry.job.state.is_terminal() {
            entry.ended = Some(self.retained.ended(&tenant, id));
        }
        let position = ListPosition::of(&entry.job);
        if let Some(old) = self.entries.insert(id, entry) {
            // The same id twice (never): the older entry is no longer counted.
            self.retained.remove(&old.job.tenant, old.bytes, old.ended);
            self.unlist(&old.job);
        }
        self.listing.entry(tenant).or_default().insert(position);
        Ok(())
    }

    /// Takes `job` out of its tenant's listing order (the tenant's set goes with its last).
    fn unlist(&mut self, job: &Job) {
        if let Some(positions) = self.listing.get_mut(&job.tenant) {
            positions.remove(&ListPosition::of(job));
            if positions.is_empty() {
                self.listing.remove(&job.tenant);
            }
        }
    }

    /// After a change of `id`: its bytes counted anew and, once it has ended, its place in
    /// the eviction order.
    pub(super) fn refresh(&mut self, id: Uuid) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let bytes = entry_bytes(entry);
        if bytes != entry.bytes {
            self.retained.resize(&entry.job.tenant, entry.bytes, bytes);
            entry.bytes = bytes;
        }
        if entry.ended.is_none() && entry.job.state.is_terminal() {
            entry.ended = Some(self.retained.ended(&entry.job.tenant, id));
        }
    }
}
