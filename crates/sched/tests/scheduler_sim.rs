//! Reordering and throughput of every scheduler on modelled paths of
//! different delay (`sim/mod.rs`), and the claims mptund makes about
//! earliest-arrival: against the round-robin baseline on deep buffers, and that
//! the slower paths carry their share behind a shallow-buffered or lossy fast
//! path, or when the flow offers about what the fast path carries.
//!
//! Run with `--nocapture` to see the table:
//! `cargo test -p mptund-sched --test scheduler_sim -- --nocapture`.

mod sim;

use std::time::Duration;

use mptund_sched::{AnyScheduler, EarliestArrival, EarliestArrivalParams, SchedulerChoice};
use sim::{run, run_with, PathConfig, Repairs, Report, Scenario};

/// Bottleneck buffer the modelled windows fill: 100 ms, the order of the
/// standing queue a loss-based controller builds on an LTE uplink (cellular
/// buffers hold hundreds of ms; the seeds' testbeds use deep buffers too).
const QUEUE_MS: f64 = 100.0;

fn run_all(scenario: &Scenario) -> Vec<Report> {
    println!("\n{} ({:?} simulated)", scenario.name, scenario.duration);
    SchedulerChoice::ALL
        .into_iter()
        .map(|choice| {
            let mut scheduler = AnyScheduler::new(choice);
            let report = run(&mut scheduler, scenario);
            println!("  {report}");
            report
        })
        .collect()
}

/// Earliest-arrival that waits for a full path whenever it would deliver earlier
/// (the opt-in `earliest_arrival_wait_margin_us = 0`), without capacity shares: the
/// waiting rule alone.
fn run_waiting_earliest_arrival(scenario: &Scenario) -> Report {
    let mut scheduler =
        AnyScheduler::new(SchedulerChoice::EarliestArrival(EarliestArrivalParams {
            wait_margin: Some(Duration::ZERO),
            share_percent: 0,
            ..EarliestArrivalParams::DEFAULT
        }));
    let report = run(&mut scheduler, scenario);
    println!("  {report} (waiting for full paths)");
    report
}

/// Earliest-arrival without capacity shares (`earliest_arrival_share_percent = 0`).
fn run_earliest_arrival_without_shares(scenario: &Scenario) -> Report {
    let mut scheduler =
        AnyScheduler::new(SchedulerChoice::EarliestArrival(EarliestArrivalParams {
            share_percent: 0,
            ..EarliestArrivalParams::DEFAULT
        }));
    let report = run(&mut scheduler, scenario);
    println!("  {report} (no capacity shares)");
    report
}

/// Five simulated seconds of 1400-byte packets, offered at `offered_mbit`.
fn offered(name: &'static str, paths: Vec<PathConfig>, offered_mbit: f64) -> Scenario {
    Scenario {
        name,
        paths,
        packet_len: 1400,
        offered_mbit: Some(offered_mbit),
        duration: Duration::from_secs(5),
    }
}

/// The default earliest-arrival on `scenario`.
fn run_earliest_arrival(scenario: &Scenario) -> Report {
    println!("\n{} ({:?} simulated)", scenario.name, scenario.duration);
    let report = run(&mut EarliestArrival::default(), scenario);
    println!("  {report}");
    report
}

fn by_name<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports
        .iter()
        .find(|report| report.scheduler == name)
        .unwrap()
}

/// Earliest-arrival waiting for full paths against round-robin on two paths: a
/// tenth of the out-of-order packets or fewer, a fifth of the mean reorder-buffer
/// hold, and at most 3 % less throughput; the default (no waiting) loses no
/// throughput either.
fn assert_waiting_earliest_arrival_beats_round_robin(reports: &[Report], earliest: &Report) {
    let round_robin = by_name(reports, "round-robin");
    let default = by_name(reports, "earliest-arrival");
    assert!(
        default.throughput_mbit >= 0.97 * round_robin.throughput_mbit,
        "throughput:\n{default}\n{round_robin}"
    );
    assert!(
        round_robin.out_of_order_fraction() > 0.05,
        "the scenario must reorder round-robin noticeably: {round_robin}"
    );
    assert!(
        earliest.out_of_order_fraction() < round_robin.out_of_order_fraction() / 10.0,
        "out-of-order:\n{earliest}\n{round_robin}"
    );
    assert!(
        earliest.mean_hold < round_robin.mean_hold / 5,
        "reorder hold:\n{earliest}\n{round_robin}"
    );
    assert!(
        earliest.throughput_mbit >= 0.97 * round_robin.throughput_mbit,
        "throughput:\n{earliest}\n{round_robin}"
    );
}

