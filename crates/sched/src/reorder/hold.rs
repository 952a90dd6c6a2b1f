//! How long the reorder buffer waits for a gap: an adaptive target from the
//! paths' one-way delays, and the distribution of the waits that happened.
//!
//! A packet overtaken by one sent after it on a faster path arrives late by the
//! difference of the two paths' one-way delays, plus whatever the paths'
//! queues add at that moment. So the receiver holds a gap for
//!
//! ```text
//! hold = max_p(owd_p + K * owd_dev_p) - min_p(owd_p)      clamped to [min, max]
//! ```
//!
//! over the paths heard from recently (data or keepalives), where `owd_p` is a path's
//! smoothed one-way delay and `owd_dev_p` its mean deviation, smoothed as RFC
//! 6298 §2 smooths RTT samples (gains 1/8 and 1/4, `K = 4`). With one path the
//! spread is zero and the hold is its own jitter margin: a single path does
//! not reorder, it only loses. Two repair times are added to the spread, and the
//! waits gaps really needed set a floor (both below).
//!
//! The receiver cannot read the sender's clock, but it does not need to: every
//! data packet carries the sender's transmit timestamp, and `arrival -
//! transmit` is the one-way delay plus one unknown clock offset that is the
//! same for every path of the session. The offset cancels in the spread.
//!
//! The spread is what the paths' delays allow; a reorder-aware sender narrows
//! what actually happens to its prediction errors, which the delays do not show.
//! So the target is also at least the longest wait a gap really needed in the
//! last five to ten seconds, plus a quarter: a packet that came after its gap
//! had been given up raises it at once, as a DSACK widens RACK's reordering
//! window (RFC 8985 §6.2.4), and the window lets it shrink when reordering calms.
//!
//! A gap can also be a loss the sender is about to repair: it sees the loss about
//! one round trip of the lossy path after sending, and sends the packet again at
//! once on the fastest path. That round trip is the fastest path's, plus how much
//! later the lossy path delivers: so the repair lands within the spread plus the
//! fastest path's probe timeout (RFC 9002 §6.2.1: smoothed RTT, four RTT
//! variations and the maximum acknowledgement delay), which the session sets
//! ([`AdaptiveHold::set_repair_time`]). Skipping such a gap would hand the inner
//! flow the very loss the tunnel repairs, and a loss-based inner flow halves its
//! window for it. The repair crosses a path that loses too, and a lost repair is
//! found and sent again one repair time later, so the target covers two. On three
//! radio paths losing 1-3 %, gaps were given up after 78-172 ms whose packets came
//! 7-14 ms later, and in half the runs the inner CUBIC took such a loss while still
//! far below the paths' capacity and stayed there for seconds. Holding longer costs
//! nothing while packets only reorder (their gaps fill within the spread); a gap the
//! sender gives up on is skipped at once through its GaveUp frame, and one still open
//! after the maximum is taken as lost.

use std::time::{Duration, Instant};

use crate::path::{PathId, PathSet};

/// Bounds of [`AdaptiveHold`]'s target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldBounds {
    /// Never hold less: covers the jitter of a path with no measurements yet.
    pub min: Duration,
    /// Never hold more: a gap that stays open longer is a loss, and holding
    /// only adds delay to everything behind it.
    pub max: Duration,
}

/// RFC 6298 §2.3 gains: the smoothed value follows a new sample by 1/8, the
/// mean deviation by 1/4.
const SMOOTHING_SHIFT: u32 = 3;
const DEVIATION_SHIFT: u32 = 2;
/// RFC 6298's K: margin of four mean deviations above the smoothed delay.
const DEVIATION_MARGIN: i64 = 4;
/// Repair times a gap is held for beyond the spread: the repair, and the repair of a
/// lost repair (see the module docs).
const REPAIRS_COVERED: u32 = 2;
/// Observed waits are remembered for between one and two of these.
const OBSERVED_BUCKET: Duration = Duration::from_secs(5);

/// A path heard from within this long counts towards the spread. The caller
/// samples keepalives too, so an idle path that may get the next packet still
/// counts: three seconds spans mptund's default 1 s keepalive interval with
/// two to spare, and drops a path once it has gone quiet (down, or a backup
/// with its 25 s keepalives).
const ACTIVE_WINDOW: Duration = Duration::from_secs(3);

/// One path's one-way-delay statistics, in microseconds relative to the
/// session's first sample (so offsets and u32 wrap cancel).
#[derive(Clone, Copy, Debug)]
struct PathDelay {
    smoothed_us: i64,
    deviation_us: i64,
    last_sample: Instant,
}

