//! One bottleneck for controller tests, under a simulated clock: a window-limited
//! sender (paced at the controller's pacing rate when `paced`), a FIFO bottleneck of
//! `capacity` bytes per second with an unbounded buffer (or none: `queue_free`), and a
//! base RTT that includes one service time.
//!
//! The bottleneck is a `linkem::Link`, the model the test bed's emulator runs: its
//! rate is the capacity (none when queue-free), and its one-way delay is the rest of
//! the round trip (the base RTT less one service time, plus the forced queuing delay
//! and the return delay), so a datagram's acknowledgement arrives when the link
//! releases it. Changes to [`Link`]'s fields reach the link before the next send.
//!
//! Each step sends what the window allows and then delivers the oldest datagram's
//! acknowledgement (or its loss). Delivery rate samples follow delivery rate estimation
//! (bytes delivered since the datagram was sent over the time since the delivery before
//! it), capped at the capacity.

use std::time::{Duration, Instant};

use linkem::LinkConfig;

use super::{AckSignals, Controller};
use crate::rtt::RttEstimator;

pub(crate) const MDS: u64 = 1200;
const NANOS_PER_SECOND: u128 = 1_000_000_000;

pub(crate) fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    /// Bottleneck rate, bytes per second.
    pub capacity: u64,
    pub base_rtt: Duration,
    /// No queue forms: the RTT stays at `base_rtt` whatever the window, and the rate
    /// samples are capped at `capacity` (a perfectly paced sender).
    pub queue_free: bool,
    /// Every n-th datagram is lost (and reported as a congestion event).
    pub loss_every: Option<u64>,
    /// These datagrams (counted from 1) are lost too: losses that cluster, as random
    /// ones do.
    pub lost_datagrams: &'static [u64],
    /// Extra queuing delay added to every datagram (on top of the modelled queue).
    pub forced_queuing_delay: Option<Duration>,
    /// Whether `AckSignals::queuing_delay` is filled (else controllers use srtt − min).
    pub report_queuing_delay: bool,
    /// `AckSignals::jitter`: the path's jitter as measured on an idle path.
    pub jitter: Option<Duration>,
    /// Added to every acknowledgement's way back, not to the forward queuing delay:
    /// acknowledgements returning over a slower path.
    pub return_delay: Duration,
    /// The sender spaces its datagrams at the controller's pacing rate, as the
    /// daemon's pacer does; else it sends whatever the window allows at once.
    pub paced: bool,
}

impl Link {
    pub(crate) fn new(capacity: u64, base_rtt: Duration) -> Self {
        Self {
            capacity,
            base_rtt,
            queue_free: false,
            loss_every: None,
            lost_datagrams: &[],
            forced_queuing_delay: None,
            report_queuing_delay: true,
            jitter: None,
            return_delay: Duration::ZERO,
            paced: false,
        }
    }
}

pub(crate) struct Sim {
    pub link: Link,
    pub now: Instant,
    pub rtt: RttEstimator,
    pub datagrams: u64,
    pub delivered_bytes: u64,
    /// The bottleneck and the rest of the round trip; acknowledgements come out.
    bottleneck: linkem::Link<InFlight>,
    /// Time of the latest delivery, for rate samples (delivery rate estimation's
    /// `delivered_time`).
    delivered_time: Instant,
    window_sum: u128,
    window_samples: u64,
    /// When a paced sender may send its next datagram.
    pacer_next: Instant,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    sent: Instant,
    /// The round trip without queuing when it was sent (base RTT and return delay).
    unqueued_rtt: Duration,
    delivered_at_send: u64,
    delivered_time_at_send: Instant,
}

impl Sim {
    /// Starts one second after `t0`.
    pub(crate) fn new(t0: Instant, link: Link) -> Self {
        let now = t0 + Duration::from_secs(1);
        Self {
            bottleneck: linkem::Link::new(LinkConfig::delay_only(Duration::ZERO), now),
            link,
            now,
            rtt: RttEstimator::new(),
            datagrams: 0,
            delivered_bytes: 0,
            delivered_time: now,
            window_sum: 0,
            window_samples: 0,
            pacer_next: now,
        }
    }

    fn service_time(&self) -> Duration {
        Duration::from_nanos(
            (u128::from(MDS) * NANOS_PER_SECOND / u128::from(self.link.capacity)) as u64,
        )
    }

    /// Brings the bottleneck's rate and delay in line with `link`.
    fn configure_bottleneck(&mut self) {
        let link = self.link;
        let (rate, queue_delay) = if link.queue_free {
            (None, Duration::ZERO)
        } else {
            (Some(link.capacity * 8), self.service_time())
        };
        self.bottleneck.set_rate_bit_per_s(rate);
        // The base RTT includes the one service time the link adds itself.
        let delay = link.base_rtt.saturating_sub(queue_delay)
            + link.forced_queuing_delay.unwrap_or_default()
            + link.return_delay;
        self.bottleneck.set_delay(delay);
    }

