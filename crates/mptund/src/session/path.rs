//! One path of a session as the protocol core sees it: where it leads, its probe
//! (RTT, one-way delay, delivery rate, loss, congestion window, liveness), what it has
//! received and must acknowledge, and the data datagrams still in flight on it.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_probe::cc::queuing_delay_target;
use mptund_probe::{
    AckTracker, AnyController, Controller, Liveness, LostPacket, Pacer, PathCounters, PathProbe,
    PathStats,
};
use mptund_sched::{PathId, PathState, PathView, SeqNo};

use super::budget::ProbeBudget;
use super::fec::{self, ParityDecoder, ParityEncoder};
use super::migration::{NewestCounter, Validation};
use super::{ClientPathSettings, SessionSettings};
use crate::buffers::{BufferPool, Packet};

/// How a path is probed when idle or in doubt.
#[derive(Clone, Copy, Debug)]
pub struct PathSettings {
    /// An idle, healthy path is pinged this often (keeps NAT mappings and the RTT fresh).
    pub keepalive_interval: Duration,
    /// A suspect or down path is pinged this often until it answers.
    pub probe_interval: Duration,
    /// Bytes per hour that probes on this path may cost; `None` for no limit.
    pub probe_budget_bytes_per_hour: Option<u64>,
}

/// What a session measures its paths' forward delays against (see
/// `SessionPath::base_forward_delay` and `SessionPath::base_forward_delay_from_readings`).
#[derive(Clone, Copy, Debug)]
pub struct ForwardDelayReference {
    /// Half the smallest minimum RTT of the paths: that path's forward delay, and the
    /// fastest return of an acknowledgement.
    pub fastest_half_rtt: Duration,
    /// That path's base one-way-delay reading, once it has one.
    pub base_owd_raw_us: Option<u32>,
}

/// A data datagram's inner packet, kept in the clear until its path acknowledges
/// it, so that it can be sealed again for another path if this one loses it.
#[derive(Debug)]
struct Kept {
    packet_number: u32,
    seq: SeqNo,
    /// The inner packet where a TUN read puts it, with the headroom for sealing.
    packet: Packet,
    /// A copy already went out on another path (the path was suspect).
    copied: bool,
}

pub struct SessionPath {
    pub id: PathId,
    /// Human-readable name: the client's configured name, `path<id>` on the server.
    pub name: String,
    /// Client: the socket index of this path.
    pub socket: usize,
    /// Where datagrams for this path go: client, the configured endpoint; server, the
    /// address the last authenticated datagram on this path came from.
    pub remote: Option<SocketAddr>,
    /// Server: the local address the peer reached us at, used as the reply's source.
    pub local_ip: Option<IpAddr>,
    /// Client: whether the path's socket is open (its interface exists).
    pub socket_open: bool,
    pub backup: bool,
    pub probe: PathProbe<AnyController>,
    /// Packets received on this path and not yet acknowledged.
    pub acks: AckTracker,
    pub ack_immediately: bool,
    pacer: Pacer,
    /// When the pacer next lets a packet go, as of the last view (for timers).
    pacing_ready_at: Option<Instant>,
    /// Bytes of data datagrams assigned to this path that wait for its socket
    /// unsealed: in flight as far as the window and the scheduler are concerned, not
    /// yet for the probe (whose send times start when the socket takes them).
    unsealed_bytes: u64,
    /// Those datagrams: each holds its inner packet's buffer, which becomes the copy
    /// kept for repair when it is sealed, so the memory budget counts it from now.
    unsealed_packets: usize,
    kept: VecDeque<Kept>,
    next_packet_number: u32,
    pub last_received: Option<Instant>,
    pub last_probe: Option<Instant>,
    /// Pings sent to measure the jitter (see `next_measuring_ping`).
    jitter_pings_sent: usize,
    settings: PathSettings,
    budget: ProbeBudget,
    pub counters: PathCounters,
    /// Data datagrams of this path that were re-sent elsewhere.
    pub reinjected_away: u64,
    /// Server: the newest datagram authenticated on this path (only such a one may
    /// start a validation).
    pub newest_counter: Option<NewestCounter>,
    /// Server: a new address the peer was seen at, until it answers a challenge.
    pub validation: Option<Validation>,
    pub validations_started: u64,
    pub validations_succeeded: u64,
    /// Either side: the newest challenge the peer sent on this path, answered with
    /// the session's next acknowledgements (one answer per path however many came).
    pub pending_response: Option<[u8; crate::wire::PATH_TOKEN_LEN]>,
    /// Answers withheld: the path had no validated address and the candidate's
    /// amplification budget had no room.
    pub responses_withheld: u64,
    /// The share of the path's data datagrams lost while its queue was short: the
    /// radio's losses, not a full buffer's (TCP Veno's backlog test, as the delay-rate
    /// controller judges them), averaged over about [`RADIO_LOSS_MEMORY`] datagrams.
    radio_loss_rate: f64,
    /// Sender: the parity block being filled, once the path lost enough to need one.
    pub parity: Option<ParityEncoder>,
    /// Receiver: copies of the latest data packets, once the peer sent parity here.
    pub rebuild: Option<ParityDecoder>,
}