/// The reorder buffer's hold target, following the one-way-delay spread of
/// the paths that carry data; see the module docs.
#[derive(Clone, Debug)]
pub struct AdaptiveHold {
    bounds: HoldBounds,
    /// First raw sample: later samples are measured from it.
    reference_us: Option<u32>,
    /// Indexed by path id; ids above [`PathId::MAX_IN_SET`] are not tracked.
    paths: [Option<PathDelay>; PathId::MAX_IN_SET as usize + 1],
    /// The ids with an entry in `paths`, so a target visits only those.
    tracked: PathSet,
    /// Longest needed wait in the current and the previous [`OBSERVED_BUCKET`].
    observed: [Duration; 2],
    /// When the current bucket started.
    bucket_start: Option<Instant>,
    /// How long the sender may take to see a loss and send the packet again.
    repair: Duration,
}

impl AdaptiveHold {
    /// A target that starts at `bounds.max` until paths are measured (so the
    /// first reordering of a session is hidden, not guessed at).
    pub fn new(bounds: HoldBounds) -> Self {
        AdaptiveHold {
            bounds,
            reference_us: None,
            paths: [None; PathId::MAX_IN_SET as usize + 1],
            tracked: PathSet::EMPTY,
            observed: [Duration::ZERO; 2],
            bucket_start: None,
            repair: Duration::ZERO,
        }
    }

    /// Sets how long a loss may take to be repaired (see the module docs).
    pub fn set_repair_time(&mut self, repair: Duration) {
        self.repair = repair;
    }

    /// Replaces the bounds (configuration reload).
    pub fn set_bounds(&mut self, bounds: HoldBounds) {
        self.bounds = bounds;
    }

    /// A data packet arrived on `path` at `now`; `raw_owd_us` is the receiver's
    /// clock minus the sender's transmit timestamp, in microseconds, wrapping.
    pub fn on_arrival(&mut self, now: Instant, path: PathId, raw_owd_us: u32) {
        let Some(slot) = self.paths.get_mut(usize::from(path.0)) else {
            return;
        };
        self.tracked.insert(path);
        let sample = super::relative_delay_us(&mut self.reference_us, raw_owd_us);
        *slot = Some(match *slot {
            None => PathDelay {
                smoothed_us: sample,
                deviation_us: 0,
                last_sample: now,
            },
            Some(mut delay) => {
                let error = sample - delay.smoothed_us;
                delay.smoothed_us += error >> SMOOTHING_SHIFT;
                delay.deviation_us += (error.abs() - delay.deviation_us) >> DEVIATION_SHIFT;
                delay.last_sample = now;
                delay
            }
        });
    }

    /// A gap needed `wait` to fill (see `ReorderBuffer::take_needed_wait`).
    pub fn on_needed_wait(&mut self, now: Instant, wait: Duration) {
        self.rotate(now);
        self.observed[0] = self.observed[0].max(wait);
    }

    fn rotate(&mut self, now: Instant) {
        let start = *self.bucket_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= 2 * OBSERVED_BUCKET {
            self.observed = [Duration::ZERO; 2];
            self.bucket_start = Some(now);
        } else if elapsed >= OBSERVED_BUCKET {
            self.observed = [Duration::ZERO, self.observed[0]];
            self.bucket_start = Some(start + OBSERVED_BUCKET);
        }
    }

    /// The longest needed wait seen in the last five to ten seconds.
    fn observed_wait(&self, now: Instant) -> Duration {
        let Some(start) = self.bucket_start else {
            return Duration::ZERO;
        };
        match now.saturating_duration_since(start) {
            elapsed if elapsed >= 2 * OBSERVED_BUCKET => Duration::ZERO,
            elapsed if elapsed >= OBSERVED_BUCKET => self.observed[0],
            _ => self.observed[0].max(self.observed[1]),
        }
    }

    /// Forgets a path (removed from the session).
    pub fn forget(&mut self, path: PathId) {
        if let Some(slot) = self.paths.get_mut(usize::from(path.0)) {
            *slot = None;
        }
        self.tracked.remove(path);
    }

    /// The paths heard from within the last three seconds.
    pub fn active_paths(&self, now: Instant) -> PathSet {
        self.active(now).map(|(id, _)| id).collect()
    }

