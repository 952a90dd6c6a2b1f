//! Transport encryption: ChaCha20-Poly1305 (RFC 8439) or AES-256-GCM, as the client
//! chose in the handshake ([`Aead`]), with one key per direction.
//!
//! Each transport datagram is `[header 16][ciphertext][tag 16]`. The nonce is
//! four zero bytes followed by the header's 64-bit counter, big-endian; the
//! associated data is the whole 16-byte header, so the packet type, path id,
//! receiver session id and counter cannot be changed without the tag failing.
//! The counter is unique per direction and session (all paths share it), so a
//! (key, nonce) pair is never reused as long as the sender never reuses a
//! counter, which the session enforces.
//!
//! Sealing and opening work in place in the caller's buffer and do not allocate.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub use crate::wire::Aead;
use crate::wire::{TransportHeader, WireError, MIN_TRANSPORT_LEN, TAG_LEN, TRANSPORT_HEADER_LEN};
use ring::aead::{
    Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN,
};
use std::time::Duration;
use thiserror::Error;

/// Length of a transport key (both AEADs take 32 bytes).
pub const KEY_LEN: usize = 32;

/// Messages one AES-256-GCM key may seal, or a peer's counter may reach, before it
/// is renewed at once: at 1,440-byte datagrams an attacker's advantage against
/// confidentiality stays below 2^-57 up to about 2^29 messages (the bound of
/// RFC 9001 §6.6 and draft-irtf-cfrg-aead-limits for 91 blocks per message).
/// Renewal after 120 s comes first below 1 M datagrams/s. ChaCha20-Poly1305 has
/// no such limit in reach.
pub const AES_GCM_REKEY_AFTER_MESSAGES: u64 = 1 << 27;
/// ... and no counter at or above this is sealed or accepted under such a key.
pub const AES_GCM_REJECT_AFTER_MESSAGES: u64 = 1 << 28;

impl Aead {
    /// The preferred AEAD of this CPU: AES-256-GCM where it has AES and carry-less
    /// multiplication instructions, ChaCha20-Poly1305 elsewhere (AES without them
    /// is slower than ChaCha20-Poly1305).
    pub fn fastest_here() -> Aead {
        if hardware_aes() {
            Aead::Aes256Gcm
        } else {
            Aead::ChaCha20Poly1305
        }
    }

    /// The name used in configuration files, logs and status.
    pub fn name(self) -> &'static str {
        match self {
            Aead::ChaCha20Poly1305 => "chacha20-poly1305",
            Aead::Aes256Gcm => "aes-256-gcm",
        }
    }

    fn algorithm(self) -> &'static Algorithm {
        match self {
            Aead::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Aead::Aes256Gcm => &AES_256_GCM,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn hardware_aes() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn hardware_aes() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn hardware_aes() -> bool {
    false
}

/// Errors from sealing or opening transport datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CryptoError {
    /// The tag did not verify: the datagram was forged, corrupted, sealed with
    /// another key or under another counter. Drop it.
    #[error("authentication failed")]
    Authentication,
    /// The input is too short to hold a tag (and a header, for whole datagrams).
    #[error("datagram too short: {got} bytes, need at least {needed}")]
    Truncated {
        /// Minimum length.
        needed: usize,
        /// Length of the input.
        got: usize,
    },
    /// The buffer has no room for the tag after the plaintext.
    #[error("buffer too small: need {needed} bytes, have {got}")]
    BufferTooSmall {
        /// Bytes needed: header, plaintext and tag.
        needed: usize,
        /// Bytes in the buffer.
        got: usize,
    },
    /// The transport header in the buffer does not parse.
    #[error("bad transport header: {0}")]
    Header(#[from] WireError),
}

fn nonce_for(counter: u64) -> Nonce {
    let mut nonce = [0u8; NONCE_LEN];
    nonce[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(nonce)
}

fn less_safe_key(aead: Aead, key: &[u8; KEY_LEN]) -> LessSafeKey {
    // Both AEADs accept every 32-byte key; ring only fails on a wrong length.
    match UnboundKey::new(aead.algorithm(), key) {
        Ok(unbound) => LessSafeKey::new(unbound),
        Err(_) => unreachable!("a 32-byte key is valid for both AEADs"),
    }
}

/// The key one side seals its outgoing transport datagrams with.
pub struct SealingKey {
    key: LessSafeKey,
}

impl core::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SealingKey(..)")
    }
}

