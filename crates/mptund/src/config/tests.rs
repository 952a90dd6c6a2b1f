//! Tests of configuration loading: the example files, a table of broken
//! configurations with the exact position, field and advice expected, and
//! properties (no input makes the loader panic).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

const CLIENT_EXAMPLE: &str = include_str!("../../../../config/client.toml");
const SERVER_EXAMPLE: &str = include_str!("../../../../config/server.toml");

/// Private key bytes of the test client (1, 2, ..., 32) and server
/// (101, ..., 132); the examples carry the matching public keys.
fn test_private_key(first: u8) -> [u8; 32] {
    std::array::from_fn(|i| first + i as u8)
}
const CLIENT_PUBLIC: &str = "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw=";
const SERVER_PUBLIC: &str = "VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY=";
const OTHER_PUBLIC: &str = "ycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+g=";

/// A directory removed when dropped, holding `client.key` and `server.key`
/// (mode 0600) of the test key pairs.
struct KeyDir {
    path: PathBuf,
}

impl KeyDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "mptund-config-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        let dir = KeyDir { path };
        dir.write_key(
            "client.key",
            &format!("{}\n", encode_key(&test_private_key(1))),
            0o600,
        );
        dir.write_key(
            "server.key",
            &format!("{}\n", encode_key(&test_private_key(101))),
            0o600,
        );
        dir
    }

    fn write_key(&self, name: &str, contents: &str, mode: u32) -> PathBuf {
        let file = self.path.join(name);
        std::fs::write(&file, contents).unwrap();
        set_mode(&file, mode);
        file
    }
}

