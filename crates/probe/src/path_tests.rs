use std::collections::VecDeque;

use super::*;
use crate::ack::AckRanges;
use crate::liveness::{DOWN_FLOOR, SUSPECT_AFTER_PTOS};
use crate::loss::{INITIAL_RTT, PACKET_THRESHOLD, REORDERING_PERSISTENCE};

use Liveness::{Active, Down, Probing, Suspect};

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// A fixed window that records what it was told.
#[derive(Debug, Default)]
struct FixedWindow {
    window: u64,
    sent_calls: u32,
    acked_calls: u32,
    acked_bytes: u64,
    last_signals: Option<AckSignals>,
    congestion_events: Vec<(Instant, bool, u64)>,
    queuing_delay_target: Option<Duration>,
    queue_standing: bool,
    bottleneck_rate: Option<u64>,
}

impl Controller for FixedWindow {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn on_sent(&mut self, _now: Instant, _bytes: u64, _bytes_in_flight: u64) {
        self.sent_calls += 1;
    }
    fn on_ack(
        &mut self,
        _now: Instant,
        _sent: Instant,
        bytes: u64,
        _rtt: &RttEstimator,
        signals: &AckSignals,
    ) {
        self.acked_calls += 1;
        self.acked_bytes += bytes;
        self.last_signals = Some(*signals);
    }
    fn on_congestion_event(
        &mut self,
        _now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    ) {
        self.congestion_events.push((sent, persistent, lost_bytes));
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn initial_window(&self) -> u64 {
        self.window
    }
    fn queuing_delay_target(&self) -> Option<Duration> {
        self.queuing_delay_target
    }
    fn queue_standing(&self) -> bool {
        self.queue_standing
    }
    fn bottleneck_rate(&self) -> Option<u64> {
        self.bottleneck_rate
    }
}

const MAX_ACK_DELAY: Duration = Duration::from_millis(25);
const DATAGRAM: u64 = 1200;

fn probe(t0: Instant) -> PathProbe<FixedWindow> {
    probe_with(
        t0,
        FixedWindow {
            window: 100 * DATAGRAM,
            ..Default::default()
        },
    )
}

fn probe_with(t0: Instant, controller: FixedWindow) -> PathProbe<FixedWindow> {
    let config = ProbeConfig {
        max_datagram_size: DATAGRAM,
        max_ack_delay: MAX_ACK_DELAY,
        initial_rtt: INITIAL_RTT,
    };
    PathProbe::new(t0, config, controller)
}

/// An acknowledgement of `ranges` (newest first).
fn ack_of(ranges: &[(u32, u32)], ack_delay: Duration, owd_raw_us: u32) -> AckSummary {
    let mut set = AckRanges::default();
    for &(first, last) in ranges {
        assert!(set.push(first, last));
    }
    AckSummary {
        ranges: set,
        ack_delay,
        largest_owd_raw_us: owd_raw_us,
    }
}

/// Data packets 0..`count`, packet n sent n ms after `t0` carrying session sequence
/// number 100 + n.
fn send_data_every_millisecond(path: &mut PathProbe<FixedWindow>, t0: Instant, count: u32) {
    for pn in 0..count {
        path.on_sent(t0 + ms(u64::from(pn)), pn, DATAGRAM, Some(100 + pn), false);
    }
}

#[test]
fn ack_stream_with_a_loss() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    send_data_every_millisecond(&mut path, t0, 10);
    assert_eq!(path.bytes_in_flight(), 10 * DATAGRAM);
    assert_eq!(path.controller().sent_calls, 10);
    let mut lost = Vec::new();

    // 0..=2 arrive, acknowledged at 52 ms with a 2 ms delay: RTT sample 50 ms
    let result = path.on_ack(t0 + ms(52), &ack_of(&[(0, 2)], ms(2), 20_000), &mut lost);
    assert_eq!(result.acked_packets, 3);
    assert_eq!(result.acked_bytes, 3 * DATAGRAM);
    assert_eq!(result.rtt_sample, Some(ms(50)));
    assert_eq!(path.rtt.smoothed(), Some(ms(50)));
    assert!(lost.is_empty());

