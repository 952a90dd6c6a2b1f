//! The server's side of the protocol: it answers handshakes from known peers, learns
//! each path's address from authenticated datagrams, routes packets from its TUN to the
//! session whose peer owns the destination address, and forgets silent sessions.

// Peers and paths are indexed by positions this module found (by key, id or
// socket), never by a wire value; every wire value is checked by its view.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use mptund_sched::{AnyScheduler, PathId};

use super::handshake_time::PeerTimestamp;
use super::init_queue::{InitQueue, QueuedInit};
use super::receive::{ArrivalPath, ReceiveContext};
use super::send::seal_for;
use super::share::{MemoryLedger, ServerLimits};
use super::timers::SessionTimers;
use super::{
    inner, random_session_id, refuse, Core, KeyPair, Outgoing, PathSettings, Received, Report,
    Session, SessionReport, SessionSettings,
};
use crate::buffers::{BufferPool, Packet};
use crate::config::IpNet;
use crate::cookie::{
    CookieReplyKey, CookieSecrets, HandshakeLimits, HandshakeLoad, RateLimited, SourceRateLimiter,
};
use crate::counters::{DropCounters, DropReason};
use crate::handshake::Responder;
use crate::keys::{PrivateKey, PublicKey};
use crate::wire::{
    self, CookieReply, HandshakeInit, PacketType, SessionId, TransportHeader, COOKIE_REPLY_LEN,
    HANDSHAKE_RESPONSE_LEN,
};

/// How long a closed session still accepts the copies of the client's goodbye and
/// packets still in flight on slower paths.
const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Inits that passed the cheap checks and wait for Diffie-Hellman. Past half of it
/// the server counts as under load whatever the rate (as WireGuard does at an eighth
/// of its queue).
const INIT_QUEUE_CAPACITY: usize = 128;
/// Inits answered per wake-up: each costs four X25519 operations, 0.4 ms on the
/// 2-core test VM (`cargo bench -p mptund --bench handshake_flood`), so transport
/// datagrams wait at most about a millisecond behind a burst of handshakes. The
/// server asks to be woken again at once while inits wait, so this bounds latency,
/// not the handshake rate.
pub(super) const INITS_PER_WAKE: usize = 2;
/// A source network's (IPv4 /24, IPv6 /48) bucket for inits holds this many
/// sources' worth: one IPv6 /56 holds 256 /64 buckets, and a network with many
/// addresses must not multiply its rate by them.
const SOURCES_PER_NETWORK: u32 = 4;
/// Sources with a token bucket at once (about 64 bytes each): WireGuard's limiter
/// table size.
const SOURCE_TABLE_CAPACITY: usize = 8192;

#[derive(Clone, Debug)]
pub struct PeerSettings {
    pub name: String,
    pub public_key: PublicKey,
    pub allowed_ips: Vec<IpNet>,
}

pub struct ServerSettings {
    pub private_key: PrivateKey,
    pub peers: Vec<PeerSettings>,
    pub session: SessionSettings,
    /// How the server probes the paths it learns (it only answers; the client probes).
    pub path: PathSettings,
    /// A session with nothing received for this long is forgotten.
    pub session_idle_timeout: Duration,
    /// What one session may take of the server.
    pub limits: ServerLimits,
}

struct Peer {
    settings: PeerSettings,
    /// The newest handshake timestamp accepted (older or equal ones are replays),
    /// forgotten after a quiet period without sessions.
    timestamp: PeerTimestamp,
    /// The session the peer's inner packets are routed to.
    session: Option<SessionId>,
    /// A newer handshake's session, which replaces `session` only once the client
    /// seals a datagram with its keys: an init someone held back and replays
    /// cannot tear a working session down.
    unconfirmed: Option<SessionId>,
}

struct PeerSession {
    peer: usize,
    /// Boxed: the session table keeps spare buckets (up to twice the sessions after
    /// it grows), and a `Session` inline is kilobytes; 10,000 sessions in 16,384
    /// buckets held 123 MB this way.
    session: Box<Session>,
}

pub struct ServerCore {
    responder: Responder,
    peers: Vec<Peer>,
    /// Longest prefix first, so the most specific peer wins.
    routes: Vec<(IpNet, usize)>,
    sessions: HashMap<SessionId, PeerSession>,
    /// The receiver id of every key pair of every session -> the session's id
    /// (renewed keys bring their own receiver ids).
    key_ids: HashMap<SessionId, SessionId>,
    session_settings: SessionSettings,
    path_settings: PathSettings,
    session_idle_timeout: Duration,
    pool: BufferPool,
    deliver: VecDeque<Packet>,
    drops: DropCounters,
    sessions_established: u64,
    handshake_load: HandshakeLoad,
    /// Made at the first init that needs them (the first secret's age counts from then).
    cookie_secrets: Option<CookieSecrets>,
    cookie_reply_key: CookieReplyKey,
    init_limiter: SourceRateLimiter,
    /// The same per source network, for sources that never completed a handshake.
    network_limiter: SourceRateLimiter,
    queued_inits: InitQueue,
    /// Cookie replies made during a batch of reads: they go out after the batch's
    /// acknowledgements ([`Core::flush_acks`]), so a flood never delays the
    /// sessions' own datagrams.
    cookie_replies: Vec<Outgoing>,
    cookie_replies_sent: u64,
    /// Work of the sessions that ended (see [`ServerCore::work_units`]).
    work_units_of_ended: u64,
    /// When each session next needs its timers run.
    timers: SessionTimers,
    /// Sessions a datagram or a TUN packet changed since the last
    /// [`Core::flush_acks`]: they send their due acknowledgements and are
    /// rescheduled there, once per batch rather than once per packet. Until then
    /// [`Core::poll_timeout`] asks them directly.
    touched: Vec<SessionId>,
    /// Scratch for the sessions due at a wake-up.
    due: Vec<SessionId>,
    limits: ServerLimits,
    /// The packet buffers the sessions hold against `limits.memory_budget_bytes`.
    ledger: MemoryLedger,
}

