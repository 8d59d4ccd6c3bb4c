//! Certificates made for the TLS tests (rcgen): a CA, server certificates for `localhost`
//! with a chosen serial, client certificates with a SPIFFE id or only a CN, all written as
//! PEM files; and TLS clients (tonic's `ClientTlsConfig`, or tokio-rustls directly to look
//! at the certificate the server presents).

use lottie_render::tls::TlsSettings;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A certificate authority that signs server and client certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its private key, as PEM.
pub struct TestCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1 with this serial number.
    pub fn server(&self, serial: u64) -> TestCertificate {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "lottie-render test server");
        params.serial_number = Some(serial.into());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate with this subject CN and, when given, this SPIFFE id (URI SAN).
    pub fn client(&self, common_name: &str, spiffe_id: Option<&str>) -> TestCertificate {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if let Some(id) = spiffe_id {
            params.subject_alt_names = vec![SanType::URI(id.try_into().unwrap())];
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> TestCertificate {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        TestCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

impl TestCertificate {
    /// Writes `dir/NAME.crt` and `dir/NAME.key`, each replaced whole (written aside, then
    /// renamed over), as a certificate manager does.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        for (path, text) in [(&key, &self.key_pem), (&cert, &self.cert_pem)] {
            let aside = path.with_extension("new");
            std::fs::write(&aside, text).unwrap();
            std::fs::rename(&aside, path).unwrap();
        }
        (cert, key)
    }

    pub fn identity(&self) -> Identity {
        Identity::from_pem(&self.cert_pem, &self.key_pem)
    }
}

/// The server's TLS settings: its certificate (serial 1) from `ca`, and mTLS with
/// `client_ca` when given. Answers the settings and the certificate's paths.
pub fn server_tls(dir: &Path, ca: &TestCa, client_ca: Option<&TestCa>) -> TlsSettings {
    let (cert, key) = ca.server(1).write(dir, "server");
    TlsSettings {
        tls_cert: Some(cert),
        tls_key: Some(key),
        tls_client_ca: client_ca.map(|client_ca| client_ca.write(dir, "client-ca.pem")),
    }
}

/// A tonic channel over TLS to `address`, trusting `ca`, presenting `identity` if given.
pub async fn tls_channel(
    address: SocketAddr,
    ca: &TestCa,
    identity: Option<&TestCertificate>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    if let Some(identity) = identity {
        tls = tls.identity(identity.identity());
    }
    Channel::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
}

/// A TLS client (tokio-rustls directly) trusting `ca`, presenting no certificate.
pub fn rustls_connector(ca: &TestCa) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The serial number of the certificate the server at `address` presents now (a fresh
/// connection and handshake, tokio-rustls directly).
pub async fn served_serial(address: SocketAddr, ca: &TestCa) -> String {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let tls = rustls_connector(ca)
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, parsed) =
        <x509_parser::certificate::X509Certificate as x509_parser::prelude::FromDer<_>>::from_der(
            leaf.as_ref(),
        )
        .unwrap();
    parsed.tbs_certificate.serial.to_string()
}
