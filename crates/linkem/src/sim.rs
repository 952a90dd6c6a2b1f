//! A deterministic discrete-event simulation core on top of [`Link`]: a virtual
//! clock, an event queue and a set of links, so every simulator in the workspace
//! (the tunnel's `Engine` simulator, the scheduler and controller tests) shares the
//! one link model the test bed's emulator runs.
//!
//! Like the rest of this crate it is sans-IO and reads no clock: [`Clock`] hands out
//! `Instant`s derived from one base instant plus simulated offsets, so a run with a
//! given seed produces the same events at the same offsets every time, whatever the
//! wall clock does. A test of a 500 ms outage takes microseconds.
//!
//! The shape follows neqo's `test-fixture` simulator and smoltcp's `netsim`: the
//! caller owns the loop; it asks [`Network::poll_timeout`] and
//! [`EventQueue::peek_time`] for the next instant, moves the clock there, and drains
//! what is due.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::link::{Admission, Link, LinkConfig, Outage};
use crate::rng::SeededRng;

/// Virtual time: one base instant and how far the simulation has run since.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
    elapsed: Duration,
}

impl Clock {
    /// A clock at offset zero. `base` is only an anchor for the `Instant`s handed
    /// out; nothing depends on its value, so runs compare by [`Clock::since_base`].
    pub fn new(base: Instant) -> Self {
        Self {
            base,
            elapsed: Duration::ZERO,
        }
    }

    pub fn base(&self) -> Instant {
        self.base
    }

    pub fn now(&self) -> Instant {
        self.base + self.elapsed
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// The offset of `at` from the base (zero for instants before it).
    pub fn since_base(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.base)
    }

    /// Moves the clock forward to `at`; an instant in the past leaves it where it is
    /// (virtual time never runs backwards).
    pub fn advance_to(&mut self, at: Instant) {
        self.elapsed = self.elapsed.max(self.since_base(at));
    }

    pub fn advance_by(&mut self, duration: Duration) {
        self.elapsed += duration;
    }
}

