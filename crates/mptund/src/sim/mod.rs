//! A deterministic simulator of a client (or several) and a server talking over
//! emulated paths, driven the way the daemon's event loop drives them.
//!
//! The cores run inside [`Engine`]s and are reached only through the engine's
//! public methods (`handle_tun_packets`, `handle_datagram`, `flush_acks`,
//! `handle_timeout`, `poll_timeout`, `poll_transmit`, `has_transmit`,
//! `on_socket_full`, `on_send_failed`, `set_socket_open`, `poll_tun_packet`,
//! `report`, and what the daemon's reload and shutdown use: `produce`,
//! `fail_transmits`, `close`), so what the engine keeps per socket (blocked sockets,
//! GSO runs) runs here as it does in the daemon, and a change inside the session
//! does not change the simulator. What a TUN has for one instant is read as one
//! batch, as the daemon reads it.
//!
//! Each side's sockets are modelled as the kernel's are. A send is one GSO run from
//! [`Engine::poll_transmit`], split into its segments. It enters the socket's send
//! buffer whole or not at all: a full buffer (as Linux, one with room for a byte
//! takes a send of any size), or a socket blocked by the test for an interval,
//! answers `WouldBlock`; the loop then holds that send, already polled, until the
//! socket is writable (half the buffer free, as Linux's `sock_writeable`), and the
//! engine hears [`Engine::on_socket_full`], as in `daemon/mod.rs`
//! (`send_waiting`, `send_unsent`). The buffer drains into the path at the
//! interface's rate, or at once, and pauses while the socket is blocked. The paths
//! are linkem's [`Link`](linkem::Link) model, one per direction, the same model the
//! test bed's emulator runs: rate, delay, jitter and reordering, a drop-tail queue,
//! random loss, outages, and the run-time cut and scripted losses tests use to lose
//! a given datagram.
//!
//! Each client has its own paths and sockets, and the server one socket that
//! reaches every path by its address; the `client*` methods address the first
//! client, the `nth_client*` ones any ([`SimConfig::clients`]).
//!
//! Tests may also act as an on-path attacker (capture what either side's sockets
//! took, hand the server a batch of datagrams from any addresses or the client one
//! from the server's, make an init with the client's key), wake the server once to
//! see what one wake-up does, restart either end, step the client's wall clock, add
//! and remove client paths as the daemon's reload does, and reach a core for the
//! rest of a reload (`control.rs`); reading state goes through [`Engine::report`]
//! and the engines' cores.
//!
//! Time is virtual ([`linkem::sim::Clock`]): a run takes microseconds per simulated
//! second, and the same [`SimConfig`] (seed included) gives the same deliveries at
//! the same offsets on every run. The keys and the clients' handshake jitter are
//! drawn from the seed too.
//!
//! The module is compiled for this crate's tests and, with the `sim` feature, for
//! integration tests and benchmarks (`cargo test --features sim`,
//! `tests/simulated_exchange.rs`); a daemon build neither compiles it nor links
//! linkem. A `#[cfg(test)]` module would be out of reach of integration tests, and
//! a separate crate depending on mptund would hand this crate's unit tests a second
//! copy of its types.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use linkem::rng::SeededRng;
use linkem::sim::{Clock, EventQueue, Network};
use linkem::{Admission, LinkConfig, LinkCounters};

use crate::keys::{PrivateKey, KEY_LEN};

mod control;
mod side;
mod socket;

use crate::config::IpNet;
use crate::session::testing::{client_settings, pool, server_settings};
use crate::session::{
    ClientCore, Engine, PeerSettings, Received, Report, ServerCore, ServerSettings, SessionSettings,
};
pub use side::Captured;
use side::{Side, Wiring};
use socket::{Datagram, SimSocket};
pub use socket::{SocketConfig, SocketStats, DEFAULT_SEND_BUFFER_BYTES};

/// The server's outer address.
pub const SERVER_ADDR: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51900);

/// The client's inner (tunnel) address; the server allows it alone.
pub const CLIENT_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);

