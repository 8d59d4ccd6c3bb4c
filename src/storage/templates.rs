//! The templates ([`Templates`]): each under `templates/<id>/` (ids are ours, never a
//! caller's or a tenant's name, so nothing a caller chooses becomes a key): the JSON as
//! uploaded (`template.json`), its fonts (`fonts/<n>.font`), the bounded view answers show
//! (`summary.json`, [`super::summary`]) and its record (`record.json`, [`TemplateRecord`]),
//! written last: a template exists once its record does, so a crash never leaves half a
//! template visible (each object is whole or absent on either store). Listing order and the
//! quota's figures come from a name-only index ([`TemplateIndex`]). Every template belongs to a
//! tenant: reads, listing and deletion take the caller's tenant and answer another tenant's
//! template exactly as an unknown one (`NotFound`). Accepted jobs render from their own
//! copies of its files (`super::pins`), so deleting a template hides it at once.

use super::disk::DiskWatermark;
use super::index::{IndexEntry, TemplateIndex, TemplateQuota};
use super::objects::ObjectStorage;
use super::record::{TemplateRecord, MAX_TEMPLATE_RECORD_BYTES};
use super::record_cache::{AdmissionRecord, RecordCache};
use super::summary::TemplateSummary;
use super::{StorageError, TEMPLATES};
use crate::auth::TenantId;
use crate::lottie::report::InspectReport;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// A template's record: it exists once this object does.
const RECORD: &str = "record.json";
/// A template's bounded view.
const SUMMARY: &str = "summary.json";

/// The templates of one object store: their files, records and summaries, their index and
/// quota, and the disk watermark they keep.
#[derive(Debug, Clone)]
pub(crate) struct Templates {
    objects: ObjectStorage,
    index: TemplateIndex,
    disk: DiskWatermark,
    records: RecordCache,
}

/// Key of a template's object `file` (ids are ours, so no caller text reaches a key).
fn template_key(id: Uuid, file: &str) -> String {
    format!("{TEMPLATES}/{id}/{file}")
}

impl Templates {
    /// The templates in `objects` with the default quota and watermark, their index repaired
    /// ([`Templates::complete_index`]). Blocking.
    #[cfg(test)]
    pub fn open(objects: ObjectStorage) -> Result<Templates, StorageError> {
        let disk = DiskWatermark::new(
            &objects,
            crate::storage::settings::DEFAULT_MIN_FREE_DISK_BYTES,
        );
        let templates = Templates::new(objects, TemplateQuota::default(), disk)?;
        templates.complete_index()?;
        Ok(templates)
    }

    /// The templates in `objects` under `quota`, refused below the `disk` watermark, without
    /// reading the store (only the index's directory is made, in local mode); the index is
    /// repaired by [`Templates::complete_index`].
    pub(crate) fn new(
        objects: ObjectStorage,
        quota: TemplateQuota,
        disk: DiskWatermark,
    ) -> Result<Templates, StorageError> {
        Ok(Templates {
            index: TemplateIndex::open(objects.clone(), quota)?,
            objects,
            disk,
            records: Default::default(),
        })
    }

    /// The same templates under another quota and watermark.
    #[cfg(test)]
    pub(crate) fn with_limits(self, quota: TemplateQuota, disk: DiskWatermark) -> Templates {
        Templates {
            index: self.index.clone().with_quota(quota),
            disk,
            ..self
        }
    }

    /// The object store under the templates.
    #[cfg(test)]
    pub fn objects(&self) -> &ObjectStorage {
        &self.objects
    }

    /// The templates' listing index.
    pub(crate) fn index(&self) -> &TemplateIndex {
        &self.index
    }

    /// Key of the template's JSON.
    pub(crate) fn json_key(id: Uuid) -> String {
        template_key(id, "template.json")
    }

    /// Key of one of the template's font files (a name from its record).
    pub(crate) fn font_key(id: Uuid, file: &str) -> String {
        template_key(id, &format!("fonts/{file}"))
    }

