//! The caller's identity as a mesh sidecar vouches for it, read only under
//! `--trust-sidecar-identity envoy|linkerd`, and then only from the header of that mesh
//! (anyone who reaches the port directly can write these headers; a sidecar in front of
//! every call sets or strips its own header, and leaves the other mesh's header as the
//! caller wrote it: Linkerd passes a forged `x-forwarded-client-cert` through, Istio a
//! forged `l5d-client-id`):
//! - `x-forwarded-client-cert` (XFCC) as Envoy and Istio write it: elements separated by
//!   `,`, `key=value` pairs within an element by `;`, values with `,`, `;` or `=` in double
//!   quotes (a `"` inside escaped as `\"`); keys case-insensitive (`By`, `Hash`, `Cert`,
//!   `Chain`, `Subject`, `URI`, `DNS`).
//! - `l5d-client-id`: the Linkerd identity name of the meshed client.

use super::known_identities::MAX_IDENTITY_BYTES;
use super::peer_certificate::looks_like_spiffe_id;

pub(crate) const XFCC_HEADER: &str = "x-forwarded-client-cert";
pub(crate) const LINKERD_CLIENT_ID_HEADER: &str = "l5d-client-id";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SidecarHeaderError {
    #[error("the {0} header is not readable text")]
    NotText(&'static str),
    #[error("the x-forwarded-client-cert header has an unterminated quoted value")]
    UnterminatedQuote,
    #[error("the x-forwarded-client-cert header names no client (no URI, no subject CN)")]
    NoIdentity,
    #[error(
        "the l5d-client-id header is empty, longer than {MAX_IDENTITY_BYTES} bytes or repeated"
    )]
    LinkerdIdentity,
}

/// The mesh whose sidecar is in front of the server (`--trust-sidecar-identity`): only its
/// identity header is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrustedSidecar {
    /// Envoy or Istio: `x-forwarded-client-cert`.
    Envoy,
    /// Linkerd: `l5d-client-id`.
    Linkerd,
}

/// The identity the trusted sidecar put on the request, from its own header only; none when
/// that header is not there.
pub(crate) fn sidecar_identity(
    headers: &http::HeaderMap,
    sidecar: TrustedSidecar,
) -> Option<Result<String, SidecarHeaderError>> {
    match sidecar {
        TrustedSidecar::Envoy => xfcc_header_identity(headers),
        TrustedSidecar::Linkerd => linkerd_identity(headers),
    }
}

fn xfcc_header_identity(headers: &http::HeaderMap) -> Option<Result<String, SidecarHeaderError>> {
    // Several header lines are one comma-separated list (RFC 9110); the last line holds the
    // last element.
    let value = headers.get_all(XFCC_HEADER).iter().next_back()?;
    Some(
        value
            .to_str()
            .map_err(|_| SidecarHeaderError::NotText(XFCC_HEADER))
            .and_then(xfcc_identity),
    )
}

fn linkerd_identity(headers: &http::HeaderMap) -> Option<Result<String, SidecarHeaderError>> {
    let mut values = headers.get_all(LINKERD_CLIENT_ID_HEADER).iter();
    let value = values.next()?;
    // Linkerd sets exactly one; a second line is not its doing.
    if values.next().is_some() {
        return Some(Err(SidecarHeaderError::LinkerdIdentity));
    }
    Some(
        value
            .to_str()
            .map_err(|_| SidecarHeaderError::NotText(LINKERD_CLIENT_ID_HEADER))
            .and_then(|name| {
                let name = name.trim();
                if name.is_empty() || name.len() > MAX_IDENTITY_BYTES {
                    Err(SidecarHeaderError::LinkerdIdentity)
                } else {
                    Ok(name.to_owned())
                }
            }),
    )
}

