//! Datagrams waiting for their socket, pulled by the I/O loop: the core queues what
//! it seals per socket, and the loop asks for the next GSO send of a socket
//! ([`Transmits::poll`]) only when that socket can take it, so a full socket buffer on
//! one path never holds up another path or the TUN. One send is a run of datagrams
//! from the head of a queue to one address on one path, all of one size but the last.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use mptund_sched::PathId;

use super::Outgoing;
use crate::buffers::BufferPool;

/// Datagrams one socket may have waiting. The paths' congestion windows keep the
/// queues short; a socket that stays blocked past this fails what comes on top, as
/// a path that carries less than it is fed must (the core counts the failure).
pub const MAX_WAITING_PER_SOCKET: usize = 2048;
/// Linux's UDP_MAX_SEGMENTS: segments in one GSO send.
pub const MAX_GSO_SEGMENTS: usize = 64;
/// A GSO send is one UDP payload of at most 64 KiB in all.
const MAX_GSO_BYTES: usize = 65_000;

/// One send the I/O loop makes: the datagrams are in the buffer it handed to
/// [`crate::session::Engine::poll_transmit`], back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    /// Source address to send from (the server answers from the address it was reached at).
    pub source_ip: Option<IpAddr>,
    /// The size of each datagram but the last, for UDP GSO; `None` for one datagram.
    pub segment_size: Option<usize>,
    /// Datagrams in the send.
    pub datagrams: usize,
    /// The path they belong to, for counting a failed send.
    pub path: PathId,
}

/// The per-socket queues, indexed by the loop's socket slots.
#[derive(Default)]
pub(super) struct Transmits {
    queues: Vec<VecDeque<Outgoing>>,
}

/// Where in a queue's head one GSO send ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// Datagrams in the send.
    count: usize,
    /// The size of each segment but the last; `None` for a single datagram.
    segment_size: Option<usize>,
}

impl Transmits {
    /// Queues `outgoing` behind what its socket already waits for; gives it back
    /// when that socket has [`MAX_WAITING_PER_SOCKET`] waiting.
    pub(super) fn push(&mut self, outgoing: Outgoing) -> Result<(), Outgoing> {
        let socket = outgoing.socket;
        if self.queues.len() <= socket {
            self.queues.resize_with(socket + 1, VecDeque::new);
        }
        let Some(queue) = self.queues.get_mut(socket) else {
            return Err(outgoing);
        };
        if queue.len() >= MAX_WAITING_PER_SOCKET {
            return Err(outgoing);
        }
        queue.push_back(outgoing);
        Ok(())
    }

    /// Whether socket `socket` has datagrams waiting.
    pub(super) fn has_waiting(&self, socket: usize) -> bool {
        self.queues
            .get(socket)
            .is_some_and(|queue| !queue.is_empty())
    }

    /// Copies the next send of `socket`, at most `max_segments` datagrams, into
    /// `buffer` (replacing what it held) and recycles their buffers; `None` when
    /// nothing waits.
    pub(super) fn poll(
        &mut self,
        socket: usize,
        max_segments: usize,
        buffer: &mut Vec<u8>,
        pool: &mut BufferPool,
    ) -> Option<Transmit> {
        let run = self.head_run(socket, max_segments)?;
        let queue = self.queues.get_mut(socket)?;
        let first = queue.front()?;
        let transmit = Transmit {
            destination: first.destination,
            source_ip: first.source_ip,
            segment_size: run.segment_size,
            datagrams: run.count,
            path: first.path,
        };
        buffer.clear();
        for datagram in queue.drain(..run.count) {
            buffer.extend_from_slice(datagram.packet.bytes());
            pool.recycle(datagram.packet);
        }
        Some(transmit)
    }

    /// Takes everything `socket` has waiting (the socket closed).
    pub(super) fn take_all(&mut self, socket: usize) -> Vec<Outgoing> {
        self.queues
            .get_mut(socket)
            .map(|queue| queue.drain(..).collect())
            .unwrap_or_default()
    }

