//! Forward error correction on lossy paths: after every block of data datagrams a path
//! carries, one parity datagram on the same path holds the XOR of the block's inner
//! packets and of their sequence numbers. A receiver that misses exactly one member
//! rebuilds it when the parity arrives, a few milliseconds after the block, instead of
//! holding the inner stream for a repair that takes the lossy path's round trip.
//!
//! The parity trails its members on their own path, so on a FIFO path every member
//! that was not lost has arrived when the parity does. The sender still re-sends what
//! the path lost; a rebuilt packet makes that copy a duplicate the reorder buffer drops.

// Paths and slots are indexed by values the session computed; wire values are only
// compared against what the ring holds.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use crate::wire::{ParityMeta, PARITY_SPAN};

/// Loss rate from which a path sends parity: below it the repairs are rare enough.
pub const MIN_LOSS_RATE: f64 = 0.001;
/// Fewest and most members per block.
const MIN_BLOCK: u32 = 8;
const MAX_BLOCK: u32 = PARITY_SPAN;
/// Parity overhead per expected loss: a block holds about 1 / (this × loss rate)
/// members, so two losses in one block, which one parity cannot mend, stay rare.
const BLOCKS_PER_LOSS: f64 = 4.0;

/// Members per block for a path that loses `loss_rate` of its packets; `None` when the
/// path loses too little for parity to pay.
pub fn block_size(loss_rate: f64) -> Option<u32> {
    // NaN, too, sends no parity.
    if loss_rate.is_nan() || loss_rate < MIN_LOSS_RATE {
        return None;
    }
    let members = (1.0 / (BLOCKS_PER_LOSS * loss_rate)).floor();
    Some((members as u32).clamp(MIN_BLOCK, MAX_BLOCK))
}

/// The sender's XOR of the block being filled on one path.
#[derive(Debug)]
pub struct ParityEncoder {
    first_pn: u32,
    members: u32,
    seq_xor: u32,
    /// The longest member so far: the parity's payload length.
    len: usize,
    xor: Box<[u8]>,
}

impl ParityEncoder {
    /// An empty block for inner packets up to `max_inner_len` bytes.
    pub fn new(max_inner_len: usize) -> Self {
        ParityEncoder {
            first_pn: 0,
            members: 0,
            seq_xor: 0,
            len: 0,
            xor: vec![0; max_inner_len].into_boxed_slice(),
        }
    }

    pub fn count(&self) -> u32 {
        self.members.count_ones()
    }

    /// Whether packet number `pn` can join the block (the bitmap spans
    /// [`PARITY_SPAN`] numbers from the first member).
    pub fn fits(&self, pn: u32) -> bool {
        self.members == 0 || pn.wrapping_sub(self.first_pn) < PARITY_SPAN
    }

    /// Adds the inner packet of the data datagram `pn` carrying `seq`; a packet longer
    /// than the encoder's buffer or outside the span is not protected.
    pub fn add(&mut self, pn: u32, seq: u32, inner: &[u8]) {
        if inner.len() > self.xor.len() || !self.fits(pn) {
            return;
        }
        if self.members == 0 {
            self.first_pn = pn;
        }
        self.members |= 1 << pn.wrapping_sub(self.first_pn);
        self.seq_xor ^= seq;
        self.len = self.len.max(inner.len());
        xor_into(&mut self.xor, inner);
    }

    /// The parity's metadata for the block as it stands.
    pub fn meta(&self) -> ParityMeta {
        ParityMeta {
            first_pn: self.first_pn,
            members: self.members,
            seq_xor: self.seq_xor,
        }
    }

    /// The XOR of the members' inner packets, as long as the longest.
    pub fn payload(&self) -> &[u8] {
        self.xor.get(..self.len).unwrap_or_default()
    }

    /// Starts the next block.
    pub fn clear(&mut self) {
        self.xor.get_mut(..self.len).unwrap_or_default().fill(0);
        self.members = 0;
        self.seq_xor = 0;
        self.len = 0;
    }
}

