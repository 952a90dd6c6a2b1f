//! Validation: from the raw, spanned structs of [`super::raw`] to the
//! validated types of [`super`], one check at a time, each failing with a
//! located [`ConfigError`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mptund_sched::{
    BlestParams, EarliestArrivalParams, EcfParams, EqualizeScope, SchedulerChoice,
    BLEST_LAMBDA_RANGE, EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE, EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE,
    ECF_HYSTERESIS_RANGE,
};

use crate::crypto::KeyLifetime;
use toml::de::DeTable;

use super::error::{self, ConfigError, Mode, Source};
use super::keys::{decode_key, public_key_of, KEY_LEN};
use super::raw::{
    RawClient, RawCongestion, RawControl, RawHandshake, RawLimits, RawLog, RawMetrics, RawPath,
    RawPeer, RawReorder, RawScheduler, RawServer, RawTimers, RawTun, Sp,
};
use super::suggest;
use super::{
    default_control_socket, BearerToken, ClientConfig, Config, CongestionConfig, ControlConfig,
    IpNet, Loaded, LogConfig, MetricsConfig, PathConfig, PeerConfig, ReorderConfig,
    SchedulerConfig, ServerConfig, Timers, TunConfig, CIPHERS, DEFAULT_BACKUP_KEEPALIVE_INTERVAL,
    DEFAULT_CONTROLLER, DEFAULT_DUPLICATE_LATENCY_CRITICAL, DEFAULT_EQUALIZE_DELAY,
    DEFAULT_EQUALIZE_PERCENT, DEFAULT_HANDSHAKE_RETRY, DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_MAX_ACK_DELAY, DEFAULT_METRICS_LISTEN, DEFAULT_METRICS_MAX_CONNECTIONS,
    DEFAULT_PARITY_ON_LOSSY_PATHS, DEFAULT_PATH_TIMEOUT, DEFAULT_PROBE_INTERVAL,
    DEFAULT_QUEUE_CAPACITY_PACKETS, DEFAULT_QUEUE_INTERVAL, DEFAULT_QUEUE_MAX_DELAY,
    DEFAULT_QUEUE_TARGET_DELAY, DEFAULT_REORDER_CAPACITY_PACKETS, DEFAULT_REORDER_MAX_HOLD,
    DEFAULT_REORDER_MIN_HOLD, DEFAULT_SCHEDULER, DEFAULT_SESSION_IDLE_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT, DEFAULT_SOCKET_BUFFER_BYTES, DEFAULT_STATS_INTERVAL, KNOWN_CIPHERS,
    KNOWN_CONTROLLERS, KNOWN_SCHEDULERS, MAX_PATHS,
};
use crate::cookie::HandshakeLimits;
use crate::session::{ServerLimits, MIN_MEMORY_BUDGET_MIB};

mod tables;
mod values;

type Result<T> = std::result::Result<T, ConfigError>;

/// What a path's socket is bound to: (interface, source address).
type Binding = (Option<String>, Option<IpAddr>);

/// Largest private key file accepted: a key is 44 characters and a newline.
const MAX_KEY_FILE_BYTES: u64 = 1024;
/// Largest bearer token file accepted: far above a token of 32 random bytes in
/// base64 (44 characters), far below anything that is not a token.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Most `metrics.max_connections`: a quarter of the unit's `LimitNOFILE=1024`.
const MAX_METRICS_CONNECTIONS: i64 = 256;
/// Linux `IFNAMSIZ` minus the terminating NUL.
const MAX_INTERFACE_NAME_BYTES: usize = 15;
/// Longest path or peer name (they appear in metric labels and log lines).
const MAX_LABEL_CHARS: usize = 32;
/// Smallest MTU every IPv4 host must accept (RFC 791).
const MIN_MTU: i64 = 576;
/// Smallest MTU IPv6 allows on a link (RFC 8200, section 5).
const MIN_IPV6_MTU: i64 = 1280;

