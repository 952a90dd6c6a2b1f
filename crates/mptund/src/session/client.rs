//! The client's side of the protocol: it owns the paths (one socket each), starts the
//! handshake, keeps idle paths alive and re-handshakes when the server goes silent.

// Peers and paths are indexed by positions this module found (by key, id or
// socket), never by a wire value; every wire value is checked by its view.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mptund_sched::{AnyScheduler, PathId};

use super::handshake_time::{retry_delay, system_random, InitClock, RandomSource, WallClock};
use super::receive::{ArrivalPath, ReceiveContext};
use super::send::seal_for;
use super::{
    random_session_id, refuse, Core, KeyPair, Outgoing, PathSettings, Received, Report, Session,
    SessionPath, SessionReport, SessionSettings,
};
use crate::buffers::{BufferPool, Packet};
use crate::cookie::{self, CookieReplyKey, ReceivedCookie};
use crate::counters::{DropCounters, DropReason};
use crate::crypto::Aead;
use crate::handshake::{self, PendingHandshake, MAC1_LEN};
use crate::keys::{PrivateKey, PublicKey};
use crate::wire::{
    self, field, CookieReply, PacketType, SessionId, TransportHeader, HANDSHAKE_INIT_LEN,
};

#[derive(Clone, Debug)]
pub struct ClientPathSettings {
    pub name: String,
    pub endpoint: SocketAddr,
    pub backup: bool,
    pub probing: PathSettings,
}

pub struct ClientSettings {
    pub private_key: PrivateKey,
    pub server_public_key: PublicKey,
    /// The transport AEAD this client asks for in its handshakes.
    pub aead: Aead,
    pub paths: Vec<ClientPathSettings>,
    pub session: SessionSettings,
    /// Time between handshake attempts; each attempt uses the next path.
    pub handshake_retry: Duration,
    /// With nothing authenticated from the server for this long, start over.
    pub session_timeout: Duration,
}

/// Why a change to a running client or server was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum ReconfigureError {
    /// A path with this name exists already.
    #[error("a path named {0:?} exists already")]
    DuplicatePath(String),
    /// No path has this name.
    #[error("no path is named {0:?}")]
    UnknownPath(String),
    /// The session has used every path id the wire allows; a new session (restart)
    /// starts numbering afresh.
    #[error("path {0:?} cannot be added: this session has used all {max} path ids; restart to apply", max = u16::from(PathId::MAX_IN_SET) + 1)]
    OutOfPathIds(String),
}

/// The scheduler to swap in when `new` names another scheduler or other parameters
/// than `old`; `None` when it stays.
pub(super) fn rebuilt_scheduler(
    old: &SessionSettings,
    new: &SessionSettings,
) -> Option<AnyScheduler> {
    (old.scheduler != new.scheduler).then(|| AnyScheduler::new(new.scheduler))
}

struct Handshaking {
    pending: PendingHandshake,
    local_id: SessionId,
    path: PathId,
    /// The socket the init went out on: a cookie reply must come back on it.
    socket: usize,
    /// The init's mac1: a cookie reply for this init is sealed under it.
    init_mac1: [u8; MAC1_LEN],
    /// Whether the init carried a mac2 (a cookie reply then does not trigger an
    /// immediate retry, so client and server never loop).
    with_cookie: bool,
    sent_at: Instant,
    /// The server session id whose keys this handshake renews.
    renews: Option<SessionId>,
}

pub struct ClientCore {
    settings: ClientSettings,
    /// The paths while no session is established; a session borrows them.
    idle_paths: Vec<SessionPath>,
    session: Option<Session>,
    handshake: Option<Handshaking>,
    next_handshake_at: Instant,
    /// Which path the next handshake attempt goes out on.
    handshake_rotation: usize,
    /// The id the next added path gets: ids are never reused within a session (the
    /// server may still remember a removed path), and renumbered from 0 for each new
    /// session.
    next_path_id: u8,
    /// The timestamps of the inits: later than the last one sent even when the wall
    /// clock stepped back (a router that booted before NTP synchronised it).
    init_clock: InitClock,
    /// Draws the jitter of the handshake retries.
    random: RandomSource,
    pool: BufferPool,
    deliver: VecDeque<Packet>,
    drops: DropCounters,
    sessions_established: u64,
    cookie_reply_key: CookieReplyKey,
    /// The server's latest cookie per path socket: a cookie is bound to the source
    /// address and port, which differ per path.
    cookies: Vec<(usize, ReceivedCookie)>,
    /// After a cookie reply the next attempt goes out at once on this socket, with mac2.
    retry_on_socket: Option<usize>,
}

