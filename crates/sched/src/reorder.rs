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
//! Memory is bounded at construction: one slot per sequence number of the
//! window `[next_expected, next_expected + capacity)` (allocated as packets
//! arrive further ahead), three bits per slot (held, given up, and for the
//! history delivered), and two bounded queues. A packet beyond the window is not dropped:
//! the window is pushed forward ("forced advance") and whatever it leaves
//! behind is released in order, skipping what never arrived.
//!
//! The hold time need not be fixed: [`AdaptiveHold`] follows the measured
//! one-way-delay spread between the paths and the caller applies its target
//! with [`ReorderBuffer::set_max_hold`]. When the sender reports that it gave
//! up on sequence numbers (lost, and no path left to re-send them on),
//! [`ReorderBuffer::give_up_range`] lets the buffer skip them at once instead of
//! waiting out the hold for packets that will never come.
//!
//! Cost: the sequence numbers and counts come from the peer, so no call may do
//! work that grows with them: a hostile peer would choose them to burn the
//! forwarding thread (issue 64: handled one number at a time, the GaveUp frames
//! of one datagram cost 1.4 ms). The slot bits are kept 64 slots to a word, so
//! marking a range, skipping a gap and pushing the window forward work a word
//! at a time and visit only the packets actually held: one call costs
//! O(capacity / 64 + packets it moves), whatever the values. A range is clamped
//! to the window, and a jump beyond the window passes the rest in one step.
//! Besides, the arrival queue drops each stale entry once (one per packet
//! inserted) and the window's growth allocates under `3 * capacity` slots over
//! the buffer's life. [`ReorderBuffer::work_units`] counts this work, so tests
//! and fuzzers can check the bound without a clock.
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

use self::bitmap::SlotBits;
use crate::seq::SeqNo;

mod bitmap;
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
/// Bound on the work of one [`ReorderBuffer`] call (insert, give-up,
/// `poll_release`), in multiples of `capacity / 64 + packets the call moves + 1`,
/// the amortized upkeep aside; see [`ReorderBuffer::work_units`]. A call does a
/// handful of runs over the slot bits, each at most `capacity / 64 + 1` words (a
/// run that wraps around the end touches one word twice), and a few units per
/// packet it moves; the property test finds 5 enough and checks 8.
pub const REORDER_WORK_PER_CALL: u64 = 8;
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
    /// Three bits per slot `seq & (capacity - 1)`:
    /// - `held`: the window holds `seq`. Lets a skip or a forced advance step over
    ///   empty runs a word at a time and visit only the packets held.
    /// - `abandoned`: the sender gave up on `seq` (within the window), skip it
    ///   without waiting. Cleared as the release point passes the slot.
    /// - `delivered`: `seq` behind `next_expected` was delivered (or is queued in
    ///   `ready`); clear if skipped.
    slots: SlotBits,
    /// How many sequence numbers behind `next_expected` the `delivered` bits
    /// describe (grows from 0 at start up to `capacity`).
    history_len: u32,
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
    work: Work,
}

/// Work a [`ReorderBuffer`] did, counted without a clock; see
/// [`ReorderBuffer::work_units`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Work {
    /// Words of slot bits read or written plus packets put into, moved within or
    /// taken out of the buffer: what the bound of one call covers.
    steps: u64,
    /// Stale `arrival_order` entries dropped: each once, so at most one per packet
    /// ever inserted into the window. (A compaction would add the queue's length,
    /// but none happens: the queue holds the window's packets plus the stale
    /// entries of packets inserted after the oldest held one and released before
    /// it, fewer than `capacity` since they lie within one window behind it.)
    arrival_entries: u64,
    /// Window slots allocated or emptied as the window grew: under `3 * capacity`
    /// over the buffer's life, since the window only doubles.
    window_slots: u64,
}

