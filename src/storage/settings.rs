//! Where templates, fonts and outputs are kept (`--storage-url`) and the bounds of every call
//! to that store: a request timeout, a connect timeout and a retry budget, so that a store
//! that stops answering costs a caller a bounded wait and then UNAVAILABLE with a retry
//! delay, never a hung call. Flattened into `serve`'s flags.

use std::time::Duration;

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
}
