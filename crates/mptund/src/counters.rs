//! Why packets were dropped, counted and logged at most once per interval per reason.
//!
//! Every datagram or inner packet the daemon refuses lands in exactly one of these
//! counters; none is dropped silently, and none is logged per packet.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::{Duration, Instant};

/// Hostile or broken input can arrive at line rate; a log line per reason per interval
/// keeps the journal readable and the daemon fast.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

macro_rules! drop_reasons {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// Why a datagram or inner packet was dropped.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DropReason { $(#[doc = $doc] $variant,)* }

        impl DropReason {
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];

            /// Stable snake_case name for logs, JSON and metric labels.
            pub fn as_str(self) -> &'static str {
                match self { $(DropReason::$variant => $name,)* }
            }
        }
    };
}

drop_reasons! {
    Malformed => "malformed", "A datagram too short or of an unknown type or version.";
    UnknownSession => "unknown_session", "A transport datagram for a session id this side does not have.";
    AuthenticationFailed => "authentication_failed", "AEAD verification failed: forged, corrupted or sealed with another key.";
    Replayed => "replayed", "An authenticated datagram whose nonce counter was seen before or is too old.";
    HandshakeRejected => "handshake_rejected", "A handshake message that failed its MAC, its Noise authentication, named an unknown peer, or replayed an older handshake.";
    StaleKey => "stale_key", "A datagram sealed under keys older than the reject time or past their message limit, or one the session may no longer send because its keys expired.";
    CookieRequired => "cookie_required", "A handshake init the server, under load, answered with a cookie reply instead of processing it: it had no valid mac2 for its source address.";
    HandshakeRateLimited => "handshake_rate_limited", "A handshake init from a source address that used up its token bucket, or a new source while the bucket table was full of active ones.";
    HandshakeQueueFull => "handshake_queue_full", "A handshake init that found the queue of inits waiting for Diffie-Hellman full, or that an init from a source network with fewer waiting took the place of.";
    CookieReplyRejected => "cookie_reply_rejected", "A cookie reply that was malformed, answered no init in progress, or failed to authenticate under that init's mac1.";
    UnconfirmedSession => "unconfirmed_session", "A new handshake's session was replaced by a newer one before the client proved its keys.";
    UnvalidatedPath => "unvalidated_path", "An authenticated datagram from a new address that may not start a path validation (not the newest counter on its path), or a path challenge withheld because the address has not sent a third of its cost yet.";
    PathValidationFailed => "path_validation_failed", "A path validation that ended without the peer answering from the new address: its challenges timed out, or the validated address or another one proved newer.";
    Oversize => "oversize", "A packet larger than the TUN MTU or the buffers allow.";
    InvalidInnerPacket => "invalid_inner_packet", "A decrypted payload that is not a well-formed IPv4 or IPv6 packet.";
    SourceNotAllowed => "source_not_allowed", "An inner packet whose source address is outside the peer's allowed addresses.";
    NoRoute => "no_route", "A packet from the TUN whose destination belongs to no peer.";
    NoSession => "no_session", "A packet from the TUN while no session is established.";
    NoUsablePath => "no_usable_path", "The scheduler found no path that could take the packet.";
    SendQueueFull => "send_queue_full", "Every path was full and so was the send queue in front of them.";
    SendQueueSojourn => "send_queue_sojourn", "A packet waited in the send queue longer than its sojourn limit.";
    ResendExpired => "resend_expired", "A lost packet waited for a free path longer than the receiver holds a gap for it.";
    SendQueueAqm => "send_queue_aqm", "CoDel dropped a packet from a standing send queue to slow the inner flow down.";
    Duplicate => "duplicate", "A copy of an inner packet that was already delivered or is buffered.";
    TooOld => "too_old", "An inner packet older than the reorder buffer remembers.";
    ReorderBacklog => "reorder_backlog", "The reorder buffer was full of packets not yet released.";
    SendFailed => "send_failed", "The operating system refused to send a datagram on a path.";
    TunWriteFailed => "tun_write_failed", "Writing a packet to the TUN device failed.";
    TooManyFrames => "too_many_frames", "Frames of a datagram beyond the most one datagram may carry; the datagram's earlier frames were handled.";
    ParityNotEnabled => "parity_not_enabled", "A parity datagram while this side has parity turned off: no decoder is made for it.";
    TooManyPaths => "too_many_paths", "A datagram on a new path beyond the session's path limit, or while the session held its share of the memory budget.";
    MemoryBudget => "memory_budget", "An inner packet refused because its session held its share of the server's memory budget.";
    TransmitShare => "transmit_share", "A datagram refused because its session had its share of the socket's send queue waiting.";
}

#[derive(Debug, Clone)]
pub struct DropCounters {
    counts: [u64; DropReason::ALL.len()],
    last_logged: [Option<Instant>; DropReason::ALL.len()],
}

// Arrays of more than 32 elements have no derived Default.
impl Default for DropCounters {
    fn default() -> Self {
        Self {
            counts: [0; DropReason::ALL.len()],
            last_logged: [None; DropReason::ALL.len()],
        }
    }
}

impl DropCounters {
    /// Counts one drop and logs it unless this reason was logged within the interval.
    pub fn record(&mut self, now: Instant, reason: DropReason, detail: &dyn std::fmt::Display) {
        let index = reason as usize;
        self.counts[index] += 1;
        let due =
            self.last_logged[index].is_none_or(|last| now.duration_since(last) >= LOG_INTERVAL);
        if due {
            self.last_logged[index] = Some(now);
            tracing::warn!(
                reason = reason.as_str(),
                total = self.counts[index],
                "dropped: {detail}"
            );
        }
    }

    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&reason| (reason, self.get(reason)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_drop_and_names_are_unique() {
        let now = Instant::now();
        let mut counters = DropCounters::default();
        for _ in 0..3 {
            counters.record(now, DropReason::Replayed, &"test");
        }
        assert_eq!(counters.get(DropReason::Replayed), 3);
        assert_eq!(counters.get(DropReason::Malformed), 0);
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::ALL.len());
    }
}
