//! A session's transport keys over its life, renewed by a new handshake as
//! WireGuard renews its keypairs: the keys in use, the keys they replaced (still
//! accepted for datagrams in flight on slow paths), and, on the server, the next
//! keys, which take over only once the client has sealed a datagram with them.
//!
//! Every key pair has its own receiver id, so the header of a datagram names the
//! keys that open it, and its own nonce counter and replay window.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::time::Instant;

use crate::counters::DropReason;
#[cfg(test)]
use crate::crypto::SealingKey;
use crate::crypto::{Aead, KeyLifetime, SessionKeys};
use crate::replay::ReplayWindow;
use crate::wire::{PacketType, SessionId, TransportHeader, TransportLayout, TRANSPORT_HEADER_LEN};

/// The keys of one handshake.
pub struct KeyPair {
    /// Receiver id of the datagrams the peer seals with these keys.
    pub local_id: SessionId,
    /// Receiver id this side writes into what it seals with these keys.
    pub peer_id: SessionId,
    keys: SessionKeys,
    next_counter: u64,
    replay: ReplayWindow,
    created: Instant,
}

impl KeyPair {
    pub fn new(now: Instant, local_id: SessionId, peer_id: SessionId, keys: SessionKeys) -> Self {
        Self {
            local_id,
            peer_id,
            keys,
            next_counter: 0,
            replay: ReplayWindow::new(),
            created: now,
        }
    }

    fn rejects(&self, now: Instant, counter: u64, lifetime: &KeyLifetime) -> bool {
        let lifetime = lifetime.for_aead(self.keys.aead);
        now.saturating_duration_since(self.created) >= lifetime.reject_after_time
            || counter >= lifetime.reject_after_messages
    }

    /// The higher of the counters this side sealed and the peer's it accepted under
    /// these keys: AES-GCM's message limit counts both directions' use of the
    /// handshake, and only the client can renew.
    fn messages(&self) -> u64 {
        // Counters start at 0; one more than none received is harmless here.
        self.next_counter
            .max(self.replay.highest().saturating_add(1))
    }

    pub fn aead(&self) -> Aead {
        self.keys.aead
    }
}

/// Which of the ring's key pairs opened a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySlot {
    Current,
    Previous,
    /// The server's next keys: opening with them confirmed them, and they are now
    /// the current ones.
    Confirmed,
}

/// What opening a datagram did to the ring.
#[derive(Clone, Copy, Debug)]
pub struct Opened {
    pub slot: KeySlot,
    /// A key pair the ring let go of; its receiver id is free again.
    pub retired: Option<SessionId>,
}

pub struct KeyRing {
    current: KeyPair,
    // Boxed: a key pair is 2 KiB (its replay window) and a session holds only its
    // current one most of the time; 10,000 idle sessions saved 42 MiB.
    previous: Option<Box<KeyPair>>,
    next: Option<Box<KeyPair>>,
    lifetime: KeyLifetime,
}

impl KeyRing {
    pub fn new(current: KeyPair, lifetime: KeyLifetime) -> Self {
        Self {
            current,
            previous: None,
            next: None,
            lifetime,
        }
    }

    pub fn set_lifetime(&mut self, lifetime: KeyLifetime) {
        self.lifetime = lifetime;
    }

    pub fn current(&self) -> &KeyPair {
        &self.current
    }

    pub fn current_age(&self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(self.current.created)
    }