impl ServerCore {
    /// The flood limits start at their defaults; [`ServerCore::set_handshake_limits`]
    /// applies the configured ones.
    pub fn new(settings: ServerSettings, pool: BufferPool) -> Self {
        let buffer_len = pool.buffer_len();
        let peers: Vec<Peer> = settings
            .peers
            .into_iter()
            .map(|settings| Peer {
                settings,
                timestamp: PeerTimestamp::default(),
                session: None,
                unconfirmed: None,
            })
            .collect();
        let limits = HandshakeLimits::default();
        let responder = Responder::new(&settings.private_key);
        Self {
            cookie_reply_key: CookieReplyKey::new(&responder.public_key()),
            handshake_load: HandshakeLoad::new(limits.load_threshold_per_s),
            cookie_secrets: None,
            init_limiter: SourceRateLimiter::new(
                limits.rate_per_source_per_s,
                limits.burst_per_source,
                SOURCE_TABLE_CAPACITY,
            ),
            network_limiter: SourceRateLimiter::new(
                limits
                    .rate_per_source_per_s
                    .saturating_mul(SOURCES_PER_NETWORK),
                limits.burst_per_source.saturating_mul(SOURCES_PER_NETWORK),
                SOURCE_TABLE_CAPACITY,
            )
            .per_network(),
            queued_inits: InitQueue::new(INIT_QUEUE_CAPACITY),
            cookie_replies: Vec::new(),
            cookie_replies_sent: 0,
            work_units_of_ended: 0,
            responder,
            routes: routes_of(&peers),
            peers,
            sessions: HashMap::new(),
            key_ids: HashMap::new(),
            session_settings: settings.session,
            path_settings: settings.path,
            session_idle_timeout: settings.session_idle_timeout,
            pool,
            deliver: VecDeque::with_capacity(1024),
            drops: DropCounters::default(),
            sessions_established: 0,
            timers: SessionTimers::default(),
            touched: Vec::new(),
            due: Vec::new(),
            ledger: MemoryLedger::new(settings.limits.memory_budget_bytes, buffer_len),
            limits: settings.limits,
        }
    }

    /// New limits, in force for each session's next step.
    pub fn set_limits(&mut self, limits: ServerLimits) {
        self.limits = limits;
        let buffer_len = self.pool.buffer_len();
        self.ledger
            .set_budget(limits.memory_budget_bytes, buffer_len);
    }

    /// Packet buffers all sessions hold, and the budget, both in buffers.
    pub fn memory_held(&self) -> (usize, usize) {
        (self.ledger.held(), self.ledger.budget())
    }

    /// Elementary steps taken for every session so far (see `Session::work_units`).
    pub fn work_units(&self) -> u64 {
        let live: u64 = self
            .sessions
            .values()
            .map(|entry| entry.session.work_units())
            .sum();
        self.work_units_of_ended + live
    }

    /// Before a step of session `id`: if sessions above their shares leave it no room
    /// for its own, they are cut back to their shares first; then it gets its limit
    /// for the step. Returns the buffers it held, for [`ServerCore::end_step`].
    fn begin_step(&mut self, now: Instant, id: SessionId) -> usize {
        let Some(held) = self.sessions.get(&id).map(|e| e.session.held_packets()) else {
            return 0;
        };
        debug_assert!(
            self.sessions
                .get(&id)
                .is_none_or(|e| e.session.outbox.is_empty()),
            "a step left datagrams in session {}'s outbox",
            id.0
        );
        if self.ledger.crowded_out(held) {
            let share = self.ledger.share(held);
            // Rare: only when the budget is spent.
            let mut cut_back = Vec::new();
            for (other, entry) in &mut self.sessions {
                let before = entry.session.held_packets();
                if *other == id || before <= share {
                    continue;
                }
                let (pool, drops) = (&mut self.pool, &mut self.drops);
                entry
                    .session
                    .shed_to(now, share, pool, &mut self.deliver, drops);
                self.ledger.update(before, entry.session.held_packets());
                cut_back.push(*other);
            }
            // What they held set their deadlines.
            for other in cut_back {
                self.reschedule(other);
            }
        }
        let limit = self.ledger.limit(held);
        let max_paths = self.limits.max_paths_per_session;
        if let Some(entry) = self.sessions.get_mut(&id) {
            entry.session.set_limits(limit, max_paths);
        }
        held
    }

