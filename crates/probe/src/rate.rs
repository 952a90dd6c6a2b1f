//! Delivery-rate estimation after draft-cheng-iccrg-delivery-rate-estimation-02
//! section 3, "Detailed Algorithm" (the algorithm Linux TCP and BBR use): the
//! per-connection state (`C.delivered`, `C.delivered_time`, `C.first_sent_time`,
//! `C.app_limited`), the per-packet state stamped at send time ("Transmitting a data
//! packet"), the sample taken on acknowledgement ("Upon receiving an ACK") and the
//! marking of application-limited phases ("Detecting application-limited phases").
//!
//! A sample covers the interval from the acknowledgement that preceded the newest
//! acknowledged packet's send to now; it divides the bytes delivered in that interval
//! by the longer of the send and the acknowledgement phases, so the rate is the smaller
//! of the send rate and the acknowledgement rate.
//!
//! The send rate is also capped at the pacer's rate when the newest packet left: a
//! paced sender releases bursts (a millisecond at its rate, more after a late wake)
//! that leave as one, so their send phase is near zero, and a token bucket with room
//! passes them at line rate. On 20 Mbit/s tbf uplinks with a 32 kB bucket and a
//! 0.05 ms RTT, such samples read 0.2-1.9 Gbit/s, the pacing rate followed, the next
//! bursts were larger, and the estimate stayed there. Capped, a sample shows at most
//! what was sent, and the estimate grows by the pacing gain per round trip, as BBR's
//! model has it.

use std::time::{Duration, Instant};

use crate::sent::SentPacket;

/// One delivery-rate sample (the draft's `rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes per second.
    pub delivery_rate: u64,
    /// The interval the rate was measured over.
    pub interval: Duration,
    /// The bytes delivered over `interval`.
    pub delivered: u64,
    /// The sender was application-limited when the newest acknowledged packet was
    /// sent: the sample may understate the path.
    pub app_limited: bool,
}

/// The state of the sample being built from one acknowledgement (draft `rs.*`).
#[derive(Clone, Copy, Debug)]
struct PendingSample {
    newest_number: u64,
    prior_delivered: u64,
    send_elapsed: Duration,
    ack_elapsed: Duration,
    app_limited: bool,
    send_rate: u64,
}

/// Connection-level rate sampling state of one path (draft `C.*`).
#[derive(Clone, Debug)]
pub struct RateEstimator {
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent_time: Option<Instant>,
    /// `C.app_limited`: the value `delivered` must exceed before samples stop being
    /// marked application-limited; 0 when not application-limited.
    app_limited_until: u64,
    pending: Option<PendingSample>,
    latest: Option<RateSample>,
}

impl Default for RateEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl RateEstimator {
    pub fn new() -> Self {
        Self {
            delivered: 0,
            delivered_time: None,
            first_sent_time: None,
            app_limited_until: 0,
            pending: None,
            latest: None,
        }
    }

    /// "Detecting application-limited phases": called when the sender has nothing more to send although
    /// the window has room. Everything in flight now, and everything sent until it is
    /// delivered, yields application-limited samples.
    pub fn mark_app_limited(&mut self, bytes_in_flight: u64) {
        self.app_limited_until = (self.delivered + bytes_in_flight).max(1);
    }

    /// The draft's `OnPacketSent`: stamps `packet` with the connection state.
    /// `nothing_in_flight` tells whether the path was idle before this packet.
    pub fn on_packet_sent(
        &mut self,
        now: Instant,
        nothing_in_flight: bool,
        packet: &mut SentPacket,
    ) {
        if nothing_in_flight || self.delivered_time.is_none() {
            self.first_sent_time = Some(now);
            self.delivered_time = Some(now);
        }
        packet.delivered = self.delivered;
        packet.delivered_time = self.delivered_time.unwrap_or(now);
        packet.first_sent_time = self.first_sent_time.unwrap_or(now);
        packet.app_limited = self.app_limited_until != 0;
    }

    /// The draft's `UpdateRateSample`: one packet newly acknowledged at `now`;
    /// `number` is its widened packet number (newer packets have larger ones).
    pub fn on_packet_acked(&mut self, now: Instant, number: u64, packet: &SentPacket) {
        self.delivered += packet.bytes;
        self.delivered_time = Some(now);
        let newest = self
            .pending
            .is_none_or(|pending| number > pending.newest_number);
        if newest {
            self.pending = Some(PendingSample {
                newest_number: number,
                prior_delivered: packet.delivered,
                send_elapsed: packet
                    .time
                    .saturating_duration_since(packet.first_sent_time),
                ack_elapsed: now.saturating_duration_since(packet.delivered_time),
                app_limited: packet.app_limited,
                send_rate: packet.send_rate,
            });
            self.first_sent_time = Some(packet.time);
        }
    }

    /// The draft's `GenerateRateSample`: closes the sample of the current
    /// acknowledgement. `None` when nothing was delivered, or when the interval is
    /// shorter than `min_rtt` (acknowledgement compression makes such samples
    /// unreliable, as the draft says).
    pub fn finish_sample(&mut self, min_rtt: Option<Duration>) -> Option<RateSample> {
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let pending = self.pending.take()?;
        let interval = pending.send_elapsed.max(pending.ack_elapsed);
        if interval.is_zero() || min_rtt.is_some_and(|min_rtt| interval < min_rtt) {
            return None;
        }
        let delivered = self.delivered - pending.prior_delivered;
        let rate = u128::from(delivered) * 1_000_000_000 / interval.as_nanos();
        let sample = RateSample {
            delivery_rate: u64::try_from(rate)
                .unwrap_or(u64::MAX)
                .min(pending.send_rate),
            interval,
            delivered,
            app_limited: pending.app_limited,
        };
        // An application-limited sample only counts when it shows more than the
        // current estimate (the rule BBR applies to its bandwidth filter,
        // draft-cardwell-iccrg-bbr-congestion-control): a sender that had too little to send cannot see the path's limit.
        let keep = !sample.app_limited
            || self
                .latest
                .is_none_or(|latest| sample.delivery_rate >= latest.delivery_rate);
        if keep {
            self.latest = Some(sample);
        }
        Some(sample)
    }

    /// The current estimate: the latest sample kept by the rule in [`Self::finish_sample`].
    pub fn latest(&self) -> Option<RateSample> {
        self.latest
    }

    /// `C.delivered`: bytes acknowledged on the path so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    pub fn is_app_limited(&self) -> bool {
        self.app_limited_until != 0
    }
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
