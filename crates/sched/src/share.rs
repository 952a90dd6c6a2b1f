//! Capacity shares: once the traffic comes close to what the fastest path carries,
//! every path gets at least three quarters of its share of it, in proportion to its
//! capacity. Earliest-arrival (`earliest_arrival.rs`) asks this first.
//!
//! Why: earliest-arrival loads the fastest path until its queue makes it as late as the
//! next path. An inner flow that offers about what the fastest path carries never
//! builds that queue: everything goes on the fastest path and the others idle. A
//! probe for more bandwidth (BBR's 1.25 gain, CUBIC's growth) then only queues on the
//! fastest path, the inner flow's delivery rate cannot rise above that path's, and it
//! stays there. Traced on 5g-lte-shallow (`benches/schedulers/REPORT.md`): about one
//! run in ten settled at 5G alone. With the other paths already carrying their shares,
//! a probe's surplus spreads over every path and shows as a higher delivery rate.
//!
//! - **When:** the bytes sent in the last [`SHARE_WINDOW`] are at least the configured
//!   percentage of what the fastest path carries in that time. Below it (light traffic,
//!   a video stream) the fastest path alone carries it, as earliest-arrival decides.
//! - **Who:** the eligible paths with a capacity estimate
//!   ([`crate::capacity_bytes_per_sec`]) whose arrival, queue included
//!   ([`crate::arrival_at_shown_rate`]), is within the receiver's reorder window of the
//!   fastest path's earliest possible one. A GEO satellite behind 5G is
//!   outside it and stays idle, as earliest-arrival's own limit keeps it.
//! - **How much:** each path earns credit at three quarters of its share of the recent
//!   traffic's rate, and spends it on every byte it is sent, whoever chose it. A path
//!   with a packet's worth of credit that can send now gets the packet. Three quarters,
//!   not all: under full load earliest-arrival already spreads by capacity, in the
//!   order that makes packets arrive in order, and the margin keeps the floor from
//!   overriding it on every small deviation.
//! - **No catching up:** credit is capped at [`SHARE_BURST`] of the path's floor rate.
//!   A path that got nothing for a while (before sharing began, or while its window was
//!   full) is not flooded with what it missed: that would only queue at its bottleneck.
//! - **How often:** whether to share, and the floor rates, are decided at most every
//!   [`SHARE_DECISION_INTERVAL`]; between decisions a pick only earns and checks credit.
//!
//! The capacity of a path that carries less than it could is the controller's
//! bottleneck estimate, which such a path keeps ([`PathView::bottleneck_rate_bps`]).
//! A path whose controller is still searching for its capacity
//! ([`PathView::capacity_searching`]) has shown only what it was offered: its floor is
//! sized by the rate it searches at where that is higher (see [`share_capacity`]).
//!
//! [`CapacityShare::path_share`] tells the daemon's metrics how many packets the floors
//! placed on each path, and each path's floor while sharing is in force.

use std::time::{Duration, Instant};

use crate::eligible::Eligibility;
use crate::path::{PathId, PathView};
use crate::predict::{
    arrival_at_shown_rate, bytes_in, capacity_bytes_per_sec, earliest_possible_arrival,
};

/// The span over which the traffic's rate is measured: several round trips of the
/// paths this is for, so the dip of one probing cycle (BBR's 0.75 gain) or one CUBIC
/// reduction does not switch sharing off.
pub const SHARE_WINDOW: Duration = Duration::from_millis(500);

/// Most credit a path holds, in time at its floor rate: a few packets at most rates,
/// never a backlog worth queuing.
pub const SHARE_BURST: Duration = Duration::from_millis(10);

/// How often sharing and the floor rates are decided anew. They follow estimates that
/// move on the scale of round trips; deciding them for every packet cost twice to three
/// times earliest-arrival's own pick (`crates/sched/benches/scheduler_pick.rs`).
pub const SHARE_DECISION_INTERVAL: Duration = Duration::from_millis(1);

/// Default of [`crate::EarliestArrivalParams::share_percent`].
pub const EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT: u16 = 75;

/// A path's floor is this fraction of its capacity share (the module docs say why).
const FLOOR_NUMERATOR: u128 = 3;
const FLOOR_DENOMINATOR: u128 = 4;