    /// A session ends: its buffers and its work leave the books.
    fn forget_buffers_of(&mut self, session: &Session) {
        self.ledger.update(session.held_packets(), 0);
        self.work_units_of_ended += session.work_units();
    }

    /// After a step of session `id` that began holding `before` buffers.
    fn end_step(&mut self, id: SessionId, before: usize) {
        let after = self
            .sessions
            .get(&id)
            .map_or(0, |entry| entry.session.held_packets());
        self.ledger.update(before, after);
    }

    pub fn drops(&self) -> &DropCounters {
        &self.drops
    }

    /// Cookie replies sent since start (each init answered with one is also counted
    /// as a `cookie_required` drop).
    pub fn cookie_replies_sent(&self) -> u64 {
        self.cookie_replies_sent
    }

    /// New flood limits, in force for the next init.
    pub fn set_handshake_limits(&mut self, limits: HandshakeLimits) {
        self.handshake_load
            .set_threshold(limits.load_threshold_per_s);
        self.init_limiter
            .set_rate(limits.rate_per_source_per_s, limits.burst_per_source);
        self.network_limiter.set_rate(
            limits
                .rate_per_source_per_s
                .saturating_mul(SOURCES_PER_NETWORK),
            limits.burst_per_source.saturating_mul(SOURCES_PER_NETWORK),
        );
    }

