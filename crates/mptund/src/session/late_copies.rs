//! Copies of packets a slower path still carries, sent on a path that would idle
//! (`scheduler.copy_late_packets`, off by default).
//!
//! When nothing waits to be sent and a path is all but idle, the inner flow is either
//! quiet or waiting for acknowledgements of what the slower paths still carry: its
//! window is full. Then the receiver's in-order release, and with it every
//! acknowledgement the inner flow waits for, follows the latest of those packets while
//! a faster path idles. An inner BBR's window covers about two of its smallest round
//! trips, and a slower path's queue stretches the round trip past that (traced on
//! lte-trace-wifi and three-paths-lossy: `benches/schedulers/REPORT.md`). A copy of each
//! such packet that arrives markedly earlier on the idle path goes out there, oldest
//! first, in half its window; the receiver drops whichever copy comes second. MPTCP's
//! opportunistic retransmission (Raiciu et al., "How hard can it be?", NSDI 2012, §4.2)
//! does the same for a receive window that a slow subflow blocks.
//!
//! Off by default: measured against the same build without it, an inner BBR gained up
//! to 7 % on lossy and widely spread paths, an inner CUBIC lost up to 5 % there.

// Paths are indexed by positions the session itself found: no byte from the wire
// becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::{Duration, Instant};

use mptund_sched::{one_way_delay_estimate, predicted_arrival, PathState};

use super::send::Route;
use super::{Outgoing, Session};
use crate::buffers::BufferPool;

/// The least a copy must gain on its original to be sent: below this the receiver
/// waits about as long for either, and the copy only costs the idle path's room.
const LEAST_GAIN: Duration = Duration::from_millis(5);
/// A path carries copies only while at most this fraction of its window is in flight:
/// between an inner flow's bursts a path's window opens for a moment, and copies sent
/// whenever it had room cost an inner CUBIC 2 % on two paths of unequal delay
/// (`benches/schedulers/REPORT.md`).
const IDLE_WINDOW_FRACTION: u64 = 4;

impl Session {
    /// Sends copies of the packets in flight on slower paths that an idle path would
    /// deliver at least [`LEAST_GAIN`] (or its smoothed RTT, if longer) earlier, oldest
    /// first, in half of its window's room. Only when nothing waits to be sent: new
    /// packets and repairs come first.
    pub(super) fn copy_late_packets(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        out: &mut Vec<Outgoing>,
    ) {
        if !self.settings.copy_late_packets
            || !self.sender.send_queue.packets.is_empty()
            || !self.sender.resend_queue.packets.is_empty()
            || self.paths.len() < 2
        {
            return;
        }
        let Some(len) = self.paths.first().map(|path| path.max_datagram_size()) else {
            return;
        };
        self.refresh_views(now, len, Route::New);
        // The path that delivers first among those that can send now.
        let Some((arrival, fast_id, gain)) = self
            .sender
            .views
            .iter()
            .filter(|view| {
                view.state == PathState::Up
                    && view.can_send(len)
                    && view
                        .cwnd_bytes
                        .is_none_or(|cwnd| view.bytes_in_flight <= cwnd / IDLE_WINDOW_FRACTION)
            })
            .filter_map(|view| {
                let gain = view.srtt.unwrap_or_default().max(LEAST_GAIN);
                Some((predicted_arrival(view, len)?, view.id, gain))
            })
            .min()
        else {
            return;
        };
        let Some(fast) = self.path_index(fast_id) else {
            return;
        };
        let deadline = now + arrival + gain;
        // Half the room: the inner flow's next packets may come any moment. Only the
        // oldest packets of each path can be among the oldest that fit.
        let room = self.paths[fast]
            .probe
            .window()
            .saturating_sub(self.paths[fast].probe.bytes_in_flight());
        let limit = (usize::try_from(room / 2).unwrap_or(usize::MAX) / len).max(1);
        // Packets of the other paths that arrive after the deadline, by sequence number.
        let mut late = std::mem::take(&mut self.sender.late);
        late.clear();
        for view in &self.sender.views {
            if view.id == fast_id || view.state != PathState::Up {
                continue;
            }
            let (Some(one_way), Some(index)) =
                (one_way_delay_estimate(view), self.path_index(view.id))
            else {
                continue;
            };
            self.paths[index].late_in_flight(one_way, deadline, index, limit, &mut late);
        }
        // Oldest first: the receiver's stream waits for the lowest sequence number.
        let next = self.sender.next_seq;
        late.sort_unstable_by_key(|&(seq, _, _)| std::cmp::Reverse(next.0.wrapping_sub(seq.0)));
        for &(_, index, packet_number) in late.iter().take(limit) {
            if !self.paths[fast].can_send_now(now, len) {
                break;
            }
            let Some((seq, copy)) = self.paths[index].copy_kept(packet_number, pool) else {
                continue;
            };
            self.send_copy(now, fast, seq, copy, pool, out);
            self.counters.late_copies += 1;
        }
        self.sender.late = late;
    }
}