/// Parses and validates one configuration document.
pub(super) fn parse_document(file: &Path, text: &str, base_dir: &Path) -> Result<Loaded> {
    let src = Source { file, text };
    let tree = DeTable::parse(text).map_err(|e| error::syntax_error(&src, &e))?;
    let mode = read_mode(&src, tree.get_ref())?;
    let mut validator = Validator {
        src,
        base_dir,
        mode,
        warnings: Vec::new(),
    };
    let config = match mode {
        Mode::Client => {
            let raw: RawClient =
                toml::from_str(text).map_err(|e| error::serde_error(&src, &tree, &e, mode))?;
            Config::Client(validator.client(&raw)?)
        }
        Mode::Server => {
            let raw: RawServer =
                toml::from_str(text).map_err(|e| error::serde_error(&src, &tree, &e, mode))?;
            Config::Server(validator.server(&raw)?)
        }
    };
    Ok(Loaded {
        config,
        warnings: validator.warnings,
    })
}

/// Reads `mode` first: it decides which fields the rest of the file may have.
fn read_mode(src: &Source<'_>, root: &DeTable<'_>) -> Result<Mode> {
    let Some((_, value)) = root.iter().find(|(key, _)| key.get_ref() == "mode") else {
        return Err(src
            .error_unplaced("mode", "required field `mode` is missing")
            .with_hint("add `mode = \"client\"` or `mode = \"server\"` at the top of the file"));
    };
    let Some(text) = value.get_ref().as_str() else {
        return Err(src
            .error(
                value.span(),
                "mode",
                format!("expected a string, found {}", value.get_ref().type_str()),
            )
            .with_hint("write `mode = \"client\"` or `mode = \"server\"`"));
    };
    match text {
        "client" => Ok(Mode::Client),
        "server" => Ok(Mode::Server),
        other => {
            let hint = match suggest::closest(other, ["client", "server"]) {
                Some(candidate) => {
                    format!("did you mean \"{candidate}\"? mode is \"client\" or \"server\"")
                }
                None => {
                    "mode is \"client\" (the side with the uplinks) or \"server\" (the gateway)"
                        .to_string()
                }
            };
            Err(src
                .error(value.span(), "mode", format!("{other:?} is not a mode"))
                .with_hint(hint))
        }
    }
}

/// A table that fields are looked up in, for reporting missing ones.
struct Table<'t> {
    /// Dotted path, empty for the top level.
    path: &'t str,
    /// The header's span, if the table is written as one.
    header: Option<Range<usize>>,
}

impl Table<'_> {
    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn describe(&self) -> String {
        match self.path.split_once('[') {
            _ if self.path.is_empty() => "the top level (before the first [table])".to_string(),
            Some((array, _)) => format!("this [[{array}]] table"),
            None => format!("[{}]", self.path),
        }
    }
}

struct Validator<'a> {
    src: Source<'a>,
    base_dir: &'a Path,
    mode: Mode,
    warnings: Vec<String>,
}

