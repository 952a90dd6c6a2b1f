//! A serialisable snapshot of the daemon's sessions, paths and drop counters, for the
//! periodic log line and the JSON written with `--stats-file`.

use std::time::Instant;

use mptund_probe::cc::Controller;
use serde::Serialize;

use super::{Session, SessionPath};
use crate::counters::DropCounters;

#[derive(Debug, Serialize)]
pub struct Report {
    pub role: &'static str,
    pub sessions_established: u64,
    pub sessions: Vec<SessionReport>,
    /// Client paths while no session is up (with a session they are in `sessions`).
    pub idle_paths: Vec<PathReport>,
    pub drops: std::collections::BTreeMap<&'static str, u64>,
    /// Server: handshake inits answered with a cookie reply (under load).
    pub cookie_replies_sent: u64,
    /// Server: the packet buffers the sessions hold against the memory budget.
    pub memory: Option<MemoryReport>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemoryReport {
    /// Bytes of packet buffers the sessions hold.
    pub held_bytes: u64,
    /// `[limits] memory_budget_mib`, in bytes.
    pub budget_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct SessionReport {
    pub peer: String,
    pub local_id: u32,
    pub age_ms: u64,
    /// The scheduler placing this session's packets now.
    pub scheduler: &'static str,
    /// Whether the scheduler shares bulk traffic by the paths' capacity now (some
    /// path has a floor).
    pub capacity_sharing: bool,
    pub paths: Vec<PathReport>,
    pub reorder: ReorderReport,
    /// The reorder buffer's own statistics, for metrics (the JSON carries
    /// `reorder` instead).
    #[serde(skip)]
    pub reorder_stats: mptund_sched::ReorderStats,
    /// Data datagrams re-sent on another path after theirs lost them.
    pub reinjected: u64,
    /// Inner packets that had to wait because every path was full (a counter).
    pub queued: u64,
    /// Packet buffers the session holds (reorder buffer, queues, copies kept for
    /// repair, parity decoders): what the server's memory budget counts.
    pub held_packets: usize,
    /// Inner packets waiting for a free path right now.
    pub send_queue_depth: usize,
    /// ECN-capable inner packets the send queue's AQM marked instead of dropping (a
    /// counter).
    pub ecn_marked: u64,
    pub standalone_acks: u64,
    pub piggybacked_acks: u64,
    /// Extra copies of latency-critical inner packets.
    pub duplicated: u64,
    /// Times a renewal handshake replaced the session's keys.
    pub key_renewals: u64,
    pub parity_sent: u64,
    pub parity_rebuilt: u64,
    pub parity_unrecoverable: u64,
    /// Age of the keys in use.
    pub key_age_ms: u64,
    /// The transport AEAD of the keys in use.
    pub cipher: &'static str,
}

#[derive(Debug, Serialize)]
pub struct ReorderReport {
    pub buffered: usize,
    /// The hold in force now (adaptive or fixed).
    pub hold_ms: f64,
    pub max_hold_seen_ms: f64,
    pub mean_hold_ms: f64,
    /// How much later than its fastest path the inner flow is handed on now, to even
    /// out the paths' delays (`reorder.equalize_delay`); 0 when off.
    pub equalized_delay_ms: f64,
    /// `(upper bound in ms or null for +Inf, packets)` per hold-time bucket.
    pub hold_histogram: Vec<(Option<f64>, u64)>,
    pub released_in_order: u64,
    pub released_after_wait: u64,
    pub released_late: u64,
    pub gaps_skipped: u64,
    pub seqs_skipped: u64,
    /// Skipped at once because the sender gave them up.
    pub seqs_skipped_early: u64,
    pub duplicates: u64,
    pub too_old: u64,
    pub backlogged: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PathReport {
    pub id: u8,
    pub name: String,
    pub state: &'static str,
    pub remote: Option<String>,
    pub sent_packets: u64,
    pub sent_bytes: u64,
    pub sent_data_packets: u64,
    pub received_packets: u64,
    pub received_bytes: u64,
    pub received_data_packets: u64,
    pub send_errors: u64,
    pub socket_full: u64,
    pub srtt_ms: Option<f64>,
    pub rtt_variance_ms: f64,
    pub min_rtt_ms: Option<f64>,
    /// The newest RTT sample, and how many samples the path has taken: a reader
    /// polling reports sees each sample (the simulator's timing tests do).
    pub latest_rtt_ms: Option<f64>,
    pub rtt_samples: u64,
    pub since_last_received_ms: Option<u64>,
    /// Liveness as the probe sees it: active, suspect, down, probing.
    pub liveness: String,
    pub cwnd_bytes: u64,
    /// Where the path's congestion controller is: startup, drain or cruise
    /// (delay-rate), slow start or avoidance (CUBIC).
    pub congestion_phase: &'static str,
    /// The controller's estimate of the path's bottleneck rate (delay-rate's rate
    /// filter), in bytes per second; none for CUBIC.
    pub bottleneck_rate_bytes_per_s: Option<u64>,
    pub bytes_in_flight: u64,
    pub delivery_rate_mbit: Option<f64>,
    /// The delivery rate estimate in bytes per second.
    pub delivery_rate_bytes_per_s: Option<u64>,
    /// The rate the pacer sends at, in bytes per second.
    pub pacing_rate_bytes_per_s: Option<u64>,
    pub queuing_delay_ms: Option<f64>,
    /// The queuing delay the path's congestion controller lets stand before it backs
    /// off (delay-rate's target; none for CUBIC).
    pub queuing_delay_target_ms: Option<f64>,
    /// The spread of the forward one-way delay of packets sent into the idle path
    /// (the link's jitter), once measured.
    pub jitter_ms: Option<f64>,
    pub owd_trend_us_per_s: Option<f64>,
    pub loss_rate: f64,
    pub lost_packets: u64,
    /// Packets declared lost and acknowledged later: the path reordered them.
    pub spurious_losses: u64,
    /// Times the path's losses amounted to persistent congestion (RFC 9002 §7.6) and
    /// its controller restarted from the least window.
    pub persistent_congestions: u64,
    /// Packets sent later that must be acknowledged before one is declared lost; more
    /// than 3 once the path reordered.
    pub packet_threshold: u64,
    /// Data datagrams of this path re-sent on another path.
    pub reinjected_away: u64,
    /// Bulk packets the scheduler's capacity shares placed on this path rather than
    /// where they would have arrived first (earliest-arrival); restarts when a reload
    /// changes the scheduler.
    pub share_floor_packets: u64,
    /// The path's floor while the scheduler shares bulk traffic by capacity, in bytes
    /// per second; none while the traffic is too light to share.
    pub share_floor_rate_bytes_per_s: Option<u64>,
    /// Server: the new address being validated, if any.
    pub validating: Option<String>,
    /// Server: validations of a new address started and succeeded (the path moved).
    pub validations_started: u64,
    pub validations_succeeded: u64,
}

impl PathReport {
    /// `share` is what the session's scheduler reports for the path
    /// (`PathShare::default()` for a client's path while it has no session).
    pub fn new(
        path: &SessionPath,
        now: Instant,
        path_timeout: std::time::Duration,
        share: mptund_sched::PathShare,
    ) -> Self {
        let stats = path.stats(now);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        Self {
            id: path.id.0,
            name: path.name.clone(),
            state: match path.scheduler_state(now, path_timeout) {
                mptund_sched::PathState::Up => "up",
                mptund_sched::PathState::Suspect => "suspect",
                _ => "down",
            },
            remote: path.remote.map(|remote| remote.to_string()),
            sent_packets: stats.counters.sent_packets,
            sent_bytes: stats.counters.sent_bytes,
            sent_data_packets: stats.counters.sent_data_packets,
            received_packets: stats.counters.received_packets,
            received_bytes: stats.counters.received_bytes,
            received_data_packets: stats.counters.received_data_packets,
            send_errors: stats.counters.send_errors,
            socket_full: stats.counters.socket_full,
            srtt_ms: stats.rtt.map(ms),
            rtt_variance_ms: ms(stats.rtt_variance),
            min_rtt_ms: stats.min_rtt.map(ms),
            latest_rtt_ms: stats.latest_rtt.map(ms),
            rtt_samples: path.probe.rtt.samples(),
            liveness: format!("{:?}", stats.liveness).to_lowercase(),
            cwnd_bytes: stats.cwnd,
            congestion_phase: path.probe.controller().phase(),
            bottleneck_rate_bytes_per_s: path.probe.controller().bottleneck_rate(),
            bytes_in_flight: stats.bytes_in_flight,
            delivery_rate_mbit: stats.delivery_rate.map(|bytes| bytes as f64 * 8.0 / 1e6),
            delivery_rate_bytes_per_s: stats.delivery_rate,
            pacing_rate_bytes_per_s: path.pacing_rate(),
            queuing_delay_ms: stats.queuing_delay.map(ms),
            queuing_delay_target_ms: path.probe.controller().queuing_delay_target().map(ms),
            jitter_ms: stats.jitter.map(ms),
            owd_trend_us_per_s: stats.owd_trend_us_per_s,
            loss_rate: stats.loss_rate,
            lost_packets: stats.lost_packets,
            spurious_losses: stats.spurious_losses,
            persistent_congestions: stats.persistent_congestions,
            packet_threshold: stats.packet_threshold,
            reinjected_away: path.reinjected_away,
            share_floor_packets: share.floor_packets,
            share_floor_rate_bytes_per_s: share.floor_rate_bytes_per_sec,
            validating: path
                .validation
                .as_ref()
                .map(|validation| validation.candidate.to_string()),
            validations_started: path.validations_started,
            validations_succeeded: path.validations_succeeded,
            since_last_received_ms: stats.since_last_received.map(|d| d.as_millis() as u64),
        }
    }
}

impl SessionReport {
    pub fn new(session: &Session, peer: &str, now: Instant) -> Self {
        let reorder = session.reorder_stats();
        let paths: Vec<PathReport> = session
            .paths
            .iter()
            .map(|path| {
                let share = session.path_share(now, path.id);
                PathReport::new(path, now, session.path_timeout(), share)
            })
            .collect();
        Self {
            peer: peer.to_owned(),
            local_id: session.local_id.0,
            scheduler: session.scheduler_name(),
            age_ms: now
                .saturating_duration_since(session.established)
                .as_millis() as u64,
            capacity_sharing: paths
                .iter()
                .any(|path| path.share_floor_rate_bytes_per_s.is_some()),
            paths,
            reorder: ReorderReport {
                buffered: session.reorder_len(),
                hold_ms: millis(session.reorder_hold()),
                max_hold_seen_ms: millis(reorder.max_hold),
                mean_hold_ms: millis(reorder.total_hold) / reorder.released().max(1) as f64,
                equalized_delay_ms: millis(session.equalized_delay(now)),
                hold_histogram: reorder
                    .hold_histogram
                    .buckets()
                    .map(|(bound, count)| (bound.map(millis), count))
                    .collect(),
                seqs_skipped_early: reorder.seqs_skipped_early,
                released_in_order: reorder.released_in_order,
                released_after_wait: reorder.released_after_wait,
                released_late: reorder.released_late,
                gaps_skipped: reorder.gaps_skipped,
                seqs_skipped: reorder.seqs_skipped,
                duplicates: reorder.duplicates,
                too_old: reorder.too_old,
                backlogged: reorder.backlogged,
            },
            reinjected: session.counters.reinjected,
            key_renewals: session.counters.key_renewals,
            key_age_ms: session.key_age(now).as_millis() as u64,
            cipher: session.keys.current().aead().name(),
            queued: session.counters.queued,
            send_queue_depth: session.send_queue_depth(),
            ecn_marked: session.counters.ecn_marked,
            standalone_acks: session.counters.standalone_acks,
            piggybacked_acks: session.counters.piggybacked_acks,
            duplicated: session.counters.duplicated,
            parity_sent: session.counters.parity_sent,
            parity_rebuilt: session.counters.parity_rebuilt,
            parity_unrecoverable: session.counters.parity_unrecoverable,
            held_packets: session.held_packets(),
            // Last: moves the stats once the fields above have read them.
            reorder_stats: reorder,
        }
    }
}

fn millis(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Report {
    pub fn new(
        role: &'static str,
        sessions: Vec<SessionReport>,
        idle_paths: Vec<PathReport>,
        drops: &DropCounters,
        sessions_established: u64,
    ) -> Self {
        Self {
            role,
            sessions_established,
            sessions,
            idle_paths,
            cookie_replies_sent: 0,
            memory: None,
            drops: drops
                .iter()
                .map(|(reason, count)| (reason.as_str(), count))
                .collect(),
        }
    }

    /// One line per path, for the periodic log.
    pub fn log_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for session in &self.sessions {
            for path in &session.paths {
                lines.push(format!(
                    "peer={} path={} state={} tx={}pkt/{}B rx={}pkt/{}B srtt={} cwnd={}B lost={} send_errors={}",
                    session.peer,
                    path.name,
                    path.state,
                    path.sent_packets,
                    path.sent_bytes,
                    path.received_packets,
                    path.received_bytes,
                    path.srtt_ms
                        .map_or("-".to_owned(), |ms| format!("{ms:.1}ms")),
                    path.cwnd_bytes,
                    path.lost_packets,
                    path.send_errors,
                ));
            }
        }
        lines
    }
}