#[test]
fn two_paths_10_and_60_ms_20_mbit_each() {
    let scenario = Scenario {
        name: "2 paths: 10 ms / 60 ms one way, 20 + 20 Mbit/s",
        paths: vec![
            PathConfig::new(10.0, 20.0, QUEUE_MS),
            PathConfig::new(60.0, 20.0, QUEUE_MS),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(5),
    };
    let reports = run_all(&scenario);
    let waiting = run_waiting_earliest_arrival(&scenario);
    assert_waiting_earliest_arrival_beats_round_robin(&reports, &waiting);
    // Both links are used to the full: ~40 Mbit/s less the start-up.
    for earliest in [&waiting, by_name(&reports, "earliest-arrival")] {
        assert!(earliest.throughput_mbit > 36.0, "{earliest}");
    }
}

#[test]
fn eight_train_modems_scaled_by_a_tenth() {
    // seeds/003_* §5.2: the eight modems' maximum rates, here × 0.1; one-way
    // delays spread over 10..80 ms.
    let rates_mbit = [35.9, 18.4, 33.3, 14.7, 14.8, 4.4, 22.5, 12.5];
    let one_way_ms = [15.0, 40.0, 10.0, 60.0, 25.0, 80.0, 30.0, 50.0];
    let scenario = Scenario {
        name: "8 paths: train modem rates x0.1, 10..80 ms one way",
        paths: rates_mbit
            .iter()
            .zip(one_way_ms)
            .map(|(&rate, delay)| PathConfig::new(delay, rate * 0.1, QUEUE_MS))
            .collect(),
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(10),
    };
    let reports = run_all(&scenario);
    let waiting = run_waiting_earliest_arrival(&scenario);
    // With eight paths whose packets take 0.3 to 25 ms to serialize, the
    // in-flight-based queue estimate is off by up to one packet time on the
    // slow-rate paths (acknowledgements come a packet at a time), and with
    // the aggregate delivering a packet every 0.7 ms that still reorders
    // many packets by a few positions (60 % displaced by 3 or more, against
    // round-robin's 75 %). What earliest-arrival does remove is the long
    // reordering: assert on its extent, not on the count.
    let earliest = &waiting;
    let round_robin = by_name(&reports, "round-robin");
    assert!(
        earliest.mean_hold < round_robin.mean_hold / 10,
        "mean reorder hold:\n{earliest}\n{round_robin}"
    );
    assert!(
        earliest.mean_displacement < round_robin.mean_displacement / 5.0,
        "mean displacement:\n{earliest}\n{round_robin}"
    );
    assert!(
        earliest.max_hold < round_robin.max_hold / 2,
        "max reorder hold:\n{earliest}\n{round_robin}"
    );
    assert!(
        earliest.throughput_mbit >= 0.97 * round_robin.throughput_mbit,
        "throughput:\n{earliest}\n{round_robin}"
    );
    let capacity: f64 = rates_mbit.iter().sum::<f64>() * 0.1;
    for earliest in [&waiting, by_name(&reports, "earliest-arrival")] {
        assert!(
            earliest.throughput_mbit > 0.9 * capacity,
            "{earliest} (capacity {capacity:.2} Mbit/s)"
        );
    }
}

/// Every path carries at least 80 % of its share of the capacity, and the
/// whole delivers at least `min_of_capacity` of it.
fn assert_paths_carry_their_share(report: &Report, rates_mbit: &[f64], min_of_capacity: f64) {
    let capacity: f64 = rates_mbit.iter().sum();
    for (index, rate) in rates_mbit.iter().enumerate() {
        let fair = rate / capacity;
        assert!(
            report.path_share(index) >= 0.8 * fair,
            "path {index} carried {:.1} % of the packets, its capacity share is {:.1} %: {report} {:?}",
            100.0 * report.path_share(index),
            100.0 * fair,
            report.sent_per_path
        );
    }
    assert!(
        report.throughput_mbit >= min_of_capacity * capacity,
        "{report} (capacity {capacity:.1} Mbit/s)"
    );
}

#[test]
fn a_shallow_buffered_fast_path_leaves_the_slow_one_its_share() {
    // 5G-like 5 ms / 50 Mbit/s and LTE-like 30 ms / 20 Mbit/s, each window
    // capped by a drop-tail buffer of one bandwidth-delay product (10 and 60
    // ms): what a loss-based controller settles at over such a buffer.
    let rates_mbit = [50.0, 20.0];
    let scenario = Scenario {
        name: "2 paths, one-BDP buffers: 5 ms / 50 Mbit/s, 30 ms / 20 Mbit/s",
        paths: vec![
            PathConfig::new(5.0, rates_mbit[0], 10.0),
            PathConfig::new(30.0, rates_mbit[1], 60.0),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(5),
    };
    let reports = run_all(&scenario);
    assert_paths_carry_their_share(by_name(&reports, "earliest-arrival"), &rates_mbit, 0.95);
    // Waiting for the fast path, which is always "earlier" by the head packet,
    // starves the slow one: why waiting is not the default.
    let waiting = run_waiting_earliest_arrival(&scenario);
    assert!(
        waiting.path_share(1) < 0.05,
        "{waiting} {:?}",
        waiting.sent_per_path
    );
}

#[test]
fn a_flow_offering_what_the_fast_path_carries_still_spreads_by_capacity() {
    // 5G-like 5 ms / 50 Mbit/s and LTE-like 30 ms / 20 Mbit/s, and an inner flow
    // that offers 45 Mbit/s, as one whose rate estimate settled near the fast path's
    // does: the fast path never queues, so by arrival alone it takes everything.
    let rates_mbit = [50.0, 20.0];
    let offered_mbit = 45.0;
    let scenario = offered(
        "2 paths, 45 Mbit/s offered: 5 ms / 50 Mbit/s, 30 ms / 20 Mbit/s",
        vec![
            PathConfig::new(5.0, rates_mbit[0], QUEUE_MS),
            PathConfig::new(30.0, rates_mbit[1], QUEUE_MS),
        ],
        offered_mbit,
    );
    let shared = run_earliest_arrival(&scenario);
    let capacity_share = rates_mbit[1] / (rates_mbit[0] + rates_mbit[1]);
    // The floor is three quarters of the share; a little of the first window goes
    // before sharing starts.
    assert!(
        shared.path_share(1) >= 0.65 * capacity_share,
        "the slow path carried {:.1} % of the packets: {shared} {:?}",
        100.0 * shared.path_share(1),
        shared.sent_per_path
    );
    assert!(shared.throughput_mbit >= 0.97 * offered_mbit, "{shared}");
    // The scheduler's own count says the floor, not the arrival order, put them there.
    assert!(
        shared.floor_packets_per_path[1] as f64 >= 0.9 * shared.sent_per_path[1] as f64,
        "{:?} of {:?} placed by the floor",
        shared.floor_packets_per_path,
        shared.sent_per_path
    );
    let alone = run_earliest_arrival_without_shares(&scenario);
    assert!(
        alone.path_share(1) < 0.02,
        "{alone} {:?}",
        alone.sent_per_path
    );
    assert_eq!(alone.floor_packets_per_path, [0, 0]);
}

#[test]
fn light_traffic_stays_on_the_fastest_path() {
    // The same paths offered 20 Mbit/s, 40 % of the fast path: under the threshold,
    // so nothing waits for the slow path in the reorder buffer.
    let scenario = offered(
        "2 paths, 20 Mbit/s offered: 5 ms / 50 Mbit/s, 30 ms / 20 Mbit/s",
        vec![
            PathConfig::new(5.0, 50.0, QUEUE_MS),
            PathConfig::new(30.0, 20.0, QUEUE_MS),
        ],
        20.0,
    );
    let report = run_earliest_arrival(&scenario);
    assert_eq!(report.sent_per_path[1], 0, "{report}");
    assert_eq!(report.out_of_order, 0, "{report}");
}

#[test]
fn a_path_beyond_the_reorder_window_gets_no_share() {
    // 5G at 8 ms / 50 Mbit/s and a GEO satellite at 280 ms / 20 Mbit/s: its packets
    // would come after the receiver (200 ms) gave their gaps up.
    let scenario = offered(
        "5G and GEO, 45 Mbit/s offered: 8 ms / 50 Mbit/s, 280 ms / 20 Mbit/s",
        vec![
            PathConfig::new(8.0, 50.0, QUEUE_MS),
            PathConfig::new(280.0, 20.0, QUEUE_MS),
        ],
        45.0,
    );
    let report = run_earliest_arrival(&scenario);
    assert_eq!(report.sent_per_path[1], 0, "{report}");
}

#[test]
fn lossy_paths_each_carry_their_share() {
    // Three radio paths with one-BDP buffers and random loss of 0.5, 1 and
    // 0.33 %: the lost packets are sent again and still arrive.
    let rates_mbit = [20.0, 15.0, 10.0];
    let scenario = Scenario {
        name: "3 lossy paths: 10/20/30 ms, 20/15/10 Mbit/s, 1 in 200/100/300 lost",
        paths: vec![
            PathConfig::new(10.0, rates_mbit[0], 20.0).losing_one_in(200),
            PathConfig::new(20.0, rates_mbit[1], 40.0).losing_one_in(100),
            PathConfig::new(30.0, rates_mbit[2], 60.0).losing_one_in(300),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(5),
    };
    let reports = run_all(&scenario);
    let earliest = by_name(&reports, "earliest-arrival");
    // Less what is lost and sent again (under 1 %), and the start-up.
    assert_paths_carry_their_share(earliest, &rates_mbit, 0.93);
}

#[test]
fn repairs_on_the_path_that_delivers_first_keep_the_receivers_wait_short() {
    // Three lossy paths 12/30/45 ms one way. A packet lost on the far path and sent
    // again on whichever path had room went back to a slow one about as often as not;
    // sent where it arrives first (waiting for that path's window), the receiver's
    // reorder buffer waits for it for a shorter time.
    let scenario = Scenario {
        name: "3 lossy paths: 12/30/45 ms, 24/20/12 Mbit/s, 1 in 500/200/100 lost",
        paths: vec![
            PathConfig::new(12.0, 24.0, 24.0).losing_one_in(500),
            PathConfig::new(30.0, 20.0, 60.0).losing_one_in(200),
            PathConfig::new(45.0, 12.0, 90.0).losing_one_in(100),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(5),
    };
    let first = run_with(
        &mut EarliestArrival::default(),
        &scenario,
        Repairs::FirstArrival,
    );
    let like_new = run_with(
        &mut EarliestArrival::default(),
        &scenario,
        Repairs::LikeNewPackets,
    );
    println!(
        "{}\n  first arrival: {first}\n  like new packets: {like_new}",
        scenario.name
    );
    assert!(
        first.max_hold < like_new.max_hold,
        "longest wait: {:?} against {:?}",
        first.max_hold,
        like_new.max_hold
    );
    assert!(first.mean_hold <= like_new.mean_hold);
    assert!(first.throughput_mbit >= 0.97 * like_new.throughput_mbit);
}

#[test]
fn paths_judged_by_what_they_carried_still_get_their_share() {
    // The train's four modems (upload rates of seed 003's first four, one-BDP
    // buffers). The inner flow's slow start fitted on the first two, whose rates
    // are known; the other two have carried only probes, and their rates are
    // measured from their own acknowledgements. Read as their capacity, that
    // trickle predicted seconds per packet and kept both modems idle for the
    // whole run (the benchmark's upload: 44 % of the sum, two modems at 0 %).
    let rates_mbit = [9.0, 4.6, 8.3, 3.7];
    let scenario = Scenario {
        name: "4 train modems, two measured by their probes only: 40/20/60/30 ms",
        paths: vec![
            PathConfig::new(40.0, rates_mbit[0], 80.0),
            PathConfig::new(20.0, rates_mbit[1], 40.0),
            PathConfig::new(60.0, rates_mbit[2], 120.0).rate_measured(),
            PathConfig::new(30.0, rates_mbit[3], 60.0).rate_measured(),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(5),
    };
    let reports = run_all(&scenario);
    assert_paths_carry_their_share(by_name(&reports, "earliest-arrival"), &rates_mbit, 0.9);
}

#[test]
fn equal_paths_barely_reorder_under_any_arrival_aware_scheduler() {
    let scenario = Scenario {
        name: "2 equal paths: 20 ms one way, 10 + 10 Mbit/s",
        paths: vec![
            PathConfig::new(20.0, 10.0, QUEUE_MS),
            PathConfig::new(20.0, 10.0, QUEUE_MS),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_secs(2),
    };
    let reports = run_all(&scenario);
    let earliest = by_name(&reports, "earliest-arrival");
    assert!(earliest.out_of_order_fraction() < 0.01, "{earliest}");
    assert!(earliest.throughput_mbit > 18.0, "{earliest}");
}

#[test]
fn the_model_is_deterministic() {
    let scenario = Scenario {
        name: "determinism",
        paths: vec![
            PathConfig::new(10.0, 20.0, QUEUE_MS),
            PathConfig::new(60.0, 20.0, QUEUE_MS),
        ],
        packet_len: 1400,
        offered_mbit: None,
        duration: Duration::from_millis(500),
    };
    for choice in SchedulerChoice::ALL {
        let first = run(&mut AnyScheduler::new(choice), &scenario);
        let second = run(&mut AnyScheduler::new(choice), &scenario);
        assert_eq!(format!("{first}"), format!("{second}"), "{choice}");
    }
}
