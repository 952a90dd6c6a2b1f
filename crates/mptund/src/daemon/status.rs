//! `mptund status` as a person reads it: one block per session, one row per path,
//! aligned columns, human units (like `wg show`); and `--dump`, the same rows for
//! scripts (like `wg show dump`).

use std::fmt::Write as _;

use super::snapshot::Interfaces;
use crate::session::{PathReport, Report, SessionReport};

const HEADER: [&str; 12] = [
    "path",
    "interface",
    "state",
    "rtt",
    "min rtt",
    "cwnd",
    "in flight",
    "send rate",
    "delivery",
    "loss",
    "sent",
    "received",
];

/// The report as `status --json` and `--stats-file` write it: the daemon's build (its
/// version and the commit `mptund --version` names), then the report's own fields, so a
/// benchmark's saved reports say which binary produced them.
#[derive(serde::Serialize)]
pub struct JsonReport<'a> {
    build: Build,
    #[serde(flatten)]
    report: &'a Report,
}

#[derive(serde::Serialize)]
struct Build {
    version: &'static str,
    commit: &'static str,
}

impl<'a> JsonReport<'a> {
    pub fn new(report: &'a Report) -> Self {
        Self {
            build: Build {
                version: env!("CARGO_PKG_VERSION"),
                commit: crate::BUILD_COMMIT,
            },
            report,
        }
    }
}

/// The report as a table.
pub fn table(report: &Report, interfaces: &Interfaces) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} session{} up, {} established since start",
        report.role,
        report.sessions.len(),
        if report.sessions.len() == 1 { "" } else { "s" },
        report.sessions_established
    );
    for session in &report.sessions {
        out.push('\n');
        session_block(&mut out, session, interfaces);
    }
    if !report.idle_paths.is_empty() {
        out.push_str("\nno session (handshaking)\n");
        path_rows(&mut out, &report.idle_paths, interfaces);
    }
    let drops: Vec<String> = report
        .drops
        .iter()
        .filter(|(_, &count)| count > 0)
        .map(|(reason, count)| format!("{reason}={count}"))
        .collect();
    if let Some(memory) = report.memory {
        let mib = |bytes: u64| bytes as f64 / f64::from(1u32 << 20);
        let _ = writeln!(
            out,
            "\nmemory: {:.1} of {:.0} MiB held by the sessions",
            mib(memory.held_bytes),
            mib(memory.budget_bytes)
        );
    }
    if report.cookie_replies_sent > 0 {
        let _ = writeln!(
            out,
            "\ncookie replies sent: {} (handshakes under load)",
            report.cookie_replies_sent
        );
    }
    let _ = writeln!(
        out,
        "\ndrops: {}",
        if drops.is_empty() {
            "none".to_owned()
        } else {
            drops.join(" ")
        }
    );
    // The running daemon's build, which may differ from the `mptund` that asks.
    let _ = writeln!(out, "daemon: mptund {}", crate::VERSION);
    out
}

fn session_block(out: &mut String, session: &SessionReport, interfaces: &Interfaces) {
    let reorder = &session.reorder;
    let _ = writeln!(
        out,
        "peer {}  session {:08x}  up {}  keys ({}) {} old, renewed {}  reinjected {}  queued {} (waiting {})",
        session.peer,
        session.local_id,
        duration(session.age_ms as f64 / 1e3),
        session.cipher,
        duration(session.key_age_ms as f64 / 1e3),
        session.key_renewals,
        session.reinjected,
        session.queued,
        session.send_queue_depth,
    );
    let _ = writeln!(
        out,
        "  reorder: {} buffered, {} waited, {} late, {} gaps skipped, {} duplicates, hold {} (max seen {}), equalized +{}",
        reorder.buffered,
        reorder.released_after_wait,
        reorder.released_late,
        reorder.gaps_skipped,
        reorder.duplicates,
        millis(Some(reorder.hold_ms)),
        millis(Some(reorder.max_hold_seen_ms)),
        millis(Some(reorder.equalized_delay_ms)),
    );
    let placed: Vec<String> = session
        .paths
        .iter()
        .map(|path| match path.share_floor_rate_bytes_per_s {
            Some(floor) => format!(
                "{} {} (floor {})",
                path.name,
                path.share_floor_packets,
                rate(Some(floor))
            ),
            None => format!("{} {}", path.name, path.share_floor_packets),
        })
        .collect();
    let _ = writeln!(
        out,
        "  capacity shares: {}, packets placed by the floors: {}",
        if session.capacity_sharing {
            "on"
        } else {
            "off"
        },
        placed.join(", "),
    );
    path_rows(out, &session.paths, interfaces);
    for path in &session.paths {
        if path.validations_started == 0 && path.validating.is_none() {
            continue;
        }
        let _ = writeln!(
            out,
            "  {}: address validations {} started, {} moved the path{}",
            path.name,
            path.validations_started,
            path.validations_succeeded,
            path.validating
                .as_ref()
                .map_or(String::new(), |candidate| format!(
                    ", validating {candidate}"
                )),
        );
    }
}

