//! A reference model of [`ReorderBuffer`]: the same rules written one sequence
//! number at a time over ordered maps, with no bitmaps, no ring of slots and no
//! wrapping (positions are sequence numbers unwrapped into a u64 line). The
//! property test runs it in lockstep with the buffer and compares every output.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::super::{RejectReason, ReleaseKind, ReorderConfig, ReorderStats};
use crate::seq::SeqNo;

/// Where the model's line starts: far enough from 0 that positions 2^31 behind
/// the release point stay positive.
const ORIGIN: u64 = 1 << 40;

#[derive(Clone, Copy, Debug)]
struct ModelHeld {
    arrived: Instant,
    kind: ReleaseKind,
}

#[derive(Debug)]
pub(super) struct Model {
    capacity: u64,
    max_hold: Duration,
    /// Lowest position neither released nor skipped.
    next_expected: u64,
    held: BTreeMap<u64, ModelHeld>,
    /// Given-up positions within the window.
    abandoned: BTreeSet<u64>,
    /// Delivered positions behind `next_expected` (older ones pruned).
    delivered: BTreeSet<u64>,
    /// How far behind `next_expected` the model remembers.
    history_len: u64,
    ready: VecDeque<(u64, ModelHeld)>,
    ready_limit: usize,
    last_timeout_skip: Option<(Instant, Duration)>,
    needed_wait: Option<Duration>,
    pub(super) stats: ReorderStats,
}

impl Model {
    pub(super) fn new(config: ReorderConfig, first_expected: SeqNo) -> Self {
        let capacity = config.effective_capacity();
        Model {
            capacity: capacity as u64,
            max_hold: config.max_hold,
            next_expected: ORIGIN + u64::from(first_expected.0),
            held: BTreeMap::new(),
            abandoned: BTreeSet::new(),
            delivered: BTreeSet::new(),
            history_len: 0,
            ready: VecDeque::new(),
            ready_limit: 2 * capacity,
            last_timeout_skip: None,
            needed_wait: None,
            stats: ReorderStats::default(),
        }
    }

    pub(super) fn next_expected(&self) -> SeqNo {
        SeqNo(self.next_expected as u32)
    }

    pub(super) fn len(&self) -> usize {
        self.held.len() + self.ready.len()
    }

    /// The position of `seq` as the buffer reads it: RFC 1982 distance from the
    /// release point (2^31 apart counts as behind).
    fn position(&self, seq: SeqNo) -> u64 {
        let distance = i64::from(self.next_expected().distance_to(seq));
        self.next_expected.wrapping_add_signed(distance)
    }

    pub(super) fn insert(&mut self, now: Instant, seq: SeqNo) -> Result<(), RejectReason> {
        let position = self.position(seq);
        if position < self.next_expected {
            return self.insert_behind(now, position);
        }
        if position - self.next_expected >= self.capacity {
            if self.ready.len() + self.held.len() > self.ready_limit {
                return Err(self.reject(RejectReason::Backlogged));
            }
            self.force_advance(position - (self.capacity - 1));
        }
        if self.held.contains_key(&position) {
            return Err(self.reject(RejectReason::Duplicate));
        }
        let kind = if position == self.next_expected {
            if let Some(oldest) = self.oldest_arrival() {
                self.needed_wait = Some(now.saturating_duration_since(oldest));
            }
            ReleaseKind::InOrder
        } else {
            ReleaseKind::AfterWait
        };
        self.held.insert(position, ModelHeld { arrived: now, kind });
        Ok(())
    }

    fn insert_behind(&mut self, now: Instant, position: u64) -> Result<(), RejectReason> {
        if self.next_expected - position > self.history_len {
            return Err(self.reject(RejectReason::TooOld));
        }
        if self.delivered.contains(&position) {
            return Err(self.reject(RejectReason::Duplicate));
        }
        if self.ready.len() >= self.ready_limit {
            return Err(self.reject(RejectReason::Backlogged));
        }
        self.delivered.insert(position);
        self.ready.push_back((
            position,
            ModelHeld {
                arrived: now,
                kind: ReleaseKind::Late,
            },
        ));
        if let Some((skipped_at, hold)) = self.last_timeout_skip {
            self.needed_wait = Some(hold + now.saturating_duration_since(skipped_at));
        }
        Ok(())
    }