/// The client of an XFCC header value: the `URI` (SPIFFE id) of its last element, else
/// the CN of that element's `Subject`.
///
/// Why the last element: each proxy on the way appends the certificate of its direct peer
/// at the end (Envoy's APPEND_FORWARD; Istio's default SANITIZE_SET leaves only its own
/// element). The last one is what our own sidecar saw and verified; earlier elements were
/// written by hops (or a caller) we have no reason to believe.
pub(crate) fn xfcc_identity(value: &str) -> Result<String, SidecarHeaderError> {
    let elements = split_outside_quotes(value, ',')?;
    let last = elements
        .iter()
        .rev()
        .find(|element| !element.trim().is_empty())
        .ok_or(SidecarHeaderError::NoIdentity)?;
    let mut uri = None;
    let mut subject = None;
    for pair in split_outside_quotes(last, ';')? {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.eq_ignore_ascii_case("uri") {
            uri = Some(unquote(value.trim()));
        } else if key.eq_ignore_ascii_case("subject") {
            subject = Some(unquote(value.trim()));
        }
    }
    let identity = uri
        .filter(|uri| !uri.is_empty())
        .or_else(|| subject.as_deref().and_then(common_name))
        .ok_or(SidecarHeaderError::NoIdentity)?;
    if identity.len() > MAX_IDENTITY_BYTES {
        return Err(SidecarHeaderError::NoIdentity);
    }
    Ok(identity)
}

/// Splits on `separator` where it is not inside a double-quoted part (in which `\"` is a
/// quote, not the end).
fn split_outside_quotes(text: &str, separator: char) -> Result<Vec<&str>, SidecarHeaderError> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (index, character) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && character == '\\' {
            escaped = true;
        } else if character == '"' {
            quoted = !quoted;
        } else if character == separator && !quoted {
            parts.push(&text[start..index]);
            start = index + separator.len_utf8();
        }
    }
    if quoted {
        return Err(SidecarHeaderError::UnterminatedQuote);
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// A value without its surrounding double quotes and with `\"` as `"`. Other backslashes
/// stay: they belong to the value (a subject's `\,` is the DN's own escape).
fn unquote(value: &str) -> String {
    match value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(inner) => inner.replace("\\\"", "\""),
        None => value.to_owned(),
    }
}

