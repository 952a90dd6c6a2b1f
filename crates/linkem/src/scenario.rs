//! Scenario files: the paths of a test bed and the conditions of each direction.
//!
//! A scenario is TOML. Fields under `[defaults]` apply to every path and
//! direction, fields of a `[[paths]]` entry to both its directions, and
//! `[paths.up]` / `[paths.down]` to one direction ("up" = client to server).
//! The most specific value wins. Rates are multiplied by `rate_scale`, so a
//! scenario keeps the rates measured in its source paper and still fits a
//! small machine. See `config/scenarios/README.md` for every field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::link::{LinkConfig, Outage};
use crate::loss::GilbertElliottConfig;
use crate::trace::{DeliveryTrace, StepTrace, TraceError, MAHIMAHI_OPPORTUNITY_BYTES};

/// What is wrong with a scenario, and where.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The scenario or a trace file it names could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The scenario is not valid TOML or has unknown / mistyped fields.
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    /// A value is out of range or contradicts another.
    #[error("{path}: path `{path_name}` {direction}: {message}")]
    Invalid {
        path: PathBuf,
        path_name: String,
        direction: &'static str,
        message: String,
    },
    /// A scenario-wide value is out of range.
    #[error("{path}: {message}")]
    InvalidGlobal { path: PathBuf, message: String },
    /// A trace file named by the scenario is malformed.
    #[error("trace {path}: {source}")]
    Trace { path: PathBuf, source: TraceError },
}

/// Gilbert-Elliott parameters as written in a scenario (probabilities in 0..=1).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliottSpec {
    pub p_good_to_bad: f64,
    pub p_bad_to_good: f64,
    #[serde(default)]
    pub loss_in_good: f64,
    #[serde(default = "always")]
    pub loss_in_bad: f64,
}

fn always() -> f64 {
    1.0
}

/// An outage as written in a scenario, relative to the emulator's start.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutageSpec {
    pub start_ms: u64,
    pub duration_ms: u64,
}

/// Link parameters as written; every field optional so levels can be merged.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Unscaled rate; absent means unlimited.
    pub rate_mbit: Option<f64>,
    /// One-way delay.
    pub delay_ms: Option<f64>,
    pub jitter_ms: Option<f64>,
    pub allow_reordering: Option<bool>,
    /// With `allow_reordering`: jitter reorders only until this long after the start
    /// (a handover that ends); FIFO after.
    pub reorder_until_ms: Option<u64>,
    pub queue_bytes: Option<u64>,
    /// Queue size as milliseconds of the (scaled) rate; used when `queue_bytes` is absent.
    pub queue_ms: Option<f64>,
    pub loss_percent: Option<f64>,
    pub gilbert_elliott: Option<GilbertElliottSpec>,
    pub outages: Option<Vec<OutageSpec>>,
    /// Step CSV, relative to the scenario file.
    pub trace_csv: Option<PathBuf>,
    /// Loop period of the step CSV; absent: the last row holds forever.
    pub trace_loop_ms: Option<u64>,
    /// Mahimahi delivery trace, relative to the scenario file.
    pub mahimahi_trace: Option<PathBuf>,
}

