//! Prometheus metrics: the daemon's [`Report`] encoded in the OpenMetrics text format
//! by `prometheus-client`, and served on `GET /metrics` over HTTP/1.1 (hyper).
//!
//! Every figure comes from one `Report` taken by the event loop at scrape time, the
//! same snapshot `--stats-file` and `mptund status --json` write, so the counters here
//! are the daemon's own counts. Per scrape a small registry is built around that
//! snapshot (a `Collector` of constant metrics): nothing is kept in sync between
//! scrapes, so a session that ends disappears from the next scrape with no clean-up.
//!
//! Labels: `peer` (the server's peer name; `server` on a client), `path` (the path's
//! name; `path<id>` on a server) and `interface` (the client path's configured
//! interface; empty on a server, which has one socket for every path).
//!
//! The HTTP side (connection cap, deadlines, bearer token) is in [`endpoint`].

mod endpoint;

pub use endpoint::{serve, Policy};

use std::borrow::Cow;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::snapshot::Interfaces;
use crate::counters::DropReason;
use crate::session::{PathReport, Report, SessionReport};

/// The OpenMetrics text format, which `prometheus-client` writes and Prometheus asks
/// for in its `Accept` header.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for every other client (curl, promtool).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The classic Prometheus text format (0.0.4) of an OpenMetrics text exposition as
/// [`render`] writes it: a counter family is named with its `_total` suffix there,
/// and OpenMetrics' `# UNIT` and `# EOF` lines do not exist.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len() + counters.len() * 16);
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match descriptor {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                text.push_str(prefix);
                text.push_str(name);
                if counters.contains(name) {
                    text.push_str("_total");
                }
                text.push(' ');
                text.push_str(tail);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

/// Encodes `report` as an OpenMetrics text exposition.
pub fn render(report: Report, interfaces: &Interfaces) -> String {
    render_with(report, interfaces, None)
}

/// Encodes `report`, then what `extra` collects (the endpoint's own counters), as
/// one OpenMetrics text exposition.
fn render_with(
    report: Report,
    interfaces: &Interfaces,
    extra: Option<Box<dyn Collector>>,
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ReportCollector {
        report,
        interfaces: interfaces.clone(),
    }));
    if let Some(extra) = extra {
        registry.register_collector(extra);
    }
    let mut text = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

#[derive(Debug)]
struct ReportCollector {
    report: Report,
    interfaces: Interfaces,
}

/// A label set as `prometheus-client` encodes it.
type Labels<'a> = Vec<(&'static str, Cow<'a, str>)>;

/// One metric family under construction: its rows are written as they are added.
struct Family<'e> {
    encoder: prometheus_client::encoding::MetricEncoder<'e>,
}

impl Family<'_> {
    fn counter(&mut self, labels: &Labels<'_>, value: u64) -> Result<(), std::fmt::Error> {
        ConstCounter::new(value).encode(self.encoder.encode_family(labels)?)
    }

    fn gauge(&mut self, labels: &Labels<'_>, value: f64) -> Result<(), std::fmt::Error> {
        ConstGauge::new(value).encode(self.encoder.encode_family(labels)?)
    }

    /// A histogram sample: `buckets` are `(upper bound, count)`, not cumulative,
    /// the last bound `f64::INFINITY`.
    fn histogram(
        &mut self,
        labels: &Labels<'_>,
        sum: f64,
        count: u64,
        buckets: &[(f64, u64)],
    ) -> Result<(), std::fmt::Error> {
        self.encoder
            .encode_family(labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, buckets, None)
    }

    /// The one sample of a family without labels.
    fn only_counter(self, value: u64) -> Result<(), std::fmt::Error> {
        ConstCounter::new(value).encode(self.encoder)
    }

    /// The one sample of a family without labels.
    fn only_gauge(self, value: f64) -> Result<(), std::fmt::Error> {
        ConstGauge::new(value).encode(self.encoder)
    }
}

fn family<'e>(
    encoder: &'e mut DescriptorEncoder<'_>,
    name: &'e str,
    help: &str,
    unit: Option<&'e Unit>,
    metric_type: MetricType,
) -> Result<Family<'e>, std::fmt::Error> {
    Ok(Family {
        encoder: encoder.encode_descriptor(name, help, unit, metric_type)?,
    })
}

const SECONDS: Unit = Unit::Seconds;
const BYTES: Unit = Unit::Bytes;
const RATIOS: Unit = Unit::Ratios;

