//! Receiver side of per-path acknowledgement feedback, after RFC 9000 section 13.2
//! (generating acknowledgements) and section 19.3 (ACK ranges).
//!
//! The receiver of a path records which path packet numbers arrived as ranges of
//! consecutive numbers and reports the newest [`MAX_ACK_RANGES`] of them in every
//! acknowledgement. A range keeps being reported until newer ranges push it out, so a
//! lost acknowledgement costs nothing as long as a later one arrives (RFC 9000
//! section 13.2.3, "Managing ACK Ranges"). Acknowledgements are sent after
//! [`ACK_ELICITING_THRESHOLD`] datagrams that together exceed one full-sized datagram,
//! after [`SMALL_DATAGRAMS_THRESHOLD`] of any size, or `max_ack_delay` after the first
//! unacknowledged one (section 13.2.2), whichever comes first, and at once when a
//! packet arrives above a gap (section 13.2.1): the sender declares the gap lost on
//! hearing of it, and the receiver holds everything behind it until the repair.
//!
//! Counting bytes rather than packets is TCP's delayed-ACK rule (RFC 5681 section
//! 4.2, two full-sized segments). Data paths are acknowledged as often as before, but
//! a stream of small datagrams, such as the inner flow's own acknowledgements coming
//! back, is acknowledged once per [`SMALL_DATAGRAMS_THRESHOLD`] datagrams or
//! `max_ack_delay`, instead of once per two. Those acknowledgements travel on the
//! busy direction, where each takes a slot of the data's rate. The cap on small
//! datagrams is measured, not derived: with the timer alone, an inner BBR download
//! whose acknowledgements came back densely fell to 58-94 % of its usual rate in five
//! runs of eight (`benches/schedulers/REPORT.md`).
//!
//! Path packet numbers are 32 bits and wrap; inside the tracker they are widened to
//! 64 bits (see `seq`), on the wire a range `(first, last)` covers
//! `first, first + 1, ..., last` with wrapping arithmetic, so `(u32::MAX - 1, 1)` is a
//! range of four numbers.

use std::time::{Duration, Instant};

use crate::seq::widen_or_origin;

/// How many ranges one acknowledgement carries: RFC 9000 leaves the number to the
/// receiver (section 13.2.3); 16 ranges cover 15 holes, more than a striped path
/// shows within one round trip, and keep [`AckRanges`] at 132 bytes so it is `Copy`.
pub const MAX_ACK_RANGES: usize = 16;

/// RFC 9000 section 13.2.2: "A receiver SHOULD send an ACK frame after receiving at
/// least two ack-eliciting packets." Counted here in full-sized datagrams' worth of
/// bytes, so two data datagrams of any near-full size are enough.
pub const ACK_ELICITING_THRESHOLD: u32 = 2;

/// However small the datagrams, this many make an acknowledgement due.
pub const SMALL_DATAGRAMS_THRESHOLD: u32 = 8;
/// How many packets past a gap an acknowledgement still counts as news of a loss:
/// enough for the sender's packet threshold (1, raised after spurious losses) to
/// declare it.
pub const LOSS_NEWS_PACKETS: u64 = 8;

/// Inclusive ranges of acknowledged path packet numbers, newest (highest) first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckRanges {
    ranges: [(u32, u32); MAX_ACK_RANGES],
    len: u8,
}

impl AckRanges {
    /// The ranges as `(first, last)`, inclusive, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ranges[..self.len()].iter().copied()
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends an older range; `false` (and nothing stored) when all
    /// [`MAX_ACK_RANGES`] slots are used. The order is not checked here: a decoder
    /// pushes what the wire says and the sender widens and bounds every range itself.
    pub fn push(&mut self, first: u32, last: u32) -> bool {
        if self.len() == MAX_ACK_RANGES {
            return false;
        }
        self.ranges[self.len()] = (first, last);
        self.len += 1;
        true
    }

    /// The last number of the first (newest) range.
    pub fn largest(&self) -> Option<u32> {
        self.iter().next().map(|(_, last)| last)
    }
}

/// One acknowledgement, ready to be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSummary {
    pub ranges: AckRanges,
    /// How long the largest acknowledged packet waited at the receiver before this
    /// acknowledgement was built (RFC 9000 section 19.3, "ACK Delay").
    pub ack_delay: Duration,
    /// The receiver's local microsecond clock at receipt of the largest packet minus
    /// the sender's timestamp in it, wrapping: a one-way delay plus an unknown but
    /// constant clock offset.
    pub largest_owd_raw_us: u32,
}

/// The receiver's record of one path: what arrived, and when an acknowledgement is due.
#[derive(Clone, Debug)]
pub struct AckTracker {
    max_ack_delay: Duration,
    /// Widened inclusive ranges, newest first; one spare slot for the insertion that
    /// precedes an eviction.
    ranges: [(u64, u64); MAX_ACK_RANGES + 1],
    len: usize,
    /// The highest number that fell out of the tracked ranges. Anything at or below it
    /// is too old to be acknowledged again and is reported as already recorded.
    evicted_up_to: Option<u64>,
    largest_received_at: Option<Instant>,
    largest_owd_raw_us: u32,
    /// Packets recorded since the last acknowledgement was taken.
    unacked: u32,
    /// Their datagram bytes.
    unacked_bytes: usize,
    /// The largest datagram the peer sends on the path.
    full_datagram_len: usize,
    first_unacked_at: Option<Instant>,
    /// A packet arrived above a gap since the last acknowledgement was taken.
    gap_opened: bool,
}

