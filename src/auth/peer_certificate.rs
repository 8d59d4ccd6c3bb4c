//! The caller's identity from its mTLS certificate: the SPIFFE id (a `spiffe://` URI SAN),
//! else the subject's common name. The certificate was verified against `--tls-client-ca`
//! during the handshake; here it is only read.

use super::known_identities::MAX_IDENTITY_BYTES;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PeerCertificateError {
    #[error("the client certificate cannot be read: {0}")]
    Unreadable(String),
    #[error("the client certificate names no one (no spiffe:// URI, no subject CN)")]
    NoIdentity,
}

/// The identity of the connection's client certificate; none when the connection is not
/// TLS or its client sent no certificate.
pub(crate) fn peer_identity(
    extensions: &http::Extensions,
) -> Option<Result<String, PeerCertificateError>> {
    let certificates = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()?
        .peer_certs()?;
    // The end-entity certificate comes first (RFC 8446 4.4.2).
    let leaf = certificates.first()?;
    Some(certificate_identity(leaf.as_ref()))
}

/// The SPIFFE id of a DER certificate, else its subject CN.
pub(crate) fn certificate_identity(der: &[u8]) -> Result<String, PeerCertificateError> {
    let (_, certificate) = X509Certificate::from_der(der)
        .map_err(|error| PeerCertificateError::Unreadable(error.to_string()))?;
    let alternative_names = certificate
        .subject_alternative_name()
        .map_err(|error| PeerCertificateError::Unreadable(error.to_string()))?;
    // A SPIFFE SVID has exactly one URI SAN; the first spiffe:// one is taken.
    let spiffe_id = alternative_names.and_then(|extension| {
        extension
            .value
            .general_names
            .iter()
            .find_map(|name| match name {
                GeneralName::URI(uri) if uri.starts_with("spiffe://") => Some(uri.to_string()),
                _ => None,
            })
    });
    let identity = match spiffe_id {
        Some(id) => id,
        None => certificate
            .subject()
            .iter_common_name()
            .next()
            .and_then(|name| name.as_str().ok())
            .filter(|name| !looks_like_spiffe_id(name))
            .map(str::to_owned)
            .ok_or(PeerCertificateError::NoIdentity)?,
    };
    if identity.is_empty() || identity.len() > MAX_IDENTITY_BYTES {
        return Err(PeerCertificateError::NoIdentity);
    }
    Ok(identity)
}

/// Whether a common name poses as a SPIFFE id. A SPIFFE id is the certificate's URI SAN,
/// which only a SPIFFE issuer writes; a CN is whatever the CA let its requester write, and a
/// CA that issues CNs to many services (one cert-manager issuer for a cluster) must not let
/// one of them be named by another tenant's `spiffe://` line of the identities file.
pub(crate) fn looks_like_spiffe_id(name: &str) -> bool {
    name.trim_start()
        .get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("spiffe://"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn certificate(common_name: Option<&str>, alternative_names: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        // rcgen names a certificate "rcgen self signed cert" unless told otherwise.
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(name) = common_name {
            params.distinguished_name.push(DnType::CommonName, name);
        }
        params.subject_alt_names = alternative_names;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_certificate_names_its_spiffe_id_else_its_common_name() {
        let uri = |text: &str| SanType::URI(text.try_into().unwrap());
        let dns = |text: &str| SanType::DnsName(text.try_into().unwrap());
        for (case, der, expected) in [
            (
                "SPIFFE id and CN",
                certificate(Some("billing"), vec![uri("spiffe://acme.test/billing")]),
                Ok("spiffe://acme.test/billing"),
            ),
            (
                "a non-SPIFFE URI is passed over",
                certificate(
                    Some("billing"),
                    vec![uri("https://acme.test/"), uri("spiffe://acme.test/b")],
                ),
                Ok("spiffe://acme.test/b"),
            ),
            (
                "CN only",
                certificate(Some("Globex Reports"), vec![dns("reports.globex.test")]),
                Ok("Globex Reports"),
            ),
            (
                "neither",
                certificate(None, vec![dns("reports.globex.test")]),
                Err(PeerCertificateError::NoIdentity),
            ),
            (
                "a CN posing as a SPIFFE id names no one",
                certificate(
                    Some("spiffe://acme.test/billing"),
                    vec![dns("reports.globex.test")],
                ),
                Err(PeerCertificateError::NoIdentity),
            ),
            (
                "in any case",
                certificate(Some(" SPIFFE://acme.test/billing"), Vec::new()),
                Err(PeerCertificateError::NoIdentity),
            ),
        ] {
            assert_eq!(
                certificate_identity(&der),
                expected.map(str::to_owned),
                "{case}"
            );
        }
        assert!(matches!(
            certificate_identity(b"not a certificate"),
            Err(PeerCertificateError::Unreadable(_))
        ));
    }
}