    // 3 is missing; 4..=6 arrive: 6 >= 3 + 3 declares 3 lost
    let result = path.on_ack(
        t0 + ms(56),
        &ack_of(&[(4, 6), (0, 2)], ms(0), 20_000),
        &mut lost,
    );
    assert_eq!(result.acked_packets, 3);
    assert_eq!(result.lost_packets, 1);
    assert_eq!(result.rtt_sample, Some(ms(50)));
    assert_eq!(
        lost,
        [LostPacket {
            pn: 3,
            seq: Some(103),
            bytes: DATAGRAM
        }]
    );
    let controller = path.controller();
    assert_eq!(controller.acked_calls, 6);
    assert_eq!(controller.acked_bytes, 6 * DATAGRAM);
    assert_eq!(
        controller.congestion_events,
        [(t0 + ms(3), false, DATAGRAM)]
    );
    let signals = controller.last_signals.unwrap();
    assert_eq!(signals.queuing_delay, Some(Duration::ZERO));
    assert_eq!(path.bytes_in_flight(), 3 * DATAGRAM);
    assert!(path.loss_rate() > 0.0);
    assert!(path.has_window_room(97 * DATAGRAM));
    assert!(!path.has_window_room(97 * DATAGRAM + 1));

    // a repeated acknowledgement changes nothing and reports nothing lost
    lost.clear();
    let result = path.on_ack(
        t0 + ms(57),
        &ack_of(&[(4, 6), (0, 2)], ms(0), 20_000),
        &mut lost,
    );
    assert_eq!((result.acked_packets, result.rtt_sample), (0, None));
    assert!(lost.is_empty());

    let stats = path.stats(t0 + ms(60));
    assert_eq!(stats.lost_packets, 1);
    assert_eq!(stats.bytes_in_flight, 3 * DATAGRAM);
    assert_eq!(stats.cwnd, 100 * DATAGRAM);
    assert_eq!(stats.rtt, path.rtt.smoothed());
    assert_eq!(stats.since_last_received, Some(ms(3)));
    assert_eq!(stats.counters.sent_packets, 10);
    assert_eq!(stats.counters.sent_data_packets, 10);
    assert_eq!(stats.liveness, Active);
    assert_eq!(stats.queuing_delay, Some(Duration::ZERO));
}

/// RFC 9002 section 5.3: the reported delay (at most max_ack_delay) comes off the
/// sample used for smoothing, not off the minimum.
#[test]
fn rtt_sample_is_adjusted_by_ack_delay() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, 0, DATAGRAM, None, false);
    path.on_ack(t0 + ms(100), &ack_of(&[(0, 0)], ms(0), 0), &mut lost);
    path.on_sent(t0 + ms(200), 1, DATAGRAM, None, false);
    // 140 ms raw, reported delay 60 ms capped at 25 ms: 115 ms for smoothing
    let result = path.on_ack(t0 + ms(340), &ack_of(&[(1, 1)], ms(60), 0), &mut lost);
    assert_eq!(result.rtt_sample, Some(ms(140)));
    assert_eq!(path.rtt.min(), Some(ms(100)));
    // SRTT = 7/8 * 100 + 1/8 * 115
    assert_eq!(path.rtt.smoothed(), Some(Duration::from_micros(101_875)));
}

#[test]
fn acknowledgement_of_unsent_numbers_is_ignored() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, 0, DATAGRAM, None, false);
    let result = path.on_ack(t0 + ms(50), &ack_of(&[(0, 5)], ms(0), 0), &mut lost);
    assert_eq!(result, AckResult::default());
    assert_eq!(path.invalid_acks(), 1);
    assert_eq!(path.bytes_in_flight(), DATAGRAM);
}