/// Data datagrams the radio loss rate is averaged over: a few seconds of a cellular
/// uplink, enough to see a 0.2 % loss rate about eight times.
const RADIO_LOSS_MEMORY: f64 = 4096.0;

/// Delays of pings into the idle path that a fresh path's jitter is measured from:
/// all the estimate keeps. Once they are in, keepalives and idle moments keep it
/// up to date.
pub const JITTER_PINGS: usize = mptund_probe::QUIET_SAMPLES;

/// The most jitter pings a path gets. Only a ping sent into the idle path counts,
/// and when both ends ping, one's answers make the other's next ping no longer
/// idle: about half count. Past this the keepalives finish the job.
pub const MAX_JITTER_PINGS: usize = 3 * JITTER_PINGS;

/// The least time between two jitter pings. Each waits for the one before it to be
/// answered (the path must be idle), so on most paths a round trip passes anyway; the
/// gap only spaces them on a path of a millisecond or less.
pub const JITTER_PING_GAP: Duration = Duration::from_millis(5);

fn new_probe(now: Instant, session: &SessionSettings) -> PathProbe<AnyController> {
    let controller = AnyController::new(
        session.congestion_controller,
        session.probe.max_datagram_size,
    );
    PathProbe::new(now, session.probe, controller)
}

fn new_acks(session: &SessionSettings) -> AckTracker {
    // The peer's datagrams are as large as ours: both ends derive them from the
    // tunnel MTU.
    let full_datagram = usize::try_from(session.probe.max_datagram_size).unwrap_or(usize::MAX);
    AckTracker::new(session.probe.max_ack_delay, full_datagram)
}

impl SessionPath {
    /// A client path with id `id` on socket `socket`, before the session has heard
    /// anything on it.
    pub fn configured(
        id: PathId,
        socket: usize,
        configured: &ClientPathSettings,
        now: Instant,
        session: &SessionSettings,
    ) -> Self {
        Self::new(
            id,
            configured.name.clone(),
            socket,
            Some(configured.endpoint),
            configured.backup,
            now,
            &configured.probing,
            session,
        )
    }

    /// A server path, learned from the first authenticated datagram carrying its id.
    pub fn learned(
        id: PathId,
        now: Instant,
        settings: &PathSettings,
        session: &SessionSettings,
    ) -> Self {
        let mut path = Self::new(
            id,
            format!("path{}", id.0),
            0,
            None,
            false,
            now,
            settings,
            session,
        );
        path.socket_open = true;
        path
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        id: PathId,
        name: String,
        socket: usize,
        remote: Option<SocketAddr>,
        backup: bool,
        now: Instant,
        settings: &PathSettings,
        session: &SessionSettings,
    ) -> Self {
        Self {
            id,
            name,
            socket,
            remote,
            local_ip: None,
            socket_open: false,
            backup,
            probe: new_probe(now, session),
            acks: new_acks(session),
            ack_immediately: false,
            pacer: Pacer::new(session.probe.max_datagram_size),
            pacing_ready_at: None,
            unsealed_bytes: 0,
            unsealed_packets: 0,
            kept: VecDeque::new(),
            next_packet_number: 0,
            last_received: None,
            last_probe: None,
            jitter_pings_sent: 0,
            settings: *settings,
            budget: ProbeBudget::new(now, settings.probe_budget_bytes_per_hour),
            counters: PathCounters::default(),
            reinjected_away: 0,
            newest_counter: None,
            validation: None,
            validations_started: 0,
            validations_succeeded: 0,
            pending_response: None,
            responses_withheld: 0,
            radio_loss_rate: 0.0,
            parity: None,
            rebuild: None,
        }
    }

