//! Re-sending what a path lost. A packet a path declares lost is sealed again for
//! another path under the same sequence number; a dead path's packets go at once, a
//! congestion loss waits its turn for a window. What cannot be sent again is reported
//! to the receiver (a GaveUp frame) so its reorder buffer stops waiting for it.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::VecDeque;
use std::time::Instant;

use mptund_sched::{PathId, SeqNo};

use super::send::{Placement, Route};
use super::{Outgoing, Session, Unsealed};
use crate::buffers::{BufferPool, Packet};
use crate::counters::{DropCounters, DropReason};
use crate::wire::{self, Frame, TransportLayout};

/// Runs of given-up sequence numbers remembered until the next control datagram;
/// a control datagram holds about 150 GaveUp frames.
pub(super) const MAX_GIVEN_UP_RUNS: usize = 128;

/// How a re-sent packet competes for the paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resend {
    /// Its path died or went quiet: it goes out now, windows or not. The receiver
    /// holds a gap for it, and the dead path's share of the windows is free.
    Urgent,
    /// A congestion loss: first in line, but it waits for a window like any packet.
    /// Ignoring windows here would answer congestion with more traffic.
    InTurn,
}

/// Lost packets waiting for a window, first in line for the paths.
pub(super) struct ResendQueue {
    pub(super) packets: VecDeque<(Instant, SeqNo, Packet)>,
}

impl ResendQueue {
    /// A congestion loss burst is at most a window; a window of a fast path is a
    /// few hundred packets.
    const CAPACITY: usize = 1024;

    pub fn new() -> Self {
        Self {
            packets: VecDeque::new(),
        }
    }

    pub fn recycle_all(&mut self, pool: &mut BufferPool) {
        for (_, _, packet) in self.packets.drain(..) {
            pool.recycle(packet);
        }
    }
}

impl Session {
    /// Re-sends the data datagrams path `index` declared lost (in `self.sender.lost`).
    pub(super) fn reinject_lost(
        &mut self,
        now: Instant,
        index: usize,
        urgency: Resend,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let lost = std::mem::take(&mut self.sender.lost);
        let data_lost = lost.iter().filter(|packet| packet.seq.is_some()).count();
        if data_lost > 0 {
            self.paths[index].on_losses(data_lost);
        }
        for packet in &lost {
            let Some(seq) = packet.seq else {
                continue;
            };
            let Some(kept) = self.paths[index].take_kept(packet.pn, pool) else {
                continue;
            };
            if !self.reinject(now, index, kept, urgency, pool) {
                drops.record(
                    now,
                    DropReason::NoUsablePath,
                    &"no other path to re-send a lost packet on",
                );
                self.give_up(SeqNo(seq));
            }
        }
        self.sender.lost = lost;
        self.sender.lost.clear();
        self.send_given_up(now, pool);
    }

    /// Remembers that `seq` will never be sent again, to tell the receiver.
    pub(super) fn give_up(&mut self, seq: SeqNo) {
        if let Some((first, count)) = self.sender.given_up.last_mut() {
            if first.add(u32::from(*count)) == seq && *count < u16::MAX {
                *count += 1;
                return;
            }
        }
        // Bounded: if the receiver is not told, it waits out its hold instead.
        if self.sender.given_up.len() < MAX_GIVEN_UP_RUNS {
            self.sender.given_up.push((seq, 1));
        }
    }

    /// Tells the receiver which sequence numbers it need not wait for, in one control
    /// datagram on the path it was heard on most recently. Not acknowledged or
    /// repeated: if it is lost, the receiver's hold runs out as it would have anyway.
    pub(super) fn send_given_up(&mut self, now: Instant, pool: &mut BufferPool) {
        if self.sender.given_up.is_empty() {
            return;
        }
        let Some(index) = self.feedback_path(now) else {
            self.sender.given_up.clear();
            return;
        };
        let runs = std::mem::take(&mut self.sender.given_up);
        let write = |_: &mut Self, buf: &mut [u8]| {
            let mut written = 0;
            for &(first, count) in &runs {
                let frame = Frame::GaveUp {
                    first_seq: first.0,
                    count,
                };
                match wire::write_frame(&mut buf[written..], &frame) {
                    Ok(len) => written += len,
                    Err(_) => break,
                }
            }
            written
        };
        if let Some(outgoing) = self.control(index, false, pool, write) {
            self.outbox.push(outgoing);
        }
        self.sender.given_up = runs;
        self.sender.given_up.clear();
    }