const NANOS_PER_SEC: u128 = 1_000_000_000;
const SLOTS: usize = PathId::MAX_IN_SET as usize + 1;

/// What the capacity shares do on one path, for metrics and `mptund status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathShare {
    /// Bulk packets the shares placed on the path because it held credit towards its
    /// floor; earliest-arrival placed the others.
    pub floor_packets: u64,
    /// The path's floor rate in bytes per second while sharing is in force; `None`
    /// while the traffic is too light to share or the path is not a member.
    pub floor_rate_bytes_per_sec: Option<u64>,
}

/// The recent traffic, and each path's credit towards its floor.
#[derive(Clone, Debug)]
pub struct CapacityShare {
    /// Sharing starts when the traffic reaches this percentage of the fastest path's
    /// capacity; 0 never shares.
    threshold_percent: u16,
    /// Start of the current counting window; `None` before the first packet.
    window_start: Option<Instant>,
    /// Bytes sent on all paths in the current window, and in the one before it.
    sent_current: u64,
    sent_previous: u64,
    /// Credit per path id in bytes: earned at the floor rate, spent on every send.
    credit: [i64; SLOTS],
    /// Floor rate per path id in bytes per second, as last decided; 0 for a path that
    /// does not share.
    floor_rate: [u64; SLOTS],
    /// Packets placed by the floors per path id, since this scheduler was built.
    floor_packets: [u64; SLOTS],
    /// When the credits were last earned.
    earned_at: Option<Instant>,
    /// When sharing and the floor rates were last decided.
    decided_at: Option<Instant>,
}

impl CapacityShare {
    /// Shares from `threshold_percent` of the fastest path's capacity on.
    pub fn new(threshold_percent: u16) -> Self {
        CapacityShare {
            threshold_percent,
            window_start: None,
            sent_current: 0,
            sent_previous: 0,
            credit: [0; SLOTS],
            floor_rate: [0; SLOTS],
            floor_packets: [0; SLOTS],
            earned_at: None,
            decided_at: None,
        }
    }

