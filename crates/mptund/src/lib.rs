//! mptund: a userspace multipath tunnel daemon.
//!
//! The client stripes the IP packets it reads from a TUN device over several
//! UDP paths (one per uplink) to a server, which reorders them and writes them
//! to its own TUN device; the reverse direction works the same way.
//!
//! The protocol core is sans-IO: nothing outside [`daemon`] reads the clock,
//! opens a socket or spawns a task. Time, where it matters, is a parameter.
//!
//! - [`wire`]: checked views of every datagram the tunnel sends (see
//!   `docs/PROTOCOL.md` for the byte layouts).
//! - [`replay`]: the sliding anti-replay window over the transport counter.
//! - [`crypto`]: per-direction ChaCha20-Poly1305 keys sealing and opening
//!   transport datagrams in place.
//! - [`keys`]: X25519 static keys and their base64 form.
//! - [`handshake`]: the Noise IK handshake that establishes a session.
//! - [`session`]: the state machine of client and server: sessions, paths,
//!   scheduling, reordering, keepalives.
//! - [`buffers`], [`counters`], [`mtu`]: packet buffers with head- and
//!   tailroom, drop accounting, the MTU arithmetic.
//! - [`config`]: the configuration file, parsed into validated types.
//! - [`daemon`]: the I/O loop (TUN, UDP sockets, timers, signals).
//! - `sim` (tests and the `sim` feature): a client and a server engine over
//!   emulated links under a virtual clock.
#![deny(unsafe_code)]

pub mod buffers;
pub mod config;
pub mod cookie;
pub mod counters;
pub mod crypto;
pub mod daemon;
pub mod handshake;
pub mod keys;
pub mod mtu;
pub mod noise;
pub mod replay;
pub mod session;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod wire;

/// The git commit this binary was built from (`build.rs`): nine or more hex digits,
/// `-dirty` when tracked files differed from it, or `unknown` outside a checkout.
pub const BUILD_COMMIT: &str = env!("MPTUND_COMMIT");

/// What `mptund --version` prints after the name, e.g. `0.1.0 (commit e0214ed8a)`;
/// benchmark scripts record it in their result files.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MPTUND_COMMIT"),
    ")"
);
