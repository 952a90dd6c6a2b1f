//! The receiver's reorder buffer: hides path-delay differences from the inner TCP.
//!
//! Packets of one session arrive over paths whose delays differ by tens of
//! milliseconds, so they arrive out of order. TCP reads reordering beyond about
//! three segments as loss and halves its window (the effect the high-speed-train
//! study, `seeds/003_*` §4, models), so the receiver holds packets that arrive
//! after a gap until the gap is filled, but never longer than
//! [`ReorderConfig::max_hold`]: a gap that stays open is most likely a real
//! loss, and holding longer only adds delay. The wait is measured from the
//! arrival of the oldest packet held behind the gap, so no packet waits longer
//! than `max_hold` for a gap (if the caller polls at [`ReorderBuffer::poll_timeout`]).
//!
//! A packet that turns up after its gap was given up on is still released
//! (counted as late): one out-of-order segment costs the inner TCP less than a
//! retransmission. To tell such a packet from a copy of one already delivered
//! (paths, redundant schedulers and the network all duplicate), the buffer
//! remembers, for the last `capacity` sequence numbers behind the release
//! point, which were delivered. Anything older is rejected as too old.
//!
//! Memory is fixed at construction: one slot per sequence number of the
//! window `[next_expected, next_expected + capacity)`, a bitmap for the
//! history, and two bounded queues. A packet beyond the window is not dropped:
//! the window is pushed forward ("forced advance") and whatever it leaves
//! behind is released in order, skipping what never arrived.
//!
//! The hold time need not be fixed: [`AdaptiveHold`] follows the measured
//! one-way-delay spread between the paths and the caller applies its target
//! with [`ReorderBuffer::set_max_hold`]. When the sender reports that it gave
//! up on a sequence number (lost, and no path left to re-send it on),
//! [`ReorderBuffer::give_up`] lets the buffer skip it at once instead of
//! waiting out the hold for a packet that will never come.
//!
//! Order alone leaves the inner flow's delay jumping between the paths' delays;
//! [`DelayEqualizer`] and [`DelayLine`] hand packets on at one delay (see
//! `equalize.rs`).
//!
//! Sans-IO: the caller inserts packets with the time they arrived, calls
//! [`ReorderBuffer::poll_release`] until it returns `None`, and arms a timer
//! for [`ReorderBuffer::poll_timeout`]. `now` must never go backwards.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::seq::SeqNo;

mod equalize;
mod hold;
#[cfg(test)]
mod tests;

pub use equalize::{
    DelayEqualizer, DelayLine, Equalization, EqualizeScope, DATA_ACTIVE_WINDOW, HEARD_WINDOW,
};
pub use hold::{AdaptiveHold, HoldBounds, HoldHistogram, HOLD_BUCKET_BOUNDS};

/// A raw one-way delay (the receiver's clock minus the sender's transmit timestamp,
/// microseconds, wrapping) relative to the first one seen, which `reference` keeps: the
/// unknown clock offset and the u32 wrap cancel, and within ±35 minutes of the first
/// sample the signed difference is exact.
fn relative_delay_us(reference: &mut Option<u32>, raw_owd_us: u32) -> i64 {
    let reference = *reference.get_or_insert(raw_owd_us);
    i64::from(raw_owd_us.wrapping_sub(reference) as i32)
}

/// Largest window [`ReorderBuffer`] accepts; larger configurations are
/// clamped. 2^20 packets is ~1.5 GB of 1500-byte packets in the window, far
/// beyond any bandwidth-delay product a set of cellular uplinks reaches.
pub const MAX_REORDER_CAPACITY: usize = 1 << 20;
/// The window a buffer starts with, in slots: enough for the reordering of a few
/// milliseconds; it doubles on demand up to the configured capacity.
const MIN_WINDOW_SLOTS: usize = 64;

/// Tuning of a [`ReorderBuffer`].
#[derive(Clone, Copy, Debug)]
pub struct ReorderConfig {
    /// Longest time a packet waits for a gap before it to be filled; after
    /// that the gap is skipped.
    pub max_hold: Duration,
    /// Window size in packets. Rounded up to a power of two (so a slot is
    /// `seq & mask`) and clamped to `1..=MAX_REORDER_CAPACITY`; see
    /// [`ReorderConfig::effective_capacity`].
    pub capacity: usize,
}

