//! The queues in front of the paths. When every path's window is full, inner packets
//! wait in the send queue, kept short by CoDel (RFC 8289) so the inner TCP learns the
//! tunnel's capacity, from a drop or, for an ECN-capable packet, a Congestion
//! Experienced mark (see `ecn.rs`); packets lost to congestion wait first in line in
//! the resend queue (see `resend.rs`), and both go out as windows open. An inner TCP
//! retransmission in the send queue is never dropped (see `tcp_flows.rs`): the
//! receiving application is already waiting for it.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mptund_sched::{repair_route, RepairRoute};

use super::codel::{CoDel, CoDelConfig};
use super::ecn::mark_congestion_experienced;
use super::send::{Placement, Route};
use super::tcp_flows::TcpFlows;
use super::Session;
use crate::buffers::{BufferPool, Packet};
use crate::counters::{DropCounters, DropReason};

/// The bounded queue in front of the paths when all of them are full.
#[derive(Clone, Copy, Debug)]
pub struct SendQueueConfig {
    pub capacity_packets: usize,
    /// CoDel keeps the standing queue short with one drop at a time.
    pub codel: CoDelConfig,
    /// A packet that waited longer than this is dropped at the head of the queue
    /// whatever CoDel says: the limit for flows that do not slow down.
    pub max_sojourn: Duration,
}

/// How long CoDel does not drop after a path that carried data fell silent. The
/// inner flow's window was sized for the capacity before the fall, so the queue
/// stands until the flow learns the new one: a rate-based flow (BBR) takes its
/// bandwidth filter's ten round trips, about 2 s at the 150-200 ms an inner RTT
/// grows to meanwhile, and ignores the drops until then. Each drop only cost the
/// receiving application an inner RTT without a byte. The sojourn limit still holds.
pub(super) const CAPACITY_FALL_GRACE: Duration = Duration::from_secs(2);

/// An inner packet waiting in the send queue.
pub(super) struct Queued {
    queued_at: Instant,
    packet: Packet,
    /// An inner TCP retransmission: neither CoDel nor the sojourn limit drops it.
    retransmission: bool,
    /// CoDel marked it Congestion Experienced and it waits at the head for a path: it
    /// carries its signal, and CoDel does not count it again.
    marked: bool,
}

pub(super) struct SendQueue {
    pub(super) packets: VecDeque<Queued>,
    /// Tells an inner retransmission from new data.
    pub(super) tcp_flows: TcpFlows,
    codel: Option<CoDel>,
    /// When a path carrying data last fell silent (see `CAPACITY_FALL_GRACE`).
    capacity_fell_at: Option<Instant>,
    /// Inner bytes waiting, for schedulers that weigh the backlog (ECF).
    pub(super) bytes: u64,
    config: SendQueueConfig,
}

impl SendQueue {
    pub fn new(config: SendQueueConfig) -> Self {
        Self {
            packets: VecDeque::new(),
            tcp_flows: TcpFlows::default(),
            codel: None,
            capacity_fell_at: None,
            bytes: 0,
            config,
        }
    }

    pub fn recycle_all(&mut self, pool: &mut BufferPool) {
        for queued in self.packets.drain(..) {
            pool.recycle(queued.packet);
        }
        self.bytes = 0;
    }

    fn push_back(&mut self, queued: Queued) {
        self.bytes += queued.packet.len() as u64;
        self.packets.push_back(queued);
    }

    fn push_front(&mut self, queued: Queued) {
        self.bytes += queued.packet.len() as u64;
        self.packets.push_front(queued);
    }

    fn pop_front(&mut self) -> Option<Queued> {
        let queued = self.packets.pop_front()?;
        self.bytes -= queued.packet.len() as u64;
        Some(queued)
    }

    /// A path that carried data fell silent or went away: the paths can carry less
    /// than the inner flows' windows were sized for. A path that goes down after it
    /// fell silent is the same fall: the grace runs from the first sign.
    pub fn on_capacity_fall(&mut self, now: Instant) {
        if !self.settling_after_capacity_fall(now) {
            self.capacity_fell_at = Some(now);
        }
    }

    /// Within the grace after a capacity fall, when the queue is the inner flows'
    /// adjustment to the new capacity, not a standing queue to drop from.
    pub(super) fn settling_after_capacity_fall(&self, now: Instant) -> bool {
        self.capacity_fell_at
            .is_some_and(|at| now.saturating_duration_since(at) < CAPACITY_FALL_GRACE)
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Takes the packet that waited longest (the session is over its memory share).
    pub(super) fn pop_oldest(&mut self) -> Option<Packet> {
        self.pop_front().map(|queued| queued.packet)
    }

    /// Moves the packets waiting in `other` (a queue with the old limits) to the back
    /// of this one, in order.
    pub fn take_packets_from(&mut self, mut other: SendQueue) {
        self.capacity_fell_at = other.capacity_fell_at;
        std::mem::swap(&mut self.tcp_flows, &mut other.tcp_flows);
        while let Some(queued) = other.pop_front() {
            self.push_back(queued);
        }
    }
}

impl Session {
    pub(super) fn enqueue(
        &mut self,
        now: Instant,
        packet: Packet,
        retransmission: bool,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        if self.sender.send_queue.packets.len() >= self.sender.send_queue.config.capacity_packets {
            pool.recycle(packet);
            return drops.record(
                now,
                DropReason::SendQueueFull,
                &"every path is full and the send queue too",
            );
        }
        if self.at_buffer_limit() {
            pool.recycle(packet);
            return drops.record(
                now,
                DropReason::MemoryBudget,
                &"the session holds its share of the memory budget",
            );
        }
        self.counters.queued += 1;
        self.sender.send_queue.push_back(Queued {
            queued_at: now,
            packet,
            retransmission,
            marked: false,
        });
    }

