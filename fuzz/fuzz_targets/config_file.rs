//! The configuration file parser, from text: a client or server configuration is
//! validated, and its error (file, line, column, field, hint) rendered, whatever
//! the text. The private key files it may name, `client.key` and `server.key`,
//! exist with mode 0600 in a directory made once per process.
#![no_main]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn key_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mptund-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary directory");
        for (name, byte) in [("client.key", 1u8), ("server.key", 2u8)] {
            let path = dir.join(name);
            let key = mptund::keys::PrivateKey::from_bytes([byte; 32]);
            std::fs::write(&path, format!("{}\n", key.to_base64())).expect("key file");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .expect("key file mode");
        }
        dir
    })
}

fuzz_target!(|text: &str| {
    match mptund::config::parse("fuzz.toml", text, key_dir()) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                assert!(!warning.is_empty());
            }
            let _ = format!("{:?}", loaded.config);
        }
        Err(error) => {
            let rendered = error.to_string();
            assert!(rendered.starts_with("fuzz.toml"), "{rendered}");
        }
    }
});
