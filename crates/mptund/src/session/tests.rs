//! A client core and a server core talking through an in-memory network with a
//! simulated clock: each path has its own one-way delay and can be cut. Everything the
//! daemon would do with sockets and the TUN is done here with queues, so whole-protocol
//! behaviour (handshake, striping, reordering, liveness, replay and forgery handling)
//! is tested in microseconds and deterministically.
//!
//! Exchanges over links run on the simulator instead (`tests/exchange.rs`, on
//! `crate::sim`), which drives the cores through their `Engine`s as the daemon does.
//! `Net` stays for what the simulator does not model: injected, replayed or forged
//! datagrams, a scripted sequence of per-datagram delays, a server that restarts or
//! is replaced, and steps that call a core directly (reconfiguration, path changes).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::buffers::{BufferPool, HEADROOM};
use crate::config::IpNet;
use crate::counters::DropReason;
use crate::keys::PrivateKey;
use crate::session::testing::seal_all;

mod cookies;
mod ecn;
mod exchange;
mod isolation;
mod keys;
mod many_sessions;
mod migration;
mod retransmissions;
mod timestamps;

const SERVER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51900);
const CLIENT_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const MTU: usize = 1400;

fn client_addr(path: usize) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, path as u8 + 1, 2)),
        40000 + path as u16,
    )
}

fn settings(hold: Duration) -> SessionSettings {
    super::testing::session_settings(SchedulerChoice::RoundRobin, hold, MTU)
}

fn path_settings() -> PathSettings {
    super::testing::path_settings()
}

