//! Delivery at one delay: the inner flow sees the aggregate as one pipe whose delay is
//! that of the slowest path carrying its data, not a delay that jumps between paths.
//!
//! The reorder buffer restores order, so once the inner flow is spread over several
//! paths, every packet behind a slow path's packet waits for it and the inner RTT is
//! the slow path's. Packets that happen not to wait (the inner flow's first round
//! trips, a BBR flow's ProbeRTT, the trough of a CUBIC sawtooth, all of which fit on
//! the fastest path) come through at the fast path's delay. That is what breaks a
//! single inner TCP flow on unequal paths:
//!
//! - an inner BBR sets its window to 2 × bandwidth × min RTT (BBR draft §4.2.3); its
//!   min RTT is the fast path's, its real RTT the slow path's, so it is window-limited
//!   whenever the slow path has more than twice the fast path's RTT;
//! - an inner CUBIC leaves slow start when its RTT rises by max(4 ms, min RTT / 8)
//!   (HyStart, RFC 9406 §4.2): the rise is the paths' delay difference, not a queue.
//!
//! Kernel MPTCP does not have the problem: each subflow measures its own path. A
//! tunnel has one flow to serve, so it gives that flow a steadier delay instead:
//! every data packet is handed on no earlier than a target delay after it was sent,
//! between the fastest and the slowest path's base delay (of the paths in scope, see
//! below). Packets behind a slow path's packet are late enough already and are not
//! delayed further; only those that would overtake the target wait. This is the
//! delay-equalization idea of multipath real-time transport (Chebrolu & Rao, IEEE
//! TMC 2006, §4, deliver in order at a common delay), applied to the release rather
//! than the schedule.
//!
//! The target is [`Equalization::percent`] of the way from the fastest to the
//! slowest base delay. Halfway is enough for BBR: with a min RTT of (fast + slow) / 2
//! its window of 2 × bandwidth × min RTT spans fast + slow, more than the slow
//! path's RTT. All the way also fixes HyStart, but the larger window it gives every
//! flow has to wait in the send queue whenever a path dies.
//!
//! The receiver cannot read the sender's clock, but it need not: each data packet
//! carries the sender's transmit timestamp, so `arrival − transmit` is the one-way
//! delay plus one clock offset that is the same on every path and cancels (as in
//! [`crate::AdaptiveHold`]). A path's base delay is the smallest such sample of the
//! last five to ten seconds (a windowed minimum, like BBR's RTprop: jitter and queues
//! only raise samples).
//!
//! Which paths set the delay is the [`EqualizeScope`]: those that carried data within
//! [`DATA_ACTIVE_WINDOW`] (an idle tunnel is as fast as its fastest path, and a flow
//! gets the slower delay once it spreads), or every path heard from within
//! [`HEARD_WINDOW`] (a flow has the delay it will have under load from its first
//! packet, at the cost of that delay for all traffic). Either way a path whose base
//! delay is more than the cap (the reorder buffer's hold bound) above the fastest
//! one's is left out, as the schedulers leave it out of the data they stripe: a GEO
//! satellite behind 5G does not drag everything to its delay.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::path::PathId;

/// A path that carried data within this long sets the delivery delay. Longer than
/// the pauses of a bulk inner flow that still needs it (BBR's ProbeRTT, 200 ms plus
/// a round trip, BBR draft §4.3.5; the trough after a CUBIC reduction, a few round
/// trips), short enough that interactive traffic after a bulk transfer soon gets the
/// fastest path's delay back.
pub const DATA_ACTIVE_WINDOW: Duration = Duration::from_secs(2);

/// Base delays are the minimum over between one and two of these: long enough to
/// span several round trips of the slowest path in use, short enough to follow a
/// route change (BBR's RTprop filter is 10 s, BBR draft §4.1.2).
const FLOOR_BUCKET: Duration = Duration::from_secs(5);

