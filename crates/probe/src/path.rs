//! Everything measured about one path, around its congestion controller: the
//! aggregate the session drives.
//!
//! The order of work on an acknowledgement follows RFC 9002 appendix A.7
//! (`OnAckReceived`): take the RTT sample from the largest acknowledged packet if it
//! is newly acknowledged (section 5.1, adjusted by the reported delay per section
//! 5.3), mark the acknowledged packets, detect losses (section 6.1) and report them to
//! the controller as one congestion event (appendix B.8), then tell the controller
//! about the acknowledged packets (appendix B.5), and reset the PTO backoff. The
//! delivery rate, the one-way delay and liveness are fed along the way.

use std::time::{Duration, Instant};

use crate::ack::AckSummary;
use crate::cc::{AckSignals, Controller, Pacer};
use crate::liveness::{Liveness, LivenessChange, LivenessMonitor};
use crate::loss::{LossDetector, LossRound};
use crate::owd::OwdEstimator;
use crate::rate::{RateEstimator, RateSample};
use crate::rtt::RttEstimator;
use crate::sent::{AckOutcome, SentPacket, SentPackets};
use crate::stats::{PathCounters, PathStats};

/// Per-path settings, validated by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    pub max_datagram_size: u64,
    /// The peer's acknowledgement delay limit (its [`crate::AckTracker`] setting).
    pub max_ack_delay: Duration,
    /// RTT assumed before the first sample; RFC 9002 recommends
    /// [`crate::INITIAL_RTT`] (333 ms).
    pub initial_rtt: Duration,
}

/// A packet declared lost; its inner packet (`seq`) may be reinjected elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostPacket {
    pub pn: u32,
    pub seq: Option<u32>,
    pub bytes: u64,
}

/// What one acknowledgement did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckResult {
    /// Packets (and their bytes) acknowledged for the first time.
    pub acked_packets: u32,
    pub acked_bytes: u64,
    /// The raw RTT sample (before the ack-delay adjustment), when the largest
    /// acknowledged packet was newly acknowledged.
    pub rtt_sample: Option<Duration>,
    pub liveness_change: Option<LivenessChange>,
    /// Packets this acknowledgement declared lost (also pushed into `lost`).
    pub lost_packets: u32,
    /// The losses amount to persistent congestion (RFC 9002 section 7.6).
    pub persistent_congestion: bool,
}

/// Measurements and congestion control of one path, sender side.
pub struct PathProbe<C: Controller> {
    pub rtt: RttEstimator,
    config: ProbeConfig,
    controller: C,
    sent: SentPackets,
    loss: LossDetector,
    rate: RateEstimator,
    owd: OwdEstimator,
    liveness: LivenessMonitor,
    counters: PathCounters,
    last_heard: Option<Instant>,
    /// When the newest packet sent on the path was acknowledged with a one-way delay:
    /// the queuing delay is as of then. `None` from the next send on, or when the
    /// newest packet was lost (a path gone dark keeps the queue it showed last).
    queue_measured_at: Option<Instant>,
    /// When the last datagram left on this path.
    last_sent: Option<Instant>,
    pto_probe_pending: bool,
    /// Acknowledgements that acknowledged numbers never sent (malformed input).
    invalid_acks: u64,
}

impl<C: Controller> PathProbe<C> {
    /// A fresh path. `_now` is taken for symmetry with the rest of the API; nothing
    /// is timed before the first send.
    pub fn new(_now: Instant, config: ProbeConfig, controller: C) -> Self {
        Self {
            rtt: RttEstimator::new(),
            config,
            controller,
            // Grows with what the path has in flight (doubling, so a handful of
            // allocations in a path's life); an idle path keeps a few entries.
            sent: SentPackets::default(),
            loss: LossDetector::new(config.initial_rtt, config.max_ack_delay),
            rate: RateEstimator::new(),
            owd: OwdEstimator::new(),
            liveness: LivenessMonitor::new(),
            counters: PathCounters::default(),
            last_heard: None,
            queue_measured_at: None,
            last_sent: None,
            pto_probe_pending: false,
            invalid_acks: 0,
        }
    }

    pub fn config(&self) -> &ProbeConfig {
        &self.config
    }

