//! Rendered outputs, one object per succeeded job: `outputs/<job-id>.<ext>`, and beside it
//! the job's poster when it asked for one (`outputs/<job-id>.poster.png`), which every
//! operation here carries along with the output: committed, linked and removed with it.
//!
//! A worker has no network and sees only its own files, so it writes the output into this
//! instance's scratch directory (`.partial-<job-id>.<ext>`) and the scheduler commits it when
//! the render succeeded: locally a rename into `outputs/` (the same file system: atomic, no
//! copy), in a bucket a streamed upload ([`ObjectStorage::upload_file`]: multipart past
//! 8 MiB, one part in memory at a time) after which the scratch file goes. An upload that
//! fails leaves no object and the job fails retryable (STORAGE_UNAVAILABLE), never a success
//! without its output. Downloads read the object in bounded ranges; a job given another's
//! output (an identical request) gets its own copy (a hard link, a server-side copy), so each
//! expires on its own.

use super::objects::ObjectStorage;
use super::StorageError;
use bytes::Bytes;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Directory of the outputs' keys.
const OUTPUTS: &str = "outputs";
/// The extension of a job's poster (`OutputSpec.poster`), beside its output.
pub(crate) const POSTER_EXTENSION: &str = "poster.png";
/// This instance's scratch directory under the data directory, in bucket mode (locally the
/// partial files sit beside the outputs, so committing is a rename).
const SCRATCH_DIR: &str = "scratch";
/// Partial files older than this belong to no running render (none runs longer than
/// [`crate::sandbox::MAX_DEADLINE`]); the sweep removes them.
const STALE_PARTIAL_AGE: Duration = Duration::from_secs(2 * 3600);

#[derive(Debug, Clone)]
pub(crate) struct OutputStore {
    objects: ObjectStorage,
    /// Where workers write their partial outputs (this instance's disk only).
    scratch: PathBuf,
    /// How long a signed download URL stays valid.
    download_url_expiry: Duration,
}

impl OutputStore {
    /// The object store the outputs (and the pinned template files) live in.
    pub(crate) fn objects(&self) -> &ObjectStorage {
        &self.objects
    }

    /// The outputs in `objects` (the scratch directory created when missing).
    pub(crate) fn open(
        objects: ObjectStorage,
        download_url_expiry: Duration,
    ) -> Result<OutputStore, StorageError> {
        let scratch = match objects.local_path(OUTPUTS) {
            Some(outputs) => outputs,
            None => objects.data_dir().join(SCRATCH_DIR),
        };
        std::fs::create_dir_all(&scratch)?;
        Ok(OutputStore {
            objects,
            scratch,
            download_url_expiry,
        })
    }

    fn key(job: Uuid, extension: &str) -> String {
        format!("{OUTPUTS}/{job}.{extension}")
    }

    /// Where a worker writes while rendering (this instance's disk).
    pub(crate) fn partial_path(&self, job: Uuid, extension: &str) -> PathBuf {
        self.scratch.join(format!(".partial-{job}.{extension}"))
    }

    /// Makes a finished partial file the job's output, and its poster's partial file, when
    /// the worker wrote one, its poster. Blocking.
    pub(crate) fn commit(&self, job: Uuid, extension: &str) -> Result<(), StorageError> {
        if self.partial_path(job, POSTER_EXTENSION).exists() {
            self.commit_one(job, POSTER_EXTENSION)?;
        }
        self.commit_one(job, extension)
    }

    fn commit_one(&self, job: Uuid, extension: &str) -> Result<(), StorageError> {
        let partial = self.partial_path(job, extension);
        let key = Self::key(job, extension);
        if let Some(path) = self.objects.local_path(&key) {
            std::fs::rename(partial, path)?;
            return Ok(());
        }
        let uploaded = self
            .objects
            .block_on(self.objects.upload_file(&key, &partial));
        // Uploaded or not, the scratch copy goes: a failed job is rendered again from the
        // start when its caller retries.
        remove_file_if_present(&partial);
        uploaded.map(|_| ())
    }

    /// Gives job `to` the output of job `from` (and its poster, when it has one): a hard link
    /// locally (each job's file expires on its own), a server-side copy in a bucket. Blocking.
    pub(crate) fn link(&self, from: Uuid, to: Uuid, extension: &str) -> Result<(), StorageError> {
        let poster = Self::key(from, POSTER_EXTENSION);
        let has_poster = match self.objects.local_path(&poster) {
            Some(path) => path.exists(),
            None => self.objects.block_on(self.objects.size(&poster)).is_ok(),
        };
        if has_poster {
            self.link_one(from, to, POSTER_EXTENSION)?;
        }
        self.link_one(from, to, extension)
    }

