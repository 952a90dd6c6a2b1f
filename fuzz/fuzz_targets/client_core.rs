//! A whole `ClientCore` on three paths against a rogue server that holds the
//! server's private key: it answers the client's inits (answers edited at will),
//! then seals transport datagrams with the session's real keys around any header,
//! frames and inner packet; it also replays and injects bytes from nowhere.
//!
//! Checked after every step besides not panicking: the client sends only to its
//! configured endpoint (the only addresses it has validated), at most one
//! PathResponse per path per step and no more than datagrams carrying challenges
//! arrived on that path (its datagrams opened with the session's keys), and the
//! work per step stays under the bound derived in `fuzz/src/bounds.rs`.
#![no_main]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mptund::handshake::Responder;
use mptund::session::{ClientCore, ClientPathSettings, ClientSettings, Core, Outgoing, Received};
use mptund::wire::{self, SessionId, HANDSHAKE_RESPONSE_LEN};
use mptund_fuzz::*;

#[derive(Arbitrary, Debug)]
enum Action {
    /// Answers the newest init the client sent, as the server would, then edits the
    /// answer; it arrives on the init's path unless another socket is named.
    Respond {
        server_session: u32,
        edit: Edit,
        socket: Option<u8>,
    },
    /// A transport datagram sealed with the answered session's server-to-client key.
    RogueSealed {
        header: HeaderSpec,
        body: BodySpec,
        socket: u8,
    },
    /// Sends a datagram the client received before again.
    Replay {
        index: u8,
        edit: Edit,
        socket: u8,
    },
    Raw {
        bytes: Vec<u8>,
        socket: u8,
    },
    Tun(InnerSpec),
    Advance {
        millis: u16,
    },
    Socket {
        index: u8,
        open: bool,
    },
    SendFailed {
        path_id: u8,
    },
    Close,
}

struct World {
    now: Instant,
    client: ClientCore,
    responder: &'static Responder,
    /// Inits the client sent and their sockets, newest last.
    inits: VecDeque<(usize, Vec<u8>)>,
    /// Datagrams the client received, and whether each carried challenges.
    seen_by_client: Vec<(Vec<u8>, bool)>,
    rogue: Option<RogueSender>,
    out: Vec<Outgoing>,
    responses: ResponseLedger,
    work_done: u64,
    work_per_step: u64,
}

fn responder() -> &'static Responder {
    static RESPONDER: std::sync::OnceLock<Responder> = std::sync::OnceLock::new();
    RESPONDER.get_or_init(|| Responder::new(&keys().server))
}

impl World {
    fn new() -> Self {
        let keys = keys();
        let now = Instant::now();
        let settings = ClientSettings {
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
            session: session_settings(),
            handshake_retry: HANDSHAKE_RETRY,
            session_timeout: Duration::from_secs(10),
        };
        let mut client = ClientCore::new(now, Box::new(|| CLIENT_UNIX_NANOS), settings, pool());
        let mut out = Vec::new();
        for index in 0..CLIENT_PATHS {
            client.set_socket_open(now, index, true, &mut out);
        }
        let mut world = World {
            now,
            client,
            responder: responder(),
            inits: VecDeque::new(),
            seen_by_client: Vec::new(),
            rogue: None,
            out,
            responses: ResponseLedger::default(),
            work_done: 0,
            // The client has no memory budget: a step moves at most what its reorder
            // buffer holds (the window and twice it ready for release) and one more.
            work_per_step: max_work_per_session_step(
                reorder_capacity(),
                CLIENT_PATHS as u64,
                3 * reorder_capacity() + 1,
            ),
        };
        world.take_output();
        world
    }

    /// After a client step: the bounds, then the datagrams go on their way.
    fn take_output(&mut self) {
        // A new session starts its count from zero.
        let work = self.client.work_units();
        let spent = work.saturating_sub(self.work_done);
        self.work_done = work;
        assert!(
            spent <= self.work_per_step,
            "one step cost {spent} work units, over the bound of {}",
            self.work_per_step
        );
        seal_all(&mut self.client, self.now, &mut self.out);
        let mut responses = HashMap::new();
        for outgoing in std::mem::take(&mut self.out) {
            let bytes = outgoing.packet.bytes();
            assert_eq!(
                outgoing.destination, SERVER_ADDR,
                "the client sent to an address it was not configured with"
            );
            if let Some(rogue) = &mut self.rogue {
                if let Some(observed) = rogue.observe(bytes) {
                    *responses.entry((0, outgoing.socket as u8)).or_default() +=
                        observed.path_responses;
                }
            }
            if wire::packet_type(bytes) == Ok(wire::PacketType::HandshakeInit) {
                if self.inits.len() >= MAX_QUEUED {
                    self.inits.pop_front();
                }
                self.inits.push_back((outgoing.socket, bytes.to_vec()));
            }
            self.client.pool().recycle(outgoing.packet);
        }
        self.responses.answered_in_step(&responses);
        while let Some(packet) = self.client.poll_tun_packet() {
            self.client.pool().recycle(packet);
        }
    }