/// How many received data packets a path keeps for rebuilding: two blocks' span.
const RING: usize = 2 * PARITY_SPAN as usize;
/// What a decoder costs, in inner-packet buffers (for the memory budget).
pub const DECODER_BUFFERS: usize = RING;

#[derive(Debug)]
struct Slot {
    pn: Option<u32>,
    seq: u32,
    len: usize,
    bytes: Box<[u8]>,
}

/// The receiver's copies of a path's latest data packets, by path packet number.
#[derive(Debug)]
pub struct ParityDecoder {
    slots: Vec<Slot>,
}

/// What a parity frame did.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Every member had arrived.
    Complete,
    /// More than one member is missing: the parity cannot help.
    Unrecoverable,
    /// The frame does not match what arrived (a payload shorter than a member).
    Inconsistent,
    /// The one missing member: its path packet number, sequence number and length
    /// (the block's longest); the bytes are in the buffer given to
    /// [`ParityDecoder::decode`].
    Rebuilt { pn: u32, seq: u32, len: usize },
}

impl ParityDecoder {
    pub fn new(max_inner_len: usize) -> Self {
        let slots = (0..RING)
            .map(|_| Slot {
                pn: None,
                seq: 0,
                len: 0,
                bytes: vec![0; max_inner_len].into_boxed_slice(),
            })
            .collect();
        ParityDecoder { slots }
    }

    fn slot_of(&mut self, pn: u32) -> Option<&mut Slot> {
        let index = pn as usize % RING;
        self.slots.get_mut(index)
    }

    /// Keeps a copy of the inner packet of data datagram `pn`.
    pub fn on_data(&mut self, pn: u32, seq: u32, inner: &[u8]) {
        let Some(slot) = self.slot_of(pn) else {
            return;
        };
        let Some(target) = slot.bytes.get_mut(..inner.len()) else {
            slot.pn = None;
            return;
        };
        target.copy_from_slice(inner);
        slot.pn = Some(pn);
        slot.seq = seq;
        slot.len = inner.len();
    }

    /// Rebuilds the one missing member of the block a parity describes into `out`
    /// (at least `payload.len()` bytes).
    pub fn decode(&mut self, meta: &ParityMeta, payload: &[u8], out: &mut [u8]) -> Decoded {
        let ParityMeta {
            first_pn,
            members,
            seq_xor,
        } = *meta;
        let mut missing = None;
        for bit in 0..PARITY_SPAN {
            if members & (1 << bit) == 0 {
                continue;
            }
            let pn = first_pn.wrapping_add(bit);
            let present = self.slot_of(pn).is_some_and(|slot| slot.pn == Some(pn));
            if !present {
                if missing.is_some() {
                    return Decoded::Unrecoverable;
                }
                missing = Some(pn);
            }
        }
        let Some(missing) = missing else {
            return Decoded::Complete;
        };
        let Some(out) = out.get_mut(..payload.len()) else {
            return Decoded::Inconsistent;
        };
        out.copy_from_slice(payload);
        let mut seq = seq_xor;
        for bit in 0..PARITY_SPAN {
            let pn = first_pn.wrapping_add(bit);
            if members & (1 << bit) == 0 || pn == missing {
                continue;
            }
            let Some(slot) = self.slot_of(pn) else {
                return Decoded::Inconsistent;
            };
            let Some(bytes) = slot.bytes.get(..slot.len) else {
                return Decoded::Inconsistent;
            };
            if bytes.len() > out.len() {
                return Decoded::Inconsistent;
            }
            seq ^= slot.seq;
            xor_into(out, bytes);
        }
        Decoded::Rebuilt {
            pn: missing,
            seq,
            len: payload.len(),
        }
    }
}

