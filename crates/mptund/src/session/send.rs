//! The sending half of a session: inner packets are scheduled onto paths, sealed in
//! place (with acknowledgements for the peer piggybacked when there is room), paced,
//! queued briefly when every path is full, and re-sent on another path when the path
//! they took loses them or goes down.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mptund_sched::{
    latency_critical_paths, PacketClass, PacketInfo, PathId, PathSet, Pick, Scheduler, SeqNo,
};

use super::classify::classify;
use super::codel::{CoDel, CoDelConfig};
use super::{KeepAs, Outgoing, Session};
use crate::buffers::{BufferPool, Packet, HEADROOM, MAX_PIGGYBACK};
use crate::counters::{DropCounters, DropReason};
use crate::wire::{
    self, ControlMeta, DataMeta, Frame, PacketType, TransportHeader, CONTROL_META_LEN,
    DATA_META_LEN, PIGGYBACK_LEN_FIELD, TAG_LEN, TRANSPORT_HEADER_LEN,
};

/// What one ping costs on the wire: IPv4 and UDP headers, transport header, control
/// metadata, a Ping frame and the tag (a metered contract counts every byte).
const PING_WIRE_COST: usize =
    20 + 8 + TRANSPORT_HEADER_LEN + CONTROL_META_LEN + 3 + wire::PING_BODY_LEN + TAG_LEN;

/// Runs of given-up sequence numbers remembered until the next control datagram;
/// a control datagram holds about 150 GaveUp frames.
pub(super) const MAX_GIVEN_UP_RUNS: usize = 128;

/// The smallest Ack frame: header, fixed fields and one range.
const MIN_ACK_FRAME: usize = 3 + wire::ACK_FIXED_LEN + wire::ACK_RANGE_LEN;

/// The bounded queue in front of the paths when all of them are full.
#[derive(Clone, Copy, Debug)]
pub struct SendQueueConfig {
    pub capacity_packets: usize,
    /// CoDel keeps the standing queue short with one drop at a time.
    pub codel: CoDelConfig,
    /// A packet that waited longer than this is dropped at the head of the queue
    /// whatever CoDel says: the limit for flows that do not slow down.
    pub max_sojourn: Duration,
}

pub(super) struct SendQueue {
    packets: VecDeque<(Instant, Packet)>,
    codel: Option<CoDel>,
    /// Inner bytes waiting, for schedulers that weigh the backlog (ECF).
    bytes: u64,
    config: SendQueueConfig,
}

impl SendQueue {
    pub fn new(config: SendQueueConfig) -> Self {
        Self {
            packets: VecDeque::with_capacity(config.capacity_packets),
            codel: None,
            bytes: 0,
            config,
        }
    }

    pub fn recycle_all(&mut self, pool: &mut BufferPool) {
        for (_, packet) in self.packets.drain(..) {
            pool.recycle(packet);
        }
        self.bytes = 0;
    }

    fn push_back(&mut self, queued_at: Instant, packet: Packet) {
        self.bytes += packet.len() as u64;
        self.packets.push_back((queued_at, packet));
    }

    fn push_front(&mut self, queued_at: Instant, packet: Packet) {
        self.bytes += packet.len() as u64;
        self.packets.push_front((queued_at, packet));
    }

    fn pop_front(&mut self) -> Option<(Instant, Packet)> {
        let (queued_at, packet) = self.packets.pop_front()?;
        self.bytes -= packet.len() as u64;
        Some((queued_at, packet))
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Moves the packets waiting in `other` (a queue with the old limits) to the back
    /// of this one, in order.
    pub fn take_packets_from(&mut self, mut other: SendQueue) {
        while let Some((queued_at, packet)) = other.pop_front() {
            self.push_back(queued_at, packet);
        }
    }
}

/// How a re-sent packet competes for the paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resend {
    /// Its path died or went quiet: it goes out now, windows or not. The receiver
    /// holds a gap for it, and the dead path's share of the windows is free.
    Urgent,
    /// A congestion loss: first in line, but it waits for a window like any packet.
    /// Ignoring windows here would answer congestion with more traffic.
    InTurn,
}

/// Lost packets waiting for a window, first in line for the paths.
pub(super) struct ResendQueue {
    packets: VecDeque<(Instant, SeqNo, Packet)>,
}

