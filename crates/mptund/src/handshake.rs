//! The session handshake: Noise `IK` (Noise spec, section 7.5) with
//! `Noise_IK_25519_ChaChaPoly_BLAKE2s`, framed in the fixed-size HandshakeInit
//! (148 bytes) and HandshakeResponse (60 bytes) datagrams of [`crate::wire`].
//!
//! The client knows the server's static public key in advance. Message 1
//! carries the client's ephemeral key, its encrypted static key and an
//! encrypted 12-byte payload: the client's wall-clock time in nanoseconds since
//! the UNIX epoch, and the server session id whose keys this handshake renews
//! (zero for a new session). Message 2 carries the server's ephemeral key and
//! the server's session id as its encrypted payload. After message 2 both sides
//! split the Noise chaining key into one transport key per direction.
//!
//! Protocol version 2 binds the init's clear header (type, path id, version and
//! the client's session id) into the Noise prologue: rewriting any of those
//! bytes makes message 1 fail to authenticate, so nobody can move a genuine
//! init to another path or session.
//!
//! Before doing any Diffie-Hellman, the server checks mac1, a MAC over the
//! init keyed by a hash of its own public key: only someone who knows the
//! server's public key can produce it, which turns away junk and scans for the
//! price of one HMAC.
//!
//! # What the caller (server) must still decide
//!
//! [`Responder::accept`] proves that the client holds the private key of
//! [`AcceptedInit::peer_public`], nothing more. The server must
//! - refuse the init unless `peer_public` is a configured peer, and
//! - refuse it unless `unix_time_nanos` is strictly greater than the largest
//!   value accepted from that peer so far: Noise IK message 1 can be replayed
//!   verbatim by anyone who captured it, and the monotonic timestamp is what
//!   makes a replay useless (as in WireGuard's TAI64N timestamp).
//!
//! # Transport keys
//!
//! The protocol takes the raw Noise split: `k1` (initiator to responder) and
//! `k2` (responder to initiator) of `Split()` (Noise spec, section 5.2) become
//! the keys of [`crate::crypto`] for the AEAD the init names, taken with snow's
//! `dangerously_get_raw_split` (feature `risky-raw-split`). The "danger" is
//! using keys outside Noise's own nonce discipline; mptund keeps its own: one
//! explicit 64-bit counter per direction, never reused, checked by a replay window.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use crate::crypto::{Aead, SessionKeys, KEY_LEN};
use crate::keys::{PrivateKey, PublicKey};
use crate::wire::field;
use crate::wire::{
    HandshakeInit, HandshakeResponse, SessionId, WireError, HANDSHAKE_INIT_LEN,
    HANDSHAKE_RESPONSE_LEN, TAG_LEN,
};
use ring::{digest, hmac};
use snow::{Builder, HandshakeState};
use thiserror::Error;

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
/// The start of the Noise prologue: binds the handshake to this protocol and
/// version. The init's clear header bytes follow it.
pub const PROLOGUE_LABEL: &[u8] = b"mptund v2";
/// Label hashed with the server's public key to form the mac1 key.
pub const MAC1_LABEL: &[u8] = b"mptund mac1";
/// Length of mac1 (truncated HMAC-SHA256).
pub const MAC1_LEN: usize = 16;
/// Length of Noise IK message 1 with its 12-byte payload.
pub const NOISE_INIT_LEN: usize = 108;
/// Length of Noise IK message 2 with its 4-byte payload.
pub const NOISE_RESPONSE_LEN: usize = 52;
/// The init payload: the timestamp (8 bytes), then the session id renewed (4).
const INIT_PAYLOAD_LEN: usize = 12;
/// The response payload: the server's session id.
const RESPONSE_PAYLOAD_LEN: usize = 4;
const PROLOGUE_LEN: usize =
    PROLOGUE_LABEL.len() + (field::INIT_PROLOGUE.end - field::INIT_PROLOGUE.start);

const _: () = assert!(field::INIT_NOISE.end - field::INIT_NOISE.start == NOISE_INIT_LEN);
const _: () =
    assert!(field::RESPONSE_NOISE.end - field::RESPONSE_NOISE.start == NOISE_RESPONSE_LEN);