    /// Stores a new template of `tenant`; answers its record. Blocking.
    pub(crate) fn create(
        &self,
        tenant: &TenantId,
        name: &str,
        json: &bytes::Bytes,
        report: InspectReport,
        fonts: &BTreeMap<String, bytes::Bytes>,
    ) -> Result<TemplateRecord, StorageError> {
        let id = Uuid::new_v4();
        // The caller's bytes are shared, not copied (a template may be 63 MiB).
        let mut objects: Vec<(String, bytes::Bytes)> =
            vec![(Templates::json_key(id), json.clone())];
        let mut font_files = BTreeMap::new();
        let mut font_sha256 = BTreeMap::new();
        for (index, (family, bytes)) in fonts.iter().enumerate() {
            // Families are caller-chosen text; files are numbered so no name reaches a key.
            let file = format!("{index}.font");
            objects.push((Templates::font_key(id, &file), bytes.clone()));
            font_files.insert(family.clone(), file);
            font_sha256.insert(
                family.clone(),
                crate::lottie::reading::template::hex_sha256(bytes),
            );
        }
        let created_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let record = TemplateRecord {
            id,
            tenant: tenant.clone(),
            name: name.to_owned(),
            created_at_ms,
            fonts: font_files,
            font_sha256,
            report,
        };
        let record_json = to_json(&record)?;
        if record_json.len() > MAX_TEMPLATE_RECORD_BYTES {
            return Err(StorageError::RecordTooLarge {
                bytes: record_json.len(),
            });
        }
        objects.push((
            template_key(id, SUMMARY),
            to_json(&TemplateSummary::of(&record))?.into(),
        ));
        // The record last: a template exists (for reads, pins and the index's repair) once
        // its record does, so a crash never leaves half a template visible.
        objects.push((template_key(id, RECORD), record_json.into()));
        // The quota counts every object the template stores: its JSON, fonts, summary and
        // record alike.
        let stored_bytes: u64 = objects.iter().map(|(_, bytes)| bytes.len() as u64).sum();
        self.disk.check()?;
        self.index.check_room_for(tenant, stored_bytes)?;
        let written = self.objects.block_on(async {
            for (key, bytes) in objects {
                self.objects.put(&key, bytes).await?;
            }
            Ok::<(), StorageError>(())
        });
        if let Err(error) = written {
            // What was written names no template (no record): removed now when the store
            // lets us.
            let _ = self.remove_objects(id);
            return Err(error);
        }
        // Indexed only once in place: an index entry always names a whole template.
        self.index.write(&IndexEntry {
            created_at_ms,
            id,
            stored_bytes,
            tenant: tenant.clone(),
        })?;
        Ok(record)
    }

