//! What one session may take of a shared server: paths, and packet buffers out of one
//! memory budget that every session shares.
//!
//! The budget counts the packet buffers sessions hold: the reorder buffer and its delay
//! line, the send and re-send queues, the copies kept for repair and the parity
//! decoders. It is split evenly between the sessions that hold any: a session that
//! idles takes nothing, and each busy one may hold `budget / busy sessions`. A session
//! at its share degrades itself, never another: its reorder buffer gives gaps up at
//! once instead of holding them, and what it would add beyond its share is refused and
//! counted (`memory_budget`, `too_many_paths`). When a session below its share finds
//! the budget spent by sessions above theirs (it just became busy, so every share
//! shrank), those are cut back to their shares first, as `fq_codel` drops from the
//! fattest queue (RFC 8290 section 4.1). So the sessions together never hold more than
//! the budget, and nothing a session sends buys it more than its share.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::VecDeque;
use std::time::Instant;

use super::{refuse, Session, SessionPath};
use crate::buffers::{BufferPool, Packet};
use crate::counters::{DropCounters, DropReason};

/// Default `limits.max_paths_per_session`: a vehicle router has two to eight modems
/// (seeds/003: eight LTE modems on a high-speed train).
pub const DEFAULT_MAX_PATHS_PER_SESSION: usize = 8;
/// Default `limits.memory_budget_mib`: with 10,000 idle sessions at about 11 KiB each
/// (benches/scale, 124 MiB) it keeps the server well under the unit's `MemoryMax=512M`.
pub const DEFAULT_MEMORY_BUDGET_MIB: u64 = 192;
/// The smallest budget the configuration accepts: a few sessions' reorder windows.
pub const MIN_MEMORY_BUDGET_MIB: i64 = 16;

/// The server's `[limits]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Paths a session may open; datagrams on further path ids are dropped.
    pub max_paths_per_session: usize,
    /// Bytes of packet buffers all sessions together may hold.
    pub memory_budget_bytes: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_paths_per_session: DEFAULT_MAX_PATHS_PER_SESSION,
            memory_budget_bytes: DEFAULT_MEMORY_BUDGET_MIB << 20,
        }
    }
}

/// The packet buffers the sessions hold, against the budget.
#[derive(Debug)]
pub(super) struct MemoryLedger {
    /// The budget in packet buffers.
    budget: usize,
    /// Buffers held by all sessions, as of the end of each one's last step.
    held: usize,
    /// Sessions holding at least one buffer.
    busy: usize,
}

impl MemoryLedger {
    pub fn new(budget_bytes: u64, buffer_len: usize) -> Self {
        let mut ledger = Self {
            budget: 0,
            held: 0,
            busy: 0,
        };
        ledger.set_budget(budget_bytes, buffer_len);
        ledger
    }

    pub fn set_budget(&mut self, budget_bytes: u64, buffer_len: usize) {
        let packets = budget_bytes / buffer_len.max(1) as u64;
        self.budget = usize::try_from(packets).unwrap_or(usize::MAX).max(1);
    }

    /// The share of a session that holds `held` buffers now: the budget split between
    /// the busy sessions, this one counted as busy.
    pub fn share(&self, held: usize) -> usize {
        let busy = self.busy + usize::from(held == 0);
        self.budget / busy.max(1)
    }

    /// Buffers no session holds.
    pub fn free(&self) -> usize {
        self.budget.saturating_sub(self.held)
    }

    /// What a session holding `held` may hold by the end of its step: its share, and
    /// no more than the budget leaves.
    pub fn limit(&self, held: usize) -> usize {
        self.share(held).min(held.saturating_add(self.free()))
    }

    /// Whether a session holding `held` is kept below its share by sessions above
    /// theirs: they must give some back first.
    pub fn crowded_out(&self, held: usize) -> bool {
        held.saturating_add(self.free()) < self.share(held)
    }

    /// A session went from holding `before` buffers to `after`.
    pub fn update(&mut self, before: usize, after: usize) {
        self.held = self.held.saturating_sub(before).saturating_add(after);
        match (before == 0, after == 0) {
            (true, false) => self.busy += 1,
            (false, true) => self.busy = self.busy.saturating_sub(1),
            _ => {}
        }
    }