impl SealingKey {
    /// Wraps raw key bytes (from the handshake's split).
    pub fn new(aead: Aead, key: &[u8; KEY_LEN]) -> Self {
        SealingKey {
            key: less_safe_key(aead, key),
        }
    }

    /// Encrypts `body` in place and returns the tag to append after it.
    /// `counter` must be the counter written in `header`, never used before
    /// with this key.
    pub fn seal_in_place(
        &self,
        header: &[u8; TRANSPORT_HEADER_LEN],
        counter: u64,
        body: &mut [u8],
    ) -> [u8; TAG_LEN] {
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce_for(counter), Aad::from(header), body);
        match tag {
            Ok(tag) => {
                let mut out = [0u8; TAG_LEN];
                out.copy_from_slice(tag.as_ref());
                out
            }
            // ring only fails above a message size limit (64 GiB for AES-GCM).
            Err(_) => unreachable!("plaintext longer than 64 GiB"),
        }
    }

    /// Seals a whole transport datagram laid out in `buf` as
    /// `[header 16][plaintext: plaintext_len bytes][16 bytes room for the tag]`
    /// (the header already emitted). The counter is read from the header.
    /// Returns the datagram length, `16 + plaintext_len + 16`.
    pub fn seal_datagram(
        &self,
        buf: &mut [u8],
        plaintext_len: usize,
    ) -> Result<usize, CryptoError> {
        let needed = TRANSPORT_HEADER_LEN
            .checked_add(plaintext_len)
            .and_then(|len| len.checked_add(TAG_LEN))
            .unwrap_or(usize::MAX);
        if buf.len() < needed {
            return Err(CryptoError::BufferTooSmall {
                needed,
                got: buf.len(),
            });
        }
        let parsed = TransportHeader::parse(buf)?;
        let buf_len = buf.len();
        let (header, rest) = buf.split_at_mut(TRANSPORT_HEADER_LEN);
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes.copy_from_slice(header);
        let (body, tail) = rest.split_at_mut(plaintext_len);
        let tag = self.seal_in_place(&header_bytes, parsed.counter, body);
        let got = buf_len;
        tail.get_mut(..TAG_LEN)
            .ok_or(CryptoError::BufferTooSmall { needed, got })?
            .copy_from_slice(&tag);
        Ok(needed)
    }
}

/// The key one side opens incoming transport datagrams with.
pub struct OpeningKey {
    key: LessSafeKey,
}

impl core::fmt::Debug for OpeningKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("OpeningKey(..)")
    }
}

impl OpeningKey {
    /// Wraps raw key bytes (from the handshake's split).
    pub fn new(aead: Aead, key: &[u8; KEY_LEN]) -> Self {
        OpeningKey {
            key: less_safe_key(aead, key),
        }
    }

    /// Verifies and decrypts `body_and_tag` (ciphertext followed by the
    /// 16-byte tag) in place; returns the plaintext, a prefix of the input.
    /// On failure the buffer's contents are unspecified.
    pub fn open_in_place<'a>(
        &self,
        header: &[u8; TRANSPORT_HEADER_LEN],
        counter: u64,
        body_and_tag: &'a mut [u8],
    ) -> Result<&'a mut [u8], CryptoError> {
        if body_and_tag.len() < TAG_LEN {
            return Err(CryptoError::Truncated {
                needed: TAG_LEN,
                got: body_and_tag.len(),
            });
        }
        self.key
            .open_in_place(nonce_for(counter), Aad::from(header), body_and_tag)
            .map_err(|_| CryptoError::Authentication)
    }

    /// Parses the header of a whole transport datagram and opens it in place,
    /// taking the counter from the header. Returns the header and the
    /// plaintext (which starts at offset 16 of `datagram`).
    ///
    /// Replay protection is the caller's: `ReplayWindow::check` the header's
    /// counter before, `check_and_update` after this succeeds.
    pub fn open_datagram<'a>(
        &self,
        datagram: &'a mut [u8],
    ) -> Result<(TransportHeader, &'a mut [u8]), CryptoError> {
        if datagram.len() < MIN_TRANSPORT_LEN {
            return Err(CryptoError::Truncated {
                needed: MIN_TRANSPORT_LEN,
                got: datagram.len(),
            });
        }
        let parsed = TransportHeader::parse(datagram)?;
        let (header, body_and_tag) = datagram.split_at_mut(TRANSPORT_HEADER_LEN);
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes.copy_from_slice(header);
        let plaintext = self.open_in_place(&header_bytes, parsed.counter, body_and_tag)?;
        Ok((parsed, plaintext))
    }
}

