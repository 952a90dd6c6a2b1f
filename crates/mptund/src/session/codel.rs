//! CoDel (RFC 8289) for the send queue in front of the paths.
//!
//! When every path's window is full, inner packets wait in the send queue, and the
//! inner TCP must learn that the tunnel is its bottleneck. Dropping every packet that
//! waited too long tells it in bursts: a whole window lost at once, often a timeout.
//! CoDel drops one packet once the queue delay has stayed above `target` for an
//! `interval`, then drops more often (interval / sqrt(count)) while it stays there,
//! which is the gentle, once-per-RTT signal a TCP sender answers by halving its
//! window. This follows the dequeue pseudocode of RFC 8289 §5.4–5.6, with one
//! departure: a due drop waits once, for one more interval / sqrt(count), when the
//! queue is shorter than just after the last drop.
//!
//! Why the wait: an inner TCP answers a drop an inner round trip later, and gently:
//! in recovery (PRR, RFC 6937) it still sends 0.7 packets per packet acknowledged, so
//! the queue shrinks over a round trip more before the head's delay falls below target.
//! Through the tunnel that round trip is the slower paths' plus the receiver's hold
//! plus this queue, about one interval. The next drop then came while the queue was
//! already draining, and one CUBIC flow cut its window twice, to half, below what the
//! paths carry for seconds (5g-lte-shallow, `benches/schedulers/REPORT.md`). Once,
//! not for as long as the queue shrinks: an inner BBR hardly answers a drop, and its
//! queue shrinks in every probing cycle; waiting each time it did let its standing
//! queue grow, and a path that died then left more to wait behind it (failover gaps
//! of 267 against 216 ms). A flow that does not answer, or more flows than one drop
//! slows, still gets drops at least every two intervals / sqrt(count).

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::{Duration, Instant};

/// CoDel's two parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoDelConfig {
    /// Acceptable standing queue delay (RFC 8289 §4.4: 5 ms, 5-10 % of the interval).
    pub target: Duration,
    /// How long the delay may stay above target before a drop; about a worst-case
    /// RTT of the inner flows (RFC 8289 §4.3: 100 ms).
    pub interval: Duration,
}

/// The state of RFC 8289's dequeue side.
#[derive(Clone, Debug)]
pub struct CoDel {
    config: CoDelConfig,
    /// When the delay, above target since then, first allows a drop.
    first_above_time: Option<Instant>,
    /// In the dropping state: when the next drop is due.
    drop_next: Instant,
    /// Drops since entering the dropping state.
    count: u32,
    /// `count` when the dropping state was last left.
    last_count: u32,
    dropping: bool,
    /// Queue length just after the last drop; `None` once a due drop waited.
    queued_after_last_drop: Option<usize>,
}

impl CoDel {
    pub fn new(config: CoDelConfig, now: Instant) -> Self {
        CoDel {
            config,
            first_above_time: None,
            drop_next: now,
            count: 0,
            last_count: 0,
            dropping: false,
            queued_after_last_drop: None,
        }
    }

