//! Earliest arrival: each packet on the path that delivers it first.
//!
//! mptund's own scheduler, built on the EDPF model (Chebrolu & Rao,
//! "Bandwidth aggregation for real-time applications in heterogeneous
//! wireless networks", IEEE TMC 2006, §4: send each packet on the path with
//! the earliest predicted delivery) with ECF's insight (Lim et al., CoNEXT
//! 2017, §3: do not bypass a fast path just because it is momentarily full)
//! expressed in arrival times rather than completion times.
//!
//! For every eligible path (`eligible.rs`) that can send now, predict when
//! the packet would arrive ([`crate::predicted_arrival`]: one-way delay plus
//! the bottleneck queue ahead of it plus its own serialization) and send on
//! the earliest; equal predictions go to the path with fewer bytes in flight,
//! then the lowest id. Because the queue term grows with what a path already
//! carries, a fast path is loaded until its queue makes it as late as the
//! next path, then both share, and so on: packets sent in order arrive in
//! order, which is what the inner TCP and the reorder buffer want (the
//! high-speed-train study, `seeds/003_*` §6.1, shows delay asymmetry, i.e.
//! reordering, is what costs round-robin its throughput).
//!
//! Only paths that can send now (window room, pacer ready) compete: when the
//! fastest path is full, the packet goes to the path that delivers it first
//! among the others, and the receiver's reorder buffer hides the difference.
//! Because predictions count each path's bottleneck queue, a deep-buffered fast
//! path is not filled past the point where it delivers later than the next one.
//!
//! One limit: a packet is not sent where it would arrive more than the peer's
//! reorder window ([`crate::EarliestArrivalParams::reorder_window`]) after a full
//! path could deliver it once its window opens. It would come after the
//! receiver gave its gap up, so the inner flow would see it lost and then
//! duplicated; the scheduler returns [`Pick::Hold`] instead. A path whose base
//! delay alone ([`PathView::base_one_way_delay`]) is more than that window behind
//! the nearest eligible path's is not used at all while the nearer one is up: it
//! could only win against that path's predicted queue, and when the queue turned
//! out shorter, its packets came after the receiver gave their gaps up (a GEO
//! terminal 255 ms behind a lossy LTE link carried up to 1.7 % of a flow, and the
//! receiver skipped up to 69 gaps per 12 s run; one inner cubic flow lost 9 % of
//! its goodput). A GEO satellite (280 ms one way) behind 5G (8 ms) then carries
//! data only while the faster paths cannot (a 5G outage), not whenever they are
//! full. The arrival test takes the path at its [`crate::arrival_at_shown_rate`].
//! Its delay is the lower of two estimates: a path judged too late never carries
//! data, so its estimate never improves, and an idle path's delay is the one most
//! easily overstated (a modem 120 ms away next to one 8 ms away was estimated at
//! 232 ms and shut out).
//! Its queue drains at the rate the path has shown, not the one its controller
//! probes with: a far modem in Startup was otherwise filled to 180 ms of queue.
//!
//! Waiting for a full path is opt-in
//! ([`crate::EarliestArrivalParams::wait_margin`]): then, if an
//! eligible path that cannot send now would still deliver earlier than every
//! path that can, by more than the margin, the scheduler returns
//! [`Pick::Hold`]. The wait counts the send queue behind the packet
//! ([`crate::PacketInfo::queued_bytes`]), which waits for the same path
//! ([`crate::backlog_drain_time`], after ECF, Lim et al.,
//! CoNEXT 2017, §3). It is off by default because the benchmark
//! (`benches/schedulers/`, issue 13) measured it losing throughput wherever a
//! path's window is capped: by a one-BDP buffer, by random loss, or by a paced
//! inner flow that never fills a window. There every packet at the head of the
//! queue is "earlier" on the fast path, the in-order queue in front of it must
//! grow to the paths' whole delay difference before a slower path joins, and a
//! loss-based inner flow's sawtooth spends most of its cycle below that: the
//! slower paths idled (50/5 + 20/30 Mbit/s / ms upload, one-BDP buffers: 62 %
//! of the sum waiting against 84 % not; 200 ms buffers, bbr: 63 % against 87 %).
//! Sending at once costs the inner flow the same delay, in the receiver's
//! reorder buffer instead of the sender's queue, and degrades gracefully.
//!
//! Capacity shares: once the traffic reaches most of what the fastest path carries,
//! a bulk packet goes first to a path that can send and has earned credit towards
//! three quarters of its capacity share (`share.rs` says why and how). Below that, for
//! latency-critical packets, and when no path holds credit, the earliest arrival
//! decides as above.
//!
//! Missing measurements: a path without any delay measurement has no
//! prediction. Such paths get data only when no eligible path is measured (a
//! fresh session): then the least loaded path goes first, which spreads the
//! first packets like round-robin. Once any path is measured, a full measured
//! path is waited for rather than an unmeasured one used: that one may be a
//! GEO satellite whose first RTT sample is still on its way, and an inner
//! flow's first window sent there arrived after the receiver gave its gaps up,
//! so the inner CUBIC left slow start at 8 packets (5g-geo-satellite: 0.4
//! Mbit/s in the first half second). The daemon pings every path without a
//! sample, on both ends, so the wait lasts about one round trip. A path with a
//! delay but no rate estimate is predicted at its bare delay.