    fn reject(&mut self, reason: RejectReason) -> RejectReason {
        match reason {
            RejectReason::Duplicate => self.stats.duplicates += 1,
            RejectReason::TooOld => self.stats.too_old += 1,
            RejectReason::Backlogged => self.stats.backlogged += 1,
        }
        reason
    }

    fn force_advance(&mut self, new_start: u64) {
        self.stats.forced_advances += 1;
        let passed: Vec<u64> = self
            .held
            .range(self.next_expected..new_start)
            .map(|(&position, _)| position)
            .collect();
        let mut cursor = self.next_expected;
        for position in passed {
            self.count_gap(position - cursor);
            let held = self.held.remove(&position).expect("listed above");
            self.delivered.insert(position);
            self.ready.push_back((position, held));
            cursor = position + 1;
        }
        self.count_gap(new_start - cursor);
        self.move_release_point(new_start);
    }

    fn count_gap(&mut self, len: u64) {
        if len > 0 {
            self.stats.gaps_skipped += 1;
            self.stats.seqs_skipped += len;
        }
    }

    /// Moves the release point to `to`, forgetting the given-up marks it passes
    /// and the history that falls out of reach.
    fn move_release_point(&mut self, to: u64) {
        self.history_len = (self.history_len + (to - self.next_expected)).min(self.capacity);
        self.next_expected = to;
        self.abandoned = self.abandoned.split_off(&to);
        self.delivered = self.delivered.split_off(&(to - self.history_len));
    }

    /// The position of the packet released, if any.
    pub(super) fn poll_release(&mut self, now: Instant) -> Option<u64> {
        if let Some((position, held)) = self.ready.pop_front() {
            return Some(self.account(now, position, held));
        }
        if self.held.is_empty() {
            return None;
        }
        self.skip_abandoned();
        if !self.held.contains_key(&self.next_expected) {
            if now < self.poll_timeout()? {
                return None;
            }
            self.last_timeout_skip = Some((now, self.max_hold));
            let (&first_held, _) = self.held.range(self.next_expected..).next()?;
            self.count_gap(first_held - self.next_expected);
            self.move_release_point(first_held);
        }
        let position = self.next_expected;
        let held = self.held.remove(&position)?;
        self.delivered.insert(position);
        self.move_release_point(position + 1);
        Some(self.account(now, position, held))
    }

    /// The rule as first written: one sequence number at a time, at most a window.
    fn skip_abandoned(&mut self) {
        let mut skipped = 0;
        while skipped < self.capacity
            && !self.held.contains_key(&self.next_expected)
            && self.abandoned.contains(&self.next_expected)
        {
            self.move_release_point(self.next_expected + 1);
            skipped += 1;
        }
        self.count_gap(skipped);
        self.stats.seqs_skipped_early += skipped;
    }

    fn account(&mut self, now: Instant, position: u64, held: ModelHeld) -> u64 {
        let hold = now.saturating_duration_since(held.arrived);
        self.stats.max_hold = self.stats.max_hold.max(hold);
        self.stats.total_hold = self.stats.total_hold.saturating_add(hold);
        self.stats.hold_histogram.record(hold);
        match held.kind {
            ReleaseKind::InOrder => self.stats.released_in_order += 1,
            ReleaseKind::AfterWait => self.stats.released_after_wait += 1,
            ReleaseKind::Late => self.stats.released_late += 1,
        }
        position
    }

    fn oldest_arrival(&self) -> Option<Instant> {
        self.held.values().map(|held| held.arrived).min()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let oldest = self.oldest_arrival()?;
        let next = self.next_expected;
        if !self.held.contains_key(&next) && self.abandoned.contains(&next) {
            return Some(oldest);
        }
        oldest.checked_add(self.max_hold)
    }

    pub(super) fn set_max_hold(&mut self, max_hold: Duration) {
        self.max_hold = max_hold;
    }

    pub(super) fn take_needed_wait(&mut self) -> Option<Duration> {
        self.needed_wait.take()
    }

    /// Every window position whose sequence number lies in the `count` numbers
    /// from `first` (wrapping), checked one by one.
    pub(super) fn give_up_range(&mut self, first: SeqNo, count: u32) {
        for position in self.next_expected..self.next_expected + self.capacity {
            let in_range = (position as u32).wrapping_sub(first.0) < count;
            if in_range && !self.held.contains_key(&position) {
                self.abandoned.insert(position);
            }
        }
    }
}
