//! A deterministic model of a multipath sender, its paths and the receiver,
//! for measuring what a scheduler does to packet order.
//!
//! Time is simulated (a `Duration` since the start, turned into an `Instant`
//! only to call the scheduler and the links, which never read the clock). Each
//! path is:
//!
//! - a FIFO bottleneck of fixed rate with an unbounded queue (the window below
//!   bounds it, so nothing is dropped) and a fixed one-way delay after it: a
//!   `linkem::Link`, the model the test bed's emulator runs,
//! - the same delay for the acknowledgement coming back (no queue on the return
//!   path),
//! - a congestion-window-like cap on the bytes in flight, set to the
//!   bandwidth-delay product plus `queue_budget` worth of bottleneck queue:
//!   what a loss-based controller settles at over a buffer of that depth.
//!
//! A path may also lose every `loss_every`-th packet it carries, at random as
//! far as the sender can tell (radio loss after the bottleneck): the packet
//! occupies the bottleneck but never reaches the receiver, its
//! window space comes back when its acknowledgement would have, and the sender
//! then sends it again, first in line, on the path that delivers it first
//! ([`Repairs`]).
//!
//! A path's rate is reported as configured (a converged estimator), or, with
//! [`PathConfig::rate_measured`], as the daemon measures it: what the path
//! delivered over the last two round trips, flagged application-limited while
//! the path had room it was not given, and a probe's trickle before any data.
//!
//! The sender has an endless backlog of equal-size packets, numbered in
//! order, or offers them at a fixed rate ([`Scenario::offered_mbit`]: an inner
//! flow whose rate has settled). At every event (start, each acknowledgement,
//! each newly offered packet) it processes the
//! acknowledgements due, builds a [`PathView`] per path from the model state
//! (delays and rate as configured, as a converged estimator would report them;
//! `srtt` includes the current queueing delay), and asks the scheduler for
//! packets until it says `Hold`. The receiver records when each sequence
//! number first arrives; [`Report`] measures the reordering a reorder buffer
//! would have to undo.

#![allow(dead_code)] // each test file uses a different part

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use linkem::{Link, LinkConfig};

use mptund_sched::{
    repair_route, PacketClass, PacketInfo, PathId, PathState, PathView, Pick, RepairRoute,
    Scheduler,
};

/// One modelled path.
#[derive(Clone, Copy, Debug)]
pub struct PathConfig {
    /// Propagation delay each way.
    pub one_way_delay: Duration,
    /// Bottleneck rate in bits per second.
    pub rate_bps: u64,
    /// Bottleneck queue the window allows on top of the bandwidth-delay product.
    pub queue_budget: Duration,
    /// Every this many packets on the path, one is lost.
    pub loss_every: Option<u64>,
    /// Report the delivery rate measured from the path's acknowledgements instead
    /// of the configured one.
    pub rate_measured: bool,
}

/// What a path that carried only keepalive probes measures: one 100-byte probe
/// every 250 ms.
const PROBE_RATE_BPS: u64 = 3_200;

impl PathConfig {
    /// A path of `rate_mbit` with `one_way_ms` each way and `queue_ms` of buffer.
    pub fn new(one_way_ms: f64, rate_mbit: f64, queue_ms: f64) -> Self {
        PathConfig {
            one_way_delay: Duration::from_secs_f64(one_way_ms / 1000.0),
            rate_bps: (rate_mbit * 1e6) as u64,
            queue_budget: Duration::from_secs_f64(queue_ms / 1000.0),
            loss_every: None,
            rate_measured: false,
        }
    }

    /// The same path with its delivery rate measured (see the module docs).
    pub fn rate_measured(self) -> Self {
        PathConfig {
            rate_measured: true,
            ..self
        }
    }

    /// The same path losing one packet in every `count`.
    pub fn losing_one_in(self, count: u64) -> Self {
        PathConfig {
            loss_every: Some(count),
            ..self
        }
    }

    fn rate_bytes_per_sec(&self) -> u64 {
        self.rate_bps / 8
    }

