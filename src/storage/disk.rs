//! The disk watermark: free space the data directory's file system keeps. It holds the
//! objects locally and every render's scratch files in either mode, so each store that adds
//! data (a template, an uploaded image, a job's pinned files) asks it first and is refused
//! with `DISK_FULL` below it, leaving room for the renders already running.

use super::objects::ObjectStorage;
use super::StorageError;
use std::path::PathBuf;

/// The free bytes the data directory's file system keeps (0: no watermark).
#[derive(Debug, Clone)]
pub(crate) struct DiskWatermark {
    data_dir: PathBuf,
    min_free_bytes: u64,
}

impl DiskWatermark {
    /// `min_free_bytes` kept on the file system of `objects`' data directory.
    pub(crate) fn new(objects: &ObjectStorage, min_free_bytes: u64) -> DiskWatermark {
        DiskWatermark {
            data_dir: objects.data_dir().to_path_buf(),
            min_free_bytes,
        }
    }

    /// Refuses new data when the file system is nearly full.
    pub(crate) fn check(&self) -> Result<(), StorageError> {
        let watermark_bytes = self.min_free_bytes;
        if watermark_bytes == 0 {
            return Ok(());
        }
        let free_bytes = crate::os::available_disk_bytes(&self.data_dir)?;
        if free_bytes < watermark_bytes {
            return Err(StorageError::DiskFull {
                free_bytes,
                watermark_bytes,
            });
        }
        Ok(())
    }
}