    /// The cheap checks an init passes before it may cost Diffie-Hellman, in order:
    /// its form and mac1 (one HMAC); under load, a mac2 made with the cookie of its
    /// source address, else it is answered with a cookie reply; its source's token
    /// bucket; room in the queue. What passes waits in the queue, and
    /// [`Core::handle_timeout`] answers at most [`INITS_PER_WAKE`] per call, so a
    /// flood of inits never holds up transport datagrams for long.
    fn admit_init(&mut self, now: Instant, received: Received, packet: Packet) {
        let init = match HandshakeInit::new_checked(packet.bytes()) {
            Ok(init) => init,
            Err(error) => {
                let detail = format_args!("handshake from {}: {error}", received.from);
                return refuse(
                    &mut self.pool,
                    &mut self.drops,
                    packet,
                    now,
                    DropReason::HandshakeRejected,
                    &detail,
                );
            }
        };
        if !self.responder.verify_mac(packet.bytes()) {
            let detail = format_args!("handshake from {} with a bad MAC", received.from);
            return refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::HandshakeRejected,
                &detail,
            );
        }
        let busy = self.handshake_load.record_init(now);
        let under_load = busy || self.queued_inits.len() >= INIT_QUEUE_CAPACITY / 2;
        if under_load
            && !self
                .cookie_secrets
                .get_or_insert_with(|| CookieSecrets::new(now))
                .verify_mac2(now, received.from, init.mac2_input(), init.mac2())
        {
            self.make_cookie_reply(now, &received, init);
            let detail = format_args!("handshake from {} under load", received.from);
            return refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::CookieRequired,
                &detail,
            );
        }
        let source = received.from.ip();
        let mut limited = self.init_limiter.allow(now, source).err();
        // A source that completed a handshake before (a client back after a reboot,
        // a fleet behind one carrier NAT) is not held to its network's rate.
        if limited.is_none() && !self.queued_inits.is_known(source) {
            limited = match self.network_limiter.allow(now, source) {
                Ok(()) => None,
                Err(RateLimited::SourceOverRate) => Some(RateLimited::NetworkOverRate),
                Err(other) => Some(other),
            };
        }
        if let Some(limited) = limited {
            let why = match limited {
                RateLimited::SourceOverRate => "its source is over its rate",
                RateLimited::NetworkOverRate => "its source's network is over its rate",
                RateLimited::TableFull => "the table of sources is full",
            };
            let detail = format_args!("handshake from {}: {why}", received.from);
            return refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::HandshakeRateLimited,
                &detail,
            );
        }
        let queued = QueuedInit {
            arrived: now,
            received,
            packet,
        };
        if let Err((refused, _)) = self.queued_inits.push(queued) {
            let detail = format_args!("handshake from {}", refused.received.from);
            refuse(
                &mut self.pool,
                &mut self.drops,
                refused.packet,
                now,
                DropReason::HandshakeQueueFull,
                &detail,
            );
        }
    }

    /// Answers an init with a cookie for its source address, sealed under its mac1.
    /// 52 bytes for an init of 148: no amplification.
    fn make_cookie_reply(&mut self, now: Instant, received: &Received, init: HandshakeInit<'_>) {
        let secrets = self
            .cookie_secrets
            .get_or_insert_with(|| CookieSecrets::new(now));
        let cookie = secrets.cookie_for(now, received.from);
        let nonce = secrets.random_nonce();
        let sealed = self.cookie_reply_key.seal(nonce, &cookie, init.mac1());
        let mut reply = self.pool.take();
        let Some(message) = reply.message_mut::<COOKIE_REPLY_LEN>() else {
            self.pool.recycle(reply);
            return tracing::error!("a pool buffer cannot hold a cookie reply");
        };
        CookieReply::emit(message, init.path_id(), init.sender(), &nonce, &sealed);
        self.cookie_replies_sent += 1;
        self.cookie_replies.push(Outgoing {
            socket: received.socket,
            destination: received.from,
            source_ip: received.local_ip,
            path: PathId(init.path_id()),
            owner: super::HANDSHAKES,
            packet: reply,
            unsealed: None,
        });
    }

    /// Answers up to [`INITS_PER_WAKE`] queued inits.
    fn answer_queued_inits(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        for _ in 0..INITS_PER_WAKE {
            let Some(queued) = self.queued_inits.pop() else {
                return;
            };
            self.handle_init(now, queued.received, &queued.packet, out);
            self.pool.recycle(queued.packet);
        }
    }

    /// Replaces the peer list. A peer is known by its public key: one whose key is
    /// still listed keeps its session, with its new name and allowed addresses in
    /// force at once; one whose key is gone has its session closed with a goodbye on
    /// every path (into `out`), which sends its client back to handshaking, where it
    /// is now refused.
    pub fn set_peers(&mut self, now: Instant, peers: Vec<PeerSettings>, out: &mut Vec<Outgoing>) {
        let old = std::mem::take(&mut self.peers);
        // Old peer index -> new peer index, for the peers that stay.
        let mut moved_to = vec![None; old.len()];
        for (new_index, settings) in peers.into_iter().enumerate() {
            let kept = old
                .iter()
                .position(|peer| peer.settings.public_key == settings.public_key);
            let (timestamp, session, unconfirmed) = match kept {
                Some(old_index) => {
                    moved_to[old_index] = Some(new_index);
                    let peer = &old[old_index];
                    (peer.timestamp, peer.session, peer.unconfirmed)
                }
                None => (PeerTimestamp::default(), None, None),
            };
            self.peers.push(Peer {
                settings,
                timestamp,
                session,
                unconfirmed,
            });
        }
        let mut removed = Vec::new();
        for (id, entry) in &mut self.sessions {
            match moved_to[entry.peer] {
                Some(new_index) => entry.peer = new_index,
                None => removed.push((*id, old[entry.peer].settings.name.clone())),
            }
        }
        for (id, name) in removed {
            if let Some(mut entry) = self.sessions.remove(&id) {
                tracing::info!(peer = %name, session = id.0, "peer removed from the configuration: closing its session");
                entry.session.close(now, &mut self.pool);
                entry.session.take_outbox(out);
                self.forget_buffers_of(&entry.session);
                entry.session.recycle_buffers(now, &mut self.pool);
                for key_id in entry.session.keys.local_ids() {
                    self.key_ids.remove(&key_id);
                }
                self.timers.cancel(id);
            }
        }
        self.routes = routes_of(&self.peers);
    }

    /// Applies new session settings and path probing to every session and to
    /// sessions to come; a changed scheduler is rebuilt for each session.
    pub fn apply_settings(
        &mut self,
        now: Instant,
        session: SessionSettings,
        path: PathSettings,
        session_idle_timeout: Duration,
    ) {
        let changed = super::client::rebuilt_scheduler(&self.session_settings, &session);
        for entry in self.sessions.values_mut() {
            // Each session needs its own scheduler state.
            let scheduler = changed
                .as_ref()
                .map(|_| AnyScheduler::new(session.scheduler));
            entry.session.apply_settings(&session, scheduler);
            for learned in &mut entry.session.paths {
                learned.reconfigure(now, false, &path);
            }
        }
        self.session_settings = session;
        self.path_settings = path;
        self.session_idle_timeout = session_idle_timeout;
        self.reschedule_all();
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    fn handle_init(
        &mut self,
        now: Instant,
        received: Received,
        packet: &Packet,
        out: &mut Vec<Outgoing>,
    ) {
        // The view checks every field the server acts on before any state changes;
        // the MAC needs only a hash, so junk and datagrams for another server are
        // turned away before any Diffie-Hellman work.
        if let Err(error) = HandshakeInit::new_checked(packet.bytes()) {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &format_args!("handshake from {}: {error}", received.from),
            );
        }
        if !self.responder.verify_mac(packet.bytes()) {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &format_args!("handshake from {} with a bad MAC", received.from),
            );
        }
        let accepted = match self.responder.accept(packet.bytes()) {
            Ok(accepted) => accepted,
            Err(error) => {
                return self.drops.record(
                    now,
                    DropReason::HandshakeRejected,
                    &format_args!("handshake from {}: {error}", received.from),
                )
            }
        };
        let Some(peer_index) = self
            .peers
            .iter()
            .position(|peer| peer.settings.public_key == accepted.peer_public)
        else {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &format_args!("handshake from {} with an unknown key", received.from),
            );
        };
        let peer = &mut self.peers[peer_index];
        let fields = accepted.fields;
        let in_session = peer.session.is_some() || peer.unconfirmed.is_some();
        if !peer
            .timestamp
            .admits(now, fields.unix_time_nanos, in_session)
        {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &format_args!("replayed handshake for peer {}", peer.settings.name),
            );
        }
        // Renewing the keys of the peer's session keeps everything else about it.
        let renewed = peer.session.filter(|id| {
            self.sessions
                .get(id)
                .is_some_and(|entry| Some(entry.session.keys.current().local_id) == fields.renews)
        });
        let path_id = PathId(fields.path_id);
        // A session keeps its first id as its name after those keys are gone.
        let local_id = loop {
            let id = random_session_id();
            if !self.key_ids.contains_key(&id) && !self.sessions.contains_key(&id) {
                break id;
            }
        };
        let mut response = self.pool.take();
        let Some(message) = response.message_mut::<HANDSHAKE_RESPONSE_LEN>() else {
            self.pool.recycle(response);
            return tracing::error!("a pool buffer cannot hold a handshake response");
        };
        let keys = match accepted.respond(local_id, message) {
            Ok(keys) => keys,
            Err(error) => {
                self.pool.recycle(response);
                return self
                    .drops
                    .record(now, DropReason::HandshakeRejected, &error);
            }
        };
        let keys = KeyPair::new(now, local_id, fields.sender, keys);
        let installed = match renewed {
            Some(session_id) => self.stage_renewed_keys(now, session_id, keys, &received),
            None => self.add_unconfirmed_session(
                now,
                peer_index,
                keys,
                path_id,
                &received,
                packet.len(),
            ),
        };
        if !installed {
            return self.pool.recycle(response);
        }
        self.peers[peer_index]
            .timestamp
            .accepted(fields.unix_time_nanos);
        self.queued_inits.remember_source(received.from.ip());
        out.push(Outgoing {
            socket: received.socket,
            destination: received.from,
            source_ip: received.local_ip,
            path: path_id,
            owner: super::HANDSHAKES,
            packet: response,
            unsealed: None,
        });
    }

    /// A renewal's keys wait in the session until the client uses them.
    fn stage_renewed_keys(
        &mut self,
        now: Instant,
        session_id: SessionId,
        keys: KeyPair,
        received: &Received,
    ) -> bool {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return false;
        };
        let local_id = keys.local_id;
        if let Some(replaced) = entry.session.keys.stage_next(keys) {
            self.key_ids.remove(&replaced);
        }
        self.key_ids.insert(local_id, session_id);
        entry.session.last_received = now;
        tracing::debug!(peer = %self.peers[entry.peer].settings.name, session = session_id.0, keys = local_id.0, from = %received.from, "keys renewed, waiting for the client to use them");
        self.reschedule(session_id);
        true
    }

    /// A new handshake's session, which takes over the peer's traffic once the
    /// client proves its keys ([`ServerCore::confirm`]).
    fn add_unconfirmed_session(
        &mut self,
        now: Instant,
        peer_index: usize,
        keys: KeyPair,
        path_id: PathId,
        received: &Received,
        wire_len: usize,
    ) -> bool {
        let scheduler = AnyScheduler::new(self.session_settings.scheduler);
        let mut session = Session::new(
            now,
            keys,
            Vec::new(),
            scheduler,
            &self.session_settings,
            false,
        );
        // Nothing about the peer changes until the new session has its path.
        let Some(index) = session.path_for(path_id, Some(&self.path_settings), now) else {
            self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &format_args!("handshake from {} names path {}", received.from, path_id.0),
            );
            return false;
        };
        session.on_authenticated(now, index, received, wire_len, true);
        let local_id = session.local_id;
        if let Some(older) = self.peers[peer_index].unconfirmed.replace(local_id) {
            self.drops.record(
                now,
                DropReason::UnconfirmedSession,
                &format_args!(
                    "peer {}: a newer handshake came first",
                    self.peers[peer_index].settings.name
                ),
            );
            self.remove_session(now, older, "a newer handshake replaced it unconfirmed");
        }
        tracing::info!(peer = %self.peers[peer_index].settings.name, session = local_id.0, from = %received.from, "handshake answered");
        self.key_ids.insert(local_id, local_id);
        self.sessions.insert(
            local_id,
            PeerSession {
                peer: peer_index,
                session: Box::new(session),
            },
        );
        self.reschedule(local_id);
        true
    }

    /// Opens a transport datagram and hands it to its session. Returns the session it
    /// reached, whose timers and acknowledgements may have changed.
    fn handle_transport_datagram(
        &mut self,
        now: Instant,
        received: Received,
        packet_type: PacketType,
        packet: Packet,
        out: &mut Vec<Outgoing>,
    ) -> Option<SessionId> {
        let header = match TransportHeader::parse(packet.bytes()) {
            Ok(header) => header,
            Err(error) => {
                let reason = DropReason::Malformed;
                refuse(&mut self.pool, &mut self.drops, packet, now, reason, &error);
                return None;
            }
        };
        let known = self.key_ids.get(&header.receiver).copied();
        let Some(session_id) = known.filter(|id| self.sessions.contains_key(id)) else {
            refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::UnknownSession,
                &format_args!("session id {} from {}", header.receiver.0, received.from),
            );
            return None;
        };
        let held = self.begin_step(now, session_id);
        let opened =
            self.receive_in_session(now, session_id, received, header, packet_type, packet, out);
        self.end_step(session_id, held);
        let opened = opened?;
        if let Some(retired) = opened.retired {
            self.key_ids.remove(&retired);
        }
        let entry = self.sessions.get_mut(&session_id)?;
        let session = &mut entry.session;
        if session.peer_closed && session.closed_at.is_none() {
            // The client says goodbye on every path; the session lingers so the other
            // copies are not counted as unknown.
            session.closed_at = Some(now);
            tracing::info!(peer = %self.peers[entry.peer].settings.name, session = session.local_id.0, "client closed the session");
        }
        // A new session's first authentic datagram: it takes over from the one it
        // replaces.
        if self.peers[entry.peer].unconfirmed == Some(session_id) {
            self.confirm(now, session_id);
        }
        Some(session_id)
    }

    /// Hands an opened transport datagram's header and packet to session
    /// `session_id`, which the caller found.
    #[allow(clippy::too_many_arguments)]
    fn receive_in_session(
        &mut self,
        now: Instant,
        session_id: SessionId,
        received: Received,
        header: TransportHeader,
        packet_type: PacketType,
        packet: Packet,
        out: &mut Vec<Outgoing>,
    ) -> Option<super::keyring::Opened> {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            self.pool.recycle(packet);
            return None;
        };
        let session = &mut entry.session;
        let context = ReceiveContext {
            pool: &mut self.pool,
            drops: &mut self.drops,
            deliver: &mut self.deliver,
            allowed_sources: Some(&self.peers[entry.peer].settings.allowed_ips),
        };
        let arrival = ArrivalPath::ById(&self.path_settings);
        let opened = session.receive(
            now,
            &received,
            &header,
            packet_type,
            packet,
            arrival,
            context,
        );
        session.take_outbox(out);
        opened
    }

    /// The client sealed a datagram with a new session's keys: the session takes
    /// over the peer's traffic and the one it replaces ends.
    fn confirm(&mut self, now: Instant, session_id: SessionId) {
        let Some(peer_index) = self.sessions.get(&session_id).map(|entry| entry.peer) else {
            return;
        };
        let peer = &mut self.peers[peer_index];
        if peer.unconfirmed != Some(session_id) {
            return;
        }
        peer.unconfirmed = None;
        let replaced = peer.session.replace(session_id);
        tracing::info!(peer = %peer.settings.name, session = session_id.0, "session established");
        if let Some(entry) = self.sessions.get_mut(&session_id) {
            entry.session.start_measuring_paths();
        }
        self.sessions_established += 1;
        if let Some(old) = replaced {
            self.remove_session(now, old, "replaced by a new handshake");
        }
    }

    fn remove_session(&mut self, now: Instant, id: SessionId, why: &str) {
        if let Some(mut entry) = self.sessions.remove(&id) {
            let peer = &mut self.peers[entry.peer];
            tracing::info!(peer = %peer.settings.name, session = id.0, "session ended: {why}");
            if peer.session == Some(id) {
                peer.session = None;
            }
            if peer.unconfirmed == Some(id) {
                peer.unconfirmed = None;
            }
            if peer.session.is_none() && peer.unconfirmed.is_none() {
                peer.timestamp.sessions_ended(now);
            }
            self.forget_buffers_of(&entry.session);
            entry.session.recycle_buffers(now, &mut self.pool);
            for key_id in entry.session.keys.local_ids() {
                self.key_ids.remove(&key_id);
            }
            self.timers.cancel(id);
        }
    }

    /// Notes a session a packet changed, for [`Core::flush_acks`].
    /// An inner packet from the TUN to its peer's session; `previous`: the session the
    /// packet before it in the same batch went to, with nothing else in between.
    /// Returns the session it went to.
    fn send_from_tun(
        &mut self,
        now: Instant,
        packet: Packet,
        previous: Option<SessionId>,
        out: &mut Vec<Outgoing>,
    ) -> Option<SessionId> {
        let header = match inner::inspect(packet.bytes()) {
            Ok(header) => header,
            Err(error) => {
                self.pool.recycle(packet);
                self.drops
                    .record(now, DropReason::InvalidInnerPacket, &error);
                return None;
            }
        };
        let Some(peer) = self.route(header.destination) else {
            refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::NoRoute,
                &format_args!("no peer owns {}", header.destination),
            );
            return None;
        };
        let Some(session_id) = self.peers[peer]
            .session
            .filter(|id| self.sessions.contains_key(id))
        else {
            refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::NoSession,
                &format_args!("peer {} has no session", self.peers[peer].settings.name),
            );
            return None;
        };
        let held = self.begin_step(now, session_id);
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            self.pool.recycle(packet);
            return None;
        };
        let (pool, drops) = (&mut self.pool, &mut self.drops);
        if previous == Some(session_id) {
            entry.session.send_next_inner(now, packet, pool, drops);
        } else {
            entry.session.send_inner(now, packet, pool, drops);
        }
        entry.session.take_outbox(out);
        self.end_step(session_id, held);
        self.touch(session_id);
        Some(session_id)
    }

    fn touch(&mut self, id: SessionId) {
        // Consecutive packets of a batch mostly share a session.
        if self.touched.last() != Some(&id) {
            self.touched.push(id);
        }
    }

    /// Runs the timers again for a session that changed.
    fn reschedule(&mut self, id: SessionId) {
        if let Some(entry) = self.sessions.get(&id) {
            let deadline = Self::deadline_of(&entry.session, self.session_idle_timeout);
            self.timers.schedule(id, deadline);
        }
    }

    fn reschedule_all(&mut self) {
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for id in ids {
            self.reschedule(id);
        }
    }

    /// When a session next needs [`Core::handle_timeout`]: its own timers, or its end.
    fn deadline_of(session: &Session, idle_timeout: Duration) -> Instant {
        let expiry = Self::expiry_of(session, idle_timeout);
        session.poll_timeout().map_or(expiry, |at| at.min(expiry))
    }

    /// Every session's timer is in force with its current deadline (checked in debug
    /// builds, the tests and the fuzz targets, where a missed reschedule would
    /// otherwise show only as a session that stalls).
    fn timers_agree(&self) -> bool {
        self.sessions.iter().all(|(id, entry)| {
            self.touched.contains(id)
                || self.timers.scheduled(*id)
                    == Some(Self::deadline_of(&entry.session, self.session_idle_timeout))
        })
    }

    /// The ledger holds what the sessions hold (checked where `timers_agree` is).
    fn ledger_agrees(&self) -> bool {
        let held: usize = self
            .sessions
            .values()
            .map(|entry| entry.session.held_packets())
            .sum();
        held == self.ledger.held()
    }

    /// A closed session lingers briefly; an open one until it has been idle too long
    /// or its keys expired unrenewed.
    fn expiry_of(session: &Session, idle_timeout: Duration) -> Instant {
        match session.closed_at {
            Some(closed) => closed + CLOSE_LINGER,
            None => (session.last_received + idle_timeout).min(session.keys.expiry()),
        }
    }

    fn route(&self, destination: std::net::IpAddr) -> Option<usize> {
        self.routes
            .iter()
            .find(|(net, _)| net.contains(destination))
            .map(|&(_, peer)| peer)
    }
}

