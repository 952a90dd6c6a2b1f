//! Reorder buffer tests on a simulated clock. Every scenario runs at several
//! starting sequence numbers so that it also crosses the u32 wrap.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;

const MAX_HOLD: Duration = Duration::from_millis(50);
const NANOSECOND: Duration = Duration::from_nanos(1);

/// 0: no wrap. The others wrap after 1, 4 and 16 packets.
const BASES: [u32; 4] = [0, u32::MAX, u32::MAX - 3, 0xFFFF_FFF0];

/// A buffer whose payload is the packet's own sequence number, addressed by
/// offsets from `base` and milliseconds from `t0`.
struct Harness {
    t0: Instant,
    base: u32,
    buffer: ReorderBuffer<SeqNo>,
}

impl Harness {
    fn new(base: u32, capacity: usize) -> Self {
        let config = ReorderConfig {
            max_hold: MAX_HOLD,
            capacity,
        };
        Harness {
            t0: Instant::now(),
            base,
            buffer: ReorderBuffer::new(config, SeqNo(base)),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn seq(&self, offset: u32) -> SeqNo {
        SeqNo(self.base).add(offset)
    }

    /// Inserts the packet `offset` (may be "negative" via wrapping) at `ms`.
    fn insert(&mut self, ms: u64, offset: u32) -> Result<(), RejectReason> {
        let (now, seq) = (self.at(ms), self.seq(offset));
        self.buffer.insert(now, seq, seq).map_err(|rejected| {
            assert_eq!(rejected.item, seq, "a rejected packet is handed back");
            rejected.reason
        })
    }

    fn insert_ok(&mut self, ms: u64, offsets: &[u32]) {
        for &offset in offsets {
            assert_eq!(self.insert(ms, offset), Ok(()), "insert offset {offset}");
        }
    }

    /// Drains `poll_release` at `now`, as offsets from `base`.
    fn release_at(&mut self, now: Instant) -> Vec<u32> {
        std::iter::from_fn(|| self.buffer.poll_release(now))
            .map(|seq| seq.0.wrapping_sub(self.base))
            .collect()
    }

    fn release(&mut self, ms: u64) -> Vec<u32> {
        self.release_at(self.at(ms))
    }

    fn stats(&self) -> ReorderStats {
        self.buffer.stats()
    }
}

#[test]
fn the_window_grows_only_as_far_ahead_as_packets_arrive() {
    for base in BASES {
        let mut h = Harness::new(base, 4096);
        // In order: the first 64 slots are all a session without reordering uses.
        h.insert_ok(0, &[0, 1, 2]);
        assert_eq!(h.release(0), [0, 1, 2]);
        assert_eq!(h.buffer.window.len(), 64);
        // 100 and 1000 ahead: the window doubles until it reaches them, and the held
        // packets move to their slots in the larger one.
        h.insert_ok(1, &[103, 40]);
        assert_eq!(h.buffer.window.len(), 128);
        h.insert_ok(2, &[1003]);
        assert_eq!(h.buffer.window.len(), 1024);
        assert_eq!(h.insert(3, 40), Err(RejectReason::Duplicate));
        // Filling every gap releases everything in order.
        let missing: Vec<u32> = (3..1004).filter(|o| ![40, 103, 1003].contains(o)).collect();
        h.insert_ok(4, &missing);
        assert_eq!(h.release(4), (3..1004).collect::<Vec<u32>>());
        assert!(h.buffer.is_empty());
    }
}

#[test]
fn in_order_packets_are_released_immediately() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        for offset in 0..20 {
            h.insert_ok(u64::from(offset), &[offset]);
            assert_eq!(h.release(u64::from(offset)), [offset], "base {base:#x}");
            assert_eq!(h.buffer.poll_timeout(), None);
        }
        assert!(h.buffer.is_empty());
        assert_eq!(h.buffer.next_expected(), h.seq(20));
        let stats = h.stats();
        assert_eq!(stats.hold_histogram.count(), 20);
        assert_eq!(
            ReorderStats {
                hold_histogram: HoldHistogram::default(),
                ..stats
            },
            ReorderStats {
                released_in_order: 20,
                ..ReorderStats::default()
            }
        );
    }
}

#[test]
fn gap_filled_before_the_deadline_releases_everything_in_order() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[0]);
        assert_eq!(h.release(0), [0]);
        h.insert_ok(1, &[2]);
        h.insert_ok(2, &[3]);
        assert_eq!(h.release(2), Vec::<u32>::new(), "held behind the gap at 1");
        assert_eq!(h.buffer.len(), 2);
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(1) + MAX_HOLD));
        h.insert_ok(10, &[1]);
        assert_eq!(h.release(10), [1, 2, 3]);
        assert_eq!(h.buffer.poll_timeout(), None);
        let stats = h.stats();
        assert_eq!(stats.released_in_order, 2);
        assert_eq!(stats.released_after_wait, 2);
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped), (0, 0));
        assert_eq!(stats.max_hold, Duration::from_millis(9));
        assert_eq!(stats.total_hold, Duration::from_millis(9 + 8));
    }
}