impl Validator<'_> {
    fn error(&self, span: Range<usize>, field: &str, problem: impl Into<String>) -> ConfigError {
        self.src.error(span, field, problem)
    }

    fn line_of(&self, span: &Range<usize>) -> usize {
        self.src.position(span.start).0
    }

    /// A field that must be present in `table`.
    fn required<'r, T>(
        &self,
        value: &'r Option<Sp<T>>,
        table: &Table<'_>,
        key: &str,
        example: &str,
    ) -> Result<&'r Sp<T>> {
        value.as_ref().ok_or_else(|| {
            let field = table.field(key);
            let problem = format!(
                "required field `{key}` is missing from {}",
                table.describe()
            );
            let err = match &table.header {
                Some(span) => self.error(span.clone(), &field, problem),
                None => self.src.error_unplaced(field, problem),
            };
            err.with_hint(format!("add `{key} = {example}`"))
        })
    }

    /// A table that must be present at the top level.
    fn required_table<'r, T>(
        &self,
        value: &'r Option<Sp<T>>,
        name: &str,
        contents: &str,
    ) -> Result<&'r Sp<T>> {
        value.as_ref().ok_or_else(|| {
            self.src
                .error_unplaced(name, format!("required table [{name}] is missing"))
                .with_hint(format!("add a [{name}] table with {contents}"))
        })
    }

    /// An optional integer within `range`, or `default`.
    fn integer(
        &self,
        value: Option<&Sp<i64>>,
        field: &str,
        range: RangeInclusive<i64>,
        unit: &str,
        default: i64,
    ) -> Result<i64> {
        let Some(value) = value else {
            return Ok(default);
        };
        let number = *value.get_ref();
        if range.contains(&number) {
            return Ok(number);
        }
        Err(self
            .error(
                value.span(),
                field,
                format!("{number}{unit} is out of range"),
            )
            .with_hint(format!(
                "use a value from {} to {}{unit} (default {default})",
                range.start(),
                range.end()
            )))
    }

    /// An optional duration in milliseconds within `range`, or `default`.
    fn millis(
        &self,
        value: Option<&Sp<i64>>,
        field: &str,
        range: RangeInclusive<i64>,
        default: Duration,
    ) -> Result<Duration> {
        let default_ms = i64::try_from(default.as_millis()).unwrap_or(i64::MAX);
        let ms = self.integer(value, field, range, " ms", default_ms)?;
        Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    // ---- client -------------------------------------------------------

    fn client(&mut self, raw: &RawClient) -> Result<ClientConfig> {
        let (private_key_file, private_key) =
            self.private_key(&raw.private_key_file, "\"/etc/mptund/client.key\"")?;
        let tun = self.tun(&raw.tun)?;

        let server = self.required_table(
            &raw.server,
            "server",
            "`endpoint = \"198.18.0.1:51900\"` (the server's IP address and port) and \
             `public_key` (the output of `mptund pubkey` on the server)",
        )?;
        let table = Table {
            path: "server",
            header: Some(server.span()),
        };
        let endpoint_value = self.required(
            &server.get_ref().endpoint,
            &table,
            "endpoint",
            "\"198.18.0.1:51900\"",
        )?;
        let endpoint = self.endpoint(endpoint_value, "server.endpoint")?;
        let key_value = self.required(
            &server.get_ref().public_key,
            &table,
            "public_key",
            "\"<output of `mptund pubkey < server.key` on the server>\"",
        )?;
        let server_public_key = self.public_key(
            key_value,
            "server.public_key",
            "paste the output of `mptund pubkey < server.key` run on the server",
        )?;
        if public_key_of(&private_key) == server_public_key {
            return Err(self
                .error(
                    key_value.span(),
                    "server.public_key",
                    "is this client's own public key",
                )
                .with_hint(
                    "put the server's public key here (`mptund pubkey < server.key` on the server); \
                     client and server need different key pairs",
                ));
        }

        let cipher = self.known_name(
            server.get_ref().cipher.as_ref(),
            "server.cipher",
            "cipher",
            KNOWN_CIPHERS,
            "auto",
        )?;
        // "auto" names no AEAD: None, chosen by the CPU at start.
        let cipher = CIPHERS.into_iter().find(|aead| aead.name() == cipher);
        let paths = self.paths(&raw.path, endpoint)?;
        let timers = self.timers(&raw.timers)?;
        let paths = self.path_keepalives(&raw.path, paths, timers.keepalive_interval)?;
        Ok(ClientConfig {
            source: self.src.file.to_path_buf(),
            private_key,
            private_key_file,
            server_public_key,
            cipher,
            tun,
            paths,
            scheduler: self.scheduler(&raw.scheduler)?,
            reorder: self.reorder(&raw.reorder)?,
            congestion: self.congestion(&raw.congestion)?,
            timers,
            log: self.log(&raw.log)?,
            metrics: self.metrics(&raw.metrics)?,
            control: self.control(&raw.control)?,
            state_directory: self.state_directory(&raw.state_directory)?,
        })
    }

    /// Each path's keepalive interval (its own, else `[timers]`'s, else the
    /// backup default) and probe budget.
    fn path_keepalives(
        &self,
        raw: &[Sp<RawPath>],
        mut paths: Vec<PathConfig>,
        keepalive_interval: Duration,
    ) -> Result<Vec<PathConfig>> {
        for (index, (spanned, path)) in raw.iter().zip(paths.iter_mut()).enumerate() {
            let raw = spanned.get_ref();
            let prefix = format!("path[{index}]");
            let default = if path.backup {
                DEFAULT_BACKUP_KEEPALIVE_INTERVAL
            } else {
                keepalive_interval
            };
            path.keepalive_interval = self.millis(
                raw.keepalive_interval_ms.as_ref(),
                &format!("{prefix}.keepalive_interval_ms"),
                100..=600_000,
                default,
            )?;
            if let Some(value) = &raw.probe_budget_bytes_per_hour {
                let field = format!("{prefix}.probe_budget_bytes_per_hour");
                let budget = self.integer(
                    Some(value),
                    &field,
                    1_000..=1_000_000_000,
                    " bytes per hour",
                    0,
                )?;
                path.probe_budget_bytes_per_hour = u64::try_from(budget).ok();
            }
        }
        Ok(paths)
    }

    fn paths(
        &mut self,
        raw: &[Sp<RawPath>],
        server_endpoint: SocketAddr,
    ) -> Result<Vec<PathConfig>> {
        if raw.is_empty() {
            return Err(self
                .src
                .error_unplaced("path", "at least one [[path]] table is required")
                .with_hint(
                    "add one [[path]] table per uplink, e.g. `[[path]]` `name = \"lte\"` \
                     `interface = \"wwan0\"`",
                ));
        }
        if let Some(extra) = raw.get(MAX_PATHS) {
            return Err(self
                .error(
                    extra.span(),
                    &format!("path[{MAX_PATHS}]"),
                    format!(
                        "{} paths given, at most {MAX_PATHS} are supported",
                        raw.len()
                    ),
                )
                .with_hint("remove paths; one [[path]] per physical uplink is enough"));
        }

        let mut paths = Vec::with_capacity(raw.len());
        let mut names: HashMap<String, (usize, Range<usize>)> = HashMap::new();
        let mut bindings: HashMap<Binding, (usize, Range<usize>)> = HashMap::new();
        for (index, spanned) in raw.iter().enumerate() {
            let path = spanned.get_ref();
            let prefix = format!("path[{index}]");
            let table = Table {
                path: &prefix,
                header: Some(spanned.span()),
            };

            let name_value = self.required(&path.name, &table, "name", "\"lte\"")?;
            let name = self.label(
                name_value,
                &table.field("name"),
                "path",
                "\"lte\", \"5g-1\" or \"wifi\"",
            )?;
            if let Some((other, other_span)) = names.get(&name) {
                return Err(self
                    .error(
                        name_value.span(),
                        &table.field("name"),
                        format!(
                            "path name {name:?} is already used by path[{other}] (line {})",
                            self.line_of(other_span)
                        ),
                    )
                    .with_hint("give every [[path]] its own name"));
            }
            names.insert(name.clone(), (index, name_value.span()));

            let interface = match &path.interface {
                Some(value) => Some(self.interface_name(
                    value,
                    &table.field("interface"),
                    "use the name shown by `ip link`",
                )?),
                None => None,
            };
            let source_address = match &path.source_address {
                Some(value) => Some(self.source_address(value, &table.field("source_address"))?),
                None => None,
            };
            if interface.is_none() && source_address.is_none() {
                return Err(self
                    .error(
                        spanned.span(),
                        &prefix,
                        format!("path {name:?} has neither `interface` nor `source_address`"),
                    )
                    .with_hint(
                        "set `interface = \"wwan0\"` (the uplink's device, see `ip link`) and/or \
                         `source_address` (the uplink's local IP address) so the path's packets \
                         leave through that uplink",
                    ));
            }

            let endpoint = match &path.endpoint {
                Some(value) => self.endpoint(value, &table.field("endpoint"))?,
                None => server_endpoint,
            };
            if let (Some(source), Some(value)) = (source_address, &path.source_address) {
                if source.is_ipv4() != endpoint.is_ipv4() {
                    return Err(self
                        .error(
                            value.span(),
                            &table.field("source_address"),
                            format!(
                                "source address {source} is IPv{} but the path's endpoint {endpoint} is IPv{}",
                                ip_version(source),
                                ip_version(endpoint.ip())
                            ),
                        )
                        .with_hint(
                            "a socket bound to one address family cannot reach the other; use a \
                             source address of the endpoint's family or give this path its own \
                             `endpoint`",
                        ));
                }
            }

            let binding = (interface.clone(), source_address);
            if let Some((other, other_span)) = bindings.get(&binding) {
                return Err(self
                    .error(
                        spanned.span(),
                        &prefix,
                        format!(
                            "path {name:?} binds to the same interface and source address as path[{other}] (line {})",
                            self.line_of(other_span)
                        ),
                    )
                    .with_hint(
                        "two paths over the same uplink add no capacity; remove one or bind it to \
                         another interface or source_address",
                    ));
            }
            bindings.insert(binding, (index, spanned.span()));

            let backup = path.backup.as_ref().is_some_and(|b| *b.get_ref());
            let socket_buffer_bytes = self.integer(
                path.socket_buffer_bytes.as_ref(),
                &format!("{prefix}.socket_buffer_bytes"),
                65_536..=(256 << 20),
                " bytes",
                DEFAULT_SOCKET_BUFFER_BYTES as i64,
            )?;
            paths.push(PathConfig {
                name,
                interface,
                source_address,
                endpoint,
                backup,
                // Filled in by `path_keepalives` once `[timers]` is read.
                keepalive_interval: Duration::ZERO,
                probe_budget_bytes_per_hour: None,
                socket_buffer_bytes: usize::try_from(socket_buffer_bytes)
                    .unwrap_or(DEFAULT_SOCKET_BUFFER_BYTES),
            });
        }
        if paths.iter().all(|p| p.backup) {
            self.warnings.push(format!(
                "{}: every path has `backup = true`, so all of them carry data as if none were backup",
                self.src.file.display()
            ));
        }
        Ok(paths)
    }

    // ---- server -------------------------------------------------------

    fn server(&mut self, raw: &RawServer) -> Result<ServerConfig> {
        let (private_key_file, private_key) =
            self.private_key(&raw.private_key_file, "\"/etc/mptund/server.key\"")?;
        let root = Table {
            path: "",
            header: None,
        };
        let listen_value = self.required(&raw.listen, &root, "listen", "\"0.0.0.0:51900\"")?;
        let listen = self.socket_addr(listen_value, "listen", true)?;
        let tun = self.tun(&raw.tun)?;
        let peers = self.peers(&raw.peer, &public_key_of(&private_key))?;
        Ok(ServerConfig {
            source: self.src.file.to_path_buf(),
            private_key,
            private_key_file,
            listen,
            tun,
            peers,
            scheduler: self.scheduler(&raw.scheduler)?,
            reorder: self.reorder(&raw.reorder)?,
            congestion: self.congestion(&raw.congestion)?,
            timers: self.timers(&raw.timers)?,
            log: self.log(&raw.log)?,
            metrics: self.metrics(&raw.metrics)?,
            control: self.control(&raw.control)?,
            handshake: self.handshake(&raw.handshake)?,
            limits: self.limits(&raw.limits)?,
        })
    }

    fn peers(
        &mut self,
        raw: &[Sp<RawPeer>],
        own_public_key: &[u8; KEY_LEN],
    ) -> Result<Vec<PeerConfig>> {
        if raw.is_empty() {
            return Err(self
                .src
                .error_unplaced("peer", "at least one [[peer]] table is required")
                .with_hint(
                    "add one [[peer]] table per client with `name`, `public_key` (`mptund pubkey` \
                     on the client) and `allowed_ips`",
                ));
        }
        let mut peers = Vec::with_capacity(raw.len());
        let mut names: HashMap<String, Range<usize>> = HashMap::new();
        let mut keys: HashMap<[u8; KEY_LEN], (String, Range<usize>)> = HashMap::new();
        // Every allowed network so far: (peer name, network, its span).
        let mut networks: Vec<(String, IpNet, Range<usize>)> = Vec::new();
        for (index, spanned) in raw.iter().enumerate() {
            let peer = spanned.get_ref();
            let prefix = format!("peer[{index}]");
            let table = Table {
                path: &prefix,
                header: Some(spanned.span()),
            };

            let name_value = self.required(&peer.name, &table, "name", "\"train-042\"")?;
            let name = self.label(name_value, &table.field("name"), "peer", "\"train-042\"")?;
            if let Some(other_span) = names.get(&name) {
                return Err(self
                    .error(
                        name_value.span(),
                        &table.field("name"),
                        format!(
                            "peer name {name:?} is already used on line {}",
                            self.line_of(other_span)
                        ),
                    )
                    .with_hint("give every [[peer]] its own name"));
            }
            names.insert(name.clone(), name_value.span());

            let key_value = self.required(
                &peer.public_key,
                &table,
                "public_key",
                "\"<output of `mptund pubkey < client.key` on the client>\"",
            )?;
            let public_key = self.public_key(
                key_value,
                &table.field("public_key"),
                "paste the output of `mptund pubkey < client.key` run on that client",
            )?;
            if public_key == *own_public_key {
                return Err(self
                    .error(key_value.span(), &table.field("public_key"), "is this server's own public key")
                    .with_hint("put the client's public key here (`mptund pubkey < client.key` on the client)"));
            }
            if let Some((other, other_span)) = keys.get(&public_key) {
                return Err(self
                    .error(
                        key_value.span(),
                        &table.field("public_key"),
                        format!(
                            "the same public key is already given to peer {other:?} (line {})",
                            self.line_of(other_span)
                        ),
                    )
                    .with_hint(
                        "every client needs its own key pair; run `mptund genkey` on the second \
                         client and use its public key",
                    ));
            }
            keys.insert(public_key, (name.clone(), key_value.span()));

            let ips_value = self.required(
                &peer.allowed_ips,
                &table,
                "allowed_ips",
                "[\"198.18.100.2/32\"]",
            )?;
            if ips_value.get_ref().is_empty() {
                return Err(self
                    .error(ips_value.span(), &table.field("allowed_ips"), "is empty")
                    .with_hint(
                        "list the client's inner (tun) addresses, e.g. [\"198.18.100.2/32\"]",
                    ));
            }
            let mut allowed_ips = Vec::with_capacity(ips_value.get_ref().len());
            for (ip_index, value) in ips_value.get_ref().iter().enumerate() {
                let field = format!("{prefix}.allowed_ips[{ip_index}]");
                let net = self.ip_net(value, &field, "write a network with its prefix length, e.g. \"198.18.100.2/32\" for one address")?;
                if !net.is_network() {
                    return Err(self
                        .error(value.span(), &field, format!("{net} has host bits set"))
                        .with_hint(format!("write the network as \"{}\"", net.network())));
                }
                for (other_name, other_net, other_span) in &networks {
                    if !other_net.overlaps(&net) {
                        continue;
                    }
                    if *other_name == name {
                        self.warnings.push(format!(
                            "{}:{}: {field}: {net} overlaps {other_net} of the same peer",
                            self.src.file.display(),
                            self.line_of(&value.span())
                        ));
                        continue;
                    }
                    return Err(self
                        .error(
                            value.span(),
                            &field,
                            format!(
                                "{net} of peer {name:?} overlaps {other_net} of peer {other_name:?} (line {})",
                                self.line_of(other_span)
                            ),
                        )
                        .with_hint(
                            "an inner address must belong to exactly one peer; make the peers' \
                             allowed_ips disjoint",
                        ));
                }
                networks.push((name.clone(), net, value.span()));
                allowed_ips.push(net);
            }
            peers.push(PeerConfig {
                name,
                public_key,
                allowed_ips,
            });
        }
        Ok(peers)
    }
}

fn ip_version(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        4
    } else {
        6
    }
}

/// Cuts long user text so that a pasted blob does not flood an error line.
fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}…")
    }
}
