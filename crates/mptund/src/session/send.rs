//! The sending half of a session: inner packets are scheduled onto paths, sealed in
//! place (with acknowledgements for the peer piggybacked when there is room), paced,
//! queued briefly when every path is full, and re-sent on another path when the path
//! they took loses them or goes down.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_sched::{
    latency_critical_paths, repair_pick, PacketClass, PacketInfo, PathId, PathSet, PathState,
    PathView, Pick, Scheduler, SeqNo,
};

use super::classify::classify;
use super::path::ForwardDelayReference;
use super::{refuse, Outgoing, Session, SessionPath, Unsealed};
use crate::buffers::{BufferPool, Packet, MAX_PIGGYBACK};
use crate::counters::{DropCounters, DropReason};
use crate::wire::{
    self, ControlMeta, DataMeta, Frame, PacketType, TransportLayout, CONTROL_META_LEN,
    DATA_META_LEN, PARITY_META_LEN, PIGGYBACK_LEN_FIELD,
};

/// What one ping costs on the wire: IPv4 and UDP headers, transport header, control
/// metadata, a Ping frame and the tag (a metered contract counts every byte).
pub(super) const PING_WIRE_COST: usize = IPV4_UDP_HEADERS_LEN
    + TransportLayout::control(wire::FRAME_HEADER_LEN + wire::PING_BODY_LEN).datagram_len();
/// The outer IPv4 (20) and UDP (8) headers.
const IPV4_UDP_HEADERS_LEN: usize = 20 + 8;

/// How recently a path must have been heard from to carry news of a loss: a loaded
/// path is heard from every millisecond or so, and one that died is out of the running
/// this long after its last datagram.
const FEEDBACK_HEARD_LATELY: Duration = Duration::from_millis(20);
/// The smallest Ack frame: header, fixed fields and one range.
const MIN_ACK_FRAME: usize = wire::FRAME_HEADER_LEN + wire::ACK_FIXED_LEN + wire::ACK_RANGE_LEN;

/// Which paths a packet may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// A new inner packet: as the scheduler decides, within the windows.
    New,
    /// A new inner packet while a repair waits first in line for this path: as the
    /// scheduler decides among the other paths. The scheduler still sees this one,
    /// unable to send, so a path that would deliver after the receiver gave up waiting
    /// for it is not used (see `EarliestArrival`'s reorder window).
    NewBesides(PathId),
    /// A packet sent again: on one path only, the one that delivers it first
    /// (`repair_pick`), not on `avoid` (a path that died or went quiet), and past the
    /// windows if `urgent` (see `resend::Resend`).
    Again { avoid: Option<PathId>, urgent: bool },
}

impl Route {
    fn is_new(self) -> bool {
        matches!(self, Route::New | Route::NewBesides(_))
    }
}

/// What the scheduler's views show while a run of placements lasts: a run is
/// placements at one instant with nothing but themselves changing the paths in
/// between (a drain of the queues, a batch from the TUN). The views are built in full
/// for its first packet; after that only the paths a placement sent on are looked at
/// again: with three paths a third of the views' work per packet, with eight an
/// eighth.
#[derive(Clone, Copy, Debug)]
pub(super) struct ViewsShown {
    now: Instant,
    len: usize,
    route: Route,
    /// Paths sent on since the views were built.
    changed: PathSet,
}

