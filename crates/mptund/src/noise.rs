//! Where the Noise handshake and the key code get their primitives.
//!
//! Always snow's own (X25519, ChaCha20-Poly1305, BLAKE2s), except in a build with
//! the `fuzzing` feature, which only the fuzz targets in `fuzz/` enable: there the
//! Diffie-Hellman is a cheap stand-in, so a fuzz target can run a whole handshake
//! per input at thousands of inputs per second instead of a few dozen. Every byte
//! of the handshake messages is still parsed, MACed and AEAD-checked as in the
//! daemon; only the curve arithmetic is replaced. Such a build is not secure and
//! must never carry traffic.

// cargo-fuzz builds with `--cfg fuzzing`; any other build with the feature is a mistake.
#[cfg(all(feature = "fuzzing", not(fuzzing)))]
compile_error!("the `fuzzing` feature replaces X25519 and is only for cargo-fuzz builds of fuzz/");

use snow::params::DHChoice;
use snow::resolvers::{BoxedCryptoResolver, DefaultResolver};
use snow::types::Dh;

/// The resolver the handshake builds its Noise state with.
pub fn resolver() -> BoxedCryptoResolver {
    #[cfg(feature = "fuzzing")]
    {
        Box::new(snow::resolvers::FallbackResolver::new(
            Box::new(fuzzing::CheapDhResolver),
            Box::new(DefaultResolver),
        ))
    }
    #[cfg(not(feature = "fuzzing"))]
    {
        Box::new(DefaultResolver)
    }
}

/// The Diffie-Hellman the handshake uses, for deriving public keys.
pub fn curve25519() -> Option<Box<dyn Dh>> {
    resolver().resolve_dh(&DHChoice::Curve25519)
}

#[cfg(feature = "fuzzing")]
mod fuzzing {
    use snow::params::{CipherChoice, DHChoice, HashChoice};
    use snow::resolvers::CryptoResolver;
    use snow::types::{Cipher, Dh, Hash, Random};
    use snow::Error;

    const KEY_LEN: usize = 32;

    /// Supplies only [`CheapDh`]; everything else falls back to snow's defaults.
    pub struct CheapDhResolver;

    impl CryptoResolver for CheapDhResolver {
        fn resolve_rng(&self) -> Option<Box<dyn Random>> {
            None
        }

        fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
            matches!(choice, DHChoice::Curve25519).then(|| Box::new(CheapDh::default()) as _)
        }

        fn resolve_hash(&self, _choice: &HashChoice) -> Option<Box<dyn Hash>> {
            None
        }

        fn resolve_cipher(&self, _choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
            None
        }
    }

    /// The public key is the private key and the shared secret their XOR: both
    /// sides agree, as with X25519, at no cost. Not a secure exchange.
    #[derive(Default)]
    struct CheapDh {
        key: [u8; KEY_LEN],
    }

    impl Dh for CheapDh {
        fn name(&self) -> &'static str {
            "25519"
        }

        fn pub_len(&self) -> usize {
            KEY_LEN
        }

        fn priv_len(&self) -> usize {
            KEY_LEN
        }

        fn set(&mut self, privkey: &[u8]) {
            let len = privkey.len().min(KEY_LEN);
            self.key = [0; KEY_LEN];
            self.key[..len].copy_from_slice(&privkey[..len]);
        }

        fn generate(&mut self, rng: &mut dyn Random) -> Result<(), Error> {
            rng.try_fill_bytes(&mut self.key)
        }

        fn pubkey(&self) -> &[u8] {
            &self.key
        }

        fn privkey(&self) -> &[u8] {
            &self.key
        }

        fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), Error> {
            for (index, byte) in out.iter_mut().take(KEY_LEN).enumerate() {
                *byte = self.key[index] ^ pubkey.get(index).copied().unwrap_or(0);
            }
            Ok(())
        }
    }
}
