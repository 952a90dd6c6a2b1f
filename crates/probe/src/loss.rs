//! Loss detection and the probe timeout after RFC 9002: section 6.1 (acknowledgement
//! based detection with a packet threshold and a time threshold), section 6.2 (probe
//! timeout), section 7.6 (persistent congestion), with the pseudocode of appendix A.10
//! (`DetectAndRemoveLostPackets`) and A.8 (`GetPtoTimeAndSpace`) as the model.
//!
//! A tunnel path never retransmits by itself: a lost packet is handed back to the
//! caller (who may reinject its inner packet on another path), and a probe timeout
//! asks the caller for one ack-eliciting datagram to provoke feedback. The detector
//! also keeps a loss rate, an exponentially weighted moving average over packets.
//!
//! Both thresholds adapt to reordering, as RFC 9002 section 6.1 allows and RACK's
//! reordering window does (RFC 8985 section 6.2): a packet declared lost and then
//! acknowledged raises the packet threshold to the distance it was overtaken by, and
//! widens the time threshold until its round trip fits, up to twice the RTT. A path
//! that reorders (an emulator's per-packet jitter, a link bonding two radios) then
//! stops reporting each late packet as a loss: every such loss cost a needless
//! re-send on another path and counted towards the loss rate that the delay-rate
//! controller takes for congestion above 2 %.
//!
//! What was learned is forgotten as RACK forgets it (RFC 8985 section 6.2, step 4):
//! after [`REORDERING_PERSISTENCE`] loss detection rounds that found losses while no
//! packet came later than the starting thresholds allow, both return to their
//! starting values. A path that reordered once, in a handover, then finds its genuine
//! losses as early as before; a path that keeps reordering keeps its thresholds.

use std::time::{Duration, Instant};

use crate::rtt::RttEstimator;
use crate::sent::{PacketState, SentPacket, SentPackets};

/// RFC 9002 section 6.1.1, kPacketThreshold: a packet is lost once a packet sent this
/// many packet numbers later is acknowledged. The starting value, for a path that has
/// shown no reordering; see [`LossDetector::packet_threshold`]. RFC 9002 recommends 3
/// for a threshold that never adapts; this one grows with the reordering seen, so it
/// starts where RACK's reordering window does before any reordering (zero, RFC 8985
/// section 6.2). A radio path delivers in order, and each of its losses holds up the
/// inner stream until the repair arrives. Against 3, the receiver's mean hold fell in
/// 10 of 12 lossy benchmark cells, by up to 5 ms, and no path of the 48-cell matrix
/// declared a spurious loss.
pub const PACKET_THRESHOLD: u64 = 1;
/// The most a path's packet threshold grows to. The time threshold still declares a
/// loss at most one RTT after its acknowledgement was due, so a high count costs
/// little.
pub const MAX_PACKET_THRESHOLD: u64 = 256;
/// RFC 9002 section 6.1.2, kTimeThreshold = 9/8: the RTT plus an eighth of it, the
/// slack being the RTT shifted right by this much. Spurious losses shift it down to 0:
/// twice the RTT, RACK's cap of the reordering window at one RTT (RFC 8985 section
/// 6.2).
pub const TIME_THRESHOLD_SLACK_SHIFT: u32 = 3;
/// RFC 8985 section 6.2, reo_wnd_persist: the thresholds return to their starting
/// values after this many rounds that found losses without any reordering beyond
/// the starting values in between.
pub const REORDERING_PERSISTENCE: u32 = 16;
/// RFC 9002 section 6.1.2, kGranularity: the recommended 1 ms timer granularity.
pub const GRANULARITY: Duration = Duration::from_millis(1);
/// RFC 9002 section 7.6.1, kPersistentCongestionThreshold.
pub const PERSISTENT_CONGESTION_THRESHOLD: u32 = 3;
/// RFC 9002 section 6.2.2 (kInitialRtt): the RTT assumed before the first sample.
pub const INITIAL_RTT: Duration = Duration::from_millis(333);
/// The PTO backs off by two per consecutive expiry (RFC 9002 section 6.2.1); the
/// exponent stops growing here (x1024: 1 s becomes 17 minutes) so it cannot overflow.
const MAX_PTO_BACKOFF_EXPONENT: u32 = 10;
/// Weight of one packet's outcome in the loss-rate average, 1/128. A path's loss rate
/// matters to the scheduler in the 0.1 %-10 % range; with weight w a single loss
/// moves the average by w, so 1/128 resolves about 1 % and remembers roughly the last
/// 128 packets: a few round trips on a fast path, a few seconds on a 1 Mbit/s one.
pub const LOSS_RATE_WEIGHT: f64 = 1.0 / 128.0;