/// Where an inner packet goes and under which sequence number.
pub(super) enum Placement {
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
    ) {
        self.sender.views_shown = None;
        self.send_inner_in_run(now, packet, pool, drops);
    }

    /// [`Session::send_inner`] for the next packet of a batch read from the TUN at
    /// `now`, with no other call into the session since the previous one: the run of
    /// placements goes on (see [`ViewsShown`]).
    pub fn send_next_inner(
        &mut self,
        now: Instant,
        packet: Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        self.send_inner_in_run(now, packet, pool, drops);
    }

    fn send_inner_in_run(
        &mut self,
        now: Instant,
        packet: Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        if packet.len() > self.max_inner_len() {
            let len = packet.len();
            let detail = format_args!("packet of {len} bytes from the TUN exceeds its MTU");
            return refuse(pool, drops, packet, now, DropReason::Oversize, &detail);
        }
        // Every packet is recorded, so that a later copy of it is known for one.
        let retransmission = self
            .sender
            .send_queue
            .tcp_flows
            .is_retransmission(packet.bytes());
        // A new packet is a buffer more, waiting or kept for repair: within the
        // session's share of the memory budget, as queued ones are (`enqueue`).
        if self.at_buffer_limit() {
            let detail = "the session holds its share of the memory budget";
            return refuse(pool, drops, packet, now, DropReason::MemoryBudget, &detail);
        }
        if self.sender.send_queue.packets.is_empty() && self.sender.resend_queue.packets.is_empty()
        {
            let seq = self.sender.next_seq;
            match self.place(now, packet, seq, Route::New, pool) {
                Placement::Sent => self.sender.next_seq = seq.next(),
                Placement::Held(packet) => self.enqueue(now, packet, retransmission, pool, drops),
            }
        } else {
            self.enqueue(now, packet, retransmission, pool, drops);
            self.drain_send_queue_in_run(now, pool, drops);
        }
    }

    /// Fills the scheduler's views of the paths `route` allows; an urgent re-send
    /// sees no windows and no pacing, and a path a repair waits for is shown unable to
    /// send. Within a run of placements for the same instant, length and route, only
    /// the views of the paths sent on since are built again.
    fn refresh_views(&mut self, now: Instant, len: usize, route: Route) {
        let shown = self
            .sender
            .views_shown
            .filter(|shown| shown.now == now && shown.len == len && shown.route == route);
        self.sender.views_shown = Some(ViewsShown {
            now,
            len,
            route,
            changed: PathSet::EMPTY,
        });
        if shown.is_some_and(|shown| shown.changed.is_empty()) {
            return;
        }
        let path_timeout = self.settings.path_timeout;
        let reference = self.forward_delay_reference();
        match shown {
            Some(shown) => {
                for id in shown.changed.iter() {
                    let Some(path) = self.paths.iter_mut().find(|path| path.id == id) else {
                        continue;
                    };
                    let view = path.view(now, path_timeout, len, reference);
                    if let Some(slot) = self.sender.views.iter_mut().find(|v| v.id == id) {
                        *slot = shown_to_scheduler(view, route);
                    }
                }
            }
            None => {
                self.sender.views.clear();
                let avoid = match route {
                    Route::Again { avoid, .. } => avoid,
                    Route::New | Route::NewBesides(_) => None,
                };
                for path in &mut self.paths {
                    if Some(path.id) == avoid {
                        continue;
                    }
                    let view = path.view(now, path_timeout, len, reference);
                    self.sender.views.push(shown_to_scheduler(view, route));
                }
            }
        }
    }

    /// What the paths' forward delays are measured against: the path with the smallest
    /// minimum RTT, half of which is both its forward delay and the fastest return of
    /// an acknowledgement. Half a path's own minimum would put a GEO satellite behind 5G
    /// (280 ms forward, 8 ms back) at 144 ms instead of 280.
    fn forward_delay_reference(&self) -> ForwardDelayReference {
        let fastest = self
            .paths
            .iter()
            .filter_map(|path| Some((path.probe.rtt.min()?, path)))
            .min_by_key(|&(min_rtt, _)| min_rtt);
        ForwardDelayReference {
            fastest_half_rtt: fastest.map_or(Duration::ZERO, |(min_rtt, _)| min_rtt / 2),
            base_owd_raw_us: fastest.and_then(|(_, path)| path.probe.base_owd_raw_us()),
        }
    }

    /// Asks the scheduler for a path and sends the inner packet (at HEADROOM in
    /// `packet`) under `seq`; hands the packet back when no path can take it now.
    pub(super) fn place(
        &mut self,
        now: Instant,
        packet: Packet,
        seq: SeqNo,
        route: Route,
        pool: &mut BufferPool,
    ) -> Placement {
        self.refresh_views(now, packet.len(), route);
        let info = PacketInfo {
            len: packet.len(),
            class: classify(packet.bytes()),
            queued_bytes: self.sender.send_queue.bytes,
        };
        let duplicate = info.class == PacketClass::Control
            && self.settings.duplicate_latency_critical
            && route.is_new();
        let fastest = if duplicate {
            latency_critical_paths(&self.sender.views, info.len)
        } else {
            PathSet::EMPTY
        };
        let pick = match fastest.iter().next() {
            Some(only) if fastest.len() == 1 => Pick::One(only),
            Some(_) => Pick::Many(fastest),
            // A re-sent packet goes once, where it arrives first: the receiver's whole
            // stream waits for it.
            None if !route.is_new() => repair_pick(&self.sender.views, info.len),
            None => self.sender.scheduler.pick(now, &info, &self.sender.views),
        };
        match pick {
            Pick::One(id) => match self.path_index(id) {
                Some(index) => {
                    self.send_data(now, index, seq, packet);
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
                    } else if self.at_buffer_limit() {
                        // A copy is a buffer more; the original still goes.
                        None
                    } else {
                        original
                            .as_ref()
                            .and_then(|source| pool.take_copy_of(source))
                    };
                    if let Some(copy) = copy {
                        self.send_data(now, index, seq, copy);
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

    /// Assigns the inner packet to path `index` under `seq`: the scheduler, the
    /// window and the pacer count it now; it waits for the path's socket unsealed and
    /// takes its packet number and send time when the socket takes it
    /// ([`Session::seal_data`]).
    fn send_data(&mut self, now: Instant, index: usize, seq: SeqNo, packet: Packet) {
        let path = &mut self.paths[index];
        let assigned_len = TransportLayout::data(0, packet.len()).datagram_len();
        path.on_data_assigned(now, assigned_len);
        if let Some(shown) = &mut self.sender.views_shown {
            shown.changed.insert(path.id);
        }
        self.sender.scheduler.on_sent(now, path.id, assigned_len);
        #[allow(
            clippy::expect_used,
            reason = "a path without an address is down to the scheduler (SessionPath::scheduler_state)"
        )]
        let destination = path
            .remote
            .expect("only paths with an address are scheduled");
        self.outbox.push(Outgoing {
            socket: path.socket,
            destination,
            source_ip: path.local_ip,
            path: path.id,
            owner: self.local_id,
            packet,
            unsealed: Some(Unsealed::Data { seq }),
        });
    }

    /// Sends the parity of path `index`'s block on that path, behind its members. Like
    /// an acknowledgement it takes no packet number and no room in the window, and it
    /// is never acknowledged: a few percent on top of what the window lets through.
    fn send_parity(&mut self, now: Instant, index: usize, pool: &mut BufferPool) {
        let path = &mut self.paths[index];
        let (Some(encoder), Some(destination)) = (&mut path.parity, path.remote) else {
            return;
        };
        let payload = encoder.payload();
        let layout = TransportLayout::parity(payload.len());
        let mut packet = pool.take();
        let Some(datagram) = packet.buffer_mut().get_mut(..layout.datagram_len()) else {
            encoder.clear();
            return pool.recycle(packet);
        };
        datagram[layout.payload()].copy_from_slice(payload);
        let mut meta = [0u8; PARITY_META_LEN];
        encoder.meta().emit(&mut meta);
        datagram[layout.meta()].copy_from_slice(&meta);
        encoder.clear();
        let path_id = path.id;
        self.keys
            .seal(PacketType::Parity, path_id.0, &layout, datagram);
        packet.set_range(0, layout.datagram_len());
        let path = &mut self.paths[index];
        let packet_number = path.peek_packet_number();
        path.on_sent(now, packet_number, packet.len(), None, false, false);
        self.counters.parity_sent += 1;
        self.outbox.push(Outgoing {
            socket: path.socket,
            destination,
            source_ip: path.local_ip,
            path: path_id,
            owner: self.local_id,
            packet,
            unsealed: None,
        });
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

    /// Seals the inner packet `packet` for path `index` under `seq` onto the end of
    /// `buffer`, as the path's socket takes it: the packet number, the send time and
    /// the probe's record are taken now. Acknowledgements for the peer ride along if
    /// `piggyback` and the path MTU leaves room. The path keeps `packet` itself, in
    /// the clear, until it is acknowledged: a loss is sealed again from it. A parity
    /// datagram the packet completes (or whose block it cannot join) goes into the
    /// outbox, to follow it. Returns the datagram's length.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn seal_data(
        &mut self,
        now: Instant,
        index: usize,
        seq: SeqNo,
        packet: Packet,
        buffer: &mut Vec<u8>,
        piggyback: bool,
        pool: &mut BufferPool,
    ) -> usize {
        let assigned_len = TransportLayout::data(0, packet.len()).datagram_len();
        // A block whose span the next packet number leaves (pings took numbers in
        // between) gets its parity now, before the packet that would not fit.
        let next = self.paths[index].peek_packet_number();
        if self.paths[index]
            .parity
            .as_ref()
            .is_some_and(|encoder| encoder.count() > 0 && !encoder.fits(next))
        {
            self.send_parity(now, index, pool);
        }
        let room = MAX_PIGGYBACK.min(
            self.settings
                .max_inner_len
                .saturating_sub(packet.len() + PIGGYBACK_LEN_FIELD),
        );
        let mut frames = [0u8; MAX_PIGGYBACK];
        let frames_len = if piggyback
            && room >= MIN_ACK_FRAME
            && self.paths.iter().any(|path| path.acks.has_unacked())
        {
            self.write_ack_frames(now, &mut frames[..room])
        } else {
            0
        };
        if frames_len > 0 {
            self.counters.piggybacked_acks += 1;
        }
        let layout = TransportLayout::data(frames_len, packet.len());
        let start = buffer.len();
        buffer.resize(start + layout.datagram_len(), 0);
        let datagram = &mut buffer[start..];
        let packet_number = self.paths[index].take_packet_number();
        let max_inner_len = self.settings.max_inner_len;
        let parity_due = self.settings.parity_on_lossy_paths
            && self.paths[index].add_to_parity(packet_number, seq.0, packet.bytes(), max_inner_len);
        let meta = DataMeta {
            path_pn: packet_number,
            tx_time_us: self.timestamp_us(now),
            seq: seq.0,
        };
        let mut meta_bytes = [0u8; DATA_META_LEN];
        meta.emit(&mut meta_bytes);
        datagram[layout.meta()].copy_from_slice(&meta_bytes);
        datagram[layout.frames_len_field()]
            .copy_from_slice(&layout.frames_len_bytes()[..layout.frames_len_field().len()]);
        datagram[layout.frames()].copy_from_slice(&frames[..frames_len]);
        datagram[layout.payload()].copy_from_slice(packet.bytes());
        let path_id = self.paths[index].id;
        self.keys
            .seal(layout.data_type(), path_id.0, &layout, datagram);
        let backlog = !self.sender.send_queue.packets.is_empty();
        let path = &mut self.paths[index];
        path.on_data_sealed(
            now,
            packet_number,
            layout.datagram_len(),
            assigned_len,
            seq.0,
            backlog,
        );
        path.keep(packet_number, seq, packet);
        if parity_due {
            self.send_parity(now, index, pool);
        }
        layout.datagram_len()
    }

    /// Builds a control datagram on path `index` whose frames `write` puts into the
    /// buffer it is given (returning their length), sealed when its socket takes it.
    /// Pings and goodbyes elicit an acknowledgement and are tracked by the path's
    /// probe; acknowledgement-only datagrams are not, and take no packet number.
    pub(super) fn control(
        &mut self,
        index: usize,
        eliciting: bool,
        pool: &mut BufferPool,
        write: impl FnOnce(&mut Self, &mut [u8]) -> usize,
    ) -> Option<Outgoing> {
        let destination = self.paths[index].remote?;
        let source_ip = self.paths[index].local_ip;
        self.control_to(index, (destination, source_ip), eliciting, pool, write)
    }

    /// [`Session::control`] to `(destination, source_ip)` instead of the path's
    /// address: a candidate address that is being validated.
    pub(super) fn control_to(
        &mut self,
        index: usize,
        (destination, source_ip): (SocketAddr, Option<IpAddr>),
        eliciting: bool,
        pool: &mut BufferPool,
        write: impl FnOnce(&mut Self, &mut [u8]) -> usize,
    ) -> Option<Outgoing> {
        let mut packet = pool.take();
        let overhead = TransportLayout::control(0).datagram_len();
        let limit = self
            .settings
            .max_inner_len
            .min(packet.capacity().saturating_sub(overhead));
        let frames_len = write(self, &mut packet.buffer_mut()[..limit]);
        if frames_len == 0 {
            pool.recycle(packet);
            return None;
        }
        packet.set_range(0, frames_len);
        self.work_units += 1;
        let path = &self.paths[index];
        Some(Outgoing {
            socket: path.socket,
            destination,
            source_ip,
            path: path.id,
            owner: self.local_id,
            packet,
            unsealed: Some(Unsealed::Control { eliciting }),
        })
    }

    /// Seals the control frames in `frames` for path `index` onto the end of
    /// `buffer`, as the socket takes them: an eliciting datagram takes its packet
    /// number and send time now. Returns the datagram's length.
    pub(super) fn seal_control(
        &mut self,
        now: Instant,
        index: usize,
        frames: &[u8],
        eliciting: bool,
        buffer: &mut Vec<u8>,
    ) -> usize {
        let path = &mut self.paths[index];
        let packet_number = if eliciting {
            path.take_packet_number()
        } else {
            path.peek_packet_number()
        };
        let path_id = path.id;
        let layout = TransportLayout::control(frames.len());
        let start = buffer.len();
        buffer.resize(start + layout.datagram_len(), 0);
        let datagram = &mut buffer[start..];
        let meta = ControlMeta {
            path_pn: packet_number,
            tx_time_us: self.timestamp_us(now),
        };
        let mut meta_bytes = [0u8; CONTROL_META_LEN];
        meta.emit(&mut meta_bytes);
        datagram[layout.meta()].copy_from_slice(&meta_bytes);
        datagram[layout.payload()].copy_from_slice(frames);
        self.keys
            .seal(PacketType::Control, path_id.0, &layout, datagram);
        let path = &mut self.paths[index];
        path.on_sent(
            now,
            packet_number,
            layout.datagram_len(),
            None,
            eliciting,
            false,
        );
        layout.datagram_len()
    }

    /// Seals `outgoing`, which waited for its socket, onto the end of `buffer` (see
    /// [`super::Core::seal`]); `None` if its path is gone (the inner packet it carried
    /// is given up, the news in the outbox).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn seal(
        &mut self,
        now: Instant,
        outgoing: Outgoing,
        buffer: &mut Vec<u8>,
        piggyback: bool,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) -> Option<usize> {
        let Some(unsealed) = outgoing.unsealed else {
            return Some(append_finished(outgoing.packet, buffer, pool));
        };
        let Some(index) = self.path_index(outgoing.path) else {
            self.unsent(now, outgoing, false, pool);
            drops.record(
                now,
                crate::counters::DropReason::SendFailed,
                &"a datagram's path was removed while it waited for its socket",
            );
            return None;
        };
        let len = match unsealed {
            Unsealed::Data { seq } => {
                self.seal_data(now, index, seq, outgoing.packet, buffer, piggyback, pool)
            }
            Unsealed::Control { eliciting } => {
                let len = self.seal_control(now, index, outgoing.packet.bytes(), eliciting, buffer);
                pool.recycle(outgoing.packet);
                len
            }
        };
        Some(len)
    }

    /// Sends the acknowledgements that could not wait for reverse data, in one
    /// datagram on the path the peer was heard on most recently: a receiver with
    /// nothing in flight cannot tell a dead path by its own losses, and acknowledgements
    /// sent into one would make every path look dead to the sender.
    pub(super) fn send_due_acks(&mut self, now: Instant, force: bool, pool: &mut BufferPool) {
        let due = self
            .paths
            .iter()
            .any(|path| path.ack_immediately || path.acks.ack_due(now))
            || (force && self.paths.iter().any(|path| path.acks.has_unacked()));
        self.send_path_responses(pool);
        if !due {
            return;
        }
        let Some(index) = self.feedback_path(now) else {
            return;
        };
        if let Some(outgoing) = self.control(index, false, pool, |session, buf| {
            session.write_ack_frames(now, buf)
        }) {
            self.counters.standalone_acks += 1;
            self.outbox.push(outgoing);
        }
    }

    /// The path for feedback to the peer: the Up one heard from most recently, which
    /// spreads acknowledgements over the paths in use and keeps each one's return (and
    /// its NAT mapping) alive. News of a loss takes the shortest way to the peer among
    /// the Up paths heard from lately instead: the repair waits for it, and the receiver
    /// holds everything behind the gap meanwhile. On three lossy paths 12, 30 and 45 ms
    /// away, that cut the receiver's mean hold from 35-40 ms to 29-32. A path not heard
    /// from lately may have just died.
    pub(super) fn feedback_path(&self, now: Instant) -> Option<usize> {
        let last = self.heard_from_last(now)?;
        let path_timeout = self.settings.path_timeout;
        let up = |i: usize| self.paths[i].scheduler_state(now, path_timeout) == PathState::Up;
        let loss_news = self.paths.iter().any(|path| path.acks.reports_loss_news());
        let Some(heard_at) = self.paths[last]
            .last_received
            .filter(|_| loss_news && up(last))
        else {
            return Some(last);
        };
        let lately = heard_at
            .checked_sub(FEEDBACK_HEARD_LATELY)
            .unwrap_or(heard_at);
        (0..self.paths.len())
            .filter(|&i| up(i) && self.paths[i].last_received.is_some_and(|at| at >= lately))
            .min_by_key(|&i| self.paths[i].way_to_peer(now))
    }

    /// The path heard from most recently, Up ones first.
    fn heard_from_last(&self, now: Instant) -> Option<usize> {
        let path_timeout = self.settings.path_timeout;
        (0..self.paths.len())
            .filter(|&i| self.paths[i].remote.is_some() && self.paths[i].socket_open)
            .max_by_key(|&i| {
                let path = &self.paths[i];
                (
                    path.scheduler_state(now, path_timeout) == PathState::Up,
                    path.last_received,
                )
            })
    }

    /// When path `path` next wants a ping: a keepalive or liveness probe (client
    /// only), or a ping for its first RTT sample or its jitter.
    pub(super) fn next_ping(&self, path: &SessionPath) -> Option<Instant> {
        let keepalive = (self.sends_keepalives && path.socket_open)
            .then(|| path.next_keepalive(self.established));
        let measuring = self
            .measures_paths
            .then(|| path.next_measuring_ping(self.established))
            .flatten();
        keepalive.into_iter().chain(measuring).min()
    }

    /// Pings the paths that are due a keepalive, a liveness probe, a first RTT
    /// sample or a jitter ping, within each path's probe budget.
    pub(super) fn send_probes(&mut self, now: Instant, pool: &mut BufferPool) {
        for index in 0..self.paths.len() {
            if self
                .next_ping(&self.paths[index])
                .is_none_or(|due| now < due)
            {
                continue;
            }
            let path = &mut self.paths[index];
            path.last_probe = Some(now);
            if !path.spend_probe_budget(now, PING_WIRE_COST) {
                tracing::debug!(path = %path.name, "probe skipped: budget spent");
                continue;
            }
            path.on_ping_sent();
            self.ping(now, index, pool);
        }
    }

    /// Sends one ping on path `index`: it elicits an immediate acknowledgement.
    pub(super) fn ping(&mut self, now: Instant, index: usize, pool: &mut BufferPool) {
        let ping_id = self.next_ping_id;
        self.next_ping_id = self.next_ping_id.wrapping_add(1);
        let write = |_: &mut Self, buf: &mut [u8]| {
            wire::write_frame(buf, &Frame::Ping { ping_id }).unwrap_or(0)
        };
        if let Some(outgoing) = self.control(index, true, pool, write) {
            self.outbox.push(outgoing);
            let probe = &mut self.paths[index].probe;
            if probe.liveness() == mptund_probe::Liveness::Down {
                probe.start_probing(now);
            }
        }
    }

    /// Builds a goodbye for every path that has an address, sealed at once: the
    /// session may be gone by the time the socket takes it.
    pub(super) fn close(&mut self, now: Instant, pool: &mut BufferPool) {
        let mut sealed = Vec::new();
        for index in 0..self.paths.len() {
            if !self.paths[index].socket_open {
                continue;
            }
            let goodbye = self.control(index, true, pool, |_, buf| {
                wire::write_frame(buf, &Frame::Close).unwrap_or(0)
            });
            let Some(mut goodbye) = goodbye else {
                continue;
            };
            sealed.clear();
            self.seal_control(now, index, goodbye.packet.bytes(), true, &mut sealed);
            pool.recycle(goodbye.packet);
            let Some(packet) = pool.take_copy(&sealed) else {
                continue;
            };
            goodbye.packet = packet;
            goodbye.unsealed = None;
            self.outbox.push(goodbye);
        }
    }
}