#[test]
fn drain_in_flight_returns_everything_with_seqs() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, u32::MAX - 1, DATAGRAM, None, false);
    path.on_sent(t0, u32::MAX, DATAGRAM, Some(7), false);
    path.on_sent(t0, 0, DATAGRAM, Some(8), false);
    path.on_sent(t0, 1, 500, Some(9), false);
    path.on_ack(
        t0 + ms(30),
        &ack_of(&[(u32::MAX - 1, u32::MAX - 1)], ms(0), 0),
        &mut lost,
    );
    assert!(lost.is_empty());
    path.drain_in_flight(&mut lost);
    let drained: Vec<(u32, Option<u32>, u64)> =
        lost.iter().map(|l| (l.pn, l.seq, l.bytes)).collect();
    assert_eq!(
        drained,
        [
            (u32::MAX, Some(7), DATAGRAM),
            (0, Some(8), DATAGRAM),
            (1, Some(9), 500)
        ]
    );
    assert_eq!(path.bytes_in_flight(), 0);
    assert_eq!(path.poll_timeout(), None);
    assert!(
        path.controller().congestion_events.is_empty(),
        "a drain is not congestion"
    );
}

#[test]
fn timers_before_any_rtt_sample_use_the_initial_rtt() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    assert_eq!(path.poll_timeout(), None);
    path.on_sent(t0, 0, DATAGRAM, None, false);
    // PTO = 333 + 4 * 166.5 + 25 = 1024 ms; liveness Suspect at 2 PTOs
    assert_eq!(path.pto_base(), ms(1024));
    assert_eq!(path.poll_timeout(), Some(t0 + ms(1024)));
    let mut lost = Vec::new();
    assert_eq!(path.handle_timeout(t0 + ms(1024), &mut lost), None);
    assert!(path.take_pto_probe());
    assert!(!path.take_pto_probe());
    assert_eq!(path.pto_count(), 1);
    // backed off: the next PTO is 2048 ms after the send, where Suspect is due too
    assert_eq!(path.poll_timeout(), Some(t0 + ms(2048)));
    assert_eq!(
        path.handle_timeout(t0 + ms(2048), &mut lost),
        Some((Active, Suspect))
    );
}

/// Time-threshold loss through `handle_timeout`, on a path that learned to wait for
/// two later packets: with one later packet acknowledged, the timer finds the
/// straggler.
#[test]
fn loss_timer_declares_the_straggler() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    // 0 is overtaken by 1, declared lost, then acknowledged: the threshold is 2.
    path.on_sent(t0, 0, DATAGRAM, None, false);
    path.on_sent(t0, 1, DATAGRAM, None, false);
    path.on_ack(t0 + ms(100), &ack_of(&[(1, 1)], ms(0), 0), &mut lost);
    path.on_ack(t0 + ms(100), &ack_of(&[(0, 1)], ms(0), 0), &mut lost);
    assert_eq!(path.stats(t0 + ms(100)).packet_threshold, 2);
    lost.clear();
    let events = path.controller().congestion_events.len();

    let t1 = t0 + ms(100);
    path.on_sent(t1, 2, DATAGRAM, Some(1), false);
    path.on_sent(t1 + ms(1), 3, DATAGRAM, Some(2), false);
    path.on_ack(t1 + ms(101), &ack_of(&[(3, 3)], ms(0), 0), &mut lost);
    assert!(lost.is_empty());
    // RTT 100 ms: 2 is lost at its send + 9/8 * 100 ms
    assert_eq!(
        path.poll_timeout(),
        Some(t1 + Duration::from_micros(112_500))
    );
    path.handle_timeout(t1 + Duration::from_micros(112_500), &mut lost);
    assert_eq!(lost.iter().map(|l| l.seq).collect::<Vec<_>>(), [Some(1)]);
    assert_eq!(path.controller().congestion_events.len(), events + 1);
}

/// A path with constant RTT whose both directions black out during `outage` (a
/// datagram sent, or an acknowledgement leaving the receiver, in the outage is
/// lost); a datagram every `send_interval`, each acknowledged on arrival.
struct Sim {
    t0: Instant,
    path: PathProbe<FixedWindow>,
    rtt: Duration,
    send_interval: Duration,
    outage: (Duration, Duration),
    next_send: Instant,
    next_pn: u32,
    acks: VecDeque<(Instant, u32)>,
    transitions: Vec<(Duration, Liveness, Liveness)>,
    lost: Vec<LostPacket>,
    last_heard: Option<Instant>,
}

