//! The control socket: a Unix stream socket, owner-only (0600), that `mptund status`
//! asks for the daemon's state.
//!
//! The protocol is one line each way and then close: the client sends `status` (a
//! table for a person), `status json` (the report as JSON, for scripts) or `status
//! dump` (one tab-separated line per path), ended by a newline; the daemon writes the
//! answer and closes the connection. Anything else is answered with a line starting
//! `error:`.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::snapshot::{Interfaces, ReportSource};
use super::status;
use crate::session::Report;

/// Longest request line accepted.
const MAX_REQUEST_BYTES: u64 = 256;
/// A client that sends no request within this long is disconnected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `mptund status` waits for the daemon to say something: longer than the
/// daemon's own wait for its event loop (5 s, `snapshot::REPLY_TIMEOUT`) and than
/// encoding tens of thousands of sessions on a loaded two-core gateway.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that takes nothing of the answer for this long is given up, so a stalled
/// one cannot hold an encoding thread.
const ANSWER_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of answer encoded before each write to the socket.
const ANSWER_CHUNK_BYTES: usize = 64 * 1024;

/// The bound socket's file, removed when the daemon ends (unless another daemon has
/// replaced it meanwhile).
pub struct ControlSocket {
    path: PathBuf,
    inode: u64,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.inode);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds the control socket at `path`, creating its directory if needed. A socket
/// file left by a daemon that died is replaced; one a running daemon answers on is
/// not.
pub fn bind(path: &Path) -> io::Result<(UnixListener, ControlSocket)> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => {
            use std::os::unix::fs::FileTypeExt;
            if !metadata.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "the path exists and is not a socket; remove it or choose another [control] socket",
                ));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another mptund is running with this control socket; stop it or give this one its own [control] socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    // The socket is created owner-only: no moment in which others could connect.
    let listener = with_umask(0o177, || UnixListener::bind(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let inode = std::fs::symlink_metadata(path)?.ino();
    Ok((
        listener,
        ControlSocket {
            path: path.to_path_buf(),
            inode,
        },
    ))
}

/// Runs `f` with the process umask set to `mask`, then restores it. The daemon is
/// single-threaded while it binds, so no other file creation sees the mask.
#[allow(unsafe_code)]
fn with_umask<T>(mask: libc::mode_t, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask only swaps the process's file creation mask; it cannot fail.
    let old = unsafe { libc::umask(mask) };
    let result = f();
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    result
}

/// Accepts connections until the runtime ends.
pub async fn serve(listener: UnixListener, source: ReportSource, interfaces: Interfaces) {
    let own_uid = effective_uid();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "control socket: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // The file mode already keeps others out; the peer's credentials are checked
        // too, in case the socket's directory or mode were changed.
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == 0 || cred.uid() == own_uid => {}
            Ok(cred) => {
                tracing::warn!(
                    uid = cred.uid(),
                    "control socket: refused a client of another user"
                );
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "control socket: cannot read the client's credentials");
                continue;
            }
        }
        let source = source.clone();
        let interfaces = interfaces.clone();
        tokio::spawn(async move {
            if let Err(error) = answer(stream, &source, &interfaces).await {
                tracing::debug!(%error, "control connection ended");
            }
        });
    }
}

#[allow(unsafe_code)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

async fn answer(
    mut stream: UnixStream,
    source: &ReportSource,
    interfaces: &Interfaces,
) -> io::Result<()> {
    let mut line = String::new();
    let mut reader = BufReader::new((&mut stream).take(MAX_REQUEST_BYTES));
    tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no request"))??;
    let request = parse_request(&line);
    let report = match request {
        Ok(_) => source.report().await,
        Err(_) => None,
    };
    // The answer for 10,000 sessions is 31 MB of JSON (benches/scale): it is encoded on a
    // blocking thread, as the metrics are, and streamed to the client, so the event
    // loop's thread goes on forwarding and no whole answer is held in memory.
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(ANSWER_WRITE_TIMEOUT))?;
    let interfaces = interfaces.clone();
    tokio::task::spawn_blocking(move || write_answer(&stream, request, report, &interfaces))
        .await
        .map_err(io::Error::other)?
}

