//! Where a webhook may be sent: no server-side request forgery. A destination is an `https`
//! URL (`http` only with `--webhook-allow-http`, for tests and closed networks) whose host is
//! not an address of this machine or its private networks: loopback, private (RFC 1918),
//! carrier-grade NAT, link-local (the cloud metadata service, 169.254.169.254, among them),
//! unique-local, multicast, unspecified, broadcast and reserved addresses are refused, as
//! literal hosts at submit and again on every address a name resolves to at connect time
//! (a name that resolves elsewhere later: DNS rebinding), unless a network of
//! `--webhook-allow-networks` holds the address.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest webhook URL, bytes: far above any real endpoint (a host and a path with a
/// token), far below what would weigh on the job records it is stored in.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;

/// What destinations are allowed.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `http://` accepted too (`--webhook-allow-http`).
    pub allow_http: bool,
    /// Networks whose addresses are accepted whatever their class
    /// (`--webhook-allow-networks`).
    pub allowed_networks: Vec<IpNet>,
}

/// A webhook URL that passed the checks that need no resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub uri: http::Uri,
    pub host: String,
    pub port: u16,
    pub https: bool,
}

/// Why a destination is refused (the description of a field violation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Policy {
    /// The networks of `--webhook-allow-networks` (`CIDR,CIDR,…`).
    pub fn parse_networks(list: &str) -> Result<Vec<IpNet>, String> {
        list.split(',')
            .map(str::trim)
            .filter(|cidr| !cidr.is_empty())
            .map(|cidr| {
                cidr.parse::<IpNet>()
                    .map_err(|error| format!("{cidr:?} is not a network (CIDR): {error}"))
            })
            .collect()
    }

    /// `url` as a destination, or why not.
    pub fn destination(&self, url: &str) -> Result<Destination, Refused> {
        if url.len() > MAX_WEBHOOK_URL_BYTES {
            return Err(Refused(format!(
                "at most {MAX_WEBHOOK_URL_BYTES} bytes, got {}",
                url.len()
            )));
        }
        let uri: http::Uri = url
            .parse()
            .map_err(|error| Refused(format!("not a URL: {error}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if self.allow_http => false,
            Some("http") => return Err(Refused("must be https".into())),
            _ => return Err(Refused("must be an https URL".into())),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| Refused("has no host".into()))?;
        if authority.as_str().contains('@') {
            return Err(Refused("must not carry credentials before the host".into()));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(Refused("has no host".into()));
        }
        if let Ok(address) = host.parse::<IpAddr>() {
            self.check_address(address)?;
        } else if is_local_name(host) {
            return Err(Refused(format!("{host} names this machine or its network")));
        }
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Destination {
            host: host.to_owned(),
            port,
            https,
            uri,
        })
    }

    /// An address a destination's host is (or resolves to), or why it may not be called.
    pub fn check_address(&self, address: IpAddr) -> Result<(), Refused> {
        let address = canonical(address);
        if self
            .allowed_networks
            .iter()
            .any(|network| network.contains(&address))
        {
            return Ok(());
        }
        match refused_class(address) {
            Some(class) => Err(Refused(format!(
                "{address} is a {class} address (allow its network with \
                 --webhook-allow-networks)"
            ))),
            None => Ok(()),
        }
    }
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is the IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Names that always mean this machine or its network, whatever a resolver says.
fn is_local_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost") || host.ends_with(".local")
}

/// The class of an address no webhook may reach, if it is one.
fn refused_class(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = v4.octets();
    let classes = [
        (v4.is_loopback(), "loopback"),
        (v4.is_private(), "private"),
        (v4.is_link_local(), "link-local"),
        (v4.is_unspecified() || a == 0, "unspecified"),
        (v4.is_broadcast(), "broadcast"),
        (v4.is_multicast(), "multicast"),
        (a == 100 && (64..128).contains(&b), "carrier-grade NAT"),
        (a >= 240, "reserved"),
    ];
    classes
        .into_iter()
        .find_map(|(is, class)| is.then_some(class))
}

fn refused_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let first = v6.segments()[0];
    let classes = [
        (v6.is_loopback(), "loopback"),
        (v6.is_unspecified(), "unspecified"),
        (v6.is_multicast(), "multicast"),
        (first & 0xfe00 == 0xfc00, "unique-local"),
        (first & 0xffc0 == 0xfe80, "link-local"),
        (first & 0xffc0 == 0xfec0, "site-local"),
    ];
    classes
        .into_iter()
        .find_map(|(is, class)| is.then_some(class))
        // IPv4-compatible addresses (::a.b.c.d) are their IPv4 address.
        .or_else(|| v6.to_ipv4().filter(|_| first == 0).and_then(refused_v4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_of_local_address_is_refused_and_public_ones_pass() {
        let policy = Policy::default();
        for url in [
            "https://127.0.0.1/hook",
            "https://127.8.9.10/hook",
            "https://10.0.0.1/hook",
            "https://172.16.5.4/hook",
            "https://192.168.1.1/hook",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/hook",
            "https://0.0.0.0/hook",
            "https://255.255.255.255/hook",
            "https://224.0.0.1/hook",
            "https://[::1]/hook",
            "https://[::]/hook",
            "https://[fd00::1]/hook",
            "https://[fe80::1]/hook",
            "https://[ff02::1]/hook",
            "https://[::ffff:127.0.0.1]/hook",
            "https://[::ffff:169.254.169.254]/hook",
            "https://localhost/hook",
            "https://printer.local/hook",
            "https://user:secret@example.com/hook",
            "http://example.com/hook",
            "ftp://example.com/hook",
            "example.com/hook",
            "",
        ] {
            assert!(policy.destination(url).is_err(), "{url} passed");
        }
        for url in [
            "https://example.com/hook",
            "https://93.184.216.34:8443/hook?token=a",
            "https://[2606:4700::1111]/hook",
        ] {
            let destination = policy.destination(url).unwrap();
            assert!(destination.https, "{url}");
        }
        assert_eq!(
            policy.destination("https://example.com/x").unwrap().port,
            443
        );
    }

    #[test]
    fn allowed_networks_and_http_are_opt_in() {
        let policy = Policy {
            allow_http: true,
            allowed_networks: Policy::parse_networks("127.0.0.0/8, fd00::/8").unwrap(),
        };
        assert_eq!(
            policy
                .destination("http://127.0.0.1:8080/hook")
                .unwrap()
                .port,
            8080
        );
        assert!(policy.destination("http://[fd00::5]/hook").is_ok());
        assert!(policy.destination("http://10.1.1.1/hook").is_err());
        // At connect time: the resolved address is checked the same way.
        assert!(policy.check_address("127.0.0.1".parse().unwrap()).is_ok());
        assert!(Policy::default()
            .check_address("::ffff:10.0.0.1".parse().unwrap())
            .is_err());
        assert!(Policy::parse_networks("10.0.0.0/33").is_err());
    }
}
