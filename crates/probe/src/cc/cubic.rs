//! CUBIC congestion control after RFC 9438, with the slow start, recovery period and
//! persistent congestion of RFC 9002 section 7.
//!
//! What is implemented, by section:
//!
//! - RFC 9002 §7.2: initial window min(10 × mds, max(14720, 2 × mds)); minimum window
//!   2 × mds.
//! - RFC 9002 §7.3.1 (slow start): "the congestion window increases by the number of
//!   bytes acknowledged when each acknowledgment is processed", until it reaches the
//!   slow start threshold or a congestion event.
//! - RFC 9002 §7.3.2 (recovery): a congestion event starts a recovery period; losses of
//!   packets sent before its start cause no further reduction, and the window does not
//!   grow on their acknowledgements. The period ends when a packet sent after its start
//!   is acknowledged.
//! - RFC 9438 §4.2: W_cubic(t) = C × (t − K)³ + W_max (segments, seconds), with
//!   K = ∛((W_max − cwnd_epoch) / C), where t runs from the start of the current
//!   congestion avoidance stage. Per acknowledgement the window moves by
//!   (target − cwnd) / cwnd segments per acknowledged segment, with
//!   target = W_cubic(t + RTT) clamped to [cwnd, 1.5 × cwnd].
//! - RFC 9438 §4.3 (Reno-friendly region): W_est starts at cwnd_epoch and grows by
//!   α_cubic × segments_acked / cwnd, α_cubic = 3(1 − β)/(1 + β) until W_est reaches
//!   cwnd_prior, 1 afterwards; when W_cubic(t) < W_est the window follows W_est.
//! - RFC 9438 §4.6 (multiplicative decrease): ssthresh = cwnd × β_cubic, W_max = cwnd.
//! - RFC 9438 §4.7 (fast convergence): a loss below the previous W_max sets
//!   W_max = cwnd × (1 + β_cubic) / 2.
//! - RFC 9438 §4.8 (timeout) with RFC 9002 §7.6.2: persistent congestion collapses the
//!   window to the minimum; ssthresh is still set with β_cubic, and the next congestion
//!   avoidance stage starts with K = 0 and W_max = the window at its start.
//! - RFC 9438 §5.8 (application-limited flows): "CUBIC does not increase cwnd when a
//!   flow is application limited", and t must not include application-limited periods.
//!   Here an acknowledgement with `AckSignals::app_limited` grows neither cwnd nor W_est,
//!   and the time since the previous acknowledgement is added to the epoch start, so
//!   W_cubic resumes where it stopped instead of jumping ahead.
//!
//! One departure, for lossy radio paths: the reduced window is never below the
//! path's measured bandwidth-delay product (the largest delivery rate of the last
//! one to two [`RATE_BUCKET`]s times the minimum RTT), nor above the window before the
//! event. A full drop-tail buffer holds more than that, so a real overflow still
//! drains its queue; a random radio loss on a path with no queue no longer shrinks the
//! window below what the path carries. This is the floor BBR's model implies and the
//! `delay-rate` controller uses (`delay_rate.rs`, "Reactions"); the loss itself is
//! repaired by the tunnel, so nothing asks this path to slow down for it.
//!
//! Not implemented: HyStart++ (RFC 9406, optional in RFC 9438 §4.10) and the undo of
//! spurious congestion events (§4.9).

use std::time::{Duration, Instant};

use super::{bytes_in, initial_window, AckSignals, Controller};
use crate::rtt::RttEstimator;

/// RFC 9438 §5.1: C = 0.4 (segments per second cubed).
const CUBIC_C: f64 = 0.4;
/// RFC 9438 §4.6: β_cubic = 0.7, kept as a fraction so that byte windows are cut
/// exactly.
const BETA_CUBIC_NUMERATOR: u64 = 7;
const BETA_CUBIC_DENOMINATOR: u64 = 10;
const BETA_CUBIC: f64 = BETA_CUBIC_NUMERATOR as f64 / BETA_CUBIC_DENOMINATOR as f64;
/// RFC 9438 §4.3: α_cubic = 3 × (1 − β_cubic) / (1 + β_cubic), the additive increase
/// that gives CUBIC Reno's average window under the same loss rate.
const ALPHA_CUBIC: f64 = 3.0 * (1.0 - BETA_CUBIC) / (1.0 + BETA_CUBIC);
/// RFC 9438 §4.2: the target never exceeds 1.5 × cwnd ("cwnd + cwnd/2").
const MAX_TARGET_FACTOR: f64 = 1.5;
/// RFC 9002 §7.2: kMinimumWindow = 2 × max_datagram_size.
const MINIMUM_WINDOW_PACKETS: u64 = 2;

/// Delivery rate samples are kept for one to two of these, and at least five
/// minimum RTTs, so the BDP floor follows a path whose rate fell within seconds.
const RATE_BUCKET: Duration = Duration::from_secs(1);
const RATE_BUCKET_MIN_RTTS: u32 = 5;