impl Work {
    fn total(&self) -> u64 {
        self.steps + self.arrival_entries + self.window_slots
    }
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
            next_expected: first_expected,
            window: (0..MIN_WINDOW_SLOTS.min(capacity)).map(|_| None).collect(),
            window_len: 0,
            arrival_order: VecDeque::new(),
            arrival_order_limit,
            slots: SlotBits::new(capacity as u32),
            history_len: 0,
            ready: VecDeque::new(),
            ready_limit,
            last_timeout_skip: None,
            needed_wait: None,
            stats: ReorderStats::default(),
            work: Work::default(),
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
        let (slot, bit) = self.slots.slot_mut(seq);
        slot.held |= bit;
        // One bitmap word, one packet.
        self.work.steps += 2;
        self.record_arrival(seq);
        Ok(())
    }

    /// The next packet to hand on, or `None` when the next expected one is
    /// missing and its gap has not expired yet. Call until `None`.
    pub fn poll_release(&mut self, now: Instant) -> Option<T> {
        if let Some(held) = self.ready.pop_front() {
            self.work.steps += 1;
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
        let seq = self.next_expected;
        let index = self.slot(seq);
        let held = self.window[index].take()?;
        self.window_len -= 1;
        let (slot, bit) = self.slots.slot_mut(seq);
        slot.held &= !bit;
        slot.delivered |= bit;
        // The slot now belongs to `seq + capacity`, not given up.
        slot.abandoned &= !bit;
        // One word group, one packet.
        self.work.steps += 2;
        self.next_expected = seq.next();
        self.history_len = (self.history_len + 1).min(self.capacity);
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
        self.give_up_range(seq, 1);
    }

    /// [`ReorderBuffer::give_up`] for the `count` sequence numbers from `first`
    /// (wrapping), as a GaveUp frame carries them. Only the part within the window
    /// `[next_expected, next_expected + capacity)` is marked, a word at a time, so
    /// the cost is at most two runs of `capacity / 64` words whatever `first` and
    /// `count` are.
    pub fn give_up_range(&mut self, first: SeqNo, count: u32) {
        let capacity = u64::from(self.capacity);
        let count = u64::from(count);
        // Offsets forward from the release point, mod 2^32: the range covers
        // `start..start + count`, and offsets past 2^32 wrap around to 0.
        let start = u64::from(first.0.wrapping_sub(self.next_expected.0));
        if start < capacity {
            let end = (start + count).min(capacity);
            self.abandon_run(start as u32, (end - start) as u32);
        }
        // A range that runs from behind the window all the way around the
        // sequence space also covers `0..start + count - 2^32`.
        let wrapped_end = (start + count).saturating_sub(1 << 32).min(capacity);
        if wrapped_end > 0 {
            self.abandon_run(0, wrapped_end as u32);
        }
    }

    /// Marks `len` sequence numbers from `next_expected + offset` (all within the
    /// window) as given up, except those the window holds.
    fn abandon_run(&mut self, offset: u32, len: u32) {
        let start = self.next_expected.add(offset);
        self.work.steps += self.slots.update_run(start, len, |slot, run| {
            slot.abandoned |= run & !slot.held;
        });
    }

    /// Work done since creation, in units that do not depend on the clock: words
    /// of slot bits read or written plus packets put in, moved or taken out, plus
    /// the amortized upkeep of the arrival queue and of window growth. For tests
    /// and fuzzing: one call costs at most [`REORDER_WORK_PER_CALL`] times
    /// `capacity / 64 + packets it moves + 1`, plus the upkeep, which over the
    /// buffer's life is at most one unit per packet inserted plus `3 * capacity`.
    pub fn work_units(&self) -> u64 {
        self.work.total()
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
        self.work.steps += 1;
        let (slot, bit) = self.slots.slot(seq);
        if slot.delivered & bit != 0 {
            return Err(self.reject(item, RejectReason::Duplicate));
        }
        if self.ready.len() >= self.ready_limit {
            return Err(self.reject(item, RejectReason::Backlogged));
        }
        let (slot, bit) = self.slots.slot_mut(seq);
        slot.delivered |= bit;
        self.work.steps += 1;
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
    /// Visits only the packets held; empty runs are passed a word at a time.
    fn force_advance(&mut self, new_start: SeqNo) {
        self.stats.forced_advances += 1;
        let old_start = self.next_expected;
        let jump = old_start.distance_to(new_start) as u32;
        // Only the old window, the first `scanned` numbers passed, can hold
        // packets or given-up marks; the history keeps the last `scanned` passed:
        // delivered where the old window holds the number, skipped elsewhere.
        let scanned = jump.min(self.capacity);
        let history_start = old_start.add(jump - scanned);
        let in_old_window = scanned.saturating_sub(jump - scanned);
        self.work.steps += self.slots.update_run(history_start, scanned, |slot, run| {
            slot.delivered &= !run;
        });
        self.work.steps += self
            .slots
            .update_run(history_start, in_old_window, |slot, run| {
                slot.delivered |= slot.held & run;
            });

        // Queue the held packets in order; every run of empty numbers before,
        // between or after them is one skipped gap.
        let mut passed = 0u32;
        loop {
            let (found, words) =
                self.slots
                    .first_in_run(old_start.add(passed), scanned - passed, |slot| slot.held);
            self.work.steps += words;
            let Some(empty_before) = found else { break };
            self.count_skipped_gap(empty_before);
            let seq = old_start.add(passed + empty_before);
            let (slot, bit) = self.slots.slot_mut(seq);
            slot.held &= !bit;
            if let Some(held) = self.take_held(seq) {
                self.window_len -= 1;
                self.ready.push_back(held);
            }
            // One word group, one packet.
            self.work.steps += 2;
            passed += empty_before + 1;
        }
        // Beyond the window nothing can be held: the rest is one gap.
        self.count_skipped_gap(jump - passed);
        // Every slot passed now belongs to a number of the new window.
        self.work.steps += self.slots.update_run(old_start, scanned, |slot, run| {
            slot.abandoned &= !run;
        });
        self.next_expected = new_start;
        self.history_len = self.history_len.saturating_add(jump).min(self.capacity);
        self.drop_stale_arrivals();
    }

    /// Counts a skipped run of `len` missing sequence numbers (none when 0).
    fn count_skipped_gap(&mut self, len: u32) {
        if len > 0 {
            self.stats.gaps_skipped += 1;
            self.stats.seqs_skipped += u64::from(len);
        }
    }

    /// Gives up on the missing sequence numbers at the release point, up to the
    /// first packet held. The window must hold at least one packet.
    fn skip_gap(&mut self) {
        let (found, words) = self
            .slots
            .first_in_run(self.next_expected, self.capacity, |slot| slot.held);
        self.work.steps += words;
        debug_assert!(found.is_some(), "skip_gap with an empty window");
        let missing = found.unwrap_or(0);
        self.skip_run(missing);
        self.count_skipped_gap(missing);
    }

    /// Skips the run of missing sequence numbers at the release point that the
    /// sender gave up on; counts it as one gap.
    fn skip_abandoned(&mut self) {
        // The common case, nothing given up here, costs one bit test.
        let (slot, bit) = self.slots.slot(self.next_expected);
        if slot.abandoned & !slot.held & bit == 0 {
            return;
        }
        // The run ends at the first number held or not given up.
        let (found, words) = self
            .slots
            .first_in_run(self.next_expected, self.capacity, |slot| {
                slot.held | !slot.abandoned
            });
        self.work.steps += words;
        let skipped = found.unwrap_or(self.capacity);
        self.skip_run(skipped);
        self.count_skipped_gap(skipped);
        self.stats.seqs_skipped_early += u64::from(skipped);
        self.drop_stale_arrivals();
    }

    /// Moves the release point past `len` (at most `capacity`) missing sequence
    /// numbers: remembered as not delivered, and their given-up marks cleared, as
    /// their slots now belong to the numbers `capacity` further on.
    fn skip_run(&mut self, len: u32) {
        self.work.steps += self.slots.update_run(self.next_expected, len, |slot, run| {
            slot.delivered &= !run;
            slot.abandoned &= !run;
        });
        self.next_expected = self.next_expected.add(len);
        self.history_len = self.history_len.saturating_add(len).min(self.capacity);
    }

    fn is_abandoned(&self, seq: SeqNo) -> bool {
        let (slot, bit) = self.slots.slot(seq);
        slot.abandoned & bit != 0
    }

    fn record_arrival(&mut self, seq: SeqNo) {
        if self.arrival_order.len() >= self.arrival_order_limit {
            self.work.arrival_entries += self.arrival_order.len() as u64;
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
            self.work.arrival_entries += 1;
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
        self.work.window_slots += (len + self.window.len()) as u64;
        for held in self.window.drain(..).flatten() {
            let index = slot_of(&window, held.seq);
            window[index] = Some(held);
        }
        self.window = window;
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
