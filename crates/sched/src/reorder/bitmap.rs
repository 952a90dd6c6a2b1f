//! The reorder window's per-slot bits: for each of `capacity` slots (a power of
//! two), slot `seq & (capacity - 1)`, whether the window holds that sequence
//! number, whether the sender gave it up, and, for the numbers behind the
//! window, whether it was delivered. The three bits of 64 consecutive slots sit
//! together in one [`SlotWords`], so the per-packet path touches one word group
//! and runs of consecutive numbers are handled a 64-bit word at a time.
//!
//! A run is given by its first sequence number and its length (at most
//! `capacity`); it may wrap around the end of the slots, so its words are
//! visited as two segments. Every run operation returns how many words it
//! touched, so the reorder buffer can count its work.

use crate::seq::SeqNo;

/// Slots per word.
const WORD_BITS: u32 = u64::BITS;

/// The bits of 64 consecutive slots; bits at and above `capacity` stay unused.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SlotWords {
    /// The window holds this sequence number.
    pub(super) held: u64,
    /// The sender gave this sequence number up (meaningful within the window).
    pub(super) abandoned: u64,
    /// Delivered or queued for delivery (meaningful behind the window).
    pub(super) delivered: u64,
}

/// The slot bits of a window; see the module docs.
#[derive(Debug)]
pub(super) struct SlotBits {
    words: Vec<SlotWords>,
    /// Slots in use: the window size, a power of two.
    capacity: u32,
}

impl SlotBits {
    /// All clear. `capacity` must be a power of two.
    pub(super) fn new(capacity: u32) -> Self {
        debug_assert!(capacity.is_power_of_two());
        SlotBits {
            words: vec![SlotWords::default(); capacity.div_ceil(WORD_BITS) as usize],
            capacity,
        }
    }

    /// The slot of `seq`.
    fn index(&self, seq: SeqNo) -> u32 {
        seq.0 & (self.capacity - 1)
    }

    /// The word group of `seq`'s slot and the bit of the slot in each of its words.
    pub(super) fn slot(&self, seq: SeqNo) -> (&SlotWords, u64) {
        let index = self.index(seq);
        (
            &self.words[(index / WORD_BITS) as usize],
            1 << (index % WORD_BITS),
        )
    }

    /// [`SlotBits::slot`], to change.
    pub(super) fn slot_mut(&mut self, seq: SeqNo) -> (&mut SlotWords, u64) {
        let index = self.index(seq);
        (
            &mut self.words[(index / WORD_BITS) as usize],
            1 << (index % WORD_BITS),
        )
    }

    /// The run of `len` numbers from `start` as at most two slot ranges
    /// `low..high`, in sequence order (the second is empty unless the run wraps
    /// around the end of the slots). `len` is clamped to `capacity`.
    fn segments(&self, start: SeqNo, len: u32) -> [(u32, u32); 2] {
        let len = len.min(self.capacity);
        let first = self.index(start);
        // Both fit in u32: first < capacity <= 2^20 and len <= capacity.
        let first_end = (first + len).min(self.capacity);
        let wrapped_end = (first + len).saturating_sub(self.capacity);
        [(first, first_end), (0, wrapped_end)]
    }

    /// Calls `change(words, mask)` for each word group of the run, `mask` holding
    /// the run's slots in it; returns the word groups touched.
    pub(super) fn update_run(
        &mut self,
        start: SeqNo,
        len: u32,
        mut change: impl FnMut(&mut SlotWords, u64),
    ) -> u64 {
        let mut touched = 0;
        for (low, high) in self.segments(start, len) {
            if low >= high {
                continue;
            }
            let (first_word, last_word) = word_span(low, high);
            let (first_mask, last_mask) = edge_masks(low, high);
            touched += u64::from(last_word - first_word) + 1;
            let (first_word, last_word) = (first_word as usize, last_word as usize);
            if first_word == last_word {
                change(&mut self.words[first_word], first_mask & last_mask);
                continue;
            }
            change(&mut self.words[first_word], first_mask);
            for words in &mut self.words[first_word + 1..last_word] {
                change(words, u64::MAX);
            }
            change(&mut self.words[last_word], last_mask);
        }
        touched
    }

