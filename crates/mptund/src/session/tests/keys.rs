//! Key renewal and expiry, handshake timestamps, and when a new handshake may
//! replace a live session.

use super::*;
use crate::crypto::KeyLifetime;
use crate::wire::{PacketType, HANDSHAKE_RESPONSE_LEN};

const SECOND: u64 = 1_000_000_000;

fn short_lived_keys() -> SessionSettings {
    SessionSettings {
        key_lifetime: KeyLifetime {
            rekey_after_time: Duration::from_secs(2),
            reject_after_time: Duration::from_secs(3),
            ..KeyLifetime::default()
        },
        ..settings(Duration::from_millis(200))
    }
}

/// Key renewals so far: (client, server).
fn renewals(sim: &Sim) -> (u64, u64) {
    let client = sim.client_report().sessions[0].key_renewals;
    let server = sim.server_report().sessions[0].key_renewals;
    (client, server)
}

#[test]
fn a_stream_both_ways_crosses_five_key_renewals_on_paths_50_ms_apart() {
    let mut sim = established_with(&[10, 60], short_lived_keys());
    let session = session_id(&sim);
    // 12 s of packets every 10 ms each way.
    let sent = 0..1200;
    for tag in sent.clone() {
        client_sends(&mut sim, tag, 1000);
        sim.server_sends(&inner_packet(SERVER_INNER, CLIENT_INNER, tag, 100));
        sim.run_for(Duration::from_millis(10));
    }
    sim.run_for(Duration::from_secs(1));
    let expected: Vec<u32> = sent.collect();
    assert_eq!(tags(sim.server_tun()), expected);
    assert_eq!(tags(sim.client_tun()), expected);
    let (client, server) = renewals(&sim);
    assert!(
        client >= 5 && server >= 5,
        "renewals: client {client}, server {server}"
    );
    assert_eq!(session_id(&sim), session, "renewal keeps the session");
    for drops in [sim.client().core().drops(), sim.server().core().drops()] {
        for reason in [
            DropReason::StaleKey,
            DropReason::AuthenticationFailed,
            DropReason::UnknownSession,
            DropReason::Replayed,
        ] {
            assert_eq!(drops.get(reason), 0, "{reason:?}");
        }
    }
}

#[test]
fn nothing_is_accepted_under_keys_older_than_the_reject_time() {
    let mut sim = established_with(&[10, 10], short_lived_keys());
    sim.capture_client_datagrams();
    client_sends(&mut sim, 1, 200);
    sim.run_for(Duration::from_millis(50));
    let (path, old) = last_data_datagram(&sim);
    assert_eq!(old[0], PacketType::Data as u8);
    sim.run_for(Duration::from_secs(4));
    assert!(renewals(&sim).1 >= 1);
    // A fresh counter would pass the replay window; the keys' age does not.
    let mut late = old;
    late[8..16].copy_from_slice(&1_000u64.to_be_bytes());
    sim.inject_to_server(path, &late);
    let drops = sim.server().core().drops();
    assert_eq!(
        drops.get(DropReason::StaleKey) + drops.get(DropReason::UnknownSession),
        1
    );
    assert_eq!(sim.server_tun().len(), 1);
}

#[test]
fn a_client_whose_renewals_fail_drops_its_keys_at_the_reject_time_and_starts_over() {
    let mut sim = established_with(&[10, 10], short_lived_keys());
    // Established within the first 100 ms; 500 ms have passed.
    sim.cut_path(0, true);
    sim.cut_path(1, true);
    sim.run_for(Duration::from_millis(2_000));
    assert!(
        sim.client().core().is_established(),
        "keys are still in their lifetime"
    );
    sim.run_for(Duration::from_millis(1_000));
    assert!(
        !sim.client().core().is_established(),
        "keys past the reject time"
    );
    sim.cut_path(0, false);
    sim.cut_path(1, false);
    reconnects_and_delivers(&mut sim, 9);
}

#[test]
fn the_wall_clock_stepping_back_does_not_lock_the_client_out() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let wall = sim.client_wall_clock();
    sim.set_client_wall_clock(wall - 3600 * SECOND);
    // The server stays up and remembers the first handshake's time.
    sim.cut_path(0, true);
    sim.cut_path(1, true);
    sim.run_for(Duration::from_secs(11));
    assert!(!sim.client().core().is_established());
    sim.cut_path(0, false);
    sim.cut_path(1, false);
    reconnects_and_delivers(&mut sim, 3);
    assert_eq!(
        sim.server()
            .core()
            .drops()
            .get(DropReason::HandshakeRejected),
        0
    );
}

#[test]
fn an_init_held_back_cannot_tear_down_a_working_session() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let session = session_id(&sim);
    let wall = sim.client_wall_clock();
    // Newer than anything the server accepted, so it is answered...
    let held_back = signed_init(&sim, wall + 10 * SECOND, None);
    arrives_at_server(&mut sim, 0, &held_back);
    sim.run_for(Duration::from_millis(50));
    // ...but only keys the client uses replace its session.
    client_sends(&mut sim, 1, 100);
    sim.server_sends(&inner_packet(SERVER_INNER, CLIENT_INNER, 2, 100));
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), [1]);
    assert_eq!(tags(sim.client_tun()), [2]);
    assert_eq!(session_id(&sim), session);
    // A second one replaces the first unconfirmed session, not the live one.
    let second = signed_init(&sim, wall + 20 * SECOND, None);
    arrives_at_server(&mut sim, 1, &second);
    assert_eq!(
        sim.server()
            .core()
            .drops()
            .get(DropReason::UnconfirmedSession),
        1
    );
    client_sends(&mut sim, 3, 100);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), [1, 3]);
    assert_eq!(session_id(&sim), session);
}

#[test]
fn a_forged_response_does_not_end_the_handshake_attempt() {
    let mut sim = Sim::new(config(&[10], settings(Duration::from_millis(50))));
    sim.capture_client_datagrams();
    sim.run_for(Duration::from_millis(1));
    let init = captured_init(&sim);
    let mut forged = vec![0x5a; HANDSHAKE_RESPONSE_LEN];
    forged[..8].copy_from_slice(&[
        PacketType::HandshakeResponse as u8,
        init[1],
        init[2],
        0,
        init[4],
        init[5],
        init[6],
        init[7],
    ]);
    sim.inject_to_client(0, &forged);
    assert_eq!(
        sim.client()
            .core()
            .drops()
            .get(DropReason::HandshakeRejected),
        1
    );
    sim.run_for(Duration::from_millis(100));
    assert!(sim.client().core().is_established());
    let inits = sim
        .client_datagrams()
        .iter()
        .filter(|captured| captured.bytes[0] == PacketType::HandshakeInit as u8)
        .count();
    assert_eq!(inits, 1, "the first attempt completed");
}
