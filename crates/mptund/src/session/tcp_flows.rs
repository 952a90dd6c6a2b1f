//! Which inner TCP segments are retransmissions: the ones the receiving application
//! waits on.
//!
//! When an inner flow loses a segment, everything it sent after that segment is stuck
//! behind the hole at the receiver until the retransmission arrives. The retransmission
//! waits at the back of the send queue, so the hole already costs the application the
//! queue's delay and a round trip; if the send queue dropped the retransmission too, it
//! would cost that twice (472 ms in a failover run with a 150 ms sojourn limit). The
//! send queue therefore never drops a segment recognised here (`queue.rs`). It keeps
//! its place in line: a retransmission sent ahead of its flow's queued packets makes
//! the sender's RACK (RFC 8985) take all of them for lost.
//!
//! A segment is a retransmission when it occupies sequence space (data, SYN or FIN)
//! and ends at or before the highest sequence number its flow has sent, compared in
//! serial arithmetic (RFC 1982) so that wrapping sequence numbers compare right. That
//! takes one entry per flow: a fixed table indexed by a keyed hash of the four-tuple.
//! A collision only replaces an entry, so that flow's next retransmission is treated
//! as new data; nothing but the send queue's drops depends on the table.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

use super::classify::{transport_of, PROTOCOL_TCP};
use super::inner::inspect;

/// Flows tracked at once: a tunnel carries a few bulk flows at a time, and a flow whose
/// entry was taken loses only the head start of its retransmissions.
const SLOTS: usize = 256;

const TCP_MIN_HEADER_LEN: usize = 20;
const TCP_SYN: u8 = 0x02;
const TCP_FIN: u8 = 0x01;

/// One direction of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpFlow {
    pub source: IpAddr,
    pub destination: IpAddr,
    pub source_port: u16,
    pub destination_port: u16,
}

/// The sequence space a TCP segment occupies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    pub flow: TcpFlow,
    /// The segment's first sequence number.
    pub seq: u32,
    /// Payload bytes, plus one each for SYN and FIN.
    pub seq_len: u32,
}

/// The TCP segment in the inner IP packet `packet`; `None` for anything else, and for a
/// header too short or too long for the packet. Only what `classify` looks into is
/// looked into: first fragments of IPv4, IPv6 without extension headers.
pub fn tcp_segment(packet: &[u8]) -> Option<TcpSegment> {
    let (protocol, segment) = transport_of(packet)?;
    if protocol != PROTOCOL_TCP {
        return None;
    }
    let addresses = inspect(packet).ok()?;
    let header_len = usize::from(*segment.get(12)? >> 4) * 4;
    if header_len < TCP_MIN_HEADER_LEN || header_len > segment.len() {
        return None;
    }
    let port = |at: usize| {
        Some(u16::from_be_bytes([
            *segment.get(at)?,
            *segment.get(at + 1)?,
        ]))
    };
    let seq = u32::from_be_bytes(segment.get(4..8)?.try_into().ok()?);
    let flags = *segment.get(13)?;
    let payload_len = u32::try_from(segment.len() - header_len).ok()?;
    let seq_len = payload_len + u32::from(flags & TCP_SYN != 0) + u32::from(flags & TCP_FIN != 0);
    Some(TcpSegment {
        flow: TcpFlow {
            source: addresses.source,
            destination: addresses.destination,
            source_port: port(0)?,
            destination_port: port(2)?,
        },
        seq,
        seq_len,
    })
}

/// `a` is at or before `b` in sequence space (RFC 1982 serial arithmetic).
fn at_or_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

#[derive(Clone, Copy, Debug)]
struct FlowEnd {
    flow: TcpFlow,
    /// One past the highest sequence number the flow has sent.
    sent_end: u32,
}

/// The highest sequence number each inner TCP flow sent through this end of the tunnel.
pub struct TcpFlows {
    hasher: RandomState,
    /// Empty until the first segment that occupies sequence space, then [`SLOTS`]
    /// entries: the table is 11 KiB, which an idle session should not carry.
    slots: Vec<Option<FlowEnd>>,
}

