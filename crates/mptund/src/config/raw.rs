//! The configuration file as written: serde structs that mirror the TOML,
//! with every value wrapped in [`Spanned`] so that validation can point at it.
//!
//! Required fields are `Option` here so that their absence is reported by
//! validation, which knows the table's name and position, rather than by
//! serde. Integers are `i64` (TOML's integer type) so that range errors are
//! ours to word.

use serde::Deserialize;
use toml::Spanned;

/// A value together with its byte range in the file.
pub(super) type Sp<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClient {
    /// Already checked before this struct is deserialised.
    #[allow(dead_code)]
    pub mode: Sp<String>,
    pub private_key_file: Option<Sp<String>>,
    pub tun: Option<Sp<RawTun>>,
    pub server: Option<Sp<RawServerSection>>,
    #[serde(default)]
    pub path: Vec<Sp<RawPath>>,
    pub scheduler: Option<Sp<RawScheduler>>,
    pub reorder: Option<Sp<RawReorder>>,
    pub congestion: Option<Sp<RawCongestion>>,
    pub timers: Option<Sp<RawTimers>>,
    pub log: Option<Sp<RawLog>>,
    pub metrics: Option<Sp<RawMetrics>>,
    pub control: Option<Sp<RawControl>>,
    pub state_directory: Option<Sp<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    #[allow(dead_code)]
    pub mode: Sp<String>,
    pub private_key_file: Option<Sp<String>>,
    pub listen: Option<Sp<String>>,
    pub tun: Option<Sp<RawTun>>,
    #[serde(default)]
    pub peer: Vec<Sp<RawPeer>>,
    pub scheduler: Option<Sp<RawScheduler>>,
    pub reorder: Option<Sp<RawReorder>>,
    pub congestion: Option<Sp<RawCongestion>>,
    pub timers: Option<Sp<RawTimers>>,
    pub log: Option<Sp<RawLog>>,
    pub metrics: Option<Sp<RawMetrics>>,
    pub control: Option<Sp<RawControl>>,
    pub handshake: Option<Sp<RawHandshake>>,
    pub limits: Option<Sp<RawLimits>>,
}

/// The server's `[limits]` table: what one session may take of the server.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub max_paths_per_session: Option<Sp<i64>>,
    pub memory_budget_mib: Option<Sp<i64>>,
}

/// The server's `[handshake]` table: flood limits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHandshake {
    pub load_threshold_per_s: Option<Sp<i64>>,
    pub rate_per_source_per_s: Option<Sp<i64>>,
    pub burst_per_source: Option<Sp<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTun {
    pub name: Option<Sp<String>>,
    pub addresses: Option<Sp<Vec<Sp<String>>>>,
    pub mtu: Option<Sp<i64>>,
}

/// The client's `[server]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServerSection {
    pub endpoint: Option<Sp<String>>,
    pub public_key: Option<Sp<String>>,
    pub cipher: Option<Sp<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPath {
    pub name: Option<Sp<String>>,
    pub interface: Option<Sp<String>>,
    pub source_address: Option<Sp<String>>,
    pub endpoint: Option<Sp<String>>,
    pub backup: Option<Sp<bool>>,
    pub keepalive_interval_ms: Option<Sp<i64>>,
    pub probe_budget_bytes_per_hour: Option<Sp<i64>>,
    pub socket_buffer_bytes: Option<Sp<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeer {
    pub name: Option<Sp<String>>,
    pub public_key: Option<Sp<String>>,
    pub allowed_ips: Option<Sp<Vec<Sp<String>>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub name: Option<Sp<String>>,
    pub duplicate_latency_critical: Option<Sp<bool>>,
    pub parity_on_lossy_paths: Option<Sp<bool>>,
    pub ecf_hysteresis: Option<Sp<f64>>,
    pub blest_lambda: Option<Sp<f64>>,
    pub earliest_arrival_wait_margin_us: Option<Sp<i64>>,
    pub earliest_arrival_share_percent: Option<Sp<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReorder {
    pub adaptive: Option<Sp<bool>>,
    pub equalize_delay: Option<Sp<String>>,
    pub equalize_percent: Option<Sp<i64>>,
    pub min_hold_ms: Option<Sp<i64>>,
    pub max_hold_ms: Option<Sp<i64>>,
    pub capacity_packets: Option<Sp<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCongestion {
    pub controller: Option<Sp<String>>,
    pub queue_capacity_packets: Option<Sp<i64>>,
    pub queue_max_delay_ms: Option<Sp<i64>>,
    pub queue_target_delay_ms: Option<Sp<i64>>,
    pub queue_interval_ms: Option<Sp<i64>>,
}

/// Client and server timers share one table; the mode-specific fields are
/// rejected by validation with a hint naming the other mode.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimers {
    pub keepalive_interval_ms: Option<Sp<i64>>,
    pub path_timeout_ms: Option<Sp<i64>>,
    pub handshake_retry_ms: Option<Sp<i64>>,
    pub probe_interval_ms: Option<Sp<i64>>,
    pub max_ack_delay_ms: Option<Sp<i64>>,
    pub session_timeout_ms: Option<Sp<i64>>,
    pub session_idle_timeout_ms: Option<Sp<i64>>,
    pub rekey_after_ms: Option<Sp<i64>>,
    pub reject_after_ms: Option<Sp<i64>>,
    pub rekey_after_messages: Option<Sp<i64>>,
    pub reject_after_messages: Option<Sp<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub stats_interval_ms: Option<Sp<i64>>,
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub enabled: Option<Sp<bool>>,
    pub listen: Option<Sp<String>>,
    pub bearer_token_file: Option<Sp<String>>,
    pub max_connections: Option<Sp<i64>>,
}

/// `[control]`: the control socket `mptund status` talks to.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawControl {
    pub enabled: Option<Sp<bool>>,
    pub socket: Option<Sp<String>>,
}
