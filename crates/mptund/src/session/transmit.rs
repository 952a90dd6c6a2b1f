//! Datagrams waiting for their socket, pulled by the I/O loop: the core queues what
//! it seals per socket, and the loop asks for the next GSO send of a socket
//! ([`Transmits::poll`]) only when that socket can take it, so a full socket buffer on
//! one path never holds up another path or the TUN. One send is a run of datagrams
//! from the head of a queue to one address on one path, all of one size but the last.
//!
//! A server's socket is shared by every session, so its queue is too, fairly: each
//! session has its own queue behind the socket, served by deficit round robin over
//! bytes (Shreedhar and Varghese, SIGCOMM 1995), and may have at most an equal share
//! of the socket's [`MAX_WAITING_PER_SOCKET`] waiting. A session over its share has
//! its own datagrams refused; when the socket is full while a session is below its
//! share, the session with the most waiting loses its newest datagram instead (as
//! `fq_codel` drops from the fattest queue, RFC 8290 section 4.1).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use mptund_sched::PathId;

use super::Outgoing;
use crate::wire::SessionId;

/// Datagrams one socket may have waiting. The paths' congestion windows keep the
/// queues short; a socket that stays blocked past this fails what comes on top, as
/// a path that carries less than it is fed must (the core counts the failure).
pub const MAX_WAITING_PER_SOCKET: usize = 2048;
/// Linux's UDP_MAX_SEGMENTS: segments in one GSO send.
pub const MAX_GSO_SEGMENTS: usize = 64;
/// A GSO send is one UDP payload of at most 64 KiB in all.
const MAX_GSO_BYTES: usize = 65_000;
/// Bytes a session may send per round of the deficit round robin: one whole GSO
/// send, so every round moves at least one send of every session with work.
const QUANTUM_BYTES: usize = MAX_GSO_BYTES;
/// Emptied per-session queues kept for reuse, so sessions that come and go do not
/// allocate a queue each time.
const SPARE_QUEUES: usize = 64;

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
    sockets: Vec<SocketQueue>,
    spare: Vec<VecDeque<Outgoing>>,
}

/// One socket's waiting datagrams, a queue per session.
#[derive(Default)]
struct SocketQueue {
    queues: HashMap<SessionId, SessionQueue>,
    /// Sessions with datagrams waiting, in round-robin order; the front is served.
    active: VecDeque<SessionId>,
    /// Datagrams waiting in all queues.
    waiting: usize,
    /// The session at the front of `active` has had its quantum for this turn.
    turn_granted: bool,
}

struct SessionQueue {
    datagrams: VecDeque<Outgoing>,
    /// Bytes the session may still send in its current turn.
    deficit: usize,
}

/// Where in a queue's head one GSO send ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// Datagrams in the send.
    count: usize,
    /// Bytes in the send.
    bytes: usize,
    /// The size of each segment but the last; `None` for a single datagram.
    segment_size: Option<usize>,
}

impl Transmits {
    /// Queues `outgoing` behind what its session already has waiting for its socket.
    /// Gives back a datagram to fail when there is no room: `outgoing` itself if its
    /// session has its share waiting, or the newest of the session with the most
    /// waiting if the socket is full.
    pub(super) fn push(&mut self, outgoing: Outgoing) -> Result<(), Outgoing> {
        let socket = outgoing.socket;
        if self.sockets.len() <= socket {
            self.sockets.resize_with(socket + 1, SocketQueue::default);
        }
        let Some(queue) = self.sockets.get_mut(socket) else {
            return Err(outgoing);
        };
        let owner = outgoing.owner;
        let own = queue.queues.get(&owner).map_or(0, |q| q.datagrams.len());
        let sessions = queue.active.len() + usize::from(own == 0);
        let share = MAX_WAITING_PER_SOCKET / sessions.max(1);
        if own >= share {
            return Err(outgoing);
        }
        let mut evicted = None;
        if queue.waiting >= MAX_WAITING_PER_SOCKET {
            evicted = queue.evict_from_fattest();
            if evicted.is_none() {
                return Err(outgoing);
            }
        }
        queue.queue_of(owner, &mut self.spare).push_back(outgoing);
        evicted.map_or(Ok(()), Err)
    }

    /// Whether socket `socket` has datagrams waiting.
    pub(super) fn has_waiting(&self, socket: usize) -> bool {
        self.sockets
            .get(socket)
            .is_some_and(|queue| queue.waiting > 0)
    }

