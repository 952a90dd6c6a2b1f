//! Writes genuine HandshakeInits of one configured client, for the flood benchmark
//! (`benches/flood/run.py`): each has its own ephemeral key and session id and passes
//! mac1, so the server cannot tell them from the client's own without Diffie-Hellman.
//! Their timestamps are old (1, 2, 3, ... ns after the UNIX epoch), as in a replay of
//! captured inits: a server that does the Diffie-Hellman then refuses them as
//! replays, so the flood costs the server's CPU without replacing the live session.
//!
//!     flood_inits --client-key client.key --server-public-key BASE64 --count 4096 --out inits.bin
//!
//! The file is the inits back to back, each `HANDSHAKE_INIT_LEN` bytes.

use std::io::Write;

use mptund::handshake;
use mptund::keys::{PrivateKey, PublicKey};
use mptund::session::random_session_id;
use mptund::wire::HANDSHAKE_INIT_LEN;

fn usage() -> ! {
    eprintln!(
        "usage: flood_inits --client-key FILE --server-public-key BASE64 --count N --out FILE"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut key_file, mut server_key, mut count, mut out) = (None, None, 4096usize, None);
    for pair in args.chunks(2) {
        let [flag, value] = pair else { usage() };
        match flag.as_str() {
            "--client-key" => key_file = Some(value.clone()),
            "--server-public-key" => server_key = Some(value.clone()),
            "--count" => count = value.parse().unwrap_or_else(|_| usage()),
            "--out" => out = Some(value.clone()),
            _ => usage(),
        }
    }
    let key_text = std::fs::read_to_string(key_file.unwrap_or_else(|| usage()))
        .unwrap_or_else(|error| panic!("reading the client key: {error}"));
    let client = PrivateKey::from_base64(key_text.trim()).expect("a base64 private key");
    let server = PublicKey::from_base64(server_key.unwrap_or_else(|| usage()).trim())
        .expect("a base64 public key");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(out.unwrap_or_else(|| usage())).expect("creating the output file"),
    );
    for index in 0..count {
        let mut init = [0u8; HANDSHAKE_INIT_LEN];
        let fields = handshake::InitFields {
            sender: random_session_id(),
            path_id: 0,
            unix_time_nanos: index as u64 + 1,
            renews: None,
            aead: mptund::crypto::Aead::ChaCha20Poly1305,
        };
        handshake::initiate(&client, &server, fields, &mut init).expect("building an init");
        file.write_all(&init).expect("writing an init");
    }
    file.flush().expect("writing the output file");
}