    /// The record of `tenant`'s template `id` (another tenant's is `NotFound`, as an unknown
    /// one). Blocking.
    pub(crate) fn record(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<TemplateRecord, StorageError> {
        let record = self.read_record(id)?;
        owned_by(tenant, &record.tenant, id)?;
        Ok(record)
    }

    /// The record of template `id`, whoever owns it.
    fn read_record(&self, id: Uuid) -> Result<TemplateRecord, StorageError> {
        let bytes = self
            .objects
            .block_on(self.objects.get(&template_key(id, RECORD)))
            .map_err(|error| missing_is_not_found(error, id))?;
        serde_json::from_slice(&bytes).map_err(|e| StorageError::Damaged(e.to_string()))
    }

    /// What admission needs of `tenant`'s template, shared: its slot lists, owner, duration,
    /// render identity and font files, read from its record once and kept
    /// ([`super::record_cache`]); each call still checks the record exists, so a deleted template is
    /// NOT_FOUND at once.
    ///
    /// Another tenant's record is neither read nor kept: its owner is checked in the small
    /// summary first. Reading and parsing a record (up to [`MAX_TEMPLATE_RECORD_BYTES`])
    /// would make the answer to another tenant's id measurably slower than an unknown id's,
    /// and a damaged one would answer INTERNAL instead of NOT_FOUND. Blocking.
    pub(crate) fn admission_record(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Arc<AdmissionRecord>, StorageError> {
        match self
            .objects
            .block_on(self.objects.size(&template_key(id, RECORD)))
        {
            Ok(_) => {}
            Err(StorageError::ObjectMissing(_)) => {
                self.records.remove(id);
                return Err(StorageError::NotFound(id));
            }
            Err(error) => return Err(error),
        }
        if let Some(record) = self.records.get(id) {
            owned_by(tenant, &record.tenant, id)?;
            return Ok(record);
        }
        self.summary(tenant, id)?;
        let record = self.read_record(id)?;
        owned_by(tenant, &record.tenant, id)?;
        let admission = Arc::new(AdmissionRecord::of(&record));
        // The whole record is dropped here: only the slot lists stay.
        drop(record);
        self.records
            .insert(id, admission.clone(), admission.weight());
        Ok(admission)
    }

    /// The bounded view of `tenant`'s template (what Get and List answer). A template stored
    /// by an instance of an earlier version while this one runs has no summary yet: built
    /// from its record then. Blocking.
    pub(crate) fn summary(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<TemplateSummary, StorageError> {
        let summary: TemplateSummary = match self
            .objects
            .block_on(self.objects.get(&template_key(id, SUMMARY)))
        {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| StorageError::Damaged(e.to_string()))?
            }
            Err(StorageError::ObjectMissing(_)) => TemplateSummary::of(&self.read_record(id)?),
            Err(error) => return Err(error),
        };
        owned_by(tenant, &summary.tenant, id)?;
        Ok(summary)
    }

    /// Deletes `tenant`'s template: it is gone for every later read, listing and submission
    /// at once. Jobs accepted before render from their own copies of its files (`super::pins`).
    /// Blocking.
    pub(crate) fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<(), StorageError> {
        // The summary, not the record: it is small whatever was uploaded.
        self.summary(tenant, id)?;
        self.records.remove(id);
        // The record first: from here on no submission can pin the template, and a deletion
        // interrupted later leaves files that name no template (the index's repair drops
        // their entry).
        self.objects
            .block_on(self.objects.delete(&template_key(id, RECORD)))?;
        for entry in self
            .index
            .entries()?
            .into_iter()
            .filter(|entry| entry.id == id)
        {
            self.index.remove(&entry)?;
        }
        self.remove_objects(id)
    }

    /// Removes every object of template `id` (and, locally, its emptied directory).
    fn remove_objects(&self, id: Uuid) -> Result<(), StorageError> {
        let prefix = format!("{TEMPLATES}/{id}");
        self.objects.block_on(async {
            // The summary before the rest: a reader that still finds it finds a template.
            self.objects.delete(&template_key(id, SUMMARY)).await?;
            for object in self.objects.list(&prefix).await? {
                self.objects.delete(&object.key).await?;
            }
            Ok::<(), StorageError>(())
        })?;
        if let Some(dir) = self.objects.local_path(&prefix) {
            remove_dir_if_present(&dir)?;
        }
        Ok(())
    }

    /// Writes the summary and index entry of templates that lack them (stored by an earlier
    /// version, or whose creation was interrupted after its record) and drops index entries
    /// whose template is gone (a deletion interrupted). One listing of the templates' keys;
    /// run when a store opens. Blocking.
    pub(crate) fn complete_index(&self) -> Result<(), StorageError> {
        let indexed: HashSet<Uuid> = self
            .index
            .entries()?
            .into_iter()
            .map(|entry| entry.id)
            .collect();
        let objects = self.objects.block_on(self.objects.list(TEMPLATES))?;
        // Per template: whether it has its record and summary, and its files' bytes.
        #[derive(Default)]
        struct Found {
            record: bool,
            summary: bool,
            stored_bytes: u64,
        }
        let mut found: HashMap<Uuid, Found> = HashMap::new();
        for object in &objects {
            let Some(rest) = object
                .key
                .strip_prefix(TEMPLATES)
                .and_then(|r| r.strip_prefix('/'))
            else {
                continue;
            };
            let Some((id, file)) = rest.split_once('/') else {
                continue;
            };
            let Ok(id) = Uuid::try_parse(id) else {
                continue;
            };
            let entry = found.entry(id).or_default();
            match file {
                RECORD => entry.record = true,
                SUMMARY => entry.summary = true,
                _ => {}
            }
            // Every object of the template: what the quota counts.
            entry.stored_bytes += object.size;
        }
        for (id, template) in &found {
            if !template.record || indexed.contains(id) {
                continue;
            }
            let record = match self.read_record(*id) {
                Ok(record) => record,
                Err(StorageError::NotFound(_)) => continue,
                Err(error) => return Err(error),
            };
            let mut stored_bytes = template.stored_bytes;
            if !template.summary {
                let summary = to_json(&TemplateSummary::of(&record))?;
                stored_bytes += summary.len() as u64;
                self.objects
                    .block_on(self.objects.put(&template_key(*id, SUMMARY), summary))?;
            }
            self.index.write(&IndexEntry {
                created_at_ms: record.created_at_ms,
                id: *id,
                stored_bytes,
                tenant: record.tenant.clone(),
            })?;
        }
        for entry in self.index.entries()? {
            if !found.get(&entry.id).is_some_and(|template| template.record) {
                self.index.remove(&entry)?;
            }
        }
        Ok(())
    }
}

/// Another tenant's template is answered exactly as an unknown one: same error, same message,
/// so that no caller learns that an id exists elsewhere.
fn owned_by(caller: &TenantId, owner: &TenantId, id: Uuid) -> Result<(), StorageError> {
    if caller == owner {
        Ok(())
    } else {
        Err(StorageError::NotFound(id))
    }
}

/// A template's missing record means the template does not exist.
fn missing_is_not_found(error: StorageError, id: Uuid) -> StorageError {
    match error {
        StorageError::ObjectMissing(_) => StorageError::NotFound(id),
        other => other,
    }
}

fn to_json(value: &impl Serialize) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|e| StorageError::Damaged(e.to_string()))
}