/// What one loss detection pass declared lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossRound {
    pub lost_packets: u32,
    pub lost_bytes: u64,
    /// Send time of the newest packet declared lost (the argument of the congestion
    /// event, RFC 9002 appendix B.8 `OnPacketsLost`).
    pub newest_lost_sent: Option<Instant>,
    /// RFC 9002 section 7.6: the lost packets span more than the persistent congestion
    /// duration with nothing acknowledged in between.
    pub persistent_congestion: bool,
}

/// Loss detection state of one path (RFC 9002 appendix A.3 variables).
#[derive(Clone, Debug)]
pub struct LossDetector {
    initial_rtt: Duration,
    max_ack_delay: Duration,
    largest_acked: Option<u64>,
    loss_time: Option<Instant>,
    pto_count: u32,
    last_ack_eliciting_sent: Option<Instant>,
    first_rtt_sample: Option<Instant>,
    loss_rate: f64,
    lost_packets: u64,
    spurious_losses: u64,
    /// Loss rounds that declared persistent congestion.
    persistent_congestions: u64,
    /// Grows from [`PACKET_THRESHOLD`] with the reordering seen.
    packet_threshold: u64,
    /// Shrinks from [`TIME_THRESHOLD_SLACK_SHIFT`] with the reordering seen.
    time_threshold_slack_shift: u32,
    /// Loss-finding rounds left before both thresholds return to their starting
    /// values; 0 while they are there.
    reordering_rounds_left: u32,
}

impl LossDetector {
    /// `max_ack_delay` is the peer's: how long it may hold an acknowledgement back.
    pub fn new(initial_rtt: Duration, max_ack_delay: Duration) -> Self {
        Self {
            initial_rtt,
            max_ack_delay,
            largest_acked: None,
            loss_time: None,
            pto_count: 0,
            last_ack_eliciting_sent: None,
            first_rtt_sample: None,
            loss_rate: 0.0,
            lost_packets: 0,
            spurious_losses: 0,
            persistent_congestions: 0,
            packet_threshold: PACKET_THRESHOLD,
            time_threshold_slack_shift: TIME_THRESHOLD_SLACK_SHIFT,
            reordering_rounds_left: 0,
        }
    }

    /// Smoothed RTT and RTT variance, the RFC 9002 section 6.2.2 initial values
    /// (`initial_rtt`, `initial_rtt / 2`) before the first sample.
    fn rtt_or_initial(&self, rtt: &RttEstimator) -> (Duration, Duration) {
        match rtt.smoothed() {
            Some(smoothed) => (smoothed, rtt.variance()),
            None => (self.initial_rtt, self.initial_rtt / 2),
        }
    }

    /// RFC 9002 section 6.1.2: kTimeThreshold * max(smoothed_rtt, latest_rtt), at least
    /// kGranularity; kTimeThreshold is 9/8 until reordering widens it (see the module
    /// documentation).
    pub fn loss_delay(&self, rtt: &RttEstimator) -> Duration {
        let (smoothed, _) = self.rtt_or_initial(rtt);
        let base = rtt.latest().map_or(smoothed, |latest| latest.max(smoothed));
        let slack = base / (1 << self.time_threshold_slack_shift);
        (base + slack).max(GRANULARITY)
    }

    /// RFC 9002 section 6.2.1 without backoff: smoothed_rtt + max(4 * rttvar,
    /// kGranularity) + max_ack_delay.
    pub fn pto_base(&self, rtt: &RttEstimator) -> Duration {
        let (smoothed, variance) = self.rtt_or_initial(rtt);
        smoothed + (variance * 4).max(GRANULARITY) + self.max_ack_delay
    }

