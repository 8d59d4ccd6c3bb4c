//! The listing index and the quota of [`TemplateStore`]: `templates/.index/` holds one empty
//! object per template named `<created ms>.<id>.<stored bytes>`, followed by `.<tenant>` for
//! a template of any tenant but the default one (whose entries keep the name they had before
//! tenants). Listing order, a tenant's templates, the template count and the bytes stored
//! come from key names alone (one listing, a page per thousand templates in a bucket), so a
//! listing or a quota check reads no record, and every instance on the same store sees the
//! same figures. The index lives in the store itself rather than in Redis: it is then true
//! wherever the templates are (the embedded default has no Redis), and it cannot disagree
//! with them after one of the two was restored from a backup. An entry is written once its
//! template is in place and removed when it is deleted, so an entry always names a whole
//! template (one whose deletion was interrupted is dropped when a store opens).

use super::summary::TemplateSummary;
use super::{template_key, to_json, StorageError, TemplateStore, RECORD, SUMMARY, TEMPLATES};
use crate::auth::TenantId;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// Directory of the listing index, under the templates directory (not an id, so never taken
/// for a template).
pub(super) const INDEX_DIR: &str = ".index";

/// Key prefix of the index entries.
fn index_prefix() -> String {
    format!("{TEMPLATES}/{INDEX_DIR}")
}

/// Templates stored at most (all callers together). Ten thousand templates are far more
/// than a product uses; the figure bounds a listing's index read and the disk templates take.
pub(crate) const DEFAULT_MAX_TEMPLATES: u64 = 10_000;
/// Bytes of stored templates (JSON, fonts, summary and record) at most: 16 GiB, about two thousand templates
/// at the largest size with a font each, or hundreds of thousands of typical ones.
pub(crate) const DEFAULT_MAX_TEMPLATE_BYTES: u64 = 16 * 1024 * 1024 * 1024;
/// Free space kept on the data directory's file system: below it, new templates and renders
/// are refused so that running renders can still write their outputs (a two-minute
/// 1920×1920 output is a few hundred MiB) and the rest of the machine keeps working.
pub(crate) const DEFAULT_MIN_FREE_DISK_BYTES: u64 = 1024 * 1024 * 1024;

/// Named limits on what the stores keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StorageLimits {
    pub max_templates: u64,
    pub max_template_bytes: u64,
    /// A tenant's share of the two above (0: none of its own, only the shared limits), so
    /// that one tenant cannot fill the store for all.
    pub max_templates_per_tenant: u64,
    pub max_template_bytes_per_tenant: u64,
    /// Free bytes the data directory's file system keeps (0: no watermark).
    pub min_free_disk_bytes: u64,
}

impl Default for StorageLimits {
    fn default() -> StorageLimits {
        StorageLimits {
            max_templates: DEFAULT_MAX_TEMPLATES,
            max_template_bytes: DEFAULT_MAX_TEMPLATE_BYTES,
            max_templates_per_tenant: 0,
            max_template_bytes_per_tenant: 0,
            min_free_disk_bytes: DEFAULT_MIN_FREE_DISK_BYTES,
        }
    }
}

/// One template in the listing order, as its index file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub created_at_ms: u64,
    pub id: Uuid,
    /// Bytes the template takes (JSON and fonts), for the quota.
    pub stored_bytes: u64,
    /// The tenant that owns the template.
    pub tenant: TenantId,
}

impl IndexEntry {
    pub(super) fn file_name(&self) -> String {
        let name = format!(
            "{:020}.{}.{}",
            self.created_at_ms, self.id, self.stored_bytes
        );
        if self.tenant.is_default() {
            name
        } else {
            // A tenant name is plain (letters, digits, '.', '_', '-'): it ends the name.
            format!("{name}.{}", self.tenant)
        }
    }

    fn parse(name: &str) -> Option<IndexEntry> {
        // The tenant may hold dots itself: it is everything after the third.
        let mut parts = name.splitn(4, '.');
        Some(IndexEntry {
            created_at_ms: parts.next()?.parse().ok()?,
            id: Uuid::try_parse(parts.next()?).ok()?,
            stored_bytes: parts.next()?.parse().ok()?,
            tenant: match parts.next() {
                None => TenantId::default_tenant(),
                Some(tenant) => TenantId::parse(tenant).ok()?,
            },
        })
    }
}

