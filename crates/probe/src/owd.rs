//! One-way delay trend of the forward direction of a path, from the raw one-way delay
//! the receiver reports for the largest packet of each acknowledgement (its clock at
//! receipt minus the sender's timestamp: the true delay plus a constant clock offset).
//!
//! The offset cancels in differences, so the estimator works with relative values
//! only, as LEDBAT does (RFC 6817 section 2: the "base delay" is the minimum one-way
//! delay seen over a window, the queuing delay is the current delay minus it):
//!
//! * raw values are 32-bit microsecond counters that wrap (every 71 minutes); each is
//!   unwrapped by its signed difference to the previous one,
//! * the base delay is the minimum over [`BASE_DELAY_WINDOW`] kept in one-second
//!   buckets (RFC 6817 keeps per-minute minima in its BASE_HISTORY; a tunnel path is
//!   judged in seconds, not minutes),
//! * the queuing delay is the sample minus the base, smoothed with RFC 6298's 1/8; a
//!   packet sent into an idle path (below) met no queue of ours, and its delay replaces
//!   the average: averaged in, a deep queue measured before the path went idle took
//!   a dozen samples to fade,
//! * the trend is the least-squares slope of the last [`TREND_SAMPLES`] unwrapped
//!   delays over their send times, in microseconds per second: a queue building in a
//!   modem shows as a positive slope several round trips before it overflows, the
//!   signal delay-based schedulers and congestion controllers act on.
//! * the jitter is the spread of the delays of packets that met no queue of the
//!   sender's own: each was sent into an idle path (nothing in flight, nothing sent
//!   for a smoothed RTT), so no packet of ours was ahead of it. A link that delays
//!   each packet by a random few milliseconds but keeps their order (a radio's
//!   retransmissions, Wi-Fi contention) holds every packet of a loaded path back to
//!   the slowest one ahead of it: its delay then sits near the top of that spread with
//!   nothing queued, and only packets sent into an idle path show the spread itself.
//!   The spread is estimated from the second largest minus the smallest: now and then
//!   one such delay lies far above the rest (55-95 ms on uploads over paths of ±3-8 ms
//!   jitter, cause not found), and it must not become the path's jitter. Of n delays
//!   drawn evenly from a spread, those two lie (n − 2)/(n + 1) of it apart on average,
//!   so their distance is scaled up by the inverse: a loaded path's delay sits near the
//!   top of the whole spread, and four samples alone show less than half of it.

use std::time::{Duration, Instant};

/// How far back the base (minimum) delay reaches. Ten seconds is the window BBR uses
/// for its minimum RTT (draft-cardwell-iccrg-bbr-congestion-control, `MinRTTFilterLen`):
/// long enough that a queue standing for several round trips on a 150 ms path does
/// not become the new base, short enough to follow a route or cell change, and the
/// clock drift between the two ends (100 ppm = 1 ms per 10 s) stays below a millisecond.
pub const BASE_DELAY_WINDOW: Duration = Duration::from_secs(10);
/// Width of one bucket of the base-delay history.
const BASE_DELAY_BUCKET: Duration = Duration::from_secs(1);
/// Buckets covering [`BASE_DELAY_WINDOW`].
const BASE_DELAY_BUCKETS: usize = 10;
/// Samples in the trend regression: 16 acknowledgements are one or two round trips at
/// the acknowledgement rate of a loaded path, enough to average out jitter while still
/// reacting within those round trips.
pub const TREND_SAMPLES: usize = 16;
/// The trend needs at least this many samples to say anything.
pub const TREND_MIN_SAMPLES: usize = 4;
/// RFC 6298 section 2.3's alpha = 1/8, reused for the queuing-delay average.
const SMOOTHING_DENOMINATOR: f64 = 8.0;
/// Delays of packets sent into an idle path kept for the jitter.
pub const QUIET_SAMPLES: usize = 8;
/// The jitter needs this many of them: the spread of fewer says little.
const QUIET_MIN_SAMPLES: usize = 4;
// The spread's scale divides by the samples less two.
const _: () = assert!(QUIET_MIN_SAMPLES > 2);
/// Samples sent this much before the newest one no longer count: within it the drift
/// between the two ends' clocks (100 ppm) stays below a millisecond.
const QUIET_WINDOW: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    index: u64,
    min: i64,
    used: bool,
}