fn pool() -> BufferPool {
    super::testing::pool(MTU)
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

/// A datagram on the simulated wire.
struct InFlight {
    arrives: Instant,
    to_server: bool,
    path: usize,
    bytes: Vec<u8>,
}

struct Net {
    now: Instant,
    /// The client's wall clock, in UNIX nanoseconds.
    wall: Arc<AtomicU64>,
    client_key: PrivateKey,
    server_key: PrivateKey,
    client_public: crate::keys::PublicKey,
    client: ClientCore,
    server: ServerCore,
    /// One-way delay per path (both directions).
    delays: Vec<Duration>,
    cut: Vec<bool>,
    wire: Vec<InFlight>,
    /// Every datagram sent client -> server, for replay tests.
    captured: Vec<(usize, Vec<u8>)>,
    client_received: Vec<Vec<u8>>,
    server_received: Vec<Vec<u8>>,
    /// Datagrams the server has sent in all.
    server_datagrams: usize,
    /// The address each client path's datagrams come from (its NAT mapping); the
    /// server reaches a path only there.
    client_addrs: Vec<SocketAddr>,
    /// What the server sent to addresses no client path has: (address, bytes).
    sent_elsewhere: Vec<(SocketAddr, usize)>,
    /// Per path: how many of the next server -> client datagrams are lost.
    lose_to_client: Vec<usize>,
    /// Per path: extra delays its datagrams take in turn (both directions), the
    /// link's jitter; empty for none.
    jitter: Vec<Vec<Duration>>,
    /// Datagrams sent per path so far, to pick each one's jitter.
    sent_on_path: Vec<usize>,
    out: Vec<Outgoing>,
    /// The client's stored handshake timestamp ceiling (the daemon's state file),
    /// once the client was told to store one.
    stored_ceiling: Option<u64>,
}

impl Net {
    fn new(delays_ms: &[u64], hold: Duration) -> Self {
        Self::with_settings(delays_ms, settings(hold))
    }

    fn with_settings(delays_ms: &[u64], session: SessionSettings) -> Self {
        let now = Instant::now();
        let client_key = PrivateKey::generate();
        let server_key = PrivateKey::generate();
        let client_public = client_key.public_key();
        let client_settings = super::testing::client_settings(
            client_key.clone(),
            server_key.public_key(),
            SERVER_ADDR,
            delays_ms.len(),
            session.clone(),
        );
        let server_settings = super::testing::server_settings(
            server_key.clone(),
            client_public,
            IpAddr::V4(CLIENT_INNER),
            session,
        );
        let wall = Arc::new(AtomicU64::new(1_700_000_000_000_000_000));
        let client_wall = wall.clone();
        let wall_clock = Box::new(move || client_wall.load(Ordering::Relaxed));
        let mut client = ClientCore::new(now, wall_clock, client_settings, pool())
            .with_random_source(super::handshake_time::seeded_random(1));
        for index in 0..delays_ms.len() {
            client.set_socket_open(now, index, true, &mut Vec::new());
        }
        Self {
            now,
            wall,
            client_key,
            server_key,
            client_public,
            client,
            server: ServerCore::new(server_settings, pool()),
            delays: delays_ms
                .iter()
                .map(|&ms| Duration::from_millis(ms))
                .collect(),
            cut: vec![false; delays_ms.len()],
            wire: Vec::new(),
            captured: Vec::new(),
            client_received: Vec::new(),
            server_received: Vec::new(),
            server_datagrams: 0,
            client_addrs: (0..delays_ms.len()).map(client_addr).collect(),
            sent_elsewhere: Vec::new(),
            lose_to_client: vec![0; delays_ms.len()],
            jitter: vec![Vec::new(); delays_ms.len()],
            sent_on_path: vec![0; delays_ms.len()],
            out: Vec::new(),
            stored_ceiling: None,
        }
    }

    /// Puts what a core produced on the wire.
    fn transmit(&mut self, to_server: bool) {
        if to_server {
            seal_all(&mut self.client, self.now, &mut self.out);
        } else {
            seal_all(&mut self.server, self.now, &mut self.out);
        }
        for outgoing in std::mem::take(&mut self.out) {
            let path = if to_server {
                Some(outgoing.socket)
            } else {
                self.client_addrs
                    .iter()
                    .position(|&addr| addr == outgoing.destination)
            };
            let bytes = outgoing.packet.bytes().to_vec();
            if to_server {
                self.captured.push((outgoing.socket, bytes.clone()));
            } else {
                self.server_datagrams += 1;
            }
            let Some(path) = path else {
                self.sent_elsewhere
                    .push((outgoing.destination, bytes.len()));
                self.server.pool().recycle(outgoing.packet);
                continue;
            };
            let lost = !to_server && self.lose_to_client[path] > 0;
            if lost {
                self.lose_to_client[path] -= 1;
            }
            let jitter = self.next_jitter(path);
            if !self.cut[path] && !lost {
                self.wire.push(InFlight {
                    arrives: self.now + self.delays[path] + jitter,
                    to_server,
                    path,
                    bytes,
                });
            }
            // As the daemon does: sent datagrams go back to the core.
            if to_server {
                self.client.pool().recycle(outgoing.packet);
            } else {
                self.server.pool().recycle(outgoing.packet);
            }
        }
    }

    /// The extra delay of the next datagram on `path` (see `jitter`).
    fn next_jitter(&mut self, path: usize) -> Duration {
        if self.sent_on_path.len() <= path {
            self.sent_on_path.resize(path + 1, 0);
            self.jitter.resize(path + 1, Vec::new());
        }
        let delays = &self.jitter[path];
        let jitter = delays
            .get(self.sent_on_path[path] % delays.len().max(1))
            .copied()
            .unwrap_or_default();
        self.sent_on_path[path] += 1;
        jitter
    }

    fn deliver(&mut self, datagram: InFlight) {
        if datagram.to_server {
            let received = Received {
                socket: 0,
                from: self.client_addrs[datagram.path],
                local_ip: Some(SERVER_ADDR.ip()),
            };
            let packet = self.server.pool().take_copy(&datagram.bytes).unwrap();
            self.server
                .handle_datagram(self.now, received, packet, &mut self.out);
            self.server.flush_acks(self.now, &mut self.out);
            self.transmit(false);
        } else {
            let received = Received {
                socket: datagram.path,
                from: SERVER_ADDR,
                local_ip: None,
            };
            let packet = self.client.pool().take_copy(&datagram.bytes).unwrap();
            self.client
                .handle_datagram(self.now, received, packet, &mut self.out);
            self.client.flush_acks(self.now, &mut self.out);
            self.transmit(true);
        }
        self.collect();
    }

    fn collect(&mut self) {
        while let Some(packet) = self.client.poll_tun_packet() {
            self.client_received.push(packet.bytes().to_vec());
            self.client.pool().recycle(packet);
        }
        while let Some(packet) = self.server.poll_tun_packet() {
            self.server_received.push(packet.bytes().to_vec());
            self.server.pool().recycle(packet);
        }
    }

    /// Advances the clock to `until`, delivering datagrams and firing timers in order.
    /// A core that keeps asking to be woken at the same instant without making progress
    /// is a bug (the daemon would spin): the run fails instead of hanging.
    fn run_until(&mut self, until: Instant) {
        let mut wakeups_at_same_instant = 0u32;
        let mut last_wakeup = None;
        loop {
            // As the daemon does between two steps: a ceiling the client asks for
            // is stored.
            if let Some(ceiling) = self.client.timestamp_to_store() {
                self.stored_ceiling = Some(ceiling);
                self.client.timestamp_stored(ceiling);
            }
            let next_arrival = self.wire.iter().map(|d| d.arrives).min();
            let next_timer = [self.client.poll_timeout(), self.server.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = [next_arrival, next_timer].into_iter().flatten().min();
            let Some(next) = next.filter(|&at| at <= until) else {
                break;
            };
            if next_arrival != Some(next) {
                wakeups_at_same_instant = if last_wakeup == Some(self.now.max(next)) {
                    wakeups_at_same_instant + 1
                } else {
                    0
                };
                last_wakeup = Some(self.now.max(next));
                assert!(
                    wakeups_at_same_instant < 1000,
                    "timer spin at {:?}: client wants {:?}, server wants {:?}\nclient: {}",
                    self.now,
                    self.client.poll_timeout(),
                    self.server.poll_timeout(),
                    self.client.deadlines()
                );
            }
            self.now = self.now.max(next);
            if next_arrival == Some(next) {
                let index = self.wire.iter().position(|d| d.arrives == next).unwrap();
                let datagram = self.wire.remove(index);
                self.deliver(datagram);
            } else {
                if self.client.poll_timeout().is_some_and(|at| at <= self.now) {
                    self.client.handle_timeout(self.now, &mut self.out);
                    self.transmit(true);
                }
                if self.server.poll_timeout().is_some_and(|at| at <= self.now) {
                    self.server.handle_timeout(self.now, &mut self.out);
                    self.transmit(false);
                }
                self.collect();
            }
        }
        self.now = self.now.max(until);
    }

    fn run_for(&mut self, duration: Duration) {
        let until = self.now + duration;
        self.run_until(until);
    }

    fn client_sends(&mut self, tag: u32, payload: usize) {
        let bytes = inner_packet(CLIENT_INNER, SERVER_INNER, tag, payload);
        let mut packet = self.client.pool().take();
        packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(&bytes);
        packet.set_range(HEADROOM, HEADROOM + bytes.len());
        self.client
            .handle_tun_packet(self.now, packet, &mut self.out);
        self.transmit(true);
    }

    fn server_sends(&mut self, tag: u32, destination: Ipv4Addr) {
        self.server_sends_to(tag, destination, 100);
    }

    fn server_sends_sized(&mut self, tag: u32, payload: usize) {
        self.server_sends_to(tag, CLIENT_INNER, payload);
    }

    fn server_sends_to(&mut self, tag: u32, destination: Ipv4Addr, payload: usize) {
        self.server_sends_inner(&inner_packet(SERVER_INNER, destination, tag, payload));
    }

    /// The server's TUN hands it the inner IP packet `bytes`.
    fn server_sends_inner(&mut self, bytes: &[u8]) {
        let mut packet = self.server.pool().take();
        packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        packet.set_range(HEADROOM, HEADROOM + bytes.len());
        self.server
            .handle_tun_packet(self.now, packet, &mut self.out);
        self.transmit(false);
    }

    /// A genuine init from the client's key (as an attacker who held one back would
    /// deliver it), with mac2 under `cookie` if given.
    fn signed_init(&self, unix_time_nanos: u64, cookie: Option<&crate::cookie::Cookie>) -> Vec<u8> {
        let mut init = [0u8; crate::wire::HANDSHAKE_INIT_LEN];
        let fields = crate::handshake::InitFields {
            sender: SessionId(0xc0c0),
            path_id: 0,
            unix_time_nanos,
            renews: None,
            aead: crate::crypto::Aead::ChaCha20Poly1305,
        };
        crate::handshake::initiate(
            &self.client_key,
            &self.server_key.public_key(),
            fields,
            &mut init,
        )
        .unwrap();
        if let Some(cookie) = cookie {
            crate::cookie::write_mac2(cookie, &mut init);
        }
        init.to_vec()
    }

    fn inject_to_server(&mut self, path: usize, bytes: Vec<u8>) {
        self.wire.push(InFlight {
            arrives: self.now,
            to_server: true,
            path,
            bytes,
        });
        self.run_for(Duration::ZERO);
    }

    fn established(delays_ms: &[u64], hold: Duration) -> Self {
        Self::established_with(delays_ms, settings(hold))
    }

    fn established_with(delays_ms: &[u64], session: SessionSettings) -> Self {
        let mut net = Self::with_settings(delays_ms, session);
        net.run_for(Duration::from_millis(500));
        assert!(net.client.is_established(), "handshake did not complete");
        assert_eq!(net.server.session_count(), 1);
        net
    }

    fn client_paths(&self) -> Vec<PathReport> {
        self.client
            .report(self.now)
            .sessions
            .into_iter()
            .next()
            .map(|s| s.paths)
            .unwrap_or_default()
    }

    fn server_paths(&self) -> Vec<PathReport> {
        self.server
            .report(self.now)
            .sessions
            .into_iter()
            .next()
            .map(|s| s.paths)
            .unwrap_or_default()
    }
}

fn delay_rate_settings() -> SessionSettings {
    let mut session = settings(Duration::from_millis(200));
    session.congestion_controller = ControllerChoice::DelayRate;
    session
}

/// A path's jitter: 0 to 12 ms more delay, in turn. Seven delays, so that each end's
/// packets meet all of them whatever the other end sends between.
fn seven_delays_up_to_12_ms() -> Vec<Duration> {
    [0, 7, 12, 3, 9, 1, 11]
        .iter()
        .map(|&ms| Duration::from_millis(ms))
        .collect()
}

#[test]
fn each_end_measures_a_paths_jitter_from_what_it_sends_into_the_idle_path() {
    let mut net = Net::established_with(&[10, 20], delay_rate_settings());
    net.jitter[1] = seven_delays_up_to_12_ms();
    // A packet each way every 300 ms, each alone in flight on its path.
    for tag in 0..20 {
        net.client_sends(tag, 200);
        net.server_sends_sized(tag, 200);
        net.run_for(Duration::from_millis(300));
    }
    // About the 12 ms spread: each end's packets take some of the delays, and the
    // estimate scales what they show up to the whole spread.
    for (side, paths) in each_end_measured_the_second_paths_jitter(&net, 5.0..=20.0) {
        // The controller lets that much and 5 ms more stand before it backs off.
        let jitter = paths[1].jitter_ms.unwrap_or_default();
        let target = paths[1].queuing_delay_target_ms.unwrap_or_default();
        assert!(target >= jitter + 5.0 - 0.01, "{side}: target {target}");
    }
}

/// Each end's paths, once each found no jitter on the first path and the second
/// path's in `second` (ms).
fn each_end_measured_the_second_paths_jitter(
    net: &Net,
    second: std::ops::RangeInclusive<f64>,
) -> [(&'static str, Vec<PathReport>); 2] {
    let ends = [
        ("client", net.client_paths()),
        ("server", net.server_paths()),
    ];
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
    let mut net = Net::with_settings(&[10, 20], delay_rate_settings());
    net.jitter[1] = seven_delays_up_to_12_ms();
    // No data: within a second each end has its jitter from pings alone, long before
    // eight keepalives could bring it.
    net.run_for(Duration::from_secs(1));
    assert!(net.client.is_established(), "handshake did not complete");
    each_end_measured_the_second_paths_jitter(&net, 6.0..=20.0);
    // Then the pings stop, at the latest after their limit: only keepalives go
    // out, about one a second per path.
    net.run_for(Duration::from_secs(3));
    let sent = net.server_datagrams;
    net.run_for(Duration::from_secs(5));
    assert!(
        net.server_datagrams - sent <= 2 * 6,
        "{} datagrams in 5 s",
        net.server_datagrams - sent
    );
}

impl Net {
    /// Within the client's session timeout it has a session again, the server one, and
    /// an inner packet tagged `tag` crosses.
    fn reconnects_and_delivers(&mut self, tag: u32) {
        self.run_for(Duration::from_secs(12));
        assert!(self.client.is_established());
        assert_eq!(self.server.session_count(), 1);
        self.client_sends(tag, 100);
        self.run_for(Duration::from_millis(50));
        let tags: Vec<u32> = self.server_received.iter().map(|p| tag_of(p)).collect();
        assert_eq!(tags, [tag]);
    }

    /// The first handshake init the client sent.
    fn captured_init(&self) -> [u8; crate::wire::HANDSHAKE_INIT_LEN] {
        self.captured
            .iter()
            .find(|(_, bytes)| {
                bytes.first() == Some(&(crate::wire::PacketType::HandshakeInit as u8))
            })
            .and_then(|(_, bytes)| bytes.as_slice().try_into().ok())
            .expect("the client sent an init")
    }
}

// ---- reconfiguration while a stream runs (reload, hotplug) ---------------------------

impl Net {
    /// Adds client path `name` on a new socket with this one-way delay and opens it,
    /// as the daemon does on reload.
    fn add_client_path(&mut self, name: &str, delay_ms: u64) -> PathId {
        let socket = self.delays.len();
        self.delays.push(Duration::from_millis(delay_ms));
        self.cut.push(false);
        self.client_addrs.push(client_addr(socket));
        self.lose_to_client.push(0);
        let settings = ClientPathSettings {
            name: name.into(),
            endpoint: SERVER_ADDR,
            backup: false,
            probing: path_settings(),
        };
        let id = self.client.add_path(self.now, settings, socket).unwrap();
        self.client
            .set_socket_open(self.now, socket, true, &mut self.out);
        self.transmit(true);
        id
    }

    fn session_id(&self) -> (SessionId, u32) {
        let server = self.server.report(self.now).sessions[0].local_id;
        (self.client.session_id().expect("a session"), server)
    }
}

#[test]
fn a_path_added_mid_stream_joins_the_session_and_carries_data() {
    let mut net = Net::established(&[10, 20], Duration::from_millis(200));
    let session = net.session_id();
    for tag in 0..400 {
        if tag == 200 {
            assert_eq!(net.add_client_path("p2", 5), PathId(2));
        }
        net.client_sends(tag, 1000);
        net.run_for(Duration::from_micros(500));
    }
    net.run_for(Duration::from_millis(300));
    let up: Vec<u32> = net.server_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(up, (0..400).collect::<Vec<_>>(), "in order, none lost");
    assert_eq!(net.session_id(), session, "the same session on both ends");
    let client = net.client_paths();
    assert_eq!(client.len(), 3);
    assert_eq!(client[2].state, "up");
    assert!(client[2].sent_data_packets > 20, "{:?}", client[2]);
    let server = net.server_paths();
    assert_eq!(server.len(), 3, "the server learned the new path");
    assert_eq!(server[2].remote, Some(client_addr(2).to_string()));
}

#[test]
fn a_path_removed_mid_stream_hands_its_packets_to_the_others_and_ids_are_not_reused() {
    let mut net = Net::established(&[10, 40], Duration::from_millis(300));
    let session = net.session_id();
    let mut reinjected_at_removal = 0;
    for tag in 0..600 {
        if tag == 300 {
            let before = net.client.report(net.now).sessions[0].reinjected;
            let socket = net.client.remove_path(net.now, "p1", &mut net.out).unwrap();
            assert_eq!(socket, 1);
            // The daemon closes the socket: nothing more goes out or comes in on it.
            net.cut[1] = true;
            net.transmit(true);
            reinjected_at_removal = net.client.report(net.now).sessions[0].reinjected - before;
        }
        net.client_sends(tag, 1000);
        net.run_for(Duration::from_micros(500));
    }
    net.run_for(Duration::from_millis(500));
    let up: Vec<u32> = net.server_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(up, (0..600).collect::<Vec<_>>(), "in order, none lost");
    assert!(
        reinjected_at_removal > 0,
        "the 40 ms path had packets in flight, re-sent at once"
    );
    assert_eq!(net.session_id(), session);
    let paths = net.client_paths();
    assert_eq!(
        paths.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["p0"]
    );
    assert!(net.client.remove_path(net.now, "p1", &mut net.out).is_err());
    // A path added later gets an id the session never used, not the removed one's.
    assert_eq!(net.add_client_path("p1", 10), PathId(2));
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.client_paths()[1].state, "up");
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
    let mut net = Net::established(&[5, 60], Duration::from_millis(300));
    let session = net.session_id();
    let sent_on_slow = |net: &Net| net.client_paths()[1].sent_data_packets;
    let mut slow_before = 0;
    for tag in 0..600 {
        if tag == 300 {
            let mut settings = settings(Duration::from_millis(300));
            settings.scheduler = SchedulerChoice::MinRtt;
            net.client
                .apply_settings(settings, Duration::from_secs(1), Duration::from_secs(10));
            slow_before = sent_on_slow(&net);
        }
        net.client_sends(tag, 200);
        net.run_for(Duration::from_millis(1));
    }
    net.run_for(Duration::from_millis(400));
    let up: Vec<u32> = net.server_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(up, (0..600).collect::<Vec<_>>());
    assert_eq!(net.session_id(), session);
    let report = net.client.report(net.now);
    assert_eq!(report.sessions[0].scheduler, "min-rtt");
    assert!(
        slow_before > 50,
        "round-robin used the slow path: {slow_before}"
    );
    // A light stream fits in the fast path's window: min-rtt leaves the slow one idle.
    assert!(
        sent_on_slow(&net) - slow_before < 10,
        "{} data packets on the slow path after the switch",
        sent_on_slow(&net) - slow_before
    );
}

#[test]
fn server_peer_changes_apply_in_place_and_a_removed_peer_is_closed() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(100));
    let session = net.session_id();
    // Same key, new name and one more allowed address: the session stays.
    let other = Ipv4Addr::new(198, 18, 100, 9);
    let peer = |allowed: &[Ipv4Addr]| PeerSettings {
        name: "renamed".into(),
        public_key: net.client_public,
        allowed_ips: allowed
            .iter()
            .map(|ip| IpNet {
                addr: IpAddr::V4(*ip),
                prefix_len: 32,
            })
            .collect(),
    };
    let kept = vec![peer(&[CLIENT_INNER, other])];
    net.server.set_peers(net.now, kept, &mut net.out);
    assert!(net.out.is_empty());
    net.server_sends(7, other);
    net.run_for(Duration::from_millis(50));
    assert_eq!(net.session_id(), session);
    assert_eq!(
        net.client_received
            .iter()
            .map(|p| tag_of(p))
            .collect::<Vec<_>>(),
        [7]
    );
    assert_eq!(net.server.report(net.now).sessions[0].peer, "renamed");
    // The key is gone: goodbye, and the client's new handshakes are refused.
    net.server.set_peers(net.now, Vec::new(), &mut net.out);
    net.transmit(false);
    net.run_for(Duration::from_millis(50));
    assert_eq!(net.server.session_count(), 0);
    assert!(!net.client.is_established(), "the client heard the goodbye");
    net.run_for(Duration::from_secs(3));
    assert!(!net.client.is_established());
    assert!(net.server.drops().get(DropReason::HandshakeRejected) >= 2);
}
