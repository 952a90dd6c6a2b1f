//! A hostile authenticated client, for the isolation benchmark (`benches/isolation/`).
//!
//! It holds one configured client key, performs the real Noise IK handshake with the
//! server, confirms the session with a Ping, and then sends well-formed, authenticated
//! datagrams that a real client never sends: one attack per run.
//!
//! ```text
//! hostile_client --client-key hostile.key --server-public-key KEY --server 198.18.0.1:51900 \
//!     --attack challenge-flood --duration 20 [--rate 0] [--bind 198.18.200.2]
//! ```
//!
//! Attacks (issue 64, "Why"):
//!
//! - `challenge-flood`: Control datagrams of `--frames` (150) PathChallenge frames each.
//! - `gaveup-flood`: Control datagrams of `--frames` (184) GaveUp frames, each giving up
//!   65,535 sequence numbers from the server's next expected one.
//! - `parity-paths`: one Parity datagram on each of paths 1..63, repeated every second
//!   (so the paths stay alive); `--rate` does not apply.
//! - `many-paths`: DataWithFrames datagrams, each with a Ping frame and an inner
//!   packet, on path ids 0..63 in turn.
//! - `reorder-gaps`: Data datagrams that leave every `--gap-every`-th (2nd) sequence
//!   number out and never send it, so the server's reorder buffer keeps holding what
//!   came after. They alternate between paths 0 and 1, whose timestamps differ by
//!   300 ms, so the server's adaptive hold grows to its maximum.
//! - `handshake-sources`: HandshakeInits from `--sources` (256) real source addresses
//!   `--source-base` + i (the caller puts them on the interface), answering cookie
//!   replies with mac2 as a real client does. The inits are replays of `--inits`
//!   (4096) made beforehand with old timestamps, so the server does Noise before it
//!   can refuse them, and the attacker spends no Diffie-Hellman while it floods.
//! - `plain-data`: the control run. Well-formed in-order Data on path 0, what a heavy
//!   but honest client sends.
//!
//! Every attack also sends a keepalive Ping on path 0 each second, so the session stays
//! up. `--rate` is in datagrams per second; 0 sends as fast as the (blocking) socket
//! takes them, which on a shaped link is its line rate. At exit it prints one JSON line
//! with what it sent and what came back (datagrams, bytes, by type).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mptund::cookie::{self, Cookie, CookieReplyKey, COOKIE_NONCE_LEN, SEALED_COOKIE_LEN};
use mptund::crypto::{Aead, SessionKeys};
use mptund::handshake::{self, InitFields};
use mptund::keys::{PrivateKey, PublicKey};
use mptund::session::random_session_id;
use mptund::wire::{
    self, field, ControlMeta, DataMeta, Frame, PacketType, ParityMeta, SessionId, TransportHeader,
    CONTROL_META_LEN, DATA_META_LEN, HANDSHAKE_INIT_LEN, PARITY_META_LEN, TAG_LEN,
    TRANSPORT_HEADER_LEN, TRANSPORT_VERSION,
};

/// The server's path ids are 0..=63 (docs/PROTOCOL.md, "Roles and identifiers").
const PATH_IDS: u8 = wire::MAX_PATH_ID + 1;
/// How often every attack sends a Ping on path 0: the client's default keepalive.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// Sends that fall due within this much are sent at once rather than slept for.
const PACING_SLACK: Duration = Duration::from_millis(1);
/// How long the handshake may take before the run gives up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Resend interval of an unanswered init: the daemon's default `handshake_retry_ms`.
const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// GaveUp's largest count; the server clamps it to its reorder window.
const GAVE_UP_COUNT: u16 = u16::MAX;
/// The timestamp offset of path 1 in `reorder-gaps`: above the default
/// `reorder.max_hold_ms` (200), so the adaptive hold reaches its maximum.
const SLOW_PATH_OFFSET_US: u32 = 300_000;
/// The UDP discard port (RFC 863): where the inner packets go.
const DISCARD_PORT: u16 = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    ChallengeFlood,
    GaveUpFlood,
    ParityPaths,
    ManyPaths,
    ReorderGaps,
    HandshakeSources,
    PlainData,
}

