//! The two loops that turn job changes into delivered webhooks, apart from the render workers
//! (they only wait on sockets and the store):
//! - the *announcer* reads every snapshot the job board publishes and, when a job with a
//!   webhook enters a state its caller asked to hear about, keeps a delivery for that event
//!   (once: its `webhook-id` is made from the job and the event, so an event announced again,
//!   here or by another instance, is kept once);
//! - the *sender* claims due deliveries from the store and sends each, at most
//!   `--webhook-concurrency` at once on the instance, shared by tenants in turn
//!   ([`super::turns`]), and [`MAX_PER_DESTINATION`] to one destination, skipping a
//!   destination whose breaker is open ([`super::delivery::Breaker`]): a receiver that never
//!   answers holds a few slots for the answer timeout, a tenant with many deliveries holds
//!   its share, and every other destination's and tenant's deliveries go on.
//!
//! An event whose tenant (or instance) has as many deliveries waiting as it may is not kept
//! to be sent; the store keeps a record of it instead, which its job shows, and it is
//! counted (`webhook_attempts{outcome="not_kept"}`) and logged: never silently dropped.
//!
//! Any instance sends any delivery (the store is shared with Redis), so a delivery whose
//! instance stopped is sent by another once its claim lapses; a restart of the only instance
//! finds its deliveries in the data directory. An instance that stops gracefully
//! ([`SenderStop::stop`]) claims nothing more, lets its attempts in flight end for
//! [`ATTEMPTS_AFTER_STOP`] so their outcomes are kept, and puts back the rest as they were,
//! due at once for another instance (or for itself after a restart).

use super::client::Sender;
use super::delivery::{Breaker, Delivery, State};
use super::destination::Policy;
use super::event::{self, EventType};
use super::retry::{Outcome, Verdict};
use super::signing::{signature_header, SigningSecrets};
use super::store::{Deliveries, Full, Kept, StoreError, Stored};
use super::turns::{SlotGuard, Slots};
use crate::auth::TenantId;
use crate::jobs::Job;
use crate::metrics::{Metrics, WebhookAttemptLabels};
use crate::sync::lock;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::JoinSet;
use uuid::Uuid;

/// Deliveries in flight to one destination (scheme, host and port) at once: a receiver
/// that never answers holds this many slots, not the instance's.
pub const MAX_PER_DESTINATION: usize = 4;
/// How often the sender looks for due deliveries when nothing woke it (a retry's time
/// coming, another instance's claim lapsing).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a delivery whose destination has all its slots taken waits before it is tried.
const BUSY_DESTINATION_WAIT: Duration = Duration::from_secs(1);
/// How often ended deliveries' records are swept and the pending ones counted.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(60);
/// How long attempts in flight may go on once the instance stops, so that a receiver's
/// answer is kept rather than sent again: a receiver answers in well under this, and a
/// receiver that hangs (up to the connect and answer timeouts, 20 s) does not hold the pod's
/// termination; its delivery is put back as it was and sent again.
pub const ATTEMPTS_AFTER_STOP: Duration = Duration::from_secs(5);

/// The job as GetRenderJob answers it, in canonical JSON (the gRPC boundary writes it).
pub type JobJson = Arc<dyn Fn(&Job) -> serde_json::Value + Send + Sync>;

/// What the loops share.
pub struct Dispatcher {
    pub store: Deliveries,
    pub sender: Sender,
    pub policy: Arc<Policy>,
    pub secrets: Arc<SigningSecrets>,
    pub metrics: Arc<Metrics>,
    pub job_json: JobJson,
    /// How long a delivery is retried.
    pub window: Duration,
    /// Deliveries in flight at once on this instance.
    pub concurrency: usize,
    /// How long ended deliveries' records are kept (as long as jobs).
    pub kept: Duration,
}

impl Dispatcher {
    /// Spawns both loops in `background`; `snapshots` is what the job board publishes. The
    /// announcer runs until `background` is shut down (so events of renders that end during
    /// the drain are kept); the sender until [`SenderStop::stop`].
    pub fn start(
        self,
        snapshots: mpsc::UnboundedReceiver<Job>,
        background: &mut JoinSet<()>,
    ) -> SenderStop {
        let dispatcher = Arc::new(self);
        let wake = Arc::new(Notify::new());
        let (stop, stopping) = watch::channel(false);
        let (stopped_signal, stopped) = oneshot::channel();
        background.spawn(announce(dispatcher.clone(), snapshots, wake.clone()));
        background.spawn(async move {
            send_due(dispatcher, wake, stopping).await;
            let _ = stopped_signal.send(());
        });
        SenderStop { stop, stopped }
    }
}

