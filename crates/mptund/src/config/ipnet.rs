//! IP networks written `address/prefix_len`, as in tun addresses and peers'
//! `allowed_ips`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address with a prefix length, e.g. `198.18.100.2/24`.
///
/// The address may have host bits set (a tun address is an interface address
/// plus the length of its subnet); [`IpNet::network`] clears them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    /// The address as written.
    pub addr: IpAddr,
    /// Number of leading bits that form the network: 0..=32 for IPv4,
    /// 0..=128 for IPv6.
    pub prefix_len: u8,
}

/// Why a string is not an `address/prefix_len`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpNetParseError {
    /// No `/` in the string.
    #[error("missing prefix length (write address/prefix_len, e.g. 198.18.100.2/24)")]
    MissingPrefixLen,
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    BadAddress(String),
    /// The part after `/` is not a decimal number.
    #[error("prefix length {0:?} is not a number")]
    BadPrefixLen(String),
    /// The prefix length exceeds the address width.
    #[error("prefix length {prefix_len} is too long for an IPv{version} address (at most {max})")]
    PrefixLenTooLong {
        /// The prefix length as written.
        prefix_len: u32,
        /// 4 or 6.
        version: u8,
        /// 32 or 128.
        max: u8,
    },
}

impl IpNet {
    /// `addr/prefix_len`, checking that the prefix fits the address family.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, IpNetParseError> {
        let max = max_prefix_len(addr);
        if prefix_len > max {
            return Err(IpNetParseError::PrefixLenTooLong {
                prefix_len: u32::from(prefix_len),
                version: if addr.is_ipv4() { 4 } else { 6 },
                max,
            });
        }
        Ok(Self { addr, prefix_len })
    }

    /// 32 for IPv4, 128 for IPv6.
    pub fn max_prefix_len(&self) -> u8 {
        max_prefix_len(self.addr)
    }

    /// The same network with all host bits zero, e.g. `198.18.100.0/24` for
    /// `198.18.100.2/24`.
    pub fn network(&self) -> IpNet {
        IpNet {
            addr: masked(self.addr, self.prefix_len),
            prefix_len: self.prefix_len,
        }
    }

    /// Whether the host bits are all zero.
    pub fn is_network(&self) -> bool {
        self.network().addr == self.addr
    }

    /// Whether `ip` lies in this network (always false across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_family(self.addr, ip)
            && masked(ip, self.prefix_len) == masked(self.addr, self.prefix_len)
    }

    /// Whether the two networks share at least one address, i.e. one
    /// contains the other.
    pub fn overlaps(&self, other: &IpNet) -> bool {
        let shorter = self.prefix_len.min(other.prefix_len);
        same_family(self.addr, other.addr)
            && masked(self.addr, shorter) == masked(other.addr, shorter)
    }
}

fn max_prefix_len(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// `addr` with all but the first `prefix_len` bits cleared.
fn masked(addr: IpAddr, prefix_len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix_len.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & mask))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix_len.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & mask))
        }
    }
}

impl FromStr for IpNet {
    type Err = IpNetParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix_len) = s.split_once('/').ok_or(IpNetParseError::MissingPrefixLen)?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| IpNetParseError::BadAddress(addr.to_string()))?;
        if prefix_len.is_empty() || !prefix_len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(IpNetParseError::BadPrefixLen(prefix_len.to_string()));
        }
        let value: u32 = prefix_len
            .parse()
            .map_err(|_| IpNetParseError::BadPrefixLen(prefix_len.to_string()))?;
        let max = max_prefix_len(addr);
        match u8::try_from(value) {
            Ok(value) if value <= max => Ok(IpNet {
                addr,
                prefix_len: value,
            }),
            _ => Err(IpNetParseError::PrefixLenTooLong {
                prefix_len: value,
                version: if addr.is_ipv4() { 4 } else { 6 },
                max,
            }),
        }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_displays() {
        assert_eq!(net("198.18.100.2/24").to_string(), "198.18.100.2/24");
        assert_eq!(net("fd00:6d70::2/64").to_string(), "fd00:6d70::2/64");
        assert_eq!(net("0.0.0.0/0").prefix_len, 0);
        assert_eq!(
            "198.18.0.1".parse::<IpNet>(),
            Err(IpNetParseError::MissingPrefixLen)
        );
        assert!(matches!(
            "198.18.0.1/33".parse::<IpNet>(),
            Err(IpNetParseError::PrefixLenTooLong { max: 32, .. })
        ));
        assert!(matches!(
            "::/129".parse::<IpNet>(),
            Err(IpNetParseError::PrefixLenTooLong { max: 128, .. })
        ));
        assert!(matches!(
            "1.2.3.4/+1".parse::<IpNet>(),
            Err(IpNetParseError::BadPrefixLen(_))
        ));
        assert!(matches!(
            "1.2.3.4/99999999999".parse::<IpNet>(),
            Err(IpNetParseError::BadPrefixLen(_))
        ));
        assert!(matches!(
            "1.2.3.4/255".parse::<IpNet>(),
            Err(IpNetParseError::PrefixLenTooLong {
                prefix_len: 255,
                ..
            })
        ));
        assert!(matches!(
            "host/24".parse::<IpNet>(),
            Err(IpNetParseError::BadAddress(_))
        ));
    }

    #[test]
    fn network_clears_host_bits() {
        assert_eq!(net("198.18.100.2/24").network(), net("198.18.100.0/24"));
        assert_eq!(net("198.18.100.2/32").network(), net("198.18.100.2/32"));
        assert_eq!(net("198.18.100.2/0").network(), net("0.0.0.0/0"));
        assert_eq!(net("fd00:6d70::2/64").network(), net("fd00:6d70::/64"));
        assert!(!net("198.18.100.2/24").is_network());
        assert!(net("198.18.100.0/24").is_network());
    }

    #[test]
    fn contains_and_overlaps() {
        let a = net("198.18.100.0/24");
        assert!(a.contains("198.18.100.77".parse().unwrap()));
        assert!(!a.contains("198.18.101.1".parse().unwrap()));
        assert!(!a.contains("::ffff:198.18.100.1".parse().unwrap()));
        assert!(a.overlaps(&net("198.18.100.2/32")));
        assert!(net("198.18.100.2/32").overlaps(&a));
        assert!(!a.overlaps(&net("198.18.101.0/24")));
        assert!(net("0.0.0.0/0").overlaps(&a));
        assert!(!net("::/0").overlaps(&a));
    }

    fn any_net() -> impl Strategy<Value = IpNet> {
        prop_oneof![
            (any::<u32>(), 0u8..=32).prop_map(|(a, p)| IpNet {
                addr: IpAddr::V4(a.into()),
                prefix_len: p
            }),
            (any::<u128>(), 0u8..=128).prop_map(|(a, p)| IpNet {
                addr: IpAddr::V6(a.into()),
                prefix_len: p
            }),
        ]
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(n in any_net()) {
            prop_assert_eq!(n.to_string().parse::<IpNet>(), Ok(n));
        }

        #[test]
        fn overlap_is_symmetric_and_means_containment(a in any_net(), b in any_net()) {
            prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
            let contained = a.contains(b.network().addr) && a.prefix_len <= b.prefix_len
                || b.contains(a.network().addr) && b.prefix_len <= a.prefix_len;
            prop_assert_eq!(a.overlaps(&b), contained);
        }

        #[test]
        fn network_contains_its_address(n in any_net()) {
            prop_assert!(n.network().contains(n.addr));
            prop_assert!(n.network().is_network());
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = s.parse::<IpNet>();
        }
    }
}
