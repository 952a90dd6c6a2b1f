//! The protocol state machine, free of I/O: the daemon hands it packets read from the
//! TUN and datagrams read from sockets, together with `now`, and takes back datagrams to
//! send, inner packets to write to the TUN, and the next instant it wants to be woken.
//!
//! [`Session`] is what client and server share once a handshake has produced keys: one
//! session-wide sequence number space striped over paths, a replay window, the
//! scheduler and the receiver's reorder buffer. [`ClientCore`] and [`ServerCore`] wrap it
//! with the role-specific parts: handshakes, path sockets, peers and routing.

mod client;
pub mod inner;
mod path;
mod report;
mod server;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_sched::{
    AnyScheduler, PacketClass, PacketInfo, PathId, PathState, PathView, Pick, ReorderBuffer,
    ReorderConfig, Scheduler, SeqNo,
};

pub use client::{ClientCore, ClientPathSettings, ClientSettings};
pub use path::SessionPath;
pub use report::{PathReport, Report, SessionReport};
pub use server::{PeerSettings, ServerCore, ServerSettings};

use crate::buffers::{BufferPool, Packet, HEADROOM};
use crate::config::IpNet;
use crate::counters::{DropCounters, DropReason};
use crate::crypto::SessionKeys;
use crate::replay::ReplayWindow;
use crate::wire::{
    self, ControlMeta, DataMeta, Frame, PacketType, SessionId, TransportHeader, CONTROL_META_LEN,
    DATA_META_LEN, TAG_LEN, TRANSPORT_HEADER_LEN,
};

/// A datagram the daemon should send.
#[derive(Debug)]
pub struct Outgoing {
    /// The datagram is `packet.bytes()`.
    pub packet: Packet,
    /// Index of the socket to send it from (client: the path's socket; server: 0).
    pub socket: usize,
    pub destination: SocketAddr,
    /// Source address to send from (the server answers from the address it was reached at).
    pub source_ip: Option<IpAddr>,
    pub path: PathId,
}

/// Where a datagram came from.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub socket: usize,
    pub from: SocketAddr,
    /// The local address the datagram was sent to (IP_PKTINFO).
    pub local_ip: Option<IpAddr>,
}

/// What the I/O loop drives; implemented by [`ClientCore`] and [`ServerCore`].
pub trait Engine {
    /// An inner packet read from the TUN, in `packet.bytes()` with head- and tailroom.
    fn handle_tun_packet(&mut self, now: Instant, packet: Packet, out: &mut Vec<Outgoing>);
    /// A datagram read from socket `received.socket`.
    fn handle_datagram(
        &mut self,
        now: Instant,
        received: Received,
        packet: Packet,
        out: &mut Vec<Outgoing>,
    );
    /// The next inner packet to write to the TUN.
    fn poll_tun_packet(&mut self) -> Option<Packet>;
    /// When [`Engine::handle_timeout`] wants to run next.
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Outgoing>);
    /// The operating system refused to send on `path`.
    fn on_send_failed(&mut self, now: Instant, path: PathId, error: &std::io::Error);
    /// Writing an inner packet to the TUN failed.
    fn on_tun_write_failed(&mut self, now: Instant, error: &std::io::Error) {
        self.record_drop(now, DropReason::TunWriteFailed, error);
    }
    /// Counts a drop the I/O layer decided on (a datagram too large for any buffer).
    fn record_drop(&mut self, now: Instant, reason: DropReason, detail: &dyn std::fmt::Display);
    /// The socket with this index was opened or lost (client paths only).
    fn set_socket_open(&mut self, _socket: usize, _open: bool) {}
    /// Says goodbye to the peer(s) on every path.
    fn close(&mut self, now: Instant, out: &mut Vec<Outgoing>);
    fn pool(&mut self) -> &mut BufferPool;
    fn report(&self, now: Instant) -> Report;
}