/// Stops the sender gracefully (module documentation).
pub struct SenderStop {
    stop: watch::Sender<bool>,
    stopped: oneshot::Receiver<()>,
}

impl SenderStop {
    /// Returns once the sender has kept or put back every delivery it claimed: at most
    /// [`ATTEMPTS_AFTER_STOP`] and a store round trip.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.stopped.await;
    }
}

/// Keeps a delivery for every event asked for, as jobs enter their states.
async fn announce(
    dispatcher: Arc<Dispatcher>,
    mut snapshots: mpsc::UnboundedReceiver<Job>,
    wake: Arc<Notify>,
) {
    // Events kept for jobs not ended yet (a running job publishes its progress often): the
    // store is asked once per event, not once per snapshot. An ended job leaves it.
    let mut announced: HashMap<Uuid, HashSet<EventType>> = HashMap::new();
    loop {
        let Some(job) = snapshots.recv().await else {
            return;
        };
        let Some(notify) = &job.notify else { continue };
        let terminal = job.state.is_terminal();
        if let Some(event) = job.webhook_event() {
            let seen = announced.entry(job.id).or_default();
            if seen.insert(event) {
                let stored = Stored {
                    delivery: Delivery::new(event.webhook_id(job.id), SystemTime::now()),
                    tenant: job.tenant.to_string(),
                    url: notify.url.clone(),
                    body: String::from_utf8_lossy(&event::body(
                        event,
                        (dispatcher.job_json)(&job),
                        SystemTime::now(),
                    ))
                    .into_owned(),
                };
                match keep_new(&dispatcher.store, &stored).await {
                    Ok(Kept::New | Kept::Before) => wake.notify_one(),
                    Ok(Kept::NotKept(full)) => {
                        count(&dispatcher, "not_kept");
                        let bound = match full {
                            Full::Tenant => "its tenant's",
                            Full::Instance => "the instance's",
                        };
                        tracing::warn!(job_id = %job.id, tenant = %job.tenant, event = event.as_str(), bound, "webhook deliveries waiting at their bound; the event is not sent (its job shows it)");
                    }
                    Err(error) => {
                        count(&dispatcher, "not_kept");
                        tracing::error!(job_id = %job.id, event = event.as_str(), %error, "cannot keep a webhook delivery; the event is not sent");
                    }
                }
            }
        }
        if terminal {
            announced.remove(&job.id);
        }
    }
}

/// Waits between attempts to keep a new delivery while the store fails (Redis restarting):
/// about half a minute in all, then the event is given up (logged and counted).
const KEEP_RETRY_DELAYS: [Duration; 5] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// Keeps a new delivery (or, past a bound, the record that it was not kept), trying again
/// while the store fails.
async fn keep_new(store: &Deliveries, stored: &Stored) -> Result<Kept, StoreError> {
    let mut delays = KEEP_RETRY_DELAYS.iter();
    loop {
        match store.create(stored).await {
            Ok(kept) => return Ok(kept),
            Err(error) => match delays.next() {
                Some(delay) => {
                    tracing::warn!(webhook_id = %stored.delivery.id, %error, "cannot keep a webhook delivery yet; trying again");
                    tokio::time::sleep(*delay).await;
                }
                None => return Err(error),
            },
        }
    }
}

/// In-flight counts and breakers, by destination.
#[derive(Default)]
struct Destinations {
    by_key: Mutex<HashMap<String, DestinationState>>,
}

#[derive(Default)]
struct DestinationState {
    in_flight: usize,
    breaker: Breaker,
}

/// Whether a delivery may go to a destination now, or until when it waits.
enum Admitted {
    Now,
    WaitUntil(SystemTime),
}

