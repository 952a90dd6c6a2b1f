//! The protocol state machine, free of I/O: the daemon hands it packets read from the
//! TUN and datagrams read from sockets, together with `now`, and takes back datagrams to
//! send, inner packets to write to the TUN, and the next instant it wants to be woken.
//!
//! [`Session`] is what client and server share once a handshake has produced keys: one
//! session-wide sequence number space striped over paths, a replay window, the
//! scheduler, per-path probes and congestion control, acknowledgements, reinjection and
//! the receiver's reorder buffer. [`ClientCore`] and [`ServerCore`] wrap it with the
//! role-specific parts: handshakes, path sockets, peers and routing.
//!
//! The session's state is split by owner: a `Sender` (sequence numbers, scheduler,
//! send and re-send queues), a `Receiver` (reorder buffer and its hold), the paths
//! (each with its probe, congestion control, pacer, acknowledgements and the packets
//! it carries), and the keys (with their replay windows). Its work is split by
//! direction: `send` schedules inner packets, paces them, queues them when every path
//! is full and re-sends what a path lost; `receive` opens datagrams, acknowledges them
//! and reorders inner packets.

// Peers and paths are indexed by positions this module found (by key, id or
// socket), never by a wire value; every wire value is checked by its view.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod budget;
pub mod classify;
mod client;
mod codel;
pub mod ecn;
mod engine;
mod fec;
mod handshake_time;
mod init_queue;
pub mod inner;
mod keyring;
mod migration;
mod path;
mod queue;
mod receive;
mod receiver;
mod reconfigure;
mod report;
mod resend;
mod send;
mod server;
mod share;
pub mod tcp_flows;
pub mod testing;
#[cfg(test)]
mod tests;
mod timers;
mod transmit;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mptund_probe::{ControllerChoice, Liveness, LostPacket, ProbeConfig};
use mptund_sched::{
    AnyScheduler, Equalization, HoldBounds, PathId, PathView, ReorderConfig, SchedulerChoice, SeqNo,
};

pub use client::{ClientCore, ClientPathSettings, ClientSettings, ReconfigureError};
pub use codel::CoDelConfig;
pub use engine::Engine;
pub use fec::DECODER_BUFFERS as PARITY_DECODER_BUFFERS;
pub use keyring::KeyPair;
pub use path::{PathSettings, SessionPath};
pub use queue::SendQueueConfig;
pub use report::{MemoryReport, PathReport, Report, SessionReport};
pub use server::{PeerSettings, ServerCore, ServerSettings};
pub use share::{
    ServerLimits, DEFAULT_MAX_PATHS_PER_SESSION, DEFAULT_MEMORY_BUDGET_MIB, MIN_MEMORY_BUDGET_MIB,
};
pub use transmit::{Transmit, MAX_GSO_SEGMENTS};

use crate::buffers::{BufferPool, Packet};
use crate::counters::DropReason;
use crate::crypto::KeyLifetime;
use crate::wire::{self, SessionId};
use receiver::Receiver;

/// A datagram the daemon should send: finished, or still to be sealed by its session
/// when the socket takes it ([`Core::seal`]).
#[derive(Debug)]
pub struct Outgoing {
    /// The datagram is `packet.bytes()`; if `unsealed`, what it will carry.
    pub packet: Packet,
    /// Index of the socket to send it from (client: the path's socket; server: 0).
    pub socket: usize,
    pub destination: SocketAddr,
    /// Source address to send from (the server answers from the address it was reached at).
    pub source_ip: Option<IpAddr>,
    pub path: PathId,
    /// The session it belongs to ([`HANDSHAKES`] for handshake messages): a socket's
    /// queue is shared fairly between sessions.
    pub owner: SessionId,
    /// Set while the datagram waits for its socket unsealed: it takes its packet
    /// number and send time, and is recorded as sent, only when the socket takes it,
    /// so time spent waiting for a full socket is not counted as the path's delay.
    pub unsealed: Option<Unsealed>,
}

/// What an unsealed [`Outgoing`] becomes when its socket takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsealed {
    /// A Data datagram around the inner packet in `packet` (at its headroom), under
    /// the session's sequence number `seq`.
    Data { seq: SeqNo },
    /// A Control datagram around the frames in `packet`; `eliciting` ones (pings,
    /// goodbyes) take a packet number and are tracked by the path's probe.
    Control { eliciting: bool },
}

