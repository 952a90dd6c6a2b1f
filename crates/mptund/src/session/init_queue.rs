//! Handshake inits waiting for Diffie-Hellman, shared fairly between the sources that
//! send them.
//!
//! Every init costs the server four X25519 operations, so the queue in front of them
//! is a resource like any other. Sources that completed a handshake before (a
//! rebooted or renewing client) go first. The rest are served round robin by source
//! prefix (an IPv4 /24, an IPv6 /48: what one operator or one subscriber line holds),
//! so one network with many addresses gets one turn among the others, not one turn
//! per address. When the queue is full, a prefix below its equal share takes the
//! place of the newest init of the prefix with the most waiting (as `fq_codel` drops
//! from the fattest queue, RFC 8290 section 4.1).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use super::Received;
use crate::buffers::Packet;

/// An init that passed mac1, mac2 under load and its source's bucket.
pub(super) struct QueuedInit {
    pub arrived: Instant,
    pub received: Received,
    pub packet: Packet,
}

/// Sources remembered as having completed a handshake: as many as the rate limiter's
/// table holds (WireGuard's size); the oldest is forgotten first.
const KNOWN_SOURCES: usize = 8192;

/// What round robin tells sources apart by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SourcePrefix {
    V4([u8; 3]),
    V6([u8; 6]),
}

fn prefix_of(address: IpAddr) -> SourcePrefix {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            SourcePrefix::V4([a, b, c])
        }
        IpAddr::V6(v6) => {
            let [a, b, c, d, e, f, ..] = v6.octets();
            SourcePrefix::V6([a, b, c, d, e, f])
        }
    }
}

pub(super) struct InitQueue {
    capacity: usize,
    /// Inits from sources that completed a handshake before, first come first served.
    known: VecDeque<QueuedInit>,
    /// The others, by source prefix.
    by_prefix: HashMap<SourcePrefix, VecDeque<QueuedInit>>,
    /// Prefixes with inits waiting, in round-robin order.
    rotation: VecDeque<SourcePrefix>,
    len: usize,
    known_sources: HashSet<IpAddr>,
    known_order: VecDeque<IpAddr>,
}

/// Why an init found no place.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The queue is full and the init's prefix has its share waiting.
    Full,
}

impl InitQueue {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            known: VecDeque::new(),
            by_prefix: HashMap::new(),
            rotation: VecDeque::new(),
            len: 0,
            known_sources: HashSet::new(),
            known_order: VecDeque::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// A source completed a handshake: its next inits go first.
    pub fn remember_source(&mut self, source: IpAddr) {
        if !self.known_sources.insert(source) {
            return;
        }
        self.known_order.push_back(source);
        if self.known_order.len() > KNOWN_SOURCES {
            if let Some(oldest) = self.known_order.pop_front() {
                self.known_sources.remove(&oldest);
            }
        }
    }

    /// Queues `init`; gives back an init to refuse when there is no room: `init`
    /// itself, or the newest of the prefix with the most waiting.
    pub fn push(&mut self, init: QueuedInit) -> Result<(), (QueuedInit, Refused)> {
        let source = init.received.from.ip();
        let mut displaced = None;
        if self.len >= self.capacity {
            displaced = self.displace_for(source);
            if displaced.is_none() {
                return Err((init, Refused::Full));
            }
        }
        if self.known_sources.contains(&source) {
            self.known.push_back(init);
        } else {
            let prefix = prefix_of(source);
            let queue = self.by_prefix.entry(prefix).or_default();
            if queue.is_empty() {
                self.rotation.push_back(prefix);
            }
            queue.push_back(init);
        }
        self.len += 1;
        displaced.map_or(Ok(()), |init| Err((init, Refused::Full)))
    }

    /// The next init to answer: a known source's, else the next prefix's in turn.
    pub fn pop(&mut self) -> Option<QueuedInit> {
        if let Some(init) = self.known.pop_front() {
            self.len -= 1;
            return Some(init);
        }
        let prefix = self.rotation.pop_front()?;
        let queue = self.by_prefix.get_mut(&prefix)?;
        let init = queue.pop_front()?;
        if queue.is_empty() {
            self.by_prefix.remove(&prefix);
        } else {
            self.rotation.push_back(prefix);
        }
        self.len -= 1;
        Some(init)
    }