use std::time::{Duration, Instant};

use crate::eligible::{least_loaded, Eligibility};
use crate::path::{PacketClass, PacketInfo, PathId, PathView, Pick};
use crate::predict::{
    arrival_at_shown_rate, backlog_drain_time, predicted_arrival, predicted_arrival_when_open,
};
use crate::scheduler::Scheduler;
use crate::share::{CapacityShare, PathShare, EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT};

/// Never wait for a full path while another can send (the module docs say why).
pub const EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN: Option<Duration> = None;
/// The daemon's default `reorder.max_hold_ms`; the daemon sets its own.
pub const EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW: Duration = Duration::from_millis(200);

/// Sends each packet where it is predicted to arrive first.
#[derive(Clone, Debug)]
pub struct EarliestArrival {
    /// How much earlier a full path must deliver before the packet waits for it;
    /// `None`: never wait while another path can send.
    wait_margin: Option<Duration>,
    /// How much later than a full path a packet may arrive elsewhere and still be
    /// waited for by the receiver.
    reorder_window: Duration,
    /// What each path was sent recently, for the capacity shares.
    share: CapacityShare,
}

impl EarliestArrival {
    /// Configuration name of this scheduler.
    pub const NAME: &'static str = "earliest-arrival";

    /// A scheduler that waits for a full path when it wins by more than
    /// `wait_margin` (never with `None`), and whenever another path would deliver
    /// more than `reorder_window` after it; capacity shares from the default
    /// percentage of the fastest path's capacity on.
    pub fn new(wait_margin: Option<Duration>, reorder_window: Duration) -> Self {
        EarliestArrival {
            wait_margin,
            reorder_window,
            share: CapacityShare::new(EARLIEST_ARRIVAL_DEFAULT_SHARE_PERCENT),
        }
    }

    /// The same scheduler sharing by capacity from `percent` of the fastest path's
    /// capacity on; 0 never shares.
    pub fn with_share_percent(self, percent: u16) -> Self {
        EarliestArrival {
            share: CapacityShare::new(percent),
            ..self
        }
    }
}

impl Default for EarliestArrival {
    fn default() -> Self {
        EarliestArrival::new(
            EARLIEST_ARRIVAL_DEFAULT_WAIT_MARGIN,
            EARLIEST_ARRIVAL_DEFAULT_REORDER_WINDOW,
        )
    }
}

/// Whether `path`'s delay alone, without any queue, puts it more than `reorder_window`
/// behind the `nearest` eligible path's: whatever it carries while a nearer path is up
/// comes after the receiver gave its gap up whenever the nearer path's queue is shorter
/// than predicted.
fn beyond_reach(path: &PathView, nearest: Option<Duration>, reorder_window: Duration) -> bool {
    match (path.base_one_way_delay, nearest) {
        (Some(delay), Some(nearest)) => delay > nearest.saturating_add(reorder_window),
        _ => false,
    }
}