fn remove_dir_if_present(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(StorageError::Io(error)),
        _ => Ok(()),
    }
}

#[cfg(test)]
impl Templates {
    /// [`Templates::create`] from borrowed bytes, for tests.
    pub(crate) fn create_copied(
        &self,
        tenant: &TenantId,
        name: &str,
        json: &[u8],
        report: InspectReport,
        fonts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<TemplateRecord, StorageError> {
        let fonts = fonts
            .iter()
            .map(|(family, bytes)| (family.clone(), bytes::Bytes::copy_from_slice(bytes)))
            .collect();
        self.create(
            tenant,
            name,
            &bytes::Bytes::copy_from_slice(json),
            report,
            &fonts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ServiceError, ServiceErrorCode};
    use crate::reason::Reason;
    use std::time::Duration;

    /// A store on `dir` (local objects), on a runtime shared by these tests.
    pub fn open(dir: &Path) -> Result<Templates, StorageError> {
        static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
        let runtime = RUNTIME.get_or_init(|| tokio::runtime::Runtime::new().unwrap());
        Templates::open(ObjectStorage::local(dir, runtime.handle().clone())?)
    }

    fn template_dir(dir: &Path, id: Uuid) -> std::path::PathBuf {
        dir.join(TEMPLATES).join(id.to_string())
    }

    fn anyone() -> TenantId {
        TenantId::default_tenant()
    }

    /// `store` under `quota`, keeping `min_free_disk_bytes` free.
    fn limited(store: Templates, quota: TemplateQuota, min_free_disk_bytes: u64) -> Templates {
        let disk = DiskWatermark::new(store.objects(), min_free_disk_bytes);
        store.with_limits(quota, disk)
    }

    #[test]
    fn templates_round_trip_list_newest_first_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let fonts: BTreeMap<String, Vec<u8>> =
            [("Open Sans".to_owned(), b"OTTO....".to_vec())].into();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        let first = store
            .create_copied(&anyone(), "first", json, report.clone(), &BTreeMap::new())
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let second = store
            .create_copied(&anyone(), "second", json, report, &fonts)
            .unwrap();
        assert_eq!(
            std::fs::read(template_dir(dir.path(), first.id).join("template.json")).unwrap(),
            json
        );
        assert_eq!(store.record(&anyone(), second.id).unwrap(), second);
        assert_eq!(second.fonts["Open Sans"], "0.font");
        let listed: Vec<_> = store
            .index()
            .entries()
            .unwrap()
            .into_iter()
            .map(|entry| store.summary(&anyone(), entry.id).unwrap().name)
            .collect();
        assert_eq!(listed, ["second", "first"]);
        // Everything the template stores counts: JSON, font, summary and record.
        let second_dir = template_dir(dir.path(), second.id);
        let on_disk: u64 = ["template.json", "fonts/0.font", SUMMARY, RECORD]
            .iter()
            .map(|file| std::fs::metadata(second_dir.join(file)).unwrap().len())
            .sum();
        assert_eq!(store.index().entries().unwrap()[0].stored_bytes, on_disk);
        assert!(on_disk > json.len() as u64 + 8 + 200, "{on_disk}");
        store.delete(&anyone(), first.id).unwrap();
        assert!(matches!(
            store.record(&anyone(), first.id),
            Err(StorageError::NotFound(_))
        ));
        assert!(matches!(
            store.delete(&anyone(), first.id),
            Err(StorageError::NotFound(_))
        ));
        assert_eq!(store.index().entries().unwrap().len(), 1);
        let mut leftovers: Vec<_> = std::fs::read_dir(dir.path().join("templates"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        leftovers.sort();
        assert_eq!(
            leftovers,
            [
                std::ffi::OsString::from(crate::storage::index::INDEX_DIR),
                std::ffi::OsString::from(second.id.to_string())
            ]
        );
    }

    #[test]
    fn a_record_is_parsed_once_for_admission_and_a_deleted_one_is_not_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        // Another instance on the same data directory: its own cache.
        let other = open(dir.path()).unwrap();
        let created = tiny_template(&store, "cached").unwrap();
        let first = store.admission_record(&anyone(), created.id).unwrap();
        let again = store.admission_record(&anyone(), created.id).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second read is the kept record"
        );
        assert_eq!(*first, AdmissionRecord::of(&created));
        other.delete(&anyone(), created.id).unwrap();
        assert!(matches!(
            store.admission_record(&anyone(), created.id),
            Err(StorageError::NotFound(_))
        ));
    }

    #[test]
    fn the_admission_cache_keeps_slot_ids_and_never_default_texts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let json = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/corpus/ui-toggle-on-off-text.json"),
        )
        .unwrap();
        let template = crate::lottie::Template::parse(&json).unwrap();
        let mut report = InspectReport::new(&template).unwrap();
        report.slots.texts[0].default_text = "x".repeat(100_000);
        let created = store
            .create_copied(&anyone(), "texts", &json, report, &BTreeMap::new())
            .unwrap();
        let kept = store.admission_record(&anyone(), created.id).unwrap();
        let ids = |slots: &crate::lottie::slots::Slots| -> Vec<String> {
            slots.texts.iter().map(|slot| slot.id.clone()).collect()
        };
        assert_eq!(ids(&kept.slots), ids(&created.report.slots));
        assert!(kept
            .slots
            .texts
            .iter()
            .all(|slot| slot.default_text.is_empty()));
        assert_eq!(kept.render_identity, created.render_identity());
        assert!(kept.weight() < 4096, "{}", kept.weight());
    }

    #[test]
    fn a_record_over_its_limit_is_refused_and_nothing_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let mut report =
            InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        report.warnings = vec!["w".repeat(MAX_TEMPLATE_RECORD_BYTES)];
        let refused = store.create_copied(&anyone(), "big", json, report, &BTreeMap::new());
        assert!(
            matches!(refused, Err(StorageError::RecordTooLarge { bytes }) if bytes > MAX_TEMPLATE_RECORD_BYTES)
        );
        assert!(store.index().entries().unwrap().is_empty());
        let error = ServiceError::from(refused.unwrap_err());
        assert_eq!(error.reason, Reason::TemplateRecordTooLarge);
        assert_eq!(error.code, ServiceErrorCode::InvalidArgument);
    }

    #[test]
    fn another_tenants_record_is_neither_read_nor_kept_for_a_caller_that_cannot_see_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        let (acme, globex) = (
            TenantId::parse("acme").unwrap(),
            TenantId::parse("globex").unwrap(),
        );
        let created = store
            .create_copied(&acme, "acme's", json, report, &BTreeMap::new())
            .unwrap();
        let unknown = Uuid::new_v4();
        for id in [created.id, unknown] {
            assert!(
                matches!(
                    store.admission_record(&globex, id),
                    Err(StorageError::NotFound(found)) if found == id
                ),
                "{id}"
            );
        }
        assert!(
            store.records.get(created.id).is_none(),
            "a foreign lookup kept acme's record"
        );
        // Not read at all: a record that does not parse still answers NOT_FOUND, as an
        // unknown id does, and not the INTERNAL of a damaged record.
        std::fs::write(template_dir(dir.path(), created.id).join(RECORD), b"{").unwrap();
        assert!(matches!(
            store.admission_record(&globex, created.id),
            Err(StorageError::NotFound(_))
        ));
        assert!(matches!(
            store.admission_record(&acme, created.id),
            Err(StorageError::Damaged(_))
        ));
    }

    #[test]
    fn the_record_cache_keeps_at_most_its_count_and_bytes() {
        use crate::storage::record_cache::{MAX_CACHED_RECORDS, MAX_CACHED_RECORD_BYTES};
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let record = Arc::new(AdmissionRecord::of(&tiny_template(&store, "one").unwrap()));
        let cache = RecordCache::default();
        let ids: Vec<Uuid> = (0..MAX_CACHED_RECORDS + 10)
            .map(|_| Uuid::new_v4())
            .collect();
        for id in &ids {
            cache.insert(*id, record.clone(), 1);
        }
        assert!(cache.get(ids[0]).is_none(), "the oldest went first");
        assert!(cache.get(ids[ids.len() - 1]).is_some());
        let kept = ids.iter().filter(|id| cache.get(**id).is_some()).count();
        assert_eq!(kept, MAX_CACHED_RECORDS);
        let big = Uuid::new_v4();
        cache.insert(big, record.clone(), MAX_CACHED_RECORD_BYTES);
        assert!(cache.get(big).is_some());
        assert_eq!(
            ids.iter().filter(|id| cache.get(**id).is_some()).count(),
            0,
            "a record of the whole budget leaves room for nothing else"
        );
        let too_big = Uuid::new_v4();
        cache.insert(too_big, record, MAX_CACHED_RECORD_BYTES + 1);
        assert!(cache.get(too_big).is_none());
    }

    fn tiny_template(store: &Templates, name: &str) -> Result<TemplateRecord, StorageError> {
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        store.create_copied(&anyone(), name, json, report, &BTreeMap::new())
    }

    #[test]
    fn a_tenant_over_its_own_share_is_refused_while_another_still_stores() {
        let dir = tempfile::tempdir().unwrap();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        let (acme, globex) = (
            TenantId::parse("acme").unwrap(),
            TenantId::parse("globex").unwrap(),
        );
        for limits in [
            TemplateQuota {
                max_templates_per_tenant: 1,
                ..TemplateQuota::default()
            },
            TemplateQuota {
                // One template (the quota counts its summary and record too), not two.
                max_template_bytes_per_tenant: one_template_bytes(&globex) + 1,
                ..TemplateQuota::default()
            },
        ] {
            let store = limited(open(dir.path()).unwrap(), limits, 0);
            let create = |tenant: &TenantId| {
                store.create_copied(tenant, "t", json, report.clone(), &BTreeMap::new())
            };
            let first = create(&acme).unwrap();
            assert!(
                matches!(create(&acme), Err(StorageError::QuotaExceeded(message)) if message.contains("your tenant")),
                "{limits:?}"
            );
            let other = create(&globex).unwrap();
            store.delete(&acme, first.id).unwrap();
            let again = create(&acme).unwrap();
            store.delete(&acme, again.id).unwrap();
            store.delete(&globex, other.id).unwrap();
        }
    }

    /// What one tiny template of `tenant` stores, bytes (as its index entry counts them).
    fn one_template_bytes(tenant: &TenantId) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let json = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
        let report = InspectReport::new(&crate::lottie::Template::parse(json).unwrap()).unwrap();
        store
            .create_copied(tenant, "t", json, report, &BTreeMap::new())
            .unwrap();
        let bytes = store.index().entries().unwrap()[0].stored_bytes;
        assert!(bytes > json.len() as u64 + 200, "{bytes}");
        bytes
    }

    #[test]
    fn templates_over_the_count_or_byte_quota_are_refused_until_one_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let limits = TemplateQuota {
            max_templates: 2,
            ..TemplateQuota::default()
        };
        let store = limited(open(dir.path()).unwrap(), limits, 0);
        let first = tiny_template(&store, "a").unwrap();
        tiny_template(&store, "b").unwrap();
        assert!(matches!(
            tiny_template(&store, "c"),
            Err(StorageError::QuotaExceeded(_))
        ));
        store.delete(&anyone(), first.id).unwrap();
        tiny_template(&store, "c").unwrap();
        let quota = TemplateQuota {
            max_templates: 100,
            max_template_bytes: 150,
            ..TemplateQuota::default()
        };
        let bytes_limited = limited(store, quota, 0);
        assert!(matches!(
            tiny_template(&bytes_limited, "d"),
            Err(StorageError::QuotaExceeded(message)) if message.contains("150 byte limit")
        ));
    }

    #[test]
    fn a_watermark_above_the_free_space_refuses_new_templates() {
        let dir = tempfile::tempdir().unwrap();
        let store = limited(
            open(dir.path()).unwrap(),
            TemplateQuota::default(),
            u64::MAX,
        );
        assert!(matches!(
            tiny_template(&store, "a"),
            Err(StorageError::DiskFull { .. })
        ));
        assert!(store.index().entries().unwrap().is_empty());
    }

    #[test]
    fn templates_stored_before_the_index_existed_are_indexed_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).unwrap();
        let record = tiny_template(&store, "old").unwrap();
        // What an earlier version left: no index, no summary; and a dangling index entry.
        std::fs::remove_dir_all(
            dir.path()
                .join(TEMPLATES)
                .join(crate::storage::index::INDEX_DIR),
        )
        .unwrap();
        std::fs::create_dir(
            dir.path()
                .join(TEMPLATES)
                .join(crate::storage::index::INDEX_DIR),
        )
        .unwrap();
        std::fs::remove_file(template_dir(dir.path(), record.id).join(SUMMARY)).unwrap();
        let ghost = IndexEntry {
            created_at_ms: 5,
            id: Uuid::new_v4(),
            stored_bytes: 9,
            tenant: anyone(),
        };
        store.index().write(&ghost).unwrap();
        let reopened = open(dir.path()).unwrap();
        let index = reopened.index().entries().unwrap();
        assert_eq!(index.len(), 1);
        assert_eq!(index[0].id, record.id);
        assert_eq!(reopened.summary(&anyone(), record.id).unwrap().name, "old");
    }
}
