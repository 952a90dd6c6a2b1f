//! What the structure-aware fuzz targets share: fixed keys made once per process,
//! core settings, descriptions (via `arbitrary`) of the datagrams an attacker can
//! build (edited copies of genuine datagrams, and transport datagrams sealed with a
//! session's real keys around any header, frames and inner packet: [`frames`]), and
//! the bounds every whole-core target checks after each step ([`bounds`]).

mod bounds;
mod frames;

pub use bounds::*;
pub use frames::*;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use mptund::buffers::{BufferPool, Packet, HEADROOM};
use mptund::config::SchedulerChoice;
use mptund::keys::{PrivateKey, PublicKey};
pub use mptund::session::testing::seal_all;
use mptund::session::{Core, Outgoing, Received, ServerLimits};
use mptund::wire;

/// TUN MTU of both cores.
pub const MTU: usize = 1400;
pub const SERVER_ADDR: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51900);
pub const CLIENT_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
/// The inner address of the second configured peer (`two_sessions`).
pub const SECOND_CLIENT_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 3);
pub const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
/// Client paths in every target.
pub const CLIENT_PATHS: usize = 3;
/// Actions taken per input: keeps one execution short.
pub const MAX_ACTIONS: usize = 48;
/// Timer rounds per clock advance, so a core that keeps asking to be woken at one
/// instant cannot hang the fuzzer.
pub const MAX_TIMER_ROUNDS: usize = 256;
/// Datagrams kept per direction for delivery or replay.
pub const MAX_QUEUED: usize = 64;
/// How long the client waits before repeating a handshake the server did not answer.
/// Longer than the daemon's default (1 s): a clock advance of up to a minute then
/// repeats a few handshakes instead of dozens, each of which costs more than the rest
/// of an execution.
pub const HANDSHAKE_RETRY: Duration = Duration::from_secs(5);
/// Wall clock the client starts from (nanoseconds since the UNIX epoch).
pub const CLIENT_UNIX_NANOS: u64 = 1_700_000_000_000_000_000;

pub struct Keys {
    pub client: PrivateKey,
    pub client_public: PublicKey,
    pub server: PrivateKey,
    pub server_public: PublicKey,
    /// A second configured peer (the hostile one of `two_sessions`).
    pub second_client: PrivateKey,
    pub second_client_public: PublicKey,
}

/// Fixed keys, derived once per process (public keys cost a scalar multiplication).
pub fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let client = PrivateKey::from_bytes([0x11; 32]);
        let server = PrivateKey::from_bytes([0x22; 32]);
        let second_client = PrivateKey::from_bytes([0x33; 32]);
        Keys {
            client_public: client.public_key(),
            server_public: server.public_key(),
            second_client_public: second_client.public_key(),
            client,
            server,
            second_client,
        }
    })
}

/// The address the client's path `index` sends from.
pub fn client_addr(index: usize) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, (index % 250) as u8 + 1, 2)),
        40000 + index as u16,
    )
}

/// Where an attacker's datagram claims to come from: a client path's address, or
/// some other host (a spoofed victim).
pub fn source_addr(choice: u8) -> SocketAddr {
    if usize::from(choice) < CLIENT_PATHS * 2 {
        client_addr(usize::from(choice) % CLIENT_PATHS)
    } else {
        SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(198, 19, 7, choice)),
            1024 + u16::from(choice),
        )
    }
}

pub fn session_settings() -> mptund::session::SessionSettings {
    let mut settings = mptund::session::testing::session_settings(
        SchedulerChoice::RoundRobin,
        Duration::from_millis(100),
        MTU,
    );
    // The forged timestamps reach the delay equalization too.
    settings.equalize_delay = Some(mptund_sched::Equalization {
        scope: mptund_sched::EqualizeScope::AllPaths,
        percent: 50,
    });
    settings
}

pub fn pool() -> BufferPool {
    mptund::session::testing::pool(MTU)
}

/// The length of the pool's buffers: a longer datagram is dropped before the core.
pub fn buffer_len() -> usize {
    static LEN: OnceLock<usize> = OnceLock::new();
    *LEN.get_or_init(|| pool().buffer_len())
}

