//! Just enough IPv4/IPv6 header parsing to route and police inner packets: version,
//! addresses and the length the header claims.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(super) const IPV4_MIN_HEADER_LEN: usize = 20;
pub(super) const IPV6_HEADER_LEN: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InnerHeader {
    pub source: IpAddr,
    pub destination: IpAddr,
    /// Length the IP header claims; shorter than the buffer when a link padded it.
    pub total_len: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InnerError {
    /// Shorter than the fixed IP header.
    #[error("{len} bytes is too short for an IP header")]
    Truncated { len: usize },
    /// The version nibble is neither 4 nor 6.
    #[error("IP version {0} is neither 4 nor 6")]
    UnknownVersion(u8),
    /// The header claims more bytes than the packet has, or an impossible header length.
    #[error("IP header claims {claimed} bytes, packet has {len}")]
    BadLength { claimed: usize, len: usize },
}

pub fn inspect(packet: &[u8]) -> Result<InnerHeader, InnerError> {
    let Some(&first) = packet.first() else {
        return Err(InnerError::Truncated { len: 0 });
    };
    let truncated = InnerError::Truncated { len: packet.len() };
    match first >> 4 {
        4 => {
            let header: [u8; IPV4_MIN_HEADER_LEN] = array(packet, 0).ok_or(truncated)?;
            let header_len = usize::from(first & 0x0f) * 4;
            let total_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
            if header_len < IPV4_MIN_HEADER_LEN
                || total_len < header_len
                || total_len > packet.len()
            {
                return Err(InnerError::BadLength {
                    claimed: total_len,
                    len: packet.len(),
                });
            }
            let source = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
            let destination = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
            Ok(InnerHeader {
                source: source.into(),
                destination: destination.into(),
                total_len,
            })
        }
        6 => {
            let header: [u8; IPV6_HEADER_LEN] = array(packet, 0).ok_or(truncated)?;
            let payload_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
            let total_len = IPV6_HEADER_LEN + payload_len;
            if total_len > packet.len() {
                return Err(InnerError::BadLength {
                    claimed: total_len,
                    len: packet.len(),
                });
            }
            let address = |offset| array::<16>(&header, offset).map(Ipv6Addr::from);
            let (Some(source), Some(destination)) = (address(8), address(24)) else {
                return Err(truncated);
            };
            Ok(InnerHeader {
                source: source.into(),
                destination: destination.into(),
                total_len,
            })
        }
        version => Err(InnerError::UnknownVersion(version)),
    }
}

/// `N` bytes of `bytes` from `offset`, if there are that many.
fn array<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 28-byte IPv4 UDP packet 198.18.100.2 -> 198.18.100.1.
    const IPV4_UDP: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, //
        198, 18, 100, 2, 198, 18, 100, 1, //
        0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    #[test]
    fn ipv4_addresses_and_length() {
        let header = inspect(&IPV4_UDP).unwrap();
        assert_eq!(header.source, "198.18.100.2".parse::<IpAddr>().unwrap());
        assert_eq!(
            header.destination,
            "198.18.100.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(header.total_len, 28);
        let mut padded = IPV4_UDP.to_vec();
        padded.extend_from_slice(&[0, 0]);
        assert_eq!(inspect(&padded).unwrap().total_len, 28);
    }

    #[test]
    fn ipv6_addresses_and_length() {
        let mut packet = [0u8; 48];
        packet[0] = 0x60;
        packet[5] = 8; // payload length
        packet[6] = 17;
        packet[8..24].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        packet[24..40].copy_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        let header = inspect(&packet).unwrap();
        assert_eq!(header.source, "fd00::2".parse::<IpAddr>().unwrap());
        assert_eq!(header.destination, "fd00::1".parse::<IpAddr>().unwrap());
        assert_eq!(header.total_len, 48);
    }

    #[test]
    fn broken_packets_are_errors() {
        assert_eq!(inspect(&[]), Err(InnerError::Truncated { len: 0 }));
        assert_eq!(
            inspect(&IPV4_UDP[..19]),
            Err(InnerError::Truncated { len: 19 })
        );
        assert_eq!(inspect(&[0x50; 40]), Err(InnerError::UnknownVersion(5)));
        let mut long_claim = IPV4_UDP;
        long_claim[3] = 0x40;
        assert_eq!(
            inspect(&long_claim),
            Err(InnerError::BadLength {
                claimed: 64,
                len: 28
            })
        );
        let mut short_ihl = IPV4_UDP;
        short_ihl[0] = 0x44;
        assert!(matches!(
            inspect(&short_ihl),
            Err(InnerError::BadLength { .. })
        ));
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[5] = 1;
        assert_eq!(
            inspect(&v6),
            Err(InnerError::BadLength {
                claimed: 41,
                len: 40
            })
        );
    }

    #[test]
    fn never_panics_on_any_short_input() {
        for len in 0..64 {
            for fill in [0x00u8, 0x45, 0x4f, 0x60, 0xff] {
                let _ = inspect(&vec![fill; len]);
            }
        }
    }
}
