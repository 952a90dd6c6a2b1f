use super::*;

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

fn us(value: u64) -> Duration {
    Duration::from_micros(value)
}

const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// Packets 0..=9, sent every 10 ms from `t0`.
fn ten_sent_10_ms_apart(t0: Instant) -> SentPackets {
    sent_at(t0, &(0..10).map(|pn| pn * 10).collect::<Vec<_>>())
}

/// Sends one 1000-byte packet per entry of `send_offsets_ms`, numbered from 0.
fn sent_at(t0: Instant, send_offsets_ms: &[u64]) -> SentPackets {
    let mut sent = SentPackets::with_capacity(send_offsets_ms.len().max(16));
    for (pn, &offset) in send_offsets_ms.iter().enumerate() {
        let time = t0 + ms(offset);
        assert!(sent.push(SentPacket {
            pn: pn as u32,
            time,
            bytes: 1000,
            seq: Some(100 + pn as u32),
            delivered: 0,
            delivered_time: time,
            first_sent_time: time,
            app_limited: false,
            send_rate: u64::MAX,
            sent_into_idle_path: false,
        }));
    }
    sent
}

/// Marks `pns` acknowledged the way `PathProbe::on_ack` does.
fn ack(sent: &mut SentPackets, loss: &mut LossDetector, pns: &[u32]) {
    for &pn in pns {
        let number = sent.widen_pn(pn).unwrap();
        let index = sent.index_of(number).unwrap();
        sent.mark_acked_now(index);
        sent.settle_acked(index);
        loss.on_ack_received(number);
    }
}

fn detect(
    loss: &mut LossDetector,
    now: Instant,
    rtt: &RttEstimator,
    sent: &mut SentPackets,
) -> (Vec<u32>, LossRound) {
    let mut lost = Vec::new();
    let round = loss.detect_lost(now, rtt, sent, |packet| lost.push(packet.pn));
    (lost, round)
}

fn rtt_of(samples_ms: &[u64]) -> RttEstimator {
    let mut rtt = RttEstimator::new();
    for &sample in samples_ms {
        rtt.on_sample(ms(sample));
    }
    rtt
}

/// A detector whose path has learned a packet threshold of 3 (RFC 9002's fixed
/// kPacketThreshold), so the time threshold decides for the two packets just below the
/// largest acknowledged.
fn reordered_by_three() -> LossDetector {
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    loss.packet_threshold = 3;
    loss
}

/// A path that has shown no reordering: any later packet acknowledged declares the
/// ones before it lost, whatever the time (RACK's reordering window of zero, RFC 8985
/// section 6.2).
#[test]
fn without_reordering_a_later_acknowledgement_declares_the_gap_lost() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut sent = ten_sent_10_ms_apart(t0);
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    assert_eq!(loss.packet_threshold(), PACKET_THRESHOLD);
    ack(&mut sent, &mut loss, &[0, 2]);
    assert_eq!(detect(&mut loss, t0 + ms(21), &rtt, &mut sent).0, [1]);
    assert!(loss.loss_time.is_none(), "nothing below 2 is left to time");
    ack(&mut sent, &mut loss, &[5]);
    assert_eq!(detect(&mut loss, t0 + ms(51), &rtt, &mut sent).0, [3, 4]);
}

/// Packets 0..=9 sent every 10 ms; RTT 100 ms, so the time threshold is 112.5 ms;
/// a packet threshold of 3. Each row: packets acknowledged, time of the detection (ms
/// after the first send), packets declared lost, loss timer afterwards (µs after the
/// first send).
#[test]
fn packet_and_time_threshold_table() {
    type Case = (
        &'static str,
        &'static [u32],
        u64,
        &'static [u32],
        Option<u64>,
    );
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ("3 later acked: 0 lost by count",       &[3],    103, &[0],       Some(122_500)),
        ("5 acked: 0, 1, 2 lost by count",        &[5],    105, &[0, 1, 2], Some(142_500)),
        ("2 acked: nothing yet, timer on 0",      &[2],    112, &[],        Some(112_500)),
        ("1 acked late: 0 lost by time",          &[1],    200, &[0],       None),
        ("6 acked late: count and time",          &[6],    170, &[0, 1, 2, 3, 4, 5], None),
        ("everything acked: nothing lost",        &[0, 1, 2, 3], 130, &[],  None),
        ("0 acked only: nothing to judge",        &[0],    500, &[],        None),
    ];
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    for (name, acked, at_ms, expected_lost, expected_timer) in cases {
        let mut sent = ten_sent_10_ms_apart(t0);
        let mut loss = reordered_by_three();
        assert_eq!(loss.loss_delay(&rtt), us(112_500), "{name}");
        ack(&mut sent, &mut loss, acked);
        let (lost, round) = detect(&mut loss, t0 + ms(*at_ms), &rtt, &mut sent);
        assert_eq!(lost, *expected_lost, "{name}: lost");
        assert_eq!(round.lost_packets as usize, expected_lost.len(), "{name}");
        assert_eq!(
            round.lost_bytes,
            1000 * expected_lost.len() as u64,
            "{name}"
        );
        let timer = loss
            .timer(&rtt, true)
            .map(|at| (at - t0).as_micros() as u64);
        if expected_timer.is_some() {
            assert_eq!(timer, *expected_timer, "{name}: loss timer");
        } else {
            assert!(loss.loss_time.is_none(), "{name}: no loss timer");
        }
    }
}

