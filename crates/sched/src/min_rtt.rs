//! Lowest smoothed RTT first: the default scheduler of Linux MPTCP.
//!
//! RFC 8684 (TCP Extensions for Multipath Operation, §3.3.8) leaves the
//! scheduler to the implementation; the Linux one sends on "the SF having the
//! lowest round-trip-time (RTT) among all the SF having an available CWND" and
//! keeps using it until its window is full (`seeds/001_*` §2.1.1, "Shortest
//! RTT first"). mptund's version ranks eligible paths (see `eligible.rs`) by
//! smoothed RTT (minimum RTT when no smoothed value exists yet) and takes the
//! lowest one that can send now; equal RTTs go to the lowest id, so one path
//! is filled before the next, as the seed describes.
//!
//! It is the scheduler of the 4G + 5G study that loses to BLEST and redundant
//! (`seeds/001_*` §4): it ignores that a packet on the slower path may arrive
//! after later packets sent on the fast one.
//!
//! Paths without an RTT sample: the daemon's probes measure every Up path
//! within a round trip, so data does not have to. A path without a sample
//! therefore gets data only when no measured path can send; among such paths
//! the least loaded goes first (spreads a fresh session's first packets, which
//! also yields each path's first RTT samples from data).

use std::time::Instant;

use crate::eligible::{least_loaded, ranking_rtt, Eligibility};
use crate::path::{PacketInfo, PathView, Pick};
use crate::scheduler::Scheduler;

/// Sends on the lowest-RTT path with room.
#[derive(Clone, Debug, Default)]
pub struct MinRtt;

impl MinRtt {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "min-rtt";

    /// The (stateless) scheduler.
    pub fn new() -> Self {
        MinRtt
    }
}

impl Scheduler for MinRtt {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let rule = Eligibility::of(paths);
        let measured = paths
            .iter()
            .filter(|path| rule.allows(path) && path.can_send(packet.len))
            .filter_map(|path| ranking_rtt(path).map(|rtt| (rtt, path.id)))
            .min();
        if let Some((_, id)) = measured {
            return Pick::One(id);
        }
        match least_loaded(paths, rule, packet.len, |path| ranking_rtt(path).is_none()) {
            Some(id) => Pick::One(id),
            None => Pick::Hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    #[test]
    fn table() {
        run_table(
            MinRtt::new,
            vec![
                Case {
                    name: "lowest srtt wins and keeps winning",
                    paths: vec![
                        measured(0, 30, 10),
                        measured(1, 10, 10),
                        measured(2, 20, 10),
                    ],
                    expected: one(&[1, 1, 1]),
                },
                Case {
                    name: "full window: next lowest",
                    paths: vec![
                        measured(0, 30, 10),
                        full(measured(1, 10, 10)),
                        measured(2, 20, 10),
                    ],
                    expected: one(&[2, 2]),
                },
                Case {
                    name: "paced: next lowest",
                    paths: vec![measured(0, 30, 10), paced(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "all full or paced holds",
                    paths: vec![full(measured(0, 30, 10)), paced(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "fastest path down",
                    paths: vec![measured(0, 30, 10), gone_down(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "backup only when no regular path is up",
                    paths: vec![backup(measured(0, 5, 10)), measured(1, 50, 10)],
                    expected: one(&[1]),
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(measured(0, 5, 10)), down(1)],
                    expected: one(&[0]),
                },
                Case {
                    name: "equal rtts: lowest id",
                    paths: vec![measured(3, 20, 10), measured(2, 20, 10)],
                    expected: one(&[2, 2]),
                },
                Case {
                    name: "unmeasured only when no measured path can send",
                    paths: vec![up(0), measured(1, 80, 10)],
                    expected: one(&[1]),
                },
                Case {
                    name: "unmeasured used when the measured path is full",
                    paths: vec![up(0), full(measured(1, 80, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "nothing measured: least loaded",
                    paths: vec![in_flight(up(0), 3000), in_flight(up(1), 1400), up(2)],
                    expected: one(&[2]),
                },
                Case {
                    name: "no paths holds",
                    paths: vec![],
                    expected: vec![Pick::Hold],
                },
            ],
        );
    }
}
