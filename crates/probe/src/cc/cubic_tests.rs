use std::time::{Duration, Instant};

use super::*;
use crate::cc::test_link::{ms, Link, Sim, MDS};

/// A link that never queues, so the window alone sets the pace: one window per RTT.
fn unbounded_link(rtt: Duration) -> Link {
    Link {
        queue_free: true,
        ..Link::new(u64::MAX / 4, rtt)
    }
}

fn rtt_estimator(rtt: Duration) -> RttEstimator {
    let mut estimator = RttEstimator::new();
    estimator.on_sample(rtt);
    estimator
}

/// A CUBIC flow that just lost a packet at `w_max` bytes, with its simulator.
fn after_loss(t0: Instant, w_max: u64, rtt: Duration) -> (Cubic, Sim) {
    let mut cubic = Cubic::new(MDS);
    cubic.window = w_max;
    let mut sim = Sim::new(t0, unbounded_link(rtt));
    sim.rtt.on_sample(rtt);
    cubic.on_congestion_event(sim.now, sim.now - rtt, false, MDS);
    (cubic, sim)
}

/// Steps until the first congestion avoidance acknowledgement starts the epoch.
fn start_epoch(cubic: &mut Cubic, sim: &mut Sim) -> Instant {
    while cubic.epoch.is_none() {
        sim.step(cubic);
    }
    cubic.epoch.unwrap().start
}

fn segments(bytes: u64) -> f64 {
    bytes as f64 / MDS as f64
}

#[test]
fn initial_window_follows_rfc9002() {
    // (max datagram size, min(10 × mds, max(14720, 2 × mds)))
    #[rustfmt::skip]
    let cases = [
        (1200, 12_000),
        (1000, 10_000),
        (1500, 14_720), // 15000 capped by max(14720, 3000)
        (9000, 18_000), // jumbo: 2 × mds beats 14720
        (500,   5_000),
    ];
    for (mds, expected) in cases {
        let cubic = Cubic::new(mds);
        assert_eq!(cubic.initial_window(), expected, "mds {mds}");
        assert_eq!(cubic.window(), expected, "mds {mds}");
        assert_eq!(cubic.ssthresh(), u64::MAX);
    }
}

#[test]
fn slow_start_doubles_per_round_trip() {
    let t0 = Instant::now();
    let rtt = ms(50);
    let estimator = rtt_estimator(rtt);
    let mut cubic = Cubic::new(MDS);
    let mut round_start = t0 + Duration::from_secs(1);
    // Window at the start of each round; every datagram of a window is acknowledged.
    for expected in [12_000, 24_000, 48_000, 96_000, 192_000] {
        assert_eq!(cubic.window(), expected);
        let datagrams = cubic.window() / MDS;
        for index in 0..datagrams {
            let now = round_start + rtt + rtt * index as u32 / datagrams as u32;
            cubic.on_ack(now, round_start, MDS, &estimator, &AckSignals::default());
        }
        round_start += rtt;
    }
    assert!(cubic.in_slow_start());
}

#[test]
fn loss_sets_w_max_and_cuts_to_seven_tenths() {
    let t0 = Instant::now();
    // (window at loss, window after = ssthresh)
    #[rustfmt::skip]
    let cases = [
        (12_000,   8_400),
        (120_000, 84_000),
        (100_001, 70_000), // 70000.7 rounds down
        (3_000,    2_400), // 2100 raised to the 2 × mds minimum
    ];
    for (before, after) in cases {
        let (cubic, _) = after_loss(t0, before, ms(100));
        assert_eq!(cubic.window(), after, "window {before}");
        assert_eq!(cubic.ssthresh(), after, "ssthresh {before}");
        assert_eq!(cubic.w_max(), Some(before), "w_max {before}");
        assert!(!cubic.in_slow_start());
    }
}

