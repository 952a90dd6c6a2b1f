//! Which scheduler a session runs, with the tuning that scheduler reads: what the
//! configuration names. The daemon parses and range-checks it once, when the file is
//! read, against the names and ranges defined here; `AnyScheduler::new` then builds
//! it and cannot fail.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

use crate::blest::{Blest, BLEST_DEFAULT_LAMBDA, BLEST_DEFAULT_REORDER_WINDOW_BYTES};
use crate::earliest_arrival::{
    EarliestArrival, EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW, EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN,
};
use crate::ecf::{Ecf, ECF_DEFAULT_HYSTERESIS};
use crate::min_rtt::MinRtt;
use crate::redundant::Redundant;
use crate::round_robin::RoundRobin;
use crate::share::EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT;
use crate::weighted_round_robin::WeightedRoundRobin;

/// Valid ECF hysteresis β: a fraction of the slow path's delivery time (ECF paper,
/// §3.2, where β = 0.25), so 0 (none) to 1.
pub const ECF_HYSTERESIS_RANGE: RangeInclusive<f64> = 0.0..=1.0;
/// Valid initial BLEST λ. 1.0 is the paper's start value; λ scales the predicted
/// blocking, so a tenth of it to ten times covers "ignore reordering" to "send
/// only on the fast path".
pub const BLEST_LAMBDA_RANGE: RangeInclusive<f64> = 0.1..=10.0;
/// Valid BLEST reorder window in bytes: at least one full-size packet, at most
/// 1 TiB (well above the reorder buffer's largest capacity times the largest MTU).
pub const BLEST_REORDER_WINDOW_BYTES_RANGE: RangeInclusive<u64> = 1400..=1 << 40;
/// Valid earliest-arrival wait margin: waiting longer than a second for a full path
/// would stall a flow that another path could carry.
pub const EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE: RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(1);
/// Valid earliest-arrival share percentage (`share.rs`): 0 never shares; 1000 % of
/// the fastest path's capacity is more traffic than any set of paths carries.
pub const EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE: RangeInclusive<u16> = 0..=1000;
/// Valid peer reorder window, as the peer's `reorder.max_hold` can be set.
pub const REORDER_WINDOW_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(10);

/// Tuning of [`EarliestArrival`]; [`Default`] gives the values documented per field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EarliestArrivalParams {
    /// How much earlier a full path must deliver before earliest-arrival waits for
    /// it; within [`EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE`]. Default `None`: never wait
    /// while another path can send ([`EarliestArrival`]'s module docs say why).
    pub wait_margin: Option<Duration>,
    /// Every path gets at least three quarters of its capacity share once the
    /// traffic of the last half second reaches this percentage of the fastest
    /// path's capacity (`share.rs`); 0 never shares. Within
    /// [`EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE`]. Default 75
    /// ([`EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT`]).
    pub share_percent: u16,
    /// The longest the peer's reorder buffer holds a gap: no packet is sent where it
    /// would arrive later than that after a full path could deliver it. Within
    /// [`REORDER_WINDOW_RANGE`]. Default 200 ms, the daemon's default
    /// `reorder.max_hold_ms`; the daemon sets its own.
    pub reorder_window: Duration,
}

impl EarliestArrivalParams {
    /// The documented defaults.
    pub const DEFAULT: Self = EarliestArrivalParams {
        wait_margin: EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN,
        share_percent: EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT,
        reorder_window: EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW,
    };
}

impl Default for EarliestArrivalParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Tuning of [`Blest`]; [`Default`] gives the values documented per field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlestParams {
    /// Initial (and minimum) λ, within [`BLEST_LAMBDA_RANGE`]. Default 1.0, the
    /// paper's start value ([`BLEST_DEFAULT_LAMBDA`]).
    pub lambda: f64,
    /// The receiver's reorder window as BLEST sees it, in bytes, within
    /// [`BLEST_REORDER_WINDOW_BYTES_RANGE`]. Default 4096 × 1400 bytes, the daemon's
    /// default reorder capacity of 1400-byte packets
    /// ([`BLEST_DEFAULT_REORDER_WINDOW_BYTES`]); the daemon sets its own.
    pub reorder_window_bytes: u64,
}

