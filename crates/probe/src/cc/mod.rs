//! Per-path congestion control behind a small trait, shaped like quinn's
//! `congestion::Controller`: the path tells its controller what it sent, what was
//! acknowledged and when congestion was detected; the controller answers with a window
//! (and, optionally, a pacing rate).
//!
//! Controllers: [`Cubic`] (RFC 9438, loss-based, the default for wired-like paths) and
//! [`DelayRate`] (BBR-style rate × min RTT window with a queuing-delay guard, for deep
//! cellular buffers), named by a [`ControllerChoice`] and held in
//! [`AnyController`]. [`Pacer`] spreads each path's window over its round trip.
//!
//! Feeding a controller (all times from the caller's clock):
//! - `on_sent` for every datagram, after adding it to `bytes_in_flight`.
//! - `on_ack` once per newly acknowledged datagram, with its send time, after the
//!   [`RttEstimator`] took the RTT sample, and with [`AckSignals`]: the delivery rate
//!   sample (needed by `DelayRate`), `app_limited` when the path had less to send than
//!   its window allowed when that datagram left, and the one-way queuing delay if known.
//! - `on_congestion_event` once per loss-detection pass that declared losses (or an ECN
//!   mark), with the send time of the newest lost datagram; both controllers ignore
//!   events for datagrams sent before their last reduction. Set `persistent` when RFC
//!   9002 §7.6 persistent congestion is declared (losses spanning more than
//!   3 × PTO): it collapses the window to the minimum.

use std::time::{Duration, Instant};

use crate::rtt::RttEstimator;

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
    /// The spread of the forward path's one-way delay without a queue of ours
    /// (`crate::owd`), once measured: that much of the queuing delay is the link's
    /// jitter.
    pub jitter: Option<Duration>,
}

/// A congestion controller for one path.
pub trait Controller {
    fn name(&self) -> &'static str;
    /// `bytes` left on the path; `bytes_in_flight` includes them.
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {}
    /// `bytes` newly acknowledged, of a packet sent at `sent`.
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        rtt: &RttEstimator,
        signals: &AckSignals,
    );
    /// Loss (or an ECN mark) of a packet sent at `sent`; one call per congestion event.
    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    );
    /// The congestion window in bytes.
    fn window(&self) -> u64;
    /// The window a fresh path starts with.
    fn initial_window(&self) -> u64;
    /// Pacing rate in bytes per second; `None` lets the pacer derive one from the window.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }
    /// The controller's estimate of the path's bottleneck rate in bytes per second
    /// (BBR's BtlBw), if it keeps one: unlike the pacing rate it does not cycle with
    /// probing, and unlike the latest delivery rate it survives a path that is offered
    /// less than it carries.
    fn bottleneck_rate(&self) -> Option<u64> {
        None
    }
    /// Still searching for the path's capacity (slow start, BBR's Startup): the window
    /// at least doubles every round trip until the first congestion signal.
    fn in_slow_start(&self) -> bool {
        false
    }
    /// Where the controller is in its state machine, for status reports.
    fn phase(&self) -> &'static str {
        if self.in_slow_start() {
            "slow start"
        } else {
            "avoidance"
        }
    }
    /// The queuing delay the controller lets stand before it backs off, if it has one.
    fn queuing_delay_target(&self) -> Option<Duration> {
        None
    }
    /// The last round trip's queue stood above that target: the bottleneck had more
    /// than it could forward, so what it delivered is its rate even while the sender
    /// had nothing more to send (see [`crate::PathProbe::on_ack`]).
    fn queue_standing(&self) -> bool {
        false
    }
}

mod cubic;
mod delay_rate;
mod pacer;
#[cfg(test)]
mod test_link;

pub use cubic::{cubic_k, w_cubic, Cubic};
pub use delay_rate::{queuing_delay_target, DelayRate, DelayRateState};
pub use pacer::Pacer;

/// Bytes a path delivering `rate_bytes_per_sec` carries in `duration`: with the
/// minimum RTT, the bandwidth-delay product.
pub(crate) fn bytes_in(rate_bytes_per_sec: u64, duration: Duration) -> u64 {
    let bytes = u128::from(rate_bytes_per_sec) * duration.as_nanos() / 1_000_000_000;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// RFC 9002 §7.2: the initial window is min(10 × mds, max(14,720 bytes, 2 × mds)).
/// Both controllers start with it, so a path starts alike whichever one it runs.
const INITIAL_WINDOW_PACKETS: u64 = 10;
const INITIAL_WINDOW_FLOOR_BYTES: u64 = 14_720;

pub(crate) fn initial_window(max_datagram_size: u64) -> u64 {
    (INITIAL_WINDOW_PACKETS * max_datagram_size)
        .min(INITIAL_WINDOW_FLOOR_BYTES.max(2 * max_datagram_size))
}

/// BBR draft-02 §4.6.3: a send quantum is 1 ms at the path's rate ...
const SEND_QUANTUM_INTERVAL: Duration = Duration::from_millis(1);
/// ... of at most 64 KiB, one GSO or TSO burst.
const SEND_QUANTUM_MAX_BYTES: u64 = 65_536;

/// The send quantum at `rate_bytes_per_sec`: the pacer's largest burst and the unit
/// of delay-rate's least window.
pub(crate) fn send_quantum(rate_bytes_per_sec: u64) -> u64 {
    bytes_in(rate_bytes_per_sec, SEND_QUANTUM_INTERVAL).min(SEND_QUANTUM_MAX_BYTES)
}

/// A built-in congestion controller, as the configuration names it. Parsing a name
/// ([`std::str::FromStr`]) is the one place a name becomes a controller;
/// [`std::fmt::Display`] prints the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControllerChoice {
    /// See [`Cubic`].
    Cubic,
    /// See [`DelayRate`].
    DelayRate,
}

