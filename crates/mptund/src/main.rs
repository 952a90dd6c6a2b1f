//! The `mptund` command: run the daemon, check a configuration, make keys.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mptund::config;
use mptund::daemon::{self, RunOptions};
use mptund::keys::PrivateKey;

#[derive(Parser)]
#[command(
    name = "mptund",
    version = mptund::VERSION,
    about = "Multipath UDP tunnel: stripes a TUN device's packets over several uplinks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the client or server described by a configuration file.
    Run {
        /// The configuration file (see config/client.toml and config/server.toml).
        #[arg(short, long)]
        config: PathBuf,
        /// Write per-path counters and drop counts as JSON here, every
        /// `log.stats_interval_ms` and on exit.
        #[arg(long)]
        stats_file: Option<PathBuf>,
    },
    /// Show the running daemon's sessions and paths (from its control socket).
    Status {
        /// The daemon's control socket. Default: the one its configuration names, else
        /// the only socket in /run/mptund.
        #[arg(long, conflicts_with = "config")]
        socket: Option<PathBuf>,
        /// The daemon's configuration file, to find its control socket.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Print the full report as JSON (as `--stats-file` writes it), for scripts.
        #[arg(long, conflicts_with = "dump")]
        json: bool,
        /// Print one tab-separated line per path, for scripts (like `wg show dump`).
        #[arg(long, long_help = dump_help())]
        dump: bool,
    },
    /// Validate a configuration file without touching the system.
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
    },
    /// Print a new private key (base64) on standard output.
    Genkey,
    /// Read a private key on standard input and print its public key.
    Pubkey,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config, stats_file } => {
            init_logging();
            let loaded = match config::load(&config) {
                Ok(loaded) => loaded,
                Err(error) => return fail(&error),
            };
            for warning in &loaded.warnings {
                tracing::warn!("{warning}");
            }
            match daemon::run(loaded.config, RunOptions { stats_file }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    fail(&format!("{error:#}"))
                }
            }
        }
        Command::Status {
            socket,
            config,
            json,
            dump,
        } => {
            let socket = match (socket, config) {
                (Some(socket), _) => socket,
                (None, Some(file)) => match config::load(&file) {
                    Ok(loaded) => match &loaded.config.control().socket {
                        Some(socket) => socket.clone(),
                        None => {
                            return fail(&format!(
                            "{}: the control socket is switched off ([control] enabled = false)",
                            file.display()
                        ))
                        }
                    },
                    Err(error) => return fail(&error),
                },
                (None, None) => match only_control_socket() {
                    Ok(socket) => socket,
                    Err(error) => return fail(&error),
                },
            };
            let request = match (json, dump) {
                (true, _) => "status json",
                (_, true) => "status dump",
                _ => "status",
            };
            match daemon::query_control_socket(&socket, request) {
                Ok(answer) if answer.starts_with("error:") => fail(&answer.trim_end()),
                Ok(answer) => {
                    print!("{answer}");
                    ExitCode::SUCCESS
                }
                Err(error) => fail(&format!(
                    "{}: {error} (is the daemon running? as root?)",
                    socket.display()
                )),
            }
        }
        Command::CheckConfig { file } => match config::load(&file) {
            Ok(loaded) => {
                for warning in &loaded.warnings {
                    eprintln!("warning: {warning}");
                }
                let role = match loaded.config {
                    config::Config::Client(_) => "client",
                    config::Config::Server(_) => "server",
                };
                println!("{}: valid {role} configuration", file.display());
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        },
        Command::Genkey => {
            let key = PrivateKey::generate();
            println!("{}", key.to_base64());
            ExitCode::SUCCESS
        }
        Command::Pubkey => {
            let mut text = String::new();
            if let Err(error) = std::io::stdin().read_to_string(&mut text) {
                return fail(&format!(
                    "reading the private key from standard input: {error}"
                ));
            }
            match PrivateKey::from_base64(text.trim()) {
                Ok(key) => {
                    let mut stdout = std::io::stdout();
                    let _ = writeln!(stdout, "{}", key.public_key().to_base64());
                    ExitCode::SUCCESS
                }
                Err(error) => fail(&format!("standard input: {error}")),
            }
        }
    }
}

fn dump_help() -> String {
    format!(
        "Print one tab-separated line per path, for scripts (like `wg show dump`), \
         without a header. Columns: {}. Rates in bytes per second, times in \
         milliseconds, loss as a fraction; `-` where nothing is known yet.",
        daemon::DUMP_COLUMNS.join(", ")
    )
}

/// The control socket when none is named: the only one in the default directory.
fn only_control_socket() -> Result<PathBuf, String> {
    let dir = std::path::Path::new(config::DEFAULT_CONTROL_DIR);
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| {
            format!(
                "{}: {error}; name the daemon with --config or --socket",
                dir.display()
            )
        })?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sock"))
        .collect();
    sockets.sort();
    match sockets.len() {
        1 => Ok(sockets.remove(0)),
        0 => Err(format!(
            "no control socket in {}: is mptund running? Name it with --config or --socket",
            dir.display()
        )),
        _ => Err(format!(
            "several daemons run here ({}); choose one with --config or --socket",
            sockets
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MPTUND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal, not in journald or a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("mptund: {error}");
    ExitCode::FAILURE
}
