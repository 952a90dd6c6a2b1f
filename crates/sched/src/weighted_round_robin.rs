//! Weighted round-robin: each path's share of packets follows its rate.
//!
//! The round-robin striping of the high-speed-train study (`seeds/003_*` §3)
//! gives every link the same number of packets, so the slowest link paces the
//! whole flow; §6.1 shows bandwidth asymmetry alone already costs throughput.
//! Weighting each path by its rate removes that part of the loss (not the
//! delay-asymmetry part, which needs the arrival-aware schedulers).
//!
//! The rotation is "smooth weighted round-robin" (the interleaving used by
//! the nginx upstream balancer; equivalent in share to deficit round-robin,
//! Shreedhar & Varghese, "Efficient fair queuing using deficit round-robin",
//! SIGCOMM 1995, §3, with one packet per turn): each pick, every candidate
//! path earns credit equal to its weight, the path with the most credit is
//! chosen and pays back the sum of the weights handed out. Over any window,
//! path i gets `w_i / Σw` of the packets, interleaved as evenly as possible
//! rather than in bursts. Deterministic: ties go to the lowest id.
//!
//! Weights are the rate estimates of `predict.rs` (delivery rate, else pacing
//! rate, else cwnd/srtt). A path without an estimate weighs the mean of the
//! estimated ones (so a new path gets a fair trial); with no estimate at all
//! every path weighs the same, which is plain round-robin. Only eligible paths
//! that can send now compete; a full path earns nothing while it is full
//! (its share is capped by its window, as it should be). Credit is kept per
//! path id in a fixed array: no allocation.

use std::time::Instant;

use crate::eligible::Eligibility;
use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::predict::rate_estimate_bytes_per_sec;
use crate::scheduler::Scheduler;

/// Slots of the credit table: one per id a [`crate::PathSet`] can hold.
const CREDIT_SLOTS: usize = PathId::MAX_IN_SET as usize + 1;

/// Largest weight, in bytes/s (about 8.8 Tbit/s): keeps 64 summed weights and
/// the credits far inside `i64`.
const MAX_WEIGHT: i64 = 1 << 40;

/// Packets in proportion to each path's estimated rate, smoothly interleaved.
#[derive(Clone, Debug)]
pub struct WeightedRoundRobin {
    /// Accumulated credit per path id.
    credit: [i64; CREDIT_SLOTS],
}

impl Default for WeightedRoundRobin {
    fn default() -> Self {
        WeightedRoundRobin {
            credit: [0; CREDIT_SLOTS],
        }
    }
}

impl WeightedRoundRobin {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "weighted-round-robin";

    /// A scheduler with no credit yet.
    pub fn new() -> Self {
        WeightedRoundRobin::default()
    }
}

fn estimated_weight(path: &PathView) -> Option<i64> {
    rate_estimate_bytes_per_sec(path).map(|rate| {
        i64::try_from(rate)
            .unwrap_or(MAX_WEIGHT)
            .clamp(1, MAX_WEIGHT)
    })
}

impl Scheduler for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let rule = Eligibility::of(paths);
        let candidate = |path: &&PathView| {
            rule.allows(path) && path.can_send(packet.len) && usize::from(path.id.0) < CREDIT_SLOTS
        };

        // Pass 1: the weight of a path without an estimate.
        let (estimated_sum, estimated_count) = paths
            .iter()
            .filter(candidate)
            .filter_map(estimated_weight)
            .fold((0i64, 0i64), |(sum, count), weight| {
                (sum + weight, count + 1)
            });
        let default_weight = if estimated_count == 0 {
            1
        } else {
            (estimated_sum / estimated_count).max(1)
        };

        // Pass 2: hand out credit, find the richest path.
        let mut total = 0i64;
        let mut chosen: Option<(i64, PathId)> = None;
        for path in paths.iter().filter(candidate) {
            let weight = estimated_weight(path).unwrap_or(default_weight);
            let slot = &mut self.credit[usize::from(path.id.0)];
            *slot = slot.saturating_add(weight);
            total += weight;
            let better = match chosen {
                None => true,
                Some((credit, id)) => *slot > credit || (*slot == credit && path.id < id),
            };
            if better {
                chosen = Some((*slot, path.id));
            }
        }
        let Some((_, id)) = chosen else {
            return Pick::Hold;
        };
        self.credit[usize::from(id.0)] -= total;
        // Credit left over from paths that were full or gone, or from rates
        // that changed, must not grow without bound: one round's worth is
        // enough to remember.
        for path in paths.iter().filter(candidate) {
            let slot = &mut self.credit[usize::from(path.id.0)];
            *slot = (*slot).clamp(-total, total);
        }
        Pick::One(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    fn shares(scheduler: &mut WeightedRoundRobin, paths: &[PathView], count: usize) -> [u32; 4] {
        let mut counts = [0u32; 4];
        for pick in picks(scheduler, paths, count) {
            let Pick::One(id) = pick else {
                panic!("expected one path, got {pick:?}")
            };
            counts[usize::from(id.0)] += 1;
        }
        counts
    }

    #[test]
    fn table() {
        run_table(
            WeightedRoundRobin::new,
            vec![
                Case {
                    name: "rates 3:1 interleave smoothly",
                    paths: vec![measured(0, 10, 30), measured(1, 10, 10)],
                    expected: one(&[0, 0, 1, 0, 0, 0, 1, 0]),
                },
                Case {
                    name: "equal rates: plain rotation",
                    paths: vec![measured(0, 10, 10), measured(1, 40, 10), measured(2, 5, 10)],
                    expected: one(&[0, 1, 2, 0, 1, 2]),
                },
                Case {
                    name: "no estimates: plain rotation",
                    paths: vec![up(0), up(1), up(2)],
                    expected: one(&[0, 1, 2, 0, 1, 2]),
                },
                Case {
                    name: "full path skipped",
                    paths: vec![measured(0, 10, 30), full(measured(1, 10, 10)), up(2)],
                    expected: one(&[0, 2, 0, 2]),
                },
                Case {
                    name: "all full or paced holds",
                    paths: vec![full(measured(0, 10, 30)), paced(up(1))],
                    expected: vec![Pick::Hold, Pick::Hold],
                },
                Case {
                    name: "down path skipped",
                    paths: vec![up(0), down(1), up(2)],
                    expected: one(&[0, 2, 0, 2]),
                },
                Case {
                    name: "backups idle while a regular path is up",
                    paths: vec![backup(measured(0, 10, 100)), measured(1, 10, 1)],
                    expected: one(&[1, 1]),
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(up(0)), backup(up(1)), down(2)],
                    expected: one(&[0, 1, 0, 1]),
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
    fn shares_follow_rates_and_unestimated_paths_get_the_mean() {
        let mut scheduler = WeightedRoundRobin::new();
        let paths = [measured(0, 10, 30), measured(1, 60, 10), up(2), down(3)];
        // Weights 30, 10 and the mean 20: shares 1/2, 1/6, 1/3.
        assert_eq!(shares(&mut scheduler, &paths, 600), [300, 100, 200, 0]);
    }

    #[test]
    fn credit_stays_bounded_when_a_path_is_full_for_long() {
        let mut scheduler = WeightedRoundRobin::new();
        let open = [measured(0, 10, 10), measured(1, 10, 10)];
        let one_full = [measured(0, 10, 10), full(measured(1, 10, 10))];
        picks(&mut scheduler, &one_full, 10_000);
        // Back to both open: path 1 must not get a burst of thousands.
        assert_eq!(shares(&mut scheduler, &open, 10), [5, 5, 0, 0]);
    }
}
