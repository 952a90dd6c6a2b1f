//! BLEST, Blocking Estimation-based scheduler.
//!
//! Ferlin, Alay, Mehani & Boreli, "BLEST: Blocking Estimation-based MPTCP
//! Scheduler for Heterogeneous Networks", IFIP Networking 2016, §3;
//! summarised in `seeds/001_*` §2.1.5, where it was the best scheduler when a
//! house blocked the 5G line of sight (§4).
//!
//! The fastest path (lowest RTT, `x_f`) is used whenever it can send. Before
//! a packet goes on a slower path `x_s`, BLEST estimates how much the fast
//! path will send while that packet is in flight, i.e. during one `rtt_s`:
//! with `ratio = rtt_s / rtt_f` fast-path rounds, and the fast window growing
//! by about one packet per round (congestion avoidance),
//!
//! ```text
//! X = (cwnd_f + mss·(ratio − 1)/2) · ratio          // bytes, §3 eq. (2)
//! ```
//!
//! Everything the fast path sends in that time lands behind the slow packet
//! in the receiver's window. If `λ·X` does not fit in what is left of that
//! window, sending on `x_s` would block the fast path (head-of-line), so
//! BLEST does not send now and waits for `x_f`.
//!
//! Adaptations to mptund:
//! - MPTCP's window is the connection-level receive/send window. mptund's
//!   receiver has no flow-control window; what fills up is its reorder buffer
//!   (`ReorderBuffer`, capacity in packets), so the window is
//!   [`crate::BlestParams::reorder_window_bytes`] and what is left
//!   of it is that minus the bytes in flight on all paths minus this packet.
//! - `mss` is the length of the packet being placed; windows are in bytes,
//!   and a path without a congestion window uses rate × RTT (`predict.rs`).
//!   If the fast path's window cannot be estimated, BLEST cannot predict
//!   blocking and sends on `x_s`.
//! - λ: the paper scales `X` by λ and adapts λ to the blocking it observes
//!   (more cautious after a misprediction). mptund's scheduler does not see
//!   the receiver's blocking; it sees losses, and a lost packet leaves the
//!   same hole in the reorder buffer a misprediction does. So each
//!   [`Scheduler::on_lost`] raises λ by [`BLEST_LAMBDA_STEP_UP`] (at most
//!   [`BLEST_LAMBDA_MAX_FACTOR`] × the configured λ) and each acknowledgement
//!   lowers it by [`BLEST_LAMBDA_STEP_DOWN`], never below the configured λ
//!   ([`crate::BlestParams::lambda`], paper start value 1.0).
//! - Paths without an RTT sample get data only when no eligible path has one,
//!   least loaded first (the daemon's probes measure them within a round trip).

use std::time::Instant;

use crate::eligible::{fastest_first, FastestFirst};
use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::predict::window_estimate_bytes;
use crate::scheduler::Scheduler;

/// The paper's initial λ (Ferlin et al. 2016, §3: "λ = 1" at start).
pub const BLEST_DEFAULT_LAMBDA: f64 = 1.0;

/// Default reorder window: the daemon's default reorder buffer capacity
/// (`reorder.capacity_packets = 4096`, sized for 100 ms at ~450 Mbit/s) of
/// 1400-byte datagrams, the typical tunnel packet on a 1500-byte path MTU.
pub const BLEST_DEFAULT_REORDER_WINDOW_BYTES: u64 = 4096 * 1400;

/// λ increase per lost packet (mptund's choice: ten losses make BLEST
/// twice as cautious).
pub const BLEST_LAMBDA_STEP_UP: f64 = 0.1;

/// λ decrease per acknowledgement (mptund's choice: a hundred clean
/// acknowledgements undo one loss, so λ recovers within a few windows).
pub const BLEST_LAMBDA_STEP_DOWN: f64 = 0.001;

/// Cap on the adapted λ relative to the configured one (mptund's choice:
/// beyond 4× BLEST degenerates into single-path min-RTT).
pub const BLEST_LAMBDA_MAX_FACTOR: f64 = 4.0;

/// Uses a slower path only when that does not block the fast one.
#[derive(Clone, Debug)]
pub struct Blest {
    /// The configured λ: the floor λ decays back to.
    base_lambda: f64,
    /// The current, loss-adapted λ.
    lambda: f64,
    /// The receiver's reorder window in bytes.
    reorder_window_bytes: u64,
}

impl Default for Blest {
    fn default() -> Self {
        Blest::new(BLEST_DEFAULT_LAMBDA, BLEST_DEFAULT_REORDER_WINDOW_BYTES)
    }
}

impl Blest {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "blest";

    /// BLEST starting at `lambda` over a reorder window of
    /// `reorder_window_bytes` (the factory validates both).
    pub fn new(lambda: f64, reorder_window_bytes: u64) -> Self {
        Blest {
            base_lambda: lambda,
            lambda,
            reorder_window_bytes,
        }
    }

