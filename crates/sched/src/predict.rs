//! Predicting when a packet sent now on a path reaches the receiver.
//!
//! The model is the one of EDPF, "Earliest Delivery Path First" (Chebrolu &
//! Rao, "Bandwidth aggregation for real-time applications in heterogeneous
//! wireless networks", IEEE Transactions on Mobile Computing 5(4), 2006, §4):
//! each path is a FIFO bottleneck of rate `r` behind a fixed one-way delay
//! `d`, and a packet handed to the path now arrives after
//!
//! ```text
//! arrival = d + (bytes queued ahead of it at the bottleneck + its own length) / r
//! ```
//!
//! Schedulers of the same family ("earliest arrival", DEMS, ECF's completion
//! times) differ in how they choose among these predictions, not in the model.
//!
//! mptund cannot see the bottleneck queue, so it is estimated from what the
//! sender knows: of the bytes in flight, one bandwidth-delay product
//! (`r × min_rtt`) is in propagation or on the acknowledgement path; the rest
//! must still be waiting at the bottleneck. This is the same split BBR makes
//! (in-flight above the BDP is queue). When the queue term cannot be
//! estimated (no rate) it is left out, so the prediction is the bare delay.
//!
//! Everything here is pure arithmetic on [`PathView`]: no state, no
//! allocation, safe to call per packet.

use std::time::Duration;

use crate::eligible::{least_loaded, Eligibility};
use crate::path::{PathId, PathSet, PathView, Pick};

/// Most paths [`latency_critical_paths`] returns: two copies survive the loss
/// or the sudden stall of one path, and a third buys little more for tiny
/// control packets (the reasoning of redundant schedulers, `seeds/001_*`
/// §2.1.3, applied only where duplication is cheap).
pub const LATENCY_CRITICAL_COPIES: usize = 2;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The rate at which the path can carry data, in bytes per second.
///
/// Prefers the measured delivery rate, then the congestion controller's
/// pacing rate, then `cwnd / srtt` (the rate a window-limited sender
/// reaches). An application-limited delivery rate is only a lower bound: a
/// path that carried nothing but probes measures the probes' rate, and
/// trusting it would predict seconds of serialization and keep the path idle
/// for good. Then the highest of the three counts. `None` when none of them
/// is known. A zero estimate counts as unknown: it cannot drain anything and
/// would predict an infinite wait.
pub fn rate_estimate_bytes_per_sec(view: &PathView) -> Option<u64> {
    let delivery = view
        .delivery_rate_bps
        .filter(|&bps| bps >= 8)
        .map(|bps| bps / 8);
    if !view.delivery_rate_app_limited && delivery.is_some() {
        return delivery;
    }
    let pacing = view
        .pacing_rate_bps
        .filter(|&bps| bps >= 8)
        .map(|bps| bps / 8);
    if !view.delivery_rate_app_limited && pacing.is_some() {
        return pacing;
    }
    [delivery, pacing, window_rate(view)]
        .into_iter()
        .flatten()
        .max()
}

/// What the path can carry, in bytes per second: its controller's bottleneck estimate
/// ([`PathView::bottleneck_rate_bps`]), which a path offered less than it carries keeps,
/// else [`rate_estimate_bytes_per_sec`]. `None` when neither is known.
pub fn capacity_bytes_per_sec(view: &PathView) -> Option<u64> {
    view.bottleneck_rate_bps
        .filter(|&bps| bps >= 8)
        .map(|bps| bps / 8)
        .or_else(|| rate_estimate_bytes_per_sec(view))
}

/// `cwnd / srtt` in bytes per second, if both are known and the rate is not zero.
fn window_rate(view: &PathView) -> Option<u64> {
    rate_of(view.cwnd_bytes?, view.srtt?)
}

/// `bytes` per `duration` in bytes per second; `None` for a zero duration or rate.
fn rate_of(bytes: u64, duration: Duration) -> Option<u64> {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return None;
    }
    let rate = u128::from(bytes) * NANOS_PER_SEC / nanos;
    u64::try_from(rate).ok().filter(|&rate| rate > 0)
}

