//! Many idle mptund clients in one process, for measuring what a server pays per
//! session (benches/scale). Every simulated client is a real [`ClientCore`] with its own
//! key and UDP socket: it performs the Noise handshake and then keeps its one path alive
//! with keepalives, exactly as `mptund run` would, without a TUN.
//!
//! ```text
//! idle_clients peers --count 1000              # [[peer]] tables for the server's file
//! idle_clients run --count 1000 --server 198.18.1.1:51900 --server-public-key KEY
//! ```
//!
//! Client `i`'s private key is SHA-256("mptund idle client" || seed || i), so `peers` and
//! `run` agree without files; its inner address is 198.19.(i / 256).(i % 256).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use mptund::buffers::{BufferPool, HEADROOM, TAILROOM};
use mptund::config::{ControllerChoice, SchedulerChoice};
use mptund::keys::{PrivateKey, PublicKey};
use mptund::session::{
    ClientCore, ClientPathSettings, ClientSettings, Core, PathSettings, Received, SendQueueConfig,
    SessionSettings,
};
use mptund_probe::ProbeConfig;
use mptund_sched::ReorderConfig;

/// Each loop round sleeps this long: idle clients only need keepalive precision.
const TICK: Duration = Duration::from_millis(5);
/// The TUN MTU a 1500-byte IPv4 path allows (see mtu.rs).
const MTU: usize = 1428;

fn usage() -> ! {
    eprintln!(
        "usage: idle_clients peers --count N [--seed S]\n       idle_clients run --count N [--seed S] --server IP:PORT --server-public-key KEY [--bind IP] [--keepalive-ms MS]"
    );
    std::process::exit(2)
}

struct Args {
    count: usize,
    seed: u64,
    server: Option<SocketAddr>,
    server_public_key: Option<String>,
    bind: IpAddr,
    keepalive: Duration,
}

fn parse_args(args: &[String]) -> Args {
    let mut parsed = Args {
        count: 0,
        seed: 1,
        server: None,
        server_public_key: None,
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        keepalive: Duration::from_secs(1),
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--count" => parsed.count = value.parse().unwrap_or_else(|_| usage()),
            "--seed" => parsed.seed = value.parse().unwrap_or_else(|_| usage()),
            "--server" => parsed.server = Some(value.parse().unwrap_or_else(|_| usage())),
            "--server-public-key" => parsed.server_public_key = Some(value.clone()),
            "--bind" => parsed.bind = value.parse().unwrap_or_else(|_| usage()),
            "--keepalive-ms" => {
                parsed.keepalive = Duration::from_millis(value.parse().unwrap_or_else(|_| usage()))
            }
            _ => usage(),
        }
    }
    parsed
}

fn client_key(seed: u64, index: usize) -> PrivateKey {
    let mut input = b"mptund idle client".to_vec();
    input.extend_from_slice(&seed.to_be_bytes());
    input.extend_from_slice(&(index as u64).to_be_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    let bytes: [u8; 32] = digest.as_ref().try_into().expect("SHA-256 is 32 bytes");
    PrivateKey::from_bytes(bytes)
}

fn inner_address(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, (index / 256) as u8, (index % 256) as u8)
}

