//! The client's state directory: the ceiling on its handshake timestamps, kept
//! across restarts so that a router that boots with its clock in the past still
//! sends timestamps the server has not seen (`session::handshake_time`).
//!
//! One file per configuration: `<directory>/<configuration file name without
//! .toml>.handshake-timestamp`, holding the ceiling in UNIX nanoseconds as decimal
//! text and a newline. It is written atomically (a temporary file in the same
//! directory, synced, renamed over the old one, then the directory synced), so a
//! power cut leaves the old ceiling or the new one, never a torn file. The core
//! asks for a write at most once a minute of wall-clock time and once per start
//! ([`crate::session`]'s `STORED_CEILING_LEAD`), so the sync in the event loop is
//! rare.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use crate::config::ClientConfig;
use crate::session::{ClientCore, Core, ServerCore};

/// The environment variable systemd sets to the unit's `StateDirectory=`
/// (colon-separated when it names several).
const SYSTEMD_STATE_DIRECTORY: &str = "STATE_DIRECTORY";
/// The state file's name after the configuration's stem.
const EXTENSION: &str = "handshake-timestamp";

/// The file that keeps the client's handshake timestamp ceiling.
#[derive(Debug)]
pub struct TimestampFile {
    path: PathBuf,
    /// The last write failed (logged once until one succeeds again).
    failing: bool,
}

impl TimestampFile {
    /// The file for `config`: in its `state_directory`, else in systemd's
    /// `$STATE_DIRECTORY`; `None` without either.
    pub fn for_client(config: &ClientConfig) -> Option<Self> {
        let directory = config.state_directory.clone().or_else(|| {
            let from_systemd = std::env::var_os(SYSTEMD_STATE_DIRECTORY)?;
            let first = from_systemd.to_string_lossy().split(':').next()?.to_owned();
            (!first.is_empty()).then(|| PathBuf::from(first))
        })?;
        Some(Self::in_directory(&directory, &config.source))
    }

    fn in_directory(directory: &Path, config_file: &Path) -> Self {
        let stem = config_file
            .file_stem()
            .map_or_else(|| "mptund".into(), |stem| stem.to_string_lossy());
        Self {
            path: directory.join(format!("{stem}.{EXTENSION}")),
            failing: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ceiling the last run stored. `None` when there is none; a file that
    /// cannot be read or holds no number is logged and counts as none (the server
    /// forgets the client's timestamp after a quiet period, so the client still
    /// gets in, later).
    pub fn read(&self) -> Option<u64> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(file = %self.path.display(), %error, "cannot read the stored handshake timestamp; starting from the wall clock");
                return None;
            }
        };
        match text.trim().parse() {
            Ok(ceiling) => Some(ceiling),
            Err(_) => {
                tracing::warn!(file = %self.path.display(), "the stored handshake timestamp is not a number; starting from the wall clock");
                None
            }
        }
    }

    /// Stores `ceiling`, atomically. A failure is logged (once until a write
    /// succeeds again) and otherwise ignored: the tunnel must not stop because a
    /// disk is full or read-only.
    pub fn write(&mut self, ceiling: u64) {
        match self.replace_with(ceiling) {
            Ok(()) => {
                if self.failing {
                    tracing::info!(file = %self.path.display(), "the handshake timestamp is stored again");
                }
                self.failing = false;
            }
            Err(error) => {
                if !self.failing {
                    tracing::warn!(file = %self.path.display(), %error, "cannot store the handshake timestamp; after a restart with the clock behind, the server answers only once it forgot the last one");
                }
                self.failing = true;
            }
        }
    }

    fn replace_with(&self, ceiling: u64) -> io::Result<()> {
        let temporary = self.path.with_extension(format!("{EXTENSION}.new"));
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&temporary)?;
        file.write_all(format!("{ceiling}\n").as_bytes())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temporary, &self.path)?;
        // The rename itself is durable once the directory is synced.
        if let Some(directory) = self.path.parent() {
            File::open(directory)?.sync_all()?;
        }
        Ok(())
    }
}

/// What the event loop stores for its core between two steps.
pub(super) trait KeepsState: Core {
    /// Stores what the core asks to keep, and tells it so.
    fn keep_state(&mut self, file: &mut TimestampFile);
}

impl KeepsState for ClientCore {
    fn keep_state(&mut self, file: &mut TimestampFile) {
        if let Some(ceiling) = self.timestamp_to_store() {
            file.write(ceiling);
            // Stored or not, the handshake goes out (a failure is in the log).
            self.timestamp_stored(ceiling);
        }
    }
}

impl KeepsState for ServerCore {
    /// A server keeps nothing across restarts.
    fn keep_state(&mut self, _file: &mut TimestampFile) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "mptund-state-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_file_is_named_after_the_configuration_and_keeps_the_last_ceiling() {
        let dir = TempDir::new();
        let mut file = TimestampFile::in_directory(&dir.0, Path::new("/etc/mptund/train-042.toml"));
        assert_eq!(file.path(), dir.0.join("train-042.handshake-timestamp"));
        assert_eq!(file.read(), None, "nothing stored yet");
        file.write(1_767_225_660_000_000_000);
        file.write(1_767_225_720_000_000_001);
        assert_eq!(file.read(), Some(1_767_225_720_000_000_001));
        assert_eq!(
            fs::read_to_string(file.path()).unwrap(),
            "1767225720000000001\n"
        );
        let names: Vec<_> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A second run reads what the first stored.
        let again = TimestampFile::in_directory(&dir.0, Path::new("train-042.toml"));
        assert_eq!(again.read(), Some(1_767_225_720_000_000_001));
    }

    #[test]
    fn a_garbled_or_unwritable_file_is_no_ceiling_and_no_error() {
        let dir = TempDir::new();
        let mut file = TimestampFile::in_directory(&dir.0, Path::new("client.toml"));
        fs::write(file.path(), "yesterday\n").unwrap();
        assert_eq!(file.read(), None);
        let mut nowhere =
            TimestampFile::in_directory(&dir.0.join("missing"), Path::new("client.toml"));
        nowhere.write(5);
        assert!(nowhere.failing);
        assert_eq!(nowhere.read(), None);
        file.write(7);
        assert!(!file.failing);
        assert_eq!(file.read(), Some(7));
    }
}
