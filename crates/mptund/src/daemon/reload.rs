//! SIGHUP: re-read and validate the configuration file, and apply it.
//!
//! A file with a mistake is refused with the usual located error (file, line, field,
//! fix) and the daemon runs on unchanged. Applying a valid new configuration to the
//! running daemon is [`apply_reload`]'s job; until it is written, a changed
//! configuration is reported as not applied, never as applied.

use super::ops::Ops;
use super::EventLoop;
use crate::config::{self, Config};
use crate::session::Engine;

/// Why a valid new configuration was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file switched between client and server.
    #[error("the file now configures a {new}, but this daemon runs as a {running}; restart it to switch roles")]
    RoleChanged {
        running: &'static str,
        new: &'static str,
    },
    /// Live reload of changed settings does not exist yet.
    #[error("applying changed settings without a restart is not implemented yet; restart the daemon to apply them (e.g. systemctl restart mptund@<instance>)")]
    NotImplemented,
}

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The file says what is already running.
    Unchanged,
    /// The new configuration is in effect.
    #[allow(dead_code)] // returned by `apply_reload` once live reload exists
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
pub(super) fn reload<E: Engine>(event_loop: &mut EventLoop<E>, ops: &mut Ops) {
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
            match apply_reload(event_loop, &ops.config, loaded.config.clone()) {
                Ok(Reloaded::Unchanged) => {
                    tracing::info!("reload: the configuration is valid and unchanged");
                    "running; configuration unchanged"
                }
                Ok(Reloaded::Applied) => {
                    ops.config = loaded.config;
                    tracing::info!("reload: the new configuration is in effect");
                    "running; new configuration applied"
                }
                Err(error) => {
                    tracing::error!(
                        "reload: {} is valid but was not applied: {error}",
                        source.display()
                    );
                    "running; new configuration valid but not applied"
                }
            }
        }
    };
    ops.notifier.ready(status);
}

/// Applies `new`, a validated configuration, to the running daemon.
///
/// The hook for live reload: change what can change in place (peers, paths, timers,
/// scheduler…) on `event_loop` and its engine, and return [`Reloaded::Applied`];
/// refuse what cannot. For now only an unchanged file "applies".
pub(super) fn apply_reload<E: Engine>(
    _event_loop: &mut EventLoop<E>,
    running: &Config,
    new: Config,
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
    Err(ReloadError::NotImplemented)
}
