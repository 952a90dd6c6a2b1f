//! Configuration: the TOML file parsed once into validated types.
//!
//! [`load`] reads a client or server configuration (see `config/client.toml`
//! and `config/server.toml` at the repository root for documented examples)
//! and the private key file it names, and returns a [`Config`] in which
//! durations are [`Duration`]s, addresses are [`SocketAddr`]s and
//! [`IpNet`]s, and keys are 32-byte arrays. Nothing else on the system is
//! touched: interfaces, sockets and the TUN device are the daemon's business.
//!
//! Every mistake is a [`ConfigError`] that names the file, line, column and
//! field, says what is wrong and what to do; a private key file that group or
//! others may read is one. Things that are legal but probably unintended (every
//! path a backup) come back as [`Loaded::warnings`].

// `ConfigError` carries file, position, field, problem and hint by value (the
// daemon's contract). It is built once, on the cold start-up/reload path, so
// its size in `Result` costs nothing worth boxing for.
#![allow(clippy::result_large_err)]

mod build;
mod error;
mod ipnet;
mod keys;
mod raw;
mod suggest;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::wire::Aead;

pub use mptund_probe::ControllerChoice;
pub use mptund_sched::{EqualizeScope, SchedulerChoice};

pub use error::ConfigError;
pub use ipnet::{IpNet, IpNetParseError};
pub use keys::{decode_key, encode_key, public_key_of, KeyError, KEY_LEN};

/// Scheduler names `[scheduler] name` accepts: the schedulers built into this mptund.
pub const KNOWN_SCHEDULERS: &[&str] = SchedulerChoice::NAMES;
/// Names `congestion.controller` accepts: the controllers built into this mptund.
pub const KNOWN_CONTROLLERS: &[&str] = ControllerChoice::NAMES;
/// Controller used when `[congestion]` is absent: delay-rate. It keeps the paths'
/// buffers short, so a fast path's full buffer never hides the other paths'
/// capacity from the scheduler; the scheduler benchmark (`benches/schedulers/`)
/// measured it well ahead of CUBIC wherever one flow crosses four to eight modems.
pub const DEFAULT_CONTROLLER: ControllerChoice = ControllerChoice::DelayRate;
/// Values of the client's `server.cipher`: "auto", then every transport AEAD.
pub const KNOWN_CIPHERS: &[&str] = &["auto", "aes-256-gcm", "chacha20-poly1305"];
/// The transport AEADs `server.cipher` names, besides "auto".
pub const CIPHERS: [Aead; 2] = [Aead::Aes256Gcm, Aead::ChaCha20Poly1305];
/// Default `reorder.equalize_delay`: every path heard from, so an inner flow has the
/// delay it will have under load from its first packet.
pub const DEFAULT_EQUALIZE_DELAY: &str = "all-paths";
/// Default `reorder.equalize_percent`: halfway, the least that lets an inner BBR's
/// window span the slowest path (see `mptund_sched::DelayEqualizer`). On seven mixed
/// paths it gained an inner BBR 23-31 % downloading and 19-23 % uploading, for 3 %
/// of an inner CUBIC's download. All the way gained BBR 17-20 %, cost CUBIC 10 %,
/// and left 350-585 ms without a byte whenever a path died, against the failover
/// target of 300 ms (`benches/schedulers/REPORT.md`, `benches/failover/REPORT.md`).
pub const DEFAULT_EQUALIZE_PERCENT: u8 = 50;
/// Default `congestion.queue_capacity_packets`: the send queue in front of full
/// paths holds about 15 ms at 1 Gbit/s; the sojourn limit, not this, bounds delay.
pub const DEFAULT_QUEUE_CAPACITY_PACKETS: usize = 1024;
/// Default `congestion.queue_max_delay_ms`: the hard limit behind CoDel, for a
/// flood CoDel's gentle drops cannot slow down (an inner flow that ignores loss, or
/// any flow while CoDel waits out a capacity fall). A packet dropped here costs the
/// receiving application this long and an inner round trip more, because the inner
/// retransmission waits behind the same queue: at 250 ms, an inner BBR's holes while
/// a path was down cost it 305-338 ms (`benches/failover/REPORT.md`).
pub const DEFAULT_QUEUE_MAX_DELAY: Duration = Duration::from_millis(150);
/// Default `congestion.queue_target_delay_ms`: above RFC 8289's 5 ms. The
/// controller keeps the paths' queues short, so this queue is the inner flow's
/// only buffer, and one loss-based flow needs about 0.4 of its BDP of buffer to
/// keep the paths busy after a CUBIC reduction (β = 0.7): 20 ms measured better
/// than 5 in the scheduler benchmark.
pub const DEFAULT_QUEUE_TARGET_DELAY: Duration = Duration::from_millis(20);
/// Default `congestion.queue_interval_ms`: CoDel's interval, about the worst-case
/// RTT of the inner flows (RFC 8289 §4.3).
pub const DEFAULT_QUEUE_INTERVAL: Duration = Duration::from_millis(100);
/// Default `timers.probe_interval_ms`: a suspect or down path is pinged four
/// times a second, so a path back from a 3 s blockage is used again within
/// about a quarter of a second.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// Default `timers.max_ack_delay_ms`: how long a receiver may hold an
/// acknowledgement hoping to piggyback it; small against cellular RTTs.
pub const DEFAULT_MAX_ACK_DELAY: Duration = Duration::from_millis(5);
/// Default keepalive interval of a backup path: under the 30 s UDP mapping
/// timeout common in carrier NATs, and about 20 kB per hour with the answers.
pub const DEFAULT_BACKUP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(25);

