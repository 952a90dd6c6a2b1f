//! The send queue's AQM marks an ECN-capable inner packet Congestion Experienced where
//! it would drop a packet that is not.

use super::retransmissions::{one_path_with, tcp_segment, SEGMENT};
use super::*;

const NOT_ECT: u8 = 0b00;
const ECT_0: u8 = 0b10;
const CE: u8 = 0b11;

/// One 20 ms path whose controller has left slow start (a standing queue is then the
/// inner flow's, so CoDel acts), a CoDel that acts within milliseconds, and a sojourn
/// limit far above what the test queues.
fn one_path_out_of_slow_start() -> Net {
    let mut net = one_path_with(|send_queue| {
        send_queue.max_sojourn = Duration::from_secs(5);
        send_queue.codel.target = Duration::from_millis(1);
        send_queue.codel.interval = Duration::from_millis(10);
    });
    // One datagram lost: the path's CUBIC leaves slow start.
    net.lose_to_client[0] = 1;
    for index in 0..20 {
        net.server_sends_segment_with_tos(index * SEGMENT, NOT_ECT);
        net.run_for(Duration::from_millis(5));
    }
    net.run_for(Duration::from_millis(500));
    net.client_received.clear();
    net
}

impl Net {
    fn server_sends_segment_with_tos(&mut self, seq: u32, tos: u8) {
        let mut segment = tcp_segment(seq);
        segment[1] = tos;
        self.server_sends_inner(&segment);
    }
}

/// Sends 400 segments with `tos` at once; returns the network after they drained.
fn burst(tos: u8) -> Net {
    let mut net = one_path_out_of_slow_start();
    for index in 0..400 {
        net.server_sends_segment_with_tos((100 + index) * SEGMENT, tos);
    }
    net.run_for(Duration::from_secs(3));
    net
}

#[test]
fn a_standing_queue_of_packets_that_are_not_ecn_capable_is_dropped_from() {
    let net = burst(NOT_ECT);
    let aqm_drops = net.server.drops().get(DropReason::SendQueueAqm);
    assert!(aqm_drops > 0, "CoDel acted on the burst");
    assert_eq!(net.client_received.len() as u64 + aqm_drops, 400);
    assert_eq!(net.server.report(net.now).sessions[0].ecn_marked, 0);
}

#[test]
fn a_standing_queue_of_ecn_capable_packets_is_marked_not_dropped() {
    let net = burst(ECT_0);
    assert_eq!(net.server.drops().get(DropReason::SendQueueAqm), 0);
    assert_eq!(net.client_received.len(), 400, "every packet arrived");
    let marked = net
        .client_received
        .iter()
        .filter(|packet| packet[1] & 0b11 == CE)
        .count();
    assert!(marked > 0, "CoDel marked where it would have dropped");
    assert!(
        net.client_received
            .iter()
            .all(|packet| matches!(packet[1] & 0b11, ECT_0 | CE)),
        "nothing else changed"
    );
    assert_eq!(
        net.server.report(net.now).sessions[0].ecn_marked,
        marked as u64
    );
}