/// The loss timer fires packet by packet: with a packet threshold of 3, after 2 is
/// acknowledged at 112 ms, 0 goes at 112.5 ms and 1 at 122.5 ms.
#[test]
fn loss_timer_sequence() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut sent = sent_at(t0, &[0, 10, 20]);
    let mut loss = reordered_by_three();
    ack(&mut sent, &mut loss, &[2]);
    assert_eq!(
        detect(&mut loss, t0 + ms(112), &rtt, &mut sent).0,
        Vec::<u32>::new()
    );
    assert!(!loss.loss_timer_expired(t0 + ms(112)));
    assert!(loss.loss_timer_expired(t0 + us(112_500)));
    assert_eq!(detect(&mut loss, t0 + us(112_500), &rtt, &mut sent).0, [0]);
    assert_eq!(loss.timer(&rtt, true), Some(t0 + us(122_500)));
    assert_eq!(detect(&mut loss, t0 + us(122_500), &rtt, &mut sent).0, [1]);
    assert_eq!(loss.timer(&rtt, false), None);
    assert_eq!(sent.packets_in_flight(), 0);
}

/// Each row: RTT samples fed, expected time threshold in µs.
#[test]
fn time_threshold_table() {
    #[rustfmt::skip]
    let cases: &[(&[u64], u64)] = &[
        // no sample: 9/8 of the initial 333 ms
        (&[],         374_625),
        (&[100],      112_500),
        // latest 200 > srtt 112.5: 9/8 * 200
        (&[100, 200], 225_000),
        // srtt 93.75 > latest 50: 9/8 * 93.75
        (&[100, 50],  105_468),
    ];
    for (samples, expected) in cases {
        let loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
        let delay = loss.loss_delay(&rtt_of(samples));
        assert_eq!(delay.as_micros() as u64, *expected, "{samples:?}");
    }
    // 1 ms granularity floor
    let mut tiny = RttEstimator::new();
    tiny.on_sample(us(500));
    let loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    assert_eq!(loss.loss_delay(&tiny), GRANULARITY);
}

#[test]
fn pto_values_and_backoff() {
    let t0 = Instant::now();
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    // before any sample: 333 + 4 * 166.5 + 25 = 1024 ms
    assert_eq!(loss.pto_base(&RttEstimator::new()), ms(1024));
    // RTT 100 ms: 100 + 4 * 50 + 25 = 325 ms, doubling per consecutive PTO
    let rtt = rtt_of(&[100]);
    for (count, expected_ms) in [(0, 325), (1, 650), (2, 1300), (3, 2600), (4, 5200)] {
        assert_eq!(loss.pto_count(), count);
        assert_eq!(loss.pto_period(&rtt), ms(expected_ms), "pto_count {count}");
        loss.on_pto();
    }
    // the exponent stops at 10
    for _ in 0..40 {
        loss.on_pto();
    }
    assert_eq!(loss.pto_period(&rtt), ms(325) * 1024);
    // the variance term has the 1 ms floor: steady 10 ms gives 10 + 1 + 25
    let steady = rtt_of(&[10; 200]);
    assert_eq!(loss.pto_base(&steady), ms(36));

    // the timer runs from the last ack-eliciting send, only while in flight
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    loss.on_packet_sent(t0 + ms(5));
    assert_eq!(loss.timer(&rtt, true), Some(t0 + ms(330)));
    assert_eq!(loss.timer(&rtt, false), None);
    loss.on_pto();
    assert_eq!(loss.timer(&rtt, true), Some(t0 + ms(655)));
    // an acknowledgement of new data resets the backoff
    loss.on_packets_newly_acked(1);
    assert_eq!(loss.pto_count(), 0);
    assert_eq!(loss.timer(&rtt, true), Some(t0 + ms(330)));
}

