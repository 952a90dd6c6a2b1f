//! Per-path congestion control behind a small trait, shaped like quinn's
//! `congestion::Controller`: the path tells its controller what it sent, what was
//! acknowledged and when congestion was detected; the controller answers with a window
//! (and, optionally, a pacing rate).

use std::time::{Duration, Instant};

use crate::RttEstimator;

/// What a controller may learn from one acknowledgement beyond bytes and RTT: the
/// delivery rate and the one-way queuing delay measured on the path.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AckSignals {
    /// Delivery rate sample in bytes per second, if the estimator produced one.
    pub delivery_rate: Option<u64>,
    /// Whether the sender was application-limited when the acknowledged data was sent:
    /// rate samples then understate the path and must not lower estimates.
    pub app_limited: bool,
    /// Queuing delay on the forward path (one-way delay above its minimum), if known.
    pub queuing_delay: Option<Duration>,
}

/// A congestion controller for one path.
pub trait Controller {
    fn name(&self) -> &'static str;
    /// `bytes` left on the path; `bytes_in_flight` includes them.
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}
    /// `bytes` newly acknowledged, of a packet sent at `sent`.
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator, signals: &AckSignals);
    /// Loss (or an ECN mark) of a packet sent at `sent`; one call per congestion event.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost_bytes: u64);
    /// The congestion window in bytes.
    fn window(&self) -> u64;
    /// The window a fresh path starts with.
    fn initial_window(&self) -> u64;
    /// Pacing rate in bytes per second; `None` lets the pacer derive one from the window.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }
}
