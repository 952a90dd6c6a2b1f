//! Path liveness: is anything coming back from this path?
//!
//! RFC 9002 section 6.2 sizes its probe timeout (PTO) from the path's own RTT
//! statistics: `smoothed_rtt + max(4 * rttvar, 1 ms) + max_ack_delay`, before any
//! sample from the initial RTT of 333 ms (section 6.2.2). Liveness counts silence in
//! units of that PTO (without the exponential backoff, which would slow detection down
//! exactly when it matters), so a 20 ms LTE path and a 150 ms loaded Wi-Fi path are
//! judged by their own clocks. A floor keeps very short paths from flapping on
//! scheduling jitter. The rule:
//!
//! * Silence starts when something is sent while nothing is outstanding, and restarts
//!   whenever something is heard from the path (an acknowledgement or any
//!   authenticated datagram) while packets are still in flight. With nothing in flight
//!   there is no silence: an idle path is not a dead one.
//! * Active -> Suspect when silence reaches `max(SUSPECT_AFTER_PTOS * PTO, SUSPECT_FLOOR)`.
//! * Suspect -> Down when silence reaches `max(DOWN_AFTER_PTOS * PTO, DOWN_FLOOR)`.
//! * Down -> Probing when the caller sends a probe; Probing -> Down again if that
//!   probe is not answered within the Down threshold (so the caller probes again).
//! * Suspect, Down or Probing -> Active as soon as anything is heard.
//!
//! With the constants below a 40 ms path (PTO about 70 ms with a 25 ms
//! `max_ack_delay`) is Suspect after 140 ms and Down after 300 ms of silence, well
//! inside a 500 ms mmWave blockage; a 150 ms path (PTO about 200 ms) is Suspect only
//! after 400 ms and Down after 800 ms, so a 300 ms hiccup passes unnoticed.
//!
//! One transition happens per call; when the caller was late and several deadlines
//! passed, [`LivenessMonitor::poll_timeout`] returns a deadline in the past and the
//! next call takes the next step.

use std::time::{Duration, Instant};

/// Silence, in PTOs, before a path is suspected: one PTO is the RFC 9002 point where
/// a probe is sent; the second one without any answer means the probe went unanswered
/// too, which one lost packet or one delayed acknowledgement cannot explain.
pub const SUSPECT_AFTER_PTOS: u32 = 2;
/// The shortest silence that makes a path Suspect: 100 ms is above the
/// acknowledgement jitter of LTE scheduling (tens of ms) on a path whose PTO is tiny.
pub const SUSPECT_FLOOR: Duration = Duration::from_millis(100);
/// Silence, in PTOs, before a path is declared Down and its packets are reinjected:
/// by four PTOs two RFC 9002 probe timeouts (at 1 and 1 + 2 PTOs, section 6.2.1
/// backoff) have passed without an answer, and a 40 ms path is still Down inside a
/// 500 ms outage.
pub const DOWN_AFTER_PTOS: u32 = 4;
/// The shortest silence that makes a path Down: 300 ms, below the inner TCP's 1 s
/// minimum RTO (RFC 6298 section 2.4), so reinjection beats the inner retransmission
/// timer, yet above the 100-200 ms scheduling gaps of a loaded LTE cell.
pub const DOWN_FLOOR: Duration = Duration::from_millis(300);

/// The liveness state of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Liveness {
    /// Feedback arrives as expected.
    #[default]
    Active,
    /// Silent for longer than expected: schedule new traffic elsewhere if possible.
    Suspect,
    /// Silent for long: reinject what was in flight, send only probes.
    Down,
    /// Down, and a probe was sent; waiting for an answer.
    Probing,
}

/// A state change, `(from, to)`.
pub type LivenessChange = (Liveness, Liveness);

/// The liveness state machine of one path.
#[derive(Clone, Debug, Default)]
pub struct LivenessMonitor {
    state: Liveness,
    silent_since: Option<Instant>,
    probing_since: Option<Instant>,
}

impl LivenessMonitor {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn state(&self) -> Liveness {
        self.state
    }

    /// Silence after which an Active path becomes Suspect, for a PTO of `pto`.
    pub fn suspect_after(pto: Duration) -> Duration {
        (pto * SUSPECT_AFTER_PTOS).max(SUSPECT_FLOOR)
    }

    /// Silence after which a path becomes Down, for a PTO of `pto`.
    pub fn down_after(pto: Duration) -> Duration {
        (pto * DOWN_AFTER_PTOS).max(DOWN_FLOOR)
    }

    /// Something was sent on the path at `now`.
    pub fn on_sent(&mut self, now: Instant) {
        self.silent_since.get_or_insert(now);
    }

    /// Something was heard from the path at `now`; `still_in_flight` says whether
    /// packets are still awaiting acknowledgement afterwards.
    pub fn on_heard(&mut self, now: Instant, still_in_flight: bool) -> Option<LivenessChange> {
        self.silent_since = still_in_flight.then_some(now);
        self.probing_since = None;
        self.transition(Liveness::Active)
    }

    /// The caller sent a probe on a Down path; from any other state nothing changes.
    pub fn start_probing(&mut self, now: Instant) -> Option<LivenessChange> {
        if self.state != Liveness::Down {
            return None;
        }
        self.probing_since = Some(now);
        self.transition(Liveness::Probing)
    }

    /// Everything in flight was handed back; with nothing outstanding silence no
    /// longer runs (a Suspect path then stays Suspect until heard, or until the next
    /// send restarts the clock).
    pub fn on_in_flight_drained(&mut self) {
        self.silent_since = None;
    }

    /// When [`Self::on_timeout`] has the next step to take, for a PTO of `pto`.
    pub fn poll_timeout(&self, pto: Duration) -> Option<Instant> {
        match self.state {
            Liveness::Active => self
                .silent_since
                .map(|since| since + Self::suspect_after(pto)),
            Liveness::Suspect => self.silent_since.map(|since| since + Self::down_after(pto)),
            Liveness::Probing => self
                .probing_since
                .map(|since| since + Self::down_after(pto)),
            Liveness::Down => None,
        }
    }

    /// Takes the step whose deadline has passed at `now`, if any.
    pub fn on_timeout(&mut self, now: Instant, pto: Duration) -> Option<LivenessChange> {
        let deadline = self.poll_timeout(pto)?;
        if now < deadline {
            return None;
        }
        match self.state {
            Liveness::Active => self.transition(Liveness::Suspect),
            Liveness::Suspect | Liveness::Probing => {
                self.probing_since = None;
                self.transition(Liveness::Down)
            }
            Liveness::Down => None,
        }
    }

    fn transition(&mut self, to: Liveness) -> Option<LivenessChange> {
        let from = self.state;
        self.state = to;
        (from != to).then_some((from, to))
    }
}

#[cfg(test)]
#[path = "liveness_tests.rs"]
mod tests;
