//! Uploaded images (UploadImage, DeleteImage: [`Images`]): a tenant's images for image slots,
//! stored once and named in any number of renders by their SHA-256. Each is one object,
//! `images/<tenant>/<sha256>` (the tenant hex-encoded: any tenant name is a safe key), in the
//! same store as the templates (the data directory or the bucket), so every instance of a
//! farm sees the same images. The same bytes uploaded twice are one image. A render names
//! an image and its job's pin gets a copy of it at admission (`storage::pins`), so deleting
//! the image never takes it from a job already accepted.
//!
//! The quota is counted from one listing of the tenant's prefix per upload (no record to
//! keep right): two uploads racing at the edge of the quota may both pass it, by one image.

use super::disk::DiskWatermark;
use super::objects::ObjectStorage;
use super::StorageError;
use crate::auth::TenantId;
use crate::lottie::reading::images::Header;
use crate::lottie::reading::template::hex_sha256;

/// Top directory of the uploaded images' keys.
const IMAGES: &str = "images";
/// Images one tenant keeps at most: a brand's logos, products and avatars; the bound keeps a
/// quota check's listing short.
pub const MAX_IMAGES_PER_TENANT: usize = 1000;
/// Bytes of images one tenant keeps at most: a thousand images of 1 MiB, or a hundred of
/// the largest.
pub const MAX_IMAGE_BYTES_PER_TENANT: u64 = 1024 * 1024 * 1024;

/// An uploaded image as UploadImage answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    /// Lowercase hex SHA-256 of its bytes.
    pub id: String,
    pub header: Header,
    pub size_bytes: u64,
}

/// The key prefix of `tenant`'s images.
fn tenant_prefix(tenant: &TenantId) -> String {
    let hex: String = tenant
        .as_str()
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("{IMAGES}/{hex}")
}

/// Whether `id` is a SHA-256 in lowercase hex, as image ids and a pin's images are named
/// (never a path).
pub(crate) fn is_image_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Refuses one more image of `size_bytes` to a tenant holding `count` images of `held`
/// bytes beyond [`MAX_IMAGES_PER_TENANT`] or [`MAX_IMAGE_BYTES_PER_TENANT`].
fn check_quota(count: usize, held: u64, size_bytes: u64) -> Result<(), StorageError> {
    if count >= MAX_IMAGES_PER_TENANT {
        return Err(StorageError::ImageQuotaExceeded(format!(
            "the tenant keeps {count} images, the most it may; delete some (DeleteImage)"
        )));
    }
    if held + size_bytes > MAX_IMAGE_BYTES_PER_TENANT {
        return Err(StorageError::ImageQuotaExceeded(format!(
            "the tenant's images take {held} bytes; this one's {size_bytes} would pass the \
             {MAX_IMAGE_BYTES_PER_TENANT} bytes it may keep; delete some (DeleteImage)"
        )));
    }
    Ok(())
}

/// The uploaded images of one object store, refused below the disk watermark.
#[derive(Debug, Clone)]
pub(crate) struct Images {
    objects: ObjectStorage,
    disk: DiskWatermark,
}

impl Images {
    pub(crate) fn new(objects: ObjectStorage, disk: DiskWatermark) -> Images {
        Images { objects, disk }
    }

    /// The key of `tenant`'s image `id` (checked by [`is_image_id`] first).
    pub(crate) fn key(tenant: &TenantId, id: &str) -> String {
        format!("{}/{id}", tenant_prefix(tenant))
    }

    /// Stores `bytes` (their header already checked: `header`) as one of `tenant`'s images,
    /// or answers the image already stored with the same bytes. Blocking.
    pub(crate) fn upload(
        &self,
        tenant: &TenantId,
        bytes: bytes::Bytes,
        header: Header,
    ) -> Result<StoredImage, StorageError> {
        let id = hex_sha256(&bytes);
        let size_bytes = bytes.len() as u64;
        let image = StoredImage {
            id: id.clone(),
            header,
            size_bytes,
        };
        let key = Images::key(tenant, &id);
        let objects = &self.objects;
        let stored = objects.block_on(objects.list(&tenant_prefix(tenant)))?;
        if stored.iter().any(|object| object.key == key) {
            return Ok(image);
        }
        let held: u64 = stored.iter().map(|object| object.size).sum();
        check_quota(stored.len(), held, size_bytes)?;
        self.disk.check()?;
        objects.block_on(objects.put(&key, bytes))?;
        Ok(image)
    }

    /// Deletes `tenant`'s image `id`. Blocking.
    pub(crate) fn delete(&self, tenant: &TenantId, id: &str) -> Result<(), StorageError> {
        let missing = || StorageError::ImageNotFound(id.to_owned());
        if !is_image_id(id) {
            return Err(missing());
        }
        let objects = &self.objects;
        let key = Images::key(tenant, id);
        match objects.block_on(objects.size(&key)) {
            Ok(_) => {}
            Err(StorageError::ObjectMissing(_)) => return Err(missing()),
            Err(error) => return Err(error),
        }
        objects.block_on(objects.delete(&key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &std::path::Path, runtime: &tokio::runtime::Runtime) -> Images {
        let objects = ObjectStorage::local(dir, runtime.handle().clone()).unwrap();
        let disk = DiskWatermark::new(
            &objects,
            crate::storage::settings::DEFAULT_MIN_FREE_DISK_BYTES,
        );
        Images::new(objects, disk)
    }

    fn header() -> Header {
        Header {
            format: image::ImageFormat::Png,
            width: 1,
            height: 1,
        }
    }

    #[test]
    fn the_same_bytes_are_one_image_per_tenant_and_a_tenants_images_are_its_own() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), &runtime);
        let (a, b) = (TenantId::parse("a").unwrap(), TenantId::parse("b").unwrap());
        let first = store
            .upload(&a, bytes::Bytes::from_static(b"one"), header())
            .unwrap();
        let again = store
            .upload(&a, bytes::Bytes::from_static(b"one"), header())
            .unwrap();
        assert_eq!(first, again);
        assert!(is_image_id(&first.id));
        // Another tenant's images are under a key of its own.
        store
            .upload(&b, bytes::Bytes::from_static(b"one"), header())
            .unwrap();
        assert!(Images::key(&b, &first.id).starts_with("images/62/"));
        store.delete(&a, &first.id).unwrap();
        assert!(matches!(
            store.delete(&a, &first.id),
            Err(StorageError::ImageNotFound(_))
        ));
        assert!(matches!(
            store.delete(&a, "../../templates"),
            Err(StorageError::ImageNotFound(_))
        ));
        // B's copy is untouched by A's delete.
        store.delete(&b, &first.id).unwrap();
    }

    #[test]
    fn the_quota_counts_images_and_bytes() {
        assert!(check_quota(MAX_IMAGES_PER_TENANT - 1, 0, 1).is_ok());
        assert!(matches!(
            check_quota(MAX_IMAGES_PER_TENANT, 0, 1),
            Err(StorageError::ImageQuotaExceeded(_))
        ));
        assert!(check_quota(1, MAX_IMAGE_BYTES_PER_TENANT - 10, 10).is_ok());
        assert!(matches!(
            check_quota(1, MAX_IMAGE_BYTES_PER_TENANT - 10, 11),
            Err(StorageError::ImageQuotaExceeded(_))
        ));
    }
}
