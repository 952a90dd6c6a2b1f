//! One server with many clients. Each session runs on its own deadlines in the
//! server's timer heap: a silent session expires on time while another carries
//! traffic, and the busy one is not disturbed.

use super::*;
use crate::session::fec;
use crate::session::share::ServerLimits;
use crate::wire::{PacketType, ParityMeta, PARITY_META_LEN};

const CLIENTS: usize = 24;
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

fn inner_addr(client: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 101, client as u8 + 2)
}

fn outer_addr(client: usize) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, 50, client as u8 + 2)),
        40000,
    )
}

/// Clients and a server on a network without delay.
struct Hub {
    now: Instant,
    server: ServerCore,
    clients: Vec<ClientCore>,
    /// Clients that went away: what they send is lost.
    gone: Vec<bool>,
    to_server: Vec<(usize, Vec<u8>)>,
    to_clients: Vec<(usize, Vec<u8>)>,
    server_received: Vec<Vec<u8>>,
    out: Vec<Outgoing>,
}

impl Hub {
    fn new() -> Self {
        let now = Instant::now();
        let server_key = PrivateKey::generate();
        let session = settings(Duration::from_millis(50));
        let keys: Vec<PrivateKey> = (0..CLIENTS).map(|_| PrivateKey::generate()).collect();
        let mut server_settings = super::testing::server_settings(
            server_key.clone(),
            keys[0].public_key(),
            IpAddr::V4(inner_addr(0)),
            session.clone(),
        );
        server_settings.session_idle_timeout = IDLE_TIMEOUT;
        server_settings.peers = keys
            .iter()
            .enumerate()
            .map(|(index, key)| PeerSettings {
                name: format!("client{index}"),
                public_key: key.public_key(),
                allowed_ips: vec![IpNet {
                    addr: IpAddr::V4(inner_addr(index)),
                    prefix_len: 32,
                }],
            })
            .collect();
        let mut hub = Self {
            now,
            server: ServerCore::new(server_settings, pool()),
            clients: Vec::new(),
            gone: vec![false; CLIENTS],
            to_server: Vec::new(),
            to_clients: Vec::new(),
            server_received: Vec::new(),
            out: Vec::new(),
        };
        for key in keys {
            let settings = super::testing::client_settings(
                key,
                server_key.public_key(),
                SERVER_ADDR,
                1,
                session.clone(),
            );
            let wall_clock = Box::new(|| 1_700_000_000_000_000_000);
            hub.clients
                .push(ClientCore::new(now, wall_clock, settings, pool()));
            let index = hub.clients.len() - 1;
            hub.clients[index].set_socket_open(now, 0, true, &mut hub.out);
            hub.sent_by_client(index);
        }
        hub
    }

    fn sent_by_client(&mut self, index: usize) {
        seal_all(&mut self.clients[index], self.now, &mut self.out);
        for outgoing in std::mem::take(&mut self.out) {
            if !self.gone[index] {
                self.to_server
                    .push((index, outgoing.packet.bytes().to_vec()));
            }
            self.clients[index].pool().recycle(outgoing.packet);
        }
    }

    fn sent_by_server(&mut self) {
        seal_all(&mut self.server, self.now, &mut self.out);
        for outgoing in std::mem::take(&mut self.out) {
            if let Some(index) = (0..CLIENTS).find(|&i| outer_addr(i) == outgoing.destination) {
                self.to_clients
                    .push((index, outgoing.packet.bytes().to_vec()));
            }
            self.server.pool().recycle(outgoing.packet);
        }
        while let Some(packet) = self.server.poll_tun_packet() {
            self.server_received.push(packet.bytes().to_vec());
            self.server.pool().recycle(packet);
        }
    }

    /// Delivers everything on the wire, and what that brings, at `now`.
    fn deliver_all(&mut self) {
        while !self.to_server.is_empty() || !self.to_clients.is_empty() {
            for (index, bytes) in std::mem::take(&mut self.to_server) {
                let received = Received {
                    socket: 0,
                    from: outer_addr(index),
                    local_ip: Some(SERVER_ADDR.ip()),
                };
                let packet = self.server.pool().take_copy(&bytes).unwrap();
                self.server
                    .handle_datagram(self.now, received, packet, &mut self.out);
            }
            self.server.flush_acks(self.now, &mut self.out);
            self.sent_by_server();
            for (index, bytes) in std::mem::take(&mut self.to_clients) {
                let received = Received {
                    socket: 0,
                    from: SERVER_ADDR,
                    local_ip: None,
                };
                let client = &mut self.clients[index];
                let packet = client.pool().take_copy(&bytes).unwrap();
                client.handle_datagram(self.now, received, packet, &mut self.out);
                client.flush_acks(self.now, &mut self.out);
                while let Some(packet) = client.poll_tun_packet() {
                    client.pool().recycle(packet);
                }
                self.sent_by_client(index);
            }
        }
    }

    fn run_for(&mut self, duration: Duration) {
        let until = self.now + duration;
        loop {
            self.deliver_all();
            let next = self
                .clients
                .iter()
                .map(|client| client.poll_timeout())
                .chain([self.server.poll_timeout()])
                .flatten()
                .min();
            let Some(next) = next.filter(|&at| at <= until) else {
                break;
            };
            self.now = self.now.max(next);
            for index in 0..CLIENTS {
                if self.clients[index]
                    .poll_timeout()
                    .is_some_and(|at| at <= self.now)
                {
                    self.clients[index].handle_timeout(self.now, &mut self.out);
                    self.sent_by_client(index);
                }
            }
            if self.server.poll_timeout().is_some_and(|at| at <= self.now) {
                self.server.handle_timeout(self.now, &mut self.out);
                self.sent_by_server();
            }
        }
        self.now = until;
    }

