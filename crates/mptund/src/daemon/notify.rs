//! systemd readiness and watchdog notifications (`sd_notify(3)`), for a unit with
//! `Type=notify` and `WatchdogSec=`. Without `$NOTIFY_SOCKET` (not started by systemd)
//! every call does nothing.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// Tells the service manager what the daemon is doing, and keeps its watchdog fed.
pub struct Notifier {
    /// Half the watchdog interval (`WatchdogSec=`), as `sd_watchdog_enabled(3)` advises;
    /// `None` without a watchdog.
    watchdog_every: Option<Duration>,
    next_watchdog: Option<Instant>,
}

impl Notifier {
    /// Reads `$WATCHDOG_USEC` (and `$WATCHDOG_PID`, which must be this process).
    pub fn from_environment(now: Instant) -> Self {
        let watchdog_every = sd_notify::watchdog_enabled()
            .filter(|interval| !interval.is_zero())
            .map(|interval| interval / 2);
        if let Some(every) = watchdog_every {
            tracing::info!(
                "systemd watchdog enabled: pinging every {} ms",
                every.as_millis()
            );
        }
        Self {
            watchdog_every,
            next_watchdog: watchdog_every.map(|_| now),
        }
    }

    /// The TUN device and the sockets are up: `READY=1`.
    pub fn ready(&self, status: &str) {
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// A reload begins: `RELOADING=1` with the monotonic time systemd asks for.
    pub fn reloading(&self) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => send(&[NotifyState::Reloading, now]),
            Err(_) => send(&[NotifyState::Reloading]),
        }
    }

    /// Shutting down: `STOPPING=1`.
    pub fn stopping(&self) {
        send(&[NotifyState::Stopping, NotifyState::Status("shutting down")]);
    }

    /// When the event loop must wake next to feed the watchdog.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_watchdog
    }

    /// Feeds the watchdog if it is due. Called from the event loop itself, so a loop
    /// that hangs stops the pings and systemd restarts the daemon.
    pub fn handle_timeout(&mut self, now: Instant) {
        let (Some(at), Some(every)) = (self.next_watchdog, self.watchdog_every) else {
            return;
        };
        if now >= at {
            send(&[NotifyState::Watchdog]);
            self.next_watchdog = Some(now + every);
        }
    }
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify systemd ($NOTIFY_SOCKET)");
    }
}
