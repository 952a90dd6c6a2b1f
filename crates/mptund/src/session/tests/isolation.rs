//! A peer that holds the keys and sends what a real client never does: what one of its
//! datagrams may cost the server, and draw back, is bounded whatever it carries.
//! Each test forges datagrams with the client's real session keys.

use super::*;
use crate::session::migration::AMPLIFICATION_FACTOR;
use crate::session::receive::MAX_FRAMES_PER_DATAGRAM;
use crate::session::share::ServerLimits;
use crate::wire::{
    self, ControlMeta, DataMeta, Frame, PacketType, ParityMeta, CONTROL_META_LEN, DATA_META_LEN,
    PARITY_META_LEN,
};

/// Someone else's address, where a client that spoofs its source aims the answers.
const VICTIM: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 200, 9)), 41999);

fn forge_control(sim: &mut Sim, path_id: u8, frames: &[Frame<'_>]) -> Vec<u8> {
    let mut body = vec![0u8; CONTROL_META_LEN];
    let meta = ControlMeta {
        path_pn: 0,
        tx_time_us: 0,
    };
    meta.emit((&mut body[..CONTROL_META_LEN]).try_into().unwrap());
    let mut frame = [0u8; 64];
    for each in frames {
        let len = wire::write_frame(&mut frame, each).unwrap();
        body.extend_from_slice(&frame[..len]);
    }
    forge(sim, 0, PacketType::Control, path_id, &body)
}

/// Hands the server every datagram of `batch` from `from` in one batch of reads.
/// Returns what the server sent to `from` in answer: (datagrams, bytes).
fn server_answers(sim: &mut Sim, from: SocketAddr, batch: &[Vec<u8>]) -> (usize, usize) {
    sim.capture_server_datagrams();
    sim.inject_batch_to_server(batch.iter().map(|bytes| (from, bytes.as_slice())));
    let to_from: Vec<usize> = sim
        .server_datagrams()
        .iter()
        .filter(|captured| captured.destination == from)
        .map(|captured| captured.bytes.len())
        .collect();
    (to_from.len(), to_from.iter().sum())
}

fn challenges(count: usize) -> Vec<Frame<'static>> {
    (0..count)
        .map(|n| Frame::PathChallenge {
            token: (n as u64).to_be_bytes(),
        })
        .collect()
}

#[test]
fn a_datagram_of_challenges_draws_one_answer_no_larger_than_itself() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let flood = forge_control(&mut sim, 0, &challenges(150));
    let (datagrams, bytes) = server_answers(&mut sim, client_addr(0), std::slice::from_ref(&flood));
    assert_eq!(datagrams, 1, "one PathResponse for 150 challenges");
    assert!(bytes <= flood.len(), "{bytes} bytes for {}", flood.len());
    // A hundred of them in one batch still draw one answer per path.
    let batch: Vec<Vec<u8>> = (0..100)
        .map(|_| forge_control(&mut sim, 0, &challenges(150)))
        .collect();
    let (datagrams, _) = server_answers(&mut sim, client_addr(0), &batch);
    assert_eq!(datagrams, 1);
}

#[test]
fn a_new_paths_first_address_gets_at_most_three_times_what_came_from_it() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    // A new path whose first datagram claims to come from someone else.
    let mut frames = challenges(150);
    frames.push(Frame::Ping { ping_id: 1 });
    let flood = forge_control(&mut sim, 5, &frames);
    let (_, bytes) = server_answers(&mut sim, VICTIM, std::slice::from_ref(&flood));
    assert!(
        bytes <= AMPLIFICATION_FACTOR as usize * flood.len(),
        "{bytes} bytes to an address that sent {}",
        flood.len()
    );
    // Until the address answers a challenge the path carries nothing more.
    sim.run_for(Duration::from_secs(2));
    assert!(sim.server_sent_elsewhere(VICTIM) <= AMPLIFICATION_FACTOR as usize * flood.len());
    let path = server_paths(&sim)
        .into_iter()
        .find(|path| path.name == "path5")
        .unwrap();
    assert_eq!(path.remote, None);
}