    /// Seals the next send of `socket` into `buffer` (replacing what it held): at most
    /// `max_segments` datagrams of the session whose turn it is, each through `seal`
    /// (see [`super::Core::seal`]), which appends it and returns its length or `None`
    /// if it was not sent after all. `None` when nothing waits.
    pub(super) fn poll(
        &mut self,
        socket: usize,
        max_segments: usize,
        buffer: &mut Vec<u8>,
        mut seal: impl FnMut(Outgoing, &mut Vec<u8>, bool) -> Option<usize>,
    ) -> Option<Transmit> {
        buffer.clear();
        loop {
            let queue = self.sockets.get_mut(socket)?;
            let owner = queue.next_turn(max_segments)?;
            let session = queue.queues.get_mut(&owner)?;
            let sealed = seal_run(&mut session.datagrams, max_segments, buffer, &mut seal);
            session.deficit = session.deficit.saturating_sub(buffer.len());
            queue.waiting -= sealed.taken;
            if session.datagrams.is_empty() {
                queue.active.pop_front();
                queue.turn_granted = false;
                self.retire(socket, owner);
            }
            if sealed.transmit.is_some() {
                return sealed.transmit;
            }
        }
    }

    /// Puts `outgoing` back at the head of its session's queue for its socket (a
    /// datagram that must follow one just sent), whatever the shares: it was admitted
    /// once already.
    pub(super) fn push_front(&mut self, outgoing: Outgoing) {
        let socket = outgoing.socket;
        if self.sockets.len() <= socket {
            self.sockets.resize_with(socket + 1, SocketQueue::default);
        }
        let Some(queue) = self.sockets.get_mut(socket) else {
            return;
        };
        queue
            .queue_of(outgoing.owner, &mut self.spare)
            .push_front(outgoing);
    }

    /// Takes everything `socket` has waiting (the socket closed).
    pub(super) fn take_all(&mut self, socket: usize) -> Vec<Outgoing> {
        let Some(queue) = self.sockets.get_mut(socket) else {
            return Vec::new();
        };
        queue.active.clear();
        queue.waiting = 0;
        queue.turn_granted = false;
        let mut taken = Vec::new();
        for (_, mut session) in queue.queues.drain() {
            taken.extend(session.datagrams.drain(..));
            if self.spare.len() < SPARE_QUEUES {
                self.spare.push(session.datagrams);
            }
        }
        taken
    }

    /// An emptied session queue leaves the socket; its storage is kept for reuse.
    fn retire(&mut self, socket: usize, owner: SessionId) {
        let Some(queue) = self.sockets.get_mut(socket) else {
            return;
        };
        if let Some(session) = queue.queues.remove(&owner) {
            if self.spare.len() < SPARE_QUEUES {
                self.spare.push(session.datagrams);
            }
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.sockets.iter().all(|queue| queue.waiting == 0)
    }

    /// The next run of `socket`'s first session in line.
    #[cfg(test)]
    fn head_run(&self, socket: usize, max_segments: usize) -> Option<Run> {
        let queue = self.sockets.get(socket)?;
        let owner = queue.active.front()?;
        head_run(&queue.queues.get(owner)?.datagrams, max_segments)
    }

    /// Datagrams session `owner` has waiting for `socket`.
    #[cfg(test)]
    fn waiting_of(&self, socket: usize, owner: SessionId) -> usize {
        self.sockets
            .get(socket)
            .and_then(|queue| queue.queues.get(&owner))
            .map_or(0, |session| session.datagrams.len())
    }
}

impl SocketQueue {
    /// Session `owner`'s queue, taken from `spare` and put in line if it had none,
    /// counted as holding one more datagram: the caller adds it.
    fn queue_of(
        &mut self,
        owner: SessionId,
        spare: &mut Vec<VecDeque<Outgoing>>,
    ) -> &mut VecDeque<Outgoing> {
        let entry = self.queues.entry(owner).or_insert_with(|| SessionQueue {
            datagrams: spare.pop().unwrap_or_default(),
            deficit: 0,
        });
        if entry.datagrams.is_empty() {
            self.active.push_back(owner);
        }
        self.waiting += 1;
        &mut entry.datagrams
    }