/// One figure read from a row of type `R` (a path, a session, a reorder buffer): its
/// name (ending in the unit, if any), help, unit, and how to read it.
struct Metric<R> {
    name: &'static str,
    help: &'static str,
    unit: Option<&'static Unit>,
    value: Value<R>,
}

enum Value<R> {
    Counter(fn(&R) -> u64),
    /// `None`: no sample for this row (e.g. no RTT measured yet).
    Gauge(fn(&R) -> Option<f64>),
}

impl<R> Metric<R> {
    /// One family with a sample per row.
    fn encode(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        rows: &[(Labels<'_>, &R)],
    ) -> Result<(), std::fmt::Error> {
        let metric_type = match self.value {
            Value::Counter(_) => MetricType::Counter,
            Value::Gauge(_) => MetricType::Gauge,
        };
        // The encoder appends the unit to the name.
        let name = match self.unit {
            Some(unit) => self
                .name
                .strip_suffix(unit.as_str())
                .and_then(|name| name.strip_suffix('_'))
                .unwrap_or(self.name),
            None => self.name,
        };
        let mut family = family(encoder, name, self.help, self.unit, metric_type)?;
        for (labels, row) in rows {
            match self.value {
                Value::Counter(read) => family.counter(labels, read(row))?,
                Value::Gauge(read) => {
                    if let Some(value) = read(row) {
                        family.gauge(labels, value)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn encode_all<R>(
    encoder: &mut DescriptorEncoder<'_>,
    metrics: &[Metric<R>],
    rows: &[(Labels<'_>, &R)],
) -> Result<(), std::fmt::Error> {
    metrics
        .iter()
        .try_for_each(|metric| metric.encode(encoder, rows))
}

fn ms_to_s(ms: f64) -> f64 {
    ms / 1e3
}

/// Every per-path metric. Names end in their base unit; counters get `_total` from
/// the encoder.
const PATH_METRICS: &[Metric<PathReport>] = &[
    Metric {
        name: "mptund_path_rtt",
        help: "Smoothed round-trip time of the path (RFC 6298 SRTT).",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| p.srtt_ms.map(ms_to_s)),
    },
    Metric {
        name: "mptund_path_min_rtt",
        help: "Smallest round-trip time seen on the path.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| p.min_rtt_ms.map(ms_to_s)),
    },
    Metric {
        name: "mptund_path_rtt_variation",
        help: "Round-trip time variation of the path (RFC 6298 RTTVAR, a mean deviation).",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| Some(ms_to_s(p.rtt_variance_ms))),
    },
    Metric {
        name: "mptund_path_queuing_delay",
        help: "Smoothed forward queuing delay: one-way delay above its windowed minimum.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| p.queuing_delay_ms.map(ms_to_s)),
    },
    Metric {
        name: "mptund_path_queuing_delay_target",
        help: "Queuing delay the path's delay-rate controller lets stand before it backs off.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| p.queuing_delay_target_ms.map(ms_to_s)),
    },
    Metric {
        name: "mptund_path_jitter",
        help: "Spread of the forward one-way delay of packets sent into the idle path: the link's jitter, which the delay-rate controller's target allows for.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|p| p.jitter_ms.map(ms_to_s)),
    },
    Metric {
        name: "mptund_path_cwnd",
        help: "Congestion window of the path.",
        unit: Some(&BYTES),
        value: Value::Gauge(|p| Some(p.cwnd_bytes as f64)),
    },
    Metric {
        name: "mptund_path_in_flight",
        help: "Bytes sent on the path and not yet acknowledged or declared lost.",
        unit: Some(&BYTES),
        value: Value::Gauge(|p| Some(p.bytes_in_flight as f64)),
    },
    Metric {
        name: "mptund_path_pacing_rate_bytes_per_second",
        help: "Rate the path's pacer sends at, in bytes per second.",
        unit: None,
        value: Value::Gauge(|p| p.pacing_rate_bytes_per_s.map(|r| r as f64)),
    },
    Metric {
        name: "mptund_path_delivery_rate_bytes_per_second",
        help: "Delivery rate estimate of the path, in bytes per second.",
        unit: None,
        value: Value::Gauge(|p| p.delivery_rate_bytes_per_s.map(|r| r as f64)),
    },
    Metric {
        name: "mptund_path_loss",
        help: "Fraction of the path's recent packets declared lost (moving average).",
        unit: Some(&RATIOS),
        value: Value::Gauge(|p| Some(p.loss_rate)),
    },
    Metric {
        name: "mptund_path_lost_packets",
        help: "Packets of the path declared lost.",
        unit: None,
        value: Value::Counter(|p| p.lost_packets),
    },
    Metric {
        name: "mptund_path_spurious_losses",
        help: "Packets of the path declared lost and acknowledged later (reordered).",
        unit: None,
        value: Value::Counter(|p| p.spurious_losses),
    },
    Metric {
        name: "mptund_path_persistent_congestions",
        help: "Times the path's losses amounted to persistent congestion and its congestion controller restarted from the least window.",
        unit: None,
        value: Value::Counter(|p| p.persistent_congestions),
    },
    Metric {
        name: "mptund_path_sent_packets",
        help: "Datagrams sent on the path (data, acknowledgements, probes).",
        unit: None,
        value: Value::Counter(|p| p.sent_packets),
    },
    Metric {
        name: "mptund_path_sent",
        help: "Bytes of datagrams sent on the path (UDP payload).",
        unit: Some(&BYTES),
        value: Value::Counter(|p| p.sent_bytes),
    },
    Metric {
        name: "mptund_path_sent_data_packets",
        help: "Data datagrams sent on the path.",
        unit: None,
        value: Value::Counter(|p| p.sent_data_packets),
    },
    Metric {
        name: "mptund_path_received_packets",
        help: "Authenticated datagrams received on the path.",
        unit: None,
        value: Value::Counter(|p| p.received_packets),
    },
    Metric {
        name: "mptund_path_received",
        help: "Bytes of authenticated datagrams received on the path (UDP payload).",
        unit: Some(&BYTES),
        value: Value::Counter(|p| p.received_bytes),
    },
    Metric {
        name: "mptund_path_received_data_packets",
        help: "Authenticated data datagrams received on the path.",
        unit: None,
        value: Value::Counter(|p| p.received_data_packets),
    },
    Metric {
        name: "mptund_path_send_errors",
        help: "Datagrams the operating system refused to send on the path.",
        unit: None,
        value: Value::Counter(|p| p.send_errors),
    },
    Metric {
        name: "mptund_path_socket_full",
        help: "Times the path's socket buffer was full; its datagrams waited, the other paths went on.",
        unit: None,
        value: Value::Counter(|p| p.socket_full),
    },
    Metric {
        name: "mptund_path_reinjected_packets",
        help: "Data datagrams of the path re-sent on another path after this one lost them.",
        unit: None,
        value: Value::Counter(|p| p.reinjected_away),
    },
    Metric {
        name: "mptund_path_share_floor_packets",
        help: "Bulk packets the capacity shares placed on the path rather than where they would arrive first (earliest-arrival); restarts when a reload changes the scheduler.",
        unit: None,
        value: Value::Counter(|p| p.share_floor_packets),
    },
    Metric {
        name: "mptund_path_share_floor_rate_bytes_per_second",
        help: "The path's floor while bulk traffic is shared by the paths' capacity, in bytes per second; absent while the traffic is too light to share.",
        unit: None,
        value: Value::Gauge(|p| p.share_floor_rate_bytes_per_s.map(|r| r as f64)),
    },
    Metric {
        name: "mptund_path_validations_started",
        help: "Validations of a new peer address started on the path (server).",
        unit: None,
        value: Value::Counter(|p| p.validations_started),
    },
    Metric {
        name: "mptund_path_validations_succeeded",
        help: "Validations after which the path moved to the new peer address (server).",
        unit: None,
        value: Value::Counter(|p| p.validations_succeeded),
    },
];

/// Path states as the scheduler sees them; one series per state, 1 for the current.
const PATH_STATES: &[&str] = &["up", "suspect", "down"];

impl Collector for ReportCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let report = &self.report;
        // An info metric in the Prometheus convention: the value is 1, the facts are
        // in the labels, so a dashboard can join them onto any other series.
        family(
            &mut encoder,
            "mptund_build_info",
            "The daemon's version and the git commit it was built from.",
            None,
            MetricType::Gauge,
        )?
        .gauge(
            &vec![
                ("version", Cow::Borrowed(env!("CARGO_PKG_VERSION"))),
                ("commit", Cow::Borrowed(crate::BUILD_COMMIT)),
            ],
            1.0,
        )?;
        family(
            &mut encoder,
            "mptund_sessions",
            "Established sessions.",
            None,
            MetricType::Gauge,
        )?
        .only_gauge(report.sessions.len() as f64)?;
        family(
            &mut encoder,
            "mptund_sessions_established",
            "Sessions established since the daemon started (handshakes completed).",
            None,
            MetricType::Counter,
        )?
        .only_counter(report.sessions_established)?;
        family(
            &mut encoder,
            "mptund_cookie_replies_sent",
            "Handshake inits the server answered with a cookie reply because it was under load.",
            None,
            MetricType::Counter,
        )?
        .only_counter(report.cookie_replies_sent)?;
        if let Some(memory) = report.memory {
            family(
                &mut encoder,
                "mptund_memory_held_bytes",
                "Bytes of packet buffers the sessions hold (reorder buffers, queues, copies kept for repair, parity decoders).",
                None,
                MetricType::Gauge,
            )?
            .only_gauge(memory.held_bytes as f64)?;
            family(
                &mut encoder,
                "mptund_memory_budget_bytes",
                "The memory budget the sessions share ([limits] memory_budget_mib).",
                None,
                MetricType::Gauge,
            )?
            .only_gauge(memory.budget_bytes as f64)?;
        }

        let mut drops = family(
            &mut encoder,
            "mptund_dropped_packets",
            "Datagrams and inner packets dropped, by reason.",
            None,
            MetricType::Counter,
        )?;
        for reason in DropReason::ALL {
            let name = reason.as_str();
            let count = report.drops.get(name).copied().unwrap_or(0);
            drops.counter(&vec![("reason", Cow::Borrowed(name))], count)?;
        }

        self.encode_sessions(&mut encoder)?;
        self.encode_paths(&mut encoder)
    }
}

impl ReportCollector {
    fn session_labels<'a>(session: &'a SessionReport) -> Labels<'a> {
        vec![("peer", Cow::Borrowed(session.peer.as_str()))]
    }

    /// Every path of the report with its labels: the sessions' paths, and a client's
    /// paths while it has no session (`peer="server"`).
    fn paths(&self) -> Vec<(Labels<'_>, &PathReport)> {
        let with_peer = self
            .report
            .sessions
            .iter()
            .flat_map(|s| s.paths.iter().map(move |p| (s.peer.as_str(), p)));
        let idle = self.report.idle_paths.iter().map(|p| ("server", p));
        with_peer
            .chain(idle)
            .map(|(peer, path)| {
                let interface = self.interfaces.get(&path.name).unwrap_or_default();
                (
                    vec![
                        ("peer", Cow::Borrowed(peer)),
                        ("path", Cow::Borrowed(path.name.as_str())),
                        ("interface", Cow::Owned(interface)),
                    ],
                    path,
                )
            })
            .collect()
    }

    fn encode_paths(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let paths = self.paths();
        let mut state = family(
            encoder,
            "mptund_path_state",
            "Path state as the scheduler sees it: 1 for the current state, 0 for the others.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, path) in &paths {
            for name in PATH_STATES {
                let mut labels = labels.clone();
                labels.push(("state", Cow::Borrowed(name)));
                state.gauge(&labels, f64::from(u8::from(path.state == *name)))?;
            }
        }
        encode_all(encoder, PATH_METRICS, &paths)
    }

    // The reorder stats are Copy today; cloned, they stay correct once they carry a
    // histogram.
    #[allow(clippy::clone_on_copy)]
    fn encode_sessions(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sessions: Vec<_> = self
            .report
            .sessions
            .iter()
            .map(|session| (Self::session_labels(session), session))
            .collect();
        encode_all(encoder, SESSION_METRICS, &sessions)?;
        let reorder: Vec<_> = sessions
            .iter()
            .map(|(labels, session)| {
                (
                    labels.clone(),
                    ReorderRow {
                        buffered: session.reorder.buffered,
                        stats: session.reorder_stats.clone(),
                    },
                )
            })
            .collect();
        encode_reorder(encoder, &reorder)
    }
}

const SESSION_METRICS: &[Metric<SessionReport>] = &[
    Metric {
        name: "mptund_session_key_renewals",
        help: "Times a renewal handshake replaced the session's keys.",
        unit: None,
        value: Value::Counter(|s| s.key_renewals),
    },
    Metric {
        name: "mptund_session_reinjected_packets",
        help: "Data datagrams re-sent on another path after theirs lost them.",
        unit: None,
        value: Value::Counter(|s| s.reinjected),
    },
    Metric {
        name: "mptund_session_queued_packets",
        help: "Inner packets that waited because every path was full.",
        unit: None,
        value: Value::Counter(|s| s.queued),
    },
    Metric {
        name: "mptund_session_ecn_marked_packets",
        help: "ECN-capable inner packets the send queue's AQM marked Congestion Experienced instead of dropping.",
        unit: None,
        value: Value::Counter(|s| s.ecn_marked),
    },
    Metric {
        name: "mptund_session_send_queue_packets",
        help: "Inner packets waiting for a free path now.",
        unit: None,
        value: Value::Gauge(|s| Some(s.send_queue_depth as f64)),
    },
    Metric {
        name: "mptund_session_capacity_sharing",
        help: "1 while the scheduler shares bulk traffic by the paths' capacity (earliest-arrival's capacity shares), 0 otherwise.",
        unit: None,
        value: Value::Gauge(|s| Some(f64::from(u8::from(s.capacity_sharing)))),
    },
    Metric {
        name: "mptund_session_age_seconds",
        help: "Time since the session was established.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|s| Some(s.age_ms as f64 / 1e3)),
    },
    Metric {
        name: "mptund_session_equalized_delay_seconds",
        help: "How much later than its fastest path the inner flow is handed on now, to even out the paths' delays (reorder.equalize_delay).",
        unit: Some(&SECONDS),
        value: Value::Gauge(|s| Some(s.reorder.equalized_delay_ms / 1e3)),
    },
    Metric {
        name: "mptund_session_standalone_acks",
        help: "Acknowledgement datagrams sent on their own (not inside reverse data).",
        unit: None,
        value: Value::Counter(|s| s.standalone_acks),
    },
    Metric {
        name: "mptund_session_parity_sent",
        help: "Parity datagrams sent on paths that lose packets to the radio (forward error correction).",
        unit: None,
        value: Value::Counter(|s| s.parity_sent),
    },
    Metric {
        name: "mptund_session_parity_rebuilt_packets",
        help: "Inner packets rebuilt from a parity datagram before the tunnel's repair arrived.",
        unit: None,
        value: Value::Counter(|s| s.parity_rebuilt),
    },
    Metric {
        name: "mptund_session_parity_unrecoverable",
        help: "Parity datagrams that arrived with more than one of their packets missing.",
        unit: None,
        value: Value::Counter(|s| s.parity_unrecoverable),
    },
];

/// A session's reorder buffer: its depth now and its statistics.
struct ReorderRow {
    buffered: usize,
    stats: mptund_sched::ReorderStats,
}

/// The receiver's reorder buffer of each session: how deep it is now, what it
/// released and rejected, and how long packets were held. The one place that maps
/// [`mptund_sched::ReorderStats`] to metrics: a hold-time histogram in the stats
/// becomes a `mptund_reorder_hold_seconds` histogram family here.
fn encode_reorder(
    encoder: &mut DescriptorEncoder<'_>,
    sessions: &[(Labels<'_>, ReorderRow)],
) -> Result<(), std::fmt::Error> {
    let rows: Vec<(Labels<'_>, &ReorderRow)> = sessions
        .iter()
        .map(|(labels, row)| (labels.clone(), row))
        .collect();
    encode_all(encoder, REORDER_METRICS, &rows)?;
    let mut hold = family(
        encoder,
        "mptund_reorder_hold",
        "Time released packets spent in the reorder buffer (0 for packets that arrived in order); its _sum is the total.",
        Some(&SECONDS),
        MetricType::Histogram,
    )?;
    for (labels, row) in &rows {
        let histogram = &row.stats.hold_histogram;
        let buckets: Vec<(f64, u64)> = histogram
            .buckets()
            .map(|(bound, count)| (bound.map_or(f64::INFINITY, |b| b.as_secs_f64()), count))
            .collect();
        let sum = row.stats.total_hold.as_secs_f64();
        hold.histogram(labels, sum, histogram.count(), &buckets)?;
    }
    Ok(())
}

const REORDER_METRICS: &[Metric<ReorderRow>] = &[
    Metric {
        name: "mptund_reorder_buffered_packets",
        help: "Packets held in the reorder buffer now.",
        unit: None,
        value: Value::Gauge(|r| Some(r.buffered as f64)),
    },
    Metric {
        name: "mptund_reorder_released_in_order_packets",
        help: "Packets released that were the next expected one on arrival.",
        unit: None,
        value: Value::Counter(|r| r.stats.released_in_order),
    },
    Metric {
        name: "mptund_reorder_released_after_wait_packets",
        help: "Packets released that arrived behind a gap and waited for it.",
        unit: None,
        value: Value::Counter(|r| r.stats.released_after_wait),
    },
    Metric {
        name: "mptund_reorder_released_late_packets",
        help: "Packets released after their sequence number had been skipped.",
        unit: None,
        value: Value::Counter(|r| r.stats.released_late),
    },
    Metric {
        name: "mptund_reorder_skipped_gaps",
        help: "Gaps (runs of missing sequence numbers) given up on.",
        unit: None,
        value: Value::Counter(|r| r.stats.gaps_skipped),
    },
    Metric {
        name: "mptund_reorder_duplicate_packets",
        help: "Duplicated packets: copies of a packet already delivered or buffered.",
        unit: None,
        value: Value::Counter(|r| r.stats.duplicates),
    },
    Metric {
        name: "mptund_reorder_too_old_packets",
        help: "Packets older than the reorder buffer remembers.",
        unit: None,
        value: Value::Counter(|r| r.stats.too_old),
    },
    Metric {
        name: "mptund_reorder_backlogged_packets",
        help: "Packets refused because the reorder buffer was full.",
        unit: None,
        value: Value::Counter(|r| r.stats.backlogged),
    },
    Metric {
        name: "mptund_reorder_max_hold_seconds",
        help: "Longest time any packet spent in the reorder buffer.",
        unit: Some(&SECONDS),
        value: Value::Gauge(|r| Some(r.stats.max_hold.as_secs_f64())),
    },
];

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::counters::DropCounters;

    fn report_with_drops() -> Report {
        let mut drops = DropCounters::default();
        let now = Instant::now();
        for _ in 0..3 {
            drops.record(now, DropReason::Replayed, &"test");
        }
        drops.record(now, DropReason::NoRoute, &"test");
        drops.record(now, DropReason::CookieRequired, &"test");
        let mut report = Report::new("server", Vec::new(), Vec::new(), &drops, 7);
        report.cookie_replies_sent = 1;
        report.memory = Some(crate::session::MemoryReport {
            held_bytes: 3 << 20,
            budget_bytes: 192 << 20,
        });
        report
    }

    #[test]
    fn drops_by_reason_and_sessions_are_exported() {
        let text = render(report_with_drops(), &Interfaces::default());
        assert!(text.contains("\nmptund_dropped_packets_total{reason=\"replayed\"} 3\n"));
        assert!(text.contains("\nmptund_dropped_packets_total{reason=\"no_route\"} 1\n"));
        for reason in DropReason::ALL {
            assert!(
                text.contains(&format!("{{reason=\"{}\"}}", reason.as_str())),
                "{reason:?} missing"
            );
        }
        assert!(text.contains("\nmptund_sessions 0"));
        assert!(text.contains("\nmptund_sessions_established_total 7\n"));
        assert!(text.contains("\nmptund_dropped_packets_total{reason=\"cookie_required\"} 1\n"));
        assert!(text.contains("\nmptund_cookie_replies_sent_total 1\n"));
        assert!(text.contains("\nmptund_memory_held_bytes 3145728"));
        assert!(text.contains("\nmptund_memory_budget_bytes 201326592"));
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains(&format!(
            "\nmptund_build_info{{version=\"{}\",commit=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            crate::BUILD_COMMIT
        )));
    }

    #[test]
    fn classic_text_names_counter_families_with_total() {
        let openmetrics = "# HELP a_seconds A.\n# TYPE a_seconds counter\n# UNIT a_seconds seconds\na_seconds_total 1.5\n# HELP b B.\n# TYPE b gauge\nb 2\n# EOF\n";
        assert_eq!(
            to_prometheus_text(openmetrics),
            "# HELP a_seconds_total A.\n# TYPE a_seconds_total counter\na_seconds_total 1.5\n# HELP b B.\n# TYPE b gauge\nb 2\n"
        );
        let text = to_prometheus_text(&render(report_with_drops(), &Interfaces::default()));
        assert!(text.contains("# TYPE mptund_dropped_packets_total counter\n"));
        assert!(!text.contains("# EOF"));
    }
}