/// The one-way delay towards the peer: measured, else half the smoothed RTT,
/// else half the minimum RTT. `None` when the path has no delay measurement.
pub fn one_way_delay_estimate(view: &PathView) -> Option<Duration> {
    view.one_way_delay
        .or(view.srtt.map(|srtt| srtt / 2))
        .or(view.min_rtt.map(|rtt| rtt / 2))
}

/// Time from now until a packet of `packet_len` bytes, sent on `view`'s path
/// now, would arrive at the receiver (see the module docs for the model).
///
/// The bandwidth-delay product uses `min_rtt`, or `srtt` when no minimum is
/// known; with neither (only a one-way delay), every byte in flight is taken
/// to be queued, which errs towards a later arrival. Returns `None` when the
/// path has no delay measurement at all.
pub fn predicted_arrival(view: &PathView, packet_len: usize) -> Option<Duration> {
    arrival_at_rate(view, packet_len, rate_estimate_bytes_per_sec(view))
}

/// [`predicted_arrival`] with the queue drained at `rate` (bytes per second); the bare
/// one-way delay without one.
fn arrival_at_rate(view: &PathView, packet_len: usize, rate: Option<u64>) -> Option<Duration> {
    let one_way = one_way_delay_estimate(view)?;
    let Some(rate) = rate else {
        return Some(one_way);
    };
    let bdp_bytes = view
        .min_rtt
        .or(view.srtt)
        .map_or(0, |rtt| bytes_in(rate, rtt));
    let queued_ahead = view.bytes_in_flight.saturating_sub(bdp_bytes);
    let to_drain = queued_ahead.saturating_add(packet_len as u64);
    Some(one_way.saturating_add(transmit_time(to_drain, rate)))
}

/// Like [`predicted_arrival`], with the one-way delay at
/// [`PathView::one_way_delay_floor`] where that is lower: the arrival to judge a path
/// by when overstating it would shut the path out.
pub fn earliest_possible_arrival(view: &PathView, packet_len: usize) -> Option<Duration> {
    predicted_arrival(&with_delay_floor(view), packet_len)
}

/// `view` with its one-way delay at [`PathView::one_way_delay_floor`] where that is lower.
fn with_delay_floor(view: &PathView) -> PathView {
    let mut floored = *view;
    if let (Some(delay), Some(floor)) = (view.one_way_delay, view.one_way_delay_floor) {
        floored.one_way_delay = Some(delay.min(floor));
    }
    floored
}

/// Like [`earliest_possible_arrival`], with the queue ahead drained at the rate the path
/// has shown, not at the one it is probed with: the arrival to hold against the
/// receiver's reorder window, where a late estimate costs the inner flow a loss.
///
/// The shown rate is the higher of the controller's bottleneck estimate and the latest
/// delivery rate, and at least an initial window of ten packets per round trip.
/// [`rate_estimate_bytes_per_sec`] takes an application-limited path at
/// its pacing rate or `cwnd / srtt`, so as not to shut it out, and a controller in
/// Startup has both at 2/ln 2 times the rate it found: by that estimate its Startup
/// window, 2/ln 2 bandwidth-delay products, holds no queue at all. On a modem 120 ms
/// away behind one 8 ms away (u-five-asym, `benches/schedulers/REPORT.md`) the window
/// was filled at once, its queue reached 180 ms, and more than a hundred of the inner
/// flow's packets came after the receiver gave their gaps up. Drained at the shown
/// rate, a path is never shut out (empty, its arrival is its delay and one packet), and
/// it is filled only as deep as the reorder window leaves room; what it then delivers
/// raises the shown rate where there was more.
pub fn arrival_at_shown_rate(view: &PathView, packet_len: usize) -> Option<Duration> {
    let unproven = view.min_rtt.or(view.srtt).and_then(|rtt| {
        rate_of(
            UNPROVEN_WINDOW_PACKETS.saturating_mul(packet_len as u64),
            rtt,
        )
    });
    let Some(unproven) = unproven else {
        return earliest_possible_arrival(view, packet_len);
    };
    let shown = [view.bottleneck_rate_bps, view.delivery_rate_bps]
        .into_iter()
        .flatten()
        .map(|bps| bps / 8)
        .fold(unproven, u64::max);
    arrival_at_rate(&with_delay_floor(view), packet_len, Some(shown))
}