    /// The hold the reorder buffer should use now; see the module docs.
    pub fn target(&self, now: Instant) -> Duration {
        let mut earliest: Option<i64> = None;
        let mut latest: Option<i64> = None;
        for (_, delay) in self.active(now) {
            let late = delay.smoothed_us + DEVIATION_MARGIN * delay.deviation_us;
            earliest = Some(earliest.map_or(delay.smoothed_us, |e| e.min(delay.smoothed_us)));
            latest = Some(latest.map_or(late, |l| l.max(late)));
        }
        let (Some(earliest), Some(latest)) = (earliest, latest) else {
            return self.bounds.max;
        };
        let spread = Duration::from_micros(u64::try_from(latest - earliest).unwrap_or(0));
        let observed = self.observed_wait(now);
        // Saturating: the repair time follows round trips the network decides.
        let repairs = self.repair.saturating_mul(REPAIRS_COVERED);
        let target = spread
            .saturating_add(repairs)
            .max(observed.saturating_add(observed / 4));
        target.clamp(self.bounds.min, self.bounds.max.max(self.bounds.min))
    }

    fn active(&self, now: Instant) -> impl Iterator<Item = (PathId, PathDelay)> + '_ {
        self.tracked.iter().filter_map(move |id| {
            let delay = self.paths[usize::from(id.0)]?;
            let fresh = now.saturating_duration_since(delay.last_sample) <= ACTIVE_WINDOW;
            fresh.then_some((id, delay))
        })
    }
}

/// Upper bounds of the hold-time histogram's buckets, roughly doubling from
/// half a millisecond (an in-order packet's few microseconds) to two seconds
/// (beyond any sensible hold); one more bucket counts everything above.
pub const HOLD_BUCKET_BOUNDS: [Duration; 12] = [
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_millis(1000),
    Duration::from_millis(2000),
];

/// How long released packets spent in the reorder buffer, as bucket counts
/// over [`HOLD_BUCKET_BOUNDS`] (not cumulative; the last bucket is "above the
/// largest bound"). Fixed size and `Copy`: recording never allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldHistogram {
    counts: [u64; HOLD_BUCKET_BOUNDS.len() + 1],
}

impl HoldHistogram {
    /// Counts one packet that was held for `hold`.
    pub fn record(&mut self, hold: Duration) {
        let bucket = HOLD_BUCKET_BOUNDS.partition_point(|&bound| bound < hold);
        self.counts[bucket] += 1;
    }

    /// `(upper bound, packets held at most that long but longer than the
    /// previous bound)` for every bucket; the last bound is `None` (+Inf).
    pub fn buckets(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .map(|(index, &count)| (HOLD_BUCKET_BOUNDS.get(index).copied(), count))
    }