    /// Path `index` went quiet for longer than its RTT explains: copies of what it has
    /// in flight go out on the other paths now, rather than after it is declared down.
    /// The inner TCP sees a gap of about two probe timeouts instead of four; if the
    /// path was only hiccuping, the receiver drops whichever copy comes second.
    pub(super) fn reinject_copies(&mut self, now: Instant, index: usize, pool: &mut BufferPool) {
        self.sender.send_queue.on_capacity_fall(now);
        let mut copies = std::mem::take(&mut self.sender.copies);
        self.paths[index].copy_uncopied(pool, &mut copies);
        for copy in copies.drain(..) {
            // A copy that finds no path is no loss: the original is still in flight.
            self.reinject(now, index, copy, Resend::Urgent, pool);
        }
        self.sender.copies = copies;
    }

    /// Path `index` went down: everything still in flight on it moves elsewhere.
    pub(super) fn reinject_everything_in_flight(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        self.sender.send_queue.on_capacity_fall(now);
        self.sender.lost.clear();
        self.paths[index]
            .probe
            .drain_in_flight(&mut self.sender.lost);
        self.reinject_lost(now, index, Resend::Urgent, pool, drops);
        self.paths[index].recycle_in_flight(pool);
    }

    /// Sends an inner packet that path `from` carried (with its sequence number) again,
    /// sealed anew under the same sequence number on another path, or queues it for
    /// the next free window ([`Resend::InTurn`]); false when it can go nowhere (the
    /// packet is recycled).
    fn reinject(
        &mut self,
        now: Instant,
        from: usize,
        (seq, inner): (SeqNo, Packet),
        urgency: Resend,
        pool: &mut BufferPool,
    ) -> bool {
        // A loss or a dead path changed the paths: the views are built afresh.
        self.sender.views_shown = None;
        self.paths[from].reinjected_away += 1;
        let urgent = urgency == Resend::Urgent;
        // A path that died or went quiet is avoided; one that lost a packet to the
        // radio or to congestion may still be the one that delivers it first.
        let avoid = urgent.then_some(self.paths[from].id);
        let route = Route::Again { avoid, urgent };
        match self.place(now, inner, seq, route, pool) {
            Placement::Sent => {
                self.counters.reinjected += 1;
                true
            }
            Placement::Held(packet) if !urgent && self.has_usable_path(now, avoid) => {
                if self.sender.resend_queue.packets.len() >= ResendQueue::CAPACITY {
                    pool.recycle(packet);
                    return false;
                }
                self.sender
                    .resend_queue
                    .packets
                    .push_back((now, seq, packet));
                true
            }
            Placement::Held(packet) => {
                pool.recycle(packet);
                false
            }
        }
    }

    /// `outgoing` will never be sent as it is (see [`super::Core::unsent`]): its path
    /// no longer counts it in flight, and an inner packet it carried goes out on
    /// another path if `reroute`, else (or if no path can take it) is given up, the
    /// receiver told.
    pub(super) fn unsent(
        &mut self,
        now: Instant,
        outgoing: Outgoing,
        reroute: bool,
        pool: &mut BufferPool,
    ) {
        let Some(Unsealed::Data { seq }) = outgoing.unsealed else {
            return pool.recycle(outgoing.packet);
        };
        let assigned_len = TransportLayout::data(0, outgoing.packet.len()).datagram_len();
        let index = self.path_index(outgoing.path);
        if let Some(index) = index {
            self.paths[index].on_data_unsent(assigned_len);
        }
        let rerouted = match index.filter(|_| reroute) {
            Some(index) => self.reinject(now, index, (seq, outgoing.packet), Resend::Urgent, pool),
            None => {
                pool.recycle(outgoing.packet);
                false
            }
        };
        if !rerouted {
            self.give_up(seq);
            self.send_given_up(now, pool);
        }
    }

    /// Whether a path other than `avoid` is Up: a queued re-send can only go there.
    fn has_usable_path(&self, now: Instant, avoid: Option<PathId>) -> bool {
        let path_timeout = self.settings.path_timeout;
        self.paths.iter().any(|path| {
            Some(path.id) != avoid
                && path.scheduler_state(now, path_timeout) == mptund_sched::PathState::Up
        })
    }
}