/// Scheduler used when `[scheduler]` is absent: the best of the seven for one TCP flow
/// over every benchmark scenario (`benches/schedulers/REPORT.md`).
pub const DEFAULT_SCHEDULER: SchedulerChoice =
    SchedulerChoice::EarliestArrival(mptund_sched::EarliestArrivalParams::DEFAULT);

/// Default `scheduler.duplicate_latency_critical`: off until the benchmark in
/// `benches/schedulers/` shows the copies pay for their bytes.
pub const DEFAULT_DUPLICATE_LATENCY_CRITICAL: bool = false;

/// Default `scheduler.parity_on_lossy_paths`: off. On lossy paths it gained one cubic
/// flow 6-8 % and cost one bbr flow 0-2.5 % (`benches/schedulers/REPORT.md`), and the
/// whole benchmark matrix has not run with it on.
pub const DEFAULT_PARITY_ON_LOSSY_PATHS: bool = false;

/// Default `reorder.max_hold_ms`: above the delay spread of cellular uplinks (tens
/// of ms between LTE modems on a train, LTE versus 5G NSA, Wi-Fi at 5-6x the LTE
/// RTT under load in seed 000) and still far below the inner TCP's 1 s minimum RTO.
pub const DEFAULT_REORDER_MAX_HOLD: Duration = Duration::from_millis(200);
/// Default `reorder.min_hold_ms`: the jitter of one cellular path (a few ms of
/// scheduling grant jitter) with margin; what a single path holds a gap for.
pub const DEFAULT_REORDER_MIN_HOLD: Duration = Duration::from_millis(10);
/// Default `reorder.capacity_packets`: 100 ms of 1400-byte packets at about
/// 450 Mbit/s, above the 4G + 5G aggregate peak (~300 Mbit/s down).
pub const DEFAULT_REORDER_CAPACITY_PACKETS: usize = 4096;
/// Default `[[path]] socket_buffer_bytes`: the send and receive buffers of a path's
/// socket, a few hundred milliseconds at hundreds of Mbit/s, so bursts of a reordering
/// path don't overflow them.
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Default `timers.keepalive_interval_ms`: one small ping per idle path per
/// second, cheap on metered cellular links.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// Default `timers.path_timeout_ms`: three missed keepalives, longer than a
/// typical LTE handover interruption so that a handover is not a path loss.
pub const DEFAULT_PATH_TIMEOUT: Duration = Duration::from_secs(3);
/// Default `timers.handshake_retry_ms`.
pub const DEFAULT_HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// Default `timers.session_timeout_ms` (client).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `timers.session_idle_timeout_ms` (server): three minutes, so that
/// a train in a long tunnel finds its session again.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(180);
/// Default `log.stats_interval_ms`.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(10);
/// Address the metrics endpoint listens on when `[metrics]` gives none:
/// loopback only, so nothing is exposed beyond the host unless asked for.
/// 9477 is free in the Prometheus default port allocations list.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9477);
/// Default `metrics.max_connections`: a few Prometheus servers (an HA pair, a
/// federation) and an operator's curl, with room to spare; each connection costs a
/// task and a socket, under the unit's `LimitNOFILE=1024`.
pub const DEFAULT_METRICS_MAX_CONNECTIONS: usize = 16;
/// Directory of the control sockets when `[control] socket` is not set: the
/// systemd unit's `RuntimeDirectory=mptund`.
pub const DEFAULT_CONTROL_DIR: &str = "/run/mptund";
/// Most `[[path]]` tables a client may have. Path ids are a `u8` on the wire, but a
/// `PathSet` holds 64; more uplinks than that on one router is not a case worth a
/// wider set.
pub const MAX_PATHS: usize = mptund_sched::PathId::MAX_IN_SET as usize + 1;

