//! Which addresses a webhook may reach: only globally reachable ones. The tables below are
//! IANA's special-purpose address registries (IPv4 and IPv6, RFC 6890 and the RFCs that
//! added to them), each block with what the registry says of it: not globally reachable
//! (refused), globally reachable (a block inside a refused one the registry lets through), or
//! an IPv6 block that stands for IPv4 addresses (NAT64's well-known prefix, 6to4, Teredo,
//! IPv4-mapped and SIIT's IPv4-translated addresses), judged by the IPv4 address it embeds:
//! `64:ff9b::7f00:1` reaches 127.0.0.1 through a NAT64 gateway, so it is loopback.
//!
//! The longest block holding an address decides. Beyond the registries: IPv4 multicast is
//! refused (a webhook is unicast); an IPv6 address outside 2000::/3, the only space IANA
//! allocates for global unicast, is refused whatever it is.
//!
//! The alternative, listing the classes `std` can test (`is_private`, `is_loopback`…), is
//! what let NAT64, 6to4, 192.0.0.0/24 and 198.18.0.0/15 through (issue 42, finding 6): a list
//! of what is refused misses what nobody thought of; a list of the registries' blocks with
//! the rule "global unicast only" does not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an address is to a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Globally reachable.
    Global,
    /// Not globally reachable: the name of its block.
    NotGlobal(&'static str),
    /// An IPv6 address standing for IPv4 ones (the name of its block): judged by them.
    Embeds(&'static str, Embedded),
}

/// The IPv4 addresses an IPv6 address stands for: one, or a Teredo address's two (its
/// server's and its client's, both reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedded {
    One(Ipv4Addr),
    Two(Ipv4Addr, Ipv4Addr),
}

impl Embedded {
    pub fn addresses(self) -> Vec<Ipv4Addr> {
        match self {
            Embedded::One(v4) => vec![v4],
            Embedded::Two(first, second) => vec![first, second],
        }
    }
}

/// What a registry says of a block.
#[derive(Debug, Clone, Copy)]
enum Rule {
    Global,
    NotGlobal,
    /// Stands for the IPv4 address(es) this function finds in it.
    Embeds(fn(u128) -> Embedded),
}

use Rule::{Embeds, Global, NotGlobal};

/// A block of the IPv4 registry: its first address, prefix length, name and rule.
type V4Block = (Ipv4Addr, u8, &'static str, Rule);
/// A block of the IPv6 registry.
type V6Block = (Ipv6Addr, u8, &'static str, Rule);

/// IANA IPv4 Special-Purpose Address Registry, the blocks that are not globally reachable
/// and the global ones inside them; plus multicast (its own registry: never a receiver).
/// 192.31.196.0/24, 192.52.193.0/24 and 192.175.48.0/24 are globally reachable and inside no
/// refused block, so they need no line.
const V4_BLOCKS: [V4Block; 19] = [
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "unspecified (this network)",
        NotGlobal,
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private", NotGlobal),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "carrier-grade NAT",
        NotGlobal,
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback", NotGlobal),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local", NotGlobal),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private", NotGlobal),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "IETF protocol assignments",
        NotGlobal,
    ),
    (Ipv4Addr::new(192, 0, 0, 9), 32, "PCP anycast", Global),
    (Ipv4Addr::new(192, 0, 0, 10), 32, "TURN anycast", Global),
    (
        Ipv4Addr::new(192, 0, 0, 170),
        31,
        "NAT64 discovery",
        NotGlobal,
    ),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation", NotGlobal),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "6to4 relay anycast (deprecated)",
        NotGlobal,
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private", NotGlobal),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking", NotGlobal),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation",
        NotGlobal,
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation",
        NotGlobal,
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast", NotGlobal),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved", NotGlobal),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "broadcast",
        NotGlobal,
    ),
];