    /// Starts afresh for a new session: estimators, acknowledgements and kept
    /// datagrams belong to the old session's keys and packet numbers.
    pub fn reset_for_session(
        &mut self,
        now: Instant,
        session: &SessionSettings,
        pool: &mut BufferPool,
    ) {
        self.recycle_in_flight(pool);
        self.probe = new_probe(now, session);
        self.acks = new_acks(session);
        self.ack_immediately = false;
        self.pacer = Pacer::new(session.probe.max_datagram_size);
        self.last_received = None;
        self.last_probe = None;
        self.jitter_pings_sent = 0;
    }

    /// Moves the path to an address the peer proved it receives at, with fresh
    /// congestion, RTT and loss state (RFC 9000 section 9.4): the old address's
    /// estimates say nothing about the new one. What it must acknowledge stays, and
    /// the caller has re-sent what was in flight.
    pub fn migrate(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        session: &SessionSettings,
    ) {
        self.remote = Some(remote);
        self.local_ip = local_ip;
        self.probe = new_probe(now, session);
        self.pacer = Pacer::new(session.probe.max_datagram_size);
        self.pacing_ready_at = None;
        if let Some((from, to)) = self.probe.on_heard(now) {
            tracing::debug!(path = %self.name, ?from, ?to, "migrated path heard");
        }
    }

    /// Changes how the path is probed (reload); a changed budget starts full.
    pub fn set_probing(&mut self, now: Instant, settings: &PathSettings) {
        if settings.probe_budget_bytes_per_hour != self.settings.probe_budget_bytes_per_hour {
            self.budget = ProbeBudget::new(now, settings.probe_budget_bytes_per_hour);
        }
        self.settings = *settings;
    }

    /// Counts `count` packets just declared lost as the radio's when the path's queue
    /// was below the delay-rate controller's target (`queuing_delay_target`).
    pub fn on_losses(&mut self, count: usize) {
        let target = queuing_delay_target(self.probe.rtt.min(), self.probe.jitter());
        if self
            .probe
            .queuing_delay()
            .is_none_or(|queue| queue <= target)
        {
            self.radio_loss_rate += count as f64 / RADIO_LOSS_MEMORY;
        }
    }

    /// Adds a data datagram's inner packet to the path's parity block when the path
    /// loses enough to the radio for parity to pay; true when the block is full and
    /// its parity due.
    pub fn add_to_parity(&mut self, pn: u32, seq: u32, inner: &[u8], max_inner_len: usize) -> bool {
        self.radio_loss_rate *= 1.0 - 1.0 / RADIO_LOSS_MEMORY;
        let Some(block) = fec::block_size(self.radio_loss_rate) else {
            if let Some(encoder) = &mut self.parity {
                encoder.clear();
            }
            return false;
        };
        // The caller sent the parity of a block this number would not fit.
        let encoder = self
            .parity
            .get_or_insert_with(|| ParityEncoder::new(max_inner_len));
        encoder.add(pn, seq, inner);
        encoder.count() >= block
    }

    pub fn take_packet_number(&mut self) -> u32 {
        let number = self.next_packet_number;
        self.next_packet_number = number.wrapping_add(1);
        number
    }

    /// The packet number a datagram that elicits no acknowledgement carries: it does
    /// not consume one, so it leaves no gap in what the receiver acknowledges.
    pub fn peek_packet_number(&self) -> u32 {
        self.next_packet_number
    }