/// Every peer's allowed addresses, longest prefix first, so the most specific peer
/// wins.
fn routes_of(peers: &[Peer]) -> Vec<(IpNet, usize)> {
    let mut routes: Vec<(IpNet, usize)> = peers
        .iter()
        .enumerate()
        .flat_map(|(index, peer)| {
            peer.settings
                .allowed_ips
                .iter()
                .map(move |net| (*net, index))
        })
        .collect();
    routes.sort_by_key(|(net, _)| std::cmp::Reverse(net.prefix_len));
    routes
}

impl Core for ServerCore {
    fn handle_tun_packet(&mut self, now: Instant, packet: Packet, out: &mut Vec<Outgoing>) {
        self.send_from_tun(now, packet, None, out);
    }

    fn handle_tun_packets(
        &mut self,
        now: Instant,
        packets: &mut Vec<Packet>,
        out: &mut Vec<Outgoing>,
    ) {
        let mut previous = None;
        for packet in packets.drain(..) {
            previous = self.send_from_tun(now, packet, previous, out);
        }
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        received: Received,
        packet: Packet,
        out: &mut Vec<Outgoing>,
    ) {
        match wire::packet_type(packet.bytes()) {
            Ok(PacketType::HandshakeInit) => self.admit_init(now, received, packet),
            Ok(
                packet_type @ (PacketType::Data
                | PacketType::Control
                | PacketType::DataWithFrames
                | PacketType::Parity),
            ) => {
                let touched =
                    self.handle_transport_datagram(now, received, packet_type, packet, out);
                if let Some(session_id) = touched {
                    self.touch(session_id);
                }
            }
            Ok(PacketType::HandshakeResponse | PacketType::CookieReply) | Err(_) => {
                refuse(
                    &mut self.pool,
                    &mut self.drops,
                    packet,
                    now,
                    DropReason::Malformed,
                    &format_args!("unexpected datagram from {}", received.from),
                );
            }
        }
    }

