//! Whole-protocol session tests: a client and a server core inside their `Engine`s,
//! driven on the deterministic simulator (`crate::sim`) as the daemon's loop drives
//! them, over linkem's link model under a virtual clock. Handshake, striping,
//! reordering, liveness, replay and forgery handling, reconfiguration and restarts
//! are tested in microseconds and deterministically.
//!
//! This module holds the helpers the test files share, and the tests of jitter
//! measurement and of reconfiguration while a stream runs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::*;
use crate::config::IpNet;
use crate::counters::DropReason;
use crate::sim::{client_addr, Delivery, PathConfig, Sim, SimConfig};
use crate::sim::{CLIENT_INNER, SERVER_ADDR, SERVER_INNER};

mod cookies;
mod ecn;
mod exchange;
mod isolation;
mod keys;
mod many_sessions;
mod migration;
mod retransmissions;
mod timestamps;

const MTU: usize = 1400;

fn settings(hold: Duration) -> SessionSettings {
    super::testing::session_settings(SchedulerChoice::RoundRobin, hold, MTU)
}

fn path_settings() -> PathSettings {
    super::testing::path_settings()
}

/// A minimal IPv4 packet with `payload` bytes of body; the body starts with a u32 tag.
fn inner_packet(source: Ipv4Addr, destination: Ipv4Addr, tag: u32, payload: usize) -> Vec<u8> {
    let total = 20 + payload.max(4);
    let mut packet = vec![0u8; total];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source.octets());
    packet[16..20].copy_from_slice(&destination.octets());
    packet[20..24].copy_from_slice(&tag.to_be_bytes());
    packet
}

fn tag_of(packet: &[u8]) -> u32 {
    u32::from_be_bytes(packet[20..24].try_into().unwrap())
}

/// A simulator whose paths only delay, by `delays_ms` each way.
fn config(delays_ms: &[u64], session: SessionSettings) -> SimConfig {
    let paths = delays_ms
        .iter()
        .map(|&ms| PathConfig::delay_ms(ms))
        .collect();
    SimConfig::new(session, paths)
}

fn established(delays_ms: &[u64], hold: Duration) -> Sim {
    Sim::established(config(delays_ms, settings(hold)))
}

fn established_with(delays_ms: &[u64], session: SessionSettings) -> Sim {
    Sim::established(config(delays_ms, session))
}

/// The client's TUN hands it an inner packet tagged `tag`.
fn client_sends(sim: &mut Sim, tag: u32, payload: usize) {
    sim.client_sends(&inner_packet(CLIENT_INNER, SERVER_INNER, tag, payload));
}

/// The server's TUN hands it an inner packet for the client tagged `tag`.
fn server_sends_sized(sim: &mut Sim, tag: u32, payload: usize) {
    sim.server_sends(&inner_packet(SERVER_INNER, CLIENT_INNER, tag, payload));
}

fn tags(deliveries: &[Delivery]) -> Vec<u32> {
    deliveries.iter().map(|d| tag_of(&d.bytes)).collect()
}

fn paths_of(report: Report) -> Vec<PathReport> {
    report
        .sessions
        .into_iter()
        .next()
        .map(|s| s.paths)
        .unwrap_or_default()
}

fn client_paths(sim: &Sim) -> Vec<PathReport> {
    paths_of(sim.client_report())
}

fn server_paths(sim: &Sim) -> Vec<PathReport> {
    paths_of(sim.server_report())
}

/// Datagrams the server has sent in all.
fn server_datagrams(sim: &Sim) -> u64 {
    sim.server_socket_stats().datagrams
}

/// The client's session id and the server's id of its session.
fn session_id(sim: &Sim) -> (SessionId, u32) {
    let server = sim.server_report().sessions[0].local_id;
    let client = sim.client().core().session_id().expect("a session");
    (client, server)
}

/// Within the client's session timeout it has a session again, the server one, and
/// an inner packet tagged `tag` crosses.
fn reconnects_and_delivers(sim: &mut Sim, tag: u32) {
    sim.run_for(Duration::from_secs(12));
    assert!(sim.client().core().is_established());
    assert_eq!(sim.server().core().session_count(), 1);
    let before = sim.server_tun().len();
    client_sends(sim, tag, 100);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(&sim.server_tun()[before..]), [tag]);
}

/// A simulator established as [`Sim::established`] does, capturing the client's
/// datagrams from the start.
fn established_capturing(delays_ms: &[u64], session: SessionSettings) -> Sim {
    let mut sim = Sim::new(config(delays_ms, session));
    sim.capture_client_datagrams();
    sim.run_for(Duration::from_millis(500));
    assert!(
        sim.client().core().is_established(),
        "handshake did not complete"
    );
    assert_eq!(sim.server().core().session_count(), 1);
    sim
}