/// IANA IPv6 Special-Purpose Address Registry (and the deprecated forms still routed by some
/// stacks), inside and outside 2000::/3.
const V6_BLOCKS: [V6Block; 26] = [
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified", NotGlobal),
    (Ipv6Addr::LOCALHOST, 128, "loopback", NotGlobal),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        96,
        "IPv4-compatible (deprecated)",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        96,
        "IPv4-mapped",
        Embeds(last_32_bits),
    ),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0),
        96,
        "IPv4-translated (SIIT)",
        Embeds(last_32_bits),
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        96,
        "NAT64",
        Embeds(last_32_bits),
    ),
    // Local-use NAT64 (RFC 8215): its operator chooses the prefix length, so where the IPv4
    // address sits is not known here; and the registry says not global.
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "local-use NAT64",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "discard-only",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0),
        64,
        "dummy prefix",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        "Teredo",
        Embeds(teredo),
    ),
    (
        Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 1),
        128,
        "PCP anycast",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 2),
        128,
        "TURN anycast",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 3),
        128,
        "DNS-SD anycast",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        "benchmarking",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x2001, 3, 0, 0, 0, 0, 0, 0),
        32,
        "AMT",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 4, 0x112, 0, 0, 0, 0, 0),
        48,
        "AS112",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 0x20, 0, 0, 0, 0, 0, 0),
        28,
        "ORCHIDv2",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 0x30, 0, 0, 0, 0, 0, 0),
        28,
        "DRIP",
        Global,
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0),
        16,
        "6to4",
        Embeds(six_to_four),
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique-local",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        "link-local",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "site-local",
        NotGlobal,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        "multicast",
        NotGlobal,
    ),
];

/// The only space allocated for global unicast (IANA IPv6 Address Space): 2000::/3.
const V6_GLOBAL_UNICAST: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

fn last_32_bits(bits: u128) -> Embedded {
    Embedded::One(Ipv4Addr::from(bits as u32))
}

/// 6to4 (RFC 3056): `2002:AABB:CCDD::/48` is the site behind IPv4 address AA.BB.CC.DD.
fn six_to_four(bits: u128) -> Embedded {
    Embedded::One(Ipv4Addr::from((bits >> 80) as u32))
}

/// Teredo (RFC 4380): `2001:0:SSSS:SSSS:flags:port:CCCC:CCCC`, the server's IPv4 address
/// in bits 32..64 and the client's, inverted, in the last 32.
fn teredo(bits: u128) -> Embedded {
    Embedded::Two(
        Ipv4Addr::from((bits >> 64) as u32),
        Ipv4Addr::from(!(bits as u32)),
    )
}

/// What `address` is to a webhook.
pub fn reach(address: IpAddr) -> Reach {
    match address {
        IpAddr::V4(v4) => reach_v4(v4),
        IpAddr::V6(v6) => reach_v6(v6),
    }
}

fn reach_v4(v4: Ipv4Addr) -> Reach {
    let bits = u32::from(v4);
    let longest = V4_BLOCKS
        .iter()
        .filter(|(network, length, ..)| {
            within(bits.into(), u32::from(*network).into(), 32, *length)
        })
        .max_by_key(|(_, length, ..)| *length);
    match longest {
        Some((_, _, name, NotGlobal)) => Reach::NotGlobal(name),
        Some((_, _, name, Embeds(embedded))) => Reach::Embeds(name, embedded(bits.into())),
        Some((_, _, _, Global)) | None => Reach::Global,
    }
}

fn reach_v6(v6: Ipv6Addr) -> Reach {
    let bits = u128::from(v6);
    let longest = V6_BLOCKS
        .iter()
        .filter(|(network, length, ..)| within(bits, u128::from(*network), 128, *length))
        .max_by_key(|(_, length, ..)| *length);
    match longest {
        Some((_, _, name, NotGlobal)) => Reach::NotGlobal(name),
        Some((_, _, name, Embeds(embedded))) => Reach::Embeds(name, embedded(bits)),
        Some((_, _, _, Global)) => Reach::Global,
        None if !within(
            bits,
            u128::from(V6_GLOBAL_UNICAST.0),
            128,
            V6_GLOBAL_UNICAST.1,
        ) =>
        {
            Reach::NotGlobal("not global unicast (outside 2000::/3)")
        }
        None => Reach::Global,
    }
}