    fn flush_acks(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        let mut touched = std::mem::take(&mut self.touched);
        for id in touched.drain(..) {
            if let Some(entry) = self.sessions.get_mut(&id) {
                entry.session.send_due_acks(now, false, &mut self.pool);
                entry.session.take_outbox(out);
                self.reschedule(id);
            }
        }
        self.touched = touched;
        out.append(&mut self.cookie_replies);
    }

    fn poll_tun_packet(&mut self) -> Option<Packet> {
        self.deliver.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        debug_assert!(
            self.timers_agree(),
            "a session changed without a reschedule"
        );
        debug_assert!(
            self.ledger_agrees(),
            "a session's buffers changed outside a step"
        );
        let queued_init = self.queued_inits.oldest_arrival();
        let touched = self
            .touched
            .iter()
            .filter_map(|id| self.sessions.get(id))
            .map(|entry| Self::deadline_of(&entry.session, self.session_idle_timeout));
        self.timers
            .next()
            .into_iter()
            .chain(queued_init)
            .chain(touched)
            .min()
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        self.answer_queued_inits(now, out);
        // Touched sessions stay listed: their acknowledgements still go at the next
        // flush; their deadlines must be in the heap now.
        let touched = std::mem::take(&mut self.touched);
        for &id in &touched {
            self.reschedule(id);
        }
        self.touched = touched;
        let mut due = std::mem::take(&mut self.due);
        self.timers.take_due(now, &mut due);
        for id in due.drain(..) {
            let Some(entry) = self.sessions.get_mut(&id) else {
                continue;
            };
            if now >= Self::expiry_of(&entry.session, self.session_idle_timeout) {
                self.remove_session(now, id, "closed or idle");
                continue;
            }
            if let Some(retired) = entry.session.keys.forget_stale(now) {
                self.key_ids.remove(&retired);
            }
            let held = self.begin_step(now, id);
            if let Some(entry) = self.sessions.get_mut(&id) {
                let session = &mut entry.session;
                session.handle_timeout(now, &mut self.pool, &mut self.deliver, &mut self.drops);
                session.take_outbox(out);
            }
            self.end_step(id, held);
            self.reschedule(id);
        }
        self.due = due;
    }