/// WireGuard's REKEY_AFTER_TIME.
pub const DEFAULT_REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
/// WireGuard's REJECT_AFTER_TIME.
pub const DEFAULT_REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
/// WireGuard's REKEY_AFTER_MESSAGES.
pub const DEFAULT_REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// WireGuard's REJECT_AFTER_MESSAGES: the replay window must never see a counter
/// wrap.
pub const DEFAULT_REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);

/// When keys are renewed and when they may no longer be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLifetime {
    /// The client starts a new handshake once its keys are this old...
    pub rekey_after_time: Duration,
    /// ...or have sealed this many datagrams.
    pub rekey_after_messages: u64,
    /// Nothing is sealed or opened under keys this old...
    pub reject_after_time: Duration,
    /// ...or under a counter this high.
    pub reject_after_messages: u64,
}

impl KeyLifetime {
    /// These limits, lowered to what `aead` allows.
    pub fn for_aead(self, aead: Aead) -> KeyLifetime {
        match aead {
            Aead::ChaCha20Poly1305 => self,
            Aead::Aes256Gcm => KeyLifetime {
                rekey_after_messages: self.rekey_after_messages.min(AES_GCM_REKEY_AFTER_MESSAGES),
                reject_after_messages: self
                    .reject_after_messages
                    .min(AES_GCM_REJECT_AFTER_MESSAGES),
                ..self
            },
        }
    }
}

impl Default for KeyLifetime {
    fn default() -> Self {
        Self {
            rekey_after_time: DEFAULT_REKEY_AFTER_TIME,
            rekey_after_messages: DEFAULT_REKEY_AFTER_MESSAGES,
            reject_after_time: DEFAULT_REJECT_AFTER_TIME,
            reject_after_messages: DEFAULT_REJECT_AFTER_MESSAGES,
        }
    }
}

/// The two transport keys of one side of a session.
#[derive(Debug)]
pub struct SessionKeys {
    pub aead: Aead,
    /// Seals what this side sends.
    pub send: SealingKey,
    /// Opens what this side receives.
    pub recv: OpeningKey,
}

