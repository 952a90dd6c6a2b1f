//! Round-robin striping: the baseline scheduler.
//!
//! This is the dispatcher of the high-speed-train study (Li et al., "A
//! Performance Analysis Model of TCP over Multiple Heterogeneous Paths for 5G
//! Mobile Services", Sustainability 2018, `seeds/003_*`, §3 network model and
//! §4.1): segments are sent over the n links "in a periodically repeated
//! order", ignoring each link's rate and delay. The paper shows this collapses
//! throughput once the links' delays differ, which is exactly why mptund needs
//! the smarter schedulers; round-robin stays as the reference to measure them
//! against and as the fallback that needs no measurements at all.
//!
//! Two adaptations the paper's static model does not need:
//! - Paths come and go. Rather than an index into the slice (which shifts when
//!   a path disappears), the scheduler remembers the last path id it picked
//!   and continues with the next higher usable id, wrapping to the lowest.
//!   Every usable path is therefore picked once per cycle however the set
//!   changes, and the slice may be in any order (the daemon passes it sorted).
//! - A path whose congestion window is full is skipped for this packet, and
//!   backup paths carry data only while no regular path is Up.

use std::time::Instant;

use crate::eligible::Eligibility;
use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::scheduler::Scheduler;

/// Rotates over the usable paths, one packet each.
#[derive(Clone, Debug, Default)]
pub struct RoundRobin {
    /// The path that got the previous packet; the rotation resumes after it.
    last_picked: Option<PathId>,
}

impl RoundRobin {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "round-robin";

    /// A scheduler that starts with the lowest usable path id.
    pub fn new() -> Self {
        RoundRobin::default()
    }
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let rule = Eligibility::of(paths);

        // Among usable paths with room: the lowest id above the last pick
        // (continue the cycle) and the lowest id overall (wrap around).
        let mut next_after_last: Option<PathId> = None;
        let mut lowest: Option<PathId> = None;
        for path in paths {
            if !rule.allows(path) || !path.can_send(packet.len) {
                continue;
            }
            lowest = Some(lowest.map_or(path.id, |id| id.min(path.id)));
            if self.last_picked.is_none_or(|last| path.id > last) {
                next_after_last = Some(next_after_last.map_or(path.id, |id| id.min(path.id)));
            }
        }

        match next_after_last.or(lowest) {
            Some(id) => {
                self.last_picked = Some(id);
                Pick::One(id)
            }
            None => Pick::Hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PacketClass, PathState};

    const PACKET: PacketInfo = PacketInfo {
        len: 1400,
        class: PacketClass::Bulk,
        queued_bytes: 0,
    };

    fn up(id: u8) -> PathView {
        PathView::new(PathId(id), PathState::Up)
    }

    fn down(id: u8) -> PathView {
        PathView::new(PathId(id), PathState::Down)
    }

    fn backup(mut view: PathView) -> PathView {
        view.backup = true;
        view
    }

    fn full(mut view: PathView) -> PathView {
        view.cwnd_bytes = Some(10_000);
        view.bytes_in_flight = 10_000;
        view
    }

    fn picks(scheduler: &mut RoundRobin, paths: &[PathView], count: usize) -> Vec<Pick> {
        let now = Instant::now();
        (0..count)
            .map(|_| scheduler.pick(now, &PACKET, paths))
            .collect()
    }