/// Client `client`'s inner address ([`CLIENT_INNER`] for the first).
pub fn client_inner(client: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 100, client as u8 + 2)
}

/// The server side's inner address.
pub const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);

/// The outer address client path `path` sends from.
pub fn client_addr(path: usize) -> SocketAddr {
    nth_client_addr(0, path)
}

/// The outer address path `path` of client `client` sends from.
pub fn nth_client_addr(client: usize, path: usize) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, path as u8 + 1, client as u8 + 2)),
        40000 + path as u16,
    )
}

/// The client's wall clock at the start of a run (its handshakes carry it), in UNIX
/// nanoseconds: any fixed value will do.
const WALL_CLOCK_START_NANOS: u64 = 1_700_000_000_000_000_000;

/// Wake-ups at one instant with no datagram arriving after which a run fails: a
/// core that keeps asking to be woken now without progress would spin the daemon.
const MAX_WAKEUPS_AT_ONE_INSTANT: u32 = 1000;

/// One client path: its socket and a link per direction.
#[derive(Debug, Clone)]
pub struct PathConfig {
    /// Client to server.
    pub up: LinkConfig,
    /// Server to client.
    pub down: LinkConfig,
    pub socket: SocketConfig,
}

impl PathConfig {
    /// The same link both ways and a default socket.
    pub fn symmetric(link: LinkConfig) -> Self {
        Self {
            up: link.clone(),
            down: link,
            socket: SocketConfig::default(),
        }
    }

    /// Links that only delay, `delay_ms` each way.
    pub fn delay_ms(delay_ms: u64) -> Self {
        Self::symmetric(LinkConfig::delay_only(Duration::from_millis(delay_ms)))
    }
}

/// Everything a run depends on.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seeds the links' loss and jitter, the keys and the clients' handshake jitter.
    pub seed: u64,
    /// Both ends' session settings.
    pub session: SessionSettings,
    pub paths: Vec<PathConfig>,
    /// The server's one socket, which every path's replies leave from.
    pub server_socket: SocketConfig,
    /// Clients, each with its own key, inner address ([`client_inner`]) and the
    /// paths above, from [`nth_client_addr`]; the server has them all as peers. The
    /// `client*` methods address the first; the `nth_client*` ones any.
    pub clients: usize,
}

impl SimConfig {
    pub fn new(session: SessionSettings, paths: Vec<PathConfig>) -> Self {
        Self {
            seed: 1,
            session,
            paths,
            server_socket: SocketConfig::default(),
            clients: 1,
        }
    }
}

/// An inner packet written to a TUN, and when (from the start of the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub at: Duration,
    pub bytes: Vec<u8>,
}

/// An RTT sample a path took, as its report showed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttSample {
    /// When, from the start of the run.
    pub at: Duration,
    /// The path's index among the client's paths.
    pub path: usize,
    pub rtt: Duration,
}

/// What a link of the network stands for; a path is its index in [`Wiring`],
/// among the paths of every client.
#[derive(Debug, Clone, Copy)]
enum Hop {
    /// A client socket's send buffer, draining into its path's `Up` link.
    ClientSocket(usize),
    /// The server socket's send buffer, draining into the `Down` link of each
    /// datagram's path.
    ServerSocket,
    Up(usize),
    Down(usize),
}

enum Event {
    ClientTun(Vec<u8>),
    ServerTun(Vec<u8>),
}