    fn bytes_in(&self, duration: Duration) -> u64 {
        (self.rate_bytes_per_sec() as f64 * duration.as_secs_f64()) as u64
    }

    fn transmit_time(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.rate_bytes_per_sec() as f64)
    }

    /// The window: BDP plus the queue budget.
    pub fn cwnd_bytes(&self) -> u64 {
        self.bytes_in(2 * self.one_way_delay + self.queue_budget)
    }
}

/// A packet on a path's link.
#[derive(Debug, Clone, Copy)]
struct OnLink {
    seq: usize,
    len: u64,
    lost: bool,
}

struct PathModel {
    id: PathId,
    config: PathConfig,
    /// The bottleneck and the one-way delay after it.
    link: Link<OnLink>,
    epoch: Instant,
    /// Each packet that reached the far end (or was lost there), in arrival order:
    /// acknowledgement (or loss detection) time, size, and the sequence number if
    /// the packet is lost.
    returning: VecDeque<(Duration, u64, Option<usize>)>,
    /// Bytes sent and not yet acknowledged or found lost.
    bytes_in_flight: u64,
    /// Packets the path has carried.
    sent: u64,
    /// Acknowledgement times and sizes of the last two round trips.
    acked: VecDeque<(Duration, u64)>,
}

impl PathModel {
    fn new(id: PathId, config: PathConfig, epoch: Instant) -> Self {
        let link =
            LinkConfig::delay_only(config.one_way_delay).with_rate_bit_per_s(config.rate_bps);
        Self {
            id,
            config,
            link: Link::new(link, epoch),
            epoch,
            returning: VecDeque::new(),
            bytes_in_flight: 0,
            sent: 0,
            acked: VecDeque::new(),
        }
    }

    /// How long the bottleneck needs for what waits in it.
    fn queue_delay(&self) -> Duration {
        self.config.transmit_time(self.link.queued_bytes() as u64)
    }

    fn view(&self) -> PathView {
        let mut view = PathView::new(self.id, PathState::Up);
        let base_rtt = 2 * self.config.one_way_delay;
        view.one_way_delay = Some(self.config.one_way_delay);
        view.min_rtt = Some(base_rtt);
        view.srtt = Some(base_rtt + self.queue_delay());
        view.cwnd_bytes = Some(self.config.cwnd_bytes());
        view.bytes_in_flight = self.bytes_in_flight;
        if self.config.rate_measured {
            let delivered: u64 = self.acked.iter().map(|&(_, bytes)| bytes).sum();
            let measured = (delivered * 8) as f64 / self.rate_window().as_secs_f64();
            view.delivery_rate_bps = Some((measured as u64).max(PROBE_RATE_BPS));
            view.delivery_rate_app_limited = self.bytes_in_flight < self.config.cwnd_bytes() / 2;
        } else {
            view.delivery_rate_bps = Some(self.config.rate_bps);
        }
        view
    }

    /// The span a measured delivery rate covers: two base round trips.
    fn rate_window(&self) -> Duration {
        4 * self.config.one_way_delay
    }

    /// Records an acknowledgement at `now` for the rate measurement.
    fn on_acked(&mut self, now: Duration, bytes: u64) {
        self.acked.push_back((now, bytes));
        while let Some(&(at, _)) = self.acked.front() {
            if now.saturating_sub(at) <= self.rate_window() {
                break;
            }
            self.acked.pop_front();
        }
    }

    /// Hands packet `seq` of `len` bytes to the link at `now`.
    fn send(&mut self, now: Duration, len: u64, seq: usize) {
        self.sent += 1;
        let lost = self
            .config
            .loss_every
            .is_some_and(|every| self.sent % every == 0);
        let packet = OnLink { seq, len, lost };
        // The link has no queue limit and no loss of its own: it takes everything.
        let _ = self
            .link
            .handle_packet(self.epoch + now, packet, len as usize);
        self.bytes_in_flight += len;
    }