    /// When the init that waited longest arrived.
    pub fn oldest_arrival(&self) -> Option<Instant> {
        let known = self.known.front().map(|init| init.arrived);
        let others = self
            .by_prefix
            .values()
            .filter_map(|queue| queue.front().map(|init| init.arrived));
        known.into_iter().chain(others).min()
    }

    /// Makes room for an init from `source` in a full queue by taking the newest init
    /// of the prefix with the most waiting, if `source` is known or its prefix has
    /// less than that prefix (and less than an equal share).
    fn displace_for(&mut self, source: IpAddr) -> Option<QueuedInit> {
        let prefix = prefix_of(source);
        let own = self.by_prefix.get(&prefix).map_or(0, VecDeque::len);
        let prefixes = self.rotation.len() + usize::from(own == 0);
        let share = self.capacity / prefixes.max(1);
        let known = self.known_sources.contains(&source);
        if !known && own >= share {
            return None;
        }
        let (fattest, waiting) = self
            .by_prefix
            .iter()
            .map(|(prefix, queue)| (*prefix, queue.len()))
            .max_by_key(|&(_, waiting)| waiting)?;
        if fattest == prefix || waiting <= own.saturating_add(1) && !known {
            return None;
        }
        let queue = self.by_prefix.get_mut(&fattest)?;
        let displaced = queue.pop_back()?;
        if queue.is_empty() {
            self.by_prefix.remove(&fattest);
            self.rotation.retain(|queued| *queued != fattest);
        }
        self.len -= 1;
        Some(displaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::BufferPool;
    use std::net::{Ipv4Addr, SocketAddr};

    fn init(pool: &mut BufferPool, now: Instant, ip: [u8; 4]) -> QueuedInit {
        QueuedInit {
            arrived: now,
            received: Received {
                socket: 0,
                from: SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 4000),
                local_ip: None,
            },
            packet: pool.take(),
        }
    }

    fn source_of(init: &QueuedInit) -> [u8; 4] {
        match init.received.from.ip() {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(_) => [0; 4],
        }
    }

    #[test]
    fn prefixes_take_turns_however_many_addresses_one_holds() {
        let mut pool = BufferPool::new(256, 0, 8);
        let now = Instant::now();
        let mut queue = InitQueue::new(128);
        // 256 addresses of one /24 first, then one init of another network.
        for host in 0..100u8 {
            assert!(queue.push(init(&mut pool, now, [198, 19, 1, host])).is_ok());
        }
        assert!(queue.push(init(&mut pool, now, [198, 18, 7, 9])).is_ok());
        assert_eq!(source_of(&queue.pop().unwrap())[2], 1);
        assert_eq!(source_of(&queue.pop().unwrap()), [198, 18, 7, 9]);
    }

    #[test]
    fn a_known_source_goes_first_and_a_full_queue_still_takes_a_newcomer() {
        let mut pool = BufferPool::new(256, 0, 8);
        let now = Instant::now();
        let mut queue = InitQueue::new(16);
        queue.remember_source(IpAddr::V4(Ipv4Addr::new(198, 18, 50, 2)));
        for host in 0..16u8 {
            assert!(queue.push(init(&mut pool, now, [198, 19, 1, host])).is_ok());
        }
        // Full of one prefix: more of it are refused ...
        let refused = queue.push(init(&mut pool, now, [198, 19, 1, 200]));
        assert_eq!(source_of(&refused.unwrap_err().0), [198, 19, 1, 200]);
        // ... while another prefix displaces the flood's newest ...
        let displaced = queue.push(init(&mut pool, now, [198, 18, 9, 1]));
        assert_eq!(source_of(&displaced.unwrap_err().0), [198, 19, 1, 15]);
        // ... and so does a source that completed a handshake before, served first.
        assert!(queue
            .push(init(&mut pool, now, [198, 18, 50, 2]))
            .is_err_and(|(init, _)| source_of(&init) == [198, 19, 1, 14]));
        assert_eq!(queue.len(), 16);
        assert_eq!(source_of(&queue.pop().unwrap()), [198, 18, 50, 2]);
        let served: Vec<[u8; 4]> = std::iter::from_fn(|| queue.pop())
            .map(|i| source_of(&i))
            .collect();
        assert_eq!(served.len(), 15);
        assert_eq!(served[1], [198, 18, 9, 1], "the newcomer's turn is second");
    }
}