/// Timers shared by both roles.
#[derive(Clone, Copy, Debug)]
pub struct SessionTimers {
    /// An idle path is pinged this often (client only).
    pub keepalive_interval: Duration,
    /// A path with nothing authenticated received for this long is down.
    pub path_timeout: Duration,
}

/// Per-session parameters both roles take from their configuration.
#[derive(Clone, Debug)]
pub struct SessionSettings {
    pub scheduler: String,
    pub reorder: ReorderConfig,
    pub timers: SessionTimers,
    /// The TUN MTU: larger inner packets are dropped as oversize.
    pub max_inner_len: usize,
}

/// Path ids are a `u8` on the wire, but a `PathSet` holds 64; more uplinks than that on
/// one router is not a case worth a wider set.
pub const MAX_PATHS: usize = PathId::MAX_IN_SET as usize + 1;

/// A pong echoing a ping older than this is not a round-trip sample but a confusion
/// (the 32-bit microsecond clock wraps every 71 minutes).
const MAX_PLAUSIBLE_RTT: Duration = Duration::from_secs(60);

/// The transport state of an established session.
pub struct Session {
    pub local_id: SessionId,
    pub peer_id: SessionId,
    keys: SessionKeys,
    next_counter: u64,
    replay: ReplayWindow,
    next_seq: SeqNo,
    reorder: ReorderBuffer<Packet>,
    scheduler: AnyScheduler,
    pub paths: Vec<SessionPath>,
    /// Scratch for the scheduler's view of the paths, reused for every packet.
    views: Vec<PathView>,
    epoch: Instant,
    pub established: Instant,
    pub last_received: Instant,
    timers: SessionTimers,
    max_inner_len: usize,
    /// Only the client pings: it owns the paths and must keep NAT mappings open.
    sends_keepalives: bool,
    next_ping_id: u32,
    /// The peer said it is going away.
    pub peer_closed: bool,
    /// When the server saw the peer's goodbye.
    pub closed_at: Option<Instant>,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        now: Instant,
        local_id: SessionId,
        peer_id: SessionId,
        keys: SessionKeys,
        paths: Vec<SessionPath>,
        scheduler: AnyScheduler,
        settings: &SessionSettings,
        sends_keepalives: bool,
    ) -> Self {
        Self {
            local_id,
            peer_id,
            keys,
            next_counter: 0,
            replay: ReplayWindow::new(),
            next_seq: SeqNo(0),
            reorder: ReorderBuffer::new(settings.reorder, SeqNo(0)),
            scheduler,
            views: Vec::with_capacity(paths.len().max(8)),
            paths,
            epoch: now,
            established: now,
            last_received: now,
            timers: settings.timers,
            max_inner_len: settings.max_inner_len,
            sends_keepalives,
            next_ping_id: 0,
            peer_closed: false,
            closed_at: None,
        }
    }

    /// Microseconds since the session started, as carried in the wire's 32-bit
    /// timestamps (wrapping).
    fn timestamp_us(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_micros() as u32
    }

    fn path_index(&self, id: PathId) -> Option<usize> {
        self.paths.iter().position(|path| path.id == id)
    }

    fn take_counter(&mut self) -> u64 {
        let counter = self.next_counter;
        self.next_counter += 1;
        counter
    }

    /// A fresh transport header for this session and its nonce counter.
    fn header(
        &mut self,
        packet_type: PacketType,
        path: PathId,
    ) -> ([u8; TRANSPORT_HEADER_LEN], u64) {
        let counter = self.take_counter();
        let header = TransportHeader {
            packet_type,
            path_id: path.0,
            receiver: self.peer_id,
            counter,
        };
        let mut bytes = [0u8; TRANSPORT_HEADER_LEN];
        header.emit(&mut bytes);
        (bytes, counter)
    }

    /// Seals the inner packet in `packet` (at HEADROOM) for path `index`, in place.
    fn seal_data(
        &mut self,
        now: Instant,
        index: usize,
        seq: SeqNo,
        mut packet: Packet,
    ) -> Outgoing {
        debug_assert_eq!(packet.start(), HEADROOM);
        let inner_len = packet.len();
        let path_id = self.paths[index].id;
        let meta = DataMeta {
            path_pn: self.paths[index].take_packet_number(),
            tx_time_us: self.timestamp_us(now),
            seq: seq.0,
        };
        let (header, counter) = self.header(PacketType::Data, path_id);
        let buf = packet.buffer_mut();
        buf[..TRANSPORT_HEADER_LEN].copy_from_slice(&header);
        meta.emit(
            (&mut buf[TRANSPORT_HEADER_LEN..HEADROOM])
                .try_into()
                .expect("data metadata is 12 bytes"),
        );
        let body_end = HEADROOM + inner_len;
        let tag = self.keys.send.seal_in_place(
            &header,
            counter,
            &mut buf[TRANSPORT_HEADER_LEN..body_end],
        );
        buf[body_end..body_end + TAG_LEN].copy_from_slice(&tag);
        packet.set_range(0, body_end + TAG_LEN);
        let path = &mut self.paths[index];
        path.on_sent(packet.len(), true);
        Outgoing {
            socket: path.socket,
            destination: path
                .remote
                .expect("only paths with an address are scheduled"),
            source_ip: path.local_ip,
            path: path_id,
            packet,
        }
    }

    fn refresh_views(&mut self, now: Instant) {
        self.views.clear();
        for path in &self.paths {
            let mut view = PathView::new(path.id, path.scheduler_state(now));
            view.backup = path.backup;
            view.srtt = path.rtt.smoothed();
            view.min_rtt = path.rtt.min();
            self.views.push(view);
        }
    }

    /// Schedules one inner packet and seals it for the chosen path(s).
    pub fn send_inner(
        &mut self,
        now: Instant,
        packet: Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        self.refresh_views(now);
        let info = PacketInfo {
            len: packet.len(),
            class: PacketClass::Bulk,
        };
        let pick = self.scheduler.pick(now, &info, &self.views);
        let seq = self.next_seq;
        match pick {
            Pick::One(id) => {
                let Some(index) = self.path_index(id) else {
                    pool.recycle(packet);
                    return drops.record(
                        now,
                        DropReason::NoUsablePath,
                        &"scheduler picked an unknown path",
                    );
                };
                self.next_seq = seq.next();
                let outgoing = self.seal_data(now, index, seq, packet);
                self.scheduler.on_sent(now, id, outgoing.packet.len());
                out.push(outgoing);
            }
            Pick::Many(set) => {
                self.next_seq = seq.next();
                let indices = set.iter().filter_map(|id| self.path_index(id));
                // Every copy gets its own nonce and path packet number; the receiver
                // delivers whichever arrives first and drops the others as duplicates.
                let mut remaining = set.len();
                let mut original = Some(packet);
                for index in indices.collect::<smallvec_indices::Indices>() {
                    remaining -= 1;
                    let copy = if remaining == 0 {
                        original.take()
                    } else {
                        let mut copy = pool.take();
                        let source = original.as_ref().map(|p| p.bytes()).unwrap_or_default();
                        copy.buffer_mut()[HEADROOM..HEADROOM + source.len()]
                            .copy_from_slice(source);
                        copy.set_range(HEADROOM, HEADROOM + source.len());
                        Some(copy)
                    };
                    if let Some(copy) = copy {
                        let outgoing = self.seal_data(now, index, seq, copy);
                        self.scheduler
                            .on_sent(now, outgoing.path, outgoing.packet.len());
                        out.push(outgoing);
                    }
                }
                if let Some(unsent) = original {
                    pool.recycle(unsent);
                }
            }
            Pick::Hold => {
                pool.recycle(packet);
                drops.record(
                    now,
                    DropReason::NoUsablePath,
                    &"no path can take a packet now",
                );
            }
        }
    }

    /// Builds a control datagram carrying `frame` on path `index`.
    fn control(
        &mut self,
        now: Instant,
        index: usize,
        frame: &Frame<'_>,
        pool: &mut BufferPool,
    ) -> Option<Outgoing> {
        let path = &self.paths[index];
        let destination = path.remote?;
        let path_id = path.id;
        let mut packet = pool.take();
        let (header, counter) = self.header(PacketType::Control, path_id);
        let meta = ControlMeta {
            path_pn: self.paths[index].take_packet_number(),
            tx_time_us: self.timestamp_us(now),
        };
        let buf = packet.buffer_mut();
        buf[..TRANSPORT_HEADER_LEN].copy_from_slice(&header);
        let frames_start = TRANSPORT_HEADER_LEN + CONTROL_META_LEN;
        meta.emit(
            (&mut buf[TRANSPORT_HEADER_LEN..frames_start])
                .try_into()
                .expect("control metadata is 8 bytes"),
        );
        let frames_len = match wire::write_frame(&mut buf[frames_start..], frame) {
            Ok(len) => len,
            Err(_) => {
                pool.recycle(packet);
                return None;
            }
        };
        let body_end = frames_start + frames_len;
        let tag = self.keys.send.seal_in_place(
            &header,
            counter,
            &mut buf[TRANSPORT_HEADER_LEN..body_end],
        );
        buf[body_end..body_end + TAG_LEN].copy_from_slice(&tag);
        packet.set_range(0, body_end + TAG_LEN);
        let path = &mut self.paths[index];
        path.on_sent(packet.len(), false);
        Some(Outgoing {
            socket: path.socket,
            destination,
            source_ip: path.local_ip,
            path: path.id,
            packet,
        })
    }

    /// Authenticates and decrypts a transport datagram in place; afterwards the packet's
    /// range is the plaintext. The replay window is only advanced for authentic datagrams.
    pub fn open(
        &mut self,
        header: &TransportHeader,
        packet: &mut Packet,
    ) -> Result<(), DropReason> {
        if self.replay.check(header.counter).is_err() {
            return Err(DropReason::Replayed);
        }
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes.copy_from_slice(&packet.bytes()[..TRANSPORT_HEADER_LEN]);
        let start = packet.start();
        let end = start + packet.len();
        let plaintext_len = {
            let body = &mut packet.buffer_mut()[start + TRANSPORT_HEADER_LEN..end];
            self.keys
                .recv
                .open_in_place(&header_bytes, header.counter, body)
                .map_err(|_| DropReason::AuthenticationFailed)?
                .len()
        };
        self.replay
            .check_and_update(header.counter)
            .map_err(|_| DropReason::Replayed)?;
        let plaintext_start = start + TRANSPORT_HEADER_LEN;
        packet.set_range(plaintext_start, plaintext_start + plaintext_len);
        Ok(())
    }

    /// Finds the path a datagram arrived on, creating it when the peer opened a new one
    /// (server side); `None` when the path id is not acceptable.
    fn path_for(&mut self, id: PathId, create: bool, now: Instant) -> Option<usize> {
        if let Some(index) = self.path_index(id) {
            return Some(index);
        }
        if !create || id.0 > PathId::MAX_IN_SET || self.paths.len() >= MAX_PATHS {
            return None;
        }
        let insert_at = self.paths.partition_point(|path| path.id < id);
        self.paths.insert(insert_at, SessionPath::learned(id, now));
        tracing::info!(
            session = self.local_id.0,
            path = id.0,
            "peer opened a new path"
        );
        Some(insert_at)
    }

    /// Records an authenticated datagram on path `index` and learns where the peer is.
    fn on_authenticated(
        &mut self,
        now: Instant,
        index: usize,
        received: &Received,
        wire_len: usize,
        learn_address: bool,
    ) {
        self.last_received = now;
        let session = self.local_id.0;
        let path = &mut self.paths[index];
        if learn_address && path.remote != Some(received.from) {
            if path.remote.is_some() {
                tracing::info!(session, path = path.id.0, from = %received.from, "path moved to a new address");
            }
            path.remote = Some(received.from);
            path.local_ip = received.local_ip;
        }
        path.on_received(now, wire_len, session);
    }

    /// Handles an opened data datagram: polices the inner packet and queues it for
    /// in-order release.
    fn handle_data(
        &mut self,
        now: Instant,
        index: usize,
        mut plaintext: Packet,
        allowed_sources: Option<&[IpNet]>,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let Ok(meta) = DataMeta::parse(plaintext.bytes()) else {
            pool.recycle(plaintext);
            return drops.record(
                now,
                DropReason::Malformed,
                &"data datagram without metadata",
            );
        };
        let inner_start = plaintext.start() + DATA_META_LEN;
        let inner_end = plaintext.start() + plaintext.len();
        plaintext.set_range(inner_start, inner_end);
        let header = match inner::inspect(plaintext.bytes()) {
            Ok(header) => header,
            Err(error) => {
                pool.recycle(plaintext);
                return drops.record(now, DropReason::InvalidInnerPacket, &error);
            }
        };
        if header.total_len > self.max_inner_len {
            pool.recycle(plaintext);
            let max = self.max_inner_len;
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
                pool.recycle(plaintext);
                return drops.record(
                    now,
                    DropReason::SourceNotAllowed,
                    &format_args!("inner source {} not allowed for this peer", header.source),
                );
            }
        }
        plaintext.set_range(inner_start, inner_start + header.total_len);
        self.paths[index].counters.received_data_packets += 1;
        if let Err(rejected) = self.reorder.insert(now, SeqNo(meta.seq), plaintext) {
            let reason = match rejected.reason {
                mptund_sched::RejectReason::Duplicate => DropReason::Duplicate,
                mptund_sched::RejectReason::TooOld => DropReason::TooOld,
                mptund_sched::RejectReason::Backlogged => DropReason::ReorderBacklog,
            };
            pool.recycle(rejected.item);
            drops.record(now, reason, &format_args!("inner packet seq {}", meta.seq));
        }
    }

    /// Handles an opened control datagram; answers pings.
    fn handle_control(
        &mut self,
        now: Instant,
        index: usize,
        plaintext: &Packet,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
        out: &mut Vec<Outgoing>,
    ) {
        let Ok(meta) = ControlMeta::parse(plaintext.bytes()) else {
            return drops.record(
                now,
                DropReason::Malformed,
                &"control datagram without metadata",
            );
        };
        let frames = &plaintext.bytes()[CONTROL_META_LEN..];
        let mut ping_to_answer = None;
        for frame in wire::frames(frames) {
            match frame {
                Ok(Frame::Ping { ping_id }) => ping_to_answer = Some(ping_id),
                Ok(Frame::Pong {
                    echoed_tx_time_us, ..
                }) => {
                    let rtt_us = self.timestamp_us(now).wrapping_sub(echoed_tx_time_us);
                    let rtt = Duration::from_micros(u64::from(rtt_us));
                    if rtt <= MAX_PLAUSIBLE_RTT {
                        self.paths[index].rtt.on_sample(rtt);
                    }
                }
                Ok(Frame::Close) => self.peer_closed = true,
                Ok(Frame::Unknown { .. }) => {}
                Err(_) => return drops.record(now, DropReason::Malformed, &"control frame"),
            }
        }
        if let Some(ping_id) = ping_to_answer {
            let pong = Frame::Pong {
                ping_id,
                echoed_tx_time_us: meta.tx_time_us,
            };
            out.extend(self.control(now, index, &pong, pool));
        }
    }

    /// Moves every packet the reorder buffer releases now to `deliver`.
    fn drain_releasable(&mut self, now: Instant, deliver: &mut VecDeque<Packet>) {
        while let Some(packet) = self.reorder.poll_release(now) {
            deliver.push_back(packet);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut earliest = self.reorder.poll_timeout();
        let mut consider = |at: Instant| earliest = Some(earliest.map_or(at, |e| e.min(at)));
        for path in &self.paths {
            if let Some(at) = path.down_deadline(self.timers.path_timeout) {
                consider(at);
            }
            if self.sends_keepalives && path.socket_open {
                consider(path.next_keepalive(self.timers.keepalive_interval, self.established));
            }
        }
        earliest
    }

    /// Releases held packets whose wait is over, declares silent paths down and pings
    /// idle ones.
    fn handle_timeout(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        deliver: &mut VecDeque<Packet>,
        out: &mut Vec<Outgoing>,
    ) {
        self.drain_releasable(now, deliver);
        let session = self.local_id.0;
        for path in &mut self.paths {
            path.check_liveness(now, self.timers.path_timeout, session);
        }
        if self.sends_keepalives {
            for index in 0..self.paths.len() {
                let path = &self.paths[index];
                if path.socket_open
                    && now >= path.next_keepalive(self.timers.keepalive_interval, self.established)
                {
                    let ping = Frame::Ping {
                        ping_id: self.next_ping_id,
                    };
                    self.next_ping_id = self.next_ping_id.wrapping_add(1);
                    self.paths[index].last_ping = Some(now);
                    out.extend(self.control(now, index, &ping, pool));
                }
            }
        }
    }

    /// Builds a `Close` datagram for every path that has an address.
    fn close(&mut self, now: Instant, pool: &mut BufferPool, out: &mut Vec<Outgoing>) {
        for index in 0..self.paths.len() {
            if self.paths[index].socket_open {
                out.extend(self.control(now, index, &Frame::Close, pool));
            }
        }
    }

    pub fn reorder_stats(&self) -> mptund_sched::ReorderStats {
        self.reorder.stats()
    }

    pub fn reorder_len(&self) -> usize {
        self.reorder.len()
    }

    /// Returns the buffered packets to the pool when the session ends.
    fn recycle_buffers(&mut self, now: Instant, pool: &mut BufferPool) {
        let far_future = now + Duration::from_secs(3600);
        while let Some(packet) = self.reorder.poll_release(far_future) {
            pool.recycle(packet);
        }
    }

    /// The scheduler's state of a path, for reports.
    pub fn path_state(&self, index: usize, now: Instant) -> PathState {
        self.paths[index].scheduler_state(now)
    }
}

/// A small fixed-capacity list of path indices, so duplication needs no allocation.
mod smallvec_indices {
    pub struct Indices {
        items: [usize; super::MAX_PATHS],
        len: usize,
    }

    impl FromIterator<usize> for Indices {
        fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
            let mut indices = Indices {
                items: [0; super::MAX_PATHS],
                len: 0,
            };
            for item in iter.into_iter().take(super::MAX_PATHS) {
                indices.items[indices.len] = item;
                indices.len += 1;
            }
            indices
        }
    }

    impl IntoIterator for Indices {
        type Item = usize;
        type IntoIter = std::iter::Take<std::array::IntoIter<usize, { super::MAX_PATHS }>>;
        fn into_iter(self) -> Self::IntoIter {
            self.items.into_iter().take(self.len)
        }
    }
}

/// A random, non-zero session id (zero is never issued so it can't match a default).
pub fn random_session_id() -> SessionId {
    use ring::rand::SecureRandom;
    let rng = ring::rand::SystemRandom::new();
    loop {
        let mut bytes = [0u8; 4];
        if rng.fill(&mut bytes).is_ok() {
            let id = u32::from_be_bytes(bytes);
            if id != 0 {
                return SessionId(id);
            }
        }
    }
}