impl Sim {
    fn new(
        rtt: Duration,
        send_interval: Duration,
        outage_start: Duration,
        outage_len: Duration,
    ) -> Self {
        let t0 = Instant::now();
        Self {
            t0,
            path: probe(t0),
            rtt,
            send_interval,
            outage: (outage_start, outage_start + outage_len),
            next_send: t0,
            next_pn: 0,
            acks: VecDeque::new(),
            transitions: Vec::new(),
            lost: Vec::new(),
            last_heard: None,
        }
    }

    fn blacked_out(&self, at: Instant) -> bool {
        let offset = at - self.t0;
        offset >= self.outage.0 && offset < self.outage.1
    }

    fn record(&mut self, now: Instant, change: Option<(Liveness, Liveness)>) {
        if let Some((from, to)) = change {
            self.transitions.push((now - self.t0, from, to));
        }
    }

    fn run_until(&mut self, end: Duration) {
        let end = self.t0 + end;
        for _ in 0..1_000_000 {
            let next_ack = self.acks.front().map(|&(at, _)| at);
            let timer = self.path.poll_timeout();
            let now = [Some(self.next_send), next_ack, timer]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            if now > end {
                return;
            }
            if next_ack == Some(now) {
                let (_, pn) = self.acks.pop_front().unwrap();
                let ack = ack_of(&[(pn, pn)], Duration::ZERO, 20_000);
                self.last_heard = Some(now);
                let result = self.path.on_ack(now, &ack, &mut self.lost);
                self.record(now, result.liveness_change);
            } else if self.next_send == now {
                let pn = self.next_pn;
                self.next_pn = self.next_pn.wrapping_add(1);
                self.path.on_sent(now, pn, DATAGRAM, Some(pn), false);
                let half = self.rtt / 2;
                if !self.blacked_out(now) && !self.blacked_out(now + half) {
                    self.acks.push_back((now + self.rtt, pn));
                }
                self.next_send = now + self.send_interval;
            } else {
                let change = self.path.handle_timeout(now, &mut self.lost);
                self.path.take_pto_probe();
                self.record(now, change);
            }
        }
        panic!("simulation did not advance");
    }
}

/// 40 ms RTT, a datagram every 5 ms, then a 500 ms outage at 2 s: PTO is
/// 40 + 1 + 25 = 66 ms, so the path is Suspect 132 ms and Down 300 ms (the floor)
/// after the last acknowledgement, both inside the outage, and Active again with the
/// first acknowledgement after it.
#[test]
fn outage_of_500_ms_on_a_40_ms_path() {
    let mut sim = Sim::new(ms(40), ms(5), ms(2000), ms(500));
    sim.run_until(ms(1999));
    assert!(sim.transitions.is_empty());
    let pto = sim.path.pto_base();
    assert_eq!(
        pto,
        ms(66),
        "steady state: RTTVAR decayed to the 1 ms floor"
    );
    sim.run_until(ms(2300));
    let last_heard = sim.last_heard.unwrap() - sim.t0;
    // the last acknowledgement: of the packet sent at 1975 ms, which reached the
    // receiver at 1995 ms, just before the outage
    assert_eq!(last_heard, ms(2015));
    sim.run_until(ms(3000));
    let suspect_at = last_heard + pto * SUSPECT_AFTER_PTOS;
    let down_at = last_heard + DOWN_FLOOR;
    assert_eq!(suspect_at, ms(2147));
    assert_eq!(down_at, ms(2315));
    // the first packet sent after the outage is acknowledged at 2540 ms
    assert_eq!(
        sim.transitions,
        [
            (suspect_at, Active, Suspect),
            (down_at, Suspect, Down),
            (ms(2540), Down, Active)
        ]
    );
    // everything sent into the outage is reported lost, with its seq
    let lost_seqs: Vec<u32> = sim.lost.iter().filter_map(|l| l.seq).collect();
    let expected: Vec<u32> = (396..500).collect(); // sent at 1980..2495 ms
    assert_eq!(lost_seqs, expected);
}