#[test]
fn gap_is_skipped_exactly_at_the_deadline() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[1]);
        h.insert_ok(5, &[2]);
        h.insert_ok(7, &[5]);
        let deadline = h.buffer.poll_timeout().expect("a gap is held");
        assert_eq!(
            deadline,
            h.at(0) + MAX_HOLD,
            "measured from the oldest held packet"
        );
        assert_eq!(h.release_at(deadline - NANOSECOND), Vec::<u32>::new());
        assert_eq!(h.release_at(deadline), [1, 2]);

        // The next gap (3, 4) is timed from packet 5's arrival.
        let deadline = h.buffer.poll_timeout().expect("second gap is held");
        assert_eq!(deadline, h.at(7) + MAX_HOLD);
        assert_eq!(h.release_at(deadline - NANOSECOND), Vec::<u32>::new());
        assert_eq!(h.release_at(deadline), [5]);
        assert_eq!(h.buffer.poll_timeout(), None);
        assert_eq!(h.buffer.next_expected(), h.seq(6));

        let stats = h.stats();
        assert_eq!(stats.released_after_wait, 3);
        assert_eq!(stats.gaps_skipped, 2);
        assert_eq!(stats.seqs_skipped, 3);
        assert_eq!(stats.max_hold, MAX_HOLD);
        assert_eq!(
            stats.total_hold,
            MAX_HOLD + Duration::from_millis(45) + MAX_HOLD
        );
    }
}

#[test]
fn duplicates_of_buffered_and_released_packets_are_rejected() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[2]);
        assert_eq!(
            h.insert(1, 2),
            Err(RejectReason::Duplicate),
            "still buffered"
        );
        h.insert_ok(2, &[0]);
        assert_eq!(h.release(2), [0]);
        assert_eq!(
            h.insert(3, 0),
            Err(RejectReason::Duplicate),
            "already released"
        );
        h.insert_ok(4, &[1]);
        assert_eq!(h.release(4), [1, 2]);
        assert_eq!(
            h.insert(5, 2),
            Err(RejectReason::Duplicate),
            "released after a wait"
        );
        assert_eq!(h.release(100), Vec::<u32>::new());
        let stats = h.stats();
        assert_eq!(stats.duplicates, 3);
        assert_eq!(stats.released(), 3);
    }
}

#[test]
fn late_packet_after_a_skip_is_released_once() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[1]);
        assert_eq!(h.release(50), [1], "0 skipped at the deadline");
        h.insert_ok(60, &[0]);
        assert_eq!(
            h.insert(61, 0),
            Err(RejectReason::Duplicate),
            "copy of a queued late packet"
        );
        assert_eq!(h.buffer.len(), 1);
        assert_eq!(h.release(62), [0]);
        assert_eq!(
            h.insert(63, 0),
            Err(RejectReason::Duplicate),
            "copy of a released late packet"
        );
        // In-order traffic continues after the late one.
        h.insert_ok(64, &[2]);
        assert_eq!(h.release(64), [2]);

        let stats = h.stats();
        assert_eq!(stats.released_late, 1);
        assert_eq!(stats.released_after_wait, 1);
        assert_eq!(stats.released_in_order, 1);
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped), (1, 1));
        assert_eq!(stats.duplicates, 2);
        assert_eq!(stats.max_hold, MAX_HOLD);
    }
}

#[test]
fn packets_behind_the_remembered_horizon_are_too_old() {
    for base in BASES {
        let mut h = Harness::new(base, 8);
        assert_eq!(
            h.insert(0, u32::MAX),
            Err(RejectReason::TooOld),
            "before the first seq"
        );
        for offset in 0..20 {
            h.insert_ok(0, &[offset]);
            assert_eq!(h.release(0), [offset]);
        }
        // 8 sequence numbers behind 20 are remembered: 12..20.
        assert_eq!(h.insert(1, 12), Err(RejectReason::Duplicate));
        assert_eq!(h.insert(1, 11), Err(RejectReason::TooOld));
        assert_eq!(h.insert(1, 0), Err(RejectReason::TooOld));
        let stats = h.stats();
        assert_eq!((stats.too_old, stats.duplicates), (3, 1));
    }
}

#[test]
fn skipped_packet_arriving_beyond_the_horizon_is_too_old() {
    for base in BASES {
        let mut h = Harness::new(base, 4);
        h.insert_ok(0, &[1]);
        assert_eq!(h.release(50), [1]);
        for offset in 2..6 {
            h.insert_ok(51, &[offset]);
        }
        assert_eq!(h.release(51), [2, 3, 4, 5]);
        // Remembered: 2..6; the skipped 0 and the delivered 1 are gone.
        assert_eq!(h.insert(52, 0), Err(RejectReason::TooOld));
        assert_eq!(h.insert(52, 1), Err(RejectReason::TooOld));
        assert_eq!(h.stats().too_old, 2);
    }
}