/// One-way delay estimator of one path direction.
#[derive(Clone, Debug)]
pub struct OwdEstimator {
    origin: Option<Instant>,
    previous_raw: u32,
    /// The latest sample unwrapped, relative to the first sample (µs).
    unwrapped: i64,
    buckets: [Bucket; BASE_DELAY_BUCKETS],
    base: i64,
    smoothed_queuing_us: Option<f64>,
    /// Ring of (seconds since origin, unwrapped delay µs).
    trend: [(f64, f64); TREND_SAMPLES],
    trend_len: usize,
    trend_next: usize,
    /// Ring of (send time, unwrapped delay µs) of packets sent into an idle path.
    quiet: [Option<(Instant, i64)>; QUIET_SAMPLES],
    quiet_next: usize,
    /// The jitter as last measured.
    jitter: Option<Duration>,
}

impl Default for OwdEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl OwdEstimator {
    pub fn new() -> Self {
        Self {
            origin: None,
            previous_raw: 0,
            unwrapped: 0,
            buckets: [Bucket::default(); BASE_DELAY_BUCKETS],
            base: 0,
            smoothed_queuing_us: None,
            trend: [(0.0, 0.0); TREND_SAMPLES],
            trend_len: 0,
            trend_next: 0,
            quiet: [None; QUIET_SAMPLES],
            quiet_next: 0,
            jitter: None,
        }
    }

    /// Feeds the raw one-way delay of a packet sent at `sent` (the send time, not the
    /// acknowledgement's arrival, places the sample where the queue was). Feed one
    /// sample per newly acknowledged largest packet; repeats would weigh it twice.
    pub fn on_sample(&mut self, sent: Instant, raw_owd_us: u32) {
        self.add_sample(sent, raw_owd_us, false);
    }

    /// `idle`: the packet was sent into an idle path, so the queue it met holds none
    /// of our packets and replaces the smoothed one rather than being averaged in.
    fn add_sample(&mut self, sent: Instant, raw_owd_us: u32, idle: bool) {
        let first = self.origin.is_none();
        let origin = *self.origin.get_or_insert(sent);
        if first {
            self.unwrapped = 0;
        } else {
            let step = i64::from(raw_owd_us.wrapping_sub(self.previous_raw) as i32);
            self.unwrapped += step;
        }
        self.previous_raw = raw_owd_us;
        let since_origin = sent.saturating_duration_since(origin);

        let bucket_index = (since_origin.as_nanos() / BASE_DELAY_BUCKET.as_nanos()) as u64;
        let bucket = &mut self.buckets[(bucket_index % BASE_DELAY_BUCKETS as u64) as usize];
        if !bucket.used || bucket.index != bucket_index {
            *bucket = Bucket {
                index: bucket_index,
                min: self.unwrapped,
                used: true,
            };
        } else {
            bucket.min = bucket.min.min(self.unwrapped);
        }
        self.base = self
            .buckets
            .iter()
            .filter(|b| b.used && bucket_index.saturating_sub(b.index) < BASE_DELAY_BUCKETS as u64)
            .map(|b| b.min)
            .min()
            .unwrap_or(self.unwrapped);

        let queuing = (self.unwrapped - self.base) as f64;
        self.smoothed_queuing_us = Some(match self.smoothed_queuing_us {
            Some(old) if !idle => old + (queuing - old) / SMOOTHING_DENOMINATOR,
            _ => queuing,
        });

        self.trend[self.trend_next] = (since_origin.as_secs_f64(), self.unwrapped as f64);
        self.trend_next = (self.trend_next + 1) % TREND_SAMPLES;
        self.trend_len = (self.trend_len + 1).min(TREND_SAMPLES);
    }