/// Client and server engines over emulated paths under a virtual clock.
pub struct Sim {
    clock: Clock,
    network: Network<Datagram>,
    /// What each link of `network` stands for, by its index.
    hops: Vec<Hop>,
    wiring: Wiring,
    /// The first client, which the `client*` methods address.
    client: Side<ClientCore>,
    /// The other clients, the second first.
    others: Vec<Side<ClientCore>>,
    server: Side<ServerCore>,
    events: EventQueue<Event>,
    /// The client's wall clock, in UNIX nanoseconds, moved with the virtual one.
    wall: Arc<AtomicU64>,
    /// Where the client's wall clock stands from where the virtual clock puts it,
    /// in nanoseconds: a test steps it ([`Sim::set_client_wall_clock`]).
    wall_offset_nanos: i128,
    /// The handshake timestamp ceiling the client last asked to store (the
    /// daemon's state file), kept across its restarts.
    stored_ceiling: Option<u64>,
    /// What a restarted server or client is built from.
    server_key: PrivateKey,
    client_key: PrivateKey,
    /// The other clients' keys, the second client's first.
    other_keys: Vec<PrivateKey>,
    /// Paths the client was started with.
    client_paths: usize,
    session: SessionSettings,
    /// Seeds the handshake jitter of each restarted client.
    restart_seeds: SeededRng,
    /// Per client path: RTT samples seen so far, while samples are tracked.
    rtt_samples_seen: Option<Vec<u64>>,
    rtt_samples: Vec<RttSample>,
}

impl Sim {
    pub fn new(config: SimConfig) -> Self {
        let base = Instant::now();
        let clock = Clock::new(base);
        let mut seeds = SeededRng::new(config.seed);
        let client_key = draw_key(&mut seeds);
        let server_key = draw_key(&mut seeds);
        let handshake_jitter = SeededRng::new(seeds.next_u64());
        let mut network = Network::new(base, seeds.next_u64());
        let restart_seeds = SeededRng::new(seeds.next_u64());
        let others: Vec<(PrivateKey, SeededRng)> = (1..config.clients.max(1))
            .map(|_| (draw_key(&mut seeds), SeededRng::new(seeds.next_u64())))
            .collect();
        let other_keys: Vec<PrivateKey> = others.iter().map(|(key, _)| key.clone()).collect();
        let wall = Arc::new(AtomicU64::new(WALL_CLOCK_START_NANOS));
        let paths = config.paths.len();
        let new_client = |key: &PrivateKey, jitter| {
            let core = client_core(
                base,
                &wall,
                key,
                &server_key,
                paths,
                &config.session,
                jitter,
            );
            Side::new(Engine::new(core), false)
        };

        // `hops[i]` says what link `LinkId(i)` stands for: one is pushed per link
        // added. Links are added in this order, so that each keeps its seed whatever
        // comes after: the first client's paths, the server's socket, the other
        // clients' paths.
        let mut hops = Vec::new();
        let mut wiring = Wiring::default();
        let mut client = new_client(&client_key, handshake_jitter);
        for path in &config.paths {
            add_client_socket(
                &mut client,
                0,
                path.clone(),
                &mut network,
                &mut hops,
                &mut wiring,
            );
        }
        let server_socket = SimSocket::new(config.server_socket.clone(), &mut network);
        hops.push(Hop::ServerSocket);
        let mut other_sides = Vec::new();
        for (index, (key, jitter)) in others.into_iter().enumerate() {
            let mut side = new_client(&key, jitter);
            for path in &config.paths {
                let (network, hops, wiring) = (&mut network, &mut hops, &mut wiring);
                add_client_socket(&mut side, index + 1, path.clone(), network, hops, wiring);
            }
            other_sides.push(side);
        }
        for side in std::iter::once(&mut client).chain(&mut other_sides) {
            for index in 0..paths {
                side.engine.set_socket_open(base, index, true);
            }
        }
        let server_core = ServerCore::new(
            server_settings_for(&server_key, &client_key, &other_keys, &config.session),
            pool(config.session.max_inner_len),
        );
        let mut server = Side::new(Engine::new(server_core), true);
        server.sockets.push(server_socket);
        Self {
            clock,
            network,
            hops,
            wiring,
            client,
            others: other_sides,
            server,
            events: EventQueue::default(),
            wall,
            wall_offset_nanos: 0,
            stored_ceiling: None,
            rtt_samples_seen: None,
            rtt_samples: Vec::new(),
            server_key,
            client_key,
            other_keys,
            client_paths: paths,
            session: config.session,
            restart_seeds,
        }
    }