/// Paths a server session may have in the targets: the genuine client's three and
/// one more, so that a rogue's further path ids are refused.
pub const MAX_PATHS_PER_SESSION: usize = CLIENT_PATHS + 1;
/// The server's memory budget in the targets, in packet buffers: small, so that a
/// rogue reaches it within one execution (a reorder window is 1024 buffers, a
/// parity decoder 64).
pub const MEMORY_BUDGET_BUFFERS: u64 = 96;

/// The server's `[limits]` in the targets: [`MAX_PATHS_PER_SESSION`] and
/// [`MEMORY_BUDGET_BUFFERS`] of the pool's buffers.
pub fn server_limits(budget_buffers: u64) -> ServerLimits {
    ServerLimits {
        max_paths_per_session: MAX_PATHS_PER_SESSION,
        memory_budget_bytes: budget_buffers * buffer_len() as u64,
    }
}

/// The reorder window of the targets' sessions, as the reorder buffer rounds it.
pub fn reorder_capacity() -> u64 {
    session_settings().reorder.capacity.next_power_of_two() as u64
}

/// An edit of a datagram's bytes, as an attacker on the path makes it.
#[derive(Arbitrary, Debug, Clone)]
pub enum Edit {
    None,
    SetByte { at: u16, value: u8 },
    XorByte { at: u16, mask: u8 },
    SetPathId(u8),
    Truncate(u16),
    Append(Vec<u8>),
}

impl Edit {
    pub fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Edit::None => {}
            Edit::SetByte { at, value } => {
                if let Some(byte) = index_in(bytes, *at) {
                    *byte = *value;
                }
            }
            Edit::XorByte { at, mask } => {
                if let Some(byte) = index_in(bytes, *at) {
                    *byte ^= *mask;
                }
            }
            Edit::SetPathId(path_id) => {
                if let Some(byte) = bytes.get_mut(wire::field::PATH_ID) {
                    *byte = *path_id;
                }
            }
            Edit::Truncate(len) => bytes.truncate(usize::from(*len)),
            Edit::Append(more) => bytes.extend_from_slice(more),
        }
    }
}

fn index_in(bytes: &mut [u8], at: u16) -> Option<&mut u8> {
    let len = bytes.len();
    if len == 0 {
        return None;
    }
    bytes.get_mut(usize::from(at) % len)
}

/// Recomputes mac1 when `bytes` has an init's length, as anyone who knows the
/// server's public key can.
pub fn remac(bytes: &mut [u8]) {
    if let Ok(init) = <&mut [u8; wire::HANDSHAKE_INIT_LEN]>::try_from(bytes) {
        mptund::handshake::write_mac1(&keys().server_public, init);
    }
}

