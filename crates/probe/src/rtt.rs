//! Round-trip time estimation after RFC 6298 section 2 (SRTT, RTTVAR) with the minimum
//! and latest sample tracked as RFC 9002 section 5 does.
//!
//! Samples come from any exchange whose both ends the sender timed itself (keepalive
//! ping and pong, acknowledgements), so no clock synchronisation is needed.

use std::time::Duration;

/// RFC 6298 section 2: alpha = 1/8, beta = 1/4.
const ALPHA_DENOMINATOR: u32 = 8;
const BETA_DENOMINATOR: u32 = 4;
/// RFC 6298 section 2.4: RTO = SRTT + max(G, K * RTTVAR) with K = 4.
const RTO_VARIANCE_FACTOR: u32 = 4;
/// RFC 6298 section 2.4 recommends a 1 s floor for TCP; a tunnel path's RTO only
/// decides when to suspect a path, so the floor follows RFC 9002's timer granularity
/// instead and lets a fast path be suspected fast.
const RTO_GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RttEstimator {
    smoothed: Option<Duration>,
    variance: Duration,
    min: Option<Duration>,
    latest: Option<Duration>,
    samples: u64,
}

impl RttEstimator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one round-trip sample.
    pub fn on_sample(&mut self, rtt: Duration) {
        self.latest = Some(rtt);
        self.samples += 1;
        self.min = Some(self.min.map_or(rtt, |min| min.min(rtt)));
        self.smooth(rtt);
    }

    /// Feeds one sample taken from an acknowledgement that reports `ack_delay` (already
    /// limited to the peer's `max_ack_delay` by the caller), per RFC 9002 section 5.3:
    /// the minimum and the latest RTT use the raw sample; the smoothed RTT and the
    /// variance use the sample minus the acknowledgement delay, unless that would take
    /// it below the minimum. The first sample is used raw.
    pub fn on_ack_sample(&mut self, latest: Duration, ack_delay: Duration) {
        let first = self.smoothed.is_none();
        self.latest = Some(latest);
        self.samples += 1;
        let min = self.min.map_or(latest, |min| min.min(latest));
        self.min = Some(min);
        let adjusted = if !first && latest >= min + ack_delay {
            latest - ack_delay
        } else {
            latest
        };
        self.smooth(adjusted);
    }

    fn smooth(&mut self, rtt: Duration) {
        match self.smoothed {
            // RFC 6298 2.2: the first measurement sets SRTT = R, RTTVAR = R/2.
            None => {
                self.smoothed = Some(rtt);
                self.variance = rtt / 2;
            }
            // RFC 6298 2.3: RTTVAR first, from the old SRTT; then SRTT.
            Some(smoothed) => {
                let deviation = smoothed.abs_diff(rtt);
                self.variance =
                    (self.variance * (BETA_DENOMINATOR - 1) + deviation) / BETA_DENOMINATOR;
                self.smoothed =
                    Some((smoothed * (ALPHA_DENOMINATOR - 1) + rtt) / ALPHA_DENOMINATOR);
            }
        }
    }

    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    pub fn variance(&self) -> Duration {
        self.variance
    }

    pub fn min(&self) -> Option<Duration> {
        self.min
    }

    pub fn latest(&self) -> Option<Duration> {
        self.latest
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Retransmission timeout per RFC 6298 2.4, `None` before the first sample.
    pub fn rto(&self) -> Option<Duration> {
        self.smoothed
            .map(|smoothed| smoothed + (self.variance * RTO_VARIANCE_FACTOR).max(RTO_GRANULARITY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn no_sample_no_estimate() {
        let rtt = RttEstimator::new();
        assert_eq!(rtt.smoothed(), None);
        assert_eq!(rtt.min(), None);
        assert_eq!(rtt.rto(), None);
    }

    /// Each row: samples fed in order, then expected (srtt, rttvar, min, latest) in microseconds.
    #[test]
    fn rfc6298_table() {
        #[rustfmt::skip]
        let cases: &[(&[u64], u64, u64, u64, u64)] = &[
            // first sample: SRTT = R, RTTVAR = R/2
            (&[100],           100_000, 50_000, 100_000, 100_000),
            // second: RTTVAR = 3/4*50 + 1/4*|100-140| = 47.5; SRTT = 7/8*100 + 1/8*140 = 105
            (&[100, 140],      105_000, 47_500, 100_000, 140_000),
            // a smaller sample lowers min and pulls SRTT down
            (&[100, 140, 60],   99_375, 46_875,  60_000,  60_000),
            // constant samples: variance decays by 3/4 each time
            (&[80, 80, 80, 80], 80_000, 16_875,  80_000,  80_000),
        ];
        for (index, (samples, srtt, rttvar, min, latest)) in cases.iter().enumerate() {
            let mut rtt = RttEstimator::new();
            for &sample in samples.iter() {
                rtt.on_sample(ms(sample));
            }
            let micros = |d: Duration| d.as_micros() as u64;
            assert_eq!(micros(rtt.smoothed().unwrap()), *srtt, "case {index}: srtt");
            assert_eq!(micros(rtt.variance()), *rttvar, "case {index}: rttvar");
            assert_eq!(micros(rtt.min().unwrap()), *min, "case {index}: min");
            assert_eq!(
                micros(rtt.latest().unwrap()),
                *latest,
                "case {index}: latest"
            );
            assert_eq!(rtt.samples(), samples.len() as u64, "case {index}: count");
        }
    }

    /// RFC 9002 section 5.3: min and latest are raw; smoothing uses the adjusted sample.
    #[test]
    fn ack_delay_adjustment() {
        let mut rtt = RttEstimator::new();
        // first sample: used raw even with an ack delay
        rtt.on_ack_sample(ms(100), ms(20));
        assert_eq!(rtt.smoothed(), Some(ms(100)));
        // 140 - 20 = 120 >= min 100: RTTVAR = 3/4*50 + 1/4*20 = 42.5, SRTT = 102.5
        rtt.on_ack_sample(ms(140), ms(20));
        assert_eq!(rtt.smoothed(), Some(Duration::from_micros(102_500)));
        assert_eq!(rtt.variance(), Duration::from_micros(42_500));
        assert_eq!(rtt.latest(), Some(ms(140)));
        // 110 < min 100 + delay 20: not adjusted, and min stays at the raw 100
        rtt.on_ack_sample(ms(110), ms(20));
        assert_eq!(rtt.min(), Some(ms(100)));
        assert_eq!(rtt.latest(), Some(ms(110)));
        assert_eq!(rtt.samples(), 3);
    }

    #[test]
    fn rto_is_srtt_plus_four_variances_with_granularity_floor() {
        let mut rtt = RttEstimator::new();
        rtt.on_sample(ms(100));
        assert_eq!(rtt.rto(), Some(ms(100) + ms(50) * 4));
        let mut steady = RttEstimator::new();
        for _ in 0..200 {
            steady.on_sample(ms(10));
        }
        assert_eq!(steady.variance(), Duration::ZERO);
        assert_eq!(steady.rto(), Some(ms(10) + RTO_GRANULARITY));
    }
}