    /// Records a datagram handed to the socket. Eliciting datagrams (data, pings) are
    /// tracked by the probe; acknowledgement-only ones are not. `backlog` says whether
    /// more data is waiting for a path.
    pub fn on_sent(
        &mut self,
        now: Instant,
        packet_number: u32,
        wire_len: usize,
        seq: Option<u32>,
        eliciting: bool,
        backlog: bool,
    ) {
        self.count_sent(wire_len, seq.is_some());
        if eliciting {
            self.probe_on_sent(now, packet_number, wire_len, seq, backlog);
            self.pacer.on_sent(now, wire_len as u64);
        }
    }

    /// A data datagram of `assigned_len` bytes (before acknowledgements rode on it) was
    /// assigned to this path: the pacer and the window count it from now on, while it
    /// waits for the socket (see [`SessionPath::on_data_sealed`]).
    pub fn on_data_assigned(&mut self, now: Instant, assigned_len: usize) {
        self.unsealed_bytes += assigned_len as u64;
        self.unsealed_packets += 1;
        self.pacer.on_sent(now, assigned_len as u64);
    }

    /// The socket took a data datagram assigned as `assigned_len` bytes: sealed as
    /// `wire_len` bytes under `packet_number`, its send time starts now.
    pub fn on_data_sealed(
        &mut self,
        now: Instant,
        packet_number: u32,
        wire_len: usize,
        assigned_len: usize,
        seq: u32,
        backlog: bool,
    ) {
        self.on_data_unsent(assigned_len);
        self.count_sent(wire_len, true);
        self.probe_on_sent(now, packet_number, wire_len, Some(seq), backlog);
    }

    /// A data datagram assigned as `assigned_len` bytes will not be sent after all.
    pub fn on_data_unsent(&mut self, assigned_len: usize) {
        self.unsealed_bytes = self.unsealed_bytes.saturating_sub(assigned_len as u64);
        self.unsealed_packets = self.unsealed_packets.saturating_sub(1);
    }

    /// Bytes in flight, those waiting for the socket unsealed included.
    pub fn bytes_in_flight(&self) -> u64 {
        self.probe.bytes_in_flight() + self.unsealed_bytes
    }

    fn count_sent(&mut self, wire_len: usize, data: bool) {
        self.counters.sent_packets += 1;
        self.counters.sent_bytes += wire_len as u64;
        if data {
            self.counters.sent_data_packets += 1;
        }
    }

    fn probe_on_sent(
        &mut self,
        now: Instant,
        packet_number: u32,
        wire_len: usize,
        seq: Option<u32>,
        backlog: bool,
    ) {
        // RFC 7661 section 4: a window less than half used, with nothing waiting, is
        // not validated by this flight; the inner flow, not the path, sets the pace,
        // so neither the window nor the rate estimate may grow from it.
        let in_flight = self.bytes_in_flight() + wire_len as u64;
        let app_limited = !backlog && in_flight < self.probe.window() / 2;
        self.probe
            .on_sent(now, packet_number, wire_len as u64, seq, app_limited);
    }

    /// Keeps a sent data datagram's inner packet until it is acknowledged or lost.
    pub fn keep(&mut self, packet_number: u32, seq: SeqNo, packet: Packet) {
        self.kept.push_back(Kept {
            packet_number,
            seq,
            packet,
            copied: false,
        });
    }

    /// Takes the kept inner packet with this packet number (declared lost), unless a
    /// copy of it already went out elsewhere (then it is only recycled).
    pub fn take_kept(
        &mut self,
        packet_number: u32,
        pool: &mut BufferPool,
    ) -> Option<(SeqNo, Packet)> {
        let index = self
            .kept
            .iter()
            .position(|kept| kept.packet_number == packet_number)?;
        let kept = self.kept.remove(index)?;
        if kept.copied {
            pool.recycle(kept.packet);
            return None;
        }
        Some((kept.seq, kept.packet))
    }

    /// Copies of the kept inner packets not copied yet, each copied once: a suspect
    /// path's packets go out elsewhere while the originals stay in flight here.
    pub fn copy_uncopied(&mut self, pool: &mut BufferPool, copies: &mut Vec<(SeqNo, Packet)>) {
        for kept in self.kept.iter_mut().filter(|kept| !kept.copied) {
            if let Some(copy) = pool.take_copy_of(&kept.packet) {
                kept.copied = true;
                copies.push((kept.seq, copy));
            }
        }
    }

