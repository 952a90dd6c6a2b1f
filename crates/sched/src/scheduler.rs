//! The scheduler interface. Its shape follows quinn's pluggable congestion
//! controllers: a small trait whose feedback hooks default to no-ops, so a scheduler
//! only implements the signals it uses. Each scheduler has a file of its own;
//! `any_scheduler` picks one by its configured name.

use std::time::Instant;

use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::share::PathShare;

/// Decides which path(s) carry each packet.
pub trait Scheduler {
    /// The name this scheduler is configured by (one of [`crate::SchedulerChoice::NAMES`]).
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

    /// What capacity shares do on `path` at `now`, for metrics; schedulers without
    /// shares report none.
    fn path_share(&self, _now: Instant, _path: PathId) -> PathShare {
        PathShare::default()
    }
}