/// Writes the answer to `request` (the report taken for it, if the loop gave one)
/// and closes the connection's sending side.
fn write_answer(
    stream: &std::os::unix::net::UnixStream,
    request: Result<ControlRequest, String>,
    report: Option<Report>,
    interfaces: &Interfaces,
) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(ANSWER_CHUNK_BYTES, stream);
    match (request, report) {
        (Err(refusal), _) => out.write_all(refusal.as_bytes())?,
        (Ok(_), None) => {
            out.write_all(b"error: the daemon did not answer (busy or shutting down)\n")?
        }
        (Ok(ControlRequest::StatusTable), Some(report)) => {
            out.write_all(status::table(&report, interfaces).as_bytes())?
        }
        (Ok(ControlRequest::StatusDump), Some(report)) => {
            out.write_all(status::dump(&report, interfaces).as_bytes())?
        }
        (Ok(ControlRequest::StatusJson), Some(report)) => {
            serde_json::to_writer_pretty(&mut out, &status::JsonReport::new(&report))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    drop(out);
    stream.shutdown(std::net::Shutdown::Write)
}

/// What a control client may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlRequest {
    /// `status`: a table for a person.
    StatusTable,
    /// `status json`: the full report for scripts.
    StatusJson,
    /// `status dump`: one tab-separated line per path.
    StatusDump,
}

/// Reads one request line (surrounding white space ignored); anything else gets the
/// `error:` line to answer with, quoting at most 40 characters of what was sent.
pub fn parse_request(line: &str) -> Result<ControlRequest, String> {
    match line.trim() {
        "status" => Ok(ControlRequest::StatusTable),
        "status json" => Ok(ControlRequest::StatusJson),
        "status dump" => Ok(ControlRequest::StatusDump),
        other => Err(format!(
            "error: unknown request {:?}; send \"status\", \"status json\" or \"status dump\"\n",
            other.chars().take(40).collect::<String>()
        )),
    }
}

/// Sends `request` to the daemon at `socket` and returns its answer (blocking; for
/// the `mptund status` command).
pub fn query(socket: &Path, request: &str) -> io::Result<String> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_recognised_and_anything_else_is_refused_in_one_line() {
        assert_eq!(parse_request("status\n"), Ok(ControlRequest::StatusTable));
        assert_eq!(
            parse_request(" status json \r\n"),
            Ok(ControlRequest::StatusJson)
        );
        assert_eq!(parse_request("status dump"), Ok(ControlRequest::StatusDump));
        for junk in ["", "STATUS", "status  json", "status\0", "\u{fffd}é"] {
            let refusal = parse_request(junk).unwrap_err();
            assert!(refusal.starts_with("error: unknown request"), "{refusal}");
            assert_eq!(refusal.matches('\n').count(), 1, "{refusal:?}");
        }
        let long = "x".repeat(300);
        assert!(parse_request(&long).unwrap_err().len() < 120);
    }

    /// A report of `count` sessions, each a real one-path server session.
    fn report_of(count: usize) -> Report {
        use crate::crypto::{Aead, SessionKeys};
        use crate::session::{testing, KeyPair, Session, SessionPath, SessionReport};
        use crate::wire::SessionId;
        use mptund_sched::{AnyScheduler, PathId, SchedulerChoice};

        let now = std::time::Instant::now();
        let settings = testing::session_settings(
            SchedulerChoice::EarliestArrival(Default::default()),
            Duration::from_millis(100),
            1400,
        );
        let keys = SessionKeys::new(Aead::ChaCha20Poly1305, &[1; 32], &[2; 32]);
        let path = SessionPath::learned(PathId(0), now, &testing::path_settings(), &settings);
        let scheduler = AnyScheduler::new(settings.scheduler);
        let session = Session::new(
            now,
            KeyPair::new(now, SessionId(1), SessionId(2), keys),
            vec![path],
            scheduler,
            &settings,
            false,
        );
        let sessions = (0..count)
            .map(|index| SessionReport::new(&session, &format!("idle{index}"), now))
            .collect();
        let drops = crate::counters::DropCounters::default();
        Report::new("server", sessions, Vec::new(), &drops, count as u64)
    }

    #[test]
    fn a_report_of_ten_thousand_sessions_is_answered_whole() {
        const SESSIONS: usize = 10_000;
        let dir = std::env::temp_dir().join(format!("mptund-control-{}", std::process::id()));
        let socket = dir.join("control.sock");
        // The daemon's runtime: current-thread, as `daemon::run` builds it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (listener, guard) = runtime.block_on(async { bind(&socket) }).unwrap();
        let (source, mut requests) = ReportSource::channel();
        let client = {
            let socket = socket.clone();
            std::thread::spawn(move || query(&socket, "status json"))
        };
        runtime.block_on(async {
            tokio::spawn(serve(listener, source, Interfaces::default()));
            // The event loop's part: one report for the one request.
            let reply = requests.recv().await.unwrap();
            reply.send(report_of(SESSIONS)).unwrap();
            while !client.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let answer = client.join().unwrap().unwrap();
        drop(guard);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(answer.ends_with("}\n"), "the answer is whole");
        serde_json::from_str::<serde::de::IgnoredAny>(&answer).expect("one JSON document");
        assert_eq!(answer.matches("\"peer\": \"idle").count(), SESSIONS);
        assert!(answer.contains("\"peer\": \"idle9999\""));
    }
}