impl ReorderConfig {
    /// The window size the buffer actually uses.
    pub fn effective_capacity(&self) -> usize {
        self.capacity
            .clamp(1, MAX_REORDER_CAPACITY)
            .next_power_of_two()
    }
}

/// Why [`ReorderBuffer::insert`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// A packet with this sequence number is already buffered or was already
    /// delivered: a copy, drop it.
    #[error("duplicate sequence number")]
    Duplicate,
    /// The sequence number is further behind the release point than the
    /// buffer remembers (or precedes the session's first expected one), so it
    /// cannot be told from a duplicate: drop it.
    #[error("sequence number too old")]
    TooOld,
    /// The caller has not drained [`ReorderBuffer::poll_release`] for so long
    /// that accepting this packet would exceed the buffer's fixed memory. Only
    /// happens when more than `capacity` released-but-unpolled packets pile
    /// up; call `poll_release` until `None` after every batch of inserts.
    #[error("release queue full: poll_release was not drained")]
    Backlogged,
}

/// A refused packet, handed back so the caller can recycle its buffer.
#[derive(Debug)]
pub struct Rejected<T> {
    /// The packet that was passed to [`ReorderBuffer::insert`].
    pub item: T,
    /// Why it was refused.
    pub reason: RejectReason,
}

impl<T> std::fmt::Display for Rejected<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "packet rejected by the reorder buffer: {}", self.reason)
    }
}

impl<T: std::fmt::Debug> std::error::Error for Rejected<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.reason)
    }
}

/// Counters of a [`ReorderBuffer`] since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderStats {
    /// Released packets that were the next expected one when they arrived.
    pub released_in_order: u64,
    /// Released packets that arrived behind a gap and had to wait.
    pub released_after_wait: u64,
    /// Released packets whose sequence number had already been skipped.
    pub released_late: u64,
    /// Gaps (runs of consecutive missing sequence numbers) given up on, for
    /// whatever reason (hold expired, window pushed forward, sender gave up).
    pub gaps_skipped: u64,
    /// Sequence numbers given up on, summed over all gaps.
    pub seqs_skipped: u64,
    /// Of `seqs_skipped`, those skipped without waiting because the sender
    /// reported them lost for good ([`ReorderBuffer::give_up`]).
    pub seqs_skipped_early: u64,
    /// Packets rejected as [`RejectReason::Duplicate`].
    pub duplicates: u64,
    /// Packets rejected as [`RejectReason::TooOld`].
    pub too_old: u64,
    /// Packets rejected as [`RejectReason::Backlogged`].
    pub backlogged: u64,
    /// Inserts that pushed the window forward because they were too far ahead.
    pub forced_advances: u64,
    /// Longest time any packet spent in the buffer (insert to release).
    pub max_hold: Duration,
    /// Time spent in the buffer, summed over all released packets.
    pub total_hold: Duration,
    /// Distribution of the time released packets spent in the buffer.
    pub hold_histogram: HoldHistogram,
}

impl ReorderStats {
    /// All packets released so far.
    pub fn released(&self) -> u64 {
        self.released_in_order + self.released_after_wait + self.released_late
    }
}

/// How a buffered packet will be counted when it is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReleaseKind {
    InOrder,
    AfterWait,
    Late,
}

/// One packet in the buffer.
#[derive(Debug)]
struct Held<T> {
    seq: SeqNo,
    arrived: Instant,
    kind: ReleaseKind,
    item: T,
}