/// An inner IP packet.
#[derive(Arbitrary, Debug, Clone)]
pub enum InnerSpec {
    Ipv4 {
        source: AddressChoice,
        destination: AddressChoice,
        protocol: u8,
        transport: Vec<u8>,
        /// Extra length beyond the transport bytes, up to past the MTU.
        padding: u16,
        fragment_offset: u16,
    },
    Ipv6 {
        next_header: u8,
        transport: Vec<u8>,
        claimed_payload_len: Option<u16>,
    },
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum AddressChoice {
    Client,
    Server,
    SecondClient,
    Other([u8; 4]),
}

impl AddressChoice {
    fn octets(self) -> [u8; 4] {
        match self {
            AddressChoice::Client => CLIENT_INNER.octets(),
            AddressChoice::Server => SERVER_INNER.octets(),
            AddressChoice::SecondClient => SECOND_CLIENT_INNER.octets(),
            AddressChoice::Other(octets) => octets,
        }
    }
}

impl InnerSpec {
    /// The packet's bytes, at most one byte over the MTU.
    pub fn build(&self) -> Vec<u8> {
        let mut packet = match self {
            InnerSpec::Ipv4 {
                source,
                destination,
                protocol,
                transport,
                padding,
                fragment_offset,
            } => {
                let total = (20 + transport.len() + usize::from(*padding) % (MTU + 1)).min(MTU + 1);
                let mut packet = vec![0u8; total];
                packet[0] = 0x45;
                packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                packet[6..8].copy_from_slice(&(fragment_offset & 0x1fff).to_be_bytes());
                packet[8] = 64;
                packet[9] = *protocol;
                packet[12..16].copy_from_slice(&source.octets());
                packet[16..20].copy_from_slice(&destination.octets());
                let room = total - 20;
                let copied = transport.len().min(room);
                packet[20..20 + copied].copy_from_slice(&transport[..copied]);
                packet
            }
            InnerSpec::Ipv6 {
                next_header,
                transport,
                claimed_payload_len,
            } => {
                let mut packet = vec![0u8; 40];
                packet[0] = 0x60;
                let payload_len = claimed_payload_len.unwrap_or(transport.len() as u16);
                packet[4..6].copy_from_slice(&payload_len.to_be_bytes());
                packet[6] = *next_header;
                packet[8..24]
                    .copy_from_slice(&[0xfd, 0, 0x6d, 0x70, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
                packet[24..40]
                    .copy_from_slice(&[0xfd, 0, 0x6d, 0x70, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                packet.extend_from_slice(transport);
                packet
            }
            InnerSpec::Raw(bytes) => bytes.clone(),
        };
        packet.truncate(MTU + 1);
        packet
    }
}

/// A packet buffer holding `bytes` as a datagram, or `None` when the pool's buffers
/// are too small for it (the daemon drops those as oversize before the core).
pub fn datagram_packet(pool: &mut BufferPool, bytes: &[u8]) -> Option<Packet> {
    pool.take_copy(bytes)
}

/// A packet buffer holding `bytes` as an inner packet read from the TUN.
pub fn tun_packet(pool: &mut BufferPool, bytes: &[u8]) -> Option<Packet> {
    let mut packet = pool.take();
    let end = HEADROOM.checked_add(bytes.len())?;
    packet
        .buffer_mut()
        .get_mut(HEADROOM..end)?
        .copy_from_slice(bytes);
    packet.set_range(HEADROOM, end);
    Some(packet)
}

/// Hands a datagram to `engine` the way the daemon does (receive, then flush the
/// acknowledgements of the batch) and returns the bytes it answered with in
/// `handle_datagram` alone; `None` when the datagram is too large for a buffer (the
/// daemon drops it unread).
pub fn deliver(
    engine: &mut impl Core,
    now: Instant,
    received: Received,
    bytes: &[u8],
    out: &mut Vec<Outgoing>,
) -> Option<usize> {
    let packet = datagram_packet(engine.pool(), bytes)?;
    let before = out.len();
    engine.handle_datagram(now, received, packet, out);
    seal_all(engine, now, out);
    let answered = out[before..].iter().map(|o| o.packet.len()).sum();
    engine.flush_acks(now, out);
    seal_all(engine, now, out);
    Some(answered)
}

/// Advances `engine`'s timers to `until`, at most [`MAX_TIMER_ROUNDS`] times.
pub fn run_timers(
    engine: &mut impl Core,
    now: &mut Instant,
    until: Instant,
    out: &mut Vec<Outgoing>,
) {
    for _ in 0..MAX_TIMER_ROUNDS {
        let Some(at) = engine.poll_timeout().filter(|&at| at <= until) else {
            break;
        };
        *now = (*now).max(at);
        engine.handle_timeout(*now, out);
        seal_all(engine, *now, out);
    }
}

/// With `MPTUND_FUZZ_DUMP_DIR` set, every datagram a genuine core sends is written
/// there (named by type and length), so that seeds for the wire targets are real
/// datagrams: `MPTUND_FUZZ_DUMP_DIR=dir server_core -runs=0 corpus/server_core`.
pub fn dump_datagram(bytes: &[u8]) {
    static DIR: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| std::env::var_os("MPTUND_FUZZ_DUMP_DIR").map(Into::into))
    else {
        return;
    };
    let kind = bytes.first().copied().unwrap_or(0);
    let _ = std::fs::write(dir.join(format!("type{kind}-len{}", bytes.len())), bytes);
}