impl ClientCore {
    /// `wall_clock` is read at every handshake for its timestamp; the retries'
    /// jitter comes from the operating system ([`ClientCore::with_random_source`]
    /// gives another source).
    pub fn new(
        now: Instant,
        wall_clock: WallClock,
        settings: ClientSettings,
        pool: BufferPool,
    ) -> Self {
        let idle_paths = settings
            .paths
            .iter()
            .enumerate()
            .map(|(index, path)| {
                SessionPath::configured(PathId(index as u8), index, path, now, &settings.session)
            })
            .collect();
        let next_path_id = settings.paths.len() as u8;
        Self {
            cookie_reply_key: CookieReplyKey::new(&settings.server_public_key),
            cookies: Vec::new(),
            retry_on_socket: None,
            settings,
            idle_paths,
            session: None,
            handshake: None,
            next_handshake_at: now,
            handshake_rotation: 0,
            next_path_id,
            init_clock: InitClock::new(wall_clock),
            random: system_random(),
            pool,
            deliver: VecDeque::with_capacity(1024),
            drops: DropCounters::default(),
            sessions_established: 0,
        }
    }

    /// The same client, drawing its retries' jitter from `random` (tests).
    pub fn with_random_source(mut self, random: RandomSource) -> Self {
        self.random = random;
        self
    }

    /// Makes the handshake timestamps increase across restarts: `stored` is the
    /// ceiling the last run stored (`None` if none was). From now on an init goes
    /// out only once a ceiling above its timestamp is stored: the daemon takes it
    /// from [`ClientCore::timestamp_to_store`] and answers
    /// [`ClientCore::timestamp_stored`].
    pub fn resume_handshake_timestamps(&mut self, stored: Option<u64>) {
        self.init_clock.resume(stored);
    }

    /// A timestamp ceiling to store before the next handshake can go out.
    pub fn timestamp_to_store(&self) -> Option<u64> {
        self.init_clock.to_store()
    }

    /// The daemon stored `ceiling` (or could not, and lets the handshake go out
    /// anyway); the waiting handshake is due at once.
    pub fn timestamp_stored(&mut self, ceiling: u64) {
        self.init_clock.stored(ceiling);
    }

    fn paths_mut(&mut self) -> &mut Vec<SessionPath> {
        match &mut self.session {
            Some(session) => &mut session.paths,
            None => &mut self.idle_paths,
        }
    }

    fn paths(&self) -> &[SessionPath] {
        match &self.session {
            Some(session) => &session.paths,
            None => &self.idle_paths,
        }
    }

    /// Changes how path `index` is probed and whether it is a backup (tests).
    #[cfg(test)]
    pub fn set_path_probing(
        &mut self,
        now: Instant,
        index: usize,
        probing: super::PathSettings,
        backup: bool,
    ) {
        let configured = &mut self.settings.paths[index];
        configured.probing = probing;
        configured.backup = backup;
        if let Some(path) = self.idle_paths.get_mut(index) {
            let open = path.socket_open;
            *path = SessionPath::configured(
                path.id,
                path.socket,
                &self.settings.paths[index],
                now,
                &self.settings.session,
            );
            path.socket_open = open;
        }
    }

    /// Whether the send queue's CoDel is paused after a path fell silent (tests).
    #[cfg(test)]
    pub fn send_queue_settling(&self, now: Instant) -> bool {
        self.session
            .as_ref()
            .is_some_and(|session| session.sender.send_queue.settling_after_capacity_fall(now))
    }

    #[cfg(test)]
    pub fn deadlines(&self) -> String {
        self.session
            .as_ref()
            .map_or_else(|| "no session".into(), |session| session.deadlines())
    }

    pub fn is_established(&self) -> bool {
        self.session.is_some()
    }

    pub fn drops(&self) -> &DropCounters {
        &self.drops
    }

