//! Sliding anti-replay window over the transport nonce counter.
//!
//! The sender numbers every transport datagram of a direction with one counter
//! shared by all paths, so the receiver sees the counters out of order whenever
//! paths differ in delay. A strict "greater than the last one" check would drop
//! every packet that took the slower path; instead the receiver remembers which
//! counters it has accepted in a window behind the highest one.
//!
//! The window is the bitmap ring of RFC 6479 ("IPsec Anti-Replay Algorithm
//! without Bit Shifting", section 2), as WireGuard uses it: [`RING_BITS`] bits
//! in [`RING_WORDS`] 64-bit words indexed by `counter / 64 mod RING_WORDS`.
//! Moving the window forward only clears the words it passes over, never
//! shifts the bitmap. One word of the ring is always the partially filled
//! "current" word, so the guaranteed window is `RING_BITS - 64` =
//! [`WINDOW_SIZE`] counters behind the highest accepted one.
//!
//! # Size
//!
//! 8192 bits, i.e. a window of 8128 datagrams. A datagram is dropped as too old
//! if more than 8128 later-numbered datagrams (over all paths) arrived before
//! it. With a delay difference of `d` seconds between the fastest and slowest
//! path and an aggregate rate of `r` datagrams per second, about `d * r` later
//! datagrams overtake it, so the window holds for `d * r < 8128`: 200 ms of
//! skew at 40 000 datagrams/s (about 480 Mbit/s of 1500-byte packets), or
//! 300 ms at 27 000 datagrams/s (about 325 Mbit/s). The largest aggregate in the
//! scenarios we target (4G + 5G NSA, 300 Mbit/s down) fits with room to spare.
//! The cost is 1 KiB per session and direction.
//!
//! # Use
//!
//! A counter must only be recorded after the datagram's AEAD tag verified;
//! otherwise a forged datagram with a huge counter would move the window and
//! make every genuine datagram "too old". So the receive path is
//! [`ReplayWindow::check`] (cheap, before decryption, drops obvious replays),
//! then open, then [`ReplayWindow::check_and_update`].

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use thiserror::Error;

/// Bits per ring word.
const WORD_BITS: u64 = u64::BITS as u64;
/// Number of 64-bit words in the ring.
pub const RING_WORDS: usize = 128;
/// Bits in the ring (8192).
pub const RING_BITS: u64 = RING_WORDS as u64 * WORD_BITS;
/// How far behind the highest accepted counter a counter may be and still be
/// accepted (if not seen before): 8128.
pub const WINDOW_SIZE: u64 = RING_BITS - WORD_BITS;

/// Why a counter was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReplayError {
    /// This counter was already accepted: the datagram is a duplicate or a replay.
    #[error("counter already seen (duplicate or replayed datagram)")]
    Replayed,
    /// The counter is more than [`WINDOW_SIZE`] behind the highest accepted
    /// one; whether it was seen is no longer known, so it is dropped.
    #[error("counter is older than the replay window")]
    TooOld,
}

/// The receive-side replay window of one session direction.
#[derive(Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// Highest counter accepted so far (0 before any).
    highest: u64,
    /// Bit `c % 64` of word `(c / 64) % RING_WORDS` is set once counter `c`
    /// has been accepted, for counters within the window.
    ring: [u64; RING_WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReplayWindow")
            .field("highest", &self.highest)
            .finish_non_exhaustive()
    }
}

/// Ring slot of the word holding `counter / 64`.
fn slot(word: u64) -> usize {
    // The modulo keeps the value below RING_WORDS, so the cast is lossless.
    (word % RING_WORDS as u64) as usize
}

fn word_index(counter: u64) -> usize {
    slot(counter / WORD_BITS)
}

fn bit_mask(counter: u64) -> u64 {
    1u64 << (counter % WORD_BITS)
}

impl ReplayWindow {
    /// An empty window: every counter from 0 up is acceptable once.
    pub fn new() -> Self {
        ReplayWindow {
            highest: 0,
            ring: [0; RING_WORDS],
        }
    }