impl Outgoing {
    /// The datagram's length once sealed (with no acknowledgements piggybacked).
    pub fn wire_len(&self) -> usize {
        let overhead = match self.unsealed {
            None => 0,
            Some(Unsealed::Data { .. }) => wire::TransportLayout::data(0, 0).datagram_len(),
            Some(Unsealed::Control { .. }) => wire::TransportLayout::control(0).datagram_len(),
        };
        self.packet.len() + overhead
    }
}

/// The owner of handshake messages in a socket's queue (session ids are never zero).
pub const HANDSHAKES: SessionId = SessionId(0);

/// Where a datagram came from.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub socket: usize,
    pub from: SocketAddr,
    /// The local address the datagram was sent to (IP_PKTINFO).
    pub local_ip: Option<IpAddr>,
}

/// A protocol core, implemented by [`ClientCore`] and [`ServerCore`]: each step takes
/// `now` and produces the datagrams to send into `out`. The I/O loop drives a core
/// through an [`Engine`], which queues them per socket.
pub trait Core {
    /// An inner packet read from the TUN, in `packet.bytes()` with head- and tailroom.
    fn handle_tun_packet(&mut self, now: Instant, packet: Packet, out: &mut Vec<Outgoing>);
    /// Inner packets read from the TUN in one batch at `now`, in order; `packets` is
    /// left empty. Consecutive packets for one session are scheduled as one run.
    fn handle_tun_packets(
        &mut self,
        now: Instant,
        packets: &mut Vec<Packet>,
        out: &mut Vec<Outgoing>,
    ) {
        for packet in packets.drain(..) {
            self.handle_tun_packet(now, packet, out);
        }
    }
    /// A datagram read from socket `received.socket`.
    fn handle_datagram(
        &mut self,
        now: Instant,
        received: Received,
        packet: Packet,
        out: &mut Vec<Outgoing>,
    );
    /// Called once after a batch of reads: acknowledgements that could not ride on
    /// reverse traffic go out now, in one datagram.
    fn flush_acks(&mut self, now: Instant, out: &mut Vec<Outgoing>);
    /// The next inner packet to write to the TUN.
    fn poll_tun_packet(&mut self) -> Option<Packet>;
    /// When [`Core::handle_timeout`] wants to run next.
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Outgoing>);
    /// The operating system refused to send on `path`.
    fn on_send_failed(&mut self, now: Instant, path: PathId, error: &std::io::Error);
    /// Socket `socket` had no room: what waits for it stays queued.
    fn on_socket_full(&mut self, _socket: usize) {}
    /// Counts a drop the I/O layer decided on (a datagram too large for any buffer).
    fn record_drop(&mut self, now: Instant, reason: DropReason, detail: &dyn std::fmt::Display);
    /// The socket with this index was opened or lost (client paths only). A lost
    /// socket takes its path down at once: what it had in flight is re-sent on the
    /// other paths (into `out`).
    fn set_socket_open(
        &mut self,
        _now: Instant,
        _socket: usize,
        _open: bool,
        _out: &mut Vec<Outgoing>,
    ) {
    }
    /// Says goodbye to the peer(s) on every path.
    fn close(&mut self, now: Instant, out: &mut Vec<Outgoing>);
    /// Appends `outgoing` to `buffer` as its socket takes it: an unsealed one is
    /// numbered, stamped, sealed and recorded as sent now, with acknowledgements
    /// piggybacked if `piggyback` (only the first datagram of a GSO send may differ in
    /// size). Datagrams that must follow it (a parity block it completed) go into
    /// `follow`. Returns the datagram's length; `None` if it was not sent (its session
    /// or path is gone, counted).
    fn seal(
        &mut self,
        now: Instant,
        outgoing: Outgoing,
        buffer: &mut Vec<u8>,
        piggyback: bool,
        follow: &mut Vec<Outgoing>,
    ) -> Option<usize>;
    /// `outgoing` will never be sent as it is: its socket closed (`reroute`: an inner
    /// packet it would have carried goes out on another path, into `out`), or its
    /// session's share of the socket's queue was full (the inner packet is reported
    /// to the receiver as given up, so it does not wait for it).
    fn unsent(&mut self, now: Instant, outgoing: Outgoing, reroute: bool, out: &mut Vec<Outgoing>);
    fn pool(&mut self) -> &mut BufferPool;
    fn report(&self, now: Instant) -> Report;
}