    fn link_one(&self, from: Uuid, to: Uuid, extension: &str) -> Result<(), StorageError> {
        let (source, target) = (Self::key(from, extension), Self::key(to, extension));
        let (Some(source), Some(target)) = (
            self.objects.local_path(&source),
            self.objects.local_path(&target),
        ) else {
            return self.objects.block_on(self.objects.copy(&source, &target));
        };
        match std::fs::hard_link(source, &target) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(StorageError::Io(error)),
        }
        // The retention sweep goes by modification time, which links share: the newest job
        // using the file keeps it.
        std::fs::File::options()
            .write(true)
            .open(&target)?
            .set_modified(SystemTime::now())?;
        Ok(())
    }

    /// Removes a job's output and partial file, and its poster's, if any. Blocking.
    pub(crate) fn remove(&self, job: Uuid, extension: &str) {
        self.remove_one(job, POSTER_EXTENSION);
        self.remove_one(job, extension);
    }

    fn remove_one(&self, job: Uuid, extension: &str) {
        remove_file_if_present(&self.partial_path(job, extension));
        if let Err(error) = self
            .objects
            .block_on(self.objects.delete(&Self::key(job, extension)))
        {
            tracing::warn!(job_id = %job, %error, "cannot remove an output; the sweep will");
        }
    }

    /// Removes outputs older than `retention` (left by an earlier run of the service, whose
    /// jobs were in its memory, or by another instance) and stale partial files; answers how
    /// many were removed. Blocking.
    pub(crate) fn sweep(&self, retention: Duration) -> Result<usize, StorageError> {
        let now = SystemTime::now();
        let old = |modified: SystemTime, limit: Duration| {
            now.duration_since(modified).unwrap_or_default() >= limit
        };
        let mut removed = 0;
        // Partial files (and, locally, the outputs beside them).
        for entry in std::fs::read_dir(&self.scratch)? {
            let entry = entry?;
            let is_partial = entry.file_name().to_string_lossy().starts_with(".partial-");
            if !is_partial && !self.objects.is_local() {
                continue;
            }
            let limit = if is_partial {
                STALE_PARTIAL_AGE
            } else {
                retention
            };
            let modified = entry.metadata().and_then(|meta| meta.modified());
            if matches!(modified, Ok(modified) if old(modified, limit))
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
        if self.objects.is_local() {
            return Ok(removed);
        }
        self.objects.block_on(async {
            for object in self.objects.list(OUTPUTS).await? {
                if old(object.modified, retention) {
                    self.objects.delete(&object.key).await?;
                    removed += 1;
                }
            }
            Ok::<(), StorageError>(())
        })?;
        Ok(removed)
    }

    /// The size of a job's output; `ObjectMissing` when it is gone.
    pub(crate) async fn size(&self, job: Uuid, extension: &str) -> Result<u64, StorageError> {
        self.objects.size(&Self::key(job, extension)).await
    }

    /// Bytes `range` of a job's output.
    pub(crate) async fn read(
        &self,
        job: Uuid,
        extension: &str,
        range: Range<u64>,
    ) -> Result<Bytes, StorageError> {
        self.objects
            .get_range(&Self::key(job, extension), range)
            .await
    }

    /// A URL that fetches a job's output without this service, and when it stops working;
    /// `None` when the store cannot sign URLs (local files).
    pub(crate) async fn download_url(
        &self,
        job: Uuid,
        extension: &str,
    ) -> Result<Option<(String, SystemTime)>, StorageError> {
        let expires_at = SystemTime::now() + self.download_url_expiry;
        let url = self
            .objects
            .signed_download_url(&Self::key(job, extension), self.download_url_expiry)
            .await?;
        Ok(url.map(|url| (url, expires_at)))
    }

    /// Whether outputs get signed download URLs.
    pub(crate) fn signs_urls(&self) -> bool {
        self.objects.can_sign()
    }
}

fn remove_file_if_present(path: &std::path::Path) {
    if let Err(error) = std::fs::remove_file(path) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), %error, "cannot remove a partial output");
        }
    }
}
