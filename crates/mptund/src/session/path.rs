//! One path of a session as the protocol core sees it: where it leads, whether it is
//! alive, what it measured and counted.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_probe::{PathCounters, PathStats, RttEstimator};
use mptund_sched::{PathId, PathState};

#[derive(Clone, Debug)]
pub struct SessionPath {
    pub id: PathId,
    /// Human-readable name: the client's configured name, `path<id>` on the server.
    pub name: String,
    /// Client: the socket index of this path.
    pub socket: usize,
    /// Where datagrams for this path go: client, the configured endpoint; server, the
    /// address the last authenticated datagram on this path came from.
    pub remote: Option<SocketAddr>,
    /// Server: the local address the peer reached us at, used as the reply's source.
    pub local_ip: Option<IpAddr>,
    /// Client: whether the path's socket is open (its interface exists).
    pub socket_open: bool,
    pub backup: bool,
    pub state: PathState,
    next_packet_number: u32,
    pub last_received: Option<Instant>,
    pub last_ping: Option<Instant>,
    pub rtt: RttEstimator,
    pub counters: PathCounters,
}

impl SessionPath {
    /// A client path, before the session has heard anything on it.
    pub fn configured(
        id: PathId,
        name: String,
        socket: usize,
        remote: SocketAddr,
        backup: bool,
    ) -> Self {
        Self {
            id,
            name,
            socket,
            remote: Some(remote),
            local_ip: None,
            socket_open: false,
            backup,
            state: PathState::Down,
            next_packet_number: 0,
            last_received: None,
            last_ping: None,
            rtt: RttEstimator::new(),
            counters: PathCounters::default(),
        }
    }

    /// A server path, learned from the first authenticated datagram carrying its id.
    pub fn learned(id: PathId, now: Instant) -> Self {
        Self {
            socket_open: true,
            state: PathState::Up,
            last_received: Some(now),
            remote: None,
            ..Self::configured(
                id,
                format!("path{}", id.0),
                0,
                SocketAddr::from(([0, 0, 0, 0], 0)),
                false,
            )
        }
    }

    pub fn take_packet_number(&mut self) -> u32 {
        let number = self.next_packet_number;
        self.next_packet_number = number.wrapping_add(1);
        number
    }

    pub fn on_sent(&mut self, wire_len: usize, data: bool) {
        self.counters.sent_packets += 1;
        self.counters.sent_bytes += wire_len as u64;
        if data {
            self.counters.sent_data_packets += 1;
        }
    }

    pub fn on_received(&mut self, now: Instant, wire_len: usize, session: u32) {
        self.counters.received_packets += 1;
        self.counters.received_bytes += wire_len as u64;
        self.last_received = Some(now);
        if self.state != PathState::Up {
            tracing::info!(session, path = %self.name, "path up");
            self.state = PathState::Up;
        }
    }

    /// When the path will be declared down if nothing arrives before: a path that never
    /// answered is given one timeout from its first ping.
    pub fn down_deadline(&self, path_timeout: Duration) -> Option<Instant> {
        match (self.state, self.last_received.or(self.last_ping)) {
            (PathState::Up, Some(last)) => Some(last + path_timeout),
            _ => None,
        }
    }

    pub fn check_liveness(&mut self, now: Instant, path_timeout: Duration, session: u32) {
        if let Some(deadline) = self.down_deadline(path_timeout) {
            if now >= deadline {
                tracing::warn!(session, path = %self.name, silent_ms = path_timeout.as_millis() as u64, "path down");
                self.state = PathState::Down;
            }
        }
    }

    /// When an idle path is due for a keepalive ping: one interval after the later of
    /// the last datagram received and the last ping sent.
    pub fn next_keepalive(&self, interval: Duration, session_start: Instant) -> Instant {
        let last_activity = match (self.last_received, self.last_ping) {
            (Some(received), Some(ping)) => received.max(ping),
            (Some(at), None) | (None, Some(at)) => at,
            (None, None) => return session_start,
        };
        last_activity + interval
    }

    /// The state the scheduler sees: a path is only usable with an open socket and an
    /// address to send to.
    pub fn scheduler_state(&self, _now: Instant) -> PathState {
        if self.socket_open && self.remote.is_some() {
            self.state
        } else {
            PathState::Down
        }
    }

    pub fn stats(&self, now: Instant) -> PathStats {
        let since = self
            .last_received
            .map(|last| now.saturating_duration_since(last));
        PathStats::new(self.counters, &self.rtt, since)
    }
}