/// K in seconds for a window that has to climb from `cwnd_epoch` back to `w_max`
/// (both in segments), RFC 9438 §4.2 Figure 2; 0 when there is nothing to climb.
pub fn cubic_k(w_max_segments: f64, cwnd_epoch_segments: f64) -> f64 {
    ((w_max_segments - cwnd_epoch_segments).max(0.0) / CUBIC_C).cbrt()
}

/// W_cubic(t) in segments, RFC 9438 §4.2 Figure 1.
pub fn w_cubic(t_seconds: f64, k_seconds: f64, w_max_segments: f64) -> f64 {
    let offset = t_seconds - k_seconds;
    CUBIC_C * offset * offset * offset + w_max_segments
}

/// The state of one congestion avoidance stage (RFC 9438 §4.2's "epoch").
#[derive(Clone, Copy, Debug, PartialEq)]
struct Epoch {
    /// t = 0 of W_cubic, moved forward over application-limited periods.
    start: Instant,
    /// K in seconds.
    k: f64,
    /// W_max in segments for this stage.
    w_max: f64,
    /// W_est in bytes (RFC 9438 §4.3).
    w_est: f64,
}

#[derive(Clone, Debug)]
pub struct Cubic {
    max_datagram_size: u64,
    window: u64,
    ssthresh: u64,
    /// Start of the current (or last) recovery period, RFC 9002 §7.3.2.
    recovery_start: Option<Instant>,
    /// Whether acknowledgements are still for packets sent before `recovery_start`.
    in_recovery: bool,
    /// W_max in segments from the last congestion event; `None` before any, and after
    /// persistent congestion (RFC 9438 §4.8: the next stage takes its own start window).
    w_max: Option<f64>,
    /// cwnd just before the last reduction, in bytes (RFC 9438 §4.3 cwnd_prior).
    cwnd_prior: f64,
    epoch: Option<Epoch>,
    /// Fractional bytes of window increase not yet added to `window`.
    increase_carry: f64,
    last_ack: Option<Instant>,
    /// Largest delivery rate sample (bytes/s) of the current and the previous bucket.
    max_rate: [u64; 2],
    rate_bucket_start: Option<Instant>,
    min_rtt: Option<Duration>,
}

impl Cubic {
    pub fn new(max_datagram_size: u64) -> Self {
        let max_datagram_size = max_datagram_size.max(1);
        let window = initial_window(max_datagram_size);
        Self {
            max_datagram_size,
            window,
            ssthresh: u64::MAX,
            recovery_start: None,
            in_recovery: false,
            w_max: None,
            cwnd_prior: window as f64,
            epoch: None,
            increase_carry: 0.0,
            last_ack: None,
            max_rate: [0; 2],
            rate_bucket_start: None,
            min_rtt: None,
        }
    }

    /// The measured bandwidth-delay product in bytes: the largest recent delivery
    /// rate times the minimum RTT, once both are known.
    pub fn bdp(&self) -> Option<u64> {
        let rate = self.max_rate[0].max(self.max_rate[1]);
        let min_rtt = self.min_rtt?;
        (rate > 0).then(|| bytes_in(rate, min_rtt))
    }

    fn record_rate(&mut self, now: Instant, rtt: &RttEstimator, signals: &AckSignals) {
        self.min_rtt = rtt.min();
        let bucket = self.min_rtt.map_or(RATE_BUCKET, |min_rtt| {
            RATE_BUCKET.max(min_rtt * RATE_BUCKET_MIN_RTTS)
        });
        let start = *self.rate_bucket_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= bucket {
            self.max_rate = [0, self.max_rate[0]];
            self.rate_bucket_start = Some(now);
        }
        let Some(sample) = signals.delivery_rate else {
            return;
        };
        // BBR's rule: an application-limited sample understates the path and only
        // counts when it is larger.
        if signals.app_limited && sample <= self.max_rate[0].max(self.max_rate[1]) {
            return;
        }
        self.max_rate[0] = self.max_rate[0].max(sample);
    }

    /// Slow start threshold in bytes (`u64::MAX` before the first congestion event).
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// W_max in bytes, if a congestion event has set one.
    pub fn w_max(&self) -> Option<u64> {
        self.w_max
            .map(|segments| (segments * self.max_datagram_size as f64) as u64)
    }

    /// K of the current congestion avoidance stage, once it has started.
    pub fn k(&self) -> Option<Duration> {
        self.epoch.map(|epoch| Duration::from_secs_f64(epoch.k))
    }

    fn minimum_window(&self) -> u64 {
        MINIMUM_WINDOW_PACKETS * self.max_datagram_size
    }

    fn segments(&self, bytes: f64) -> f64 {
        bytes / self.max_datagram_size as f64
    }

    fn grow(&mut self, increase_bytes: f64) {
        self.increase_carry += increase_bytes.max(0.0);
        let whole = self.increase_carry.floor();
        self.increase_carry -= whole;
        self.window = self.window.saturating_add(whole as u64);
    }