    fn on_send_failed(&mut self, now: Instant, path: PathId, error: &std::io::Error) {
        self.drops.record(
            now,
            DropReason::SendFailed,
            &format_args!("path {}: {error}", path.0),
        );
    }

    fn record_drop(&mut self, now: Instant, reason: DropReason, detail: &dyn std::fmt::Display) {
        self.drops.record(now, reason, detail);
    }

    fn close(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        for entry in self.sessions.values_mut() {
            entry.session.close(now, &mut self.pool);
            entry.session.take_outbox(out);
        }
        self.reschedule_all();
    }

    fn seal(
        &mut self,
        now: Instant,
        outgoing: Outgoing,
        buffer: &mut Vec<u8>,
        piggyback: bool,
        follow: &mut Vec<Outgoing>,
    ) -> Option<usize> {
        let id = outgoing.owner;
        if outgoing.unsealed.is_none() || !self.sessions.contains_key(&id) {
            let (pool, drops) = (&mut self.pool, &mut self.drops);
            return seal_for(None, now, outgoing, buffer, piggyback, pool, drops, follow);
        }
        // Sealing moves the packet into the copies kept for repair and arms the
        // path's timers: a step of the session's like any other.
        let held = self.begin_step(now, id);
        let session = self.sessions.get_mut(&id).map(|entry| &mut *entry.session);
        let (pool, drops) = (&mut self.pool, &mut self.drops);
        let sealed = seal_for(
            session, now, outgoing, buffer, piggyback, pool, drops, follow,
        );
        self.end_step(id, held);
        self.touch(id);
        sealed
    }