/// The CN of a distinguished name as Envoy writes it: RFC 2253 (`CN=client,OU=web,O=acme`,
/// `\,` inside a value) or OpenSSL's one-line form (`/C=US/O=acme/CN=client`).
fn common_name(subject: &str) -> Option<String> {
    let attributes: Vec<String> = if let Some(slashed) = subject.strip_prefix('/') {
        slashed.split('/').map(str::to_owned).collect()
    } else {
        let mut attributes = Vec::new();
        let mut current = String::new();
        let mut characters = subject.chars();
        while let Some(character) = characters.next() {
            match character {
                '\\' => current.extend(characters.next()),
                ',' | '+' => attributes.push(std::mem::take(&mut current)),
                other => current.push(other),
            }
        }
        attributes.push(current);
        attributes
    };
    attributes.iter().find_map(|attribute| {
        let (key, value) = attribute.split_once('=')?;
        let value = value.trim();
        // A CN posing as a SPIFFE id is no one (see `looks_like_spiffe_id`).
        (key.trim().eq_ignore_ascii_case("cn") && !value.is_empty() && !looks_like_spiffe_id(value))
            .then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape Istio writes (istio.io's example of the sleep client calling httpbin; its
    /// sidecar sanitizes and sets one element; the hash here is made up).
    const ISTIO: &str = "By=spiffe://cluster.local/ns/default/sa/httpbin;\
        Hash=6bfe59e2a08e81c4e2b6e1b0b5b3c8e4e3fbe8b6e1e6f2c0b3a7f0e5d1c2b3a4;\
        Subject=\"\";URI=spiffe://cluster.local/ns/default/sa/sleep";

    #[test]
    fn the_client_of_an_xfcc_header_is_the_uri_of_its_last_element_else_its_subject_cn() {
        for (value, identity) in [
            (ISTIO, Ok("spiffe://cluster.local/ns/default/sa/sleep")),
            // Two hops (APPEND_FORWARD): the element our sidecar appended is the last.
            (
                "By=spiffe://cluster.local/ns/edge/sa/gateway;URI=spiffe://evil/ns/x/sa/forged,\
                 By=spiffe://cluster.local/ns/render/sa/lottie;Hash=abc;\
                 Subject=\"CN=gateway,OU=edge,O=acme\";URI=spiffe://cluster.local/ns/edge/sa/gateway",
                Ok("spiffe://cluster.local/ns/edge/sa/gateway"),
            ),
            // Envoy's documented shape without a URI: the subject's CN, quoted commas kept
            // inside the subject.
            (
                "By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d64;\
                 Subject=\"CN=Test Client,OU=Lyft,L=San Francisco,ST=CA,C=US\"",
                Ok("Test Client"),
            ),
            (
                "Hash=1;Subject=\"/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client\";URI=",
                Ok("Test Client"),
            ),
            (
                "Subject=\"CN=acme\\, inc. \\\"ops\\\",O=acme\"",
                Ok("acme, inc. \"ops\""),
            ),
            // Keys are case-insensitive; a quoted URI is unquoted.
            ("by=x;uri=\"spiffe://a/b\"", Ok("spiffe://a/b")),
            ("By=x;Hash=1;Subject=\"\";URI=", Err(SidecarHeaderError::NoIdentity)),
            // A subject CN posing as a SPIFFE id (the URI is the SPIFFE id) names no one.
            (
                "By=x;Subject=\"CN=spiffe://cluster.local/ns/acme/sa/billing\";URI=",
                Err(SidecarHeaderError::NoIdentity),
            ),
            ("", Err(SidecarHeaderError::NoIdentity)),
            (
                "URI=spiffe://a/b;Subject=\"CN=x",
                Err(SidecarHeaderError::UnterminatedQuote),
            ),
        ] {
            assert_eq!(
                xfcc_identity(value),
                identity.map(str::to_owned),
                "{value:?}"
            );
        }
    }

    #[test]
    fn each_sidecar_is_believed_only_in_its_own_header() {
        let linkerd_name = "web.acme.serviceaccount.identity.linkerd.cluster.local";
        let mut headers = http::HeaderMap::new();
        for sidecar in [TrustedSidecar::Envoy, TrustedSidecar::Linkerd] {
            assert_eq!(sidecar_identity(&headers, sidecar), None, "{sidecar:?}");
        }
        headers.insert(LINKERD_CLIENT_ID_HEADER, linkerd_name.parse().unwrap());
        // Behind Istio, an l5d-client-id is whatever the caller wrote.
        assert_eq!(sidecar_identity(&headers, TrustedSidecar::Envoy), None);
        assert_eq!(
            sidecar_identity(&headers, TrustedSidecar::Linkerd),
            Some(Ok(linkerd_name.to_owned()))
        );
        headers.insert(XFCC_HEADER, ISTIO.parse().unwrap());
        assert_eq!(
            sidecar_identity(&headers, TrustedSidecar::Envoy),
            Some(Ok("spiffe://cluster.local/ns/default/sa/sleep".to_owned()))
        );
        // Behind Linkerd, an x-forwarded-client-cert is whatever the caller wrote.
        assert_eq!(
            sidecar_identity(&headers, TrustedSidecar::Linkerd),
            Some(Ok(linkerd_name.to_owned()))
        );
    }

    #[test]
    fn an_empty_or_repeated_linkerd_header_names_no_one() {
        let mut empty = http::HeaderMap::new();
        empty.insert(LINKERD_CLIENT_ID_HEADER, " ".parse().unwrap());
        let mut repeated = http::HeaderMap::new();
        repeated.append(LINKERD_CLIENT_ID_HEADER, "a.linkerd".parse().unwrap());
        repeated.append(LINKERD_CLIENT_ID_HEADER, "b.linkerd".parse().unwrap());
        for headers in [empty, repeated] {
            assert_eq!(
                sidecar_identity(&headers, TrustedSidecar::Linkerd),
                Some(Err(SidecarHeaderError::LinkerdIdentity)),
                "{headers:?}"
            );
        }
    }
}
