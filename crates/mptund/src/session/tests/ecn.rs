//! The send queue's AQM marks an ECN-capable inner packet Congestion Experienced where
//! it would drop a packet that is not.

use super::retransmissions::{one_path_with, tcp_segment, SEGMENT};
use super::*;

const NOT_ECT: u8 = 0b00;
const ECT_0: u8 = 0b10;
const CE: u8 = 0b11;

/// One 20 ms path whose controller has left slow start (a standing queue is then the
/// inner flow's, so CoDel acts), a CoDel that acts within milliseconds, and a sojourn
/// limit far above what the test queues. Also gives how many packets the client's
/// TUN had by then.
fn one_path_out_of_slow_start() -> (Sim, usize) {
    let mut sim = one_path_with(|send_queue| {
        send_queue.max_sojourn = Duration::from_secs(5);
        send_queue.codel.target = Duration::from_millis(1);
        send_queue.codel.interval = Duration::from_millis(10);
    });
    // One datagram lost: the path's CUBIC leaves slow start.
    sim.lose_next_to_client(0, 1);
    for index in 0..20 {
        server_sends_segment_with_tos(&mut sim, index * SEGMENT, NOT_ECT);
        sim.run_for(Duration::from_millis(5));
    }
    sim.run_for(Duration::from_millis(500));
    let received = sim.client_tun().len();
    (sim, received)
}

fn server_sends_segment_with_tos(sim: &mut Sim, seq: u32, tos: u8) {
    let mut segment = tcp_segment(seq);
    segment[1] = tos;
    sim.server_sends(&segment);
}

/// Sends 400 segments with `tos` at once; returns the simulator after they drained
/// and the packets the client's TUN got from the burst.
fn burst(tos: u8) -> (Sim, Vec<Vec<u8>>) {
    let (mut sim, before) = one_path_out_of_slow_start();
    for index in 0..400 {
        server_sends_segment_with_tos(&mut sim, (100 + index) * SEGMENT, tos);
    }
    sim.run_for(Duration::from_secs(3));
    let received = sim.client_tun()[before..]
        .iter()
        .map(|delivery| delivery.bytes.clone())
        .collect();
    (sim, received)
}

#[test]
fn a_standing_queue_of_packets_that_are_not_ecn_capable_is_dropped_from() {
    let (sim, received) = burst(NOT_ECT);
    let aqm_drops = sim.server().core().drops().get(DropReason::SendQueueAqm);
    assert!(aqm_drops > 0, "CoDel acted on the burst");
    assert_eq!(received.len() as u64 + aqm_drops, 400);
    assert_eq!(sim.server_report().sessions[0].ecn_marked, 0);
}

#[test]
fn a_standing_queue_of_ecn_capable_packets_is_marked_not_dropped() {
    let (sim, received) = burst(ECT_0);
    assert_eq!(sim.server().core().drops().get(DropReason::SendQueueAqm), 0);
    assert_eq!(received.len(), 400, "every packet arrived");
    let marked = received
        .iter()
        .filter(|packet| packet[1] & 0b11 == CE)
        .count();
    assert!(marked > 0, "CoDel marked where it would have dropped");
    assert!(
        received
            .iter()
            .all(|packet| matches!(packet[1] & 0b11, ECT_0 | CE)),
        "nothing else changed"
    );
    assert_eq!(sim.server_report().sessions[0].ecn_marked, marked as u64);
}
