//! The refusals of the last hour by reason, for GetServiceStatus: beside the `rejections`
//! counter (which counts since start, for Prometheus to take rates of), a rolling window of
//! [`WINDOW_MINUTES`] one-minute buckets per reason, so an operator without Prometheus still
//! reads "what was refused lately, and why".
//!
//! Its memory is fixed when it is made: the reasons are a closed set ([`Reason::ALL`], plus
//! one bucket row for a refusal without a reason of ours), so a caller cannot grow it
//! whatever it sends: (reasons + 1) × 60 counters, some 40 KB. A refusal costs one short
//! lock and at most one bucket cleared per reason when a new minute begins.

use crate::reason::Reason;
use crate::sync::lock;
use std::sync::Mutex;
use std::time::Instant;

/// Minutes the window covers: the status page's "last hour".
pub const WINDOW_MINUTES: usize = 60;
/// The row of refusals whose reason is none of ours (an error without ErrorInfo).
const UNSPECIFIED_ROW: usize = Reason::ALL.len();
/// How a refusal without a reason of ours is named.
pub const UNSPECIFIED_REASON: &str = "UNSPECIFIED";

/// The counts of each reason in each of the last [`WINDOW_MINUTES`] minutes.
#[derive(Debug)]
pub struct RecentRefusals {
    /// Minutes are counted from here.
    started: Instant,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    /// The minute (since `started`) each bucket counts; a bucket of an older minute is
    /// cleared before it counts again.
    minutes: [u64; WINDOW_MINUTES],
    /// One row per reason (and the unspecified one), one bucket per minute.
    counts: Vec<[u64; WINDOW_MINUTES]>,
}

impl Default for RecentRefusals {
    fn default() -> RecentRefusals {
        RecentRefusals {
            started: Instant::now(),
            window: Mutex::new(Window {
                minutes: [0; WINDOW_MINUTES],
                counts: vec![[0; WINDOW_MINUTES]; UNSPECIFIED_ROW + 1],
            }),
        }
    }
}

impl RecentRefusals {
    fn minute_now(&self) -> u64 {
        self.started.elapsed().as_secs() / 60
    }

    /// One refusal with `reason` (its wire spelling), now.
    pub fn record(&self, reason: &str) {
        self.record_at(reason, self.minute_now());
    }

    /// The refusals of the last hour (this minute and the 59 before), by reason, most
    /// first (then by name); reasons without any are left out.
    pub fn last_hour(&self) -> Vec<(&'static str, u64)> {
        self.counts_at(self.minute_now())
    }

    fn record_at(&self, reason: &str, minute: u64) {
        let row = Reason::ALL
            .iter()
            .position(|known| known.as_str() == reason)
            .unwrap_or(UNSPECIFIED_ROW);
        let bucket = (minute % WINDOW_MINUTES as u64) as usize;
        let mut window = lock(&self.window);
        if window.minutes[bucket] != minute {
            window.minutes[bucket] = minute;
            for counts in &mut window.counts {
                counts[bucket] = 0;
            }
        }
        window.counts[row][bucket] += 1;
    }

    fn counts_at(&self, minute: u64) -> Vec<(&'static str, u64)> {
        let window = lock(&self.window);
        let recent: Vec<usize> = (0..WINDOW_MINUTES)
            .filter(|&bucket| {
                let counted = window.minutes[bucket];
                counted <= minute && minute - counted < WINDOW_MINUTES as u64
            })
            .collect();
        let mut counts: Vec<(&'static str, u64)> = window
            .counts
            .iter()
            .enumerate()
            .map(|(row, buckets)| {
                let name = Reason::ALL
                    .get(row)
                    .map_or(UNSPECIFIED_REASON, |reason| reason.as_str());
                (name, recent.iter().map(|&bucket| buckets[bucket]).sum())
            })
            .filter(|(_, count)| *count > 0)
            .collect();
        drop(window);
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_by_reason_most_first_for_an_hour_then_forgotten() {
        let window = RecentRefusals::default();
        for _ in 0..3 {
            window.record_at("QUEUE_FULL", 10);
        }
        window.record_at("REQUEST_INVALID", 10);
        window.record_at("REQUEST_INVALID", 40);
        window.record_at("not a reason of ours", 69);
        assert_eq!(
            window.counts_at(69),
            vec![
                ("QUEUE_FULL", 3),
                ("REQUEST_INVALID", 2),
                (UNSPECIFIED_REASON, 1)
            ]
        );
        // Minute 10 has left the window at minute 70; minute 40's refusal is still in it.
        assert_eq!(
            window.counts_at(70),
            vec![("REQUEST_INVALID", 1), (UNSPECIFIED_REASON, 1)]
        );
        // A new minute in a bucket clears what it counted an hour ago.
        window.record_at("QUEUE_FULL", 130);
        assert_eq!(window.counts_at(130), vec![("QUEUE_FULL", 1)]);
    }
}