/// Seals `body` (metadata and what follows it) as client `client`'s session
/// would, for the path with id `path_id`: what a peer holding its keys may send.
fn forge(
    sim: &mut Sim,
    client: usize,
    packet_type: crate::wire::PacketType,
    path_id: u8,
    body: &[u8],
) -> Vec<u8> {
    let core = sim.nth_client_mut(client).core_mut();
    let session = core.session_mut().expect("established");
    let (header, counter, key) = session.keys.next_header(packet_type, path_id);
    let mut sealed = body.to_vec();
    let tag = key.seal_in_place(&header, counter, &mut sealed);
    [header.as_slice(), &sealed, &tag].concat()
}

/// `bytes` reach the server now from client path `path`'s address, and the server
/// runs what is due now as well: an init waits in the handshake queue for its
/// Diffie-Hellman until the server's next wake-up.
fn arrives_at_server(sim: &mut Sim, path: usize, bytes: &[u8]) {
    sim.inject_to_server(path, bytes);
    sim.run_for(Duration::ZERO);
}

/// The newest data datagram the client sent since its datagrams were captured, with
/// its path.
fn last_data_datagram(sim: &Sim) -> (usize, Vec<u8>) {
    sim.client_datagrams()
        .iter()
        .rev()
        .find(|captured| captured.bytes[0] == crate::wire::PacketType::Data as u8)
        .map(|captured| (captured.socket, captured.bytes.clone()))
        .unwrap()
}

/// The first handshake init the client sent since its datagrams were captured.
fn captured_init(sim: &Sim) -> [u8; crate::wire::HANDSHAKE_INIT_LEN] {
    sim.client_datagrams()
        .iter()
        .find(|captured| {
            captured.bytes.first() == Some(&(crate::wire::PacketType::HandshakeInit as u8))
        })
        .and_then(|captured| captured.bytes.as_slice().try_into().ok())
        .expect("the client sent an init")
}

/// A genuine init from the client's key (as an attacker who held one back would
/// deliver it), with mac2 under `cookie` if given.
fn signed_init(sim: &Sim, unix_time_nanos: u64, cookie: Option<&crate::cookie::Cookie>) -> Vec<u8> {
    let mut init = [0u8; crate::wire::HANDSHAKE_INIT_LEN];
    let fields = crate::handshake::InitFields {
        sender: SessionId(0xc0c0),
        path_id: 0,
        unix_time_nanos,
        renews: None,
        aead: crate::crypto::Aead::ChaCha20Poly1305,
    };
    crate::handshake::initiate(
        sim.client_key(),
        &sim.server_public_key(),
        fields,
        &mut init,
    )
    .unwrap();
    if let Some(cookie) = cookie {
        crate::cookie::write_mac2(cookie, &mut init);
    }
    init.to_vec()
}

fn delay_rate_settings() -> SessionSettings {
    let mut session = settings(Duration::from_millis(200));
    session.congestion_controller = ControllerChoice::DelayRate;
    session
}

/// Paths 10 and 20 ms one way; the second path's datagrams take 0 to 12 ms more,
/// uniformly and each on its own (they may overtake each other).
fn second_path_jitter_up_to_12_ms() -> SimConfig {
    let jittery = linkem::LinkConfig::delay_only(Duration::from_millis(26))
        .with_jitter(Duration::from_millis(6), true);
    SimConfig::new(
        delay_rate_settings(),
        vec![PathConfig::delay_ms(10), PathConfig::symmetric(jittery)],
    )
}

#[test]
fn each_end_measures_a_paths_jitter_from_what_it_sends_into_the_idle_path() {
    let mut sim = Sim::established(second_path_jitter_up_to_12_ms());
    // A packet each way every 300 ms, each alone in flight on its path.
    for tag in 0..20 {
        client_sends(&mut sim, tag, 200);
        server_sends_sized(&mut sim, tag, 200);
        sim.run_for(Duration::from_millis(300));
    }
    // About the 12 ms spread: each end's packets take some of the delays, and the
    // estimate scales what they show up to the whole spread.
    for (side, paths) in each_end_measured_the_second_paths_jitter(&sim, 5.0..=20.0) {
        // The controller lets that much and 5 ms more stand before it backs off.
        let jitter = paths[1].jitter_ms.unwrap_or_default();
        let target = paths[1].queuing_delay_target_ms.unwrap_or_default();
        assert!(target >= jitter + 5.0 - 0.01, "{side}: target {target}");
    }
}

