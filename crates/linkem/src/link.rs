//! One direction of one emulated path: the sans-IO queueing model.
//!
//! A packet handed to [`Link::handle_packet`] goes through, in order:
//!
//! 1. the **outage schedule** (a packet arriving during an outage is dropped), and
//!    the run-time cut and scripted losses a simulation may set,
//! 2. **random loss** (independent, probability from the config or the step trace),
//! 3. **burst loss** (Gilbert-Elliott, see [`crate::loss`]),
//! 4. a **drop-tail FIFO** bounded in bytes (the bytes of the packet being
//!    serialized count until its last bit is out),
//! 5. the **serializer**: either a fixed or step-traced rate (a packet of `len`
//!    bytes occupies the link for `len * 8 / rate`; the rate in force when its
//!    first bit goes out applies to the whole packet) or Mahimahi delivery
//!    opportunities. The serializer pauses during outages and while a step trace
//!    sets the rate to 0, so queued packets wait, like in a modem's buffer,
//! 6. **propagation**: one-way delay plus uniform jitter in `[-jitter, +jitter]`
//!    (clamped at 0). Unless reordering is allowed, a packet is never released
//!    before the one ahead of it, as on a real single path.
//!
//! The model never reads a clock: every call takes `now`, and
//! [`Link::poll_timeout`] says when the caller must call again.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::loss::{GilbertElliott, GilbertElliottConfig};
use crate::rng::SeededRng;
use crate::trace::{DeliveryTrace, StepTrace};

/// A time window, relative to the link's start, during which the path is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub start: Duration,
    pub duration: Duration,
}

impl Outage {
    fn end(&self) -> Duration {
        self.start + self.duration
    }
}

/// Validated parameters of one direction of one path.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// `None`: no rate limit (and no queueing).
    pub rate_bit_per_s: Option<u64>,
    pub delay: Duration,
    pub jitter: Duration,
    /// Let jitter reorder packets of this path (off: releases stay in FIFO order).
    pub allow_reordering: bool,
    /// With `allow_reordering`: FIFO again from this long after the epoch on.
    pub reorder_until: Option<Duration>,
    pub queue_limit_bytes: usize,
    pub loss_probability: f64,
    pub gilbert_elliott: Option<GilbertElliottConfig>,
    /// Sorted by start, non-overlapping (the scenario loader checks).
    pub outages: Vec<Outage>,
    pub step_trace: Option<StepTrace>,
    /// When set, replaces the rate limit by Mahimahi delivery opportunities.
    pub delivery_trace: Option<DeliveryTrace>,
    /// Bytes one delivery opportunity carries (1500 scaled by the scenario's rate scale).
    pub bytes_per_opportunity: usize,
    pub seed: u64,
}

impl LinkConfig {
    /// A link that only delays packets: no rate limit, no loss.
    pub fn delay_only(delay: Duration) -> Self {
        Self {
            rate_bit_per_s: None,
            delay,
            jitter: Duration::ZERO,
            allow_reordering: false,
            reorder_until: None,
            queue_limit_bytes: usize::MAX,
            loss_probability: 0.0,
            gilbert_elliott: None,
            outages: Vec::new(),
            step_trace: None,
            delivery_trace: None,
            bytes_per_opportunity: crate::trace::MAHIMAHI_OPPORTUNITY_BYTES,
            seed: 0,
        }
    }
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    QueueFull,
    RandomLoss,
    BurstLoss,
    Outage,
    /// Cut or told to lose it at run time ([`Link::set_cut`], [`Link::lose_next`]).
    Scripted,
}

/// What happened to a packet handed to the link.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission<P> {
    /// Queued; it will come out of [`Link::poll_release`].
    Accepted,
    /// Dropped; the packet is handed back so its buffer can be reused.
    Dropped(P, DropCause),
}

/// Per-direction counters, serialised into the emulator's JSON report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkCounters {
    pub received_packets: u64,
    pub forwarded_packets: u64,
    pub forwarded_bytes: u64,
    pub dropped_queue_full: u64,
    pub dropped_random_loss: u64,
    pub dropped_burst_loss: u64,
    pub dropped_outage: u64,
    pub dropped_scripted: u64,
    pub max_queue_bytes: usize,
}

struct Waiting<P> {
    packet: P,
    len: usize,
    arrived: Instant,
}

/// A packet on the wire; ordered so that `BinaryHeap` pops the earliest release first.
struct InFlight<P> {
    release_at: Instant,
    order: u64,
    len: usize,
    packet: P,
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.release_at, self.order) == (other.release_at, other.order)
    }
}
impl<P> Eq for InFlight<P> {}
impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.release_at, other.order).cmp(&(self.release_at, self.order))
    }
}

/// Bound on how many outages / zero-rate steps the serializer skips in one
/// look-ahead; only a pathological schedule (a looping trace that is all zero)
/// would need more, and then the link simply stays stalled.
const MAX_STALL_SKIPS: usize = 10_000;