/// What [`arrival_at_shown_rate`] lets a path hold per round trip before it has shown
/// any rate: an initial window (RFC 9002 §7.2), so a path nothing was sent on yet is
/// filled as a fresh connection would be, and what that delivers shows the rest.
const UNPROVEN_WINDOW_PACKETS: u64 = 10;

/// Like [`predicted_arrival`], for a path whose congestion window is full
/// now: the arrival of the packet if it is sent the moment the window opens
/// (once the bytes in flight have dropped to `cwnd - packet_len`).
///
/// Evaluated now, [`predicted_arrival`] would count the packet whose
/// acknowledgement opens the window as still queued ahead, although it has
/// already left the bottleneck: with acknowledgements arriving one packet
/// (or one feedback batch) at a time, that overstates the wait by up to one
/// packet's serialization, 25 ms for 1400 bytes at 0.44 Mbit/s. This is the
/// lower bound instead, so a scheduler that waits for a full path whenever
/// it would be earlier errs towards waiting, which never reorders, rather
/// than towards overtaking it on a slower path, which does. For a path with
/// room, or without a window, it equals [`predicted_arrival`].
pub fn predicted_arrival_when_open(view: &PathView, packet_len: usize) -> Option<Duration> {
    let mut at_opening = *view;
    if let Some(cwnd) = view.cwnd_bytes {
        at_opening.bytes_in_flight = view
            .bytes_in_flight
            .min(cwnd.saturating_sub(packet_len as u64));
    }
    predicted_arrival(&at_opening, packet_len)
}

/// How much later than the packet itself the last byte of a backlog of
/// `backlog_bytes` would arrive if it all waited for the same path: the backlog at
/// the path's rate.
///
/// Holding one packet for a fast path is right when that packet alone would
/// arrive earlier; the packets queued behind it wait for the same path, and the
/// last of them arrives this much later (ECF's insight, Lim et al., CoNEXT 2017,
/// §3: weigh the send buffer, not one packet). Once that is later than a path that
/// can send now, that path adds capacity instead of reordering. Without a rate
/// estimate the backlog cannot be weighed: zero.
pub fn backlog_drain_time(view: &PathView, backlog_bytes: u64) -> Duration {
    rate_estimate_bytes_per_sec(view)
        .map_or(Duration::ZERO, |rate| transmit_time(backlog_bytes, rate))
}

/// Where a packet sent again after a loss goes (see [`repair_route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairRoute {
    /// Send it now on this path.
    Now(PathId),
    /// This path delivers it first once it can send: the repair waits first in line
    /// for it. New packets may still take the other paths meanwhile.
    WaitFor(PathId),
    /// No eligible path at all.
    Nowhere,
}

/// Where a packet sent again after a loss goes: the eligible path that delivers it
/// first, a full path counted from the moment its window opens
/// ([`predicted_arrival_when_open`]), waiting for it while it cannot send yet
/// rather than taking a slower path now.
///
/// A repair is what the receiver's whole stream waits for (its reorder buffer holds
/// everything behind the gap), so it goes where it arrives first, whatever the
/// scheduler does with new packets. A path with room now is not the answer: the
/// windows of fast paths are usually full under load, and a repair sent on the slow
/// path that happened to have room arrived after the receiver gave its gap up (three
/// lossy paths, 12/30/45 ms one way: repairs on the 45 ms path came 100–120 ms after
/// the gap opened). Paths without a delay measurement are used only when no path has
/// one, the least loaded first.
pub fn repair_route(paths: &[PathView], packet_len: usize) -> RepairRoute {
    let rule = Eligibility::of(paths);
    // (arrival, cannot send now, id): the earliest arrival, then a path that can send.
    let mut best: Option<(Duration, bool, PathId)> = None;
    for path in paths.iter().filter(|path| rule.allows(path)) {
        let Some(arrival) = predicted_arrival_when_open(path, packet_len) else {
            continue;
        };
        let key = (arrival, !path.can_send(packet_len), path.id);
        if best.is_none_or(|best| key < best) {
            best = Some(key);
        }
    }
    match best {
        Some((_, false, id)) => RepairRoute::Now(id),
        Some((_, true, id)) => RepairRoute::WaitFor(id),
        None => least_loaded(paths, rule, packet_len, |_| true)
            .map_or(RepairRoute::Nowhere, RepairRoute::Now),
    }
}