    /// Sends queued packets while paths have room; drops those that waited too long.
    pub(super) fn drain_send_queue(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        self.sender.views_shown = None;
        self.drain_send_queue_in_run(now, pool, drops);
    }

    /// [`Session::drain_send_queue`] within a run of placements (see
    /// [`super::send::ViewsShown`]).
    pub(super) fn drain_send_queue_in_run(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let Some(route) = self.drain_resend_queue(now, pool, drops) else {
            return;
        };
        // Fixed for this drain; whether a path is still growing changes as it fills.
        let settling = self.sender.send_queue.settling_after_capacity_fall(now);
        let config = self.sender.send_queue.config;
        let path_timeout = self.settings.path_timeout;
        while let Some(head) = self.sender.send_queue.packets.front() {
            let sojourn = now.saturating_duration_since(head.queued_at);
            let queued = self.sender.send_queue.packets.len();
            // Dropping a retransmission would cost the application a second queue
            // and round trip; it goes when a path has room, however long it waited.
            let retransmission = head.retransmission;
            let over_limit = !retransmission && sojourn >= config.max_sojourn;
            // While a path is still in slow start with its window full, the queue is
            // its ramp-up, not the tunnel's capacity: a drop now would make the inner
            // flow leave its own slow start at a fraction of what the paths can carry.
            let hold_drops = settling
                || self
                    .paths
                    .iter()
                    .any(|path| path.still_growing(now, path_timeout));
            let codel = self
                .sender
                .send_queue
                .codel
                .get_or_insert_with(|| CoDel::new(config.codel, now));
            if hold_drops {
                codel.forget_standing_queue();
            }
            let mut aqm_drop = !hold_drops
                && !retransmission
                && !head.marked
                && codel.should_drop(now, sojourn, queued);
            if aqm_drop && !over_limit {
                if let Some(front) = self.sender.send_queue.packets.front_mut() {
                    if mark_congestion_experienced(front.packet.bytes_mut()) {
                        front.marked = true;
                        self.counters.ecn_marked += 1;
                        aqm_drop = false;
                    }
                }
            }
            if over_limit || aqm_drop {
                if let Some(dropped) = self.sender.send_queue.pop_front() {
                    pool.recycle(dropped.packet);
                }
                let (reason, detail) = if over_limit {
                    (
                        DropReason::SendQueueSojourn,
                        "packet waited too long for a free path",
                    )
                } else {
                    (
                        DropReason::SendQueueAqm,
                        "standing send queue: dropped to slow the inner flow",
                    )
                };
                drops.record(now, reason, &detail);
                continue;
            }
            let Some(queued) = self.sender.send_queue.pop_front() else {
                break;
            };
            let seq = self.sender.next_seq;
            match self.place(now, queued.packet, seq, route, pool) {
                Placement::Sent => self.sender.next_seq = seq.next(),
                Placement::Held(packet) => {
                    self.sender
                        .send_queue
                        .push_front(Queued { packet, ..queued });
                    break;
                }
            }
        }
        if self.sender.send_queue.packets.is_empty() {
            if let Some(codel) = &mut self.sender.send_queue.codel {
                codel.forget_standing_queue();
            }
        }
    }

    /// Sends the lost packets waiting for a window, oldest first; those that waited
    /// longer than the receiver holds a gap are given up. Returns the paths new
    /// packets may take now: all once the queue is empty, all but the one the first
    /// repair waits for while it waits (a repair is first in line for its path, but
    /// holding every other path idle behind it cost the slower paths of three lossy
    /// ones a tenth of their rate), none when it has no path at all.
    fn drain_resend_queue(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) -> Option<Route> {
        let useful_for = self.settings.reorder.max_hold;
        while let Some((queued_at, seq, packet)) = self.sender.resend_queue.packets.pop_front() {
            if now.saturating_duration_since(queued_at) >= useful_for {
                pool.recycle(packet);
                drops.record(
                    now,
                    DropReason::ResendExpired,
                    &"a lost packet waited for a window longer than the receiver waits for it",
                );
                self.give_up(seq);
                continue;
            }
            let route = Route::Again {
                avoid: None,
                urgent: false,
            };
            match self.place(now, packet, seq, route, pool) {
                Placement::Sent => self.counters.reinjected += 1,
                Placement::Held(packet) => {
                    // The views are the ones this repair was just judged by.
                    let waits_for = repair_route(&self.sender.views, packet.len());
                    self.sender
                        .resend_queue
                        .packets
                        .push_front((queued_at, seq, packet));
                    self.send_given_up(now, pool);
                    return match waits_for {
                        RepairRoute::WaitFor(path) => Some(Route::NewBesides(path)),
                        RepairRoute::Now(_) | RepairRoute::Nowhere => None,
                    };
                }
            }
        }
        self.send_given_up(now, pool);
        Some(Route::New)
    }

    /// When the head of the send queue must be looked at again: when a pacer lets
    /// it go, or when it has waited too long.
    pub(super) fn send_queue_deadline(&self) -> Option<Instant> {
        let resend_expiry = self
            .sender
            .resend_queue
            .packets
            .front()
            .map(|(queued_at, _, _)| *queued_at + self.settings.reorder.max_hold);
        let send_expiry = self
            .sender
            .send_queue
            .packets
            .front()
            // A retransmission at the head waits for a window however long it takes.
            .filter(|queued| !queued.retransmission)
            .map(|queued| queued.queued_at + self.sender.send_queue.config.max_sojourn);
        let expiry = match (resend_expiry, send_expiry) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let pacing = self
            .paths
            .iter()
            .filter_map(|path| path.pacing_ready_at())
            .min();
        Some(pacing.map_or(expiry, |at| at.min(expiry)))
    }
}