/// One direction of one path. `P` is the caller's packet buffer type.
pub struct Link<P> {
    config: LinkConfig,
    epoch: Instant,
    rng: SeededRng,
    burst_loss: Option<GilbertElliott>,
    waiting: VecDeque<Waiting<P>>,
    waiting_bytes: usize,
    /// Rate mode: when the serializer finished its last packet.
    link_free_at: Instant,
    /// Delivery-trace mode: global index of the next unused opportunity.
    next_opportunity: u64,
    /// Delivery-trace mode: bytes of the head packet already delivered.
    head_bytes_delivered: usize,
    in_flight: BinaryHeap<InFlight<P>>,
    next_order: u64,
    last_release: Instant,
    counters: LinkCounters,
    /// Run-time controls for simulations: drop every arrival while cut, and drop
    /// this many of the next arrivals.
    cut: bool,
    losses_to_come: usize,
}

impl<P> Link<P> {
    /// `epoch` is time zero of the outage schedule and of the traces.
    pub fn new(config: LinkConfig, epoch: Instant) -> Self {
        Self {
            rng: SeededRng::new(config.seed),
            burst_loss: config.gilbert_elliott.map(GilbertElliott::new),
            config,
            epoch,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            link_free_at: epoch,
            next_opportunity: 0,
            head_bytes_delivered: 0,
            in_flight: BinaryHeap::new(),
            next_order: 0,
            last_release: epoch,
            counters: LinkCounters::default(),
            cut: false,
            losses_to_come: 0,
        }
    }

    /// Cuts the link or mends it, from now on (a simulation pulling a cable): a
    /// packet arriving while it is cut is dropped; what is already inside goes on.
    pub fn set_cut(&mut self, cut: bool) {
        self.cut = cut;
    }

    /// Changes the rate limit from now on (a simulation whose radio changes rate):
    /// every packet still in the queue, the one being serialized included, takes the
    /// new rate.
    pub fn set_rate_bit_per_s(&mut self, rate_bit_per_s: Option<u64>) {
        self.config.rate_bit_per_s = rate_bit_per_s;
    }

    /// Changes the one-way delay from now on: packets that leave the serializer
    /// from now on take the new delay (releases stay in order unless reordering is
    /// allowed).
    pub fn set_delay(&mut self, delay: Duration) {
        self.config.delay = delay;
    }

    /// Drops the next `count` packets that arrive, on top of any already due.
    pub fn lose_next(&mut self, count: usize) {
        self.losses_to_come += count;
    }

