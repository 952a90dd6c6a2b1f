//! Inner-packet inspection (addresses and length, used to route and to check a
//! peer's allowed addresses), classification (latency-critical or bulk), the
//! send queue's retransmission tracking and its ECN marks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::session::classify::classify;
use mptund::session::ecn::mark_congestion_experienced;
use mptund::session::inner::{inspect, InnerError};
use mptund::session::tcp_flows::{tcp_segment, TcpFlows};

fuzz_target!(|packet: &[u8]| {
    match inspect(packet) {
        Ok(header) => {
            assert!(header.total_len <= packet.len());
            let minimum = if header.source.is_ipv4() { 20 } else { 40 };
            assert!(header.total_len >= minimum);
            assert_eq!(header.source.is_ipv4(), header.destination.is_ipv4());
            assert_eq!(header.source.is_ipv4(), packet[0] >> 4 == 4);
        }
        Err(InnerError::Truncated { len }) => assert_eq!(len, packet.len()),
        Err(InnerError::UnknownVersion(version)) => assert!(version != 4 && version != 6),
        Err(InnerError::BadLength { .. }) => {}
    }
    let _ = classify(packet);
    // The first sight of a segment is new data; the same segment again is a
    // retransmission exactly when it occupies sequence space.
    let mut flows = TcpFlows::default();
    assert!(!flows.is_retransmission(packet));
    let occupies_sequence_space = tcp_segment(packet).is_some_and(|segment| segment.seq_len > 0);
    assert_eq!(flows.is_retransmission(packet), occupies_sequence_space);
    check_ecn_mark(packet);
});

/// A mark changes the ECN bits (and an IPv4 header's checksum) and nothing else, keeps a
/// valid IPv4 header checksum valid, and a second mark changes nothing.
fn check_ecn_mark(packet: &[u8]) {
    let mut marked = packet.to_vec();
    if !mark_congestion_experienced(&mut marked) {
        assert_eq!(marked, packet, "a packet that is not marked is left alone");
        return;
    }
    assert_eq!(marked.len(), packet.len());
    let ipv4 = packet[0] >> 4 == 4;
    for (index, (before, after)) in packet.iter().zip(&marked).enumerate() {
        let may_change = index == 1 || (ipv4 && (index == 10 || index == 11));
        assert!(may_change || before == after, "byte {index} changed");
    }
    if ipv4 {
        assert_eq!(marked[1] & 0b11, 0b11);
        let header_len = usize::from(packet[0] & 0x0f) * 4;
        if let (Some(before), Some(after)) = (packet.get(..header_len), marked.get(..header_len)) {
            if ones_complement_sum(before) == 0xffff {
                assert_eq!(
                    ones_complement_sum(after),
                    0xffff,
                    "the checksum stays valid"
                );
            }
        }
    } else {
        assert_eq!((marked[1] >> 4) & 0b11, 0b11);
    }
    let again = marked.clone();
    assert!(mark_congestion_experienced(&mut marked));
    assert_eq!(marked, again, "marking twice is marking once");
}

fn ones_complement_sum(header: &[u8]) -> u16 {
    let mut sum = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum::<u32>();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}