/// Per-session parameters both roles take from their configuration.
#[derive(Clone, Debug)]
pub struct SessionSettings {
    /// The scheduler and its tuning, range-checked when the configuration was read.
    pub scheduler: SchedulerChoice,
    /// Latency-critical inner packets go on the two fastest paths.
    pub duplicate_latency_critical: bool,
    /// Parity datagrams on paths that lose packets to the radio (see `fec`).
    pub parity_on_lossy_paths: bool,
    /// `reorder.max_hold` is the fixed hold unless this is set.
    pub reorder: ReorderConfig,
    /// The hold follows the paths' one-way-delay spread within these bounds.
    pub adaptive_hold: Option<HoldBounds>,
    /// Inner packets are handed on no earlier than a delay between the fastest and the
    /// slowest path's, adding at most `reorder.max_hold` (see
    /// `mptund_sched::DelayEqualizer`).
    pub equalize_delay: Option<Equalization>,
    /// A path with nothing authenticated received for this long is down, whatever its
    /// RTT-derived liveness says (an upper bound for silent, idle paths).
    pub path_timeout: Duration,
    pub send_queue: SendQueueConfig,
    /// The TUN MTU: larger inner packets are dropped as oversize.
    pub max_inner_len: usize,
    /// Every path's congestion controller.
    pub congestion_controller: ControllerChoice,
    /// When keys are renewed and when they are refused.
    pub key_lifetime: KeyLifetime,
    pub probe: ProbeConfig,
}

/// The transport state of an established session.
pub struct Session {
    /// The session's name in logs and reports: the receiver id of its
    /// first keys, which stays when renewed keys bring their own.
    pub local_id: SessionId,
    keys: keyring::KeyRing,
    sender: Sender,
    receiver: Receiver,
    pub paths: Vec<SessionPath>,
    epoch: Instant,
    pub established: Instant,
    pub last_received: Instant,
    settings: SessionSettings,
    /// Only the client sends keepalives and liveness probes: it owns the paths and
    /// must keep NAT mappings open.
    sends_keepalives: bool,
    /// Pings every path that has no RTT sample yet: the client from the start, the
    /// server once the client confirmed the keys (until then it only answers).
    measures_paths: bool,
    next_ping_id: u32,
    /// The peer said it is going away.
    pub peer_closed: bool,
    /// When the server saw the peer's goodbye.
    pub closed_at: Option<Instant>,
    pub counters: SessionCounters,
    /// Elementary steps taken for the peer (frames read, datagrams built, the reorder
    /// buffer's words and packets): what fuzzing and the tests hold against the bound
    /// on what one datagram may cost.
    work_units: u64,
    /// Packet buffers the session may hold (its share of the server's memory budget;
    /// unlimited on a client).
    buffer_limit: usize,
    /// Paths the peer may open (the server's `limits.max_paths_per_session`).
    max_paths: usize,
    /// Datagrams the session produced in its current step, unsealed but for a
    /// goodbye, in order: its core moves them into the step's list when the session's
    /// call returns ([`Session::take_outbox`]), so it is empty between steps.
    outbox: Vec<Outgoing>,
}

/// What the session sends: sequence numbers, the scheduler that stripes them over
/// the paths, the packets waiting for a window and the re-sends.
struct Sender {
    next_seq: SeqNo,
    scheduler: AnyScheduler,
    /// Inner packets waiting because every path was full.
    send_queue: queue::SendQueue,
    /// Lost packets waiting for a window, first in line.
    resend_queue: resend::ResendQueue,
    /// Runs of sequence numbers lost with no path to re-send them on, for the peer.
    given_up: Vec<(SeqNo, u16)>,
    /// The scheduler's view of the paths, reused for every packet.
    views: Vec<PathView>,
    /// What `views` shows while a run of placements lasts (see `send::ViewsShown`).
    views_shown: Option<send::ViewsShown>,
    /// Scratch for packets a probe declared lost.
    lost: Vec<LostPacket>,
    /// Scratch for copies of a suspect path's packets.
    copies: Vec<(SeqNo, Packet)>,
}