    /// A datagram left on this path with path packet number `pn` (each send uses the
    /// next number, wrapping). `seq` is the session sequence number of a data packet.
    /// `app_limited`: the sender had nothing more to send although the window had
    /// room (draft-cheng-iccrg-delivery-rate-estimation), so rate samples over this
    /// packet must not lower estimates. A `pn` that does not follow the previous one
    /// is a caller bug; such a packet is not tracked.
    pub fn on_sent(
        &mut self,
        now: Instant,
        pn: u32,
        bytes: u64,
        seq: Option<u32>,
        app_limited: bool,
    ) {
        if app_limited {
            self.rate.mark_app_limited(self.sent.bytes_in_flight());
        }
        let nothing_in_flight = self.sent.packets_in_flight() == 0;
        let sent_into_idle_path = self.idle(now);
        self.last_sent = Some(now);
        self.queue_measured_at = None;
        let mut packet = SentPacket {
            pn,
            time: now,
            bytes,
            seq,
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            app_limited: false,
            send_rate: self.pacing_rate().unwrap_or(u64::MAX),
            sent_into_idle_path,
        };
        self.rate
            .on_packet_sent(now, nothing_in_flight, &mut packet);
        if !self.sent.push(packet) {
            debug_assert!(
                false,
                "path packet number {pn} does not follow the previous one"
            );
            return;
        }
        self.counters.sent_packets += 1;
        self.counters.sent_bytes += bytes;
        if seq.is_some() {
            self.counters.sent_data_packets += 1;
        }
        self.loss.on_packet_sent(now);
        self.liveness.on_sent(now);
        self.controller
            .on_sent(now, bytes, self.sent.bytes_in_flight());
    }

    /// Processes an acknowledgement for this path, pushing packets newly declared lost
    /// into `lost` (which is not cleared).
    pub fn on_ack(
        &mut self,
        now: Instant,
        ack: &AckSummary,
        lost: &mut Vec<LostPacket>,
    ) -> AckResult {
        let mut result = AckResult::default();
        let (Some(largest_pn), Some(largest_sent)) =
            (ack.ranges.largest(), self.sent.largest_sent())
        else {
            self.invalid_acks += u64::from(!ack.ranges.is_empty());
            return result;
        };
        let largest = self.sent.widen_pn(largest_pn).unwrap_or(largest_sent);
        if largest > largest_sent {
            self.invalid_acks += 1;
            return result;
        }

        // RFC 9002 section 5.1: an RTT sample only when the largest is newly acked.
        let mut newest_owd_sent = None;
        let mut newest_sent_into_idle_path = false;
        if let Some(index) = self.sent.index_of(largest) {
            if self.sent.state(index) == crate::sent::PacketState::InFlight {
                let sent_time = self.sent.packet(index).time;
                newest_sent_into_idle_path = self.sent.packet(index).sent_into_idle_path;
                let latest = now.saturating_duration_since(sent_time);
                // RFC 9002 section 5.3: use at most the peer's max_ack_delay.
                let ack_delay = ack.ack_delay.min(self.config.max_ack_delay);
                self.rtt.on_ack_sample(latest, ack_delay);
                self.loss.on_rtt_sample(now);
                result.rtt_sample = Some(latest);
                newest_owd_sent = Some(sent_time);
            }
        }

        let mut newest_acked_app_limited = false;
        for (first_pn, last_pn) in ack.ranges.iter() {
            let (Some(first), Some(last)) =
                (self.sent.widen_pn(first_pn), self.sent.widen_pn(last_pn))
            else {
                continue;
            };
            if first > last || last > largest_sent {
                self.invalid_acks += 1;
                continue;
            }
            let mut index = self.sent.first_index_from(first);
            while index < self.sent.len() && self.sent.number(index) <= last {
                match self.sent.mark_acked_now(index) {
                    AckOutcome::Newly => {
                        let packet = *self.sent.packet(index);
                        let number = self.sent.number(index);
                        self.rate.on_packet_acked(now, number, &packet);
                        self.loss.on_overtaken_ack(number);
                        result.acked_packets += 1;
                        result.acked_bytes += packet.bytes;
                        if number == largest {
                            newest_acked_app_limited = packet.app_limited;
                        }
                    }
                    AckOutcome::AfterLoss => self.loss.on_spurious_loss(
                        now,
                        self.sent.number(index),
                        self.sent.packet(index).time,
                        &self.rtt,
                    ),
                    AckOutcome::Already => {}
                }
                index += 1;
            }
        }
        // After the marking: a spurious loss or an overtaken packet measures how far
        // it was overtaken against what was acknowledged before this acknowledgement.
        self.loss.on_ack_received(largest);
        self.loss.on_packets_newly_acked(result.acked_packets);
        if result.acked_packets > 0 {
            self.pto_probe_pending = false;
        }

        let round = self.detect_lost(now, lost);
        result.lost_packets = round.lost_packets;
        result.persistent_congestion = round.persistent_congestion;

        match newest_owd_sent {
            Some(sent_time) if newest_sent_into_idle_path => {
                self.owd.on_quiet_sample(sent_time, ack.largest_owd_raw_us)
            }
            Some(sent_time) => self.owd.on_sample(sent_time, ack.largest_owd_raw_us),
            None => {}
        }
        if newest_owd_sent.is_some() && largest == largest_sent {
            self.queue_measured_at = Some(now);
        }
        let sample = self.rate.finish_sample(self.rtt.min());
        // The sender had nothing more to send, but the bottleneck had: the sample
        // measured the bottleneck, and the controller's rate filter may take it even
        // below its estimate (and age). The path's own latest sample stays as it was:
        // a single sample is all it keeps, and a probe's few bytes behind that queue
        // made an uplink read 4 kbit/s, after which the scheduler never used it again.
        let queue_standing = newest_owd_sent.is_some() && self.newest_waited_in_a_standing_queue();
        let signals = AckSignals {
            delivery_rate: sample.map(|s| s.delivery_rate),
            app_limited: sample.map_or(newest_acked_app_limited, |s| s.app_limited)
                && !queue_standing,
            queuing_delay: self.owd.queuing_delay(),
            jitter: self.owd.jitter(),
        };
        for (first_pn, last_pn) in ack.ranges.iter() {
            let (Some(first), Some(last)) =
                (self.sent.widen_pn(first_pn), self.sent.widen_pn(last_pn))
            else {
                continue;
            };
            let mut index = self.sent.first_index_from(first);
            while index < self.sent.len() && self.sent.number(index) <= last.min(largest_sent) {
                if self.sent.settle_acked(index) {
                    let packet = self.sent.packet(index);
                    self.controller
                        .on_ack(now, packet.time, packet.bytes, &self.rtt, &signals);
                }
                index += 1;
            }
        }
        self.compact_sent(now);

        result.liveness_change = self.heard(now);
        result
    }