    fn unsent(&mut self, now: Instant, outgoing: Outgoing, reroute: bool, out: &mut Vec<Outgoing>) {
        let id = outgoing.owner;
        let held = self.begin_step(now, id);
        match self.sessions.get_mut(&id) {
            Some(entry) => {
                let session = &mut entry.session;
                session.unsent(now, outgoing, reroute, &mut self.pool);
                session.take_outbox(out);
            }
            None => self.pool.recycle(outgoing.packet),
        }
        self.end_step(id, held);
        self.touch(id);
    }

    fn pool(&mut self) -> &mut BufferPool {
        &mut self.pool
    }

    fn report(&self, now: Instant) -> Report {
        // A session waiting for its client to prove the keys carries nothing yet.
        let mut sessions: Vec<SessionReport> = self
            .sessions
            .values()
            .filter(|entry| self.peers[entry.peer].unconfirmed != Some(entry.session.local_id))
            .map(|entry| {
                SessionReport::new(&entry.session, &self.peers[entry.peer].settings.name, now)
            })
            .collect();
        sessions.sort_by(|a, b| a.peer.cmp(&b.peer));
        let mut report = Report::new(
            "server",
            sessions,
            Vec::new(),
            &self.drops,
            self.sessions_established,
        );
        report.cookie_replies_sent = self.cookie_replies_sent;
        let buffer_bytes = self.pool.buffer_len() as u64;
        report.memory = Some(super::report::MemoryReport {
            held_bytes: self.ledger.held() as u64 * buffer_bytes,
            budget_bytes: self.ledger.budget() as u64 * buffer_bytes,
        });
        report
    }
}
