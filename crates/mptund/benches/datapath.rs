//! The data path's CPU cost without syscalls: sealing and opening a batch of 64
//! full-size datagrams (ChaCha20-Poly1305 and AES-256-GCM from ring), copying their
//! inner packets to keep them for re-sending, and what the two cores spend per
//! inner packet from the client's TUN to the server's TUN (scheduling, sealing,
//! acknowledging, opening, reordering), measured over an established in-memory
//! session whose datagrams cross at once.
//!
//! `cargo bench -p mptund --bench datapath`

use std::collections::VecDeque;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mptund::buffers::{Packet, HEADROOM};
use mptund::config::{ControllerChoice, SchedulerChoice};
use mptund::crypto::{Aead, OpeningKey, SealingKey};
use mptund::keys::PrivateKey;
use mptund::session::testing::{client_settings, pool, server_settings, session_settings};
use mptund::session::{ClientCore, Core, Outgoing, Received, ServerCore};
use mptund::wire::{TAG_LEN, TRANSPORT_HEADER_LEN};

const BATCH: usize = 64;
/// Inner packets per TUN read in the batch benchmark: a 64 KiB offload read of
/// full-size segments.
const TUN_BATCH: usize = 44;
/// The inner MTU of 1500-byte IPv4 paths.
const MTU: usize = 1428;
const SERVER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51900);
const CLIENT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)), 40000);
const CLIENT_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);

