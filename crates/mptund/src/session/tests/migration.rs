//! Path migration: a path moves to a new address only after the peer answers a
//! challenge there, an unvalidated address gets at most three times what it sent,
//! and a migrated path starts with fresh congestion and RTT state. On the simulator.

use super::*;
use crate::session::migration::{AMPLIFICATION_FACTOR, CHALLENGE_WIRE_LEN, MAX_CHALLENGES};
use crate::session::send::PING_WIRE_COST;
use crate::wire::PacketType;

/// Someone else's address on the server's network.
const VICTIM: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 200, 7)), 40999);

/// Path 0's NAT mapping after a rebinding.
fn rebound() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)), 50123)
}

fn server_drops(sim: &Sim, reason: DropReason) -> u64 {
    sim.server().core().drops().get(reason)
}

fn server_sends(sim: &mut Sim, tag: u32) {
    sim.server_sends(&inner_packet(SERVER_INNER, CLIENT_INNER, tag, 100));
}

fn cut_all(sim: &mut Sim, paths: usize, cut: bool) {
    for path in 0..paths {
        sim.cut_path(path, cut);
    }
}

/// The client's last datagram of `packet_type` on path `path` while every path
/// is cut (they stay cut): authentic, never seen by the server, and newer than
/// anything it has seen.
fn unseen_datagram(sim: &mut Sim, paths: usize, path: usize, packet_type: PacketType) -> Vec<u8> {
    cut_all(sim, paths, true);
    sim.capture_client_datagrams();
    sim.run_for(Duration::from_millis(1000));
    sim.client_datagrams()
        .iter()
        .rev()
        .find(|captured| captured.socket == path && captured.bytes[0] == packet_type as u8)
        .map(|captured| captured.bytes.clone())
        .unwrap()
}

/// Server data on every path, so that the paths have RTT samples (their probe
/// timeouts pace the challenges).
fn warm_up(sim: &mut Sim) {
    for tag in 0..10 {
        server_sends(sim, tag);
    }
    sim.run_for(Duration::from_millis(100));
    assert!(server_paths(sim).iter().all(|path| path.srtt_ms.is_some()));
}

#[test]
fn a_rebound_path_moves_only_after_the_client_answers_the_challenge() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    sim.rebind_client_path(0, rebound());
    for tag in 0..4 {
        client_sends(&mut sim, tag, 200);
    }
    // The first datagram from the new address is there, the response is not yet.
    sim.run_for(Duration::from_millis(15));
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, Some(rebound().to_string()));
    assert_eq!(
        sim.server_sent_elsewhere(rebound()),
        0,
        "not reachable as path 0 yet"
    );

    sim.run_for(Duration::from_millis(20));
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(path.validating, None);
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(server_drops(&sim, DropReason::PathValidationFailed), 0);
    // Traffic both ways goes on, path 0 included.
    let sent_before = server_paths(&sim)[0].sent_packets;
    for tag in 10..20 {
        server_sends(&mut sim, tag);
        client_sends(&mut sim, tag, 200);
    }
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.client_tun().len(), 10);
    assert_eq!(sim.server_tun().len(), 14);
    assert!(server_paths(&sim)[0].sent_packets > sent_before);
}