/// Seals `outgoing` onto the end of `buffer` (see [`super::Core::seal`]) with
/// `session`, the one that produced it if it is still there: a finished datagram goes
/// as it is, an unsealed one whose session is gone is counted and dropped. What the
/// session put in its outbox meanwhile goes into `follow`.
#[allow(clippy::too_many_arguments)]
pub(super) fn seal_for(
    session: Option<&mut Session>,
    now: Instant,
    outgoing: Outgoing,
    buffer: &mut Vec<u8>,
    piggyback: bool,
    pool: &mut BufferPool,
    drops: &mut DropCounters,
    follow: &mut Vec<Outgoing>,
) -> Option<usize> {
    match session {
        Some(session) => {
            let len = session.seal(now, outgoing, buffer, piggyback, pool, drops);
            follow.append(&mut session.outbox);
            len
        }
        None if outgoing.unsealed.is_none() => Some(append_finished(outgoing.packet, buffer, pool)),
        None => {
            drops.record(
                now,
                crate::counters::DropReason::SendFailed,
                &"the session ended while a datagram waited for its socket",
            );
            pool.recycle(outgoing.packet);
            None
        }
    }
}

/// Appends a finished datagram to `buffer` and recycles its buffer; returns its length.
pub(super) fn append_finished(
    packet: Packet,
    buffer: &mut Vec<u8>,
    pool: &mut BufferPool,
) -> usize {
    let len = packet.len();
    buffer.extend_from_slice(packet.bytes());
    pool.recycle(packet);
    len
}