#[test]
fn gave_up_frames_cost_the_window_not_the_counts_they_carry() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let frames: Vec<Frame<'static>> = (0..184u32)
        .map(|n| Frame::GaveUp {
            first_seq: n.wrapping_mul(7919),
            count: u16::MAX,
        })
        .collect();
    let flood = forge_control(&mut sim, 0, &frames);
    let before = sim.server().core().work_units();
    server_answers(&mut sim, client_addr(0), &[flood]);
    let work = sim.server().core().work_units() - before;
    // Each frame is one step of the session; the frames together give up at most
    // one window (4,096 sequence numbers), marked a word at a time, and each call
    // of the reorder buffer costs at most a fixed amount besides.
    let window_words = 4096 / 64;
    let calls = 2;
    let bound = MAX_FRAMES_PER_DATAGRAM as u64
        + mptund_sched::REORDER_WORK_PER_CALL * (window_words + 1) * calls;
    assert!(
        work <= bound,
        "{work} steps for one datagram, bound {bound}"
    );
    // The stream goes on.
    for tag in 0..20 {
        client_sends(&mut sim, tag, 500);
    }
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.server_tun().len(), 20);
}

#[test]
fn more_frames_than_a_datagram_may_carry_are_dropped_and_counted() {
    let mut sim = established(&[10], Duration::from_millis(50));
    // Frames of a type this side does not know: three bytes each.
    let unknown: Vec<Frame<'static>> = (0..MAX_FRAMES_PER_DATAGRAM + 50)
        .map(|_| Frame::Unknown {
            frame_type: 0x7e,
            body: &[],
        })
        .collect();
    let flood = forge_control(&mut sim, 0, &unknown);
    server_answers(&mut sim, client_addr(0), &[flood]);
    assert_eq!(
        sim.server().core().drops().get(DropReason::TooManyFrames),
        1
    );
}

#[test]
fn parity_on_a_server_without_parity_makes_no_decoder_and_paths_stop_at_the_limit() {
    let mut settings = settings(Duration::from_millis(50));
    settings.parity_on_lossy_paths = false;
    let mut sim = established_with(&[10, 10], settings);
    sim.server_mut().core_mut().set_limits(ServerLimits {
        max_paths_per_session: 4,
        ..ServerLimits::default()
    });
    let (held_before, _) = sim.server().core().memory_held();
    let mut body = vec![0u8; PARITY_META_LEN + 1200];
    let meta = ParityMeta {
        first_pn: 0,
        members: 0b11,
        seq_xor: 0,
    };
    meta.emit((&mut body[..PARITY_META_LEN]).try_into().unwrap());
    for path_id in 1..=63u8 {
        let parity = forge(&mut sim, 0, PacketType::Parity, path_id, &body);
        server_answers(&mut sim, client_addr(0), &[parity]);
    }
    assert_eq!(server_paths(&sim).len(), 4, "two paths and two new ones");
    assert_eq!(sim.server().core().memory_held().0, held_before);
    assert!(
        sim.server()
            .core()
            .drops()
            .get(DropReason::ParityNotEnabled)
            >= 2
    );
    assert!(sim.server().core().drops().get(DropReason::TooManyPaths) >= 59);
    // The client's own paths still carry its stream.
    for tag in 0..20 {
        client_sends(&mut sim, tag, 500);
    }
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.server_tun().len(), 20);
}

#[test]
fn a_session_holding_gaps_open_keeps_within_its_memory_share() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let buffer_len = sim.server_mut().pool().buffer_len() as u64;
    sim.server_mut().core_mut().set_limits(ServerLimits {
        memory_budget_bytes: 100 * buffer_len,
        ..ServerLimits::default()
    });
    // Every other sequence number, far ahead of the stream: each held behind a gap.
    let inner = inner_packet(CLIENT_INNER, SERVER_INNER, 1, 200);
    let batch: Vec<Vec<u8>> = (0..1000u32)
        .map(|n| {
            let mut body = vec![0u8; DATA_META_LEN];
            let meta = DataMeta {
                path_pn: 10_000 + n,
                tx_time_us: 0,
                seq: 100 + 2 * n,
            };
            meta.emit((&mut body[..DATA_META_LEN]).try_into().unwrap());
            body.extend_from_slice(&inner);
            forge(&mut sim, 0, PacketType::Data, 0, &body)
        })
        .collect();
    for chunk in batch.chunks(50) {
        server_answers(&mut sim, client_addr(0), chunk);
        let (held, budget) = sim.server().core().memory_held();
        assert!(held <= budget, "{held} buffers held, budget {budget}");
    }
    // Without the budget the reorder buffer would hold all 1,000 behind their gaps;
    // at its share the session gave its gaps up and handed the packets on.
    assert!(
        sim.server_tun().len() >= 800,
        "{} delivered",
        sim.server_tun().len()
    );
}