impl Destinations {
    fn admit(&self, key: &str, now: SystemTime) -> Admitted {
        let mut by_key = lock(&self.by_key);
        let state = by_key.entry(key.to_owned()).or_default();
        if state.in_flight >= MAX_PER_DESTINATION {
            return Admitted::WaitUntil(now + BUSY_DESTINATION_WAIT);
        }
        if !state.breaker.admit(now) {
            let until = state
                .breaker
                .open_until()
                .filter(|until| *until > now)
                .unwrap_or(now + BUSY_DESTINATION_WAIT);
            return Admitted::WaitUntil(until);
        }
        state.in_flight += 1;
        Admitted::Now
    }

    /// An admitted delivery's attempt ended with `outcome`; answers how many breakers are
    /// open.
    fn finish(&self, key: &str, outcome: Outcome, now: SystemTime) -> usize {
        let mut by_key = lock(&self.by_key);
        if let Some(state) = by_key.get_mut(key) {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.breaker.record(outcome, now);
        }
        // A destination with nothing in flight and no failure to remember needs no entry
        // (so the map holds only destinations in use or failing).
        by_key.retain(|_, state| state.in_flight > 0 || !state.breaker.is_clear());
        by_key
            .values()
            .filter(|state| state.breaker.is_open())
            .count()
    }
}