/// Puts packets back into sequence order; see the module docs.
#[derive(Debug)]
pub struct ReorderBuffer<T> {
    /// Current hold limit; see [`ReorderBuffer::set_max_hold`].
    max_hold: Duration,
    /// Window size in packets, a power of two.
    capacity: u32,
    /// `capacity - 1`: bitmap index of a sequence number.
    index_mask: u32,
    /// Lowest sequence number neither released nor skipped; the window starts here.
    next_expected: SeqNo,
    /// Packets of the window, slot `seq & (window.len() - 1)`. Grows in powers of two
    /// up to `capacity` as packets arrive further ahead, so a session that never sees
    /// much reordering never pays for the whole window. Every packet in it lies within
    /// `window.len()` of `next_expected`, so a slot can only hold its own number.
    window: Vec<Option<Held<T>>>,
    /// Occupied slots of `window`.
    window_len: usize,
    /// Sequence numbers of window packets in arrival order, so the oldest
    /// held packet (the one that sets the gap deadline) is at the front.
    /// Entries of packets that already left the window are removed lazily;
    /// the front is always a packet still in the window.
    arrival_order: VecDeque<SeqNo>,
    /// Bound on `arrival_order`; when reached, stale entries are compacted away.
    arrival_order_limit: usize,
    /// One bit per sequence number behind `next_expected` (index `seq & index_mask`):
    /// set if it was delivered (or is queued in `ready`), clear if skipped.
    delivered: Vec<u64>,
    /// How many sequence numbers behind `next_expected` `delivered` describes
    /// (grows from 0 at start up to `capacity`).
    history_len: u32,
    /// One bit per window slot (index `seq & index_mask`): the sender gave up on
    /// this sequence number, skip it without waiting. Cleared as the release
    /// point passes the slot.
    abandoned: Vec<u64>,
    /// Packets that left the window (forced advance) or arrived late, waiting
    /// for `poll_release`; always released before the window.
    ready: VecDeque<Held<T>>,
    /// Bound on `ready`; beyond it inserts are refused as `Backlogged`.
    ready_limit: usize,
    /// When the last gap was given up on for want of time, and the hold then.
    last_timeout_skip: Option<(Instant, Duration)>,
    /// How long the latest gap needed, for [`ReorderBuffer::take_needed_wait`].
    needed_wait: Option<Duration>,
    stats: ReorderStats,
}

impl<T> ReorderBuffer<T> {
    /// A buffer expecting `first_expected` next. Sequence numbers before
    /// `first_expected` are rejected as too old.
    pub fn new(config: ReorderConfig, first_expected: SeqNo) -> Self {
        let capacity = config.effective_capacity();
        // Room for one full window of forced-out packets plus as many late
        // ones: enough for any caller that drains after each batch.
        let ready_limit = 2 * capacity;
        // Window packets plus the stale entries of up to one window more.
        let arrival_order_limit = 2 * capacity;
        ReorderBuffer {
            max_hold: config.max_hold,
            capacity: capacity as u32,
            index_mask: capacity as u32 - 1,
            next_expected: first_expected,
            window: (0..MIN_WINDOW_SLOTS.min(capacity)).map(|_| None).collect(),
            window_len: 0,
            arrival_order: VecDeque::new(),
            arrival_order_limit,
            delivered: vec![0; capacity.div_ceil(64)],
            history_len: 0,
            abandoned: vec![0; capacity.div_ceil(64)],
            ready: VecDeque::new(),
            ready_limit,
            last_timeout_skip: None,
            needed_wait: None,
            stats: ReorderStats::default(),
        }
    }

    /// Accepts a packet that arrived at `now` with sequence number `seq`.
    ///
    /// On rejection the packet is handed back inside [`Rejected`].
    pub fn insert(&mut self, now: Instant, seq: SeqNo, item: T) -> Result<(), Rejected<T>> {
        let ahead = self.next_expected.distance_to(seq);
        if ahead < 0 {
            return self.insert_behind(now, seq, item);
        }
        if ahead as u32 >= self.capacity {
            // Conservative: every window packet might be forced out into `ready`.
            if self.ready.len() + self.window_len > self.ready_limit {
                return Err(self.reject(item, RejectReason::Backlogged));
            }
            self.force_advance(seq.sub(self.capacity - 1));
        }
        self.reserve_window(self.next_expected.distance_to(seq) as u32);
        let index = self.slot(seq);
        if self.window[index].is_some() {
            return Err(self.reject(item, RejectReason::Duplicate));
        }
        let kind = if seq == self.next_expected {
            // It fills the gap packets behind it waited on: that wait was needed.
            if let Some(oldest) = self.oldest_arrival() {
                self.needed_wait = Some(now.saturating_duration_since(oldest));
            }
            ReleaseKind::InOrder
        } else {
            ReleaseKind::AfterWait
        };
        self.window[index] = Some(Held {
            seq,
            arrived: now,
            kind,
            item,
        });
        self.window_len += 1;
        self.record_arrival(seq);
        Ok(())
    }

