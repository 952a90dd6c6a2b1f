//! The enum that dispatches to the built-in schedulers, built from a
//! [`SchedulerChoice`]. The daemon holds an [`AnyScheduler`] rather than a
//! `Box<dyn Scheduler>` because `pick` runs once per packet: a `match` is inlined, a
//! virtual call is not.

use std::time::Instant;

use crate::blest::Blest;
use crate::choice::SchedulerChoice;
use crate::earliest_arrival::EarliestArrival;
use crate::ecf::Ecf;
use crate::min_rtt::MinRtt;
use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::redundant::Redundant;
use crate::round_robin::RoundRobin;
use crate::scheduler::Scheduler;
use crate::share::PathShare;
use crate::weighted_round_robin::WeightedRoundRobin;

/// Enum dispatch over the built-in schedulers (hot path: no `Box<dyn>`).
// The credit tables of WeightedRoundRobin and EarliestArrival's capacity shares make
// this about 1.5 kB; there is one per session, and boxing it would cost a pointer chase on
// every pick.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum AnyScheduler {
    /// See [`EarliestArrival`].
    EarliestArrival(EarliestArrival),
    /// See [`Blest`].
    Blest(Blest),
    /// See [`Ecf`].
    Ecf(Ecf),
    /// See [`MinRtt`].
    MinRtt(MinRtt),
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin(WeightedRoundRobin),
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`Redundant`].
    Redundant(Redundant),
}

/// Runs `$body` with `$inner` bound to whichever scheduler `$any` holds.
macro_rules! dispatch {
    ($any:expr, $inner:ident => $body:expr) => {
        match $any {
            AnyScheduler::EarliestArrival($inner) => $body,
            AnyScheduler::Blest($inner) => $body,
            AnyScheduler::Ecf($inner) => $body,
            AnyScheduler::MinRtt($inner) => $body,
            AnyScheduler::WeightedRoundRobin($inner) => $body,
            AnyScheduler::RoundRobin($inner) => $body,
            AnyScheduler::Redundant($inner) => $body,
        }
    };
}

macro_rules! impl_from {
    ($($variant:ident),*) => {
        $(impl From<$variant> for AnyScheduler {
            fn from(scheduler: $variant) -> Self {
                AnyScheduler::$variant(scheduler)
            }
        })*
    };
}

impl_from!(
    EarliestArrival,
    Blest,
    Ecf,
    MinRtt,
    WeightedRoundRobin,
    RoundRobin,
    Redundant
);

impl Scheduler for AnyScheduler {
    fn name(&self) -> &'static str {
        dispatch!(self, inner => inner.name())
    }

    #[inline]
    fn pick(&mut self, now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        dispatch!(self, inner => inner.pick(now, packet, paths))
    }

    fn on_sent(&mut self, now: Instant, path: PathId, bytes: usize) {
        dispatch!(self, inner => inner.on_sent(now, path, bytes))
    }

    fn on_acked(&mut self, now: Instant, path: PathId, bytes: usize) {
        dispatch!(self, inner => inner.on_acked(now, path, bytes))
    }

    fn on_lost(&mut self, now: Instant, path: PathId, bytes: usize) {
        dispatch!(self, inner => inner.on_lost(now, path, bytes))
    }

    fn path_share(&self, now: Instant, path: PathId) -> PathShare {
        dispatch!(self, inner => inner.path_share(now, path))
    }
}

impl AnyScheduler {
    /// Builds the scheduler `choice` names with its tuning. The configuration
    /// range-checked the tuning when it was read, so this cannot fail.
    pub fn new(choice: SchedulerChoice) -> Self {
        debug_assert!(
            choice.is_in_range(),
            "unchecked scheduler tuning: {choice:?}"
        );
        match choice {
            SchedulerChoice::EarliestArrival(params) => {
                EarliestArrival::new(params.wait_margin, params.reorder_window)
                    .with_share_percent(params.share_percent)
                    .into()
            }
            SchedulerChoice::Blest(params) => {
                Blest::new(params.lambda, params.reorder_window_bytes).into()
            }
            SchedulerChoice::Ecf(params) => Ecf::new(params.hysteresis).into(),
            SchedulerChoice::MinRtt => MinRtt::new().into(),
            SchedulerChoice::WeightedRoundRobin => WeightedRoundRobin::new().into(),
            SchedulerChoice::RoundRobin => RoundRobin::new().into(),
            SchedulerChoice::Redundant => Redundant::new().into(),
        }
    }
}

impl From<SchedulerChoice> for AnyScheduler {
    fn from(choice: SchedulerChoice) -> Self {
        AnyScheduler::new(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_builds_the_scheduler_of_its_name() {
        for choice in SchedulerChoice::ALL {
            assert_eq!(AnyScheduler::new(choice).name(), choice.name());
        }
    }
    use crate::path::{PacketClass, PathState};

    #[test]
    fn round_robin_builds_and_dispatches() {
        let mut scheduler = AnyScheduler::new(SchedulerChoice::RoundRobin);
        let now = Instant::now();
        let packet = PacketInfo {
            len: 1200,
            class: PacketClass::Bulk,
            queued_bytes: 0,
        };
        let paths = [
            PathView::new(PathId(0), PathState::Up),
            PathView::new(PathId(1), PathState::Up),
        ];
        assert_eq!(scheduler.pick(now, &packet, &paths), Pick::One(PathId(0)));
        scheduler.on_sent(now, PathId(0), 1200);
        scheduler.on_acked(now, PathId(0), 1200);
        scheduler.on_lost(now, PathId(0), 1200);
        assert_eq!(scheduler.pick(now, &packet, &paths), Pick::One(PathId(1)));
    }

    #[test]
    fn every_scheduler_places_a_packet_on_a_fresh_session() {
        let now = Instant::now();
        let packet = PacketInfo {
            len: 1400,
            class: PacketClass::Bulk,
            queued_bytes: 0,
        };
        let paths = [
            PathView::new(PathId(0), PathState::Up),
            PathView::new(PathId(1), PathState::Up),
        ];
        for choice in SchedulerChoice::ALL {
            let mut scheduler = AnyScheduler::new(choice);
            let pick = scheduler.pick(now, &packet, &paths);
            assert_ne!(pick, Pick::Hold, "{choice} must get a fresh session going");
        }
    }
}
