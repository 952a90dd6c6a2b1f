//! The scheduler interface, the enum that dispatches to the built-in
//! schedulers, and the factory that builds one from its configured name.
//!
//! The shape follows quinn's pluggable congestion controllers: a small trait
//! whose feedback hooks default to no-ops, so a scheduler only implements the
//! signals it uses. The daemon holds an [`AnyScheduler`] rather than a
//! `Box<dyn Scheduler>` because `pick` runs once per packet: a `match` is
//! inlined, a virtual call is not.

use std::time::Instant;

use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::round_robin::RoundRobin;

/// Decides which path(s) carry each packet.
pub trait Scheduler {
    /// The name this scheduler is configured by (one of [`SCHEDULER_NAMES`]).
    fn name(&self) -> &'static str;

    /// Chooses the path(s) for `packet` among `paths` (the caller passes them
    /// sorted by id). Must not allocate.
    fn pick(&mut self, now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick;

    /// `bytes` were sent on `path`.
    fn on_sent(&mut self, _now: Instant, _path: PathId, _bytes: usize) {}

    /// `bytes` sent on `path` were acknowledged by the peer.
    fn on_acked(&mut self, _now: Instant, _path: PathId, _bytes: usize) {}

    /// `bytes` sent on `path` were declared lost.
    fn on_lost(&mut self, _now: Instant, _path: PathId, _bytes: usize) {}
}

/// Enum dispatch over the built-in schedulers (hot path: no `Box<dyn>`).
#[derive(Clone, Debug)]
pub enum AnyScheduler {
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
}

impl From<RoundRobin> for AnyScheduler {
    fn from(scheduler: RoundRobin) -> Self {
        AnyScheduler::RoundRobin(scheduler)
    }
}

impl Scheduler for AnyScheduler {
    fn name(&self) -> &'static str {
        match self {
            AnyScheduler::RoundRobin(inner) => inner.name(),
        }
    }

    #[inline]
    fn pick(&mut self, now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        match self {
            AnyScheduler::RoundRobin(inner) => inner.pick(now, packet, paths),
        }
    }

    fn on_sent(&mut self, now: Instant, path: PathId, bytes: usize) {
        match self {
            AnyScheduler::RoundRobin(inner) => inner.on_sent(now, path, bytes),
        }
    }

    fn on_acked(&mut self, now: Instant, path: PathId, bytes: usize) {
        match self {
            AnyScheduler::RoundRobin(inner) => inner.on_acked(now, path, bytes),
        }
    }

    fn on_lost(&mut self, now: Instant, path: PathId, bytes: usize) {
        match self {
            AnyScheduler::RoundRobin(inner) => inner.on_lost(now, path, bytes),
        }
    }
}

/// Names accepted by [`build_scheduler`], as written in the configuration.
pub const SCHEDULER_NAMES: &[&str] = &[RoundRobin::NAME];

/// Why a scheduler could not be built from configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The configured name matches no built-in scheduler; the message lists the
    /// valid names so the user can fix the configuration.
    #[error(
        "unknown scheduler {name:?}; valid schedulers are: {}",
        SCHEDULER_NAMES.join(", ")
    )]
    UnknownScheduler {
        /// The name that was asked for.
        name: String,
    },
}

/// Builds the scheduler configured as `name` (exact, case-sensitive match
/// against [`SCHEDULER_NAMES`]).
pub fn build_scheduler(name: &str) -> Result<AnyScheduler, BuildError> {
    match name {
        RoundRobin::NAME => Ok(RoundRobin::new().into()),
        _ => Err(BuildError::UnknownScheduler {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PacketClass, PathState};

    #[test]
    fn every_listed_name_builds_a_scheduler_of_that_name() {
        for &name in SCHEDULER_NAMES {
            let scheduler = build_scheduler(name).expect("listed name must build");
            assert_eq!(scheduler.name(), name);
        }
    }

    #[test]
    fn round_robin_builds_and_dispatches() {
        let mut scheduler = build_scheduler("round-robin").unwrap();
        let now = Instant::now();
        let packet = PacketInfo {
            len: 1200,
            class: PacketClass::Bulk,
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
    fn unknown_name_is_an_error_listing_valid_names() {
        let err = build_scheduler("fastest").unwrap_err();
        let BuildError::UnknownScheduler { name } = &err;
        assert_eq!(name, "fastest");
        let message = err.to_string();
        assert!(message.contains("\"fastest\""), "{message}");
        for valid in SCHEDULER_NAMES {
            assert!(message.contains(valid), "{message}");
        }
        assert!(build_scheduler("Round-Robin").is_err(), "names are exact");
    }
}