/// Session-wide counters beyond the per-path ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionCounters {
    /// Data datagrams re-sent on another path after their first path lost them.
    pub reinjected: u64,
    /// Inner packets that waited in the send queue because every path was full.
    pub queued: u64,
    /// ECN-capable inner packets the send queue's AQM marked Congestion Experienced
    /// where it would have dropped them.
    pub ecn_marked: u64,
    /// Standalone acknowledgement datagrams (the rest rode on reverse data).
    pub standalone_acks: u64,
    /// Acknowledgement frames carried inside data datagrams.
    pub piggybacked_acks: u64,
    /// Extra copies of latency-critical inner packets sent on a second path.
    pub duplicated: u64,
    /// Times the session's keys were replaced by a renewal handshake.
    pub key_renewals: u64,
    /// Parity datagrams sent on lossy paths.
    pub parity_sent: u64,
    /// Inner packets rebuilt from a parity datagram before their repair arrived.
    pub parity_rebuilt: u64,
    /// Parity datagrams that arrived with more than one member missing.
    pub parity_unrecoverable: u64,
}

/// Paths a session may have (the configuration's limit).
pub use crate::config::MAX_PATHS;

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        now: Instant,
        keys: KeyPair,
        paths: Vec<SessionPath>,
        scheduler: AnyScheduler,
        settings: &SessionSettings,
        sends_keepalives: bool,
    ) -> Self {
        Self {
            local_id: keys.local_id,
            keys: keyring::KeyRing::new(keys, settings.key_lifetime),
            sender: Sender {
                next_seq: SeqNo(0),
                scheduler,
                send_queue: queue::SendQueue::new(settings.send_queue),
                resend_queue: resend::ResendQueue::new(),
                // Both grow at first use and keep their room: an idle session never
                // schedules a packet or gives one up.
                given_up: Vec::new(),
                views: Vec::new(),
                views_shown: None,
                lost: Vec::new(),
                copies: Vec::new(),
            },
            receiver: Receiver::new(settings),
            paths,
            epoch: now,
            established: now,
            last_received: now,
            settings: settings.clone(),
            sends_keepalives,
            measures_paths: sends_keepalives,
            next_ping_id: 0,
            peer_closed: false,
            closed_at: None,
            counters: SessionCounters::default(),
            work_units: 0,
            buffer_limit: usize::MAX,
            max_paths: MAX_PATHS,
            outbox: Vec::new(),
        }
    }

    /// Elementary steps taken so far, the reorder buffer's included (see
    /// `work_units`); grows by a bounded amount per datagram.
    pub fn work_units(&self) -> u64 {
        self.work_units + self.receiver.work_units()
    }

    /// Microseconds since the session started, as carried in the wire's 32-bit
    /// timestamps (wrapping).
    fn timestamp_us(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_micros() as u32
    }

    fn path_index(&self, id: PathId) -> Option<usize> {
        self.paths.iter().position(|path| path.id == id)
    }

    /// Finds the path a datagram arrived on, creating it when the peer opened a new one
    /// (server side); `None` when the path id is not acceptable.
    fn path_for(
        &mut self,
        id: PathId,
        create: Option<&PathSettings>,
        now: Instant,
    ) -> Option<usize> {
        if let Some(index) = self.path_index(id) {
            return Some(index);
        }
        let settings = create?;
        if id.0 > PathId::MAX_IN_SET
            || self.paths.len() >= self.max_paths.min(MAX_PATHS)
            || self.at_buffer_limit()
        {
            return None;
        }
        let insert_at = self.paths.partition_point(|path| path.id < id);
        self.paths.insert(
            insert_at,
            SessionPath::learned(id, now, settings, &self.settings),
        );
        tracing::info!(
            session = self.local_id.0,
            path = id.0,
            "peer opened a new path"
        );
        Some(insert_at)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut earliest = self.receiver.poll_timeout();
        let mut consider = |at: Option<Instant>| {
            if let Some(at) = at {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        };
        for path in &self.paths {
            consider(path.poll_timeout());
            consider(self.next_ping(path));
        }
        consider(self.send_queue_deadline());
        consider(self.keys.next_cleanup());
        earliest
    }

    /// Every deadline the session has, by source, for diagnosing timer bugs in tests.
    #[cfg(test)]
    pub fn deadlines(&self) -> String {
        let mut text = format!(
            "reorder={:?} queue={:?}/{}",
            self.receiver.reorder_deadline(),
            self.send_queue_deadline(),
            self.sender.send_queue.len()
        );
        for path in &self.paths {
            text += &format!(
                " | {} probe={:?} acks={:?} keepalive={:?} liveness={:?} in_flight={}",
                path.name,
                path.probe.poll_timeout(),
                path.acks.poll_timeout(),
                path.next_keepalive(self.established),
                path.probe.liveness(),
                path.probe.bytes_in_flight()
            );
        }
        text
    }

    /// Runs everything that is due: held packets released, losses declared (and their
    /// packets re-sent), silent paths declared down, idle paths probed, delayed
    /// acknowledgements sent, queued packets sent as paths free up.
    fn handle_timeout(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        deliver: &mut VecDeque<Packet>,
        drops: &mut crate::counters::DropCounters,
    ) {
        self.receiver.drain_releasable(now, deliver);
        for index in 0..self.paths.len() {
            let session = self.local_id.0;
            self.sender.lost.clear();
            let entered = self.paths[index].handle_timeout(now, &mut self.sender.lost, session);
            self.reinject_lost(now, index, resend::Resend::InTurn, pool, drops);
            match entered {
                Some(Liveness::Suspect) => self.reinject_copies(now, index, pool),
                Some(Liveness::Down) => self.reinject_everything_in_flight(now, index, pool, drops),
                _ => {}
            }
            // RFC 9002 section 6.2.4: a probe timeout sends one ack-eliciting datagram.
            if self.paths[index].probe.take_pto_probe() && self.paths[index].socket_open {
                self.ping(now, index, pool);
            }
        }
        self.handle_validation_timeouts(now, pool, drops);
        self.send_probes(now, pool);
        self.send_due_acks(now, false, pool);
        self.drain_send_queue(now, pool, drops);
    }

    /// Moves what the session produced in this step to the end of `out`.
    pub(super) fn take_outbox(&mut self, out: &mut Vec<Outgoing>) {
        out.append(&mut self.outbox);
    }

    /// From now on, paths without an RTT sample are pinged (see `measures_paths`).
    pub fn start_measuring_paths(&mut self) {
        self.measures_paths = true;
    }

    pub fn key_age(&self, now: Instant) -> Duration {
        self.keys.current_age(now)
    }

    pub fn reorder_stats(&self) -> mptund_sched::ReorderStats {
        self.receiver.stats()
    }

    pub fn max_inner_len(&self) -> usize {
        self.settings.max_inner_len
    }

    pub fn path_timeout(&self) -> Duration {
        self.settings.path_timeout
    }

    pub fn send_queue_depth(&self) -> usize {
        self.sender.send_queue.len()
    }

    /// The reorder buffer's hold in force.
    pub fn reorder_hold(&self) -> Duration {
        self.receiver.max_hold()
    }

    pub fn reorder_len(&self) -> usize {
        self.receiver.held_packets()
    }

    /// How much later than its fastest path the inner flow is served to even out the
    /// paths' delays (zero when equalization is off or one path carries the data).
    pub fn equalized_delay(&self, now: Instant) -> Duration {
        self.receiver.equalized_delay(now)
    }

    /// Returns every buffer the session holds to the pool when it ends.
    fn recycle_buffers(&mut self, now: Instant, pool: &mut BufferPool) {
        self.receiver.recycle_all(now, pool);
        self.sender.send_queue.recycle_all(pool);
        self.sender.resend_queue.recycle_all(pool);
        for path in &mut self.paths {
            path.recycle_in_flight(pool);
        }
        for outgoing in self.outbox.drain(..) {
            pool.recycle(outgoing.packet);
        }
    }
}

/// Gives a refused packet's buffer back to the pool and counts why it was refused.
fn refuse(
    pool: &mut BufferPool,
    drops: &mut crate::counters::DropCounters,
    packet: Packet,
    now: Instant,
    reason: DropReason,
    detail: &dyn std::fmt::Display,
) {
    pool.recycle(packet);
    drops.record(now, reason, detail);
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
