//! One `ServerCore` shared by two configured peers: a genuine `ClientCore` on three
//! paths whose inner packets the target sends through, and a hostile peer holding
//! its own configured key that the input drives: its handshakes, and transport
//! datagrams sealed with its session's keys around any header, frames (challenges,
//! answers to the server's challenges, GaveUp floods, acknowledgements) and inner
//! packet, Parity datagrams, bursts over many path ids and with gaps, from its own
//! addresses, the genuine client's or a victim's.
//!
//! Every input runs twice: with the hostile peer, and with its actions left out (the
//! server's timers still run where they were). Checked: the genuine client's inner
//! packets reach the server's TUN intact and the same in both runs (the same packets,
//! in the same order, at the same step), so nothing the hostile peer sends costs the
//! other one a packet the network delivered, reorders it or delays it; only the two
//! peers' allowed sources reach the TUN; and in the run with the hostile peer the
//! server's bounds after every step (`fuzz/src/bounds.rs`).
//!
//! The memory budget is shared by the busy sessions, and a peer may hold two at once
//! (its session and a newer one its client is confirming): what the genuine client's
//! session may hold, its packets and a parity decoder on each of its paths, is at
//! most a third of the budget, so its share always covers it and the budget's fair
//! split never cuts it back by design.
#![no_main]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mptund::config::IpNet;
use mptund::handshake::{self, PendingHandshake};
use mptund::session::inner::inspect;
use mptund::session::{
    ClientCore, ClientPathSettings, ClientSettings, Core, Outgoing, PeerSettings, Received,
    ServerCore, ServerSettings, PARITY_DECODER_BUFFERS,
};
use mptund::wire::{self, SessionId, HANDSHAKE_INIT_LEN};
use mptund_fuzz::*;

/// Inner packets the genuine client sends per execution.
const MAX_GENUINE_PACKETS: usize = 96;
/// The server's memory budget here, in packet buffers: three times what the genuine
/// client's session may hold (its packets, and a parity decoder on each path once
/// its client sends parity), so its share covers that with three busy sessions.
const BUDGET_BUFFERS: u64 =
    3 * (MAX_GENUINE_PACKETS + CLIENT_PATHS * PARITY_DECODER_BUFFERS) as u64;
/// Inner packets per send action.
const PACKETS_PER_SEND: u8 = 8;
/// Datagrams in one hostile burst.
const MAX_BURST: u8 = 64;
/// Simulated time an execution spans at most: below the keys' renewal (120 s), so
/// the genuine client does not handshake while the hostile one floods handshakes
/// (that the server then answers with cookies is by design; the init queue's
/// fairness is issue 64's item 2, with tests of its own).
const MAX_RUN_TIME: Duration = Duration::from_secs(100);
/// A live clock advance moves in steps of this, delivering everything between them:
/// the paths' round trip is then about a slice.
const LIVE_SLICE: Duration = Duration::from_millis(25);
/// The longest live clock advance, so that an execution spends its time on what the
/// peers send rather than on idle timers.
const MAX_LIVE_MS: u16 = 2000;
/// The longest the genuine network holds its datagrams back: well under the path
/// timeout (3 s) and the client's session timeout (10 s).
const MAX_STALL_MS: u16 = 500;
/// Timer rounds one clock advance may take before the execution counts as cut
/// short (then the two runs are not compared): a guard against a core that asks to
/// be woken at one instant forever.
const MAX_ROUNDS_PER_ADVANCE: usize = 20_000;
/// The hostile peer's own addresses.
const HOSTILE_ADDRESSES: u8 = 4;

#[derive(Arbitrary, Debug)]
enum Genuine {
    /// Inner packets from the client's TUN, numbered.
    Send { packets: u8, len: u16 },
    /// Delivers everything queued both ways, a few rounds.
    DeliverAll,
    /// Drops the oldest queued datagram of one direction.
    Lose { to_server: bool },
    /// Moves the clock; `live`: in slices with everything delivered between them,
    /// else at most [`MAX_STALL_MS`] with the network holding its datagrams.
    Advance { millis: u16, live: bool },
}

#[derive(Arbitrary, Debug)]
enum Hostile {
    /// A new handshake from the hostile peer's key.
    Init {
        path_id: u8,
        sender: u32,
        clock_step_ms: u16,
        from: u8,
    },
    /// A transport datagram sealed with the hostile session's keys.
    Sealed {
        header: HeaderSpec,
        body: BodySpec,
        from: u8,
    },
    /// The same datagram description sealed `times` times, the path id moving on by
    /// `path_stride` each time (0 keeps one path).
    Burst {
        times: u8,
        path_stride: u8,
        header: HeaderSpec,
        body: BodySpec,
        from: u8,
    },
    /// One of issue 64's attacks.
    Attack {
        attack: Attack,
        from: u8,
    },
    Raw {
        bytes: Vec<u8>,
        from: u8,
    },
}

