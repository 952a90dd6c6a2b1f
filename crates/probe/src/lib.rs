//! Per-path measurements for mptund, kept free of I/O: every method that depends on time
//! takes `now` from the caller, so estimators run under a simulated clock in tests.
//!
//! What lives here: the RTT estimator of RFC 6298 / RFC 9002, per-path congestion
//! control ([`cc`]), and the per-path statistics snapshot ([`PathStats`], named after
//! quinn's).
#![forbid(unsafe_code)]

pub mod cc;
mod rtt;
mod stats;

pub use rtt::RttEstimator;
pub use stats::{PathCounters, PathStats};