    /// Feeds the delay of a packet that was sent into an idle path (see the module
    /// docs), as [`Self::on_sample`] does except that its queue replaces the smoothed
    /// one, and measures the jitter anew from it and the quiet samples before it.
    pub fn on_quiet_sample(&mut self, sent: Instant, raw_owd_us: u32) {
        self.add_sample(sent, raw_owd_us, true);
        self.quiet[self.quiet_next] = Some((sent, self.unwrapped));
        self.quiet_next = (self.quiet_next + 1) % QUIET_SAMPLES;
        let recent = || {
            self.quiet.iter().flatten().filter_map(|&(at, delay)| {
                (sent.saturating_duration_since(at) <= QUIET_WINDOW).then_some(delay)
            })
        };
        let mut delays = [0i64; QUIET_SAMPLES];
        let mut samples = 0;
        for (slot, delay) in delays.iter_mut().zip(recent()) {
            *slot = delay;
            samples += 1;
        }
        let Some(delays) = delays
            .get_mut(..samples)
            .filter(|_| samples >= QUIET_MIN_SAMPLES)
        else {
            return;
        };
        delays.sort_unstable();
        // The second largest: one delay far above the rest is an outlier.
        if let (Some(&smallest), Some(&second_largest)) = (delays.first(), delays.get(samples - 2))
        {
            let apart = u64::try_from(second_largest - smallest).unwrap_or(0);
            let samples = samples as u64;
            let spread = apart.saturating_mul(samples + 1) / (samples - 2);
            self.jitter = Some(Duration::from_micros(spread));
        }
    }

    /// The spread of the one-way delay of packets sent into an idle path (see the
    /// module docs): estimated from the second largest and the smallest of the last
    /// [`QUIET_SAMPLES`], of those sent within `QUIET_WINDOW` of the newest, as last
    /// measured. `None` until `QUIET_MIN_SAMPLES` came within that window. A loaded
    /// path sends nothing into an idle path and keeps the jitter it measured last.
    pub fn jitter(&self) -> Option<Duration> {
        self.jitter
    }

    /// How many delays of packets sent into an idle path are kept, up to [`QUIET_SAMPLES`].
    pub fn quiet_samples(&self) -> usize {
        self.quiet.iter().flatten().count()
    }

    /// Smoothed queuing delay: one-way delay above the windowed minimum.
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.smoothed_queuing_us
            .map(|us| Duration::from_nanos((us.max(0.0) * 1000.0).round() as u64))
    }

    /// The base delay as the receiver reported it: its clock minus the sender's
    /// timestamp, wrapping. Every path between the same two hosts carries the same clock
    /// offset in these readings, so the difference of two paths' base readings is the
    /// difference of their forward delays. `None` before the first sample.
    pub fn base_raw_us(&self) -> Option<u32> {
        self.origin?;
        let above_base = self.unwrapped.saturating_sub(self.base);
        Some(self.previous_raw.wrapping_sub(above_base as u32))
    }

    /// The latest sample minus the base delay, unsmoothed.
    pub fn latest_queuing_delay(&self) -> Option<Duration> {
        self.smoothed_queuing_us
            .map(|_| Duration::from_micros((self.unwrapped - self.base).max(0) as u64))
    }

    /// Least-squares slope of the one-way delay over the last [`TREND_SAMPLES`]
    /// samples, in µs per second; `None` with fewer than [`TREND_MIN_SAMPLES`] samples
    /// or when they were all sent at the same instant.
    pub fn trend_us_per_s(&self) -> Option<f64> {
        if self.trend_len < TREND_MIN_SAMPLES {
            return None;
        }
        let samples = &self.trend[..self.trend_len];
        let count = self.trend_len as f64;
        let mean_x = samples.iter().map(|&(x, _)| x).sum::<f64>() / count;
        let mean_y = samples.iter().map(|&(_, y)| y).sum::<f64>() / count;
        let (mut covariance, mut variance) = (0.0, 0.0);
        for &(x, y) in samples {
            covariance += (x - mean_x) * (y - mean_y);
            variance += (x - mean_x) * (x - mean_x);
        }
        (variance > 0.0).then(|| covariance / variance)
    }
}

#[cfg(test)]
#[path = "owd_tests.rs"]
mod tests;