#[cfg(unix)]
fn set_mode(file: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[cfg(not(unix))]
fn set_mode(_file: &Path, _mode: u32) {}

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// Line numbers below refer to these texts.
const MINIMAL_CLIENT: &str = r#"mode = "client"
private_key_file = "client.key"
[tun]
name = "mptun0"
addresses = ["198.18.100.2/24"]
[server]
endpoint = "198.18.0.1:51900"
public_key = "VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY="
[[path]]
name = "lte"
interface = "wwan0"
"#;

const MINIMAL_SERVER: &str = r#"mode = "server"
private_key_file = "server.key"
listen = "0.0.0.0:51900"
[tun]
name = "mptun0"
addresses = ["198.18.100.1/24"]
[[peer]]
name = "train-042"
public_key = "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw="
allowed_ips = ["198.18.100.2/32"]
"#;

fn client(loaded: Loaded) -> ClientConfig {
    match loaded.config {
        Config::Client(client) => client,
        Config::Server(_) => panic!("expected a client configuration"),
    }
}

fn server(loaded: Loaded) -> ServerConfig {
    match loaded.config {
        Config::Server(server) => server,
        Config::Client(_) => panic!("expected a server configuration"),
    }
}

fn key(text: &str) -> [u8; 32] {
    decode_key(text).unwrap()
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

// ---- configurations that load -------------------------------------------

#[test]
fn client_example_parses() {
    let dir = KeyDir::new();
    let loaded = parse("client.toml", CLIENT_EXAMPLE, &dir.path).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let config = client(loaded);
    assert_eq!(config.source, PathBuf::from("client.toml"));
    assert_eq!(config.private_key, test_private_key(1));
    assert_eq!(config.private_key_file, dir.path.join("client.key"));
    assert_eq!(config.server_public_key, key(SERVER_PUBLIC));
    assert_eq!(
        config.server_public_key,
        public_key_of(&test_private_key(101))
    );
    assert_eq!(
        config.tun,
        TunConfig {
            name: "mptun0".into(),
            addresses: vec![net("198.18.100.2/24"), net("fd00:6d70::2/64")],
            mtu: None,
        }
    );
    let endpoint = addr("198.18.0.1:51900");
    assert_eq!(
        config.paths,
        vec![
            PathConfig {
                name: "lte".into(),
                interface: Some("wwan0".into()),
                source_address: None,
                endpoint,
                backup: false,
                keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
                probe_budget_bytes_per_hour: None,
                socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            },
            PathConfig {
                name: "5g".into(),
                interface: Some("wwan1".into()),
                source_address: None,
                endpoint,
                backup: false,
                keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
                probe_budget_bytes_per_hour: None,
                socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            },
            PathConfig {
                name: "wifi".into(),
                interface: Some("wlan0".into()),
                source_address: Some(ip("198.18.3.2")),
                endpoint,
                backup: true,
                keepalive_interval: DEFAULT_BACKUP_KEEPALIVE_INTERVAL,
                probe_budget_bytes_per_hour: Some(30_000),
                socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            },
        ]
    );
    assert_eq!(
        config.scheduler.choice,
        SchedulerChoice::EarliestArrival(mptund_sched::EarliestArrivalParams {
            wait_margin: None,
            share_percent: 75,
            ..Default::default()
        })
    );
    assert_eq!(
        config.reorder,
        ReorderConfig {
            adaptive: true,
            equalize_delay: Some(EqualizeScope::AllPaths),
            equalize_percent: 50,
            min_hold: Duration::from_millis(10),
            max_hold: Duration::from_millis(200),
            capacity_packets: 4096
        }
    );
    assert_eq!(config.timers.keepalive_interval, Duration::from_secs(1));
    assert_eq!(config.timers.path_timeout, Duration::from_secs(3));
    assert_eq!(config.timers.handshake_retry, Duration::from_secs(1));
    assert_eq!(config.timers.session_timeout, Duration::from_secs(10));
    assert_eq!(config.log.stats_interval, Some(Duration::from_secs(10)));
}

#[test]
fn key_renewal_timers_are_read_and_default_to_wireguards() {
    let dir = KeyDir::new();
    let text = format!(
        "{MINIMAL_CLIENT}[timers]\nrekey_after_ms = 2000\nreject_after_ms = 3000\nrekey_after_messages = 1000\n"
    );
    let config = client(parse("client.toml", &text, &dir.path).unwrap());
    let defaults = crate::crypto::KeyLifetime::default();
    assert_eq!(
        config.timers.key_lifetime,
        crate::crypto::KeyLifetime {
            rekey_after_time: Duration::from_secs(2),
            reject_after_time: Duration::from_secs(3),
            rekey_after_messages: 1000,
            reject_after_messages: defaults.reject_after_messages,
        }
    );
    assert_eq!(defaults.rekey_after_time, Duration::from_secs(120));
    assert_eq!(defaults.reject_after_time, Duration::from_secs(180));
}

#[test]
fn server_example_parses() {
    let dir = KeyDir::new();
    let loaded = parse("server.toml", SERVER_EXAMPLE, &dir.path).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let config = server(loaded);
    assert_eq!(config.private_key, test_private_key(101));
    assert_eq!(config.listen, addr("0.0.0.0:51900"));
    assert_eq!(
        config.tun.addresses,
        vec![net("198.18.100.1/24"), net("fd00:6d70::1/64")]
    );
    assert_eq!(config.peers.len(), 2);
    assert_eq!(config.peers[0].name, "train-042");
    assert_eq!(config.peers[0].public_key, key(CLIENT_PUBLIC));
    assert_eq!(
        config.peers[0].public_key,
        public_key_of(&test_private_key(1))
    );
    assert_eq!(
        config.peers[0].allowed_ips,
        vec![net("198.18.100.2/32"), net("fd00:6d70::2/128")]
    );
    assert_eq!(config.peers[1].public_key, key(OTHER_PUBLIC));
    assert_eq!(config.timers.session_idle_timeout, Duration::from_secs(180));
    assert_eq!(config.handshake, crate::cookie::HandshakeLimits::default());
}

/// Every field the examples document in a comment (`# field = …`) must be
/// accepted when uncommented, so the comments cannot drift from the code.
#[test]
fn examples_commented_fields_are_real() {
    let dir = KeyDir::new();
    let client_text = CLIENT_EXAMPLE
        .replace("# mtu = 1400", "mtu = 1400")
        .replace(
            "# endpoint = \"[2001:db8::1]:51900\"",
            "endpoint = \"198.18.0.2:51900\"",
        )
        .replace("# backup = false", "backup = false")
        .replace("# enabled = true", "enabled = true")
        .replace(
            "# socket = \"/run/mptund/client.sock\"",
            "socket = \"/run/mptund/client.sock\"",
        )
        .replace(
            "# bearer_token_file = \"/etc/mptund/metrics.token\"",
            "bearer_token_file = \"metrics.token\"",
        )
        .replace("# max_connections = 16", "max_connections = 16")
        .replace(
            "# state_directory = \"/var/lib/mptund\"",
            "state_directory = \".\"",
        );
    dir.write_key("metrics.token", TOKEN, 0o600);
    let config = client(parse("client.toml", &client_text, &dir.path).unwrap());
    assert_eq!(config.tun.mtu, Some(1400));
    assert_eq!(config.paths[0].endpoint, addr("198.18.0.2:51900"));
    assert_eq!(config.metrics.listen, Some(DEFAULT_METRICS_LISTEN));
    assert!(config.metrics.bearer_token.is_some());
    assert_eq!(config.metrics.max_connections, 16);
    assert_eq!(config.state_directory, Some(dir.path.join(".")));
    assert_eq!(
        config.control.socket,
        Some(PathBuf::from("/run/mptund/client.sock"))
    );
    let server_text = SERVER_EXAMPLE.replace("# mtu = 1400", "mtu = 1400");
    assert_eq!(
        server(parse("server.toml", &server_text, &dir.path).unwrap())
            .tun
            .mtu,
        Some(1400)
    );
}

#[test]
fn equalize_delay_names_a_scope_or_off() {
    let dir = KeyDir::new();
    for (value, expected) in [
        ("off", None),
        ("in-use", Some(EqualizeScope::InUse)),
        ("all-paths", Some(EqualizeScope::AllPaths)),
    ] {
        let text = format!("{MINIMAL_CLIENT}[reorder]\nequalize_delay = \"{value}\"\n");
        let config = client(parse("client.toml", &text, &dir.path).unwrap());
        assert_eq!(config.reorder.equalize_delay, expected, "{value}");
    }
    let config = client(parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap());
    assert_eq!(
        config.reorder.equalize_delay,
        EqualizeScope::from_config_name(DEFAULT_EQUALIZE_DELAY)
    );
    assert_eq!(config.reorder.equalize_percent, DEFAULT_EQUALIZE_PERCENT);
    for percent in [0, 35, 100] {
        let text = format!("{MINIMAL_CLIENT}[reorder]\nequalize_percent = {percent}\n");
        let config = client(parse("client.toml", &text, &dir.path).unwrap());
        assert_eq!(i64::from(config.reorder.equalize_percent), percent);
    }
}

#[test]
fn the_cipher_is_auto_or_names_an_aead() {
    let dir = KeyDir::new();
    let config = client(parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap());
    assert_eq!(config.cipher, None, "auto by default");
    for (value, expected) in [
        ("auto", None),
        ("aes-256-gcm", Some(crate::wire::Aead::Aes256Gcm)),
        (
            "chacha20-poly1305",
            Some(crate::wire::Aead::ChaCha20Poly1305),
        ),
    ] {
        let text =
            MINIMAL_CLIENT.replace("[server]\n", &format!("[server]\ncipher = \"{value}\"\n"));
        let config = client(parse("client.toml", &text, &dir.path).unwrap());
        assert_eq!(config.cipher, expected, "{value}");
    }
}

#[test]
fn minimal_client_gets_defaults() {
    let dir = KeyDir::new();
    let config = client(parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap());
    assert_eq!(config.scheduler.choice, DEFAULT_SCHEDULER);
    assert_eq!(config.congestion.controller, DEFAULT_CONTROLLER);
    assert_eq!(config.reorder.max_hold, DEFAULT_REORDER_MAX_HOLD);
    assert_eq!(config.reorder.min_hold, DEFAULT_REORDER_MIN_HOLD);
    assert!(config.reorder.adaptive);
    assert!(!config.scheduler.duplicate_latency_critical);
    assert!(!config.scheduler.parity_on_lossy_paths);
    assert_eq!(
        config.reorder.capacity_packets,
        DEFAULT_REORDER_CAPACITY_PACKETS
    );
    assert_eq!(
        config.timers,
        Timers {
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            path_timeout: DEFAULT_PATH_TIMEOUT,
            handshake_retry: DEFAULT_HANDSHAKE_RETRY,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            max_ack_delay: DEFAULT_MAX_ACK_DELAY,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
            key_lifetime: crate::crypto::KeyLifetime::default(),
        }
    );
    assert_eq!(config.log.stats_interval, Some(DEFAULT_STATS_INTERVAL));
    assert_eq!(config.paths[0].endpoint, addr("198.18.0.1:51900"));
}

#[test]
fn metrics_off_and_control_socket_named_after_the_file_by_default() {
    let dir = KeyDir::new();
    let config = client(parse("/etc/mptund/train.toml", MINIMAL_CLIENT, &dir.path).unwrap());
    assert_eq!(config.metrics, MetricsConfig::off());
    assert_eq!(config.state_directory, None);
    assert_eq!(
        config.control.socket,
        Some(PathBuf::from("/run/mptund/train.sock"))
    );
}

#[test]
fn metrics_and_control_tables() {
    let dir = KeyDir::new();
    let text = format!("{MINIMAL_SERVER}[metrics]\n[control]\nsocket = \"ctl.sock\"\n");
    let config = server(parse("server.toml", &text, &dir.path).unwrap());
    assert_eq!(config.metrics.listen, Some(DEFAULT_METRICS_LISTEN));
    assert_eq!(config.control.socket, Some(dir.path.join("ctl.sock")));
    let text =
        format!("{MINIMAL_SERVER}[metrics]\nlisten = \"[::]:9100\"\n[control]\nenabled = false\n");
    let config = server(parse("server.toml", &text, &dir.path).unwrap());
    assert_eq!(config.metrics.listen, Some(addr("[::]:9100")));
    assert_eq!(config.control.socket, None);
    let text = format!("{MINIMAL_SERVER}[metrics]\nenabled = false\nlisten = \"127.0.0.1:1\"\n");
    let config = server(parse("server.toml", &text, &dir.path).unwrap());
    assert_eq!(config.metrics.listen, None);
}

const TOKEN: &str = "hL3o0o1GQ5mVwS7ZcAeYg8uXbN2kRtP9fJ4dE6iK+/0=";

#[test]
fn metrics_token_and_connection_cap() {
    let dir = KeyDir::new();
    let file = dir.write_key("metrics.token", &format!("  {TOKEN}\n"), 0o600);
    let text = format!(
        "{MINIMAL_SERVER}[metrics]\nlisten = \"[::]:9100\"\nbearer_token_file = \"metrics.token\"\nmax_connections = 4\n"
    );
    let loaded = parse("server.toml", &text, &dir.path).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let metrics = server(loaded).metrics;
    assert_eq!(metrics.max_connections, 4);
    let token = metrics.bearer_token.unwrap();
    assert_eq!(token.file, file);
    assert!(
        token.matches(TOKEN.as_bytes()),
        "read without the whitespace around it"
    );
    assert!(!token.matches(format!("{TOKEN}\n").as_bytes()));
    assert!(!token.matches(b""));

    let text = format!("{MINIMAL_SERVER}[metrics]\n");
    let metrics = server(parse("server.toml", &text, &dir.path).unwrap()).metrics;
    assert_eq!(metrics.bearer_token, None);
    assert_eq!(metrics.max_connections, DEFAULT_METRICS_MAX_CONNECTIONS);
    assert_eq!(DEFAULT_METRICS_MAX_CONNECTIONS, 16);

    // A new token in the same file is a new configuration (a reload applies it).
    let text = format!("{MINIMAL_SERVER}[metrics]\nbearer_token_file = \"metrics.token\"\n");
    let before = parse("server.toml", &text, &dir.path).unwrap();
    dir.write_key("metrics.token", "another-token\n", 0o600);
    let after = parse("server.toml", &text, &dir.path).unwrap();
    assert_ne!(before, after);
}

#[test]
fn metrics_on_other_hosts_without_a_token_is_a_warning() {
    let dir = KeyDir::new();
    dir.write_key("metrics.token", TOKEN, 0o640);
    let warnings = |tables: &str| {
        parse(
            "server.toml",
            &format!("{MINIMAL_SERVER}{tables}"),
            &dir.path,
        )
        .unwrap()
        .warnings
    };
    for listen in ["0.0.0.0:9477", "[::]:9477", "198.18.200.2:9477"] {
        let found = warnings(&format!("[metrics]\nlisten = \"{listen}\"\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("server.toml:12: metrics.listen: ")
                && found[0].contains(listen)
                && found[0].contains("bearer_token_file")
                && found[0].contains("credentials_file"),
            "{found:?}"
        );
    }
    for tables in [
        "[metrics]\n",
        "[metrics]\nlisten = \"127.0.0.1:9477\"\n",
        "[metrics]\nlisten = \"[::1]:9477\"\n",
        "[metrics]\nlisten = \"[::]:9477\"\nbearer_token_file = \"metrics.token\"\n",
        "[metrics]\nenabled = false\nlisten = \"[::]:9477\"\n",
    ] {
        assert!(
            warnings(tables).is_empty(),
            "{tables}: {:?}",
            warnings(tables)
        );
    }
    // A token every user of the host may read still works, with a warning.
    dir.write_key("metrics.token", TOKEN, 0o644);
    let found = warnings("[metrics]\nbearer_token_file = \"metrics.token\"\n");
    assert!(
        found.len() == 1 && found[0].contains("mode 644") && found[0].contains("chmod o-rwx"),
        "{found:?}"
    );
}

#[test]
fn the_state_directory_is_resolved_next_to_the_file() {
    let dir = KeyDir::new();
    std::fs::create_dir(dir.path.join("state")).unwrap();
    let text = MINIMAL_CLIENT.replace("[tun]", "state_directory = \"state\"\n[tun]");
    let config = client(parse("client.toml", &text, &dir.path).unwrap());
    assert_eq!(config.state_directory, Some(dir.path.join("state")));
}

#[test]
fn minimal_server_gets_defaults() {
    let dir = KeyDir::new();
    let config = server(parse("server.toml", MINIMAL_SERVER, &dir.path).unwrap());
    assert_eq!(
        config.timers.session_idle_timeout,
        DEFAULT_SESSION_IDLE_TIMEOUT
    );
    assert_eq!(config.peers[0].allowed_ips, vec![net("198.18.100.2/32")]);
}

#[test]
fn ipv6_endpoints_and_source_addresses() {
    let dir = KeyDir::new();
    let text = MINIMAL_CLIENT.replace("198.18.0.1:51900", "[2001:db8::1]:51900").replace(
        "interface = \"wwan0\"",
        "interface = \"wwan0\"\nsource_address = \"2001:db8:1::2\"\n[[path]]\nname = \"v4\"\nsource_address = \"198.18.1.2\"\nendpoint = \"198.18.0.1:51900\"",
    );
    let config = client(parse("client.toml", &text, &dir.path).unwrap());
    assert_eq!(config.paths[0].endpoint, addr("[2001:db8::1]:51900"));
    assert_eq!(config.paths[0].source_address, Some(ip("2001:db8:1::2")));
    assert_eq!(config.paths[1].endpoint, addr("198.18.0.1:51900"));
    assert_eq!(config.paths[1].interface, None);
}

#[test]
fn stats_interval_zero_switches_stats_off() {
    let dir = KeyDir::new();
    let text = format!("{MINIMAL_CLIENT}[log]\nstats_interval_ms = 0\n");
    assert_eq!(
        client(parse("client.toml", &text, &dir.path).unwrap())
            .log
            .stats_interval,
        None
    );
}

#[test]
fn absolute_key_path_is_used_as_is() {
    let dir = KeyDir::new();
    let absolute = dir.path.join("client.key");
    let text = MINIMAL_CLIENT.replace(
        "\"client.key\"",
        &format!("{:?}", absolute.display().to_string()),
    );
    let config = client(parse("client.toml", &text, Path::new("/nonexistent")).unwrap());
    assert_eq!(config.private_key_file, absolute);
}

#[cfg(unix)]
#[test]
fn key_readable_by_group_or_others_is_refused_with_the_chmod_that_fixes_it() {
    for mode in [0o644, 0o640, 0o604, 0o660, 0o601] {
        let dir = KeyDir::new();
        let key = dir.write_key("client.key", &encode_key(&test_private_key(1)), mode);
        let error = parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap_err();
        let shown = error.to_string();
        assert!(
            shown.contains("private_key_file")
                && shown.contains(&key.display().to_string())
                && shown.contains(&format!("mode {mode:03o}"))
                && shown.contains(&format!("chmod 600 {}", key.display())),
            "{shown}"
        );
        assert!(
            shown.starts_with("client.toml:"),
            "placed in the file: {shown}"
        );
    }
    for mode in [0o600, 0o400] {
        let dir = KeyDir::new();
        dir.write_key("client.key", &encode_key(&test_private_key(1)), mode);
        let loaded = parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }
}

#[test]
fn all_backup_paths_is_a_warning() {
    let dir = KeyDir::new();
    let text = format!("{MINIMAL_CLIENT}backup = true\n");
    let loaded = parse("client.toml", &text, &dir.path).unwrap();
    assert!(
        loaded.warnings.iter().any(|w| w.contains("backup = true")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn load_reads_file_and_resolves_key_next_to_it() {
    let dir = KeyDir::new();
    let file = dir.path.join("client.toml");
    std::fs::write(&file, MINIMAL_CLIENT).unwrap();
    let config = client(load(&file).unwrap());
    assert_eq!(config.source, file);
    assert_eq!(config.private_key_file, dir.path.join("client.key"));

    let missing = dir.path.join("nope.toml");
    let err = load(&missing).unwrap_err();
    assert_eq!(err.file, missing);
    assert_eq!(err.line, None);
    assert!(
        err.problem.contains("cannot read the configuration file"),
        "{err}"
    );
}

#[test]
fn debug_never_prints_the_private_key() {
    let dir = KeyDir::new();
    let loaded = parse("client.toml", MINIMAL_CLIENT, &dir.path).unwrap();
    let secret = test_private_key(1);
    let printed = format!("{loaded:?} {loaded:#?}");
    assert!(printed.contains("<redacted>"));
    assert!(!printed.contains(&encode_key(&secret)));
    assert!(!printed.contains(&format!("{secret:?}")));
    assert!(!printed.contains("1, 2, 3, 4, 5"));

    let server_loaded = parse("server.toml", MINIMAL_SERVER, &dir.path).unwrap();
    let printed = format!("{server_loaded:?}");
    assert!(!printed.contains(&encode_key(&test_private_key(101))));
    assert!(!printed.contains("101, 102, 103"));

    dir.write_key("metrics.token", TOKEN, 0o600);
    let text = format!("{MINIMAL_SERVER}[metrics]\nbearer_token_file = \"metrics.token\"\n");
    let printed = format!("{:?}", parse("server.toml", &text, &dir.path).unwrap());
    assert!(printed.contains("metrics.token") && printed.contains("<redacted>"));
    assert!(!printed.contains(TOKEN));
}

// ---- configurations that do not ------------------------------------------

/// One broken configuration and what its error must say.
struct Broken {
    name: &'static str,
    file: &'static str,
    text: String,
    line: Option<usize>,
    field: &'static str,
    problem: &'static str,
    hint: &'static str,
}

fn client_with(from: &str, to: &str) -> String {
    assert!(
        MINIMAL_CLIENT.contains(from),
        "{from:?} not in the client text"
    );
    MINIMAL_CLIENT.replacen(from, to, 1)
}

fn server_with(from: &str, to: &str) -> String {
    assert!(
        MINIMAL_SERVER.contains(from),
        "{from:?} not in the server text"
    );
    MINIMAL_SERVER.replacen(from, to, 1)
}

fn broken_configs() -> Vec<Broken> {
    let c = |name, text, line, field, problem, hint| Broken {
        name,
        file: "client.toml",
        text,
        line,
        field,
        problem,
        hint,
    };
    let s = |name, text, line, field, problem, hint| Broken {
        name,
        file: "server.toml",
        text,
        line,
        field,
        problem,
        hint,
    };
    let second_peer = |allowed: &str| {
        format!("{MINIMAL_SERVER}[[peer]]\nname = \"train-043\"\npublic_key = \"{OTHER_PUBLIC}\"\nallowed_ips = [{allowed}]\n")
    };
    vec![
        c("syntax error", client_with("name = \"lte\"", "name = \"lte"), Some(10), "", "TOML syntax error", "fix the TOML syntax"),
        c("duplicate key", client_with("name = \"lte\"", "name = \"lte\"\nname = \"5g\""), Some(11), "name", "defined twice", "keep one"),
        c("unknown field with suggestion", client_with("interface =", "interfce ="), Some(11), "path[0].interfce", "unknown field `interfce`", "did you mean `interface`?"),
        c("unknown table with suggestion", client_with("[[path]]", "[[paths]]"), Some(9), "paths", "unknown field `paths`", "did you mean `path`?"),
        c("unit missing from a key", format!("{MINIMAL_CLIENT}[reorder]\nmax_hold = 100\n"), Some(13), "reorder.max_hold", "unknown field `max_hold`", "did you mean `max_hold_ms`?"),
        c("server field in a client", client_with("[tun]", "listen = \"0.0.0.0:51900\"\n[tun]"), Some(3), "listen", "unknown field `listen`", "belongs in a server configuration"),
        c("top-level key inside a table", format!("{MINIMAL_CLIENT}scheduler = \"round-robin\"\n"), Some(12), "path[0].scheduler", "unknown field `scheduler`", "move it above the first [table]"),
        c("unknown field far from any", client_with("[tun]", "[tun]\ncolour = \"blue\""), Some(4), "tun.colour", "unknown field `colour`", "the fields here are `name`, `addresses`, `mtu`"),
        c("string where integer", format!("{MINIMAL_CLIENT}[reorder]\nmax_hold_ms = \"100\"\n"), Some(13), "reorder.max_hold_ms", "expected an integer", "whole number"),
        c("single [path] table", client_with("[[path]]", "[path]"), Some(9), "path", "expected an array", "[[path]]"),
        c("missing mode", client_with("mode = \"client\"\n", ""), None, "mode", "required field `mode` is missing", "mode = \"client\""),
        c("wrong mode", client_with("\"client\"", "\"clinet\""), Some(1), "mode", "\"clinet\" is not a mode", "did you mean \"client\"?"),
        c("mode not a string", client_with("\"client\"", "1"), Some(1), "mode", "expected a string", "mode = \"client\""),
        c("missing [server]", client_with("[server]\nendpoint = \"198.18.0.1:51900\"\npublic_key = \"VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY=\"\n", ""), None, "server", "required table [server] is missing", "add a [server] table with `endpoint"),
        c("missing server.endpoint", client_with("endpoint = \"198.18.0.1:51900\"\n", ""), Some(6), "server.endpoint", "required field `endpoint` is missing from [server]", "add `endpoint = \"198.18.0.1:51900\"`"),
        c("missing private_key_file", client_with("private_key_file = \"client.key\"\n", ""), None, "private_key_file", "missing from the top level", "private_key_file = "),
        c("missing path name", client_with("name = \"lte\"\n", ""), Some(9), "path[0].name", "missing from this [[path]] table", "add `name = "),
        c("no paths", client_with("[[path]]\nname = \"lte\"\ninterface = \"wwan0\"\n", ""), None, "path", "at least one [[path]]", "one [[path]] table per uplink"),
        c("path without interface or source_address", client_with("interface = \"wwan0\"\n", ""), Some(9), "path[0]", "neither `interface` nor `source_address`", "`interface = \"wwan0\"`"),
        c("duplicate path names", format!("{MINIMAL_CLIENT}[[path]]\nname = \"lte\"\ninterface = \"wwan1\"\n"), Some(13), "path[1].name", "already used by path[0] (line 10)", "its own name"),
        c("duplicate path binding", format!("{MINIMAL_CLIENT}[[path]]\nname = \"lte2\"\ninterface = \"wwan0\"\n"), Some(12), "path[1]", "same interface and source address as path[0] (line 9)", "add no capacity"),
        c("invalid path name", client_with("\"lte\"", "\"lte uplink\""), Some(10), "path[0].name", "not a valid path name", "short name"),
        c("interface name with a space", client_with("\"wwan0\"", "\"wwan0 \""), Some(11), "path[0].interface", "\"wwan0 \" is not a valid interface name", "`ip link`"),
        c("interface name too long", client_with("\"wwan0\"", "\"wwan0123456789ab\""), Some(11), "path[0].interface", "at most 15 characters", "`ip link`"),
        c("source address not an IP", client_with("interface = \"wwan0\"", "source_address = \"wwan0\""), Some(11), "path[0].source_address", "not an IP address", "`ip addr`"),
        c("source address family mismatch", client_with("interface = \"wwan0\"", "source_address = \"2001:db8::2\""), Some(11), "path[0].source_address", "is IPv6 but the path's endpoint 198.18.0.1:51900 is IPv4", "endpoint's family"),
        c("bad key base64", client_with("VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY=", "not base64!"), Some(8), "server.public_key", "is not valid base64", "mptund pubkey < server.key"),
        c("wrong key length", client_with("VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY=", "AAECAwQ="), Some(8), "server.public_key", "decodes to 5 bytes", "mptund pubkey"),
        c("server key is the client's own", client_with(SERVER_PUBLIC, CLIENT_PUBLIC), Some(8), "server.public_key", "this client's own public key", "different key pairs"),
        c("missing key file", client_with("\"client.key\"", "\"missing.key\""), Some(2), "private_key_file", "missing.key does not exist", "mptund genkey >"),
        c("key file holds garbage", client_with("\"client.key\"", "\"garbage.key\""), Some(2), "private_key_file", "garbage.key is not valid base64", "mptund genkey >"),
        c("key file holds a short key", client_with("\"client.key\"", "\"short.key\""), Some(2), "private_key_file", "decodes to 16 bytes", "mptund genkey >"),
        c("key file is a directory", client_with("\"client.key\"", "\".\""), Some(2), "private_key_file", "is not a regular file", "mptund genkey"),
        c("endpoint with DNS name", client_with("198.18.0.1:51900", "vpn.example.com:51900"), Some(7), "server.endpoint", "is a host name, not an IP address", "DNS names are not resolved"),
        c("endpoint without port", client_with("198.18.0.1:51900", "198.18.0.1"), Some(7), "server.endpoint", "has no port", "\"198.18.0.1:51900\""),
        c("IPv6 endpoint without brackets", client_with("198.18.0.1:51900", "2001:db8::1:51900"), Some(7), "server.endpoint", "not an address:port", "in brackets"),
        c("endpoint port 0", client_with("198.18.0.1:51900", "198.18.0.1:0"), Some(7), "server.endpoint", "port 0", "UDP port"),
        c("tun address without prefix", client_with("198.18.100.2/24", "198.18.100.2"), Some(5), "tun.addresses[0]", "missing prefix length", "\"198.18.100.2/24\""),
        c("tun prefix too long", client_with("198.18.100.2/24", "198.18.100.2/33"), Some(5), "tun.addresses[0]", "at most 32", "prefix length"),
        c("no tun addresses", client_with("[\"198.18.100.2/24\"]", "[]"), Some(5), "tun.addresses", "is empty", "198.18.100.2/24"),
        c("missing [tun]", client_with("[tun]\nname = \"mptun0\"\naddresses = [\"198.18.100.2/24\"]\n", ""), None, "tun", "required table [tun] is missing", "`name = \"mptun0\"`"),
        c("tun name too long", client_with("\"mptun0\"", "\"mptun0-very-long-name\""), Some(4), "tun.name", "not a valid interface name", "\"mptun0\""),
        c("mtu out of range", client_with("[server]", "mtu = 100\n[server]"), Some(6), "tun.mtu", "100 bytes is out of range", "576 to 65535 bytes, or remove mtu"),
        c("IPv6 tun address with small mtu", client_with("[\"198.18.100.2/24\"]", "[\"198.18.100.2/24\", \"fd00::2/64\"]\nmtu = 1200"), Some(6), "tun.mtu", "below the IPv6 minimum of 1280", "at least 1280"),
        c("unknown cipher", client_with("[server]\n", "[server]\ncipher = \"aes-128-gcm\"\n"), Some(7), "server.cipher", "unknown cipher \"aes-128-gcm\"", "did you mean \"aes-256-gcm\"?"),
        c("cipher on a server", format!("cipher = \"auto\"\n{MINIMAL_SERVER}"), Some(1), "cipher", "unknown field `cipher`", ""),
        c("unknown scheduler", format!("{MINIMAL_CLIENT}[scheduler]\nname = \"round-robbin\"\n"), Some(13), "scheduler.name", "unknown scheduler \"round-robbin\"", "did you mean \"round-robin\"?"),
        c("unknown scheduler far from any", format!("{MINIMAL_CLIENT}[scheduler]\nname = \"fastest\"\n"), Some(13), "scheduler.name", "unknown scheduler \"fastest\"", "known schedulers: \"earliest-arrival\", \"blest\", \"ecf\", \"min-rtt\", \"weighted-round-robin\", \"round-robin\", \"redundant\""),
        c("scheduler name in the wrong case", format!("{MINIMAL_CLIENT}[scheduler]\nname = \"ECF\"\n"), Some(13), "scheduler.name", "unknown scheduler \"ECF\"", "known schedulers: \"earliest-arrival\""),
        c("unknown controller", format!("{MINIMAL_CLIENT}[congestion]\ncontroller = \"bbr\"\n"), Some(13), "congestion.controller", "unknown congestion controller \"bbr\"", "known congestion controllers: \"cubic\", \"delay-rate\""),
        c("controller name misspelt", format!("{MINIMAL_CLIENT}[congestion]\ncontroller = \"delay_rate\"\n"), Some(13), "congestion.controller", "unknown congestion controller \"delay_rate\"", "did you mean \"delay-rate\"? known congestion controllers: \"cubic\", \"delay-rate\""),
        c("max_hold_ms out of range", format!("{MINIMAL_CLIENT}[reorder]\nmax_hold_ms = 0\n"), Some(13), "reorder.max_hold_ms", "0 ms is out of range", "from 1 to 5000 ms"),
        c("min_hold_ms above max_hold_ms", format!("{MINIMAL_CLIENT}[reorder]\nmax_hold_ms = 50\nmin_hold_ms = 60\n"), Some(14), "reorder.min_hold_ms", "above max_hold_ms (50 ms)", "lower min_hold_ms"),
        c("adaptive not a boolean", format!("{MINIMAL_CLIENT}[reorder]\nadaptive = \"yes\"\n"), Some(13), "reorder.adaptive", "expected a boolean", "true` or `false"),
        c("unknown equalization", format!("{MINIMAL_CLIENT}[reorder]\nequalize_delay = \"all\"\n"), Some(13), "reorder.equalize_delay", "unknown delay equalization \"all\"", "known delay equalizations: \"off\", \"in-use\", \"all-paths\""),
        c("equalize_percent out of range", format!("{MINIMAL_CLIENT}[reorder]\nequalize_percent = 150\n"), Some(13), "reorder.equalize_percent", "150 % is out of range", "from 0 to 100 %"),
        c("equalization as a boolean", format!("{MINIMAL_CLIENT}[reorder]\nequalize_delay = true\n"), Some(13), "reorder.equalize_delay", "expected a string", ""),
        c("ecf_hysteresis out of range", format!("{MINIMAL_CLIENT}[scheduler]\necf_hysteresis = 1.5\n"), Some(13), "scheduler.ecf_hysteresis", "1.5 is out of range", "from 0 to 1"),
        c("blest_lambda not a number", format!("{MINIMAL_CLIENT}[scheduler]\nblest_lambda = \"high\"\n"), Some(13), "scheduler.blest_lambda", "expected f64", ""),
        c("wait margin out of range", format!("{MINIMAL_CLIENT}[scheduler]\nearliest_arrival_wait_margin_us = -1\n"), Some(13), "scheduler.earliest_arrival_wait_margin_us", "-1 µs is out of range", "from 0 to 1000000 µs"),
        c("share percent out of range", format!("{MINIMAL_CLIENT}[scheduler]\nearliest_arrival_share_percent = 1001\n"), Some(13), "scheduler.earliest_arrival_share_percent", "1001 % is out of range", "from 0 to 1000 %"),
        c("duplication not a boolean", format!("{MINIMAL_CLIENT}[scheduler]\nduplicate_latency_critical = 1\n"), Some(13), "scheduler.duplicate_latency_critical", "expected a boolean", "true` or `false"),
        c("parity not a boolean", format!("{MINIMAL_CLIENT}[scheduler]\nparity_on_lossy_paths = \"auto\"\n"), Some(13), "scheduler.parity_on_lossy_paths", "expected a boolean", "true` or `false"),
        c("capacity out of range", format!("{MINIMAL_CLIENT}[reorder]\ncapacity_packets = 2000000\n"), Some(13), "reorder.capacity_packets", "out of range", "16 to 1048576"),
        c("path_timeout <= keepalive", format!("{MINIMAL_CLIENT}[timers]\nkeepalive_interval_ms = 2000\npath_timeout_ms = 2000\n"), Some(14), "timers.path_timeout_ms", "must be greater than keepalive_interval_ms (2000)", "e.g. 6000"),
        c("keepalive above default path timeout", format!("{MINIMAL_CLIENT}[timers]\nkeepalive_interval_ms = 5000\n"), Some(13), "timers.keepalive_interval_ms", "path_timeout_ms (3000) must be greater", "e.g. 15000"),
        c("keys rejected before they are renewed", format!("{MINIMAL_CLIENT}[timers]\nrekey_after_ms = 5000\nreject_after_ms = 4000\n"), Some(14), "timers.reject_after_ms", "must be greater than rekey_after_ms (5000)", "reject_after_ms = 7500"),
        c("message limits the wrong way round", format!("{MINIMAL_CLIENT}[timers]\nrekey_after_messages = 100\nreject_after_messages = 100\n"), Some(14), "timers.reject_after_messages", "must be greater than rekey_after_messages (100)", "at least twice"),
        c("session timeout shorter than path timeout", format!("{MINIMAL_CLIENT}[timers]\nsession_timeout_ms = 2000\n"), Some(13), "timers.session_timeout_ms", "shorter than path_timeout_ms (3000)", "at least 3000"),
        c("server timer in a client", format!("{MINIMAL_CLIENT}[timers]\nsession_idle_timeout_ms = 60000\n"), Some(13), "timers.session_idle_timeout_ms", "not a client setting", "the client counterpart is `session_timeout_ms`"),
        c("stats interval out of range", format!("{MINIMAL_CLIENT}[log]\nstats_interval_ms = 10\n"), Some(13), "log.stats_interval_ms", "10 ms is out of range", "1000 to 86400000"),
        c("metrics listen not an address", format!("{MINIMAL_CLIENT}[metrics]\nlisten = \"localhost:9477\"\n"), Some(13), "metrics.listen", "\"localhost:9477\" is not an address:port", "\"127.0.0.1:9477\""),
        c("metrics listen port 0", format!("{MINIMAL_CLIENT}[metrics]\nlisten = \"127.0.0.1:0\"\n"), Some(13), "metrics.listen", "cannot be listened on", "and a port"),
        c("metrics field misspelt", format!("{MINIMAL_CLIENT}[metrics]\nlisen = \"127.0.0.1:9477\"\n"), Some(13), "metrics.lisen", "unknown field `lisen`", "did you mean `listen`?"),
        c("metrics token file missing", format!("{MINIMAL_CLIENT}[metrics]\nbearer_token_file = \"missing.token\"\n"), Some(13), "metrics.bearer_token_file", "missing.token does not exist", "head -c 32 /dev/urandom | base64 >"),
        c("metrics token file empty", format!("{MINIMAL_CLIENT}[metrics]\nbearer_token_file = \"empty.token\"\n"), Some(13), "metrics.bearer_token_file", "empty.token is empty", "credentials_file"),
        c("metrics token with a space", format!("{MINIMAL_CLIENT}[metrics]\nbearer_token_file = \"spaced.token\"\n"), Some(13), "metrics.bearer_token_file", "holds a space", "printable ASCII"),
        c("metrics token file is a directory", format!("{MINIMAL_CLIENT}[metrics]\nbearer_token_file = \".\"\n"), Some(13), "metrics.bearer_token_file", "is not a regular file", "holds the token"),
        c("metrics token file path empty", format!("{MINIMAL_CLIENT}[metrics]\nbearer_token_file = \"\"\n"), Some(13), "metrics.bearer_token_file", "is empty", "remove bearer_token_file"),
        c("metrics connection cap out of range", format!("{MINIMAL_CLIENT}[metrics]\nmax_connections = 0\n"), Some(13), "metrics.max_connections", "0 connections is out of range", "from 1 to 256 connections (default 16)"),
        c("state directory missing", client_with("[tun]", "state_directory = \"nowhere\"\n[tun]"), Some(3), "state_directory", "nowhere does not exist", "StateDirectory=mptund"),
        c("state directory is a file", client_with("[tun]", "state_directory = \"client.key\"\n[tun]"), Some(3), "state_directory", "is not a directory", "/var/lib/mptund"),
        s("state directory in a server", server_with("[tun]", "state_directory = \"/var/lib/mptund\"\n[tun]"), Some(4), "state_directory", "unknown field `state_directory`", "belongs in a client configuration"),
        c("empty control socket", format!("{MINIMAL_CLIENT}[control]\nsocket = \"\"\n"), Some(13), "control.socket", "is empty", "enabled = false"),
        c("control socket path too long", format!("{MINIMAL_CLIENT}[control]\nsocket = \"/run/{}.sock\"\n", "x".repeat(120)), Some(13), "control.socket", "more than a Unix socket path may be", "shorter path"),
        s("missing listen", server_with("listen = \"0.0.0.0:51900\"\n", ""), None, "listen", "required field `listen` is missing", "listen = \"0.0.0.0:51900\""),
        s("listen with DNS name", server_with("0.0.0.0:51900", "localhost:51900"), Some(3), "listen", "is a host name", "DNS names are not resolved"),
        s("client field in a server", server_with("[tun]", "[server]\nendpoint = \"198.18.0.1:51900\"\n[tun]"), Some(4), "server", "unknown field `server`", "belongs in a client configuration"),
        s("no peers", server_with("[[peer]]\nname = \"train-042\"\npublic_key = \"B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw=\"\nallowed_ips = [\"198.18.100.2/32\"]\n", ""), None, "peer", "at least one [[peer]]", "one [[peer]] table per client"),
        s("peer without allowed_ips", server_with("allowed_ips = [\"198.18.100.2/32\"]\n", ""), Some(7), "peer[0].allowed_ips", "missing from this [[peer]] table", "allowed_ips = "),
        s("overlapping peer allowed_ips", second_peer("\"198.18.100.0/24\""), Some(14), "peer[1].allowed_ips[0]", "198.18.100.0/24 of peer \"train-043\" overlaps 198.18.100.2/32 of peer \"train-042\" (line 10)", "disjoint"),
        s("non-normalised allowed_ip", server_with("198.18.100.2/32", "198.18.100.2/24"), Some(10), "peer[0].allowed_ips[0]", "198.18.100.2/24 has host bits set", "\"198.18.100.0/24\""),
        s("duplicate peer names", second_peer("\"198.18.100.3/32\"").replace("\"train-043\"", "\"train-042\""), Some(12), "peer[1].name", "already used on line 8", "its own name"),
        s("duplicate peer keys", second_peer("\"198.18.100.3/32\"").replace(OTHER_PUBLIC, CLIENT_PUBLIC), Some(13), "peer[1].public_key", "already given to peer \"train-042\" (line 9)", "mptund genkey"),
        s("peer key is the server's own", server_with(CLIENT_PUBLIC, SERVER_PUBLIC), Some(9), "peer[0].public_key", "this server's own public key", "mptund pubkey < client.key"),
        s("load threshold out of range", format!("{MINIMAL_SERVER}[handshake]\nload_threshold_per_s = 0\n"), Some(12), "handshake.load_threshold_per_s", "0 inits/s is out of range", "from 1 to 1000000 inits/s (default 200)"),
        s("burst not an integer", format!("{MINIMAL_SERVER}[handshake]\nburst_per_source = 5.5\n"), Some(12), "handshake.burst_per_source", "expected an integer", "whole number"),
        s("handshake field misspelt", format!("{MINIMAL_SERVER}[handshake]\nrate_per_source = 20\n"), Some(12), "handshake.rate_per_source", "unknown field `rate_per_source`", "did you mean `rate_per_source_per_s`?"),
        c("server table in a client", format!("{MINIMAL_CLIENT}[handshake]\nload_threshold_per_s = 100\n"), Some(12), "handshake", "unknown field `handshake`", "belongs in a server configuration"),
        s("paths per session out of range", format!("{MINIMAL_SERVER}[limits]\nmax_paths_per_session = 65\n"), Some(12), "limits.max_paths_per_session", "65 paths is out of range", "from 1 to 64 paths (default 8)"),
        s("memory budget too small", format!("{MINIMAL_SERVER}[limits]\nmemory_budget_mib = 4\n"), Some(12), "limits.memory_budget_mib", "4 MiB is out of range", "from 16 to 1048576 MiB (default 192)"),
        c("limits in a client", format!("{MINIMAL_CLIENT}[limits]\nmax_paths_per_session = 4\n"), Some(12), "limits", "unknown field `limits`", "belongs in a server configuration"),
        s("client timer in a server", format!("{MINIMAL_SERVER}[timers]\nsession_timeout_ms = 60000\n"), Some(12), "timers.session_timeout_ms", "not a server setting", "the server counterpart is `session_idle_timeout_ms`"),
    ]
}

#[test]
fn broken_configs_are_reported_precisely() {
    let dir = KeyDir::new();
    dir.write_key("garbage.key", "this is not a key\n", 0o600);
    dir.write_key(
        "short.key",
        &format!("{}\n", encode_key_bytes(&[7; 16])),
        0o600,
    );
    dir.write_key("empty.token", " \n", 0o600);
    dir.write_key("spaced.token", "two words\n", 0o600);
    let mut failures = Vec::new();
    for case in broken_configs() {
        let err = match parse(case.file, &case.text, &dir.path) {
            Ok(_) => {
                failures.push(format!("{}: accepted", case.name));
                continue;
            }
            Err(err) => err,
        };
        let hint = err.hint.clone().unwrap_or_default();
        let ok = err.file == Path::new(case.file)
            && err.line == case.line
            && err.field == case.field
            && err.problem.contains(case.problem)
            && hint.contains(case.hint)
            && err.line.is_some() == err.column.is_some();
        if !ok {
            failures.push(format!(
                "{}:\n  got      line {:?} field {:?} problem {:?} hint {:?}\n  expected line {:?} field {:?} problem ~{:?} hint ~{:?}",
                case.name, err.line, err.field, err.problem, hint, case.line, case.field, case.problem, case.hint
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn encode_key_bytes(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn error_display_reads_file_line_column_field_problem_hint() {
    let dir = KeyDir::new();
    let err = parse(
        "client.toml",
        &client_with("\"wwan0\"", "\"wwan0 \""),
        &dir.path,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "client.toml:11:13: path[0].interface: \"wwan0 \" is not a valid interface name \
         (at most 15 characters, no spaces, '/' or ':'); use the name shown by `ip link`"
    );

    let err = parse("client.toml", &client_with("[server]\nendpoint = \"198.18.0.1:51900\"\npublic_key = \"VxR2nRFr92Q2rnS8eT0sMK0ZA8WaxSc4BcfiaYtBDDY=\"\n", ""), &dir.path)
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("client.toml: server: required table [server] is missing; add"),
        "{err}"
    );
}

#[test]
fn columns_count_characters_not_bytes() {
    let dir = KeyDir::new();
    let text = client_with("[[path]]\nname = \"lte\"\ninterface = \"wwan0\"\n", "").replace(
        "[tun]",
        "path = [{ name = \"lte\", interface = \"wä\", source_address = \"x\" }]\n[tun]",
    );
    let err = parse("client.toml", &text, &dir.path).unwrap_err();
    assert_eq!(err.field, "path[0].source_address", "{err}");
    assert_eq!((err.line, err.column), (Some(3), Some(60)), "{err}");
}

// ---- robustness ----------------------------------------------------------

/// Runs the loader, which must return (either way) rather than panic.
fn parse_quietly(text: &str, dir: &Path) {
    let _ = parse("fuzz.toml", text, dir).map_err(|e| e.to_string());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let dir = KeyDir::new();
        parse_quietly(&text, &dir.path);
    }

    #[test]
    fn damaged_examples_never_panic(
        which in 0..2usize,
        cut in any::<prop::sample::Index>(),
        len in 0..40usize,
        insert in "[\\[\\]\"=.,{} a-z0-9\n#-]{0,12}",
    ) {
        let dir = KeyDir::new();
        let text = [CLIENT_EXAMPLE, SERVER_EXAMPLE][which];
        let mut start = cut.index(text.len());
        while !text.is_char_boundary(start) { start -= 1; }
        let mut end = (start + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        let damaged = format!("{}{}{}", &text[..start], insert, &text[end..]);
        parse_quietly(&damaged, &dir.path);
    }

    #[test]
    fn any_integer_in_any_numeric_field_never_panics(
        field in prop::sample::select(vec![
              "[reorder]\nmax_hold_ms", "[reorder]\nmin_hold_ms", "[reorder]\ncapacity_packets", "[timers]\nkeepalive_interval_ms",
            "[timers]\npath_timeout_ms", "[timers]\nhandshake_retry_ms", "[timers]\nsession_timeout_ms",
            "[timers]\nrekey_after_ms", "[timers]\nreject_after_ms", "[timers]\nrekey_after_messages",
            "[timers]\nreject_after_messages", "[log]\nstats_interval_ms",
        ]),
        value in any::<i64>(),
    ) {
        let dir = KeyDir::new();
        let text = format!("{MINIMAL_CLIENT}{field} = {value}\n");
        parse_quietly(&text, &dir.path);
        let text = MINIMAL_CLIENT.replace("[server]", &format!("mtu = {value}\n[server]"));
        parse_quietly(&text, &dir.path);
    }
}

#[test]
fn every_scheduler_and_controller_name_loads_as_itself() {
    let dir = KeyDir::new();
    for &name in KNOWN_SCHEDULERS {
        let text = format!("{MINIMAL_CLIENT}[scheduler]\nname = \"{name}\"\n");
        let config = client(parse("client.toml", &text, &dir.path).unwrap());
        assert_eq!(config.scheduler.choice.to_string(), name);
    }
    for &name in KNOWN_CONTROLLERS {
        let text = format!("{MINIMAL_CLIENT}[congestion]\ncontroller = \"{name}\"\n");
        let config = client(parse("client.toml", &text, &dir.path).unwrap());
        assert_eq!(config.congestion.controller.to_string(), name);
    }
}

#[test]
fn the_chosen_scheduler_carries_its_own_parameters() {
    let dir = KeyDir::new();
    let tuning = "ecf_hysteresis = 0.5\nblest_lambda = 2.0\nearliest_arrival_share_percent = 0\nearliest_arrival_wait_margin_us = 250\n";
    let choice = |name: &str| {
        let text = format!("{MINIMAL_CLIENT}[scheduler]\nname = \"{name}\"\n{tuning}");
        client(parse("client.toml", &text, &dir.path).unwrap())
            .scheduler
            .choice
    };
    assert_eq!(
        choice("ecf"),
        SchedulerChoice::Ecf(mptund_sched::EcfParams { hysteresis: 0.5 })
    );
    assert_eq!(
        choice("blest"),
        SchedulerChoice::Blest(mptund_sched::BlestParams {
            lambda: 2.0,
            ..Default::default()
        })
    );
    assert_eq!(
        choice("earliest-arrival"),
        SchedulerChoice::EarliestArrival(mptund_sched::EarliestArrivalParams {
            wait_margin: Some(Duration::from_micros(250)),
            share_percent: 0,
            ..Default::default()
        })
    );
    // The others read none of it; it is still range-checked (see broken_configs).
    assert_eq!(choice("min-rtt"), SchedulerChoice::MinRtt);
}