#[test]
fn packet_far_ahead_forces_the_window_forward() {
    for base in BASES {
        let mut h = Harness::new(base, 8);
        h.insert_ok(0, &[1, 2, 4]);
        h.insert_ok(1, &[9]); // 9 >= 0 + 8: window becomes 2..10
        assert_eq!(h.buffer.next_expected(), h.seq(2));
        assert_eq!(
            h.release(1),
            [1, 2],
            "0 skipped, 1 forced out, 2 now in order"
        );
        let stats = h.stats();
        assert_eq!(stats.forced_advances, 1);
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped), (1, 1));

        // The rest keep normal hold rules: 4 waits for 3 from its own arrival.
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(0) + MAX_HOLD));
        assert_eq!(h.release(50), [4]);
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(1) + MAX_HOLD));
        assert_eq!(h.release(51), [9]);
        let stats = h.stats();
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped), (3, 1 + 1 + 4));
        assert_eq!(
            stats.released_after_wait, 4,
            "1, 2, 4 and 9 all arrived behind a gap"
        );
    }
}

#[test]
fn jump_of_many_windows_skips_everything_and_keeps_the_horizon() {
    for base in BASES {
        let mut h = Harness::new(base, 8);
        h.insert_ok(0, &[0]);
        assert_eq!(h.release(0), [0]);
        h.insert_ok(1, &[3, 5]);
        h.insert_ok(2, &[100]); // window becomes 93..101
        assert_eq!(h.buffer.next_expected(), h.seq(93));
        assert_eq!(h.release(2), [3, 5]);
        let stats = h.stats();
        assert_eq!(stats.forced_advances, 1);
        // Gaps: 1..3, 4, 6..93. Skipped: 2 + 1 + 87.
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped), (3, 90));

        // Horizon is 85..93, all skipped: late packets are still welcome.
        h.insert_ok(3, &[92, 85]);
        assert_eq!(h.insert(3, 84), Err(RejectReason::TooOld));
        assert_eq!(h.release(3), [92, 85]);
        assert_eq!(h.stats().released_late, 2);
        h.insert_ok(4, &[93]);
        assert_eq!(h.release(4), [93]);
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(2) + MAX_HOLD));
        assert_eq!(h.release(52), [100]);
    }
}

#[test]
fn capacity_is_rounded_up_to_a_power_of_two() {
    let capacity = |requested| {
        let config = ReorderConfig {
            max_hold: MAX_HOLD,
            capacity: requested,
        };
        ReorderBuffer::<()>::new(config, SeqNo(0)).capacity()
    };
    assert_eq!(capacity(0), 1);
    assert_eq!(capacity(1), 1);
    assert_eq!(capacity(5), 8);
    assert_eq!(capacity(1024), 1024);
    assert_eq!(capacity(usize::MAX), MAX_REORDER_CAPACITY);
}

#[test]
fn capacity_one_never_waits_and_remembers_one_seq() {
    for base in BASES {
        let mut h = Harness::new(base, 1);
        h.insert_ok(0, &[0]);
        assert_eq!(h.release(0), [0]);
        h.insert_ok(1, &[2]);
        assert_eq!(
            h.buffer.next_expected(),
            h.seq(2),
            "1 skipped by the forced advance"
        );
        h.insert_ok(1, &[1]);
        assert_eq!(
            h.release(1),
            [1, 2],
            "the late packet is queued ahead of the window"
        );
        // One sequence number of history: 1 is now beyond it.
        assert_eq!(h.insert(2, 1), Err(RejectReason::TooOld));
        let stats = h.stats();
        assert_eq!(stats.forced_advances, 1);
        assert_eq!(stats.released_late, 1);
        assert_eq!(stats.max_hold, Duration::ZERO);
    }
}

#[test]
fn undrained_buffer_refuses_instead_of_growing() {
    for base in BASES {
        let mut h = Harness::new(base, 2);
        // Never polled: every insert from 2 on forces one packet into the
        // release queue, whose bound is 2 * capacity.
        h.insert_ok(0, &[0, 1, 2, 3, 4]);
        assert_eq!(h.insert(0, 5), Err(RejectReason::Backlogged));
        assert_eq!(h.stats().backlogged, 1);
        assert_eq!(h.release(0), [0, 1, 2, 3, 4]);
        h.insert_ok(0, &[5]);
        assert_eq!(h.release(0), [5]);
    }
}

