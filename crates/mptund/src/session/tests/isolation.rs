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

impl Net {
    /// Seals `body` (metadata and what follows it) as the client's session would, for
    /// the path with id `path_id`.
    fn forge(&mut self, packet_type: PacketType, path_id: u8, body: &[u8]) -> Vec<u8> {
        let session = self.client.session_mut().expect("established");
        let (header, counter, key) = session.keys.next_header(packet_type, path_id);
        let mut sealed = body.to_vec();
        let tag = key.seal_in_place(&header, counter, &mut sealed);
        [header.as_slice(), &sealed, &tag].concat()
    }

    fn forge_control(&mut self, path_id: u8, frames: &[Frame<'_>]) -> Vec<u8> {
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
        self.forge(PacketType::Control, path_id, &body)
    }

    /// Hands the server every datagram of `batch` from `from`, then flushes once, as
    /// the daemon does after a batch of reads. Returns what the server sent to `from`
    /// in answer: (datagrams, bytes).
    fn server_answers(&mut self, from: SocketAddr, batch: &[Vec<u8>]) -> (usize, usize) {
        for bytes in batch {
            let received = Received {
                socket: 0,
                from,
                local_ip: Some(SERVER_ADDR.ip()),
            };
            let packet = self.server.pool().take_copy(bytes).unwrap();
            self.server
                .handle_datagram(self.now, received, packet, &mut self.out);
        }
        self.server.flush_acks(self.now, &mut self.out);
        seal_all(&mut self.server, self.now, &mut self.out);
        let to_from: Vec<usize> = self
            .out
            .iter()
            .filter(|outgoing| outgoing.destination == from)
            .map(|outgoing| outgoing.packet.len())
            .collect();
        self.transmit(false);
        self.collect();
        (to_from.len(), to_from.iter().sum())
    }
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
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let flood = net.forge_control(0, &challenges(150));
    let (datagrams, bytes) = net.server_answers(client_addr(0), std::slice::from_ref(&flood));
    assert_eq!(datagrams, 1, "one PathResponse for 150 challenges");
    assert!(bytes <= flood.len(), "{bytes} bytes for {}", flood.len());
    // A hundred of them in one batch still draw one answer per path.
    let batch: Vec<Vec<u8>> = (0..100)
        .map(|_| net.forge_control(0, &challenges(150)))
        .collect();
    let (datagrams, _) = net.server_answers(client_addr(0), &batch);
    assert_eq!(datagrams, 1);
}

#[test]
fn a_new_paths_first_address_gets_at_most_three_times_what_came_from_it() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    // A new path whose first datagram claims to come from someone else.
    let mut frames = challenges(150);
    frames.push(Frame::Ping { ping_id: 1 });
    let flood = net.forge_control(5, &frames);
    let (_, bytes) = net.server_answers(VICTIM, std::slice::from_ref(&flood));
    assert!(
        bytes <= AMPLIFICATION_FACTOR as usize * flood.len(),
        "{bytes} bytes to an address that sent {}",
        flood.len()
    );
    // Until the address answers a challenge the path carries nothing more.
    net.run_for(Duration::from_secs(2));
    assert!(net.sent_to(VICTIM) <= AMPLIFICATION_FACTOR as usize * flood.len());
    let path = net
        .server_paths()
        .into_iter()
        .find(|path| path.name == "path5")
        .unwrap();
    assert_eq!(path.remote, None);
}

#[test]
fn gave_up_frames_cost_the_window_not_the_counts_they_carry() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let frames: Vec<Frame<'static>> = (0..184u32)
        .map(|n| Frame::GaveUp {
            first_seq: n.wrapping_mul(7919),
            count: u16::MAX,
        })
        .collect();
    let flood = net.forge_control(0, &frames);
    let before = net.server.work_units();
    net.server_answers(client_addr(0), &[flood]);
    let work = net.server.work_units() - before;
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
        net.client_sends(tag, 500);
    }
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.server_received.len(), 20);
}

#[test]
fn more_frames_than_a_datagram_may_carry_are_dropped_and_counted() {
    let mut net = Net::established(&[10], Duration::from_millis(50));
    // Frames of a type this side does not know: three bytes each.
    let unknown: Vec<Frame<'static>> = (0..MAX_FRAMES_PER_DATAGRAM + 50)
        .map(|_| Frame::Unknown {
            frame_type: 0x7e,
            body: &[],
        })
        .collect();
    let flood = net.forge_control(0, &unknown);
    net.server_answers(client_addr(0), &[flood]);
    assert_eq!(net.server.drops().get(DropReason::TooManyFrames), 1);
}

#[test]
fn parity_on_a_server_without_parity_makes_no_decoder_and_paths_stop_at_the_limit() {
    let mut settings = settings(Duration::from_millis(50));
    settings.parity_on_lossy_paths = false;
    let mut net = Net::established_with(&[10, 10], settings);
    net.server.set_limits(ServerLimits {
        max_paths_per_session: 4,
        ..ServerLimits::default()
    });
    let (held_before, _) = net.server.memory_held();
    let mut body = vec![0u8; PARITY_META_LEN + 1200];
    let meta = ParityMeta {
        first_pn: 0,
        members: 0b11,
        seq_xor: 0,
    };
    meta.emit((&mut body[..PARITY_META_LEN]).try_into().unwrap());
    for path_id in 1..=63u8 {
        let parity = net.forge(PacketType::Parity, path_id, &body);
        net.server_answers(client_addr(0), &[parity]);
    }
    assert_eq!(net.server_paths().len(), 4, "two paths and two new ones");
    assert_eq!(net.server.memory_held().0, held_before);
    assert!(net.server.drops().get(DropReason::ParityNotEnabled) >= 2);
    assert!(net.server.drops().get(DropReason::TooManyPaths) >= 59);
    // The client's own paths still carry its stream.
    for tag in 0..20 {
        net.client_sends(tag, 500);
    }
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.server_received.len(), 20);
}

#[test]
fn a_session_holding_gaps_open_keeps_within_its_memory_share() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let buffer_len = net.server.pool().buffer_len() as u64;
    net.server.set_limits(ServerLimits {
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
            net.forge(PacketType::Data, 0, &body)
        })
        .collect();
    for chunk in batch.chunks(50) {
        net.server_answers(client_addr(0), chunk);
        let (held, budget) = net.server.memory_held();
        assert!(held <= budget, "{held} buffers held, budget {budget}");
    }
    // Without the budget the reorder buffer would hold all 1,000 behind their gaps;
    // at its share the session gave its gaps up and handed the packets on.
    assert!(
        net.server_received.len() >= 800,
        "{} delivered",
        net.server_received.len()
    );
}

impl Net {
    /// Bytes the server sent to `address`, where no client path is.
    fn sent_to(&self, address: SocketAddr) -> usize {
        self.sent_elsewhere
            .iter()
            .filter(|(to, _)| *to == address)
            .map(|(_, len)| len)
            .sum()
    }
}
