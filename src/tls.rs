//! TLS on the gRPC listener: `--tls-cert`/`--tls-key` turn it on, `--tls-client-ca` makes
//! it mTLS (a client without a certificate signed by that CA is refused at the handshake).
//! We terminate TLS in our own accept loop ([`incoming`]) instead of tonic's
//! `ServerTlsConfig`, which cannot change its certificate once serving: here each handshake
//! takes the current [`ServerConfig`] from a [`ReloadableTls`], which the file watcher
//! ([`watch`]) replaces when the certificate, key or client CA files change.

pub mod files;
pub mod incoming;
pub(crate) mod watch;

pub(crate) use files::TlsFilesError;
pub use incoming::TlsIncoming;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use tokio_rustls::rustls::ServerConfig;

/// The TLS flags of `serve`. Plaintext (the embedded default) when no certificate is given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsSettings {
    /// The server's certificate chain (PEM, leaf first); with `--tls-key`, turns TLS on.
    #[arg(long, env = "LOTTIE_RENDER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "LOTTIE_RENDER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM bundle) that sign client certificates: turns on mTLS, a client
    /// without a certificate signed by one of them is refused at the handshake.
    #[arg(long, env = "LOTTIE_RENDER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

/// The files TLS is built from, when TLS is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsSettings {
    /// The files of a TLS listener; none for plaintext.
    pub fn files(&self) -> Option<TlsFiles> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            _ => None,
        }
    }
}

/// The TLS configuration handshakes use, replaced as a whole when its files change: the
/// certificate, its key and the client CA are read and checked together, so a handshake
/// never sees a new certificate with an old key. Connections already open keep the
/// configuration they were made with.
///
/// Swapping the whole `ServerConfig` (rather than a certificate resolver and a client
/// verifier each behind a lock) keeps rustls' own verifier intact, hints to clients included
/// (the CA names a client with several certificates picks from), with no hand-written
/// delegation of certificate verification.
#[derive(Debug)]
pub struct ReloadableTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadableTls {
    /// Reads the files once; an error here stops the server from starting.
    pub fn load(files: TlsFiles) -> Result<ReloadableTls, TlsFilesError> {
        let config = files::server_config(&files)?;
        Ok(ReloadableTls {
            files,
            current: RwLock::new(Arc::new(config)),
        })
    }

    pub(crate) fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The configuration for the next handshake.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        // A poisoned lock only means a panic elsewhere while it was held; the Arc inside is
        // whole either way.
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Re-reads the files; on error the current configuration stays.
    pub(crate) fn reload(&self) -> Result<(), TlsFilesError> {
        let config = files::server_config(&self.files)?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(config);
        Ok(())
    }
}

/// The watch that re-reads the certificate, key and client CA together when any changes.
pub(crate) fn watch(tls: &Arc<ReloadableTls>) -> watch::WatchedFiles {
    let files = tls.files();
    let mut paths = vec![files.cert.clone(), files.key.clone()];
    paths.extend(files.client_ca.clone());
    let tls = tls.clone();
    watch::WatchedFiles {
        name: "tls",
        paths,
        reload: Box::new(move || {
            tls.reload().map_err(|error| error.to_string())?;
            Ok("certificate, key and client CA in force for new connections".into())
        }),
    }
}
