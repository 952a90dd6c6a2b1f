//! A whole `ServerCore` with a genuine `ClientCore` on three paths, and an attacker
//! who sees and edits their datagrams, replays them from anywhere, builds genuine
//! inits from the configured client's key with any path id and session id (mac1
//! recomputed), and, once such an init is answered, seals transport datagrams with
//! the session's real keys around any header, frames and inner packet.
//!
//! Checked on every input: no panic, inner packets reach the server's TUN only from
//! the client's allowed address, random bytes never draw a larger answer, and after
//! every server step the bounds of `fuzz/src/bounds.rs`: at most three times what an
//! unvalidated address sent goes back to it, at most one PathResponse per path per
//! datagram carrying challenges (the rogue's datagrams opened with its keys), the
//! work per step under its derived bound, and the sessions' buffers within the
//! (small) memory budget.
#![no_main]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mptund::handshake::{self, PendingHandshake};
use mptund::session::inner::inspect;
use mptund::session::{
    ClientCore, ClientPathSettings, ClientSettings, Core, Outgoing, PeerSettings, Received,
    ServerCore, ServerSettings,
};
use mptund::wire::{self, SessionId, HANDSHAKE_INIT_LEN};
use mptund_fuzz::*;

#[derive(Arbitrary, Debug)]
enum Action {
    /// Delivers the oldest queued datagram of one direction, edited (and the init's
    /// mac1 recomputed when asked).
    Deliver {
        to_server: bool,
        edit: Edit,
        remac: bool,
    },
    /// Delivers everything queued both ways, a few rounds.
    DeliverAll,
    /// Drops the oldest queued datagram of one direction.
    Lose {
        to_server: bool,
    },
    /// Sends a datagram the server received before again, from any address.
    Replay {
        index: u8,
        edit: Edit,
        remac: bool,
        from: u8,
    },
    /// A genuine init from the configured client's key, built by the attacker.
    RogueInit {
        path_id: u8,
        sender: u32,
        clock_step_ms: u16,
        edit: Edit,
        from: u8,
    },
    /// A transport datagram sealed with the keys of the attacker's answered init.
    RogueSealed {
        header: HeaderSpec,
        body: BodySpec,
        from: u8,
    },
    /// One of issue 64's attacks, sealed with the keys of the attacker's session.
    RogueAttack {
        attack: Attack,
        from: u8,
    },
    /// Bytes from nowhere.
    Raw {
        bytes: Vec<u8>,
        from: u8,
    },
    ClientTun(InnerSpec),
    ServerTun(InnerSpec),
    Advance {
        millis: u16,
    },
    ClientSocket {
        index: u8,
        open: bool,
    },
    ServerSendFailed {
        path_id: u8,
    },
    CloseClient,
    CloseServer,
}

/// The rogue session and the path of a datagram carrying challenges.
type ChallengedPath = (u32, u8);

struct World {
    now: Instant,
    client: ClientCore,
    server: ServerCore,
    to_server: VecDeque<(usize, Vec<u8>)>,
    to_client: VecDeque<(usize, Vec<u8>)>,
    /// Datagrams the server received (client's and attacker's), for replays, with
    /// the rogue session and path of those carrying challenges.
    seen_by_server: Vec<(Vec<u8>, Option<ChallengedPath>)>,
    rogue_handshake: Option<PendingHandshake>,
    rogue: Option<RogueSender>,
    rogue_unix_nanos: u64,
    out: Vec<Outgoing>,
    bounds: ServerBounds,
    responses: ResponseLedger,
}