    /// The probe timeout with the current backoff: [`Self::pto_base`] * 2^pto_count.
    pub fn pto_period(&self, rtt: &RttEstimator) -> Duration {
        self.pto_base(rtt) * (1 << self.pto_count.min(MAX_PTO_BACKOFF_EXPONENT))
    }

    /// RFC 9002 section 7.6.1: (PTO without backoff) * kPersistentCongestionThreshold.
    pub fn persistent_congestion_duration(&self, rtt: &RttEstimator) -> Duration {
        self.pto_base(rtt) * PERSISTENT_CONGESTION_THRESHOLD
    }

    pub fn on_packet_sent(&mut self, now: Instant) {
        self.last_ack_eliciting_sent = Some(now);
    }

    /// An acknowledgement arrived whose largest acknowledged number is `largest`.
    pub fn on_ack_received(&mut self, largest: u64) {
        self.largest_acked = Some(self.largest_acked.map_or(largest, |old| old.max(largest)));
    }

    /// RFC 9002 appendix A.7: the PTO backoff resets when an acknowledgement newly
    /// acknowledges something.
    pub fn on_packets_newly_acked(&mut self, count: u32) {
        if count > 0 {
            self.pto_count = 0;
        }
        for _ in 0..count {
            self.loss_rate += (0.0 - self.loss_rate) * LOSS_RATE_WEIGHT;
        }
    }

    /// Packet `number`, sent at `sent_time` and declared lost, was acknowledged at
    /// `now` after all; call it before [`Self::on_ack_received`] for the
    /// acknowledgement that says so. Both thresholds grow until it would not have been
    /// declared lost (RFC 8985 section 6.2), and the loss leaves the loss rate.
    pub fn on_spurious_loss(
        &mut self,
        now: Instant,
        number: u64,
        sent_time: Instant,
        rtt: &RttEstimator,
    ) {
        self.spurious_losses += 1;
        self.loss_rate = (self.loss_rate - LOSS_RATE_WEIGHT).max(0.0);
        if let Some(largest) = self.largest_acked {
            let overtaken_by = largest.saturating_sub(number).saturating_add(1);
            self.packet_threshold = self
                .packet_threshold
                .max(overtaken_by.min(MAX_PACKET_THRESHOLD));
        }
        let round_trip = now.saturating_duration_since(sent_time);
        while self.time_threshold_slack_shift > 0 && self.loss_delay(rtt) < round_trip {
            self.time_threshold_slack_shift -= 1;
        }
        self.reordering_rounds_left = REORDERING_PERSISTENCE;
    }

    /// Packet `number` was acknowledged while in flight; call it before
    /// [`Self::on_ack_received`] for this acknowledgement. If a later packet was
    /// acknowledged first, the starting threshold would have declared it lost: the
    /// reordering learned is still needed, and the countdown to forgetting it starts
    /// again.
    pub fn on_overtaken_ack(&mut self, number: u64) {
        // With a starting threshold of 1, any overtaking is beyond it, whatever the time.
        const _: () = assert!(PACKET_THRESHOLD == 1);
        if self.reordering_rounds_left > 0
            && self.largest_acked.is_some_and(|largest| number < largest)
        {
            self.reordering_rounds_left = REORDERING_PERSISTENCE;
        }
    }

    /// A detection round found losses: one round closer to forgetting the reordering
    /// learned (RFC 8985 section 6.2, step 4).
    fn count_round_towards_forgetting(&mut self) {
        if self.reordering_rounds_left == 0 {
            return;
        }
        self.reordering_rounds_left -= 1;
        if self.reordering_rounds_left == 0 {
            self.packet_threshold = PACKET_THRESHOLD;
            self.time_threshold_slack_shift = TIME_THRESHOLD_SLACK_SHIFT;
        }
    }

    /// A packet is lost once a packet sent this many numbers later is acknowledged:
    /// [`PACKET_THRESHOLD`], grown by the reordering seen up to
    /// [`MAX_PACKET_THRESHOLD`].
    pub fn packet_threshold(&self) -> u64 {
        self.packet_threshold
    }

    /// RFC 9002 section 7.6.2: only packets sent after the first RTT sample count
    /// towards persistent congestion.
    pub fn on_rtt_sample(&mut self, now: Instant) {
        self.first_rtt_sample.get_or_insert(now);
    }