    /// Highest counter accepted so far (0 if none).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether `counter` would be accepted, without recording it. Use before
    /// decrypting to drop replays cheaply.
    #[allow(
        clippy::indexing_slicing,
        reason = "word_index reduces modulo the ring's length"
    )]
    pub fn check(&self, counter: u64) -> Result<(), ReplayError> {
        if counter > self.highest {
            return Ok(());
        }
        if self.highest - counter > WINDOW_SIZE {
            return Err(ReplayError::TooOld);
        }
        if self.ring[word_index(counter)] & bit_mask(counter) != 0 {
            return Err(ReplayError::Replayed);
        }
        Ok(())
    }

    /// Accepts and records `counter`, or rejects it. Call only after the
    /// datagram carrying `counter` was authenticated.
    #[allow(
        clippy::indexing_slicing,
        reason = "slot and word_index reduce modulo the ring's length"
    )]
    pub fn check_and_update(&mut self, counter: u64) -> Result<(), ReplayError> {
        self.check(counter)?;
        if counter > self.highest {
            // Clear the words the window moves over (at most the whole ring),
            // starting after the current word, which keeps its bits.
            let current_word = self.highest / WORD_BITS;
            let new_word = counter / WORD_BITS;
            let to_clear = (new_word - current_word).min(RING_WORDS as u64);
            for step in 1..=to_clear {
                self.ring[slot(current_word + step)] = 0;
            }
            self.highest = counter;
        }
        self.ring[word_index(counter)] |= bit_mask(counter);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplayError::{Replayed, TooOld};

    /// Runs numbered cases against one window, in order.
    fn run(window: &mut ReplayWindow, cases: &[(u32, u64, Result<(), ReplayError>)]) {
        for &(number, counter, expected) in cases {
            let checked = window.check(counter);
            assert_eq!(checked, expected, "case {number}: check({counter})");
            let updated = window.check_and_update(counter);
            assert_eq!(
                updated, expected,
                "case {number}: check_and_update({counter})"
            );
        }
    }

    const W: u64 = WINDOW_SIZE;

    #[test]
    fn numbered_cases() {
        let mut window = ReplayWindow::new();
        run(
            &mut window,
            &[
                (1, 0, Ok(())),
                (2, 0, Err(Replayed)),
                (3, 1, Ok(())),
                (4, 1, Err(Replayed)),
                (5, 3, Ok(())),
                (6, 2, Ok(())),
                (7, 2, Err(Replayed)),
                (8, 3, Err(Replayed)),
                (9, 63, Ok(())),
                (10, 64, Ok(())),
                (11, 62, Ok(())),
                (12, 64, Err(Replayed)),
                (13, W, Ok(())),
                (14, 0, Err(Replayed)),
                (15, 4, Ok(())),
                (16, W + 1, Ok(())),
                (17, 0, Err(TooOld)),
                (18, 1, Err(Replayed)),
                (19, 2, Err(Replayed)),
                (20, 5, Ok(())),
                (21, W + 5, Ok(())),
                (22, 4, Err(TooOld)),
                (23, 5, Err(Replayed)),
                (24, 6, Ok(())),
                (25, 6, Err(Replayed)),
                (26, W + 6, Ok(())),
                (27, W + 6, Err(Replayed)),
                (28, 5, Err(TooOld)),
                (29, W + 2, Ok(())),
                (30, W + 3, Ok(())),
                (31, W + 3, Err(Replayed)),
            ],
        );
    }

    #[test]
    fn jump_larger_than_the_window() {
        let mut window = ReplayWindow::new();
        run(
            &mut window,
            &[
                (1, 3, Ok(())),
                (2, 10, Ok(())),
                (3, 10 + 3 * RING_BITS, Ok(())),
                (4, 3, Err(TooOld)),
                (5, 10, Err(TooOld)),
                // Same ring word and bit as counter 3, inside the window and
                // unseen: the jump must have cleared the old bit.
                (6, 3 + 3 * RING_BITS, Ok(())),
                (7, 10 + 3 * RING_BITS - 1, Ok(())),
                (8, 10 + 3 * RING_BITS - W, Ok(())),
                (9, 10 + 3 * RING_BITS - W - 1, Err(TooOld)),
            ],
        );
    }

    #[test]
    fn ring_index_wraps_around() {
        // Walk the highest counter through the ring several times, accepting
        // every counter once, leaving one behind per word and delivering it late.
        let mut window = ReplayWindow::new();
        let total = 5 * RING_BITS + 17;
        for counter in 0..total {
            if counter % 64 == 13 {
                continue;
            }
            assert_eq!(window.check_and_update(counter), Ok(()), "{counter}");
            if counter >= 64 + 13 && (counter - 13) % 64 == 50 {
                // Deliver the one left behind in this word 50 counters late.
                let late = counter - 50;
                assert_eq!(window.check_and_update(late), Ok(()), "late {late}");
                assert_eq!(window.check_and_update(late), Err(Replayed));
            }
            if counter > 0 {
                assert_eq!(window.check(counter - 1).is_err(), counter % 64 != 14);
            }
        }
        // Everything inside the window is now seen except the late ones that
        // did not get delivered yet (the last word's 13 was not reached).
        let highest = total - 1;
        for counter in highest - W..=highest {
            let expect = if counter % 64 == 13 && counter + 50 > highest {
                Ok(())
            } else {
                Err(Replayed)
            };
            assert_eq!(window.check(counter), expect, "{counter}");
        }
        assert_eq!(window.check(highest - W - 1), Err(TooOld));
    }

    #[test]
    fn counter_zero_first_and_late() {
        let mut window = ReplayWindow::new();
        run(
            &mut window,
            &[(1, 5, Ok(())), (2, 0, Ok(())), (3, 0, Err(Replayed))],
        );
        let mut window = ReplayWindow::new();
        run(&mut window, &[(1, W, Ok(())), (2, 0, Ok(()))]);
        let mut window = ReplayWindow::new();
        run(&mut window, &[(1, W + 1, Ok(())), (2, 0, Err(TooOld))]);
    }

    #[test]
    fn near_u64_max() {
        let mut window = ReplayWindow::new();
        run(
            &mut window,
            &[
                (1, u64::MAX - 2, Ok(())),
                (2, u64::MAX, Ok(())),
                (3, u64::MAX - 1, Ok(())),
                (4, u64::MAX, Err(Replayed)),
                (5, u64::MAX - 2, Err(Replayed)),
                (6, u64::MAX - W, Ok(())),
                (7, u64::MAX - W - 1, Err(TooOld)),
                (8, 0, Err(TooOld)),
            ],
        );
        assert_eq!(window.highest(), u64::MAX);
    }

    #[test]
    fn check_does_not_record() {
        let mut window = ReplayWindow::new();
        assert_eq!(window.check(100), Ok(()));
        assert_eq!(window.check(100), Ok(()));
        assert_eq!(window.highest(), 0);
        assert_eq!(window.check_and_update(100), Ok(()));
        assert_eq!(window.check(100), Err(Replayed));
    }
}
