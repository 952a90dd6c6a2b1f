//! Handshake timing: the timestamp a client's init carries, how long a server
//! remembers a peer's newest one, and when an unanswered init is repeated.
//!
//! A server answers an init only if its timestamp is later than the newest it
//! accepted from that peer: Noise IK's first message can be replayed verbatim, and
//! the timestamp is what makes a replay useless (as WireGuard's TAI64N timestamp).
//! The reasoning behind the two halves below is in `docs/PROTOCOL.md`, "Handshake
//! timestamps":
//!
//! - [`InitClock`] (client): `max(wall clock, last sent + 1)`, never going back
//!   within a process, and across restarts when the daemon stores a ceiling in its
//!   state directory before an init above the stored one goes out: a router
//!   without a real-time clock boots with its clock in the past and still sends
//!   timestamps the server has not seen.
//! - [`PeerTimestamp`] (server): the newest timestamp accepted from a peer,
//!   forgotten once the peer has had no session at all (confirmed or not) for
//!   [`FORGET_TIMESTAMP_AFTER`]. While a session exists nothing is forgotten, so a
//!   replay can never disturb it; a timestamp far in the future (a client clock
//!   that jumped years ahead) locks its peer out for that long at most, not until
//!   the server restarts.
//!
//! The wall clock and the randomness are given to the core ([`WallClock`],
//! [`RandomSource`]): tests step their own.

use std::time::{Duration, Instant};

/// Reads the wall clock, in nanoseconds since the UNIX epoch: the daemon's is the
/// system clock, tests step their own.
pub type WallClock = Box<dyn FnMut() -> u64 + Send>;

/// Draws uniformly distributed 32-bit numbers: the daemon's come from the operating
/// system ([`system_random`]), a test's from a seed.
pub type RandomSource = Box<dyn FnMut() -> u32 + Send>;

/// How far above the timestamp it is about to send the client asks for a ceiling
/// to be stored: one write of the state file covers every init of the next minute
/// of wall-clock time, so a client retrying every second writes once a minute, and
/// one renewing its keys every two minutes once per renewal. A client that lost
/// the stored file starts at most this far below what the server remembers.
pub const STORED_CEILING_LEAD: Duration = Duration::from_secs(60);

/// How long a peer must have had no session, confirmed or not, before the server
/// forgets its newest handshake timestamp. Without a session a replayed init can
/// at most start an unconfirmed session that never confirms (docs/PROTOCOL.md), so
/// this only has to outlast the copies of the client's own last inits still in
/// the network (a few retries of a second each); a minute also leaves a rebooted
/// client whose clock went back, and that stores no ceiling, waiting at most the
/// session idle timeout plus a minute.
pub const FORGET_TIMESTAMP_AFTER: Duration = Duration::from_secs(60);

/// The most jitter added to a handshake retry: WireGuard's (its paper's handshake
/// retransmission: REKEY-TIMEOUT plus a random 0 to 333 ms), so that clients that
/// lost their server at the same moment (a server restart's goodbye) do not
/// retry in step.
pub const MAX_RETRY_JITTER: Duration = Duration::from_millis(333);

/// The operating system's random numbers (ring's `SystemRandom`, `getrandom`).
pub fn system_random() -> RandomSource {
    use ring::rand::SecureRandom as _;
    let rng = ring::rand::SystemRandom::new();
    Box::new(move || {
        let mut bytes = [0u8; 4];
        // Fails only without any entropy source; then the retry has no jitter.
        let _ = rng.fill(&mut bytes);
        u32::from_be_bytes(bytes)
    })
}

/// The wait before an unanswered handshake is repeated: `retry` plus a jitter
/// drawn from `random`, uniform below a third of `retry` and at most
/// [`MAX_RETRY_JITTER`] (with the default 1 s retry, exactly WireGuard's 333 ms).
pub fn retry_delay(retry: Duration, random: u32) -> Duration {
    let max_jitter = (retry / 3).min(MAX_RETRY_JITTER);
    // Below 2^29 ns times below 2^32: no overflow.
    let max_jitter_ns = u64::try_from(max_jitter.as_nanos()).unwrap_or(0);
    let jitter_ns = (max_jitter_ns * u64::from(random)) >> 32;
    retry + Duration::from_nanos(jitter_ns)
}