/// 150 ms RTT, a 300 ms hiccup: 450 ms without acknowledgements (the RTT adds to the
/// hiccup) is past Suspect (2 * 176 ms) but short of Down (4 * 176 ms).
#[test]
fn hiccup_of_300_ms_on_a_150_ms_path_is_not_down() {
    let mut sim = Sim::new(ms(150), ms(5), ms(3000), ms(300));
    sim.run_until(ms(2999));
    let pto = sim.path.pto_base();
    assert_eq!(pto, ms(176));
    sim.run_until(ms(5000));
    assert!(
        sim.transitions.iter().all(|&(_, _, to)| to != Down),
        "{:?}",
        sim.transitions
    );
    // last acknowledgement at 3070 ms (packet sent at 2920 ms), next at 3450 ms (sent
    // at 3300 ms): Suspect at 3070 + 352, Down would have been at 3070 + 704
    assert_eq!(
        sim.transitions,
        [(ms(3422), Active, Suspect), (ms(3450), Suspect, Active)]
    );
    assert_eq!(sim.path.liveness(), Active);
}

/// Down -> Probing -> Active through the aggregate.
#[test]
fn probing_cycle_through_the_path() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, 0, DATAGRAM, Some(0), false);
    path.on_ack(t0 + ms(40), &ack_of(&[(0, 0)], ms(0), 0), &mut lost);
    path.on_sent(t0 + ms(50), 1, DATAGRAM, Some(1), false);
    // PTO = 40 + 4 * 20 + 25 = 145 ms: Suspect at 50 + 290, Down at 50 + 580
    assert_eq!(path.pto_base(), ms(145));
    let mut changes = Vec::new();
    while let Some(at) = path.poll_timeout() {
        if at > t0 + ms(1000) {
            break;
        }
        if let Some(change) = path.handle_timeout(at, &mut lost) {
            changes.push((at - t0, change));
        }
        path.take_pto_probe();
    }
    assert_eq!(
        changes,
        [(ms(340), (Active, Suspect)), (ms(630), (Suspect, Down))]
    );
    path.drain_in_flight(&mut lost);
    assert_eq!(lost.iter().map(|l| l.seq).collect::<Vec<_>>(), [Some(1)]);
    path.on_sent(t0 + ms(700), 2, 60, None, false);
    path.start_probing(t0 + ms(700));
    assert_eq!(path.liveness(), Probing);
    let result = path.on_ack(t0 + ms(745), &ack_of(&[(2, 2)], ms(0), 0), &mut lost);
    assert_eq!(result.liveness_change, Some((Probing, Active)));
}

#[test]
fn heard_revives_a_suspect_path() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, 0, DATAGRAM, None, false);
    assert_eq!(
        path.handle_timeout(t0 + ms(2048), &mut lost),
        Some((Active, Suspect))
    );
    assert_eq!(path.on_heard(t0 + ms(2100)), Some((Suspect, Active)));
    assert_eq!(
        path.stats(t0 + ms(2100)).since_last_received,
        Some(Duration::ZERO)
    );
}

/// Ten application-limited packets, 1 ms apart, on a path whose controller says its
/// queue stood above a 5 ms target last round (or not) and estimates the bottleneck at
/// `bottleneck_rate`; the first three are acknowledged without a queue, the rest with
/// `newest_queuing_ms` of forward queuing delay.
fn app_limited_packets_behind_a_queue(
    queue_standing: bool,
    newest_queuing_ms: u32,
    bottleneck_rate: Option<u64>,
) -> (PathProbe<FixedWindow>, Instant) {
    let t0 = Instant::now();
    let mut path = probe_with(
        t0,
        FixedWindow {
            window: 100 * DATAGRAM,
            queuing_delay_target: Some(ms(5)),
            queue_standing,
            bottleneck_rate,
            ..Default::default()
        },
    );
    for pn in 0..10u32 {
        path.on_sent(t0 + ms(u64::from(pn)), pn, DATAGRAM, Some(pn), true);
    }
    let mut lost = Vec::new();
    path.on_ack(t0 + ms(22), &ack_of(&[(0, 2)], ms(0), 20_000), &mut lost);
    let queued_owd = 20_000 + newest_queuing_ms * 1000;
    path.on_ack(
        t0 + ms(40),
        &ack_of(&[(0, 9)], ms(0), queued_owd),
        &mut lost,
    );
    (path, t0 + ms(40))
}