    /// The session whose turn it is to send: each turn adds a quantum, and a session
    /// sends while its deficit covers its next run, then the next one's turn comes. A
    /// quantum covers any run, so this takes at most one lap.
    fn next_turn(&mut self, max_segments: usize) -> Option<SessionId> {
        loop {
            let owner = *self.active.front()?;
            let session = self.queues.get_mut(&owner)?;
            let run = head_run(&session.datagrams, max_segments)?;
            if session.deficit >= run.bytes {
                return Some(owner);
            }
            if !self.turn_granted {
                session.deficit += QUANTUM_BYTES;
                self.turn_granted = true;
                continue;
            }
            self.active.rotate_left(1);
            self.turn_granted = false;
        }
    }

    /// Takes the newest datagram of the session with the most waiting.
    fn evict_from_fattest(&mut self) -> Option<Outgoing> {
        let fattest = self
            .queues
            .iter_mut()
            .max_by_key(|(_, session)| session.datagrams.len())
            .map(|(_, session)| session)?;
        let evicted = fattest.datagrams.pop_back()?;
        self.waiting -= 1;
        // A queue emptied this way holds one datagram at most: never the case for the
        // fattest of a full socket (MAX_WAITING_PER_SOCKET > 1), so it stays active.
        Some(evicted)
    }
}

/// The datagrams at the head of `queue` that go out in one send of at most
/// `max_segments` segments; `None` when nothing waits.
fn head_run(queue: &VecDeque<Outgoing>, max_segments: usize) -> Option<Run> {
    let first = queue.front()?;
    let size = first.wire_len();
    let mut count = 1;
    let mut bytes = size;
    for next in queue.iter().skip(1) {
        let len = next.wire_len();
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
        bytes,
        segment_size: (count > 1).then_some(size),
    })
}

/// What sealing a run took from its queue.
struct SealedRun {
    /// Datagrams taken from the queue (sent or not).
    taken: usize,
    /// The send, if any datagram was sealed.
    transmit: Option<Transmit>,
}