    /// The packets that reach the far end by `now`, not lost on the way; each one's
    /// acknowledgement (or, if lost, its detection) starts back.
    fn arrivals(&mut self, now: Duration) -> Vec<usize> {
        let mut arrived = Vec::new();
        while let Some(packet) = self.link.poll_release(self.epoch + now) {
            let ack_at = now + self.config.one_way_delay;
            self.returning
                .push_back((ack_at, packet.len, packet.lost.then_some(packet.seq)));
            if !packet.lost {
                arrived.push(packet.seq);
            }
        }
        arrived
    }

    /// When the link next releases a packet or moves one off its bottleneck.
    fn next_link_event(&self) -> Option<Duration> {
        self.link
            .poll_timeout()
            .map(|at| at.saturating_duration_since(self.epoch))
    }
}

/// One run: paths, packet size, length of simulated time.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub paths: Vec<PathConfig>,
    pub packet_len: usize,
    /// The rate at which the sender offers new packets; `None`: as many as the paths
    /// take (a bulk sender that is never application-limited).
    pub offered_mbit: Option<f64>,
    pub duration: Duration,
}

impl Scenario {
    /// New packets the sender has offered by `now`.
    fn offered_by(&self, now: Duration) -> usize {
        match self.offered_mbit {
            None => usize::MAX,
            Some(mbit) => {
                (now.as_secs_f64() * mbit * 1e6 / 8.0 / self.packet_len as f64) as usize + 1
            }
        }
    }

    /// When the sender offers new packet number `count` (from 0); `None` for a bulk
    /// sender.
    fn offered_at(&self, count: usize) -> Option<Duration> {
        let mbit = self.offered_mbit?;
        Some(Duration::from_secs_f64(
            count as f64 * self.packet_len as f64 * 8.0 / (mbit * 1e6),
        ))
    }
}

/// What the receiver saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub scheduler: &'static str,
    /// Distinct packets that arrived before the end.
    pub delivered: u64,
    /// Copies that arrived after the first (redundant schedulers).
    pub duplicates: u64,
    /// Delivered payload rate, Mbit/s.
    pub throughput_mbit: f64,
    /// Packets that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Packets displaced by 3 or more: what would make the inner TCP see
    /// three duplicate ACKs and retransmit (RFC 5681 §3.2) without a reorder
    /// buffer.
    pub displaced_3_or_more: u64,
    /// Largest and mean (over out-of-order packets) displacement, in packets:
    /// how far below the highest sequence number seen the packet arrived.
    pub max_displacement: u64,
    pub mean_displacement: f64,
    /// How long a reorder buffer would hold packets until every earlier one
    /// arrived: largest, and mean over all packets of the in-order prefix.
    pub max_hold: Duration,
    pub mean_hold: Duration,
    /// Packets each path carried, in path order (re-sent ones included).
    pub sent_per_path: Vec<u64>,
    /// Of those, the packets the scheduler's capacity shares placed, as it reports them.
    pub floor_packets_per_path: Vec<u64>,
}

impl Report {
    /// The share of all packets sent that path `index` carried.
    pub fn path_share(&self, index: usize) -> f64 {
        let total: u64 = self.sent_per_path.iter().sum();
        self.sent_per_path[index] as f64 / total.max(1) as f64
    }

    pub fn out_of_order_fraction(&self) -> f64 {
        self.out_of_order as f64 / self.delivered.max(1) as f64
    }

    pub fn displaced_3_or_more_fraction(&self) -> f64 {
        self.displaced_3_or_more as f64 / self.delivered.max(1) as f64
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<22} {:>8.2} Mbit/s  delivered {:>6}  dup {:>6}  out-of-order {:>6} ({:>6.2}%, >=3: {:>6.2}%)  displacement max {:>4} mean {:>7.2}  hold max {:>7.2} ms mean {:>6.3} ms",
            self.scheduler,
            self.throughput_mbit,
            self.delivered,
            self.duplicates,
            self.out_of_order,
            100.0 * self.out_of_order_fraction(),
            100.0 * self.displaced_3_or_more_fraction(),
            self.max_displacement,
            self.mean_displacement,
            self.max_hold.as_secs_f64() * 1e3,
            self.mean_hold.as_secs_f64() * 1e3,
        )
    }
}