    /// A simulator whose clients finished their handshakes (within 500 ms).
    pub fn established(config: SimConfig) -> Self {
        let mut sim = Self::new(config);
        sim.run_for(Duration::from_millis(500));
        for client in 0..sim.client_count() {
            assert!(
                sim.nth_client(client).core().is_established(),
                "client {client}'s handshake did not complete"
            );
        }
        assert_eq!(sim.server().core().session_count(), sim.client_count());
        sim
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    pub fn client(&self) -> &Engine<ClientCore> {
        &self.client.engine
    }

    pub fn server(&self) -> &Engine<ServerCore> {
        &self.server.engine
    }

    pub fn client_report(&self) -> Report {
        self.client.engine.report(self.now())
    }

    pub fn server_report(&self) -> Report {
        self.server.engine.report(self.now())
    }

    /// Inner packets the server wrote to its TUN, in order.
    pub fn server_tun(&self) -> &[Delivery] {
        &self.server.tun
    }

    /// Inner packets the client wrote to its TUN, in order.
    pub fn client_tun(&self) -> &[Delivery] {
        &self.client.tun
    }

    pub fn client_socket_stats(&self, path: usize) -> SocketStats {
        self.client.sockets[path].stats
    }

    pub fn server_socket_stats(&self) -> SocketStats {
        self.server.sockets[0].stats
    }

    /// The counters of path `path`'s link client to server (`up`) or back.
    pub fn link_counters(&self, path: usize, up: bool) -> LinkCounters {
        let global = self.client.paths[path];
        let id = if up {
            self.wiring.up[global]
        } else {
            self.wiring.down[global]
        };
        self.network
            .link(id)
            .map(|link| *link.counters())
            .unwrap_or_default()
    }

    /// The client's TUN hands it `bytes` now.
    pub fn client_sends(&mut self, bytes: &[u8]) {
        let now = self.now();
        self.client.read_tun(now, bytes);
        self.settle();
    }

    /// How many clients the server has.
    pub fn client_count(&self) -> usize {
        1 + self.others.len()
    }

    /// Client `client`'s engine (`0`: the one [`Sim::client`] returns).
    pub fn nth_client(&self, client: usize) -> &Engine<ClientCore> {
        &self.side(client).engine
    }

    /// Client `client`'s engine, for what the daemon's reload does to the core (or
    /// a test that holds its keys).
    pub fn nth_client_mut(&mut self, client: usize) -> &mut Engine<ClientCore> {
        &mut self.side_mut(client).engine
    }

    /// Client `client`'s TUN hands it `bytes` now.
    pub fn nth_client_sends(&mut self, client: usize, bytes: &[u8]) {
        let now = self.now();
        self.side_mut(client).read_tun(now, bytes);
        self.settle();
    }

    /// Inner packets client `client` wrote to its TUN, in order.
    pub fn nth_client_tun(&self, client: usize) -> &[Delivery] {
        &self.side(client).tun
    }

    fn side(&self, client: usize) -> &Side<ClientCore> {
        match client {
            0 => &self.client,
            _ => &self.others[client - 1],
        }
    }

    fn side_mut(&mut self, client: usize) -> &mut Side<ClientCore> {
        match client {
            0 => &mut self.client,
            _ => &mut self.others[client - 1],
        }
    }

    /// The server's TUN hands it `bytes` now.
    pub fn server_sends(&mut self, bytes: &[u8]) {
        let now = self.now();
        self.server.read_tun(now, bytes);
        self.settle();
    }

    /// The client's TUN will hand it `bytes` `after` from now.
    pub fn schedule_client_send(&mut self, after: Duration, bytes: Vec<u8>) {
        self.events
            .push(self.now() + after, Event::ClientTun(bytes));
    }

    /// The server's TUN will hand it `bytes` `after` from now.
    pub fn schedule_server_send(&mut self, after: Duration, bytes: Vec<u8>) {
        self.events
            .push(self.now() + after, Event::ServerTun(bytes));
    }

    /// Buffers each side's pool allocated so far: (client, server).
    pub fn pool_allocations(&mut self) -> (u64, u64) {
        (
            self.client.engine.pool().allocations(),
            self.server.engine.pool().allocations(),
        )
    }

    /// From now on, records every RTT sample the client's paths take (see
    /// [`Sim::rtt_samples`]). A sample is seen in the report after the step that
    /// took it; of several taken at one instant on one path, the last is seen.
    pub fn track_rtt_samples(&mut self) {
        let counts = self.client_path_rtt_counts();
        self.rtt_samples_seen = Some(counts);
    }

    pub fn rtt_samples(&self) -> &[RttSample] {
        &self.rtt_samples
    }

    fn client_path_rtt_counts(&self) -> Vec<u64> {
        let report = self.client_report();
        let paths = report
            .sessions
            .first()
            .map(|s| s.paths.as_slice())
            .unwrap_or(&[]);
        (0..self.client.sockets.len())
            .map(|index| paths.get(index).map_or(0, |path| path.rtt_samples))
            .collect()
    }

    fn record_rtt_samples(&mut self) {
        let Some(seen) = &mut self.rtt_samples_seen else {
            return;
        };
        let report = self.client.engine.report(self.clock.now());
        let Some(session) = report.sessions.first() else {
            return;
        };
        for (index, path) in session.paths.iter().enumerate() {
            let Some(count) = seen.get_mut(index) else {
                continue;
            };
            if path.rtt_samples != *count {
                *count = path.rtt_samples;
                if let Some(ms) = path.latest_rtt_ms {
                    self.rtt_samples.push(RttSample {
                        at: self.clock.elapsed(),
                        path: index,
                        rtt: Duration::from_secs_f64(ms / 1e3),
                    });
                }
            }
        }
    }

    pub fn run_for(&mut self, duration: Duration) {
        let until = self.now() + duration;
        self.run_until(until);
    }

    /// Advances the clock to `until`, event by event, as the daemon's loop would
    /// wake: sends that waited for their socket, TUN reads, datagrams that arrived,
    /// acknowledgements flushed, timers, then everything produced sent.
    pub fn run_until(&mut self, until: Instant) {
        let mut wakeups_at_one_instant = 0u32;
        let mut last_wakeup = None;
        loop {
            self.settle();
            let next = [
                self.events.peek_time(),
                self.network.poll_timeout(),
                self.client.engine.poll_timeout(),
                self.server.engine.poll_timeout(),
                self.next_unblock(),
            ]
            .into_iter()
            .chain(self.others.iter().map(|side| side.engine.poll_timeout()))
            .flatten()
            .min();
            let Some(next) = next.filter(|&at| at <= until) else {
                break;
            };
            let at = self.now().max(next);
            wakeups_at_one_instant = if last_wakeup == Some(at) {
                wakeups_at_one_instant + 1
            } else {
                0
            };
            last_wakeup = Some(at);
            assert!(
                wakeups_at_one_instant < MAX_WAKEUPS_AT_ONE_INSTANT,
                "wake-up spin at {:?}: client wants {:?}, server wants {:?}",
                self.elapsed(),
                self.client.engine.poll_timeout(),
                self.server.engine.poll_timeout(),
            );
            self.clock.advance_to(at);
            self.step();
        }
        self.clock.advance_to(until);
        self.wall_follows_clock();
    }

    /// The end of the earliest block of a socket holding a refused send.
    fn next_unblock(&self) -> Option<Instant> {
        let elapsed = self.elapsed();
        let clients = std::iter::once(&self.client).chain(&self.others);
        let sockets = clients
            .flat_map(|side| &side.sockets)
            .chain(&self.server.sockets);
        sockets
            .filter(|socket| socket.unsent.is_some())
            .flat_map(|socket| &socket.config.blocked)
            .map(|block| block.start + block.duration)
            .filter(|&end| end > elapsed)
            .min()
            .map(|end| self.clock.base() + end)
    }

    /// The client's wall clock as the virtual clock alone puts it.
    fn unstepped_wall(&self) -> u64 {
        let nanos = u64::try_from(self.elapsed().as_nanos()).unwrap_or(u64::MAX);
        WALL_CLOCK_START_NANOS.saturating_add(nanos)
    }

    fn wall_follows_clock(&self) {
        let stepped = i128::from(self.unstepped_wall()) + self.wall_offset_nanos;
        let nanos = u64::try_from(stepped.max(0)).unwrap_or(u64::MAX);
        self.wall.store(nanos, Ordering::Relaxed);
    }

    /// One wake-up of every end's loop at the clock's instant.
    fn step(&mut self) {
        self.wall_follows_clock();
        let now = self.now();
        for side in std::iter::once(&mut self.client).chain(&mut self.others) {
            side.send_unsent(&self.clock, &mut self.network, &self.wiring);
        }
        self.server
            .send_unsent(&self.clock, &mut self.network, &self.wiring);
        // What each TUN has for this instant is read as one batch, as the daemon reads.
        let (mut client_tun, mut server_tun) = (Vec::new(), Vec::new());
        while let Some((_, event)) = self.events.pop_due(now) {
            match event {
                Event::ClientTun(bytes) => client_tun.push(bytes),
                Event::ServerTun(bytes) => server_tun.push(bytes),
            }
        }
        if !client_tun.is_empty() {
            self.client
                .read_tun_batch(now, client_tun.iter().map(Vec::as_slice));
        }
        if !server_tun.is_empty() {
            self.server
                .read_tun_batch(now, server_tun.iter().map(Vec::as_slice));
        }
        let mut client_read = false;
        while let Some((link, datagram)) = self.network.poll_release(now) {
            match self.hops.get(link.0) {
                Some(&Hop::ClientSocket(path)) => {
                    let len = datagram.bytes.len();
                    // Loss, a full queue or an outage on the path: the datagram is gone.
                    let _: Admission<Datagram> =
                        self.network.send(now, self.wiring.up[path], datagram, len);
                }
                Some(Hop::ServerSocket) => {
                    let len = datagram.bytes.len();
                    let down = self.wiring.down[datagram.path];
                    let _: Admission<Datagram> = self.network.send(now, down, datagram, len);
                }
                Some(Hop::Up(path)) => {
                    let received = Received {
                        socket: 0,
                        from: self.wiring.client_addrs[*path],
                        local_ip: Some(SERVER_ADDR.ip()),
                    };
                    self.server.read_datagram(now, received, &datagram.bytes);
                }
                Some(&Hop::Down(path)) => {
                    let Some(&(client, socket)) = self.wiring.owner.get(path) else {
                        continue;
                    };
                    let side = self.side_mut(client);
                    // A closed socket reads nothing.
                    if side.sockets[socket].open {
                        let received = Received {
                            socket,
                            from: SERVER_ADDR,
                            local_ip: None,
                        };
                        side.read_datagram(now, received, &datagram.bytes);
                        client_read |= client == 0;
                    }
                }
                None => {}
            }
        }
        for side in std::iter::once(&mut self.client).chain(&mut self.others) {
            side.engine.flush_acks(now);
        }
        self.server.engine.flush_acks(now);
        for side in std::iter::once(&mut self.client).chain(&mut self.others) {
            side.handle_timeout(now);
        }
        self.server.handle_timeout(now);
        if client_read {
            self.record_rtt_samples();
        }
        self.settle();
    }

    /// What the daemon does between two wake-ups: stores the client's handshake
    /// timestamp ceiling when asked to, writes to the TUNs and sends what waits.
    fn settle(&mut self) {
        if let Some(ceiling) = self.client.engine.core().timestamp_to_store() {
            self.stored_ceiling = Some(ceiling);
            self.client.engine.core_mut().timestamp_stored(ceiling);
        }
        for side in std::iter::once(&mut self.client).chain(&mut self.others) {
            side.flush(&self.clock, &mut self.network, &self.wiring);
        }
        self.server
            .flush(&self.clock, &mut self.network, &self.wiring);
    }
}

fn draw_key(seeds: &mut SeededRng) -> PrivateKey {
    let mut bytes = [0u8; KEY_LEN];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seeds.next_u64().to_le_bytes()[..chunk.len()]);
    }
    PrivateKey::from_bytes(bytes)
}

