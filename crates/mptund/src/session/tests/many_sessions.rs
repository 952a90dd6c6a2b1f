//! One server with many clients. Each session runs on its own deadlines in the
//! server's timer heap: a silent session expires on time while another carries
//! traffic, and the busy one is not disturbed.

use super::*;
use crate::session::fec;
use crate::session::share::ServerLimits;
use crate::sim::{client_inner, nth_client_addr};
use crate::wire::{PacketType, ParityMeta, PARITY_META_LEN};

const CLIENTS: usize = 24;
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Clients on one path each to a server that forgets a session silent for
/// `IDLE_TIMEOUT`, on a network without delay.
fn hub() -> Sim {
    let mut config = config(&[0], settings(Duration::from_millis(50)));
    config.clients = CLIENTS;
    let mut sim = Sim::new(config);
    sim.restart_server_with(|server| server.session_idle_timeout = IDLE_TIMEOUT);
    sim
}

fn set_memory_budget(sim: &mut Sim, buffers: usize) {
    let buffer_len = sim.server_mut().pool().buffer_len() as u64;
    sim.server_mut().core_mut().set_limits(ServerLimits {
        max_paths_per_session: 4,
        memory_budget_bytes: buffers as u64 * buffer_len,
    });
}

#[test]
fn silent_sessions_expire_on_time_while_another_carries_traffic() {
    let mut sim = hub();
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.server_report().sessions.len(), CLIENTS);

    // Every client but the first goes away; the first sends ten packets a second.
    for client in 1..CLIENTS {
        sim.cut_nth_client(client, true);
    }
    let went_silent = sim.now();
    let mut tag = 0;
    let mut step = |sim: &mut Sim, until: Duration| {
        while sim.now() < went_silent + until {
            client_sends(sim, tag, 200);
            tag += 1;
            sim.run_for(Duration::from_millis(100));
        }
    };
    // Each silent client's last keepalive came up to a second before it went silent.
    step(&mut sim, IDLE_TIMEOUT - Duration::from_millis(1100));
    assert_eq!(
        sim.server().core().session_count(),
        CLIENTS,
        "expired early"
    );
    step(&mut sim, IDLE_TIMEOUT + Duration::from_secs(2));
    assert_eq!(
        sim.server().core().session_count(),
        1,
        "silent sessions outlived their timeout"
    );

    let report = sim.server_report();
    assert_eq!(report.sessions[0].peer, "client");
    assert_eq!(tags(sim.server_tun()), (0..tag).collect::<Vec<_>>());
}

#[test]
fn parity_decoders_of_one_session_give_way_to_another_sessions_share() {
    let mut sim = hub();
    sim.run_for(Duration::from_secs(2));
    // Room for four decoders and a few packets besides.
    set_memory_budget(&mut sim, 4 * fec::DECODER_BUFFERS + 8);

    // Client 1 makes the server keep a parity decoder on each of four paths: one
    // Parity datagram each, and it alone is busy, so they all fit.
    let mut body = vec![0u8; PARITY_META_LEN + 200];
    let meta = ParityMeta {
        first_pn: 0,
        members: 0b11,
        seq_xor: 0,
    };
    meta.emit((&mut body[..PARITY_META_LEN]).try_into().unwrap());
    let parity: Vec<Vec<u8>> = (0..4u8)
        .map(|path_id| forge(&mut sim, 1, PacketType::Parity, path_id, &body))
        .collect();
    let from = nth_client_addr(1, 0);
    sim.inject_batch_to_server(parity.iter().map(|bytes| (from, bytes.as_slice())));
    sim.run_for(Duration::ZERO);
    assert_eq!(
        sim.server().core().memory_held().0,
        4 * fec::DECODER_BUFFERS
    );

    // Client 0's first packet is late: the other 30 wait behind it. Its share is half
    // the budget, which the other session's decoders must give it.
    sim.capture_client_datagrams();
    sim.cut_path(0, true);
    client_sends(&mut sim, 0, 200);
    sim.cut_path(0, false);
    let (path, late) = last_data_datagram(&sim);
    for tag in 1..=30 {
        client_sends(&mut sim, tag, 200);
    }
    sim.run_for(Duration::ZERO);
    sim.inject_to_server(path, &late);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(
        tags(sim.server_tun()),
        (0..=30).collect::<Vec<u32>>(),
        "in order, none lost"
    );
    let (held, budget) = sim.server().core().memory_held();
    assert!(held <= budget, "{held} buffers held, budget {budget}");
}

/// A session's new inner packets are buffers too: each waits for its socket and is
/// then kept for repair until acknowledged. Eight sessions are sent packets their
/// clients never acknowledge, each up to its window of 10 or more: the server refuses
/// (and counts) what a session's share cannot hold, and the sessions never hold more
/// than the budget. Before, a packet from the TUN was placed without a look at the
/// share, and the fuzzer's server_core target found the sessions holding 97 buffers
/// of a 96-buffer budget.
#[test]
fn packets_from_the_tun_stay_within_the_sessions_share() {
    const RECEIVERS: usize = 8;
    let mut sim = hub();
    sim.run_for(Duration::from_secs(2));
    set_memory_budget(&mut sim, 40);
    // Lost on the way: nothing is acknowledged.
    for client in 0..RECEIVERS {
        sim.cut_nth_client(client, true);
    }
    for tag in 0..80 {
        for client in 0..RECEIVERS {
            sim.server_sends(&inner_packet(SERVER_INNER, client_inner(client), tag, 200));
            let (held, budget) = sim.server().core().memory_held();
            assert!(
                held <= budget,
                "packet {tag} to {client}: {held} held, budget {budget}"
            );
        }
    }
    assert!(sim.server().core().drops().get(DropReason::MemoryBudget) > 0);
}