#[test]
fn raw_sequence_numbers_cross_the_wrap_in_order() {
    let t0 = Instant::now();
    let config = ReorderConfig {
        max_hold: MAX_HOLD,
        capacity: 8,
    };
    let mut buffer = ReorderBuffer::new(config, SeqNo(0xFFFF_FFFE));
    for raw in [1u32, 0xFFFF_FFFF, 0, 0xFFFF_FFFE] {
        buffer.insert(t0, SeqNo(raw), raw).unwrap();
    }
    let released: Vec<u32> = std::iter::from_fn(|| buffer.poll_release(t0)).collect();
    assert_eq!(released, [0xFFFF_FFFE, 0xFFFF_FFFF, 0, 1]);
    assert_eq!(buffer.next_expected(), SeqNo(2));
}

/// One arrival of the property test: which packet and when.
#[derive(Clone, Debug)]
struct Arrival {
    offset: u32,
    at_ms: u64,
}

fn arrivals(window: u32) -> impl Strategy<Value = Vec<Arrival>> {
    // Each packet of the window arrives 0, 1 or 2 times, at arbitrary times.
    prop::collection::vec(prop::collection::vec(0..300u64, 0..=2), window as usize).prop_map(
        |times_per_packet| {
            let mut arrivals: Vec<Arrival> = times_per_packet
                .into_iter()
                .enumerate()
                .flat_map(|(offset, times)| {
                    times.into_iter().map(move |at_ms| Arrival {
                        offset: offset as u32,
                        at_ms,
                    })
                })
                .collect();
            arrivals.sort_by_key(|arrival| arrival.at_ms);
            arrivals
        },
    )
}

fn scenario() -> impl Strategy<Value = (u32, usize, u64, Vec<Arrival>)> {
    let base = prop_oneof![Just(0u32), Just(0xFFFF_FFF0), any::<u32>()];
    let capacity = prop_oneof![Just(1usize), Just(4), Just(16), Just(64)];
    (base, capacity, 0..100u64, 1..48u32).prop_flat_map(|(base, capacity, max_hold_ms, window)| {
        (
            Just(base),
            Just(capacity),
            Just(max_hold_ms),
            arrivals(window),
        )
    })
}

/// What happened to one packet during a property-test run.
#[derive(Default)]
struct Fate {
    first_accepted_at: Option<Instant>,
    releases: u32,
    released_late: bool,
}

/// Drives a buffer like the daemon does and records every packet's fate.
struct Run {
    base: u32,
    buffer: ReorderBuffer<SeqNo>,
    fates: HashMap<u32, Fate>,
    last_in_order: Option<u32>,
    duplicates: u64,
    too_old: u64,
}

impl Run {
    /// Calls `poll_release` at `now` until `None`, checking order.
    fn drain(&mut self, now: Instant) -> Result<usize, TestCaseError> {
        let mut count = 0;
        loop {
            let late_before = self.buffer.stats().released_late;
            let Some(seq) = self.buffer.poll_release(now) else {
                return Ok(count);
            };
            count += 1;
            let offset = seq.0.wrapping_sub(self.base);
            let fate = self.fates.entry(offset).or_default();
            fate.releases += 1;
            prop_assert_eq!(fate.releases, 1, "offset {} released twice", offset);
            fate.released_late = self.buffer.stats().released_late > late_before;
            if !fate.released_late {
                if let Some(previous) = self.last_in_order {
                    prop_assert!(previous < offset, "{} released after {}", offset, previous);
                }
                self.last_in_order = Some(offset);
            }
        }
    }

    /// Fires every gap deadline up to `until`, as the daemon's timer would.
    fn fire_timers(&mut self, until: Instant) -> Result<(), TestCaseError> {
        while let Some(deadline) = self.buffer.poll_timeout() {
            if deadline > until {
                break;
            }
            prop_assert!(self.drain(deadline)? > 0, "a due deadline releases");
        }
        Ok(())
    }

    fn arrive(&mut self, now: Instant, offset: u32) -> Result<(), TestCaseError> {
        self.fire_timers(now)?;
        let seq = SeqNo(self.base).add(offset);
        match self.buffer.insert(now, seq, seq) {
            Ok(()) => {
                let fate = self.fates.entry(offset).or_default();
                prop_assert!(fate.first_accepted_at.is_none(), "accepted twice");
                fate.first_accepted_at = Some(now);
            }
            Err(Rejected { item, reason }) => {
                prop_assert_eq!(item, seq);
                match reason {
                    RejectReason::Duplicate => {
                        self.duplicates += 1;
                        let accepted = self
                            .fates
                            .get(&offset)
                            .is_some_and(|fate| fate.first_accepted_at.is_some());
                        prop_assert!(accepted, "duplicate of a packet never accepted");
                    }
                    RejectReason::TooOld => self.too_old += 1,
                    RejectReason::Backlogged => {
                        prop_assert!(false, "backlogged although drained after each insert")
                    }
                }
            }
        }
        self.drain(now)?;
        Ok(())
    }
}