    /// Elementary steps the current session took (see `Session::work_units`).
    pub fn work_units(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::work_units)
    }

    /// Adds a path whose socket has index `socket` (closed until
    /// [`Core::set_socket_open`] says otherwise). It joins the running session, if
    /// any, under a path id new to it; the server learns the path from its first
    /// authenticated probe, as at the start of a session.
    pub fn add_path(
        &mut self,
        now: Instant,
        settings: ClientPathSettings,
        socket: usize,
    ) -> Result<PathId, ReconfigureError> {
        if self.paths().iter().any(|path| path.name == settings.name) {
            return Err(ReconfigureError::DuplicatePath(settings.name));
        }
        if self.next_path_id > PathId::MAX_IN_SET || self.paths().len() >= super::MAX_PATHS {
            return Err(ReconfigureError::OutOfPathIds(settings.name));
        }
        let id = PathId(self.next_path_id);
        self.next_path_id += 1;
        let path = SessionPath::configured(id, socket, &settings, now, &self.settings.session);
        match &mut self.session {
            Some(session) => {
                session.add_path(path);
            }
            None => self.idle_paths.push(path),
        }
        self.settings.paths.push(settings);
        Ok(id)
    }

    /// Removes the path named `name`: what it has in flight is re-sent on the others
    /// (into `out`), then it is forgotten. Returns its socket index, for the caller
    /// to close.
    pub fn remove_path(
        &mut self,
        now: Instant,
        name: &str,
        out: &mut Vec<Outgoing>,
    ) -> Result<usize, ReconfigureError> {
        let index = self
            .paths()
            .iter()
            .position(|path| path.name == name)
            .ok_or_else(|| ReconfigureError::UnknownPath(name.to_owned()))?;
        let socket = match &mut self.session {
            Some(session) => {
                let mut path = session.remove_path(now, index, &mut self.pool, &mut self.drops);
                session.take_outbox(out);
                path.recycle_in_flight(&mut self.pool);
                path.socket
            }
            None => {
                let mut path = self.idle_paths.remove(index);
                path.recycle_in_flight(&mut self.pool);
                path.socket
            }
        };
        self.settings.paths.retain(|path| path.name != name);
        Ok(socket)
    }

    /// Changes a path's backup flag and probing in place (estimators, in-flight data
    /// and the path id stay). A changed endpoint is a remove and an add.
    pub fn reconfigure_path(
        &mut self,
        now: Instant,
        settings: ClientPathSettings,
    ) -> Result<(), ReconfigureError> {
        let path = self
            .paths_mut()
            .iter_mut()
            .find(|path| path.name == settings.name)
            .ok_or_else(|| ReconfigureError::UnknownPath(settings.name.clone()))?;
        path.reconfigure(now, settings.backup, &settings.probing);
        if let Some(configured) = self
            .settings
            .paths
            .iter_mut()
            .find(|path| path.name == settings.name)
        {
            *configured = settings;
        }
        Ok(())
    }

    /// Applies new session settings and client timers. A changed scheduler or
    /// scheduler tuning builds a new scheduler and swaps it into the running session.
    pub fn apply_settings(
        &mut self,
        session: SessionSettings,
        handshake_retry: Duration,
        session_timeout: Duration,
    ) {
        let scheduler = rebuilt_scheduler(&self.settings.session, &session);
        if let Some(running) = &mut self.session {
            running.apply_settings(&session, scheduler);
        }
        self.settings.session = session;
        self.settings.handshake_retry = handshake_retry;
        self.settings.session_timeout = session_timeout;
    }

    /// How many more paths [`ClientCore::add_path`] can add before the session runs
    /// out of path ids.
    pub fn path_ids_left(&self) -> usize {
        (usize::from(PathId::MAX_IN_SET) + 1).saturating_sub(usize::from(self.next_path_id))
    }

    /// The running session, for tests that forge what its peer could send.
    #[cfg(test)]
    pub(super) fn session_mut(&mut self) -> Option<&mut Session> {
        self.session.as_mut()
    }

    /// The running session's local id, if one is established.
    pub fn session_id(&self) -> Option<SessionId> {
        self.session.as_ref().map(|session| session.local_id)
    }

    /// Sends a HandshakeInit on the next path in turn: for a new session, or to
    /// renew the keys of the one established.
    fn start_handshake(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        self.next_handshake_at = now + retry_delay(self.settings.handshake_retry, (self.random)());
        let renews = self
            .session
            .as_ref()
            .map(|session| session.keys.current().peer_id);
        if renews.is_none() {
            // A new session starts a new path id space: paths added and removed in
            // the last one leave no holes.
            for (index, path) in self.idle_paths.iter_mut().enumerate() {
                path.id = PathId(index as u8);
            }
            self.next_path_id = self.idle_paths.len() as u8;
        }
        let candidates: Vec<(PathId, usize, std::net::SocketAddr, String)> = self
            .paths()
            .iter()
            .filter(|path| path.socket_open)
            .filter_map(|path| Some((path.id, path.socket, path.remote?, path.name.clone())))
            .collect();
        if candidates.is_empty() {
            tracing::debug!("no path socket open; handshake postponed");
            return;
        }
        // The server refuses an init that is not newer than the last one it
        // accepted from this client.
        let Some(unix_time_nanos) = self.init_clock.next() else {
            // A higher ceiling is stored first; the init goes out once it is.
            self.next_handshake_at = now;
            return;
        };
        let retry = self.retry_on_socket.take().and_then(|socket| {
            candidates
                .iter()
                .find(|(_, candidate_socket, _, _)| *candidate_socket == socket)
        });
        let (path_id, socket, remote, name) = match retry {
            Some(candidate) => candidate.clone(),
            None => {
                let next = candidates[self.handshake_rotation % candidates.len()].clone();
                self.handshake_rotation = self.handshake_rotation.wrapping_add(1);
                next
            }
        };
        let local_id = random_session_id();
        let fields = handshake::InitFields {
            sender: local_id,
            path_id: path_id.0,
            unix_time_nanos,
            renews,
            aead: self.settings.aead,
        };
        let mut packet = self.pool.take();
        let Some(message) = packet.message_mut::<HANDSHAKE_INIT_LEN>() else {
            self.pool.recycle(packet);
            return tracing::error!("a pool buffer cannot hold a handshake init");
        };
        let pending = handshake::initiate(
            &self.settings.private_key,
            &self.settings.server_public_key,
            fields,
            message,
        );
        match pending {
            Ok(pending) => {
                let cookie = self
                    .cookies
                    .iter()
                    .find(|(cookie_socket, _)| *cookie_socket == socket)
                    .and_then(|(_, received)| received.usable(now));
                if let Some(cookie) = cookie {
                    cookie::write_mac2(cookie, message);
                }
                let with_cookie = cookie.is_some();
                let mut init_mac1 = [0u8; MAC1_LEN];
                init_mac1.copy_from_slice(&message[field::INIT_MAC1]);
                match renews {
                    Some(_) => tracing::debug!(path = %name, "renewing the session keys"),
                    None => tracing::info!(path = %name, endpoint = %remote, "sending handshake"),
                }
                out.push(Outgoing {
                    socket,
                    destination: remote,
                    source_ip: None,
                    path: path_id,
                    owner: super::HANDSHAKES,
                    packet,
                    unsealed: None,
                });
                self.handshake = Some(Handshaking {
                    pending,
                    local_id,
                    path: path_id,
                    socket,
                    init_mac1,
                    with_cookie,
                    sent_at: now,
                    renews,
                });
            }
            Err(error) => {
                self.pool.recycle(packet);
                tracing::error!(%error, "could not build a handshake message");
            }
        }
    }

    /// A cookie reply says the server is under load and wants mac2 on our inits: the
    /// cookie is kept for the path it came in on, and an init that went out without
    /// one is repeated at once, with mac2.
    fn handle_cookie_reply(&mut self, now: Instant, received: &Received, packet: &Packet) {
        let reply = match CookieReply::new_checked(packet.bytes()) {
            Ok(reply) => reply,
            Err(error) => {
                return self
                    .drops
                    .record(now, DropReason::CookieReplyRejected, &error)
            }
        };
        let Some(handshaking) = self.handshake.as_ref().filter(|handshaking| {
            handshaking.local_id == reply.receiver() && handshaking.socket == received.socket
        }) else {
            return self.drops.record(
                now,
                DropReason::CookieReplyRejected,
                &"cookie reply for no handshake in progress on its path",
            );
        };
        let cookie =
            match self
                .cookie_reply_key
                .open(reply.nonce(), &reply.sealed(), &handshaking.init_mac1)
            {
                Ok(cookie) => cookie,
                Err(error) => {
                    return self
                        .drops
                        .record(now, DropReason::CookieReplyRejected, &error)
                }
            };
        let retry_now = !handshaking.with_cookie;
        let stored = ReceivedCookie {
            cookie,
            received_at: now,
        };
        match self
            .cookies
            .iter_mut()
            .find(|(socket, _)| *socket == received.socket)
        {
            Some((_, slot)) => *slot = stored,
            None => self.cookies.push((received.socket, stored)),
        }
        if retry_now {
            tracing::info!(
                socket = received.socket,
                "the server is under load: repeating the handshake with its cookie"
            );
            self.retry_on_socket = Some(received.socket);
            self.next_handshake_at = now;
        } else {
            tracing::info!(socket = received.socket, "the server refused our cookie (a new address?): its new one goes with the next attempt");
        }
    }

    fn handle_response(
        &mut self,
        now: Instant,
        received: &Received,
        packet: &Packet,
        out: &mut Vec<Outgoing>,
    ) {
        let Some(handshaking) = &mut self.handshake else {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &"handshake response without a handshake in progress",
            );
        };
        // A forged or corrupted response leaves the attempt waiting for the genuine one.
        let established = match handshaking.pending.try_complete(packet.bytes()) {
            Ok(established) => established,
            Err(error) => {
                return self
                    .drops
                    .record(now, DropReason::HandshakeRejected, &error);
            }
        };
        let Some(handshaking) = self.handshake.take() else {
            return;
        };
        let keys = KeyPair::new(
            now,
            handshaking.local_id,
            established.peer_session,
            established.keys,
        );
        if let Some(renewed) = handshaking.renews {
            return self.renew_keys(now, renewed, keys, received, out);
        }
        let scheduler = AnyScheduler::new(self.settings.session.scheduler);
        let mut paths = std::mem::take(&mut self.idle_paths);
        for path in &mut paths {
            // Every path with a socket is tried at once: its first probe tells the
            // server where it is, and a path that does not answer goes down.
            path.reset_for_session(now, &self.settings.session, &mut self.pool);
        }
        let mut session = Session::new(now, keys, paths, scheduler, &self.settings.session, true);
        if let Some(index) = session.path_index(handshaking.path) {
            session.on_authenticated(now, index, received, packet.len(), false);
            // The handshake is a round trip timed by us: the path's first RTT sample.
            session.paths[index]
                .probe
                .rtt
                .on_sample(now.saturating_duration_since(handshaking.sent_at));
            // The server routes to the new session once it has seen these keys used.
            session.ping(now, index, &mut self.pool);
            session.take_outbox(out);
        }
        self.sessions_established += 1;
        tracing::info!(
            session = session.local_id.0,
            path = handshaking.path.0,
            cipher = self.settings.aead.name(),
            "session established"
        );
        self.session = Some(session);
        self.handle_timeout(now, out);
    }

    /// The renewed keys seal everything from now on; a ping under them on the
    /// path the response came from tells the server to switch too, even when
    /// there is no data to send.
    fn renew_keys(
        &mut self,
        now: Instant,
        renewed: SessionId,
        keys: KeyPair,
        received: &Received,
        out: &mut Vec<Outgoing>,
    ) {
        let Some(session) = self
            .session
            .as_mut()
            .filter(|session| session.keys.current().peer_id == renewed)
        else {
            return self.drops.record(
                now,
                DropReason::HandshakeRejected,
                &"key renewal answered for a session that has ended",
            );
        };
        tracing::info!(
            session = session.local_id.0,
            keys = keys.local_id.0,
            "session keys renewed"
        );
        session.keys.rotate(keys);
        session.counters.key_renewals += 1;
        if let Some(index) = session
            .paths
            .iter()
            .position(|path| path.socket == received.socket && path.socket_open)
        {
            session.ping(now, index, &mut self.pool);
            session.take_outbox(out);
        }
    }

    /// An inner packet from the TUN to the session; `continuing`: the packet before it
    /// in the same batch went to the session, with nothing else in between. Returns
    /// whether this one did.
    fn send_from_tun(
        &mut self,
        now: Instant,
        packet: Packet,
        continuing: bool,
        out: &mut Vec<Outgoing>,
    ) -> bool {
        let Some(session) = &mut self.session else {
            refuse(
                &mut self.pool,
                &mut self.drops,
                packet,
                now,
                DropReason::NoSession,
                &"packet from the TUN before the session is up",
            );
            return false;
        };
        let (pool, drops) = (&mut self.pool, &mut self.drops);
        if continuing {
            session.send_next_inner(now, packet, pool, drops);
        } else {
            session.send_inner(now, packet, pool, drops);
        }
        session.take_outbox(out);
        true
    }

    fn end_session(&mut self, now: Instant, why: &str) {
        if let Some(mut session) = self.session.take() {
            tracing::warn!(session = session.local_id.0, "session ended: {why}");
            session.recycle_buffers(now, &mut self.pool);
            self.idle_paths = std::mem::take(&mut session.paths);
        }
        self.handshake = None;
        self.next_handshake_at = now;
    }
}

