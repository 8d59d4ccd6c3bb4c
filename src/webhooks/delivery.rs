//! One event's delivery as a state machine, and the breaker one destination's failures trip:
//! both pure (the clock and the jitter are given), so that the loop that will run them only
//! stores and sends.
//!
//! A delivery is tried until it is delivered, refused for good, or its window (24 hours by
//! default) has passed; each attempt's outcome sets the next attempt ([`super::retry`]). A
//! destination whose deliveries keep failing is left alone for a while (the breaker opens),
//! then tried with one delivery (half-open) before the others follow: a dead receiver costs
//! one attempt per cooldown, not one per delivery, and nobody else's deliveries wait for it.

use super::retry::{backoff, Outcome, Verdict};
use std::time::{Duration, SystemTime};

/// How long a delivery is retried by default (`--webhook-retry-hours`).
pub const DEFAULT_DELIVERY_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Failed attempts in a row (transient ones) after which a destination's breaker opens.
pub const BREAKER_FAILURES: u32 = 5;
/// How long an open breaker keeps a destination's deliveries waiting before one is tried.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(60);

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum State {
    /// To be tried at this time.
    Due(SystemTime),
    Delivered,
    /// Refused by the receiver (a permanent answer) or by the policy.
    Refused,
    /// Its window passed without a delivery.
    Expired,
    /// Never kept to be sent: its tenant's deliveries waiting, or the instance's, were at
    /// their bound when the event happened (shown on its job, REFUSED with no attempt).
    NotKept,
}

/// One event's delivery to one destination.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Delivery {
    /// The `webhook-id`: the same on every attempt.
    pub id: String,
    pub created: SystemTime,
    pub attempts: u32,
    /// The last answer's status, if the receiver answered.
    pub last_status: Option<u16>,
    pub state: State,
}

impl Delivery {
    /// A delivery due at once.
    pub fn new(id: String, now: SystemTime) -> Delivery {
        Delivery {
            id,
            created: now,
            attempts: 0,
            last_status: None,
            state: State::Due(now),
        }
    }

    /// The delivery after an attempt that came to `outcome` at `now`; `unit` (0..1) draws
    /// the jitter; `window` is how long after its creation it may still be tried.
    pub fn after(
        &self,
        outcome: Outcome,
        now: SystemTime,
        unit: f64,
        window: Duration,
    ) -> Delivery {
        let attempts = self.attempts.saturating_add(1);
        let last_status = match outcome {
            Outcome::Answered { status, .. } => Some(status),
            Outcome::NoAnswer | Outcome::Refused => self.last_status,
        };
        let state = match Verdict::of(outcome) {
            Verdict::Delivered => State::Delivered,
            Verdict::Permanent => State::Refused,
            Verdict::Retry(told) => {
                let next = now + told.unwrap_or_else(|| backoff(attempts, unit));
                if next > self.created + window {
                    State::Expired
                } else {
                    State::Due(next)
                }
            }
        };
        Delivery {
            attempts,
            last_status,
            state,
            ..self.clone()
        }
    }
}

impl Delivery {
    /// The delivery put back untried until `until` (its destination is busy, or its
    /// breaker open): expired instead when that is past its window.
    pub fn deferred(&self, until: SystemTime, window: Duration) -> Delivery {
        let state = if until > self.created + window {
            State::Expired
        } else {
            State::Due(until)
        };
        Delivery {
            state,
            ..self.clone()
        }
    }
}

/// One destination's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breaker {
    failures: u32,
    open_until: Option<SystemTime>,
    /// A trial delivery is out (half-open): the others wait for its outcome.
    trial: bool,
}

impl Breaker {
    /// Whether a delivery may be sent to the destination at `now`; taking the half-open
    /// trial when the cooldown has passed.
    pub fn admit(&mut self, now: SystemTime) -> bool {
        match self.open_until {
            None => true,
            Some(until) if now < until || self.trial => false,
            Some(_) => {
                self.trial = true;
                true
            }
        }
    }