/// RTT 100 ms: persistent congestion duration = 3 * 325 ms = 975 ms.
/// Each row: send times (ms), packets acknowledged, when the RTT was first sampled,
/// detection time, lost, persistent congestion.
#[test]
fn persistent_congestion_table() {
    type Case = (
        &'static str,
        &'static [u64],
        &'static [u32],
        u64,
        u64,
        &'static [u32],
        bool,
    );
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ("1500 ms of losses",            &[0, 500, 1000, 1500, 1600], &[4],    0,   1700, &[0, 1, 2, 3], true),
        ("an ack in between splits",     &[0, 500, 1000, 1500, 1600], &[2, 4], 0,   1700, &[0, 1, 3],    false),
        ("shorter than 975 ms",          &[0, 300, 600, 900, 1000],   &[4],    0,   1100, &[0, 1, 2, 3], false),
        ("sent before the first sample", &[0, 500, 1000, 1500, 1600], &[4],    600, 1700, &[0, 1, 2, 3], false),
    ];
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    for (name, sends, acked, first_sample, at, expected_lost, expected_persistent) in cases {
        let mut sent = sent_at(t0, sends);
        let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
        assert_eq!(loss.persistent_congestion_duration(&rtt), ms(975));
        loss.on_rtt_sample(t0 + ms(*first_sample));
        ack(&mut sent, &mut loss, acked);
        let (lost, round) = detect(&mut loss, t0 + ms(*at), &rtt, &mut sent);
        assert_eq!(lost, *expected_lost, "{name}");
        assert_eq!(round.persistent_congestion, *expected_persistent, "{name}");
        assert_eq!(
            round.newest_lost_sent,
            Some(t0 + ms(sends[*expected_lost.last().unwrap() as usize])),
            "{name}"
        );
    }
}

#[test]
fn loss_rate_is_a_packet_ewma() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut sent = sent_at(t0, &[0, 1, 2, 3]);
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    ack(&mut sent, &mut loss, &[1]);
    loss.on_packets_newly_acked(1);
    assert_eq!(loss.loss_rate(), 0.0);
    detect(&mut loss, t0 + ms(10), &rtt, &mut sent);
    // 0 is lost (1 >= 0 + 1): one loss from zero moves the average by the weight
    assert_eq!(loss.lost_packets(), 1);
    assert!((loss.loss_rate() - LOSS_RATE_WEIGHT).abs() < 1e-12);
    loss.on_packets_newly_acked(128);
    let expected = LOSS_RATE_WEIGHT * (1.0 - LOSS_RATE_WEIGHT).powi(128);
    assert!((loss.loss_rate() - expected).abs() < 1e-12);
}

/// Packets 0..=9 sent every 10 ms, RTT 100 ms. Packet 1 is overtaken by 2..=5 and
/// declared lost; its acknowledgement comes next. The threshold grows to the five
/// numbers it was overtaken by, so a packet overtaken by four is no longer lost, and
/// the spurious loss leaves the loss rate.
#[test]
fn a_reordered_packet_raises_the_packet_threshold() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut sent = ten_sent_10_ms_apart(t0);
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    ack(&mut sent, &mut loss, &[0, 2, 3, 4, 5]);
    assert_eq!(detect(&mut loss, t0 + ms(150), &rtt, &mut sent).0, [1]);
    assert!(loss.loss_rate() > 0.0);

    let one = sent.widen_pn(1).unwrap();
    loss.on_spurious_loss(t0 + ms(112), one, t0 + ms(10), &rtt);
    assert_eq!(loss.packet_threshold(), 5);
    assert_eq!(loss.spurious_losses(), 1);
    assert_eq!(loss.loss_rate(), 0.0);
    assert_eq!(loss.loss_delay(&rtt), us(112_500), "its round trip fitted");

    // 6 is overtaken by 7..=9: lost at the starting threshold, not at 5.
    ack(&mut sent, &mut loss, &[7, 8, 9]);
    assert_eq!(
        detect(&mut loss, t0 + ms(160), &rtt, &mut sent).0,
        Vec::<u32>::new()
    );
}

/// A spurious loss whose acknowledgement came later than the time threshold widens
/// the threshold until its round trip fits, up to twice the RTT.
#[test]
fn a_late_acknowledgement_widens_the_time_threshold() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    loss.on_ack_received(1);
    loss.on_spurious_loss(t0 + ms(140), 0, t0, &rtt);
    assert_eq!(loss.loss_delay(&rtt), ms(150), "RTT + RTT / 2");
    assert_eq!(loss.packet_threshold(), 2, "overtaken by one");
    loss.on_spurious_loss(t0 + ms(400), 0, t0, &rtt);
    assert_eq!(loss.loss_delay(&rtt), ms(200), "at most twice the RTT");
}