#[test]
fn k_matches_hand_computation() {
    // W_max = 100 segments, cwnd_epoch = 70 segments (0.7 × 100):
    // K = cbrt((100 − 70) / 0.4) = cbrt(75) = 4.2171633 s  (4.2171633³ = 75.0000)
    assert!((cubic_k(100.0, 70.0) - 4.217_163_3).abs() < 1e-6);
    // W_max = 10, cwnd_epoch = 7: K = cbrt(3 / 0.4) = cbrt(7.5) = 1.9574338 s
    assert!((cubic_k(10.0, 7.0) - 1.957_433_8).abs() < 1e-6);
    // Nothing to climb: K = 0.
    assert_eq!(cubic_k(50.0, 60.0), 0.0);
    // W_cubic(K) = W_max exactly, and W_cubic(0) = cwnd_epoch.
    assert!((w_cubic(4.217_163_3, 4.217_163_3, 100.0) - 100.0).abs() < 1e-9);
    assert!((w_cubic(0.0, cubic_k(100.0, 70.0), 100.0) - 70.0).abs() < 1e-9);

    // The controller computes the same K when its epoch starts after the loss.
    let t0 = Instant::now();
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, ms(100));
    start_epoch(&mut cubic, &mut sim);
    let k = cubic.k().unwrap().as_secs_f64();
    assert!((k - 4.217_163_3).abs() < 1e-6, "K = {k}");
}

#[test]
fn window_reaches_w_max_at_k() {
    let t0 = Instant::now();
    let rtt = ms(100);
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, rtt);
    let epoch_start = start_epoch(&mut cubic, &mut sim);
    let k = cubic.k().unwrap();
    while sim.now < epoch_start + k {
        sim.step(&mut cubic);
    }
    let window = cubic.window();
    assert!(
        window.abs_diff(100 * MDS) <= MDS,
        "window at K is {window}, W_max is {}",
        100 * MDS
    );
}

#[test]
fn growth_is_concave_before_k_and_convex_after() {
    // At RTT 150 ms the Reno-friendly estimate stays below W_cubic for these 8 s
    // (W_est(8 s) ≈ 70 + 0.53 × 53 ≈ 98 segments), so the cubic curve alone shows.
    let t0 = Instant::now();
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, ms(150));
    let epoch_start = start_epoch(&mut cubic, &mut sim);
    let mut windows = Vec::new();
    for second in 0..=8u64 {
        while sim.now < epoch_start + Duration::from_secs(second) {
            sim.step(&mut cubic);
        }
        windows.push(segments(cubic.window()));
    }
    // W_cubic at 0..8 s: 70, 86.7, 95.6, 99.3, 100.0, 100.2, 102.3, 108.6, 121.7
    for (second, expected) in [
        (0, 70.0),
        (1, 86.7),
        (2, 95.6),
        (3, 99.3),
        (5, 100.2),
        (6, 102.3),
        (7, 108.6),
        (8, 121.7),
    ] {
        let window = windows[second];
        assert!(
            (window - expected).abs() <= 1.5,
            "{second} s: {window} segments, expected {expected}"
        );
    }
    let increments: Vec<f64> = windows.windows(2).map(|pair| pair[1] - pair[0]).collect();
    // Concave: increments shrink up to K ≈ 4.2 s ...
    assert!(increments[..4].windows(2).all(|pair| pair[1] < pair[0]));
    // ... convex: they grow after it.
    assert!(increments[4..].windows(2).all(|pair| pair[1] > pair[0]));
}

