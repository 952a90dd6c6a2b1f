//! Which paths may carry data at all: the rule every scheduler shares.
//!
//! A path is eligible when it is [`PathState::Up`]; a backup path only while
//! no regular (non-backup) path is Up. Suspect and Down paths never get new
//! data. Whether an eligible path can take *this* packet now (window room,
//! pacer) is a separate question, [`PathView::can_send`], because some
//! schedulers (ECF, BLEST, earliest-arrival) reason about full paths too.
//!
//! Note the rule looks at liveness only: a regular path that is Up but has a
//! full window still keeps the backups idle (a backup is for outages, not for
//! extra capacity).

use std::time::Duration;

use crate::path::{PathId, PathState, PathView, Pick};

/// The eligibility rule evaluated once for a set of paths (one scan), then
/// applied per path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eligibility {
    /// True when no regular path is Up, so the backups stand in.
    use_backups: bool,
}

impl Eligibility {
    /// Evaluates the rule for `paths`.
    pub fn of(paths: &[PathView]) -> Self {
        let any_regular_up = paths
            .iter()
            .any(|path| path.state == PathState::Up && !path.backup);
        Eligibility {
            use_backups: !any_regular_up,
        }
    }

    /// True when `path` may carry data.
    #[inline]
    pub fn allows(&self, path: &PathView) -> bool {
        path.state == PathState::Up && path.backup == self.use_backups
    }

    /// True when the backups are standing in for the regular paths.
    pub fn uses_backups(&self) -> bool {
        self.use_backups
    }
}

/// The eligible paths of `paths`, in slice order.
pub fn eligible_paths(paths: &[PathView]) -> impl Iterator<Item = &PathView> + '_ {
    let rule = Eligibility::of(paths);
    paths.iter().filter(move |path| rule.allows(path))
}

/// The RTT schedulers rank paths by: smoothed, else minimum; `None` when
/// the path has no RTT sample yet.
pub(crate) fn ranking_rtt(path: &PathView) -> Option<Duration> {
    path.srtt.or(path.min_rtt)
}

/// The eligible path with the lowest [`ranking_rtt`] among those satisfying
/// `filter` (ties: lowest id), with that RTT. Paths without a sample are
/// never chosen.
pub(crate) fn lowest_rtt(
    paths: &[PathView],
    rule: Eligibility,
    filter: impl Fn(&PathView) -> bool,
) -> Option<(Duration, &PathView)> {
    paths
        .iter()
        .filter(|path| rule.allows(path) && filter(path))
        .filter_map(|path| ranking_rtt(path).map(|rtt| (rtt, path)))
        .min_by_key(|&(rtt, path)| (rtt, path.id))
}

/// What min-RTT decides before BLEST and ECF (both extend it) weigh waiting.
pub(crate) enum FastestFirst<'a> {
    /// Decided already: the fastest path can send, nothing is measured (spread
    /// over the least loaded), or no measured path can send (wait).
    Decided(Pick),
    /// The fastest path is full; the fastest one that can send is `slower`:
    /// wait for `fastest`, or use `slower`?
    Choose {
        fastest: (Duration, &'a PathView),
        slower: (Duration, &'a PathView),
    },
}

/// The shared first steps of the RTT-ranked schedulers that may wait.
pub(crate) fn fastest_first(paths: &[PathView], packet_len: usize) -> FastestFirst<'_> {
    let rule = Eligibility::of(paths);
    let Some(fastest) = lowest_rtt(paths, rule, |_| true) else {
        let pick = least_loaded(paths, rule, packet_len, |_| true).map_or(Pick::Hold, Pick::One);
        return FastestFirst::Decided(pick);
    };
    if fastest.1.can_send(packet_len) {
        return FastestFirst::Decided(Pick::One(fastest.1.id));
    }
    match lowest_rtt(paths, rule, |path| path.can_send(packet_len)) {
        Some(slower) => FastestFirst::Choose { fastest, slower },
        // Only unmeasured paths might have room: leave them to the probes and
        // wait for a measured one.
        None => FastestFirst::Decided(Pick::Hold),
    }
}

/// Among eligible paths that can send `packet_len` now and satisfy `filter`,
/// the one with the fewest bytes in flight (ties: lowest id). The spreading
/// fallback of the measurement-driven schedulers for paths nothing is known
/// about: it hands each fresh path some traffic, like round-robin would.
pub(crate) fn least_loaded(
    paths: &[PathView],
    rule: Eligibility,
    packet_len: usize,
    filter: impl Fn(&PathView) -> bool,
) -> Option<PathId> {
    paths
        .iter()
        .filter(|path| rule.allows(path) && path.can_send(packet_len) && filter(path))
        .min_by_key(|path| (path.bytes_in_flight, path.id))
        .map(|path| path.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathId;

    fn view(id: u8, state: PathState, backup: bool) -> PathView {
        let mut view = PathView::new(PathId(id), state);
        view.backup = backup;
        view
    }

    #[test]
    fn table() {
        use PathState::{Down, Suspect, Up};
        let cases: [(&str, Vec<PathView>, &[u8]); 5] = [
            (
                "regular up paths only",
                vec![view(0, Up, false), view(1, Up, true), view(2, Down, false)],
                &[0],
            ),
            (
                "backups stand in when no regular path is up",
                vec![
                    view(0, Suspect, false),
                    view(1, Up, true),
                    view(2, Down, true),
                ],
                &[1],
            ),
            (
                "nothing up",
                vec![view(0, Down, false), view(1, Down, true)],
                &[],
            ),
            ("no paths", vec![], &[]),
            (
                "suspect regular does not keep backups idle",
                vec![view(0, Suspect, false), view(1, Up, true)],
                &[1],
            ),
        ];
        for (name, paths, expected) in cases {
            let got: Vec<u8> = eligible_paths(&paths).map(|path| path.id.0).collect();
            assert_eq!(got, expected, "{name}");
        }
    }
}