    /// Arrivals [`Link::lose_next`] will still drop.
    pub fn losses_to_come(&self) -> usize {
        self.losses_to_come
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Bytes waiting for (or in) serialization.
    pub fn queued_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// Packets inside the link (queued or propagating).
    pub fn packets_inside(&self) -> usize {
        self.waiting.len() + self.in_flight.len()
    }

    /// Offers a packet of `len` bytes arriving at `now`.
    pub fn handle_packet(&mut self, now: Instant, packet: P, len: usize) -> Admission<P> {
        self.advance(now);
        self.counters.received_packets += 1;
        let scripted_loss = self.cut || self.losses_to_come > 0;
        if scripted_loss {
            if !self.cut {
                self.losses_to_come -= 1;
            }
            self.counters.dropped_scripted += 1;
            return Admission::Dropped(packet, DropCause::Scripted);
        }
        let since_start = now.saturating_duration_since(self.epoch);
        if self.outage_end_covering(since_start).is_some() {
            self.counters.dropped_outage += 1;
            return Admission::Dropped(packet, DropCause::Outage);
        }
        let loss_probability = self
            .step_at(since_start)
            .and_then(|step| step.loss_probability)
            .unwrap_or(self.config.loss_probability);
        if self.rng.chance(loss_probability) {
            self.counters.dropped_random_loss += 1;
            return Admission::Dropped(packet, DropCause::RandomLoss);
        }
        if let Some(burst_loss) = &mut self.burst_loss {
            if burst_loss.next_packet_lost(&mut self.rng) {
                self.counters.dropped_burst_loss += 1;
                return Admission::Dropped(packet, DropCause::BurstLoss);
            }
        }
        if self.waiting_bytes.saturating_add(len) > self.config.queue_limit_bytes {
            self.counters.dropped_queue_full += 1;
            return Admission::Dropped(packet, DropCause::QueueFull);
        }
        if self.waiting.is_empty() {
            if let Some(trace) = &self.config.delivery_trace {
                // Opportunities that passed while the queue was empty are wasted.
                let first_usable = trace.first_opportunity_at_or_after(since_start);
                self.next_opportunity = self.next_opportunity.max(first_usable);
            }
        }
        self.waiting.push_back(Waiting {
            packet,
            len,
            arrived: now,
        });
        self.waiting_bytes += len;
        self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(self.waiting_bytes);
        self.advance(now);
        Admission::Accepted
    }

    /// Returns the next packet whose release time is at or before `now`.
    pub fn poll_release(&mut self, now: Instant) -> Option<P> {
        self.advance(now);
        if self.in_flight.peek()?.release_at > now {
            return None;
        }
        let released = self.in_flight.pop()?;
        self.counters.forwarded_packets += 1;
        self.counters.forwarded_bytes += released.len as u64;
        Some(released.packet)
    }

    /// The next instant at which something happens inside the link, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next_release = self.in_flight.peek().map(|flight| flight.release_at);
        let next_departure = self
            .waiting
            .front()
            .and_then(|head| self.head_departure(head));
        match (next_release, next_departure) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn step_at(&self, since_start: Duration) -> Option<&crate::trace::Step> {
        self.config
            .step_trace
            .as_ref()
            .and_then(|trace| trace.step_at(since_start))
    }

    /// End of the outage that covers `since_start`, if one does.
    fn outage_end_covering(&self, since_start: Duration) -> Option<Duration> {
        let outages = &self.config.outages;
        let after = outages.partition_point(|outage| outage.start <= since_start);
        let candidate = outages.get(after.checked_sub(1)?)?;
        (since_start < candidate.end()).then(|| candidate.end())
    }

    fn rate_at(&self, since_start: Duration) -> Option<u64> {
        self.step_at(since_start)
            .and_then(|step| step.rate_bit_per_s)
            .or(self.config.rate_bit_per_s)
    }

    /// First instant at or after `since_start` at which the serializer may send.
    fn next_transmit_start(&self, mut since_start: Duration) -> Option<Duration> {
        for _ in 0..MAX_STALL_SKIPS {
            if let Some(end) = self.outage_end_covering(since_start) {
                since_start = end;
            } else if self.rate_at(since_start) == Some(0) {
                since_start = self
                    .config
                    .step_trace
                    .as_ref()?
                    .next_change_after(since_start)?;
            } else {
                return Some(since_start);
            }
        }
        None
    }

    /// When the head packet leaves the serializer (rate mode), or the next
    /// opportunity (delivery-trace mode).
    fn head_departure(&self, head: &Waiting<P>) -> Option<Instant> {
        if let Some(trace) = &self.config.delivery_trace {
            return Some(self.epoch + trace.opportunity_time(self.next_opportunity));
        }
        let earliest = self
            .link_free_at
            .max(head.arrived)
            .saturating_duration_since(self.epoch);
        let start = self.next_transmit_start(earliest)?;
        let serialization = match self.rate_at(start) {
            Some(rate) => {
                Duration::from_nanos((head.len as u64 * 8).saturating_mul(1_000_000_000) / rate)
            }
            None => Duration::ZERO,
        };
        Some(self.epoch + start + serialization)
    }

    /// Moves every packet whose serialization has finished by `now` onto the wire.
    fn advance(&mut self, now: Instant) {
        if self.config.delivery_trace.is_some() {
            self.advance_delivery_trace(now);
            return;
        }
        while let Some(head) = self.waiting.front() {
            match self.head_departure(head) {
                Some(departed) if departed <= now => {
                    self.link_free_at = departed;
                    self.depart_head(departed);
                }
                _ => break,
            }
        }
    }

    fn advance_delivery_trace(&mut self, now: Instant) {
        let bytes_per_opportunity = self.config.bytes_per_opportunity;
        while !self.waiting.is_empty() {
            let Some(trace) = self.config.delivery_trace.as_ref() else {
                return;
            };
            let opportunity_since_start = trace.opportunity_time(self.next_opportunity);
            let opportunity = self.epoch + opportunity_since_start;
            if opportunity > now {
                break;
            }
            self.next_opportunity += 1;
            if self.outage_end_covering(opportunity_since_start).is_some() {
                continue;
            }
            let mut budget = bytes_per_opportunity;
            while budget > 0 {
                let Some(head) = self.waiting.front() else {
                    break;
                };
                if head.arrived > opportunity {
                    break;
                }
                let delivered = (head.len - self.head_bytes_delivered).min(budget);
                budget -= delivered;
                self.head_bytes_delivered += delivered;
                if self.head_bytes_delivered == head.len {
                    self.head_bytes_delivered = 0;
                    self.depart_head(opportunity);
                }
            }
        }
    }

    /// Takes the head packet off the queue and puts it on the wire at `departed`.
    fn depart_head(&mut self, departed: Instant) {
        let Some(head) = self.waiting.pop_front() else {
            return;
        };
        self.waiting_bytes -= head.len;
        let since_start = departed.saturating_duration_since(self.epoch);
        let delay = self
            .step_at(since_start)
            .and_then(|step| step.delay)
            .unwrap_or(self.config.delay);
        let jittered = if self.config.jitter.is_zero() {
            delay
        } else {
            let offset = (self.rng.next_unit() * 2.0 - 1.0) * self.config.jitter.as_secs_f64();
            Duration::from_secs_f64((delay.as_secs_f64() + offset).max(0.0))
        };
        let mut release_at = departed + jittered;
        let reorders = self.config.allow_reordering
            && self
                .config
                .reorder_until
                .is_none_or(|until| since_start < until);
        if !reorders {
            release_at = release_at.max(self.last_release);
        }
        self.last_release = self.last_release.max(release_at);
        self.in_flight.push(InFlight {
            release_at,
            order: self.next_order,
            len: head.len,
            packet: head.packet,
        });
        self.next_order += 1;
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