#[test]
fn reno_friendly_region_dominates_after_a_cut_at_small_rtt() {
    // At 10 ms, 0.5 s is 50 round trips: W_est = 70 + α × 50 with α = 3 × 0.3 / 1.7
    // = 0.529, i.e. 96.5 segments, while W_cubic(0.5 s) = 100 − 0.4 × 3.717³ = 79.5.
    let t0 = Instant::now();
    let rtt = ms(10);
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, rtt);
    let epoch_start = start_epoch(&mut cubic, &mut sim);
    while sim.now < epoch_start + ms(500) {
        sim.step(&mut cubic);
    }
    let window = segments(cubic.window());
    let cubic_curve = w_cubic(0.5, cubic_k(100.0, 70.0), 100.0);
    assert!((cubic_curve - 79.5).abs() < 0.1);
    let reno_friendly = 70.0 + ALPHA_CUBIC * 50.0;
    assert!(
        (window - reno_friendly).abs() <= 2.0,
        "window {window} segments, W_est {reno_friendly}"
    );
    assert!(window > cubic_curve + 10.0);
}

#[test]
fn fast_convergence_lowers_w_max_on_a_second_loss_below_it() {
    let t0 = Instant::now();
    let rtt = ms(100);
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, rtt);
    start_epoch(&mut cubic, &mut sim);
    sim.run_for(&mut cubic, Duration::from_secs(1));
    let window = cubic.window();
    assert!(window < 100 * MDS);
    // The unbounded link delivers the whole window per RTT: forget that rate, or the
    // BDP floor would keep the window (see `random_loss_is_not_congestion`).
    cubic.max_rate = [0; 2];
    cubic.on_congestion_event(sim.now, sim.now - rtt, false, MDS);
    // W_max = cwnd × (1 + 0.7) / 2 = 0.85 × cwnd.
    let expected = (segments(window) * 0.85 * MDS as f64) as u64;
    assert!(cubic.w_max().unwrap().abs_diff(expected) <= 1);
    assert_eq!(cubic.window(), window * 7 / 10);

    // A loss above the old W_max sets W_max to the window itself.
    let (mut cubic, mut sim) = after_loss(t0, 10 * MDS, rtt);
    start_epoch(&mut cubic, &mut sim);
    cubic.window = 20 * MDS;
    cubic.on_congestion_event(sim.now, sim.now - rtt, false, MDS);
    assert_eq!(cubic.w_max(), Some(20 * MDS));
}

#[test]
fn one_reduction_per_recovery_period() {
    let t0 = Instant::now();
    let loss_at = t0 + Duration::from_secs(1);
    // (send time of the second lost packet relative to the first event, window after)
    #[rustfmt::skip]
    let cases: [(i64, u64); 4] = [
        (-50,  84_000),          // sent before recovery began: same event
        (0,    84_000),          // sent at the recovery start: still the same event
        (1,    58_800),          // sent after: a new event, 0.7 × 84000
        (30,   58_800),
    ];
    for (sent_offset_ms, expected) in cases {
        let mut cubic = Cubic::new(MDS);
        cubic.window = 120_000;
        cubic.on_congestion_event(loss_at, loss_at - ms(100), false, MDS);
        assert_eq!(cubic.window(), 84_000);
        let sent = if sent_offset_ms < 0 {
            loss_at - ms(sent_offset_ms.unsigned_abs())
        } else {
            loss_at + ms(sent_offset_ms as u64)
        };
        cubic.on_congestion_event(loss_at + ms(150), sent, false, MDS);
        assert_eq!(cubic.window(), expected, "sent {sent_offset_ms} ms");
    }
}

#[test]
fn no_growth_on_acks_of_packets_sent_before_recovery() {
    let t0 = Instant::now();
    let rtt = ms(100);
    let estimator = rtt_estimator(rtt);
    let loss_at = t0 + Duration::from_secs(1);
    let mut cubic = Cubic::new(MDS);
    cubic.window = 120_000;
    cubic.on_congestion_event(loss_at, loss_at - rtt, false, MDS);
    for index in 1..=50 {
        let now = loss_at + ms(index);
        cubic.on_ack(
            now,
            loss_at - ms(1),
            MDS,
            &estimator,
            &AckSignals::default(),
        );
    }
    assert_eq!(cubic.window(), 84_000);
    assert!(cubic.epoch.is_none());
    // The first packet sent after the recovery start ends recovery.
    let now = loss_at + rtt + ms(1);
    cubic.on_ack(
        now,
        loss_at + ms(1),
        MDS,
        &estimator,
        &AckSignals::default(),
    );
    assert!(cubic.epoch.is_some());
}

