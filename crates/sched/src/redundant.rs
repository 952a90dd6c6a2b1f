//! Redundant: every packet on every path that can take it.
//!
//! The redundant scheduler of the 4G + 5G study (`seeds/001_*` §2.1.3, after
//! Felix et al., "Redundant packet scheduling by uncorrelated paths in
//! heterogeneous wireless networks", ISCC 2018) "sends the same data through
//! all SFs with space in CWND". The first copy to arrive wins and the
//! receiver's reorder buffer drops the others as duplicates, so a packet is as
//! fast as the fastest path at that moment and survives any one path's loss or
//! blockage; the price is that the tunnel's capacity is that of one path.
//! It came second only to BLEST when the 5G line of sight was blocked
//! (`seeds/001_*` §4).
//!
//! Paths are eligible as for every scheduler (`eligible.rs`); a path whose
//! window or pacer holds it back gets no copy. Measurements are not used at
//! all, so a fresh path is used at once.

use std::time::Instant;

use crate::eligible::Eligibility;
use crate::path::{PacketInfo, PathId, PathSet, PathView, Pick};
use crate::scheduler::Scheduler;

/// Duplicates each packet onto every eligible path with room.
#[derive(Clone, Debug, Default)]
pub struct Redundant;

impl Redundant {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "redundant";

    /// The (stateless) scheduler.
    pub fn new() -> Self {
        Redundant
    }
}

impl Scheduler for Redundant {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let rule = Eligibility::of(paths);
        let set: PathSet = paths
            .iter()
            .filter(|path| rule.allows(path) && path.can_send(packet.len))
            .map(|path| path.id)
            .collect();
        match set.len() {
            0 => Pick::Hold,
            1 => Pick::One(set.iter().next().unwrap_or(PathId(0))),
            _ => Pick::Many(set),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    fn many(ids: &[u8]) -> Pick {
        Pick::Many(ids.iter().map(|&id| PathId(id)).collect())
    }

    #[test]
    fn table() {
        run_table(
            Redundant::new,
            vec![
                Case {
                    name: "all paths with room get a copy",
                    paths: vec![measured(0, 30, 10), measured(1, 10, 10), up(2)],
                    expected: vec![many(&[0, 1, 2]), many(&[0, 1, 2])],
                },
                Case {
                    name: "full and paced paths get none",
                    paths: vec![full(measured(0, 30, 10)), paced(up(1)), up(2), up(3)],
                    expected: vec![many(&[2, 3])],
                },
                Case {
                    name: "exactly one path with room: One",
                    paths: vec![full(measured(0, 30, 10)), up(4)],
                    expected: one(&[4]),
                },
                Case {
                    name: "all full holds",
                    paths: vec![full(up(0)), paced(up(1))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "down path skipped",
                    paths: vec![up(0), down(1), up(2)],
                    expected: vec![many(&[0, 2])],
                },
                Case {
                    name: "backups idle while a regular path is up",
                    paths: vec![backup(up(0)), up(1)],
                    expected: one(&[1]),
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(up(0)), backup(up(1)), down(2)],
                    expected: vec![many(&[0, 1])],
                },
                Case {
                    name: "equal rtts and no measurements make no difference",
                    paths: vec![measured(0, 20, 10), measured(1, 20, 10), up(2)],
                    expected: vec![many(&[0, 1, 2])],
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