    /// Whether the newest acknowledged packet waited in a queue that stood at the
    /// bottleneck: the controller found the last round's queue above its target, and
    /// this packet's own queuing delay is above it too. Both, because the round's
    /// verdict is one round old.
    fn newest_waited_in_a_standing_queue(&self) -> bool {
        let own_delay_above_target = self
            .owd
            .latest_queuing_delay()
            .zip(self.controller.queuing_delay_target())
            .is_some_and(|(delay, target)| delay > target);
        self.controller.queue_standing() && own_delay_above_target
    }

    /// Any authenticated datagram arrived on this path.
    pub fn on_heard(&mut self, now: Instant) -> Option<LivenessChange> {
        self.heard(now)
    }

    fn heard(&mut self, now: Instant) -> Option<LivenessChange> {
        self.last_heard = Some(now);
        self.liveness
            .on_heard(now, self.sent.packets_in_flight() > 0)
    }

    /// Runs loss detection, pushes what it declared lost into `lost` and reports one
    /// congestion event for it.
    fn detect_lost(&mut self, now: Instant, lost: &mut Vec<LostPacket>) -> LossRound {
        let round = self
            .loss
            .detect_lost(now, &self.rtt, &mut self.sent, |packet| {
                lost.push(LostPacket {
                    pn: packet.pn,
                    seq: packet.seq,
                    bytes: packet.bytes,
                })
            });
        if let Some(newest_lost_sent) = round.newest_lost_sent {
            self.controller.on_congestion_event(
                now,
                newest_lost_sent,
                round.persistent_congestion,
                round.lost_bytes,
            );
        }
        self.compact_sent(now);
        round
    }

    /// Drops settled packets from the record. A lost one is kept for a probe timeout
    /// after it was sent: an acknowledgement until then shows the path reordered it
    /// (`LossDetector::on_spurious_loss`).
    fn compact_sent(&mut self, now: Instant) {
        let keep_lost_sent_since = now.checked_sub(self.loss.pto_base(&self.rtt));
        self.sent.compact(keep_lost_sent_since);
    }

