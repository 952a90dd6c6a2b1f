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
    version,
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
