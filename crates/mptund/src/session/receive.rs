//! The receiving half of a session: datagrams are authenticated and opened in place,
//! their path learns where the peer is and what to acknowledge, acknowledgements from
//! the peer drive the path probes, and inner packets are policed and reordered.

// Paths are indexed by the position the session found for the datagram's path
// (its id or its socket), never by a wire value; everything read from the
// plaintext is checked.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mptund_probe::{AckRanges, AckSummary};
use mptund_sched::{PathId, RejectReason, SeqNo};

use super::fec::{self, Decoded, ParityDecoder};
use super::keyring::{KeySlot, Opened};
use super::receiver::Inbound;
use super::{inner, refuse, PathSettings, Received, Session, SessionPath};
use crate::buffers::{BufferPool, Packet, HEADROOM};
use crate::config::IpNet;
use crate::counters::{DropCounters, DropReason};
use crate::wire::{
    self, AckRangesView, ControlMeta, DataMeta, Frame, PacketType, ParityMeta, TransportHeader,
    DATA_META_LEN, PARITY_META_LEN, TRANSPORT_HEADER_LEN,
};

/// What the receiving path needs beyond the datagram: the shared buffers and counters.
pub(super) struct ReceiveContext<'a> {
    pub pool: &'a mut BufferPool,
    pub drops: &'a mut DropCounters,
    pub deliver: &'a mut VecDeque<Packet>,
    /// Server: the inner source addresses the peer may use.
    pub allowed_sources: Option<&'a [IpNet]>,
}

/// Frames read from one datagram; the rest are dropped and counted. A legitimate
/// datagram carries at most one Ack per path (64) or [`super::resend::MAX_GIVEN_UP_RUNS`]
/// (128) GaveUp runs, with room to spare.
pub const MAX_FRAMES_PER_DATAGRAM: usize = 192;

/// How a role finds the path an authenticated datagram arrived on.
pub(super) enum ArrivalPath<'a> {
    /// Client: every path has a socket of its own, which names the path.
    BySocket,
    /// Server: one socket for every path. The header's path id names the path, a new
    /// id opens one with these settings, and the peer's address on a path may move
    /// after a validation (see `migration`).
    ById(&'a PathSettings),
}