/// However far a late acknowledgement says a packet was overtaken, the packet
/// threshold stops at its cap.
#[test]
fn the_packet_threshold_is_capped() {
    let t0 = Instant::now();
    let rtt = rtt_of(&[100]);
    let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
    loss.on_ack_received(u64::MAX);
    loss.on_spurious_loss(t0 + ms(50), 7, t0, &rtt);
    assert_eq!(loss.packet_threshold(), MAX_PACKET_THRESHOLD);
    loss.on_spurious_loss(t0 + ms(50), 8, t0, &rtt);
    assert_eq!(loss.packet_threshold(), MAX_PACKET_THRESHOLD);
}

/// Packets 0..=199 sent a millisecond apart with an RTT of one second, so only the
/// packet threshold finds losses. Packet 1 was overtaken by 2..=5, declared lost and
/// acknowledged: the packet threshold is 5, and packets from 6 on are in flight.
struct ReorderedOnce {
    sent: SentPackets,
    loss: LossDetector,
    rtt: RttEstimator,
    now: Instant,
}

impl ReorderedOnce {
    fn new(t0: Instant) -> Self {
        let rtt = rtt_of(&[1000]);
        let mut sent = sent_at(t0, &(0..200).collect::<Vec<_>>());
        let mut loss = LossDetector::new(INITIAL_RTT, MAX_ACK_DELAY);
        let now = t0 + ms(300);
        ack(&mut sent, &mut loss, &[0, 2, 3, 4, 5]);
        assert_eq!(detect(&mut loss, now, &rtt, &mut sent).0, [1]);
        let one = sent.widen_pn(1).unwrap();
        loss.on_spurious_loss(now, one, t0 + ms(1), &rtt);
        assert_eq!(loss.packet_threshold(), 5);
        Self {
            sent,
            loss,
            rtt,
            now,
        }
    }

    /// Genuine losses found in order from packet `first`: each round loses one
    /// packet, overtaken by the five after it. Returns the next packet to use.
    fn lose_in_order(&mut self, first: u32, rounds: u32) -> u32 {
        let mut next = first;
        for _ in 0..rounds {
            ack(
                &mut self.sent,
                &mut self.loss,
                &(next + 1..=next + 5).collect::<Vec<_>>(),
            );
            let lost = detect(&mut self.loss, self.now, &self.rtt, &mut self.sent).0;
            assert_eq!(lost, [next]);
            next += 6;
        }
        next
    }

    /// Packet `pn` is overtaken by the `by` packets after it, fewer than the learned
    /// threshold, then acknowledged in flight.
    fn acknowledge_overtaken(&mut self, pn: u32, by: u32) {
        ack(
            &mut self.sent,
            &mut self.loss,
            &(pn + 1..=pn + by).collect::<Vec<_>>(),
        );
        assert!(detect(&mut self.loss, self.now, &self.rtt, &mut self.sent)
            .0
            .is_empty());
        let number = self.sent.widen_pn(pn).unwrap();
        self.loss.on_overtaken_ack(number);
        ack(&mut self.sent, &mut self.loss, &[pn]);
    }
}

/// A path that reordered once and then lost packets in order: the thresholds return
/// to their starting values after REORDERING_PERSISTENCE rounds that found losses.
#[test]
fn the_reordering_learned_is_forgotten_after_rounds_of_in_order_losses() {
    let mut path = ReorderedOnce::new(Instant::now());
    let next = path.lose_in_order(6, REORDERING_PERSISTENCE - 1);
    assert_eq!(path.loss.packet_threshold(), 5, "one round short");
    let next = path.lose_in_order(next, 1);
    assert_eq!(path.loss.packet_threshold(), PACKET_THRESHOLD);
    assert_eq!(path.loss.loss_delay(&path.rtt), us(1_125_000));

    // Overtaken by one is a loss again.
    ack(&mut path.sent, &mut path.loss, &[next + 1]);
    let lost = detect(&mut path.loss, path.now, &path.rtt, &mut path.sent).0;
    assert_eq!(lost, [next]);
}

/// A packet overtaken by at least the starting threshold, and acknowledged in flight,
/// shows the learned threshold is still needed: the countdown starts again.
#[test]
fn reordering_beyond_the_starting_thresholds_keeps_what_was_learned() {
    let mut path = ReorderedOnce::new(Instant::now());
    let next = path.lose_in_order(6, REORDERING_PERSISTENCE - 1);
    path.acknowledge_overtaken(next, 4);
    let next = path.lose_in_order(next + 5, REORDERING_PERSISTENCE - 1);
    assert_eq!(
        path.loss.packet_threshold(),
        5,
        "the countdown started again"
    );
    path.lose_in_order(next, 1);
    assert_eq!(path.loss.packet_threshold(), PACKET_THRESHOLD);
}
