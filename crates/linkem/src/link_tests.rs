use super::*;
use crate::trace::{DeliveryTrace, StepTrace};

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// Result of driving a link with a simulated clock.
struct Run {
    /// (release time since start, packet id) in release order.
    released: Vec<(Duration, u32)>,
    dropped: Vec<(u32, DropCause)>,
    counters: LinkCounters,
}

/// Feeds `arrivals` (time since start, id, length) into a link and runs the
/// clock forward event by event until the link is empty; no real time passes.
fn drive(config: LinkConfig, arrivals: &[(Duration, u32, usize)]) -> Run {
    let epoch = Instant::now();
    let mut link = Link::new(config, epoch);
    let mut released = Vec::new();
    let mut dropped = Vec::new();
    let mut pending = arrivals.iter().peekable();
    loop {
        let next_arrival = pending.peek().map(|(at, _, _)| epoch + *at);
        let now = match (next_arrival, link.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        while let Some(id) = link.poll_release(now) {
            released.push((now - epoch, id));
        }
        while let Some(&&(at, id, len)) = pending.peek() {
            if epoch + at > now {
                break;
            }
            pending.next();
            if let Admission::Dropped(id, cause) = link.handle_packet(now, id, len) {
                dropped.push((id, cause));
            }
        }
        while let Some(id) = link.poll_release(now) {
            released.push((now - epoch, id));
        }
    }
    Run {
        released,
        dropped,
        counters: *link.counters(),
    }
}

fn rate_limited(rate_mbit: u64, delay: Duration, queue_limit_bytes: usize) -> LinkConfig {
    LinkConfig {
        rate_bit_per_s: Some(rate_mbit * 1_000_000),
        queue_limit_bytes,
        ..LinkConfig::delay_only(delay)
    }
}

#[test]
fn delay_only_releases_exactly_after_the_one_way_delay() {
    let run = drive(
        LinkConfig::delay_only(ms(20)),
        &[(ms(0), 1, 100), (ms(5), 2, 100)],
    );
    assert_eq!(run.released, vec![(ms(20), 1), (ms(25), 2)]);
    assert_eq!(run.counters.forwarded_packets, 2);
    assert_eq!(run.counters.forwarded_bytes, 200);
}

#[test]
fn poll_timeout_names_the_release_time_and_nothing_comes_out_early() {
    let epoch = Instant::now();
    let mut link = Link::new(LinkConfig::delay_only(ms(10)), epoch);
    assert_eq!(link.poll_timeout(), None);
    assert_eq!(link.handle_packet(epoch, 7u32, 64), Admission::Accepted);
    assert_eq!(link.poll_timeout(), Some(epoch + ms(10)));
    assert_eq!(link.poll_release(epoch + ms(9)), None);
    assert_eq!(link.poll_release(epoch + ms(10)), Some(7));
    assert_eq!(link.poll_timeout(), None);
}

#[test]
fn rate_limit_serializes_back_to_back_packets() {
    // 1250 bytes at 10 Mbit/s take exactly 1 ms on the wire.
    let arrivals: Vec<_> = (0..5).map(|id| (ms(0), id, 1250)).collect();
    let run = drive(rate_limited(10, ms(5), 100_000), &arrivals);
    let times: Vec<Duration> = run.released.iter().map(|(at, _)| *at).collect();
    assert_eq!(times, vec![ms(6), ms(7), ms(8), ms(9), ms(10)]);
    let order: Vec<u32> = run.released.iter().map(|(_, id)| *id).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
}

#[test]
fn full_queue_drops_the_tail() {
    // The queue holds 5000 bytes including the packet being serialized.
    let arrivals: Vec<_> = (0..10).map(|id| (ms(0), id, 1000)).collect();
    let run = drive(rate_limited(1, ms(0), 5000), &arrivals);
    let dropped_ids: Vec<u32> = run.dropped.iter().map(|(id, _)| *id).collect();
    assert_eq!(dropped_ids, vec![5, 6, 7, 8, 9]);
    assert!(run
        .dropped
        .iter()
        .all(|(_, cause)| *cause == DropCause::QueueFull));
    assert_eq!(run.counters.dropped_queue_full, 5);
    assert_eq!(run.counters.forwarded_packets, 5);
    assert_eq!(run.counters.max_queue_bytes, 5000);
}

#[test]
fn random_loss_is_close_to_configured_and_deterministic_per_seed() {
    let config = LinkConfig {
        loss_probability: 0.05,
        seed: 11,
        ..LinkConfig::delay_only(ms(1))
    };
    let arrivals: Vec<_> = (0..20_000)
        .map(|id| (Duration::from_micros(id as u64 * 10), id, 100))
        .collect();
    let first = drive(config.clone(), &arrivals);
    let second = drive(config, &arrivals);
    let rate = first.counters.dropped_random_loss as f64 / 20_000.0;
    assert!((0.045..0.055).contains(&rate), "loss rate {rate}");
    assert_eq!(first.dropped, second.dropped);
    assert_eq!(
        first.counters.forwarded_packets + first.counters.dropped_random_loss,
        20_000
    );
}

#[test]
fn burst_loss_is_counted_separately() {
    let config = LinkConfig {
        gilbert_elliott: Some(GilbertElliottConfig {
            p_good_to_bad: 0.02,
            p_bad_to_good: 0.25,
            loss_in_good: 0.0,
            loss_in_bad: 1.0,
        }),
        seed: 5,
        ..LinkConfig::delay_only(ms(1))
    };
    let arrivals: Vec<_> = (0..10_000)
        .map(|id| (Duration::from_micros(id as u64 * 10), id, 100))
        .collect();
    let run = drive(config, &arrivals);
    assert_eq!(run.counters.dropped_random_loss, 0);
    let rate = run.counters.dropped_burst_loss as f64 / 10_000.0;
    // Stationary loss 0.02 / 0.27 = 7.4 %.
    assert!((0.055..0.095).contains(&rate), "burst loss rate {rate}");
}

#[test]
fn outage_of_500_ms_drops_everything_arriving_inside_it() {
    let config = LinkConfig {
        outages: vec![Outage {
            start: ms(500),
            duration: ms(500),
        }],
        ..rate_limited(10, ms(20), 100_000)
    };
    // One small packet every 10 ms for 2 s.
    let arrivals: Vec<_> = (0..200).map(|id| (ms(id as u64 * 10), id, 500)).collect();
    let run = drive(config, &arrivals);
    let dropped: Vec<u32> = run.dropped.iter().map(|(id, _)| *id).collect();
    assert_eq!(dropped, (50..100).collect::<Vec<u32>>());
    assert!(run
        .dropped
        .iter()
        .all(|(_, cause)| *cause == DropCause::Outage));
    assert_eq!(run.counters.dropped_outage, 50);
    // Nothing leaves the serializer during the outage: no release in (520, 1020) ms.
    assert!(run
        .released
        .iter()
        .all(|(at, _)| *at <= ms(520) || *at >= ms(1020)));
    assert_eq!(run.counters.forwarded_packets, 150);
}

#[test]
fn queued_packets_wait_out_an_outage() {
    // 1250 B at 1 Mbit/s = 10 ms each; the second packet would start at 10 ms,
    // inside the outage [5, 105) ms, so it starts at 105 ms instead.
    let config = LinkConfig {
        outages: vec![Outage {
            start: ms(5),
            duration: ms(100),
        }],
        ..rate_limited(1, ms(0), 100_000)
    };
    let run = drive(config, &[(ms(0), 1, 1250), (ms(0), 2, 1250)]);
    assert_eq!(run.released, vec![(ms(10), 1), (ms(115), 2)]);
}

#[test]
fn jitter_without_reordering_keeps_fifo_order() {
    let config = LinkConfig {
        jitter: ms(10),
        seed: 9,
        ..LinkConfig::delay_only(ms(20))
    };
    let arrivals: Vec<_> = (0..1000).map(|id| (ms(id as u64), id, 100)).collect();
    let run = drive(config.clone(), &arrivals);
    let order: Vec<u32> = run.released.iter().map(|(_, id)| *id).collect();
    assert_eq!(order, (0..1000).collect::<Vec<u32>>());
    for (released_at, id) in &run.released {
        let one_way = *released_at - ms(*id as u64);
        assert!(
            one_way >= ms(10) && one_way <= ms(31),
            "packet {id} delayed {one_way:?}"
        );
    }
    let spread: std::collections::BTreeSet<Duration> = run
        .released
        .iter()
        .map(|(at, id)| *at - ms(*id as u64))
        .collect();
    assert!(spread.len() > 100, "jitter should vary the delay");

    let reordering = LinkConfig {
        allow_reordering: true,
        ..config
    };
    let run = drive(reordering.clone(), &arrivals);
    let order: Vec<u32> = run.released.iter().map(|(_, id)| *id).collect();
    assert!(
        order.windows(2).any(|pair| pair[0] > pair[1]),
        "expected some reordering"
    );
    assert_eq!(run.counters.forwarded_packets, 1000);

    // Reordering that ends half way: FIFO from then on.
    let until = LinkConfig {
        reorder_until: Some(ms(500)),
        ..reordering
    };
    let run = drive(until, &arrivals);
    let overtaken_at: Vec<Duration> = run
        .released
        .windows(2)
        .filter(|pair| pair[0].1 > pair[1].1)
        .map(|pair| pair[1].0)
        .collect();
    assert!(
        !overtaken_at.is_empty(),
        "expected reordering before 500 ms"
    );
    // A packet that left just before the end may still be overtaken by one jittered
    // less; by 500 ms plus the delay and the jitter, order holds.
    assert!(
        overtaken_at.iter().all(|&at| at < ms(500 + 20 + 10)),
        "reordered at {overtaken_at:?}"
    );
}

#[test]
fn step_trace_changes_rate_delay_and_stalls_at_rate_zero() {
    let trace = StepTrace::parse_csv(
        "time_ms,rate_mbit,delay_ms,loss_percent\n0,10,5,\n100,0,,\n200,1,50,\n",
    )
    .expect("valid trace");
    let config = LinkConfig {
        step_trace: Some(trace),
        ..rate_limited(100, ms(1), 1_000_000)
    };
    // At 10 Mbit/s a 1250 B packet takes 1 ms; one sent at 150 ms waits for the
    // stall to end at 200 ms, then takes 10 ms at 1 Mbit/s and 50 ms of delay.
    let run = drive(config, &[(ms(0), 1, 1250), (ms(150), 2, 1250)]);
    assert_eq!(run.released, vec![(ms(6), 1), (ms(260), 2)]);
}

#[test]
fn step_trace_loss_overrides_base_loss() {
    let trace = StepTrace::parse_csv("time_ms,rate_mbit,delay_ms,loss_percent\n1000,,,100\n")
        .expect("valid trace");
    let config = LinkConfig {
        step_trace: Some(trace),
        ..LinkConfig::delay_only(ms(1))
    };
    let run = drive(config, &[(ms(999), 1, 100), (ms(1000), 2, 100)]);
    assert_eq!(run.released, vec![(ms(1000), 1)]);
    assert_eq!(run.dropped, vec![(2, DropCause::RandomLoss)]);
}

#[test]
fn mahimahi_trace_delivers_one_mtu_per_opportunity() {
    // Opportunities at 1, 2, 3, 4 ms, looping every 4 ms.
    let trace = DeliveryTrace::parse_mahimahi("1\n2\n3\n4\n").expect("valid trace");
    let config = LinkConfig {
        delivery_trace: Some(trace),
        ..rate_limited(1, ms(10), 1_000_000)
    };
    // Three full-size packets at 0 ms leave at 1, 2, 3 ms; two 750 B packets at
    // 5.5 ms share the 6 ms opportunity; a 3000 B packet needs two (7 and 8 ms).
    let arrivals = [
        (ms(0), 1, 1500),
        (ms(0), 2, 1500),
        (ms(0), 3, 1500),
        (Duration::from_micros(5500), 4, 750),
        (Duration::from_micros(5500), 5, 750),
        (Duration::from_micros(5500), 6, 3000),
    ];
    let run = drive(config, &arrivals);
    assert_eq!(
        run.released,
        vec![
            (ms(11), 1),
            (ms(12), 2),
            (ms(13), 3),
            (ms(16), 4),
            (ms(16), 5),
            (ms(18), 6)
        ]
    );
}

#[test]
fn mahimahi_opportunities_unused_while_idle_are_wasted() {
    let trace = DeliveryTrace::parse_mahimahi("10\n20\n").expect("valid trace");
    let config = LinkConfig {
        delivery_trace: Some(trace),
        ..LinkConfig::delay_only(ms(0))
    };
    // After 1 s idle, a packet waits for the next opportunity, not a backlog.
    let run = drive(config, &[(ms(1001), 1, 1500), (ms(1001), 2, 1500)]);
    assert_eq!(run.released, vec![(ms(1010), 1), (ms(1020), 2)]);
}
