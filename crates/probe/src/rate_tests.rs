use super::*;

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

const BYTES: u64 = 1000;
const ONE_WAY_ACK_DELAY_MS: u64 = 50;

/// A sender and an ack clock on a simulated timeline in whole milliseconds.
struct Schedule {
    t0: Instant,
    rate: RateEstimator,
    in_flight: Vec<SentPacket>,
    /// Sample produced by the acknowledgement of each packet number.
    samples: Vec<(u32, Option<RateSample>)>,
}

impl Schedule {
    fn new() -> Self {
        Self {
            t0: Instant::now(),
            rate: RateEstimator::new(),
            in_flight: Vec::new(),
            samples: Vec::new(),
        }
    }

    fn send(&mut self, at_ms: u64, pn: u32, app_limited: bool) {
        let now = self.t0 + ms(at_ms);
        if app_limited {
            self.rate
                .mark_app_limited(self.in_flight.len() as u64 * BYTES);
        }
        let mut packet = SentPacket {
            pn,
            time: now,
            bytes: BYTES,
            seq: None,
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            app_limited: false,
            send_rate: u64::MAX,
            sent_into_idle_path: false,
        };
        self.rate
            .on_packet_sent(now, self.in_flight.is_empty(), &mut packet);
        self.in_flight.push(packet);
    }

    /// Acknowledges every packet whose ack is due at `at_ms`, one ACK per packet.
    fn acks_due(&mut self, at_ms: u64, min_rtt: Duration) {
        let now = self.t0 + ms(at_ms);
        while let Some(first) = self.in_flight.first() {
            if first.time + ms(ONE_WAY_ACK_DELAY_MS) > now {
                break;
            }
            let packet = self.in_flight.remove(0);
            self.rate
                .on_packet_acked(now, u64::from(packet.pn), &packet);
            let sample = self.rate.finish_sample(Some(min_rtt));
            self.samples.push((packet.pn, sample));
        }
    }

    fn sample(&self, pn: u32) -> RateSample {
        self.samples
            .iter()
            .find(|(number, _)| *number == pn)
            .and_then(|(_, sample)| *sample)
            .unwrap_or_else(|| panic!("no sample for {pn}"))
    }
}

/// One 1000-byte packet per millisecond for 100 ms, each acknowledged 50 ms after it
/// was sent. Each row: packet number, expected rate (bytes/s), interval, delivered.
#[test]
fn known_schedule_gives_exact_rates() {
    let mut schedule = Schedule::new();
    for at in 0..200 {
        schedule.acks_due(at, ms(50));
        if at < 100 {
            schedule.send(at, at as u32, false);
        }
    }
    #[rustfmt::skip]
    let cases: &[(u32, u64, u64, u64)] = &[
        // the first packet: 1000 bytes over the 50 ms from its send to its ack
        (0,  20_000,    50,  1_000),
        // the flight before any ack: bytes since the first send, over the ack phase
        (1,  39_215,    51,  2_000),
        (9,  169_491,   59,  10_000),
        (49, 505_050,   99,  50_000),
        // steady state: 50 packets per 50 ms, send and ack phases both 50 ms
        (50, 1_000_000, 50,  50_000),
        (99, 1_000_000, 50,  50_000),
    ];
    for &(pn, rate, interval_ms, delivered) in cases {
        let sample = schedule.sample(pn);
        assert_eq!(sample.delivery_rate, rate, "pn {pn}");
        assert_eq!(sample.interval, ms(interval_ms), "pn {pn}");
        assert_eq!(sample.delivered, delivered, "pn {pn}");
        assert!(!sample.app_limited, "pn {pn}");
    }
    assert_eq!(schedule.rate.latest().unwrap().delivery_rate, 1_000_000);
    assert_eq!(schedule.rate.delivered(), 100 * BYTES);
}

