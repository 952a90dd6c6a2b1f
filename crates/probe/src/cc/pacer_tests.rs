use std::time::{Duration, Instant};

use super::*;

const MDS: u64 = 1200;
/// 1.2 MB/s: one 1200-byte datagram per millisecond.
const RATE: Option<u64> = Some(1_200_000);
/// An eighth of it is 2.5 datagrams: a bucket, and a burst, of 2.
const WINDOW: u64 = 24_000;
const SRTT: Duration = Duration::from_millis(20);

fn us(value: u64) -> Duration {
    Duration::from_micros(value)
}

/// A pacer at [`RATE`] and [`WINDOW`] that sent its 2-datagram bucket empty at `t0`.
fn emptied(t0: Instant) -> Pacer {
    let mut pacer = Pacer::new(MDS);
    assert_eq!(pacer.delay(t0, MDS, WINDOW, SRTT, RATE), None);
    pacer.on_sent(t0, MDS);
    pacer.on_sent(t0, MDS);
    pacer
}

/// [`emptied`], and the instant it gives for the next datagram.
fn emptied_until_due(t0: Instant) -> (Pacer, Instant) {
    let mut pacer = emptied(t0);
    let due = pacer
        .delay(t0, MDS, WINDOW, SRTT, RATE)
        .expect("the bucket is empty");
    (pacer, due)
}

/// How many datagrams the pacer lets go at once at `now`, at [`RATE`] and [`WINDOW`].
fn burst_at(pacer: &mut Pacer, now: Instant) -> u32 {
    let mut sent = 0;
    while pacer.delay(now, MDS, WINDOW, SRTT, RATE).is_none() {
        pacer.on_sent(now, MDS);
        sent += 1;
        assert!(sent <= 10, "the bucket never empties");
    }
    sent
}

#[test]
fn capacity_is_an_eighth_of_the_window_within_two_and_ten_datagrams() {
    let pacer = Pacer::new(MDS);
    // (window, burst in bytes)
    #[rustfmt::skip]
    let cases = [
        (0,           2 * MDS),
        (2_400,       2 * MDS),
        (24_000,      2 * MDS),  // 24000 / 8 = 2.5 datagrams
        (38_400,      4 * MDS),  // 4 datagrams
        (96_000,     10 * MDS),
        (10_000_000, 10 * MDS),
    ];
    for (window, burst) in cases {
        assert_eq!(pacer.capacity(window, 1_250_000), burst, "window {window}");
    }
}

#[test]
fn a_fast_path_may_burst_one_millisecond_up_to_64_kib() {
    let pacer = Pacer::new(MDS);
    // (rate in bytes/s, burst in bytes) for a large window (10 datagrams by the window).
    #[rustfmt::skip]
    let cases = [
        (1_250_000,      10 * MDS),  // 10 Mbit/s: 1 ms is 1250 bytes
        (25_000_000,     25_000),    // 200 Mbit/s: 1 ms
        (125_000_000,    65_536),    // 1 Gbit/s: 125 kB in 1 ms, capped
    ];
    for (rate, burst) in cases {
        assert_eq!(pacer.capacity(10_000_000, rate), burst, "rate {rate}");
    }
    // A small window stays spread out below 2.4 MB/s.
    assert_eq!(pacer.capacity(24_000, 2_000_000), 2 * MDS);
}

#[test]
fn rate_comes_from_the_controller_or_the_window() {
    // (window, srtt, controller's rate, pacing rate)
    #[rustfmt::skip]
    let cases = [
        (120_000, Duration::from_millis(100), None,            Some(1_500_000)), // 1.25 × 120000 / 0.1 s
        (12_000,  Duration::from_millis(50),  None,            Some(300_000)),
        (120_000, Duration::from_millis(100), Some(1_000_000), Some(1_000_000)),
        (120_000, Duration::ZERO,             None,            None),
        (120_000, Duration::ZERO,             Some(500_000),   Some(500_000)),
        (120_000, Duration::from_millis(100), Some(0),         Some(1_500_000)), // 0 = unknown
        (0,       Duration::from_millis(100), None,            None),
    ];
    for (window, srtt, controller_rate, expected) in cases {
        assert_eq!(
            Pacer::rate(window, srtt, controller_rate),
            expected,
            "window {window}, srtt {srtt:?}, rate {controller_rate:?}"
        );
    }
}

#[test]
fn bursts_up_to_capacity_then_spaces_at_the_rate() {
    let t0 = Instant::now();
    let mut pacer = Pacer::new(MDS);
    let (rate, window, srtt) = (RATE, WINDOW, SRTT);
    let mut now = t0;
    let mut sent_at = Vec::new();
    for _ in 0..6 {
        if let Some(at) = pacer.delay(now, MDS, window, srtt, rate) {
            assert!(at > now);
            now = at;
            assert_eq!(pacer.delay(now, MDS, window, srtt, rate), None);
        }
        pacer.on_sent(now, MDS);
        sent_at.push(now - t0);
    }
    assert_eq!(
        sent_at,
        [us(0), us(0), us(1000), us(2000), us(3000), us(4000)]
    );
}

