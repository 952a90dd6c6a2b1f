//! linkem: a user-space link emulator core.
//!
//! Everything in this library is sans-IO: it never reads a clock, opens a
//! socket or spawns a thread. [`link::Link`] models one direction of one path
//! (outages, random and Gilbert-Elliott loss, a drop-tail byte queue, a rate
//! or Mahimahi-trace serializer, delay and jitter); [`scenario`] turns a
//! scenario file into validated link configurations; [`sim`] is the clock, event
//! queue and set of links the workspace's simulators share. The `linkem` binary
//! wraps the model in an AF_PACKET forwarding loop.
#![forbid(unsafe_code)]

pub mod link;
pub mod loss;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod trace;

pub use link::{Admission, DropCause, Link, LinkConfig, LinkCounters, Outage};
