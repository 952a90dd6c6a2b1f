//! Static X25519 keys (RFC 7748) and their text form.
//!
//! Keys are written as standard, padded base64 of the 32 key bytes: 44
//! characters ending in `=`, the same form WireGuard uses, as printed by
//! `mptund genkey` / `mptund pubkey`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use core::fmt;
use core::str::FromStr;
use ring::rand::{SecureRandom, SystemRandom};
use thiserror::Error;

/// Length of an X25519 key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of a key in base64 (padded).
pub const BASE64_KEY_LEN: usize = 44;

/// Errors from reading a key's text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum KeyError {
    /// The text is not valid standard base64.
    #[error(
        "key is not valid base64: expected 44 characters of standard base64 ending in '=', \
         as printed by `mptund genkey`"
    )]
    NotBase64,
    /// The text decodes to the wrong number of bytes.
    #[error(
        "key decodes to {got} bytes, expected 32: a key is 44 characters of standard base64 \
         ending in '=', as printed by `mptund genkey`"
    )]
    WrongLength {
        /// Number of decoded bytes.
        got: usize,
    },
    /// The operating system's random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

fn decode_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let decoded = STANDARD
        .decode(text.trim().as_bytes())
        .map_err(|_| KeyError::NotBase64)?;
    <[u8; KEY_LEN]>::try_from(decoded.as_slice())
        .map_err(|_| KeyError::WrongLength { got: decoded.len() })
}

/// An X25519 private key. `Debug` does not print it; it is overwritten with
/// zeros when dropped (best effort: copies made by moves are not).
#[derive(Clone)]
pub struct PrivateKey([u8; KEY_LEN]);

impl PrivateKey {
    /// Generates a fresh key from the operating system's random number
    /// generator, clamped as RFC 7748 section 5 describes.
    ///
    /// Panics only if the OS random number generator fails, which leaves no
    /// safe way to continue; see [`PrivateKey::try_generate`].
    pub fn generate() -> PrivateKey {
        match Self::try_generate() {
            Ok(key) => key,
            Err(error) => panic!("cannot generate a private key: {error}"),
        }
    }

    /// Like [`PrivateKey::generate`], but reports a failing random number generator.
    pub fn try_generate() -> Result<PrivateKey, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| KeyError::Random)?;
        bytes[0] &= 248;
        bytes[31] &= 127;
        bytes[31] |= 64;
        Ok(PrivateKey(bytes))
    }

    /// Wraps raw key bytes. Any 32 bytes are a valid X25519 private key
    /// (clamping happens in the scalar multiplication).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> PrivateKey {
        PrivateKey(bytes)
    }

    /// The raw key bytes, for the handshake.
    pub(crate) fn secret_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The matching public key: X25519 of the base point.
    pub fn public_key(&self) -> PublicKey {
        let mut public = [0u8; KEY_LEN];
        if let Some(mut dh) = crate::noise::curve25519() {
            dh.set(&self.0);
            public.copy_from_slice(&dh.pubkey()[..KEY_LEN]);
        }
        PublicKey(public)
    }

    /// Standard padded base64 (44 characters).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// Reads standard padded base64; surrounding whitespace is ignored.
    pub fn from_base64(text: &str) -> Result<PrivateKey, KeyError> {
        decode_key(text).map(PrivateKey)
    }
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        self.0 = [0; KEY_LEN];
        core::hint::black_box(&self.0);
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

impl FromStr for PrivateKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        Self::from_base64(text)
    }
}

/// An X25519 public key. `Display` and `Debug` print its base64 form.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    /// Standard padded base64 (44 characters).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// Reads standard padded base64; surrounding whitespace is ignored.
    pub fn from_base64(text: &str) -> Result<PublicKey, KeyError> {
        decode_key(text).map(PublicKey)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        Self::from_base64(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> [u8; 32] {
        core::array::from_fn(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
    }

    /// RFC 7748 section 6.1: Alice's and Bob's private keys and public keys.
    #[test]
    fn rfc7748_vectors() {
        let alice = PrivateKey::from_bytes(hex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        ));
        assert_eq!(
            alice.public_key(),
            PublicKey(hex(
                "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
            ))
        );
        let bob = PrivateKey::from_bytes(hex(
            "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
        ));
        assert_eq!(
            bob.public_key(),
            PublicKey(hex(
                "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
            ))
        );
    }

    #[test]
    fn base64_round_trips() {
        let private = PrivateKey::generate();
        let text = private.to_base64();
        assert_eq!(text.len(), BASE64_KEY_LEN);
        assert!(text.ends_with('='));
        let back: PrivateKey = text.parse().unwrap();
        assert_eq!(back.secret_bytes(), private.secret_bytes());

        let public = private.public_key();
        let text = public.to_string();
        assert_eq!(text.len(), BASE64_KEY_LEN);
        assert_eq!(text.parse::<PublicKey>(), Ok(public));
        assert_eq!(
            PublicKey::from_base64(&format!("  {text}\n")),
            Ok(public),
            "whitespace around a key (as in a key file) is ignored"
        );
    }

    #[test]
    fn known_base64() {
        let key = PublicKey([0u8; 32]);
        assert_eq!(
            key.to_base64(),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        );
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        assert_eq!(
            PublicKey(key).to_base64(),
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        );
    }

    #[test]
    fn generated_keys_differ_and_are_clamped() {
        let a = PrivateKey::generate();
        let b = PrivateKey::generate();
        assert_ne!(a.secret_bytes(), b.secret_bytes());
        assert_eq!(a.secret_bytes()[0] & 7, 0);
        assert_eq!(a.secret_bytes()[31] & 0xc0, 0x40);
    }

    #[test]
    fn bad_input() {
        assert_eq!(
            PublicKey::from_base64("not base64!"),
            Err(KeyError::NotBase64)
        );
        assert_eq!(
            PublicKey::from_base64(""),
            Err(KeyError::WrongLength { got: 0 })
        );
        assert_eq!(
            PublicKey::from_base64("AAAA"),
            Err(KeyError::WrongLength { got: 3 })
        );
        // 33 bytes.
        assert_eq!(
            PrivateKey::from_base64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
                .map(|_| ())
                .unwrap_err(),
            KeyError::WrongLength { got: 33 }
        );
        // URL-safe alphabet is not accepted.
        assert_eq!(
            PublicKey::from_base64("-_ECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="),
            Err(KeyError::NotBase64)
        );
        let message = KeyError::WrongLength { got: 3 }.to_string();
        assert!(message.contains("44 characters"), "{message}");
        assert!(KeyError::NotBase64.to_string().contains("mptund genkey"));
    }

    #[test]
    fn debug_does_not_print_the_private_key() {
        let key = PrivateKey::from_bytes([0xab; 32]);
        let printed = format!("{key:?}");
        assert_eq!(printed, "PrivateKey(<redacted>)");
        assert!(!printed.contains(&key.to_base64()));
    }
}
