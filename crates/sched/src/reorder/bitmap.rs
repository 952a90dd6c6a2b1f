//! One bit per sequence number of a window of `capacity` numbers (a power of two),
//! bit `seq & (capacity - 1)`, with operations on runs of consecutive numbers that
//! touch a 64-bit word at a time.
//!
//! A run is given by its first sequence number and its length (at most `capacity`);
//! it may wrap around the end of the bitmap, so its words are visited as two
//! segments. Every run operation returns how many words it touched, so the
//! reorder buffer can count its work.

use crate::seq::SeqNo;

/// Bits in one word of a [`SeqBitmap`].
const WORD_BITS: u32 = u64::BITS;

/// A bitmap indexed by `seq & (capacity - 1)`; see the module docs.
#[derive(Debug)]
pub(super) struct SeqBitmap {
    /// `capacity.div_ceil(64)` words; the bits at and above `capacity` stay unused.
    pub(super) words: Vec<u64>,
    /// Bits in use: the window size, a power of two.
    capacity: u32,
}

impl SeqBitmap {
    /// All clear. `capacity` must be a power of two.
    pub(super) fn new(capacity: u32) -> Self {
        debug_assert!(capacity.is_power_of_two());
        SeqBitmap {
            words: vec![0; capacity.div_ceil(WORD_BITS) as usize],
            capacity,
        }
    }

    /// The bit index of `seq`.
    pub(super) fn index(&self, seq: SeqNo) -> u32 {
        seq.0 & (self.capacity - 1)
    }

    pub(super) fn get(&self, seq: SeqNo) -> bool {
        let index = self.index(seq);
        self.words[(index / WORD_BITS) as usize] & (1 << (index % WORD_BITS)) != 0
    }

    pub(super) fn set(&mut self, seq: SeqNo) {
        let index = self.index(seq);
        self.words[(index / WORD_BITS) as usize] |= 1 << (index % WORD_BITS);
    }

    pub(super) fn clear(&mut self, seq: SeqNo) {
        let index = self.index(seq);
        self.words[(index / WORD_BITS) as usize] &= !(1 << (index % WORD_BITS));
    }

    /// The words of the run of `len` numbers from `start`, in sequence order: each
    /// word's index and the mask of the run's bits in it. `len` is clamped to
    /// `capacity`.
    pub(super) fn run_words(&self, start: SeqNo, len: u32) -> impl Iterator<Item = (usize, u64)> {
        let len = len.min(self.capacity);
        let first = self.index(start);
        // Both fit in u32: first < capacity <= 2^20 and len <= capacity.
        let first_end = (first + len).min(self.capacity);
        let wrapped_end = (first + len).saturating_sub(self.capacity);
        segment_words(first, first_end).chain(segment_words(0, wrapped_end))
    }

    /// Clears the run; returns the words touched.
    pub(super) fn clear_run(&mut self, start: SeqNo, len: u32) -> u64 {
        let mut touched = 0;
        for (word, mask) in self.run_words(start, len) {
            self.words[word] &= !mask;
            touched += 1;
        }
        touched
    }

    /// Sets the bits of the run that are set in `source` (same capacity); leaves
    /// the others as they are. Returns the words touched.
    pub(super) fn or_run_from(&mut self, source: &SeqBitmap, start: SeqNo, len: u32) -> u64 {
        debug_assert_eq!(self.capacity, source.capacity);
        let mut touched = 0;
        for (word, mask) in self.run_words(start, len) {
            self.words[word] |= source.words[word] & mask;
            touched += 1;
        }
        touched
    }

    /// Offset from `start` of the first number of the run of `len` whose bit is set
    /// in `word_bits(word index)` (a word combined from bitmaps of this layout), and
    /// the words looked at.
    pub(super) fn first_in_run(
        &self,
        start: SeqNo,
        len: u32,
        word_bits: impl Fn(usize) -> u64,
    ) -> (Option<u32>, u64) {
        let first = self.index(start);
        let mut touched = 0;
        for (word, mask) in self.run_words(start, len) {
            touched += 1;
            let found = word_bits(word) & mask;
            if found != 0 {
                let index = word as u32 * WORD_BITS + found.trailing_zeros();
                // Distance forward from `first` around a bitmap of `capacity` bits.
                let offset = index.wrapping_sub(first) & (self.capacity - 1);
                return (Some(offset), touched);
            }
        }
        (None, touched)
    }
}