/// The client's handshake timestamps: strictly increasing within a process, and
/// across restarts once [`InitClock::resume`] turned storing on.
pub struct InitClock {
    wall_clock: WallClock,
    last_sent: Option<u64>,
    /// `None` until [`InitClock::resume`]: nothing is stored.
    storage: Option<CeilingStorage>,
}

/// A ceiling on the timestamps sent, kept by the daemon across restarts.
struct CeilingStorage {
    /// The ceiling the daemon stored: every timestamp sent is at or below it.
    stored: Option<u64>,
    /// A higher ceiling to store before the next init can go out.
    wanted: Option<u64>,
}

impl InitClock {
    pub fn new(wall_clock: WallClock) -> Self {
        Self {
            wall_clock,
            last_sent: None,
            storage: None,
        }
    }

    /// Keeps timestamps increasing across restarts: `stored` is the ceiling the
    /// last run stored (`None` when there is none yet). From now on an init goes
    /// out only at or below a stored ceiling, and the first one after a start is
    /// above `stored` whatever the wall clock says.
    pub fn resume(&mut self, stored: Option<u64>) {
        self.last_sent = self.last_sent.max(stored);
        self.storage = Some(CeilingStorage {
            stored,
            wanted: None,
        });
    }

    /// The timestamp of an init to send now: the wall clock, or one past the last
    /// timestamp sent if that is later. `None` when it is above the stored ceiling:
    /// the caller sends nothing until [`InitClock::stored`] says a higher one
    /// ([`InitClock::to_store`]) is kept.
    pub fn next(&mut self) -> Option<u64> {
        let wall = (self.wall_clock)();
        let timestamp = match self.last_sent {
            Some(last) => wall.max(last.saturating_add(1)),
            None => wall,
        };
        if let Some(storage) = &mut self.storage {
            if storage.stored.is_none_or(|ceiling| timestamp > ceiling) {
                let lead = u64::try_from(STORED_CEILING_LEAD.as_nanos()).unwrap_or(u64::MAX);
                storage.wanted = Some(timestamp.saturating_add(lead));
                return None;
            }
        }
        self.last_sent = Some(timestamp);
        Some(timestamp)
    }

    /// A ceiling to store before the next init can go out.
    pub fn to_store(&self) -> Option<u64> {
        self.storage.as_ref().and_then(|storage| storage.wanted)
    }

    /// The daemon stored `ceiling` (or could not, and lets inits go out anyway).
    pub fn stored(&mut self, ceiling: u64) {
        if let Some(storage) = &mut self.storage {
            storage.stored = storage.stored.max(Some(ceiling));
            if storage.wanted.is_some_and(|wanted| wanted <= ceiling) {
                storage.wanted = None;
            }
        }
    }

    /// Whether an init waits for a ceiling to be stored.
    pub fn waiting_for_store(&self) -> bool {
        self.to_store().is_some()
    }
}

/// The server's memory of one peer's handshake timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerTimestamp {
    /// The newest timestamp accepted; older or equal ones are replays.
    newest: Option<u64>,
    /// Since when the peer has had no session, confirmed or not.
    quiet_since: Option<Instant>,
}

impl PeerTimestamp {
    /// Whether an init carrying `nanos` may be answered: it must be later than the
    /// newest accepted. `in_session`: whether the peer has a session, confirmed or
    /// not; a peer without one for [`FORGET_TIMESTAMP_AFTER`] has its newest
    /// timestamp forgotten first.
    pub fn admits(&mut self, now: Instant, nanos: u64, in_session: bool) -> bool {
        let quiet_long_enough = self
            .quiet_since
            .is_some_and(|since| now.saturating_duration_since(since) >= FORGET_TIMESTAMP_AFTER);
        if !in_session && quiet_long_enough {
            self.newest = None;
            self.quiet_since = None;
        }
        self.newest.is_none_or(|newest| nanos > newest)
    }