impl TemplateStore {
    /// Every template in the index, newest first (ties by id). Reads key names only.
    /// Blocking.
    pub(crate) fn index(&self) -> Result<Vec<IndexEntry>, StorageError> {
        let prefix = index_prefix();
        if let Some(dir) = self.objects.local_path(&prefix) {
            // Made when the store opened: gone means the data directory went from under us.
            std::fs::metadata(dir)?;
        }
        let objects = self.objects.block_on(self.objects.list(&prefix))?;
        let mut entries: Vec<IndexEntry> = objects
            .iter()
            .filter_map(|object| {
                let name = object.key.strip_prefix(&prefix)?.strip_prefix('/')?;
                IndexEntry::parse(name)
            })
            .collect();
        entries.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(entries)
    }

    /// The templates of `tenant` in the index, newest first (ties by id).
    pub(crate) fn index_of(&self, tenant: &TenantId) -> Result<Vec<IndexEntry>, StorageError> {
        let mut entries = self.index()?;
        entries.retain(|entry| entry.tenant == *tenant);
        Ok(entries)
    }

    /// Refuses new data when the data directory's file system is nearly full (the
    /// watermark): it holds the objects locally, and the scratch files of renders in either
    /// mode.
    pub(crate) fn check_disk_space(&self) -> Result<(), StorageError> {
        let watermark_bytes = self.limits.min_free_disk_bytes;
        if watermark_bytes == 0 {
            return Ok(());
        }
        let free_bytes = crate::os::available_disk_bytes(self.objects.data_dir())?;
        if free_bytes < watermark_bytes {
            return Err(StorageError::DiskFull {
                free_bytes,
                watermark_bytes,
            });
        }
        Ok(())
    }

    /// Refuses a new template of `bytes` for `tenant` over the count or byte quota (all
    /// tenants' or `tenant`'s own), or on a full disk. Instances sharing the store read the
    /// same index, so the quota is shared; two creations racing may overshoot it by one
    /// template each.
    pub(crate) fn check_room_for(&self, tenant: &TenantId, bytes: u64) -> Result<(), StorageError> {
        self.check_disk_space()?;
        let index = self.index()?;
        let (own_count, own_bytes) = index
            .iter()
            .filter(|entry| entry.tenant == *tenant)
            .fold((0u64, 0u64), |(count, stored), entry| {
                (count + 1, stored.saturating_add(entry.stored_bytes))
            });
        let limits = &self.limits;
        if limits.max_templates_per_tenant > 0 && own_count >= limits.max_templates_per_tenant {
            return Err(StorageError::QuotaExceeded(format!(
                "your tenant stores {own_count} templates, its limit is {}; delete some first",
                limits.max_templates_per_tenant
            )));
        }
        if limits.max_template_bytes_per_tenant > 0
            && own_bytes.saturating_add(bytes) > limits.max_template_bytes_per_tenant
        {
            return Err(StorageError::QuotaExceeded(format!(
                "your tenant's templates take {own_bytes} bytes; {bytes} more would pass its \
                 {} byte limit; delete some first",
                limits.max_template_bytes_per_tenant
            )));
        }
        let count = index.len() as u64;
        if count >= self.limits.max_templates {
            return Err(StorageError::QuotaExceeded(format!(
                "{count} templates are stored, the limit is {}; delete some first",
                self.limits.max_templates
            )));
        }
        let stored: u64 = index.iter().map(|entry| entry.stored_bytes).sum();
        if stored.saturating_add(bytes) > self.limits.max_template_bytes {
            return Err(StorageError::QuotaExceeded(format!(
                "templates take {stored} bytes; {bytes} more would pass the {} byte limit; \
                 delete some first",
                self.limits.max_template_bytes
            )));
        }
        Ok(())
    }

    /// Writes the summary and index entry of templates that lack them (stored by an earlier
    /// version, or whose creation was interrupted after its record) and drops index entries
    /// whose template is gone (a deletion interrupted). One listing of the templates' keys;
    /// run when a store opens. Blocking.
    pub(crate) fn complete_index(&self) -> Result<(), StorageError> {
        let indexed: HashSet<Uuid> = self.index()?.into_iter().map(|entry| entry.id).collect();
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
            self.write_index_entry(IndexEntry {
                created_at_ms: record.created_at_ms,
                id: *id,
                stored_bytes,
                tenant: record.tenant.clone(),
            })?;
        }
        for entry in self.index()? {
            if !found.get(&entry.id).is_some_and(|template| template.record) {
                self.remove_index_entry(&entry)?;
            }
        }
        Ok(())
    }

    pub(super) fn write_index_entry(&self, entry: IndexEntry) -> Result<(), StorageError> {
        let key = format!("{}/{}", index_prefix(), entry.file_name());
        self.objects.block_on(self.objects.put(&key, Vec::new()))
    }

    pub(super) fn remove_index_entry(&self, entry: &IndexEntry) -> Result<(), StorageError> {
        let key = format!("{}/{}", index_prefix(), entry.file_name());
        self.objects.block_on(self.objects.delete(&key))
    }
}
