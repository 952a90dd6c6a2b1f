//! Cost of one `pick` for every built-in scheduler, on 2 and 8 paths with
//! realistic views (measured delays and rates, partly filled windows, one
//! path full so the schedulers that reason about full paths do so).
//!
//! `cargo bench -p mptund-sched --bench scheduler_pick`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mptund_sched::{
    AnyScheduler, EarliestArrivalParams, PacketClass, PacketInfo, PathId, PathState, PathView,
    Scheduler, SchedulerChoice,
};

/// One-way delay (ms), rate (Mbit/s) and window fill (0..=1) per path: the
/// train modems of `seeds/003_*` with delays spread over 10..80 ms.
const PATHS: [(u64, u64, f64); 8] = [
    (15, 36, 0.6),
    (40, 18, 1.0),
    (10, 33, 0.3),
    (60, 15, 0.8),
    (25, 15, 0.5),
    (80, 4, 0.9),
    (30, 22, 0.4),
    (50, 12, 0.7),
];

fn views(count: usize) -> Vec<PathView> {
    PATHS[..count]
        .iter()
        .enumerate()
        .map(|(index, &(one_way_ms, rate_mbit, fill))| {
            let mut view = PathView::new(PathId(index as u8), PathState::Up);
            let one_way = Duration::from_millis(one_way_ms);
            view.one_way_delay = Some(one_way);
            view.min_rtt = Some(2 * one_way);
            view.srtt = Some(2 * one_way + Duration::from_millis(5));
            view.delivery_rate_bps = Some(rate_mbit * 1_000_000);
            view.pacing_rate_bps = Some(rate_mbit * 1_250_000);
            let cwnd = rate_mbit * 1_000_000 / 8 * (2 * one_way_ms + 100) / 1000;
            view.cwnd_bytes = Some(cwnd);
            view.bytes_in_flight = (cwnd as f64 * fill) as u64;
            view.loss_rate = Some(0.01);
            view
        })
        .collect()
}

fn bench_pick(c: &mut Criterion) {
    let packet = PacketInfo {
        len: 1400,
        class: PacketClass::Bulk,
        queued_bytes: 64 * 1400,
    };
    let now = Instant::now();
    let mut group = c.benchmark_group("pick");
    for path_count in [2, 8] {
        let paths = views(path_count);
        for choice in SchedulerChoice::ALL {
            let mut scheduler = AnyScheduler::new(choice);
            group.bench_with_input(
                BenchmarkId::new(choice.name(), path_count),
                &paths,
                |b, paths| b.iter(|| scheduler.pick(now, black_box(&packet), black_box(paths))),
            );
        }
    }
    group.finish();
}

/// Earliest-arrival's capacity shares (`share.rs`): off, on but below the threshold
/// (the plain benchmark above), and sharing, with the traffic of a busy half second
/// already counted. The clock stands still, so no path earns credit: every pick checks
/// each sharing path's credit, then falls back to the earliest arrival.
fn bench_capacity_shares(c: &mut Criterion) {
    let packet = PacketInfo {
        len: 1400,
        class: PacketClass::Bulk,
        queued_bytes: 64 * 1400,
    };
    let now = Instant::now();
    let mut group = c.benchmark_group("earliest-arrival shares");
    for path_count in [2, 8] {
        let paths = views(path_count);
        let mut unshared =
            AnyScheduler::new(SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                share_percent: 0,
                ..EarliestArrivalParams::DEFAULT
            }));
        group.bench_with_input(BenchmarkId::new("off", path_count), &paths, |b, paths| {
            b.iter(|| unshared.pick(now, black_box(&packet), black_box(paths)))
        });
        let mut sharing = AnyScheduler::new(SchedulerChoice::EarliestArrival(
            EarliestArrivalParams::DEFAULT,
        ));
        for _ in 0..100_000 {
            sharing.on_sent(now, PathId(0), 1400);
        }
        group.bench_with_input(
            BenchmarkId::new("sharing", path_count),
            &paths,
            |b, paths| b.iter(|| sharing.pick(now, black_box(&packet), black_box(paths))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_pick, bench_capacity_shares);
criterion_main!(benches);