    fn client_sends(&mut self, index: usize, tag: u32) {
        let bytes = inner_packet(inner_addr(index), SERVER_INNER, tag, 200);
        let client = &mut self.clients[index];
        // As the TUN reads it: after the headroom the datagram's header needs.
        let mut packet = client.pool().take();
        packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(&bytes);
        packet.set_range(HEADROOM, HEADROOM + bytes.len());
        client.handle_tun_packet(self.now, packet, &mut self.out);
        self.sent_by_client(index);
    }

    /// An inner packet from the server's TUN to client `index`, sealed and put on
    /// the wire at once.
    fn server_sends(&mut self, index: usize, tag: u32) {
        let bytes = inner_packet(SERVER_INNER, inner_addr(index), tag, 200);
        let mut packet = self.server.pool().take();
        packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(&bytes);
        packet.set_range(HEADROOM, HEADROOM + bytes.len());
        self.server
            .handle_tun_packet(self.now, packet, &mut self.out);
        self.sent_by_server();
    }
}

#[test]
fn silent_sessions_expire_on_time_while_another_carries_traffic() {
    let mut hub = Hub::new();
    hub.run_for(Duration::from_secs(2));
    assert_eq!(hub.server.report(hub.now).sessions.len(), CLIENTS);

    // Every client but the first goes away; the first sends ten packets a second.
    hub.gone[1..].fill(true);
    let went_silent = hub.now;
    let mut tag = 0;
    let mut step = |hub: &mut Hub, until: Duration| {
        while hub.now < went_silent + until {
            hub.client_sends(0, tag);
            tag += 1;
            hub.run_for(Duration::from_millis(100));
        }
    };
    // Each silent client's last keepalive came up to a second before it went silent.
    step(&mut hub, IDLE_TIMEOUT - Duration::from_millis(1100));
    assert_eq!(hub.server.session_count(), CLIENTS, "expired early");
    step(&mut hub, IDLE_TIMEOUT + Duration::from_secs(2));
    assert_eq!(
        hub.server.session_count(),
        1,
        "silent sessions outlived their timeout"
    );

    let report = hub.server.report(hub.now);
    assert_eq!(report.sessions[0].peer, "client0");
    let tags: Vec<u32> = hub.server_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(tags, (0..tag).collect::<Vec<_>>());
}

/// Seals `body` (metadata and what follows it) with client `index`'s session keys,
/// for the path with id `path_id`: what a peer holding its key may send.
fn forge(hub: &mut Hub, index: usize, packet_type: PacketType, path_id: u8, body: &[u8]) {
    let session = hub.clients[index].session_mut().expect("established");
    let (header, counter, key) = session.keys.next_header(packet_type, path_id);
    let mut sealed = body.to_vec();
    let tag = key.seal_in_place(&header, counter, &mut sealed);
    hub.to_server
        .push((index, [header.as_slice(), &sealed, &tag].concat()));
}

#[test]
fn parity_decoders_of_one_session_give_way_to_another_sessions_share() {
    let mut hub = Hub::new();
    hub.run_for(Duration::from_secs(2));
    // Room for four decoders and a few packets besides.
    let budget = 4 * fec::DECODER_BUFFERS + 8;
    let buffer_len = hub.server.pool().buffer_len() as u64;
    hub.server.set_limits(ServerLimits {
        max_paths_per_session: 4,
        memory_budget_bytes: budget as u64 * buffer_len,
    });

    // Client 1 makes the server keep a parity decoder on each of four paths: one
    // Parity datagram each, and it alone is busy, so they all fit.
    let mut body = vec![0u8; PARITY_META_LEN + 200];
    let meta = ParityMeta {
        first_pn: 0,
        members: 0b11,
        seq_xor: 0,
    };
    meta.emit((&mut body[..PARITY_META_LEN]).try_into().unwrap());
    for path_id in 0..4u8 {
        forge(&mut hub, 1, PacketType::Parity, path_id, &body);
    }
    hub.deliver_all();
    assert_eq!(hub.server.memory_held().0, 4 * fec::DECODER_BUFFERS);

    // Client 0's first packet is late: the other 30 wait behind it. Its share is half
    // the budget, which the other session's decoders must give it.
    hub.client_sends(0, 0);
    let late = std::mem::take(&mut hub.to_server);
    for tag in 1..=30 {
        hub.client_sends(0, tag);
    }
    hub.deliver_all();
    hub.to_server.extend(late);
    hub.run_for(Duration::from_secs(1));
    let tags: Vec<u32> = hub
        .server_received
        .iter()
        .map(|packet| tag_of(packet))
        .collect();
    assert_eq!(tags, (0..=30).collect::<Vec<u32>>(), "in order, none lost");
    let (held, budget) = hub.server.memory_held();
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
    let mut hub = Hub::new();
    hub.run_for(Duration::from_secs(2));
    let budget: usize = 40;
    let buffer_len = hub.server.pool().buffer_len() as u64;
    hub.server.set_limits(ServerLimits {
        max_paths_per_session: 4,
        memory_budget_bytes: budget as u64 * buffer_len,
    });
    for tag in 0..80 {
        for client in 0..RECEIVERS {
            hub.server_sends(client, tag);
            // Lost on the way: nothing is acknowledged.
            hub.to_clients.clear();
            let (held, budget) = hub.server.memory_held();
            assert!(
                held <= budget,
                "packet {tag} to {client}: {held} held, budget {budget}"
            );
        }
    }
    assert!(hub.server.drops().get(DropReason::MemoryBudget) > 0);
}
