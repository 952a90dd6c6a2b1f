use super::*;

const MAX: u32 = u32::MAX;
/// A full-sized datagram.
const FULL: usize = 1472;

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

fn ranges_of(ack: &AckSummary) -> Vec<(u32, u32)> {
    ack.ranges.iter().collect()
}

/// Each row: packet numbers received in order, what `on_received` returns for each,
/// the ranges of the acknowledgement taken afterwards (newest first).
#[test]
fn ranges_table() {
    type Case = (
        &'static str,
        &'static [u32],
        &'static [bool],
        &'static [(u32, u32)],
    );
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ("in order",          &[1, 2, 3],             &[true, true, true],          &[(1, 3)]),
        ("one gap",           &[1, 2, 4, 5],          &[true; 4],                   &[(4, 5), (1, 2)]),
        ("gap filled late",   &[1, 3, 2],             &[true; 3],                   &[(1, 3)]),
        ("joins newer only",  &[1, 4, 3],             &[true; 3],                   &[(3, 4), (1, 1)]),
        ("older than all",    &[5, 3],                &[true, true],                &[(5, 5), (3, 3)]),
        ("extends oldest",    &[5, 4],                &[true, true],                &[(4, 5)]),
        ("duplicates",        &[1, 1, 2, 2, 1],       &[true, false, true, false, false], &[(1, 2)]),
        ("wrap in order",     &[MAX - 1, MAX, 0, 1],  &[true; 4],                   &[(MAX - 1, 1)]),
        ("wrap with a gap",   &[MAX - 1, 1],          &[true, true],                &[(1, 1), (MAX - 1, MAX - 1)]),
        ("wrap reordered",    &[1, MAX, 0],           &[true; 3],                   &[(MAX, 1)]),
    ];
    let t0 = Instant::now();
    for (name, received, accepted, expected) in cases {
        let mut tracker = AckTracker::new(ms(25), FULL);
        for (index, &pn) in received.iter().enumerate() {
            let ok = tracker.on_received(t0, 0, pn, 0, FULL);
            assert_eq!(ok, accepted[index], "{name}: pn {pn}");
        }
        let ack = tracker.take_ack(t0).expect(name);
        assert_eq!(ranges_of(&ack), *expected, "{name}");
        assert_eq!(
            ack.ranges.largest(),
            expected.first().map(|r| r.1),
            "{name}"
        );
    }
}

#[test]
fn more_than_sixteen_ranges_keeps_the_newest() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    // 0, 2, 4, ..., 40: 21 single-packet ranges
    for pn in (0..=40).step_by(2) {
        assert!(tracker.on_received(t0, 0, pn, 0, FULL));
    }
    let ack = tracker.take_ack(t0).unwrap();
    let expected: Vec<(u32, u32)> = (10..=40).rev().step_by(2).map(|pn| (pn, pn)).collect();
    assert_eq!(expected.len(), MAX_ACK_RANGES);
    assert_eq!(ranges_of(&ack), expected);
    // below what fell out (up to 8): too old, reported as already recorded
    assert!(!tracker.on_received(t0, 0, 1, 0, FULL));
    assert!(!tracker.on_received(t0, 0, 8, 0, FULL));
    // 9 is above it and joins the oldest range kept
    assert!(tracker.on_received(t0, 0, 9, 0, FULL));
    let ack = tracker.take_ack(t0).unwrap();
    assert_eq!(ack.ranges.iter().last(), Some((9, 10)));
    // a full AckRanges refuses a seventeenth push
    let mut full = ack.ranges;
    assert_eq!(full.len(), MAX_ACK_RANGES);
    assert!(!full.push(100, 100));
}

#[test]
fn ranges_are_reported_again_until_pushed_out() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    tracker.on_received(t0, 0, 1, 0, FULL);
    tracker.on_received(t0, 0, 2, 0, FULL);
    assert_eq!(ranges_of(&tracker.take_ack(t0).unwrap()), [(1, 2)]);
    assert_eq!(tracker.take_ack(t0), None, "nothing new, nothing to send");
    tracker.on_received(t0, 0, 4, 0, FULL);
    assert_eq!(ranges_of(&tracker.take_ack(t0).unwrap()), [(4, 4), (1, 2)]);
}

#[test]
fn ack_due_by_count() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    assert!(!tracker.has_unacked());
    assert!(!tracker.ack_due(t0));
    tracker.on_received(t0, 0, 7, 0, FULL);
    assert!(tracker.has_unacked());
    assert!(!tracker.ack_due(t0));
    // a duplicate does not count
    tracker.on_received(t0, 0, 7, 0, FULL);
    assert!(!tracker.ack_due(t0));
    tracker.on_received(t0, 0, 8, 0, FULL);
    assert_eq!(ACK_ELICITING_THRESHOLD, 2);
    assert!(tracker.ack_due(t0));
    tracker.take_ack(t0).unwrap();
    assert!(!tracker.ack_due(t0));
    assert!(!tracker.has_unacked());
    assert_eq!(tracker.poll_timeout(), None);
}