/// A sample whose packet waited in a queue that stood at the bottleneck measured the
/// bottleneck, though the sender had nothing more to send: the controller hears it as
/// such. The path's own kept sample stays application-limited (see `on_ack`).
#[test]
fn a_sample_behind_a_standing_queue_reaches_the_controller_as_network_limited() {
    let (path, now) = app_limited_packets_behind_a_queue(true, 12, None);
    assert!(!path.controller().last_signals.unwrap().app_limited);
    assert!(path.latest_rate_sample(now).unwrap().app_limited);
}

/// The controller's verdict is a round old: a packet that found the queue drained (a
/// probe after the traffic stopped) still only bounds the rate from below.
#[test]
fn a_sample_after_the_queue_drained_stays_app_limited() {
    let (path, _) = app_limited_packets_behind_a_queue(true, 1, None);
    assert!(path.controller().last_signals.unwrap().app_limited);
    let (path, _) = app_limited_packets_behind_a_queue(false, 12, None);
    assert!(
        path.controller().last_signals.unwrap().app_limited,
        "no standing queue"
    );
}

/// An application-limited sample above the controller's bottleneck estimate reads as
/// that estimate; one below it is kept as it is.
#[test]
fn an_app_limited_sample_is_capped_at_the_bottleneck_estimate() {
    let (path, now) = app_limited_packets_behind_a_queue(false, 0, None);
    let uncapped = path.delivery_rate(now).unwrap();
    let (path, now) = app_limited_packets_behind_a_queue(false, 0, Some(uncapped / 4));
    assert_eq!(path.delivery_rate(now), Some(uncapped / 4));
    assert_eq!(
        path.latest_rate_sample(now).unwrap().delivery_rate,
        uncapped / 4
    );
    let (path, now) = app_limited_packets_behind_a_queue(false, 0, Some(uncapped * 4));
    assert_eq!(path.delivery_rate(now), Some(uncapped));
}

/// A burst overflowed the bottleneck and a small ping sent into the full window was the
/// only packet of its flight to arrive: its sample reads a few hundred bytes per second
/// and is not application-limited. Once the path has had nothing in flight and sent
/// nothing for a round trip, the sample only bounds the rate from below, so the
/// scheduler does not shut the path out for good; when the path carries traffic
/// again, the sample stands until the next one replaces it.
#[test]
fn a_lone_survivors_sample_is_a_lower_bound_while_the_path_idles() {
    let t0 = Instant::now();
    let mut path = probe_with(
        t0,
        FixedWindow {
            window: 10 * DATAGRAM,
            ..Default::default()
        },
    );
    send_data_every_millisecond(&mut path, t0, 10);
    let mut lost = Vec::new();
    path.on_ack(t0 + ms(40), &ack_of(&[(0, 1)], ms(0), 0), &mut lost);
    const PING: u64 = 47;
    path.on_sent(t0 + ms(45), 10, PING, None, false);
    let acked_at = t0 + ms(130);
    path.on_ack(acked_at, &ack_of(&[(10, 10)], ms(0), 0), &mut lost);
    assert_eq!(lost.len(), 8, "2 to 9 are lost");
    assert_eq!(path.packets_in_flight(), 0);
    let since_last_send = acked_at - (t0 + ms(45));
    assert!(path.rtt.smoothed().unwrap() < since_last_send);

    let sample = path.latest_rate_sample(acked_at).unwrap();
    assert_eq!(sample.delivered, PING);
    assert!(sample.delivery_rate < 1_000, "{sample:?}");
    assert!(sample.app_limited, "idle for a round trip: a lower bound");

    let resent_at = acked_at + ms(1);
    path.on_sent(resent_at, 11, DATAGRAM, Some(111), false);
    let sample = path.latest_rate_sample(resent_at).unwrap();
    assert_eq!(sample.delivered, PING);
    assert!(!sample.app_limited, "the path carries traffic again");
}

