//! `linkem`: forwards Ethernet frames between pairs of interfaces (one pair per
//! path) through the per-path, per-direction link model of the `linkem` crate.

mod forwarder;
mod sys;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use linkem::scenario::Scenario;

#[derive(Parser)]
#[command(
    version,
    about = "User-space link emulator: delay, jitter, rate, queue, loss and outages per path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Forward frames between interface pairs until SIGINT/SIGTERM.
    Run {
        /// Scenario file (TOML), see config/scenarios/README.md.
        #[arg(long)]
        scenario: PathBuf,
        /// CLIENT_IF:SERVER_IF for each path, in scenario order; frames from
        /// CLIENT_IF take the path's "up" model, frames from SERVER_IF "down".
        #[arg(long = "pair", required = true, value_parser = parse_pair)]
        pairs: Vec<(String, String)>,
        /// Overrides the scenario's rate_scale.
        #[arg(long)]
        rate_scale: Option<f64>,
        /// Counters as JSON, written on exit (and periodically with --stats-interval-ms).
        #[arg(long)]
        stats_json: Option<PathBuf>,
        #[arg(long)]
        stats_interval_ms: Option<u64>,
        /// Written (JSON with pid and epoch) once all sockets are open.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Print the resolved scenario (scaled rates, queues, outages) as JSON.
    Show {
        #[arg(long)]
        scenario: PathBuf,
        #[arg(long)]
        rate_scale: Option<f64>,
    },
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((client, server)) if !client.is_empty() && !server.is_empty() => {
            Ok((client.to_string(), server.to_string()))
        }
        _ => Err(format!("expected CLIENT_IF:SERVER_IF, got `{text}`")),
    }
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run {
            scenario,
            pairs,
            rate_scale,
            stats_json,
            stats_interval_ms,
            ready_file,
        } => {
            let loaded = Scenario::load(&scenario, rate_scale)?;
            let options = forwarder::Options {
                stats_json,
                stats_interval: stats_interval_ms
                    .filter(|&ms| ms > 0)
                    .map(Duration::from_millis),
                ready_file,
            };
            forwarder::Forwarder::open(loaded, &pairs, options)
                .with_context(|| format!("starting scenario {}", scenario.display()))?
                .run()
        }
        Command::Show {
            scenario,
            rate_scale,
        } => {
            let loaded = Scenario::load(&scenario, rate_scale)?;
            println!("{}", serde_json::to_string_pretty(&loaded.summary_json())?);
            Ok(())
        }
    }
}