impl ControllerChoice {
    /// Every controller, in the order of [`Self::NAMES`].
    pub const ALL: [ControllerChoice; 2] = [ControllerChoice::Cubic, ControllerChoice::DelayRate];

    /// The names the configuration accepts (exact, case-sensitive).
    pub const NAMES: &'static [&'static str] = &["cubic", "delay-rate"];

    /// The configuration name of this controller.
    pub fn name(self) -> &'static str {
        match self {
            ControllerChoice::Cubic => "cubic",
            ControllerChoice::DelayRate => "delay-rate",
        }
    }
}

impl std::fmt::Display for ControllerChoice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

impl std::str::FromStr for ControllerChoice {
    type Err = UnknownController;

    /// The controller called `name` (exact, case-sensitive).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|choice| choice.name() == name)
            .ok_or_else(|| UnknownController {
                name: name.to_owned(),
            })
    }
}

/// A controller chosen at start; enum dispatch keeps the per-packet calls static (no
/// `Box<dyn Controller>` on the hot path).
#[derive(Clone, Debug)]
pub enum AnyController {
    Cubic(Cubic),
    DelayRate(DelayRate),
}

impl Controller for AnyController {
    fn name(&self) -> &'static str {
        match self {
            Self::Cubic(inner) => inner.name(),
            Self::DelayRate(inner) => inner.name(),
        }
    }

    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        match self {
            Self::Cubic(inner) => inner.on_sent(now, bytes, bytes_in_flight),
            Self::DelayRate(inner) => inner.on_sent(now, bytes, bytes_in_flight),
        }
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        rtt: &RttEstimator,
        signals: &AckSignals,
    ) {
        match self {
            Self::Cubic(inner) => inner.on_ack(now, sent, bytes, rtt, signals),
            Self::DelayRate(inner) => inner.on_ack(now, sent, bytes, rtt, signals),
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    ) {
        match self {
            Self::Cubic(inner) => inner.on_congestion_event(now, sent, persistent, lost_bytes),
            Self::DelayRate(inner) => inner.on_congestion_event(now, sent, persistent, lost_bytes),
        }
    }

    fn window(&self) -> u64 {
        match self {
            Self::Cubic(inner) => inner.window(),
            Self::DelayRate(inner) => inner.window(),
        }
    }

    fn initial_window(&self) -> u64 {
        match self {
            Self::Cubic(inner) => inner.initial_window(),
            Self::DelayRate(inner) => inner.initial_window(),
        }
    }

    fn pacing_rate(&self) -> Option<u64> {
        match self {
            Self::Cubic(inner) => inner.pacing_rate(),
            Self::DelayRate(inner) => inner.pacing_rate(),
        }
    }

    fn bottleneck_rate(&self) -> Option<u64> {
        match self {
            Self::Cubic(inner) => inner.bottleneck_rate(),
            Self::DelayRate(inner) => inner.bottleneck_rate(),
        }
    }

    fn in_slow_start(&self) -> bool {
        match self {
            Self::Cubic(inner) => inner.in_slow_start(),
            Self::DelayRate(inner) => inner.in_slow_start(),
        }
    }

    fn phase(&self) -> &'static str {
        match self {
            Self::Cubic(inner) => inner.phase(),
            Self::DelayRate(inner) => inner.phase(),
        }
    }

    fn queue_standing(&self) -> bool {
        match self {
            Self::Cubic(inner) => inner.queue_standing(),
            Self::DelayRate(inner) => inner.queue_standing(),
        }
    }

    fn queuing_delay_target(&self) -> Option<Duration> {
        match self {
            Self::Cubic(inner) => inner.queuing_delay_target(),
            Self::DelayRate(inner) => Controller::queuing_delay_target(inner),
        }
    }
}

/// A controller name that is none of [`ControllerChoice::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownController {
    /// The name as given.
    pub name: String,
}

impl std::fmt::Display for UnknownController {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "unknown congestion controller {:?}: use one of {}",
            self.name,
            ControllerChoice::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownController {}

impl AnyController {
    /// The controller `choice` names, for a path whose datagrams are at most
    /// `max_datagram_size` bytes.
    pub fn new(choice: ControllerChoice, max_datagram_size: u64) -> Self {
        match choice {
            ControllerChoice::Cubic => AnyController::Cubic(Cubic::new(max_datagram_size)),
            ControllerChoice::DelayRate => {
                AnyController::DelayRate(DelayRate::new(max_datagram_size))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_to_a_choice_that_prints_and_builds_that_name() {
        assert_eq!(ControllerChoice::ALL.len(), ControllerChoice::NAMES.len());
        for (choice, &name) in ControllerChoice::ALL
            .into_iter()
            .zip(ControllerChoice::NAMES)
        {
            let parsed: ControllerChoice = name.parse().expect("listed name parses");
            assert_eq!(parsed, choice);
            assert_eq!(parsed.to_string(), name);
            let controller = AnyController::new(parsed, 1200);
            assert_eq!(controller.name(), name);
            assert_eq!(controller.window(), controller.initial_window());
        }
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let error = "bbr".parse::<ControllerChoice>().unwrap_err();
        assert_eq!(error.name, "bbr");
        assert_eq!(
            error.to_string(),
            "unknown congestion controller \"bbr\": use one of cubic, delay-rate"
        );
    }

    #[test]
    fn dispatch_reaches_the_inner_controller() {
        let t0 = Instant::now();
        let mut controller = AnyController::new(ControllerChoice::Cubic, 1200);
        let before = controller.window();
        controller.on_congestion_event(t0, t0, false, 1200);
        assert_eq!(controller.window(), before * 7 / 10);
        assert_eq!(controller.pacing_rate(), None);
    }
}
