//! The TUN MTU follows from the smallest path MTU minus the fixed encapsulation
//! overhead, so an inner packet that fits the TUN always fits every path.

use crate::wire::DATA_OVERHEAD;

const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
/// What a path is assumed to carry when its interface MTU is unknown (Ethernet).
pub const DEFAULT_LINK_MTU: u32 = 1500;
/// IPv4's minimum reassembly size (RFC 791); a smaller TUN MTU breaks ordinary traffic.
pub const MIN_TUN_MTU: u16 = 576;

/// Outer bytes per inner packet: outer IP header, UDP header and mptund's overhead.
pub fn encapsulation_overhead(outer_ipv6: bool) -> usize {
    let ip = if outer_ipv6 {
        IPV6_HEADER_LEN
    } else {
        IPV4_HEADER_LEN
    };
    ip + UDP_HEADER_LEN + DATA_OVERHEAD
}

/// The largest inner packet every path carries: `paths` yields each path's link MTU
/// and whether its outer packets are IPv6.
pub fn tun_mtu(paths: impl IntoIterator<Item = (u32, bool)>) -> Option<u16> {
    paths
        .into_iter()
        .map(|(link_mtu, ipv6)| (link_mtu as usize).saturating_sub(encapsulation_overhead(ipv6)))
        .min()
        .map(|mtu| mtu.min(usize::from(u16::MAX)) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_fixed_per_outer_family() {
        assert_eq!(encapsulation_overhead(false), 20 + 8 + 44);
        assert_eq!(encapsulation_overhead(true), 40 + 8 + 44);
    }

    #[test]
    fn smallest_path_decides() {
        assert_eq!(tun_mtu([(1500, false)]), Some(1428));
        assert_eq!(tun_mtu([(1500, false), (1500, true)]), Some(1408));
        assert_eq!(
            tun_mtu([(1500, false), (1280, false), (9000, false)]),
            Some(1208)
        );
        assert_eq!(tun_mtu([(60, false)]), Some(0));
        assert_eq!(tun_mtu(std::iter::empty()), None);
    }
}
