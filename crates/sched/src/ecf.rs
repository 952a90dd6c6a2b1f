//! ECF, Earliest Completion First.
//!
//! Lim, Nahum, Towsley & Gibbens, "ECF: An MPTCP Path Scheduler to Manage
//! Heterogeneous Paths", CoNEXT 2017, §4 and Algorithm 1; summarised in
//! `seeds/001_*` §2.1.4. The fastest path (lowest RTT, `x_f`) is used whenever
//! it can send. When it is full, the question is whether the data still to
//! send completes sooner by waiting for `x_f` than by also using the fastest
//! path that has room (`x_s`). With `k` bytes to send (this packet plus
//! [`PacketInfo::queued_bytes`] behind it), `n = 1 + ⌊k / cwnd_f⌋` rounds of
//! the fast path, and `δ` the RTT variability:
//!
//! ```text
//! if n·rtt_f < (1 + waiting·β)·(rtt_s + δ):        // x_f finishes first
//!     if (k / cwnd_s)·rtt_s >= 2·rtt_f + δ:         // and x_s would be slower
//!         waiting = 1; wait for x_f
//!     else: send on x_s
//! else: waiting = 0; send on x_s
//! ```
//!
//! `β` (hysteresis, paper value 0.25, [`crate::EcfParams::hysteresis`])
//! keeps ECF waiting once it started, so it does not flap between the two
//! decisions when they are close.
//!
//! Adaptations to mptund:
//! - The paper's `δ = max(σ_f, σ_s)` uses the RTT standard deviation, which
//!   [`PathView`] does not carry; `srtt - min_rtt` (the queueing part of the
//!   RTT, how far the RTT currently strays from its floor) stands in for it.
//! - Windows are in bytes; a path without a congestion window uses its rate
//!   times its RTT (`predict.rs`). If the window of `x_f` or `x_s` cannot be
//!   estimated at all, ECF cannot compare and sends on `x_s`.
//! - Paths without an RTT sample are never `x_f` or `x_s`; they get data only
//!   when no eligible path has a sample, then least loaded first (the
//!   daemon's probes measure them within a round trip).

use std::time::{Duration, Instant};

use crate::eligible::{fastest_first, ranking_rtt, FastestFirst};
use crate::path::{PacketInfo, PathView, Pick};
use crate::predict::window_estimate_bytes;
use crate::scheduler::Scheduler;

/// ECF's hysteresis β from the paper (Lim et al. 2017, §4, "β = 0.25").
pub const ECF_DEFAULT_HYSTERESIS: f64 = 0.25;

/// Waits for the fastest path when that completes the backlog sooner.
#[derive(Clone, Debug)]
pub struct Ecf {
    /// β: how much more patient ECF is once it is waiting.
    hysteresis: f64,
    /// The paper's `waiting` flag: the previous decision was to wait for `x_f`.
    waiting: bool,
}

impl Default for Ecf {
    fn default() -> Self {
        Ecf::new(ECF_DEFAULT_HYSTERESIS)
    }
}

impl Ecf {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "ecf";

    /// ECF with hysteresis `hysteresis` (β; the factory validates it).
    pub fn new(hysteresis: f64) -> Self {
        Ecf {
            hysteresis,
            waiting: false,
        }
    }

    /// True when ECF's last decision was to wait for the fastest path.
    pub fn is_waiting(&self) -> bool {
        self.waiting
    }
}

/// The stand-in for the RTT standard deviation (see the module docs).
fn rtt_variability(path: &PathView) -> Duration {
    match (path.srtt, path.min_rtt) {
        (Some(srtt), Some(min_rtt)) => srtt.saturating_sub(min_rtt),
        _ => Duration::ZERO,
    }
}

impl Scheduler for Ecf {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let ((rtt_f, fastest), (rtt_s, slower)) = match fastest_first(paths, packet.len) {
            FastestFirst::Decided(pick) => return pick,
            FastestFirst::Choose { fastest, slower } => (fastest, slower),
        };
        let (Some(cwnd_f), Some(cwnd_s)) = (
            window_estimate_bytes(fastest).filter(|&w| w > 0),
            window_estimate_bytes(slower).filter(|&w| w > 0),
        ) else {
            return Pick::One(slower.id);
        };
        debug_assert!(ranking_rtt(slower).is_some());

