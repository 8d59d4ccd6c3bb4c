//! Where templates, fonts and outputs are kept (`--storage-url`) and the bounds of every call
//! to that store: a request timeout, a connect timeout and a retry budget, so that a store
//! that stops answering costs a caller a bounded wait and then UNAVAILABLE with a retry
//! delay, never a hung call; and what the stores keep at most (the template quota, the free
//! disk). Flattened into `serve`'s flags.

use std::time::Duration;

const MIB: u64 = 1024 * 1024;

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

/// One request to the store (a part of an upload, a chunk of a download, a listing page) may
/// take this long, milliseconds: an 8 MiB part at 5 MB/s takes under 2 s, so 30 s only ends
/// requests to a store that has stopped answering.
pub(crate) const DEFAULT_STORAGE_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Connecting to the store may take this long, milliseconds: a store on the same network
/// answers a connection in milliseconds; one that does not within 2 s is down or
/// unreachable, and retrying soon serves the caller better than waiting.
pub(crate) const DEFAULT_STORAGE_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Retries of one failed request (connection refused or reset, a timeout, a 5xx or 429
/// answer), with exponential backoff: three ride out a store's restart or a load
/// balancer's hiccup without making a caller wait long for a store that is down.
pub(crate) const DEFAULT_STORAGE_MAX_RETRIES: u32 = 3;
/// A request is not retried once this long has passed since its first attempt,
/// milliseconds: with the connect timeout, it bounds how long a caller waits for a store
/// that is down before being answered UNAVAILABLE.
pub(crate) const DEFAULT_STORAGE_RETRY_TIMEOUT_MS: u64 = 10_000;
/// How long a signed download URL stays valid, seconds: an hour fetches a large output over
/// a slow link with room to spare, and a URL that leaked into a log is useless soon after.
/// S3 refuses signatures longer than 7 days.
pub(crate) const DEFAULT_DOWNLOAD_URL_EXPIRY_SECONDS: u64 = 3_600;
/// The longest expiry an S3 signature may carry (SigV4's limit).
pub(crate) const MAX_DOWNLOAD_URL_EXPIRY_SECONDS: u64 = 7 * 24 * 3_600;

/// An access key pair (no session token).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret never reaches a log.
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Where objects live and how long the store may take.
#[derive(Debug, Clone, clap::Args)]
pub struct StorageSettings {
    /// Object storage for templates, fonts and outputs: `s3://BUCKET/PREFIX` for an
    /// S3-compatible bucket (credentials, region and endpoint from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL; plain http
    /// only with AWS_ALLOW_HTTP=true). Unset: the data directory, as files.
    #[arg(long, env = "LOTTIE_RENDER_STORAGE_URL")]
    pub storage_url: Option<String>,
    /// Endpoint of an S3-compatible server (`http://127.0.0.1:9000`); AWS's own when unset.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub storage_endpoint: Option<String>,
    /// Region of the bucket [default: AWS_DEFAULT_REGION, else us-east-1].
    #[arg(long, env = "AWS_REGION")]
    pub storage_region: Option<String>,
    /// Allow a plain-http endpoint (a test server on this machine); https only without it.
    #[arg(long, env = "AWS_ALLOW_HTTP")]
    pub storage_allow_http: bool,
    /// Credentials given in code (tests, tools); never a flag: in production they come
    /// from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (or the
    /// instance's role).
    #[arg(skip)]
    pub s3_credentials: Option<S3Credentials>,
    /// One request to the store may take this long, milliseconds.
    #[arg(long, env = "LOTTIE_RENDER_STORAGE_REQUEST_TIMEOUT_MS", default_value_t = DEFAULT_STORAGE_REQUEST_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub storage_request_timeout_ms: u64,
    /// Connecting to the store may take this long, milliseconds.
    #[arg(long, env = "LOTTIE_RENDER_STORAGE_CONNECT_TIMEOUT_MS", default_value_t = DEFAULT_STORAGE_CONNECT_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub storage_connect_timeout_ms: u64,
    /// Retries of one failed request to the store.
    #[arg(long, env = "LOTTIE_RENDER_STORAGE_MAX_RETRIES", default_value_t = DEFAULT_STORAGE_MAX_RETRIES, value_parser = clap::value_parser!(u32).range(0..=20))]
    pub storage_max_retries: u32,
    /// No retry starts this long after a request's first attempt, milliseconds.
    #[arg(long, env = "LOTTIE_RENDER_STORAGE_RETRY_TIMEOUT_MS", default_value_t = DEFAULT_STORAGE_RETRY_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub storage_retry_timeout_ms: u64,
    /// How long the signed `download_url` of a succeeded job stays valid, seconds (only
    /// with a store that signs URLs: S3).
    #[arg(long, env = "LOTTIE_RENDER_DOWNLOAD_URL_EXPIRY_SECONDS", default_value_t = DEFAULT_DOWNLOAD_URL_EXPIRY_SECONDS, value_parser = clap::value_parser!(u64).range(1..=MAX_DOWNLOAD_URL_EXPIRY_SECONDS))]
    pub download_url_expiry_seconds: u64,
    /// Templates stored at most; CreateTemplate beyond it is answered RESOURCE_EXHAUSTED
    /// (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(long, env = "LOTTIE_RENDER_MAX_TEMPLATES", default_value_t = DEFAULT_MAX_TEMPLATES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_templates: u64,
    /// Stored template bytes (JSON and fonts) at most, MiB; beyond it CreateTemplate is
    /// answered RESOURCE_EXHAUSTED (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(long, env = "LOTTIE_RENDER_MAX_TEMPLATE_STORAGE_MB", default_value_t = DEFAULT_MAX_TEMPLATE_BYTES / (1024 * 1024), value_parser = clap::value_parser!(u64).range(1..))]
    pub max_template_storage_mb: u64,
    /// Templates one tenant stores at most (within `--max-templates`); 0: no limit of its
    /// own. Beyond it that tenant's CreateTemplate is answered RESOURCE_EXHAUSTED
    /// (TEMPLATE_QUOTA_EXCEEDED).
    #[arg(
        long,
        env = "LOTTIE_RENDER_MAX_TEMPLATES_PER_TENANT",
        default_value_t = 0
    )]
    pub max_templates_per_tenant: u64,
    /// Template bytes one tenant stores at most, MiB (within `--max-template-storage-mb`);
    /// 0: no limit of its own.
    #[arg(
        long,
        env = "LOTTIE_RENDER_MAX_TEMPLATE_STORAGE_MB_PER_TENANT",
        default_value_t = 0
    )]
    pub max_template_storage_mb_per_tenant: u64,
    /// Free space kept on the data directory's file system, MiB: below it SubmitRender and
    /// CreateTemplate are answered RESOURCE_EXHAUSTED (DISK_FULL); 0 turns the check off.
    #[arg(long, env = "LOTTIE_RENDER_MIN_FREE_DISK_MB", default_value_t = DEFAULT_MIN_FREE_DISK_BYTES / (1024 * 1024))]
    pub min_free_disk_mb: u64,
}

