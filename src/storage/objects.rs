//! The object store under templates, fonts and outputs, through the `object_store` crate:
//! the data directory as files by default (`LocalFileSystem`: a put is written aside and
//! renamed, so an object is whole or absent; a copy is a hard link), or an S3-compatible
//! bucket with `--storage-url s3://BUCKET/PREFIX`. Keys are ours (`templates/<id>/…`,
//! `outputs/<job>.<ext>`), never a caller's text, and the same on either store, so the bucket
//! holds the data directory's layout under its prefix.
//!
//! Every call is bounded ([`super::settings`]): a request timeout, a connect timeout and a
//! retry budget with backoff, all applied by `object_store`'s client. A store that fails is
//! [`StorageError::Unavailable`] (UNAVAILABLE with a retry delay); a missing object is
//! [`StorageError::ObjectMissing`], for the caller to name.
//!
//! The template store and the scheduler call from blocking threads ([`ObjectStorage::block_on`]
//! runs a call on the server's runtime); downloads and signing are async.

use super::settings::StorageSettings;
use super::StorageError;
use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{BackoffConfig, ClientOptions, MultipartUpload, ObjectStore, RetryConfig};
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Handle;

/// Bytes of one part of a multipart upload, and the largest file uploaded in one PUT: S3
/// takes parts of 5 MiB at least (but the last), and an upload holds one part in memory at
/// a time, so 8 MiB bounds an upload's memory whatever the output's size.
pub const UPLOAD_PART_BYTES: usize = 8 * 1024 * 1024;

/// One stored object, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// The key, relative to the store's prefix.
    pub key: String,
    pub size: u64,
    pub modified: SystemTime,
}

#[derive(Debug, Clone)]
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    /// The same store as a signer of URLs, when it can sign (S3).
    signer: Option<Arc<dyn Signer>>,
    /// Prepended to every key: empty, or the bucket prefix ending in `/`.
    prefix: String,
    /// The data directory when the objects are its files.
    local_root: Option<PathBuf>,
    /// This instance's own directory: the store's files in local mode; in bucket mode, only
    /// the scratch files of the jobs it renders.
    data_dir: PathBuf,
    runtime: Handle,
    /// Where the objects are, for logs (no credentials).
    description: String,
}

impl ObjectStorage {
    /// The store `settings` name, on `runtime`; `data_dir` holds the objects in local mode
    /// and the scratch files in either.
    pub fn open(
        settings: &StorageSettings,
        data_dir: &Path,
        runtime: Handle,
    ) -> Result<ObjectStorage, StorageError> {
        match &settings.storage_url {
            None => ObjectStorage::local(data_dir, runtime),
            Some(url) => ObjectStorage::s3(url, settings, data_dir, runtime),
        }
    }

    /// The data directory as the store (created when missing).
    pub(crate) fn local(data_dir: &Path, runtime: Handle) -> Result<ObjectStorage, StorageError> {
        std::fs::create_dir_all(data_dir)?;
        let root = std::fs::canonicalize(data_dir)?;
        let store = LocalFileSystem::new_with_prefix(&root)
            .map_err(|error| StorageError::Misconfigured(error.to_string()))?;
        Ok(ObjectStorage {
            store: Arc::new(store),
            signer: None,
            prefix: String::new(),
            description: format!("directory {}", root.display()),
            local_root: Some(root.clone()),
            data_dir: root,
            runtime,
        })
    }