impl BlestParams {
    /// The documented defaults.
    pub const DEFAULT: Self = BlestParams {
        lambda: BLEST_DEFAULT_LAMBDA,
        reorder_window_bytes: BLEST_DEFAULT_REORDER_WINDOW_BYTES,
    };
}

impl Default for BlestParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Tuning of [`Ecf`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EcfParams {
    /// Hysteresis β, within [`ECF_HYSTERESIS_RANGE`]. Default 0.25, the paper's
    /// value ([`ECF_DEFAULT_HYSTERESIS`]).
    pub hysteresis: f64,
}

impl EcfParams {
    /// The documented default.
    pub const DEFAULT: Self = EcfParams {
        hysteresis: ECF_DEFAULT_HYSTERESIS,
    };
}

impl Default for EcfParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A built-in scheduler, as the configuration names it, with its tuning. Parsing a
/// name ([`FromStr`]) gives the default tuning; [`fmt::Display`] prints the name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SchedulerChoice {
    /// mptund's own, see [`EarliestArrival`].
    EarliestArrival(EarliestArrivalParams),
    /// See [`Blest`].
    Blest(BlestParams),
    /// See [`Ecf`].
    Ecf(EcfParams),
    /// See [`MinRtt`].
    MinRtt,
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin,
    /// See [`RoundRobin`].
    RoundRobin,
    /// See [`Redundant`].
    Redundant,
}

impl SchedulerChoice {
    /// Every scheduler with its default tuning, in the order of [`Self::NAMES`].
    pub const ALL: [SchedulerChoice; 7] = [
        SchedulerChoice::EarliestArrival(EarliestArrivalParams::DEFAULT),
        SchedulerChoice::Blest(BlestParams::DEFAULT),
        SchedulerChoice::Ecf(EcfParams::DEFAULT),
        SchedulerChoice::MinRtt,
        SchedulerChoice::WeightedRoundRobin,
        SchedulerChoice::RoundRobin,
        SchedulerChoice::Redundant,
    ];

    /// The names the configuration accepts (exact, case-sensitive): mptund's own
    /// scheduler first, then the published ones from the most to the least
    /// arrival-aware, then the baselines.
    pub const NAMES: &'static [&'static str] = &[
        EarliestArrival::NAME,
        Blest::NAME,
        Ecf::NAME,
        MinRtt::NAME,
        WeightedRoundRobin::NAME,
        RoundRobin::NAME,
        Redundant::NAME,
    ];

    /// The configuration name of this scheduler.
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerChoice::EarliestArrival(_) => EarliestArrival::NAME,
            SchedulerChoice::Blest(_) => Blest::NAME,
            SchedulerChoice::Ecf(_) => Ecf::NAME,
            SchedulerChoice::MinRtt => MinRtt::NAME,
            SchedulerChoice::WeightedRoundRobin => WeightedRoundRobin::NAME,
            SchedulerChoice::RoundRobin => RoundRobin::NAME,
            SchedulerChoice::Redundant => Redundant::NAME,
        }
    }

    /// The same choice told about the peer's reorder buffer: the longest it holds a
    /// gap and how many bytes it holds. Only the schedulers that read them change.
    pub fn with_peer_reorder(self, hold: Duration, capacity_bytes: u64) -> Self {
        match self {
            SchedulerChoice::EarliestArrival(params) => {
                SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                    reorder_window: hold,
                    ..params
                })
            }
            SchedulerChoice::Blest(params) => SchedulerChoice::Blest(BlestParams {
                reorder_window_bytes: capacity_bytes,
                ..params
            }),
            other => other,
        }
    }

    /// Whether every parameter is within its documented range (NaN is in none). The
    /// configuration checks each field when it is read; this is for debug
    /// assertions and tests.
    pub fn is_in_range(&self) -> bool {
        match self {
            SchedulerChoice::EarliestArrival(params) => {
                params
                    .wait_margin
                    .is_none_or(|margin| EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE.contains(&margin))
                    && EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE.contains(&params.share_percent)
                    && REORDER_WINDOW_RANGE.contains(&params.reorder_window)
            }
            SchedulerChoice::Blest(params) => {
                BLEST_LAMBDA_RANGE.contains(&params.lambda)
                    && BLEST_REORDER_WINDOW_BYTES_RANGE.contains(&params.reorder_window_bytes)
            }
            SchedulerChoice::Ecf(params) => ECF_HYSTERESIS_RANGE.contains(&params.hysteresis),
            SchedulerChoice::MinRtt
            | SchedulerChoice::WeightedRoundRobin
            | SchedulerChoice::RoundRobin
            | SchedulerChoice::Redundant => true,
        }
    }
}