/// Adds a socket to client `client`'s side, on a new path (the next in `wiring`)
/// over `path`'s links, from [`nth_client_addr`] of the socket's index.
fn add_client_socket(
    side: &mut Side<ClientCore>,
    client: usize,
    path: PathConfig,
    network: &mut Network<Datagram>,
    hops: &mut Vec<Hop>,
    wiring: &mut Wiring,
) {
    let socket = side.sockets.len();
    let global = wiring.client_addrs.len();
    side.sockets.push(SimSocket::new(path.socket, network));
    hops.push(Hop::ClientSocket(global));
    wiring.up.push(network.add_link(path.up));
    hops.push(Hop::Up(global));
    wiring.down.push(network.add_link(path.down));
    hops.push(Hop::Down(global));
    wiring.client_addrs.push(nth_client_addr(client, socket));
    wiring.owner.push((client, socket));
    side.paths.push(global);
}

/// The server's settings: the first client as `testing::server_settings` makes it
/// (peer "client"), then the others as "client1", "client2", … each allowed its
/// [`client_inner`] address alone.
fn server_settings_for(
    server_key: &PrivateKey,
    client_key: &PrivateKey,
    other_keys: &[PrivateKey],
    session: &SessionSettings,
) -> ServerSettings {
    let mut settings = server_settings(
        server_key.clone(),
        client_key.public_key(),
        IpAddr::V4(CLIENT_INNER),
        session.clone(),
    );
    for (index, key) in other_keys.iter().enumerate() {
        let client = index + 1;
        settings.peers.push(PeerSettings {
            name: format!("client{client}"),
            public_key: key.public_key(),
            allowed_ips: vec![IpNet {
                addr: IpAddr::V4(client_inner(client)),
                prefix_len: 32,
            }],
        });
    }
    settings
}