fn settings(
    args: &Args,
    index: usize,
    server: SocketAddr,
    server_key: PublicKey,
) -> ClientSettings {
    ClientSettings {
        private_key: client_key(args.seed, index),
        server_public_key: server_key,
        aead: mptund::crypto::Aead::fastest_here(),
        paths: vec![ClientPathSettings {
            name: "idle".into(),
            endpoint: server,
            backup: false,
            probing: PathSettings {
                keepalive_interval: args.keepalive,
                probe_interval: Duration::from_millis(250),
                probe_budget_bytes_per_hour: None,
            },
        }],
        session: SessionSettings {
            scheduler: SchedulerChoice::RoundRobin,
            duplicate_latency_critical: false,
            parity_on_lossy_paths: true,
            reorder: ReorderConfig {
                max_hold: Duration::from_millis(100),
                capacity: 64,
            },
            adaptive_hold: None,
            equalize_delay: None,
            // As the configuration requires: longer than the keepalive interval.
            path_timeout: Duration::from_secs(3).max(3 * args.keepalive),
            send_queue: SendQueueConfig {
                capacity_packets: 16,
                max_sojourn: Duration::from_millis(50),
                codel: mptund::session::CoDelConfig {
                    target: Duration::from_millis(5),
                    interval: Duration::from_millis(100),
                },
            },
            max_inner_len: MTU,
            congestion_controller: ControllerChoice::Cubic,
            key_lifetime: Default::default(),
            probe: ProbeConfig {
                max_datagram_size: (MTU + mptund::wire::DATA_OVERHEAD) as u64,
                max_ack_delay: Duration::from_millis(5),
                initial_rtt: mptund_probe::INITIAL_RTT,
            },
        },
        handshake_retry: Duration::from_secs(1),
        session_timeout: Duration::from_secs(10).max(3 * args.keepalive),
    }
}

fn run(args: &Args) {
    let server = args.server.unwrap_or_else(|| usage());
    let key_text = args.server_public_key.as_deref().unwrap_or_else(|| usage());
    let server_key = PublicKey::from_base64(key_text.trim()).expect("a base64 public key");
    let start = Instant::now();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let mut clients: Vec<(ClientCore, UdpSocket)> = (0..args.count)
        .map(|index| {
            let pool = BufferPool::new(HEADROOM + MTU + 1 + TAILROOM, 2, 32);
            let mut core = ClientCore::new(
                start,
                Box::new(wall),
                settings(args, index, server, server_key),
                pool,
            );
            core.set_socket_open(start, 0, true, &mut Vec::new());
            let socket = UdpSocket::bind(SocketAddr::new(args.bind, 0)).expect("a UDP socket");
            socket.set_nonblocking(true).expect("non-blocking");
            (core, socket)
        })
        .collect();
    let mut out = Vec::new();
    let mut buffer = vec![0u8; 65_536];
    let mut reported = usize::MAX;
    let mut next_report = start;
    loop {
        for (core, socket) in &mut clients {
            let now = Instant::now();
            loop {
                match socket.recv_from(&mut buffer) {
                    Ok((len, from)) => {
                        if let Some(packet) = core.pool().take_copy(&buffer[..len]) {
                            let received = Received {
                                socket: 0,
                                from,
                                local_ip: None,
                            };
                            core.handle_datagram(now, received, packet, &mut out);
                        }
                    }
                    Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                    Err(error) => {
                        eprintln!("receive: {error}");
                        break;
                    }
                }
            }
            core.flush_acks(now, &mut out);
            if core.poll_timeout().is_some_and(|at| at <= now) {
                core.handle_timeout(now, &mut out);
            }
            for datagram in out.drain(..) {
                if let Err(error) = socket.send_to(datagram.packet.bytes(), datagram.destination) {
                    core.on_send_failed(now, datagram.path, &error);
                }
                core.pool().recycle(datagram.packet);
            }
            while let Some(packet) = core.poll_tun_packet() {
                core.pool().recycle(packet);
            }
        }
        let now = Instant::now();
        if now >= next_report {
            next_report = now + Duration::from_secs(1);
            let established = clients
                .iter()
                .filter(|(core, _)| core.is_established())
                .count();
            if established != reported {
                reported = established;
                eprintln!("established {established}");
            }
        }
        std::thread::sleep(TICK);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        usage()
    };
    let parsed = parse_args(rest);
    match command.as_str() {
        "peers" => {
            for index in 0..parsed.count {
                let public = client_key(parsed.seed, index).public_key();
                println!(
                    "[[peer]]\nname = \"idle{index}\"\npublic_key = \"{}\"\nallowed_ips = [\"{}/32\"]\n",
                    public.to_base64(),
                    inner_address(index)
                );
            }
        }
        "run" => run(&parsed),
        _ => usage(),
    }
}
