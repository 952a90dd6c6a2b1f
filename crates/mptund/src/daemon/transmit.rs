//! Datagrams waiting for their socket: one queue per socket, drained whenever that
//! socket can take more, so a full socket buffer on one path never holds up another
//! path or the TUN. The head of a queue leaves in one `sendmsg` with UDP GSO when it
//! is a run of datagrams to the same address, all of one size but the last.

use std::collections::VecDeque;

use crate::session::Outgoing;

/// Datagrams one socket may have waiting. The paths' congestion windows keep the
/// queues short; a socket that stays blocked past this fails what comes on top, as
/// a path that carries less than it is fed must (the core counts the failure).
pub const MAX_WAITING_PER_SOCKET: usize = 2048;
/// Linux's UDP_MAX_SEGMENTS: segments in one GSO send.
pub const MAX_GSO_SEGMENTS: usize = 64;
/// A GSO send is one UDP payload of at most 64 KiB in all.
const MAX_GSO_BYTES: usize = 65_000;

/// The per-socket queues, indexed by the loop's socket slots.
#[derive(Default)]
pub struct SendQueues {
    queues: Vec<VecDeque<Outgoing>>,
    /// Sockets whose last send found the buffer full: they wait to become writable.
    blocked: Vec<bool>,
}

/// Where in a queue's head one GSO send ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Datagrams in the send.
    pub count: usize,
    /// The size of each segment but the last; `None` for a single datagram.
    pub segment_size: Option<usize>,
}

impl SendQueues {
    /// Queues `outgoing` behind what its socket already waits for; gives it back
    /// when that socket has [`MAX_WAITING_PER_SOCKET`] waiting.
    pub fn push(&mut self, outgoing: Outgoing) -> Result<(), Outgoing> {
        let socket = outgoing.socket;
        if self.queues.len() <= socket {
            self.queues.resize_with(socket + 1, VecDeque::new);
            self.blocked.resize(socket + 1, false);
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

    /// Sockets with datagrams waiting that are not known to be blocked.
    pub fn sendable(&self) -> impl Iterator<Item = usize> + '_ {
        self.queues
            .iter()
            .zip(&self.blocked)
            .enumerate()
            .filter(|(_, (queue, blocked))| !queue.is_empty() && !**blocked)
            .map(|(socket, _)| socket)
    }

    /// Sockets with datagrams waiting behind a full buffer.
    pub fn blocked(&self) -> impl Iterator<Item = usize> + '_ {
        self.queues
            .iter()
            .zip(&self.blocked)
            .enumerate()
            .filter(|(_, (queue, blocked))| !queue.is_empty() && **blocked)
            .map(|(socket, _)| socket)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    pub fn set_blocked(&mut self, socket: usize, blocked: bool) {
        if let Some(flag) = self.blocked.get_mut(socket) {
            *flag = blocked;
        }
    }

    /// The datagrams at the head of `socket`'s queue that go out in one send of at
    /// most `max_segments` segments; `None` when nothing waits.
    pub fn head_run(&self, socket: usize, max_segments: usize) -> Option<Run> {
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

    /// Takes the first `count` datagrams of `socket`'s queue.
    pub fn take(&mut self, socket: usize, count: usize) -> impl Iterator<Item = Outgoing> + '_ {
        let queue = self.queues.get_mut(socket);
        queue.into_iter().flat_map(move |queue| {
            let count = count.min(queue.len());
            queue.drain(..count)
        })
    }

    /// Borrows the first `count` datagrams of `socket`'s queue.
    pub fn peek(&self, socket: usize, count: usize) -> impl Iterator<Item = &Outgoing> + '_ {
        self.queues
            .get(socket)
            .into_iter()
            .flat_map(move |queue| queue.iter().take(count))
    }

    /// Takes everything `socket` has waiting (the socket closed).
    pub fn take_all(&mut self, socket: usize) -> Vec<Outgoing> {
        self.set_blocked(socket, false);
        self.queues
            .get_mut(socket)
            .map(|queue| queue.drain(..).collect())
            .unwrap_or_default()
    }
}

fn same_flow(a: &Outgoing, b: &Outgoing) -> bool {
    a.destination == b.destination && a.source_ip == b.source_ip
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::BufferPool;
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

    fn queues_with(lens: &[(usize, u16, usize)]) -> SendQueues {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = SendQueues::default();
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
    fn a_blocked_socket_keeps_its_queue_and_does_not_hold_up_the_others() {
        let mut queues = queues_with(&[(0, 1, 1400), (1, 1, 1400), (1, 1, 1400)]);
        queues.set_blocked(0, true);
        assert_eq!(queues.sendable().collect::<Vec<_>>(), [1]);
        assert_eq!(queues.blocked().collect::<Vec<_>>(), [0]);
        assert_eq!(queues.take(1, 2).count(), 2);
        assert_eq!(queues.sendable().count(), 0);
        queues.set_blocked(0, false);
        assert_eq!(queues.sendable().collect::<Vec<_>>(), [0]);
        assert_eq!(queues.take_all(0).len(), 1);
        assert!(queues.is_empty());
    }

    #[test]
    fn a_full_queue_gives_the_datagram_back() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = SendQueues::default();
        for _ in 0..MAX_WAITING_PER_SOCKET {
            assert!(queues.push(datagram(&mut pool, 0, 1, 100)).is_ok());
        }
        assert!(queues.push(datagram(&mut pool, 0, 1, 100)).is_err());
        assert!(queues.push(datagram(&mut pool, 1, 1, 100)).is_ok());
    }
}