    /// The current λ.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }
}

impl Scheduler for Blest {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let ((rtt_f, fastest), (rtt_s, slower)) = match fastest_first(paths, packet.len) {
            FastestFirst::Decided(pick) => return pick,
            FastestFirst::Choose { fastest, slower } => (fastest, slower),
        };
        let Some(cwnd_f) = window_estimate_bytes(fastest) else {
            return Pick::One(slower.id);
        };
        if rtt_f.is_zero() {
            // A zero RTT sample would make the ratio infinite; no basis to wait.
            return Pick::One(slower.id);
        }
        let ratio = rtt_s.as_secs_f64() / rtt_f.as_secs_f64();
        let mss = packet.len as f64;
        let fast_bytes_meanwhile = (cwnd_f as f64 + mss * (ratio - 1.0) / 2.0) * ratio;
        let in_flight: u64 = paths.iter().map(|path| path.bytes_in_flight).sum();
        let window_left = self.reorder_window_bytes as f64 - in_flight as f64 - mss;
        if self.lambda * fast_bytes_meanwhile > window_left {
            Pick::Hold
        } else {
            Pick::One(slower.id)
        }
    }

    fn on_acked(&mut self, _now: Instant, _path: PathId, _bytes: usize) {
        self.lambda = (self.lambda - BLEST_LAMBDA_STEP_DOWN).max(self.base_lambda);
    }

    fn on_lost(&mut self, _now: Instant, _path: PathId, _bytes: usize) {
        self.lambda =
            (self.lambda + BLEST_LAMBDA_STEP_UP).min(self.base_lambda * BLEST_LAMBDA_MAX_FACTOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    /// Reorder window of 1 MB for the table: measured() paths have
    /// 140 kB windows.
    fn blest() -> Blest {
        Blest::new(1.0, 1_000_000)
    }

    #[test]
    fn table() {
        run_table(
            blest,
            vec![
                Case {
                    name: "fastest path with room is used",
                    paths: vec![measured(0, 40, 10), measured(1, 10, 10)],
                    expected: one(&[1, 1]),
                },
                Case {
                    // X = (140,000 + 1,400·1.5)·4 = 568,400 <= 1 MB − 140 kB.
                    name: "fast full, slow path does not block: slow path",
                    paths: vec![measured(0, 40, 10), full(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    // X = (140,000 + 1,400·4.5)·10 ≈ 1.46 MB > 1 MB − 140 kB.
                    name: "fast full, slow path would block: wait",
                    paths: vec![measured(0, 100, 10), full(measured(1, 10, 10))],
                    expected: vec![Pick::Hold, Pick::Hold],
                },
                Case {
                    name: "all full or paced holds",
                    paths: vec![full(measured(0, 40, 10)), paced(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "fastest down: next",
                    paths: vec![measured(0, 100, 10), gone_down(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(measured(0, 5, 10)), down(1)],
                    expected: one(&[0]),
                },
                Case {
                    name: "equal rtts: lowest id, the other when full (ratio 1)",
                    paths: vec![full(measured(0, 20, 10)), measured(1, 20, 10)],
                    expected: one(&[1]),
                },
                Case {
                    name: "no measurements: least loaded",
                    paths: vec![in_flight(up(0), 2800), up(1), down(2)],
                    expected: one(&[1]),
                },
                Case {
                    name: "fast path without any window estimate is never full",
                    paths: vec![measured(0, 100, 10), {
                        let mut view = up(1);
                        view.srtt = Some(std::time::Duration::from_millis(20));
                        view
                    }],
                    expected: one(&[1]),
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
    fn lambda_rises_on_loss_decays_on_ack_and_changes_the_decision() {
        let now = Instant::now();
        // X = 568,400 (see the table); window left = 900,000 − 140,000 − 1,400.
        let paths = [measured(0, 40, 10), full(measured(1, 10, 10))];
        let mut scheduler = Blest::new(1.0, 900_000);
        assert_eq!(scheduler.pick(now, &PACKET, &paths), Pick::One(PathId(0)));
        for _ in 0..4 {
            scheduler.on_lost(now, PathId(0), 1400);
        }
        assert!((scheduler.lambda() - 1.4).abs() < 1e-9);
        assert_eq!(
            scheduler.pick(now, &PACKET, &paths),
            Pick::Hold,
            "λ·X = 795,760"
        );
        for _ in 0..100 {
            scheduler.on_lost(now, PathId(0), 1400);
        }
        assert!((scheduler.lambda() - 4.0).abs() < 1e-9, "capped");
        for _ in 0..10_000 {
            scheduler.on_acked(now, PathId(1), 1400);
        }
        assert!(
            (scheduler.lambda() - 1.0).abs() < 1e-9,
            "floored at the configured λ"
        );
        assert_eq!(scheduler.pick(now, &PACKET, &paths), Pick::One(PathId(0)));
    }
}