#[test]
fn a_datagram_from_a_new_address_that_is_not_the_newest_starts_no_validation() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    // Path 0 cut for a moment: a datagram of it never arrives, later ones do.
    sim.cut_path(0, true);
    sim.capture_client_datagrams();
    for tag in 1..=2 {
        client_sends(&mut sim, tag, 200);
    }
    sim.cut_path(0, false);
    let older = sim
        .client_datagrams()
        .iter()
        .find(|captured| captured.socket == 0 && captured.bytes[0] == PacketType::Data as u8)
        .map(|captured| captured.bytes.clone())
        .unwrap();
    for tag in 3..=6 {
        client_sends(&mut sim, tag, 200);
    }
    sim.run_for(Duration::from_millis(20));

    // Authentic and never seen, but older than what path 0 brought since.
    sim.inject_to_server_from(VICTIM, &older);
    assert_eq!(server_drops(&sim, DropReason::UnvalidatedPath), 1);
    assert_eq!(server_drops(&sim, DropReason::Replayed), 0);
    assert_eq!(sim.server_sent_elsewhere(VICTIM), 0);
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(
        (path.validating.as_deref(), path.validations_started),
        (None, 0)
    );
    // Its content was genuine: it is delivered.
    sim.run_for(Duration::from_millis(100));
    assert_eq!(tags(sim.server_tun()), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn an_unvalidated_address_gets_at_most_three_times_what_it_sent_and_the_path_stays() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    warm_up(&mut sim);
    // A small datagram (a ping) leaves room for two challenges only.
    let ping = unseen_datagram(&mut sim, 2, 0, PacketType::Control);
    let budget = AMPLIFICATION_FACTOR as usize * ping.len();
    let affordable = budget / CHALLENGE_WIRE_LEN;
    assert!(
        affordable < MAX_CHALLENGES,
        "the test needs a binding budget"
    );

    sim.inject_to_server_from(VICTIM, &ping);
    assert_eq!(
        sim.server_sent_elsewhere(VICTIM),
        CHALLENGE_WIRE_LEN,
        "one challenge at once"
    );
    assert_eq!(server_paths(&sim)[0].validating, Some(VICTIM.to_string()));
    sim.run_for(Duration::from_secs(5));

    assert_eq!(
        sim.server_sent_elsewhere(VICTIM),
        affordable * CHALLENGE_WIRE_LEN
    );
    assert!(sim.server_sent_elsewhere(VICTIM) <= budget);
    // The challenges it could not afford, then the abandoned validation.
    assert_eq!(
        server_drops(&sim, DropReason::UnvalidatedPath),
        (MAX_CHALLENGES - affordable) as u64
    );
    assert_eq!(server_drops(&sim, DropReason::PathValidationFailed), 1);
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, None);
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 0)
    );
    // The real client is still reached at its old address.
    cut_all(&mut sim, 2, false);
    sim.run_for(Duration::from_secs(1));
    let before = sim.client_tun().len();
    server_sends(&mut sim, 100);
    server_sends(&mut sim, 101);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(tags(&sim.client_tun()[before..]), [100, 101]);
}

#[test]
fn more_bytes_from_the_candidate_let_a_withheld_challenge_go() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    warm_up(&mut sim);
    let ping = unseen_datagram(&mut sim, 2, 0, PacketType::Control);
    sim.inject_to_server_from(VICTIM, &ping);
    let affordable = AMPLIFICATION_FACTOR as usize * ping.len() / CHALLENGE_WIRE_LEN;
    // Run until a challenge has been withheld.
    while server_drops(&sim, DropReason::UnvalidatedPath) == 0 {
        sim.run_for(Duration::from_millis(50));
    }
    assert_eq!(
        sim.server_sent_elsewhere(VICTIM),
        affordable * CHALLENGE_WIRE_LEN
    );
    // The next fresh datagram from there pays for it.
    let more = unseen_datagram(&mut sim, 2, 0, PacketType::Control);
    sim.inject_to_server_from(VICTIM, &more);
    assert_eq!(
        sim.server_sent_elsewhere(VICTIM),
        (affordable + 1) * CHALLENGE_WIRE_LEN
    );
    let sent = sim.server_sent_elsewhere(VICTIM);
    assert!(sent <= AMPLIFICATION_FACTOR as usize * (ping.len() + more.len()));
}

#[test]
fn a_lost_challenge_is_sent_again() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    sim.rebind_client_path(0, rebound());
    // The only datagram to the new address before validation is the challenge.
    sim.lose_next_to_client(0, 1);
    for tag in 0..4 {
        client_sends(&mut sim, tag, 200);
    }
    sim.run_for(Duration::from_millis(40));
    assert_eq!(
        sim.losses_to_come_to_client(0),
        0,
        "the first challenge was lost"
    );
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, Some(rebound().to_string()));

    sim.run_for(Duration::from_secs(2));
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(sim.server_tun().len(), 4);
}