/// A validated configuration file.
#[derive(Clone, Debug, PartialEq)]
pub enum Config {
    /// `mode = "client"`.
    Client(ClientConfig),
    /// `mode = "server"`.
    Server(ServerConfig),
}

impl Config {
    /// The file the configuration was read from.
    pub fn source(&self) -> &Path {
        match self {
            Config::Client(c) => &c.source,
            Config::Server(s) => &s.source,
        }
    }

    /// The Prometheus endpoint settings.
    pub fn metrics(&self) -> &MetricsConfig {
        match self {
            Config::Client(c) => &c.metrics,
            Config::Server(s) => &s.metrics,
        }
    }

    /// The control socket settings.
    pub fn control(&self) -> &ControlConfig {
        match self {
            Config::Client(c) => &c.control,
            Config::Server(s) => &s.control,
        }
    }

    /// The TUN device settings.
    pub fn tun(&self) -> &TunConfig {
        match self {
            Config::Client(c) => &c.tun,
            Config::Server(s) => &s.tun,
        }
    }
}

/// The result of [`load`]: the configuration and things worth a log line.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Legal but suspicious settings, one sentence each, ready to log at
    /// `warn` level.
    pub warnings: Vec<String>,
}

/// The `[tun]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunConfig {
    /// Interface name, at most 15 bytes.
    pub name: String,
    /// Addresses to assign, each with its subnet's prefix length; at least one.
    pub addresses: Vec<IpNet>,
    /// Explicit MTU, 576..=65535; `None` lets the daemon derive it from the
    /// smallest path MTU minus the encapsulation overhead.
    pub mtu: Option<u16>,
}

/// One `[[path]]` table: an uplink of the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathConfig {
    /// Unique name, `[A-Za-z0-9_.-]{1,32}`; used in logs and metrics.
    pub name: String,
    /// Device to bind the path's socket to (`SO_BINDTODEVICE`).
    pub interface: Option<String>,
    /// Local address to bind the path's socket to. At least one of
    /// `interface` and `source_address` is set.
    pub source_address: Option<IpAddr>,
    /// Where this path sends: its own `endpoint` or else `server.endpoint`.
    /// Same address family as `source_address`.
    pub endpoint: SocketAddr,
    /// Carry data only while no regular path is up.
    pub backup: bool,
    /// An idle path is pinged this often (`timers.keepalive_interval_ms` unless
    /// set per path; 25 s for backup paths).
    pub keepalive_interval: Duration,
    /// Bytes per hour that keepalives and probes on this path may cost; `None`
    /// for no limit.
    pub probe_budget_bytes_per_hour: Option<u64>,
    /// The send and receive buffer of the path's socket (SO_SNDBUF, SO_RCVBUF).
    pub socket_buffer_bytes: usize,
}