/// Seals datagrams from the head of `queue` into `buffer` as one GSO send: each of
/// the first one's size (which acknowledgements riding on it may have grown) to one
/// address on one path, but the last, which may be shorter.
fn seal_run(
    queue: &mut VecDeque<Outgoing>,
    max_segments: usize,
    buffer: &mut Vec<u8>,
    seal: &mut impl FnMut(Outgoing, &mut Vec<u8>, bool) -> Option<usize>,
) -> SealedRun {
    let mut taken = 0;
    let mut transmit: Option<Transmit> = None;
    let mut size = 0;
    while let Some(next) = queue.front() {
        if let Some(first) = &transmit {
            let len = next.wire_len();
            let fits = first.datagrams < max_segments.min(MAX_GSO_SEGMENTS)
                && buffer.len() + len <= MAX_GSO_BYTES
                && first.destination == next.destination
                && first.source_ip == next.source_ip
                && first.path == next.path
                && len <= size;
            if !fits {
                break;
            }
        }
        let Some(outgoing) = queue.pop_front() else {
            break;
        };
        taken += 1;
        let (destination, source_ip, path) =
            (outgoing.destination, outgoing.source_ip, outgoing.path);
        let Some(len) = seal(outgoing, buffer, transmit.is_none()) else {
            continue;
        };
        match &mut transmit {
            None => {
                size = len;
                transmit = Some(Transmit {
                    destination,
                    source_ip,
                    segment_size: None,
                    datagrams: 1,
                    path,
                });
            }
            Some(first) => {
                first.datagrams += 1;
                first.segment_size = Some(size);
                // A shorter segment can only be the last one.
                if len < size {
                    break;
                }
            }
        }
    }
    SealedRun { taken, transmit }
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
            owner: SessionId(1),
            unsealed: None,
        }
    }

    /// What a core does with a finished datagram when its socket takes it.
    fn finished(
        pool: &mut BufferPool,
    ) -> impl FnMut(Outgoing, &mut Vec<u8>, bool) -> Option<usize> + '_ {
        |outgoing, buffer, _| {
            Some(crate::session::send::append_finished(
                outgoing.packet,
                buffer,
                pool,
            ))
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
        assert_eq!((run.count, run.segment_size), (3, Some(1400)));
        assert_eq!(queues.head_run(1, 64), None);
    }

    #[test]
    fn a_run_stops_at_another_address_a_larger_datagram_or_the_segment_limit() {
        let queues = queues_with(&[(0, 1, 1400), (0, 1, 1400), (0, 2, 1400)]);
        assert_eq!(queues.head_run(0, 64).unwrap().count, 2);
        let queues = queues_with(&[(0, 1, 800), (0, 1, 1400)]);
        let run = queues.head_run(0, 64).unwrap();
        assert_eq!((run.count, run.segment_size), (1, None));
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
        let transmit = queues
            .poll(0, 64, &mut buffer, finished(&mut pool))
            .unwrap();
        assert_eq!(transmit.datagrams, 3);
        assert_eq!(transmit.segment_size, Some(1400));
        assert_eq!(buffer.len(), 1400 + 1400 + 900);
        assert!(buffer[..1400].iter().all(|&b| b == 1));
        assert!(buffer[1400..2800].iter().all(|&b| b == 2));
        assert!(buffer[2800..].iter().all(|&b| b == 3));
        assert!(queues.has_waiting(0) && queues.has_waiting(1));
        let alone = queues
            .poll(0, 64, &mut buffer, finished(&mut pool))
            .unwrap();
        assert_eq!((alone.datagrams, alone.segment_size), (1, None));
        assert!(!queues.has_waiting(0));
        assert_eq!(queues.poll(0, 64, &mut buffer, finished(&mut pool)), None);
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

    fn of_session(mut outgoing: Outgoing, owner: u32) -> Outgoing {
        outgoing.owner = SessionId(owner);
        outgoing.destination.set_port(owner as u16);
        outgoing
    }

    #[test]
    fn a_session_that_filled_the_socket_loses_its_own_datagrams_to_a_newcomer() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        for _ in 0..MAX_WAITING_PER_SOCKET {
            let hog = of_session(datagram(&mut pool, 0, 1, 1400), 7);
            assert!(queues.push(hog).is_ok());
        }
        // Over its share now that a second session has work: its own are refused ...
        let refused = queues.push(of_session(datagram(&mut pool, 0, 1, 1400), 7));
        assert_eq!(refused.unwrap_err().owner, SessionId(7));
        // ... and the newcomer's datagrams go in, each at the hog's expense.
        for _ in 0..10 {
            let evicted = queues.push(of_session(datagram(&mut pool, 0, 1, 100), 8));
            assert_eq!(evicted.unwrap_err().owner, SessionId(7));
        }
        assert_eq!(queues.waiting_of(0, SessionId(8)), 10);
        assert_eq!(
            queues.waiting_of(0, SessionId(7)),
            MAX_WAITING_PER_SOCKET - 10
        );
        // The newcomer is served in the second send, not after the hog's backlog.
        let mut buffer = Vec::new();
        let first = queues
            .poll(0, 64, &mut buffer, finished(&mut pool))
            .unwrap();
        let second = queues
            .poll(0, 64, &mut buffer, finished(&mut pool))
            .unwrap();
        assert_eq!(first.destination.port(), 7);
        assert_eq!(second.destination.port(), 8);
        assert_eq!(second.datagrams, 10);
    }

    #[test]
    fn busy_sessions_share_the_socket_by_bytes() {
        let mut pool = BufferPool::new(2048, 0, 64);
        let mut queues = Transmits::default();
        // Session 1 sends 1400-byte datagrams, session 2 sends 200-byte ones.
        for _ in 0..1000 {
            assert!(queues
                .push(of_session(datagram(&mut pool, 0, 1, 1400), 1))
                .is_ok());
            assert!(queues
                .push(of_session(datagram(&mut pool, 0, 1, 200), 2))
                .is_ok());
        }
        let mut buffer = Vec::new();
        let mut bytes = [0usize; 3];
        while queues.waiting_of(0, SessionId(1)) > 0 && queues.waiting_of(0, SessionId(2)) > 0 {
            let transmit = queues
                .poll(0, 64, &mut buffer, finished(&mut pool))
                .unwrap();
            bytes[usize::from(transmit.destination.port())] += buffer.len();
        }
        // While both had work, both sent about as many bytes (within one quantum),
        // although one sends seven times as many datagrams.
        let (one, two) = (bytes[1], bytes[2]);
        assert!(two >= 1000 * 200 - QUANTUM_BYTES, "{two}");
        assert!(one.abs_diff(two) <= QUANTUM_BYTES, "{one} against {two}");
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
                while let Some(transmit) = queues.poll(socket, max_segments, &mut buffer, finished(&mut pool)) {
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
