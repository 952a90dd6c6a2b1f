//! Inner-packet inspection (addresses and length, used to route and to check a
//! peer's allowed addresses), classification (latency-critical or bulk) and the
//! send queue's retransmission tracking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::session::classify::classify;
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
});
