//! The send side of a simulated UDP socket: a send buffer that takes a GSO send
//! whole or refuses it, drains into the path at the interface's rate and stops while
//! the test blocks the socket.

use std::time::{Duration, Instant};

use linkem::sim::{LinkId, Network};
use linkem::{LinkConfig, Outage};

use crate::session::{Transmit, MAX_GSO_SEGMENTS};

/// Linux's default socket send buffer (`net.core.wmem_default`), in bytes.
pub const DEFAULT_SEND_BUFFER_BYTES: usize = 212_992;

/// One UDP socket's send side.
#[derive(Debug, Clone)]
pub struct SocketConfig {
    /// Bytes the send buffer holds (`SO_SNDBUF`).
    pub send_buffer_bytes: usize,
    /// The rate the interface takes datagrams out of the buffer at; `None`: at once,
    /// so the buffer fills only while the socket is blocked.
    pub interface_rate_bit_per_s: Option<u64>,
    /// Intervals, from the start of the run, during which the socket takes no send
    /// and its buffer does not drain (a stopped device queue). Sorted, disjoint.
    pub blocked: Vec<Outage>,
    /// Datagrams one GSO send may carry (`PathSocket::max_gso_segments`).
    pub max_gso_segments: usize,
}

impl Default for SocketConfig {
    fn default() -> Self {
        Self {
            send_buffer_bytes: DEFAULT_SEND_BUFFER_BYTES,
            interface_rate_bit_per_s: None,
            blocked: Vec::new(),
            max_gso_segments: MAX_GSO_SEGMENTS,
        }
    }
}

impl SocketConfig {
    /// The socket refuses every send from `start` for `duration`.
    pub fn blocked_during(mut self, start: Duration, duration: Duration) -> Self {
        self.blocked.push(Outage { start, duration });
        self
    }

    pub(super) fn is_blocked_at(&self, since_start: Duration) -> bool {
        self.blocked
            .iter()
            .any(|block| block.start <= since_start && since_start < block.start + block.duration)
    }
}

/// What one socket sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Sends (GSO runs) the socket took.
    pub sends: u64,
    /// Datagrams in them.
    pub datagrams: u64,
    /// The most datagrams one send carried.
    pub largest_send: usize,
    /// Sends refused with `WouldBlock`.
    pub would_block: u64,
    /// Sends that failed (the socket was closed).
    pub failed: u64,
}

/// A datagram inside a socket buffer or on a path.
pub(super) struct Datagram {
    pub(super) bytes: Vec<u8>,
    /// The client path it travels on.
    pub(super) path: usize,
}

/// Why a send did not enter the socket.
pub(super) enum Refused {
    WouldBlock,
    NotConnected,
}

pub(super) struct SimSocket {
    pub(super) config: SocketConfig,
    /// The send buffer: a linkem link at the interface's rate with no delay.
    pub(super) buffer: LinkId,
    pub(super) open: bool,
    /// A send refused with `WouldBlock`, with its datagrams, retried once writable.
    pub(super) unsent: Option<(Transmit, Vec<u8>)>,
    pub(super) stats: SocketStats,
}

impl SimSocket {
    pub(super) fn new(config: SocketConfig, network: &mut Network<Datagram>) -> Self {
        let mut link = LinkConfig::delay_only(Duration::ZERO);
        link.rate_bit_per_s = config.interface_rate_bit_per_s;
        // Nothing drains while blocked: the link's serializer pauses in outages.
        link.outages.clone_from(&config.blocked);
        Self {
            buffer: network.add_link(link),
            config,
            open: true,
            unsent: None,
            stats: SocketStats::default(),
        }
    }

    pub(super) fn writable(&self, since_start: Duration, network: &Network<Datagram>) -> bool {
        let queued = network
            .link(self.buffer)
            .map_or(0, linkem::Link::queued_bytes);
        !self.open
            || (!self.config.is_blocked_at(since_start)
                && queued <= self.config.send_buffer_bytes / 2)
    }

    /// Puts the datagrams of `transmit`, back to back in `contents`, into the send
    /// buffer, whole or not at all; `path` is the path and the link they take from
    /// there (`None`: an address no path has, where they are lost). A socket without an
    /// interface rate hands them to the path at once.
    pub(super) fn try_send(
        &mut self,
        now: Instant,
        since_start: Duration,
        transmit: &Transmit,
        contents: &[u8],
        path: Option<(usize, LinkId)>,
        network: &mut Network<Datagram>,
    ) -> Result<(), Refused> {
        if !self.open {
            self.stats.failed += 1;
            return Err(Refused::NotConnected);
        }
        let queued = network
            .link(self.buffer)
            .map_or(0, linkem::Link::queued_bytes);
        // As Linux's `sock_alloc_send_skb`: a send is taken while the buffer holds
        // less than its size, however large the send.
        if self.config.is_blocked_at(since_start) || queued >= self.config.send_buffer_bytes {
            self.stats.would_block += 1;
            return Err(Refused::WouldBlock);
        }
        let segment_size = transmit.segment_size.unwrap_or(contents.len()).max(1);
        let segments = contents.chunks(segment_size);
        let count = segments.len();
        assert_eq!(
            count,
            transmit.datagrams,
            "a send of {} bytes in segments of {segment_size} is not {} datagrams",
            contents.len(),
            transmit.datagrams
        );
        self.stats.sends += 1;
        self.stats.datagrams += count as u64;
        self.stats.largest_send = self.stats.largest_send.max(count);
        let Some((path, path_link)) = path else {
            return Ok(());
        };
        let next_hop = match self.config.interface_rate_bit_per_s {
            Some(_) => self.buffer,
            None => path_link,
        };
        for segment in segments {
            let datagram = Datagram {
                bytes: segment.to_vec(),
                path,
            };
            // The buffer link takes everything (no queue limit, no loss); the path
            // may drop the datagram (loss, a full queue, an outage, a cut).
            let _ = network.send(now, next_hop, datagram, segment.len());
        }
        Ok(())
    }
}