/// Errors from the handshake.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The datagram is not a well-formed handshake message of the expected
    /// type and size.
    #[error("malformed handshake message: {0}")]
    Wire(#[from] WireError),
    /// mac1 of an init does not verify: the sender does not know this
    /// server's public key (junk, a scan, or a client configured with another
    /// server key). Drop silently.
    #[error("handshake init has a bad mac1 (client does not know this server's public key)")]
    BadMac1,
    /// A Noise message failed to authenticate: the peer used other keys than
    /// the ones expected, or the message was tampered with.
    #[error("handshake message failed to authenticate")]
    Decrypt,
    /// A response is addressed to another session id than the pending init's.
    #[error("handshake response is for session {got}, expected {expected}")]
    WrongReceiver {
        /// Session id of the pending init.
        expected: SessionId,
        /// Receiver session id in the response.
        got: SessionId,
    },
    /// A response names another transport AEAD than the init asked for.
    #[error("handshake response is for AEAD {}, the init asked for {}", got.name(), expected.name())]
    WrongAead {
        /// The AEAD of the pending init.
        expected: Aead,
        /// The AEAD in the response.
        got: Aead,
    },
    /// A Noise message's payload does not have the expected length.
    #[error("handshake payload is {got} bytes, expected {expected}")]
    BadPayload {
        /// Expected payload length.
        expected: usize,
        /// Payload length found.
        got: usize,
    },
    /// The Noise library reported an error other than a failed decryption
    /// (setup, bad DH input such as a low-order point, state).
    #[error("noise protocol error: {0}")]
    Noise(snow::Error),
    /// The transport keys could not be extracted or failed their cross-check
    /// against the Noise library; indicates an incompatible snow version.
    #[error("internal handshake error: {0}")]
    Internal(&'static str),
}

impl From<snow::Error> for HandshakeError {
    fn from(error: snow::Error) -> Self {
        match error {
            snow::Error::Decrypt => HandshakeError::Decrypt,
            other => HandshakeError::Noise(other),
        }
    }
}

fn builder<'a>() -> Result<Builder<'a>, HandshakeError> {
    Ok(Builder::with_resolver(
        NOISE_PARAMS.parse()?,
        crate::noise::resolver(),
    ))
}

/// The raw Noise split of a finished handshake: (initiator-to-responder,
/// responder-to-initiator).
fn split_keys(
    mut handshake: HandshakeState,
) -> Result<([u8; KEY_LEN], [u8; KEY_LEN]), HandshakeError> {
    if !handshake.is_handshake_finished() {
        return Err(HandshakeError::Internal("handshake not finished"));
    }
    Ok(handshake.dangerously_get_raw_split())
}

fn mac1_key(server: &PublicKey) -> hmac::Key {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(MAC1_LABEL);
    context.update(&server.0);
    hmac::Key::new(hmac::HMAC_SHA256, context.finish().as_ref())
}

/// Writes the mac1 of an init for `server`. Anyone who knows the server's public
/// key can do this, which is why mac1 only spares the server Diffie-Hellman work
/// on junk and proves nothing about the sender.
pub fn write_mac1(server: &PublicKey, init: &mut [u8; HANDSHAKE_INIT_LEN]) {
    let mac = mac1(&mac1_key(server), &init[field::INIT_MAC1_INPUT]);
    init[field::INIT_MAC1].copy_from_slice(&mac);
}

fn mac1(key: &hmac::Key, input: &[u8]) -> [u8; MAC1_LEN] {
    let tag = hmac::sign(key, input);
    // HMAC-SHA256 tags are 32 bytes.
    tag.as_ref()
        .first_chunk::<MAC1_LEN>()
        .copied()
        .unwrap_or([0; MAC1_LEN])
}

/// Compares without an early exit, so the time taken does not reveal how
/// many leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    core::hint::black_box(difference) == 0
}

/// The Noise prologue of an init: the label, then the init's clear header.
fn prologue(init_header: &[u8]) -> [u8; PROLOGUE_LEN] {
    let mut prologue = [0u8; PROLOGUE_LEN];
    let (label, header) = prologue.split_at_mut(PROLOGUE_LABEL.len());
    label.copy_from_slice(PROLOGUE_LABEL);
    header.copy_from_slice(init_header);
    prologue
}

