//! Reads the TLS files (certificate chain, private key, client CA bundle; PEM) and builds
//! the rustls server configuration from them: ring as the crypto provider, TLS 1.2 and 1.3,
//! ALPN `h2` (gRPC clients such as grpc-go refuse a server that does not say it), and a
//! client verifier when a client CA is given.

use super::TlsFiles;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// Largest TLS file read: a chain or a CA bundle is a few KiB (the Mozilla bundle is about
/// 220 KiB); anything far beyond is the wrong file.
pub const MAX_TLS_FILE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsFilesError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is larger than {MAX_TLS_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{} holds no PEM certificate ({reason})", path.display())]
    Certificates { path: PathBuf, reason: String },
    #[error("{} holds no PEM private key ({reason})", path.display())]
    Key { path: PathBuf, reason: String },
    #[error("the certificate {} and the key {} do not belong together: {reason}", cert.display(), key.display())]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("{}: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

/// The server configuration of these files, every file read and checked now.
pub(crate) fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsFilesError> {
    let provider = Arc::new(ring::default_provider());
    let chain = read_certificates(&files.cert)?;
    let key = read_key(&files.key)?;
    let certified = certified_key(files, chain, key, &provider)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsFilesError::Config(error.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for certificate in read_certificates(path)? {
                roots
                    .add(certificate)
                    .map_err(|error| TlsFilesError::ClientCa {
                        path: path.clone(),
                        reason: error.to_string(),
                    })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| TlsFilesError::ClientCa {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    // h2 first (gRPC needs it); http/1.1 for the HTTP/JSON door's HTTP/1.1 clients, whom
    // rustls would otherwise refuse in the handshake (no protocol in common).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The chain with its key, refused when the key is not the leaf certificate's.
fn certified_key(
    files: &TlsFiles,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsFilesError> {
    CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsFilesError::KeyMismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: error.to_string(),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, TlsFilesError> {
    let size = std::fs::metadata(path)
        .map_err(|source| TlsFilesError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    if size > MAX_TLS_FILE_BYTES {
        return Err(TlsFilesError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    std::fs::read(path).map_err(|source| TlsFilesError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate of a PEM file, at least one.
pub(crate) fn read_certificates(
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFilesError> {
    let text = read(path)?;
    let failed = |reason: String| TlsFilesError::Certificates {
        path: path.to_path_buf(),
        reason,
    };
    let certificates = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| failed(error.to_string()))?;
    if certificates.is_empty() {
        return Err(failed("no CERTIFICATE block".into()));
    }
    Ok(certificates)
}

/// The first private key of a PEM file.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFilesError> {
    let text = read(path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|error| TlsFilesError::Key {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        (certified.cert.pem(), certified.signing_key.serialize_pem())
    }

    #[test]
    fn good_files_build_a_configuration_and_each_kind_of_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (cert, key) = pair();
        let (other_cert, other_key) = pair();
        let files = TlsFiles {
            cert: write("cert.pem", &cert),
            key: write("key.pem", &key),
            client_ca: Some(write("ca.pem", &other_cert)),
        };
        let config = server_config(&files).unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );

        let with = |change: &dyn Fn(&mut TlsFiles)| {
            let mut files = files.clone();
            change(&mut files);
            server_config(&files).unwrap_err()
        };
        let read: fn(&TlsFilesError) -> bool = |e| matches!(e, TlsFilesError::Read { .. });
        let certificates: fn(&TlsFilesError) -> bool =
            |e| matches!(e, TlsFilesError::Certificates { .. });
        let key: fn(&TlsFilesError) -> bool = |e| matches!(e, TlsFilesError::Key { .. });
        let mismatch: fn(&TlsFilesError) -> bool =
            |e| matches!(e, TlsFilesError::KeyMismatch { .. });
        for (case, error, expected) in [
            (
                "missing certificate",
                with(&|files| files.cert = dir.path().join("absent.pem")),
                read,
            ),
            (
                "no certificate in the file",
                with(&|files| files.cert = write("empty.pem", "hello")),
                certificates,
            ),
            (
                "a key where the certificate goes",
                with(&|files| files.cert = write("key-as-cert.pem", &other_key)),
                certificates,
            ),
            (
                "no key in the file",
                with(&|files| files.key = write("cert-as-key.pem", &cert)),
                key,
            ),
            (
                "the key of another certificate",
                with(&|files| files.key = write("other-key.pem", &other_key)),
                mismatch,
            ),
            (
                "a client CA file without certificates",
                with(&|files| files.client_ca = Some(write("empty-ca.pem", ""))),
                certificates,
            ),
        ] {
            assert!(expected(&error), "{case}: {error}");
        }
    }
}