impl AckTracker {
    /// `full_datagram_len` is the largest datagram the peer sends on the path.
    pub fn new(max_ack_delay: Duration, full_datagram_len: usize) -> Self {
        Self {
            max_ack_delay,
            unacked_bytes: 0,
            full_datagram_len,
            ranges: [(0, 0); MAX_ACK_RANGES + 1],
            len: 0,
            evicted_up_to: None,
            largest_received_at: None,
            largest_owd_raw_us: 0,
            unacked: 0,
            first_unacked_at: None,
            gap_opened: false,
        }
    }

    /// Records a datagram of `len` bytes with path packet number `pn` and sender
    /// timestamp `tx_time_us`, received at `now` when the local microsecond clock read
    /// `local_time_us`. Returns `false` for a number already recorded (or too old to
    /// be acknowledged any more); such a datagram changes nothing.
    pub fn on_received(
        &mut self,
        now: Instant,
        local_time_us: u32,
        pn: u32,
        tx_time_us: u32,
        len: usize,
    ) -> bool {
        let previous_largest = self.largest();
        let number = widen_or_origin(previous_largest, pn);
        if self.evicted_up_to.is_some_and(|evicted| number <= evicted) {
            return false;
        }
        if !self.insert(number) {
            return false;
        }
        if previous_largest.is_some_and(|largest| number > largest + 1) {
            self.gap_opened = true;
        }
        if previous_largest.is_none_or(|largest| number > largest) {
            self.largest_received_at = Some(now);
            self.largest_owd_raw_us = local_time_us.wrapping_sub(tx_time_us);
        }
        self.unacked += 1;
        self.unacked_bytes = self.unacked_bytes.saturating_add(len);
        self.first_unacked_at.get_or_insert(now);
        true
    }

    /// Whether an acknowledgement should be sent now: at least two datagrams totalling
    /// more than one full-sized datagram are waiting, or [`SMALL_DATAGRAMS_THRESHOLD`]
    /// of any size, or one arrived above a gap, or the first of them has waited
    /// `max_ack_delay`.
    pub fn ack_due(&self, now: Instant) -> bool {
        (self.unacked >= ACK_ELICITING_THRESHOLD && self.unacked_bytes > self.full_datagram_len)
            || self.gap_opened
            || self.unacked >= SMALL_DATAGRAMS_THRESHOLD
            || self.poll_timeout().is_some_and(|deadline| now >= deadline)
    }

    /// Whether anything arrived since the last acknowledgement was taken, so one can
    /// ride along with reverse traffic.
    pub fn has_unacked(&self) -> bool {
        self.unacked > 0
    }

    /// When [`Self::ack_due`] turns true by time alone: `max_ack_delay` after the first
    /// unacknowledged packet arrived.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.first_unacked_at
            .map(|first| first + self.max_ack_delay)
    }

    /// Builds the acknowledgement of the newest [`MAX_ACK_RANGES`] ranges and resets
    /// the due state. `None` when nothing arrived since the last one.
    pub fn take_ack(&mut self, now: Instant) -> Option<AckSummary> {
        if self.unacked == 0 {
            return None;
        }
        let mut ranges = AckRanges::default();
        for &(first, last) in &self.ranges[..self.len] {
            // Truncation to the low 32 bits is the wire encoding.
            ranges.push(first as u32, last as u32);
        }
        let ack_delay = self
            .largest_received_at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.unacked = 0;
        self.unacked_bytes = 0;
        self.first_unacked_at = None;
        self.gap_opened = false;
        Some(AckSummary {
            ranges,
            ack_delay,
            largest_owd_raw_us: self.largest_owd_raw_us,
        })
    }

    /// Whether the next acknowledgement tells of a gap just below the newest packets,
    /// a loss the sender should hear of as soon as possible (see [`LOSS_NEWS_PACKETS`]).
    pub fn reports_loss_news(&self) -> bool {
        self.unacked > 0 && self.len >= 2 && self.ranges[0].1 - self.ranges[0].0 < LOSS_NEWS_PACKETS
    }

    fn largest(&self) -> Option<u64> {
        (self.len > 0).then(|| self.ranges[0].1)
    }

    /// Adds `number` to the ranges, merging neighbours; `false` if already present.
    fn insert(&mut self, number: u64) -> bool {
        for index in 0..self.len {
            let (first, last) = self.ranges[index];
            if number > last {
                // Between ranges[index] (older) and ranges[index - 1] (newer).
                let joins_newer = index > 0 && self.ranges[index - 1].0 == number + 1;
                let joins_older = last + 1 == number;
                match (joins_newer, joins_older) {
                    (true, true) => {
                        self.ranges[index - 1].0 = first;
                        self.remove(index);
                    }
                    (true, false) => self.ranges[index - 1].0 = number,
                    (false, true) => self.ranges[index].1 = number,
                    (false, false) => self.insert_at(index, (number, number)),
                }
                return true;
            }
            if number >= first {
                return false;
            }
        }
        // Older than every tracked range.
        match self.len.checked_sub(1) {
            Some(oldest) if self.ranges[oldest].0 == number + 1 => self.ranges[oldest].0 = number,
            _ => self.insert_at(self.len, (number, number)),
        }
        true
    }

    fn insert_at(&mut self, index: usize, range: (u64, u64)) {
        self.ranges.copy_within(index..self.len, index + 1);
        self.ranges[index] = range;
        self.len += 1;
        if self.len > MAX_ACK_RANGES {
            self.len -= 1;
            let evicted = self.ranges[self.len].1;
            self.evicted_up_to = Some(self.evicted_up_to.map_or(evicted, |old| old.max(evicted)));
        }
    }

    fn remove(&mut self, index: usize) {
        self.ranges.copy_within(index + 1..self.len, index);
        self.len -= 1;
    }
}

#[cfg(test)]
#[path = "ack_tests.rs"]
mod tests;
