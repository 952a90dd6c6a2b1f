//! SIGHUP: re-read and validate the configuration file, and apply it without
//! dropping the session.
//!
//! A file with a mistake is refused with the usual located error (file, line, field,
//! fix) and the daemon runs on unchanged. A valid file is compared with the running
//! configuration: if any setting that only a restart can change differs, the whole
//! reload is refused with one line naming the first such field, and nothing changes.
//! Otherwise everything is applied at once:
//!
//! - client paths, matched by name: a new one gets a socket and joins the session
//!   under a fresh path id; a removed one has its in-flight packets re-sent on the
//!   others, then its socket is closed; a changed interface, source address or
//!   endpoint is a removal and an addition, a changed backup flag, keepalive or probe
//!   budget is applied in place;
//! - server peers, matched by public key: a kept peer's name and allowed addresses
//!   change in place; a removed peer's session is closed with a goodbye; a new one
//!   may handshake;
//! - the scheduler (name and parameters) is rebuilt and swapped into every session;
//! - reorder hold bounds and adaptivity, send queue limits, path timeout, probe and
//!   keepalive intervals, handshake retry, session timeouts, stats interval.
//!
//! What needs a restart ([`restart_needed`]): the role, keys, the TUN device, the
//! server's listen address, the metrics and control sockets, the reorder buffer's
//! capacity, the congestion controller, the maximum ACK delay, and a path whose MTU
//! is smaller than the running TUN MTU.

use std::time::Instant;

use super::ops::Ops;
use super::udp::Binding;
use super::{interface_mtu, session_settings, EventLoop};
use crate::config::{self, ClientConfig, Config, PathConfig, ServerConfig};
use crate::keys::PublicKey;
use crate::mtu;
use crate::session::{
    ClientCore, ClientPathSettings, Engine, PathSettings, PeerSettings, ReconfigureError,
    ServerCore, MAX_PATHS,
};

/// Why a valid new configuration was not applied; nothing of it is in effect.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file switched between client and server.
    #[error("the file now configures a {new}, but this daemon runs as a {running}; restart it to switch roles")]
    RoleChanged {
        running: &'static str,
        new: &'static str,
    },
    /// A setting changed that cannot change while the daemon runs.
    #[error(
        "`{field}` changed, and {why}; restart to apply (e.g. systemctl restart mptund@<instance>)"
    )]
    RestartNeeded { field: String, why: &'static str },
    /// The running session refused a change (scheduler parameters, path ids).
    #[error("{0}; nothing was changed")]
    Refused(#[from] ReconfigureError),
}

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The file says what is already running.
    Unchanged,
    /// The new configuration is in effect.
    Applied,
}

fn role(config: &Config) -> &'static str {
    match config {
        Config::Client(_) => "client",
        Config::Server(_) => "server",
    }
}

/// Handles one SIGHUP: tells systemd a reload is under way, validates the file, applies
/// it through [`apply_reload`], logs the outcome and tells systemd it is ready again.
pub(super) fn reload<E: ApplyConfig>(event_loop: &mut EventLoop<E>, ops: &mut Ops, now: Instant) {
    ops.notifier.reloading();
    let source = ops.config.source().to_path_buf();
    tracing::info!(config = %source.display(), "SIGHUP: reloading the configuration");
    let status = match config::load(&source) {
        Err(error) => {
            tracing::error!("reload refused, the running configuration stays in effect: {error}");
            "reload refused: invalid configuration; running on the previous one"
        }
        Ok(loaded) => {
            for warning in &loaded.warnings {
                tracing::warn!("{warning}");
            }
            match apply_reload(event_loop, &ops.config, loaded.config.clone(), now) {
                Ok(Reloaded::Unchanged) => {
                    tracing::info!("reload: the configuration is valid and unchanged");
                    "running; configuration unchanged"
                }
                Ok(Reloaded::Applied) => {
                    if let Config::Client(client) = &loaded.config {
                        ops.interfaces.replace(
                            client
                                .paths
                                .iter()
                                .filter_map(|path| {
                                    Some((path.name.clone(), path.interface.clone()?))
                                })
                                .collect(),
                        );
                    }
                    ops.config = loaded.config;
                    tracing::info!("reload: the new configuration is in effect");
                    "running; new configuration applied"
                }
                Err(error) => {
                    tracing::error!(
                        "reload: {} is valid but was not applied, the running configuration stays in effect: {error}",
                        source.display()
                    );
                    "running; new configuration valid but not applied"
                }
            }
        }
    };
    ops.notifier.ready(status);
}

/// Applies `new`, a validated configuration, to the running daemon: all of it or,
/// when something cannot change live, none of it.
pub(super) fn apply_reload<E: ApplyConfig>(
    event_loop: &mut EventLoop<E>,
    running: &Config,
    new: Config,
    now: Instant,
) -> Result<Reloaded, ReloadError> {
    if role(running) != role(&new) {
        return Err(ReloadError::RoleChanged {
            running: role(running),
            new: role(&new),
        });
    }
    if *running == new {
        return Ok(Reloaded::Unchanged);
    }
    if let Some((field, why)) = restart_needed(running, &new) {
        return Err(ReloadError::RestartNeeded { field, why });
    }
    E::apply(event_loop, running, &new, now)?;
    Ok(Reloaded::Applied)
}