impl LinkSpec {
    /// `self` with every field that `more_specific` sets replaced.
    fn overridden_by(&self, more_specific: &LinkSpec) -> LinkSpec {
        macro_rules! pick {
            ($($field:ident),*) => {
                LinkSpec { $($field: more_specific.$field.clone().or_else(|| self.$field.clone())),* }
            };
        }
        pick!(
            rate_mbit,
            delay_ms,
            jitter_ms,
            allow_reordering,
            reorder_until_ms,
            queue_bytes,
            queue_ms,
            loss_percent,
            gilbert_elliott,
            outages,
            trace_csv,
            trace_loop_ms,
            mahimahi_trace
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathSpec {
    name: String,
    #[serde(flatten)]
    both: LinkSpec,
    #[serde(default)]
    up: LinkSpec,
    #[serde(default)]
    down: LinkSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioSpec {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    source: String,
    #[serde(default = "unscaled")]
    rate_scale: f64,
    #[serde(default)]
    seed: u64,
    #[serde(default = "default_duration_s")]
    duration_s: u64,
    #[serde(default)]
    defaults: LinkSpec,
    paths: Vec<PathSpec>,
}

fn unscaled() -> f64 {
    1.0
}

/// Default experiment length: long enough for TCP to leave slow start on the
/// 120 ms paths of the train scenario and to see a few seconds of outage.
fn default_duration_s() -> u64 {
    20
}

/// Default queue when a rate is set but no queue size: 100 ms of the rate,
/// a moderately bloated cellular buffer (LTE modems often hold more).
pub const DEFAULT_QUEUE_MS: f64 = 100.0;

/// Smallest queue accepted: room for two full Ethernet frames, otherwise a
/// link drops back-to-back packets it could easily carry.
pub const MIN_QUEUE_BYTES: u64 = 2 * 1514;

/// One emulated path with both directions resolved.
#[derive(Debug, Clone)]
pub struct PathConfig {
    pub name: String,
    /// Client to server.
    pub up: LinkConfig,
    /// Server to client.
    pub down: LinkConfig,
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub source: String,
    pub rate_scale: f64,
    pub duration_s: u64,
    pub paths: Vec<PathConfig>,
}

/// Summary of one direction, for tools that need the nominal rates.
#[derive(Debug, Clone, Serialize)]
pub struct LinkSummary {
    /// Scaled mean rate in Mbit/s (a Mahimahi trace's mean), `None` if unlimited.
    pub rate_mbit: Option<f64>,
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub queue_bytes: Option<usize>,
    pub loss_percent: f64,
    pub burst_loss_percent: f64,
    pub outages_ms: Vec<(u64, u64)>,
    pub has_step_trace: bool,
    pub has_mahimahi_trace: bool,
    pub allow_reordering: bool,
    /// With `allow_reordering`: FIFO again from this many ms after the start.
    pub reorder_until_ms: Option<u64>,
}

impl LinkSummary {
    pub fn of(config: &LinkConfig) -> Self {
        let rate = match &config.delivery_trace {
            Some(trace) => Some(trace.mean_rate_bit_per_s(config.bytes_per_opportunity)),
            None => config.rate_bit_per_s.map(|rate| rate as f64),
        };
        Self {
            rate_mbit: rate.map(|bit_per_s| bit_per_s / 1e6),
            delay_ms: config.delay.as_secs_f64() * 1e3,
            jitter_ms: config.jitter.as_secs_f64() * 1e3,
            queue_bytes: (config.queue_limit_bytes != usize::MAX)
                .then_some(config.queue_limit_bytes),
            loss_percent: config.loss_probability * 100.0,
            burst_loss_percent: config
                .gilbert_elliott
                .map_or(0.0, |ge| ge.expected_loss_rate() * 100.0),
            outages_ms: config
                .outages
                .iter()
                .map(|o| (o.start.as_millis() as u64, o.duration.as_millis() as u64))
                .collect(),
            has_step_trace: config.step_trace.is_some(),
            has_mahimahi_trace: config.delivery_trace.is_some(),
            allow_reordering: config.allow_reordering,
            reorder_until_ms: config.reorder_until.map(|until| until.as_millis() as u64),
        }
    }
}

impl Scenario {
    /// Reads a scenario file and the trace files it names.
    pub fn load(path: &Path, rate_scale_override: Option<f64>) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, path, rate_scale_override, &|relative: &Path| {
            let full = base_dir.join(relative);
            std::fs::read_to_string(&full)
                .map_err(|source| ScenarioError::Read { path: full, source })
        })
    }

    /// Parses scenario text; `read_trace` resolves trace file names (tests pass a map).
    pub fn parse(
        text: &str,
        origin: &Path,
        rate_scale_override: Option<f64>,
        read_trace: &dyn Fn(&Path) -> Result<String, ScenarioError>,
    ) -> Result<Self, ScenarioError> {
        let spec: ScenarioSpec = toml::from_str(text).map_err(|error| ScenarioError::Syntax {
            path: origin.to_path_buf(),
            message: error.to_string(),
        })?;
        let rate_scale = rate_scale_override.unwrap_or(spec.rate_scale);
        if !(rate_scale.is_finite() && rate_scale > 0.0) {
            return Err(ScenarioError::InvalidGlobal {
                path: origin.to_path_buf(),
                message: format!("rate_scale must be above 0, got {rate_scale}"),
            });
        }
        if spec.paths.is_empty() {
            return Err(ScenarioError::InvalidGlobal {
                path: origin.to_path_buf(),
                message: "a scenario needs at least one [[paths]] entry".into(),
            });
        }
        let mut paths = Vec::with_capacity(spec.paths.len());
        for (index, path_spec) in spec.paths.iter().enumerate() {
            let path_defaults = spec.defaults.overridden_by(&path_spec.both);
            let resolve = |direction: &'static str,
                           direction_spec: &LinkSpec,
                           direction_index: u64| {
                let merged = path_defaults.overridden_by(direction_spec);
                // Distinct, reproducible seed per path and direction.
                let seed = spec
                    .seed
                    .wrapping_mul(0x1000_0001)
                    .wrapping_add(index as u64 * 2 + direction_index);
                resolve_link(&merged, rate_scale, seed, read_trace).map_err(|error| match error {
                    ResolveError::Invalid(message) => ScenarioError::Invalid {
                        path: origin.to_path_buf(),
                        path_name: path_spec.name.clone(),
                        direction,
                        message,
                    },
                    ResolveError::Scenario(inner) => inner,
                })
            };
            paths.push(PathConfig {
                name: path_spec.name.clone(),
                up: resolve("up", &path_spec.up, 0)?,
                down: resolve("down", &path_spec.down, 1)?,
            });
        }
        Ok(Self {
            name: spec.name,
            description: spec.description,
            source: spec.source,
            rate_scale,
            duration_s: spec.duration_s,
            paths,
        })
    }

    /// A JSON description of the resolved scenario (scaled rates included).
    pub fn summary_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "rate_scale": self.rate_scale,
            "duration_s": self.duration_s,
            "paths": self.paths.iter().map(|path| serde_json::json!({
                "name": path.name,
                "up": LinkSummary::of(&path.up),
                "down": LinkSummary::of(&path.down),
            })).collect::<Vec<_>>(),
        })
    }
}