/// Whether `bits` (an address of `width` bits) is inside `network`/`length`.
fn within(bits: u128, network: u128, width: u32, length: u8) -> bool {
    let length = u32::from(length).min(width);
    if length == 0 {
        return true;
    }
    let shift = width - length;
    (bits >> shift) == (network >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Reach {
        reach(text.parse().unwrap())
    }

    #[test]
    fn every_ipv4_block_the_registry_says_is_not_global_is_refused_at_both_ends() {
        // Each block's first and last address, and the name it is refused under.
        let refused = [
            ("0.0.0.0", "0.255.255.255", "unspecified (this network)"),
            ("10.0.0.0", "10.255.255.255", "private"),
            ("100.64.0.0", "100.127.255.255", "carrier-grade NAT"),
            ("127.0.0.0", "127.255.255.255", "loopback"),
            ("169.254.0.0", "169.254.255.255", "link-local"),
            ("172.16.0.0", "172.31.255.255", "private"),
            ("192.0.0.0", "192.0.0.8", "IETF protocol assignments"),
            ("192.0.0.11", "192.0.0.255", "IETF protocol assignments"),
            ("192.0.0.170", "192.0.0.171", "NAT64 discovery"),
            ("192.0.2.0", "192.0.2.255", "documentation"),
            (
                "192.88.99.0",
                "192.88.99.255",
                "6to4 relay anycast (deprecated)",
            ),
            ("192.168.0.0", "192.168.255.255", "private"),
            ("198.18.0.0", "198.19.255.255", "benchmarking"),
            ("198.51.100.0", "198.51.100.255", "documentation"),
            ("203.0.113.0", "203.0.113.255", "documentation"),
            ("224.0.0.0", "239.255.255.255", "multicast"),
            ("240.0.0.0", "255.255.255.254", "reserved"),
            ("255.255.255.255", "255.255.255.255", "broadcast"),
        ];
        for (first, last, name) in refused {
            assert_eq!(of(first), Reach::NotGlobal(name), "{first}");
            assert_eq!(of(last), Reach::NotGlobal(name), "{last}");
        }
        // Just outside each end, and the registry's global blocks.
        for global in [
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.1.0",
            "192.31.196.1",
            "192.52.193.1",
            "192.88.98.255",
            "192.175.48.1",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "93.184.216.34",
        ] {
            assert_eq!(of(global), Reach::Global, "{global}");
        }
    }

    #[test]
    fn every_ipv6_block_is_refused_let_through_or_judged_by_the_ipv4_address_it_embeds() {
        let refused = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("64:ff9b:1::", "local-use NAT64"),
            ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use NAT64"),
            ("100::", "discard-only"),
            ("100::ffff:ffff:ffff:ffff", "discard-only"),
            ("100:0:0:1::", "dummy prefix"),
            ("2001:100::", "IETF protocol assignments"),
            (
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
                "IETF protocol assignments",
            ),
            ("2001:1::4", "IETF protocol assignments"),
            ("2001:2::", "benchmarking"),
            ("2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"),
            ("2001:db8::", "documentation"),
            ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
            ("3fff::", "documentation"),
            ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
            ("fc00::", "unique-local"),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("5f00::1", "not global unicast (outside 2000::/3)"),
            ("4000::1", "not global unicast (outside 2000::/3)"),
            ("64:ff9b::1:7f00:1", "not global unicast (outside 2000::/3)"),
            (
                "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "not global unicast (outside 2000::/3)",
            ),
            ("e000::1", "not global unicast (outside 2000::/3)"),
        ];
        for (address, name) in refused {
            assert_eq!(of(address), Reach::NotGlobal(name), "{address}");
        }
        for global in [
            "2001:1::1",
            "2001:1::2",
            "2001:1::3",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:3f::1",
            "2001:200::1",
            "2001:db7:ffff::1",
            "2001:db9::1",
            "2003::1",
            "2606:4700::1111",
            "2620:4f:8000::1",
            "3ffe::1",
            "3fff:1000::1",
        ] {
            assert_eq!(of(global), Reach::Global, "{global}");
        }
        let one = |address: &str, name: &'static str, v4: &str| {
            assert_eq!(
                of(address),
                Reach::Embeds(name, Embedded::One(v4.parse().unwrap())),
                "{address}"
            );
        };
        one("64:ff9b::7f00:1", "NAT64", "127.0.0.1");
        one("64:ff9b::a9fe:a9fe", "NAT64", "169.254.169.254");
        one("64:ff9b::808:808", "NAT64", "8.8.8.8");
        one("::ffff:127.0.0.1", "IPv4-mapped", "127.0.0.1");
        one("::ffff:0:0", "IPv4-mapped", "0.0.0.0");
        one("::ffff:0:a00:1", "IPv4-translated (SIIT)", "10.0.0.1");
        one("2002:7f00:1::", "6to4", "127.0.0.1");
        one("2002:a9fe:a9fe:1234::1", "6to4", "169.254.169.254");
        one("2002:808:808::1", "6to4", "8.8.8.8");
        // Teredo: server 65.54.227.120, client 192.0.2.45 (RFC 4380's example, the client's
        // address and port inverted), and one whose client is 127.0.0.1 (~ = 80ff:fffe).
        assert_eq!(
            of("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            Reach::Embeds(
                "Teredo",
                Embedded::Two(
                    "65.54.227.120".parse().unwrap(),
                    "192.0.2.45".parse().unwrap()
                )
            )
        );
        assert_eq!(
            of("2001:0:808:808::80ff:fffe"),
            Reach::Embeds(
                "Teredo",
                Embedded::Two("8.8.8.8".parse().unwrap(), "127.0.0.1".parse().unwrap())
            )
        );
    }
}
