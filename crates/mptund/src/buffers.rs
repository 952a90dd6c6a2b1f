//! Packet buffers with room in front and behind, so a packet read from the TUN is sealed
//! in place into a datagram and a datagram is opened in place into the inner packet.
//!
//! Buffers are recycled through a [`BufferPool`]: once the pool is warm the data path
//! allocates nothing per packet.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use crate::wire::{DATA_META_LEN, PIGGYBACK_LEN_FIELD, TAG_LEN, TRANSPORT_HEADER_LEN};

/// Most bytes of acknowledgement frames that ride in front of an inner packet: a dozen
/// one-range frames, or a few with many ranges.
pub const MAX_PIGGYBACK: usize = 256;
/// Bytes in front of an inner packet: transport header, the data metadata, and room for
/// piggybacked frames, so sealing never moves the inner packet.
pub const HEADROOM: usize =
    TRANSPORT_HEADER_LEN + DATA_META_LEN + PIGGYBACK_LEN_FIELD + MAX_PIGGYBACK;
/// Bytes behind an inner packet: the AEAD tag.
pub const TAILROOM: usize = TAG_LEN;

/// One owned buffer and the byte range in it that is the packet's current content.
#[derive(Debug)]
pub struct Packet {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Packet {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn start(&self) -> usize {
        self.start
    }

    /// The whole underlying buffer, for in-place transformations that grow or shrink
    /// the content; follow with [`Packet::set_range`].
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Sets the content range. Panics if the range is outside the buffer: callers
    /// compute it from lengths they already checked, so that would be a bug here.
    pub fn set_range(&mut self, start: usize, end: usize) {
        assert!(
            start <= end && end <= self.buf.len(),
            "packet range {start}..{end} outside buffer"
        );
        self.start = start;
        self.end = end;
    }

    /// The `N` bytes from the packet's start as a fixed-size message to write, which
    /// become the packet's content; `None` when the buffer is too short.
    pub fn message_mut<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        let end = self.start.checked_add(N)?;
        if end > self.buf.len() {
            return None;
        }
        self.end = end;
        self.buf.get_mut(self.start..end)?.try_into().ok()
    }

    /// Room to read an inner packet into, leaving head- and tailroom for sealing.
    pub fn inner_read_area(&mut self) -> &mut [u8] {
        let end = self.buf.len() - TAILROOM;
        &mut self.buf[HEADROOM..end]
    }
}

/// A free list of equally sized buffers.
#[derive(Debug)]
pub struct BufferPool {
    free: Vec<Box<[u8]>>,
    buffer_len: usize,
    max_free: usize,
    allocations: u64,
}

impl BufferPool {
    /// `buffer_len` must hold the largest datagram the daemon handles; `max_free` bounds
    /// the memory kept for reuse.
    pub fn new(buffer_len: usize, prefill: usize, max_free: usize) -> Self {
        let mut pool = Self {
            free: Vec::with_capacity(max_free),
            buffer_len,
            max_free,
            allocations: 0,
        };
        for _ in 0..prefill.min(max_free) {
            let buf = pool.allocate();
            pool.free.push(buf);
        }
        pool
    }

    fn allocate(&mut self) -> Box<[u8]> {
        self.allocations += 1;
        vec![0u8; self.buffer_len].into_boxed_slice()
    }

    /// An empty packet whose range is the inner read area.
    pub fn take(&mut self) -> Packet {
        let buf = self.free.pop().unwrap_or_else(|| self.allocate());
        let end = buf.len() - TAILROOM;
        Packet {
            buf,
            start: HEADROOM,
            end,
        }
    }

    /// A packet holding a copy of `bytes` at the start of the buffer, or `None` when
    /// it does not fit.
    pub fn take_copy(&mut self, bytes: &[u8]) -> Option<Packet> {
        if bytes.len() > self.buffer_len {
            return None;
        }
        let mut packet = self.take();
        packet.buf[..bytes.len()].copy_from_slice(bytes);
        packet.set_range(0, bytes.len());
        Some(packet)
    }

    /// A copy of `packet` at the same place in a buffer of its own, so the headroom in
    /// front of it stays free for sealing; `None` when it does not fit.
    pub fn take_copy_of(&mut self, packet: &Packet) -> Option<Packet> {
        let (start, end) = (packet.start, packet.end);
        if end > self.buffer_len {
            return None;
        }
        let mut copy = self.take();
        copy.buf[start..end].copy_from_slice(packet.bytes());
        copy.set_range(start, end);
        Some(copy)
    }

    pub fn recycle(&mut self, packet: Packet) {
        if self.free.len() < self.max_free {
            self.free.push(packet.buf);
        }
    }

    /// Buffers allocated since start; flat once the pool is warm.
    /// The length of every buffer the pool hands out.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    pub fn allocations(&self) -> u64 {
        self.allocations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffers_are_reused_without_allocation() {
        let mut pool = BufferPool::new(2048, 4, 8);
        assert_eq!(pool.allocations(), 4);
        for _ in 0..100 {
            let packet = pool.take();
            assert_eq!(packet.start(), HEADROOM);
            assert_eq!(packet.len(), 2048 - HEADROOM - TAILROOM);
            pool.recycle(packet);
        }
        assert_eq!(pool.allocations(), 4);
    }

    #[test]
    fn copy_that_does_not_fit_is_refused() {
        let mut pool = BufferPool::new(64, 0, 8);
        assert!(pool.take_copy(&[0u8; 65]).is_none());
        let packet = pool.take_copy(&[7u8; 64]).unwrap();
        assert_eq!(packet.bytes(), &[7u8; 64]);
    }
}