    /// `challenges`: the datagram is the rogue's and carries challenges.
    fn receive_at_client(&mut self, socket: u8, bytes: Vec<u8>, challenges: bool) {
        let socket = usize::from(socket) % CLIENT_PATHS;
        let received = Received {
            socket,
            from: SERVER_ADDR,
            local_ip: None,
        };
        // A path is a socket on the client: the answer goes back on it.
        if challenges && bytes.len() <= buffer_len() {
            self.responses.challenge(0, socket as u8);
        }
        deliver(&mut self.client, self.now, received, &bytes, &mut self.out);
        self.seen_by_client.push((bytes, challenges));
        if self.seen_by_client.len() > MAX_QUEUED {
            self.seen_by_client.remove(0);
        }
        self.take_output();
    }

    fn run(&mut self, action: &Action) {
        match action {
            Action::Respond {
                server_session,
                edit,
                socket,
            } => {
                let Some((init_socket, init)) = self.inits.back() else {
                    return;
                };
                let arrives_on = socket.unwrap_or(*init_socket as u8);
                let Ok(accepted) = self.responder.accept(init) else {
                    return;
                };
                let client_session = accepted.fields.sender;
                let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
                let Ok(keys) = accepted.respond(SessionId(*server_session), &mut response) else {
                    return;
                };
                self.rogue = Some(RogueSender::new(keys, client_session.0, *server_session));
                let mut bytes = response.to_vec();
                edit.apply(&mut bytes);
                self.receive_at_client(arrives_on, bytes, false);
            }
            Action::RogueSealed {
                header,
                body,
                socket,
            } => {
                let Some(rogue) = &mut self.rogue else {
                    return;
                };
                let sealed = rogue.seal(*header, body);
                self.receive_at_client(*socket, sealed.bytes, sealed.challenges);
            }
            Action::Replay {
                index,
                edit,
                socket,
            } => {
                if self.seen_by_client.is_empty() {
                    return;
                }
                let (original, challenges) =
                    self.seen_by_client[usize::from(*index) % self.seen_by_client.len()].clone();
                let mut bytes = original.clone();
                edit.apply(&mut bytes);
                // An edited copy does not open; only an exact one may carry challenges.
                let challenges = challenges && bytes == original;
                self.receive_at_client(*socket, bytes, challenges);
            }
            Action::Raw { bytes, socket } => self.receive_at_client(*socket, bytes.clone(), false),
            Action::Tun(spec) => {
                let bytes = spec.build();
                if let Some(packet) = tun_packet(self.client.pool(), &bytes) {
                    self.client
                        .handle_tun_packet(self.now, packet, &mut self.out);
                    self.take_output();
                }
            }
            Action::Advance { millis } => {
                let until = self.now + Duration::from_millis(u64::from(*millis));
                // One timer round is one step.
                for _ in 0..MAX_TIMER_ROUNDS {
                    let Some(at) = self.client.poll_timeout().filter(|&at| at <= until) else {
                        break;
                    };
                    self.now = self.now.max(at);
                    self.client.handle_timeout(self.now, &mut self.out);
                    self.take_output();
                }
                self.now = self.now.max(until);
            }
            Action::Socket { index, open } => {
                self.client.set_socket_open(
                    self.now,
                    usize::from(*index) % CLIENT_PATHS,
                    *open,
                    &mut self.out,
                );
                self.take_output();
            }
            Action::SendFailed { path_id } => {
                let error = std::io::Error::from_raw_os_error(101);
                self.client.on_send_failed(
                    self.now,
                    mptund_sched::PathId(*path_id % (wire::MAX_PATH_ID + 1)),
                    &error,
                );
            }
            Action::Close => {
                self.client.close(self.now, &mut self.out);
                self.take_output();
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Start from a session the rogue server has answered, so that most executions
    /// explore the established state.
    established: bool,
    actions: Vec<Action>,
}

fuzz_target!(|input: Input| {
    let mut world = World::new();
    if input.established {
        for action in [
            Action::Advance { millis: 1 },
            Action::Respond {
                server_session: 7,
                edit: Edit::None,
                socket: None,
            },
            Action::Advance { millis: 30 },
        ] {
            world.run(&action);
        }
    }
    for action in input.actions.iter().take(MAX_ACTIONS) {
        world.run(action);
    }
    let _ = world.client.report(world.now);
});