/// Most packets placed at one instant; a scheduler that never holds on a
/// model with windows would be a bug, and this keeps it from hanging the test.
const MAX_PICKS_PER_EVENT: usize = 100_000;

/// Where a lost packet is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repairs {
    /// On the path that delivers it first, waiting for its window
    /// (`mptund_sched::repair_route`), as the daemon does; new packets take the
    /// other paths meanwhile.
    FirstArrival,
    /// Wherever the scheduler sends a new packet.
    LikeNewPackets,
}

/// Runs `scenario` with the daemon's repairs ([`Repairs::FirstArrival`]).
pub fn run(scheduler: &mut impl Scheduler, scenario: &Scenario) -> Report {
    run_with(scheduler, scenario, Repairs::FirstArrival)
}

/// Runs `scheduler` over `scenario`, re-sending lost packets as `repairs` says, and
/// measures the receiver's view.
pub fn run_with(scheduler: &mut impl Scheduler, scenario: &Scenario, repairs: Repairs) -> Report {
    let epoch = Instant::now();
    let mut paths: Vec<PathModel> = scenario
        .paths
        .iter()
        .enumerate()
        .map(|(index, &config)| PathModel::new(PathId(index as u8), config, epoch))
        .collect();
    // Lost packets waiting to be sent again, oldest first.
    let mut resend: VecDeque<usize> = VecDeque::new();
    let packet = PacketInfo {
        len: scenario.packet_len,
        class: PacketClass::Bulk,
        queued_bytes: 0,
    };
    let len = scenario.packet_len as u64;
    // First arrival time per sequence number (index = seq).
    let mut first_arrival: Vec<Option<Duration>> = Vec::new();
    let mut duplicates = 0u64;
    let mut views: Vec<PathView> = Vec::with_capacity(paths.len());
    let mut now = Duration::ZERO;
    // The sender acts at the start, at each acknowledgement and at each newly
    // offered packet; the links' own events (a packet arriving) only move packets.
    let mut sender_acts = true;

    while now < scenario.duration {
        for path in &mut paths {
            for seq in path.arrivals(now) {
                match &mut first_arrival[seq] {
                    Some(_) => duplicates += 1,
                    slot => *slot = Some(now),
                }
            }
        }
        for path in &mut paths {
            while let Some(&(ack_at, bytes, lost)) = path.returning.front() {
                if ack_at > now {
                    break;
                }
                path.returning.pop_front();
                path.bytes_in_flight -= bytes;
                match lost {
                    Some(seq) => {
                        resend.push_back(seq);
                        scheduler.on_lost(epoch + now, path.id, bytes as usize);
                    }
                    None => {
                        path.on_acked(now, bytes);
                        scheduler.on_acked(epoch + now, path.id, bytes as usize)
                    }
                }
            }
        }
        for _ in 0..MAX_PICKS_PER_EVENT {
            if !sender_acts {
                break;
            }
            let new_offered = scenario.offered_by(now) > first_arrival.len();
            views.clear();
            views.extend(paths.iter().map(PathModel::view));
            // (what to send, whether it is the first repair in line)
            let (pick, repairing) = match (resend.front(), repairs) {
                (Some(_), Repairs::FirstArrival) => {
                    match repair_route(&views, scenario.packet_len) {
                        RepairRoute::Now(id) => (Pick::One(id), true),
                        // As the daemon does: the repair is first in line for its
                        // path, new packets may take the others meanwhile.
                        RepairRoute::WaitFor(_) if !new_offered => (Pick::Hold, false),
                        RepairRoute::WaitFor(waited_for) => {
                            views.retain(|view| view.id != waited_for);
                            (scheduler.pick(epoch + now, &packet, &views), false)
                        }
                        RepairRoute::Nowhere => (Pick::Hold, true),
                    }
                }
                (Some(_), Repairs::LikeNewPackets) => {
                    (scheduler.pick(epoch + now, &packet, &views), true)
                }
                (None, _) if !new_offered => (Pick::Hold, false),
                (None, _) => (scheduler.pick(epoch + now, &packet, &views), false),
            };
            if pick == Pick::Hold {
                break;
            }
            let seq = match resend.front() {
                Some(&seq) if repairing => {
                    resend.pop_front();
                    seq
                }
                _ => {
                    first_arrival.push(None);
                    first_arrival.len() - 1
                }
            };
            match pick {
                Pick::Hold => break,
                Pick::One(id) => {
                    paths[usize::from(id.0)].send(now, len, seq);
                    scheduler.on_sent(epoch + now, id, scenario.packet_len);
                }
                Pick::Many(set) => {
                    for id in set {
                        paths[usize::from(id.0)].send(now, len, seq);
                        scheduler.on_sent(epoch + now, id, scenario.packet_len);
                    }
                }
            }
        }
        let next_ack = paths
            .iter()
            .filter_map(|path| path.returning.front().map(|&(ack_at, _, _)| ack_at))
            .min();
        let next_offer = scenario
            .offered_at(first_arrival.len())
            .filter(|&at| at > now);
        let next_link_event = paths.iter().filter_map(PathModel::next_link_event).min();
        let next_sender_event = match (next_ack, next_offer) {
            (Some(ack), Some(offer)) => Some(ack.min(offer)),
            (ack, offer) => ack.or(offer),
        }
        // With nothing on the way, the sender looks again a millisecond later.
        .or_else(|| {
            next_link_event
                .is_none()
                .then(|| now + Duration::from_millis(1))
        });
        let next = [next_sender_event, next_link_event]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_millis(1));
        sender_acts = next_sender_event == Some(next);
        now = next;
    }

    let mut report = measure(scheduler.name(), &first_arrival, duplicates, scenario);
    report.sent_per_path = paths.iter().map(|path| path.sent).collect();
    report.floor_packets_per_path = paths
        .iter()
        .map(|path| scheduler.path_share(epoch + now, path.id).floor_packets)
        .collect();
    report
}