        let backlog = packet.len as f64 + packet.queued_bytes as f64;
        let rounds_f = 1.0 + (backlog / cwnd_f as f64).floor();
        let delta = rtt_variability(fastest)
            .max(rtt_variability(slower))
            .as_secs_f64();
        let (rtt_f, rtt_s) = (rtt_f.as_secs_f64(), rtt_s.as_secs_f64());
        let waiting = if self.waiting { 1.0 } else { 0.0 };

        if rounds_f * rtt_f < (1.0 + waiting * self.hysteresis) * (rtt_s + delta) {
            if backlog / cwnd_s as f64 * rtt_s >= 2.0 * rtt_f + delta {
                self.waiting = true;
                return Pick::Hold;
            }
            Pick::One(slower.id)
        } else {
            self.waiting = false;
            Pick::One(slower.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathId;
    use crate::test_support::*;

    fn backlog(bytes: u64) -> PacketInfo {
        PacketInfo {
            queued_bytes: bytes,
            ..PACKET
        }
    }

    #[test]
    fn table() {
        // measured(): windows of 140,000 bytes.
        run_table(
            Ecf::default,
            vec![
                Case {
                    name: "fastest path with room is used",
                    paths: vec![measured(0, 40, 10), measured(1, 10, 10)],
                    expected: one(&[1, 1]),
                },
                Case {
                    name: "fastest full, small backlog: the slow path completes it sooner",
                    paths: vec![measured(0, 40, 10), full(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "all full or paced holds",
                    paths: vec![full(measured(0, 40, 10)), paced(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "fastest down: next",
                    paths: vec![measured(0, 40, 10), gone_down(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "backup idle while a regular path is up but full",
                    paths: vec![backup(measured(0, 5, 10)), full(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(measured(0, 5, 10)), down(1)],
                    expected: one(&[0]),
                },
                Case {
                    name: "equal rtts: lowest id first, then the other when full",
                    paths: vec![full(measured(0, 20, 10)), measured(1, 20, 10)],
                    expected: one(&[1, 1]),
                },
                Case {
                    name: "no measurements: least loaded",
                    paths: vec![in_flight(up(0), 2800), up(1)],
                    expected: one(&[1]),
                },
                Case {
                    name: "unmeasured path is not used while the measured one is full",
                    paths: vec![up(0), full(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "no paths holds",
                    paths: vec![],
                    expected: vec![Pick::Hold],
                },
            ],
        );
    }

    #[test]
    fn waits_for_the_fast_path_when_the_backlog_fits_it_and_hysteresis_holds_on() {
        let now = Instant::now();
        // Fast: RTT 20 ms, window 140 kB. Slow: RTT 100 ms, window 14 kB.
        let mut slow = measured(0, 50, 10);
        slow.cwnd_bytes = Some(14_000);
        let paths = [slow, full(measured(1, 10, 10))];
        let mut ecf = Ecf::default();

        // k = 1,400 + 140,000: n = 2 rounds of 20 ms = 40 ms < 100 ms, and
        // the slow path needs k/cwnd_s·rtt_s ≈ 1 s >= 40 ms: wait.
        assert_eq!(ecf.pick(now, &backlog(140_000), &paths), Pick::Hold);
        assert!(ecf.is_waiting());

        // A backlog of 5 fast windows: n = 6, 120 ms. Without hysteresis
        // that exceeds 100 ms (use the slow path); waiting, the bound is
        // 1.25 × 100 ms = 125 ms, so ECF keeps waiting.
        assert_eq!(ecf.pick(now, &backlog(700_000), &paths), Pick::Hold);
        let mut fresh = Ecf::default();
        assert_eq!(
            fresh.pick(now, &backlog(700_000), &paths),
            Pick::One(PathId(0))
        );
        assert!(!fresh.is_waiting());

        // A backlog far beyond: both paths are needed, waiting ends.
        assert_eq!(
            ecf.pick(now, &backlog(2_000_000), &paths),
            Pick::One(PathId(0))
        );
        assert!(!ecf.is_waiting());

        // β = 0: no hysteresis, the 700 kB case goes to the slow path.
        let mut eager = Ecf::new(0.0);
        eager.waiting = true;
        assert_eq!(
            eager.pick(now, &backlog(700_000), &paths),
            Pick::One(PathId(0))
        );
    }
}