impl Attack {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "challenge-flood" => Attack::ChallengeFlood,
            "gaveup-flood" => Attack::GaveUpFlood,
            "parity-paths" => Attack::ParityPaths,
            "many-paths" => Attack::ManyPaths,
            "reorder-gaps" => Attack::ReorderGaps,
            "handshake-sources" => Attack::HandshakeSources,
            "plain-data" => Attack::PlainData,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Attack::ChallengeFlood => "challenge-flood",
            Attack::GaveUpFlood => "gaveup-flood",
            Attack::ParityPaths => "parity-paths",
            Attack::ManyPaths => "many-paths",
            Attack::ReorderGaps => "reorder-gaps",
            Attack::HandshakeSources => "handshake-sources",
            Attack::PlainData => "plain-data",
        }
    }

    /// Frames per datagram by default: what fits a 1,690-byte datagram (issue 64).
    fn default_frames(self) -> usize {
        match self {
            Attack::GaveUpFlood => 184,
            _ => 150,
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: hostile_client --client-key FILE --server-public-key BASE64 --server IP:PORT\n\
         \x20   --attack challenge-flood|gaveup-flood|parity-paths|many-paths|reorder-gaps|handshake-sources|plain-data\n\
         \x20   [--duration S] [--rate PER_S] [--bind IP] [--frames N] [--gap-every N]\n\
         \x20   [--inner-source IP] [--inner-destination IP] [--inner-len BYTES]\n\
         \x20   [--source-base IP] [--sources N] [--inits N] [--aead chacha20-poly1305|aes-256-gcm]"
    );
    std::process::exit(2)
}