impl Default for TcpFlows {
    fn default() -> Self {
        TcpFlows {
            // Keyed per table, so that a sender behind the tunnel cannot pick flows
            // that take each other's entries.
            hasher: RandomState::new(),
            slots: Vec::new(),
        }
    }
}

impl TcpFlows {
    /// Records the inner IP packet `packet` and says whether it is a TCP
    /// retransmission: it occupies sequence space its flow has sent before.
    pub fn is_retransmission(&mut self, packet: &[u8]) -> bool {
        let Some(segment) = tcp_segment(packet) else {
            return false;
        };
        if segment.seq_len == 0 {
            return false;
        }
        let end = segment.seq.wrapping_add(segment.seq_len);
        if self.slots.is_empty() {
            self.slots = vec![None; SLOTS];
        }
        let index = (self.hasher.hash_one(segment.flow) % SLOTS as u64) as usize;
        let Some(slot) = self.slots.get_mut(index) else {
            return false;
        };
        match slot {
            Some(entry) if entry.flow == segment.flow => {
                if at_or_before(end, entry.sent_end) {
                    return true;
                }
                entry.sent_end = end;
                false
            }
            _ => {
                *slot = Some(FlowEnd {
                    flow: segment.flow,
                    sent_end: end,
                });
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    const ACK: u8 = 0x10;

    /// An IPv4 TCP segment from 198.18.0.1:`source_port` to 198.18.0.2:443.
    fn segment_v4(source_port: u16, seq: u32, flags: u8, payload: usize) -> Vec<u8> {
        let total = 20 + 20 + payload;
        let mut packet = vec![0u8; total];
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        packet[6] = 0x40;
        packet[9] = PROTOCOL_TCP;
        packet[12..16].copy_from_slice(&[198, 18, 0, 1]);
        packet[16..20].copy_from_slice(&[198, 18, 0, 2]);
        let tcp = &mut packet[20..];
        tcp[0..2].copy_from_slice(&source_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        packet
    }

    fn segment_v6(seq: u32, payload: usize) -> Vec<u8> {
        let len = 20 + payload;
        let mut packet = vec![0u8; 40 + len];
        packet[0] = 0x60;
        packet[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        packet[6] = PROTOCOL_TCP;
        packet[8..24].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        packet[24..40].copy_from_slice(&Ipv6Addr::UNSPECIFIED.octets());
        let tcp = &mut packet[40..];
        tcp[0..2].copy_from_slice(&50000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = ACK;
        packet
    }

    #[test]
    fn a_segment_is_parsed_with_its_flow_and_sequence_space() {
        let segment = tcp_segment(&segment_v4(40000, 7, ACK, 100)).unwrap();
        assert_eq!(segment.seq, 7);
        assert_eq!(segment.seq_len, 100);
        assert_eq!(segment.flow.source, IpAddr::from([198, 18, 0, 1]));
        assert_eq!(segment.flow.destination, IpAddr::from([198, 18, 0, 2]));
        assert_eq!(
            (segment.flow.source_port, segment.flow.destination_port),
            (40000, 443)
        );
        let syn = tcp_segment(&segment_v4(40000, 7, TCP_SYN, 0)).unwrap();
        assert_eq!(syn.seq_len, 1, "a SYN takes one sequence number");
        let fin = tcp_segment(&segment_v4(40000, 7, TCP_FIN | ACK, 10)).unwrap();
        assert_eq!(fin.seq_len, 11, "and so does a FIN");
        let v6 = tcp_segment(&segment_v6(9, 50)).unwrap();
        assert_eq!((v6.seq, v6.seq_len), (9, 50));
        assert_eq!(v6.flow.source, IpAddr::from(Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn anything_but_a_whole_tcp_header_is_no_segment() {
        let mut udp = segment_v4(40000, 0, ACK, 100);
        udp[9] = 17;
        assert_eq!(tcp_segment(&udp), None);
        let mut short_offset = segment_v4(40000, 0, ACK, 100);
        short_offset[32] = 4 << 4;
        assert_eq!(
            tcp_segment(&short_offset),
            None,
            "data offset below 5 words"
        );
        let mut long_offset = segment_v4(40000, 0, ACK, 0);
        long_offset[32] = 15 << 4;
        assert_eq!(tcp_segment(&long_offset), None, "header past the packet");
        assert_eq!(tcp_segment(&segment_v4(40000, 0, ACK, 0)[..30]), None);
        assert_eq!(tcp_segment(&[]), None);
        assert_eq!(tcp_segment(&[0x45]), None);
    }

    #[test]
    fn data_sent_again_is_a_retransmission_and_new_data_is_not() {
        let mut flows = TcpFlows::default();
        for seq in (1000..11000).step_by(1000) {
            assert!(!flows.is_retransmission(&segment_v4(40000, seq, ACK, 1000)));
        }
        assert!(flows.is_retransmission(&segment_v4(40000, 3000, ACK, 1000)));
        assert!(
            flows.is_retransmission(&segment_v4(40000, 10000, ACK, 1000)),
            "the newest segment again (a tail loss probe)"
        );
        assert!(
            flows.is_retransmission(&segment_v4(40000, 2500, ACK, 500)),
            "part of a segment, repacketized"
        );
        assert!(
            !flows.is_retransmission(&segment_v4(40000, 10500, ACK, 1000)),
            "reaches past what was sent: new data"
        );
        assert!(!flows.is_retransmission(&segment_v4(40000, 11500, ACK, 1000)));
    }

    #[test]
    fn acknowledgements_and_other_flows_are_never_retransmissions() {
        let mut flows = TcpFlows::default();
        assert!(!flows.is_retransmission(&segment_v4(40000, 5000, ACK, 1000)));
        for _ in 0..3 {
            assert!(!flows.is_retransmission(&segment_v4(40000, 6000, ACK, 0)));
        }
        assert!(
            !flows.is_retransmission(&segment_v4(40001, 5000, ACK, 1000)),
            "another source port is another flow"
        );
        assert!(!flows.is_retransmission(&segment_v6(5000, 1000)));
        assert!(flows.is_retransmission(&segment_v6(5000, 1000)));
        let mut udp = segment_v4(40000, 5000, ACK, 1000);
        udp[9] = 17;
        assert!(!flows.is_retransmission(&udp));
        assert!(!flows.is_retransmission(&udp));
    }

    #[test]
    fn a_repeated_syn_is_a_retransmission() {
        let mut flows = TcpFlows::default();
        assert!(!flows.is_retransmission(&segment_v4(40000, 99, TCP_SYN, 0)));
        assert!(flows.is_retransmission(&segment_v4(40000, 99, TCP_SYN, 0)));
        assert!(!flows.is_retransmission(&segment_v4(40000, 100, ACK, 1000)));
    }

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        let mut flows = TcpFlows::default();
        let before_wrap = u32::MAX - 1499;
        assert!(!flows.is_retransmission(&segment_v4(40000, before_wrap, ACK, 1000)));
        // Ends past 2^32: new data, although its end is numerically small.
        assert!(!flows.is_retransmission(&segment_v4(40000, before_wrap + 1000, ACK, 1000)));
        assert!(flows.is_retransmission(&segment_v4(40000, before_wrap, ACK, 1000)));
        assert!(!flows.is_retransmission(&segment_v4(40000, 500, ACK, 1000)));
    }

    #[test]
    fn many_flows_at_once_are_told_apart_or_forgotten_but_never_confused() {
        // More flows than slots: some entries are replaced, so a flow may lose its
        // record, but a first segment is never taken for a retransmission.
        let mut flows = TcpFlows::default();
        for port in 0..(2 * SLOTS as u16) {
            assert!(!flows.is_retransmission(&segment_v4(port, 1000, ACK, 100)));
        }
        let remembered = (0..(2 * SLOTS as u16))
            .filter(|&port| flows.is_retransmission(&segment_v4(port, 1000, ACK, 100)))
            .count();
        assert!(remembered > 0 && remembered <= SLOTS, "{remembered}");
    }
}