#[test]
fn interval_shorter_than_min_rtt_gives_no_sample() {
    let mut schedule = Schedule::new();
    schedule.send(0, 0, false);
    // min RTT 60 ms, but the sample spans 50 ms (acknowledgement compression)
    schedule.acks_due(50, ms(60));
    assert_eq!(schedule.samples, [(0, None)]);
    assert_eq!(schedule.rate.latest(), None);
}

/// Packets 5..=9 are sent application-limited with 5 packets in flight, so the mark
/// lasts until more than 5000 bytes are delivered: their samples carry the flag, and
/// packet 10, sent after the bubble was acknowledged, does not.
#[test]
fn app_limited_flag_propagates_and_clears() {
    let mut schedule = Schedule::new();
    for at in 0..200 {
        schedule.acks_due(at, ms(50));
        if at < 10 {
            schedule.send(at, at as u32, at >= 5);
        } else if at == 60 {
            schedule.send(at, 10, false);
        }
    }
    for pn in 0..=10 {
        let expected = (5..=9).contains(&pn);
        assert_eq!(schedule.sample(pn).app_limited, expected, "pn {pn}");
    }
    assert!(!schedule.rate.is_app_limited());
}

/// An application-limited sample below the current estimate does not replace it.
#[test]
fn app_limited_samples_do_not_lower_the_estimate() {
    let mut schedule = Schedule::new();
    for at in 0..150 {
        schedule.acks_due(at, ms(50));
        if at < 100 {
            schedule.send(at, at as u32, false);
        }
    }
    assert_eq!(schedule.rate.latest().unwrap().delivery_rate, 1_000_000);
    // then one packet every 10 ms, marked application-limited
    for at in 150..400 {
        schedule.acks_due(at, ms(50));
        if at % 10 == 0 {
            schedule.send(at, 100 + (at as u32 - 150) / 10, true);
        }
    }
    let last = schedule.samples.last().unwrap().1.unwrap();
    assert!(last.app_limited);
    assert!(last.delivery_rate < 1_000_000, "{last:?}");
    assert_eq!(schedule.rate.latest().unwrap().delivery_rate, 1_000_000);
}

/// A paced burst that left as one and crossed a token bucket with room: ten packets
/// sent at the same instant, each acknowledged 0.1 ms later. The send and the
/// acknowledgement phases read 10 kB in 0.1 ms, 100 MB/s; the pacer released them at
/// 2.5 MB/s (20 Mbit/s), and that is all the sample may show.
#[test]
fn a_burst_reads_no_faster_than_its_pacer_released_it() {
    let paced = 2_500_000;
    let t0 = Instant::now();
    let mut rate = RateEstimator::new();
    let mut sent = Vec::new();
    for pn in 0..10u32 {
        let mut packet = SentPacket {
            pn,
            time: t0,
            bytes: BYTES,
            seq: None,
            delivered: 0,
            delivered_time: t0,
            first_sent_time: t0,
            app_limited: false,
            send_rate: paced,
            sent_into_idle_path: false,
        };
        rate.on_packet_sent(t0, pn == 0, &mut packet);
        sent.push(packet);
    }
    let acked_at = t0 + Duration::from_micros(100);
    for packet in &sent {
        rate.on_packet_acked(acked_at, u64::from(packet.pn), packet);
    }
    let sample = rate.finish_sample(Some(Duration::from_micros(50))).unwrap();
    assert_eq!(sample.delivered, 10 * BYTES);
    assert_eq!(sample.delivery_rate, paced);

    // Unpaced, the same burst reads what the phases show.
    let mut unpaced = RateEstimator::new();
    for packet in &mut sent {
        packet.send_rate = u64::MAX;
        unpaced.on_packet_sent(t0, packet.pn == 0, packet);
    }
    for packet in &sent {
        unpaced.on_packet_acked(acked_at, u64::from(packet.pn), packet);
    }
    let sample = unpaced
        .finish_sample(Some(Duration::from_micros(50)))
        .unwrap();
    assert_eq!(sample.delivery_rate, 100_000_000);
}
