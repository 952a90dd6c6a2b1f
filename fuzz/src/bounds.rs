//! What the whole-core targets hold a core to after every step (one datagram handled
//! with its batch's flush, one TUN packet, one timer round), besides not panicking:
//!
//! - what the core sends to an address no session has validated stays within three
//!   times what came from there (RFC 9000 section 8.1), per datagram and in all;
//! - at most one PathResponse per path per step, and no more on a path than
//!   datagrams carrying challenges arrived on it (RFC 9000 section 8.2.2);
//! - the work a step costs, in the core's own units ([`mptund::session::ServerCore::work_units`]),
//!   stays under a bound derived from the code and the settings, whatever the
//!   datagram carries ([`max_work_per_session_step`]);
//! - the server's sessions hold no more packet buffers than its memory budget.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Instant;

use mptund::session::{Core, Outgoing, ServerCore};

use crate::FRAMES_READ_PER_DATAGRAM;

/// RFC 9000 section 8.1, `AMPLIFICATION_FACTOR` in
/// crates/mptund/src/session/migration.rs: at most three times the bytes received
/// from an address that is not validated.
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// Control datagrams one session may build per path in one step: an
/// acknowledgement, a ping (keepalive, RTT or jitter measurement, or the probe
/// timeout's), a PathChallenge and a PathResponse.
const CONTROL_DATAGRAMS_PER_PATH: u64 = 4;
/// Reorder-buffer calls in one step whose count does not depend on the packets it
/// moves: one per GaveUp frame read, and one insert (a data packet, or the one a
/// parity rebuilt), which may push the window forward.
const REORDER_CALLS_PER_STEP: u64 = FRAMES_READ_PER_DATAGRAM as u64 + 2;
/// Passes over the slot words one gap skip makes: finding the run's end, then
/// marking the run passed.
const PASSES_PER_SKIP: u64 = 2;

/// The most work units one session may spend in one step, whatever the peer sent,
/// from how the core counts them (`Session::work_units`: frames read, control
/// datagrams built, and the reorder buffer's slot words, packets, arrival-queue
/// entries and window slots, `ReorderBuffer::work_units`), for a reorder window of
/// `capacity` (`W = capacity / 64` words), `paths` paths and at most `packets`
/// packets moved:
///
/// - frames read: at most [`FRAMES_READ_PER_DATAGRAM`] (192), one unit each;
/// - control datagrams built: [`CONTROL_DATAGRAMS_PER_PATH`] per path;
/// - the reorder calls whose number is bounded ([`REORDER_CALLS_PER_STEP`]: a
///   GaveUp frame marks at most two runs clamped to the window): each costs at most
///   `REORDER_WORK_PER_CALL * (W + 2)` (the reorder buffer's own bound, with a
///   run that wraps around the window touching one word twice), besides the
///   packets it moves;
/// - releasing: every packet moved costs at most `REORDER_WORK_PER_CALL` units
///   (put in, taken out, its arrival entry, a datagram built to send it); every
///   gap skipped ends at a packet or at the empty window, so a step skips at most
///   `packets + 2` gaps, and their [`PASSES_PER_SKIP`] passes over the words add
///   up to the numbers passed (at most the window and the history behind it,
///   `2 * W` words) plus one partial word each;
/// - amortized upkeep that can fall due in one step: the arrival queue's
///   compaction (under `2 * capacity` entries) and the window's growth (under
///   `3 * capacity` slots over the buffer's life).
///
/// With the targets' window of 1024 and a server budget of 96 buffers (packets =
/// 194) on 4 paths that is 35,272 units; a GaveUp frame that cost one unit per
/// sequence number of the window would reach 196,608 with 192 frames.
pub fn max_work_per_session_step(reorder_capacity: u64, paths: u64, packets: u64) -> u64 {
    let per_call = mptund_sched::REORDER_WORK_PER_CALL;
    let words = reorder_capacity / 64;
    let frames = FRAMES_READ_PER_DATAGRAM as u64;
    let control_datagrams = CONTROL_DATAGRAMS_PER_PATH * paths;
    let bounded_calls = REORDER_CALLS_PER_STEP * per_call * (words + 2);
    let moved = per_call * packets;
    let skips = PASSES_PER_SKIP * (2 * words + packets + 2);
    let upkeep = 2 * reorder_capacity + 3 * reorder_capacity;
    frames + control_datagrams + bounded_calls + moved + skips + upkeep
}

/// PathResponses against the challenges that drew them, per session and path.
#[derive(Default)]
pub struct ResponseLedger {
    challenged: HashMap<(u32, u8), u64>,
    answered: HashMap<(u32, u8), u64>,
}

impl ResponseLedger {
    /// A datagram carrying challenges arrived on `path` of `session`.
    pub fn challenge(&mut self, session: u32, path: u8) {
        *self.challenged.entry((session, path)).or_default() += 1;
    }

    /// The PathResponse frames one step sent, by session and path.
    pub fn answered_in_step(&mut self, responses: &HashMap<(u32, u8), usize>) {
        for (&(session, path), &count) in responses {
            assert!(
                count <= 1,
                "{count} PathResponses on path {path} of session {session:08x} in one step"
            );
            let answered = self.answered.entry((session, path)).or_default();
            *answered += count as u64;
            let challenged = self.challenged.get(&(session, path)).copied().unwrap_or(0);
            assert!(
                *answered <= challenged,
                "{answered} PathResponses on path {path} of session {session:08x} for \
                 {challenged} datagrams carrying challenges"
            );
        }
    }
}

