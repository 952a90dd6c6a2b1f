//! The one conversion from a configuration file's values to the cores' settings. The
//! daemon's start and a reload (SIGHUP) both take their settings from here, so a
//! setting means the same in both.

use mptund_probe::{ProbeConfig, INITIAL_RTT};
use mptund_sched::{Equalization, HoldBounds, ReorderConfig};

use super::udp::Binding;
use crate::config::{
    ClientConfig, CongestionConfig, PathConfig, ReorderConfig as ReorderFile, SchedulerConfig,
    ServerConfig, Timers,
};
use crate::crypto::Aead;
use crate::keys::{PrivateKey, PublicKey};
use crate::session::{
    ClientPathSettings, ClientSettings, CoDelConfig, PathSettings, PeerSettings, SendQueueConfig,
    ServerSettings, SessionSettings,
};

pub(super) fn client(config: &ClientConfig, tun_mtu: u16) -> ClientSettings {
    ClientSettings {
        private_key: PrivateKey::from_bytes(config.private_key),
        server_public_key: PublicKey(config.server_public_key),
        aead: config.cipher.unwrap_or_else(Aead::fastest_here),
        paths: config
            .paths
            .iter()
            .map(|path| client_path(config, path))
            .collect(),
        session: client_session(config, tun_mtu),
        handshake_retry: config.timers.handshake_retry,
        session_timeout: config.timers.session_timeout,
    }
}

pub(super) fn client_session(config: &ClientConfig, tun_mtu: u16) -> SessionSettings {
    session(
        &config.scheduler,
        &config.reorder,
        &config.congestion,
        &config.timers,
        tun_mtu,
    )
}