fn path_rows(out: &mut String, paths: &[PathReport], interfaces: &Interfaces) {
    let mut rows: Vec<Vec<String>> = vec![HEADER.iter().map(|h| (*h).to_owned()).collect()];
    for path in paths {
        rows.push(vec![
            path.name.clone(),
            interfaces.get(&path.name).unwrap_or_else(|| "-".to_owned()),
            path.state.to_owned(),
            millis(path.srtt_ms),
            millis(path.min_rtt_ms),
            bytes(path.cwnd_bytes),
            bytes(path.bytes_in_flight),
            rate(path.pacing_rate_bytes_per_s),
            rate(path.delivery_rate_bytes_per_s),
            format!("{:.1}%", path.loss_rate * 100.0),
            format!("{} pkt {}", path.sent_packets, bytes(path.sent_bytes)),
            format!(
                "{} pkt {}",
                path.received_packets,
                bytes(path.received_bytes)
            ),
        ]);
    }
    let mut widths = vec![0; HEADER.len()];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::from("  ");
        for (index, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The columns of `mptund status --dump`, in order. Rates are bytes per second,
/// times milliseconds, loss a fraction; `-` where nothing is known yet.
pub const DUMP_COLUMNS: [&str; 18] = [
    "peer",
    "session",
    "path",
    "interface",
    "state",
    "remote",
    "rtt_ms",
    "min_rtt_ms",
    "cwnd_bytes",
    "in_flight_bytes",
    "send_rate_bytes_per_s",
    "delivery_rate_bytes_per_s",
    "loss_rate",
    "lost_packets",
    "sent_packets",
    "sent_bytes",
    "received_packets",
    "received_bytes",
];

/// The report as one tab-separated line per path ([`DUMP_COLUMNS`]), without a
/// header; a client's paths before its session is up have peer and session `-`.
pub fn dump(report: &Report, interfaces: &Interfaces) -> String {
    let mut out = String::new();
    let in_sessions = report.sessions.iter().flat_map(|session| {
        let session_id = format!("{:08x}", session.local_id);
        session
            .paths
            .iter()
            .map(move |path| (session.peer.as_str(), session_id.clone(), path))
    });
    let idle = report
        .idle_paths
        .iter()
        .map(|path| ("-", "-".to_owned(), path));
    for (peer, session_id, path) in in_sessions.chain(idle) {
        let optional = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
        let fields: [String; DUMP_COLUMNS.len()] = [
            peer.to_owned(),
            session_id,
            path.name.clone(),
            optional(interfaces.get(&path.name)),
            path.state.to_owned(),
            optional(path.remote.clone()),
            optional(path.srtt_ms.map(|ms| format!("{ms:.3}"))),
            optional(path.min_rtt_ms.map(|ms| format!("{ms:.3}"))),
            path.cwnd_bytes.to_string(),
            path.bytes_in_flight.to_string(),
            optional(path.pacing_rate_bytes_per_s.map(|rate| rate.to_string())),
            optional(path.delivery_rate_bytes_per_s.map(|rate| rate.to_string())),
            format!("{:.6}", path.loss_rate),
            path.lost_packets.to_string(),
            path.sent_packets.to_string(),
            path.sent_bytes.to_string(),
            path.received_packets.to_string(),
            path.received_bytes.to_string(),
        ];
        out.push_str(&fields.join("\t"));
        out.push('\n');
    }
    out
}

fn millis(ms: Option<f64>) -> String {
    match ms {
        Some(ms) if ms < 10.0 => format!("{ms:.2} ms"),
        Some(ms) => format!("{ms:.1} ms"),
        None => "-".to_owned(),
    }
}

fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn rate(bytes_per_s: Option<u64>) -> String {
    match bytes_per_s {
        Some(rate) => format!("{:.1} Mbit/s", rate as f64 * 8.0 / 1e6),
        None => "-".to_owned(),
    }
}

fn duration(seconds: f64) -> String {
    let whole = seconds as u64;
    match whole {
        0..=59 => format!("{seconds:.1}s"),
        60..=3599 => format!("{}m{:02}s", whole / 60, whole % 60),
        _ => format!("{}h{:02}m", whole / 3600, whole % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_report_names_the_build_before_the_report() {
        let drops = crate::counters::DropCounters::default();
        let report = Report::new("server", Vec::new(), Vec::new(), &drops, 3);
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&JsonReport::new(&report)).expect("JSON"))
                .expect("one JSON document");
        assert_eq!(json["build"]["commit"], crate::BUILD_COMMIT);
        assert_eq!(json["build"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(json["role"], "server");
        assert_eq!(json["sessions_established"], 3);
    }

    #[test]
    fn units_read_at_a_glance() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(rate(Some(12_500_000)), "100.0 Mbit/s");
        assert_eq!(rate(None), "-");
        assert_eq!(millis(Some(1.234)), "1.23 ms");
        assert_eq!(millis(Some(42.0)), "42.0 ms");
        assert_eq!(duration(5.0), "5.0s");
        assert_eq!(duration(125.0), "2m05s");
        assert_eq!(duration(7300.0), "2h01m");
    }

    #[test]
    fn the_table_shows_cookie_replies_and_flood_drops() {
        let now = std::time::Instant::now();
        let mut drops = crate::counters::DropCounters::default();
        drops.record(now, crate::counters::DropReason::CookieRequired, &"test");
        drops.record(
            now,
            crate::counters::DropReason::HandshakeRateLimited,
            &"test",
        );
        let mut report = Report::new("server", Vec::new(), Vec::new(), &drops, 0);
        let quiet = table(&report, &Interfaces::default());
        assert!(!quiet.contains("cookie replies"), "{quiet}");
        report.cookie_replies_sent = 1;
        let text = table(&report, &Interfaces::default());
        assert!(text.contains("cookie replies sent: 1"), "{text}");
        let build = format!("daemon: mptund {}", crate::VERSION);
        assert!(text.lines().any(|line| line == build), "{text}");
        assert!(
            text.contains("cookie_required=1 handshake_rate_limited=1"),
            "{text}"
        );
    }
}