    fn one(ids: &[u8]) -> Vec<Pick> {
        ids.iter().map(|&id| Pick::One(PathId(id))).collect()
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            paths: Vec<PathView>,
            expected: Vec<Pick>,
        }
        let cases = [
            Case {
                name: "even rotation over three paths",
                paths: vec![up(0), up(1), up(2)],
                expected: one(&[0, 1, 2, 0, 1, 2, 0, 1, 2]),
            },
            Case {
                name: "slice order does not matter",
                paths: vec![up(7), up(2), up(4)],
                expected: one(&[2, 4, 7, 2, 4, 7]),
            },
            Case {
                name: "down path skipped",
                paths: vec![up(0), down(1), up(2)],
                expected: one(&[0, 2, 0, 2]),
            },
            Case {
                name: "backup unused while a regular path is up",
                paths: vec![backup(up(0)), up(1), up(2)],
                expected: one(&[1, 2, 1, 2]),
            },
            Case {
                name: "backup unused while the regular paths are up but full",
                paths: vec![backup(up(0)), full(up(1))],
                expected: vec![Pick::Hold, Pick::Hold],
            },
            Case {
                name: "backups rotate when no regular path is up",
                paths: vec![down(0), backup(up(1)), backup(up(2)), backup(down(3))],
                expected: one(&[1, 2, 1, 2]),
            },
            Case {
                name: "full window skipped",
                paths: vec![up(0), full(up(1)), up(2)],
                expected: one(&[0, 2, 0]),
            },
            Case {
                name: "no cwnd is never full",
                paths: vec![{
                    let mut view = up(3);
                    view.bytes_in_flight = u64::MAX / 2;
                    view
                }],
                expected: one(&[3, 3]),
            },
            Case {
                name: "all full holds",
                paths: vec![full(up(0)), full(up(1))],
                expected: vec![Pick::Hold],
            },
            Case {
                name: "all down holds",
                paths: vec![down(0), backup(down(1))],
                expected: vec![Pick::Hold],
            },
            Case {
                name: "no paths holds",
                paths: vec![],
                expected: vec![Pick::Hold, Pick::Hold],
            },
        ];
        for case in cases {
            let mut scheduler = RoundRobin::new();
            let got = picks(&mut scheduler, &case.paths, case.expected.len());
            assert_eq!(got, case.expected, "{}", case.name);
        }
    }

    #[test]
    fn path_set_changing_mid_rotation_stays_fair() {
        let mut scheduler = RoundRobin::new();
        // 0, 1 go out; then path 2 goes down and path 3 appears: continue after 1.
        assert_eq!(
            picks(&mut scheduler, &[up(0), up(1), up(2)], 2),
            one(&[0, 1])
        );
        assert_eq!(
            picks(&mut scheduler, &[up(0), up(1), down(2), up(3)], 4),
            one(&[3, 0, 1, 3])
        );
        // The last picked path (3) vanishes: resume with the next higher id, wrap.
        assert_eq!(
            picks(&mut scheduler, &[up(0), up(1), up(5)], 3),
            one(&[5, 0, 1])
        );
        // Last picked (1) vanishes and nothing is above it: wrap to the lowest.
        assert_eq!(picks(&mut scheduler, &[up(0)], 2), one(&[0, 0]));
    }

    #[test]
    fn hold_does_not_disturb_the_rotation() {
        let mut scheduler = RoundRobin::new();
        assert_eq!(picks(&mut scheduler, &[up(0), up(1), up(2)], 1), one(&[0]));
        assert_eq!(
            picks(&mut scheduler, &[full(up(0)), full(up(1))], 1),
            vec![Pick::Hold]
        );
        assert_eq!(
            picks(&mut scheduler, &[up(0), up(1), up(2)], 3),
            one(&[1, 2, 0])
        );
    }

    #[test]
    fn paced_and_suspect_paths_are_skipped() {
        let mut scheduler = RoundRobin::new();
        let mut paced = up(1);
        paced.pacing_ready = false;
        let suspect = PathView::new(PathId(2), PathState::Suspect);
        assert_eq!(
            picks(&mut scheduler, &[up(0), paced, suspect], 3),
            one(&[0, 0, 0])
        );
        assert_eq!(
            picks(&mut scheduler, &[paced, suspect], 1),
            vec![Pick::Hold]
        );
    }

    #[test]
    fn each_usable_path_gets_an_equal_share() {
        let mut scheduler = RoundRobin::new();
        let paths = [up(0), down(1), up(2), backup(up(3)), up(4)];
        let mut counts = [0u32; 5];
        for pick in picks(&mut scheduler, &paths, 300) {
            let Pick::One(id) = pick else {
                panic!("expected one path, got {pick:?}")
            };
            counts[usize::from(id.0)] += 1;
        }
        assert_eq!(counts, [100, 0, 100, 0, 100]);
    }
}