impl SessionKeys {
    /// Keys from the two raw directional keys of a handshake.
    pub fn new(aead: Aead, send: &[u8; KEY_LEN], recv: &[u8; KEY_LEN]) -> Self {
        Self {
            aead,
            send: SealingKey::new(aead, send),
            recv: OpeningKey::new(aead, recv),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{PacketType, SessionId};
    use snow::params::CipherChoice;
    use snow::resolvers::{CryptoResolver, DefaultResolver};

    const KEY: [u8; 32] = [0x42; 32];
    const CHACHA: Aead = Aead::ChaCha20Poly1305;
    const BOTH: [Aead; 2] = [Aead::ChaCha20Poly1305, Aead::Aes256Gcm];

    fn header(counter: u64) -> [u8; 16] {
        let mut out = [0u8; 16];
        TransportHeader {
            packet_type: PacketType::Data,
            path_id: 3,
            receiver: SessionId(0x0102_0304),
            counter,
        }
        .emit(&mut out);
        out
    }

    /// `[header][plaintext][tag room]` for `plaintext`.
    fn datagram(counter: u64, plaintext: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 16 + plaintext.len() + 16];
        buf[..16].copy_from_slice(&header(counter));
        buf[16..16 + plaintext.len()].copy_from_slice(plaintext);
        buf
    }

    #[test]
    fn round_trip_in_place() {
        for aead in BOTH {
            let send = SealingKey::new(aead, &KEY);
            let recv = OpeningKey::new(aead, &KEY);
            let mut body = *b"inner ip packet.";
            let tag = send.seal_in_place(&header(7), 7, &mut body);
            assert_ne!(&body, b"inner ip packet.");
            let mut body_and_tag = [body.as_slice(), tag.as_slice()].concat();
            let plain = recv
                .open_in_place(&header(7), 7, &mut body_and_tag)
                .unwrap();
            assert_eq!(plain, b"inner ip packet.");
        }
    }

    #[test]
    fn a_datagram_sealed_under_one_aead_does_not_open_under_the_other() {
        let mut sealed = datagram(3, b"same key, other cipher");
        SealingKey::new(Aead::Aes256Gcm, &KEY)
            .seal_datagram(&mut sealed, 22)
            .unwrap();
        assert_eq!(
            OpeningKey::new(CHACHA, &KEY)
                .open_datagram(&mut sealed.clone())
                .unwrap_err(),
            CryptoError::Authentication
        );
        assert!(OpeningKey::new(Aead::Aes256Gcm, &KEY)
            .open_datagram(&mut sealed)
            .is_ok());
    }

    #[test]
    fn aes_gcm_lowers_the_message_limits_only() {
        let configured = KeyLifetime::default();
        assert_eq!(configured.for_aead(CHACHA), configured);
        let aes = configured.for_aead(Aead::Aes256Gcm);
        assert_eq!(aes.rekey_after_messages, AES_GCM_REKEY_AFTER_MESSAGES);
        assert_eq!(aes.reject_after_messages, AES_GCM_REJECT_AFTER_MESSAGES);
        assert_eq!(aes.rekey_after_time, configured.rekey_after_time);
        let low = KeyLifetime {
            rekey_after_messages: 1000,
            reject_after_messages: 2000,
            ..configured
        };
        assert_eq!(low.for_aead(Aead::Aes256Gcm), low, "lower limits stay");
    }

    #[test]
    fn round_trip_datagram() {
        for aead in BOTH {
            round_trip_datagram_with(aead);
        }
    }

    fn round_trip_datagram_with(aead: Aead) {
        let send = SealingKey::new(aead, &KEY);
        let recv = OpeningKey::new(aead, &KEY);
        for len in [0usize, 1, 15, 16, 17, 1400] {
            let plaintext: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = datagram(len as u64, &plaintext);
            let total = send.seal_datagram(&mut buf, len).unwrap();
            assert_eq!(total, buf.len());
            let (parsed, plain) = recv.open_datagram(&mut buf).unwrap();
            assert_eq!(parsed.counter, len as u64);
            assert_eq!(plain, plaintext.as_slice());
        }
    }

    #[test]
    fn every_flipped_bit_fails() {
        for aead in BOTH {
            every_flipped_bit_fails_with(aead);
        }
    }

    fn every_flipped_bit_fails_with(aead: Aead) {
        let send = SealingKey::new(aead, &KEY);
        let recv = OpeningKey::new(aead, &KEY);
        let mut sealed = datagram(99, b"abc");
        send.seal_datagram(&mut sealed, 3).unwrap();
        for bit in 0..sealed.len() * 8 {
            let mut tampered = sealed.clone();
            tampered[bit / 8] ^= 1 << (bit % 8);
            let result = recv.open_datagram(&mut tampered);
            assert!(result.is_err(), "bit {bit} flipped still opened");
        }
        // Flips in the header that still parse must fail authentication,
        // not merely parsing.
        let mut tampered = sealed.clone();
        tampered[1] ^= 1; // path id
        assert_eq!(
            recv.open_datagram(&mut tampered).unwrap_err(),
            CryptoError::Authentication
        );
        let mut tampered = sealed;
        tampered[0] = 0x04; // Data -> Control
        assert_eq!(
            recv.open_datagram(&mut tampered).unwrap_err(),
            CryptoError::Authentication
        );
    }

    #[test]
    fn wrong_counter_and_wrong_key_fail() {
        let send = SealingKey::new(CHACHA, &KEY);
        let mut body = *b"payload";
        let tag = send.seal_in_place(&header(5), 5, &mut body);
        let sealed = [body.as_slice(), tag.as_slice()].concat();

        let recv = OpeningKey::new(CHACHA, &KEY);
        let mut copy = sealed.clone();
        assert_eq!(
            recv.open_in_place(&header(5), 6, &mut copy).unwrap_err(),
            CryptoError::Authentication
        );
        let other = OpeningKey::new(CHACHA, &[0x43; 32]);
        let mut copy = sealed.clone();
        assert_eq!(
            other.open_in_place(&header(5), 5, &mut copy).unwrap_err(),
            CryptoError::Authentication
        );
        let mut copy = sealed;
        assert!(recv.open_in_place(&header(5), 5, &mut copy).is_ok());
    }

    #[test]
    fn short_inputs_are_errors() {
        let recv = OpeningKey::new(CHACHA, &KEY);
        let mut short = [0u8; 15];
        assert_eq!(
            recv.open_in_place(&header(0), 0, &mut short).unwrap_err(),
            CryptoError::Truncated {
                needed: 16,
                got: 15
            }
        );
        for len in 0..MIN_TRANSPORT_LEN {
            let mut buf = datagram(0, &[]);
            assert!(matches!(
                recv.open_datagram(&mut buf[..len]),
                Err(CryptoError::Truncated { .. })
            ));
        }
        let send = SealingKey::new(CHACHA, &KEY);
        let mut buf = datagram(0, b"xy");
        assert_eq!(
            send.seal_datagram(&mut buf, 3).unwrap_err(),
            CryptoError::BufferTooSmall {
                needed: 35,
                got: 34
            }
        );
        assert!(send.seal_datagram(&mut buf, usize::MAX).is_err());
        let mut bad_header = datagram(0, b"xy");
        bad_header[0] = 0x01;
        assert!(matches!(
            send.seal_datagram(&mut bad_header, 2),
            Err(CryptoError::Header(_))
        ));
    }

    /// A fixed vector: key 00..1f, counter 0x0102030405060708, header of a
    /// Data datagram on path 3 to session 0x01020304, plaintext "mptund".
    /// Cross-checked below against the independent RustCrypto
    /// implementation that snow uses.
    #[test]
    fn known_answer() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let counter = 0x0102_0304_0506_0708;
        let header = header(counter);
        assert_eq!(
            header,
            [3, 3, 0, 0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8],
            "header layout"
        );
        let mut body = *b"mptund";
        let tag = SealingKey::new(CHACHA, &key).seal_in_place(&header, counter, &mut body);
        assert_eq!(body, KAT_CIPHERTEXT);
        assert_eq!(tag, KAT_TAG);
        // The same vector through the independent RustCrypto implementation.
        let mut reference_cipher = DefaultResolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .unwrap();
        reference_cipher.set(&key);
        let mut reference = [0u8; 6 + 16];
        reference_cipher.encrypt(counter.swap_bytes(), &header, b"mptund", &mut reference);
        assert_eq!(reference[..6], KAT_CIPHERTEXT);
        assert_eq!(reference[6..], KAT_TAG);
        // And it opens.
        let mut sealed = [KAT_CIPHERTEXT.as_slice(), KAT_TAG.as_slice()].concat();
        let plain = OpeningKey::new(CHACHA, &key)
            .open_in_place(&header, counter, &mut sealed)
            .unwrap();
        assert_eq!(plain, b"mptund");
    }