fn check_scenario(
    base: u32,
    capacity: usize,
    max_hold: Duration,
    arrivals: &[Arrival],
) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let config = ReorderConfig { max_hold, capacity };
    let mut run = Run {
        base,
        buffer: ReorderBuffer::new(config, SeqNo(base)),
        fates: HashMap::new(),
        last_in_order: None,
        duplicates: 0,
        too_old: 0,
    };
    for arrival in arrivals {
        run.arrive(t0 + Duration::from_millis(arrival.at_ms), arrival.offset)?;
    }
    run.fire_timers(t0 + Duration::from_secs(3600))?;
    prop_assert!(run.buffer.is_empty());

    // Nothing accepted is lost, nothing unaccepted appears.
    for (offset, fate) in &run.fates {
        let expected = u32::from(fate.first_accepted_at.is_some());
        prop_assert_eq!(fate.releases, expected, "offset {}", offset);
    }
    let stats = run.buffer.stats();
    let accepted: Vec<(u32, Instant)> = run
        .fates
        .iter()
        .filter_map(|(&offset, fate)| fate.first_accepted_at.map(|at| (offset, at)))
        .collect();
    prop_assert_eq!(stats.released() as usize, accepted.len());
    let late = run.fates.values().filter(|fate| fate.released_late).count();
    prop_assert_eq!(stats.released_late as usize, late);
    prop_assert_eq!(stats.duplicates, run.duplicates);
    prop_assert_eq!(stats.too_old, run.too_old);
    prop_assert!(
        stats.max_hold <= max_hold,
        "held {:?} > {:?}",
        stats.max_hold,
        max_hold
    );

    let window = arrivals.iter().map(|a| a.offset + 1).max().unwrap_or(0);
    if run.buffer.capacity() >= window as usize {
        // Everything fits: every arrival is accepted once or recognised as a copy.
        prop_assert_eq!(stats.forced_advances, 0);
        prop_assert_eq!(run.too_old, 0);
        let unique: HashSet<u32> = arrivals.iter().map(|a| a.offset).collect();
        prop_assert_eq!(accepted.len(), unique.len());
        prop_assert_eq!(run.duplicates as usize, arrivals.len() - unique.len());
        // Only timeouts skip: a packet released late arrived after some later
        // packet had already waited `max_hold` for it. So any packet that
        // arrived before its gap's deadline was released in order.
        for (offset, fate) in &run.fates {
            if !fate.released_late {
                continue;
            }
            let arrived = fate.first_accepted_at.expect("released means accepted");
            let deadline_passed = accepted
                .iter()
                .any(|&(other, at)| other > *offset && at + max_hold <= arrived);
            prop_assert!(
                deadline_passed,
                "offset {} skipped before its deadline",
                offset
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn releases_each_accepted_packet_once_and_in_order(
        (base, capacity, max_hold_ms, arrivals) in scenario()
    ) {
        check_scenario(base, capacity, Duration::from_millis(max_hold_ms), &arrivals)?;
    }
}

#[test]
fn a_given_up_gap_is_skipped_without_waiting() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[0, 3, 4]);
        assert_eq!(h.release(0), [0]);
        // The sender gave up on 1 and 2 (lost, no path to re-send them on).
        h.buffer.give_up(h.seq(1));
        assert_eq!(h.release(1), Vec::<u32>::new(), "2 is still awaited");
        h.buffer.give_up(h.seq(2));
        assert_eq!(h.release(1), [3, 4], "no wait for the hold");
        let stats = h.stats();
        assert_eq!(
            (
                stats.gaps_skipped,
                stats.seqs_skipped,
                stats.seqs_skipped_early
            ),
            (2, 2, 2),
            "two give-ups, two gaps"
        );
        // A given-up number that turns up after all is late, not a duplicate.
        h.insert_ok(2, &[2]);
        assert_eq!(h.release(2), [2]);
        assert_eq!(h.stats().released_late, 1);
    }
}

#[test]
fn give_up_is_ignored_outside_the_window_and_for_buffered_packets() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[0]);
        assert_eq!(h.release(0), [0]);
        h.buffer.give_up(h.seq(0)); // already released
        h.buffer.give_up(h.seq(40)); // beyond the window
        h.insert_ok(1, &[2]);
        h.buffer.give_up(h.seq(2)); // buffered: delivered as usual
        assert_eq!(h.release(1), Vec::<u32>::new(), "1 is awaited");
        h.insert_ok(2, &[1]);
        assert_eq!(h.release(2), [1, 2]);
        // 5 given up while 3 is still awaited: 3 waits, 5 does not.
        h.buffer.give_up(h.seq(5));
        h.insert_ok(3, &[4, 6]);
        assert_eq!(h.release(3), Vec::<u32>::new(), "3 is awaited");
        h.insert_ok(4, &[3]);
        assert_eq!(h.release(4), [3, 4, 6]);
        assert_eq!(h.stats().seqs_skipped_early, 1);
        // 21 reuses the slot of 5 once the window moved on: it is awaited.
        let later: Vec<u32> = (7..=20).chain([22]).collect();
        h.insert_ok(5, &later);
        assert_eq!(h.release(5), (7..=20).collect::<Vec<u32>>());
        assert_eq!(h.release(6), Vec::<u32>::new(), "21 is awaited");
        assert_eq!(h.stats().seqs_skipped_early, 1);
    }
}