    fn window_open(&self, controller: &impl Controller) -> bool {
        (self.bottleneck.packets_inside() as u64) * MDS < controller.window()
    }

    /// Whether a paced sender must wait for its pacer before the next datagram.
    fn pacer_waiting(&self) -> bool {
        self.link.paced && self.pacer_next > self.now
    }

    /// When the pacer lets the next datagram go, if the window has room for it and
    /// that is later than now.
    fn pacer_blocks_until(&self, controller: &impl Controller) -> Option<Instant> {
        (self.window_open(controller) && self.pacer_waiting()).then_some(self.pacer_next)
    }

    /// Sends what the window and the pacer allow at `now`: the sender is never
    /// application-limited.
    fn send(&mut self, controller: &mut impl Controller) {
        self.configure_bottleneck();
        while self.window_open(controller) && !self.pacer_waiting() {
            if self.link.paced {
                if let Some(rate) = controller.pacing_rate().filter(|&rate| rate > 0) {
                    let gap = u128::from(MDS) * NANOS_PER_SECOND / u128::from(rate);
                    self.pacer_next =
                        self.pacer_next.max(self.now) + Duration::from_nanos(gap as u64);
                }
            }
            let packet = InFlight {
                sent: self.now,
                unqueued_rtt: self.link.base_rtt + self.link.return_delay,
                delivered_at_send: self.delivered_bytes,
                delivered_time_at_send: self.delivered_time,
            };
            // No queue limit and no loss of its own: the link takes every datagram.
            let _ = self
                .bottleneck
                .handle_packet(self.now, packet, MDS as usize);
            let in_flight = self.bottleneck.packets_inside() as u64 * MDS;
            controller.on_sent(self.now, MDS, in_flight);
        }
    }

    /// The next acknowledgement, the pacer sending what it lets go before it arrives.
    fn next_acknowledgement(&mut self, controller: &mut impl Controller) -> InFlight {
        loop {
            let next = self
                .bottleneck
                .poll_timeout()
                .expect("the window is never empty");
            // A paced sender sends whatever its pacer lets go before the next
            // acknowledgement arrives.
            if let Some(at) = self.pacer_blocks_until(controller).filter(|&at| at < next) {
                self.now = at;
                self.send(controller);
                continue;
            }
            self.now = self.now.max(next);
            if let Some(packet) = self.bottleneck.poll_release(self.now) {
                return packet;
            }
        }
    }

    /// Sends what the window and the pacer allow, then delivers the next acknowledgement
    /// (or loss).
    pub(crate) fn step(&mut self, controller: &mut impl Controller) {
        self.send(controller);
        let packet = self.next_acknowledgement(controller);
        self.datagrams += 1;
        self.window_sum += u128::from(controller.window());
        self.window_samples += 1;
        let lost = self
            .link
            .loss_every
            .is_some_and(|every| self.datagrams % every == 0)
            || self.link.lost_datagrams.contains(&self.datagrams);
        if lost {
            controller.on_congestion_event(self.now, packet.sent, false, MDS);
            return;
        }
        self.delivered_bytes += MDS;
        self.delivered_time = self.now;
        let interval = self.now - packet.delivered_time_at_send;
        let delivery_rate = (!interval.is_zero()).then(|| {
            let bytes = u128::from(self.delivered_bytes - packet.delivered_at_send);
            ((bytes * NANOS_PER_SECOND / interval.as_nanos()) as u64).min(self.link.capacity)
        });
        let rtt = self.now - packet.sent;
        self.rtt.on_sample(rtt);
        let signals = AckSignals {
            delivery_rate,
            app_limited: false,
            queuing_delay: self
                .link
                .report_queuing_delay
                .then(|| rtt.saturating_sub(packet.unqueued_rtt)),
            jitter: self.link.jitter,
        };
        controller.on_ack(self.now, packet.sent, MDS, &self.rtt, &signals);
    }

    pub(crate) fn run_for(&mut self, controller: &mut impl Controller, duration: Duration) {
        let end = self.now + duration;
        while self.now < end {
            self.step(controller);
        }
    }

    /// Mean window over the steps since the last call, in bytes.
    pub(crate) fn take_mean_window(&mut self) -> u64 {
        let mean = self.window_sum / u128::from(self.window_samples.max(1));
        self.window_sum = 0;
        self.window_samples = 0;
        mean as u64
    }
}
