//! The identity configuration files (`--api-keys`, `--identities`): read at start-up (a bad
//! file stops the server from starting) and re-read by the configuration watcher when they
//! change (a bad file then keeps the previous configuration, with a warning).

use super::api_keys::ApiKeys;
use super::known_identities::KnownIdentities;
use std::path::{Path, PathBuf};

/// Largest identity configuration file: a line is about 100 bytes, so 8 MiB holds some
/// 80,000 keys or identities, far more than a service hands out (and every call's key is
/// compared with each stored one); beyond it is the wrong file.
pub const MAX_IDENTITY_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Why an identity configuration file was refused (the message carries the line).
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub(crate) struct IdentityFileError {
    pub path: PathBuf,
    pub reason: String,
}

fn read(path: &Path) -> Result<String, IdentityFileError> {
    let failed = |reason: String| IdentityFileError {
        path: path.to_path_buf(),
        reason,
    };
    let size = std::fs::metadata(path)
        .map_err(|error| failed(error.to_string()))?
        .len();
    if size > MAX_IDENTITY_FILE_BYTES {
        return Err(failed(format!(
            "larger than {MAX_IDENTITY_FILE_BYTES} bytes"
        )));
    }
    std::fs::read_to_string(path).map_err(|error| failed(error.to_string()))
}

/// Reads and parses an API keys file.
pub(crate) fn read_api_keys(path: &Path) -> Result<ApiKeys, IdentityFileError> {
    ApiKeys::parse(&read(path)?).map_err(|error| IdentityFileError {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}

/// Reads and parses an identities file.
pub(crate) fn read_known_identities(path: &Path) -> Result<KnownIdentities, IdentityFileError> {
    KnownIdentities::parse(&read(path)?).map_err(|error| IdentityFileError {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}