impl Default for StorageSettings {
    fn default() -> StorageSettings {
        StorageSettings {
            storage_url: None,
            storage_endpoint: None,
            storage_region: None,
            storage_allow_http: false,
            s3_credentials: None,
            storage_request_timeout_ms: DEFAULT_STORAGE_REQUEST_TIMEOUT_MS,
            storage_connect_timeout_ms: DEFAULT_STORAGE_CONNECT_TIMEOUT_MS,
            storage_max_retries: DEFAULT_STORAGE_MAX_RETRIES,
            storage_retry_timeout_ms: DEFAULT_STORAGE_RETRY_TIMEOUT_MS,
            download_url_expiry_seconds: DEFAULT_DOWNLOAD_URL_EXPIRY_SECONDS,
            max_templates: DEFAULT_MAX_TEMPLATES,
            max_template_storage_mb: DEFAULT_MAX_TEMPLATE_BYTES / MIB,
            max_templates_per_tenant: 0,
            max_template_storage_mb_per_tenant: 0,
            min_free_disk_mb: DEFAULT_MIN_FREE_DISK_BYTES / MIB,
        }
    }
}

impl StorageSettings {
    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.storage_request_timeout_ms)
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.storage_connect_timeout_ms)
    }

    pub(crate) fn retry_timeout(&self) -> Duration {
        Duration::from_millis(self.storage_retry_timeout_ms)
    }

    pub(crate) fn download_url_expiry(&self) -> Duration {
        Duration::from_secs(self.download_url_expiry_seconds)
    }

    /// The disk watermark, bytes (0: none).
    pub(crate) fn min_free_disk_bytes(&self) -> u64 {
        self.min_free_disk_mb.saturating_mul(MIB)
    }
}