impl World {
    fn new() -> Self {
        let keys = keys();
        let now = Instant::now();
        let session = session_settings();
        let client_settings = ClientSettings {
            private_key: keys.client.clone(),
            server_public_key: keys.server_public,
            aead: mptund::crypto::Aead::Aes256Gcm,
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
        let server_settings = ServerSettings {
            private_key: keys.server.clone(),
            peers: vec![PeerSettings {
                name: "client".into(),
                public_key: keys.client_public,
                allowed_ips: vec![mptund::config::IpNet {
                    addr: CLIENT_INNER.into(),
                    prefix_len: 32,
                }],
            }],
            session,
            path: mptund::session::testing::path_settings(),
            session_idle_timeout: Duration::from_secs(180),
            limits: server_limits(MEMORY_BUDGET_BUFFERS),
        };
        let mut client =
            ClientCore::new(now, Box::new(|| CLIENT_UNIX_NANOS), client_settings, pool());
        let mut out = Vec::new();
        for index in 0..CLIENT_PATHS {
            client.set_socket_open(now, index, true, &mut out);
        }
        let server = ServerCore::new(server_settings, pool());
        let bounds = ServerBounds::new(
            &server,
            now,
            reorder_capacity(),
            MAX_PATHS_PER_SESSION as u64,
        );
        let mut world = World {
            now,
            client,
            server,
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            seen_by_server: Vec::new(),
            rogue_handshake: None,
            rogue: None,
            rogue_unix_nanos: CLIENT_UNIX_NANOS,
            out,
            bounds,
            responses: ResponseLedger::default(),
        };
        world.take_client_output();
        world
    }

    fn take_client_output(&mut self) {
        seal_all(&mut self.client, self.now, &mut self.out);
        for outgoing in std::mem::take(&mut self.out) {
            dump_datagram(outgoing.packet.bytes());
            push_bounded(
                &mut self.to_server,
                (outgoing.socket, outgoing.packet.bytes().to_vec()),
            );
            self.client.pool().recycle(outgoing.packet);
        }
    }

    /// After a server step that left what it sent in `out`: the bounds, then the
    /// datagrams go on their way.
    fn server_step(&mut self, step: ServerStep) {
        seal_all(&mut self.server, self.now, &mut self.out);
        self.bounds.check(&self.server, self.now, step, &self.out);
        self.take_server_output();
    }

    fn take_server_output(&mut self) {
        seal_all(&mut self.server, self.now, &mut self.out);
        let mut responses = HashMap::new();
        for outgoing in std::mem::take(&mut self.out) {
            let bytes = outgoing.packet.bytes().to_vec();
            dump_datagram(&bytes);
            if let Some(rogue) = &mut self.rogue {
                if let Some(observed) = rogue.observe(&bytes) {
                    *responses
                        .entry((rogue.local, observed.path_id))
                        .or_default() += observed.path_responses;
                }
            }
            if let Some(path) = (0..CLIENT_PATHS).find(|&i| client_addr(i) == outgoing.destination)
            {
                push_bounded(&mut self.to_client, (path, bytes.clone()));
            }
            // An answer to the attacker's own init completes its handshake.
            if wire::packet_type(&bytes) == Ok(wire::PacketType::HandshakeResponse) {
                if let Some(pending) = &mut self.rogue_handshake {
                    if let Ok(established) = pending.try_complete(&bytes) {
                        let local = pending.sender().0;
                        self.rogue_handshake = None;
                        self.rogue = Some(RogueSender::new(
                            established.keys,
                            established.peer_session.0,
                            local,
                        ));
                    }
                }
            }
            self.server.pool().recycle(outgoing.packet);
        }
        self.responses.answered_in_step(&responses);
    }

    /// `challenges`: the rogue session and path of a datagram carrying challenges.
    fn receive_at_server(
        &mut self,
        from: std::net::SocketAddr,
        bytes: Vec<u8>,
        challenges: Option<ChallengedPath>,
    ) -> Option<usize> {
        let received = Received {
            socket: 0,
            from,
            local_ip: Some(SERVER_ADDR.ip()),
        };
        if let Some((session, path)) = challenges.filter(|_| bytes.len() <= buffer_len()) {
            self.responses.challenge(session, path);
        }
        let answered = deliver(&mut self.server, self.now, received, &bytes, &mut self.out);
        let len = bytes.len();
        self.seen_by_server.push((bytes, challenges));
        if self.seen_by_server.len() > MAX_QUEUED {
            self.seen_by_server.remove(0);
        }
        match answered {
            Some(_) => self.server_step(ServerStep::Datagram { from, len }),
            None => self.take_server_output(),
        }
        self.check_server_tun();
        answered
    }

    fn receive_at_client(&mut self, socket: usize, bytes: Vec<u8>) {
        let received = Received {
            socket,
            from: SERVER_ADDR,
            local_ip: None,
        };
        deliver(&mut self.client, self.now, received, &bytes, &mut self.out);
        self.take_client_output();
        while let Some(packet) = self.client.poll_tun_packet() {
            self.client.pool().recycle(packet);
        }
    }

    /// The server writes to its TUN only what the client may send.
    fn check_server_tun(&mut self) {
        while let Some(packet) = self.server.poll_tun_packet() {
            let header = inspect(packet.bytes()).expect("the server checked the inner packet");
            assert_eq!(
                header.source, CLIENT_INNER,
                "a packet outside the peer's allowed_ips reached the TUN"
            );
            self.server.pool().recycle(packet);
        }
    }

    fn deliver_one(&mut self, to_server: bool, edit: &Edit, remac_init: bool) {
        let queue = if to_server {
            &mut self.to_server
        } else {
            &mut self.to_client
        };
        let Some((path, mut bytes)) = queue.pop_front() else {
            return;
        };
        edit.apply(&mut bytes);
        if remac_init {
            remac(&mut bytes);
        }
        if to_server {
            self.receive_at_server(client_addr(path), bytes, None);
        } else {
            self.receive_at_client(path, bytes);
        }
    }

    fn advance(&mut self, millis: u16) {
        let until = self.now + Duration::from_millis(u64::from(millis));
        run_timers(&mut self.client, &mut self.now, until, &mut self.out);
        self.take_client_output();
        for _ in 0..MAX_TIMER_ROUNDS {
            let Some(at) = self.server.poll_timeout().filter(|&at| at <= until) else {
                break;
            };
            self.now = self.now.max(at);
            self.server.handle_timeout(self.now, &mut self.out);
            self.server_step(ServerStep::Other);
        }
        self.check_server_tun();
        self.now = self.now.max(until);
    }

    fn rogue_init(&mut self, path_id: u8, sender: u32, clock_step_ms: u16, edit: &Edit, from: u8) {
        let keys = keys();
        self.rogue_unix_nanos += u64::from(clock_step_ms) * 1_000_000;
        let mut init = [0u8; HANDSHAKE_INIT_LEN];
        let fields = handshake::InitFields {
            sender: SessionId(sender),
            path_id,
            unix_time_nanos: self.rogue_unix_nanos,
            renews: None,
            aead: mptund::crypto::Aead::ChaCha20Poly1305,
        };
        let Ok(pending) = handshake::initiate(&keys.client, &keys.server_public, fields, &mut init)
        else {
            return;
        };
        self.rogue_handshake = Some(pending);
        let mut bytes = init.to_vec();
        edit.apply(&mut bytes);
        remac(&mut bytes);
        self.receive_at_server(source_addr(from), bytes, None);
    }

    fn run(&mut self, action: &Action) {
        match action {
            Action::Deliver {
                to_server,
                edit,
                remac,
            } => self.deliver_one(*to_server, edit, *remac),
            Action::DeliverAll => {
                for _ in 0..4 {
                    while !self.to_server.is_empty() {
                        self.deliver_one(true, &Edit::None, false);
                    }
                    while !self.to_client.is_empty() {
                        self.deliver_one(false, &Edit::None, false);
                    }
                }
            }
            Action::Lose { to_server } => {
                let queue = if *to_server {
                    &mut self.to_server
                } else {
                    &mut self.to_client
                };
                queue.pop_front();
            }
            Action::Replay {
                index,
                edit,
                remac: remac_init,
                from,
            } => {
                if self.seen_by_server.is_empty() {
                    return;
                }
                let (original, challenges) =
                    self.seen_by_server[usize::from(*index) % self.seen_by_server.len()].clone();
                let mut bytes = original.clone();
                edit.apply(&mut bytes);
                if *remac_init {
                    remac(&mut bytes);
                }
                // An edited copy does not open; only an exact one may carry challenges.
                let challenges = challenges.filter(|_| bytes == original);
                self.receive_at_server(source_addr(*from), bytes, challenges);
            }
            Action::RogueInit {
                path_id,
                sender,
                clock_step_ms,
                edit,
                from,
            } => self.rogue_init(*path_id, *sender, *clock_step_ms, edit, *from),
            Action::RogueSealed { header, body, from } => {
                let Some(rogue) = &mut self.rogue else {
                    return;
                };
                let sealed = rogue.seal(*header, body);
                let challenges = sealed.challenges.then_some((rogue.local, sealed.path_id));
                self.receive_at_server(source_addr(*from), sealed.bytes, challenges);
            }
            Action::RogueAttack { attack, from } => {
                let Some(rogue) = &mut self.rogue else {
                    return;
                };
                let local = rogue.local;
                for sealed in rogue.attack(*attack, buffer_len(), CLIENT_INNER) {
                    let challenges = sealed.challenges.then_some((local, sealed.path_id));
                    self.receive_at_server(source_addr(*from), sealed.bytes, challenges);
                }
            }
            Action::Raw { bytes, from } => {
                let answered = self
                    .receive_at_server(source_addr(*from), bytes.clone(), None)
                    .unwrap_or(0);
                assert!(
                    answered <= bytes.len(),
                    "{answered} bytes answered {} unauthenticated ones",
                    bytes.len()
                );
            }
            Action::ClientTun(spec) => {
                let bytes = spec.build();
                if let Some(packet) = tun_packet(self.client.pool(), &bytes) {
                    self.client
                        .handle_tun_packet(self.now, packet, &mut self.out);
                    self.take_client_output();
                }
            }
            Action::ServerTun(spec) => {
                let bytes = spec.build();
                if let Some(packet) = tun_packet(self.server.pool(), &bytes) {
                    self.server
                        .handle_tun_packet(self.now, packet, &mut self.out);
                    self.server_step(ServerStep::Other);
                }
            }
            Action::Advance { millis } => self.advance(*millis),
            Action::ClientSocket { index, open } => {
                self.client.set_socket_open(
                    self.now,
                    usize::from(*index) % CLIENT_PATHS,
                    *open,
                    &mut self.out,
                );
                self.take_client_output();
            }
            Action::ServerSendFailed { path_id } => {
                let error = std::io::Error::from_raw_os_error(101);
                self.server.on_send_failed(
                    self.now,
                    mptund_sched::PathId(*path_id % (wire::MAX_PATH_ID + 1)),
                    &error,
                );
            }
            Action::CloseClient => {
                self.client.close(self.now, &mut self.out);
                self.take_client_output();
            }
            Action::CloseServer => {
                self.bounds.server_closed();
                self.server.close(self.now, &mut self.out);
                self.server_step(ServerStep::Other);
            }
        }
    }
}

fn push_bounded(queue: &mut VecDeque<(usize, Vec<u8>)>, item: (usize, Vec<u8>)) {
    if queue.len() >= MAX_QUEUED {
        queue.pop_front();
    }
    queue.push_back(item);
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Start from an established session whose paths the server has learned, so
    /// that most executions explore the established state.
    established: bool,
    actions: Vec<Action>,
}

fuzz_target!(|input: Input| {
    let mut world = World::new();
    if input.established {
        for action in [
            Action::Advance { millis: 1 },
            Action::DeliverAll,
            Action::Advance { millis: 30 },
            Action::DeliverAll,
        ] {
            world.run(&action);
        }
    }
    for action in input.actions.iter().take(MAX_ACTIONS) {
        world.run(action);
    }
    let _ = world.server.report(world.now);
    let _ = world.client.report(world.now);
});