/// The first setting that differs between `running` and `new` and cannot change
/// while the daemon runs, with the reason.
pub fn restart_needed(running: &Config, new: &Config) -> Option<(String, &'static str)> {
    let field = |name: &str, why: &'static str| Some((name.to_owned(), why));
    let tun = "the TUN device is created at start";
    if running.tun().name != new.tun().name {
        return field("tun.name", tun);
    }
    if running.tun().addresses != new.tun().addresses {
        return field("tun.addresses", tun);
    }
    if running.tun().mtu != new.tun().mtu {
        return field("tun.mtu", tun);
    }
    if running.metrics() != new.metrics() {
        return field("metrics.listen", "the metrics endpoint is bound at start");
    }
    if running.control() != new.control() {
        return field("control.socket", "the control socket is bound at start");
    }
    let (a, b) = (common(running), common(new));
    if a.private_key != b.private_key {
        return field("private_key_file", "the session keys derive from it");
    }
    if a.reorder.capacity_packets != b.reorder.capacity_packets {
        return field(
            "reorder.capacity_packets",
            "the reorder buffer and the packet pool are sized at start",
        );
    }
    if a.congestion.controller != b.congestion.controller {
        return field(
            "congestion.controller",
            "every path's congestion state belongs to its controller",
        );
    }
    if a.timers.max_ack_delay != b.timers.max_ack_delay {
        return field(
            "timers.max_ack_delay_ms",
            "both ends' acknowledgement timing was set up with it",
        );
    }
    match (running, new) {
        (Config::Client(a), Config::Client(b)) if a.server_public_key != b.server_public_key => {
            field("server.public_key", "the session was authenticated with it")
        }
        (Config::Server(a), Config::Server(b)) if a.listen != b.listen => {
            field("listen", "the server's socket is bound at start")
        }
        _ => None,
    }
}

/// The settings both roles have, borrowed.
struct Common<'a> {
    private_key: &'a [u8; 32],
    reorder: &'a config::ReorderConfig,
    congestion: &'a config::CongestionConfig,
    timers: &'a config::Timers,
}

fn common(config: &Config) -> Common<'_> {
    match config {
        Config::Client(c) => Common {
            private_key: &c.private_key,
            reorder: &c.reorder,
            congestion: &c.congestion,
            timers: &c.timers,
        },
        Config::Server(s) => Common {
            private_key: &s.private_key,
            reorder: &s.reorder,
            congestion: &s.congestion,
            timers: &s.timers,
        },
    }
}

/// How each role applies a new configuration to its running engine.
pub(super) trait ApplyConfig: Engine + Sized {
    /// Applies `new` (same role, nothing in it needs a restart); on error nothing
    /// changed.
    fn apply(
        event_loop: &mut EventLoop<Self>,
        running: &Config,
        new: &Config,
        now: Instant,
    ) -> Result<(), ReloadError>;
}

fn client_path_settings(config: &ClientConfig, path: &PathConfig) -> ClientPathSettings {
    ClientPathSettings {
        name: path.name.clone(),
        endpoint: path.endpoint,
        backup: path.backup,
        probing: PathSettings {
            keepalive_interval: path.keepalive_interval,
            probe_interval: config.timers.probe_interval,
            probe_budget_bytes_per_hour: path.probe_budget_bytes_per_hour,
        },
    }
}

pub(super) fn binding_of(path: &PathConfig) -> Binding {
    Binding {
        interface: path.interface.clone(),
        source_address: path.source_address,
        port: 0,
        ipv6: path.endpoint.is_ipv6(),
        buffer_bytes: path.socket_buffer_bytes,
    }
}

/// Whether `new` must replace `old` (a new socket) rather than change it in place.
fn needs_new_socket(old: &PathConfig, new: &PathConfig) -> bool {
    old.interface != new.interface
        || old.source_address != new.source_address
        || old.endpoint != new.endpoint
        || old.socket_buffer_bytes != new.socket_buffer_bytes
}

