//! Template files pinned for accepted jobs: when SubmitRender accepts a job, its template's
//! JSON and fonts are hard-linked into `templates/.jobs/<job-id>/`, and the worker renders
//! from there. Deleting the template then removes only the template's own names (it is gone
//! for every caller at once) while the jobs already accepted keep their files; the space is
//! freed when the last link goes, that is when the last job that needs the files ends
//! ([`TemplatePin`] is dropped) or, for pins a crashed instance left, by the retention
//! sweep ([`TemplateStore::sweep_pins`]). A link costs no copy and takes no quota.

use super::{StorageError, TemplateRecord, TemplateStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Directory of the pins, under the templates directory (not an id, so never taken for a
/// template).
pub const PINS_DIR: &str = ".jobs";

/// The youngest pin the sweep may take for lost, whatever the retention: longer than any job
/// waits and renders (a render is capped at 30 minutes; the queue is short), so a short
/// retention never takes the files of a job still waiting.
pub const MIN_LOST_PIN_AGE: Duration = Duration::from_secs(2 * 3600);

/// The template files of one accepted job; removed when dropped (the job has ended and its
/// board entry let go of its work).
#[derive(Debug)]
pub struct TemplatePin {
    dir: PathBuf,
    /// The template's JSON, for the worker.
    pub template_path: PathBuf,
    /// The template's fonts: family → file.
    pub fonts: BTreeMap<String, PathBuf>,
}

impl Drop for TemplatePin {
    fn drop(&mut self) {
        // A few unlinks: short enough for any thread that drops the last reference.
        remove_pin_dir(&self.dir);
    }
}

fn remove_pin_dir(dir: &Path) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %dir.display(), %error, "cannot remove a job's template files; the sweep will");
        }
    }
}

impl TemplateStore {
    fn pins_dir(&self) -> PathBuf {
        self.root.join(PINS_DIR)
    }

    /// Pins `record`'s files for job `job`. A template deleted meanwhile is `NotFound` (its
    /// names are gone, so nothing can be linked): the submission is refused as if it had
    /// come after the deletion. Blocking (file system calls).
    pub fn pin(&self, record: &TemplateRecord, job: Uuid) -> Result<TemplatePin, StorageError> {
        let dir = self.pins_dir().join(job.to_string());
        std::fs::create_dir(&dir)?;
        // From here on, dropping the pin removes whatever was linked.
        let mut pin = TemplatePin {
            template_path: dir.join("template.json"),
            fonts: BTreeMap::new(),
            dir,
        };
        let gone = |error: std::io::Error| match error.kind() {
            std::io::ErrorKind::NotFound => StorageError::NotFound(record.id),
            _ => StorageError::Io(error),
        };
        std::fs::hard_link(self.json_path(record.id), &pin.template_path).map_err(gone)?;
        for (family, file) in &record.fonts {
            // File names come from the record (numbered by us), never from the caller.
            let path = pin.dir.join(file);
            std::fs::hard_link(self.font_path(record.id, file), &path).map_err(gone)?;
            pin.fonts.insert(family.clone(), path);
        }
        Ok(pin)
    }

    /// Removes pins older than `retention` (and [`MIN_LOST_PIN_AGE`]): no job waits or
    /// renders that long, so they were left by an instance that stopped without ending its
    /// jobs. Answers how many.
    pub fn sweep_pins(&self, retention: Duration) -> Result<usize, StorageError> {
        self.sweep_pins_older_than(retention.max(MIN_LOST_PIN_AGE))
    }

    fn sweep_pins_older_than(&self, age_limit: Duration) -> Result<usize, StorageError> {
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in std::fs::read_dir(self.pins_dir())? {
            let entry = entry?;
            let age = entry
                .metadata()
                .and_then(|meta| meta.modified())
                .map(|modified| now.duration_since(modified).unwrap_or_default());
            if matches!(age, Ok(age) if age >= age_limit) {
                remove_pin_dir(&entry.path());
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TenantId;

    #[test]
    fn a_pinned_template_outlives_its_deletion_until_the_pin_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = TemplateStore::open(dir.path()).unwrap();
        let tenant = TenantId::default_tenant();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = crate::lottie::report::InspectReport::new(
            &crate::lottie::Template::parse(json).unwrap(),
        )
        .unwrap();
        let fonts = [("Sans".to_owned(), b"OTTO....".to_vec())].into();
        let record = store.create(&tenant, "t", json, report, &fonts).unwrap();
        let pin = store.pin(&record, Uuid::new_v4()).unwrap();
        store.delete(&tenant, record.id).unwrap();
        assert!(matches!(
            store.pin(&record, Uuid::new_v4()),
            Err(StorageError::NotFound(id)) if id == record.id
        ));
        assert_eq!(std::fs::read(&pin.template_path).unwrap(), json);
        assert_eq!(std::fs::read(&pin.fonts["Sans"]).unwrap(), b"OTTO....");
        let pinned = pin.dir.clone();
        drop(pin);
        assert!(!pinned.exists());
        let left: Vec<_> = std::fs::read_dir(store.pins_dir()).unwrap().collect();
        assert!(left.is_empty(), "the refused pin left {left:?}");
    }

    #[test]
    fn the_sweep_removes_only_pins_older_than_any_job_lives() {
        let dir = tempfile::tempdir().unwrap();
        let store = TemplateStore::open(dir.path()).unwrap();
        let tenant = TenantId::default_tenant();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = crate::lottie::report::InspectReport::new(
            &crate::lottie::Template::parse(json).unwrap(),
        )
        .unwrap();
        let record = store
            .create(&tenant, "t", json, report, &BTreeMap::new())
            .unwrap();
        let pin = store.pin(&record, Uuid::new_v4()).unwrap();
        assert_eq!(store.sweep_pins(Duration::ZERO).unwrap(), 0, "too young");
        assert!(pin.template_path.exists());
        assert_eq!(store.sweep_pins_older_than(Duration::ZERO).unwrap(), 1);
        assert!(!pin.template_path.exists());
    }
}
