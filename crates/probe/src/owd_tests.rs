use super::*;

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

fn us(value: u64) -> Duration {
    Duration::from_micros(value)
}

/// Feeds `(send time in ms, raw one-way delay in µs)` pairs.
fn feed(owd: &mut OwdEstimator, t0: Instant, samples: &[(u64, u32)]) {
    for &(at, raw) in samples {
        owd.on_sample(t0 + ms(at), raw);
    }
}

/// A clock offset of 3e9 µs between the ends; each row: send time (ms), true one-way
/// delay (µs), expected latest queuing delay (µs), expected smoothed queuing delay (ns).
#[test]
fn minimum_and_queuing_delay_table() {
    const OFFSET: u32 = 3_000_000_000;
    #[rustfmt::skip]
    let rows: &[(u64, u32, u64, u64)] = &[
        (0,  50_000,      0,         0),
        (10, 50_000,      0,         0),
        // 10 ms above the minimum: smoothed moves 1/8 of the way
        (20, 60_000, 10_000, 1_250_000),
        // a new minimum
        (30, 40_000,      0, 1_093_750),
        (40, 45_000,  5_000, 1_582_031),
    ];
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    assert_eq!(owd.queuing_delay(), None);
    for &(at, delay, latest_us, smoothed_ns) in rows {
        owd.on_sample(t0 + ms(at), delay.wrapping_add(OFFSET));
        assert_eq!(
            owd.latest_queuing_delay(),
            Some(Duration::from_micros(latest_us)),
            "{at} ms"
        );
        assert_eq!(
            owd.queuing_delay(),
            Some(Duration::from_nanos(smoothed_ns)),
            "{at} ms"
        );
    }
}

/// The minimum is forgotten after the 10 s window.
#[test]
fn minimum_expires_after_the_window() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    owd.on_sample(t0, 40_000);
    for second in 1..=9 {
        owd.on_sample(t0 + ms(second * 1000), 50_000);
        assert_eq!(
            owd.latest_queuing_delay(),
            Some(Duration::from_micros(10_000)),
            "{second} s"
        );
    }
    owd.on_sample(t0 + ms(10_000), 50_000);
    assert_eq!(owd.latest_queuing_delay(), Some(Duration::ZERO));
}

#[test]
fn positive_trend_under_queue_build_up() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    // one sample per 10 ms, delay up 1 ms each time: 100 ms per second
    let samples: Vec<(u64, u32)> = (0..20)
        .map(|i| (i * 10, 30_000 + i as u32 * 1000))
        .collect();
    feed(&mut owd, t0, &samples[..3]);
    assert_eq!(owd.trend_us_per_s(), None, "too few samples");
    feed(&mut owd, t0, &samples[3..]);
    let trend = owd.trend_us_per_s().unwrap();
    assert!((trend - 100_000.0).abs() < 1e-3, "{trend}");
    assert!(owd.queuing_delay().unwrap() > ms(10));
}

#[test]
fn zero_trend_in_steady_state() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    let samples: Vec<(u64, u32)> = (0..40).map(|i| (i * 25, 30_000)).collect();
    feed(&mut owd, t0, &samples);
    assert_eq!(owd.trend_us_per_s(), Some(0.0));
    assert_eq!(owd.queuing_delay(), Some(Duration::ZERO));
}

/// Raw values crossing u32::MAX (from the fourth sample on) give exactly what the same delays without the wrap give.
#[test]
fn raw_values_wrap() {
    let t0 = Instant::now();
    let (mut wrapped, mut plain) = (OwdEstimator::new(), OwdEstimator::new());
    for i in 0..20u32 {
        let delay = 30_000 + (i % 5) * 4_000 + i * 500;
        wrapped.on_sample(
            t0 + ms(u64::from(i) * 10),
            (u32::MAX - 40_000).wrapping_add(delay),
        );
        plain.on_sample(t0 + ms(u64::from(i) * 10), delay);
        assert_eq!(
            wrapped.latest_queuing_delay(),
            plain.latest_queuing_delay(),
            "sample {i}"
        );
        assert_eq!(wrapped.queuing_delay(), plain.queuing_delay(), "sample {i}");
    }
    assert_eq!(wrapped.trend_us_per_s(), plain.trend_us_per_s());
    assert!(wrapped.trend_us_per_s().unwrap() > 0.0);
}