/// One path's windowed minimum delay, in microseconds relative to the session's
/// first sample.
#[derive(Clone, Copy, Debug)]
struct PathFloor {
    /// Minimum of the current and of the previous bucket.
    min_us: [i64; 2],
    bucket_start: Instant,
    last_heard: Instant,
    last_data: Option<Instant>,
}

impl PathFloor {
    fn new(now: Instant, sample_us: i64, carries_data: bool) -> Self {
        PathFloor {
            min_us: [sample_us, sample_us],
            bucket_start: now,
            last_heard: now,
            last_data: carries_data.then_some(now),
        }
    }

    fn on_sample(&mut self, now: Instant, sample_us: i64, carries_data: bool) {
        let elapsed = now.saturating_duration_since(self.bucket_start);
        if elapsed >= 2 * FLOOR_BUCKET {
            self.min_us = [sample_us, sample_us];
            self.bucket_start = now;
        } else if elapsed >= FLOOR_BUCKET {
            self.min_us = [sample_us, self.min_us[0]];
            self.bucket_start += FLOOR_BUCKET;
        } else {
            self.min_us[0] = self.min_us[0].min(sample_us);
        }
        self.last_heard = now;
        if carries_data {
            self.last_data = Some(now);
        }
    }

    fn counts(&self, now: Instant, scope: EqualizeScope) -> bool {
        match scope {
            EqualizeScope::InUse => self
                .last_data
                .is_some_and(|at| now.saturating_duration_since(at) <= DATA_ACTIVE_WINDOW),
            EqualizeScope::AllPaths => {
                now.saturating_duration_since(self.last_heard) <= HEARD_WINDOW
            }
        }
    }

    fn floor_us(&self) -> i64 {
        self.min_us[0].min(self.min_us[1])
    }
}

/// Which paths set the delay packets are brought up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqualizeScope {
    /// The paths that carried data within [`DATA_ACTIVE_WINDOW`]: an idle or lightly
    /// loaded tunnel is as fast as its fastest path, a flow that spreads over slower
    /// paths sees their delay from then on.
    InUse,
    /// Every path heard from (data or keepalives) within [`HEARD_WINDOW`]: a flow sees
    /// the delay it will have under load from its first packet, so its min RTT and
    /// HyStart are right from the start, at the cost of that delay for all traffic.
    AllPaths,
}

impl EqualizeScope {
    /// Configuration names: `"off"` (no equalization), then each scope's.
    pub const CONFIG_NAMES: [&'static str; 3] = ["off", "in-use", "all-paths"];

    /// The scope a configuration name selects; `None` for `"off"` and unknown names.
    pub fn from_config_name(name: &str) -> Option<Self> {
        match name {
            "in-use" => Some(EqualizeScope::InUse),
            "all-paths" => Some(EqualizeScope::AllPaths),
            _ => None,
        }
    }
}

/// What a [`DelayEqualizer`] does: which paths set the delay, and how far toward the
/// slowest of them packets are brought up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Equalization {
    /// Which paths set the delay.
    pub scope: EqualizeScope,
    /// 0: the fastest path's base delay (nothing is added), 100: the slowest's.
    pub percent: u8,
}

/// A path heard from within this long counts for [`EqualizeScope::AllPaths`]: mptund's
/// default 1 s keepalives with two to spare (as the adaptive hold's active window).
pub const HEARD_WINDOW: Duration = Duration::from_secs(3);

/// Decides how long each arriving data packet must wait so that the inner flow sees
/// one delay; see the module docs.
#[derive(Clone, Debug)]
pub struct DelayEqualizer {
    scope: EqualizeScope,
    /// How far from the fastest toward the slowest base delay, 0-100.
    percent: u8,
    /// Never add more than this, and leave out paths whose base delay is more than
    /// this above the fastest one's.
    cap: Duration,
    reference_us: Option<u32>,
    /// The paths heard from, in the order first heard: a session has a handful, so a
    /// short list costs less memory than a table of every possible id.
    paths: Vec<(PathId, PathFloor)>,
}