    /// Starts a congestion avoidance stage at `now` (RFC 9438 §4.2, §4.8).
    fn start_epoch(&mut self, now: Instant) -> Epoch {
        let cwnd_segments = self.segments(self.window as f64);
        let (w_max, k) = match self.w_max {
            Some(w_max) if w_max > cwnd_segments => (w_max, cubic_k(w_max, cwnd_segments)),
            // No loss yet, a timeout, or the window already above W_max: the curve
            // starts on its plateau at the current window.
            _ => (cwnd_segments, 0.0),
        };
        let epoch = Epoch {
            start: now,
            k,
            w_max,
            w_est: self.window as f64,
        };
        self.epoch = Some(epoch);
        epoch
    }

    fn congestion_avoidance(&mut self, now: Instant, bytes: u64, rtt: &RttEstimator) {
        let mut epoch = match self.epoch {
            Some(epoch) => epoch,
            None => self.start_epoch(now),
        };
        let cwnd = self.window as f64;
        let mds = self.max_datagram_size as f64;
        let acked = bytes as f64;

        // §4.3: W_est += α × segments_acked / cwnd (in segments), i.e. in bytes
        // α × acked × mds / cwnd.
        let alpha = if epoch.w_est >= self.cwnd_prior {
            1.0
        } else {
            ALPHA_CUBIC
        };
        epoch.w_est += alpha * acked * mds / cwnd;
        self.epoch = Some(epoch);

        let t = now.saturating_duration_since(epoch.start).as_secs_f64();
        let cubic_now = w_cubic(t, epoch.k, epoch.w_max) * mds;
        if cubic_now < epoch.w_est {
            // Reno-friendly region: follow W_est.
            if epoch.w_est > cwnd {
                self.grow(epoch.w_est - cwnd);
            }
            return;
        }
        // Concave or convex region, §4.4 / §4.5.
        let srtt = rtt.smoothed().unwrap_or_default().as_secs_f64();
        let target =
            (w_cubic(t + srtt, epoch.k, epoch.w_max) * mds).clamp(cwnd, MAX_TARGET_FACTOR * cwnd);
        // (target − cwnd) / cwnd segments per acknowledged segment, in bytes.
        self.grow((target - cwnd) * acked / cwnd);
    }
}

impl Controller for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        rtt: &RttEstimator,
        signals: &AckSignals,
    ) {
        let previous_ack = self.last_ack.replace(now);
        self.record_rate(now, rtt, signals);
        if self.in_recovery {
            match self.recovery_start {
                // RFC 9002 §7.3.2: no growth for packets sent before recovery began.
                Some(start) if sent <= start => return,
                _ => self.in_recovery = false,
            }
        }
        if signals.app_limited {
            // RFC 9438 §5.8: no growth, and t excludes the application-limited time.
            if let (Some(epoch), Some(previous)) = (self.epoch.as_mut(), previous_ack) {
                epoch.start += now.saturating_duration_since(previous);
            }
            return;
        }
        if self.in_slow_start() {
            // RFC 9002 §7.3.1: grow by the bytes acknowledged. Stop at ssthresh; the
            // rest of this acknowledgement does not count towards avoidance.
            self.window = self.window.saturating_add(bytes).min(self.ssthresh);
            return;
        }
        self.congestion_avoidance(now, bytes, rtt);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        _lost_bytes: u64,
    ) {
        let same_event = self.recovery_start.is_some_and(|start| sent <= start);
        if !same_event {
            let cwnd = self.window as f64;
            let cwnd_segments = self.segments(cwnd);
            // §4.7 fast convergence: a loss below the previous W_max releases bandwidth.
            let w_max = match self.w_max {
                Some(previous) if cwnd_segments < previous => {
                    cwnd_segments * (1.0 + BETA_CUBIC) / 2.0
                }
                _ => cwnd_segments,
            };
            self.w_max = Some(w_max);
            self.cwnd_prior = cwnd;
            // §4.6: ssthresh = cwnd × β_cubic, never below the minimum window, nor
            // below the measured BDP (see the module docs).
            let reduced = self.window / BETA_CUBIC_DENOMINATOR * BETA_CUBIC_NUMERATOR
                + self.window % BETA_CUBIC_DENOMINATOR * BETA_CUBIC_NUMERATOR
                    / BETA_CUBIC_DENOMINATOR;
            let pipe = self.bdp().unwrap_or(0).min(self.window);
            self.ssthresh = reduced.max(pipe).max(self.minimum_window());
            self.window = self.ssthresh;
            self.recovery_start = Some(now);
            self.in_recovery = true;
            self.epoch = None;
            self.increase_carry = 0.0;
        }
        if persistent {
            // RFC 9002 §7.6.2 and RFC 9438 §4.8: collapse to the minimum window, slow
            // start back to ssthresh, then start the next stage with K = 0. RFC 9002
            // clears the recovery start so that acknowledgements of packets already in
            // flight grow the window again; keeping it (with recovery over) does that
            // too and still ignores the losses of those packets.
            self.window = self.minimum_window();
            self.w_max = None;
            self.epoch = None;
            self.recovery_start = Some(now);
            self.in_recovery = false;
            self.increase_carry = 0.0;
        }
    }

    fn in_slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn initial_window(&self) -> u64 {
        initial_window(self.max_datagram_size)
    }
}

#[cfg(test)]
#[path = "cubic_tests.rs"]
mod tests;