enum ResolveError {
    Invalid(String),
    Scenario(ScenarioError),
}

fn milliseconds(field: &str, value: Option<f64>) -> Result<Duration, ResolveError> {
    match value {
        None => Ok(Duration::ZERO),
        Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(Duration::from_secs_f64(ms / 1e3)),
        Some(ms) => Err(ResolveError::Invalid(format!(
            "{field} must be a non-negative number, got {ms}"
        ))),
    }
}

fn probability(field: &str, value: f64) -> Result<f64, ResolveError> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(ResolveError::Invalid(format!(
            "{field} must be within 0..=1, got {value}"
        )))
    }
}

fn resolve_link(
    spec: &LinkSpec,
    rate_scale: f64,
    seed: u64,
    read_trace: &dyn Fn(&Path) -> Result<String, ScenarioError>,
) -> Result<LinkConfig, ResolveError> {
    let rate_bit_per_s = match spec.rate_mbit {
        None => None,
        Some(mbit) if mbit.is_finite() && mbit > 0.0 => {
            Some((mbit * 1e6 * rate_scale).max(1.0) as u64)
        }
        Some(mbit) => {
            return Err(ResolveError::Invalid(format!(
                "rate_mbit must be above 0, got {mbit}"
            )))
        }
    };
    let step_trace = match &spec.trace_csv {
        None => None,
        Some(file) => {
            let text = read_trace(file).map_err(ResolveError::Scenario)?;
            let trace = StepTrace::parse_csv(&text).map_err(|source| {
                ResolveError::Scenario(ScenarioError::Trace {
                    path: file.clone(),
                    source,
                })
            })?;
            let trace = trace.with_rates_scaled(rate_scale);
            Some(match spec.trace_loop_ms {
                Some(period_ms) => trace.with_loop(Duration::from_millis(period_ms)),
                None => trace,
            })
        }
    };
    let delivery_trace = match &spec.mahimahi_trace {
        None => None,
        Some(file) => {
            let text = read_trace(file).map_err(ResolveError::Scenario)?;
            Some(DeliveryTrace::parse_mahimahi(&text).map_err(|source| {
                ResolveError::Scenario(ScenarioError::Trace {
                    path: file.clone(),
                    source,
                })
            })?)
        }
    };
    let bytes_per_opportunity =
        ((MAHIMAHI_OPPORTUNITY_BYTES as f64 * rate_scale).round() as usize).max(1);
    let nominal_rate = match &delivery_trace {
        Some(trace) => Some(trace.mean_rate_bit_per_s(bytes_per_opportunity)),
        None => rate_bit_per_s.map(|rate| rate as f64),
    };
    let queue_limit_bytes = match (spec.queue_bytes, nominal_rate) {
        (Some(bytes), _) => bytes,
        (None, Some(rate)) => {
            let queue_ms = spec.queue_ms.unwrap_or(DEFAULT_QUEUE_MS);
            (rate / 8.0 * queue_ms / 1e3) as u64
        }
        (None, None) => u64::MAX,
    };
    if queue_limit_bytes < MIN_QUEUE_BYTES {
        return Err(ResolveError::Invalid(format!(
            "queue of {queue_limit_bytes} bytes is below the minimum of {MIN_QUEUE_BYTES} (two frames); raise queue_bytes or queue_ms"
        )));
    }
    let mut outages: Vec<Outage> = spec
        .outages
        .iter()
        .flatten()
        .map(|o| Outage {
            start: Duration::from_millis(o.start_ms),
            duration: Duration::from_millis(o.duration_ms),
        })
        .collect();
    outages.sort_by_key(|outage| outage.start);
    if outages
        .windows(2)
        .any(|pair| pair[0].start + pair[0].duration > pair[1].start)
    {
        return Err(ResolveError::Invalid(
            "outages overlap; merge them into one".into(),
        ));
    }
    let gilbert_elliott = match spec.gilbert_elliott {
        None => None,
        Some(ge) => Some(GilbertElliottConfig {
            p_good_to_bad: probability("gilbert_elliott.p_good_to_bad", ge.p_good_to_bad)?,
            p_bad_to_good: probability("gilbert_elliott.p_bad_to_good", ge.p_bad_to_good)?,
            loss_in_good: probability("gilbert_elliott.loss_in_good", ge.loss_in_good)?,
            loss_in_bad: probability("gilbert_elliott.loss_in_bad", ge.loss_in_bad)?,
        }),
    };
    let allow_reordering = spec.allow_reordering.unwrap_or(false);
    if spec.reorder_until_ms.is_some() && !allow_reordering {
        return Err(ResolveError::Invalid(
            "reorder_until_ms only bounds reordering; set allow_reordering = true or remove it"
                .into(),
        ));
    }
    Ok(LinkConfig {
        rate_bit_per_s,
        delay: milliseconds("delay_ms", spec.delay_ms)?,
        jitter: milliseconds("jitter_ms", spec.jitter_ms)?,
        allow_reordering,
        reorder_until: spec.reorder_until_ms.map(Duration::from_millis),
        queue_limit_bytes: usize::try_from(queue_limit_bytes).unwrap_or(usize::MAX),
        loss_probability: probability(
            "loss_percent / 100",
            spec.loss_percent.unwrap_or(0.0) / 100.0,
        )?,
        gilbert_elliott,
        outages,
        step_trace,
        delivery_trace,
        bytes_per_opportunity,
        seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(path: &Path) -> Result<String, ScenarioError> {
        Err(ScenarioError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "test has no files"),
        })
    }

    const TWO_PATHS: &str = r#"
        name = "two"
        rate_scale = 0.5
        [defaults]
        delay_ms = 10
        queue_ms = 50
        [[paths]]
        name = "lte"
        rate_mbit = 20
        outages = [{ start_ms = 1000, duration_ms = 500 }]
        [paths.down]
        rate_mbit = 40
        delay_ms = 30
        [[paths]]
        name = "wifi"
        loss_percent = 1
        gilbert_elliott = { p_good_to_bad = 0.01, p_bad_to_good = 0.5 }
    "#;

    #[test]
    fn levels_merge_and_rates_scale() {
        let scenario =
            Scenario::parse(TWO_PATHS, Path::new("two.toml"), None, &no_files).expect("valid");
        let lte = &scenario.paths[0];
        assert_eq!(lte.up.rate_bit_per_s, Some(10_000_000));
        assert_eq!(lte.down.rate_bit_per_s, Some(20_000_000));
        assert_eq!(lte.up.delay, Duration::from_millis(10));
        assert_eq!(lte.down.delay, Duration::from_millis(30));
        // 50 ms of 10 Mbit/s = 62 500 bytes.
        assert_eq!(lte.up.queue_limit_bytes, 62_500);
        assert_eq!(
            lte.down.outages,
            vec![Outage {
                start: Duration::from_secs(1),
                duration: Duration::from_millis(500)
            }]
        );
        let wifi = &scenario.paths[1];
        assert_eq!(wifi.up.rate_bit_per_s, None);
        assert_eq!(wifi.up.queue_limit_bytes, usize::MAX);
        assert!((wifi.down.loss_probability - 0.01).abs() < 1e-12);
        assert_eq!(
            wifi.down.gilbert_elliott.map(|ge| ge.loss_in_bad),
            Some(1.0)
        );
        assert_ne!(wifi.up.seed, wifi.down.seed);
        let overridden =
            Scenario::parse(TWO_PATHS, Path::new("two.toml"), Some(1.0), &no_files).expect("valid");
        assert_eq!(overridden.paths[0].up.rate_bit_per_s, Some(20_000_000));
    }

    #[test]
    fn errors_say_where_and_what() {
        let unknown = "name = \"x\"\n[[paths]]\nname = \"a\"\nrate_mbps = 3\n";
        let error = Scenario::parse(unknown, Path::new("x.toml"), None, &no_files)
            .expect_err("unknown field");
        assert!(error.to_string().contains("rate_mbps"), "{error}");
        let tiny_queue =
            "name = \"x\"\n[[paths]]\nname = \"a\"\nrate_mbit = 1\nqueue_bytes = 100\n";
        let error = Scenario::parse(tiny_queue, Path::new("x.toml"), None, &no_files)
            .expect_err("tiny queue");
        assert!(error.to_string().contains("path `a` up"), "{error}");
        let bad_loss = "name = \"x\"\n[[paths]]\nname = \"a\"\nloss_percent = 150\n";
        assert!(Scenario::parse(bad_loss, Path::new("x.toml"), None, &no_files).is_err());
        let overlapping = "name = \"x\"\n[[paths]]\nname = \"a\"\noutages = [{start_ms = 0, duration_ms = 10}, {start_ms = 5, duration_ms = 10}]\n";
        assert!(Scenario::parse(overlapping, Path::new("x.toml"), None, &no_files).is_err());
        let missing_trace = "name = \"x\"\n[[paths]]\nname = \"a\"\ntrace_csv = \"nope.csv\"\n";
        let error = Scenario::parse(missing_trace, Path::new("x.toml"), None, &no_files)
            .expect_err("no file");
        assert!(error.to_string().contains("nope.csv"), "{error}");
        let bound_without_reordering =
            "name = \"x\"\n[[paths]]\nname = \"a\"\njitter_ms = 2\nreorder_until_ms = 3000\n";
        let error = Scenario::parse(
            bound_without_reordering,
            Path::new("x.toml"),
            None,
            &no_files,
        )
        .expect_err("nothing to bound");
        assert!(
            error.to_string().contains("allow_reordering = true"),
            "{error}"
        );
    }

    #[test]
    fn the_summary_shows_a_bounded_reordering() {
        let text = "name = \"x\"\n[[paths]]\nname = \"a\"\njitter_ms = 2\nallow_reordering = true\nreorder_until_ms = 3000\n[[paths]]\nname = \"b\"\n";
        let scenario = Scenario::parse(text, Path::new("x.toml"), None, &no_files).expect("valid");
        let summary = scenario.summary_json();
        let reordering = &summary["paths"][0]["down"];
        assert_eq!(reordering["allow_reordering"], true);
        assert_eq!(reordering["reorder_until_ms"], 3000);
        let fifo = &summary["paths"][1]["up"];
        assert_eq!(fifo["allow_reordering"], false);
        assert!(fifo["reorder_until_ms"].is_null());
    }

    #[test]
    fn mahimahi_opportunity_shrinks_with_rate_scale() {
        let text = "name = \"m\"\nrate_scale = 0.1\n[[paths]]\nname = \"cell\"\nmahimahi_trace = \"t.mm\"\n";
        let files = |_: &Path| -> Result<String, ScenarioError> { Ok("1\n2\n".into()) };
        let scenario = Scenario::parse(text, Path::new("m.toml"), None, &files).expect("valid");
        assert_eq!(scenario.paths[0].up.bytes_per_opportunity, 150);
        // Two opportunities of 150 B per 2 ms = 1.2 Mbit/s; 100 ms of it = 15 000 B.
        assert_eq!(scenario.paths[0].up.queue_limit_bytes, 15_000);
    }
}
