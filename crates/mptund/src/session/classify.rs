//! Which inner packets are latency-critical: the small ones a transfer waits on.
//!
//! A pure TCP acknowledgement clocks the peer's sending, a SYN, FIN or RST opens or
//! closes a connection, and a DNS query holds up everything that follows it. Losing
//! or delaying one of these costs the inner flow an RTT or an RTO, while copying it
//! costs a few dozen bytes, so the sender may duplicate them on its two fastest paths.
//! Everything else is bulk. Only the first fragment of an IPv4 packet and IPv6
//! packets without extension headers are looked into; anything unusual is bulk,
//! which is always safe.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use mptund_sched::PacketClass;

pub(super) const PROTOCOL_TCP: u8 = 6;
const PROTOCOL_UDP: u8 = 17;
const DNS_PORT: u16 = 53;
const TCP_SYN: u8 = 0x02;
const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;

/// The class of the IP packet in `packet` (already checked by `inner::inspect`).
pub fn classify(packet: &[u8]) -> PacketClass {
    let Some((protocol, transport)) = transport_of(packet) else {
        return PacketClass::Bulk;
    };
    let critical = match protocol {
        PROTOCOL_TCP => tcp_is_critical(transport),
        PROTOCOL_UDP => udp_is_dns(transport),
        _ => false,
    };
    if critical {
        PacketClass::Control
    } else {
        PacketClass::Bulk
    }
}

/// The transport protocol and the transport header plus payload.
pub(super) fn transport_of(packet: &[u8]) -> Option<(u8, &[u8])> {
    let first = *packet.first()?;
    match first >> 4 {
        4 => {
            let header_len = usize::from(first & 0x0f) * 4;
            let total_len = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
            let fragment = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]);
            // A later fragment has no transport header.
            if fragment & 0x1fff != 0 {
                return None;
            }
            let end = total_len.min(packet.len());
            Some((*packet.get(9)?, packet.get(header_len..end)?))
        }
        6 => {
            let payload_len = usize::from(u16::from_be_bytes([*packet.get(4)?, *packet.get(5)?]));
            let end = (40 + payload_len).min(packet.len());
            Some((*packet.get(6)?, packet.get(40..end)?))
        }
        _ => None,
    }
}

/// SYN, FIN, RST, or an acknowledgement that carries no data.
fn tcp_is_critical(segment: &[u8]) -> bool {
    let (Some(&offset_byte), Some(&flags)) = (segment.get(12), segment.get(13)) else {
        return false;
    };
    let header_len = usize::from(offset_byte >> 4) * 4;
    let carries_data = segment.len() > header_len;
    flags & (TCP_SYN | TCP_FIN | TCP_RST) != 0 || !carries_data
}

fn udp_is_dns(datagram: &[u8]) -> bool {
    let port = |at: usize| {
        datagram
            .get(at..at + 2)
            .and_then(|bytes| <[u8; 2]>::try_from(bytes).ok())
            .map(u16::from_be_bytes)
    };
    port(0) == Some(DNS_PORT) || port(2) == Some(DNS_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet with the given protocol and transport bytes.
    fn ipv4(protocol: u8, transport: &[u8]) -> Vec<u8> {
        let total = 20 + transport.len();
        let mut packet = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            protocol,
        ];
        packet.extend_from_slice(&[0; 10]);
        packet.extend_from_slice(transport);
        packet
    }

    fn ipv6(next_header: u8, transport: &[u8]) -> Vec<u8> {
        let len = transport.len();
        let mut packet = vec![0x60, 0, 0, 0, (len >> 8) as u8, len as u8, next_header, 64];
        packet.extend_from_slice(&[0; 32]);
        packet.extend_from_slice(transport);
        packet
    }

    /// A 20-byte TCP header with `flags`, followed by `payload` bytes.
    fn tcp(flags: u8, payload: usize) -> Vec<u8> {
        let mut segment = vec![0u8; 20 + payload];
        segment[12] = 5 << 4;
        segment[13] = flags;
        segment
    }

    fn udp(source: u16, destination: u16) -> Vec<u8> {
        let mut datagram = vec![0u8; 8 + 30];
        datagram[0..2].copy_from_slice(&source.to_be_bytes());
        datagram[2..4].copy_from_slice(&destination.to_be_bytes());
        datagram
    }

    #[test]
    fn table() {
        const ACK: u8 = 0x10;
        const PSH: u8 = 0x08;
        let cases: [(&str, Vec<u8>, PacketClass); 11] = [
            ("pure ACK", ipv4(6, &tcp(ACK, 0)), PacketClass::Control),
            (
                "data segment",
                ipv4(6, &tcp(ACK | PSH, 1200)),
                PacketClass::Bulk,
            ),
            ("SYN", ipv4(6, &tcp(TCP_SYN, 0)), PacketClass::Control),
            (
                "FIN with data",
                ipv4(6, &tcp(ACK | TCP_FIN, 100)),
                PacketClass::Control,
            ),
            ("RST", ipv4(6, &tcp(TCP_RST, 0)), PacketClass::Control),
            ("DNS query", ipv4(17, &udp(40000, 53)), PacketClass::Control),
            (
                "DNS answer",
                ipv4(17, &udp(53, 40000)),
                PacketClass::Control,
            ),
            ("other UDP", ipv4(17, &udp(40000, 443)), PacketClass::Bulk),
            ("ICMP", ipv4(1, &[8, 0, 0, 0]), PacketClass::Bulk),
            ("IPv6 pure ACK", ipv6(6, &tcp(ACK, 0)), PacketClass::Control),
            ("IPv6 data", ipv6(6, &tcp(ACK, 1000)), PacketClass::Bulk),
        ];
        for (name, packet, expected) in cases {
            assert_eq!(classify(&packet), expected, "{name}");
        }
    }

    #[test]
    fn odd_packets_are_bulk() {
        let mut later_fragment = ipv4(6, &tcp(0x10, 0));
        later_fragment[7] = 0x10;
        assert_eq!(classify(&later_fragment), PacketClass::Bulk);
        let truncated_tcp = ipv4(6, &[0u8; 8]);
        assert_eq!(classify(&truncated_tcp), PacketClass::Bulk);
        assert_eq!(classify(&[]), PacketClass::Bulk);
        assert_eq!(classify(&[0x45]), PacketClass::Bulk);
        assert_eq!(classify(&[0x70; 60]), PacketClass::Bulk);
        let extension_header = ipv6(0, &tcp(0x10, 0));
        assert_eq!(classify(&extension_header), PacketClass::Bulk);
    }
}