    /// Packets recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The smallest bucket bound at or below which at least `quantile`
    /// (0.0..=1.0) of the packets were held; `None` when empty or when the
    /// quantile falls in the open top bucket.
    pub fn quantile_bound(&self, quantile: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let needed = (quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64;
        let mut seen = 0;
        for (bound, count) in self.buckets() {
            seen += count;
            if seen >= needed.max(1) {
                return bound;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: HoldBounds = HoldBounds {
        min: Duration::from_millis(5),
        max: Duration::from_millis(300),
    };

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    /// Feeds `count` samples per path, 1 ms apart, each path's raw delay being
    /// `offset + delay_ms` (same sender clock offset for all paths).
    fn feed(
        hold: &mut AdaptiveHold,
        t0: Instant,
        offset_us: u32,
        delays_ms: &[(u8, u64)],
        count: u64,
    ) {
        for step in 0..count {
            for &(path, delay) in delays_ms {
                let raw = offset_us.wrapping_add(delay as u32 * 1000);
                hold.on_arrival(t0 + ms(step), PathId(path), raw);
            }
        }
    }

    #[test]
    fn unmeasured_holds_the_maximum() {
        let hold = AdaptiveHold::new(BOUNDS);
        assert_eq!(hold.target(Instant::now()), BOUNDS.max);
    }

    #[test]
    fn follows_the_delay_spread_whatever_the_clock_offset() {
        let t0 = Instant::now();
        // Offsets near the u32 wrap and far from it give the same target.
        for offset in [0, 123_456_789, u32::MAX - 20_000] {
            let mut hold = AdaptiveHold::new(BOUNDS);
            feed(&mut hold, t0, offset, &[(0, 10), (1, 60)], 50);
            assert_eq!(hold.target(t0 + ms(50)), ms(50), "offset {offset}");
        }
    }

    #[test]
    fn jitter_widens_the_hold() {
        let t0 = Instant::now();
        let mut hold = AdaptiveHold::new(BOUNDS);
        // Path 1 alternates 50 and 70 ms: mean deviation ~10 ms, margin ~40 ms.
        for step in 0..200u64 {
            hold.on_arrival(t0 + ms(step), PathId(0), 10_000);
            let jittery = if step % 2 == 0 { 50_000 } else { 70_000 };
            hold.on_arrival(t0 + ms(step), PathId(1), jittery);
        }
        let target = hold.target(t0 + ms(200));
        assert!(target > ms(80) && target < ms(100), "{target:?}");
    }

    #[test]
    fn one_path_holds_the_minimum_and_bounds_clamp() {
        let t0 = Instant::now();
        let mut hold = AdaptiveHold::new(BOUNDS);
        feed(&mut hold, t0, 7, &[(3, 40)], 20);
        assert_eq!(hold.target(t0 + ms(20)), BOUNDS.min);
        feed(&mut hold, t0, 7, &[(3, 40), (4, 900)], 20);
        assert_eq!(hold.target(t0 + ms(20)), BOUNDS.max);
    }

    #[test]
    fn idle_and_forgotten_paths_stop_counting() {
        let t0 = Instant::now();
        let mut hold = AdaptiveHold::new(BOUNDS);
        feed(&mut hold, t0, 0, &[(0, 10), (1, 110)], 10);
        assert_eq!(hold.target(t0 + ms(10)), ms(100));
        assert_eq!(hold.active_paths(t0 + ms(10)).len(), 2);
        // Only path 0 keeps delivering; four seconds later path 1 is quiet.
        feed(&mut hold, t0 + ms(4000), 0, &[(0, 10)], 1);
        assert_eq!(hold.target(t0 + ms(4000)), BOUNDS.min);
        feed(&mut hold, t0 + ms(4001), 0, &[(1, 110)], 1);
        assert_eq!(hold.target(t0 + ms(4001)), ms(100));
        hold.forget(PathId(1));
        assert_eq!(hold.target(t0 + ms(4001)), BOUNDS.min);
    }

    #[test]
    fn observed_waits_raise_the_target_and_expire() {
        let t0 = Instant::now();
        let mut hold = AdaptiveHold::new(BOUNDS);
        feed(&mut hold, t0, 0, &[(0, 10), (1, 20)], 10);
        assert_eq!(hold.target(t0 + ms(10)), ms(10));
        // A gap needed 40 ms although the delays differ by 10: 40 + 10 = 50 ms.
        hold.on_needed_wait(t0 + ms(10), ms(40));
        assert_eq!(hold.target(t0 + ms(10)), ms(50));
        hold.on_needed_wait(t0 + ms(20), ms(8));
        assert_eq!(hold.target(t0 + ms(20)), ms(50), "the longest wait counts");
        // Still remembered in the next bucket, gone after two.
        let later = t0 + ms(7000);
        feed(&mut hold, later, 0, &[(0, 10), (1, 20)], 1);
        assert_eq!(hold.target(later), ms(50));
        let much_later = t0 + ms(12_000);
        feed(&mut hold, much_later, 0, &[(0, 10), (1, 20)], 1);
        assert_eq!(hold.target(much_later), ms(10));
        // The bounds still apply.
        hold.on_needed_wait(much_later, ms(1000));
        assert_eq!(hold.target(much_later), BOUNDS.max);
    }

    #[test]
    fn two_repair_times_add_to_the_spread_within_the_bounds() {
        let t0 = Instant::now();
        let mut hold = AdaptiveHold::new(HoldBounds {
            min: ms(10),
            max: ms(200),
        });
        hold.on_arrival(t0, PathId(0), 1_000);
        hold.on_arrival(t0, PathId(1), 21_000);
        assert_eq!(hold.target(t0), ms(20));
        hold.set_repair_time(ms(45));
        assert_eq!(
            hold.target(t0),
            ms(110),
            "the spread, the repair and the repair of a lost repair"
        );
        hold.set_repair_time(ms(900));
        assert_eq!(hold.target(t0), ms(200));
    }

    #[test]
    fn histogram_buckets_and_quantiles() {
        let mut histogram = HoldHistogram::default();
        assert_eq!(histogram.quantile_bound(0.5), None);
        for _ in 0..90 {
            histogram.record(Duration::from_micros(3));
        }
        for _ in 0..9 {
            histogram.record(ms(30));
        }
        histogram.record(ms(5000));
        assert_eq!(histogram.count(), 100);
        let counts: Vec<u64> = histogram.buckets().map(|(_, count)| count).collect();
        assert_eq!(counts[0], 90);
        assert_eq!(counts[6], 9, "30 ms falls in the (20, 50] ms bucket");
        assert_eq!(counts[12], 1, "above two seconds");
        assert_eq!(
            histogram.quantile_bound(0.5),
            Some(Duration::from_micros(500))
        );
        assert_eq!(histogram.quantile_bound(0.99), Some(ms(50)));
        assert_eq!(histogram.quantile_bound(1.0), None);
        // A bound itself belongs to its bucket.
        let mut edge = HoldHistogram::default();
        edge.record(ms(1));
        assert_eq!(edge.buckets().nth(1), Some((Some(ms(1)), 1)));
    }
}