impl Session {
    /// What every transport datagram goes through in both roles once the role has
    /// found the session its receiver id names: it is opened (or refused and
    /// counted), its path is found and records it, the server follows the peer's
    /// address, and its frames and inner packet are handled. Returns how it opened.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive(
        &mut self,
        now: Instant,
        received: &Received,
        header: &TransportHeader,
        packet_type: PacketType,
        mut packet: Packet,
        arrival: ArrivalPath<'_>,
        context: ReceiveContext<'_>,
    ) -> Option<Opened> {
        let wire_len = packet.len();
        let opened = match self.open(now, header, &mut packet) {
            Ok(opened) => opened,
            Err(reason) => {
                let from = received.from;
                let detail = format_args!("datagram from {from}");
                refuse(context.pool, context.drops, packet, now, reason, &detail);
                return None;
            }
        };
        let (index, unknown) = match arrival {
            ArrivalPath::BySocket => (
                self.paths
                    .iter()
                    .position(|path| path.socket == received.socket),
                "datagram on a socket without a path",
            ),
            ArrivalPath::ById(settings) => (
                self.path_for(PathId(header.path_id), Some(settings), now),
                "a new path beyond the session's limit",
            ),
        };
        let Some(index) = index else {
            let reason = match arrival {
                ArrivalPath::BySocket => DropReason::Malformed,
                ArrivalPath::ById(_) => DropReason::TooManyPaths,
            };
            refuse(context.pool, context.drops, packet, now, reason, &unknown);
            return Some(opened);
        };
        let follows_address = matches!(arrival, ArrivalPath::ById(_));
        // Only a handshake proves an address at once; on a path, even a new
        // path's first address takes a validation (see `migration`).
        self.on_authenticated(now, index, received, wire_len, false);
        if follows_address {
            // Only now, authenticated and fresh, may the datagram start moving the
            // path (after a validation).
            self.on_peer_address(
                now,
                index,
                received,
                wire_len,
                header,
                &opened,
                context.pool,
                context.drops,
            );
        }
        self.handle_transport(now, index, packet_type, packet, wire_len, context);
        Some(opened)
    }

    /// Authenticates and decrypts a transport datagram in place with the keys its
    /// header names; afterwards the packet's range is the plaintext. The replay
    /// window is only advanced for authentic datagrams.
    fn open(
        &mut self,
        now: Instant,
        header: &TransportHeader,
        packet: &mut Packet,
    ) -> Result<Opened, DropReason> {
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes.copy_from_slice(
            packet
                .bytes()
                .get(..TRANSPORT_HEADER_LEN)
                .ok_or(DropReason::Malformed)?,
        );
        let start = packet.start();
        let end = start + packet.len();
        let sealed = packet
            .buffer_mut()
            .get_mut(start + TRANSPORT_HEADER_LEN..end)
            .ok_or(DropReason::Malformed)?;
        let (opened, plaintext_len) = self.keys.open(now, header, &header_bytes, sealed)?;
        if opened.slot == KeySlot::Confirmed {
            self.counters.key_renewals += 1;
            tracing::debug!(
                session = self.local_id.0,
                keys = header.receiver.0,
                "the peer confirmed the renewed keys"
            );
        }
        let plaintext_start = start + TRANSPORT_HEADER_LEN;
        packet.set_range(plaintext_start, plaintext_start + plaintext_len);
        Ok(opened)
    }

    /// Records an authenticated datagram on path `index`; `address_proven` (the
    /// handshake's path: the client sealed it with keys only the answer sent there
    /// gave it) takes the sender's address as the path's when it has none.
    pub(super) fn on_authenticated(
        &mut self,
        now: Instant,
        index: usize,
        received: &Received,
        wire_len: usize,
        address_proven: bool,
    ) {
        self.last_received = now;
        let session = self.local_id.0;
        let path = &mut self.paths[index];
        if address_proven && path.remote.is_none() {
            path.remote = Some(received.from);
            path.local_ip = received.local_ip;
        }
        path.on_received(now, wire_len, session);
    }

    /// Handles an opened transport datagram of `packet_type` that arrived on path
    /// `index`; `plaintext` is its decrypted body, `wire_len` the datagram's length.
    fn handle_transport(
        &mut self,
        now: Instant,
        index: usize,
        packet_type: PacketType,
        plaintext: Packet,
        wire_len: usize,
        mut context: ReceiveContext<'_>,
    ) {
        match packet_type {
            PacketType::Data | PacketType::DataWithFrames => {
                self.handle_data(now, index, packet_type, plaintext, wire_len, context)
            }
            PacketType::Parity => self.handle_parity(now, index, plaintext, context),
            _ => {
                self.handle_control(now, index, &plaintext, wire_len, &mut context);
                context.pool.recycle(plaintext);
            }
        }
    }

    fn handle_data(
        &mut self,
        now: Instant,
        index: usize,
        packet_type: PacketType,
        mut plaintext: Packet,
        wire_len: usize,
        context: ReceiveContext<'_>,
    ) {
        let Ok(meta) = DataMeta::parse(plaintext.bytes()) else {
            return refuse(
                context.pool,
                context.drops,
                plaintext,
                now,
                DropReason::Malformed,
                &"data datagram without metadata",
            );
        };
        let local_us = self.timestamp_us(now);
        self.paths[index]
            .acks
            .on_received(now, local_us, meta.path_pn, meta.tx_time_us, wire_len);
        let wait = self.sample_one_way_delay(now, index, local_us, meta.tx_time_us, true);
        let after_meta = plaintext.start() + DATA_META_LEN;
        let end = plaintext.start() + plaintext.len();
        let inner_start = if packet_type == PacketType::DataWithFrames {
            let after_meta = plaintext.bytes().get(DATA_META_LEN..).unwrap_or_default();
            let (frames, inner) = match wire::split_piggybacked(after_meta) {
                Ok(split) => split,
                Err(error) => {
                    let reason = DropReason::Malformed;
                    return refuse(context.pool, context.drops, plaintext, now, reason, &error);
                }
            };
            let inner_len = inner.len();
            // The data itself is acknowledged, whatever frames ride with it.
            self.handle_frames(now, index, frames, context.pool, context.drops);
            end - inner_len
        } else {
            after_meta
        };
        plaintext.set_range(inner_start, end);
        let seq = SeqNo(meta.seq);
        self.accept_inner(now, index, plaintext, meta.path_pn, seq, wait, context);
    }

    /// Checks an inner packet (one a data datagram carried, or one a parity rebuilt)
    /// and hands it to the reorder buffer. The packet's range starts at the inner
    /// packet; padding after it is cut.
    #[allow(clippy::too_many_arguments)]
    fn accept_inner(
        &mut self,
        now: Instant,
        index: usize,
        mut plaintext: Packet,
        path_pn: u32,
        seq: SeqNo,
        wait: Duration,
        context: ReceiveContext<'_>,
    ) {
        let ReceiveContext {
            pool,
            drops,
            deliver,
            allowed_sources,
            ..
        } = context;
        let inner_start = plaintext.start();
        let header = match inner::inspect(plaintext.bytes()) {
            Ok(header) => header,
            Err(error) => {
                return refuse(
                    pool,
                    drops,
                    plaintext,
                    now,
                    DropReason::InvalidInnerPacket,
                    &error,
                );
            }
        };
        if header.total_len > self.settings.max_inner_len {
            pool.recycle(plaintext);
            let max = self.settings.max_inner_len;
            return drops.record(
                now,
                DropReason::Oversize,
                &format_args!(
                    "inner packet of {} bytes exceeds the TUN MTU {max}",
                    header.total_len
                ),
            );
        }
        if let Some(allowed) = allowed_sources {
            if !allowed.iter().any(|net| net.contains(header.source)) {
                return refuse(
                    pool,
                    drops,
                    plaintext,
                    now,
                    DropReason::SourceNotAllowed,
                    &format_args!("inner source {} not allowed for this peer", header.source),
                );
            }
        }
        plaintext.set_range(inner_start, inner_start + header.total_len);
        if let Some(rebuild) = &mut self.paths[index].rebuild {
            rebuild.on_data(path_pn, seq.0, plaintext.bytes());
        }
        self.paths[index].counters.received_data_packets += 1;
        if self.at_buffer_limit() {
            // Over its share the session stops holding gaps open for the peer: what
            // it held goes on now, and only then is the new packet refused.
            let limit = self.buffer_limit.saturating_sub(1);
            self.shed_to(now, limit, pool, deliver, drops);
            if self.at_buffer_limit() {
                let detail = format_args!("inner packet seq {}", seq.0);
                return refuse(
                    pool,
                    drops,
                    plaintext,
                    now,
                    DropReason::MemoryBudget,
                    &detail,
                );
            }
        }
        let inbound = Inbound {
            packet: plaintext,
            not_before: now + wait,
        };
        if let Err(rejected) = self.receiver.insert(now, seq, inbound) {
            let reason = match rejected.reason {
                RejectReason::Duplicate => DropReason::Duplicate,
                RejectReason::TooOld => DropReason::TooOld,
                RejectReason::Backlogged => DropReason::ReorderBacklog,
            };
            refuse(
                pool,
                drops,
                rejected.item.packet,
                now,
                reason,
                &format_args!("inner packet seq {}", seq.0),
            );
        }
        self.receiver.drain_releasable(now, deliver);
    }

    /// A parity for the data datagrams of path `index`: rebuilds the one member that
    /// has not arrived, if exactly one is missing, and accepts it as if it had.
    fn handle_parity(
        &mut self,
        now: Instant,
        index: usize,
        plaintext: Packet,
        context: ReceiveContext<'_>,
    ) {
        let Ok(meta) = ParityMeta::parse(plaintext.bytes()) else {
            return refuse(
                context.pool,
                context.drops,
                plaintext,
                now,
                DropReason::Malformed,
                &"parity datagram without metadata",
            );
        };
        let payload = plaintext.bytes().get(PARITY_META_LEN..).unwrap_or_default();
        if !self.settings.parity_on_lossy_paths {
            // Parity is on only when both ends turned it on: a decoder is memory
            // (about 64 inner packets) a peer must not make this side spend.
            return refuse(
                context.pool,
                context.drops,
                plaintext,
                now,
                DropReason::ParityNotEnabled,
                &"parity datagram",
            );
        }
        let max_inner_len = self.settings.max_inner_len;
        let room = self.held_packets().saturating_add(fec::DECODER_BUFFERS) <= self.buffer_limit;
        let Some(decoder) = &mut self.paths[index].rebuild else {
            // The first parity on a path starts the copies; its own members went by.
            if !room {
                let detail = "parity decoder beyond the session's memory share";
                let (pool, drops) = (context.pool, context.drops);
                return refuse(
                    pool,
                    drops,
                    plaintext,
                    now,
                    DropReason::MemoryBudget,
                    &detail,
                );
            }
            self.paths[index].rebuild = Some(ParityDecoder::new(max_inner_len));
            return context.pool.recycle(plaintext);
        };
        let mut rebuilt = context.pool.take();
        let decoded = match rebuilt.buffer_mut().get_mut(HEADROOM..) {
            Some(out) => decoder.decode(&meta, payload, out),
            None => Decoded::Inconsistent,
        };
        context.pool.recycle(plaintext);
        match decoded {
            Decoded::Rebuilt { pn, seq, len } => {
                self.counters.parity_rebuilt += 1;
                rebuilt.set_range(HEADROOM, HEADROOM + len);
                let wait = Duration::ZERO;
                self.accept_inner(now, index, rebuilt, pn, SeqNo(seq), wait, context);
            }
            Decoded::Complete => context.pool.recycle(rebuilt),
            Decoded::Unrecoverable => {
                self.counters.parity_unrecoverable += 1;
                context.pool.recycle(rebuilt);
            }
            Decoded::Inconsistent => refuse(
                context.pool,
                context.drops,
                rebuilt,
                now,
                DropReason::Malformed,
                &"parity longer than its buffer or shorter than its members",
            ),
        }
    }

    fn handle_control(
        &mut self,
        now: Instant,
        index: usize,
        plaintext: &Packet,
        wire_len: usize,
        context: &mut ReceiveContext<'_>,
    ) {
        let Ok(meta) = ControlMeta::parse(plaintext.bytes()) else {
            return context.drops.record(
                now,
                DropReason::Malformed,
                &"control datagram without metadata",
            );
        };
        let local_us = self.timestamp_us(now);
        self.sample_one_way_delay(now, index, local_us, meta.tx_time_us, false);
        let frames = plaintext
            .bytes()
            .get(wire::CONTROL_META_LEN..)
            .unwrap_or_default();
        // Only pings and goodbyes ask for an acknowledgement; acknowledging
        // acknowledgements would never end.
        if self.handle_frames(now, index, frames, context.pool, context.drops) {
            self.paths[index].acks.on_received(
                now,
                local_us,
                meta.path_pn,
                meta.tx_time_us,
                wire_len,
            );
        }
    }

    /// Acts on control frames (standalone or piggybacked) received on path `index`;
    /// returns whether any of them asks for an acknowledgement (Ping, Close).
    ///
    /// What one datagram can cost is bounded whatever it carries: at most
    /// [`MAX_FRAMES_PER_DATAGRAM`] frames are read, a path's Ack counts once, the runs
    /// given up are marked with word operations clamped to the reorder window, one
    /// window's worth per datagram in all, and
    /// challenges leave one answer per path, for the newest, sent with the
    /// session's next acknowledgements (RFC 9000 section 8.2.2 asks for one
    /// response per challenge; a datagram of challenges gets one).
    fn handle_frames(
        &mut self,
        now: Instant,
        index: usize,
        frames: &[u8],
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) -> bool {
        let mut eliciting = false;
        let mut acked_paths = 0u64;
        let mut newest_challenge = None;
        let mut give_up_left = self.receiver.capacity() as u32;
        for (count, frame) in wire::frames(frames).enumerate() {
            if count == MAX_FRAMES_PER_DATAGRAM {
                drops.record(
                    now,
                    DropReason::TooManyFrames,
                    &format_args!("more than {MAX_FRAMES_PER_DATAGRAM} frames in a datagram"),
                );
                break;
            }
            self.work_units += 1;
            match frame {
                // A probe wants its answer now: the acknowledgement goes out with the
                // next flush instead of waiting for the acknowledgement delay.
                Ok(Frame::Ping { .. }) => {
                    self.paths[index].ack_immediately = true;
                    eliciting = true;
                }
                Ok(Frame::Close) => {
                    self.peer_closed = true;
                    eliciting = true;
                }
                Ok(Frame::Ack {
                    path_id,
                    ack_delay_us,
                    largest_owd_raw_us,
                    ranges,
                }) => {
                    // A sender writes one Ack per path; a second one is a peer
                    // asking for the same work twice.
                    let bit = 1u64 << (path_id & 63);
                    if acked_paths & bit != 0 {
                        continue;
                    }
                    acked_paths |= bit;
                    self.handle_ack(
                        now,
                        PathId(path_id),
                        ack_delay_us,
                        largest_owd_raw_us,
                        ranges,
                        pool,
                        drops,
                    )
                }
                Ok(Frame::GaveUp { first_seq, count }) => {
                    // One datagram gives up at most one window in all: beyond it
                    // the buffer has nothing to skip, and each frame would cost
                    // up to a window's words again.
                    let count = u32::from(count).min(give_up_left);
                    if count > 0 {
                        give_up_left -= count;
                        self.receiver.give_up_range(SeqNo(first_seq), count);
                    }
                }
                Ok(Frame::PathChallenge { token }) => newest_challenge = Some(token),
                Ok(Frame::PathResponse { token }) => {
                    self.on_path_response(now, index, &token, pool, drops)
                }
                Ok(Frame::Pong { .. } | Frame::Unknown { .. }) => {}
                Err(error) => {
                    drops.record(now, DropReason::Malformed, &error);
                    break;
                }
            }
        }
        if let Some(token) = newest_challenge {
            self.paths[index].pending_response = Some(token);
        }
        eliciting
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_ack(
        &mut self,
        now: Instant,
        path: PathId,
        ack_delay_us: u32,
        largest_owd_raw_us: u32,
        ranges: AckRangesView<'_>,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let Some(index) = self.path_index(path) else {
            return drops.record(
                now,
                DropReason::Malformed,
                &format_args!("acknowledgement for unknown path {}", path.0),
            );
        };
        let mut summary_ranges = AckRanges::default();
        for (first, last) in ranges.iter() {
            if !summary_ranges.push(first, last) {
                break;
            }
        }
        let summary = AckSummary {
            ranges: summary_ranges,
            ack_delay: Duration::from_micros(u64::from(ack_delay_us)),
            largest_owd_raw_us,
        };
        self.sender.lost.clear();
        let session = self.local_id.0;
        let result = self.paths[index]
            .probe
            .on_ack(now, &summary, &mut self.sender.lost);
        if let Some((from, to)) = result.liveness_change {
            self.paths[index].log_transition(from, to, session);
        }
        // Lost packets first: releasing the acknowledged ones recycles everything
        // older than what is still in flight, lost packets included.
        self.reinject_lost(now, index, super::resend::Resend::InTurn, pool, drops);
        self.paths[index].release_acknowledged(pool);
        self.drain_send_queue(now, pool, drops);
    }

    /// Feeds the adaptive hold and the delay equalization with a datagram's one-way
    /// delay (with the unknown clock offset, which cancels between paths). Keepalives
    /// count too: a path that carries no data now may get the next packet, and its
    /// delay decides how late that is. Returns how long a data packet (`carries_data`)
    /// waits to be handed on at the delay the equalization sets.
    fn sample_one_way_delay(
        &mut self,
        now: Instant,
        index: usize,
        local_us: u32,
        tx_time_us: u32,
        carries_data: bool,
    ) -> Duration {
        let path = self.paths[index].id;
        let raw_owd_us = local_us.wrapping_sub(tx_time_us);
        let repair_time = repair_time(&self.paths);
        self.receiver
            .on_arrival(now, path, raw_owd_us, carries_data, repair_time)
    }
}

/// How long the peer may take to repair a loss beyond the paths' delay spread: the
/// probe timeout of the fastest path with an RTT measured (see `AdaptiveHold`). Paths
/// never measured do not count: their initial RTT is a guess.
fn repair_time(paths: &[SessionPath]) -> Duration {
    paths
        .iter()
        .filter(|path| path.probe.rtt.smoothed().is_some())
        .map(|path| path.probe.pto_base())
        .min()
        .unwrap_or(Duration::ZERO)
}