    /// Offset from `start` of the first number of the run of `len` whose slot has
    /// its bit set in `select(words)`, and the word groups looked at.
    pub(super) fn first_in_run(
        &self,
        start: SeqNo,
        len: u32,
        select: impl Fn(&SlotWords) -> u64,
    ) -> (Option<u32>, u64) {
        let first = self.index(start);
        let mut touched = 0;
        for (low, high) in self.segments(start, len) {
            if low >= high {
                continue;
            }
            let (first_word, last_word) = word_span(low, high);
            let (first_mask, last_mask) = edge_masks(low, high);
            for word in first_word..=last_word {
                touched += 1;
                let mut mask = u64::MAX;
                if word == first_word {
                    mask &= first_mask;
                }
                if word == last_word {
                    mask &= last_mask;
                }
                let found = select(&self.words[word as usize]) & mask;
                if found != 0 {
                    let index = word * WORD_BITS + found.trailing_zeros();
                    // Distance forward from `first` around `capacity` slots.
                    let offset = index.wrapping_sub(first) & (self.capacity - 1);
                    return (Some(offset), touched);
                }
            }
        }
        (None, touched)
    }
}

/// The first and last word of the slot range `low..high`, `low < high`.
fn word_span(low: u32, high: u32) -> (u32, u32) {
    (low / WORD_BITS, (high - 1) / WORD_BITS)
}

/// The masks of the slot range `low..high` (`low < high`) in its first word and
/// in its last word.
fn edge_masks(low: u32, high: u32) -> (u64, u64) {
    (
        u64::MAX << (low % WORD_BITS),
        u64::MAX >> (WORD_BITS - 1 - (high - 1) % WORD_BITS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots a run covers, by brute force.
    fn run_by_hand(capacity: u32, start: u32, len: u32) -> Vec<u32> {
        (0..len.min(capacity))
            .map(|offset| start.wrapping_add(offset) & (capacity - 1))
            .collect()
    }

    /// The slots whose `held` bit is set.
    fn held_slots(bits: &SlotBits) -> Vec<u32> {
        (0..bits.capacity)
            .filter(|&index| bits.words[(index / 64) as usize].held & (1 << (index % 64)) != 0)
            .collect()
    }

    #[test]
    fn runs_cover_exactly_their_slots_also_across_the_end() {
        for capacity in [1u32, 2, 8, 64, 128, 256] {
            for start in [
                0u32,
                1,
                7,
                63,
                64,
                65,
                capacity - 1,
                u32::MAX,
                u32::MAX - 70,
            ] {
                for len in [0u32, 1, 2, 63, 64, 65, capacity - 1, capacity, capacity + 5] {
                    let mut bits = SlotBits::new(capacity);
                    let touched = bits.update_run(SeqNo(start), len, |words, mask| {
                        assert_eq!(words.held & mask, 0, "no slot visited twice");
                        words.held |= mask;
                    });
                    assert!(touched <= u64::from(capacity.div_ceil(64)) + 1);
                    let mut expected = run_by_hand(capacity, start, len);
                    expected.sort_unstable();
                    assert_eq!(held_slots(&bits), expected, "{capacity} {start} {len}");
                    if capacity < 64 {
                        assert_eq!(bits.words[0].held >> capacity, 0, "beyond the capacity");
                    }
                    bits.update_run(SeqNo(start), len, |words, mask| words.held &= !mask);
                    assert_eq!(held_slots(&bits), Vec::<u32>::new());
                }
            }
        }
    }

    #[test]
    fn first_in_run_finds_the_first_in_sequence_order() {
        let mut bits = SlotBits::new(128);
        // Slots 3 and 100: from 90 the run reaches 100 first, then wraps to 3.
        for seq in [3, 100] {
            let (words, bit) = bits.slot_mut(SeqNo(seq));
            words.held |= bit;
        }
        let find = |start: u32, len: u32| bits.first_in_run(SeqNo(start), len, |w| w.held).0;
        assert_eq!(find(90, 128), Some(10));
        assert_eq!(find(101, 128), Some(30)); // 101..128 then 0..3
        assert_eq!(find(101, 30), None);
        assert_eq!(find(3, 1), Some(0));
        assert_eq!(find(4, 96), None);
        assert_eq!(find(4, 97), Some(96));
        // Sequence numbers that differ by the capacity share a slot.
        assert_eq!(find(128 * 5 + 90, 128), Some(10));
        assert_eq!(find(0, 0), None);
        // A selection combining the words: not held or not given up.
        assert_eq!(
            bits.first_in_run(SeqNo(0), 128, |w| !w.abandoned).0,
            Some(0)
        );
    }
}
