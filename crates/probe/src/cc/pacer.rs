//! A token-bucket pacer that spreads a path's window over its round trip, so a modem
//! receives a steady stream instead of window-sized bursts (RFC 9002 §7.7).
//!
//! - Rate: the controller's pacing rate when it has one, else
//!   N × window / smoothed_rtt with N = 1.25 (RFC 9002 §7.7's example value: a little
//!   above 1 so that RTT variation does not leave the window unused).
//! - Capacity (the largest burst): max(2, min(window / 8 / mds, 10)) datagrams, or the
//!   send quantum when that is larger: 1 ms at the pacing rate, at most 64 KiB (BBR
//!   draft-02 §4.6.3; Linux's TSO autosizing likewise sends 1 ms bursts). Above
//!   120 Mbit/s ten datagrams last less than a millisecond, less than the event loop's
//!   timer can wait, so without it a fast path is paced below its rate (on an unshaped
//!   veth: 2.0 Gbit/s paced, 3.4 Gbit/s with per-path CUBIC).
//! - Tokens refill in proportion to the time since the last refill, capped at capacity.
//!   They are counted in nanobyte units (bytes × 10⁹) so that `rate × elapsed` is
//!   exact integer arithmetic: refills every microsecond at 1 Mbit/s still add up.
//! - A sender that wakes after the instant the pacer gave it may, at that instant, spend
//!   the tokens of its lateness (up to 2 ms of them) above the cap: the event loop's
//!   timer wakes a millisecond or two late (tokio's 1 ms wheel, rounded up, plus
//!   scheduling), and a bucket of about 1 ms (a fast path's quantum, or an eighth of a
//!   short round trip) otherwise lost each wake's lateness and paced the path below its
//!   rate. The burst is what on-time wakes would have sent by then.
//!
//! Without a rate (no pacing rate and a zero or missing RTT) nothing can be paced and
//! every packet may go at once; the bucket is kept full so pacing starts with a burst
//! allowance once a rate is known.

use std::time::{Duration, Instant};

use super::send_quantum;

const NANOS_PER_SECOND: u128 = 1_000_000_000;
/// RFC 9002 §7.7: pace at N = 1.25 × window / srtt.
const WINDOW_RATE_NUMERATOR: u128 = 5;
const WINDOW_RATE_DENOMINATOR: u128 = 4;
/// Burst floor: RFC 9002 §7.2's minimum window is 2 datagrams, so a path may always
/// send two back to back.
const MIN_BURST_PACKETS: u64 = 2;
/// Burst ceiling: RFC 9002 §7.7 limits bursts to the initial window, 10 datagrams.
const MAX_BURST_PACKETS: u64 = 10;
/// A burst never exceeds an eighth of the window, i.e. an eighth of a round trip at the
/// pacing rate, so a small window on a slow modem is still spread out.
const BURST_WINDOW_DIVISOR: u64 = 8;
/// The most lateness of a wake the bucket makes up for: a longer one is the sender's
/// own pause (busy or idle), and its whole worth at once could overflow a shallow buffer.
const MAX_CATCH_UP: Duration = Duration::from_millis(2);

#[derive(Clone, Debug)]
pub struct Pacer {
    max_datagram_size: u64,
    /// Tokens in bytes × 10⁹; `None` stands for a full bucket (before pacing starts).
    tokens: Option<u128>,
    /// Capacity in bytes × 10⁹ at the last call.
    capacity: u128,
    /// Rate in bytes per second at the last call; 0 when nothing could be paced.
    rate: u64,
    last_refill: Option<Instant>,
    /// The send time `delay` last gave, until a refill at or after it.
    due: Option<Instant>,
    /// A late wake's instant and the tokens (× 10⁹) of its lateness, which the bucket
    /// may hold above its capacity at that instant.
    catch_up: Option<(Instant, u128)>,
}

impl Pacer {
    pub fn new(max_datagram_size: u64) -> Self {
        Self {
            max_datagram_size: max_datagram_size.max(1),
            tokens: None,
            capacity: 0,
            rate: 0,
            last_refill: None,
            due: None,
            catch_up: None,
        }
    }

    /// The burst the bucket holds for `window` at `rate` bytes per second, in bytes.
    pub fn capacity(&self, window: u64, rate: u64) -> u64 {
        let packets = (window / BURST_WINDOW_DIVISOR / self.max_datagram_size)
            .clamp(MIN_BURST_PACKETS, MAX_BURST_PACKETS);
        (packets * self.max_datagram_size).max(send_quantum(rate))
    }

    /// The pacing rate in bytes per second, `None` when there is none to pace at.
    pub fn rate(window: u64, srtt: Duration, pacing_rate: Option<u64>) -> Option<u64> {
        if let Some(rate) = pacing_rate.filter(|&rate| rate > 0) {
            return Some(rate);
        }
        let srtt_nanos = srtt.as_nanos();
        if srtt_nanos == 0 {
            return None;
        }
        let rate = u128::from(window) * WINDOW_RATE_NUMERATOR * NANOS_PER_SECOND
            / (WINDOW_RATE_DENOMINATOR * srtt_nanos);
        Some(u64::try_from(rate).unwrap_or(u64::MAX)).filter(|&rate| rate > 0)
    }

    /// When a packet of `bytes` may leave: `None` for now, else the earliest instant.
    pub fn delay(
        &mut self,
        now: Instant,
        bytes: u64,
        window: u64,
        srtt: Duration,
        pacing_rate: Option<u64>,
    ) -> Option<Instant> {
        let rate = Self::rate(window, srtt, pacing_rate);
        self.capacity = u128::from(self.capacity(window, rate.unwrap_or(0))) * NANOS_PER_SECOND;
        let Some(rate) = rate else {
            self.rate = 0;
            self.tokens = None;
            self.last_refill = Some(now);
            return None;
        };
        self.rate = rate;
        self.refill(now);
        let tokens = self.tokens.unwrap_or(self.capacity);
        // A packet larger than the whole bucket goes when the bucket is full.
        let needed = (u128::from(bytes) * NANOS_PER_SECOND).min(self.capacity);
        if tokens >= needed {
            return None;
        }
        let wait_nanos = (needed - tokens).div_ceil(u128::from(rate));
        let wait = Duration::from_nanos(u64::try_from(wait_nanos).unwrap_or(u64::MAX));
        let due = now + wait;
        self.due = Some(due);
        Some(due)
    }

    /// Takes `bytes` worth of tokens for a packet that left at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.rate == 0 {
            // Not pacing (no rate yet): the bucket stays full for when pacing starts.
            self.tokens = None;
            return;
        }
        self.refill(now);
        let tokens = self.tokens.unwrap_or(self.capacity);
        self.tokens = Some(tokens.saturating_sub(u128::from(bytes) * NANOS_PER_SECOND));
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = self
            .last_refill
            .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        if let Some(due) = self.due.filter(|&due| now >= due) {
            self.due = None;
            let lateness = now.saturating_duration_since(due).min(MAX_CATCH_UP);
            self.catch_up = Some((now, u128::from(self.rate) * lateness.as_nanos()));
        }
        let extra = match self.catch_up {
            Some((at, extra)) if at == now => extra,
            _ => 0,
        };
        let tokens = match self.tokens {
            None => self.capacity,
            Some(tokens) => tokens + u128::from(self.rate) * elapsed.as_nanos(),
        };
        self.tokens = Some(tokens.min(self.capacity + extra));
        if self.last_refill.is_none_or(|last| now > last) {
            self.last_refill = Some(now);
        }
    }
}

#[cfg(test)]
#[path = "pacer_tests.rs"]
mod tests;