#[test]
fn base_readings_of_two_paths_differ_by_their_forward_delays() {
    // One clock offset for both paths (the same two hosts), close to the 32-bit wrap so
    // that the readings wrap; 120 ms forward on one path, 8 ms on the other.
    const OFFSET: u32 = u32::MAX - 50_000;
    let t0 = Instant::now();
    let mut slow = OwdEstimator::new();
    let mut fast = OwdEstimator::new();
    assert_eq!(slow.base_raw_us(), None);
    // Queues come and go above each path's base; (send time ms, delay µs).
    let readings = |delays: &[(u64, u32)]| -> Vec<(u64, u32)> {
        delays
            .iter()
            .map(|&(at, delay)| (at, OFFSET.wrapping_add(delay)))
            .collect()
    };
    let slow_delays = [(0, 150_000), (10, 120_000), (20, 131_000)];
    feed(&mut slow, t0, &readings(&slow_delays));
    let fast_delays = [(0, 9_000), (10, 30_000), (20, 8_000), (30, 12_000)];
    feed(&mut fast, t0, &readings(&fast_delays));
    let slow_base = slow.base_raw_us().expect("sampled");
    let fast_base = fast.base_raw_us().expect("sampled");
    assert_eq!(slow_base, OFFSET.wrapping_add(120_000));
    assert_eq!(slow_base.wrapping_sub(fast_base) as i32, 112_000);
}

/// The jitter is the spread of the delays of packets sent into an idle path; the
/// others, held back by packets ahead of them, do not count.
#[test]
fn jitter_is_the_spread_of_delays_sent_into_an_idle_path() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    // Loaded: every packet near the top of the jitter, whatever the base.
    feed(&mut owd, t0, &[(0, 30_000), (1, 49_000), (2, 50_000)]);
    assert_eq!(owd.jitter(), None);
    // Three quiet samples are too few.
    for (at, delay) in [(100, 40_000), (200, 45_000), (300, 36_000)] {
        owd.on_quiet_sample(t0 + ms(at), delay);
    }
    assert_eq!(owd.jitter(), None);
    // The second largest (45) less the smallest (36), 9 ms, is 2/5 of the spread four
    // samples span on average.
    owd.on_quiet_sample(t0 + ms(400), 52_000);
    assert_eq!(owd.jitter(), Some(us(22_500)));
    // More loaded samples change nothing.
    feed(&mut owd, t0, &[(500, 90_000), (501, 20_000)]);
    assert_eq!(owd.jitter(), Some(us(22_500)));
}

/// The last eight quiet samples count, and of those only the ones sent within ten
/// seconds of the newest; until four such come in, the last measurement stands.
#[test]
fn jitter_rests_on_the_last_eight_quiet_samples_within_ten_seconds() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    // A wide first sample, then eight within 3.5 ms of each other, which push it
    // out of the eight kept.
    owd.on_quiet_sample(t0, 80_000);
    for i in 0..8u32 {
        owd.on_quiet_sample(t0 + ms(100 * u64::from(i + 1)), 40_000 + 500 * i);
    }
    // 3 ms apart, 6/9 of the spread of eight.
    assert_eq!(owd.jitter(), Some(us(4_500)));
    // Quiet samples 20 s on: the old ones are out of the window, and three are too
    // few to measure again.
    for (at, delay) in [(20_000, 41_000), (20_100, 47_000), (20_200, 42_000)] {
        owd.on_quiet_sample(t0 + ms(at), delay);
    }
    assert_eq!(owd.jitter(), Some(us(4_500)));
    owd.on_quiet_sample(t0 + ms(20_300), 43_000);
    assert_eq!(owd.jitter(), Some(ms(5)));
}

/// One quiet delay far above the others is not the path's jitter.
#[test]
fn one_outlier_does_not_make_the_jitter() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    for (at, delay) in [
        (0, 40_000),
        (100, 41_000),
        (200, 95_000),
        (300, 42_000),
        (400, 43_000),
    ] {
        owd.on_quiet_sample(t0 + ms(at), delay);
    }
    // 43 less 40, 3/6 of the spread of five: the 95 ms delay does not count.
    assert_eq!(owd.jitter(), Some(ms(6)));
}

/// A packet sent into an idle path met no queue of ours: its delay replaces the
/// smoothed queue that built while the path was loaded, where a loaded sample is
/// averaged in.
#[test]
fn a_quiet_sample_replaces_the_smoothed_queue() {
    let t0 = Instant::now();
    let mut owd = OwdEstimator::new();
    owd.on_sample(t0, 40_000);
    for i in 1..=40 {
        owd.on_sample(t0 + ms(10 * i), 240_000);
    }
    let loaded = owd.queuing_delay().unwrap();
    assert!(loaded > ms(199), "{loaded:?}");
    owd.on_sample(t0 + ms(500), 42_000);
    assert!(owd.queuing_delay().unwrap() > ms(170), "averaged in");
    owd.on_quiet_sample(t0 + ms(900), 43_000);
    assert_eq!(owd.queuing_delay(), Some(ms(3)));
}
