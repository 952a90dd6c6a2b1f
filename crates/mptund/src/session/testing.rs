//! Settings for cores built outside the daemon: the simulator and its tests, the fuzz
//! targets (`fuzz/`) and the data path benchmark (`benches/datapath.rs`) start from
//! the same values, so a new setting is filled in once.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_probe::ControllerChoice;
use mptund_sched::{ReorderConfig, SchedulerChoice};

use super::{
    ClientPathSettings, ClientSettings, CoDelConfig, Core, Outgoing, PathSettings, PeerSettings,
    SendQueueConfig, ServerSettings, SessionSettings,
};
use crate::buffers::{BufferPool, HEADROOM, TAILROOM};
use crate::config::IpNet;
use crate::keys::{PrivateKey, PublicKey};

/// Session settings with a fixed reorder hold and the given scheduler and TUN MTU;
/// CUBIC on every path.
pub fn session_settings(scheduler: SchedulerChoice, hold: Duration, mtu: usize) -> SessionSettings {
    SessionSettings {
        scheduler,
        duplicate_latency_critical: false,
        parity_on_lossy_paths: true,
        reorder: ReorderConfig {
            max_hold: hold,
            capacity: 1024,
        },
        adaptive_hold: None,
        equalize_delay: None,
        path_timeout: Duration::from_millis(3000),
        send_queue: SendQueueConfig {
            capacity_packets: 1024,
            max_sojourn: Duration::from_millis(50),
            codel: CoDelConfig {
                target: Duration::from_millis(5),
                interval: Duration::from_millis(100),
            },
        },
        max_inner_len: mtu,
        congestion_controller: ControllerChoice::Cubic,
        key_lifetime: crate::crypto::KeyLifetime::default(),
        probe: mptund_probe::ProbeConfig {
            max_datagram_size: (mtu + crate::wire::DATA_OVERHEAD) as u64,
            max_ack_delay: Duration::from_millis(5),
            initial_rtt: mptund_probe::INITIAL_RTT,
        },
    }
}

/// Path probing: keepalives every second, probes every 250 ms, no budget.
pub fn path_settings() -> PathSettings {
    PathSettings {
        keepalive_interval: Duration::from_millis(1000),
        probe_interval: Duration::from_millis(250),
        probe_budget_bytes_per_hour: None,
    }
}

/// A client with `paths` paths p0, p1, … to the server at `endpoint`.
pub fn client_settings(
    private_key: PrivateKey,
    server_public_key: PublicKey,
    endpoint: SocketAddr,
    paths: usize,
    session: SessionSettings,
) -> ClientSettings {
    ClientSettings {
        private_key,
        server_public_key,
        aead: crate::crypto::Aead::ChaCha20Poly1305,
        paths: (0..paths)
            .map(|index| ClientPathSettings {
                name: format!("p{index}"),
                endpoint,
                backup: false,
                probing: path_settings(),
            })
            .collect(),
        session,
        handshake_retry: Duration::from_millis(1000),
        session_timeout: Duration::from_secs(10),
    }
}

/// A server with one peer, "client", allowed to send from `client_inner` alone.
pub fn server_settings(
    private_key: PrivateKey,
    client_public_key: PublicKey,
    client_inner: IpAddr,
    session: SessionSettings,
) -> ServerSettings {
    let prefix_len = if client_inner.is_ipv4() { 32 } else { 128 };
    ServerSettings {
        private_key,
        peers: vec![PeerSettings {
            name: "client".into(),
            public_key: client_public_key,
            allowed_ips: vec![IpNet {
                addr: client_inner,
                prefix_len,
            }],
        }],
        session,
        path: path_settings(),
        session_idle_timeout: Duration::from_secs(180),
        limits: super::ServerLimits::default(),
    }
}

/// A buffer pool whose buffers hold an inner packet of up to `mtu` bytes (and one
/// byte more, to see oversize packets) with the datagram's head- and tailroom.
pub fn pool(mtu: usize) -> BufferPool {
    BufferPool::new(HEADROOM + mtu + 1 + TAILROOM, 64, 4096)
}

/// Seals the unsealed datagrams in `out` at `now`, in order, as if each socket took
/// them at once (what the daemon's loop does through [`super::Engine`]): for harnesses
/// that drive a core directly and put its datagrams on a simulated wire. What must
/// follow a datagram (parity) comes right after it; one not sent after all leaves
/// the list.
pub fn seal_all<C: Core>(core: &mut C, now: Instant, out: &mut Vec<Outgoing>) {
    if out.iter().all(|outgoing| outgoing.unsealed.is_none()) {
        return;
    }
    let mut waiting: VecDeque<Outgoing> = out.drain(..).collect();
    let mut follow = Vec::new();
    let mut buffer = Vec::new();
    while let Some(outgoing) = waiting.pop_front() {
        if outgoing.unsealed.is_none() {
            out.push(outgoing);
            continue;
        }
        let (socket, destination, source_ip, path, owner) = (
            outgoing.socket,
            outgoing.destination,
            outgoing.source_ip,
            outgoing.path,
            outgoing.owner,
        );
        buffer.clear();
        let sealed = core.seal(now, outgoing, &mut buffer, true, &mut follow);
        for next in follow.drain(..).rev() {
            waiting.push_front(next);
        }
        let Some(packet) = sealed.and_then(|_| core.pool().take_copy(&buffer)) else {
            continue;
        };
        out.push(Outgoing {
            packet,
            socket,
            destination,
            source_ip,
            path,
            owner,
            unsealed: None,
        });
    }
}
