//! Packet schedulers and the receiver's reorder buffer for mptund.
//!
//! Everything here is sans-IO: no sockets, no tasks, no clock reads. Every
//! time-dependent method takes `now: Instant` from the caller, so the daemon
//! drives these types from its event loop and the tests drive them with a
//! simulated clock (a 500 ms outage takes microseconds to test).
//!
//! - [`Scheduler`] decides, per packet, which path(s) carry it; one file per
//!   algorithm ([`EarliestArrival`] is mptund's own, [`Blest`], [`Ecf`],
//!   [`MinRtt`], [`Redundant`] the published ones, [`RoundRobin`] and
//!   [`WeightedRoundRobin`] the baselines), dispatched through
//!   [`AnyScheduler`] so the hot path has no `Box<dyn>`; built from a
//!   [`SchedulerChoice`], the name and tuning the configuration gives.
//! - [`predicted_arrival`] and [`latency_critical_paths`] predict when a
//!   packet sent now on a path reaches the receiver (the EDPF model), shared
//!   by the schedulers and the daemon; [`Eligibility`] is the one rule of
//!   which paths may carry data.
//! - [`ReorderBuffer`] puts packets that arrived over paths of different delay
//!   back into session sequence order ([`SeqNo`]) before they reach the TUN.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod any_scheduler;
mod blest;
mod choice;
mod earliest_arrival;
mod ecf;
mod eligible;
mod min_rtt;
mod path;
mod predict;
mod redundant;
mod reorder;
mod round_robin;
mod scheduler;
mod seq;
mod share;
#[cfg(test)]
mod test_support;
mod weighted_round_robin;

pub use any_scheduler::AnyScheduler;
pub use blest::{
    Blest, BLEST_DEFAULT_LAMBDA, BLEST_DEFAULT_REORDER_WINDOW_BYTES, BLEST_LAMBDA_MAX_FACTOR,
    BLEST_LAMBDA_STEP_DOWN, BLEST_LAMBDA_STEP_UP,
};
pub use choice::{
    BlestParams, EarliestArrivalParams, EcfParams, SchedulerChoice, UnknownScheduler,
    BLEST_LAMBDA_RANGE, BLEST_REORDER_WINDOW_BYTES_RANGE, EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE,
    EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE, ECF_HYSTERESIS_RANGE, REORDER_WINDOW_RANGE,
};
pub use earliest_arrival::EarliestArrival;
pub use ecf::{Ecf, ECF_DEFAULT_HYSTERESIS};
pub use eligible::{eligible_paths, Eligibility};
pub use min_rtt::MinRtt;
pub use path::{PacketClass, PacketInfo, PathId, PathSet, PathSetIter, PathState, PathView, Pick};
pub use predict::{
    arrival_at_shown_rate, backlog_drain_time, capacity_bytes_per_sec, earliest_possible_arrival,
    latency_critical_paths, one_way_delay_estimate, predicted_arrival, predicted_arrival_when_open,
    rate_estimate_bytes_per_sec, repair_pick, repair_route, RepairRoute, LATENCY_CRITICAL_COPIES,
};
pub use redundant::Redundant;
pub use reorder::{
    AdaptiveHold, DelayEqualizer, DelayLine, Equalization, EqualizeScope, HoldBounds,
    HoldHistogram, RejectReason, Rejected, ReorderBuffer, ReorderConfig, ReorderStats,
    DATA_ACTIVE_WINDOW, HEARD_WINDOW, HOLD_BUCKET_BOUNDS, MAX_REORDER_CAPACITY,
    RELEASE_IDLE_WINDOW_AFTER, REORDER_WORK_PER_CALL,
};
pub use round_robin::RoundRobin;
pub use scheduler::Scheduler;
pub use seq::SeqNo;
pub use share::{PathShare, EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT};
pub use weighted_round_robin::WeightedRoundRobin;