fn crypto(c: &mut Criterion) {
    let key = [7u8; 32];
    let header = [1u8; TRANSPORT_HEADER_LEN];
    let body_len = MTU + 12;
    let mut group = c.benchmark_group("aead_batch_of_64");
    group.throughput(Throughput::Bytes((BATCH * body_len) as u64));
    for aead in [Aead::ChaCha20Poly1305, Aead::Aes256Gcm] {
        let sealing = SealingKey::new(aead, &key);
        let opening = OpeningKey::new(aead, &key);
        group.bench_function(format!("seal/{}", aead.name()), |b| {
            let mut bodies = vec![vec![0u8; body_len]; BATCH];
            let mut counter = 0u64;
            b.iter(|| {
                for body in &mut bodies {
                    counter += 1;
                    black_box(sealing.seal_in_place(&header, counter, body));
                }
            })
        });
        let sealed: Vec<Vec<u8>> = (0..BATCH as u64)
            .map(|counter| {
                let mut body = vec![0u8; body_len + TAG_LEN];
                let tag = sealing.seal_in_place(&header, counter, &mut body[..body_len]);
                body[body_len..].copy_from_slice(&tag);
                body
            })
            .collect();
        group.bench_function(format!("open/{}", aead.name()), |b| {
            b.iter_batched_ref(
                || sealed.clone(),
                |batch| {
                    for (counter, body) in batch.iter_mut().enumerate() {
                        black_box(opening.open_in_place(&header, counter as u64, body).is_ok());
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    // What keeping a sent inner packet in the clear costs each datagram, against the
    // decryption a re-send would otherwise need (the "open" row).
    group.bench_function("copy_to_keep", |b| {
        let mut buffers = pool(MTU);
        let mut inner = buffers.take();
        inner.set_range(HEADROOM, HEADROOM + MTU);
        b.iter(|| {
            for _ in 0..BATCH {
                let kept = buffers.take_copy_of(black_box(&inner));
                if let Some(kept) = kept {
                    buffers.recycle(black_box(kept));
                }
            }
        })
    });
    group.finish();
}

/// A client and a server core with an established session over one or more paths
/// (one client socket each, from its own port), and the datagrams between them
/// delivered at once.
struct Pair {
    now: Instant,
    client: ClientCore,
    server: ServerCore,
    out: Vec<Outgoing>,
    packet: Vec<u8>,
    delivered: u64,
    /// Where datagrams are sealed, as the loop's send buffer.
    send_buffer: Vec<u8>,
    /// A batch read from the TUN, kept for its room.
    batch: Vec<Packet>,
}

impl Pair {
    fn established(paths: usize) -> Self {
        let now = Instant::now();
        let client_key = PrivateKey::generate();
        let server_key = PrivateKey::generate();
        let mut session = session_settings(
            SchedulerChoice::EarliestArrival(Default::default()),
            Duration::from_millis(50),
            MTU,
        );
        session.congestion_controller = ControllerChoice::DelayRate;
        let client = ClientCore::new(
            now,
            Box::new(|| 1_700_000_000_000_000_000),
            client_settings(
                client_key.clone(),
                server_key.public_key(),
                SERVER_ADDR,
                paths,
                session.clone(),
            ),
            pool(MTU),
        );
        let server = ServerCore::new(
            server_settings(
                server_key,
                client_key.public_key(),
                IpAddr::V4(CLIENT_INNER),
                session,
            ),
            pool(MTU),
        );
        let mut packet = vec![0u8; MTU];
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&(MTU as u16).to_be_bytes());
        packet[8] = 64;
        packet[9] = 17;
        packet[12..16].copy_from_slice(&CLIENT_INNER.octets());
        packet[16..20].copy_from_slice(&SERVER_INNER.octets());
        let mut pair = Pair {
            now,
            client,
            server,
            out: Vec::new(),
            packet,
            delivered: 0,
            send_buffer: Vec::with_capacity(u16::MAX as usize),
            batch: Vec::new(),
        };
        for socket in 0..paths {
            pair.client
                .set_socket_open(now, socket, true, &mut pair.out);
        }
        for _ in 0..100 {
            pair.now += Duration::from_millis(10);
            pair.exchange();
        }
        // Warm up the path's window and the pools.
        for _ in 0..10_000 {
            pair.one_packet();
        }
        assert!(
            pair.delivered > 9_000,
            "the session carries data: {}",
            pair.delivered
        );
        pair
    }

    /// Runs the timers that are due, then delivers what either side produced until
    /// both are quiet.
    fn exchange(&mut self) {
        let mut to_client = Vec::new();
        if self.client.poll_timeout().is_some_and(|at| at <= self.now) {
            self.client.handle_timeout(self.now, &mut self.out);
        }
        if self.server.poll_timeout().is_some_and(|at| at <= self.now) {
            self.server.handle_timeout(self.now, &mut to_client);
        }
        loop {
            self.client.flush_acks(self.now, &mut self.out);
            let from_client = std::mem::take(&mut self.out);
            let mut moved = !from_client.is_empty() || !to_client.is_empty();
            carry(
                &mut self.client,
                &mut self.server,
                from_client,
                |sent| Received {
                    socket: 0,
                    from: client_address(sent.socket),
                    local_ip: Some(SERVER_ADDR.ip()),
                },
                self.now,
                &mut self.send_buffer,
                &mut to_client,
            );
            self.server.flush_acks(self.now, &mut to_client);
            moved |= !to_client.is_empty();
            let from_server = std::mem::take(&mut to_client);
            carry(
                &mut self.server,
                &mut self.client,
                from_server,
                |sent| Received {
                    socket: usize::from(sent.destination.port() - CLIENT_ADDR.port()),
                    from: SERVER_ADDR,
                    local_ip: None,
                },
                self.now,
                &mut self.send_buffer,
                &mut self.out,
            );
            while let Some(packet) = self.server.poll_tun_packet() {
                self.delivered += 1;
                self.server.pool().recycle(packet);
            }
            while let Some(packet) = self.client.poll_tun_packet() {
                self.client.pool().recycle(packet);
            }
            if !moved {
                return;
            }
        }
    }

    /// One inner packet from the client's TUN to the server's, 10 µs after the last.
    fn one_packet(&mut self) {
        self.now += Duration::from_micros(10);
        if self.client.poll_timeout().is_some_and(|at| at <= self.now) {
            self.client.handle_timeout(self.now, &mut self.out);
        }
        let mut packet = self.client.pool().take();
        packet.inner_read_area()[..MTU].copy_from_slice(&self.packet);
        packet.set_range(HEADROOM, HEADROOM + MTU);
        self.client
            .handle_tun_packet(self.now, packet, &mut self.out);
        self.exchange();
    }

    /// A batch of `count` inner packets read from the client's TUN at once (as one
    /// segmentation-offload read gives them), `count` × 10 µs after the last.
    fn one_batch(&mut self, count: usize) {
        self.now += Duration::from_micros(10) * count as u32;
        if self.client.poll_timeout().is_some_and(|at| at <= self.now) {
            self.client.handle_timeout(self.now, &mut self.out);
        }
        let mut batch = std::mem::take(&mut self.batch);
        for _ in 0..count {
            let mut packet = self.client.pool().take();
            packet.inner_read_area()[..MTU].copy_from_slice(&self.packet);
            packet.set_range(HEADROOM, HEADROOM + MTU);
            batch.push(packet);
        }
        self.client
            .handle_tun_packets(self.now, &mut batch, &mut self.out);
        self.batch = batch;
        self.exchange();
    }
}

/// The address the client's socket `socket` sends from.
fn client_address(socket: usize) -> SocketAddr {
    let port = CLIENT_ADDR.port() + u16::try_from(socket).expect("a few sockets");
    SocketAddr::new(CLIENT_ADDR.ip(), port)
}

/// Hands what `from` sent to `to` as received datagrams, each arriving as `received`
/// says; what `to` answers goes to `out`. Each datagram is sealed into one reused
/// buffer as the loop's `poll_transmit` seals it into its send buffer, and copied
/// from there into a packet of `to`'s, as a socket read would.
fn carry(
    from: &mut impl Core,
    to: &mut impl Core,
    sent: Vec<Outgoing>,
    received: impl Fn(&Outgoing) -> Received,
    now: Instant,
    buffer: &mut Vec<u8>,
    out: &mut Vec<Outgoing>,
) {
    let mut waiting: VecDeque<Outgoing> = sent.into();
    let mut follow = Vec::new();
    while let Some(outgoing) = waiting.pop_front() {
        let arrives_as = received(&outgoing);
        buffer.clear();
        let sealed = from.seal(now, outgoing, buffer, true, &mut follow);
        for next in follow.drain(..).rev() {
            waiting.push_front(next);
        }
        if sealed.is_none() {
            continue;
        }
        if let Some(packet) = to.pool().take_copy(buffer) {
            to.handle_datagram(now, arrives_as, packet, out);
        }
    }
}

/// Inner packets the `core` benchmarks carried, printed at the end when
/// `MPTUND_BENCH_PACKETS` is set: with `perf stat -e instructions:u` and
/// `--profile-time`, instructions per packet, which wall-clock noise does not move.
static PACKETS_CARRIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn core(c: &mut Criterion) {
    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(1));
    for paths in [1, 3] {
        let mut pair = Pair::established(paths);
        group.bench_function(
            format!("client_tun_to_server_tun_per_packet/{paths}_paths"),
            |b| {
                b.iter(|| {
                    pair.one_packet();
                    PACKETS_CARRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                })
            },
        );
    }
    group.finish();
    let mut group = c.benchmark_group("core_batch");
    group.throughput(Throughput::Elements(TUN_BATCH as u64));
    for paths in [1, 3, 8] {
        let mut pair = Pair::established(paths);
        group.bench_function(
            format!("client_tun_to_server_tun_batch_of_{TUN_BATCH}/{paths}_paths"),
            |b| {
                b.iter(|| {
                    pair.one_batch(TUN_BATCH);
                    PACKETS_CARRIED
                        .fetch_add(TUN_BATCH as u64, std::sync::atomic::Ordering::Relaxed);
                })
            },
        );
    }
    group.finish();
    if std::env::var_os("MPTUND_BENCH_PACKETS").is_some() {
        eprintln!(
            "packets carried: {}",
            PACKETS_CARRIED.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}

criterion_group!(benches, crypto, core);
criterion_main!(benches);