impl Core for ClientCore {
    fn handle_tun_packet(&mut self, now: Instant, packet: Packet, out: &mut Vec<Outgoing>) {
        self.send_from_tun(now, packet, false, out);
    }

    fn handle_tun_packets(
        &mut self,
        now: Instant,
        packets: &mut Vec<Packet>,
        out: &mut Vec<Outgoing>,
    ) {
        let mut continuing = false;
        for packet in packets.drain(..) {
            continuing = self.send_from_tun(now, packet, continuing, out);
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
            Ok(PacketType::HandshakeResponse) => {
                self.handle_response(now, &received, &packet, out);
                self.pool.recycle(packet);
            }
            Ok(PacketType::CookieReply) => {
                self.handle_cookie_reply(now, &received, &packet);
                self.pool.recycle(packet);
            }
            Ok(
                packet_type @ (PacketType::Data
                | PacketType::Control
                | PacketType::DataWithFrames
                | PacketType::Parity),
            ) => {
                let header = match TransportHeader::parse(packet.bytes()) {
                    Ok(header) => header,
                    Err(error) => {
                        return refuse(
                            &mut self.pool,
                            &mut self.drops,
                            packet,
                            now,
                            DropReason::Malformed,
                            &error,
                        );
                    }
                };
                let Some(session) = self
                    .session
                    .as_mut()
                    .filter(|session| session.keys.knows(header.receiver))
                else {
                    return refuse(
                        &mut self.pool,
                        &mut self.drops,
                        packet,
                        now,
                        DropReason::UnknownSession,
                        &format_args!("session id {}", header.receiver.0),
                    );
                };
                let context = ReceiveContext {
                    pool: &mut self.pool,
                    drops: &mut self.drops,
                    deliver: &mut self.deliver,
                    allowed_sources: None,
                };
                let arrival = ArrivalPath::BySocket;
                session.receive(
                    now,
                    &received,
                    &header,
                    packet_type,
                    packet,
                    arrival,
                    context,
                );
                session.take_outbox(out);
                if session.peer_closed {
                    self.end_session(now, "the server closed it");
                    // Every client of a server that shuts down hears this at once:
                    // the jitter keeps their handshakes from arriving in step.
                    self.next_handshake_at =
                        now + retry_delay(self.settings.handshake_retry, (self.random)());
                }
            }
            Ok(PacketType::HandshakeInit) | Err(_) => {
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
        if let Some(session) = &mut self.session {
            session.send_due_acks(now, false, &mut self.pool);
            session.take_outbox(out);
        }
    }

    fn poll_tun_packet(&mut self) -> Option<Packet> {
        self.deliver.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // While a timestamp ceiling waits to be stored no handshake is due: the
        // daemon stores it after this step, and the handshake is due at once then.
        let handshake_at = (!self.init_clock.waiting_for_store()).then_some(self.next_handshake_at);
        match &self.session {
            Some(session) => {
                let silent = session.last_received + self.settings.session_timeout;
                let mut deadline = silent.min(session.keys.expiry());
                if let Some(handshake_at) = handshake_at {
                    deadline = deadline.min(session.keys.rekey_due().max(handshake_at));
                }
                Some(
                    session
                        .poll_timeout()
                        .map_or(deadline, |at| at.min(deadline)),
                )
            }
            None => handshake_at,
        }
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        debug_assert!(
            self.session
                .as_ref()
                .is_none_or(|session| session.outbox.is_empty()),
            "a step left datagrams in the session's outbox"
        );
        let Some(session) = &mut self.session else {
            if now >= self.next_handshake_at {
                self.start_handshake(now, out);
            }
            return;
        };
        if now >= session.last_received + self.settings.session_timeout {
            let silent = self.settings.session_timeout.as_millis();
            self.end_session(now, &format!("nothing from the server for {silent} ms"));
            return self.start_handshake(now, out);
        }
        if session.keys.expired(now) {
            self.end_session(now, "its keys expired before a renewal succeeded");
            return self.start_handshake(now, out);
        }
        session.keys.forget_stale(now);
        session.handle_timeout(now, &mut self.pool, &mut self.deliver, &mut self.drops);
        session.take_outbox(out);
        // Unanswered renewals are repeated on the next path every retry interval.
        if now >= session.keys.rekey_due() && now >= self.next_handshake_at {
            self.start_handshake(now, out);
        }
    }

    fn on_send_failed(&mut self, now: Instant, path: PathId, error: &std::io::Error) {
        if let Some(path) = self.paths_mut().iter_mut().find(|p| p.id == path) {
            path.counters.send_errors += 1;
        }
        self.drops.record(
            now,
            DropReason::SendFailed,
            &format_args!("path {}: {error}", path.0),
        );
    }

    fn on_socket_full(&mut self, socket: usize) {
        if let Some(path) = self.paths_mut().iter_mut().find(|p| p.socket == socket) {
            path.counters.socket_full += 1;
        }
    }

    fn set_socket_open(
        &mut self,
        now: Instant,
        socket: usize,
        open: bool,
        out: &mut Vec<Outgoing>,
    ) {
        let Some(index) = self.paths().iter().position(|path| path.socket == socket) else {
            return;
        };
        let was_open = self.paths()[index].socket_open;
        if open && !was_open {
            // A new socket may have a new address: a cookie for the old one is useless.
            self.cookies
                .retain(|(cookie_socket, _)| *cookie_socket != socket);
        }
        match &mut self.session {
            Some(session) if was_open && !open => {
                session.on_socket_closed(now, index, &mut self.pool, &mut self.drops);
                session.take_outbox(out);
            }
            Some(session) if !was_open && open => {
                // A new socket may take a new route (a changed address, a re-attached
                // modem): the path starts afresh, and its first probe goes out now.
                let path = &mut session.paths[index];
                path.reset_for_session(now, &self.settings.session, &mut self.pool);
                path.socket_open = true;
            }
            _ => self.paths_mut()[index].socket_open = open,
        }
    }

    fn record_drop(&mut self, now: Instant, reason: DropReason, detail: &dyn std::fmt::Display) {
        self.drops.record(now, reason, detail);
    }

    fn close(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        if let Some(session) = &mut self.session {
            session.close(now, &mut self.pool);
            session.take_outbox(out);
        }
    }

    fn seal(
        &mut self,
        now: Instant,
        outgoing: Outgoing,
        buffer: &mut Vec<u8>,
        piggyback: bool,
        follow: &mut Vec<Outgoing>,
    ) -> Option<usize> {
        let session = self
            .session
            .as_mut()
            .filter(|session| session.local_id == outgoing.owner);
        seal_for(
            session,
            now,
            outgoing,
            buffer,
            piggyback,
            &mut self.pool,
            &mut self.drops,
            follow,
        )
    }

    fn unsent(&mut self, now: Instant, outgoing: Outgoing, reroute: bool, out: &mut Vec<Outgoing>) {
        match &mut self.session {
            Some(session) if session.local_id == outgoing.owner => {
                session.unsent(now, outgoing, reroute, &mut self.pool);
                session.take_outbox(out);
            }
            _ => self.pool.recycle(outgoing.packet),
        }
    }

    fn pool(&mut self) -> &mut BufferPool {
        &mut self.pool
    }

    fn report(&self, now: Instant) -> Report {
        let session = self
            .session
            .as_ref()
            .map(|session| SessionReport::new(session, "server", now));
        let paths = match &session {
            Some(_) => Vec::new(),
            None => self
                .paths()
                .iter()
                .map(|path| {
                    super::PathReport::new(
                        path,
                        now,
                        self.settings.session.path_timeout,
                        mptund_sched::PathShare::default(),
                    )
                })
                .collect(),
        };
        Report::new(
            "client",
            session.into_iter().collect(),
            paths,
            &self.drops,
            self.sessions_established,
        )
    }
}
