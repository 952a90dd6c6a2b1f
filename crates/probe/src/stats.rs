//! A snapshot of everything known about one path, named after quinn's `PathStats`, for
//! schedulers, logs and metrics.

use std::time::Duration;

use crate::liveness::Liveness;
use crate::rtt::RttEstimator;

/// Monotonic per-path counters; each side counts what it sent and received itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// Datagrams sent on the path, data and control.
    pub sent_packets: u64,
    /// UDP payload bytes sent on the path.
    pub sent_bytes: u64,
    /// Authenticated datagrams received on the path.
    pub received_packets: u64,
    /// UDP payload bytes of authenticated datagrams received on the path.
    pub received_bytes: u64,
    /// Inner packets (tunnelled IP packets) among the sent datagrams.
    pub sent_data_packets: u64,
    /// Inner packets among the received datagrams.
    pub received_data_packets: u64,
    /// Sends the operating system refused (interface down, no route, buffer full).
    pub send_errors: u64,
    /// Times the path's socket buffer was full: its datagrams waited for room while
    /// the other paths went on.
    pub socket_full: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathStats {
    pub counters: PathCounters,
    /// Smoothed round-trip time (RFC 6298 SRTT).
    pub rtt: Option<Duration>,
    /// Round-trip time variation (RFC 6298 RTTVAR).
    pub rtt_variance: Duration,
    pub min_rtt: Option<Duration>,
    pub latest_rtt: Option<Duration>,
    /// Time since something authenticated last arrived on the path.
    pub since_last_received: Option<Duration>,
    /// Congestion window in bytes (0 when the snapshot does not come from a
    /// [`crate::PathProbe`]).
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// Delivery rate estimate in bytes per second.
    pub delivery_rate: Option<u64>,
    /// Smoothed forward queuing delay (one-way delay above its windowed minimum).
    pub queuing_delay: Option<Duration>,
    /// Spread of the forward one-way delay of packets sent into the idle path: the
    /// link's own jitter, which the delay-rate controller does not count as a queue.
    pub jitter: Option<Duration>,
    /// Slope of the forward one-way delay in microseconds per second; positive while a
    /// queue builds.
    pub owd_trend_us_per_s: Option<f64>,
    /// Fraction of recent packets lost (EWMA over packets).
    pub loss_rate: f64,
    /// Packets declared lost so far.
    pub lost_packets: u64,
    /// Packets declared lost that were acknowledged later.
    pub spurious_losses: u64,
    /// Times persistent congestion was declared (RFC 9002 section 7.6): the
    /// controller restarted from its least window.
    pub persistent_congestions: u64,
    /// How many packets sent later must be acknowledged before one is declared lost;
    /// grows with the reordering seen (`crate::LossDetector::packet_threshold`).
    pub packet_threshold: u64,
    /// Consecutive probe timeouts without an acknowledgement.
    pub pto_count: u32,
    pub liveness: Liveness,
}

impl PathStats {
    pub fn new(
        counters: PathCounters,
        rtt: &RttEstimator,
        since_last_received: Option<Duration>,
    ) -> Self {
        Self {
            counters,
            rtt: rtt.smoothed(),
            rtt_variance: rtt.variance(),
            min_rtt: rtt.min(),
            latest_rtt: rtt.latest(),
            since_last_received,
            ..Self::default()
        }
    }
}