/// What a server step was, for [`ServerBounds::check`].
#[derive(Clone, Copy, Debug)]
pub enum ServerStep {
    /// A datagram of `len` bytes from `from`, handled and flushed.
    Datagram { from: SocketAddr, len: usize },
    /// Anything else: a TUN packet, a timer round, a close.
    Other,
}

/// The server-side bounds, checked after every step of one server core.
pub struct ServerBounds {
    /// Addresses some session's path had as its (validated) address when last read.
    validated: HashSet<SocketAddr>,
    received_from: HashMap<SocketAddr, u64>,
    sent_unvalidated: HashMap<SocketAddr, u64>,
    work_done: u64,
    work_per_session_step: u64,
    /// The server said goodbye ([`ServerBounds::server_closed`]).
    closed: bool,
    /// A datagram's flush also sends the acknowledgements and path responses of the
    /// other sessions a step touched since the last one.
    flush_work_per_session: u64,
}

impl ServerBounds {
    /// `paths` is the server's `max_paths_per_session`.
    pub fn new(server: &ServerCore, now: Instant, reorder_capacity: u64, paths: u64) -> Self {
        let (_, budget) = server.memory_held();
        // A step moves the packets its session holds (at most the budget) and one
        // arriving, and sheds from the others at most what they hold (the budget).
        let packets = 2 * budget as u64 + 2;
        Self {
            validated: validated_addresses(server, now),
            received_from: HashMap::new(),
            sent_unvalidated: HashMap::new(),
            work_done: server.work_units(),
            work_per_session_step: max_work_per_session_step(reorder_capacity, paths, packets),
            closed: false,
            flush_work_per_session: CONTROL_DATAGRAMS_PER_PATH * paths,
        }
    }

    /// The server was closed: the daemon exits right after its goodbyes, so what a
    /// target has it send afterwards (a session waiting for its client's first
    /// datagram probes the unproven address of its init for the goodbye's answer)
    /// is no longer held to the amplification bound.
    pub fn server_closed(&mut self) {
        self.closed = true;
    }

    /// After a step of `server` that sent `sent`.
    pub fn check(
        &mut self,
        server: &ServerCore,
        now: Instant,
        step: ServerStep,
        sent: &[Outgoing],
    ) {
        let (held, budget) = server.memory_held();
        assert!(
            held <= budget,
            "the sessions hold {held} packet buffers, over the budget of {budget}"
        );

        let work = server.work_units();
        let spent = work.saturating_sub(self.work_done);
        self.work_done = work;
        let sessions = server.session_count().max(1) as u64;
        let bound = match step {
            ServerStep::Datagram { .. } => {
                self.work_per_session_step + sessions * self.flush_work_per_session
            }
            ServerStep::Other => sessions * self.work_per_session_step,
        };
        assert!(
            spent <= bound,
            "one step ({step:?}) cost {spent} work units, over the bound of {bound}"
        );

        if self.closed {
            return;
        }
        // An address validated before the step or by it. The report that tells is
        // dear, so it is read only when the step sent to an address not known as
        // validated (nothing sent, nothing to judge): an address stays in the set
        // after its path moved on or its session ended, until the next read.
        let after = sent
            .iter()
            .any(|outgoing| !self.validated.contains(&outgoing.destination))
            .then(|| validated_addresses(server, now));
        let validated = |address: &SocketAddr| {
            self.validated.contains(address)
                || after.as_ref().is_some_and(|after| after.contains(address))
        };
        if let ServerStep::Datagram { from, len } = step {
            *self.received_from.entry(from).or_default() += len as u64;
            if !validated(&from) {
                let answered: usize = sent
                    .iter()
                    .filter(|outgoing| outgoing.destination == from)
                    .map(|outgoing| outgoing.packet.len())
                    .sum();
                assert!(
                    answered as u64 <= AMPLIFICATION_FACTOR * len as u64,
                    "{answered} bytes sent to the unvalidated {from} in answer to a \
                     datagram of {len}"
                );
            }
        }
        for outgoing in sent {
            let to = outgoing.destination;
            if validated(&to) {
                continue;
            }
            let total = self.sent_unvalidated.entry(to).or_default();
            *total += outgoing.packet.len() as u64;
            let received = self.received_from.get(&to).copied().unwrap_or(0);
            assert!(
                *total <= AMPLIFICATION_FACTOR * received,
                "{total} bytes sent to the unvalidated {to}, which sent {received}"
            );
        }
        if let Some(after) = after {
            self.validated = after;
        }
    }
}

/// Every address a session's path sends to: the handshake's, or one validated
/// since. Sessions still waiting for their client's first datagram are not in the
/// report; they send nothing but the handshake response.
pub fn validated_addresses(server: &ServerCore, now: Instant) -> HashSet<SocketAddr> {
    server
        .report(now)
        .sessions
        .iter()
        .flat_map(|session| &session.paths)
        .filter_map(|path| path.remote.as_deref()?.parse().ok())
        .collect()
}
