//! Time-varying link conditions replayed from files.
//!
//! Two formats:
//!
//! * **Step CSV** (this project's own): a header `time_ms,rate_mbit,delay_ms,loss_percent`
//!   and one row per step. A row's values hold from its `time_ms` until the next
//!   row's; an empty field keeps the link's base value. `#` starts a comment.
//!   With `loop_ms` set the schedule repeats with that period.
//! * **Mahimahi packet-delivery trace** (Netravali et al., "Mahimahi: Accurate
//!   Record-and-Replay for HTTP", USENIX ATC 2015): one integer per line, the
//!   millisecond at which one MTU-sized (1500 byte) delivery opportunity occurs;
//!   several equal lines mean several opportunities in that millisecond. The trace
//!   loops with a period equal to its last timestamp.

use std::time::Duration;

/// A parse error in a trace file, with the 1-based line it was found on.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    /// The step CSV does not start with the expected header line.
    #[error(
        "line {line}: expected header `time_ms,rate_mbit,delay_ms,loss_percent`, found `{found}`"
    )]
    BadHeader { line: usize, found: String },
    /// A field is not a number, or is negative / out of range.
    #[error("line {line}: field `{field}` has invalid value `{value}`")]
    BadField {
        line: usize,
        field: &'static str,
        value: String,
    },
    /// A row has a different number of fields than the header.
    #[error("line {line}: expected 4 comma-separated fields, found {found}")]
    WrongFieldCount { line: usize, found: usize },
    /// Timestamps must never go backwards.
    #[error("line {line}: time goes backwards")]
    TimeGoesBackwards { line: usize },
    /// The file has no data rows.
    #[error("trace has no entries")]
    Empty,
    /// A Mahimahi trace must end after time 0, otherwise it cannot loop.
    #[error("Mahimahi trace must have a last timestamp above 0 ms (it is the loop period)")]
    ZeroPeriod,
}

/// One row of a step trace; `None` keeps the link's base value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub at: Duration,
    /// `Some(0)` stalls the link (packets wait in the queue).
    pub rate_bit_per_s: Option<u64>,
    pub delay: Option<Duration>,
    pub loss_probability: Option<f64>,
}

/// A step schedule of rate, delay and loss.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTrace {
    steps: Vec<Step>,
    loop_period: Option<Duration>,
}