impl ResendQueue {
    /// A congestion loss burst is at most a window; a window of a fast path is a
    /// few hundred packets.
    const CAPACITY: usize = 1024;

    pub fn new() -> Self {
        Self {
            packets: VecDeque::with_capacity(Self::CAPACITY),
        }
    }

    pub fn recycle_all(&mut self, pool: &mut BufferPool) {
        for (_, _, packet) in self.packets.drain(..) {
            pool.recycle(packet);
        }
    }
}

/// Where an inner packet goes and under which sequence number.
enum Placement {
    Sent,
    Held(Packet),
}

impl Session {
    /// Schedules one inner packet from the TUN. Packets already waiting go first, so
    /// the stream stays in order.
    pub fn send_inner(
        &mut self,
        now: Instant,
        packet: Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        if self.send_queue.packets.is_empty() && self.resend_queue.packets.is_empty() {
            let seq = self.next_seq;
            match self.place(now, packet, seq, None, false, pool, out) {
                Placement::Sent => self.next_seq = seq.next(),
                Placement::Held(packet) => self.enqueue(now, packet, pool, drops),
            }
        } else {
            self.enqueue(now, packet, pool, drops);
            self.drain_send_queue(now, pool, drops, out);
        }
    }

    fn enqueue(
        &mut self,
        now: Instant,
        packet: Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        if self.send_queue.packets.len() >= self.send_queue.config.capacity_packets {
            pool.recycle(packet);
            return drops.record(
                now,
                DropReason::SendQueueFull,
                &"every path is full and the send queue too",
            );
        }
        self.counters.queued += 1;
        self.send_queue.push_back(now, packet);
    }

    /// Sends queued packets while paths have room; drops those that waited too long.
    pub(super) fn drain_send_queue(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        if !self.drain_resend_queue(now, pool, drops, out) {
            return;
        }
        while let Some((queued_at, _)) = self.send_queue.packets.front() {
            let sojourn = now.saturating_duration_since(*queued_at);
            let queued = self.send_queue.packets.len();
            let config = self.send_queue.config;
            let over_limit = sojourn >= config.max_sojourn;
            // While a path is still in slow start with its window full, the queue is
            // its ramp-up, not the tunnel's capacity: a drop now would make the inner
            // flow leave its own slow start at a fraction of what the paths can carry.
            let path_timeout = self.settings.path_timeout;
            let ramping_up = self
                .paths
                .iter()
                .any(|path| path.still_growing(now, path_timeout));
            let codel = self
                .send_queue
                .codel
                .get_or_insert_with(|| CoDel::new(config.codel, now));
            if ramping_up {
                codel.forget_standing_queue();
            }
            if over_limit || (!ramping_up && codel.should_drop(now, sojourn, queued)) {
                if let Some((_, packet)) = self.send_queue.pop_front() {
                    pool.recycle(packet);
                }
                let (reason, detail) = if over_limit {
                    (
                        DropReason::SendQueueSojourn,
                        "packet waited too long for a free path",
                    )
                } else {
                    (
                        DropReason::SendQueueAqm,
                        "standing send queue: dropped to slow the inner flow",
                    )
                };
                drops.record(now, reason, &detail);
                continue;
            }
            let Some((queued_at, packet)) = self.send_queue.pop_front() else {
                break;
            };
            let seq = self.next_seq;
            match self.place(now, packet, seq, None, false, pool, out) {
                Placement::Sent => self.next_seq = seq.next(),
                Placement::Held(packet) => {
                    self.send_queue.push_front(queued_at, packet);
                    break;
                }
            }
        }
        if self.send_queue.packets.is_empty() {
            if let Some(codel) = &mut self.send_queue.codel {
                codel.forget_standing_queue();
            }
        }
    }

