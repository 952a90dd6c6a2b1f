//! The enum that dispatches to the built-in schedulers, and the factory that builds
//! one from its configured name. The daemon holds an [`AnyScheduler`] rather than a
//! `Box<dyn Scheduler>` because `pick` runs once per packet: a `match` is inlined, a
//! virtual call is not.

use std::time::{Duration, Instant};

use crate::blest::{Blest, BLEST_DEFAULT_LAMBDA, BLEST_DEFAULT_REORDER_WINDOW_BYTES};
use crate::earliest_arrival::{
    EarliestArrival, EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW, EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN,
};
use crate::ecf::{Ecf, ECF_DEFAULT_HYSTERESIS};
use crate::min_rtt::MinRtt;
use crate::path::{PacketInfo, PathId, PathView, Pick};
use crate::redundant::Redundant;
use crate::round_robin::RoundRobin;
use crate::scheduler::Scheduler;
use crate::share::{PathShare, EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT};
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

/// Names accepted by [`build_scheduler`], as written in the configuration:
/// mptund's own scheduler first, then the published ones from the most to
/// the least arrival-aware, then the baselines.
pub const SCHEDULER_NAMES: &[&str] = &[
    EarliestArrival::NAME,
    Blest::NAME,
    Ecf::NAME,
    MinRtt::NAME,
    WeightedRoundRobin::NAME,
    RoundRobin::NAME,
    Redundant::NAME,
];

/// Tuning of the schedulers that have any; each scheduler reads only its own
/// fields. [`Default`] gives the values documented per field.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerParams {
    /// ECF's hysteresis β, dimensionless, valid `0.0..=1.0`. Default 0.25,
    /// the paper's value ([`ECF_DEFAULT_HYSTERESIS`]).
    pub ecf_hysteresis: f64,
    /// BLEST's initial (and minimum) λ, dimensionless, valid `0.1..=10.0`.
    /// Default 1.0, the paper's start value ([`BLEST_DEFAULT_LAMBDA`]).
    pub blest_lambda: f64,
    /// The receiver's reorder window as BLEST sees it, in bytes; valid
    /// `1400..=2^40`. Default 4096 × 1400 bytes, the daemon's default reorder
    /// capacity of 1400-byte packets ([`BLEST_DEFAULT_REORDER_WINDOW_BYTES`]).
    pub blest_reorder_window_bytes: u64,
    /// How much earlier a full path must deliver before earliest-arrival waits
    /// for it; valid up to 1 s. Default `None`: never wait while another path
    /// can send ([`EarliestArrival`]'s module docs say why).
    pub earliest_arrival_wait_margin: Option<Duration>,
    /// Earliest-arrival gives every path at least three quarters of its capacity share
    /// once the traffic of the last half second reaches this percentage of the fastest
    /// path's capacity (`share.rs`); 0 never shares. Valid `0..=1000`. Default 75
    /// ([`EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT`]).
    pub earliest_arrival_share_percent: u16,
    /// The longest the peer's reorder buffer holds a gap; earliest-arrival does
    /// not send a packet where it would arrive later than that after a full path
    /// could deliver it. Valid `1 ms..=10 s`. Default 200 ms, the daemon's default
    /// `reorder.max_hold_ms`; the daemon sets its own.
    pub reorder_window: Duration,
}

impl Default for SchedulerParams {
    fn default() -> Self {
        SchedulerParams {
            ecf_hysteresis: ECF_DEFAULT_HYSTERESIS,
            blest_lambda: BLEST_DEFAULT_LAMBDA,
            blest_reorder_window_bytes: BLEST_DEFAULT_REORDER_WINDOW_BYTES,
            earliest_arrival_wait_margin: EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN,
            earliest_arrival_share_percent: EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT,
            reorder_window: EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW,
        }
    }
}

impl SchedulerParams {
    /// Checks every field against its documented range.
    pub fn validate(&self) -> Result<(), BuildError> {
        let invalid = |parameter: &'static str, value: String, valid: &'static str| {
            Err(BuildError::InvalidParameter {
                parameter,
                value,
                valid,
            })
        };
        if !(0.0..=1.0).contains(&self.ecf_hysteresis) {
            return invalid(
                "ecf_hysteresis",
                self.ecf_hysteresis.to_string(),
                "0.0 to 1.0",
            );
        }
        if !(0.1..=10.0).contains(&self.blest_lambda) {
            return invalid("blest_lambda", self.blest_lambda.to_string(), "0.1 to 10.0");
        }
        if !(1400..=1 << 40).contains(&self.blest_reorder_window_bytes) {
            return invalid(
                "blest_reorder_window_bytes",
                self.blest_reorder_window_bytes.to_string(),
                "1400 to 1099511627776 bytes",
            );
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&self.reorder_window) {
            return invalid(
                "reorder_window",
                format!("{:?}", self.reorder_window),
                "1 ms to 10 s",
            );
        }
        if self.earliest_arrival_share_percent > 1000 {
            return invalid(
                "earliest_arrival_share_percent",
                self.earliest_arrival_share_percent.to_string(),
                "0 to 1000",
            );
        }
        if self
            .earliest_arrival_wait_margin
            .is_some_and(|margin| margin > Duration::from_secs(1))
        {
            return invalid(
                "earliest_arrival_wait_margin",
                format!("{:?}", self.earliest_arrival_wait_margin),
                "0 to 1 s",
            );
        }
        Ok(())
    }
}

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
    /// A [`SchedulerParams`] field is out of its range (NaN is out of every
    /// range); the message names the field and the valid range.
    #[error("scheduler parameter {parameter} = {value} is out of range; valid: {valid}")]
    InvalidParameter {
        /// The field name, as in [`SchedulerParams`].
        parameter: &'static str,
        /// The value that was given.
        value: String,
        /// The valid range, with unit.
        valid: &'static str,
    },
}