/// Only a packet sent into the idle path measures the jitter: one sent behind others
/// may have waited for them.
#[test]
fn packets_sent_into_the_idle_path_measure_its_jitter() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    // Four pings, one at a time, with one-way delays of 20, 26, 21 and 29 ms.
    for (pn, owd_ms) in [(0u32, 20u32), (1, 26), (2, 21), (3, 29)] {
        let sent = t0 + ms(100 * u64::from(pn));
        path.on_sent(sent, pn, 60, None, false);
        if pn < 3 {
            assert_eq!(path.jitter(), None);
        }
        path.on_ack(
            sent + ms(40),
            &ack_of(&[(pn, pn)], ms(0), owd_ms * 1000),
            &mut lost,
        );
    }
    // The second largest (26) less the smallest (20), scaled to the spread of four.
    assert_eq!(path.jitter(), Some(ms(15)));
    assert_eq!(path.stats(t0 + ms(400)).jitter, Some(ms(15)));
    assert_eq!(path.controller().last_signals.unwrap().jitter, Some(ms(15)));
    // A burst: the second packet left with the first in flight. Its 60 ms delay
    // counts as a queue, not as jitter.
    let sent = t0 + ms(1000);
    path.on_sent(sent, 4, DATAGRAM, Some(1), false);
    path.on_sent(sent, 5, DATAGRAM, Some(2), false);
    path.on_ack(sent + ms(90), &ack_of(&[(4, 5)], ms(0), 60_000), &mut lost);
    assert_eq!(path.jitter(), Some(ms(15)));
}

/// A path that reordered a packet: it is declared lost when four later ones are
/// acknowledged, then acknowledged itself. The record kept it, so the loss shows as
/// spurious, and the next packet overtaken by as many is not declared lost.
#[test]
fn a_packet_acknowledged_after_its_loss_teaches_the_path_its_reordering() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    send_data_every_millisecond(&mut path, t0, 12);
    let mut lost = Vec::new();
    let result = path.on_ack(
        t0 + ms(52),
        &ack_of(&[(2, 5), (0, 0)], ms(0), 20_000),
        &mut lost,
    );
    assert_eq!(result.lost_packets, 1);
    assert_eq!(lost.iter().map(|packet| packet.pn).collect::<Vec<_>>(), [1]);
    assert_eq!(path.stats(t0 + ms(52)).packet_threshold, PACKET_THRESHOLD);

    let result = path.on_ack(t0 + ms(53), &ack_of(&[(0, 5)], ms(0), 20_000), &mut lost);
    assert_eq!(result.acked_packets, 0, "it counted as lost already");
    let stats = path.stats(t0 + ms(53));
    assert_eq!(stats.spurious_losses, 1);
    assert_eq!(stats.packet_threshold, 5, "overtaken by 2..=5");

    // 6 is overtaken by 7..=10: lost at the first threshold, not now.
    lost.clear();
    let result = path.on_ack(
        t0 + ms(62),
        &ack_of(&[(7, 10), (0, 5)], ms(0), 20_000),
        &mut lost,
    );
    assert_eq!((result.acked_packets, result.lost_packets), (4, 0));
    assert!(lost.is_empty());
}

/// Acknowledges `ranges` a millisecond after `clock`, and returns what was declared
/// lost.
fn ack_a_tick_later(
    path: &mut PathProbe<FixedWindow>,
    clock: &mut Instant,
    ranges: &[(u32, u32)],
) -> Vec<u32> {
    *clock += ms(1);
    let mut lost = Vec::new();
    path.on_ack(*clock, &ack_of(ranges, ms(0), 20_000), &mut lost);
    lost.iter().map(|packet| packet.pn).collect()
}

/// From packet `first` on, `rounds` acknowledgements that each find one packet lost,
/// overtaken by the five after it. Returns the next packet to use.
fn lose_in_order(
    path: &mut PathProbe<FixedWindow>,
    clock: &mut Instant,
    first: u32,
    rounds: u32,
) -> u32 {
    let mut next = first;
    for _ in 0..rounds {
        assert_eq!(
            ack_a_tick_later(path, clock, &[(next + 1, next + 5)]),
            [next]
        );
        next += 6;
    }
    next
}