/// [`repair_route`] as a [`Pick`]: [`Pick::Hold`] while the repair waits.
pub fn repair_pick(paths: &[PathView], packet_len: usize) -> Pick {
    match repair_route(paths, packet_len) {
        RepairRoute::Now(id) => Pick::One(id),
        RepairRoute::WaitFor(_) | RepairRoute::Nowhere => Pick::Hold,
    }
}

/// Up to [`LATENCY_CRITICAL_COPIES`] eligible paths (Up, not backup unless no
/// regular path is Up) that would deliver a packet of `packet_len` bytes
/// earliest, for duplicating latency-critical inner packets (pure TCP ACKs,
/// SYN/FIN/RST, DNS).
///
/// Congestion window and pacer are ignored on purpose: these packets are tiny
/// and rare, and holding a TCP ACK behind a full window would stall the very
/// flow the window protects. Paths without a delay measurement rank after
/// measured ones; ties go to the lowest id.
pub fn latency_critical_paths(paths: &[PathView], packet_len: usize) -> PathSet {
    let rule = Eligibility::of(paths);
    // (unmeasured, predicted arrival, id): smaller is better.
    type Key = (bool, Duration, PathId);
    let mut best: [Option<Key>; LATENCY_CRITICAL_COPIES] = [None; LATENCY_CRITICAL_COPIES];
    for path in paths.iter().filter(|path| rule.allows(path)) {
        let arrival = predicted_arrival(path, packet_len);
        let mut key: Key = (
            arrival.is_none(),
            arrival.unwrap_or(Duration::ZERO),
            path.id,
        );
        // Insertion into a sorted array of two.
        for slot in &mut best {
            match slot {
                None => {
                    *slot = Some(key);
                    break;
                }
                Some(held) if key < *held => std::mem::swap(held, &mut key),
                Some(_) => {}
            }
        }
    }
    best.iter().flatten().map(|&(_, _, id)| id).collect()
}

/// The path's window in bytes: its congestion window, else what its rate
/// estimate carries in one smoothed RTT. For schedulers that reason in
/// windows (ECF, BLEST) about paths limited by a pacer rather than a window.
pub(crate) fn window_estimate_bytes(view: &PathView) -> Option<u64> {
    view.cwnd_bytes.or_else(|| {
        let rtt = view.srtt.or(view.min_rtt)?;
        Some(bytes_in(rate_estimate_bytes_per_sec(view)?, rtt))
    })
}