    /// Returns the kept datagrams sent before the oldest packet still in flight: they
    /// were acknowledged (lost ones were taken out when declared lost).
    pub fn release_acknowledged(&mut self, pool: &mut BufferPool) {
        let oldest = self.probe.oldest_in_flight();
        while let Some(front) = self.kept.front() {
            // Serial-number comparison: packet numbers wrap.
            let settled =
                oldest.is_none_or(|oldest| (oldest.wrapping_sub(front.packet_number) as i32) > 0);
            if !settled {
                break;
            }
            if let Some(kept) = self.kept.pop_front() {
                pool.recycle(kept.packet);
            }
        }
    }

    /// Packet buffers the path holds: copies kept for repair, inner packets waiting
    /// unsealed for the socket, and its parity decoder.
    pub fn held_packets(&self) -> usize {
        let decoder = if self.rebuild.is_some() {
            fec::DECODER_BUFFERS
        } else {
            0
        };
        self.kept.len() + self.unsealed_packets + decoder
    }

    pub fn recycle_in_flight(&mut self, pool: &mut BufferPool) {
        for kept in self.kept.drain(..) {
            pool.recycle(kept.packet);
        }
    }

    pub fn on_received(&mut self, now: Instant, wire_len: usize, session: u32) {
        self.counters.received_packets += 1;
        self.counters.received_bytes += wire_len as u64;
        self.last_received = Some(now);
        if let Some((from, to)) = self.probe.on_heard(now) {
            self.log_transition(from, to, session);
        }
    }

    /// Orders paths by how long a datagram takes to reach the peer on them: the minimum
    /// RTT (under load, this path's way there and the fastest way back) plus the queue
    /// measured on the way there. A path without an RTT sample comes last.
    pub fn way_to_peer(&self, now: Instant) -> (bool, Duration) {
        match self.probe.rtt.min() {
            Some(min_rtt) => (
                false,
                min_rtt + self.probe.queuing_delay_at(now).unwrap_or_default(),
            ),
            None => (true, Duration::ZERO),
        }
    }

    pub fn log_transition(&self, from: Liveness, to: Liveness, session: u32) {
        match to {
            Liveness::Active => tracing::info!(session, path = %self.name, ?from, "path up"),
            Liveness::Down => tracing::warn!(session, path = %self.name, ?from, "path down"),
            _ => tracing::debug!(session, path = %self.name, ?from, ?to, "path liveness"),
        }
    }

    /// Silent for longer than the hard timeout, whatever the RTT-based liveness says.
    fn silent(&self, now: Instant, path_timeout: Duration) -> bool {
        self.last_received
            .is_some_and(|last| now.saturating_duration_since(last) >= path_timeout)
    }

    /// The hard silence timeout needs no timer: `scheduler_state` applies it whenever
    /// the path is looked at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.probe.poll_timeout(),
            self.acks.poll_timeout(),
            self.validation.as_ref().map(Validation::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Declares losses (into `lost`) and liveness changes that are due, and returns
    /// the state the path just entered, if it changed.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        lost: &mut Vec<LostPacket>,
        session: u32,
    ) -> Option<Liveness> {
        let (from, to) = self.probe.handle_timeout(now, lost)?;
        self.log_transition(from, to, session);
        Some(to)
    }

    /// The state the scheduler sees: a path is only usable with an open socket, an
    /// address to send to, and a peer that has been heard recently.
    pub fn scheduler_state(&self, now: Instant, path_timeout: Duration) -> PathState {
        if !self.socket_open || self.remote.is_none() || self.silent(now, path_timeout) {
            return PathState::Down;
        }
        match self.probe.liveness() {
            Liveness::Active => PathState::Up,
            Liveness::Suspect => PathState::Suspect,
            Liveness::Down | Liveness::Probing => PathState::Down,
        }
    }

    /// Up, still in slow start, and its window full: next round trip it can take
    /// about twice as much, so a queue in front of it is no sign of saturation.
    pub fn still_growing(&self, now: Instant, path_timeout: Duration) -> bool {
        let full_size = self.probe.config().max_datagram_size;
        self.scheduler_state(now, path_timeout) == PathState::Up
            && self.probe.controller().in_slow_start()
            && self.bytes_in_flight() + full_size > self.probe.window()
    }