fn measure(
    scheduler: &'static str,
    first_arrival: &[Option<Duration>],
    duplicates: u64,
    scenario: &Scenario,
) -> Report {
    let end = scenario.duration;
    let mut arrived: Vec<(Duration, u64)> = first_arrival
        .iter()
        .enumerate()
        .filter_map(|(seq, arrival)| arrival.filter(|&at| at <= end).map(|at| (at, seq as u64)))
        .collect();
    arrived.sort_unstable();

    let mut report = Report {
        scheduler,
        delivered: arrived.len() as u64,
        duplicates,
        throughput_mbit: arrived.len() as f64 * scenario.packet_len as f64 * 8.0
            / end.as_secs_f64()
            / 1e6,
        ..Report::default()
    };
    let mut highest: Option<u64> = None;
    let mut displacement_sum = 0u64;
    for &(_, seq) in &arrived {
        match highest {
            Some(high) if seq < high => {
                report.out_of_order += 1;
                let displacement = high - seq;
                if displacement >= 3 {
                    report.displaced_3_or_more += 1;
                }
                displacement_sum += displacement;
                report.max_displacement = report.max_displacement.max(displacement);
            }
            _ => highest = Some(seq),
        }
    }
    report.mean_displacement = displacement_sum as f64 / report.out_of_order.max(1) as f64;

    // Hold time over the in-order prefix: released when all earlier arrived.
    let mut released_at = Duration::ZERO;
    let mut hold_sum = Duration::ZERO;
    let mut prefix = 0u32;
    for arrival in first_arrival {
        let Some(at) = arrival.filter(|&at| at <= end) else {
            break;
        };
        released_at = released_at.max(at);
        let hold = released_at - at;
        report.max_hold = report.max_hold.max(hold);
        hold_sum += hold;
        prefix += 1;
    }
    report.mean_hold = hold_sum / prefix.max(1);
    report
}