/// Bytes a path of `rate` bytes/s carries in `duration`.
pub(crate) fn bytes_in(rate_bytes_per_sec: u64, duration: Duration) -> u64 {
    let bytes = u128::from(rate_bytes_per_sec) * duration.as_nanos() / NANOS_PER_SEC;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// Time a path of `rate` bytes/s (> 0) needs to carry `bytes`.
pub(crate) fn transmit_time(bytes: u64, rate_bytes_per_sec: u64) -> Duration {
    let nanos = u128::from(bytes) * NANOS_PER_SEC / u128::from(rate_bytes_per_sec.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;

    const MS: Duration = Duration::from_millis(1);

    fn measured(id: u8, one_way_ms: u64, rate_mbit: u64) -> PathView {
        let mut view = PathView::new(PathId(id), PathState::Up);
        view.one_way_delay = Some(MS * one_way_ms as u32);
        view.min_rtt = Some(MS * 2 * one_way_ms as u32);
        view.srtt = Some(MS * 2 * one_way_ms as u32);
        view.delivery_rate_bps = Some(rate_mbit * 1_000_000);
        view
    }

    #[test]
    fn a_repair_waits_for_the_path_that_delivers_it_first() {
        // 5G 12 ms at 24 Mbit/s with its window full, the far LTE path 45 ms with room.
        let mut fast = measured(0, 12, 24);
        fast.cwnd_bytes = Some(72_000);
        fast.bytes_in_flight = 72_000;
        let slow = measured(1, 45, 12);
        assert_eq!(repair_pick(&[fast, slow], 1400), Pick::Hold);
        assert_eq!(
            repair_route(&[fast, slow], 1400),
            RepairRoute::WaitFor(PathId(0))
        );
        // Once the window opens, the repair goes there.
        fast.bytes_in_flight = 60_000;
        assert_eq!(repair_pick(&[fast, slow], 1400), Pick::One(PathId(0)));
        // A fast path so deep in queue that the slow one is earlier: the slow one.
        let mut queued = measured(0, 12, 24);
        queued.bytes_in_flight = 300_000;
        assert_eq!(repair_pick(&[queued, slow], 1400), Pick::One(PathId(1)));
    }

    #[test]
    fn a_repair_on_unmeasured_paths_goes_to_the_least_loaded() {
        let mut busy = PathView::new(PathId(0), PathState::Up);
        busy.bytes_in_flight = 5_000;
        let idle = PathView::new(PathId(1), PathState::Up);
        assert_eq!(repair_pick(&[busy, idle], 1400), Pick::One(PathId(1)));
        assert_eq!(repair_pick(&[], 1400), Pick::Hold);
        assert_eq!(repair_route(&[], 1400), RepairRoute::Nowhere);
    }

    #[test]
    fn rate_prefers_delivery_then_pacing_then_window() {
        let mut view = PathView::new(PathId(0), PathState::Up);
        assert_eq!(rate_estimate_bytes_per_sec(&view), None);
        view.cwnd_bytes = Some(100_000);
        assert_eq!(
            rate_estimate_bytes_per_sec(&view),
            None,
            "cwnd without srtt"
        );
        view.srtt = Some(100 * MS);
        assert_eq!(rate_estimate_bytes_per_sec(&view), Some(1_000_000));
        view.pacing_rate_bps = Some(16_000_000);
        assert_eq!(rate_estimate_bytes_per_sec(&view), Some(2_000_000));
        view.delivery_rate_bps = Some(0);
        assert_eq!(
            rate_estimate_bytes_per_sec(&view),
            Some(2_000_000),
            "zero delivery rate is unknown"
        );
        view.delivery_rate_bps = Some(8_000_000);
        assert_eq!(rate_estimate_bytes_per_sec(&view), Some(1_000_000));
        view.srtt = Some(Duration::ZERO);
        view.delivery_rate_bps = None;
        view.pacing_rate_bps = None;
        assert_eq!(rate_estimate_bytes_per_sec(&view), None, "zero srtt");
    }

    #[test]
    fn an_app_limited_rate_is_a_lower_bound() {
        // A 60 ms path that carried only probes: 10 kbit/s measured, while its
        // controller allows 14,720 bytes per 120 ms RTT.
        let mut idle = measured(0, 60, 0);
        idle.delivery_rate_bps = Some(10_000);
        idle.delivery_rate_app_limited = true;
        idle.cwnd_bytes = Some(14_720);
        idle.srtt = Some(120 * MS);
        assert_eq!(rate_estimate_bytes_per_sec(&idle), Some(122_666));
        // 1400 bytes at the window's rate take about 11 ms, not 1.1 s at the probes'.
        let arrival = predicted_arrival(&idle, 1400).unwrap();
        assert!(arrival < 72 * MS, "{arrival:?}");
        idle.pacing_rate_bps = Some(8_000_000);
        assert_eq!(rate_estimate_bytes_per_sec(&idle), Some(1_000_000));
        // A higher app-limited sample still counts as measured.
        idle.delivery_rate_bps = Some(16_000_000);
        assert_eq!(rate_estimate_bytes_per_sec(&idle), Some(2_000_000));
        // Not app-limited: the measurement wins even when the window would allow more.
        idle.delivery_rate_bps = Some(80_000);
        idle.delivery_rate_app_limited = false;
        assert_eq!(rate_estimate_bytes_per_sec(&idle), Some(10_000));
    }

    #[test]
    fn a_startup_window_is_queued_at_the_rate_the_path_has_shown() {
        // u-five-asym's slowest modem: 120 ms one way, 128 ms min RTT (acknowledged on
        // the fast path), 5 Mbit/s found. Its controller in Startup paces at 2/ln 2 of
        // that and allows 2/ln 2 bandwidth-delay products, 231 kB; it has them in flight.
        let mut startup = measured(0, 120, 0);
        startup.min_rtt = Some(128 * MS);
        startup.srtt = Some(128 * MS);
        startup.delivery_rate_bps = Some(4_000_000);
        startup.delivery_rate_app_limited = true;
        startup.bottleneck_rate_bps = Some(5_000_000);
        startup.pacing_rate_bps = Some(14_425_000);
        startup.cwnd_bytes = Some(231_000);
        startup.bytes_in_flight = 189_000;
        // At the pacing rate nothing is queued ahead.
        let probed = predicted_arrival(&startup, 1400).unwrap();
        assert!(probed < 121 * MS, "{probed:?}");
        // At the 625 kB/s found, 109 kB are: 175 ms more.
        let shown = arrival_at_shown_rate(&startup, 1400).unwrap();
        assert!(shown > 290 * MS && shown < 300 * MS, "{shown:?}");
        // A higher latest delivery rate counts too.
        startup.delivery_rate_bps = Some(10_000_000);
        let faster = arrival_at_shown_rate(&startup, 1400).unwrap();
        assert!(faster < 210 * MS, "{faster:?}");
    }

    #[test]
    fn a_path_that_has_shown_nothing_gets_an_initial_window() {
        // Only probes measured: 10 kbit/s, app-limited.
        let mut idle = measured(0, 60, 0);
        idle.delivery_rate_bps = Some(10_000);
        idle.delivery_rate_app_limited = true;
        idle.bottleneck_rate_bps = Some(10_000);
        // Empty, it is as far as its delay plus one packet of ten per RTT.
        let millis = |view: &PathView| arrival_at_shown_rate(view, 1400).unwrap().as_millis();
        assert_eq!(millis(&idle), 60 + 12);
        // Ten packets in flight are one RTT's worth: nothing queued ahead yet.
        idle.bytes_in_flight = 14_000;
        assert_eq!(millis(&idle), 60 + 12);
        // Twenty: ten more are queued ahead, another round trip.
        idle.bytes_in_flight = 28_000;
        assert_eq!(millis(&idle), 60 + 12 + 120);
        // Without any round trip measured, the prediction is the usual one.
        let mut unmeasured = PathView::new(PathId(1), PathState::Up);
        unmeasured.one_way_delay = Some(30 * MS);
        assert_eq!(arrival_at_shown_rate(&unmeasured, 1400), Some(30 * MS));
    }

    #[test]
    fn delay_falls_back_to_half_rtts() {
        let mut view = PathView::new(PathId(0), PathState::Up);
        assert_eq!(one_way_delay_estimate(&view), None);
        assert_eq!(predicted_arrival(&view, 1400), None);
        view.min_rtt = Some(30 * MS);
        assert_eq!(one_way_delay_estimate(&view), Some(15 * MS));
        view.srtt = Some(40 * MS);
        assert_eq!(one_way_delay_estimate(&view), Some(20 * MS));
        view.one_way_delay = Some(12 * MS);
        assert_eq!(one_way_delay_estimate(&view), Some(12 * MS));
        assert_eq!(
            predicted_arrival(&view, 1400),
            Some(12 * MS),
            "no rate: bare delay"
        );
    }

    #[test]
    fn arrival_adds_queue_above_the_bdp_and_serialization() {
        // 8 Mbit/s = 1 MB/s, min RTT 20 ms: BDP 20,000 bytes.
        let mut view = measured(0, 10, 8);
        assert_eq!(predicted_arrival(&view, 1000), Some(11 * MS), "empty path");
        view.bytes_in_flight = 20_000;
        assert_eq!(
            predicted_arrival(&view, 1000),
            Some(11 * MS),
            "only the BDP in flight"
        );
        view.bytes_in_flight = 70_000;
        assert_eq!(
            predicted_arrival(&view, 1000),
            Some(61 * MS),
            "50 kB queued"
        );
        view.min_rtt = None;
        view.srtt = Some(40 * MS);
        assert_eq!(
            predicted_arrival(&view, 1000),
            Some(41 * MS),
            "BDP from srtt"
        );
        view.srtt = None;
        assert_eq!(
            predicted_arrival(&view, 1000),
            Some(81 * MS),
            "no RTT: all queued"
        );
    }

    #[test]
    fn arrival_when_open_counts_the_window_not_the_excess() {
        // 1 MB/s, BDP 20,000, window 30,000 full and then some.
        let mut view = measured(0, 10, 8);
        view.cwnd_bytes = Some(30_000);
        view.bytes_in_flight = 30_000;
        // Now: 10 ms + (10,000 + 1,000) bytes; at opening: 10 ms + (9,000 + 1,000).
        assert_eq!(predicted_arrival(&view, 1000), Some(21 * MS));
        assert_eq!(predicted_arrival_when_open(&view, 1000), Some(20 * MS));
        view.bytes_in_flight = 5_000;
        assert_eq!(
            predicted_arrival_when_open(&view, 1000),
            predicted_arrival(&view, 1000),
            "room: the same"
        );
        view.cwnd_bytes = None;
        view.bytes_in_flight = 90_000;
        assert_eq!(predicted_arrival_when_open(&view, 1000), Some(81 * MS));
    }

    #[test]
    fn backlog_arrival_adds_the_backlog_at_the_path_rate() {
        // 1 MB/s, window 30,000 full: the packet at opening arrives at 20 ms, and
        // 50,000 bytes queued behind it take 50 ms more.
        let mut view = measured(0, 10, 8);
        view.cwnd_bytes = Some(30_000);
        view.bytes_in_flight = 30_000;
        let backlog_arrival = |view: &PathView, bytes| {
            predicted_arrival_when_open(view, 1000).map(|at| at + backlog_drain_time(view, bytes))
        };
        assert_eq!(
            backlog_arrival(&view, 0),
            predicted_arrival_when_open(&view, 1000)
        );
        assert_eq!(backlog_arrival(&view, 50_000), Some(70 * MS));
        view.delivery_rate_bps = None;
        view.cwnd_bytes = None;
        view.srtt = None;
        assert_eq!(
            backlog_arrival(&view, 50_000),
            Some(10 * MS),
            "no rate: the backlog cannot be weighed"
        );
    }

    #[test]
    fn latency_critical_picks_two_earliest_ignoring_window() {
        let mut fast_but_full = measured(3, 5, 10);
        fast_but_full.cwnd_bytes = Some(1000);
        fast_but_full.bytes_in_flight = 1000;
        fast_but_full.pacing_ready = false;
        let paths = [
            measured(0, 40, 10),
            measured(1, 20, 10),
            PathView::new(PathId(2), PathState::Up),
            fast_but_full,
            measured(4, 20, 10),
        ];
        let set = latency_critical_paths(&paths, 60);
        assert_eq!(set.iter().collect::<Vec<_>>(), [PathId(1), PathId(3)]);

        // Equal arrivals: lowest ids. Unmeasured rank last, but fill in.
        let paths = [
            measured(4, 20, 10),
            measured(1, 20, 10),
            measured(2, 20, 10),
        ];
        assert_eq!(
            latency_critical_paths(&paths, 60)
                .iter()
                .collect::<Vec<_>>(),
            [PathId(1), PathId(2)]
        );
        let paths = [PathView::new(PathId(0), PathState::Up), measured(5, 90, 1)];
        assert_eq!(
            latency_critical_paths(&paths, 60)
                .iter()
                .collect::<Vec<_>>(),
            [PathId(0), PathId(5)]
        );
    }

    #[test]
    fn latency_critical_respects_backup_and_state() {
        let mut backup = measured(0, 1, 10);
        backup.backup = true;
        let mut down = measured(1, 1, 10);
        down.state = PathState::Down;
        let paths = [backup, down, measured(2, 50, 10)];
        assert_eq!(
            latency_critical_paths(&paths, 60)
                .iter()
                .collect::<Vec<_>>(),
            [PathId(2)]
        );
        let paths = [backup, down];
        assert_eq!(
            latency_critical_paths(&paths, 60)
                .iter()
                .collect::<Vec<_>>(),
            [PathId(0)]
        );
        assert!(latency_critical_paths(&[], 60).is_empty());
    }
}