#[test]
fn persistent_congestion_collapses_to_the_minimum_window() {
    let t0 = Instant::now();
    let rtt = ms(100);
    let mut cubic = Cubic::new(MDS);
    cubic.window = 120_000;
    let mut sim = Sim::new(t0, unbounded_link(rtt));
    sim.rtt.on_sample(rtt);
    cubic.on_congestion_event(sim.now, sim.now - rtt, true, 10 * MDS);
    assert_eq!(cubic.window(), 2 * MDS);
    // RFC 9438 §4.8: ssthresh still uses β_cubic.
    assert_eq!(cubic.ssthresh(), 84_000);
    assert!(cubic.in_slow_start());
    // Persistent congestion applies even inside the recovery period it started.
    cubic.window = 50_000;
    cubic.on_congestion_event(sim.now + ms(10), sim.now - rtt, true, MDS);
    assert_eq!(cubic.window(), 2 * MDS);

    // Slow start back to ssthresh, then a stage with K = 0 and W_max = its start window.
    start_epoch(&mut cubic, &mut sim);
    assert_eq!(cubic.k(), Some(Duration::ZERO));
    assert_eq!(cubic.epoch.unwrap().w_max, segments(84_000));
    assert!(cubic.window().abs_diff(84_000) < MDS);
}

#[test]
fn no_growth_while_application_limited() {
    let t0 = Instant::now();
    let rtt = ms(100);
    let estimator = rtt_estimator(rtt);
    let limited = AckSignals {
        app_limited: true,
        ..AckSignals::default()
    };
    // Slow start.
    let mut cubic = Cubic::new(MDS);
    let start = t0 + Duration::from_secs(1);
    for index in 0..100 {
        cubic.on_ack(start + ms(index), start, MDS, &estimator, &limited);
    }
    assert_eq!(cubic.window(), 12_000);

    // Congestion avoidance: no growth, and the epoch moves with the idle time.
    let (mut cubic, mut sim) = after_loss(t0, 100 * MDS, rtt);
    let epoch_start = start_epoch(&mut cubic, &mut sim);
    let window = cubic.window();
    let mut now = sim.now;
    for _ in 0..50 {
        now += ms(100);
        cubic.on_ack(now, now - rtt, MDS, &estimator, &limited);
    }
    assert_eq!(cubic.window(), window);
    let moved = cubic.epoch.unwrap().start - epoch_start;
    assert_eq!(
        moved,
        now - sim.now,
        "the 5 s limited period is not part of t"
    );
}

#[test]
fn random_loss_is_not_congestion() {
    let t0 = Instant::now();
    // 10 Mbit/s, 50 ms, a deep buffer, and every 100th datagram lost (1%) regardless
    // of the window. Plain CUBIC averages about 1.2 / √p ≈ 12 datagrams there (its
    // Reno-friendly region), a quarter of the 52-datagram BDP; with the BDP floor the
    // window stays at the BDP and the path near line rate.
    let link = Link {
        loss_every: Some(100),
        ..Link::new(1_250_000, ms(50))
    };
    let mut cubic = Cubic::new(MDS);
    let mut sim = Sim::new(t0, link);
    sim.run_for(&mut cubic, Duration::from_secs(5));
    sim.take_mean_window();
    let start = sim.delivered_bytes;
    sim.run_for(&mut cubic, Duration::from_secs(20));
    let delivered = sim.delivered_bytes - start;
    let window = sim.take_mean_window();
    assert!(window >= 62_500, "mean window {window}");
    assert!(delivered > 23_000_000, "delivered {delivered}");
}