/// Each end's paths, once each found no jitter on the first path and the second
/// path's in `second` (ms).
fn each_end_measured_the_second_paths_jitter(
    sim: &Sim,
    second: std::ops::RangeInclusive<f64>,
) -> [(&'static str, Vec<PathReport>); 2] {
    let ends = [("client", client_paths(sim)), ("server", server_paths(sim))];
    for (side, paths) in &ends {
        let jitter: Vec<Option<f64>> = paths.iter().map(|path| path.jitter_ms).collect();
        assert_eq!(jitter[0], Some(0.0), "{side}: {jitter:?}");
        assert!(
            jitter[1].is_some_and(|ms| second.contains(&ms)),
            "{side}: {jitter:?}"
        );
    }
    ends
}

#[test]
fn a_fresh_path_is_pinged_until_its_jitter_is_measured() {
    // The second path's jitter from the handshake on.
    let mut sim = Sim::new(second_path_jitter_up_to_12_ms());
    // No data: within a second each end has its jitter from pings alone, long before
    // eight keepalives could bring it.
    sim.run_for(Duration::from_secs(1));
    assert!(
        sim.client().core().is_established(),
        "handshake did not complete"
    );
    each_end_measured_the_second_paths_jitter(&sim, 6.0..=20.0);
    // Then the pings stop, at the latest after their limit: only keepalives go
    // out, about one a second per path.
    sim.run_for(Duration::from_secs(3));
    let sent = server_datagrams(&sim);
    sim.run_for(Duration::from_secs(5));
    assert!(
        server_datagrams(&sim) - sent <= 2 * 6,
        "{} datagrams in 5 s",
        server_datagrams(&sim) - sent
    );
}

// ---- reconfiguration while a stream runs (reload, hotplug) ---------------------------

/// Adds client path `name`, on a new socket with this one-way delay, as the
/// daemon's reload does.
fn add_client_path(sim: &mut Sim, name: &str, delay_ms: u64) -> PathId {
    let settings = ClientPathSettings {
        name: name.into(),
        endpoint: SERVER_ADDR,
        backup: false,
        probing: path_settings(),
    };
    sim.add_client_path(settings, PathConfig::delay_ms(delay_ms))
        .unwrap()
}

#[test]
fn a_path_added_mid_stream_joins_the_session_and_carries_data() {
    let mut sim = established(&[10, 20], Duration::from_millis(200));
    let session = session_id(&sim);
    for tag in 0..400 {
        if tag == 200 {
            assert_eq!(add_client_path(&mut sim, "p2", 5), PathId(2));
        }
        client_sends(&mut sim, tag, 1000);
        sim.run_for(Duration::from_micros(500));
    }
    sim.run_for(Duration::from_millis(300));
    assert_eq!(
        tags(sim.server_tun()),
        (0..400).collect::<Vec<_>>(),
        "in order, none lost"
    );
    assert_eq!(session_id(&sim), session, "the same session on both ends");
    let client = client_paths(&sim);
    assert_eq!(client.len(), 3);
    assert_eq!(client[2].state, "up");
    assert!(client[2].sent_data_packets > 20, "{:?}", client[2]);
    let server = server_paths(&sim);
    assert_eq!(server.len(), 3, "the server learned the new path");
    assert_eq!(server[2].remote, Some(client_addr(2).to_string()));
}

#[test]
fn a_path_removed_mid_stream_hands_its_packets_to_the_others_and_ids_are_not_reused() {
    let mut sim = established(&[10, 40], Duration::from_millis(300));
    let session = session_id(&sim);
    let reinjected = |sim: &Sim| sim.client_report().sessions[0].reinjected;
    let mut reinjected_at_removal = 0;
    for tag in 0..600 {
        if tag == 300 {
            let before = reinjected(&sim);
            // The daemon closes the socket: nothing more goes out or comes in on it.
            assert_eq!(sim.remove_client_path("p1").unwrap(), 1);
            reinjected_at_removal = reinjected(&sim) - before;
        }
        client_sends(&mut sim, tag, 1000);
        sim.run_for(Duration::from_micros(500));
    }
    sim.run_for(Duration::from_millis(500));
    assert_eq!(
        tags(sim.server_tun()),
        (0..600).collect::<Vec<_>>(),
        "in order, none lost"
    );
    assert!(
        reinjected_at_removal > 0,
        "the 40 ms path had packets in flight, re-sent at once"
    );
    assert_eq!(session_id(&sim), session);
    let paths = client_paths(&sim);
    assert_eq!(
        paths.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["p0"]
    );
    assert!(sim.remove_client_path("p1").is_err());
    // A path added later gets an id the session never used, not the removed one's.
    assert_eq!(add_client_path(&mut sim, "p1", 10), PathId(2));
    sim.run_for(Duration::from_millis(100));
    assert_eq!(client_paths(&sim)[1].state, "up");
}

#[test]
fn a_scheduler_is_rebuilt_only_when_its_choice_or_tuning_changes() {
    use mptund_sched::{EcfParams, Scheduler as _};
    let rebuilt = super::client::rebuilt_scheduler;
    let round_robin = settings(Duration::from_millis(300));
    assert!(rebuilt(&round_robin, &round_robin.clone()).is_none());
    let ecf = |hysteresis| SessionSettings {
        scheduler: SchedulerChoice::Ecf(EcfParams { hysteresis }),
        ..round_robin.clone()
    };
    assert_eq!(
        rebuilt(&round_robin, &ecf(0.5)).map(|scheduler| scheduler.name()),
        Some("ecf")
    );
    assert!(rebuilt(&ecf(0.5), &ecf(0.25)).is_some());
    assert!(rebuilt(&ecf(0.5), &ecf(0.5)).is_none());
}

#[test]
fn a_scheduler_switch_mid_stream_keeps_the_stream_in_order() {
    let mut sim = established(&[5, 60], Duration::from_millis(300));
    let session = session_id(&sim);
    let sent_on_slow = |sim: &Sim| client_paths(sim)[1].sent_data_packets;
    let mut slow_before = 0;
    for tag in 0..600 {
        if tag == 300 {
            let mut settings = settings(Duration::from_millis(300));
            settings.scheduler = SchedulerChoice::MinRtt;
            sim.client_mut().core_mut().apply_settings(
                settings,
                Duration::from_secs(1),
                Duration::from_secs(10),
            );
            slow_before = sent_on_slow(&sim);
        }
        client_sends(&mut sim, tag, 200);
        sim.run_for(Duration::from_millis(1));
    }
    sim.run_for(Duration::from_millis(400));
    assert_eq!(tags(sim.server_tun()), (0..600).collect::<Vec<_>>());
    assert_eq!(session_id(&sim), session);
    assert_eq!(sim.client_report().sessions[0].scheduler, "min-rtt");
    assert!(
        slow_before > 50,
        "round-robin used the slow path: {slow_before}"
    );
    // A light stream fits in the fast path's window: min-rtt leaves the slow one idle.
    assert!(
        sent_on_slow(&sim) - slow_before < 10,
        "{} data packets on the slow path after the switch",
        sent_on_slow(&sim) - slow_before
    );
}

#[test]
fn server_peer_changes_apply_in_place_and_a_removed_peer_is_closed() {
    let mut sim = established(&[10, 10], Duration::from_millis(100));
    let session = session_id(&sim);
    // Same key, new name and one more allowed address: the session stays.
    let other = Ipv4Addr::new(198, 18, 100, 9);
    let client_public = sim.client_key().public_key();
    let peer = |allowed: &[Ipv4Addr]| PeerSettings {
        name: "renamed".into(),
        public_key: client_public,
        allowed_ips: allowed
            .iter()
            .map(|ip| IpNet {
                addr: IpAddr::V4(*ip),
                prefix_len: 32,
            })
            .collect(),
    };
    let kept = vec![peer(&[CLIENT_INNER, other])];
    let now = sim.now();
    let produced_nothing = sim.server_mut().produce(now, |server, out| {
        server.set_peers(now, kept, out);
        out.is_empty()
    });
    assert!(produced_nothing);
    sim.server_sends(&inner_packet(SERVER_INNER, other, 7, 100));
    sim.run_for(Duration::from_millis(50));
    assert_eq!(session_id(&sim), session);
    assert_eq!(tags(sim.client_tun()), [7]);
    assert_eq!(sim.server_report().sessions[0].peer, "renamed");
    // The key is gone: goodbye, and the client's new handshakes are refused.
    let now = sim.now();
    sim.server_mut()
        .produce(now, |server, out| server.set_peers(now, Vec::new(), out));
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.server().core().session_count(), 0);
    assert!(
        !sim.client().core().is_established(),
        "the client heard the goodbye"
    );
    sim.run_for(Duration::from_secs(3));
    assert!(!sim.client().core().is_established());
    assert!(
        sim.server()
            .core()
            .drops()
            .get(DropReason::HandshakeRejected)
            >= 2
    );
}