/// `target[i] ^= source[i]` over `source`'s length (at most `target`'s).
fn xor_into(target: &mut [u8], source: &[u8]) {
    for (t, s) in target.iter_mut().zip(source) {
        *t ^= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(n: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| n.wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    fn encode(members: &[(u32, u32, Vec<u8>)]) -> (ParityMeta, Vec<u8>) {
        let mut encoder = ParityEncoder::new(1500);
        for (pn, seq, bytes) in members {
            encoder.add(*pn, *seq, bytes);
        }
        (encoder.meta(), encoder.payload().to_vec())
    }

    fn meta(first_pn: u32, members: u32) -> ParityMeta {
        ParityMeta {
            first_pn,
            members,
            seq_xor: 0,
        }
    }

    #[test]
    fn any_one_missing_member_is_rebuilt() {
        let members: Vec<_> = (0..12u32)
            .map(|i| {
                (
                    100 + i + i / 5,
                    7000 + i,
                    packet(i as u8, 200 + 90 * i as usize),
                )
            })
            .collect();
        let (parity, payload) = encode(&members);
        for lost in 0..members.len() {
            let mut decoder = ParityDecoder::new(1500);
            for (i, (pn, seq, bytes)) in members.iter().enumerate() {
                if i != lost {
                    decoder.on_data(*pn, *seq, bytes);
                }
            }
            let mut out = vec![0; 1500];
            let decoded = decoder.decode(&parity, &payload, &mut out);
            let Decoded::Rebuilt { pn, seq, len } = decoded else {
                panic!("member {lost}: {decoded:?}");
            };
            assert_eq!((pn, seq), (members[lost].0, members[lost].1));
            let original = &members[lost].2;
            assert_eq!(&out[..original.len()], &original[..]);
            // Zero padding up to the longest member.
            assert!(out[original.len()..len].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn two_missing_members_or_none_rebuild_nothing() {
        let members: Vec<_> = (0..8u32).map(|i| (i, i, packet(i as u8, 100))).collect();
        let (parity, payload) = encode(&members);
        let mut out = vec![0; 1500];
        let mut decoder = ParityDecoder::new(1500);
        for (pn, seq, bytes) in &members[2..] {
            decoder.on_data(*pn, *seq, bytes);
        }
        assert_eq!(
            decoder.decode(&parity, &payload, &mut out),
            Decoded::Unrecoverable
        );
        for (pn, seq, bytes) in &members[..2] {
            decoder.on_data(*pn, *seq, bytes);
        }
        assert_eq!(
            decoder.decode(&parity, &payload, &mut out),
            Decoded::Complete
        );
    }

    #[test]
    fn a_forged_short_payload_is_inconsistent_not_a_panic() {
        let mut decoder = ParityDecoder::new(1500);
        decoder.on_data(1, 1, &packet(1, 400));
        let mut out = vec![0; 1500];
        assert_eq!(
            decoder.decode(&meta(0, 0b11), &[0; 10], &mut out),
            Decoded::Inconsistent
        );
        // Members far apart in the wrapping number space, a ring slot reused.
        decoder.on_data(1 + RING as u32, 9, &packet(2, 50));
        assert_eq!(
            decoder.decode(&meta(1, 0b1), &[0; 10], &mut out),
            Decoded::Rebuilt {
                pn: 1,
                seq: 0,
                len: 10
            }
        );
    }

    #[test]
    fn the_encoder_keeps_to_its_span_and_starts_clean() {
        let mut encoder = ParityEncoder::new(100);
        encoder.add(u32::MAX, 1, &[1; 50]);
        assert!(encoder.fits(u32::MAX.wrapping_add(PARITY_SPAN - 1)));
        assert!(!encoder.fits(u32::MAX.wrapping_add(PARITY_SPAN)));
        encoder.add(30, 2, &[2; 100]);
        encoder.add(31, 3, &[3; 100]);
        encoder.add(29, 3, &[3; 101]);
        assert_eq!(encoder.count(), 2);
        encoder.clear();
        encoder.add(5, 4, &[4; 10]);
        assert_eq!(
            (encoder.payload(), encoder.meta().members),
            (&[4u8; 10][..], 1)
        );
    }

    #[test]
    fn block_size_follows_the_loss_rate() {
        assert_eq!(block_size(0.0), None);
        assert_eq!(block_size(f64::NAN), None);
        assert_eq!(block_size(0.002), Some(32));
        assert_eq!(block_size(0.01), Some(25));
        assert_eq!(block_size(0.05), Some(8));
    }
}
