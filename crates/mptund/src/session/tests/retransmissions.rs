//! Inner TCP retransmissions in the send queue: the sojourn limit does not drop them,
//! and they keep their place in line.

use super::*;
use crate::session::SendQueueConfig;

/// An IPv4 TCP segment from the server's inner address to the client's, carrying
/// `SEGMENT` bytes from sequence number `seq`.
pub(super) fn tcp_segment(seq: u32) -> Vec<u8> {
    let total = 20 + 20 + SEGMENT as usize;
    let mut packet = vec![0u8; total];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet[6] = 0x40;
    packet[9] = 6;
    packet[12..16].copy_from_slice(&SERVER_INNER.octets());
    packet[16..20].copy_from_slice(&CLIENT_INNER.octets());
    packet[20..22].copy_from_slice(&5201u16.to_be_bytes());
    packet[22..24].copy_from_slice(&40000u16.to_be_bytes());
    packet[24..28].copy_from_slice(&seq.to_be_bytes());
    packet[32] = 5 << 4;
    packet[33] = 0x10;
    packet
}

fn seq_of(packet: &[u8]) -> u32 {
    u32::from_be_bytes(packet[24..28].try_into().unwrap())
}

pub(super) const SEGMENT: u32 = 1000;

/// One 20 ms path (on the simulator) with the send queue `configure` leaves, a
/// second after setup.
pub(super) fn one_path_with(configure: impl FnOnce(&mut SendQueueConfig)) -> Sim {
    let mut session = super::super::testing::session_settings(
        SchedulerChoice::EarliestArrival(Default::default()),
        Duration::from_millis(200),
        MTU,
    );
    configure(&mut session.send_queue);
    let mut sim = Sim::established(SimConfig::new(session, vec![PathConfig::delay_ms(20)]));
    sim.run_for(Duration::from_secs(1));
    sim
}

/// One 20 ms path whose send queue drops what waited 30 ms; CoDel stays out of it.
fn one_path() -> Sim {
    one_path_with(|send_queue| {
        send_queue.max_sojourn = Duration::from_millis(30);
        send_queue.codel.target = Duration::from_secs(5);
    })
}

/// Sends segments 0..60 at once, then segment 5 again: it waits behind the queued bulk.
fn burst_then_retransmission(sim: &mut Sim) {
    for index in 0..60 {
        sim.server_sends(&tcp_segment(index * SEGMENT));
    }
    sim.server_sends(&tcp_segment(5 * SEGMENT));
    sim.run_for(Duration::from_secs(2));
}

#[test]
fn the_sojourn_limit_spares_a_retransmission_and_it_keeps_its_place() {
    let mut sim = one_path();
    burst_then_retransmission(&mut sim);
    let sojourn_drops = sim
        .server()
        .core()
        .drops()
        .get(DropReason::SendQueueSojourn);
    assert!(sojourn_drops > 0, "bulk that waited as long was dropped");
    let seqs: Vec<u32> = sim.client_tun().iter().map(|p| seq_of(&p.bytes)).collect();
    assert_eq!(
        seqs.iter().filter(|&&seq| seq == 5 * SEGMENT).count(),
        2,
        "the retransmission arrived: {seqs:?}"
    );
    assert_eq!(
        seqs.last(),
        Some(&(5 * SEGMENT)),
        "after all the bulk queued before it"
    );
    assert_eq!(seqs.len() as u64 + sojourn_drops, 61);
}