    /// RFC 9002 appendix A.10 `DetectAndRemoveLostPackets`: declares lost every
    /// in-flight packet at or below the largest acknowledged that is
    /// [`Self::packet_threshold`] numbers older or was sent [`Self::loss_delay`] before `now`,
    /// hands each to `on_lost`, and arms the loss timer for the earliest remaining one.
    pub fn detect_lost(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        sent: &mut SentPackets,
        mut on_lost: impl FnMut(&SentPacket),
    ) -> LossRound {
        self.loss_time = None;
        let mut round = LossRound::default();
        let Some(largest_acked) = self.largest_acked else {
            return round;
        };
        let loss_delay = self.loss_delay(rtt);
        let lost_send_time = now.checked_sub(loss_delay);
        let congestion_duration = self.persistent_congestion_duration(rtt);
        // The current run of newly lost packets with nothing acknowledged in between:
        // send time of its first packet.
        let mut run_start: Option<Instant> = None;
        for index in 0..sent.len() {
            let number = sent.number(index);
            if number > largest_acked {
                break;
            }
            match sent.state(index) {
                PacketState::AckedNow | PacketState::Acked => {
                    run_start = None;
                    continue;
                }
                PacketState::Lost => continue,
                PacketState::InFlight => {}
            }
            let sent_time = sent.packet(index).time;
            let lost_by_time = lost_send_time.is_some_and(|limit| sent_time <= limit);
            let lost_by_count = largest_acked >= number + self.packet_threshold;
            if !(lost_by_time || lost_by_count) {
                let deadline = sent_time + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(deadline, |t| t.min(deadline)));
                run_start = None;
                continue;
            }
            let Some(packet) = sent.mark_lost(index) else {
                continue;
            };
            on_lost(&packet);
            round.lost_packets += 1;
            round.lost_bytes += packet.bytes;
            round.newest_lost_sent = Some(packet.time);
            self.lost_packets += 1;
            self.loss_rate += (1.0 - self.loss_rate) * LOSS_RATE_WEIGHT;
            if self
                .first_rtt_sample
                .is_some_and(|first| packet.time >= first)
            {
                let start = *run_start.get_or_insert(packet.time);
                if packet.time - start > congestion_duration {
                    round.persistent_congestion = true;
                }
            }
        }
        if round.lost_packets > 0 {
            self.count_round_towards_forgetting();
        }
        if round.persistent_congestion {
            self.persistent_congestions += 1;
        }
        round
    }

    /// Whether the time-threshold loss timer has fired.
    pub fn loss_timer_expired(&self, now: Instant) -> bool {
        self.loss_time.is_some_and(|at| now >= at)
    }

    /// RFC 9002 appendix A.8: the loss timer when armed, otherwise the PTO counted
    /// from the last ack-eliciting send, while anything is in flight.
    pub fn timer(&self, rtt: &RttEstimator, anything_in_flight: bool) -> Option<Instant> {
        if self.loss_time.is_some() {
            return self.loss_time;
        }
        if !anything_in_flight {
            return None;
        }
        self.last_ack_eliciting_sent
            .map(|sent| sent + self.pto_period(rtt))
    }

    /// RFC 9002 section 6.2.1: a probe timeout expired; back off.
    pub fn on_pto(&mut self) {
        self.pto_count = self.pto_count.saturating_add(1);
    }

    /// Forgets the loss timer (everything in flight was handed back).
    pub fn clear_loss_timer(&mut self) {
        self.loss_time = None;
    }

    pub fn pto_count(&self) -> u32 {
        self.pto_count
    }

    /// Fraction of recent packets lost, an EWMA with weight [`LOSS_RATE_WEIGHT`].
    pub fn loss_rate(&self) -> f64 {
        self.loss_rate
    }

    /// Packets declared lost so far.
    pub fn lost_packets(&self) -> u64 {
        self.lost_packets
    }

    /// Packets declared lost and acknowledged later.
    pub fn spurious_losses(&self) -> u64 {
        self.spurious_losses
    }

    /// Loss rounds so far that declared persistent congestion (RFC 9002 section 7.6).
    pub fn persistent_congestions(&self) -> u64 {
        self.persistent_congestions
    }
}

#[cfg(test)]
#[path = "loss_tests.rs"]
mod tests;