#[test]
fn congestion_and_rtt_state_start_afresh_on_migration_and_in_flight_data_is_resent() {
    let mut sim = established(&[10, 10], Duration::from_millis(100));
    let fresh = server_paths(&sim)[0].clone();
    assert!(
        fresh.srtt_ms.is_some(),
        "the server measures a path once the keys are confirmed"
    );
    for round in 0..20 {
        for tag in 0..20 {
            sim.server_sends(&inner_packet(
                SERVER_INNER,
                CLIENT_INNER,
                round * 20 + tag,
                1200,
            ));
        }
        sim.run_for(Duration::from_millis(20));
    }
    sim.run_for(Duration::from_millis(100));
    let warm = server_paths(&sim)[0].clone();
    assert!(warm.srtt_ms.is_some());
    assert!(warm.cwnd_bytes > fresh.cwnd_bytes, "{warm:?}");
    let before = sim.client_tun().len();

    // The NAT rebinds while the server has data in flight to the old mapping.
    sim.rebind_client_path(0, rebound());
    for tag in 1000..1040 {
        server_sends(&mut sim, tag);
    }
    assert!(server_paths(&sim)[0].bytes_in_flight > 0);
    client_sends(&mut sim, 1, 200);
    client_sends(&mut sim, 2, 200);
    let mut migrated = None;
    for _ in 0..100 {
        sim.run_for(Duration::from_millis(1));
        let path = server_paths(&sim)[0].clone();
        if path.validations_succeeded == 1 {
            migrated = Some(path);
            break;
        }
    }
    let migrated = migrated.expect("the path migrated");
    assert_eq!(migrated.remote, Some(rebound().to_string()));
    assert_eq!(migrated.srtt_ms, None);
    assert_eq!(migrated.min_rtt_ms, None);
    assert_eq!(migrated.cwnd_bytes, fresh.cwnd_bytes);
    // Nothing of the old address's data: only the ping that measures the new one.
    let ip_and_udp = 20 + 8;
    assert_eq!(
        migrated.bytes_in_flight,
        (PING_WIRE_COST - ip_and_udp) as u64
    );
    // What went to the old mapping reached the client anyway, re-sent.
    sim.run_for(Duration::from_millis(300));
    let mut received = tags(&sim.client_tun()[before..]);
    received.sort_unstable();
    received.dedup();
    assert_eq!(received, (1000..1040).collect::<Vec<_>>());
}

#[test]
fn a_newer_datagram_from_the_validated_address_abandons_a_validation() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let ping = unseen_datagram(&mut sim, 2, 0, PacketType::Control);
    // An attacker's copy comes first; the client, still at its address, goes on.
    sim.inject_to_server_from(VICTIM, &ping);
    assert_eq!(server_paths(&sim)[0].validating, Some(VICTIM.to_string()));
    cut_all(&mut sim, 2, false);
    sim.run_for(Duration::from_millis(600));
    let path = &server_paths(&sim)[0];
    assert_eq!(path.validating, None);
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(server_drops(&sim, DropReason::PathValidationFailed), 1);
    assert!(sim.server_sent_elsewhere(VICTIM) <= AMPLIFICATION_FACTOR as usize * ping.len());
}

#[test]
fn a_rebinding_on_a_path_slower_than_the_others_migrates_under_load() {
    // Path 1's datagrams are always overtaken by path 0's later ones: never the
    // session's newest while both carry data, but the newest on their own path.
    let mut sim = established(&[5, 40], Duration::from_millis(100));
    // Path 1's first address was validated when the path opened.
    let opened = &server_paths(&sim)[1];
    let before = (opened.validations_started, opened.validations_succeeded);
    assert_eq!(before, (1, 1));
    sim.rebind_client_path(1, rebound());
    for round in 0..100u32 {
        for tag in 0..4 {
            client_sends(&mut sim, round * 4 + tag, 1000);
        }
        sim.run_for(Duration::from_millis(2));
    }
    let path = &server_paths(&sim)[1];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (before.0 + 1, before.1 + 1)
    );
    sim.run_for(Duration::from_millis(300));
    assert_eq!(sim.server_tun().len(), 400);
}

#[test]
fn a_rebinding_after_a_key_renewal_migrates_although_the_new_counters_start_at_zero() {
    let settings = SessionSettings {
        key_lifetime: crate::crypto::KeyLifetime {
            rekey_after_time: Duration::from_secs(2),
            reject_after_time: Duration::from_secs(3),
            ..crate::crypto::KeyLifetime::default()
        },
        ..settings(Duration::from_millis(100))
    };
    let mut sim = established_with(&[10, 10], settings);
    // Many datagrams under the first keys: their counters exceed what the renewed
    // keys start with.
    let mut tag = 0;
    while sim.server_report().sessions[0].key_renewals == 0 {
        client_sends(&mut sim, tag, 200);
        sim.run_for(Duration::from_millis(2));
        tag += 1;
    }
    sim.run_for(Duration::from_millis(100));
    sim.rebind_client_path(0, rebound());
    for _ in 0..20 {
        client_sends(&mut sim, tag, 200);
        sim.run_for(Duration::from_millis(2));
        tag += 1;
    }
    sim.run_for(Duration::from_millis(100));
    let path = &server_paths(&sim)[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(sim.server_tun().len(), tag as usize);
}
