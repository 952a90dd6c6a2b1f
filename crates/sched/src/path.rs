//! What a scheduler sees of the session's paths and of the packet to place.
//!
//! These are plain `Copy` values built by the daemon from its path state and
//! estimators (`crates/probe`) right before each decision, so a scheduler holds
//! no references into the daemon and the tests can hand-build any situation.
//! Measurements the daemon cannot make yet are `None`, and every scheduler must
//! still decide something sensible without them.

use std::time::Duration;

/// Identifies one path (uplink) of a session; chosen by the client, carried on
/// the wire as a u8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathId(pub u8);

impl PathId {
    /// Highest id a [`PathSet`] can hold (one bit per id in a `u64`).
    pub const MAX_IN_SET: u8 = 63;
}

/// A set of paths as a bitmask: `Copy`, no allocation.
///
/// Only ids `0..=63` ([`PathId::MAX_IN_SET`]) fit; a vehicle router with more
/// than 64 uplinks is not a case we design for. [`PathSet::insert`] of a larger
/// id is a caller bug: it panics in debug builds and is ignored in release.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathSet(u64);

impl PathSet {
    /// The set with no paths.
    pub const EMPTY: PathSet = PathSet(0);

    /// Adds `id` to the set (see the type docs for ids above 63).
    pub fn insert(&mut self, id: PathId) {
        debug_assert!(id.0 <= PathId::MAX_IN_SET, "{id:?} does not fit a PathSet");
        if id.0 <= PathId::MAX_IN_SET {
            self.0 |= 1 << id.0;
        }
    }

    /// Removes `id` from the set.
    pub fn remove(&mut self, id: PathId) {
        if id.0 <= PathId::MAX_IN_SET {
            self.0 &= !(1 << id.0);
        }
    }

    /// True when `id` is in the set.
    pub fn contains(&self, id: PathId) -> bool {
        id.0 <= PathId::MAX_IN_SET && self.0 & (1 << id.0) != 0
    }

    /// Number of paths in the set.
    pub fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// True when the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The paths in the set, in increasing id order.
    pub fn iter(&self) -> PathSetIter {
        PathSetIter { remaining: self.0 }
    }
}

impl FromIterator<PathId> for PathSet {
    fn from_iter<I: IntoIterator<Item = PathId>>(ids: I) -> Self {
        let mut set = PathSet::EMPTY;
        for id in ids {
            set.insert(id);
        }
        set
    }
}

impl IntoIterator for PathSet {
    type Item = PathId;
    type IntoIter = PathSetIter;

    fn into_iter(self) -> PathSetIter {
        self.iter()
    }
}

/// Iterator over a [`PathSet`] in increasing id order.
#[derive(Clone, Debug)]
pub struct PathSetIter {
    remaining: u64,
}

impl Iterator for PathSetIter {
    type Item = PathId;

    fn next(&mut self) -> Option<PathId> {
        if self.remaining == 0 {
            return None;
        }
        let lowest = self.remaining.trailing_zeros() as u8;
        self.remaining &= self.remaining - 1;
        Some(PathId(lowest))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let count = self.remaining.count_ones() as usize;
        (count, Some(count))
    }
}

/// Liveness of a path as decided by the daemon's path state machine.
///
/// More states may be added: match with a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathState {
    /// The path is believed to deliver packets.
    Up,
    /// The path has gone quiet for longer than its RTT explains; it is being probed
    /// and should not get new data until it answers.
    Suspect,
    /// The path is not usable for data.
    Down,
}

/// What a scheduler may know about a path at decision time. Fields that the
/// daemon cannot measure yet are `None`; schedulers must cope with `None`.
#[derive(Clone, Copy, Debug)]
pub struct PathView {
    /// Which path this is.
    pub id: PathId,
    /// Liveness of the path.
    pub state: PathState,
    /// A backup path carries data only when no regular path is Up.
    pub backup: bool,
    /// Smoothed round-trip time.
    pub srtt: Option<Duration>,
    /// Minimum round-trip time seen recently.
    pub min_rtt: Option<Duration>,
    /// Estimated one-way delay towards the peer.
    pub one_way_delay: Option<Duration>,
    /// The one-way delay from a measurement that does not overstate an idle path's
    /// (`one_way_delay` can); a test that must not shut a path out takes the lower of
    /// the two (see [`crate::earliest_possible_arrival`]). `None` when there is none.
    pub one_way_delay_floor: Option<Duration>,
    /// The one-way delay without the path's current queue (the lower of its base
    /// estimates): how far away the path is, whatever it carries. `None` when unmeasured.
    pub base_one_way_delay: Option<Duration>,
    /// Congestion window; `None` means no congestion control on this path yet,
    /// and such a path is never "full".
    pub cwnd_bytes: Option<u64>,
    /// Bytes sent on this path and neither acknowledged nor declared lost.
    pub bytes_in_flight: u64,
    /// Estimated delivery rate in bits per second.
    pub delivery_rate_bps: Option<u64>,
    /// The delivery rate was measured while the sender offered the path less than
    /// its window (application-limited, as a path kept idle by the scheduler is):
    /// it shows what was offered, a lower bound of what the path carries.
    pub delivery_rate_app_limited: bool,
    /// The path congestion controller's pacing rate in bits per second; `None`
    /// when unknown (no controller yet, or one that does not pace).
    pub pacing_rate_bps: Option<u64>,
    /// The path congestion controller's estimate of the bottleneck rate in bits per
    /// second (BBR's BtlBw: the largest recent delivery rate, kept while the path is
    /// offered less than it carries); `None` when the controller keeps none.
    pub bottleneck_rate_bps: Option<u64>,
    /// The path's congestion controller is still searching for its capacity (slow
    /// start, BBR's Startup): the bottleneck estimate is only what the path was
    /// offered so far, and the pacing rate the rate it searches at.
    pub capacity_searching: bool,
    /// Estimated loss rate, 0.0..=1.0.
    pub loss_rate: Option<f32>,
    /// Whether the path's pacer lets a packet go now.
    pub pacing_ready: bool,
}