    /// Every receiver id that names one of the ring's key pairs.
    pub fn local_ids(&self) -> impl Iterator<Item = SessionId> + '_ {
        std::iter::once(self.current.local_id)
            .chain(self.previous.as_ref().map(|keys| keys.local_id))
            .chain(self.next.as_ref().map(|keys| keys.local_id))
    }

    pub fn knows(&self, receiver: SessionId) -> bool {
        self.local_ids().any(|id| id == receiver)
    }

    /// The client renews its keys from this instant on (or at once when either side
    /// has sealed too many datagrams under them).
    pub fn rekey_due(&self) -> Instant {
        let lifetime = self.lifetime.for_aead(self.current.keys.aead);
        let due = self.current.created + lifetime.rekey_after_time;
        if self.current.messages() >= lifetime.rekey_after_messages {
            self.current.created.min(due)
        } else {
            due
        }
    }

    /// From this instant on the current keys may no longer be used.
    pub fn expiry(&self) -> Instant {
        let lifetime = self.lifetime.for_aead(self.current.keys.aead);
        let expiry = self.current.created + lifetime.reject_after_time;
        if self.current.next_counter >= lifetime.reject_after_messages {
            self.current.created.min(expiry)
        } else {
            expiry
        }
    }

    pub fn expired(&self, now: Instant) -> bool {
        now >= self.expiry()
    }

    /// The header and nonce counter for the next datagram sealed with the current
    /// keys, and the key to seal it with: for tests that forge datagrams.
    #[cfg(test)]
    pub fn next_header(
        &mut self,
        packet_type: PacketType,
        path_id: u8,
    ) -> ([u8; TRANSPORT_HEADER_LEN], u64, &SealingKey) {
        let (bytes, counter) = self.take_header(packet_type, path_id);
        (bytes, counter, &self.current.keys.send)
    }

    /// The header of the next datagram under the current keys, and its nonce counter,
    /// which it takes.
    fn take_header(
        &mut self,
        packet_type: PacketType,
        path_id: u8,
    ) -> ([u8; TRANSPORT_HEADER_LEN], u64) {
        let counter = self.current.next_counter;
        self.current.next_counter = counter.saturating_add(1);
        let header = TransportHeader {
            packet_type,
            path_id,
            receiver: self.current.peer_id,
            counter,
        };
        let mut bytes = [0u8; TRANSPORT_HEADER_LEN];
        header.emit(&mut bytes);
        (bytes, counter)
    }

    /// Seals `datagram`, laid out as `layout` with its metadata, frames and payload
    /// written, under the current keys' next nonce counter: writes the header, seals
    /// in place and appends the tag. The caller must not send once the keys have
    /// [`expired`](Self::expired).
    pub fn seal(
        &mut self,
        packet_type: PacketType,
        path_id: u8,
        layout: &TransportLayout,
        datagram: &mut [u8],
    ) {
        let (header_bytes, counter) = self.take_header(packet_type, path_id);
        // The caller sized `datagram` by `layout`: these parts are always there.
        debug_assert!(datagram.len() >= layout.datagram_len());
        let Some(body) = datagram.get_mut(layout.sealed()) else {
            return;
        };
        let tag = self
            .current
            .keys
            .send
            .seal_in_place(&header_bytes, counter, body);
        if let Some(out) = datagram.get_mut(layout.header()) {
            out.copy_from_slice(&header_bytes);
        }
        if let Some(out) = datagram.get_mut(layout.tag()) {
            out.copy_from_slice(&tag);
        }
    }

    /// Authenticates and decrypts `sealed` (the datagram after its header) in place
    /// with the keys its header names; returns the plaintext length. The replay
    /// window moves only for authentic datagrams.
    pub fn open(
        &mut self,
        now: Instant,
        header: &TransportHeader,
        header_bytes: &[u8; TRANSPORT_HEADER_LEN],
        sealed: &mut [u8],
    ) -> Result<(Opened, usize), DropReason> {
        let lifetime = self.lifetime;
        let (slot, keys) = if self.current.local_id == header.receiver {
            (KeySlot::Current, &mut self.current)
        } else if let Some(keys) = self
            .previous
            .as_deref_mut()
            .filter(|keys| keys.local_id == header.receiver)
        {
            (KeySlot::Previous, keys)
        } else if let Some(keys) = self
            .next
            .as_deref_mut()
            .filter(|keys| keys.local_id == header.receiver)
        {
            (KeySlot::Confirmed, keys)
        } else {
            return Err(DropReason::UnknownSession);
        };
        if keys.rejects(now, header.counter, &lifetime) {
            return Err(DropReason::StaleKey);
        }
        if keys.replay.check(header.counter).is_err() {
            return Err(DropReason::Replayed);
        }
        let len = keys
            .keys
            .recv
            .open_in_place(header_bytes, header.counter, sealed)
            .map_err(|_| DropReason::AuthenticationFailed)?
            .len();
        keys.replay
            .check_and_update(header.counter)
            .map_err(|_| DropReason::Replayed)?;
        let retired = match slot {
            KeySlot::Confirmed => self.confirm_next(),
            _ => None,
        };
        Ok((Opened { slot, retired }, len))
    }

    /// Client: the keys of a completed renewal take over sending at once (the
    /// server has them); the old ones still open what the server sent before it
    /// switched. Returns the receiver id of the keys dropped to make room.
    pub fn rotate(&mut self, keys: KeyPair) -> Option<SessionId> {
        let old = std::mem::replace(&mut self.current, keys);
        self.previous
            .replace(Box::new(old))
            .map(|keys| keys.local_id)
    }

    /// Server: keys from a renewal, used only once the client proves them. A
    /// second renewal before that replaces the first. Returns the receiver id of
    /// the keys replaced.
    pub fn stage_next(&mut self, keys: KeyPair) -> Option<SessionId> {
        self.next.replace(Box::new(keys)).map(|keys| keys.local_id)
    }

    fn confirm_next(&mut self) -> Option<SessionId> {
        let next = self.next.take()?;
        self.rotate(*next)
    }

    /// Drops the previous keys once they are too old to open anything.
    pub fn forget_stale(&mut self, now: Instant) -> Option<SessionId> {
        let lifetime = self.lifetime;
        let stale = self
            .previous
            .as_ref()
            .is_some_and(|keys| keys.rejects(now, 0, &lifetime));
        if stale {
            return self.previous.take().map(|keys| keys.local_id);
        }
        None
    }

    /// When [`forget_stale`](Self::forget_stale) has work to do.
    pub fn next_cleanup(&self) -> Option<Instant> {
        self.previous
            .as_ref()
            .map(|keys| keys.created + self.lifetime.reject_after_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pair(now: Instant, local: u32, peer: u32, seed: u8) -> (KeyPair, KeyPair) {
        let a = [seed; 32];
        let b = [seed.wrapping_add(1); 32];
        (
            KeyPair::new(
                now,
                SessionId(local),
                SessionId(peer),
                SessionKeys::new(Aead::ChaCha20Poly1305, &a, &b),
            ),
            KeyPair::new(
                now,
                SessionId(peer),
                SessionId(local),
                SessionKeys::new(Aead::ChaCha20Poly1305, &b, &a),
            ),
        )
    }

    /// Seals a datagram with `from`'s current keys and opens it with `to`.
    fn deliver(now: Instant, from: &mut KeyRing, to: &mut KeyRing) -> Result<Opened, DropReason> {
        let (header_bytes, counter, key) = from.next_header(PacketType::Data, 1);
        let mut body = *b"twelve bytes________________";
        let tag = key.seal_in_place(&header_bytes, counter, &mut body[..12]);
        body[12..].copy_from_slice(&tag);
        let header = TransportHeader::parse(&header_bytes).unwrap();
        to.open(now, &header, &header_bytes, &mut body)
            .map(|(opened, len)| {
                assert_eq!(len, 12);
                opened
            })
    }

    fn lifetime() -> KeyLifetime {
        KeyLifetime {
            rekey_after_time: Duration::from_secs(2),
            rekey_after_messages: 1000,
            reject_after_time: Duration::from_secs(3),
            reject_after_messages: 2000,
        }
    }

    /// A client's and a server's ring holding the two sides of one handshake.
    fn rings(start: Instant) -> (KeyRing, KeyRing) {
        let (client_keys, server_keys) = pair(start, 1, 2, 10);
        (
            KeyRing::new(client_keys, lifetime()),
            KeyRing::new(server_keys, lifetime()),
        )
    }

    #[test]
    fn next_keys_take_over_only_when_the_client_uses_them() {
        let start = Instant::now();
        let (mut client, mut server) = rings(start);
        assert_eq!(
            deliver(start, &mut client, &mut server).unwrap().slot,
            KeySlot::Current
        );

        let later = start + Duration::from_secs(2);
        let (client_next, server_next) = pair(later, 3, 4, 20);
        assert_eq!(server.stage_next(server_next), None);
        // Until the client switches, both sides keep the old keys.
        assert_eq!(
            deliver(later, &mut server, &mut client).unwrap().slot,
            KeySlot::Current
        );
        assert_eq!(client.rotate(client_next), None);
        // The server still seals with the old keys: the client opens them as previous.
        assert_eq!(
            deliver(later, &mut server, &mut client).unwrap().slot,
            KeySlot::Previous
        );
        let opened = deliver(later, &mut client, &mut server).unwrap();
        assert_eq!(opened.slot, KeySlot::Confirmed);
        assert_eq!(server.current().local_id, SessionId(4));
        assert_eq!(
            deliver(later, &mut server, &mut client).unwrap().slot,
            KeySlot::Current
        );
        assert!(server.knows(SessionId(2)) && client.knows(SessionId(1)));
    }

    #[test]
    fn nothing_is_accepted_under_keys_older_than_the_reject_time() {
        let start = Instant::now();
        let (mut client, mut server) = rings(start);
        let late = start + lifetime().reject_after_time;
        assert!(client.expired(late));
        assert_eq!(
            deliver(late, &mut client, &mut server).unwrap_err(),
            DropReason::StaleKey
        );

        // The previous keys too, and they are forgotten.
        let (_, server_next) = pair(start + Duration::from_secs(1), 3, 4, 20);
        server.stage_next(server_next);
        server.confirm_next();
        assert_eq!(server.forget_stale(late), Some(SessionId(2)));
        assert!(!server.knows(SessionId(2)));
    }

    #[test]
    fn the_message_limits_bring_renewal_and_rejection_forward() {
        let start = Instant::now();
        let (mut client, mut server) = rings(start);
        assert_eq!(client.rekey_due(), start + Duration::from_secs(2));
        for _ in 0..1000 {
            deliver(start, &mut client, &mut server).unwrap();
        }
        assert_eq!(client.rekey_due(), start);
        assert!(!client.expired(start));
        for _ in 1000..2000 {
            deliver(start, &mut client, &mut server).unwrap();
        }
        assert!(client.expired(start));
        assert_eq!(
            deliver(start, &mut client, &mut server).unwrap_err(),
            DropReason::StaleKey
        );
    }

    #[test]
    fn what_the_server_sealed_brings_the_clients_renewal_forward_too() {
        // Only the client can renew: in a download the server seals nearly all.
        let start = Instant::now();
        let (mut client, mut server) = rings(start);
        for _ in 0..999 {
            deliver(start, &mut server, &mut client).unwrap();
        }
        assert_eq!(client.rekey_due(), start + Duration::from_secs(2));
        deliver(start, &mut server, &mut client).unwrap();
        assert_eq!(client.rekey_due(), start);
    }

    #[test]
    fn a_datagram_for_unknown_keys_or_replayed_is_refused() {
        let start = Instant::now();
        let (client_keys, server_keys) = pair(start, 1, 2, 10);
        let (_, strangers) = pair(start, 7, 8, 30);
        let mut client = KeyRing::new(client_keys, lifetime());
        let mut stranger = KeyRing::new(strangers, lifetime());
        let mut server = KeyRing::new(server_keys, lifetime());
        assert_eq!(
            deliver(start, &mut stranger, &mut server).unwrap_err(),
            DropReason::UnknownSession
        );
        let (header_bytes, counter, key) = client.next_header(PacketType::Data, 1);
        let mut body = [0u8; 16];
        let tag = key.seal_in_place(&header_bytes, counter, &mut []);
        body.copy_from_slice(&tag);
        let header = TransportHeader::parse(&header_bytes).unwrap();
        let mut copy = body;
        assert!(server
            .open(start, &header, &header_bytes, &mut copy)
            .is_ok());
        let mut copy = body;
        assert_eq!(
            server
                .open(start, &header, &header_bytes, &mut copy)
                .unwrap_err(),
            DropReason::Replayed
        );
    }
}
