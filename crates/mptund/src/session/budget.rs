//! A byte budget for probe traffic on metered links: a token bucket refilled at the
//! configured bytes per hour, holding at most a few minutes' worth, so an idle backup
//! modem costs what its contract allows and no more.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::{Duration, Instant};

/// How much unspent budget may accumulate: a path back from an outage may probe in a
/// short burst, but an idle day does not turn into an hour of probes.
const BURST_WINDOW: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug)]
pub struct ProbeBudget {
    /// `None`: no limit.
    bytes_per_hour: Option<u64>,
    /// Tokens in milli-bytes, so slow refill rates lose nothing to rounding.
    tokens_millibytes: u64,
    refilled_at: Instant,
}

impl ProbeBudget {
    pub fn new(now: Instant, bytes_per_hour: Option<u64>) -> Self {
        let mut budget = Self {
            bytes_per_hour,
            tokens_millibytes: 0,
            refilled_at: now,
        };
        budget.tokens_millibytes = budget.capacity_millibytes();
        budget
    }

    fn capacity_millibytes(&self) -> u64 {
        self.bytes_per_hour.map_or(u64::MAX, |rate| {
            rate.saturating_mul(1000) * BURST_WINDOW.as_secs() / 3600
        })
    }

    /// Spends `bytes` if the budget has them.
    pub fn try_spend(&mut self, now: Instant, bytes: u64) -> bool {
        let Some(rate) = self.bytes_per_hour else {
            return true;
        };
        let elapsed = now.saturating_duration_since(self.refilled_at);
        self.refilled_at = now;
        // bytes/hour * 1000 milli-bytes/byte * µs / 3_600_000_000 µs/hour = milli-bytes.
        let refill = (u128::from(rate) * elapsed.as_micros() / 3_600_000) as u64;
        self.tokens_millibytes = self
            .tokens_millibytes
            .saturating_add(refill)
            .min(self.capacity_millibytes());
        let cost = bytes.saturating_mul(1000);
        if self.tokens_millibytes >= cost {
            self.tokens_millibytes -= cost;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_always_allows() {
        let now = Instant::now();
        let mut budget = ProbeBudget::new(now, None);
        assert!((0..10_000).all(|_| budget.try_spend(now, 1500)));
    }

    #[test]
    fn spends_at_most_the_hourly_rate_after_the_initial_burst() {
        let t0 = Instant::now();
        // 36 kB/h = 10 B/s; the burst window holds 3000 B.
        let mut budget = ProbeBudget::new(t0, Some(36_000));
        let mut spent = 0u64;
        for second in 0..3600u64 {
            for _ in 0..10 {
                if budget.try_spend(t0 + Duration::from_secs(second), 100) {
                    spent += 100;
                }
            }
        }
        // The initial burst plus an hour of refill, less what has not yet added up to
        // a whole 100-byte probe.
        assert!(
            (3000 + 35_900..=3000 + 36_000).contains(&spent),
            "spent {spent}"
        );
        // Once empty, a probe fits again after 10 s of refill, not before.
        let t1 = t0 + Duration::from_secs(4000);
        while budget.try_spend(t1, 100) {}
        assert!(!budget.try_spend(t1 + Duration::from_secs(9), 100));
        assert!(budget.try_spend(t1 + Duration::from_secs(10), 100));
    }
}