/// The `[scheduler]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// The scheduler `name` names, with the `[scheduler]` parameters it reads. The
    /// peer's reorder window (in time and bytes) is not configured here: the daemon
    /// derives it from `[reorder]` and the TUN MTU.
    pub choice: SchedulerChoice,
    /// Send latency-critical inner packets (pure TCP ACKs, SYN/FIN/RST, DNS) on the
    /// two fastest paths.
    pub duplicate_latency_critical: bool,
    /// Send a parity datagram after each block of data datagrams on a path that
    /// loses packets to the radio, so the receiver rebuilds a loss without waiting
    /// for its repair.
    pub parity_on_lossy_paths: bool,
}

/// The `[reorder]` table: the receiver's reorder buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Whether the hold follows the paths' one-way-delay spread (between
    /// `min_hold` and `max_hold`) or is fixed at `max_hold`.
    pub adaptive: bool,
    /// Which paths' delay inner packets are brought up to before they are handed on
    /// (adding at most `max_hold`), so the inner flow sees one delay; `None`: off.
    pub equalize_delay: Option<EqualizeScope>,
    /// How far toward the slowest of those paths' base delays: 0 the fastest's, 100
    /// the slowest's.
    pub equalize_percent: u8,
    /// Shortest adaptive hold.
    pub min_hold: Duration,
    /// Longest wait for a missing packet before releasing what follows it.
    pub max_hold: Duration,
    /// Most packets held at once.
    pub capacity_packets: usize,
}

/// The `[congestion]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// The controller `controller` names.
    pub controller: ControllerChoice,
    /// Packets that may wait for a free path when every path is full.
    pub queue_capacity_packets: usize,
    /// A packet that waited longer than this for a free path is dropped.
    pub queue_max_delay: Duration,
    /// CoDel: the standing queue delay the send queue aims for.
    pub queue_target_delay: Duration,
    /// CoDel: how long the delay may stay above target before a drop.
    pub queue_interval: Duration,
}

/// The `[timers]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Control ping per path when nothing else was sent.
    pub keepalive_interval: Duration,
    /// A path with nothing received for this long is down; longer than
    /// `keepalive_interval`.
    pub path_timeout: Duration,
    /// Wait before repeating an unanswered handshake.
    pub handshake_retry: Duration,
    /// Ping interval of a suspect or down path.
    pub probe_interval: Duration,
    /// Longest a receiver holds an acknowledgement hoping to piggyback it.
    pub max_ack_delay: Duration,
    /// Client: re-handshake when nothing arrived on any path for this long.
    /// At least `path_timeout`. (On a server: the default, unused.)
    pub session_timeout: Duration,
    /// Server: forget a session silent for this long. At least
    /// `path_timeout`. (On a client: the default, unused.)
    pub session_idle_timeout: Duration,
    /// When the client renews the session keys and when either side refuses
    /// old ones; WireGuard's timers unless set.
    pub key_lifetime: crate::crypto::KeyLifetime,
}

/// The `[log]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Interval of the per-path counter log line; `None` when switched off
    /// (`stats_interval_ms = 0`).
    pub stats_interval: Option<Duration>,
}

/// The `[metrics]` table: the Prometheus endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where `/metrics` is served over HTTP; `None` when switched off (no
    /// `[metrics]` table, or `enabled = false`).
    pub listen: Option<SocketAddr>,
    /// The token a request must carry (`Authorization: Bearer <token>`), read from
    /// `bearer_token_file`; `None`: every request is served.
    pub bearer_token: Option<BearerToken>,
    /// Connections served at once; a connection beyond them is closed at once.
    pub max_connections: usize,
}