impl fmt::Display for SchedulerChoice {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// A scheduler name that is none of [`SchedulerChoice::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown scheduler {name:?}; valid schedulers are: {}",
    SchedulerChoice::NAMES.join(", ")
)]
pub struct UnknownScheduler {
    /// The name as given.
    pub name: String,
}

impl FromStr for SchedulerChoice {
    type Err = UnknownScheduler;

    /// The scheduler called `name` (exact, case-sensitive), with its default tuning.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|choice| choice.name() == name)
            .ok_or_else(|| UnknownScheduler {
                name: name.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_to_a_choice_that_prints_that_name() {
        assert_eq!(SchedulerChoice::ALL.len(), SchedulerChoice::NAMES.len());
        for (choice, &name) in SchedulerChoice::ALL.iter().zip(SchedulerChoice::NAMES) {
            let parsed: SchedulerChoice = name.parse().expect("listed name parses");
            assert_eq!(parsed, *choice);
            assert_eq!(parsed.to_string(), name);
            assert_eq!(parsed.name(), name);
        }
    }

    #[test]
    fn names_are_unique_and_earliest_arrival_comes_first() {
        let names = SchedulerChoice::NAMES;
        assert_eq!(names.len(), 7);
        assert_eq!(names[0], "earliest-arrival");
        for (index, name) in names.iter().enumerate() {
            assert!(!names[index + 1..].contains(name), "{name} twice");
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_valid_names() {
        let error = "fastest".parse::<SchedulerChoice>().unwrap_err();
        assert_eq!(error.name, "fastest");
        let message = error.to_string();
        assert!(message.contains("\"fastest\""), "{message}");
        for valid in SchedulerChoice::NAMES {
            assert!(message.contains(valid), "{message}");
        }
        assert!(
            "Round-Robin".parse::<SchedulerChoice>().is_err(),
            "names are exact"
        );
    }

    #[test]
    fn defaults_are_in_range_and_out_of_range_values_are_not() {
        for choice in SchedulerChoice::ALL {
            assert!(choice.is_in_range(), "{choice:?}");
        }
        let out_of_range = [
            SchedulerChoice::Ecf(EcfParams {
                hysteresis: f64::NAN,
            }),
            SchedulerChoice::Ecf(EcfParams { hysteresis: -0.1 }),
            SchedulerChoice::Blest(BlestParams {
                lambda: 0.0,
                ..BlestParams::DEFAULT
            }),
            SchedulerChoice::Blest(BlestParams {
                lambda: f64::INFINITY,
                ..BlestParams::DEFAULT
            }),
            SchedulerChoice::Blest(BlestParams {
                reorder_window_bytes: 0,
                ..BlestParams::DEFAULT
            }),
            SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                wait_margin: Some(Duration::from_secs(2)),
                ..EarliestArrivalParams::DEFAULT
            }),
            SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                share_percent: 1001,
                ..EarliestArrivalParams::DEFAULT
            }),
            SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                reorder_window: Duration::ZERO,
                ..EarliestArrivalParams::DEFAULT
            }),
        ];
        for choice in out_of_range {
            assert!(!choice.is_in_range(), "{choice:?}");
        }
    }

    #[test]
    fn the_peer_reorder_buffer_reaches_only_the_schedulers_that_read_it() {
        let hold = Duration::from_millis(120);
        let told: Vec<SchedulerChoice> = SchedulerChoice::ALL
            .into_iter()
            .map(|choice| choice.with_peer_reorder(hold, 2048 * 1400))
            .collect();
        assert_eq!(
            told[0],
            SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                reorder_window: hold,
                ..EarliestArrivalParams::DEFAULT
            })
        );
        assert_eq!(
            told[1],
            SchedulerChoice::Blest(BlestParams {
                reorder_window_bytes: 2048 * 1400,
                ..BlestParams::DEFAULT
            })
        );
        assert_eq!(told[2..], SchedulerChoice::ALL[2..]);
    }
}