/// A path's view as `route` shows it to the scheduler: an urgent re-send sees no
/// window and no pacing, and the path a repair waits for cannot take a new packet.
fn shown_to_scheduler(mut view: PathView, route: Route) -> PathView {
    match route {
        Route::Again { urgent: true, .. } => {
            view.cwnd_bytes = None;
            view.pacing_ready = true;
        }
        // Taken by the repair: new packets wait behind it, or go elsewhere.
        Route::NewBesides(waited_for) if waited_for == view.id => view.pacing_ready = false,
        _ => {}
    }
    view
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use linkem::LinkConfig;
    use mptund_sched::SchedulerChoice;

    use crate::buffers::HEADROOM;
    use crate::session::testing::session_settings;
    use crate::sim::{
        tcp_packet, Delivery, PathConfig, Sim, SimConfig, CLIENT_INNER, SERVER_INNER,
    };

    const MTU: usize = 1400;
    const PAYLOAD: usize = MTU - 40;

    /// Runs three unequal paths and hands the client's TUN bursts of 24 segments every
    /// 2 ms, as one batch or one by one at the same instant. Returns what the server
    /// delivered and the data packets each client path sent.
    fn bursts(batched: bool) -> (Vec<Delivery>, Vec<u64>) {
        let settings = session_settings(
            SchedulerChoice::EarliestArrival(Default::default()),
            Duration::from_millis(100),
            MTU,
        );
        let path = |rate_mbit: u64, delay_ms: u64| {
            let rate = rate_mbit * 1_000_000;
            PathConfig::symmetric(
                LinkConfig::delay_only(Duration::from_millis(delay_ms))
                    .with_rate_bit_per_s(rate)
                    .with_queue_limit_bytes((rate / 8 / 20) as usize),
            )
        };
        let config = SimConfig::new(settings, vec![path(40, 10), path(20, 25), path(8, 40)]);
        let mut sim = Sim::established(config);
        let mut tag = 0;
        let mut batch = Vec::new();
        for _ in 0..300 {
            let now = sim.now();
            let engine = sim.client_mut();
            for _ in 0..24 {
                let bytes = tcp_packet(CLIENT_INNER, SERVER_INNER, 1, tag, PAYLOAD);
                tag += 1;
                let mut packet = engine.pool().take();
                packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(&bytes);
                packet.set_range(HEADROOM, HEADROOM + bytes.len());
                batch.push(packet);
            }
            if batched {
                engine.handle_tun_packets(now, &mut batch);
            } else {
                for packet in batch.drain(..) {
                    engine.handle_tun_packet(now, packet);
                }
            }
            sim.run_for(Duration::from_millis(2));
        }
        sim.run_for(Duration::from_secs(1));
        let sent = sim
            .client_report()
            .sessions
            .iter()
            .flat_map(|session| session.paths.iter().map(|path| path.sent_data_packets))
            .collect();
        (sim.server_tun().to_vec(), sent)
    }

    #[test]
    fn a_batch_from_the_tun_is_placed_as_its_packets_one_by_one_would_be() {
        let (batched, batched_sent) = bursts(true);
        let (one_by_one, one_by_one_sent) = bursts(false);
        // Every path carried some of it: the views that were kept mattered.
        assert!(
            one_by_one_sent.iter().all(|&sent| sent > 100),
            "{one_by_one_sent:?}"
        );
        assert_eq!(batched_sent, one_by_one_sent);
        assert_eq!(batched.len(), one_by_one.len());
        assert!(batched == one_by_one, "the deliveries differ");
    }
}