    /// When [`Self::handle_timeout`] must run next: the earliest of the loss timer or
    /// probe timeout and the liveness deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let recovery = self
            .loss
            .timer(&self.rtt, self.sent.packets_in_flight() > 0);
        let liveness = self.liveness.poll_timeout(self.loss.pto_base(&self.rtt));
        match (recovery, liveness) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`: time-threshold losses (pushed into `lost`) or a
    /// probe timeout (counted and backed off; [`Self::take_pto_probe`] then says a
    /// probe should be sent), then liveness.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        lost: &mut Vec<LostPacket>,
    ) -> Option<LivenessChange> {
        if self.loss.loss_timer_expired(now) {
            self.detect_lost(now, lost);
        } else if self
            .loss
            .timer(&self.rtt, self.sent.packets_in_flight() > 0)
            .is_some_and(|deadline| now >= deadline)
        {
            self.loss.on_pto();
            self.pto_probe_pending = true;
        }
        self.liveness.on_timeout(now, self.loss.pto_base(&self.rtt))
    }

    /// Whether a probe timeout fired since the last call: the caller should send one
    /// ack-eliciting datagram (data or a ping) on this path (RFC 9002 section 6.2.4).
    pub fn take_pto_probe(&mut self) -> bool {
        std::mem::take(&mut self.pto_probe_pending)
    }

    /// Marks everything still in flight lost and pushes it into `lost`, for a path that
    /// went down: the caller reinjects it all. Not a congestion signal: the controller
    /// and the loss rate are left alone.
    pub fn drain_in_flight(&mut self, lost: &mut Vec<LostPacket>) {
        for index in 0..self.sent.len() {
            if let Some(packet) = self.sent.mark_lost(index) {
                lost.push(LostPacket {
                    pn: packet.pn,
                    seq: packet.seq,
                    bytes: packet.bytes,
                });
            }
        }
        // A path that went down and came back acknowledges these late, which says
        // nothing about its reordering.
        self.sent.compact(None);
        self.loss.clear_loss_timer();
        self.liveness.on_in_flight_drained();
    }

    pub fn bytes_in_flight(&self) -> u64 {
        self.sent.bytes_in_flight()
    }

    /// The packet number of the oldest packet still in flight: everything sent
    /// before it has been acknowledged or declared lost.
    pub fn oldest_in_flight(&self) -> Option<u32> {
        self.sent.oldest_in_flight()
    }

    pub fn packets_in_flight(&self) -> usize {
        self.sent.packets_in_flight()
    }

    /// The congestion window in bytes.
    pub fn window(&self) -> u64 {
        self.controller.window()
    }

    /// The rate the pacer sends at, in bytes per second: the controller's pacing
    /// rate, else the window spread over the smoothed RTT (`None` before the first
    /// RTT sample: the window alone limits).
    pub fn pacing_rate(&self) -> Option<u64> {
        Pacer::rate(
            self.controller.window(),
            self.rtt.smoothed().unwrap_or(Duration::ZERO),
            self.controller.pacing_rate(),
        )
    }

    /// Whether `bytes` more fit in the congestion window.
    pub fn has_window_room(&self, bytes: u64) -> bool {
        self.sent.bytes_in_flight() + bytes <= self.controller.window()
    }

    pub fn liveness(&self) -> Liveness {
        self.liveness.state()
    }

    /// The caller sent a probe on this Down path (after [`Self::on_sent`] for it):
    /// Down -> Probing. No effect in other states.
    pub fn start_probing(&mut self, now: Instant) {
        self.liveness.start_probing(now);
    }

    /// Tells the rate estimator the sender has nothing to send although the window has
    /// room (draft-cheng-iccrg-delivery-rate-estimation, application-limited phases).
    pub fn mark_app_limited(&mut self) {
        self.rate.mark_app_limited(self.sent.bytes_in_flight());
    }

    /// Delivery rate estimate in bytes per second (see [`Self::latest_rate_sample`]).
    pub fn delivery_rate(&self, now: Instant) -> Option<u64> {
        self.latest_rate_sample(now)
            .map(|sample| sample.delivery_rate)
    }

    /// Nothing in flight, and nothing sent for a smoothed RTT: a packet declared lost
    /// is no longer in flight but may still wait in the bottleneck's queue, and within a
    /// round trip of the last send it can still be ahead of the next one.
    fn idle(&self, now: Instant) -> bool {
        self.sent.packets_in_flight() == 0
            && self.last_sent.is_none_or(|last| {
                now.saturating_duration_since(last) >= self.rtt.smoothed().unwrap_or_default()
            })
    }

    /// The latest rate sample kept, an application-limited one capped at the
    /// controller's bottleneck estimate. Such a sample only bounds the rate from below,
    /// and one above the estimate is a burst the estimate has since aged out: after a
    /// lull a token bucket passes its burst at line rate, and on 20 Mbit/s tbf uplinks
    /// with a 0.1 ms RTT the sample read 1.4-2 Gbit/s. A path that never fills its
    /// window takes no sample that is not application-limited, so it kept that rate.
    ///
    /// A path with nothing in flight that sent nothing for a smoothed RTT reports its
    /// sample application-limited too: it carries none of the traffic, so the sample is
    /// history, and a path whose estimate is too low gets no data to correct it. After
    /// a burst overflowed a 20 Mbit/s tbf uplink, a 47-byte ping was the only packet
    /// of its flight to arrive, read 4 kbit/s, and the uplink carried nothing for the
    /// rest of the run. A path between two flights within a round trip keeps its
    /// sample as it is.
    pub fn latest_rate_sample(&self, now: Instant) -> Option<RateSample> {
        let mut sample = self.rate.latest()?;
        sample.app_limited |= self.idle(now);
        if sample.app_limited {
            if let Some(bottleneck) = self.controller.bottleneck_rate() {
                sample.delivery_rate = sample.delivery_rate.min(bottleneck);
            }
        }
        Some(sample)
    }

    /// Smoothed forward queuing delay, as of the latest acknowledgement that carried
    /// a one-way delay.
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.owd.queuing_delay()
    }

    /// The forward queue a packet sent now would meet: [`Self::queuing_delay`], less
    /// the time since it was measured once the newest packet sent got through and
    /// nothing of ours is in flight. A FIFO that holds none of our packets drains at
    /// least as fast as time passes; without this, a path that stopped carrying data
    /// behind a deep queue kept that queue in its scheduler's predictions, was never
    /// picked again, and so never measured anew (a modem held at 220 ms for 1.4 s of a
    /// 12 s flow). A path whose newest packets were lost is not known to drain.
    pub fn queuing_delay_at(&self, now: Instant) -> Option<Duration> {
        let queue = self.owd.queuing_delay()?;
        match self.queue_measured_at {
            Some(at) if self.sent.bytes_in_flight() == 0 => {
                Some(queue.saturating_sub(now.saturating_duration_since(at)))
            }
            _ => Some(queue),
        }
    }

    /// The spread of the forward one-way delay without a queue of ours, once measured
    /// (see [`OwdEstimator::jitter`]).
    pub fn jitter(&self) -> Option<Duration> {
        self.owd.jitter()
    }

    /// How many delays of packets sent into the idle path the jitter rests on.
    pub fn jitter_samples(&self) -> usize {
        self.owd.quiet_samples()
    }

    /// The forward delay's base as the peer's clock read it (see
    /// [`OwdEstimator::base_raw_us`]).
    pub fn base_owd_raw_us(&self) -> Option<u32> {
        self.owd.base_raw_us()
    }

    /// Forward one-way delay slope in µs per second.
    pub fn owd_trend_us_per_s(&self) -> Option<f64> {
        self.owd.trend_us_per_s()
    }

    /// Fraction of recent packets lost.
    pub fn loss_rate(&self) -> f64 {
        self.loss.loss_rate()
    }

    /// The probe timeout without backoff (RFC 9002 section 6.2.1), the unit of the
    /// liveness thresholds.
    pub fn pto_base(&self) -> Duration {
        self.loss.pto_base(&self.rtt)
    }

    /// The probe timeout with the current backoff.
    pub fn pto(&self) -> Duration {
        self.loss.pto_period(&self.rtt)
    }

    pub fn pto_count(&self) -> u32 {
        self.loss.pto_count()
    }

    /// Acknowledgements (or ranges) that acknowledged numbers never sent.
    pub fn invalid_acks(&self) -> u64 {
        self.invalid_acks
    }

    /// A snapshot for schedulers, logs and metrics. Of the counters only the sent ones
    /// are known here; the caller overwrites `counters` with its own.
    pub fn stats(&self, now: Instant) -> PathStats {
        let since_last_received = self
            .last_heard
            .map(|heard| now.saturating_duration_since(heard));
        PathStats {
            cwnd: self.controller.window(),
            bytes_in_flight: self.sent.bytes_in_flight(),
            delivery_rate: self.delivery_rate(now),
            queuing_delay: self.queuing_delay_at(now),
            jitter: self.owd.jitter(),
            owd_trend_us_per_s: self.owd.trend_us_per_s(),
            loss_rate: self.loss.loss_rate(),
            lost_packets: self.loss.lost_packets(),
            spurious_losses: self.loss.spurious_losses(),
            persistent_congestions: self.loss.persistent_congestions(),
            packet_threshold: self.loss.packet_threshold(),
            pto_count: self.loss.pto_count(),
            liveness: self.liveness.state(),
            ..PathStats::new(self.counters, &self.rtt, since_last_received)
        }
    }

    pub fn controller(&self) -> &C {
        &self.controller
    }

    pub fn controller_mut(&mut self) -> &mut C {
        &mut self.controller
    }
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
