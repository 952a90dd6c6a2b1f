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
//! - reorder hold bounds, adaptivity and delay equalization, send queue limits, path
//!   timeout, probe and keepalive intervals, handshake retry, session timeouts, stats
//!   interval;
//! - the metrics endpoint's bearer token (its file is read again) and connection cap.
//!
//! What needs a restart ([`restart_needed`]): the role, keys, the client's cipher, the TUN device, the
//! server's listen address, the metrics and control sockets, the client's state directory, the reorder buffer's
//! capacity, the congestion controller, the maximum ACK delay, and a path whose MTU
//! is smaller than the running TUN MTU.

use std::time::{Duration, Instant};

use super::ops::Ops;
use super::udp::Binding;
use super::{interface_mtu, settings};
use crate::config::{self, ClientConfig, Config, PathConfig, ServerConfig};
use crate::mtu;
use crate::session::{ClientCore, Core, Outgoing, ReconfigureError, ServerCore};

/// The running event loop as a reload sees it: its core, its socket slots, its TUN's
/// MTU and its statistics timer. A reload reaches nothing else of the loop's state.
pub(super) trait RunningLoop<C: Core> {
    fn tun_mtu(&self) -> u16;
    fn core(&self) -> &C;
    fn core_mut(&mut self) -> &mut C;
    /// Runs `step` on the core; what it produces goes out with the loop's sends.
    fn produce<R>(&mut self, now: Instant, step: impl FnOnce(&mut C, &mut Vec<Outgoing>) -> R)
        -> R;
    /// Socket slots new paths can have once `closing` slots are given back.
    fn free_socket_slots(&self, closing: usize) -> usize;
    /// Gives back the slot `socket` of a removed path: its socket closes, and a send
    /// that waited for it fails over to the other paths.
    fn release_socket_slot(&mut self, now: Instant, socket: usize);
    /// The slot a new path gets (a new one at the end when none is free).
    fn take_socket_slot(&mut self) -> usize;
    /// Puts path `name`, bound as `binding`, in slot `socket` and opens its socket.
    fn open_path_socket(&mut self, now: Instant, socket: usize, name: String, binding: Binding);
    fn set_stats_interval(&mut self, now: Instant, interval: Option<Duration>);
}

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
    /// The running session refused a change (path ids).
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
pub(super) fn reload<E: ApplyConfig>(
    event_loop: &mut impl RunningLoop<E>,
    ops: &mut Ops,
    now: Instant,
) {
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
                    ops.apply_metrics(loaded.config.metrics());
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
    super::release_freed_memory();
    ops.notifier.ready(status);
}