impl MetricsConfig {
    /// No endpoint.
    pub fn off() -> Self {
        Self {
            listen: None,
            bearer_token: None,
            max_connections: DEFAULT_METRICS_MAX_CONNECTIONS,
        }
    }
}

/// The metrics endpoint's bearer token, as read from `metrics.bearer_token_file`.
/// Only its SHA-256 digest is kept, and `Debug` prints neither.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// The file it was read from (resolved against the configuration's directory).
    pub file: PathBuf,
    digest: [u8; 32],
}

impl BearerToken {
    /// The token `token` (already trimmed and checked), read from `file`.
    pub fn new(file: PathBuf, token: &[u8]) -> Self {
        Self {
            file,
            digest: sha256(token),
        }
    }

    /// Whether `presented` is the token. The digests are compared, in constant time:
    /// neither the time taken nor an early exit tells how much of a guess matched,
    /// or how long the token is.
    pub fn matches(&self, presented: &[u8]) -> bool {
        crate::cookie::constant_time_eq(&sha256(presented), &self.digest)
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut digest = [0u8; 32];
    digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    digest
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken")
            .field("file", &self.file)
            .field("token", &format_args!("{REDACTED}"))
            .finish()
    }
}

/// The `[control]` table: the Unix socket `mptund status` reads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// The socket's path; `None` when switched off (`enabled = false`).
    /// Default: `/run/mptund/<configuration file name without .toml>.sock`.
    pub socket: Option<PathBuf>,
}

/// The control socket a configuration file gets when `[control]` does not
/// name one: `/run/mptund/<file stem>.sock`, so the systemd instance
/// `mptund@client` (reading `/etc/mptund/client.toml`) answers on
/// `/run/mptund/client.sock`.
pub fn default_control_socket(config_file: &Path) -> PathBuf {
    let stem = config_file
        .file_stem()
        .map_or_else(|| "mptund".into(), |stem| stem.to_string_lossy());
    Path::new(DEFAULT_CONTROL_DIR).join(format!("{stem}.sock"))
}

/// A configuration with `mode = "client"`.
#[derive(Clone, PartialEq)]
pub struct ClientConfig {
    /// The configuration file.
    pub source: PathBuf,
    /// This client's X25519 private key. Never printed by `Debug`.
    pub private_key: [u8; 32],
    /// Where `private_key` was read from (resolved against the
    /// configuration file's directory).
    pub private_key_file: PathBuf,
    /// The server's X25519 public key.
    pub server_public_key: [u8; 32],
    /// `server.cipher`: the transport AEAD the client asks for; `None` for
    /// `"auto"`, the fastest on this CPU ([`Aead::fastest_here`]).
    pub cipher: Option<Aead>,
    /// The TUN device.
    pub tun: TunConfig,
    /// The uplinks, in file order; 1..=[`MAX_PATHS`].
    pub paths: Vec<PathConfig>,
    /// Packet scheduler.
    pub scheduler: SchedulerConfig,
    /// Receiver reorder buffer.
    pub reorder: ReorderConfig,
    pub congestion: CongestionConfig,
    /// Timers.
    pub timers: Timers,
    /// Logging.
    pub log: LogConfig,
    /// Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// Control socket.
    pub control: ControlConfig,
    /// Where the daemon keeps its handshake timestamp across restarts
    /// (`state_directory`); `None`: the systemd unit's `StateDirectory=` (in
    /// `$STATE_DIRECTORY`) if there is one, else nowhere.
    pub state_directory: Option<PathBuf>,
}

/// One `[[peer]]` table of a server: a client allowed to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// Unique name, `[A-Za-z0-9_.-]{1,32}`.
    pub name: String,
    /// The client's X25519 public key, unique across peers.
    pub public_key: [u8; 32],
    /// Inner addresses this peer may send from and that are routed to it;
    /// normalised (host bits zero) and not overlapping any other peer's.
    pub allowed_ips: Vec<IpNet>,
}