    /// What an attempt to the destination came to, at `now`.
    pub fn record(&mut self, outcome: Outcome, now: SystemTime) {
        self.trial = false;
        match Verdict::of(outcome) {
            // A permanent answer is an answer: the receiver is alive.
            Verdict::Delivered | Verdict::Permanent => *self = Breaker::default(),
            Verdict::Retry(_) => {
                self.failures = self.failures.saturating_add(1);
                if self.failures >= BREAKER_FAILURES {
                    self.open_until = Some(now + BREAKER_COOLDOWN);
                }
            }
        }
    }

    pub fn is_open(&self) -> bool {
        self.open_until.is_some()
    }

    /// Nothing to remember: no failure since the last success.
    pub fn is_clear(&self) -> bool {
        *self == Breaker::default()
    }

    /// Until when an open breaker keeps the destination's deliveries waiting.
    pub fn open_until(&self) -> Option<SystemTime> {
        self.open_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNAVAILABLE: Outcome = Outcome::Answered {
        status: 503,
        retry_after: None,
    };
    const OK: Outcome = Outcome::Answered {
        status: 200,
        retry_after: None,
    };

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    #[test]
    fn a_delivery_is_retried_as_told_until_delivered_refused_or_expired() {
        let delivery = Delivery::new("msg_1".into(), at(0));
        let told = Outcome::Answered {
            status: 503,
            retry_after: Some(Duration::from_secs(1)),
        };
        let retried = delivery.after(told, at(0), 0.5, DEFAULT_DELIVERY_WINDOW);
        assert_eq!(
            retried.state,
            State::Due(at(1)),
            "Retry-After: 1 is honoured"
        );
        assert_eq!((retried.attempts, retried.last_status), (1, Some(503)));
        let delivered = retried.after(OK, at(1), 0.5, DEFAULT_DELIVERY_WINDOW);
        assert_eq!(delivered.state, State::Delivered);
        assert_eq!(
            delivered.id, "msg_1",
            "the same webhook-id on every attempt"
        );
        let refused = delivery.after(
            Outcome::Answered {
                status: 400,
                retry_after: None,
            },
            at(0),
            0.5,
            DEFAULT_DELIVERY_WINDOW,
        );
        assert_eq!(refused.state, State::Refused);
        // Backoff with full jitter: the second attempt waits half of 2 × 5 s with unit 0.5.
        let twice = retried.after(Outcome::NoAnswer, at(1), 0.5, DEFAULT_DELIVERY_WINDOW);
        assert_eq!(twice.state, State::Due(at(6)));
        assert_eq!(
            twice.last_status,
            Some(503),
            "no answer keeps the last status"
        );
        // Past the window: expired, not due.
        let late = delivery.after(UNAVAILABLE, at(100), 1.0, Duration::from_secs(60));
        assert_eq!(late.state, State::Expired);
    }

    #[test]
    fn a_failing_destination_trips_its_breaker_and_one_trial_closes_it() {
        let mut breaker = Breaker::default();
        for failure in 0..BREAKER_FAILURES {
            assert!(breaker.admit(at(0)), "failure {failure}");
            breaker.record(UNAVAILABLE, at(0));
        }
        assert!(breaker.is_open());
        assert!(!breaker.admit(at(1)), "open during the cooldown");
        let after = at(BREAKER_COOLDOWN.as_secs());
        assert!(breaker.admit(after), "one trial after the cooldown");
        assert!(!breaker.admit(after), "only one");
        breaker.record(OK, after);
        assert!(!breaker.is_open());
        assert!(breaker.admit(after));
        // A failed trial opens it again for a cooldown.
        for _ in 0..BREAKER_FAILURES {
            breaker.record(Outcome::NoAnswer, after);
        }
        let later = after + BREAKER_COOLDOWN;
        assert!(breaker.admit(later));
        breaker.record(Outcome::NoAnswer, later);
        assert!(!breaker.admit(later + Duration::from_secs(1)));
    }
}