/// The initiator (client) after sending a HandshakeInit, waiting for the response.
pub struct PendingHandshake {
    /// `None` once completed.
    handshake: Option<HandshakeState>,
    sender: SessionId,
    path_id: u8,
    aead: Aead,
}

impl core::fmt::Debug for PendingHandshake {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PendingHandshake")
            .field("sender", &self.sender)
            .field("path_id", &self.path_id)
            .finish_non_exhaustive()
    }
}

/// A completed handshake, initiator side.
#[derive(Debug)]
pub struct Established {
    /// Transport keys: `send` seals client-to-server, `recv` opens server-to-client.
    pub keys: SessionKeys,
    /// The server's session id: put it in the receiver field of every
    /// transport datagram sent to the server.
    pub peer_session: SessionId,
}

/// What a HandshakeInit says, all of it authenticated by Noise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitFields {
    /// The client's session id for the new keys: the server addresses its
    /// datagrams to it.
    pub sender: SessionId,
    /// The path the init goes out on.
    pub path_id: u8,
    /// The client's wall-clock time; the server refuses an init that is not
    /// newer than the last one it accepted from this client.
    pub unix_time_nanos: u64,
    /// The server session whose keys this handshake renews, or `None` for a new
    /// session.
    pub renews: Option<SessionId>,
    /// The transport AEAD of the new keys (a clear byte of the init, bound by the
    /// Noise prologue).
    pub aead: Aead,
}

/// Starts a handshake from the client: writes a HandshakeInit into `out` (mac2
/// left zero) and returns the state that completes it.
pub fn initiate(
    local: &PrivateKey,
    server: &PublicKey,
    fields: InitFields,
    out: &mut [u8; HANDSHAKE_INIT_LEN],
) -> Result<PendingHandshake, HandshakeError> {
    HandshakeInit::emit_header(out, fields.path_id, fields.aead, fields.sender);
    let builder = builder()?;
    let mut handshake = builder
        .local_private_key(local.secret_bytes())?
        .remote_public_key(&server.0)?
        .prologue(&prologue(&out[field::INIT_PROLOGUE]))?
        .build_initiator()?;
    let mut payload = [0u8; INIT_PAYLOAD_LEN];
    let (timestamp, renews) = payload.split_at_mut(8);
    timestamp.copy_from_slice(&fields.unix_time_nanos.to_be_bytes());
    renews.copy_from_slice(&fields.renews.map_or(0, |id| id.0).to_be_bytes());
    let written = handshake.write_message(&payload, &mut out[field::INIT_NOISE])?;
    if written != NOISE_INIT_LEN {
        return Err(HandshakeError::Internal(
            "unexpected Noise message 1 length",
        ));
    }
    out[field::INIT_MAC2].fill(0);
    write_mac1(server, out);
    Ok(PendingHandshake {
        handshake: Some(handshake),
        sender: fields.sender,
        path_id: fields.path_id,
        aead: fields.aead,
    })
}

impl PendingHandshake {
    /// The client's session id this init was sent with.
    pub fn sender(&self) -> SessionId {
        self.sender
    }

    /// The path id this init was sent on.
    pub fn path_id(&self) -> u8 {
        self.path_id
    }