/// A configuration with `mode = "server"`.
#[derive(Clone, PartialEq)]
pub struct ServerConfig {
    /// The configuration file.
    pub source: PathBuf,
    /// This server's X25519 private key. Never printed by `Debug`.
    pub private_key: [u8; 32],
    /// Where `private_key` was read from.
    pub private_key_file: PathBuf,
    /// UDP address to listen on.
    pub listen: SocketAddr,
    /// The TUN device.
    pub tun: TunConfig,
    /// Clients allowed to connect; at least one.
    pub peers: Vec<PeerConfig>,
    /// Packet scheduler for the server-to-client direction.
    pub scheduler: SchedulerConfig,
    /// Receiver reorder buffer.
    pub reorder: ReorderConfig,
    pub congestion: CongestionConfig,
    /// Timers.
    pub timers: Timers,
    /// Logging.
    pub log: LogConfig,
    /// Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// Control socket.
    pub control: ControlConfig,
    /// Flood limits on handshake inits (`[handshake]`).
    pub handshake: crate::cookie::HandshakeLimits,
    /// What one session may take of the server (`[limits]`).
    pub limits: crate::session::ServerLimits,
}

/// Placeholder printed by `Debug` instead of private key bytes.
const REDACTED: &str = "<redacted>";

/// Prints a public key as the base64 text users copy around.
struct KeyText<'k>(&'k [u8; 32]);

impl fmt::Debug for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", encode_key(self.0))
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("source", &self.source)
            .field("private_key", &format_args!("{REDACTED}"))
            .field("private_key_file", &self.private_key_file)
            .field("server_public_key", &KeyText(&self.server_public_key))
            .field("tun", &self.tun)
            .field("paths", &self.paths)
            .field("scheduler", &self.scheduler)
            .field("reorder", &self.reorder)
            .field("timers", &self.timers)
            .field("log", &self.log)
            .field("metrics", &self.metrics)
            .field("control", &self.control)
            .field("state_directory", &self.state_directory)
            .finish()
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("source", &self.source)
            .field("private_key", &format_args!("{REDACTED}"))
            .field("private_key_file", &self.private_key_file)
            .field("listen", &self.listen)
            .field("tun", &self.tun)
            .field("peers", &self.peers)
            .field("scheduler", &self.scheduler)
            .field("reorder", &self.reorder)
            .field("timers", &self.timers)
            .field("log", &self.log)
            .field("metrics", &self.metrics)
            .field("control", &self.control)
            .field("handshake", &self.handshake)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Largest configuration file `load` reads: a server with tens of thousands of
/// `[[peer]]` tables (about 120 bytes each) fits; a file pointed at by mistake (a
/// log, an image) is refused before it is read.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads and validates the configuration file at `path`, and the private key
/// file it names (relative key paths are resolved against `path`'s
/// directory).
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let unreadable = |e: std::io::Error| {
        ConfigError::new(path, "", format!("cannot read the configuration file: {e}"))
            .with_hint("check the path given with --config and that the daemon's user may read it")
    };
    let size = std::fs::metadata(path).map_err(unreadable)?.len();
    if size > MAX_CONFIG_BYTES {
        return Err(ConfigError::new(
            path,
            "",
            format!(
                "the configuration file is {size} bytes, more than the {MAX_CONFIG_BYTES} accepted"
            ),
        )
        .with_hint("point --config at the TOML configuration, not at another file"));
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        ConfigError::new(
            path,
            "",
            format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
        .with_hint("save the configuration as UTF-8")
    })?;
    let base_dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    build::parse_document(path, &text, base_dir)
}

/// Validates configuration `text` as if read from a file named
/// `source_name`; relative key file paths are resolved against `base_dir`.
/// Reads only the private key file.
pub fn parse(source_name: &str, text: &str, base_dir: &Path) -> Result<Loaded, ConfigError> {
    build::parse_document(Path::new(source_name), text, base_dir)
}
