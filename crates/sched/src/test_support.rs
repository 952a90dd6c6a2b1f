//! Hand-built path views and packets shared by the schedulers' unit tests.

use std::time::{Duration, Instant};

use crate::path::{PacketClass, PacketInfo, PathId, PathState, PathView, Pick};
use crate::scheduler::Scheduler;

/// The bulk packet every table test places.
pub const PACKET: PacketInfo = PacketInfo {
    len: 1400,
    class: PacketClass::Bulk,
    queued_bytes: 0,
};

/// An Up path with nothing measured.
pub fn up(id: u8) -> PathView {
    PathView::new(PathId(id), PathState::Up)
}

/// A Down path.
pub fn down(id: u8) -> PathView {
    PathView::new(PathId(id), PathState::Down)
}

/// Marks `view` as a backup path.
pub fn backup(mut view: PathView) -> PathView {
    view.backup = true;
    view
}

/// An Up path measured at `one_way_ms` one way (RTT twice that), carrying
/// `rate_mbit`, with a window of 100 packets and nothing in flight.
pub fn measured(id: u8, one_way_ms: u64, rate_mbit: u64) -> PathView {
    let mut view = up(id);
    let one_way = Duration::from_millis(one_way_ms);
    view.one_way_delay = Some(one_way);
    view.base_one_way_delay = Some(one_way);
    view.srtt = Some(2 * one_way);
    view.min_rtt = Some(2 * one_way);
    view.delivery_rate_bps = Some(rate_mbit * 1_000_000);
    view.cwnd_bytes = Some(140_000);
    view
}

/// `view` with its window exactly full.
pub fn full(mut view: PathView) -> PathView {
    let cwnd = *view.cwnd_bytes.get_or_insert(10_000);
    view.bytes_in_flight = cwnd;
    view
}

/// `view` (measured or not) gone down.
pub fn gone_down(mut view: PathView) -> PathView {
    view.state = PathState::Down;
    view
}

/// `view` held back by its pacer.
pub fn paced(mut view: PathView) -> PathView {
    view.pacing_ready = false;
    view
}

/// `view` with `bytes` in flight.
pub fn in_flight(mut view: PathView, bytes: u64) -> PathView {
    view.bytes_in_flight = bytes;
    view
}

/// `count` consecutive picks of `PACKET` over `paths`.
pub fn picks(scheduler: &mut impl Scheduler, paths: &[PathView], count: usize) -> Vec<Pick> {
    let now = Instant::now();
    (0..count)
        .map(|_| scheduler.pick(now, &PACKET, paths))
        .collect()
}

/// `Pick::One` for each id.
pub fn one(ids: &[u8]) -> Vec<Pick> {
    ids.iter().map(|&id| Pick::One(PathId(id))).collect()
}

/// A table case: `paths`, then the picks expected for consecutive packets.
pub struct Case {
    pub name: &'static str,
    pub paths: Vec<PathView>,
    pub expected: Vec<Pick>,
}

/// Runs each case on a fresh scheduler from `make`.
pub fn run_table<S: Scheduler>(make: impl Fn() -> S, cases: Vec<Case>) {
    for case in cases {
        let mut scheduler = make();
        let got = picks(&mut scheduler, &case.paths, case.expected.len());
        assert_eq!(got, case.expected, "{}", case.name);
    }
}
