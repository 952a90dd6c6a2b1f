//! Per-path measurements for mptund, kept free of I/O: every method that depends on time
//! takes `now` from the caller, so estimators run under a simulated clock in tests.
//!
//! What lives here, one concern per module:
//!
//! * [`ack`]: the receiver's acknowledgement ranges and timing (RFC 9000 section 13.2),
//! * `sent`: the sender's in-flight record,
//! * `rtt`: the RTT estimator of RFC 6298 / RFC 9002 section 5,
//! * `loss`: loss detection, probe timeout, persistent congestion (RFC 9002
//!   sections 6 and 7.6) and the loss rate,
//! * `rate`: delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation),
//! * `owd`: one-way queuing delay and its trend,
//! * `liveness`: the Active / Suspect / Down / Probing state machine,
//! * `path`: [`PathProbe`], all of the above for one path around a congestion
//!   controller ([`cc`]),
//! * the per-path statistics snapshot ([`PathStats`], named after quinn's).
#![forbid(unsafe_code)]

pub mod ack;
pub mod cc;
pub mod liveness;
pub mod loss;
pub mod owd;
pub mod path;
pub mod rate;
mod rtt;
pub mod sent;
mod seq;
mod stats;

pub use ack::{
    AckRanges, AckSummary, AckTracker, ACK_ELICITING_THRESHOLD, MAX_ACK_RANGES,
    SMALL_DATAGRAMS_THRESHOLD,
};
pub use cc::{AckSignals, AnyController, Controller, ControllerChoice, Pacer, UnknownController};
pub use liveness::{
    Liveness, LivenessChange, LivenessMonitor, DOWN_AFTER_PTOS, DOWN_FLOOR, SUSPECT_AFTER_PTOS,
    SUSPECT_FLOOR,
};
pub use loss::{
    LossDetector, LossRound, GRANULARITY, INITIAL_RTT, LOSS_RATE_WEIGHT, MAX_PACKET_THRESHOLD,
    PACKET_THRESHOLD, PERSISTENT_CONGESTION_THRESHOLD, TIME_THRESHOLD_SLACK_SHIFT,
};
pub use owd::{OwdEstimator, BASE_DELAY_WINDOW, QUIET_SAMPLES, TREND_MIN_SAMPLES, TREND_SAMPLES};
pub use path::{AckResult, LostPacket, PathProbe, ProbeConfig};
pub use rate::{RateEstimator, RateSample};
pub use rtt::RttEstimator;
pub use sent::{SentPacket, SentPackets};
pub use stats::{PathCounters, PathStats};