    /// The scheduler's view of this path for a packet of `len` bytes, its forward delay
    /// measured against `reference`.
    pub fn view(
        &mut self,
        now: Instant,
        path_timeout: Duration,
        len: usize,
        reference: ForwardDelayReference,
    ) -> PathView {
        let mut view = PathView::new(self.id, self.scheduler_state(now, path_timeout));
        view.backup = self.backup;
        view.srtt = self.probe.rtt.smoothed();
        view.min_rtt = self.probe.rtt.min();
        let queuing_delay = self.probe.queuing_delay_at(now).unwrap_or_default();
        let base = self.base_forward_delay(reference);
        let base_from_readings = self.base_forward_delay_from_readings(reference);
        view.one_way_delay = base.map(|base| base + queuing_delay);
        view.one_way_delay_floor = base_from_readings.map(|base| base + queuing_delay);
        view.base_one_way_delay = base.into_iter().chain(base_from_readings).min();
        view.cwnd_bytes = Some(self.probe.window());
        view.bytes_in_flight = self.bytes_in_flight();
        let rate_sample = self.probe.latest_rate_sample(now);
        view.delivery_rate_bps = rate_sample.map(|sample| sample.delivery_rate.saturating_mul(8));
        view.delivery_rate_app_limited = rate_sample.is_some_and(|sample| sample.app_limited);
        view.loss_rate = Some(self.probe.loss_rate() as f32);
        view.pacing_rate_bps = self
            .probe
            .controller()
            .pacing_rate()
            .map(|bytes| bytes.saturating_mul(8));
        view.bottleneck_rate_bps = self
            .probe
            .controller()
            .bottleneck_rate()
            .map(|bytes| bytes.saturating_mul(8));
        view.capacity_searching = self.probe.controller().in_slow_start();
        // Only a path that could otherwise take the packet waits for its pacer; a pacer
        // time that is already here means ready (rounding must not make a timer spin).
        let sendable = view.state == PathState::Up && view.has_window_room(len);
        self.pacing_ready_at = if sendable {
            self.pacing_delay(now, len).filter(|&at| at > now)
        } else {
            None
        };
        view.pacing_ready = self.pacing_ready_at.is_none();
        view
    }

    /// The forward delay without a queue: the minimum RTT less the fastest return. An
    /// acknowledgement comes back on whichever path the peer heard last, so under load
    /// a path's minimum RTT holds the fastest return.
    fn base_forward_delay(&self, reference: ForwardDelayReference) -> Option<Duration> {
        let min_rtt = self.probe.rtt.min()?;
        Some(
            min_rtt
                .saturating_sub(reference.fastest_half_rtt)
                .max(min_rtt / 2),
        )
    }

    /// The forward delay without a queue from the one-way-delay readings: the clocks
    /// are not synchronised, but every path's readings carry the same offset, so this
    /// path's forward delay is the reference path's plus how much higher its base
    /// reading is. An idle path answers its pings on itself, so its minimum RTT holds
    /// its own return and [`Self::base_forward_delay`] overstates it: a path 120 ms away
    /// next to one 8 ms away came out 232 ms away. `None` without readings.
    fn base_forward_delay_from_readings(
        &self,
        reference: ForwardDelayReference,
    ) -> Option<Duration> {
        let fastest = reference.base_owd_raw_us?;
        let own = self.probe.base_owd_raw_us()?;
        let longer_us = own.wrapping_sub(fastest) as i32;
        let difference = Duration::from_micros(u64::from(longer_us.unsigned_abs()));
        Some(if longer_us >= 0 {
            reference.fastest_half_rtt.saturating_add(difference)
        } else {
            reference.fastest_half_rtt.saturating_sub(difference)
        })
    }

    /// When the pacer lets a packet of `len` bytes go, if not now.
    fn pacing_delay(&mut self, now: Instant, len: usize) -> Option<Instant> {
        let srtt = self.pacing_rtt();
        let rate = self.probe.controller().pacing_rate();
        let window = self.probe.window();
        self.pacer.delay(now, len as u64, window, srtt, rate)
    }