impl PathView {
    /// A path with nothing measured yet: no window, nothing in flight, not a backup.
    pub fn new(id: PathId, state: PathState) -> Self {
        PathView {
            id,
            state,
            backup: false,
            srtt: None,
            min_rtt: None,
            one_way_delay: None,
            one_way_delay_floor: None,
            base_one_way_delay: None,
            cwnd_bytes: None,
            bytes_in_flight: 0,
            delivery_rate_bps: None,
            delivery_rate_app_limited: false,
            pacing_rate_bps: None,
            bottleneck_rate_bps: None,
            capacity_searching: false,
            loss_rate: None,
            pacing_ready: true,
        }
    }

    /// True when a packet of `packet_len` bytes may go on this path now: its window
    /// has room and its pacer does not hold it back.
    pub fn can_send(&self, packet_len: usize) -> bool {
        self.pacing_ready && self.has_window_room(packet_len)
    }

    /// True when sending `packet_len` more bytes keeps the path within its
    /// congestion window (`in_flight + len <= cwnd`, the test quinn uses).
    /// Always true without congestion control (`cwnd_bytes == None`).
    pub fn has_window_room(&self, packet_len: usize) -> bool {
        match self.cwnd_bytes {
            None => true,
            Some(cwnd) => self.bytes_in_flight.saturating_add(packet_len as u64) <= cwnd,
        }
    }
}

/// Kind of inner packet, as classified from its headers before scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PacketClass {
    /// Ordinary data.
    #[default]
    Bulk,
    /// Small latency-critical inner packet: pure TCP ACK, SYN/FIN/RST, DNS.
    Control,
}

/// What a scheduler knows about the packet it must place.
#[derive(Clone, Copy, Debug)]
pub struct PacketInfo {
    /// Length of the datagram that will go on the path, in bytes.
    pub len: usize,
    /// Classification of the inner packet.
    pub class: PacketClass,
    /// Bytes waiting in the sender's queue behind this packet; 0 when unknown.
    /// ECF (`ecf.rs`) weighs waiting for a fast path against this backlog.
    pub queued_bytes: u64,
}

/// A scheduler's decision for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Send on this one path.
    One(PathId),
    /// Send a copy on each of these paths (redundant schedulers).
    Many(PathSet),
    /// No path can take the packet now; keep it and ask again later.
    Hold,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_set_insert_contains_len_iter() {
        let mut set = PathSet::EMPTY;
        assert!(set.is_empty());
        for id in [5, 0, 63, 5] {
            set.insert(PathId(id));
        }
        assert_eq!(set.len(), 3);
        assert!(set.contains(PathId(0)) && set.contains(PathId(5)) && set.contains(PathId(63)));
        assert!(!set.contains(PathId(1)) && !set.contains(PathId(64)));
        let ids: Vec<u8> = set.iter().map(|id| id.0).collect();
        assert_eq!(ids, [0, 5, 63]);
        set.remove(PathId(5));
        assert_eq!(set.iter().map(|id| id.0).collect::<Vec<_>>(), [0, 63]);
        let collected: PathSet = [PathId(2), PathId(3)].into_iter().collect();
        assert_eq!(collected.len(), 2);
    }

    #[test]
    fn window_room_respects_cwnd_and_none_is_never_full() {
        let mut view = PathView::new(PathId(1), PathState::Up);
        view.bytes_in_flight = 1_000_000;
        assert!(view.has_window_room(1500), "no cwnd: never full");
        view.cwnd_bytes = Some(3000);
        view.bytes_in_flight = 1500;
        assert!(view.has_window_room(1500), "exactly fills the window");
        assert!(!view.has_window_room(1501));
        view.bytes_in_flight = u64::MAX;
        assert!(!view.has_window_room(1), "no overflow");
    }
}