#[test]
fn the_earliest_send_time_is_exact() {
    let t0 = Instant::now();
    let mut pacer = Pacer::new(MDS);
    // Window-derived rate: 1.25 × 120000 / 100 ms = 1.5 MB/s, 800 µs per datagram;
    // burst 10 datagrams.
    let window = 120_000;
    let srtt = Duration::from_millis(100);
    for _ in 0..10 {
        assert_eq!(pacer.delay(t0, MDS, window, srtt, None), None);
        pacer.on_sent(t0, MDS);
    }
    assert_eq!(pacer.delay(t0, MDS, window, srtt, None), Some(t0 + us(800)));
    // 300 µs later 450 bytes are back: 750 more bytes take 500 µs.
    assert_eq!(
        pacer.delay(t0 + us(300), MDS, window, srtt, None),
        Some(t0 + us(800))
    );
    // A 600-byte datagram needs 150 more bytes: 100 µs.
    assert_eq!(
        pacer.delay(t0 + us(300), 600, window, srtt, None),
        Some(t0 + us(400))
    );
}

#[test]
fn tokens_refill_in_proportion_to_time_up_to_capacity() {
    let t0 = Instant::now();
    // (idle time after emptying the bucket, datagrams that may go at once)
    for (idle, burst) in [
        (us(500), 0),
        (us(1000), 1),
        (us(1999), 1),
        (us(2000), 2),
        (us(60_000), 2),
    ] {
        let mut pacer = emptied(t0);
        let sent = burst_at(&mut pacer, t0 + idle);
        assert_eq!(sent, burst, "idle {idle:?}");
    }
}

#[test]
fn many_tiny_refills_add_up() {
    // 125000 bytes/s (1 Mbit/s): 0.125 bytes per microsecond, so each refill is a
    // fraction of a byte. 9600 µs of them still pay for one 1200-byte datagram.
    let t0 = Instant::now();
    let mut pacer = Pacer::new(MDS);
    let rate = Some(125_000);
    let srtt = Duration::from_millis(100);
    pacer.delay(t0, MDS, 0, srtt, rate);
    pacer.on_sent(t0, MDS);
    pacer.on_sent(t0, MDS);
    let mut now = t0;
    for _ in 0..9_599 {
        now += us(1);
        assert!(pacer.delay(now, MDS, 0, srtt, rate).is_some());
    }
    assert_eq!(pacer.delay(now + us(1), MDS, 0, srtt, rate), None);
}

#[test]
fn zero_srtt_without_a_rate_never_delays() {
    let t0 = Instant::now();
    let mut pacer = Pacer::new(MDS);
    for index in 0..100 {
        let now = t0 + us(index);
        assert_eq!(pacer.delay(now, MDS, 120_000, Duration::ZERO, None), None);
        pacer.on_sent(now, MDS);
    }
    // Once an RTT is known, pacing starts with a full burst.
    let srtt = Duration::from_millis(100);
    for _ in 0..10 {
        assert_eq!(pacer.delay(t0 + us(100), MDS, 120_000, srtt, None), None);
        pacer.on_sent(t0 + us(100), MDS);
    }
    assert!(pacer
        .delay(t0 + us(100), MDS, 120_000, srtt, None)
        .is_some());
}

#[test]
fn a_datagram_larger_than_the_bucket_waits_for_a_full_bucket() {
    let t0 = Instant::now();
    let mut pacer = Pacer::new(MDS);
    let rate = RATE;
    // Burst 2 × 1200 = 2400 bytes; a 3000-byte datagram goes when the bucket is full.
    assert_eq!(pacer.delay(t0, 3_000, 0, Duration::ZERO, rate), None);
    pacer.on_sent(t0, 3_000);
    assert_eq!(
        pacer.delay(t0, 3_000, 0, Duration::ZERO, rate),
        Some(t0 + us(2000))
    );
}

#[test]
fn a_late_wake_sends_what_on_time_wakes_would_have_sent_up_to_two_milliseconds() {
    let t0 = Instant::now();
    // (how late the wake comes after the instant the pacer gave, datagrams it may send)
    for (late, burst) in [
        (us(0), 1),
        (us(999), 1),
        (us(1000), 2),
        (us(2000), 3),   // 3 ms of tokens: the due one and two more
        (us(50_000), 4), // the bucket's 2 plus at most 2 ms of lateness
    ] {
        let (mut pacer, due) = emptied_until_due(t0);
        assert_eq!(due, t0 + us(1000));
        let sent = burst_at(&mut pacer, due + late);
        assert_eq!(sent, burst, "late by {late:?}");
    }
}

#[test]
fn the_tokens_of_a_late_wake_are_spent_then_or_lost() {
    let t0 = Instant::now();
    let (mut pacer, due) = emptied_until_due(t0);
    // 2 ms late: 3600 bytes of tokens, three datagrams, but none is sent then.
    let late = due + us(2000);
    assert_eq!(pacer.delay(late, MDS, WINDOW, SRTT, RATE), None);
    // A microsecond later the bucket holds its capacity, 2 datagrams, not the 3.
    assert_eq!(burst_at(&mut pacer, late + us(1)), 2);
}