    const KAT_CIPHERTEXT: [u8; 6] = [0x82, 0x96, 0xd1, 0x8d, 0xcb, 0xe8];
    const KAT_TAG: [u8; 16] = [
        0x49, 0xcb, 0x12, 0x07, 0x34, 0x16, 0xe1, 0x26, 0x96, 0xdd, 0x7f, 0x06, 0x04, 0x6c, 0x1b,
        0xae,
    ];

    /// Our nonce is `0u32 ‖ counter_be`. A Noise ChaChaPoly nonce is `0u32 ‖ n_le`, so
    /// sealing under `counter` equals RustCrypto sealing under `n =
    /// counter.swap_bytes()`; a Noise AESGCM nonce is `0u32 ‖ n_be`, so `n = counter`.
    #[test]
    fn matches_independent_implementation() {
        /// snow's nonce `n` for our counter.
        type NoiseN = fn(u64) -> u64;
        let cases: [(Aead, CipherChoice, NoiseN); 2] = [
            (CHACHA, CipherChoice::ChaChaPoly, u64::swap_bytes),
            (Aead::Aes256Gcm, CipherChoice::AESGCM, |counter| counter),
        ];
        for (aead, choice, noise_n) in cases {
            let mut noise_cipher = DefaultResolver.resolve_cipher(&choice).unwrap();
            noise_cipher.set(&KEY);
            for counter in [0u64, 1, 0x0102_0304_0506_0708, u64::MAX - 1] {
                let header = header(counter);
                let plaintext = b"cross-check plaintext of some length";
                let mut body = *plaintext;
                let tag = SealingKey::new(aead, &KEY).seal_in_place(&header, counter, &mut body);
                let mut reference = [0u8; 36 + 16];
                let len =
                    noise_cipher.encrypt(noise_n(counter), &header, plaintext, &mut reference);
                assert_eq!(len, reference.len());
                assert_eq!(reference[..36], body, "{aead:?}");
                assert_eq!(reference[36..], tag, "{aead:?}");
            }
        }
    }
}