    /// The datagrams at the head of `socket`'s queue that go out in one send of at
    /// most `max_segments` segments; `None` when nothing waits.
    fn head_run(&self, socket: usize, max_segments: usize) -> Option<Run> {
        let queue = self.queues.get(socket)?;
        let first = queue.front()?;
        let size = first.packet.len();
        let mut count = 1;
        let mut bytes = size;
        for next in queue.iter().skip(1) {
            let len = next.packet.len();
            let fits = count < max_segments.min(MAX_GSO_SEGMENTS)
                && bytes + len <= MAX_GSO_BYTES
                && same_flow(first, next)
                && len <= size;
            if !fits {
                break;
            }
            count += 1;
            bytes += len;
            // A shorter segment can only be the last one.
            if len < size {
                break;
            }
        }
        Some(Run {
            count,
            segment_size: (count > 1).then_some(size),
        })
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }
}

fn same_flow(a: &Outgoing, b: &Outgoing) -> bool {
    a.destination == b.destination && a.source_ip == b.source_ip && a.path == b.path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::BufferPool;
    use proptest::prelude::*;
    use std::net::SocketAddr;

    use mptund_sched::PathId;

    fn datagram(pool: &mut BufferPool, socket: usize, port: u16, len: usize) -> Outgoing {
        let packet = pool.take_copy(&vec![0u8; len]).unwrap();
        Outgoing {
            packet,
            socket,
            destination: SocketAddr::from(([198, 18, 0, 1], port)),
            source_ip: None,
            path: PathId(0),
        }
    }

    fn queues_with(lens: &[(usize, u16, usize)]) -> Transmits {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        for &(socket, port, len) in lens {
            assert!(queues.push(datagram(&mut pool, socket, port, len)).is_ok());
        }
        queues
    }

    #[test]
    fn a_run_is_equal_sizes_to_one_address_and_may_end_shorter() {
        // (socket, destination port, length)
        let queues = queues_with(&[(0, 1, 1400), (0, 1, 1400), (0, 1, 900), (0, 1, 1400)]);
        let run = queues.head_run(0, 64).unwrap();
        assert_eq!(
            run,
            Run {
                count: 3,
                segment_size: Some(1400)
            }
        );
        assert_eq!(queues.head_run(1, 64), None);
    }

    #[test]
    fn a_run_stops_at_another_address_a_larger_datagram_or_the_segment_limit() {
        let queues = queues_with(&[(0, 1, 1400), (0, 1, 1400), (0, 2, 1400)]);
        assert_eq!(queues.head_run(0, 64).unwrap().count, 2);
        let queues = queues_with(&[(0, 1, 800), (0, 1, 1400)]);
        assert_eq!(
            queues.head_run(0, 64).unwrap(),
            Run {
                count: 1,
                segment_size: None
            }
        );
        let queues = queues_with(&[(0, 1, 1400); 5]);
        assert_eq!(queues.head_run(0, 3).unwrap().count, 3);
        // Without GSO (one segment) every datagram goes alone.
        assert_eq!(queues.head_run(0, 1).unwrap().segment_size, None);
        // 64 KiB in all: 46 × 1400 bytes.
        let queues = queues_with(&[(0, 1, 1400); 60]);
        assert_eq!(queues.head_run(0, 64).unwrap().count, 46);
    }

    #[test]
    fn a_poll_copies_one_run_back_to_back_and_leaves_the_rest_and_other_sockets() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        for (socket, len, fill) in [
            (0, 1400, 1u8),
            (0, 1400, 2),
            (0, 900, 3),
            (0, 1400, 4),
            (1, 100, 5),
        ] {
            let mut outgoing = datagram(&mut pool, socket, 1, len);
            outgoing.packet.bytes_mut().fill(fill);
            assert!(queues.push(outgoing).is_ok());
        }
        let mut buffer = vec![0xee; 10];
        let transmit = queues.poll(0, 64, &mut buffer, &mut pool).unwrap();
        assert_eq!(transmit.datagrams, 3);
        assert_eq!(transmit.segment_size, Some(1400));
        assert_eq!(buffer.len(), 1400 + 1400 + 900);
        assert!(buffer[..1400].iter().all(|&b| b == 1));
        assert!(buffer[1400..2800].iter().all(|&b| b == 2));
        assert!(buffer[2800..].iter().all(|&b| b == 3));
        assert!(queues.has_waiting(0) && queues.has_waiting(1));
        let alone = queues.poll(0, 64, &mut buffer, &mut pool).unwrap();
        assert_eq!((alone.datagrams, alone.segment_size), (1, None));
        assert!(!queues.has_waiting(0));
        assert_eq!(queues.poll(0, 64, &mut buffer, &mut pool), None);
        assert_eq!(queues.take_all(1).len(), 1);
        assert!(queues.is_empty());
    }

    #[test]
    fn a_run_stays_on_one_path() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        let mut other_path = datagram(&mut pool, 0, 1, 1400);
        other_path.path = PathId(1);
        assert!(queues.push(datagram(&mut pool, 0, 1, 1400)).is_ok());
        assert!(queues.push(other_path).is_ok());
        assert_eq!(queues.head_run(0, 64).unwrap().count, 1);
    }

    #[test]
    fn a_full_queue_gives_the_datagram_back() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        for _ in 0..MAX_WAITING_PER_SOCKET {
            assert!(queues.push(datagram(&mut pool, 0, 1, 100)).is_ok());
        }
        assert!(queues.push(datagram(&mut pool, 0, 1, 100)).is_err());
        assert!(queues.push(datagram(&mut pool, 1, 1, 100)).is_ok());
    }

    /// A datagram to push: (socket, destination port, path, length).
    fn any_datagram() -> impl Strategy<Value = (usize, u16, u8, usize)> {
        (
            0usize..3,
            1u16..3,
            0u8..2,
            prop_oneof![Just(1400usize), Just(900), 1usize..1500],
        )
    }

    proptest! {
        /// Whatever is queued comes out exactly once, in the order it was queued on its
        /// socket, in sends that UDP GSO can take: one destination and path, at most
        /// `max_segments` and 64 KiB, every segment the size of the first but a
        /// shorter last one.
        #[test]
        fn every_datagram_leaves_once_in_order_in_valid_runs(
            pushed in proptest::collection::vec(any_datagram(), 0..300),
            max_segments in 1usize..80,
        ) {
            let mut pool = BufferPool::new(2048, 0, 64);
            let mut queues = Transmits::default();
            // Per socket: each datagram's bytes, destination port and path.
            let mut expected: Vec<Vec<(Vec<u8>, u16, PathId)>> = vec![Vec::new(); 3];
            for (index, &(socket, port, path, len)) in pushed.iter().enumerate() {
                let mut outgoing = datagram(&mut pool, socket, port, len);
                outgoing.path = PathId(path);
                // Each datagram's bytes say which one it is.
                outgoing.packet.bytes_mut().fill((index % 251) as u8);
                let bytes = outgoing.packet.bytes().to_vec();
                prop_assert!(queues.push(outgoing).is_ok());
                expected[socket].push((bytes, port, PathId(path)));
            }
            let mut buffer = Vec::new();
            for (socket, expected) in expected.iter().enumerate() {
                let mut sent: Vec<Vec<u8>> = Vec::new();
                while let Some(transmit) = queues.poll(socket, max_segments, &mut buffer, &mut pool) {
                    prop_assert!(transmit.datagrams >= 1);
                    prop_assert!(transmit.datagrams <= max_segments.min(MAX_GSO_SEGMENTS));
                    prop_assert!(transmit.datagrams == 1 || buffer.len() <= MAX_GSO_BYTES);
                    let size = transmit.segment_size.unwrap_or(buffer.len());
                    prop_assert_eq!(transmit.segment_size.is_some(), transmit.datagrams > 1);
                    let segments: Vec<&[u8]> = buffer.chunks(size).collect();
                    prop_assert_eq!(segments.len(), transmit.datagrams);
                    let run = &expected[sent.len()..sent.len() + transmit.datagrams];
                    for (segment, (original, port, path)) in segments.iter().zip(run) {
                        prop_assert_eq!(*segment, original.as_slice());
                        prop_assert_eq!(transmit.destination.port(), *port);
                        prop_assert_eq!(transmit.path, *path);
                    }
                    sent.extend(segments.iter().map(|segment| segment.to_vec()));
                }
                let originals: Vec<Vec<u8>> =
                    expected.iter().map(|(bytes, _, _)| bytes.clone()).collect();
                prop_assert_eq!(&sent, &originals);
            }
            prop_assert!(queues.is_empty());
        }
    }
}
