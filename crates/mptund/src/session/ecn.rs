//! Congestion Experienced marks on inner packets, in place of the send queue's AQM drops.
//!
//! An inner flow that negotiated ECN learns of the standing queue from a CE mark as it
//! would from a loss (RFC 3168 §5), and CoDel may mark where it would drop (RFC 8289
//! §5), as Linux's fq_codel does by default. The mark costs the flow no retransmission
//! and leaves no hole: the receiving application waits for nothing, and the sender's
//! buffer does not fill with data acknowledged selectively above a hole. Only the AQM
//! marks; the queue's hard limits (sojourn and capacity) still drop, because a flow
//! that ignores marks is not slowed by them.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use super::inner::{IPV4_MIN_HEADER_LEN, IPV6_HEADER_LEN};

/// The two ECN bits of the IP header (RFC 3168 §5).
const ECN_MASK: u8 = 0b11;
const NOT_ECT: u8 = 0b00;
const CONGESTION_EXPERIENCED: u8 = 0b11;
const IPV4_CHECKSUM: usize = 10;

/// Marks the IP packet in `packet` Congestion Experienced if it is ECN-capable (ECT(0)
/// or ECT(1)); an IPv4 header's checksum is updated to match. Returns whether the
/// packet now carries the mark: `false` for a packet that is not ECN-capable and for
/// anything that is not a whole IPv4 or IPv6 header, which the caller drops instead.
pub fn mark_congestion_experienced(packet: &mut [u8]) -> bool {
    match packet.first().map(|first| first >> 4) {
        Some(4) => mark_ipv4(packet),
        Some(6) => mark_ipv6(packet),
        _ => false,
    }
}

fn mark_ipv4(packet: &mut [u8]) -> bool {
    let Some(&[version_ihl, tos, _, _, _, _, _, _, _, _, checksum_high, checksum_low, ..]) =
        packet.get(..IPV4_MIN_HEADER_LEN)
    else {
        return false;
    };
    if usize::from(version_ihl & 0x0f) * 4 < IPV4_MIN_HEADER_LEN {
        return false;
    }
    let Some(marked_tos) = marked(tos) else {
        return false;
    };
    if marked_tos == tos {
        return true;
    }
    let checksum = updated_checksum(
        u16::from_be_bytes([checksum_high, checksum_low]),
        u16::from_be_bytes([version_ihl, tos]),
        u16::from_be_bytes([version_ihl, marked_tos]),
    );
    if let Some(field) = packet.get_mut(IPV4_CHECKSUM..IPV4_CHECKSUM + 2) {
        field.copy_from_slice(&checksum.to_be_bytes());
    }
    if let Some(byte) = packet.get_mut(1) {
        *byte = marked_tos;
    }
    true
}

fn mark_ipv6(packet: &mut [u8]) -> bool {
    if packet.len() < IPV6_HEADER_LEN {
        return false;
    }
    // The traffic class straddles bytes 0 and 1; its ECN bits are bits 4-5 of byte 1.
    let Some(byte) = packet.get_mut(1) else {
        return false;
    };
    let Some(marked_byte) =
        marked(*byte >> 4).map(|traffic_low| (traffic_low << 4) | (*byte & 0x0f))
    else {
        return false;
    };
    *byte = marked_byte;
    true
}

/// `bits` (whose low two are the ECN field) with CE set, or `None` when not ECN-capable.
fn marked(bits: u8) -> Option<u8> {
    (bits & ECN_MASK != NOT_ECT).then_some(bits | CONGESTION_EXPERIENCED)
}

/// The header checksum after one 16-bit word changed from `old_word` to `new_word`
/// (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
fn updated_checksum(checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let sum = u32::from(!checksum) + u32::from(!old_word) + u32::from(new_word);
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    !(folded as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 header checksum computed from scratch (RFC 791).
    fn ipv4_checksum(header: &[u8]) -> u16 {
        let mut sum = 0u32;
        for (index, pair) in header.chunks(2).enumerate() {
            if index == IPV4_CHECKSUM / 2 {
                continue;
            }
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn ipv4(tos: u8) -> Vec<u8> {
        let mut packet = vec![
            0x45, tos, 0x00, 0x28, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0, 0, 198, 18, 0, 1, 198,
            19, 0, 2,
        ];
        packet.extend_from_slice(&[0u8; 20]);
        let checksum = ipv4_checksum(&packet[..20]);
        packet[10..12].copy_from_slice(&checksum.to_be_bytes());
        packet
    }

    fn ipv6(traffic_class: u8) -> Vec<u8> {
        let mut packet = vec![0u8; 60];
        packet[0] = 0x60 | (traffic_class >> 4);
        packet[1] = (traffic_class << 4) | 0x0a;
        packet[4..6].copy_from_slice(&20u16.to_be_bytes());
        packet[6] = 6;
        packet
    }

    #[test]
    fn ect_ipv4_is_marked_and_its_checksum_stays_valid() {
        for (tos, expected) in [(0b0000_0010, 0b0000_0011), (0b1011_1001, 0b1011_1011)] {
            let mut packet = ipv4(tos);
            assert!(mark_congestion_experienced(&mut packet));
            assert_eq!(packet[1], expected, "DSCP kept, ECN set to CE");
            let checksum = u16::from_be_bytes([packet[10], packet[11]]);
            assert_eq!(checksum, ipv4_checksum(&packet[..20]));
        }
    }

    #[test]
    fn not_ect_ipv4_is_left_alone() {
        let mut packet = ipv4(0b1011_1000);
        let before = packet.clone();
        assert!(!mark_congestion_experienced(&mut packet));
        assert_eq!(packet, before);
    }

    #[test]
    fn a_packet_already_marked_counts_as_marked_and_is_unchanged() {
        let mut packet = ipv4(0b0000_0011);
        let before = packet.clone();
        assert!(mark_congestion_experienced(&mut packet));
        assert_eq!(packet, before);
    }

    #[test]
    fn ect_ipv6_is_marked_in_its_traffic_class() {
        let mut packet = ipv6(0b1010_0001);
        assert!(mark_congestion_experienced(&mut packet));
        let traffic_class = ((packet[0] & 0x0f) << 4) | (packet[1] >> 4);
        assert_eq!(traffic_class, 0b1010_0011);
        assert_eq!(packet[1] & 0x0f, 0x0a, "flow label kept");
        assert_eq!(packet[0] >> 4, 6);
    }

    #[test]
    fn not_ect_ipv6_and_malformed_packets_are_not_marked() {
        let mut packet = ipv6(0b1010_0000);
        assert!(!mark_congestion_experienced(&mut packet));
        for mut bytes in [
            vec![],
            vec![0x45, 0x02],
            vec![0x42; 20],
            vec![0x61; 39],
            vec![0x12; 60],
        ] {
            let before = bytes.clone();
            assert!(!mark_congestion_experienced(&mut bytes));
            assert_eq!(bytes, before);
        }
    }

    #[test]
    fn the_incremental_checksum_matches_a_full_one_for_every_tos() {
        for tos in 0..=u8::MAX {
            let mut packet = ipv4(tos);
            if mark_congestion_experienced(&mut packet) {
                assert_eq!(
                    u16::from_be_bytes([packet[10], packet[11]]),
                    ipv4_checksum(&packet[..20])
                );
            }
        }
    }
}
