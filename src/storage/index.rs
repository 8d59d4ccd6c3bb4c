//! The listing index and the quota of the templates ([`TemplateIndex`]): `templates/.index/`
//! holds one empty object per template named `<created ms>.<id>.<stored bytes>`, followed by
//! `.<tenant>` for a template of any tenant but the default one (whose entries keep the name
//! they had before tenants). Listing order, a tenant's templates, the template count and the
//! bytes stored come from key names alone (one listing, a page per thousand templates in a
//! bucket), so a listing or a quota check reads no record, and every instance on the same
//! store sees the same figures. The index lives in the store itself rather than in Redis: it
//! is then true wherever the templates are (the embedded default has no Redis), and it cannot
//! disagree with them after one of the two was restored from a backup. An entry is written
//! once its template is in place and removed when it is deleted, so an entry always names a
//! whole template (the template store drops one whose deletion was interrupted when it opens:
//! `Templates::complete_index`).

use super::objects::ObjectStorage;
use super::settings::{StorageSettings, DEFAULT_MAX_TEMPLATES, DEFAULT_MAX_TEMPLATE_BYTES};
use super::{StorageError, TEMPLATES};
use crate::auth::TenantId;
use uuid::Uuid;

/// Directory of the listing index, under the templates directory (not an id, so never taken
/// for a template).
pub(super) const INDEX_DIR: &str = ".index";

/// Key prefix of the index entries.
fn index_prefix() -> String {
    format!("{TEMPLATES}/{INDEX_DIR}")
}

/// The template quota: templates and their bytes at most, all tenants' and each tenant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TemplateQuota {
    pub max_templates: u64,
    pub max_template_bytes: u64,
    /// A tenant's share of the two above (0: none of its own, only the shared limits), so
    /// that one tenant cannot fill the store for all.
    pub max_templates_per_tenant: u64,
    pub max_template_bytes_per_tenant: u64,
}

impl Default for TemplateQuota {
    fn default() -> TemplateQuota {
        TemplateQuota {
            max_templates: DEFAULT_MAX_TEMPLATES,
            max_template_bytes: DEFAULT_MAX_TEMPLATE_BYTES,
            max_templates_per_tenant: 0,
            max_template_bytes_per_tenant: 0,
        }
    }
}

impl From<&StorageSettings> for TemplateQuota {
    fn from(settings: &StorageSettings) -> TemplateQuota {
        const MIB: u64 = 1024 * 1024;
        TemplateQuota {
            max_templates: settings.max_templates,
            max_template_bytes: settings.max_template_storage_mb.saturating_mul(MIB),
            max_templates_per_tenant: settings.max_templates_per_tenant,
            max_template_bytes_per_tenant: settings
                .max_template_storage_mb_per_tenant
                .saturating_mul(MIB),
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
    fn file_name(&self) -> String {
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

/// The index of the templates in one object store, and the quota it counts.
#[derive(Debug, Clone)]
pub(crate) struct TemplateIndex {
    objects: ObjectStorage,
    quota: TemplateQuota,
}

impl TemplateIndex {
    /// The index in `objects` under `quota`. Locally its directory is made here and must
    /// stay: if it vanishes (a volume unmounted under the server), calls are refused rather
    /// than writing into a fresh directory on another disk ([`TemplateIndex::entries`]).
    pub(super) fn open(
        objects: ObjectStorage,
        quota: TemplateQuota,
    ) -> Result<TemplateIndex, StorageError> {
        if let Some(dir) = objects.local_path(&index_prefix()) {
            std::fs::create_dir_all(dir)?;
        }
        Ok(TemplateIndex { objects, quota })
    }

    /// The same index under another quota.
    #[cfg(test)]
    pub(super) fn with_quota(self, quota: TemplateQuota) -> TemplateIndex {
        TemplateIndex { quota, ..self }
    }

    /// Every template in the index, newest first (ties by id). Reads key names only.
    /// Blocking.
    pub(crate) fn entries(&self) -> Result<Vec<IndexEntry>, StorageError> {
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
    pub(crate) fn of(&self, tenant: &TenantId) -> Result<Vec<IndexEntry>, StorageError> {
        let mut entries = self.entries()?;
        entries.retain(|entry| entry.tenant == *tenant);
        Ok(entries)
    }

    /// Refuses a new template of `bytes` for `tenant` over the count or byte quota (all
    /// tenants' or `tenant`'s own). Instances sharing the store read the same index, so the
    /// quota is shared; two creations racing may overshoot it by one template each.
    pub(super) fn check_room_for(&self, tenant: &TenantId, bytes: u64) -> Result<(), StorageError> {
        let index = self.entries()?;
        let (own_count, own_bytes) = index
            .iter()
            .filter(|entry| entry.tenant == *tenant)
            .fold((0u64, 0u64), |(count, stored), entry| {
                (count + 1, stored.saturating_add(entry.stored_bytes))
            });
        let quota = &self.quota;
        if quota.max_templates_per_tenant > 0 && own_count >= quota.max_templates_per_tenant {
            return Err(StorageError::QuotaExceeded(format!(
                "your tenant stores {own_count} templates, its limit is {}; delete some first",
                quota.max_templates_per_tenant
            )));
        }
        if quota.max_template_bytes_per_tenant > 0
            && own_bytes.saturating_add(bytes) > quota.max_template_bytes_per_tenant
        {
            return Err(StorageError::QuotaExceeded(format!(
                "your tenant's templates take {own_bytes} bytes; {bytes} more would pass its \
                 {} byte limit; delete some first",
                quota.max_template_bytes_per_tenant
            )));
        }
        let count = index.len() as u64;
        if count >= quota.max_templates {
            return Err(StorageError::QuotaExceeded(format!(
                "{count} templates are stored, the limit is {}; delete some first",
                quota.max_templates
            )));
        }
        let stored: u64 = index.iter().map(|entry| entry.stored_bytes).sum();
        if stored.saturating_add(bytes) > quota.max_template_bytes {
            return Err(StorageError::QuotaExceeded(format!(
                "templates take {stored} bytes; {bytes} more would pass the {} byte limit; \
                 delete some first",
                quota.max_template_bytes
            )));
        }
        Ok(())
    }

    /// Adds `entry` (its template is whole in place).
    pub(super) fn write(&self, entry: &IndexEntry) -> Result<(), StorageError> {
        let key = format!("{}/{}", index_prefix(), entry.file_name());
        self.objects.block_on(self.objects.put(&key, Vec::new()))
    }

    /// Removes `entry` (its template is being deleted, or is gone).
    pub(super) fn remove(&self, entry: &IndexEntry) -> Result<(), StorageError> {
        let key = format!("{}/{}", index_prefix(), entry.file_name());
        self.objects.block_on(self.objects.delete(&key))
    }
}