impl DelayEqualizer {
    /// An equalizer that adds at most `cap` to any packet.
    pub fn new(equalization: Equalization, cap: Duration) -> Self {
        DelayEqualizer {
            scope: equalization.scope,
            percent: equalization.percent.min(100),
            cap,
            reference_us: None,
            paths: Vec::new(),
        }
    }

    /// Replaces the cap (configuration reload).
    pub fn set_cap(&mut self, cap: Duration) {
        self.cap = cap;
    }

    /// Forgets a path (removed from the session).
    pub fn forget(&mut self, path: PathId) {
        self.paths.retain(|(id, _)| *id != path);
    }

    /// A datagram arrived on `path` at `now` with `raw_owd_us` (the receiver's clock
    /// minus the sender's transmit timestamp, microseconds, wrapping). For a data
    /// packet (`carries_data`), returns how long after `now` it may be handed on at
    /// the earliest; zero for the rest.
    pub fn on_arrival(
        &mut self,
        now: Instant,
        path: PathId,
        raw_owd_us: u32,
        carries_data: bool,
    ) -> Duration {
        // Ids a session can have: this bounds the list.
        if path.0 > PathId::MAX_IN_SET {
            return Duration::ZERO;
        }
        let sample_us = super::relative_delay_us(&mut self.reference_us, raw_owd_us);
        match self.paths.iter_mut().find(|(id, _)| *id == path) {
            Some((_, floor)) => floor.on_sample(now, sample_us, carries_data),
            None => {
                let floor = PathFloor::new(now, sample_us, carries_data);
                self.paths.push((path, floor));
            }
        }
        if !carries_data {
            return Duration::ZERO;
        }
        let Some((lowest_us, highest_us)) = self.floors(now) else {
            return Duration::ZERO;
        };
        let target_us = lowest_us + self.added_us(lowest_us, highest_us);
        let wait_us = u64::try_from(target_us.saturating_sub(sample_us)).unwrap_or(0);
        Duration::from_micros(wait_us).min(self.cap)
    }

    /// The lowest base delay of the paths in scope, and the highest within `cap` of
    /// it. Relative to the reference.
    fn floors(&self, now: Instant) -> Option<(i64, i64)> {
        let in_scope = || {
            self.paths
                .iter()
                .filter(|(_, floor)| floor.counts(now, self.scope))
                .map(|(_, floor)| floor.floor_us())
        };
        let lowest = in_scope().min()?;
        let cap_us = i64::try_from(self.cap.as_micros()).unwrap_or(i64::MAX);
        let highest = in_scope().filter(|&floor| floor - lowest <= cap_us).max()?;
        Some((lowest, highest))
    }

    /// How far above the lowest base delay packets are brought up: `percent` of the
    /// spread.
    fn added_us(&self, lowest_us: i64, highest_us: i64) -> i64 {
        (highest_us - lowest_us) * i64::from(self.percent) / 100
    }

    /// How much later than its fastest path the inner flow is served now. For status
    /// and metrics.
    pub fn added_delay(&self, now: Instant) -> Duration {
        let added_us = self
            .floors(now)
            .map_or(0, |(lowest, highest)| self.added_us(lowest, highest));
        Duration::from_micros(u64::try_from(added_us).unwrap_or(0))
    }
}

/// Packets in release order, each with the earliest time it may leave. A packet never
/// overtakes the one before it: a due time earlier than its predecessor's is raised
/// to it.
#[derive(Debug)]
pub struct DelayLine<T> {
    queue: VecDeque<(Instant, T)>,
}

impl<T> Default for DelayLine<T> {
    fn default() -> Self {
        DelayLine {
            queue: VecDeque::new(),
        }
    }
}

impl<T> DelayLine<T> {
    /// Appends `item`, due at `due` (or when the packet before it is, if later).
    /// Returns the item back when nothing is waiting and it is due already, so the
    /// common case costs no queue operation.
    pub fn push(&mut self, now: Instant, due: Instant, item: T) -> Option<T> {
        let due = self.queue.back().map_or(due, |(last, _)| due.max(*last));
        if self.queue.is_empty() && due <= now {
            return Some(item);
        }
        self.queue.push_back((due, item));
        None
    }