struct Scheduled<E> {
    at: Instant,
    /// Insertion order: events due at the same instant come out first in, first out.
    order: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap and the earliest event must pop first.
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// Events the caller scheduled (a packet to inject, a socket to block), earliest
/// first; events due at the same instant keep the order they were pushed in.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_order: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_order: 0,
        }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, at: Instant, event: E) {
        self.heap.push(Scheduled {
            at,
            order: self.next_order,
            event,
        });
        self.next_order += 1;
    }

    /// When the earliest event is due.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|scheduled| scheduled.at)
    }

    /// The earliest event due at or before `now`, with the instant it was due at.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, E)> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let scheduled = self.heap.pop()?;
        Some((scheduled.at, scheduled.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Index of a link in a [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub usize);

/// A set of [`Link`]s that share one epoch (the clock's base) and one seed.
pub struct Network<P> {
    epoch: Instant,
    links: Vec<Link<P>>,
    /// Draws each new link's seed, so a link's loss and jitter depend on the
    /// network's seed and the order links were added, nothing else.
    seeds: SeededRng,
}

impl<P> Network<P> {
    pub fn new(epoch: Instant, seed: u64) -> Self {
        Self {
            epoch,
            links: Vec::new(),
            seeds: SeededRng::new(seed),
        }
    }

    /// Adds a link; its `seed` is replaced by one drawn from the network's seed.
    pub fn add_link(&mut self, mut config: LinkConfig) -> LinkId {
        config.seed = self.seeds.next_u64();
        self.links.push(Link::new(config, self.epoch));
        LinkId(self.links.len() - 1)
    }

    pub fn link(&self, id: LinkId) -> Option<&Link<P>> {
        self.links.get(id.0)
    }

    /// For run-time controls ([`Link::set_cut`], [`Link::lose_next`]).
    pub fn link_mut(&mut self, id: LinkId) -> Option<&mut Link<P>> {
        self.links.get_mut(id.0)
    }

    pub fn links(&self) -> impl Iterator<Item = (LinkId, &Link<P>)> {
        self.links
            .iter()
            .enumerate()
            .map(|(index, link)| (LinkId(index), link))
    }

    /// Offers `packet` of `len` bytes to link `id` at `now`. A packet for a link
    /// that does not exist is handed back as dropped by an outage.
    pub fn send(&mut self, now: Instant, id: LinkId, packet: P, len: usize) -> Admission<P> {
        match self.links.get_mut(id.0) {
            Some(link) => link.handle_packet(now, packet, len),
            None => Admission::Dropped(packet, crate::link::DropCause::Outage),
        }
    }

    /// The next packet any link releases at or before `now`, lowest link first.
    /// Call it until it returns `None` at every instant the clock stops at: it also
    /// moves each link's serializer forward.
    pub fn poll_release(&mut self, now: Instant) -> Option<(LinkId, P)> {
        self.links
            .iter_mut()
            .enumerate()
            .find_map(|(index, link)| Some((LinkId(index), link.poll_release(now)?)))
    }

    /// The next instant at which any link has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.links.iter().filter_map(Link::poll_timeout).min()
    }

    /// Packets inside all links (queued or propagating).
    pub fn packets_inside(&self) -> usize {
        self.links.iter().map(Link::packets_inside).sum()
    }
}

/// Builders for the link settings simulations vary; everything else keeps
/// [`LinkConfig::delay_only`]'s values.
impl LinkConfig {
    pub fn with_rate_bit_per_s(mut self, rate_bit_per_s: u64) -> Self {
        self.rate_bit_per_s = Some(rate_bit_per_s);
        self
    }

    pub fn with_queue_limit_bytes(mut self, queue_limit_bytes: usize) -> Self {
        self.queue_limit_bytes = queue_limit_bytes;
        self
    }

    pub fn with_loss_probability(mut self, loss_probability: f64) -> Self {
        self.loss_probability = loss_probability;
        self
    }

    /// Uniform jitter of up to `jitter` either way; with `reordering`, packets may
    /// overtake each other.
    pub fn with_jitter(mut self, jitter: Duration, reordering: bool) -> Self {
        self.jitter = jitter;
        self.allow_reordering = reordering;
        self
    }

    /// Adds an outage `duration` long, `start` after the epoch; outages must be
    /// added in order and not overlap.
    pub fn with_outage(mut self, start: Duration, duration: Duration) -> Self {
        self.outages.push(Outage { start, duration });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn the_clock_only_moves_forward_from_its_base() {
        let base = Instant::now();
        let mut clock = Clock::new(base);
        clock.advance_to(base + ms(30));
        clock.advance_to(base + ms(10));
        assert_eq!(clock.elapsed(), ms(30));
        clock.advance_by(ms(5));
        assert_eq!(clock.now(), base + ms(35));
        assert_eq!(clock.since_base(base + ms(7)), ms(7));
    }

    #[test]
    fn events_pop_earliest_first_and_ties_in_push_order() {
        let base = Instant::now();
        let mut events = EventQueue::default();
        events.push(base + ms(20), "late");
        events.push(base + ms(10), "first");
        events.push(base + ms(10), "second");
        assert_eq!(events.peek_time(), Some(base + ms(10)));
        assert_eq!(events.pop_due(base + ms(5)), None);
        let due: Vec<_> = std::iter::from_fn(|| events.pop_due(base + ms(10))).collect();
        assert_eq!(due, [(base + ms(10), "first"), (base + ms(10), "second")]);
        assert_eq!(events.len(), 1);
    }

    /// Runs `sends` (time since start, link, id) through a network and returns the
    /// releases (time since start, link, id) in the order they came out.
    fn run(
        seed: u64,
        configs: &[LinkConfig],
        sends: &[(u64, usize, u32)],
    ) -> Vec<(Duration, usize, u32)> {
        let base = Instant::now();
        let mut clock = Clock::new(base);
        let mut network = Network::new(base, seed);
        let links: Vec<LinkId> = configs
            .iter()
            .map(|c| network.add_link(c.clone()))
            .collect();
        let mut events = EventQueue::default();
        for &(at_ms, link, id) in sends {
            events.push(base + ms(at_ms), (links[link], id));
        }
        let mut released = Vec::new();
        while let Some(next) = [events.peek_time(), network.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        {
            clock.advance_to(next);
            let now = clock.now();
            while let Some((link, id)) = network.poll_release(now) {
                released.push((clock.elapsed(), link.0, id));
            }
            while let Some((_, (link, id))) = events.pop_due(now) {
                let _ = network.send(now, link, id, 1000);
            }
        }
        released
    }

    #[test]
    fn a_network_delivers_per_link_delay_and_rate_in_time_order() {
        // 1000 bytes at 8 Mbit/s take 1 ms to serialize.
        let fast = LinkConfig::delay_only(ms(10)).with_rate_bit_per_s(8_000_000);
        let slow = LinkConfig::delay_only(ms(30));
        let released = run(1, &[fast, slow], &[(0, 1, 100), (0, 0, 1), (0, 0, 2)]);
        assert_eq!(released, [(ms(11), 0, 1), (ms(12), 0, 2), (ms(30), 1, 100)]);
    }

    #[test]
    fn a_cut_link_and_scripted_losses_drop_arrivals_only() {
        let base = Instant::now();
        let mut network = Network::new(base, 1);
        let link = network.add_link(LinkConfig::delay_only(ms(10)));
        let accepted = |admission: Admission<u32>| matches!(admission, Admission::Accepted);
        assert!(accepted(network.send(base, link, 1, 100)));
        let control = network.link_mut(link).unwrap();
        control.set_cut(true);
        control.lose_next(1);
        assert!(!accepted(network.send(base, link, 2, 100)));
        network.link_mut(link).unwrap().set_cut(false);
        assert_eq!(network.link(link).unwrap().losses_to_come(), 1);
        assert!(!accepted(network.send(base, link, 3, 100)));
        assert!(accepted(network.send(base, link, 4, 100)));
        let released: Vec<u32> =
            std::iter::from_fn(|| network.poll_release(base + ms(10)).map(|(_, id)| id)).collect();
        assert_eq!(released, [1, 4], "what was inside went on");
        assert_eq!(network.link(link).unwrap().counters().dropped_scripted, 2);
    }

    #[test]
    fn outages_and_loss_drop_and_the_same_seed_repeats_the_run() {
        let lossy = LinkConfig::delay_only(ms(5))
            .with_loss_probability(0.3)
            .with_jitter(ms(4), true)
            .with_outage(ms(50), ms(20));
        let sends: Vec<(u64, usize, u32)> = (0..100).map(|i| (i, 0, i as u32)).collect();
        let first = run(7, std::slice::from_ref(&lossy), &sends);
        assert_eq!(first, run(7, std::slice::from_ref(&lossy), &sends));
        assert_ne!(first, run(8, &[lossy], &sends));
        let ids: Vec<u32> = first.iter().map(|&(_, _, id)| id).collect();
        assert!(
            ids.iter().all(|id| !(50..70).contains(id)),
            "sent in the outage"
        );
        assert!(
            (40..75).contains(&ids.len()),
            "{} of 80 survived 30% loss",
            ids.len()
        );
        assert!(
            ids.windows(2).any(|w| w[0] > w[1]),
            "jitter reordered nothing"
        );
    }
}