    /// The next packet to hand on, or `None` when the next expected one is
    /// missing and its gap has not expired yet. Call until `None`.
    pub fn poll_release(&mut self, now: Instant) -> Option<T> {
        if let Some(held) = self.ready.pop_front() {
            return Some(self.account_release(now, held));
        }
        if self.window_len == 0 {
            return None;
        }
        self.skip_abandoned();
        if !self.holds(self.next_expected) {
            if now < self.poll_timeout()? {
                return None;
            }
            self.last_timeout_skip = Some((now, self.max_hold));
            self.skip_gap();
        }
        let index = self.slot(self.next_expected);
        let held = self.window[index].take()?;
        self.window_len -= 1;
        self.set_delivered(self.next_expected, true);
        self.advance_release_point(1);
        self.drop_stale_arrivals();
        Some(self.account_release(now, held))
    }

    /// Arrival of the oldest packet in the window.
    fn oldest_arrival(&self) -> Option<Instant> {
        let oldest = *self.arrival_order.front()?;
        Some(self.window[self.slot(oldest)].as_ref()?.arrived)
    }

    /// When the oldest packet held in the window stops waiting for its gap;
    /// `None` when the window is empty. Meaningful after `poll_release`
    /// returned `None`: call `poll_release` again at that instant.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let oldest = *self.arrival_order.front()?;
        let held = self.window[self.slot(oldest)].as_ref()?;
        let next = self.next_expected;
        if !self.holds(next) && self.is_abandoned(next) {
            // Given up: due already, `poll_release` skips it at once.
            return Some(held.arrived);
        }
        // An absurd max_hold that overflows Instant means "never".
        held.arrived.checked_add(self.max_hold)
    }

    /// Changes how long packets wait for a gap, effective at once for the
    /// packets already held (their deadlines are `arrival + max_hold`). The
    /// caller re-reads [`ReorderBuffer::poll_timeout`] afterwards.
    pub fn set_max_hold(&mut self, max_hold: Duration) {
        self.max_hold = max_hold;
    }

    /// The hold limit in force.
    pub fn max_hold(&self) -> Duration {
        self.max_hold
    }

    /// How long the most recent gap took to fill since the last call, if one
    /// did: the wait of the oldest packet behind it when the missing one came,
    /// or, for a packet that came after its gap was given up, the hold then
    /// plus its lateness. What [`AdaptiveHold::on_needed_wait`] learns from.
    pub fn take_needed_wait(&mut self) -> Option<Duration> {
        self.needed_wait.take()
    }

    /// The sender will never deliver `seq` (it was lost and could not be sent
    /// again): the release point skips it without waiting when it gets there.
    /// Ignored for sequence numbers already released or skipped, already
    /// buffered, or beyond the window. Call `poll_release` afterwards.
    pub fn give_up(&mut self, seq: SeqNo) {
        let ahead = self.next_expected.distance_to(seq);
        if ahead < 0 || ahead as u32 >= self.capacity {
            return;
        }
        if !self.holds(seq) {
            let index = self.index(seq);
            self.abandoned[index / 64] |= 1 << (index % 64);
        }
    }

    /// PROVISIONAL (replaced by the word-level version): gives up a run.
    pub fn give_up_range(&mut self, first: SeqNo, count: u32) {
        for offset in 0..count.min(self.capacity) {
            self.give_up(first.add(offset));
        }
    }

    /// PROVISIONAL: work counter.
    pub fn work_units(&self) -> u64 {
        0
    }

    /// Counters since creation.
    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Packets held: in the window plus released-but-not-yet-polled.
    pub fn len(&self) -> usize {
        self.window_len + self.ready.len()
    }

    /// True when no packet is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lowest sequence number neither released nor skipped.
    pub fn next_expected(&self) -> SeqNo {
        self.next_expected
    }

    /// The window size in use (the configured capacity rounded up to a power of two).
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// A packet behind the release point: late, duplicate or too old.
    fn insert_behind(&mut self, now: Instant, seq: SeqNo, item: T) -> Result<(), Rejected<T>> {
        let behind = self.next_expected.0.wrapping_sub(seq.0);
        if behind > self.history_len {
            return Err(self.reject(item, RejectReason::TooOld));
        }
        if self.is_delivered(seq) {
            return Err(self.reject(item, RejectReason::Duplicate));
        }
        if self.ready.len() >= self.ready_limit {
            return Err(self.reject(item, RejectReason::Backlogged));
        }
        self.set_delivered(seq, true);
        self.ready.push_back(Held {
            seq,
            arrived: now,
            kind: ReleaseKind::Late,
            item,
        });
        // Its gap was given up too soon: at least the hold then plus how late it is
        // since (a late packet from an earlier skip still gives a lower bound).
        if let Some((skipped_at, hold)) = self.last_timeout_skip {
            self.needed_wait = Some(hold + now.saturating_duration_since(skipped_at));
        }
        Ok(())
    }

    /// Moves the release point to `new_start`, queueing the packets it passes
    /// for release in order and skipping the sequence numbers it finds empty.
    fn force_advance(&mut self, new_start: SeqNo) {
        self.stats.forced_advances += 1;
        let jump = self.next_expected.distance_to(new_start) as u32;
        let scanned = jump.min(self.capacity);
        let mut in_gap = false;
        for _ in 0..scanned {
            let seq = self.next_expected;
            match self.take_held(seq) {
                Some(held) => {
                    self.window_len -= 1;
                    self.set_delivered(seq, true);
                    self.clear_abandoned(seq);
                    self.ready.push_back(held);
                    in_gap = false;
                }
                None => {
                    self.set_delivered(seq, false);
                    self.clear_abandoned(seq);
                    self.stats.seqs_skipped += 1;
                    if !in_gap {
                        self.stats.gaps_skipped += 1;
                        in_gap = true;
                    }
                }
            }
            self.next_expected = seq.next();
        }
        // Beyond one window nothing can be buffered: skip the rest in one go,
        // clearing only the history bits that stay within reach.
        let unscanned = jump - scanned;
        if unscanned > 0 {
            self.stats.seqs_skipped += u64::from(unscanned);
            if !in_gap {
                self.stats.gaps_skipped += 1;
            }
            let remembered = unscanned.min(self.capacity);
            for offset in unscanned - remembered..unscanned {
                self.set_delivered(self.next_expected.add(offset), false);
            }
            self.next_expected = self.next_expected.add(unscanned);
        }
        self.history_len = self.history_len.saturating_add(jump).min(self.capacity);
        self.drop_stale_arrivals();
    }

    /// Gives up on the missing sequence numbers at the release point.
    /// The window must hold at least one packet.
    fn skip_gap(&mut self) {
        let mut skipped = 0;
        while !self.holds(self.next_expected) {
            self.set_delivered(self.next_expected, false);
            self.advance_release_point(1);
            skipped += 1;
        }
        self.stats.gaps_skipped += 1;
        self.stats.seqs_skipped += skipped;
    }

    /// Skips the run of missing sequence numbers at the release point that the
    /// sender gave up on; counts it as one gap.
    fn skip_abandoned(&mut self) {
        let mut skipped = 0;
        while skipped < self.capacity
            && !self.holds(self.next_expected)
            && self.is_abandoned(self.next_expected)
        {
            self.set_delivered(self.next_expected, false);
            self.advance_release_point(1);
            skipped += 1;
        }
        if skipped > 0 {
            self.stats.gaps_skipped += 1;
            self.stats.seqs_skipped += u64::from(skipped);
            self.stats.seqs_skipped_early += u64::from(skipped);
            self.drop_stale_arrivals();
        }
    }

    fn is_abandoned(&self, seq: SeqNo) -> bool {
        let index = self.index(seq);
        self.abandoned[index / 64] & (1 << (index % 64)) != 0
    }

    /// The release point is leaving `seq`: its slot is free for `seq + capacity`.
    fn clear_abandoned(&mut self, seq: SeqNo) {
        let index = self.index(seq);
        self.abandoned[index / 64] &= !(1 << (index % 64));
    }

    fn advance_release_point(&mut self, count: u32) {
        for offset in 0..count {
            self.clear_abandoned(self.next_expected.add(offset));
        }
        self.next_expected = self.next_expected.add(count);
        self.history_len = self.history_len.saturating_add(count).min(self.capacity);
    }

    fn record_arrival(&mut self, seq: SeqNo) {
        if self.arrival_order.len() >= self.arrival_order_limit {
            let window = &self.window;
            self.arrival_order
                .retain(|&queued| window_holds(window, queued));
        }
        self.arrival_order.push_back(seq);
    }

    /// Restores the invariant that the front of `arrival_order` is in the window.
    fn drop_stale_arrivals(&mut self) {
        while let Some(&oldest) = self.arrival_order.front() {
            if self.holds(oldest) {
                break;
            }
            self.arrival_order.pop_front();
        }
    }

    fn account_release(&mut self, now: Instant, held: Held<T>) -> T {
        let hold = now.saturating_duration_since(held.arrived);
        self.stats.max_hold = self.stats.max_hold.max(hold);
        self.stats.total_hold = self.stats.total_hold.saturating_add(hold);
        self.stats.hold_histogram.record(hold);
        match held.kind {
            ReleaseKind::InOrder => self.stats.released_in_order += 1,
            ReleaseKind::AfterWait => self.stats.released_after_wait += 1,
            ReleaseKind::Late => self.stats.released_late += 1,
        }
        held.item
    }

    fn reject(&mut self, item: T, reason: RejectReason) -> Rejected<T> {
        match reason {
            RejectReason::Duplicate => self.stats.duplicates += 1,
            RejectReason::TooOld => self.stats.too_old += 1,
            RejectReason::Backlogged => self.stats.backlogged += 1,
        }
        Rejected { item, reason }
    }

    /// The bitmap index of `seq`.
    fn index(&self, seq: SeqNo) -> usize {
        (seq.0 & self.index_mask) as usize
    }

    /// The window slot of `seq`.
    fn slot(&self, seq: SeqNo) -> usize {
        slot_of(&self.window, seq)
    }

    /// True when the window holds `seq`.
    fn holds(&self, seq: SeqNo) -> bool {
        window_holds(&self.window, seq)
    }

    /// Takes `seq` out of the window if it is there.
    fn take_held(&mut self, seq: SeqNo) -> Option<Held<T>> {
        if !self.holds(seq) {
            return None;
        }
        let index = self.slot(seq);
        self.window[index].take()
    }

    /// Makes the window reach `ahead` past `next_expected` (at most `capacity`):
    /// doubles it until it does and moves every packet to its slot in the larger one.
    fn reserve_window(&mut self, ahead: u32) {
        if (ahead as usize) < self.window.len() {
            return;
        }
        let len = (ahead as usize + 1)
            .next_power_of_two()
            .min(self.capacity as usize);
        let mut window: Vec<Option<Held<T>>> = (0..len).map(|_| None).collect();
        for held in self.window.drain(..).flatten() {
            let index = slot_of(&window, held.seq);
            window[index] = Some(held);
        }
        self.window = window;
    }

    fn is_delivered(&self, seq: SeqNo) -> bool {
        let index = self.index(seq);
        self.delivered[index / 64] & (1 << (index % 64)) != 0
    }

    fn set_delivered(&mut self, seq: SeqNo, delivered: bool) {
        let index = self.index(seq);
        let bit = 1u64 << (index % 64);
        if delivered {
            self.delivered[index / 64] |= bit;
        } else {
            self.delivered[index / 64] &= !bit;
        }
    }
}

/// The slot of `seq` in a window whose length is a power of two.
fn slot_of<T>(window: &[Option<Held<T>>], seq: SeqNo) -> usize {
    (seq.0 as usize) & (window.len() - 1)
}

/// True when the window slot of `seq` holds that very packet.
fn window_holds<T>(window: &[Option<Held<T>>], seq: SeqNo) -> bool {
    window[slot_of(window, seq)]
        .as_ref()
        .is_some_and(|held| held.seq == seq)
}