/// A client core with `paths` paths reading its wall clock from `wall`, its
/// handshake jitter drawn from `jitter`, its paths not yet open.
fn client_core(
    now: Instant,
    wall: &Arc<AtomicU64>,
    key: &PrivateKey,
    server_key: &PrivateKey,
    paths: usize,
    session: &SessionSettings,
    mut jitter: SeededRng,
) -> ClientCore {
    let wall = wall.clone();
    let settings = client_settings(
        key.clone(),
        server_key.public_key(),
        SERVER_ADDR,
        paths,
        session.clone(),
    );
    ClientCore::new(
        now,
        Box::new(move || wall.load(Ordering::Relaxed)),
        settings,
        pool(session.max_inner_len),
    )
    .with_random_source(Box::new(move || (jitter.next_u64() >> 32) as u32))
}

/// An inner IPv4 TCP segment (ACK|PSH) of flow `flow` with `payload` bytes after
/// the headers; the payload starts with `tag` (read back by [`tag_of`]) and the
/// segment's sequence number is `tag * payload`, so a flow's segments are new data
/// in tag order.
pub fn tcp_packet(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    flow: u16,
    tag: u32,
    payload: usize,
) -> Vec<u8> {
    const IPV4_HEADER: usize = 20;
    const TCP_HEADER: usize = 20;
    let payload = payload.max(4);
    let total = IPV4_HEADER + TCP_HEADER + payload;
    let mut packet = vec![0u8; total];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet[8] = 64;
    packet[9] = 6;
    packet[12..16].copy_from_slice(&source.octets());
    packet[16..20].copy_from_slice(&destination.octets());
    let tcp = &mut packet[IPV4_HEADER..];
    tcp[0..2].copy_from_slice(&(40000 + flow).to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&tag.wrapping_mul(payload as u32).to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18;
    tcp[TCP_HEADER..TCP_HEADER + 4].copy_from_slice(&tag.to_be_bytes());
    packet
}

/// The tag [`tcp_packet`] put in `packet`; `None` for anything else.
pub fn tag_of(packet: &[u8]) -> Option<u32> {
    let bytes = packet.get(40..44)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests;