    pub fn held(&self) -> usize {
        self.held
    }

    pub fn budget(&self) -> usize {
        self.budget
    }
}

impl Session {
    /// Packet buffers the session holds, as the budget counts them.
    pub fn held_packets(&self) -> usize {
        let receiver = self.receiver.held_packets();
        let sender = self.sender.send_queue.len() + self.sender.resend_queue.packets.len();
        let paths: usize = self.paths.iter().map(SessionPath::held_packets).sum();
        receiver + sender + paths
    }

    /// Sets how many packet buffers the session may hold and how many paths the peer
    /// may open.
    pub(super) fn set_limits(&mut self, buffer_limit: usize, max_paths: usize) {
        self.buffer_limit = buffer_limit;
        self.max_paths = max_paths;
    }

    pub(super) fn at_buffer_limit(&self) -> bool {
        // A client has no budget: no need to count on its every packet.
        self.buffer_limit != usize::MAX && self.held_packets() >= self.buffer_limit
    }

    /// Gives buffers back until the session holds at most `limit`: the reorder buffer
    /// gives its gaps up and hands on what it held, the delay line hands on at once,
    /// the paths' parity decoders go (counted), and then the send queues lose their
    /// oldest packets (counted). The copies kept for repair stay: the paths' windows
    /// bound them.
    pub(super) fn shed_to(
        &mut self,
        now: Instant,
        limit: usize,
        pool: &mut BufferPool,
        deliver: &mut VecDeque<Packet>,
        drops: &mut DropCounters,
    ) {
        while self.held_packets() > limit {
            if let Some(packet) = self.receiver.release_early(now) {
                deliver.push_back(packet);
            } else if let Some(path) = self.paths.iter_mut().rev().find(|p| p.rebuild.is_some()) {
                // A decoder only rebuilds what a path may lose, and a peer makes one with
                // a single Parity datagram: it goes before any packet does. Were it kept,
                // a session over its share could not be cut back to it.
                path.rebuild = None;
                let detail = "parity decoder dropped: the session is over its memory share";
                drops.record(now, DropReason::MemoryBudget, &detail);
            } else if let Some(packet) = self.sender.send_queue.pop_oldest() {
                let detail = "send queue cut back to the session's memory share";
                refuse(pool, drops, packet, now, DropReason::MemoryBudget, &detail);
            } else if let Some((_, _, packet)) = self.sender.resend_queue.packets.pop_front() {
                let detail = "re-send cut back to the session's memory share";
                refuse(pool, drops, packet, now, DropReason::MemoryBudget, &detail);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_split_between_busy_sessions_only() {
        // 100 buffers of 1 KiB.
        let mut ledger = MemoryLedger::new(100 * 1024, 1024);
        assert_eq!(ledger.share(0), 100, "the first busy session may take all");
        ledger.update(0, 100);
        assert_eq!(ledger.limit(100), 100);
        // A second session becoming busy halves every share, and finds no room.
        assert_eq!(ledger.share(0), 50);
        assert_eq!(ledger.limit(0), 0);
        assert!(ledger.crowded_out(0), "the first must give back first");
        ledger.update(100, 50);
        assert!(!ledger.crowded_out(0));
        assert_eq!(ledger.limit(0), 50);
        ledger.update(0, 50);
        assert_eq!(ledger.held(), 100);
        // The first one, over nothing now, may not grow past its share.
        assert_eq!(ledger.limit(50), 50);
        // Idle again: its share goes back to the other.
        ledger.update(50, 0);
        assert_eq!(ledger.limit(50), 100);
    }

    #[test]
    fn a_session_never_gets_more_than_the_budget_leaves() {
        let mut ledger = MemoryLedger::new(10 * 2048, 2048);
        ledger.update(0, 3);
        ledger.update(0, 3);
        ledger.update(0, 3);
        // Shares are 10 / 4 = 2 for a fourth session, and 1 buffer is free.
        assert_eq!(ledger.limit(0), 1);
        assert_eq!(ledger.limit(3), 3);
    }
}