    /// Processes the server's HandshakeResponse and derives the transport keys.
    /// A rejected response (anyone on the path can send one) leaves the pending
    /// state usable for the genuine one. After a success the state is spent and
    /// further calls fail.
    pub fn try_complete(&mut self, response: &[u8]) -> Result<Established, HandshakeError> {
        let view = HandshakeResponse::new_checked(response)?;
        if view.receiver() != self.sender {
            return Err(HandshakeError::WrongReceiver {
                expected: self.sender,
                got: view.receiver(),
            });
        }
        if view.aead() != self.aead {
            return Err(HandshakeError::WrongAead {
                expected: self.aead,
                got: view.aead(),
            });
        }
        let handshake = self
            .handshake
            .as_mut()
            .ok_or(HandshakeError::Internal("handshake already completed"))?;
        // On failure snow restores its symmetric state, so the next response
        // can still be tried.
        let mut payload = [0u8; RESPONSE_PAYLOAD_LEN + TAG_LEN];
        let len = handshake.read_message(view.noise_message(), &mut payload)?;
        let finished = self
            .handshake
            .take()
            .ok_or(HandshakeError::Internal("handshake already completed"))?;
        let server_session = payload
            .get(..len)
            .and_then(|payload| <[u8; RESPONSE_PAYLOAD_LEN]>::try_from(payload).ok())
            .ok_or(HandshakeError::BadPayload {
                expected: RESPONSE_PAYLOAD_LEN,
                got: len,
            })?;
        let (to_responder, to_initiator) = split_keys(finished)?;
        Ok(Established {
            keys: SessionKeys::new(self.aead, &to_responder, &to_initiator),
            peer_session: SessionId(u32::from_be_bytes(server_session)),
        })
    }
}

/// The server's handshake endpoint: its static key and the mac1 key derived
/// from its public key.
pub struct Responder {
    local: PrivateKey,
    public: PublicKey,
    mac1_key: hmac::Key,
}

impl core::fmt::Debug for Responder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Responder")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// A HandshakeInit that passed mac1 and Noise, before the server answered it.
pub struct AcceptedInit {
    /// The client's static public key, authenticated by Noise. The server
    /// must check it is a configured peer.
    pub peer_public: PublicKey,
    /// What the init says: the client's session id, path, time and the session
    /// it renews. The server must check the time is newer than the last init
    /// accepted from this peer.
    pub fields: InitFields,
    handshake: HandshakeState,
}

impl core::fmt::Debug for AcceptedInit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AcceptedInit")
            .field("peer_public", &self.peer_public)
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// A responder for the server key `local`.
    pub fn new(local: &PrivateKey) -> Self {
        let public = local.public_key();
        Responder {
            local: local.clone(),
            public,
            mac1_key: mac1_key(&public),
        }
    }

    /// The server's public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// Whether `msg` is a well-formed HandshakeInit with a valid mac1. Costs
    /// one HMAC-SHA256; the comparison is constant-time. No Diffie-Hellman.
    pub fn verify_mac(&self, msg: &[u8]) -> bool {
        match HandshakeInit::new_checked(msg) {
            Ok(init) => constant_time_eq(&mac1(&self.mac1_key, init.mac1_input()), init.mac1()),
            Err(_) => false,
        }
    }

    /// Checks an init's size, type, mac1 and Noise message 1 (two DH
    /// operations) and returns what it says. Does not decide whether the
    /// client is allowed or the init is fresh; see the module docs.
    pub fn accept(&self, msg: &[u8]) -> Result<AcceptedInit, HandshakeError> {
        let init = HandshakeInit::new_checked(msg)?;
        if !self.verify_mac(msg) {
            return Err(HandshakeError::BadMac1);
        }
        let builder = builder()?;
        let mut handshake = builder
            .local_private_key(self.local.secret_bytes())?
            .prologue(&prologue(init.prologue_bytes()))?
            .build_responder()?;
        let mut payload = [0u8; NOISE_INIT_LEN];
        let len = handshake.read_message(init.noise_message(), &mut payload)?;
        let payload = payload
            .get(..len)
            .and_then(|payload| <[u8; INIT_PAYLOAD_LEN]>::try_from(payload).ok())
            .ok_or(HandshakeError::BadPayload {
                expected: INIT_PAYLOAD_LEN,
                got: len,
            })?;
        let (timestamp, renews) = payload.split_at(8);
        let unix_time_nanos =
            u64::from_be_bytes(timestamp.try_into().map_err(|_| {
                HandshakeError::Internal("the init payload's timestamp is 8 bytes")
            })?);
        let renews =
            u32::from_be_bytes(renews.try_into().map_err(|_| {
                HandshakeError::Internal("the init payload's session id is 4 bytes")
            })?);
        let peer_public = handshake
            .get_remote_static()
            .and_then(|key| <[u8; KEY_LEN]>::try_from(key).ok())
            .map(PublicKey)
            .ok_or(HandshakeError::Internal(
                "no remote static key after IK message 1",
            ))?;
        Ok(AcceptedInit {
            peer_public,
            fields: InitFields {
                sender: init.sender(),
                path_id: init.path_id(),
                unix_time_nanos,
                renews: (renews != 0).then_some(SessionId(renews)),
                aead: init.aead(),
            },
            handshake,
        })
    }
}