/// Claims and sends due deliveries until `stopping` turns true, then ends its attempts
/// (module documentation).
async fn send_due(
    dispatcher: Arc<Dispatcher>,
    wake: Arc<Notify>,
    mut stopping: watch::Receiver<bool>,
) {
    let sending = Sending {
        slots: Arc::new(Slots::new(dispatcher.concurrency)),
        destinations: Arc::new(Destinations::default()),
        wake: wake.clone(),
        dispatcher: dispatcher.clone(),
    };
    let mut attempts = Attempts::default();
    let mut last_housekeeping: Option<tokio::time::Instant> = None;
    // The tenant served last: the next turn starts after it.
    let mut last_served: Option<String> = None;
    while !*stopping.borrow() {
        // Ended attempts' tasks are let go of.
        while attempts.tasks.try_join_next().is_some() {}
        if last_housekeeping.is_none_or(|at| at.elapsed() >= HOUSEKEEPING_INTERVAL) {
            last_housekeeping = Some(tokio::time::Instant::now());
            housekeeping(&dispatcher).await;
        }
        if sending.slots.free() > 0 {
            match claim_in_turn(&dispatcher, &sending.slots, &mut last_served).await {
                Ok(claimed) => {
                    for (stored, slot) in claimed {
                        start_attempt(&sending, &mut attempts, stored, slot).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the due webhook deliveries; trying again")
                }
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = stopping.changed() => {}
        }
    }
    attempts.end(&dispatcher).await;
}

/// The due deliveries the free slots take now, tenants served in turn ([`super::turns`]),
/// each with its slot.
async fn claim_in_turn(
    dispatcher: &Dispatcher,
    slots: &Slots,
    last_served: &mut Option<String>,
) -> Result<Vec<(Stored, SlotGuard)>, StoreError> {
    let now = SystemTime::now();
    let due = dispatcher.store.due(now, slots.capacity()).await?;
    let mut turn = slots.turn(&due, last_served.as_deref());
    if turn.last.is_some() {
        *last_served = turn.last.clone();
    }
    let claimed = dispatcher.store.claim(&turn.claims, now).await?;
    let mut with_slots = Vec::with_capacity(claimed.len());
    for stored in claimed {
        match turn.slot_for(&stored.tenant) {
            Some(slot) => with_slots.push((stored, slot)),
            None => {
                // The store claims at most the count asked of each tenant: never here. Put
                // back untried rather than sent over the tenant's share.
                tracing::warn!(webhook_id = %stored.delivery.id, tenant = %stored.tenant, "a webhook delivery claimed beyond its turn; put back");
                keep(dispatcher, &stored).await;
            }
        }
    }
    // The slots the store had no delivery for go back as the turn is dropped.
    Ok(with_slots)
}

/// What the sender's attempts share.
#[derive(Clone)]
struct Sending {
    dispatcher: Arc<Dispatcher>,
    slots: Arc<Slots>,
    destinations: Arc<Destinations>,
    /// Woken when an attempt ends, so that the next turn need not wait for the poll.
    wake: Arc<Notify>,
}

/// The attempts in flight, and each one's delivery as it was claimed (put back if the
/// attempt is cut short).
#[derive(Default)]
struct Attempts {
    tasks: JoinSet<()>,
    claimed: Arc<Mutex<HashMap<String, Stored>>>,
}

impl Attempts {
    /// Lets the attempts in flight end for [`ATTEMPTS_AFTER_STOP`], then cuts the rest short
    /// and puts their deliveries back as claimed, due again at once.
    async fn end(mut self, dispatcher: &Dispatcher) {
        let ended = tokio::time::timeout(ATTEMPTS_AFTER_STOP, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if ended.is_ok() {
            return;
        }
        self.tasks.shutdown().await;
        let cut_short: Vec<Stored> = lock(&self.claimed)
            .drain()
            .map(|(_, stored)| stored)
            .collect();
        tracing::info!(
            deliveries = cut_short.len(),
            "webhook attempts cut short by the stop; put back to be sent again"
        );
        for stored in cut_short {
            keep(dispatcher, &stored).await;
        }
    }
}

async fn housekeeping(dispatcher: &Dispatcher) {
    if let Err(error) = dispatcher.store.sweep(dispatcher.kept).await {
        tracing::warn!(%error, "cannot sweep ended webhook deliveries");
    }
    match dispatcher.store.pending().await {
        Ok(pending) => {
            dispatcher
                .metrics
                .webhook_deliveries_pending
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
        }
        Err(error) => tracing::warn!(%error, "cannot count the pending webhook deliveries"),
    }
    match dispatcher.store.earliest_due().await {
        Ok(earliest) => {
            let lag = earliest
                .and_then(|at| SystemTime::now().duration_since(at).ok())
                .unwrap_or_default();
            dispatcher
                .metrics
                .webhook_delivery_lag_seconds
                .set(i64::try_from(lag.as_secs()).unwrap_or(i64::MAX));
        }
        Err(error) => tracing::warn!(%error, "cannot read the earliest webhook delivery due"),
    }
}

/// Sends a claimed delivery on a task of its own, holding the `slot` of its tenant's turn,
/// or puts it back for later (its slot given back) when its destination is busy or its
/// breaker open.
async fn start_attempt(
    sending: &Sending,
    attempts: &mut Attempts,
    mut stored: Stored,
    slot: SlotGuard,
) {
    let (dispatcher, destinations) = (&sending.dispatcher, &sending.destinations);
    let now = SystemTime::now();
    let destination_key = destination_key(&stored.url);
    if let Admitted::WaitUntil(until) = destinations.admit(&destination_key, now) {
        stored.delivery = stored.delivery.deferred(until, dispatcher.window);
        if stored.delivery.state == State::Expired {
            count(dispatcher, "expired");
        }
        keep(dispatcher, &stored).await;
        return;
    }
    let Sending {
        dispatcher,
        destinations,
        wake,
        ..
    } = sending.clone();
    let claimed = attempts.claimed.clone();
    lock(&claimed).insert(stored.delivery.id.clone(), stored.clone());
    attempts.tasks.spawn(async move {
        let outcome = attempt(&dispatcher, &stored).await;
        let now = SystemTime::now();
        let open = destinations.finish(&destination_key, outcome, now);
        dispatcher
            .metrics
            .webhook_breakers_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        let after = stored
            .delivery
            .after(outcome, now, jitter_unit(), dispatcher.window);
        count(
            &dispatcher,
            match (Verdict::of(outcome), after.state) {
                (_, State::Delivered) => "delivered",
                (_, State::Refused) => "refused",
                (_, State::Expired) => "expired",
                (_, State::Due(_)) => "retried",
                (_, State::NotKept) => "not_kept",
            },
        );
        tracing::info!(
            webhook_id = %after.id,
            attempts = after.attempts,
            status = ?after.last_status,
            state = ?after.state,
            "webhook attempt"
        );
        stored.delivery = after;
        keep(&dispatcher, &stored).await;
        lock(&claimed).remove(&stored.delivery.id);
        drop(slot);
        // A slot is free: the next turn need not wait for the poll.
        wake.notify_one();
    });
}

/// Keeps a delivery after its attempt; a store that fails leaves it claimed, and it is due
/// again when its claim lapses (at least once, never lost).
async fn keep(dispatcher: &Dispatcher, stored: &Stored) {
    if let Err(error) = dispatcher.store.put(stored).await {
        tracing::warn!(webhook_id = %stored.delivery.id, %error, "cannot keep a webhook delivery's state; it is tried again later");
    }
}

fn count(dispatcher: &Dispatcher, outcome: &'static str) {
    dispatcher
        .metrics
        .webhook_attempts
        .get_or_create(&WebhookAttemptLabels { outcome })
        .inc();
}

/// One attempt: the destination checked again under the current policy, the body signed
/// with the tenant's current secrets, sent.
async fn attempt(dispatcher: &Dispatcher, stored: &Stored) -> Outcome {
    let destination = match dispatcher.policy.destination(&stored.url) {
        Ok(destination) => destination,
        Err(refused) => {
            tracing::warn!(webhook_id = %stored.delivery.id, %refused, "webhook destination refused");
            return Outcome::Refused;
        }
    };
    let secrets = match TenantId::parse(&stored.tenant) {
        Ok(tenant) => dispatcher.secrets.of(&tenant),
        Err(_) => Vec::new(),
    };
    if secrets.is_empty() {
        tracing::warn!(webhook_id = %stored.delivery.id, tenant = %stored.tenant, "no webhook secret for the tenant; the delivery is refused");
        return Outcome::Refused;
    }
    let timestamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let body = Bytes::from(stored.body.clone().into_bytes());
    let headers = [
        ("webhook-id", stored.delivery.id.clone()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            signature_header(&secrets, &stored.delivery.id, timestamp, &body),
        ),
    ];
    dispatcher.sender.send(&destination, &headers, body).await
}

/// What deliveries share a destination's slots and breaker: scheme, host and port.
fn destination_key(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => format!(
            "{}://{}",
            uri.scheme_str().unwrap_or(""),
            uri.authority().map_or("", |authority| authority.as_str())
        ),
        Err(_) => url.to_owned(),
    }
}

/// A number in 0..1 for the backoff's jitter (a UUID's random bits: no generator to keep).
fn jitter_unit() -> f64 {
    let bits = Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// The deliveries of `job`'s events, for GetRenderJob.
pub async fn deliveries_of(
    store: &Deliveries,
    job: &Job,
) -> Result<Vec<(EventType, Delivery)>, StoreError> {
    let Some(notify) = &job.notify else {
        return Ok(Vec::new());
    };
    let ids: Vec<String> = notify
        .events
        .iter()
        .map(|event| event.webhook_id(job.id))
        .collect();
    let found = store.get(ids).await?;
    Ok(notify
        .events
        .iter()
        .filter_map(|event| {
            let id = event.webhook_id(job.id);
            found
                .iter()
                .find(|stored| stored.delivery.id == id)
                .map(|stored| (*event, stored.delivery.clone()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_takes_a_few_deliveries_at_once_and_waits_while_its_breaker_is_open() {
        let destinations = Destinations::default();
        let now = SystemTime::now();
        for _ in 0..MAX_PER_DESTINATION {
            assert!(matches!(
                destinations.admit("https://a", now),
                Admitted::Now
            ));
        }
        assert!(matches!(
            destinations.admit("https://a", now),
            Admitted::WaitUntil(_)
        ));
        assert!(
            matches!(destinations.admit("https://b", now), Admitted::Now),
            "another destination is not held up"
        );
        for _ in 0..MAX_PER_DESTINATION {
            destinations.finish("https://a", Outcome::NoAnswer, now);
        }
        let open = destinations.finish("https://b", Outcome::NoAnswer, now);
        assert_eq!(open, 0, "four failures do not open a breaker");
        assert!(matches!(
            destinations.admit("https://a", now),
            Admitted::Now
        ));
        let open = destinations.finish("https://a", Outcome::NoAnswer, now);
        assert_eq!(open, 1, "the fifth in a row does");
        match destinations.admit("https://a", now) {
            Admitted::WaitUntil(until) => {
                assert_eq!(until, now + super::super::delivery::BREAKER_COOLDOWN)
            }
            Admitted::Now => panic!("admitted through an open breaker"),
        }
        assert_eq!(
            destination_key("https://x.example:8443/a?b"),
            "https://x.example:8443"
        );
        let unit = jitter_unit();
        assert!((0.0..1.0).contains(&unit));
    }
}