    /// Sends the lost packets waiting for a window, oldest first; those that waited
    /// longer than the receiver holds a gap are given up. True when the queue is
    /// empty afterwards, so new packets may follow.
    fn drain_resend_queue(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) -> bool {
        let useful_for = self.settings.reorder.max_hold;
        while let Some((queued_at, seq, packet)) = self.resend_queue.packets.pop_front() {
            if now.saturating_duration_since(queued_at) >= useful_for {
                pool.recycle(packet);
                drops.record(
                    now,
                    DropReason::ResendExpired,
                    &"a lost packet waited for a window longer than the receiver waits for it",
                );
                self.give_up(seq);
                continue;
            }
            match self.place(now, packet, seq, None, false, pool, out) {
                Placement::Sent => self.counters.reinjected += 1,
                Placement::Held(packet) => {
                    self.resend_queue
                        .packets
                        .push_front((queued_at, seq, packet));
                    break;
                }
            }
        }
        self.send_given_up(now, pool, out);
        self.resend_queue.packets.is_empty()
    }

    /// When the head of the send queue must be looked at again: when a pacer lets
    /// it go, or when it has waited too long.
    pub(super) fn send_queue_deadline(&self) -> Option<Instant> {
        let resend_expiry = self
            .resend_queue
            .packets
            .front()
            .map(|(queued_at, _, _)| *queued_at + self.settings.reorder.max_hold);
        let send_expiry = self
            .send_queue
            .packets
            .front()
            .map(|(queued_at, _)| *queued_at + self.send_queue.config.max_sojourn);
        let expiry = match (resend_expiry, send_expiry) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let pacing = self
            .paths
            .iter()
            .filter_map(|path| path.pacing_ready_at())
            .min();
        Some(pacing.map_or(expiry, |at| at.min(expiry)))
    }

    /// Fills the scheduler's views, without the path `exclude` (the one that lost a
    /// re-sent packet); an urgent re-send ignores windows and pacing (see [`Resend`]).
    fn refresh_views(
        &mut self,
        now: Instant,
        len: usize,
        exclude: Option<PathId>,
        ignore_windows: bool,
    ) {
        self.views.clear();
        let path_timeout = self.settings.path_timeout;
        for path in &mut self.paths {
            if Some(path.id) == exclude {
                continue;
            }
            let mut view = path.view(now, path_timeout, len);
            if ignore_windows {
                view.cwnd_bytes = None;
                view.pacing_ready = true;
            }
            self.views.push(view);
        }
    }