impl ApplyConfig for ClientCore {
    fn apply(
        event_loop: &mut EventLoop<Self>,
        running: &Config,
        new: &Config,
        now: Instant,
    ) -> Result<(), ReloadError> {
        let (Config::Client(old), Config::Client(new)) = (running, new) else {
            unreachable!("apply_reload checked the roles");
        };
        let removed: Vec<&PathConfig> = old
            .paths
            .iter()
            .filter(|path| {
                new.paths
                    .iter()
                    .find(|candidate| candidate.name == path.name)
                    .is_none_or(|candidate| needs_new_socket(path, candidate))
            })
            .collect();
        let added: Vec<&PathConfig> = new
            .paths
            .iter()
            .filter(|path| {
                old.paths
                    .iter()
                    .find(|candidate| candidate.name == path.name)
                    .is_none_or(|candidate| needs_new_socket(candidate, path))
            })
            .collect();
        let changed: Vec<&PathConfig> = new
            .paths
            .iter()
            .filter(|path| {
                old.paths
                    .iter()
                    .find(|candidate| candidate.name == path.name)
                    .is_some_and(|candidate| {
                        candidate != *path && !needs_new_socket(candidate, path)
                    })
            })
            .collect();

        // Everything that can fail is checked before anything changes.
        for path in &added {
            if let Some(interface) = &path.interface {
                if let Ok(link_mtu) = interface_mtu(interface) {
                    let fits = mtu::tun_mtu([(link_mtu, path.endpoint.is_ipv6())]).unwrap_or(0);
                    if fits < event_loop.tun_mtu {
                        return Err(ReloadError::RestartNeeded {
                            field: format!(
                                "path {:?} (interface {interface}, MTU {link_mtu})",
                                path.name
                            ),
                            why: "its MTU is too small for the running TUN MTU",
                        });
                    }
                }
            }
        }
        let free_slots = event_loop.bindings.iter().filter(|b| b.is_none()).count()
            + removed.len()
            + MAX_PATHS.saturating_sub(event_loop.bindings.len());
        if added.len() > free_slots {
            return Err(ReloadError::RestartNeeded {
                field: "path".into(),
                why: "there are no free socket slots",
            });
        }
        if added.len() > event_loop.engine.path_ids_left() {
            return Err(ReloadError::RestartNeeded {
                field: "path".into(),
                why: "this session has used every path id the wire allows",
            });
        }
        let session = session_settings(
            &new.scheduler,
            &new.reorder,
            &new.congestion,
            &new.timers,
            event_loop.tun_mtu,
        );
        event_loop.engine.apply_settings(
            session,
            new.timers.handshake_retry,
            new.timers.session_timeout,
        )?;

        let mut out = std::mem::take(&mut event_loop.out);
        for path in &removed {
            let socket = event_loop.engine.remove_path(now, &path.name, &mut out)?;
            event_loop.sockets[socket] = None;
            event_loop.fail_waiting(now, socket);
            event_loop.bindings[socket] = None;
            event_loop.opened_with[socket] = None;
        }
        for path in &changed {
            event_loop
                .engine
                .reconfigure_path(now, client_path_settings(new, path))?;
        }
        // Probe intervals are a session-wide timer but stored per path.
        if old.timers.probe_interval != new.timers.probe_interval {
            for path in &new.paths {
                if !added.iter().any(|a| a.name == path.name) {
                    event_loop
                        .engine
                        .reconfigure_path(now, client_path_settings(new, path))?;
                }
            }
        }
        for path in &added {
            let socket = match event_loop.bindings.iter().position(Option::is_none) {
                Some(free) => free,
                None => {
                    event_loop.bindings.push(None);
                    event_loop.sockets.push(None);
                    event_loop.names.push(String::new());
                    event_loop.opened_with.push(None);
                    event_loop.bindings.len() - 1
                }
            };
            event_loop
                .engine
                .add_path(now, client_path_settings(new, path), socket)?;
            event_loop.bindings[socket] = Some(binding_of(path));
            event_loop.names[socket] = path.name.clone();
            event_loop.open_socket(now, socket, false);
        }
        out.append(&mut event_loop.out);
        event_loop.out = out;
        set_stats_interval(event_loop, new.log.stats_interval, now);
        Ok(())
    }
}

impl ApplyConfig for ServerCore {
    fn apply(
        event_loop: &mut EventLoop<Self>,
        _running: &Config,
        new: &Config,
        now: Instant,
    ) -> Result<(), ReloadError> {
        let Config::Server(new) = new else {
            unreachable!("apply_reload checked the roles");
        };
        apply_server(event_loop, new, now)
    }
}

fn apply_server(
    event_loop: &mut EventLoop<ServerCore>,
    new: &ServerConfig,
    now: Instant,
) -> Result<(), ReloadError> {
    let session = session_settings(
        &new.scheduler,
        &new.reorder,
        &new.congestion,
        &new.timers,
        event_loop.tun_mtu,
    );
    let path = PathSettings {
        keepalive_interval: new.timers.keepalive_interval,
        probe_interval: new.timers.probe_interval,
        probe_budget_bytes_per_hour: None,
    };
    event_loop
        .engine
        .apply_settings(now, session, path, new.timers.session_idle_timeout)?;
    let peers = new
        .peers
        .iter()
        .map(|peer| PeerSettings {
            name: peer.name.clone(),
            public_key: PublicKey(peer.public_key),
            allowed_ips: peer.allowed_ips.clone(),
        })
        .collect();
    event_loop.engine.set_peers(now, peers, &mut event_loop.out);
    event_loop.engine.set_handshake_limits(new.handshake);
    set_stats_interval(event_loop, new.log.stats_interval, now);
    Ok(())
}

fn set_stats_interval<E: Engine>(
    event_loop: &mut EventLoop<E>,
    interval: Option<std::time::Duration>,
    now: Instant,
) {
    if event_loop.stats_interval != interval {
        event_loop.stats_interval = interval;
        event_loop.next_stats = interval.map(|interval| now + interval);
    }
}