    /// The rate the pacer currently sends at, in bytes per second (see
    /// [`mptund_probe::path::PathProbe::pacing_rate`]).
    pub fn pacing_rate(&self) -> Option<u64> {
        self.probe.pacing_rate()
    }

    /// The RTT the pacer spreads a window over; zero (no pacing, the window alone
    /// limits) before the first sample. Spreading the initial window over RFC 9002's
    /// 333 ms initial RTT held a 40 ms path to a packet every 26 ms for its first
    /// round trips, behind a starting inner flow (Linux likewise paces the first
    /// window against a nominal 1 ms RTT).
    fn pacing_rtt(&self) -> Duration {
        self.probe.rtt.smoothed().unwrap_or(Duration::ZERO)
    }

    /// When the pacer blocked the last packet this path was offered, until then.
    pub fn pacing_ready_at(&self) -> Option<Instant> {
        self.pacing_ready_at
    }

    /// When this path next wants a probe ping: an idle healthy path every keepalive
    /// interval, a suspect or down one every probe interval.
    pub fn next_keepalive(&self, session_start: Instant) -> Instant {
        let interval = match self.probe.liveness() {
            Liveness::Active => self.settings.keepalive_interval,
            _ => self.settings.probe_interval,
        };
        let last_activity = [self.last_received, self.last_probe]
            .into_iter()
            .flatten()
            .max();
        match (self.probe.liveness(), last_activity) {
            (_, None) => session_start,
            (Liveness::Active, Some(last)) => last + interval,
            (_, Some(_)) => self
                .last_probe
                .map_or(session_start, |probe| probe + interval),
        }
    }

    /// When this path next wants a ping to measure it, on either side; `None` once it
    /// is measured.
    ///
    /// - **Its first RTT sample**, one ping per probe interval. The scheduler gives no
    ///   data to an unmeasured path while a measured one is merely full, so a sender
    ///   that never measured a path (the server, in a download) would never use it.
    /// - **Its jitter** (`mptund_probe::OwdEstimator::jitter`), from pings sent one at a
    ///   time into the idle path, at least `JITTER_PING_GAP` apart, until
    ///   `JITTER_PINGS` delays are in or `MAX_JITTER_PINGS` went out. Keepalives
    ///   alone bring one a second, so on a fresh session the jitter came seconds after
    ///   the path's controller had taken a jittery link's delay under load for a queue
    ///   and left Startup: a Wi-Fi path with ±10 ms of jitter carried 3-10 % of the
    ///   bytes (`benches/schedulers/REPORT.md`). A path that carries data is not
    ///   pinged; its delays come from idle moments.
    ///
    /// A path whose pings went unanswered until it was declared down waits to hear
    /// from the peer again: the server does not keep pinging an address that went away.
    pub fn next_measuring_ping(&self, session_start: Instant) -> Option<Instant> {
        if self.remote.is_none() || !self.socket_open || self.probe.liveness() == Liveness::Down {
            return None;
        }
        if self.probe.rtt.min().is_none() {
            return Some(
                self.last_probe
                    .map_or(session_start, |probe| probe + self.settings.probe_interval),
            );
        }
        if !self.measuring_jitter() || self.probe.packets_in_flight() > 0 {
            return None;
        }
        Some(
            self.last_probe
                .map_or(session_start, |probe| probe + JITTER_PING_GAP),
        )
    }

    /// Whether the path, measured, still wants pings for its jitter.
    fn measuring_jitter(&self) -> bool {
        self.probe.rtt.min().is_some()
            && self.probe.jitter_samples() < JITTER_PINGS
            && self.jitter_pings_sent < MAX_JITTER_PINGS
    }

    /// Notes a ping sent on this path, for the jitter pings' limit.
    pub fn on_ping_sent(&mut self) {
        if self.measuring_jitter() {
            self.jitter_pings_sent += 1;
        }
    }

    /// Whether the probe budget allows a probe of `wire_len` bytes now; spends it if so.
    pub fn spend_probe_budget(&mut self, now: Instant, wire_len: usize) -> bool {
        self.budget.try_spend(now, wire_len as u64)
    }

    pub fn stats(&self, now: Instant) -> PathStats {
        let mut stats = self.probe.stats(now);
        stats.counters = self.counters;
        stats
    }
}