impl StepTrace {
    pub fn parse_csv(text: &str) -> Result<Self, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(index, line)| (index + 1, line.split('#').next().unwrap_or("").trim()))
            .filter(|(_, line)| !line.is_empty());
        let (header_line, header) = lines.next().ok_or(TraceError::Empty)?;
        let header_fields: Vec<&str> = header.split(',').map(str::trim).collect();
        if header_fields != ["time_ms", "rate_mbit", "delay_ms", "loss_percent"] {
            return Err(TraceError::BadHeader {
                line: header_line,
                found: header.to_string(),
            });
        }
        let mut steps: Vec<Step> = Vec::new();
        for (line, row) in lines {
            let fields: Vec<&str> = row.split(',').map(str::trim).collect();
            if fields.len() != 4 {
                return Err(TraceError::WrongFieldCount {
                    line,
                    found: fields.len(),
                });
            }
            let number =
                |field: &'static str, value: &str, max: f64| -> Result<Option<f64>, TraceError> {
                    if value.is_empty() {
                        return Ok(None);
                    }
                    match value.parse::<f64>() {
                        Ok(parsed) if parsed.is_finite() && (0.0..=max).contains(&parsed) => {
                            Ok(Some(parsed))
                        }
                        _ => Err(TraceError::BadField {
                            line,
                            field,
                            value: value.to_string(),
                        }),
                    }
                };
            let at_ms = number("time_ms", fields[0], f64::MAX)?.ok_or(TraceError::BadField {
                line,
                field: "time_ms",
                value: String::new(),
            })?;
            let at = Duration::from_secs_f64(at_ms / 1000.0);
            if steps.last().is_some_and(|last| last.at > at) {
                return Err(TraceError::TimeGoesBackwards { line });
            }
            steps.push(Step {
                at,
                rate_bit_per_s: number("rate_mbit", fields[1], 1e6)?
                    .map(|mbit| (mbit * 1e6) as u64),
                delay: number("delay_ms", fields[2], 1e7)?
                    .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
                loss_probability: number("loss_percent", fields[3], 100.0)?
                    .map(|percent| percent / 100.0),
            });
        }
        if steps.is_empty() {
            return Err(TraceError::Empty);
        }
        Ok(Self {
            steps,
            loop_period: None,
        })
    }

    /// Multiplies every rate of the schedule (the scenario's `rate_scale`).
    pub fn with_rates_scaled(mut self, rate_scale: f64) -> Self {
        for step in &mut self.steps {
            step.rate_bit_per_s = step
                .rate_bit_per_s
                .map(|rate| (rate as f64 * rate_scale) as u64);
        }
        self
    }

    /// Repeats the schedule every `period` (measured from the link's start).
    pub fn with_loop(mut self, period: Duration) -> Self {
        self.loop_period = (!period.is_zero()).then_some(period);
        self
    }

    fn position(&self, since_start: Duration) -> Duration {
        match self.loop_period {
            Some(period) => {
                Duration::from_nanos((since_start.as_nanos() % period.as_nanos()) as u64)
            }
            None => since_start,
        }
    }

    /// The step in force at `since_start`, or `None` before the first step.
    pub fn step_at(&self, since_start: Duration) -> Option<&Step> {
        let position = self.position(since_start);
        let after = self.steps.partition_point(|step| step.at <= position);
        after.checked_sub(1).map(|index| &self.steps[index])
    }

    /// The first time after `since_start` at which the step in force changes.
    pub fn next_change_after(&self, since_start: Duration) -> Option<Duration> {
        let position = self.position(since_start);
        let cycle_start = since_start - position;
        let after = self.steps.partition_point(|step| step.at <= position);
        match (self.steps.get(after), self.loop_period) {
            (Some(step), Some(period)) if step.at < period => Some(cycle_start + step.at),
            (Some(step), None) => Some(cycle_start + step.at),
            (_, Some(period)) => Some(cycle_start + period),
            (None, None) => None,
        }
    }
}

/// A looping schedule of MTU-sized delivery opportunities (Mahimahi format).
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryTrace {
    /// Opportunity offsets within one period, non-decreasing.
    opportunities: Vec<Duration>,
    period: Duration,
}

/// Bytes one Mahimahi delivery opportunity can carry (its MTU-sized packet).
pub const MAHIMAHI_OPPORTUNITY_BYTES: usize = 1500;

