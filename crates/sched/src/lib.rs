//! Packet schedulers and the receiver's reorder buffer for mptund.
//!
//! Everything here is sans-IO: no sockets, no tasks, no clock reads. Every
//! time-dependent method takes `now: Instant` from the caller, so the daemon
//! drives these types from its event loop and the tests drive them with a
//! simulated clock (a 500 ms outage takes microseconds to test).
//!
//! - [`Scheduler`] decides, per packet, which path(s) carry it; one file per
//!   algorithm ([`RoundRobin`] is the baseline), dispatched through
//!   [`AnyScheduler`] so the hot path has no `Box<dyn>`.
//! - [`ReorderBuffer`] puts packets that arrived over paths of different delay
//!   back into session sequence order ([`SeqNo`]) before they reach the TUN.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod path;
mod reorder;
mod round_robin;
mod scheduler;
mod seq;

pub use path::{PacketClass, PacketInfo, PathId, PathSet, PathSetIter, PathState, PathView, Pick};
pub use reorder::{
    AdaptiveHold, HoldBounds, HoldHistogram, RejectReason, Rejected, ReorderBuffer, ReorderConfig,
    ReorderStats, HOLD_BUCKET_BOUNDS, MAX_REORDER_CAPACITY,
};
pub use round_robin::RoundRobin;
pub use scheduler::{build_scheduler, AnyScheduler, BuildError, Scheduler, SCHEDULER_NAMES};
pub use seq::SeqNo;