#[test]
fn hold_can_change_while_packets_wait() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[1]);
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(0) + MAX_HOLD));
        h.buffer.set_max_hold(Duration::from_millis(10));
        assert_eq!(h.buffer.max_hold(), Duration::from_millis(10));
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(10)));
        assert_eq!(h.release(9), Vec::<u32>::new());
        assert_eq!(h.release(10), [1]);
        let stats = h.stats();
        assert_eq!(
            stats.hold_histogram.quantile_bound(1.0),
            Some(Duration::from_millis(10))
        );
    }
}

#[test]
fn needed_waits_are_reported_for_filled_and_late_gaps() {
    for base in BASES {
        let mut h = Harness::new(base, 16);
        h.insert_ok(0, &[0]);
        assert_eq!(h.release(0), [0]);
        assert_eq!(
            h.buffer.take_needed_wait(),
            None,
            "in order: nothing waited"
        );
        h.insert_ok(3, &[2]);
        h.insert_ok(10, &[1]);
        assert_eq!(h.buffer.take_needed_wait(), Some(Duration::from_millis(7)));
        assert_eq!(h.buffer.take_needed_wait(), None, "taken once");
        assert_eq!(h.release(10), [1, 2]);
        // A gap that times out, and its packet 20 ms after the skip.
        h.insert_ok(20, &[4]);
        assert_eq!(h.release(20 + 50), [4]);
        h.insert_ok(90, &[3]);
        assert_eq!(
            h.buffer.take_needed_wait(),
            Some(MAX_HOLD + Duration::from_millis(20))
        );
    }
}

mod model;

/// The bound under test.
const WORK_PER_CALL: u64 = REORDER_WORK_PER_CALL;

/// The bitmap words of a buffer of `capacity`.
fn words_of(buffer: &ReorderBuffer<SeqNo>) -> u64 {
    buffer.capacity().div_ceil(64) as u64
}