    fn s3(
        url: &str,
        settings: &StorageSettings,
        data_dir: &Path,
        runtime: Handle,
    ) -> Result<ObjectStorage, StorageError> {
        let (bucket, prefix) = parse_s3_url(url)?;
        // Credentials, session token and region from the standard variables first; the
        // settings (flags, or the same variables through them) override.
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(settings.request_timeout())
                    .with_connect_timeout(settings.connect_timeout()),
            )
            .with_allow_http(settings.storage_allow_http)
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: settings.storage_max_retries as usize,
                retry_timeout: settings.retry_timeout(),
            });
        if let Some(region) = &settings.storage_region {
            builder = builder.with_region(region);
        }
        if let Some(endpoint) = &settings.storage_endpoint {
            // An S3-compatible server: the bucket in the path, not in the host name.
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if let Some(credentials) = &settings.s3_credentials {
            builder = builder
                .with_access_key_id(&credentials.access_key_id)
                .with_secret_access_key(&credentials.secret_access_key);
        }
        let s3 = Arc::new(
            builder
                .build()
                .map_err(|error| StorageError::Misconfigured(error.to_string()))?,
        );
        std::fs::create_dir_all(data_dir)?;
        Ok(ObjectStorage {
            store: s3.clone(),
            signer: Some(s3 as Arc<dyn Signer>),
            description: format!("s3://{bucket}/{prefix}"),
            prefix,
            local_root: None,
            data_dir: std::fs::canonicalize(data_dir)?,
            runtime,
        })
    }

    /// Runs `future` (a call of this store) to its end on the store's runtime. Blocking:
    /// only from a thread outside the runtime (a blocking task), never on it.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Starts `future` on the store's runtime without waiting (cleanups from `Drop`).
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(future);
    }

    /// Where the objects are, for logs.
    pub(crate) fn describe(&self) -> &str {
        &self.description
    }

    /// Whether the objects are the data directory's files.
    pub(crate) fn is_local(&self) -> bool {
        self.local_root.is_some()
    }

    /// The file of `key` in local mode.
    pub(crate) fn local_path(&self, key: &str) -> Option<PathBuf> {
        self.local_root.as_ref().map(|root| root.join(key))
    }

    /// This instance's own directory (scratch files; the objects too in local mode).
    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Whether the store signs download URLs.
    pub(crate) fn can_sign(&self) -> bool {
        self.signer.is_some()
    }

    fn path(&self, key: &str) -> Result<ObjectPath, StorageError> {
        ObjectPath::parse(format!("{}{key}", self.prefix))
            .map_err(|error| StorageError::Damaged(format!("object key {key:?}: {error}")))
    }

    pub(crate) async fn put(
        &self,
        key: &str,
        bytes: impl Into<object_store::PutPayload>,
    ) -> Result<(), StorageError> {
        let path = self.path(key)?;
        classified(key, self.store.put(&path, bytes.into())).await?;
        Ok(())
    }

    /// The whole object (only for objects of ours with a bounded size: records, summaries).
    pub(crate) async fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        let path = self.path(key)?;
        let found = classified(key, self.store.get(&path)).await?;
        classified(key, found.bytes()).await
    }

    /// Bytes `range` of the object.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let path = self.path(key)?;
        classified(key, self.store.get_range(&path, range)).await
    }

    /// The object's size.
    pub async fn size(&self, key: &str) -> Result<u64, StorageError> {
        let path = self.path(key)?;
        let meta = classified(key, self.store.head(&path)).await?;
        Ok(meta.size)
    }

    /// Removes the object; one already gone is no error.
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(classify(key, error)),
        }
    }

    /// Every object whose key starts with the directory `prefix` (no trailing `/`).
    pub async fn list(&self, prefix: &str) -> Result<Vec<StoredObject>, StorageError> {
        let path = self.path(prefix)?;
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&path))
            .try_collect()
            .await
            .map_err(|error| classify(prefix, error))?;
        Ok(metas
            .into_iter()
            .filter_map(|meta| {
                let key = meta
                    .location
                    .as_ref()
                    .strip_prefix(&self.prefix)?
                    .to_owned();
                let millis = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
                Some(StoredObject {
                    key,
                    size: meta.size,
                    modified: UNIX_EPOCH + Duration::from_millis(millis),
                })
            })
            .collect())
    }

    /// Copies `from` to `to` inside the store (a hard link locally, a server-side copy in a
    /// bucket: no bytes pass through this instance).
    pub(crate) async fn copy(&self, from: &str, to: &str) -> Result<(), StorageError> {
        let (source, target) = (self.path(from)?, self.path(to)?);
        self.store
            .copy(&source, &target)
            .await
            .map_err(|error| classify(from, error))
    }

    /// Uploads the file `file` as `key`, streamed: one PUT up to [`UPLOAD_PART_BYTES`], a
    /// multipart upload of such parts beyond it (one part in memory at a time). The object
    /// appears whole or not at all; a failed multipart upload is aborted.
    pub async fn upload_file(&self, key: &str, file: &Path) -> Result<u64, StorageError> {
        let path = self.path(key)?;
        let mut source = tokio::fs::File::open(file).await?;
        let size = source.metadata().await?.len();
        if size <= UPLOAD_PART_BYTES as u64 {
            let mut bytes = Vec::with_capacity(size as usize);
            source.read_to_end(&mut bytes).await?;
            self.put(key, bytes).await?;
            return Ok(size);
        }
        let mut upload = classified(key, self.store.put_multipart(&path)).await?;
        let sent = match send_parts(upload.as_mut(), &mut source, key).await {
            Ok(()) => upload
                .complete()
                .await
                .map(|_| ())
                .map_err(|error| classify(key, error)),
            Err(error) => Err(error),
        };
        if let Err(error) = sent {
            // Parts already sent cost storage until the upload is aborted.
            if let Err(abort) = upload.abort().await {
                tracing::warn!(key, error = %abort, "cannot abort a failed multipart upload");
            }
            return Err(error);
        }
        Ok(size)
    }

    /// Writes the object `key` into the file `file`, streamed.
    pub(crate) async fn download_file(&self, key: &str, file: &Path) -> Result<(), StorageError> {
        let path = self.path(key)?;
        let found = classified(key, self.store.get(&path)).await?;
        let mut chunks = found.into_stream();
        let mut target = tokio::fs::File::create(file).await?;
        while let Some(chunk) = chunks
            .try_next()
            .await
            .map_err(|error| classify(key, error))?
        {
            target.write_all(&chunk).await?;
        }
        target.flush().await?;
        Ok(())
    }

    /// A URL anyone holding it may GET `key` with until `expires_in` from now; `None` when
    /// the store cannot sign (local files).
    pub async fn signed_download_url(
        &self,
        key: &str,
        expires_in: Duration,
    ) -> Result<Option<String>, StorageError> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let path = self.path(key)?;
        let url = classified(key, signer.signed_url(http::Method::GET, &path, expires_in)).await?;
        Ok(Some(url.to_string()))
    }
}

