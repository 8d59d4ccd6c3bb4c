//! Where a webhook may be sent: no server-side request forgery. A destination is an `https`
//! URL (`http` only with `--webhook-allow-http`, for tests and closed networks) read as a
//! browser reads it (the WHATWG URL Standard, through the `url` crate: `https://2130706433/`,
//! `https://0x7f.1/`, `https://127.1/` and `https://0177.0.0.1/` are all 127.0.0.1), whose
//! host is a globally reachable address ([`super::addresses`]: IANA's special-purpose
//! registries, with NAT64, 6to4, Teredo, IPv4-mapped and SIIT addresses judged by the IPv4
//! address they embed) or a name that is not this machine's. Checked on the literal host at
//! submit, and again on every address a name resolves to at connect time (a name that
//! resolves elsewhere later: DNS rebinding), unless a network of `--webhook-allow-networks`
//! holds the address. The request goes to the URL as parsed here (its serialization), so
//! what is checked is what is connected to.

use super::addresses::{reach, Reach};
use ipnet::IpNet;
use std::net::IpAddr;

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
        let mut parsed =
            url::Url::parse(url).map_err(|error| Refused(format!("not a URL: {error}")))?;
        let https = match parsed.scheme() {
            "https" => true,
            "http" if self.allow_http => false,
            "http" => return Err(Refused("must be https".into())),
            _ => return Err(Refused("must be an https URL".into())),
        };
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Refused("must not carry credentials before the host".into()));
        }
        let host = match parsed.host() {
            Some(url::Host::Ipv4(v4)) => {
                self.check_address(IpAddr::V4(v4))?;
                v4.to_string()
            }
            Some(url::Host::Ipv6(v6)) => {
                self.check_address(IpAddr::V6(v6))?;
                v6.to_string()
            }
            Some(url::Host::Domain(name)) if is_local_name(name) => {
                return Err(Refused(format!("{name} names this machine or its network")));
            }
            Some(url::Host::Domain(name)) => name.to_owned(),
            None => return Err(Refused("has no host".into())),
        };
        // Never sent; and `http::Uri` has no place for it.
        parsed.set_fragment(None);
        let uri: http::Uri = parsed
            .as_str()
            .parse()
            .map_err(|error| Refused(format!("not a URL: {error}")))?;
        let port = parsed
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        Ok(Destination {
            host,
            port,
            https,
            uri,
        })
    }

    /// An address a destination's host is (or resolves to), or why it may not be called:
    /// an address of an allowed network passes; otherwise only a globally reachable one, an
    /// address that embeds IPv4 ones judged by each of them.
    pub fn check_address(&self, address: IpAddr) -> Result<(), Refused> {
        if self.allows(address) {
            return Ok(());
        }
        let why = match reach(address) {
            Reach::Global => return Ok(()),
            Reach::NotGlobal(class) => format!("{address} is a {class} address"),
            Reach::Embeds(form, embedded) => {
                let refused = embedded.addresses().into_iter().find_map(|v4| {
                    let v4 = IpAddr::V4(v4);
                    match reach(v4) {
                        Reach::NotGlobal(class) if !self.allows(v4) => Some((v4, class)),
                        _ => None,
                    }
                });
                match refused {
                    None => return Ok(()),
                    Some((v4, class)) => {
                        format!("{address} ({form}) reaches {v4}, a {class} address")
                    }
                }
            }
        };
        Err(Refused(format!(
            "{why} (allow its network with --webhook-allow-networks)"
        )))
    }

    fn allows(&self, address: IpAddr) -> bool {
        self.allowed_networks
            .iter()
            .any(|network| network.contains(&address))
    }
}