    /// The packet at the head of a queue of `queued_packets` waited `sojourn`; true
    /// when it is to be dropped now rather than sent. Call once per head packet
    /// looked at, in dequeue order.
    pub fn should_drop(&mut self, now: Instant, sojourn: Duration, queued_packets: usize) -> bool {
        let ok_to_drop = self.ok_to_drop(now, sojourn, queued_packets);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
                return false;
            }
            if now < self.drop_next {
                return false;
            }
            let answering = self
                .queued_after_last_drop
                .take()
                .is_some_and(|after| queued_packets < after);
            if answering {
                self.drop_next = self.control_law(self.drop_next);
                return false;
            }
            self.queued_after_last_drop = Some(queued_packets.saturating_sub(1));
            self.count = self.count.saturating_add(1);
            self.drop_next = self.control_law(self.drop_next);
            return true;
        }
        if !ok_to_drop {
            return false;
        }
        self.dropping = true;
        // RFC 8289 §5.6: resume near the previous drop rate if the dropping state
        // was left only recently.
        let delta = self.count.saturating_sub(self.last_count);
        let recently = now.saturating_duration_since(self.drop_next) < 16 * self.config.interval;
        self.count = if delta > 1 && recently { delta } else { 1 };
        self.last_count = self.count;
        self.drop_next = self.control_law(now);
        self.queued_after_last_drop = Some(queued_packets.saturating_sub(1));
        true
    }

    /// Forgets a standing queue (the queue ran empty, or is no sign of saturation);
    /// the drop rate to resume with is kept (RFC 8289 §5.6).
    pub fn forget_standing_queue(&mut self) {
        self.first_above_time = None;
    }

    fn ok_to_drop(&mut self, now: Instant, sojourn: Duration, queued_packets: usize) -> bool {
        // A single packet is no standing queue (RFC 8289's MAXPACKET test).
        if sojourn < self.config.target || queued_packets <= 1 {
            self.first_above_time = None;
            return false;
        }
        match self.first_above_time {
            None => {
                self.first_above_time = Some(now + self.config.interval);
                false
            }
            Some(at) => now >= at,
        }
    }

    fn control_law(&self, from: Instant) -> Instant {
        from + self
            .config
            .interval
            .div_f64(f64::from(self.count.max(1)).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: CoDelConfig = CoDelConfig {
        target: Duration::from_millis(5),
        interval: Duration::from_millis(100),
    };

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    /// Drop instants (ms from start) when the head packet always waited `sojourn`,
    /// looked at every millisecond for `duration_ms`.
    fn drops(
        codel: &mut CoDel,
        t0: Instant,
        from_ms: u64,
        duration_ms: u64,
        sojourn: Duration,
    ) -> Vec<u64> {
        (from_ms..from_ms + duration_ms)
            .filter(|&at| codel.should_drop(t0 + ms(at), sojourn, 10))
            .collect()
    }

    #[test]
    fn a_short_burst_is_never_dropped() {
        let t0 = Instant::now();
        let mut codel = CoDel::new(CONFIG, t0);
        // 99 ms above target, then below: no drop.
        assert!(drops(&mut codel, t0, 0, 99, ms(30)).is_empty());
        assert!(drops(&mut codel, t0, 99, 500, ms(2)).is_empty());
    }

    #[test]
    fn a_standing_queue_gets_drops_at_interval_over_sqrt_count() {
        let t0 = Instant::now();
        let mut codel = CoDel::new(CONFIG, t0);
        let got = drops(&mut codel, t0, 0, 400, ms(20));
        // First drop one interval after the delay went above target, then
        // 100/sqrt(1) = 100 ms later, then 70.7, 57.7 and 50 ms (the drop instants
        // accumulate exactly; the test looks every millisecond).
        assert_eq!(got, [100, 200, 271, 329, 379]);
    }

    #[test]
    fn single_packet_and_below_target_are_safe() {
        let t0 = Instant::now();
        let mut codel = CoDel::new(CONFIG, t0);
        for at in 0..500 {
            assert!(
                !codel.should_drop(t0 + ms(at), ms(50), 1),
                "one packet is no queue"
            );
        }
        assert!(drops(&mut codel, t0, 500, 500, ms(4)).is_empty());
    }

    #[test]
    fn leaving_and_reentering_soon_resumes_the_drop_rate() {
        let t0 = Instant::now();
        let mut codel = CoDel::new(CONFIG, t0);
        let first = drops(&mut codel, t0, 0, 400, ms(20));
        assert_eq!(first.len(), 5);
        // The queue drains briefly, then stands again.
        assert!(drops(&mut codel, t0, 400, 10, ms(1)).is_empty());
        codel.forget_standing_queue();
        let again = drops(&mut codel, t0, 410, 200, ms(20));
        // Re-entry after one interval; the count resumes at 5 - 1 = 4, so the next
        // drop is 100/sqrt(4) = 50 ms later, not 100 ms as from a cold start.
        assert_eq!(again[0], 510);
        assert_eq!(again[1] - again[0], 50);
    }

    #[test]
    fn a_due_drop_waits_while_the_queue_drains() {
        let t0 = Instant::now();
        let mut codel = CoDel::new(CONFIG, t0);
        let looked_at = |codel: &mut CoDel, at: u64, queued: usize| {
            codel.should_drop(t0 + ms(at), ms(20), queued)
        };
        // Above target from 0 on: the first drop at 100 ms, of a 100-packet queue.
        assert!((0..100).all(|at| !looked_at(&mut codel, at, 100)));
        assert!(looked_at(&mut codel, 100, 100));
        // The flow answers: the queue shrinks, so the drop due at 200 ms waits.
        let draining = |at: u64| 100 - (at - 100) as usize / 4;
        assert!((101..250).all(|at| !looked_at(&mut codel, at, draining(at))));
        // It stands at 60 packets, still above target. A drop waits only once: the one
        // due at 300 ms is made, and the next ones at interval / sqrt(count) as usual.
        let got: Vec<u64> = (250..500)
            .filter(|&at| looked_at(&mut codel, at, 60))
            .collect();
        assert_eq!(got, [300, 371, 429, 479]);
    }
}