#[derive(Arbitrary, Debug)]
enum Action {
    Genuine(Genuine),
    Hostile(Hostile),
}

#[derive(Arbitrary, Debug)]
struct Input {
    actions: Vec<Action>,
}

/// Where the hostile peer's datagram claims to come from: its own addresses, the
/// genuine client's, or any other host's.
fn hostile_source(choice: u8) -> SocketAddr {
    match choice % 8 {
        own @ 0..HOSTILE_ADDRESSES => SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(198, 18, 50, own + 1)),
            45000 + u16::from(own),
        ),
        4 | 5 => client_addr(usize::from(choice / 8) % CLIENT_PATHS),
        _ => source_addr(choice),
    }
}

/// The genuine client's inner packet number `index`: UDP from its inner address,
/// the index in the first payload bytes.
fn genuine_packet(index: usize, len: u16) -> Vec<u8> {
    let payload = 4 + usize::from(len) % (MTU - 32);
    let total = 28 + payload;
    let mut packet = vec![0u8; total];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet[8] = 64;
    packet[9] = 17;
    packet[12..16].copy_from_slice(&CLIENT_INNER.octets());
    packet[16..20].copy_from_slice(&SERVER_INNER.octets());
    packet[20..22].copy_from_slice(&5001u16.to_be_bytes());
    packet[22..24].copy_from_slice(&5002u16.to_be_bytes());
    packet[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    packet[28..32].copy_from_slice(&(index as u32).to_be_bytes());
    for (offset, byte) in packet[32..].iter_mut().enumerate() {
        *byte = (index as u8).wrapping_mul(31).wrapping_add(offset as u8);
    }
    packet
}

struct World {
    /// Whether the hostile peer acts in this run.
    hostile_on: bool,
    start: Instant,
    now: Instant,
    server: ServerCore,
    client: ClientCore,
    to_server: VecDeque<(usize, Vec<u8>)>,
    to_client: VecDeque<(usize, Vec<u8>)>,
    /// Lengths of the genuine packets sent, by index.
    sent: Vec<u16>,
    /// Genuine packets the server wrote to its TUN, with the action they came in.
    delivered: Vec<(usize, Vec<u8>)>,
    action: usize,
    cut_short: bool,
    hostile: Option<RogueSender>,
    hostile_handshake: Option<PendingHandshake>,
    /// Every session id the hostile peer's inits named: the server's datagrams to it
    /// carry one.
    hostile_ids: HashSet<u32>,
    hostile_unix_nanos: u64,
    bounds: Option<ServerBounds>,
    responses: ResponseLedger,
    out: Vec<Outgoing>,
}

impl World {
    fn new(hostile_on: bool) -> Self {
        let keys = keys();
        let now = Instant::now();
        let session = session_settings();
        let client_settings = ClientSettings {
            private_key: keys.client.clone(),
            server_public_key: keys.server_public,
            aead: mptund::crypto::Aead::ChaCha20Poly1305,
            paths: (0..CLIENT_PATHS)
                .map(|index| ClientPathSettings {
                    name: format!("p{index}"),
                    endpoint: SERVER_ADDR,
                    backup: false,
                    probing: mptund::session::testing::path_settings(),
                })
                .collect(),
            session: session.clone(),
            handshake_retry: HANDSHAKE_RETRY,
            session_timeout: Duration::from_secs(10),
        };
        let peer = |name: &str, public_key, inner: Ipv4Addr| PeerSettings {
            name: name.into(),
            public_key,
            allowed_ips: vec![IpNet {
                addr: inner.into(),
                prefix_len: 32,
            }],
        };
        let server_settings = ServerSettings {
            private_key: keys.server.clone(),
            peers: vec![
                peer("genuine", keys.client_public, CLIENT_INNER),
                peer("hostile", keys.second_client_public, SECOND_CLIENT_INNER),
            ],
            session,
            path: mptund::session::testing::path_settings(),
            session_idle_timeout: Duration::from_secs(180),
            limits: server_limits(BUDGET_BUFFERS),
        };
        let server = ServerCore::new(server_settings, pool());
        let bounds = hostile_on.then(|| {
            ServerBounds::new(
                &server,
                now,
                reorder_capacity(),
                MAX_PATHS_PER_SESSION as u64,
            )
        });
        let mut client =
            ClientCore::new(now, Box::new(|| CLIENT_UNIX_NANOS), client_settings, pool());
        let mut out = Vec::new();
        for index in 0..CLIENT_PATHS {
            client.set_socket_open(now, index, true, &mut out);
        }
        let mut world = World {
            hostile_on,
            start: now,
            now,
            server,
            client,
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            sent: Vec::new(),
            delivered: Vec::new(),
            action: 0,
            cut_short: false,
            hostile: None,
            hostile_handshake: None,
            hostile_ids: HashSet::new(),
            hostile_unix_nanos: CLIENT_UNIX_NANOS,
            bounds,
            responses: ResponseLedger::default(),
            out,
        };
        world.take_client_output();
        world
    }

    fn take_client_output(&mut self) {
        seal_all(&mut self.client, self.now, &mut self.out);
        for outgoing in std::mem::take(&mut self.out) {
            self.to_server
                .push_back((outgoing.socket, outgoing.packet.bytes().to_vec()));
            self.client.pool().recycle(outgoing.packet);
        }
        while let Some(packet) = self.client.poll_tun_packet() {
            self.client.pool().recycle(packet);
        }
    }

    /// After a server step that left what it sent in `out`: the bounds (in the run
    /// with the hostile peer), then each datagram to its peer.
    fn server_step(&mut self, step: ServerStep) {
        seal_all(&mut self.server, self.now, &mut self.out);
        if let Some(bounds) = &mut self.bounds {
            bounds.check(&self.server, self.now, step, &self.out);
        }
        let mut responses = HashMap::new();
        let mut junk = Vec::new();
        for outgoing in std::mem::take(&mut self.out) {
            let bytes = outgoing.packet.bytes().to_vec();
            self.server.pool().recycle(outgoing.packet);
            // Every message to a client names the client's session id in bytes 4..8.
            let receiver = bytes
                .get(4..8)
                .map(|id| u32::from_be_bytes([id[0], id[1], id[2], id[3]]));
            let to_genuine = (0..CLIENT_PATHS).find(|&i| client_addr(i) == outgoing.destination);
            if !receiver.is_some_and(|id| self.hostile_ids.contains(&id)) {
                if let Some(path) = to_genuine {
                    self.to_client.push_back((path, bytes));
                }
                continue;
            }
            if let Some(hostile) = &mut self.hostile {
                if let Some(observed) = hostile.observe(&bytes) {
                    *responses
                        .entry((hostile.local, observed.path_id))
                        .or_default() += observed.path_responses;
                }
            }
            if wire::packet_type(&bytes) == Ok(wire::PacketType::HandshakeResponse) {
                if let Some(pending) = &mut self.hostile_handshake {
                    if let Ok(established) = pending.try_complete(&bytes) {
                        let local = pending.sender().0;
                        self.hostile_handshake = None;
                        self.hostile = Some(RogueSender::new(
                            established.keys,
                            established.peer_session.0,
                            local,
                        ));
                    }
                }
            }
            // What the server sends the hostile peer at the genuine client's address
            // reaches the genuine client, which must not mind.
            if let Some(path) = to_genuine {
                junk.push((path, bytes));
            }
        }
        self.responses.answered_in_step(&responses);
        self.poll_server_tun();
        for (path, bytes) in junk {
            self.receive_at_client(path, bytes);
        }
    }

    fn poll_server_tun(&mut self) {
        while let Some(packet) = self.server.poll_tun_packet() {
            let bytes = packet.bytes().to_vec();
            self.server.pool().recycle(packet);
            let header = inspect(&bytes).expect("the server checked the inner packet");
            if header.source == IpAddr::V4(SECOND_CLIENT_INNER) {
                continue;
            }
            assert_eq!(
                header.source,
                IpAddr::V4(CLIENT_INNER),
                "a packet outside both peers' allowed_ips reached the TUN"
            );
            let index = bytes
                .get(28..32)
                .map(|index| u32::from_be_bytes([index[0], index[1], index[2], index[3]]));
            let sent = index.and_then(|index| self.sent.get(index as usize));
            assert!(
                sent.is_some_and(|&len| genuine_packet(index.unwrap_or(0) as usize, len) == bytes),
                "the genuine client's packet {index:?} reached the TUN changed"
            );
            self.delivered.push((self.action, bytes));
        }
    }

    fn receive_at_server(&mut self, from: SocketAddr, bytes: &[u8]) {
        let received = Received {
            socket: 0,
            from,
            local_ip: Some(SERVER_ADDR.ip()),
        };
        let len = bytes.len();
        match deliver(&mut self.server, self.now, received, bytes, &mut self.out) {
            Some(_) => self.server_step(ServerStep::Datagram { from, len }),
            None => self.server_step(ServerStep::Other),
        }
    }

    fn receive_at_client(&mut self, socket: usize, bytes: Vec<u8>) {
        let received = Received {
            socket,
            from: SERVER_ADDR,
            local_ip: None,
        };
        deliver(&mut self.client, self.now, received, &bytes, &mut self.out);
        self.take_client_output();
    }

    fn deliver_all(&mut self) {
        for _ in 0..4 {
            while let Some((path, bytes)) = self.to_server.pop_front() {
                self.receive_at_server(client_addr(path), &bytes);
            }
            while let Some((path, bytes)) = self.to_client.pop_front() {
                self.receive_at_client(path, bytes);
            }
        }
    }

    /// Runs every timer due by `until`, the client's first: one server timer round is
    /// one step.
    fn advance_to(&mut self, until: Instant) {
        let until = until.min(self.start + MAX_RUN_TIME).max(self.now);
        let mut rounds = 0;
        while let Some(at) = self.client.poll_timeout().filter(|&at| at <= until) {
            rounds += 1;
            if rounds > MAX_ROUNDS_PER_ADVANCE {
                self.cut_short = true;
                break;
            }
            self.now = self.now.max(at);
            self.client.handle_timeout(self.now, &mut self.out);
            self.take_client_output();
        }
        let mut rounds = 0;
        while let Some(at) = self.server.poll_timeout().filter(|&at| at <= until) {
            rounds += 1;
            if rounds > MAX_ROUNDS_PER_ADVANCE {
                self.cut_short = true;
                break;
            }
            self.now = self.now.max(at);
            self.server.handle_timeout(self.now, &mut self.out);
            self.server_step(ServerStep::Other);
        }
        self.now = self.now.max(until);
    }

    fn genuine(&mut self, action: &Genuine) {
        match action {
            Genuine::Send { packets, len } => {
                for _ in 0..=packets % PACKETS_PER_SEND {
                    if self.sent.len() == MAX_GENUINE_PACKETS {
                        break;
                    }
                    let bytes = genuine_packet(self.sent.len(), *len);
                    self.sent.push(*len);
                    if let Some(packet) = tun_packet(self.client.pool(), &bytes) {
                        self.client
                            .handle_tun_packet(self.now, packet, &mut self.out);
                        self.take_client_output();
                    }
                }
            }
            Genuine::DeliverAll => self.deliver_all(),
            Genuine::Lose { to_server } => {
                let queue = if *to_server {
                    &mut self.to_server
                } else {
                    &mut self.to_client
                };
                queue.pop_front();
            }
            Genuine::Advance { millis, live } => {
                if *live {
                    let millis = millis % MAX_LIVE_MS;
                    let until = self.now + Duration::from_millis(u64::from(millis));
                    while self.now < until && !self.cut_short {
                        let end = self.start + MAX_RUN_TIME;
                        let slice = (self.now + LIVE_SLICE).min(until);
                        self.advance_to(slice);
                        self.deliver_all();
                        if self.now >= end {
                            break;
                        }
                    }
                } else {
                    let millis = millis % MAX_STALL_MS;
                    self.advance_to(self.now + Duration::from_millis(u64::from(millis)));
                }
            }
        }
    }

    fn hostile(&mut self, action: &Hostile) {
        match action {
            Hostile::Init {
                path_id,
                sender,
                clock_step_ms,
                from,
            } => self.hostile_init(*path_id, *sender, *clock_step_ms, *from),
            Hostile::Sealed { header, body, from } => self.hostile_sealed(*header, body, *from),
            Hostile::Burst {
                times,
                path_stride,
                header,
                body,
                from,
            } => {
                let mut header = *header;
                for _ in 0..=times % MAX_BURST {
                    self.hostile_sealed(header, body, *from);
                    header.path_id = header.path_id.wrapping_add(*path_stride);
                }
            }
            Hostile::Attack { attack, from } => {
                let Some(hostile) = &mut self.hostile else {
                    return;
                };
                let local = hostile.local;
                let sealed = hostile.attack(*attack, buffer_len(), SECOND_CLIENT_INNER);
                for sealed in sealed {
                    if sealed.challenges {
                        self.responses.challenge(local, sealed.path_id);
                    }
                    self.receive_at_server(hostile_source(*from), &sealed.bytes);
                }
            }
            Hostile::Raw { bytes, from } => self.receive_at_server(hostile_source(*from), bytes),
        }
    }

    fn hostile_init(&mut self, path_id: u8, sender: u32, clock_step_ms: u16, from: u8) {
        let keys = keys();
        self.hostile_unix_nanos += u64::from(clock_step_ms) * 1_000_000;
        let mut init = [0u8; HANDSHAKE_INIT_LEN];
        let fields = handshake::InitFields {
            sender: SessionId(sender),
            path_id,
            unix_time_nanos: self.hostile_unix_nanos,
            renews: None,
            aead: mptund::crypto::Aead::ChaCha20Poly1305,
        };
        let Ok(pending) =
            handshake::initiate(&keys.second_client, &keys.server_public, fields, &mut init)
        else {
            return;
        };
        self.hostile_handshake = Some(pending);
        self.hostile_ids.insert(sender);
        self.receive_at_server(hostile_source(from), &init);
    }

    fn hostile_sealed(&mut self, header: HeaderSpec, body: &BodySpec, from: u8) {
        let Some(hostile) = &mut self.hostile else {
            return;
        };
        let sealed = hostile.seal(header, body);
        if sealed.challenges && sealed.bytes.len() <= buffer_len() {
            self.responses.challenge(hostile.local, sealed.path_id);
        }
        self.receive_at_server(hostile_source(from), &sealed.bytes);
    }

    fn run(&mut self, action: &Action) {
        match action {
            Action::Genuine(genuine) => self.genuine(genuine),
            Action::Hostile(hostile) if self.hostile_on => self.hostile(hostile),
            Action::Hostile(_) => {}
        }
        // Where the hostile peer acted, the server's timers run in both runs: that is
        // where its inits are answered.
        if matches!(action, Action::Hostile(_)) {
            self.advance_to(self.now);
        }
    }
}

/// The genuine client's packets as the server delivered them, or `None` when the
/// run was cut short.
fn run(input: &Input, hostile_on: bool) -> Option<Vec<(usize, Vec<u8>)>> {
    let mut world = World::new(hostile_on);
    // The genuine client's session and its three paths, validated.
    for action in [
        Genuine::Advance {
            millis: 1,
            live: false,
        },
        Genuine::DeliverAll,
        Genuine::Advance {
            millis: 30,
            live: true,
        },
    ] {
        world.genuine(&action);
    }
    // The hostile peer's session, answered and confirmed with a ping.
    world.run(&Action::Hostile(Hostile::Init {
        path_id: 0,
        sender: 0x0bad_5e55,
        clock_step_ms: 1,
        from: 0,
    }));
    world.run(&Action::Hostile(Hostile::Sealed {
        header: HeaderSpec {
            packet_type: 0,
            path_id: 0,
            counter: CounterChoice::Next,
            receiver: None,
        },
        body: BodySpec::Control {
            path_pn: PnChoice::Next,
            tx_time_us: 0,
            frames: vec![FrameSpec::Ping { ping_id: 1 }],
        },
        from: 0,
    }));
    for (index, action) in input.actions.iter().take(MAX_ACTIONS).enumerate() {
        world.action = index + 1;
        world.run(action);
    }
    // Whatever is in flight or held arrives.
    world.action = MAX_ACTIONS + 1;
    world.genuine(&Genuine::Advance {
        millis: 1000,
        live: true,
    });
    let _ = world.server.report(world.now);
    (!world.cut_short).then_some(world.delivered)
}

fuzz_target!(|input: Input| {
    let with_hostile = run(&input, true);
    let without = run(&input, false);
    if let (Some(with_hostile), Some(without)) = (with_hostile, without) {
        if with_hostile != without {
            let first = with_hostile
                .iter()
                .zip(&without)
                .position(|(a, b)| a != b)
                .unwrap_or(with_hostile.len().min(without.len()));
            let describe = |delivered: &[(usize, Vec<u8>)]| {
                delivered
                    .get(first)
                    .map(|(action, bytes)| (*action, bytes.get(28..32).map(<[u8]>::to_vec)))
            };
            panic!(
                "the hostile peer changed the genuine client's delivered stream: {} packets \
                 with it, {} without; first difference at {first}: {:?} against {:?}",
                with_hostile.len(),
                without.len(),
                describe(&with_hostile),
                describe(&without),
            );
        }
    }
});