/// A path that reordered once forgets it after REORDERING_PERSISTENCE acknowledgements
/// that found losses in order, unless a packet overtaken beyond the starting threshold
/// shows the reordering goes on. Packets are acknowledged 100-300 ms after they were
/// sent, so only the packet threshold finds losses.
#[test]
fn a_path_forgets_reordering_it_no_longer_sees() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    send_data_every_millisecond(&mut path, t0, 210);
    let mut clock = t0 + ms(300);
    assert_eq!(
        ack_a_tick_later(&mut path, &mut clock, &[(2, 5), (0, 0)]),
        [1]
    );
    ack_a_tick_later(&mut path, &mut clock, &[(1, 1)]);
    assert_eq!(path.stats(clock).packet_threshold, 5);

    let next = lose_in_order(&mut path, &mut clock, 6, REORDERING_PERSISTENCE - 1);
    // `next` is overtaken by four: no loss at a threshold of 5, a loss at 1.
    assert!(ack_a_tick_later(&mut path, &mut clock, &[(next + 1, next + 4)]).is_empty());
    ack_a_tick_later(&mut path, &mut clock, &[(next, next)]);
    let next = lose_in_order(&mut path, &mut clock, next + 5, REORDERING_PERSISTENCE - 1);
    assert_eq!(
        path.stats(clock).packet_threshold,
        5,
        "the countdown started again"
    );
    lose_in_order(&mut path, &mut clock, next, 1);
    assert_eq!(path.stats(clock).packet_threshold, PACKET_THRESHOLD);
}

/// The queue measured last stands while packets of ours are in flight; once none is
/// and the newest got through, it drains as time passes, so a path that fell idle
/// behind a deep queue is not kept out of the schedule by that queue for good. A path
/// whose newest packet was lost (one gone dark) keeps the queue it showed.
#[test]
fn a_queue_with_nothing_of_ours_in_it_drains_as_time_passes() {
    let t0 = Instant::now();
    let mut path = probe(t0);
    let mut lost = Vec::new();
    path.on_sent(t0, 0, DATAGRAM, Some(0), false);
    path.on_ack(t0 + ms(40), &ack_of(&[(0, 0)], ms(0), 20_000), &mut lost);
    // Eleven packets behind a 200 ms queue; the last one still in flight.
    for pn in 1..=11u32 {
        path.on_sent(t0 + ms(40 + u64::from(pn)), pn, DATAGRAM, Some(pn), false);
    }
    for pn in 1..=10u32 {
        let at = t0 + ms(260 + u64::from(pn));
        path.on_ack(at, &ack_of(&[(pn, pn)], ms(0), 220_000), &mut lost);
    }
    let measured_at = t0 + ms(270);
    let queue = path.queuing_delay().unwrap();
    assert!(queue > ms(100), "{queue:?}");
    assert_eq!(
        path.queuing_delay_at(measured_at + ms(80)),
        Some(queue),
        "one in flight"
    );
    path.on_ack(
        measured_at + ms(1),
        &ack_of(&[(11, 11)], ms(0), 220_000),
        &mut lost,
    );
    let queue = path.queuing_delay().unwrap();
    let later = measured_at + ms(1) + ms(80);
    assert_eq!(path.queuing_delay_at(later), Some(queue - ms(80)));
    assert_eq!(path.queuing_delay_at(later + queue), Some(Duration::ZERO));
    assert_eq!(path.stats(later).queuing_delay, Some(queue - ms(80)));

    path.on_sent(later, 12, DATAGRAM, Some(12), false);
    assert_eq!(
        path.queuing_delay_at(later + ms(80)),
        Some(queue),
        "in flight"
    );
    path.drain_in_flight(&mut lost);
    assert_eq!(path.bytes_in_flight(), 0);
    assert_eq!(
        path.queuing_delay_at(later + ms(80)),
        Some(queue),
        "the newest was lost"
    );
}