impl DeliveryTrace {
    pub fn parse_mahimahi(text: &str) -> Result<Self, TraceError> {
        let mut opportunities = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let value = line.trim();
            if value.is_empty() {
                continue;
            }
            let ms: u64 = value.parse().map_err(|_| TraceError::BadField {
                line: index + 1,
                field: "timestamp_ms",
                value: value.to_string(),
            })?;
            let at = Duration::from_millis(ms);
            if opportunities.last().is_some_and(|&last| last > at) {
                return Err(TraceError::TimeGoesBackwards { line: index + 1 });
            }
            opportunities.push(at);
        }
        let period = *opportunities.last().ok_or(TraceError::Empty)?;
        if period.is_zero() {
            return Err(TraceError::ZeroPeriod);
        }
        Ok(Self {
            opportunities,
            period,
        })
    }

    /// Opportunities per period.
    pub fn len(&self) -> usize {
        self.opportunities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.opportunities.is_empty()
    }

    /// Average capacity in bit/s if every opportunity carries `bytes_per_opportunity`.
    pub fn mean_rate_bit_per_s(&self, bytes_per_opportunity: usize) -> f64 {
        self.len() as f64 * bytes_per_opportunity as f64 * 8.0 / self.period.as_secs_f64()
    }

    /// Time (since start) of the opportunity with global index `index`.
    pub fn opportunity_time(&self, index: u64) -> Duration {
        let per_period = self.len() as u64;
        let cycle = (index / per_period) as u32;
        self.period * cycle + self.opportunities[(index % per_period) as usize]
    }

    /// Global index of the first opportunity at or after `since_start`.
    pub fn first_opportunity_at_or_after(&self, since_start: Duration) -> u64 {
        let cycle = since_start.as_nanos() / self.period.as_nanos();
        let position = since_start - self.period * cycle as u32;
        let within = self.opportunities.partition_point(|&at| at < position) as u64;
        cycle as u64 * self.len() as u64 + within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &str = "# a handover gap\ntime_ms,rate_mbit,delay_ms,loss_percent\n0,10,20,\n1000,0,,\n1500,,30,1.5\n";

    #[test]
    fn step_csv_parses_and_holds_values_until_next_row() {
        let trace = StepTrace::parse_csv(STEPS).expect("valid trace");
        let at = |ms| {
            trace
                .step_at(Duration::from_millis(ms))
                .copied()
                .expect("a step")
        };
        assert_eq!(at(999).rate_bit_per_s, Some(10_000_000));
        assert_eq!(at(999).loss_probability, None);
        assert_eq!(at(1000).rate_bit_per_s, Some(0));
        assert_eq!(at(1000).delay, None);
        assert_eq!(at(2000).delay, Some(Duration::from_millis(30)));
        assert_eq!(at(2000).loss_probability, Some(0.015));
        assert_eq!(
            trace.next_change_after(Duration::from_millis(1200)),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(trace.next_change_after(Duration::from_millis(1600)), None);
    }

    #[test]
    fn step_csv_loops_with_period() {
        let trace = StepTrace::parse_csv(STEPS)
            .expect("valid")
            .with_loop(Duration::from_millis(2000));
        let rate = |ms| {
            trace
                .step_at(Duration::from_millis(ms))
                .and_then(|s| s.rate_bit_per_s)
        };
        assert_eq!(rate(2500), Some(10_000_000));
        assert_eq!(rate(3100), Some(0));
        assert_eq!(
            trace.next_change_after(Duration::from_millis(1700)),
            Some(Duration::from_millis(2000))
        );
        assert_eq!(
            trace.next_change_after(Duration::from_millis(2100)),
            Some(Duration::from_millis(3000))
        );
    }

    #[test]
    fn step_csv_errors_name_the_line() {
        assert!(matches!(
            StepTrace::parse_csv("time,rate\n"),
            Err(TraceError::BadHeader { line: 1, .. })
        ));
        let bad = "time_ms,rate_mbit,delay_ms,loss_percent\n0,abc,1,0\n";
        assert!(matches!(
            StepTrace::parse_csv(bad),
            Err(TraceError::BadField {
                line: 2,
                field: "rate_mbit",
                ..
            })
        ));
        let backwards = "time_ms,rate_mbit,delay_ms,loss_percent\n10,1,1,0\n5,1,1,0\n";
        assert_eq!(
            StepTrace::parse_csv(backwards),
            Err(TraceError::TimeGoesBackwards { line: 3 })
        );
        let too_lossy = "time_ms,rate_mbit,delay_ms,loss_percent\n0,1,1,101\n";
        assert!(StepTrace::parse_csv(too_lossy).is_err());
        assert_eq!(
            StepTrace::parse_csv("time_ms,rate_mbit,delay_ms,loss_percent\n"),
            Err(TraceError::Empty)
        );
    }

    #[test]
    fn mahimahi_opportunities_loop_with_last_timestamp_as_period() {
        let trace = DeliveryTrace::parse_mahimahi("1\n1\n4\n10\n").expect("valid");
        assert_eq!(trace.len(), 4);
        let ms = |index| trace.opportunity_time(index).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(4), ms(6)],
            [1, 1, 4, 10, 11, 14]
        );
        assert_eq!(
            trace.first_opportunity_at_or_after(Duration::from_millis(2)),
            2
        );
        assert_eq!(
            trace.first_opportunity_at_or_after(Duration::from_millis(12)),
            6
        );
        // 4 opportunities of 1500 B per 10 ms = 4.8 Mbit/s.
        assert!((trace.mean_rate_bit_per_s(1500) - 4.8e6).abs() < 1.0);
        assert_eq!(
            DeliveryTrace::parse_mahimahi("0\n0\n"),
            Err(TraceError::ZeroPeriod)
        );
        assert!(matches!(
            DeliveryTrace::parse_mahimahi("3\nx\n"),
            Err(TraceError::BadField { line: 2, .. })
        ));
    }
}