impl Scheduler for EarliestArrival {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, now: Instant, packet: &PacketInfo, paths: &[PathView]) -> Pick {
        let rule = Eligibility::of(paths);
        if packet.class == PacketClass::Bulk {
            if let Some(id) =
                self.share
                    .below_floor(now, paths, rule, packet.len, self.reorder_window)
            {
                return Pick::One(id);
            }
        }
        // Best path that can send: (arrival, in flight, id), and its arrival for the
        // reorder-window test.
        let mut best_ready: Option<((Duration, u64, PathId), Duration)> = None;
        // Earliest arrival among paths that cannot send now: of the packet, and of
        // the backlog behind it (only when waiting is on).
        let mut best_blocked: Option<Duration> = None;
        let mut best_blocked_backlog: Option<Duration> = None;
        let nearest = paths
            .iter()
            .filter(|path| rule.allows(path))
            .filter_map(|path| path.base_one_way_delay)
            .min();
        for path in paths.iter().filter(|path| rule.allows(path)) {
            if beyond_reach(path, nearest, self.reorder_window) {
                continue;
            }
            if path.can_send(packet.len) {
                let Some(arrival) = predicted_arrival(path, packet.len) else {
                    continue;
                };
                let key = (arrival, path.bytes_in_flight, path.id);
                if best_ready.is_none_or(|(best, _)| key < best) {
                    let held_to = arrival_at_shown_rate(path, packet.len).unwrap_or(arrival);
                    best_ready = Some((key, held_to));
                }
                continue;
            }
            let Some(arrival) = predicted_arrival_when_open(path, packet.len) else {
                continue;
            };
            best_blocked = Some(best_blocked.map_or(arrival, |best| best.min(arrival)));
            if self.wait_margin.is_some() {
                let last = arrival.saturating_add(backlog_drain_time(path, packet.queued_bytes));
                best_blocked_backlog =
                    Some(best_blocked_backlog.map_or(last, |best| best.min(last)));
            }
        }
        let too_late = |ready: Duration| {
            best_blocked.is_some_and(|blocked| ready > blocked.saturating_add(self.reorder_window))
        };
        let worth_waiting = |ready: Duration| match (best_blocked_backlog, self.wait_margin) {
            (Some(blocked), Some(margin)) => blocked.saturating_add(margin) < ready,
            _ => false,
        };
        match best_ready {
            Some(((ready, _, _), held_to)) if too_late(held_to) || worth_waiting(ready) => {
                Pick::Hold
            }
            Some(((_, _, id), _)) => Pick::One(id),
            None if best_blocked.is_some() => Pick::Hold,
            None => least_loaded(paths, rule, packet.len, |path| {
                predicted_arrival(path, packet.len).is_none()
            })
            .map_or(Pick::Hold, Pick::One),
        }
    }

    fn on_sent(&mut self, now: Instant, path: PathId, bytes: usize) {
        self.share.on_sent(now, path, bytes);
    }

    fn path_share(&self, now: Instant, path: PathId) -> PathShare {
        self.share.path_share(now, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PacketInfo;
    use crate::test_support::*;

    #[test]
    fn table() {
        // measured(id, one-way ms, Mbit/s): 10 Mbit/s = 1.25 MB/s, so
        // 1400 bytes take 1.12 ms; a 20 ms RTT holds a 25 kB BDP.
        run_table(
            EarliestArrival::default,
            vec![
                Case {
                    name: "lowest delay wins while its queue is short",
                    paths: vec![measured(0, 40, 10), measured(1, 10, 10)],
                    expected: one(&[1, 1]),
                },
                Case {
                    // Path 1: 10 ms + (60,000 − 25,000 + 1,400)/1.25 MB/s ≈ 39 ms < 41 ms.
                    name: "queued fast path still earlier",
                    paths: vec![measured(0, 40, 10), in_flight(measured(1, 10, 10), 60_000)],
                    expected: one(&[1]),
                },
                Case {
                    // Path 1: 10 ms + 40 ms of queue > 41 ms on the idle slow path.
                    name: "queue makes the fast path later: slow path",
                    paths: vec![measured(0, 40, 10), in_flight(measured(1, 10, 10), 75_000)],
                    expected: one(&[0]),
                },
                Case {
                    // Full fast path (140 kB in flight): 10 + 92 ms > 41 ms: no wait.
                    name: "full fast path that would be later: slow path",
                    paths: vec![measured(0, 40, 10), full(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "full fast path that would still be earlier: the next path",
                    paths: vec![measured(0, 40, 10), full(fast_with_small_window())],
                    expected: one(&[0, 0]),
                },
                Case {
                    name: "paced fast path that would be earlier: the next path",
                    paths: vec![measured(0, 40, 10), paced(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "all full or paced holds",
                    paths: vec![full(measured(0, 40, 10)), paced(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "fastest down: next",
                    paths: vec![measured(0, 40, 10), gone_down(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "backups idle while a regular path is up",
                    paths: vec![backup(measured(0, 1, 100)), measured(1, 40, 10)],
                    expected: one(&[1]),
                },
                Case {
                    name: "backup only",
                    paths: vec![backup(measured(0, 5, 10)), down(1)],
                    expected: one(&[0]),
                },
                Case {
                    name: "equal predictions: fewer bytes in flight, then lowest id",
                    paths: vec![
                        in_flight(measured(0, 20, 10), 10_000),
                        in_flight(measured(1, 20, 10), 5_000),
                        in_flight(measured(2, 20, 10), 5_000),
                    ],
                    expected: one(&[1]),
                },
                Case {
                    name: "no measurements: least loaded",
                    paths: vec![in_flight(up(0), 2800), in_flight(up(1), 1400), up(2)],
                    expected: one(&[2]),
                },
                Case {
                    name: "unmeasured path only when no measured path can send",
                    paths: vec![up(0), measured(1, 40, 10)],
                    expected: one(&[1]),
                },
                Case {
                    name: "a full measured path is waited for, not an unmeasured one used",
                    paths: vec![up(0), full(measured(1, 40, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "unmeasured path used when the measured one is down",
                    paths: vec![up(0), gone_down(measured(1, 40, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "no paths holds",
                    paths: vec![],
                    expected: vec![Pick::Hold],
                },
            ],
        );
    }

    const REORDER_WINDOW: Duration = Duration::from_millis(200);

    #[test]
    fn no_overtaking_beyond_the_reorder_window() {
        let now = Instant::now();
        // 5G at 8 ms with its window full; GEO at 280 ms could send now but would
        // arrive 270 ms later, after a 200 ms reorder window gives the gap up.
        let paths = [measured(0, 280, 10), full(measured(1, 8, 50))];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::Hold
        );
        let mut patient = EarliestArrival::new(None, Duration::from_millis(300));
        assert_eq!(patient.pick(now, &PACKET, &paths), Pick::One(PathId(0)));
        // With the 5G path down, GEO carries everything.
        let paths = [measured(0, 280, 10), gone_down(measured(1, 8, 50))];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0))
        );
    }

    #[test]
    fn a_path_whose_delay_alone_is_beyond_the_reorder_window_waits_for_the_nearer_ones() {
        let now = Instant::now();
        // A 6 Mbit/s LTE uplink 35 ms away, its 250 kB window full, is predicted to
        // deliver 296 ms from now, after an idle GEO uplink 290 ms away would. But
        // what it already holds is queued in the estimate only: a GEO packet lands
        // 255 ms after every LTE packet sent behind it whenever that queue is
        // shorter, and the receiver gives its gap up after 200 ms.
        let mut lte = full(measured(1, 35, 6));
        lte.cwnd_bytes = Some(250_000);
        lte.bytes_in_flight = 250_000;
        let paths = [measured(0, 290, 5), lte];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::Hold
        );
        // With LTE down, GEO carries everything.
        let paths = [measured(0, 290, 5), gone_down(lte)];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0))
        );
        // Within the window, a slow path still takes what the full one cannot.
        let paths = [measured(0, 200, 5), lte];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0))
        );
        // A path 100 ms away whose queue makes it 350 ms late is judged by its arrival,
        // not shut out by its queue.
        let mut queued = measured(0, 350, 5);
        queued.base_one_way_delay = Some(Duration::from_millis(100));
        let paths = [queued, lte];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0))
        );
    }

    #[test]
    fn an_overstated_delay_does_not_shut_a_path_out() {
        let now = Instant::now();
        // A modem estimated 232 ms away (idle, its minimum RTT held its own return)
        // whose one-way-delay readings put it 120 ms away, next to a full 8 ms path:
        // within the 200 ms reorder window, so it takes the packet.
        let mut slow = measured(0, 232, 2);
        slow.one_way_delay_floor = Some(Duration::from_millis(120));
        slow.base_one_way_delay = Some(Duration::from_millis(120));
        let paths = [slow, full(measured(1, 8, 25))];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0))
        );
        // Without the readings it is judged too late.
        let paths = [measured(0, 232, 2), full(measured(1, 8, 25))];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::Hold
        );
        // A floor above the estimate changes nothing: GEO stays out.
        let mut geo = measured(0, 280, 10);
        geo.one_way_delay_floor = Some(Duration::from_millis(300));
        let paths = [geo, full(measured(1, 8, 50))];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::Hold
        );
    }

    #[test]
    fn a_path_in_startup_is_filled_only_as_deep_as_the_reorder_window() {
        let now = Instant::now();
        // u-five-asym's slowest modem (120 ms one way, 128 ms min RTT, 5 Mbit/s found)
        // in Startup, application-limited, its pacing and window at 2/ln 2 of that,
        // next to a full 8 ms path.
        let far = |in_flight: u64| {
            let mut far = measured(0, 120, 4);
            far.min_rtt = Some(Duration::from_millis(128));
            far.srtt = Some(Duration::from_millis(128));
            far.delivery_rate_app_limited = true;
            far.bottleneck_rate_bps = Some(5_000_000);
            far.pacing_rate_bps = Some(14_425_000);
            far.cwnd_bytes = Some(231_000);
            far.bytes_in_flight = in_flight;
            far
        };
        let pick = |in_flight| {
            EarliestArrival::default().pick(
                now,
                &PACKET,
                &[far(in_flight), full(measured(1, 8, 25))],
            )
        };
        // One bandwidth-delay product (80 kB) and some queue fit in the 200 ms window.
        assert_eq!(pick(0), Pick::One(PathId(0)));
        assert_eq!(pick(120_000), Pick::One(PathId(0)));
        // 189 kB would queue 175 ms at 5 Mbit/s, arriving 290 ms after the 8 ms path:
        // its window has room, but the packet waits for the fast path.
        assert_eq!(pick(189_000), Pick::Hold);
    }

    /// A 10 ms, 10 Mbit/s path whose window (30 kB) is about its BDP (25 kB).
    fn fast_with_small_window() -> PathView {
        let mut fast = measured(1, 10, 10);
        fast.cwnd_bytes = Some(30_000);
        fast
    }

    #[test]
    fn waiting_for_full_paths_when_asked_to() {
        run_table(
            || EarliestArrival::new(Some(Duration::ZERO), REORDER_WINDOW),
            vec![
                Case {
                    name: "full fast path that would still be earlier: wait for it",
                    paths: vec![measured(0, 40, 10), full(fast_with_small_window())],
                    expected: vec![Pick::Hold, Pick::Hold],
                },
                Case {
                    name: "paced fast path that would be earlier: wait for it",
                    paths: vec![measured(0, 40, 10), paced(measured(1, 10, 10))],
                    expected: vec![Pick::Hold],
                },
                Case {
                    name: "full path exactly as early: do not wait",
                    paths: vec![measured(0, 10, 10), paced(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
                Case {
                    name: "full fast path that would be later: slow path",
                    paths: vec![measured(0, 40, 10), full(measured(1, 10, 10))],
                    expected: one(&[0]),
                },
            ],
        );
    }

    #[test]
    fn a_backlog_that_would_wait_too_long_spills_onto_the_next_path() {
        let now = Instant::now();
        // Fast path 10 ms, 10 Mbit/s (1.25 MB/s), window capped near its BDP and
        // full; slow path 30 ms can send. The head alone is earlier on the fast
        // path; 30 kB behind it take 24 ms more there, so the slow path wins.
        let mut fast = measured(1, 10, 10);
        fast.cwnd_bytes = Some(26_000);
        let paths = [measured(0, 30, 10), full(fast)];
        let mut scheduler = EarliestArrival::new(Some(Duration::ZERO), REORDER_WINDOW);
        let alone = PacketInfo {
            queued_bytes: 0,
            ..PACKET
        };
        assert_eq!(scheduler.pick(now, &alone, &paths), Pick::Hold);
        let backlog = PacketInfo {
            queued_bytes: 30_000,
            ..PACKET
        };
        assert_eq!(scheduler.pick(now, &backlog, &paths), Pick::One(PathId(0)));
    }

    #[test]
    fn a_margin_lets_small_gains_go() {
        let now = Instant::now();
        let paths = [measured(0, 10, 10), {
            let mut fast = paced(measured(1, 10, 10));
            fast.one_way_delay = Some(Duration::from_micros(9_500));
            fast
        }];
        assert_eq!(
            EarliestArrival::default().pick(now, &PACKET, &paths),
            Pick::One(PathId(0)),
            "no waiting by default"
        );
        let mut eager = EarliestArrival::new(Some(Duration::ZERO), REORDER_WINDOW);
        assert_eq!(eager.pick(now, &PACKET, &paths), Pick::Hold);
        let mut tolerant = EarliestArrival::new(Some(Duration::from_millis(1)), REORDER_WINDOW);
        assert_eq!(tolerant.pick(now, &PACKET, &paths), Pick::One(PathId(0)));
        let mut impatient = EarliestArrival::new(Some(Duration::from_micros(400)), REORDER_WINDOW);
        assert_eq!(impatient.pick(now, &PACKET, &paths), Pick::Hold);
    }
}