    /// `bytes` went on `path`.
    pub fn on_sent(&mut self, now: Instant, path: PathId, bytes: usize) {
        self.advance(now);
        self.sent_current = self.sent_current.saturating_add(bytes as u64);
        if let Some(credit) = self.credit.get_mut(usize::from(path.0)) {
            *credit = credit.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// The path that should take a packet of `packet_len` bytes to keep to its floor:
    /// sharing is on, and of the paths that can send now and hold a packet's worth of
    /// credit, it holds the most for its floor rate. `None` otherwise.
    pub fn below_floor(
        &mut self,
        now: Instant,
        paths: &[PathView],
        rule: Eligibility,
        packet_len: usize,
        reorder_window: Duration,
    ) -> Option<PathId> {
        if self.threshold_percent == 0 {
            return None;
        }
        self.advance(now);
        if self
            .decided_at
            .is_none_or(|at| now.saturating_duration_since(at) >= SHARE_DECISION_INTERVAL)
        {
            self.decide(now, paths, rule, packet_len, reorder_window);
            self.decided_at = Some(now);
        }
        let elapsed = self
            .earned_at
            .replace(now)
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        // (credit, floor rate, id) of the path with the most credit for its floor rate,
        // compared by cross-multiplying.
        let mut richest: Option<(u128, u128, PathId)> = None;
        for path in paths {
            let index = usize::from(path.id.0);
            let (Some(credit), Some(&floor_rate)) =
                (self.credit.get_mut(index), self.floor_rate.get(index))
            else {
                continue;
            };
            if floor_rate == 0 || !rule.allows(path) {
                continue;
            }
            let floor_rate = u128::from(floor_rate);
            let earned = floor_rate * elapsed.as_nanos() / NANOS_PER_SEC;
            let limit =
                (floor_rate * SHARE_BURST.as_nanos() / NANOS_PER_SEC).max(2 * packet_len as u128);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            *credit = credit
                .saturating_add(i64::try_from(earned).unwrap_or(i64::MAX))
                .clamp(-limit, limit);
            let Ok(held) = u128::try_from(*credit) else {
                continue;
            };
            if held < packet_len as u128 || !path.can_send(packet_len) {
                continue;
            }
            if richest
                .is_none_or(|(best_held, best_rate, _)| held * best_rate > best_held * floor_rate)
            {
                richest = Some((held, floor_rate, path.id));
            }
        }
        let (_, _, id) = richest?;
        if let Some(count) = self.floor_packets.get_mut(usize::from(id.0)) {
            *count = count.saturating_add(1);
        }
        Some(id)
    }

    /// What the shares do on `path` at `now`: the packets its floor placed so far,
    /// and its floor rate if the last decision made it share. A decision older than a
    /// [`SHARE_WINDOW`] no longer counts: no bulk packet was picked since.
    pub fn path_share(&self, now: Instant, path: PathId) -> PathShare {
        let index = usize::from(path.0);
        let decided_recently = self
            .decided_at
            .is_some_and(|at| now.saturating_duration_since(at) < SHARE_WINDOW);
        PathShare {
            floor_packets: self.floor_packets.get(index).copied().unwrap_or(0),
            floor_rate_bytes_per_sec: self
                .floor_rate
                .get(index)
                .copied()
                .filter(|&rate| decided_recently && rate > 0),
        }
    }

    /// Decides whether to share and each path's floor rate; a path that does not share
    /// loses its credit.
    fn decide(
        &mut self,
        now: Instant,
        paths: &[PathView],
        rule: Eligibility,
        packet_len: usize,
        reorder_window: Duration,
    ) {
        let recent = self.recent_bytes(now);
        let sharing = self.sharing(recent, paths, rule, packet_len, reorder_window);
        self.floor_rate = [0; SLOTS];
        if let Some(sharing) = sharing {
            let recent_rate = u128::from(recent) * NANOS_PER_SEC / SHARE_WINDOW.as_nanos();
            for path in paths {
                let (Some(capacity), Some(floor_rate)) = (
                    sharing.member_capacity(path, rule, packet_len),
                    self.floor_rate.get_mut(usize::from(path.id.0)),
                ) else {
                    continue;
                };
                let rate = recent_rate * u128::from(capacity) * FLOOR_NUMERATOR
                    / (sharing.total_capacity * FLOOR_DENOMINATOR).max(1);
                *floor_rate = u64::try_from(rate).unwrap_or(u64::MAX);
            }
        }
        for (credit, &floor_rate) in self.credit.iter_mut().zip(&self.floor_rate) {
            if floor_rate == 0 {
                *credit = 0;
            }
        }
    }

    /// Whether to share now, and among which paths: `None` unless at least two paths
    /// qualify and the `recent` traffic (bytes in a window) reaches the threshold.
    fn sharing(
        &self,
        recent: u64,
        paths: &[PathView],
        rule: Eligibility,
        packet_len: usize,
        reorder_window: Duration,
    ) -> Option<Sharing> {
        let (fastest_arrival, fastest_capacity) = paths
            .iter()
            .filter(|path| rule.allows(path))
            .filter_map(|path| {
                Some((
                    earliest_possible_arrival(path, packet_len)?,
                    capacity_bytes_per_sec(path)?,
                ))
            })
            .min()?;
        let mut sharing = Sharing {
            last_arrival: fastest_arrival.saturating_add(reorder_window),
            total_capacity: 0,
        };
        let mut members = 0usize;
        for path in paths {
            if let Some(capacity) = sharing.member_capacity(path, rule, packet_len) {
                sharing.total_capacity += u128::from(capacity);
                members += 1;
            }
        }
        let threshold = u128::from(bytes_in(fastest_capacity, SHARE_WINDOW))
            * u128::from(self.threshold_percent)
            / 100;
        (members >= 2 && u128::from(recent) >= threshold.max(1)).then_some(sharing)
    }

    /// Bytes sent in about the last [`SHARE_WINDOW`]: the current window's, and the
    /// part of the previous window's that still lies within one of `now` (assuming it
    /// was sent evenly).
    fn recent_bytes(&self, now: Instant) -> u64 {
        let elapsed = self
            .window_start
            .map_or(Duration::ZERO, |start| now.saturating_duration_since(start))
            .min(SHARE_WINDOW);
        let still_inside = u128::from(self.sent_previous) * (SHARE_WINDOW - elapsed).as_nanos()
            / SHARE_WINDOW.as_nanos();
        self.sent_current
            .saturating_add(u64::try_from(still_inside).unwrap_or(u64::MAX))
    }

    /// Starts a new counting window when the current one is over.
    fn advance(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed < SHARE_WINDOW {
            return;
        }
        if elapsed < 2 * SHARE_WINDOW {
            self.sent_previous = self.sent_current;
            self.window_start = Some(start + SHARE_WINDOW);
        } else {
            self.sent_previous = 0;
            self.window_start = Some(now);
        }
        self.sent_current = 0;
    }
}

/// The paths that share, as decided at one moment.
struct Sharing {
    /// A member's earliest possible arrival is at most this.
    last_arrival: Duration,
    /// Sum of the members' capacities, bytes per second.
    total_capacity: u128,
}

impl Sharing {
    /// `path`'s capacity if it is a member: eligible, with a capacity estimate, and
    /// arriving, queue included, within the reorder window of the fastest path.
    fn member_capacity(
        &self,
        path: &PathView,
        rule: Eligibility,
        packet_len: usize,
    ) -> Option<u64> {
        if !rule.allows(path) {
            return None;
        }
        let arrival = arrival_at_shown_rate(path, packet_len)?;
        (arrival <= self.last_arrival)
            .then(|| share_capacity(path))
            .flatten()
    }
}

/// What a member's floor is sized by: its capacity, or, while its controller is still
/// searching for it and its latest delivery rate only showed what it was offered
/// (application-limited), the rate it searches at (BBR Startup's 2/ln 2 over the
/// estimate) where that is higher. Sized by what it was offered, such a path's floor
/// stayed below it, its packets went out application-limited, its estimate could not
/// grow, and a train modem spent a whole flow in Startup at a third of its rate
/// (`benches/schedulers/REPORT.md`). A path that searches on its own traffic needs no
/// more: raising every searching path's floor cost eight LTE modems 4 %.
fn share_capacity(path: &PathView) -> Option<u64> {
    let capacity = capacity_bytes_per_sec(path)?;
    let starved = path.capacity_searching && path.delivery_rate_app_limited;
    Some(match path.pacing_rate_bps {
        Some(bps) if starved => capacity.max(bps / 8),
        _ => capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    const LEN: usize = 1400;

    /// 5G-like 5 ms / 50 Mbit/s and LTE-like 30 ms / 20 Mbit/s.
    fn two_paths() -> [PathView; 2] {
        [measured(0, 5, 50), measured(1, 30, 20)]
    }

    /// Sends `mbit` per second on path 0 for one second from `start`, asking for a
    /// floor before every packet (as earliest-arrival does); returns the packets the
    /// floor sent to path 1.
    fn offer(share: &mut CapacityShare, start: Instant, mbit: u64) -> usize {
        offer_over(&two_paths(), share, start, mbit)
    }

    /// [`offer`] over `paths`.
    fn offer_over(
        paths: &[PathView],
        share: &mut CapacityShare,
        start: Instant,
        mbit: u64,
    ) -> usize {
        let rule = Eligibility::of(paths);
        let gap = Duration::from_nanos(LEN as u64 * 8 * 1000 / mbit);
        let mut to_slow = 0;
        let mut now = start;
        while now < start + Duration::from_secs(1) {
            let path = share.below_floor(now, paths, rule, LEN, Duration::from_millis(200));
            to_slow += usize::from(path == Some(PathId(1)));
            share.on_sent(now, path.unwrap_or(PathId(0)), LEN);
            now += gap;
        }
        to_slow
    }

    #[test]
    fn light_traffic_is_left_to_the_fastest_path() {
        let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
        assert_eq!(offer(&mut share, Instant::now(), 30), 0, "30 of 50 Mbit/s");
    }

    #[test]
    fn near_the_fastest_paths_capacity_each_path_gets_its_floor() {
        let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
        let start = Instant::now();
        offer(&mut share, start, 45);
        // Sharing from the first second on: three quarters of 20/70 of 45 Mbit/s.
        let packets = offer(&mut share, start + Duration::from_secs(1), 45) as f64;
        let floor = 0.75 * 20.0 / 70.0 * 45e6 / 8.0 / LEN as f64;
        assert!(
            (0.9 * floor..=1.02 * floor).contains(&packets),
            "{packets} packets against a floor of {floor:.0}"
        );
    }

    #[test]
    fn a_path_that_missed_its_share_is_not_flooded() {
        let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
        let start = Instant::now();
        offer(&mut share, start, 45);
        // The slow path's window was full for 40 ms, then opens: it may take its
        // burst's worth (10 ms at about 9 Mbit/s, 11 kB), not the 45 kB it missed.
        let paths = two_paths();
        let rule = Eligibility::of(&paths);
        let mut full_paths = paths;
        full_paths[1] = full(full_paths[1]);
        let mut now = start + Duration::from_secs(1);
        share.below_floor(now, &full_paths, rule, LEN, Duration::from_millis(200));
        now += Duration::from_millis(40);
        // Every path earned credit meanwhile; spend it all, as a burst of packets
        // arriving at once would.
        let mut to_slow = 0;
        while let Some(path) = share.below_floor(now, &paths, rule, LEN, Duration::from_millis(200))
        {
            share.on_sent(now, path, LEN);
            to_slow += usize::from(path == PathId(1));
        }
        assert!((1..=9).contains(&to_slow), "{to_slow} packets");
    }

    #[test]
    fn path_share_counts_floor_packets_and_shows_floors_only_while_sharing() {
        let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
        let start = Instant::now();
        let second = Duration::from_secs(1);
        offer(&mut share, start, 30);
        assert_eq!(
            share.path_share(start + second, PathId(1)),
            PathShare::default(),
            "30 of 50 Mbit/s"
        );
        let to_slow =
            offer(&mut share, start + second, 45) + offer(&mut share, start + 2 * second, 45);
        let now = start + 3 * second;
        let slow = share.path_share(now, PathId(1));
        assert_eq!(slow.floor_packets, to_slow as u64);
        let floor = 0.75 * 20.0 / 70.0 * 45e6 / 8.0;
        let rate = slow
            .floor_rate_bytes_per_sec
            .expect("sharing at 45 of 50 Mbit/s") as f64;
        assert!(
            (0.9 * floor..=1.1 * floor).contains(&rate),
            "floor {rate:.0} B/s against {floor:.0}"
        );
        // No bulk packet for a window: the floors are no longer in force, the count stays.
        assert_eq!(
            share.path_share(now + SHARE_WINDOW, PathId(1)),
            PathShare {
                floor_packets: to_slow as u64,
                floor_rate_bytes_per_sec: None
            }
        );
    }

    /// A path still searching for its capacity, which has shown the 4 Mbit/s it was
    /// offered, is offered more: its floor follows the 11.5 Mbit/s it searches at.
    /// Searching on its own traffic, or once it has found its capacity, its floor
    /// follows its estimate.
    #[test]
    fn a_path_still_searching_is_offered_more_than_it_has_shown() {
        let mut searching = two_paths();
        searching[1].delivery_rate_bps = Some(4_000_000);
        searching[1].delivery_rate_app_limited = true;
        searching[1].bottleneck_rate_bps = Some(4_000_000);
        searching[1].pacing_rate_bps = Some(11_540_000);
        searching[1].capacity_searching = true;
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
        offer_over(&searching, &mut share, start, 45);
        let packets = offer_over(&searching, &mut share, start + second, 45) as f64;
        let shown = 4e6 / 8.0 / LEN as f64;
        let floor = 0.75 * 11.54 / 61.54 * 45e6 / 8.0 / LEN as f64;
        assert!(
            packets > shown && (0.9 * floor..=1.02 * floor).contains(&packets),
            "{packets} packets against a floor of {floor:.0}, {shown:.0} shown"
        );

        let mut growing = searching;
        growing[1].delivery_rate_app_limited = false;
        let mut found = searching;
        found[1].capacity_searching = false;
        for (paths, case) in [(growing, "searching on its own traffic"), (found, "found")] {
            let mut share = CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT);
            offer_over(&paths, &mut share, start, 45);
            let packets = offer_over(&paths, &mut share, start + second, 45) as f64;
            let floor = 0.75 * 4.0 / 54.0 * 45e6 / 8.0 / LEN as f64;
            assert!(
                (0.9 * floor..=1.02 * floor).contains(&packets),
                "{case}: {packets} packets against a floor of {floor:.0}"
            );
        }
    }

    #[test]
    fn zero_never_shares() {
        let mut share = CapacityShare::new(0);
        assert_eq!(offer(&mut share, Instant::now(), 49), 0);
    }
}
