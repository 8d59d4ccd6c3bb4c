//! Deliveries in the data directory (the embedded default, one instance): one JSON file per
//! delivery, `webhooks/<webhook-id>.json`, written to a temporary file and renamed over the
//! old one (a crash leaves the last whole state); an index of the due ones by tenant in
//! memory, rebuilt from the files at start.

use super::{Full, Kept, PendingCaps, StoreError, Stored};
use crate::sync::lock;
use crate::webhooks::delivery::State;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The deliveries of this instance's data directory.
#[derive(Debug)]
pub struct DirectoryDeliveries {
    dir: PathBuf,
    caps: PendingCaps,
    index: Mutex<DueIndex>,
}

/// The due deliveries of each tenant by time, and the ones claimed (being sent).
#[derive(Debug, Default)]
struct DueIndex {
    /// Only tenants with a due delivery (an emptied set is removed).
    due: HashMap<String, BTreeSet<(SystemTime, String)>>,
    /// Claimed deliveries' ids and tenants: at most the sender's slots.
    claimed: HashMap<String, String>,
}

impl DueIndex {
    fn insert(&mut self, tenant: &str, at: SystemTime, id: &str) {
        self.due
            .entry(tenant.to_owned())
            .or_default()
            .insert((at, id.to_owned()));
    }

    fn pending(&self) -> usize {
        self.due.values().map(BTreeSet::len).sum::<usize>() + self.claimed.len()
    }

    fn pending_of(&self, tenant: &str) -> usize {
        self.due.get(tenant).map_or(0, BTreeSet::len)
            + self.claimed.values().filter(|of| *of == tenant).count()
    }

    /// The bound a new delivery of `tenant` would pass.
    fn full(&self, tenant: &str, caps: PendingCaps) -> Option<Full> {
        if self.pending_of(tenant) >= caps.per_tenant {
            Some(Full::Tenant)
        } else if self.pending() >= caps.instance {
            Some(Full::Instance)
        } else {
            None
        }
    }
}

impl DirectoryDeliveries {
    /// The deliveries under `data_dir` (the folder is made when missing), their index rebuilt
    /// from the files, under `caps`. A file that does not read (a damaged one) is skipped and
    /// logged.
    pub fn open(data_dir: &Path, caps: PendingCaps) -> std::io::Result<DirectoryDeliveries> {
        let dir = data_dir.join("webhooks");
        std::fs::create_dir_all(&dir)?;
        let mut index = DueIndex::default();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|extension| extension != "json") {
                continue;
            }
            match read_file(&path) {
                Ok(Some(stored)) => {
                    if let State::Due(at) = stored.delivery.state {
                        index.insert(&stored.tenant, at, &stored.delivery.id);
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping an unreadable webhook delivery")
                }
            }
        }
        Ok(DirectoryDeliveries {
            dir,
            caps,
            index: Mutex::new(index),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        // Ids are ours (`msg_`, a UUID, an event name): no separator can reach the path.
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        self.dir.join(format!("{safe}.json"))
    }

    fn write(&self, stored: &Stored) -> Result<(), StoreError> {
        let path = self.path(&stored.delivery.id);
        let partial = path.with_extension("partial");
        std::fs::write(&partial, serde_json::to_vec(stored)?)?;
        std::fs::rename(partial, path)?;
        Ok(())
    }

    pub(super) fn create(&self, stored: &Stored) -> Result<Kept, StoreError> {
        let id = &stored.delivery.id;
        if self.path(id).exists() {
            return Ok(Kept::Before);
        }
        // Only the announcer creates, one at a time: the count cannot move between the
        // check and the insertion but by ending deliveries, which only makes room.
        let full = lock(&self.index).full(&stored.tenant, self.caps);
        if let Some(full) = full {
            self.write(&stored.not_kept())?;
            return Ok(Kept::NotKept(full));
        }
        self.write(stored)?;
        if let State::Due(at) = stored.delivery.state {
            lock(&self.index).insert(&stored.tenant, at, id);
        }
        Ok(Kept::New)
    }

    pub(super) fn due(&self, now: SystemTime, cap: usize) -> Vec<(String, usize)> {
        let index = lock(&self.index);
        index
            .due
            .iter()
            .map(|(tenant, due)| {
                let count = due
                    .iter()
                    .take_while(|(at, _)| *at <= now)
                    .take(cap)
                    .count();
                (tenant.clone(), count)
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    pub(super) fn claim(
        &self,
        claims: &[(String, usize)],
        now: SystemTime,
    ) -> Result<Vec<Stored>, StoreError> {
        let ids: Vec<String> = {
            let mut index = lock(&self.index);
            let mut ids = Vec::new();
            for (tenant, count) in claims {
                let Some(due) = index.due.get_mut(tenant) else {
                    continue;
                };
                let taken: Vec<(SystemTime, String)> = due
                    .iter()
                    .take_while(|(at, _)| *at <= now)
                    .take(*count)
                    .cloned()
                    .collect();
                for entry in &taken {
                    due.remove(entry);
                }
                if due.is_empty() {
                    index.due.remove(tenant);
                }
                for (_, id) in taken {
                    index.claimed.insert(id.clone(), tenant.clone());
                    ids.push(id);
                }
            }
            ids
        };
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            match self.read(&id) {
                Ok(Some(stored)) => claimed.push(stored),
                Ok(None) => {
                    lock(&self.index).claimed.remove(&id);
                }
                Err(error) => {
                    lock(&self.index).claimed.remove(&id);
                    tracing::warn!(webhook_id = %id, %error, "dropping an unreadable webhook delivery");
                }
            }
        }
        Ok(claimed)
    }

    pub(super) fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        self.write(stored)?;
        let mut index = lock(&self.index);
        index.claimed.remove(&stored.delivery.id);
        if let State::Due(at) = stored.delivery.state {
            index.insert(&stored.tenant, at, &stored.delivery.id);
        }
        Ok(())
    }

    pub(super) fn read(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        read_file(&self.path(id))
    }

    pub(super) fn pending(&self) -> usize {
        lock(&self.index).pending()
    }

    /// The earliest time a pending delivery not being sent now is due at.
    pub(super) fn earliest_due(&self) -> Option<SystemTime> {
        let index = lock(&self.index);
        index
            .due
            .values()
            .filter_map(|due| due.first().map(|(at, _)| *at))
            .min()
    }

    pub(super) fn sweep(&self, kept: Duration) -> Result<(), StoreError> {
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let old = entry
                .metadata()
                .and_then(|metadata| metadata.modified())
                .is_ok_and(|modified| now.duration_since(modified).unwrap_or_default() > kept);
            if !old {
                continue;
            }
            let ended = match read_file(&entry.path()) {
                Ok(Some(stored)) => !matches!(stored.delivery.state, State::Due(_)),
                // Damaged and old: nobody will read it.
                Ok(None) | Err(_) => true,
            };
            if ended {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<Option<Stored>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.into()),
    }
}