    /// Asks the scheduler for a path and sends the inner packet (at HEADROOM in
    /// `packet`) under `seq`; hands the packet back when no path can take it now.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        now: Instant,
        packet: Packet,
        seq: SeqNo,
        exclude: Option<PathId>,
        ignore_windows: bool,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) -> Placement {
        self.refresh_views(now, packet.len(), exclude, ignore_windows);
        let info = PacketInfo {
            len: packet.len(),
            class: classify(packet.bytes()),
            queued_bytes: self.send_queue.bytes,
        };
        let duplicate = info.class == PacketClass::Control
            && self.settings.duplicate_latency_critical
            && exclude.is_none();
        let fastest = if duplicate {
            latency_critical_paths(&self.views, info.len)
        } else {
            PathSet::EMPTY
        };
        let pick = match fastest.iter().next() {
            Some(only) if fastest.len() == 1 => Pick::One(only),
            Some(_) => Pick::Many(fastest),
            None => match self.scheduler.pick(now, &info, &self.views) {
                // A re-sent packet goes once: copies of copies of a packet lost to
                // congestion would multiply with every loss.
                Pick::Many(set) if exclude.is_some() => {
                    set.iter().next().map_or(Pick::Hold, Pick::One)
                }
                pick => pick,
            },
        };
        match pick {
            Pick::One(id) => match self.path_index(id) {
                Some(index) => {
                    let outgoing = self.seal_data(now, index, seq, packet);
                    self.scheduler.on_sent(now, id, outgoing.packet.len());
                    out.push(outgoing);
                    Placement::Sent
                }
                None => Placement::Held(packet),
            },
            Pick::Many(set) => {
                // Every copy gets its own nonce and path packet number; the receiver
                // delivers whichever arrives first and drops the others as duplicates.
                let mut original = Some(packet);
                let mut copies_sent = 0u64;
                let last = set
                    .iter()
                    .filter(|id| self.path_index(*id).is_some())
                    .last();
                for id in set.iter() {
                    let Some(index) = self.path_index(id) else {
                        continue;
                    };
                    let copy = if Some(id) == last {
                        original.take()
                    } else {
                        original.as_ref().map(|source| {
                            let mut copy = pool.take();
                            let bytes = source.bytes();
                            copy.buffer_mut()[HEADROOM..HEADROOM + bytes.len()]
                                .copy_from_slice(bytes);
                            copy.set_range(HEADROOM, HEADROOM + bytes.len());
                            copy
                        })
                    };
                    if let Some(copy) = copy {
                        let outgoing = self.seal_data(now, index, seq, copy);
                        self.scheduler.on_sent(now, id, outgoing.packet.len());
                        out.push(outgoing);
                        copies_sent += 1;
                    }
                }
                // Every copy after the first is a duplicate.
                self.counters.duplicated += copies_sent.saturating_sub(1);
                match original {
                    Some(unsent) => Placement::Held(unsent),
                    None => Placement::Sent,
                }
            }
            Pick::Hold => Placement::Held(packet),
        }
    }

    /// Writes acknowledgement frames for every path with something to acknowledge into
    /// `out`, as many as fit; returns the bytes written.
    fn write_ack_frames(&mut self, now: Instant, out: &mut [u8]) -> usize {
        let mut written = 0;
        for path in &mut self.paths {
            if out.len() - written < MIN_ACK_FRAME || !path.acks.has_unacked() {
                continue;
            }
            let Some(summary) = path.acks.take_ack(now) else {
                continue;
            };
            path.ack_immediately = false;
            let delay_us = summary.ack_delay.as_micros().min(u128::from(u32::MAX)) as u32;
            if let Ok(len) = wire::write_ack_frame(
                &mut out[written..],
                path.id.0,
                delay_us,
                summary.largest_owd_raw_us,
                summary.ranges.iter(),
            ) {
                written += len;
            }
        }
        written
    }

    /// Seals the inner packet in `packet` (at HEADROOM) for path `index` in place,
    /// piggybacking acknowledgements in the headroom when the path MTU leaves room.
    fn seal_data(
        &mut self,
        now: Instant,
        index: usize,
        seq: SeqNo,
        mut packet: Packet,
    ) -> Outgoing {
        let inner_start = packet.start();
        let inner_end = inner_start + packet.len();
        let room = MAX_PIGGYBACK.min(
            self.settings
                .max_inner_len
                .saturating_sub(packet.len() + PIGGYBACK_LEN_FIELD),
        );
        let acks_pending =
            room >= MIN_ACK_FRAME && self.paths.iter().any(|path| path.acks.has_unacked());
        let frames_len = if acks_pending {
            // Written aside first: their length decides where in the headroom they start.
            let mut frames = [0u8; MAX_PIGGYBACK];
            let len = self.write_ack_frames(now, &mut frames[..room]);
            packet.buffer_mut()[inner_start - len..inner_start].copy_from_slice(&frames[..len]);
            len
        } else {
            0
        };
        let (packet_type, meta_start) = if frames_len > 0 {
            self.counters.piggybacked_acks += 1;
            let frames_start = inner_start - frames_len;
            packet.buffer_mut()[frames_start - PIGGYBACK_LEN_FIELD..frames_start]
                .copy_from_slice(&(frames_len as u16).to_be_bytes());
            (
                PacketType::DataWithFrames,
                frames_start - PIGGYBACK_LEN_FIELD - DATA_META_LEN,
            )
        } else {
            (PacketType::Data, inner_start - DATA_META_LEN)
        };
        let packet_number = self.paths[index].take_packet_number();
        let meta = DataMeta {
            path_pn: packet_number,
            tx_time_us: self.timestamp_us(now),
            seq: seq.0,
        };
        let (header, counter) = self.header(packet_type, self.paths[index].id);
        let start = meta_start - TRANSPORT_HEADER_LEN;
        let buf = packet.buffer_mut();
        buf[start..meta_start].copy_from_slice(&header);
        meta.emit(
            (&mut buf[meta_start..meta_start + DATA_META_LEN])
                .try_into()
                .expect("data metadata is 12 bytes"),
        );
        let tag = self
            .keys
            .send
            .seal_in_place(&header, counter, &mut buf[meta_start..inner_end]);
        buf[inner_end..inner_end + TAG_LEN].copy_from_slice(&tag);
        packet.set_range(start, inner_end + TAG_LEN);
        let backlog = !self.send_queue.packets.is_empty();
        let path = &mut self.paths[index];
        path.on_sent(now, packet_number, packet.len(), Some(seq.0), true, backlog);
        Outgoing {
            socket: path.socket,
            destination: path
                .remote
                .expect("only paths with an address are scheduled"),
            source_ip: path.local_ip,
            path: path.id,
            keep_as: Some(KeepAs {
                session: self.local_id,
                packet_number,
            }),
            packet,
        }
    }

    /// Builds a control datagram on path `index` whose frames `write` puts into the
    /// buffer it is given (returning their length). Pings and goodbyes elicit an
    /// acknowledgement and are tracked by the path's probe; acknowledgement-only
    /// datagrams are not, and take no packet number.
    fn control(
        &mut self,
        now: Instant,
        index: usize,
        eliciting: bool,
        pool: &mut BufferPool,
        write: impl FnOnce(&mut Self, &mut [u8]) -> usize,
    ) -> Option<Outgoing> {
        let destination = self.paths[index].remote?;
        let mut packet = pool.take();
        let frames_start = TRANSPORT_HEADER_LEN + CONTROL_META_LEN;
        let limit = (frames_start + self.settings.max_inner_len).min(packet.capacity() - TAG_LEN);
        let frames_len = write(self, &mut packet.buffer_mut()[frames_start..limit]);
        if frames_len == 0 {
            pool.recycle(packet);
            return None;
        }
        let path = &mut self.paths[index];
        let packet_number = if eliciting {
            path.take_packet_number()
        } else {
            path.peek_packet_number()
        };
        let path_id = path.id;
        let meta = ControlMeta {
            path_pn: packet_number,
            tx_time_us: self.timestamp_us(now),
        };
        let (header, counter) = self.header(PacketType::Control, path_id);
        let buf = packet.buffer_mut();
        buf[..TRANSPORT_HEADER_LEN].copy_from_slice(&header);
        meta.emit(
            (&mut buf[TRANSPORT_HEADER_LEN..frames_start])
                .try_into()
                .expect("control metadata is 8 bytes"),
        );
        let body_end = frames_start + frames_len;
        let tag = self.keys.send.seal_in_place(
            &header,
            counter,
            &mut buf[TRANSPORT_HEADER_LEN..body_end],
        );
        buf[body_end..body_end + TAG_LEN].copy_from_slice(&tag);
        packet.set_range(0, body_end + TAG_LEN);
        let path = &mut self.paths[index];
        path.on_sent(now, packet_number, packet.len(), None, eliciting, false);
        Some(Outgoing {
            socket: path.socket,
            destination,
            source_ip: path.local_ip,
            path: path_id,
            keep_as: None,
            packet,
        })
    }

    /// Sends the acknowledgements that could not wait for reverse data, in one
    /// datagram on the path the peer was heard on most recently: a receiver with
    /// nothing in flight cannot tell a dead path by its own losses, and acknowledgements
    /// sent into one would make every path look dead to the sender.
    pub(super) fn send_due_acks(
        &mut self,
        now: Instant,
        force: bool,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) {
        let due = self
            .paths
            .iter()
            .any(|path| path.ack_immediately || path.acks.ack_due(now))
            || (force && self.paths.iter().any(|path| path.acks.has_unacked()));
        if !due {
            return;
        }
        let Some(index) = self.feedback_path(now) else {
            return;
        };
        if let Some(outgoing) = self.control(now, index, false, pool, |session, buf| {
            session.write_ack_frames(now, buf)
        }) {
            self.counters.standalone_acks += 1;
            out.push(outgoing);
        }
    }

    /// The path for feedback to the peer: an Up one heard from most recently.
    fn feedback_path(&self, now: Instant) -> Option<usize> {
        let path_timeout = self.settings.path_timeout;
        (0..self.paths.len())
            .filter(|&i| self.paths[i].remote.is_some() && self.paths[i].socket_open)
            .max_by_key(|&i| {
                let path = &self.paths[i];
                (
                    path.scheduler_state(now, path_timeout) == mptund_sched::PathState::Up,
                    path.last_received,
                )
            })
    }

    /// Pings the paths that are due a keepalive or a liveness probe, within each
    /// path's probe budget.
    pub(super) fn send_probes(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) {
        for index in 0..self.paths.len() {
            let path = &mut self.paths[index];
            if !path.socket_open || now < path.next_keepalive(self.established) {
                continue;
            }
            path.last_probe = Some(now);
            if !path.spend_probe_budget(now, PING_WIRE_COST) {
                tracing::debug!(path = %path.name, "probe skipped: budget spent");
                continue;
            }
            self.ping(now, index, pool, out);
        }
    }

    /// Sends one ping on path `index`: it elicits an immediate acknowledgement.
    pub(super) fn ping(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) {
        let ping_id = self.next_ping_id;
        self.next_ping_id = self.next_ping_id.wrapping_add(1);
        let write = |_: &mut Self, buf: &mut [u8]| {
            wire::write_frame(buf, &Frame::Ping { ping_id }).unwrap_or(0)
        };
        if let Some(outgoing) = self.control(now, index, true, pool, write) {
            out.push(outgoing);
            let probe = &mut self.paths[index].probe;
            if probe.liveness() == mptund_probe::Liveness::Down {
                probe.start_probing(now);
            }
        }
    }

    /// Builds a goodbye for every path that has an address.
    pub(super) fn close(&mut self, now: Instant, pool: &mut BufferPool, out: &mut Vec<Outgoing>) {
        for index in 0..self.paths.len() {
            if self.paths[index].socket_open {
                out.extend(self.control(now, index, true, pool, |_, buf| {
                    wire::write_frame(buf, &Frame::Close).unwrap_or(0)
                }));
            }
        }
    }

    /// Re-sends the data datagrams path `index` declared lost (in `self.lost`).
    pub(super) fn reinject_lost(
        &mut self,
        now: Instant,
        index: usize,
        urgency: Resend,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        let lost = std::mem::take(&mut self.lost);
        for packet in &lost {
            let Some(seq) = packet.seq else {
                continue;
            };
            let Some(kept) = self.paths[index].take_kept(packet.pn, pool) else {
                continue;
            };
            if !self.reinject(now, index, kept, urgency, pool, out) {
                drops.record(
                    now,
                    DropReason::NoUsablePath,
                    &"no other path to re-send a lost packet on",
                );
                self.give_up(SeqNo(seq));
            }
        }
        self.lost = lost;
        self.lost.clear();
        self.send_given_up(now, pool, out);
    }

    /// Remembers that `seq` will never be sent again, to tell the receiver.
    fn give_up(&mut self, seq: SeqNo) {
        if let Some((first, count)) = self.given_up.last_mut() {
            if first.add(u32::from(*count)) == seq && *count < u16::MAX {
                *count += 1;
                return;
            }
        }
        // Bounded: if the receiver is not told, it waits out its hold instead.
        if self.given_up.len() < MAX_GIVEN_UP_RUNS {
            self.given_up.push((seq, 1));
        }
    }

    /// Tells the receiver which sequence numbers it need not wait for, in one control
    /// datagram on the path it was heard on most recently. Not acknowledged or
    /// repeated: if it is lost, the receiver's hold runs out as it would have anyway.
    fn send_given_up(&mut self, now: Instant, pool: &mut BufferPool, out: &mut Vec<Outgoing>) {
        if self.given_up.is_empty() {
            return;
        }
        let Some(index) = self.feedback_path(now) else {
            self.given_up.clear();
            return;
        };
        let runs = std::mem::take(&mut self.given_up);
        let write = |_: &mut Self, buf: &mut [u8]| {
            let mut written = 0;
            for &(first, count) in &runs {
                let frame = Frame::GaveUp {
                    first_seq: first.0,
                    count,
                };
                match wire::write_frame(&mut buf[written..], &frame) {
                    Ok(len) => written += len,
                    Err(_) => break,
                }
            }
            written
        };
        out.extend(self.control(now, index, false, pool, write));
        self.given_up = runs;
        self.given_up.clear();
    }

    /// Path `index` went quiet for longer than its RTT explains: copies of what it has
    /// in flight go out on the other paths now, rather than after it is declared down.
    /// The inner TCP sees a gap of about two probe timeouts instead of four; if the
    /// path was only hiccuping, the receiver drops whichever copy comes second.
    pub(super) fn reinject_copies(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) {
        let mut copies = std::mem::take(&mut self.copies);
        self.paths[index].copy_uncopied(pool, &mut copies);
        for copy in copies.drain(..) {
            // A copy that finds no path is no loss: the original is still in flight.
            self.reinject(now, index, copy, Resend::Urgent, pool, out);
        }
        self.copies = copies;
    }

    /// Path `index` went down: everything still in flight on it moves elsewhere.
    pub(super) fn reinject_everything_in_flight(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        self.lost.clear();
        self.paths[index].probe.drain_in_flight(&mut self.lost);
        self.reinject_lost(now, index, Resend::Urgent, pool, drops, out);
        self.paths[index].recycle_in_flight(pool);
    }

    /// Opens a datagram this side sealed for path `from`, and sends its inner packet
    /// again under the same sequence number on another path, or queues it for the
    /// next free window ([`Resend::InTurn`]); false when it can go nowhere (the packet
    /// is recycled).
    fn reinject(
        &mut self,
        now: Instant,
        from: usize,
        mut sealed: Packet,
        urgency: Resend,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) -> bool {
        let Ok(header) = TransportHeader::parse(sealed.bytes()) else {
            pool.recycle(sealed);
            return false;
        };
        let start = sealed.start();
        let end = start + sealed.len();
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes.copy_from_slice(&sealed.bytes()[..TRANSPORT_HEADER_LEN]);
        let plaintext_len = match self.keys.resend.open_in_place(
            &header_bytes,
            header.counter,
            &mut sealed.buffer_mut()[start + TRANSPORT_HEADER_LEN..end],
        ) {
            Ok(plaintext) => plaintext.len(),
            Err(_) => {
                pool.recycle(sealed);
                return false;
            }
        };
        let plaintext_start = start + TRANSPORT_HEADER_LEN;
        let plaintext = &sealed.buffer_mut()[plaintext_start..plaintext_start + plaintext_len];
        let Ok(meta) = DataMeta::parse(plaintext) else {
            pool.recycle(sealed);
            return false;
        };
        let inner = match header.packet_type {
            PacketType::DataWithFrames => {
                match wire::split_piggybacked(&plaintext[DATA_META_LEN..]) {
                    Ok((_, inner)) => inner.len(),
                    Err(_) => {
                        pool.recycle(sealed);
                        return false;
                    }
                }
            }
            _ => plaintext_len - DATA_META_LEN,
        };
        // The inner packet ends where the plaintext ends; move it back to HEADROOM so it
        // is sealed again like any packet from the TUN.
        let inner_end = plaintext_start + plaintext_len;
        sealed
            .buffer_mut()
            .copy_within(inner_end - inner..inner_end, HEADROOM);
        sealed.set_range(HEADROOM, HEADROOM + inner);
        self.paths[from].reinjected_away += 1;
        let exclude = Some(self.paths[from].id);
        let seq = SeqNo(meta.seq);
        let urgent = urgency == Resend::Urgent;
        match self.place(now, sealed, seq, exclude, urgent, pool, out) {
            Placement::Sent => {
                self.counters.reinjected += 1;
                true
            }
            Placement::Held(packet) if !urgent && self.has_other_usable_path(now, from) => {
                if self.resend_queue.packets.len() >= ResendQueue::CAPACITY {
                    pool.recycle(packet);
                    return false;
                }
                self.resend_queue.packets.push_back((now, seq, packet));
                true
            }
            Placement::Held(packet) => {
                pool.recycle(packet);
                false
            }
        }
    }

    /// Whether a path other than `index` is Up: a queued re-send can only go there.
    fn has_other_usable_path(&self, now: Instant, index: usize) -> bool {
        let path_timeout = self.settings.path_timeout;
        self.paths.iter().enumerate().any(|(other, path)| {
            other != index && path.scheduler_state(now, path_timeout) == mptund_sched::PathState::Up
        })
    }

    /// Takes back a sent datagram: data is kept until acknowledged, the rest recycled.
    pub fn on_transmitted(&mut self, outgoing: Outgoing, pool: &mut BufferPool) {
        match (outgoing.keep_as, self.path_index(outgoing.path)) {
            (Some(keep_as), Some(index)) => {
                self.paths[index].keep(keep_as.packet_number, outgoing.packet)
            }
            _ => pool.recycle(outgoing.packet),
        }
    }
}