#[test]
fn give_up_range_marks_exactly_its_part_of_the_window() {
    // (first, as an offset from the release point; count; offsets of the
    // 16-number window marked). 2 is held: never marked.
    let cases: &[(u32, u32, &[u32])] = &[
        (0, 0, &[]),
        (0, 1, &[0]),
        (3, 5, &[3, 4, 5, 6, 7]),
        (10, 100, &[10, 11, 12, 13, 14, 15]),
        (0u32.wrapping_sub(5), 8, &[0, 1]),
        (0u32.wrapping_sub(5), 5, &[]),
        (16, 10, &[]),
        (1 << 31, (1 << 31) + 2, &[0, 1]),
        (
            1 << 31,
            u32::MAX,
            &[0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        ),
        // All but offset 4: from 5 all the way around to 3.
        (
            5,
            u32::MAX,
            &[0, 1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        ),
        (
            (1 << 31) - 1,
            u32::MAX,
            &[0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        ),
        // From just past the window around to offset 1, and to offset 0.
        (16, u32::MAX - 13, &[0, 1]),
        (16, u32::MAX - 14, &[0]),
    ];
    for base in BASES {
        for &(first, count, expected) in cases {
            let mut h = Harness::new(base, 16);
            h.insert_ok(0, &[2]);
            let words_before = h.buffer.work.steps;
            h.buffer.give_up_range(h.seq(first), count);
            assert!(h.buffer.work.steps - words_before <= 2 * (words_of(&h.buffer) + 1));
            let marked: Vec<u32> = (0..16)
                .filter(|&offset| h.buffer.is_abandoned(h.seq(offset)))
                .collect();
            assert_eq!(
                marked, expected,
                "base {base:#x}, first {first:#x}, count {count}"
            );
        }
    }
}

#[test]
fn a_range_given_up_is_skipped_as_one_gap() {
    for base in BASES {
        let mut h = Harness::new(base, 64);
        h.insert_ok(0, &[0, 30]);
        assert_eq!(h.release(0), [0]);
        h.buffer.give_up_range(h.seq(1), 29);
        assert_eq!(h.buffer.poll_timeout(), Some(h.at(0)), "due at once");
        assert_eq!(h.release(1), [30]);
        let stats = h.stats();
        assert_eq!(
            (
                stats.gaps_skipped,
                stats.seqs_skipped,
                stats.seqs_skipped_early
            ),
            (1, 29, 29)
        );
    }
}

#[test]
fn a_flood_of_whole_window_give_ups_costs_words_not_sequence_numbers() {
    // The attack of issue 64: 184 GaveUp frames in one datagram, each naming the
    // most sequence numbers a frame can (65,535), behind a held packet at the far
    // end of a 4096 window. Per number, that was 184 * 4096 calls.
    for base in BASES {
        let mut h = Harness::new(base, 4096);
        h.insert_ok(0, &[4095]);
        let before = h.buffer.work_units();
        for frame in 0..184u32 {
            h.buffer
                .give_up_range(h.seq(frame * 7), u32::from(u16::MAX));
        }
        let per_frame = (h.buffer.work_units() - before) / 184;
        assert!(
            per_frame <= 2 * (words_of(&h.buffer) + 1),
            "{per_frame} work units per frame"
        );
        // Skipping what they marked is one scan, then the held packet.
        let before = h.buffer.work_units();
        assert_eq!(h.release(0), [4095]);
        assert!(h.buffer.work_units() - before <= WORK_PER_CALL * (words_of(&h.buffer) + 2));
        let stats = h.stats();
        assert_eq!((stats.gaps_skipped, stats.seqs_skipped_early), (1, 4095));
    }
}

#[test]
fn a_jump_far_ahead_visits_only_the_held_packets() {
    for base in BASES {
        let mut h = Harness::new(base, 4096);
        let held = [1u32, 2, 700, 4000, 4095];
        h.insert_ok(0, &held);
        h.buffer.give_up_range(h.seq(3), 600);
        let before = h.buffer.work_units();
        let far = (1 << 31) - 1;
        h.insert_ok(1, &[far]);
        let work = h.buffer.work_units() - before;
        let moved = held.len() as u64 + 1;
        assert!(
            work <= WORK_PER_CALL * (words_of(&h.buffer) + moved + 1),
            "{work} work units for a jump of 2^31"
        );
        assert_eq!(h.release(1), held);
        let stats = h.stats();
        assert_eq!(stats.forced_advances, 1);
        // Gaps: 0, 3..700, 701..4000, 4001..4095, 4096..far-4095.
        assert_eq!(stats.gaps_skipped, 5);
        assert_eq!(
            stats.seqs_skipped,
            u64::from(far - 4095) - held.len() as u64
        );
        assert_eq!(
            stats.seqs_skipped_early, 0,
            "a forced advance is not a give-up"
        );
        // The window is now far-4095..=far, and the history the 4096 numbers
        // before it, all skipped: late packets there are still welcome.
        assert_eq!(h.buffer.next_expected(), h.seq(far - 4095));
        h.insert_ok(2, &[far - 4096, far - 8191]);
        assert_eq!(h.insert(2, far - 8192), Err(RejectReason::TooOld));
        assert_eq!(h.release(2), [far - 4096, far - 8191]);
    }
}

/// Where an operation's sequence number lies.
#[derive(Clone, Debug)]
enum SeqChoice {
    /// This far from the release point when the operation runs.
    FromReleasePoint(i32),
    /// `windows` capacities plus `extra` from the release point: the window's edges.
    Windows { windows: i32, extra: i32 },
    /// Any number at all.
    Anywhere(u32),
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        seq: SeqChoice,
        after_ms: u64,
    },
    GiveUpRange {
        first: SeqChoice,
        count: u32,
    },
    /// Calls `poll_release` up to `at_most` times, stopping at the first `None`.
    Poll {
        after_ms: u64,
        at_most: usize,
    },
    SetMaxHold {
        ms: u64,
    },
}

fn seq_choice() -> impl Strategy<Value = SeqChoice> {
    prop_oneof![
        6 => (-20i32..40).prop_map(SeqChoice::FromReleasePoint),
        2 => (-9000i32..9000).prop_map(SeqChoice::FromReleasePoint),
        2 => (-2i32..4, -2i32..3).prop_map(|(windows, extra)| SeqChoice::Windows { windows, extra }),
        1 => any::<u32>().prop_map(SeqChoice::Anywhere),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let after_ms = prop_oneof![3 => Just(0u64), 1 => 0..30u64];
    let count = prop_oneof![0..8u32, 0..70_000u32, any::<u32>()];
    let at_most = prop_oneof![3 => Just(usize::MAX), 1 => 0..4usize];
    prop_oneof![
        6 => (seq_choice(), after_ms).prop_map(|(seq, after_ms)| Op::Insert { seq, after_ms }),
        2 => (seq_choice(), count).prop_map(|(first, count)| Op::GiveUpRange { first, count }),
        3 => (0..40u64, at_most).prop_map(|(after_ms, at_most)| Op::Poll { after_ms, at_most }),
        1 => (0..100u64).prop_map(|ms| Op::SetMaxHold { ms }),
    ]
}

fn lockstep_case() -> impl Strategy<Value = (u32, usize, u64, Vec<Op>)> {
    let base = prop_oneof![
        Just(0u32),
        Just(u32::MAX - 5),
        Just(0xFFFF_F000),
        any::<u32>()
    ];
    // Below one word, not powers of two, one word exactly, several words.
    let capacity = prop::sample::select(vec![1usize, 3, 5, 40, 63, 64, 100, 128, 1000, 4096]);
    (
        base,
        capacity,
        0..100u64,
        prop::collection::vec(op(), 1..200),
    )
}

/// The buffer and the model, driven by the same calls.
struct Lockstep {
    now: Instant,
    buffer: ReorderBuffer<SeqNo>,
    model: model::Model,
    /// Positions released so far, and the last one released in order.
    released: HashSet<u64>,
    last_in_order: Option<u64>,
    accepted: u64,
}

impl Lockstep {
    fn seq(&self, choice: &SeqChoice) -> SeqNo {
        let next = self.buffer.next_expected();
        match *choice {
            SeqChoice::FromReleasePoint(distance) => SeqNo(next.0.wrapping_add_signed(distance)),
            SeqChoice::Windows { windows, extra } => {
                let distance = windows * self.buffer.capacity() as i32 + extra;
                SeqNo(next.0.wrapping_add_signed(distance))
            }
            SeqChoice::Anywhere(raw) => SeqNo(raw),
        }
    }

    /// Checks one call's work against the bound, given the packets it moved.
    fn check_work(&self, before: Work, moved: u64) -> Result<(), TestCaseError> {
        let after = self.buffer.work;
        let upkeep = (after.arrival_entries - before.arrival_entries)
            + (after.window_slots - before.window_slots);
        let work = after.total() - before.total();
        let bound = WORK_PER_CALL * (words_of(&self.buffer) + moved + 1) + upkeep;
        prop_assert!(
            work <= bound,
            "{} work units > {} ({:?} -> {:?})",
            work,
            bound,
            before,
            after
        );
        // The upkeep stays within its amortized bounds.
        prop_assert!(after.arrival_entries <= self.accepted);
        prop_assert!(after.window_slots < 3 * self.buffer.capacity() as u64);
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Insert { seq, after_ms } => {
                self.now += Duration::from_millis(*after_ms);
                let seq = self.seq(seq);
                let (before, ready_before) = (self.buffer.work, self.buffer.ready.len());
                let result = self.buffer.insert(self.now, seq, seq).map_err(|rejected| {
                    assert_eq!(rejected.item, seq);
                    rejected.reason
                });
                prop_assert_eq!(result, self.model.insert(self.now, seq));
                self.accepted += u64::from(result.is_ok());
                let forced_out = self.buffer.ready.len().saturating_sub(ready_before) as u64;
                self.check_work(before, forced_out + 1)?;
            }
            Op::GiveUpRange { first, count } => {
                let first = self.seq(first);
                let before = self.buffer.work;
                self.buffer.give_up_range(first, *count);
                self.model.give_up_range(first, *count);
                self.check_work(before, 0)?;
            }
            Op::Poll { after_ms, at_most } => {
                self.now += Duration::from_millis(*after_ms);
                for _ in 0..*at_most {
                    let before = self.buffer.work;
                    let late_before = self.model.stats.released_late;
                    let released = self.buffer.poll_release(self.now);
                    let expected = self.model.poll_release(self.now);
                    prop_assert_eq!(released, expected.map(|position| SeqNo(position as u32)));
                    self.check_work(before, 1)?;
                    let Some(position) = expected else { break };
                    prop_assert!(self.released.insert(position), "released twice");
                    if self.model.stats.released_late == late_before {
                        if let Some(last) = self.last_in_order {
                            prop_assert!(last < position, "{} after {}", position, last);
                        }
                        self.last_in_order = Some(position);
                    }
                }
            }
            Op::SetMaxHold { ms } => {
                self.buffer.set_max_hold(Duration::from_millis(*ms));
                self.model.set_max_hold(Duration::from_millis(*ms));
            }
        }
        prop_assert_eq!(self.buffer.stats(), self.model.stats);
        prop_assert_eq!(self.buffer.next_expected(), self.model.next_expected());
        prop_assert_eq!(self.buffer.len(), self.model.len());
        prop_assert_eq!(self.buffer.poll_timeout(), self.model.poll_timeout());
        prop_assert_eq!(
            self.buffer.take_needed_wait(),
            self.model.take_needed_wait()
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any mix of inserts anywhere, give-ups of any range, polls and hold changes:
    /// the buffer does exactly what the one-number-at-a-time model does, releases
    /// each packet at most once and in order (late ones aside), and no call costs
    /// more than its bound.
    #[test]
    fn matches_the_model_and_bounds_the_work_of_every_call(
        (base, capacity, max_hold_ms, ops) in lockstep_case()
    ) {
        let config = ReorderConfig {
            max_hold: Duration::from_millis(max_hold_ms),
            capacity,
        };
        let mut lockstep = Lockstep {
            now: Instant::now(),
            buffer: ReorderBuffer::new(config, SeqNo(base)),
            model: model::Model::new(config, SeqNo(base)),
            released: HashSet::new(),
            last_in_order: None,
            accepted: 0,
        };
        for op in &ops {
            lockstep.step(op)?;
        }
    }
}