/// Builds the scheduler configured as `name` (exact, case-sensitive match
/// against [`SCHEDULER_NAMES`]) with `params`. All parameters are validated,
/// whichever scheduler is asked for, so a bad value is reported at start even
/// if it only matters after a later change of scheduler.
pub fn build_scheduler(name: &str, params: &SchedulerParams) -> Result<AnyScheduler, BuildError> {
    params.validate()?;
    match name {
        EarliestArrival::NAME => Ok(EarliestArrival::new(
            params.earliest_arrival_wait_margin,
            params.reorder_window,
        )
        .with_share_percent(params.earliest_arrival_share_percent)
        .into()),
        Blest::NAME => {
            Ok(Blest::new(params.blest_lambda, params.blest_reorder_window_bytes).into())
        }
        Ecf::NAME => Ok(Ecf::new(params.ecf_hysteresis).into()),
        MinRtt::NAME => Ok(MinRtt::new().into()),
        WeightedRoundRobin::NAME => Ok(WeightedRoundRobin::new().into()),
        RoundRobin::NAME => Ok(RoundRobin::new().into()),
        Redundant::NAME => Ok(Redundant::new().into()),
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
            let scheduler =
                build_scheduler(name, &SchedulerParams::default()).expect("listed name must build");
            assert_eq!(scheduler.name(), name);
        }
    }

    #[test]
    fn round_robin_builds_and_dispatches() {
        let mut scheduler = build_scheduler("round-robin", &SchedulerParams::default()).unwrap();
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
    fn unknown_name_is_an_error_listing_valid_names() {
        let err = build_scheduler("fastest", &SchedulerParams::default()).unwrap_err();
        let BuildError::UnknownScheduler { name } = &err else {
            panic!("expected UnknownScheduler, got {err:?}");
        };
        assert_eq!(name, "fastest");
        let message = err.to_string();
        assert!(message.contains("\"fastest\""), "{message}");
        for valid in SCHEDULER_NAMES {
            assert!(message.contains(valid), "{message}");
        }
        assert!(
            build_scheduler("Round-Robin", &SchedulerParams::default()).is_err(),
            "names are exact"
        );
    }

    #[test]
    fn names_are_unique_and_earliest_arrival_comes_first() {
        assert_eq!(SCHEDULER_NAMES.len(), 7);
        assert_eq!(SCHEDULER_NAMES[0], "earliest-arrival");
        for (index, name) in SCHEDULER_NAMES.iter().enumerate() {
            assert!(!SCHEDULER_NAMES[index + 1..].contains(name), "{name} twice");
        }
    }

    #[test]
    fn default_params_are_valid() {
        assert!(SchedulerParams::default().validate().is_ok());
    }

    #[test]
    fn invalid_params_name_the_field_and_the_range() {
        let base = SchedulerParams::default();
        let cases = [
            (
                "ecf_hysteresis",
                SchedulerParams {
                    ecf_hysteresis: f64::NAN,
                    ..base.clone()
                },
            ),
            (
                "ecf_hysteresis",
                SchedulerParams {
                    ecf_hysteresis: -0.1,
                    ..base.clone()
                },
            ),
            (
                "blest_lambda",
                SchedulerParams {
                    blest_lambda: 0.0,
                    ..base.clone()
                },
            ),
            (
                "blest_lambda",
                SchedulerParams {
                    blest_lambda: f64::INFINITY,
                    ..base.clone()
                },
            ),
            (
                "blest_reorder_window_bytes",
                SchedulerParams {
                    blest_reorder_window_bytes: 0,
                    ..base.clone()
                },
            ),
            (
                "earliest_arrival_wait_margin",
                SchedulerParams {
                    earliest_arrival_wait_margin: Some(Duration::from_secs(2)),
                    ..base.clone()
                },
            ),
        ];
        for (field, params) in cases {
            // Every scheduler refuses, not only the one that reads the field.
            let err = build_scheduler("round-robin", &params).unwrap_err();
            let BuildError::InvalidParameter { parameter, .. } = &err else {
                panic!("expected InvalidParameter, got {err:?}");
            };
            assert_eq!(*parameter, field);
            let message = err.to_string();
            assert!(
                message.contains(field) && message.contains("valid"),
                "{message}"
            );
        }
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
        for &name in SCHEDULER_NAMES {
            let mut scheduler = build_scheduler(name, &SchedulerParams::default()).unwrap();
            let pick = scheduler.pick(now, &packet, &paths);
            assert_ne!(pick, Pick::Hold, "{name} must get a fresh session going");
        }
    }
}
