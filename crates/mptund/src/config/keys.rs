//! X25519 keys as they appear in configuration: base64 text of 32 bytes, read
//! with [`crate::keys`], plus the checks only a configuration needs.

use crate::keys::{self, PrivateKey, PublicKey};

/// Length of an X25519 key in bytes.
pub const KEY_LEN: usize = keys::KEY_LEN;

/// Why a text is not a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text is not standard base64.
    #[error("is not valid base64")]
    NotBase64,
    /// Valid base64 of the wrong number of bytes.
    #[error("decodes to {0} bytes, but an X25519 key is 32 bytes (44 base64 characters)")]
    WrongLength(usize),
    /// Thirty-two zero bytes: never a real key, usually a placeholder.
    #[error("is all zeros, which is not a usable key")]
    AllZero,
}

/// Decodes a base64 key, ignoring surrounding whitespace (a key file written
/// by `mptund genkey` ends with a newline).
pub fn decode_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let key = PublicKey::from_base64(text).map_err(|error| match error {
        keys::KeyError::WrongLength { got } => KeyError::WrongLength(got),
        _ => KeyError::NotBase64,
    })?;
    if key.0 == [0; KEY_LEN] {
        return Err(KeyError::AllZero);
    }
    Ok(key.0)
}

/// Base64 text of a key, as `mptund pubkey` prints it.
pub fn encode_key(key: &[u8; KEY_LEN]) -> String {
    PublicKey(*key).to_base64()
}

/// The X25519 public key belonging to `private_key`.
pub fn public_key_of(private_key: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    PrivateKey::from_bytes(*private_key).public_key().0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_with_trailing_newline() {
        let key: [u8; 32] = std::array::from_fn(|i| i as u8 + 1);
        let text = format!("{}\n", encode_key(&key));
        assert_eq!(decode_key(&text), Ok(key));
    }

    #[test]
    fn rejects_bad_keys() {
        assert_eq!(decode_key("not base64!"), Err(KeyError::NotBase64));
        assert_eq!(decode_key("AAEC"), Err(KeyError::WrongLength(3)));
        assert_eq!(decode_key(&encode_key(&[0; 32])), Err(KeyError::AllZero));
    }
}