    /// An init carrying `nanos` was answered: it started a session or renewed one.
    pub fn accepted(&mut self, nanos: u64) {
        self.newest = self.newest.max(Some(nanos));
        self.quiet_since = None;
    }

    /// The peer's last session, confirmed or not, ended at `now`.
    pub fn sessions_ended(&mut self, now: Instant) {
        self.quiet_since = Some(now);
    }

    /// The newest timestamp remembered (tests).
    #[cfg(test)]
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    const SECOND_NS: u64 = 1_000_000_000;
    /// 2026-01-01 in UNIX nanoseconds, roughly.
    const NOW_NS: u64 = 1_767_225_600 * SECOND_NS;

    fn stepped_clock(start: u64) -> (WallClock, Arc<AtomicU64>) {
        let wall = Arc::new(AtomicU64::new(start));
        let read = wall.clone();
        (Box::new(move || read.load(Ordering::Relaxed)), wall)
    }

    #[test]
    fn timestamps_follow_the_wall_clock_and_never_go_back() {
        let (clock, wall) = stepped_clock(NOW_NS);
        let mut init_clock = InitClock::new(clock);
        assert_eq!(init_clock.next(), Some(NOW_NS));
        assert_eq!(
            init_clock.next(),
            Some(NOW_NS + 1),
            "a clock that stood still"
        );
        wall.store(NOW_NS - 3600 * SECOND_NS, Ordering::Relaxed);
        assert_eq!(
            init_clock.next(),
            Some(NOW_NS + 2),
            "a clock that stepped back"
        );
        wall.store(NOW_NS + SECOND_NS, Ordering::Relaxed);
        assert_eq!(init_clock.next(), Some(NOW_NS + SECOND_NS));
        assert_eq!(
            init_clock.to_store(),
            None,
            "nothing is stored unless asked"
        );
    }

    #[test]
    fn a_restart_with_the_clock_in_the_past_continues_above_the_stored_ceiling() {
        // The first run: the ceiling is stored before the first init goes out.
        let (clock, wall) = stepped_clock(NOW_NS);
        let mut first_run = InitClock::new(clock);
        first_run.resume(None);
        assert_eq!(first_run.next(), None);
        let ceiling = first_run.to_store().unwrap();
        assert!(ceiling >= NOW_NS + 60 * SECOND_NS);
        first_run.stored(ceiling);
        assert!(!first_run.waiting_for_store());
        let sent = first_run.next().unwrap();
        assert_eq!(sent, NOW_NS);
        // Retries within the lead need no new write.
        wall.store(NOW_NS + 30 * SECOND_NS, Ordering::Relaxed);
        assert_eq!(first_run.next(), Some(NOW_NS + 30 * SECOND_NS));
        assert_eq!(first_run.to_store(), None);
        // Past it, the next init waits for a higher ceiling.
        wall.store(ceiling + 1, Ordering::Relaxed);
        assert_eq!(first_run.next(), None);
        let higher = first_run.to_store().unwrap();
        assert!(higher > ceiling + 1);
        first_run.stored(higher);
        let last_sent = first_run.next().unwrap();
        assert_eq!(last_sent, ceiling + 1);

        // The router reboots without a real-time clock: its clock reads 1970 plus
        // a minute. What it sends is still above everything it sent before.
        let (clock, _) = stepped_clock(60 * SECOND_NS);
        let mut second_run = InitClock::new(clock);
        second_run.resume(Some(higher));
        assert_eq!(second_run.next(), None);
        second_run.stored(second_run.to_store().unwrap());
        let after_reboot = second_run.next().unwrap();
        assert!(after_reboot > last_sent && after_reboot > higher);
        assert!(second_run.next().unwrap() > after_reboot);
    }

