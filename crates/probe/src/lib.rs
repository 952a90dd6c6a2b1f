//! Per-path measurements for mptund, kept free of I/O: every method that depends on time
//! takes `now` from the caller, so estimators run under a simulated clock in tests.
//!
//! What lives here grows with the daemon: the RTT estimator of RFC 6298 / RFC 9002 and
//! the per-path statistics snapshot ([`PathStats`], named after quinn's). Later parts
//! (one-way-delay trend, delivery rate, loss detection, congestion control, liveness)
//! belong here too.
#![forbid(unsafe_code)]

mod rtt;
mod stats;

pub use rtt::RttEstimator;
pub use stats::{PathCounters, PathStats};
