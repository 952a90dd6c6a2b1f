//! What the event loop offers operators besides forwarding: the Prometheus endpoint,
//! the control socket, systemd notifications and SIGHUP.
//!
//! The metrics and control servers run as tasks on the event loop's own
//! (current-thread) runtime. They never touch the protocol core: each request sends a
//! reply channel to the loop ([`ReportSource`], in `snapshot`), which answers between two batches with
//! a fresh [`Report`], the same snapshot `--stats-file` writes.

use std::task::{Context, Poll};
use std::time::Instant;

use anyhow::Context as _;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};

use super::control::{self, ControlSocket};
use super::metrics;
use super::notify::Notifier;
use super::snapshot::{Interfaces, ReportSource};
use crate::config::{Config, MetricsConfig};
use crate::session::Report;

/// What a wait on [`Ops`] found.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpsReady {
    pub requests: bool,
    pub reload: bool,
}

/// The operator-facing side of a running daemon, owned by the event loop.
pub struct Ops {
    requests: mpsc::Receiver<oneshot::Sender<Report>>,
    /// Requests taken from the channel, answered after the wait.
    pending: Vec<oneshot::Sender<Report>>,
    sighup: Signal,
    pub notifier: Notifier,
    /// Removes the socket file when the daemon ends.
    _control: Option<ControlSocket>,
    /// The configuration running now, compared against on reload.
    pub config: Config,
    /// Path name to interface, for metrics and status; a reload replaces it.
    pub interfaces: Interfaces,
    /// The metrics endpoint's token and connection cap, while it runs; a reload
    /// replaces them.
    metrics_policy: Option<watch::Sender<metrics::Policy>>,
}

impl Ops {
    /// Binds the metrics endpoint and the control socket (a mistake there stops the
    /// start, with the address or path in the message) and starts serving them.
    pub fn start(
        config: &Config,
        interfaces: std::collections::HashMap<String, String>,
    ) -> anyhow::Result<Self> {
        let interfaces = Interfaces::new(interfaces);
        let (source, requests) = ReportSource::channel();
        let sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let mut metrics_policy = None;
        if let Some(listen) = config.metrics().listen {
            let listener = std::net::TcpListener::bind(listen)
                .and_then(|listener| {
                    listener.set_nonblocking(true)?;
                    tokio::net::TcpListener::from_std(listener)
                })
                .with_context(|| {
                    format!(
                        "serving metrics on {listen} ([metrics] listen in {}): is another program using the port?",
                        config.source().display()
                    )
                })?;
            let metrics_config = config.metrics();
            tracing::info!(%listen, token = metrics_config.bearer_token.is_some(), max_connections = metrics_config.max_connections, "metrics at http://{listen}/metrics");
            let (policy, watched) = watch::channel(metrics::Policy::of(metrics_config));
            metrics_policy = Some(policy);
            tokio::spawn(metrics::serve(
                listener,
                source.clone(),
                interfaces.clone(),
                watched,
            ));
        }
        let control = match &config.control().socket {
            Some(path) => {
                let (listener, guard) = control::bind(path).with_context(|| {
                    format!(
                        "opening the control socket {} ([control] socket in {})",
                        path.display(),
                        config.source().display()
                    )
                })?;
                tracing::info!(socket = %path.display(), "control socket open");
                tokio::spawn(control::serve(listener, source, interfaces.clone()));
                Some(guard)
            }
            None => None,
        };
        Ok(Self {
            requests,
            pending: Vec::new(),
            sighup,
            notifier: Notifier::from_environment(Instant::now()),
            _control: control,
            config: config.clone(),
            interfaces,
            metrics_policy,
        })
    }

    /// Puts a reloaded `[metrics]` token and connection cap in force: for the
    /// next connection and request (the address needs a restart).
    pub fn apply_metrics(&self, config: &MetricsConfig) {
        let Some(policy) = &self.metrics_policy else {
            return;
        };
        let new = metrics::Policy::of(config);
        policy.send_if_modified(|running| {
            if *running == new {
                return false;
            }
            if running.token != new.token {
                match &new.token {
                    Some(token) => tracing::info!(file = %token.file.display(), "metrics: the bearer token is in force"),
                    None => tracing::info!("metrics: no bearer token is asked for any more"),
                }
            }
            *running = new;
            true
        });
    }

    /// Registers for wake-ups and says what is ready.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> OpsReady {
        while let Poll::Ready(Some(reply)) = self.requests.poll_recv(cx) {
            self.pending.push(reply);
        }
        OpsReady {
            requests: !self.pending.is_empty(),
            reload: self.sighup.poll_recv(cx).is_ready(),
        }
    }

    /// Answers every waiting request with a report from `take_report`.
    pub fn answer(&mut self, mut take_report: impl FnMut() -> Report) {
        for reply in self.pending.drain(..) {
            // The asker may have given up; that is fine.
            let _ = reply.send(take_report());
        }
    }
}