struct Args {
    client_key: String,
    server_public_key: String,
    server: SocketAddr,
    attack: Attack,
    duration: Duration,
    rate: f64,
    bind: IpAddr,
    frames: Option<usize>,
    gap_every: u32,
    inner_source: Ipv4Addr,
    inner_destination: Ipv4Addr,
    inner_len: usize,
    source_base: Ipv4Addr,
    sources: u32,
    inits: usize,
    aead: Aead,
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut key = None;
    let mut server_key = None;
    let mut server = None;
    let mut attack = None;
    let mut parsed = Args {
        client_key: String::new(),
        server_public_key: String::new(),
        server: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        attack: Attack::PlainData,
        duration: Duration::from_secs(20),
        rate: 0.0,
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        frames: None,
        gap_every: 2,
        inner_source: Ipv4Addr::new(198, 18, 100, 200),
        inner_destination: Ipv4Addr::new(198, 18, 100, 1),
        inner_len: 1400,
        source_base: Ipv4Addr::new(198, 18, 201, 0),
        sources: 256,
        inits: 4096,
        aead: Aead::ChaCha20Poly1305,
    };
    for pair in args.chunks(2) {
        let [flag, value] = pair else { usage() };
        let number = || value.parse::<f64>().unwrap_or_else(|_| usage());
        let address = || value.parse::<Ipv4Addr>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--client-key" => key = Some(value.clone()),
            "--server-public-key" => server_key = Some(value.clone()),
            "--server" => server = Some(value.parse().unwrap_or_else(|_| usage())),
            "--attack" => attack = Some(Attack::parse(value).unwrap_or_else(|| usage())),
            "--duration" => parsed.duration = Duration::from_secs_f64(number()),
            "--rate" => parsed.rate = number(),
            "--bind" => parsed.bind = value.parse().unwrap_or_else(|_| usage()),
            "--frames" => parsed.frames = Some(number() as usize),
            "--gap-every" => parsed.gap_every = (number() as u32).max(2),
            "--inner-source" => parsed.inner_source = address(),
            "--inner-destination" => parsed.inner_destination = address(),
            "--inner-len" => parsed.inner_len = (number() as usize).clamp(28, 1500),
            "--source-base" => parsed.source_base = address(),
            "--sources" => parsed.sources = (number() as u32).max(1),
            "--inits" => parsed.inits = (number() as usize).max(1),
            "--aead" => {
                parsed.aead = match value.as_str() {
                    "chacha20-poly1305" => Aead::ChaCha20Poly1305,
                    "aes-256-gcm" => Aead::Aes256Gcm,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    parsed.client_key = key.unwrap_or_else(|| usage());
    parsed.server_public_key = server_key.unwrap_or_else(|| usage());
    parsed.server = server.unwrap_or_else(|| usage());
    parsed.attack = attack.unwrap_or_else(|| usage());
    parsed
}

/// What went out and what came back, shared with the receiving threads.
#[derive(Default)]
struct Tally {
    sent_datagrams: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    received_datagrams: AtomicU64,
    received_bytes: AtomicU64,
    /// Received datagrams by their type byte (index 0 for unknown types).
    received_by_type: [AtomicU64; 8],
}

impl Tally {
    fn on_sent(&self, len: usize) {
        self.sent_datagrams.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    fn on_received(&self, datagram: &[u8]) {
        self.received_datagrams.fetch_add(1, Ordering::Relaxed);
        self.received_bytes
            .fetch_add(datagram.len() as u64, Ordering::Relaxed);
        let kind = datagram.first().map_or(0, |&t| usize::from(t));
        let slot = if kind < self.received_by_type.len() {
            kind
        } else {
            0
        };
        self.received_by_type[slot].fetch_add(1, Ordering::Relaxed);
    }

    fn send(&self, socket: &UdpSocket, to: SocketAddr, datagram: &[u8]) {
        match socket.send_to(datagram, to) {
            Ok(_) => self.on_sent(datagram.len()),
            Err(_) => {
                self.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The attacker's side of its one session: the real keys, sealing anything.
struct Session {
    keys: SessionKeys,
    /// The server's session id: the receiver of every datagram we send.
    peer: SessionId,
    next_counter: u64,
    path_pn: [u32; PATH_IDS as usize],
    start: Instant,
}

impl Session {
    fn timestamp_us(&self) -> u32 {
        self.start.elapsed().as_micros() as u32
    }

    fn next_pn(&mut self, path_id: u8) -> u32 {
        let slot = &mut self.path_pn[usize::from(path_id)];
        let pn = *slot;
        *slot = slot.wrapping_add(1);
        pn
    }

    /// A sealed transport datagram of `packet_type` on `path_id` around `plaintext`.
    fn seal(&mut self, packet_type: PacketType, path_id: u8, mut plaintext: Vec<u8>) -> Vec<u8> {
        let counter = self.next_counter;
        self.next_counter += 1;
        let mut header = [0u8; TRANSPORT_HEADER_LEN];
        TransportHeader {
            packet_type,
            path_id,
            receiver: self.peer,
            counter,
        }
        .emit(&mut header);
        debug_assert_eq!(header[field::VERSION], TRANSPORT_VERSION);
        let tag = self
            .keys
            .send
            .seal_in_place(&header, counter, &mut plaintext);
        let mut datagram = Vec::with_capacity(TRANSPORT_HEADER_LEN + plaintext.len() + TAG_LEN);
        datagram.extend_from_slice(&header);
        datagram.extend_from_slice(&plaintext);
        datagram.extend_from_slice(&tag);
        datagram
    }

    fn control(&mut self, path_id: u8, frames: &[u8]) -> Vec<u8> {
        let mut meta = [0u8; CONTROL_META_LEN];
        ControlMeta {
            path_pn: self.next_pn(path_id),
            tx_time_us: self.timestamp_us(),
        }
        .emit(&mut meta);
        let mut plaintext = meta.to_vec();
        plaintext.extend_from_slice(frames);
        self.seal(PacketType::Control, path_id, plaintext)
    }

    fn ping(&mut self, path_id: u8, ping_id: u32) -> Vec<u8> {
        let frame = encode_frames(&[Frame::Ping { ping_id }]);
        self.control(path_id, &frame)
    }

    /// A Data datagram, or DataWithFrames when `frames` is not empty.
    fn data(
        &mut self,
        path_id: u8,
        seq: u32,
        tx_time_us: u32,
        frames: &[u8],
        inner: &[u8],
    ) -> Vec<u8> {
        let mut meta = [0u8; DATA_META_LEN];
        DataMeta {
            path_pn: self.next_pn(path_id),
            tx_time_us,
            seq,
        }
        .emit(&mut meta);
        let mut plaintext = meta.to_vec();
        let packet_type = if frames.is_empty() {
            PacketType::Data
        } else {
            plaintext.extend_from_slice(&(frames.len() as u16).to_be_bytes());
            plaintext.extend_from_slice(frames);
            PacketType::DataWithFrames
        };
        plaintext.extend_from_slice(inner);
        self.seal(packet_type, path_id, plaintext)
    }

    /// A Parity datagram claiming one member, the path's packet number 0.
    fn parity(&mut self, path_id: u8, payload: &[u8]) -> Vec<u8> {
        let mut meta = [0u8; PARITY_META_LEN];
        ParityMeta {
            first_pn: 0,
            members: 1,
            seq_xor: 0,
        }
        .emit(&mut meta);
        let mut plaintext = meta.to_vec();
        plaintext.extend_from_slice(payload);
        self.seal(PacketType::Parity, path_id, plaintext)
    }
}

fn encode_frames(frames: &[Frame]) -> Vec<u8> {
    let mut out = vec![0u8; frames.iter().map(Frame::encoded_len).sum()];
    let mut at = 0;
    for frame in frames {
        at += wire::write_frame(&mut out[at..], frame).expect("room was computed");
    }
    out
}

/// An IPv4 UDP packet of `len` bytes to the discard port, with a valid header checksum
/// (the server's kernel drops inner packets without one).
fn inner_packet(source: Ipv4Addr, destination: Ipv4Addr, len: usize) -> Vec<u8> {
    let mut packet = vec![0u8; len];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    packet[8] = 64;
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source.octets());
    packet[16..20].copy_from_slice(&destination.octets());
    let mut sum: u32 = packet[..20]
        .chunks_exact(2)
        .map(|word| u32::from(u16::from_be_bytes([word[0], word[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    packet[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    packet[20..22].copy_from_slice(&40_000u16.to_be_bytes());
    packet[22..24].copy_from_slice(&DISCARD_PORT.to_be_bytes());
    packet[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    packet
}

fn wall_clock_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

/// SplitMix64: tokens for the challenges need not be unpredictable.
fn next_token(state: &mut u64) -> [u8; 8] {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).to_be_bytes()
}

/// The Noise IK handshake on path 0 of `socket`, answering a cookie reply with mac2 as
/// the daemon does, then a Ping under the new keys, which confirms the session.
fn establish(
    socket: &UdpSocket,
    args: &Args,
    client: &PrivateKey,
    server: &PublicKey,
    tally: &Tally,
) -> Session {
    let cookie_key = CookieReplyKey::new(server);
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut cookie: Option<Cookie> = None;
    let mut buffer = [0u8; 2048];
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    'attempt: while Instant::now() < deadline {
        let mut init = [0u8; HANDSHAKE_INIT_LEN];
        let fields = InitFields {
            sender: random_session_id(),
            path_id: 0,
            unix_time_nanos: wall_clock_nanos(),
            renews: None,
            aead: args.aead,
        };
        let mut pending =
            handshake::initiate(client, server, fields, &mut init).expect("building an init");
        if let Some(cookie) = &cookie {
            cookie::write_mac2(cookie, &mut init);
        }
        let mac1 = init[field::INIT_MAC1].to_vec();
        tally.send(socket, args.server, &init);
        let retry_at = Instant::now() + HANDSHAKE_RETRY;
        while Instant::now() < retry_at {
            let len = match socket.recv_from(&mut buffer) {
                Ok((len, _)) => len,
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(error) => panic!("receiving the handshake response: {error}"),
            };
            let datagram = &buffer[..len];
            tally.on_received(datagram);
            match wire::packet_type(datagram) {
                Ok(PacketType::HandshakeResponse) => {
                    if let Ok(established) = pending.try_complete(datagram) {
                        let mut session = Session {
                            keys: established.keys,
                            peer: established.peer_session,
                            next_counter: 0,
                            path_pn: [0; PATH_IDS as usize],
                            start: Instant::now(),
                        };
                        let ping = session.ping(0, 1);
                        tally.send(socket, args.server, &ping);
                        return session;
                    }
                }
                Ok(PacketType::CookieReply) => {
                    if let Some(opened) = open_cookie_reply(&cookie_key, datagram, &mac1) {
                        cookie = Some(opened);
                        continue 'attempt;
                    }
                }
                _ => {}
            }
        }
    }
    eprintln!("hostile_client: no handshake response within {HANDSHAKE_TIMEOUT:?}");
    std::process::exit(1)
}

fn open_cookie_reply(key: &CookieReplyKey, datagram: &[u8], mac1: &[u8]) -> Option<Cookie> {
    let nonce: [u8; COOKIE_NONCE_LEN] = datagram.get(field::COOKIE_NONCE)?.try_into().ok()?;
    let sealed: [u8; SEALED_COOKIE_LEN] = datagram.get(field::COOKIE_SEALED)?.try_into().ok()?;
    key.open(nonce, &sealed, mac1).ok()
}

/// Waits until the server answered the confirming Ping with a datagram that opens
/// under the session's keys (its acknowledgement): the session is confirmed.
fn await_confirmation(socket: &UdpSocket, session: &Session, tally: &Tally) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut buffer = [0u8; 2048];
    while Instant::now() < deadline {
        let Ok((len, _)) = socket.recv_from(&mut buffer) else {
            continue;
        };
        tally.on_received(&buffer[..len]);
        if session.keys.recv.open_datagram(&mut buffer[..len]).is_ok() {
            return true;
        }
    }
    false
}

/// Counts everything that arrives on `socket` until `stop`.
fn spawn_counter(
    socket: UdpSocket,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("a read timeout");
        let mut buffer = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((len, _)) = socket.recv_from(&mut buffer) {
                tally.on_received(&buffer[..len]);
            }
        }
    })
}

/// Spaces sends `1 / rate` apart (no spacing at rate 0) and says when a keepalive is due.
struct Pacer {
    interval: Option<Duration>,
    next_send: Instant,
    next_keepalive: Instant,
}

impl Pacer {
    fn new(rate: f64, now: Instant) -> Self {
        Pacer {
            interval: (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate)),
            next_send: now,
            next_keepalive: now + KEEPALIVE,
        }
    }

    /// Sleeps until the next send is due. Sleeps shorter than a millisecond are not
    /// taken (a sleep costs tens of microseconds itself): the sends of up to a
    /// millisecond go out back to back instead.
    fn wait(&mut self) {
        let Some(interval) = self.interval else {
            return;
        };
        let now = Instant::now();
        if self.next_send > now + PACING_SLACK {
            std::thread::sleep(self.next_send - now);
        }
        // Never bank more than a few milliseconds of missed sends.
        self.next_send = (self.next_send + interval).max(now - 5 * PACING_SLACK);
    }

    fn keepalive_due(&mut self, now: Instant) -> bool {
        if now < self.next_keepalive {
            return false;
        }
        self.next_keepalive = now + KEEPALIVE;
        true
    }
}

/// The flooding attacks: one socket, one session, datagrams until `until`.
fn flood(socket: &UdpSocket, args: &Args, session: &mut Session, tally: &Tally, until: Instant) {
    let frames = args.frames.unwrap_or(args.attack.default_frames());
    let inner = inner_packet(args.inner_source, args.inner_destination, args.inner_len);
    let ping_frame = encode_frames(&[Frame::Ping { ping_id: 7 }]);
    let gave_up = encode_frames(&vec![
        Frame::GaveUp {
            first_seq: 0,
            count: GAVE_UP_COUNT,
        };
        frames
    ]);
    let mut token_state = 0x6d70_7475_6e64_u64;
    let mut seq: u32 = 0;
    let mut turn: u64 = 0;
    let mut next_round = Instant::now();
    let mut pacer = Pacer::new(args.rate, Instant::now());
    let mut ping_id = 2;
    loop {
        let now = Instant::now();
        if now >= until {
            return;
        }
        if pacer.keepalive_due(now) {
            ping_id += 1;
            let ping = session.ping(0, ping_id);
            tally.send(socket, args.server, &ping);
        }
        let datagram = match args.attack {
            Attack::ChallengeFlood => {
                let challenges: Vec<Frame> = (0..frames)
                    .map(|_| Frame::PathChallenge {
                        token: next_token(&mut token_state),
                    })
                    .collect();
                session.control(0, &encode_frames(&challenges))
            }
            Attack::GaveUpFlood => session.control(0, &gave_up),
            Attack::ParityPaths => {
                if now >= next_round {
                    next_round = now + KEEPALIVE;
                    for path_id in 1..PATH_IDS {
                        let parity = session.parity(path_id, &inner);
                        tally.send(socket, args.server, &parity);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Attack::ManyPaths => {
                let path_id = (turn % u64::from(PATH_IDS)) as u8;
                let this = seq;
                seq = seq.wrapping_add(1);
                let tx = session.timestamp_us();
                session.data(path_id, this, tx, &ping_frame, &inner)
            }
            Attack::ReorderGaps => {
                if seq % args.gap_every == 0 {
                    seq = seq.wrapping_add(1);
                }
                let path_id = (turn % 2) as u8;
                let tx = session
                    .timestamp_us()
                    .wrapping_sub(u32::from(path_id) * SLOW_PATH_OFFSET_US);
                let this = seq;
                seq = seq.wrapping_add(1);
                session.data(path_id, this, tx, &[], &inner)
            }
            Attack::PlainData => {
                let this = seq;
                seq = seq.wrapping_add(1);
                let tx = session.timestamp_us();
                session.data(0, this, tx, &[], &inner)
            }
            Attack::HandshakeSources => unreachable!("not a single-socket flood"),
        };
        turn += 1;
        pacer.wait();
        tally.send(socket, args.server, &datagram);
    }
}

/// One source of `handshake-sources`: its socket and the cookie it was given.
struct Source {
    socket: UdpSocket,
    cookie: Option<Cookie>,
}

/// Replays `args.inits` inits made beforehand from `args.sources` bound sockets, in
/// turn, answering each cookie reply by putting mac2 on the next init from that source.
fn handshake_sources(
    args: &Args,
    client: &PrivateKey,
    server: &PublicKey,
    session: &mut Session,
    main_socket: &UdpSocket,
    tally: &Tally,
    until: Instant,
) {
    // Old timestamps (1, 2, 3... ns after the epoch), as in a replay of captured
    // inits: the server does the Diffie-Hellman of message 1 before it can refuse one.
    let inits: Vec<[u8; HANDSHAKE_INIT_LEN]> = (0..args.inits)
        .map(|index| {
            let mut init = [0u8; HANDSHAKE_INIT_LEN];
            let fields = InitFields {
                sender: random_session_id(),
                path_id: 0,
                unix_time_nanos: index as u64 + 1,
                renews: None,
                aead: args.aead,
            };
            handshake::initiate(client, server, fields, &mut init).expect("building an init");
            init
        })
        .collect();
    let by_sender: HashMap<[u8; 4], usize> = inits
        .iter()
        .enumerate()
        .map(|(index, init)| {
            let sender: [u8; 4] = init[field::INIT_SENDER].try_into().expect("4 bytes");
            (sender, index)
        })
        .collect();
    let base = u32::from(args.source_base);
    let mut sources: Vec<Source> = (0..args.sources)
        .map(|index| {
            let address = Ipv4Addr::from(base.wrapping_add(index));
            let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(address), 0))
                .unwrap_or_else(|error| panic!("binding {address}: {error}"));
            socket.set_nonblocking(true).expect("non-blocking");
            Source {
                socket,
                cookie: None,
            }
        })
        .collect();
    let cookie_key = CookieReplyKey::new(server);
    let mut pacer = Pacer::new(args.rate, Instant::now());
    let mut buffer = [0u8; 2048];
    let mut next_init = 0usize;
    let mut ping_id = 2;
    let mut turn = 0usize;
    while Instant::now() < until {
        if pacer.keepalive_due(Instant::now()) {
            ping_id += 1;
            let ping = session.ping(0, ping_id);
            tally.send(main_socket, args.server, &ping);
        }
        let source = &sources[turn % sources.len()];
        let mut init = inits[next_init % inits.len()];
        if let Some(cookie) = &source.cookie {
            cookie::write_mac2(cookie, &mut init);
        }
        next_init += 1;
        turn += 1;
        pacer.wait();
        match source.socket.send_to(&init, args.server) {
            Ok(_) => tally.on_sent(init.len()),
            Err(_) => {
                tally.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // After each pass over the sources, read what came back to all of them.
        if turn % sources.len() != 0 {
            continue;
        }
        for source in &mut sources {
            while let Ok((len, _)) = source.socket.recv_from(&mut buffer) {
                let datagram = &buffer[..len];
                tally.on_received(datagram);
                if !matches!(wire::packet_type(datagram), Ok(PacketType::CookieReply)) {
                    continue;
                }
                let Some(receiver) = datagram.get(field::COOKIE_RECEIVER) else {
                    continue;
                };
                let Some(&index) = <[u8; 4]>::try_from(receiver)
                    .ok()
                    .and_then(|sender| by_sender.get(&sender))
                else {
                    continue;
                };
                let mac1 = &inits[index][field::INIT_MAC1];
                if let Some(cookie) = open_cookie_reply(&cookie_key, datagram, mac1) {
                    source.cookie = Some(cookie);
                }
            }
        }
    }
}

fn main() {
    let args = parse_args();
    let key_text = std::fs::read_to_string(&args.client_key)
        .unwrap_or_else(|error| panic!("reading {}: {error}", args.client_key));
    let client = PrivateKey::from_base64(key_text.trim()).expect("a base64 private key");
    let server =
        PublicKey::from_base64(args.server_public_key.trim()).expect("a base64 public key");
    let socket = UdpSocket::bind(SocketAddr::new(args.bind, 0)).expect("a UDP socket");
    let tally = Arc::new(Tally::default());
    let mut session = establish(&socket, &args, &client, &server, &tally);
    let confirmed = await_confirmation(&socket, &session, &tally);
    eprintln!(
        "hostile_client: session {} confirmed: {confirmed}",
        session.peer.0
    );
    let started = Instant::now();
    let until = started + args.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let counter = spawn_counter(
        socket.try_clone().expect("a second handle"),
        tally.clone(),
        stop.clone(),
    );
    socket.set_read_timeout(None).expect("blocking");
    if args.attack == Attack::HandshakeSources {
        handshake_sources(
            &args,
            &client,
            &server,
            &mut session,
            &socket,
            &tally,
            until,
        );
    } else {
        flood(&socket, &args, &mut session, &tally, until);
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = counter.join();
    let get = |value: &AtomicU64| value.load(Ordering::Relaxed);
    let sent = get(&tally.sent_datagrams);
    let sent_bytes = get(&tally.sent_bytes);
    let received = get(&tally.received_datagrams);
    let received_bytes = get(&tally.received_bytes);
    let by_type: serde_json::Map<String, serde_json::Value> = tally
        .received_by_type
        .iter()
        .enumerate()
        .filter(|(_, count)| get(count) > 0)
        .map(|(kind, count)| {
            let name = u8::try_from(kind)
                .ok()
                .and_then(|kind| PacketType::try_from(kind).ok())
                .map_or_else(|| "other".to_string(), |kind| format!("{kind:?}"));
            (name, get(count).into())
        })
        .collect();
    let ratio = |num: u64, den: u64| {
        if den == 0 {
            0.0
        } else {
            (num as f64 / den as f64 * 1000.0).round() / 1000.0
        }
    };
    let report = serde_json::json!({
        "attack": args.attack.name(),
        "confirmed": confirmed,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "sent_datagrams": sent,
        "sent_bytes": sent_bytes,
        "send_errors": get(&tally.send_errors),
        "sent_per_s": (sent as f64 / seconds).round(),
        "sent_mbit_per_s": (sent_bytes as f64 * 8.0 / seconds / 1e4).round() / 100.0,
        "received_datagrams": received,
        "received_bytes": received_bytes,
        "received_by_type": by_type,
        "answer_datagrams_per_sent": ratio(received, sent),
        "answer_bytes_per_sent": ratio(received_bytes, sent_bytes),
    });
    println!("{report}");
}