async fn send_parts(
    upload: &mut dyn MultipartUpload,
    source: &mut tokio::fs::File,
    key: &str,
) -> Result<(), StorageError> {
    loop {
        let mut part = Vec::with_capacity(UPLOAD_PART_BYTES);
        (&mut *source)
            .take(UPLOAD_PART_BYTES as u64)
            .read_to_end(&mut part)
            .await?;
        if part.is_empty() {
            return Ok(());
        }
        classified(key, upload.put_part(part.into())).await?;
    }
}

/// What a call on the store for `key` answers, its failure classified ([`classify`]).
async fn classified<T>(
    key: &str,
    call: impl std::future::Future<Output = object_store::Result<T>>,
) -> Result<T, StorageError> {
    call.await.map_err(|error| classify(key, error))
}

/// A missing object is the caller's to name; every other failure (refused, timed out, a 5xx
/// after the retries, refused credentials, a local I/O error) is the store being unavailable.
fn classify(key: &str, error: object_store::Error) -> StorageError {
    match error {
        object_store::Error::NotFound { .. } => StorageError::ObjectMissing(key.to_owned()),
        other => StorageError::Unavailable(other.to_string()),
    }
}

/// `s3://BUCKET/PREFIX` → (bucket, prefix ending in `/` or empty).
fn parse_s3_url(url: &str) -> Result<(String, String), StorageError> {
    let wrong = || {
        StorageError::Misconfigured(format!(
            "--storage-url {url:?} is not s3://BUCKET or s3://BUCKET/PREFIX"
        ))
    };
    let rest = url.strip_prefix("s3://").ok_or_else(wrong)?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(wrong());
    }
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return Ok((bucket.to_owned(), String::new()));
    }
    ObjectPath::parse(prefix).map_err(|_| wrong())?;
    Ok((bucket.to_owned(), format!("{prefix}/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_urls_name_a_bucket_and_an_optional_prefix() {
        for (url, bucket, prefix) in [
            ("s3://renders", "renders", ""),
            ("s3://renders/", "renders", ""),
            ("s3://renders/prod/eu", "renders", "prod/eu/"),
            ("s3://renders/prod/", "renders", "prod/"),
        ] {
            assert_eq!(
                parse_s3_url(url).unwrap(),
                (bucket.to_owned(), prefix.to_owned()),
                "{url}"
            );
        }
        for url in [
            "renders",
            "s3://",
            "s3:///prefix",
            "gs://renders",
            "s3://b/a/../c",
        ] {
            assert!(
                matches!(parse_s3_url(url), Err(StorageError::Misconfigured(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn a_file_larger_than_a_part_is_uploaded_in_parts_and_reads_back_whole() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let storage = ObjectStorage::local(dir.path(), runtime.handle().clone()).unwrap();
        let source = dir.path().join("source.bin");
        let bytes: Vec<u8> = (0..UPLOAD_PART_BYTES * 2 + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&source, &bytes).unwrap();
        let size = storage
            .block_on(storage.upload_file("outputs/big.bin", &source))
            .unwrap();
        assert_eq!(size, bytes.len() as u64);
        let read = std::fs::read(storage.local_path("outputs/big.bin").unwrap()).unwrap();
        assert!(read == bytes, "the object differs from the file");
        let middle = storage
            .block_on(storage.get_range("outputs/big.bin", 5..10))
            .unwrap();
        assert_eq!(&middle[..], &bytes[5..10]);
        assert!(matches!(
            storage.block_on(storage.size("outputs/none.bin")),
            Err(StorageError::ObjectMissing(key)) if key == "outputs/none.bin"
        ));
    }
}