/// Names that always mean this machine or its network, whatever a resolver says (the
/// Special-Use Domain Names registry's `localhost`, `local` and `home.arpa`, and ICANN's
/// private-use `internal`, where cloud metadata services live).
fn is_local_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    ["localhost", "local", "home.arpa", "internal"]
        .iter()
        .any(|suffix| host == *suffix || host.ends_with(&format!(".{suffix}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_of_local_address_is_refused_and_public_ones_pass() {
        let policy = Policy::default();
        // Each URL, and what the refusal names.
        let refused = [
            ("https://127.0.0.1/hook", "loopback"),
            ("https://127.8.9.10/hook", "loopback"),
            ("https://10.0.0.1/hook", "private"),
            ("https://172.16.5.4/hook", "private"),
            ("https://192.168.1.1/hook", "private"),
            ("https://169.254.169.254/latest/meta-data/", "link-local"),
            ("https://100.64.0.1/hook", "carrier-grade NAT"),
            ("https://0.0.0.0/hook", "unspecified"),
            ("https://255.255.255.255/hook", "broadcast"),
            ("https://224.0.0.1/hook", "multicast"),
            ("https://192.0.0.1/hook", "IETF protocol assignments"),
            ("https://198.18.0.1/hook", "benchmarking"),
            ("https://198.19.255.254/hook", "benchmarking"),
            ("https://192.0.2.1/hook", "documentation"),
            ("https://240.0.0.1/hook", "reserved"),
            ("https://[::1]/hook", "loopback"),
            ("https://[::]/hook", "unspecified"),
            ("https://[fd00::1]/hook", "unique-local"),
            ("https://[fe80::1]/hook", "link-local"),
            ("https://[ff02::1]/hook", "multicast"),
            ("https://[2001:db8::1]/hook", "documentation"),
            ("https://[::ffff:127.0.0.1]/hook", "loopback"),
            ("https://[::ffff:169.254.169.254]/hook", "link-local"),
            ("https://[::ffff:0:7f00:1]/hook", "loopback"),
            ("https://[64:ff9b::7f00:1]/hook", "loopback"),
            ("https://[64:ff9b::127.0.0.1]/hook", "loopback"),
            ("https://[64:ff9b::a9fe:a9fe]/hook", "link-local"),
            ("https://[64:ff9b:1::a9fe:a9fe]/hook", "local-use NAT64"),
            ("https://[2002:7f00:1::1]/hook", "loopback"),
            ("https://[2002:a9fe:a9fe::1]/hook", "link-local"),
            ("https://[2001:0:808:808::80ff:fffe]/hook", "loopback"),
            ("https://[2001:0:7f00:1::]/hook", "loopback"),
            // Hosts a browser reads as IPv4 (WHATWG): one number, hex, short and octal forms.
            ("https://2130706433/hook", "127.0.0.1 is a loopback"),
            ("https://0x7f.1/hook", "127.0.0.1 is a loopback"),
            ("https://0x7F000001/hook", "127.0.0.1 is a loopback"),
            ("https://127.1/hook", "127.0.0.1 is a loopback"),
            ("https://0177.0.0.1/hook", "127.0.0.1 is a loopback"),
            ("https://127.0.0.1./hook", "127.0.0.1 is a loopback"),
            ("https://127.0.0.%31/hook", "127.0.0.1 is a loopback"),
            ("https://3232235777/hook", "192.168.1.1 is a private"),
            (
                "https://0xa9.0xfe.0xa9.0xfe/latest/meta-data",
                "169.254.169.254",
            ),
            ("https:\\\\127.0.0.1\\hook", "127.0.0.1 is a loopback"),
            ("https://localhost/hook", "this machine"),
            ("https://LOCALHOST./hook", "this machine"),
            ("https://printer.local/hook", "this machine"),
            ("https://metadata.google.internal/hook", "this machine"),
            ("https://router.home.arpa/hook", "this machine"),
            ("https://user:secret@example.com/hook", "credentials"),
            ("https://example.com@127.0.0.1/hook", "credentials"),
            ("http://example.com/hook", "must be https"),
            ("ftp://example.com/hook", "https"),
            ("example.com/hook", "not a URL"),
            ("https://1.2.3.4.5/hook", "not a URL"),
            ("https://4294967296/hook", "not a URL"),
            ("", "not a URL"),
        ];
        for (url, why) in refused {
            match policy.destination(url) {
                Ok(destination) => panic!("{url} passed: {destination:?}"),
                Err(Refused(message)) => assert!(message.contains(why), "{url}: {message}"),
            }
        }
        for (url, host) in [
            ("https://example.com/hook", "example.com"),
            ("https://93.184.216.34:8443/hook?token=a", "93.184.216.34"),
            ("https://1572395042/hook", "93.184.216.34"),
            ("https://[2606:4700::1111]/hook", "2606:4700::1111"),
            ("https://[64:ff9b::5db8:d822]/hook", "64:ff9b::5db8:d822"),
            ("https://[2002:5db8:d822::1]/hook", "2002:5db8:d822::1"),
            ("https://EXAMPLE.com./hook#part", "example.com."),
        ] {
            let destination = policy.destination(url).unwrap();
            assert!(destination.https, "{url}");
            assert_eq!(destination.host, host, "{url}");
        }
        // What is sent to is what was checked: the URL as the parser reads it.
        let read = policy.destination("https://1572395042:8443/a#b").unwrap();
        assert_eq!(read.uri.to_string(), "https://93.184.216.34:8443/a");
        assert_eq!(read.port, 8443);
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
        let read = policy.destination("http://0x7f.1:8080/hook").unwrap();
        assert_eq!(read.uri.to_string(), "http://127.0.0.1:8080/hook");
        assert!(policy.destination("http://[fd00::5]/hook").is_ok());
        assert!(policy.destination("http://10.1.1.1/hook").is_err());
        // At connect time: the resolved address is checked the same way; an allowed network
        // lets an address through whatever form it is reached by.
        assert!(policy.check_address("127.0.0.1".parse().unwrap()).is_ok());
        assert!(policy
            .check_address("::ffff:127.0.0.1".parse().unwrap())
            .is_ok());
        assert!(policy
            .check_address("64:ff9b::7f00:1".parse().unwrap())
            .is_ok());
        assert!(policy
            .check_address("64:ff9b::a00:1".parse().unwrap())
            .is_err());
        assert!(Policy::default()
            .check_address("::ffff:10.0.0.1".parse().unwrap())
            .is_err());
        assert!(Policy::parse_networks("10.0.0.0/33").is_err());
    }
}