    #[test]
    fn a_failed_store_still_lets_the_init_go_out() {
        let (clock, _) = stepped_clock(NOW_NS);
        let mut init_clock = InitClock::new(clock);
        init_clock.resume(None);
        assert_eq!(init_clock.next(), None);
        // The daemon could not write the file; it says so in the log and goes on.
        let wanted = init_clock.to_store().unwrap();
        init_clock.stored(wanted);
        assert_eq!(init_clock.next(), Some(NOW_NS));
    }

    #[test]
    fn the_newest_timestamp_is_kept_while_a_session_exists() {
        let start = Instant::now();
        let mut peer = PeerTimestamp::default();
        assert!(peer.admits(start, NOW_NS, false));
        peer.accepted(NOW_NS);
        // A replay, however long after, is refused while the session exists.
        for later in [
            Duration::ZERO,
            FORGET_TIMESTAMP_AFTER,
            Duration::from_secs(86_400),
        ] {
            assert!(!peer.admits(start + later, NOW_NS, true));
            assert!(!peer.admits(start + later, NOW_NS - 1, true));
        }
        assert!(peer.admits(start, NOW_NS + 1, true));
    }

    #[test]
    fn the_newest_timestamp_is_forgotten_only_after_a_quiet_period_without_sessions() {
        let start = Instant::now();
        let mut peer = PeerTimestamp::default();
        peer.accepted(NOW_NS);
        let ended = start + Duration::from_secs(500);
        peer.sessions_ended(ended);
        // Within the quiet period a replay is still refused.
        assert!(!peer.admits(ended, NOW_NS, false));
        assert!(!peer.admits(
            ended + FORGET_TIMESTAMP_AFTER - Duration::from_millis(1),
            NOW_NS,
            false
        ));
        // A session that exists again (an unconfirmed one) keeps it too.
        assert!(!peer.admits(ended + FORGET_TIMESTAMP_AFTER, NOW_NS, true));
        // After the quiet period an earlier timestamp is answered: a rebooted client.
        assert!(peer.admits(
            ended + FORGET_TIMESTAMP_AFTER,
            NOW_NS - 3600 * SECOND_NS,
            false
        ));
        assert_eq!(peer.newest(), None);
        peer.accepted(NOW_NS - 3600 * SECOND_NS);
        assert!(!peer.admits(
            ended + FORGET_TIMESTAMP_AFTER,
            NOW_NS - 3600 * SECOND_NS,
            false
        ));
    }

    #[test]
    fn a_session_that_starts_again_cancels_the_quiet_period() {
        let start = Instant::now();
        let mut peer = PeerTimestamp::default();
        peer.accepted(NOW_NS);
        peer.sessions_ended(start);
        peer.accepted(NOW_NS + SECOND_NS);
        // That session is gone again only later; the quiet period counts from then.
        let later = start + 2 * FORGET_TIMESTAMP_AFTER;
        assert!(!peer.admits(later, NOW_NS + SECOND_NS, false));
        peer.sessions_ended(later);
        assert!(!peer.admits(later + FORGET_TIMESTAMP_AFTER / 2, NOW_NS, false));
        assert!(peer.admits(later + FORGET_TIMESTAMP_AFTER, NOW_NS, false));
    }

    #[test]
    fn retries_are_spread_over_a_third_of_a_second_and_never_shorter() {
        let retry = Duration::from_secs(1);
        assert_eq!(retry_delay(retry, 0), retry);
        assert!(retry_delay(retry, u32::MAX) < retry + MAX_RETRY_JITTER);
        assert!(retry_delay(retry, u32::MAX) > retry + MAX_RETRY_JITTER - Duration::from_millis(1));
        // A short retry gets a third of itself at most.
        let short = Duration::from_millis(300);
        assert!(retry_delay(short, u32::MAX) < short + Duration::from_millis(100));
        // A long one still gets WireGuard's 333 ms at most.
        let long = Duration::from_secs(5);
        assert!(retry_delay(long, u32::MAX) < long + MAX_RETRY_JITTER);
    }
}