pub(super) fn client_path(config: &ClientConfig, path: &PathConfig) -> ClientPathSettings {
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

/// How a client path's socket is opened.
pub(super) fn binding(path: &PathConfig) -> Binding {
    Binding {
        interface: path.interface.clone(),
        source_address: path.source_address,
        port: 0,
        ipv6: path.endpoint.is_ipv6(),
        buffer_bytes: path.socket_buffer_bytes,
    }
}

pub(super) fn server(config: &ServerConfig, tun_mtu: u16) -> ServerSettings {
    ServerSettings {
        private_key: PrivateKey::from_bytes(config.private_key),
        peers: peers(config),
        session: server_session(config, tun_mtu),
        path: server_path(config),
        session_idle_timeout: config.timers.session_idle_timeout,
        limits: config.limits,
    }
}

pub(super) fn server_session(config: &ServerConfig, tun_mtu: u16) -> SessionSettings {
    session(
        &config.scheduler,
        &config.reorder,
        &config.congestion,
        &config.timers,
        tun_mtu,
    )
}

/// How the server treats the paths it learns: it answers probes, the client sends
/// them, so it has no probe budget.
pub(super) fn server_path(config: &ServerConfig) -> PathSettings {
    PathSettings {
        keepalive_interval: config.timers.keepalive_interval,
        probe_interval: config.timers.probe_interval,
        probe_budget_bytes_per_hour: None,
    }
}

pub(super) fn peers(config: &ServerConfig) -> Vec<PeerSettings> {
    config
        .peers
        .iter()
        .map(|peer| PeerSettings {
            name: peer.name.clone(),
            public_key: PublicKey(peer.public_key),
            allowed_ips: peer.allowed_ips.clone(),
        })
        .collect()
}

fn session(
    scheduler: &SchedulerConfig,
    reorder: &ReorderFile,
    congestion: &CongestionConfig,
    timers: &Timers,
    tun_mtu: u16,
) -> SessionSettings {
    SessionSettings {
        // The peer is configured alike: its reorder buffer holds what ours does, for
        // as long.
        scheduler: scheduler.choice.with_peer_reorder(
            reorder.max_hold,
            (reorder.capacity_packets * usize::from(tun_mtu)) as u64,
        ),
        duplicate_latency_critical: scheduler.duplicate_latency_critical,
        parity_on_lossy_paths: scheduler.parity_on_lossy_paths,
        reorder: ReorderConfig {
            max_hold: reorder.max_hold,
            capacity: reorder.capacity_packets,
        },
        equalize_delay: reorder.equalize_delay.map(|scope| Equalization {
            scope,
            percent: reorder.equalize_percent,
        }),
        adaptive_hold: reorder.adaptive.then_some(HoldBounds {
            min: reorder.min_hold,
            max: reorder.max_hold,
        }),
        path_timeout: timers.path_timeout,
        send_queue: SendQueueConfig {
            capacity_packets: congestion.queue_capacity_packets,
            max_sojourn: congestion.queue_max_delay,
            codel: CoDelConfig {
                target: congestion.queue_target_delay,
                interval: congestion.queue_interval,
            },
        },
        max_inner_len: usize::from(tun_mtu),
        congestion_controller: congestion.controller,
        key_lifetime: timers.key_lifetime,
        probe: ProbeConfig {
            // Windows count UDP payload bytes, as the probe sees them.
            max_datagram_size: (usize::from(tun_mtu) + crate::wire::DATA_OVERHEAD) as u64,
            max_ack_delay: timers.max_ack_delay,
            initial_rtt: INITIAL_RTT,
        },
    }
}

/// The top of a client configuration file for tests: paths and other tables follow.
#[cfg(test)]
pub(super) const CLIENT_HEAD: &str = r#"
mode = "client"
private_key_file = "client.key"

[tun]
name = "mpt0"
addresses = ["198.18.100.2/24"]

[server]
endpoint = "198.18.0.1:51900"
public_key = "VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY="
"#;

/// A client configuration from `text`, as the daemon would load it (with a key file).
#[cfg(test)]
pub(super) fn parse_client(text: &str) -> ClientConfig {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mptund-settings-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("client.key");
    std::fs::write(&key, "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let loaded = crate::config::parse("client.toml", text, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    match loaded {
        Ok(loaded) => match loaded.config {
            crate::config::Config::Client(config) => config,
            crate::config::Config::Server(_) => panic!("not a client configuration"),
        },
        Err(error) => panic!("{error}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mptund_probe::ControllerChoice;
    use mptund_sched::{BlestParams, EarliestArrivalParams, SchedulerChoice};

    use super::*;

    const TABLES: &str = r#"
[timers]
probe_interval_ms = 300

[reorder]
max_hold_ms = 120
capacity_packets = 2048

[[path]]
name = "lte"
interface = "wwan0"
keepalive_interval_ms = 2000
probe_budget_bytes_per_hour = 1000000
"#;

    #[test]
    fn a_client_file_becomes_the_settings_its_fields_name() {
        let config = parse_client(&format!("{CLIENT_HEAD}{TABLES}"));
        let settings = client(&config, 1400);
        let path = &settings.paths[0];
        assert_eq!(path.name, "lte");
        assert_eq!(path.probing.keepalive_interval, Duration::from_millis(2000));
        // The probe interval is session-wide in the file and per path in the core.
        assert_eq!(path.probing.probe_interval, Duration::from_millis(300));
        assert_eq!(path.probing.probe_budget_bytes_per_hour, Some(1_000_000));
        assert_eq!(
            settings.session.reorder.max_hold,
            Duration::from_millis(120)
        );
        assert_eq!(settings.session.reorder.capacity, 2048);
        // The default scheduler waits for the peer's reorder buffer as long as ours
        // holds a gap; the default controller is delay-rate.
        assert_eq!(
            settings.session.scheduler,
            SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                reorder_window: Duration::from_millis(120),
                ..EarliestArrivalParams::DEFAULT
            })
        );
        assert_eq!(
            settings.session.congestion_controller,
            ControllerChoice::DelayRate
        );
        assert_eq!(settings.session.max_inner_len, 1400);
        assert_eq!(
            settings.session.probe.max_datagram_size,
            (1400 + crate::wire::DATA_OVERHEAD) as u64
        );
        let binding = binding(&config.paths[0]);
        assert_eq!(binding.interface.as_deref(), Some("wwan0"));
        assert_eq!(binding.port, 0);
    }

    #[test]
    fn blest_sees_the_reorder_buffer_in_bytes_and_cubic_reaches_the_core() {
        let tables = TABLES.replace(
            "[timers]",
            "[scheduler]\nname = \"blest\"\nblest_lambda = 2.0\n\n[congestion]\ncontroller = \"cubic\"\n\n[timers]",
        );
        let config = parse_client(&format!("{CLIENT_HEAD}{tables}"));
        let session = client(&config, 1400).session;
        assert_eq!(
            session.scheduler,
            SchedulerChoice::Blest(BlestParams {
                lambda: 2.0,
                reorder_window_bytes: 2048 * 1400,
            })
        );
        assert_eq!(session.congestion_controller, ControllerChoice::Cubic);
    }
}