/// Applies `new`, a validated configuration, to the running daemon: all of it or,
/// when something cannot change live, none of it.
pub(super) fn apply_reload<E: ApplyConfig>(
    event_loop: &mut impl RunningLoop<E>,
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
    // The token and the connection cap apply live (`Ops::apply_metrics`).
    if running.metrics().listen != new.metrics().listen {
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
        (Config::Client(a), Config::Client(b)) if a.cipher != b.cipher => {
            field("server.cipher", "the session's keys were made for it")
        }
        (Config::Client(a), Config::Client(b)) if a.state_directory != b.state_directory => field(
            "state_directory",
            "the handshake timestamp is read from it at start",
        ),
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
pub(super) trait ApplyConfig: Core + Sized {
    /// Applies `new` (same role, nothing in it needs a restart); on error nothing
    /// changed.
    fn apply(
        event_loop: &mut impl RunningLoop<Self>,
        running: &Config,
        new: &Config,
        now: Instant,
    ) -> Result<(), ReloadError>;
}

/// Whether `new` must replace `old` (a new socket) rather than change it in place.
fn needs_new_socket(old: &PathConfig, new: &PathConfig) -> bool {
    old.interface != new.interface
        || old.source_address != new.source_address
        || old.endpoint != new.endpoint
        || old.socket_buffer_bytes != new.socket_buffer_bytes
}

/// What a reload does to the client's paths, matched by name: computed from the two
/// configurations alone, then applied by [`ApplyConfig::apply`].
#[derive(Debug, PartialEq)]
struct PathChanges<'a> {
    /// Running paths to take out: gone from the file, or needing a new socket.
    removed: Vec<&'a PathConfig>,
    /// Paths of the new file that need a new socket: new names, or replacements.
    added: Vec<&'a PathConfig>,
    /// Paths of the new file that keep their socket and change in place.
    changed: Vec<&'a PathConfig>,
}

impl<'a> PathChanges<'a> {
    fn between(old: &'a ClientConfig, new: &'a ClientConfig) -> Self {
        let running = |name: &str| old.paths.iter().find(|path| path.name == name);
        let removed = old
            .paths
            .iter()
            .filter(|path| {
                new.paths
                    .iter()
                    .find(|candidate| candidate.name == path.name)
                    .is_none_or(|candidate| needs_new_socket(path, candidate))
            })
            .collect();
        let added = new
            .paths
            .iter()
            .filter(|path| running(&path.name).is_none_or(|old| needs_new_socket(old, path)))
            .collect();
        // The probe interval is one timer in the file but part of every path's
        // settings in the core.
        let probe_interval_changed = old.timers.probe_interval != new.timers.probe_interval;
        let changed = new
            .paths
            .iter()
            .filter(|path| {
                running(&path.name).is_some_and(|old| {
                    !needs_new_socket(old, path) && (old != *path || probe_interval_changed)
                })
            })
            .collect();
        Self {
            removed,
            added,
            changed,
        }
    }
}

impl ApplyConfig for ClientCore {
    fn apply(
        event_loop: &mut impl RunningLoop<Self>,
        running: &Config,
        new: &Config,
        now: Instant,
    ) -> Result<(), ReloadError> {
        let (Config::Client(old), Config::Client(new)) = (running, new) else {
            unreachable!("apply_reload checked the roles");
        };
        let PathChanges {
            removed,
            added,
            changed,
        } = PathChanges::between(old, new);

        // Everything that can fail is checked before anything changes.
        for path in &added {
            if let Some(interface) = &path.interface {
                if let Ok(link_mtu) = interface_mtu(interface) {
                    let fits = mtu::tun_mtu([(link_mtu, path.endpoint.is_ipv6())]).unwrap_or(0);
                    if fits < event_loop.tun_mtu() {
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
        if added.len() > event_loop.free_socket_slots(removed.len()) {
            return Err(ReloadError::RestartNeeded {
                field: "path".into(),
                why: "there are no free socket slots",
            });
        }
        if added.len() > event_loop.core().path_ids_left() {
            return Err(ReloadError::RestartNeeded {
                field: "path".into(),
                why: "this session has used every path id the wire allows",
            });
        }
        let session = settings::client_session(new, event_loop.tun_mtu());
        event_loop.core_mut().apply_settings(
            session,
            new.timers.handshake_retry,
            new.timers.session_timeout,
        );

        for path in &removed {
            let socket =
                event_loop.produce(now, |core, out| core.remove_path(now, &path.name, out))?;
            event_loop.release_socket_slot(now, socket);
        }
        for path in &changed {
            event_loop
                .core_mut()
                .reconfigure_path(now, settings::client_path(new, path))?;
        }
        for path in &added {
            let socket = event_loop.take_socket_slot();
            event_loop
                .core_mut()
                .add_path(now, settings::client_path(new, path), socket)?;
            event_loop.open_path_socket(now, socket, path.name.clone(), settings::binding(path));
        }
        event_loop.set_stats_interval(now, new.log.stats_interval);
        Ok(())
    }
}

impl ApplyConfig for ServerCore {
    fn apply(
        event_loop: &mut impl RunningLoop<Self>,
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
    event_loop: &mut impl RunningLoop<ServerCore>,
    new: &ServerConfig,
    now: Instant,
) -> Result<(), ReloadError> {
    let session = settings::server_session(new, event_loop.tun_mtu());
    let path = settings::server_path(new);
    event_loop
        .core_mut()
        .apply_settings(now, session, path, new.timers.session_idle_timeout);
    let peers = settings::peers(new);
    event_loop.produce(now, |core, out| core.set_peers(now, peers, out));
    event_loop.core_mut().set_handshake_limits(new.handshake);
    event_loop.core_mut().set_limits(new.limits);
    event_loop.set_stats_interval(now, new.log.stats_interval);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::settings::{parse_client, CLIENT_HEAD};

    fn client(tables: &str) -> ClientConfig {
        parse_client(&format!("{CLIENT_HEAD}{tables}"))
    }

    fn names(paths: &[&PathConfig]) -> Vec<String> {
        paths.iter().map(|path| path.name.clone()).collect()
    }

    const LTE: &str = "[[path]]\nname = \"lte\"\ninterface = \"wwan0\"\n";
    const WIFI: &str = "[[path]]\nname = \"wifi\"\ninterface = \"wlan0\"\n";

    /// The loop as a reload sees it, recording what the reload asked of it.
    struct RecordingLoop {
        core: ClientCore,
        /// Path names by socket slot; `None` is a free slot.
        slots: Vec<Option<String>>,
        released: Vec<usize>,
        stats_interval: Option<Duration>,
    }

    impl RecordingLoop {
        fn running(config: &ClientConfig) -> Self {
            let settings = settings::client(config, 1400);
            let pool = crate::daemon::pool_for(1400, &settings.session.reorder);
            Self {
                core: ClientCore::new(Instant::now(), Box::new(|| 0), settings, pool),
                slots: config
                    .paths
                    .iter()
                    .map(|path| Some(path.name.clone()))
                    .collect(),
                released: Vec::new(),
                stats_interval: config.log.stats_interval,
            }
        }
    }

    impl RunningLoop<ClientCore> for RecordingLoop {
        fn tun_mtu(&self) -> u16 {
            1400
        }
        fn core(&self) -> &ClientCore {
            &self.core
        }
        fn core_mut(&mut self) -> &mut ClientCore {
            &mut self.core
        }
        fn produce<R>(
            &mut self,
            _now: Instant,
            step: impl FnOnce(&mut ClientCore, &mut Vec<Outgoing>) -> R,
        ) -> R {
            step(&mut self.core, &mut Vec::new())
        }
        fn free_socket_slots(&self, closing: usize) -> usize {
            let free = self.slots.iter().filter(|slot| slot.is_none()).count();
            free + closing + crate::session::MAX_PATHS - self.slots.len()
        }
        fn release_socket_slot(&mut self, _now: Instant, socket: usize) {
            self.slots[socket] = None;
            self.released.push(socket);
        }
        fn take_socket_slot(&mut self) -> usize {
            self.slots
                .iter()
                .position(Option::is_none)
                .unwrap_or_else(|| {
                    self.slots.push(None);
                    self.slots.len() - 1
                })
        }
        fn open_path_socket(&mut self, _now: Instant, socket: usize, name: String, _: Binding) {
            self.slots[socket] = Some(name);
        }
        fn set_stats_interval(&mut self, _now: Instant, interval: Option<Duration>) {
            self.stats_interval = interval;
        }
    }

    #[test]
    fn a_replaced_path_gives_its_socket_slot_to_the_new_one() {
        const FIVE_G: &str = "[[path]]\nname = \"5g\"\ninterface = \"wwan1\"\n";
        let running = client(&format!("{LTE}{WIFI}"));
        let mut event_loop = RecordingLoop::running(&running);
        let ids_left = event_loop.core.path_ids_left();
        let new = client(&format!("{WIFI}{FIVE_G}[log]\nstats_interval_ms = 5000\n"));
        let reloaded = apply_reload(
            &mut event_loop,
            &Config::Client(running),
            Config::Client(new),
            Instant::now(),
        );
        assert_eq!(reloaded.unwrap(), Reloaded::Applied);
        assert_eq!(event_loop.released, [0]);
        assert_eq!(
            event_loop.slots,
            [Some("5g".to_owned()), Some("wifi".to_owned())]
        );
        assert_eq!(event_loop.core.path_ids_left(), ids_left - 1);
        assert_eq!(event_loop.stats_interval, Some(Duration::from_secs(5)));
    }

    #[test]
    fn a_reload_with_more_paths_than_socket_slots_changes_nothing() {
        let running = client(LTE);
        let mut event_loop = RecordingLoop::running(&running);
        event_loop
            .slots
            .resize(crate::session::MAX_PATHS, Some("taken".to_owned()));
        let ids_left = event_loop.core.path_ids_left();
        let new = client(&format!("{LTE}{WIFI}"));
        let refused = apply_reload(
            &mut event_loop,
            &Config::Client(running),
            Config::Client(new),
            Instant::now(),
        );
        assert!(
            matches!(refused, Err(ReloadError::RestartNeeded { ref field, .. }) if field == "path"),
            "{refused:?}"
        );
        assert!(event_loop.released.is_empty());
        assert_eq!(event_loop.slots.len(), crate::session::MAX_PATHS);
        assert_eq!(event_loop.core.path_ids_left(), ids_left);
    }

    #[test]
    fn a_new_cipher_needs_a_restart() {
        let old = client(LTE);
        let text = format!("{CLIENT_HEAD}{LTE}")
            .replace("[server]\n", "[server]\ncipher = \"chacha20-poly1305\"\n");
        let new = parse_client(&text);
        let (field, _) =
            restart_needed(&Config::Client(old.clone()), &Config::Client(new)).unwrap();
        assert_eq!(field, "server.cipher");
        assert!(restart_needed(&Config::Client(old.clone()), &Config::Client(old)).is_none());
    }

    #[test]
    fn a_new_metrics_token_or_cap_applies_live_and_a_new_address_needs_a_restart() {
        let token =
            std::env::temp_dir().join(format!("mptund-reload-{}.token", std::process::id()));
        std::fs::write(&token, "a-token\n").unwrap();
        let metrics = |listen: &str, extra: &str| {
            Config::Client(client(&format!(
                "{LTE}[metrics]\nlisten = \"{listen}\"\n{extra}"
            )))
        };
        let running = metrics("127.0.0.1:9477", "");
        let with_token = metrics(
            "127.0.0.1:9477",
            &format!(
                "bearer_token_file = {:?}\nmax_connections = 4\n",
                token.display().to_string()
            ),
        );
        std::fs::remove_file(&token).unwrap();
        assert_ne!(running, with_token);
        assert_eq!(restart_needed(&running, &with_token), None);
        let moved = metrics("127.0.0.1:9478", "");
        assert_eq!(
            restart_needed(&running, &moved).map(|(field, _)| field),
            Some("metrics.listen".to_owned())
        );
    }

    #[test]
    fn a_new_scheduler_applies_live_and_a_new_controller_needs_a_restart() {
        let running = client(LTE);
        let new = client(&format!(
            "[scheduler]\nname = \"ecf\"\necf_hysteresis = 0.5\n\n{LTE}"
        ));
        assert_eq!(
            restart_needed(
                &Config::Client(running.clone()),
                &Config::Client(new.clone())
            ),
            None
        );
        // What reload hands the core: the parsed choice, not a name.
        assert_eq!(
            settings::client_session(&new, 1400).scheduler,
            mptund_sched::SchedulerChoice::Ecf(mptund_sched::EcfParams { hysteresis: 0.5 })
        );
        let cubic = client(&format!("[congestion]\ncontroller = \"cubic\"\n\n{LTE}"));
        assert_eq!(
            restart_needed(&Config::Client(running), &Config::Client(cubic))
                .map(|(field, _)| field),
            Some("congestion.controller".to_owned())
        );
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let old = client(&format!("{LTE}{WIFI}"));
        let changes = PathChanges::between(&old, &old);
        assert!(changes.removed.is_empty() && changes.added.is_empty());
        assert!(changes.changed.is_empty());
    }

    #[test]
    fn paths_are_matched_by_name_not_position() {
        let old = client(&format!("{LTE}{WIFI}"));
        let new = client(&format!("{WIFI}{LTE}"));
        assert_eq!(
            PathChanges::between(&old, &new),
            PathChanges {
                removed: vec![],
                added: vec![],
                changed: vec![],
            }
        );
    }

    #[test]
    fn a_new_interface_replaces_the_path_and_a_new_keepalive_changes_it_in_place() {
        let old = client(&format!("{LTE}{WIFI}"));
        let new = client(&format!(
            "{}{WIFI}keepalive_interval_ms = 5000\n[[path]]\nname = \"5g\"\ninterface = \"wwan1\"\n",
            LTE.replace("wwan0", "wwan2")
        ));
        let changes = PathChanges::between(&old, &new);
        assert_eq!(names(&changes.removed), ["lte"]);
        assert_eq!(names(&changes.added), ["lte", "5g"]);
        assert_eq!(names(&changes.changed), ["wifi"]);
        assert_eq!(changes.added[0].interface.as_deref(), Some("wwan2"));
    }

    #[test]
    fn a_removed_path_goes_and_a_new_probe_interval_reaches_every_kept_path() {
        let old = client(&format!("{LTE}{WIFI}"));
        let new = client(&format!("[timers]\nprobe_interval_ms = 500\n{LTE}"));
        let changes = PathChanges::between(&old, &new);
        assert_eq!(names(&changes.removed), ["wifi"]);
        assert!(changes.added.is_empty());
        assert_eq!(names(&changes.changed), ["lte"]);
    }
}
