//! Templates, fonts, images and outputs in object storage ([`objects`]: the data directory's
//! files by default, an S3-compatible bucket with `--storage-url`), with the same keys either
//! way. Each kind of stored object is one type in one file that owns its keys, all over the
//! one [`ObjectStorage`] handle:
//!
//! - [`Templates`] ([`templates`]): `templates/<id>/` (JSON, fonts, [`summary`], record), with
//!   their name-only listing index and quota ([`index::TemplateIndex`], `templates/.index/`);
//! - [`Pins`] ([`pins`]): an accepted job's own copies of its template's files and its
//!   replacement images, `templates/.jobs/<job-id>/` (hard links locally, server-side copies
//!   in a bucket), so deleting a template hides it at once while the jobs already accepted
//!   still render;
//! - [`Images`] ([`images`]): a tenant's uploaded images, `images/<tenant>/<sha256>`;
//! - [`OutputStore`] ([`outputs`]): `outputs/<job-id>.<ext>`.
//!
//! Each store that adds data keeps the [`DiskWatermark`] ([`disk`]); [`Stores`] opens them all
//! over one handle; their errors are one [`StorageError`], mapped to the wire here. A new kind
//! of stored object is a new file beside these and a field of [`Stores`].

pub(crate) mod disk;
pub mod images;
pub(crate) mod index;
pub mod objects;
pub(crate) mod outputs;
pub(crate) mod pins;
pub mod record;
pub mod record_cache;
pub mod settings;
pub mod summary;
pub(crate) mod templates;

use crate::error::{ServiceError, ServiceErrorCode};
use crate::reason::Reason;
pub(crate) use disk::DiskWatermark;
pub(crate) use images::Images;
pub(crate) use index::IndexEntry;
pub use objects::ObjectStorage;
pub(crate) use outputs::{OutputStore, POSTER_EXTENSION};
pub(crate) use pins::Pins;
pub use record::{TemplateRecord, MAX_TEMPLATE_RECORD_BYTES};
pub use record_cache::AdmissionRecord;
use std::time::Duration;
pub(crate) use templates::Templates;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("template {0} does not exist")]
    NotFound(Uuid),
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
    /// The store failed: refused, timed out, an error answer after the retries.
    #[error("the object store is unavailable: {0}")]
    Unavailable(String),
    /// An object this service wrote is not there (an output expired, a pin swept).
    #[error("object {0} does not exist")]
    ObjectMissing(String),
    /// `--storage-url` or the store's settings are wrong (at start-up).
    #[error("{0}")]
    Misconfigured(String),
    #[error("a stored record is damaged: {0}")]
    Damaged(String),
    #[error("{0}")]
    QuotaExceeded(String),
    /// The caller's tenant has no uploaded image of this id.
    #[error("no image {0} was uploaded")]
    ImageNotFound(String),
    #[error("{0}")]
    ImageQuotaExceeded(String),
    /// The template's record would be over [`MAX_TEMPLATE_RECORD_BYTES`] (the caller's
    /// template is at fault).
    #[error("the template's record (its slots, default texts and warnings) would be {bytes} bytes, more than the {MAX_TEMPLATE_RECORD_BYTES} byte limit; shorten its default texts or slot names")]
    RecordTooLarge { bytes: usize },
    #[error("the data directory's file system has {free_bytes} bytes free, less than the {watermark_bytes} bytes kept free")]
    DiskFull {
        free_bytes: u64,
        watermark_bytes: u64,
    },
}

/// Top directory of the templates' keys: each template's own (`<id>/`, [`templates`]), their
/// index's (`.index/`, [`index`]) and the jobs' pins (`.jobs/`, [`pins`]).
const TEMPLATES: &str = "templates";

/// Every kind of stored object, each its own store over the one object store.
#[derive(Debug, Clone)]
pub(crate) struct Stores {
    pub templates: Templates,
    pub images: Images,
    pub pins: Pins,
    pub outputs: OutputStore,
}

impl Stores {
    /// Each store over `objects` under `settings` (the template quota, the free disk every
    /// store that adds data keeps, the outputs' signed links' expiry). Reads nothing from the
    /// store (only local directories are made); the templates' index is repaired by
    /// [`Templates::complete_index`].
    pub(crate) fn open(
        objects: ObjectStorage,
        settings: &settings::StorageSettings,
    ) -> Result<Stores, StorageError> {
        let disk = DiskWatermark::new(&objects, settings.min_free_disk_bytes());
        Ok(Stores {
            templates: Templates::new(objects.clone(), settings.into(), disk.clone())?,
            images: Images::new(objects.clone(), disk.clone()),
            pins: Pins::new(objects.clone(), disk)?,
            outputs: OutputStore::open(objects, settings.download_url_expiry())?,
        })
    }
}

/// Retry delay when template storage fails.
const STORAGE_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Retry delay when the template quota or the disk is full: freeing room takes someone
/// deleting templates or the retention sweep removing outputs, minutes rather than seconds.
pub(crate) const STORAGE_FULL_RETRY_AFTER: Duration = Duration::from_secs(60);

impl From<StorageError> for ServiceError {
    fn from(error: StorageError) -> ServiceError {
        match error {
            StorageError::NotFound(id) => ServiceError::not_found(
                Reason::TemplateNotFound,
                format!("template {id} does not exist"),
            ),
            StorageError::Io(error) => ServiceError::transient(
                ServiceErrorCode::Unavailable,
                Reason::StorageUnavailable,
                format!("storage failed: {error}"),
                STORAGE_RETRY_AFTER,
            ),
            StorageError::Unavailable(detail) => ServiceError::transient(
                ServiceErrorCode::Unavailable,
                Reason::StorageUnavailable,
                format!("storage failed: {detail}"),
                STORAGE_RETRY_AFTER,
            ),
            StorageError::ObjectMissing(key) => {
                ServiceError::internal(format!("a stored object is missing: {key}"))
            }
            StorageError::Misconfigured(detail) => {
                ServiceError::internal(format!("storage is misconfigured: {detail}"))
            }
            StorageError::Damaged(detail) => {
                ServiceError::internal(format!("damaged template record: {detail}"))
            }
            error @ StorageError::RecordTooLarge { .. } => {
                let message = error.to_string();
                ServiceError::invalid_argument(
                    Reason::TemplateRecordTooLarge,
                    message.clone(),
                    vec![crate::error::FieldViolation {
                        field: "lottie_json".into(),
                        description: message,
                    }],
                )
            }
            StorageError::ImageNotFound(id) => ServiceError::not_found(
                Reason::ImageNotFound,
                format!("no image {id} was uploaded (UploadImage)"),
            ),
            StorageError::ImageQuotaExceeded(message) => ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::ImageQuotaExceeded,
                message,
                STORAGE_FULL_RETRY_AFTER,
            ),
            StorageError::QuotaExceeded(message) => ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::TemplateQuotaExceeded,
                message,
                STORAGE_FULL_RETRY_AFTER,
            ),
            error @ StorageError::DiskFull { .. } => ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::DiskFull,
                format!("the server is out of disk space: {error}"),
                STORAGE_FULL_RETRY_AFTER,
            ),
        }
    }
}