impl AcceptedInit {
    /// Writes the HandshakeResponse (carrying the server's session id `sender`)
    /// into `out` and returns the server's transport keys. The response goes
    /// back on the path the init came from.
    pub fn respond(
        mut self,
        sender: SessionId,
        out: &mut [u8; HANDSHAKE_RESPONSE_LEN],
    ) -> Result<SessionKeys, HandshakeError> {
        HandshakeResponse::emit_header(
            out,
            self.fields.path_id,
            self.fields.aead,
            self.fields.sender,
        );
        let written = self
            .handshake
            .write_message(&sender.0.to_be_bytes(), &mut out[field::RESPONSE_NOISE])?;
        if written != NOISE_RESPONSE_LEN {
            return Err(HandshakeError::Internal(
                "unexpected Noise message 2 length",
            ));
        }
        let (to_responder, to_initiator) = split_keys(self.handshake)?;
        Ok(SessionKeys::new(
            self.fields.aead,
            &to_initiator,
            &to_responder,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{OpeningKey, SealingKey};
    use crate::wire::{PacketType, TransportHeader, TRANSPORT_HEADER_LEN};

    const TIME: u64 = 1_700_000_000_123_456_789;

    struct Setup {
        client: PrivateKey,
        server: PrivateKey,
        responder: Responder,
    }

    fn setup() -> Setup {
        let client = PrivateKey::generate();
        let server = PrivateKey::generate();
        let responder = Responder::new(&server);
        Setup {
            client,
            server,
            responder,
        }
    }

    const FIELDS: InitFields = InitFields {
        sender: SessionId(0x1111),
        path_id: 4,
        unix_time_nanos: TIME,
        renews: None,
        aead: Aead::ChaCha20Poly1305,
    };

    fn init(
        setup: &Setup,
        server_public: &PublicKey,
    ) -> (PendingHandshake, [u8; HANDSHAKE_INIT_LEN]) {
        let mut msg = [0u8; HANDSHAKE_INIT_LEN];
        let pending = initiate(&setup.client, server_public, FIELDS, &mut msg).unwrap();
        (pending, msg)
    }

    fn handshake(setup: &Setup) -> (Established, SessionKeys) {
        let (mut pending, msg) = init(setup, &setup.server.public_key());
        let accepted = setup.responder.accept(&msg).unwrap();
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        let server_keys = accepted.respond(SessionId(0x2222), &mut response).unwrap();
        (pending.try_complete(&response).unwrap(), server_keys)
    }

    /// Seals `plaintext` with `send` and opens it with `recv`.
    fn transfer(send: &SealingKey, recv: &OpeningKey, counter: u64, plaintext: &[u8]) -> bool {
        let mut buf = vec![0u8; TRANSPORT_HEADER_LEN + plaintext.len() + 16];
        let mut header = [0u8; TRANSPORT_HEADER_LEN];
        TransportHeader {
            packet_type: PacketType::Data,
            path_id: 1,
            receiver: SessionId(7),
            counter,
        }
        .emit(&mut header);
        buf[..16].copy_from_slice(&header);
        buf[16..16 + plaintext.len()].copy_from_slice(plaintext);
        send.seal_datagram(&mut buf, plaintext.len()).unwrap();
        match recv.open_datagram(&mut buf) {
            Ok((_, plain)) => plain == plaintext,
            Err(_) => false,
        }
    }

    #[test]
    fn the_aead_the_client_asks_for_is_the_one_both_sides_use() {
        let setup = setup();
        let fields = InitFields {
            aead: Aead::Aes256Gcm,
            ..FIELDS
        };
        let mut msg = [0u8; HANDSHAKE_INIT_LEN];
        let mut pending =
            initiate(&setup.client, &setup.server.public_key(), fields, &mut msg).unwrap();
        assert_eq!(msg[..4], [1, 4, 2, 1], "byte 3 names AES-256-GCM");
        let accepted = setup.responder.accept(&msg).unwrap();
        assert_eq!(accepted.fields.aead, Aead::Aes256Gcm);
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        let server_keys = accepted.respond(SessionId(0x2222), &mut response).unwrap();
        assert_eq!(response[..4], [2, 4, 2, 1], "echoed");
        assert_eq!(server_keys.aead, Aead::Aes256Gcm);

        // A response rewritten to the other AEAD is refused, and the genuine one
        // still completes.
        let mut rewritten = response;
        rewritten[3] = 0;
        assert!(matches!(
            pending.try_complete(&rewritten),
            Err(HandshakeError::WrongAead { .. })
        ));
        let client = pending.try_complete(&response).unwrap();
        assert_eq!(client.keys.aead, Aead::Aes256Gcm);
        assert!(transfer(&client.keys.send, &server_keys.recv, 0, b"up"));
        assert!(transfer(&server_keys.send, &client.keys.recv, 0, b"down"));
    }

    #[test]
    fn an_init_rewritten_to_another_aead_fails_noise() {
        // A man in the middle who flips the clear AEAD byte (and fixes mac1, which
        // anyone knowing the server's public key can) cannot downgrade the session.
        let setup = setup();
        let (_, mut msg) = init(&setup, &setup.server.public_key());
        msg[3] = Aead::Aes256Gcm as u8;
        write_mac1(&setup.server.public_key(), &mut msg);
        assert!(setup.responder.verify_mac(&msg));
        assert!(matches!(
            setup.responder.accept(&msg),
            Err(HandshakeError::Decrypt)
        ));
    }

    #[test]
    fn full_handshake_then_data_both_ways() {
        let setup = setup();
        let (mut pending, msg) = init(&setup, &setup.server.public_key());
        assert_eq!(pending.sender(), SessionId(0x1111));
        assert_eq!(pending.path_id(), 4);
        assert_eq!(msg[..8], [1, 4, 2, 0, 0, 0, 0x11, 0x11]);
        assert_eq!(msg[field::INIT_MAC2], [0; 16]);
        assert!(setup.responder.verify_mac(&msg));

        let accepted = setup.responder.accept(&msg).unwrap();
        assert_eq!(accepted.peer_public, setup.client.public_key());
        assert_eq!(accepted.fields, FIELDS);

        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        let server_keys = accepted.respond(SessionId(0x2222), &mut response).unwrap();
        assert_eq!(response[..8], [2, 4, 2, 0, 0, 0, 0x11, 0x11]);
        let client = pending.try_complete(&response).unwrap();
        assert_eq!(client.peer_session, SessionId(0x2222));

        assert!(transfer(
            &client.keys.send,
            &server_keys.recv,
            0,
            b"client to server"
        ));
        assert!(transfer(
            &server_keys.send,
            &client.keys.recv,
            0,
            b"server to client"
        ));
        // The two directions use different keys.
        assert!(!transfer(
            &client.keys.send,
            &client.keys.recv,
            1,
            b"reflected"
        ));
        assert!(!transfer(
            &server_keys.send,
            &server_keys.recv,
            1,
            b"reflected"
        ));
    }

    #[test]
    fn mac1_is_truncated_hmac_of_the_first_116_bytes() {
        let setup = setup();
        let server_public = setup.server.public_key();
        let (_, msg) = init(&setup, &server_public);
        let key_material = [MAC1_LABEL, server_public.0.as_slice()].concat();
        let key = hmac::Key::new(
            hmac::HMAC_SHA256,
            digest::digest(&digest::SHA256, &key_material).as_ref(),
        );
        let tag = hmac::sign(&key, &msg[..116]);
        assert_eq!(msg[116..132], tag.as_ref()[..16]);
    }

    #[test]
    fn client_with_wrong_server_key_fails() {
        let setup = setup();
        let other_server = PrivateKey::generate().public_key();
        let (_, msg) = init(&setup, &other_server);
        assert!(!setup.responder.verify_mac(&msg));
        assert!(matches!(
            setup.responder.accept(&msg),
            Err(HandshakeError::BadMac1)
        ));
        // Even with a valid mac1 (forged by someone who knows the real server
        // key), Noise fails: the init was encrypted to another key.
        let mut forged = msg;
        write_mac1(&setup.server.public_key(), &mut forged);
        assert!(setup.responder.verify_mac(&forged));
        assert!(matches!(
            setup.responder.accept(&forged),
            Err(HandshakeError::Decrypt)
        ));
    }

    #[test]
    fn unknown_client_is_reported_for_the_caller_to_refuse() {
        let setup = setup();
        let known_peers = [PrivateKey::generate().public_key()];
        let (_, msg) = init(&setup, &setup.server.public_key());
        let accepted = setup.responder.accept(&msg).unwrap();
        assert_eq!(accepted.peer_public, setup.client.public_key());
        assert!(!known_peers.contains(&accepted.peer_public));
    }

    #[test]
    fn every_modified_init_byte_fails() {
        let setup = setup();
        let (_, msg) = init(&setup, &setup.server.public_key());
        // mac2 is the cookie layer's; it is not part of the handshake proper.
        for index in 0..field::INIT_MAC2.start {
            let mut modified = msg;
            modified[index] ^= 0x01;
            assert!(!setup.responder.verify_mac(&modified), "byte {index}");
            let result = setup.responder.accept(&modified);
            assert!(result.is_err(), "byte {index}");
            if index >= 4 {
                assert!(
                    matches!(result, Err(HandshakeError::BadMac1)),
                    "byte {index}"
                );
            }
        }
    }

    #[test]
    fn a_rewritten_header_with_a_valid_mac1_fails_noise() {
        // Protocol 2: the path id and session id are bound into the prologue,
        // so an attacker who recomputes mac1 still cannot move an init.
        let setup = setup();
        let (_, msg) = init(&setup, &setup.server.public_key());
        for (index, value) in [(1, 5), (1, 63), (4, 0x80), (7, 0x12)] {
            let mut rewritten = msg;
            rewritten[index] = value;
            write_mac1(&setup.server.public_key(), &mut rewritten);
            assert!(setup.responder.verify_mac(&rewritten));
            assert!(
                matches!(
                    setup.responder.accept(&rewritten),
                    Err(HandshakeError::Decrypt)
                ),
                "byte {index}"
            );
        }
    }

    #[test]
    fn the_renewed_session_id_is_authenticated_payload() {
        let setup = setup();
        let fields = InitFields {
            renews: Some(SessionId(0xfeed_beef)),
            ..FIELDS
        };
        let mut msg = [0u8; HANDSHAKE_INIT_LEN];
        initiate(&setup.client, &setup.server.public_key(), fields, &mut msg).unwrap();
        let accepted = setup.responder.accept(&msg).unwrap();
        assert_eq!(accepted.fields, fields);
    }

    #[test]
    fn modified_response_fails_and_pending_survives() {
        let setup = setup();
        let (mut pending, msg) = init(&setup, &setup.server.public_key());
        let accepted = setup.responder.accept(&msg).unwrap();
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        let server_keys = accepted.respond(SessionId(0x2222), &mut response).unwrap();

        for index in 0..HANDSHAKE_RESPONSE_LEN {
            let mut modified = response;
            modified[index] ^= 0x80;
            let error = pending.try_complete(&modified).err();
            match index {
                0..=3 => assert!(matches!(error, Some(HandshakeError::Wire(_)))),
                4..=7 => assert!(matches!(error, Some(HandshakeError::WrongReceiver { .. }))),
                _ => assert!(
                    matches!(error, Some(HandshakeError::Decrypt)),
                    "byte {index}: {error:?}"
                ),
            }
        }
        // The server's session id travels inside Noise.
        let client = pending.try_complete(&response).unwrap();
        assert_eq!(client.peer_session, SessionId(0x2222));
        assert!(transfer(
            &client.keys.send,
            &server_keys.recv,
            0,
            b"keys still match"
        ));
    }

    #[test]
    fn junk_response_does_not_kill_the_pending_handshake() {
        let setup = setup();
        let (mut pending, msg) = init(&setup, &setup.server.public_key());
        let accepted = setup.responder.accept(&msg).unwrap();
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        let server_keys = accepted.respond(SessionId(0x2222), &mut response).unwrap();

        let mut junk = response;
        junk[8..].fill(0x5a);
        assert!(matches!(
            pending.try_complete(&junk),
            Err(HandshakeError::Decrypt)
        ));
        let mut tampered = response;
        tampered[59] ^= 1;
        assert!(pending.try_complete(&tampered).is_err());

        let client = pending.try_complete(&response).unwrap();
        assert!(transfer(
            &client.keys.send,
            &server_keys.recv,
            3,
            b"after junk"
        ));
        assert!(transfer(
            &server_keys.send,
            &client.keys.recv,
            3,
            b"after junk"
        ));
        assert!(matches!(
            pending.try_complete(&response),
            Err(HandshakeError::Internal(_))
        ));
    }

    #[test]
    fn truncated_and_oversized_messages_fail() {
        let setup = setup();
        let (pending, msg) = init(&setup, &setup.server.public_key());
        for len in 0..HANDSHAKE_INIT_LEN {
            assert!(!setup.responder.verify_mac(&msg[..len]));
            assert!(matches!(
                setup.responder.accept(&msg[..len]),
                Err(HandshakeError::Wire(_))
            ));
        }
        let mut long = [0u8; HANDSHAKE_INIT_LEN + 1];
        long[..HANDSHAKE_INIT_LEN].copy_from_slice(&msg);
        assert!(!setup.responder.verify_mac(&long));
        assert!(setup.responder.accept(&long).is_err());

        let accepted = setup.responder.accept(&msg).unwrap();
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        accepted.respond(SessionId(9), &mut response).unwrap();
        let mut pending = pending;
        for len in 0..HANDSHAKE_RESPONSE_LEN {
            assert!(matches!(
                pending.try_complete(&response[..len]),
                Err(HandshakeError::Wire(_))
            ));
        }
        assert!(pending.try_complete(&response).is_ok());
    }

    #[test]
    fn init_is_not_a_response_and_vice_versa() {
        let setup = setup();
        let (mut pending, msg) = init(&setup, &setup.server.public_key());
        assert!(matches!(
            pending.try_complete(&msg),
            Err(HandshakeError::Wire(_))
        ));
        assert!(matches!(
            setup.responder.accept(&[2u8; HANDSHAKE_RESPONSE_LEN]),
            Err(HandshakeError::Wire(_))
        ));
    }

    #[test]
    fn two_handshakes_produce_different_keys() {
        let setup = setup();
        let (first_client, first_server) = handshake(&setup);
        let (second_client, second_server) = handshake(&setup);
        assert!(transfer(
            &first_client.keys.send,
            &first_server.recv,
            0,
            b"x"
        ));
        assert!(transfer(
            &second_client.keys.send,
            &second_server.recv,
            0,
            b"x"
        ));
        assert!(!transfer(
            &first_client.keys.send,
            &second_server.recv,
            0,
            b"x"
        ));
        assert!(!transfer(
            &second_server.send,
            &first_client.keys.recv,
            0,
            b"x"
        ));
    }

    #[test]
    fn replayed_init_is_accepted_again_with_the_same_timestamp() {
        // Documents why the caller must check `unix_time_nanos`: a replayed
        // init passes mac1 and Noise and carries the old timestamp.
        let setup = setup();
        let (_, msg) = init(&setup, &setup.server.public_key());
        let first = setup.responder.accept(&msg).unwrap();
        let replay = setup.responder.accept(&msg).unwrap();
        assert_eq!(first.fields, replay.fields);
    }

    #[test]
    fn inits_are_exactly_the_wire_sizes() {
        assert_eq!(field::INIT_NOISE.len(), NOISE_INIT_LEN);
        assert_eq!(field::RESPONSE_NOISE.len(), NOISE_RESPONSE_LEN);
        const { assert!(HANDSHAKE_RESPONSE_LEN < HANDSHAKE_INIT_LEN) };
    }
}