/// The words of the bit range `low..high` (within one bitmap), each with the mask
/// of the range's bits in it. Empty when `low >= high`.
fn segment_words(low: u32, high: u32) -> impl Iterator<Item = (usize, u64)> {
    let words = if low < high {
        low / WORD_BITS..=(high - 1) / WORD_BITS
    } else {
        // An empty inclusive range.
        1..=0
    };
    words.map(move |word| {
        let word_start = word * WORD_BITS;
        let from = low.max(word_start) - word_start;
        let to = high.min(word_start + WORD_BITS) - word_start;
        (word as usize, span_mask(from, to))
    })
}

/// Bits `from..to` of a word, `from < to <= 64`.
fn span_mask(from: u32, to: u32) -> u64 {
    let width = to - from;
    let low_bits = if width == WORD_BITS {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    low_bits << from
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bits a run covers, by brute force.
    fn run_by_hand(capacity: u32, start: u32, len: u32) -> Vec<u32> {
        (0..len.min(capacity))
            .map(|offset| start.wrapping_add(offset) & (capacity - 1))
            .collect()
    }

    fn set_bits(bitmap: &SeqBitmap) -> Vec<u32> {
        (0..bitmap.capacity)
            .filter(|&index| bitmap.words[(index / 64) as usize] & (1 << (index % 64)) != 0)
            .collect()
    }

    #[test]
    fn runs_cover_exactly_their_bits_also_across_the_end() {
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
                    let mut bitmap = SeqBitmap::new(capacity);
                    for (word, mask) in bitmap.run_words(SeqNo(start), len) {
                        assert_eq!(bitmap.words[word] & mask, 0, "no word visited twice");
                        bitmap.words[word] |= mask;
                    }
                    let mut expected = run_by_hand(capacity, start, len);
                    expected.sort_unstable();
                    assert_eq!(set_bits(&bitmap), expected, "{capacity} {start} {len}");
                    // No bit beyond the capacity is ever touched.
                    if capacity < 64 {
                        assert_eq!(bitmap.words[0] >> capacity, 0);
                    }
                    let touched = bitmap.clear_run(SeqNo(start), len);
                    assert!(touched <= u64::from(capacity.div_ceil(64)) + 1);
                    assert_eq!(set_bits(&bitmap), Vec::<u32>::new());
                }
            }
        }
    }

    #[test]
    fn first_in_run_finds_the_first_in_sequence_order() {
        let mut bitmap = SeqBitmap::new(128);
        // Bits 3 and 100: from 90 the run reaches 100 first, then wraps to 3.
        bitmap.set(SeqNo(3));
        bitmap.set(SeqNo(100));
        let words = bitmap.words.clone();
        let find = |start: u32, len: u32| bitmap.first_in_run(SeqNo(start), len, |w| words[w]).0;
        assert_eq!(find(90, 128), Some(10));
        assert_eq!(find(101, 128), Some(30)); // 101..128 then 0..3
        assert_eq!(find(101, 30), None);
        assert_eq!(find(3, 1), Some(0));
        assert_eq!(find(4, 96), None);
        assert_eq!(find(4, 97), Some(96));
        // Sequence numbers that differ by the capacity share a bit.
        assert_eq!(find(128 * 5 + 90, 128), Some(10));
        assert_eq!(find(0, 0), None);
    }

    #[test]
    fn or_run_from_copies_only_the_run() {
        let mut source = SeqBitmap::new(8);
        for seq in [0u32, 2, 5, 7] {
            source.set(SeqNo(seq));
        }
        let mut target = SeqBitmap::new(8);
        target.set(SeqNo(1));
        target.or_run_from(&source, SeqNo(6), 4); // 6, 7, 0, 1
        assert_eq!(set_bits(&target), [0, 1, 7]);
    }
}
