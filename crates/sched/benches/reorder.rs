//! Cost per packet of the receiver's reorder buffer: insert, then drain with
//! `poll_release`, for an in-order stream and for two paths interleaved with
//! a 20-packet displacement (every packet of the slow path arrives 20
//! positions late). The buffer is built outside the timed part (it
//! allocates its window once, at session start).
//!
//! Two more measure what a hostile peer can make one datagram cost (issue 64):
//! 184 GaveUp frames each naming 65,535 numbers behind a packet held at the far
//! end of the window, and a packet 2^31 - 1 ahead that pushes a window holding
//! 64 packets forward.
//!
//! `cargo bench -p mptund-sched --bench reorder`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mptund_sched::{ReorderBuffer, ReorderConfig, SeqNo};

/// Packets per iteration: enough to amortise setup, small enough to stay in cache.
const PACKETS: u32 = 4096;
/// How far the slow path's packets lag behind the fast path's.
const DISPLACEMENT: u32 = 20;
/// GaveUp frames (9 bytes: a 3-byte header and a 6-byte body) in one datagram of
/// about 1,690 bytes, as in the attack of issue 64.
const GAVE_UP_FRAMES: u32 = 184;

fn config() -> ReorderConfig {
    ReorderConfig {
        max_hold: Duration::from_millis(100),
        capacity: 4096,
    }
}

/// Arrival order: fast path carries even sequence numbers, the slow path odd
/// ones, each odd one arriving `DISPLACEMENT` positions after its place.
fn interleaved_order() -> Vec<u32> {
    let mut order = Vec::with_capacity(PACKETS as usize);
    let mut slow_pending = std::collections::VecDeque::new();
    for seq in 0..PACKETS {
        if seq % 2 == 0 {
            order.push(seq);
        } else {
            slow_pending.push_back((seq, seq + DISPLACEMENT));
        }
        while let Some(&(late, due)) = slow_pending.front() {
            if due > seq {
                break;
            }
            order.push(late);
            slow_pending.pop_front();
        }
    }
    order.extend(slow_pending.into_iter().map(|(seq, _)| seq));
    order
}

fn run(mut buffer: ReorderBuffer<u32>, order: &[u32], now: Instant) -> u64 {
    let mut released = 0u64;
    for &seq in order {
        let _ = buffer.insert(now, SeqNo(seq), seq);
        while let Some(item) = buffer.poll_release(now) {
            released += u64::from(item);
        }
    }
    released
}

fn bench_reorder(c: &mut Criterion) {
    let now = Instant::now();
    let in_order: Vec<u32> = (0..PACKETS).collect();
    let interleaved = interleaved_order();
    let fresh = || ReorderBuffer::new(config(), SeqNo(0));
    assert_eq!(
        run(fresh(), &interleaved, now),
        run(fresh(), &in_order, now),
        "all released"
    );

    let mut group = c.benchmark_group("reorder");
    group.throughput(Throughput::Elements(u64::from(PACKETS)));
    group.bench_function("in_order", |b| {
        b.iter_batched(
            fresh,
            |buffer| run(buffer, black_box(&in_order), now),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("two_paths_displacement_20", |b| {
        b.iter_batched(
            fresh,
            |buffer| run(buffer, black_box(&interleaved), now),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let mut hostile = c.benchmark_group("reorder_hostile");
    hostile.bench_function("gave_up_flood_184_frames", |b| {
        b.iter_batched(
            || {
                let mut buffer = fresh();
                let _ = buffer.insert(now, SeqNo(PACKETS - 1), 0);
                buffer
            },
            |mut buffer| {
                for frame in 0..GAVE_UP_FRAMES {
                    buffer.give_up_range(black_box(SeqNo(frame)), u32::from(u16::MAX));
                }
                buffer.poll_release(now)
            },
            BatchSize::SmallInput,
        )
    });
    hostile.bench_function("jump_2_31_past_64_held", |b| {
        b.iter_batched(
            || {
                let mut buffer = fresh();
                for seq in (1..PACKETS).step_by(64) {
                    let _ = buffer.insert(now, SeqNo(seq), seq);
                }
                buffer
            },
            |mut buffer| buffer.insert(now, black_box(SeqNo((1 << 31) - 1)), 0),
            BatchSize::SmallInput,
        )
    });
    hostile.finish();
}

criterion_group!(benches, bench_reorder);
criterion_main!(benches);