/// Datagrams the size of the inner flow's own acknowledgements (about 100 bytes):
/// the acknowledgement waits for the delay timer or the eighth of them.
#[test]
fn small_datagrams_wait_for_the_delay_or_the_eighth() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(5), FULL);
    for pn in 1..SMALL_DATAGRAMS_THRESHOLD {
        tracker.on_received(t0, 0, pn, 0, 100);
        assert!(!tracker.ack_due(t0), "{pn} small datagrams");
    }
    assert!(tracker.ack_due(t0 + ms(5)));
    tracker.on_received(t0, 0, SMALL_DATAGRAMS_THRESHOLD, 0, 100);
    assert!(tracker.ack_due(t0));
}

/// Two data datagrams a little short of full size (a shorter inner MSS) still make
/// an acknowledgement due, as two full ones do.
#[test]
fn two_near_full_datagrams_are_due() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(5), FULL);
    tracker.on_received(t0, 0, 1, 0, FULL - 200);
    assert!(!tracker.ack_due(t0));
    tracker.on_received(t0, 0, 2, 0, FULL - 200);
    assert!(tracker.ack_due(t0));
    tracker.take_ack(t0).unwrap();
    // the byte count starts again after an acknowledgement
    tracker.on_received(t0, 0, 3, 0, FULL);
    assert!(!tracker.ack_due(t0));
}

#[test]
fn ack_due_by_time_at_the_exact_deadline() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    tracker.on_received(t0 + ms(10), 0, 1, 0, FULL);
    let deadline = t0 + ms(35);
    assert_eq!(tracker.poll_timeout(), Some(deadline));
    assert!(!tracker.ack_due(deadline - Duration::from_nanos(1)));
    assert!(tracker.ack_due(deadline));
    // the deadline counts from the first unacknowledged packet, not the latest
    tracker.on_received(t0 + ms(20), 0, 3, 0, FULL);
    assert_eq!(tracker.poll_timeout(), Some(deadline));
}

#[test]
fn ack_delay_and_raw_one_way_delay_of_the_largest() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    // local clock 1_000_500 µs, sender stamped 1_000_000 µs: raw 500
    tracker.on_received(t0 + ms(10), 1_000_500, 5, 1_000_000, FULL);
    // an older packet arriving later changes neither the delay nor the raw value
    tracker.on_received(t0 + ms(12), 1_002_600, 4, 1_000_000, FULL);
    let ack = tracker.take_ack(t0 + ms(35)).unwrap();
    assert_eq!(ack.ack_delay, ms(25));
    assert_eq!(ack.largest_owd_raw_us, 500);

    // both clocks wrap independently: 100 - (MAX - 99) = 200 (mod 2^32)
    tracker.on_received(t0 + ms(40), 100, 6, MAX - 99, FULL);
    let ack = tracker.take_ack(t0 + ms(40)).unwrap();
    assert_eq!(ack.largest_owd_raw_us, 200);
    assert_eq!(ack.ack_delay, Duration::ZERO);
}

#[test]
fn a_gap_below_the_newest_packets_is_news_until_they_are_many() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    let receive = |tracker: &mut AckTracker, pn: u32| {
        tracker.on_received(t0, 0, pn, 0, FULL);
    };
    for pn in 0..10 {
        receive(&mut tracker, pn);
    }
    assert!(!tracker.reports_loss_news(), "no gap");
    receive(&mut tracker, 11);
    assert!(tracker.reports_loss_news(), "10 is missing");
    tracker.take_ack(t0);
    assert!(!tracker.reports_loss_news(), "nothing new to tell");
    for pn in 12..=11 + LOSS_NEWS_PACKETS as u32 {
        receive(&mut tracker, pn);
        let newest_past_gap = u64::from(pn - 11) + 1;
        assert_eq!(
            tracker.reports_loss_news(),
            newest_past_gap <= LOSS_NEWS_PACKETS,
            "{newest_past_gap} packets past the gap"
        );
    }
    receive(&mut tracker, 10);
    assert!(!tracker.reports_loss_news(), "the gap filled");
}

/// RFC 9000 section 13.2.1: a packet above a gap is acknowledged at once, even alone;
/// the next packets in order wait for the usual count again, and a late packet that
/// fills the gap opens none.
#[test]
fn a_packet_above_a_gap_is_acknowledged_at_once() {
    let t0 = Instant::now();
    let mut tracker = AckTracker::new(ms(25), FULL);
    tracker.on_received(t0, 0, 1, 0, FULL);
    tracker.on_received(t0, 0, 2, 0, FULL);
    tracker.take_ack(t0);
    tracker.on_received(t0, 0, 4, 0, FULL);
    assert!(tracker.ack_due(t0), "3 is missing");
    assert_eq!(ranges_of(&tracker.take_ack(t0).unwrap()), [(4, 4), (1, 2)]);
    tracker.on_received(t0, 0, 5, 0, FULL);
    assert!(!tracker.ack_due(t0), "in order after the gap");
    tracker.take_ack(t0);
    tracker.on_received(t0, 0, 3, 0, FULL);
    assert!(!tracker.ack_due(t0), "the gap filled late");
}
