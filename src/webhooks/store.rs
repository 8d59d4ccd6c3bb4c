//! Deliveries kept in the data directory (the embedded default; Redis mode will keep them
//! beside the job records): one JSON file per delivery, `webhooks/<webhook-id>.json`, written
//! to a temporary file and renamed over the old one, so a crash leaves the last whole state
//! and a restart finds every delivery not yet ended. Ended deliveries are removed.

use super::delivery::{Delivery, State};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Deliveries kept at once: each is a file of a few KiB (the job's JSON); a hundred thousand
/// is a day of a busy instance's events with every receiver down, and a few hundred MiB.
pub const MAX_STORED_DELIVERIES: usize = 100_000;

/// A delivery with what it sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub delivery: Delivery,
    /// The tenant whose secrets sign it.
    pub tenant: String,
    pub url: String,
    /// The event's body, sent the same on every attempt.
    pub body: String,
}

/// Why a delivery cannot be kept.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{MAX_STORED_DELIVERIES} deliveries are waiting already")]
    Full,
    #[error("cannot keep a webhook delivery: {0}")]
    Io(#[from] std::io::Error),
}

/// The deliveries of this instance's data directory.
#[derive(Debug, Clone)]
pub struct DirectoryDeliveries {
    dir: PathBuf,
}

impl DirectoryDeliveries {
    /// The deliveries under `data_dir` (the folder is made when missing).
    pub fn open(data_dir: &Path) -> std::io::Result<DirectoryDeliveries> {
        let dir = data_dir.join("webhooks");
        std::fs::create_dir_all(&dir)?;
        Ok(DirectoryDeliveries { dir })
    }

    fn path(&self, id: &str) -> PathBuf {
        // Ids are ours (`msg_` and a UUID): no separator can reach the path.
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        self.dir.join(format!("{safe}.json"))
    }

    /// Keeps `stored` (a new delivery, or one after an attempt); an ended one is removed.
    pub fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        let path = self.path(&stored.delivery.id);
        if !matches!(stored.delivery.state, State::Due(_)) {
            return match std::fs::remove_file(&path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
                _ => Ok(()),
            };
        }
        if !path.exists() && self.count()? >= MAX_STORED_DELIVERIES {
            return Err(StoreError::Full);
        }
        let json = serde_json::to_vec(stored).map_err(std::io::Error::other)?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, json)?;
        std::fs::rename(partial, path)?;
        Ok(())
    }

    /// The deliveries due at `now`, the earliest first, at most `limit`. A file that does
    /// not read (a damaged one) is skipped and logged, never fatal.
    pub fn due(&self, now: SystemTime, limit: usize) -> std::io::Result<Vec<Stored>> {
        let mut due = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|extension| extension != "json") {
                continue;
            }
            let read = std::fs::read(&path)
                .map_err(|error| error.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<Stored>(&bytes).map_err(|error| error.to_string())
                });
            match read {
                Ok(stored) => match stored.delivery.state {
                    State::Due(at) if at <= now => due.push((at, stored)),
                    _ => {}
                },
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping an unreadable webhook delivery")
                }
            }
        }
        due.sort_by_key(|(at, _)| *at);
        Ok(due
            .into_iter()
            .take(limit)
            .map(|(_, stored)| stored)
            .collect())
    }

    fn count(&self) -> std::io::Result<usize> {
        Ok(std::fs::read_dir(&self.dir)?.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::retry::Outcome;
    use std::time::Duration;

    fn stored(id: &str, at: SystemTime) -> Stored {
        Stored {
            delivery: Delivery::new(id.into(), at),
            tenant: "acme".into(),
            url: "https://example.com/hook".into(),
            body: "{}".into(),
        }
    }

    #[test]
    fn deliveries_outlive_the_store_and_leave_when_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let store = DirectoryDeliveries::open(dir.path()).unwrap();
        store
            .put(&stored("msg_b", start + Duration::from_secs(5)))
            .unwrap();
        store.put(&stored("msg_a", start)).unwrap();
        store
            .put(&stored("msg_later", start + Duration::from_secs(3600)))
            .unwrap();
        // A new store on the same directory (a restart) finds them, the earliest first.
        let reopened = DirectoryDeliveries::open(dir.path()).unwrap();
        let due = reopened.due(start + Duration::from_secs(10), 10).unwrap();
        let ids: Vec<&str> = due.iter().map(|s| s.delivery.id.as_str()).collect();
        assert_eq!(ids, ["msg_a", "msg_b"]);
        // Delivered: gone; retried: kept at its new time.
        let mut delivered = due[0].clone();
        delivered.delivery = delivered.delivery.after(
            Outcome::Answered {
                status: 200,
                retry_after: None,
            },
            start,
            0.5,
            Duration::from_secs(86_400),
        );
        reopened.put(&delivered).unwrap();
        let mut retried = due[1].clone();
        retried.delivery = retried.delivery.after(
            Outcome::NoAnswer,
            start + Duration::from_secs(10),
            1.0,
            Duration::from_secs(86_400),
        );
        reopened.put(&retried).unwrap();
        let due = reopened.due(start + Duration::from_secs(10), 10).unwrap();
        assert!(due.is_empty(), "{due:?}");
        let due = reopened.due(start + Duration::from_secs(15), 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].delivery.attempts, 1);
        // A damaged file is skipped, not fatal.
        std::fs::write(dir.path().join("webhooks/broken.json"), b"{").unwrap();
        assert_eq!(
            reopened
                .due(start + Duration::from_secs(15), 10)
                .unwrap()
                .len(),
            1
        );
    }
}