    /// The next item that is due at `now`; call until `None`.
    pub fn poll_release(&mut self, now: Instant) -> Option<T> {
        match self.queue.front() {
            Some((due, _)) if *due <= now => self.queue.pop_front().map(|(_, item)| item),
            _ => None,
        }
    }

    /// When the first waiting item is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.queue.front().map(|(due, _)| *due)
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Takes every waiting item out, due or not (the session ends).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queue.drain(..).map(|(_, item)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_millis(150);

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    /// Raw one-way delays with an arbitrary clock offset that must cancel.
    fn raw(owd_ms: u32) -> u32 {
        3_000_000_000u32.wrapping_add(owd_ms * 1000)
    }

    fn equalizing(scope: EqualizeScope, percent: u8) -> DelayEqualizer {
        DelayEqualizer::new(Equalization { scope, percent }, CAP)
    }

    fn in_use() -> DelayEqualizer {
        equalizing(EqualizeScope::InUse, 100)
    }

    fn data(equalizer: &mut DelayEqualizer, at: Instant, path: u8, owd_ms: u32) -> Duration {
        equalizer.on_arrival(at, PathId(path), raw(owd_ms), true)
    }

    #[test]
    fn one_path_adds_nothing() {
        let start = Instant::now();
        let mut equalizer = in_use();
        for step in 0..100u64 {
            // Jitter above the path's own floor is not evened out.
            let jitter = (step % 5) as u32;
            let wait = data(&mut equalizer, start + ms(step), 0, 20 + jitter);
            assert_eq!(wait, Duration::ZERO, "step {step}");
        }
    }

    #[test]
    fn fast_path_packets_wait_for_the_slow_paths_base_delay() {
        let start = Instant::now();
        let mut equalizer = in_use();
        assert_eq!(data(&mut equalizer, start, 0, 10), Duration::ZERO);
        assert_eq!(data(&mut equalizer, start + ms(1), 1, 40), Duration::ZERO);
        assert_eq!(data(&mut equalizer, start + ms(2), 0, 10), ms(30));
        // A queue on the fast path shortens the wait by as much.
        assert_eq!(data(&mut equalizer, start + ms(3), 0, 25), ms(15));
        // A slow-path packet behind its own queue waits for nothing.
        assert_eq!(data(&mut equalizer, start + ms(4), 1, 55), Duration::ZERO);
        assert_eq!(equalizer.added_delay(start + ms(4)), ms(30));
    }

    #[test]
    fn halfway_brings_packets_up_to_the_midpoint_of_the_base_delays() {
        let start = Instant::now();
        let mut equalizer = equalizing(EqualizeScope::InUse, 50);
        data(&mut equalizer, start, 0, 10);
        data(&mut equalizer, start, 1, 40);
        assert_eq!(data(&mut equalizer, start + ms(1), 0, 10), ms(15));
        // Fast-path packets queued past the midpoint, and the slow path's, wait for
        // nothing.
        assert_eq!(data(&mut equalizer, start + ms(2), 0, 27), Duration::ZERO);
        assert_eq!(data(&mut equalizer, start + ms(3), 1, 40), Duration::ZERO);
        assert_eq!(equalizer.added_delay(start + ms(3)), ms(15));
        // Zero percent adds nothing at all.
        let mut none = equalizing(EqualizeScope::InUse, 0);
        data(&mut none, start, 1, 40);
        assert_eq!(data(&mut none, start, 0, 10), Duration::ZERO);
        assert_eq!(none.added_delay(start), Duration::ZERO);
    }

    #[test]
    fn in_use_counts_paths_that_carried_data_recently() {
        let start = Instant::now();
        let mut equalizer = in_use();
        // Keepalives alone on the slow path: not in use.
        equalizer.on_arrival(start, PathId(1), raw(40), false);
        assert_eq!(data(&mut equalizer, start, 0, 10), Duration::ZERO);
        data(&mut equalizer, start, 1, 40);
        assert_eq!(data(&mut equalizer, start, 0, 10), ms(30));
        // Still heard from, but no data for longer than the window.
        let later = start + DATA_ACTIVE_WINDOW + ms(1);
        equalizer.on_arrival(later, PathId(1), raw(40), false);
        assert_eq!(data(&mut equalizer, later, 0, 10), Duration::ZERO);
        assert_eq!(equalizer.added_delay(later), Duration::ZERO);
    }

    #[test]
    fn all_paths_counts_every_path_heard_from() {
        let start = Instant::now();
        let mut equalizer = equalizing(EqualizeScope::AllPaths, 100);
        equalizer.on_arrival(start, PathId(1), raw(40), false);
        assert_eq!(data(&mut equalizer, start, 0, 10), ms(30));
        // A path not heard from for longer than the window stops counting.
        let later = start + HEARD_WINDOW + ms(1);
        assert_eq!(data(&mut equalizer, later, 0, 10), Duration::ZERO);
    }

    #[test]
    fn a_path_beyond_the_cap_is_left_out() {
        let start = Instant::now();
        let mut equalizer = in_use();
        // A GEO path 272 ms behind 5G, and LTE 30 ms behind it.
        data(&mut equalizer, start, 2, 280);
        data(&mut equalizer, start, 1, 38);
        assert_eq!(data(&mut equalizer, start, 0, 8), ms(30));
        assert_eq!(equalizer.added_delay(start), ms(30));
        // The GEO path's own packets are late already.
        assert_eq!(data(&mut equalizer, start, 2, 280), Duration::ZERO);
    }

    #[test]
    fn the_base_delay_follows_a_route_change_within_two_buckets() {
        let start = Instant::now();
        let mut equalizer = in_use();
        let mut now = start;
        // Path 1's delay rises from 40 to 70 ms for good.
        data(&mut equalizer, now, 1, 40);
        while now < start + 2 * FLOOR_BUCKET + ms(100) {
            now += ms(100);
            data(&mut equalizer, now, 1, 70);
            data(&mut equalizer, now, 0, 10);
        }
        assert_eq!(data(&mut equalizer, now, 0, 10), ms(60));
    }

    #[test]
    fn path_ids_beyond_the_set_are_ignored() {
        let mut equalizer = in_use();
        assert_eq!(
            data(&mut equalizer, Instant::now(), 200, 10),
            Duration::ZERO
        );
    }

    #[test]
    fn config_names_round_trip() {
        let scopes: Vec<_> = EqualizeScope::CONFIG_NAMES
            .iter()
            .map(|name| EqualizeScope::from_config_name(name))
            .collect();
        assert_eq!(
            scopes,
            [
                None,
                Some(EqualizeScope::InUse),
                Some(EqualizeScope::AllPaths)
            ]
        );
        assert_eq!(EqualizeScope::from_config_name("all"), None);
    }

    #[test]
    fn delay_line_keeps_order_and_releases_when_due() {
        let start = Instant::now();
        let mut line = DelayLine::default();
        // Due already and nothing waiting: handed straight back.
        assert_eq!(line.push(start, start, 1), Some(1));
        assert_eq!(line.push(start, start + ms(30), 2), None);
        // Due earlier than the packet before it: waits for it, never overtakes.
        assert_eq!(line.push(start, start + ms(5), 3), None);
        assert_eq!(line.poll_timeout(), Some(start + ms(30)));
        assert_eq!(line.poll_release(start + ms(29)), None);
        assert_eq!(line.poll_release(start + ms(30)), Some(2));
        assert_eq!(line.poll_release(start + ms(30)), Some(3));
        assert_eq!(line.poll_release(start + ms(30)), None);
        assert!(line.is_empty());
        line.push(start, start + ms(50), 4);
        assert_eq!(line.drain().collect::<Vec<_>>(), vec![4]);
    }
}
