//! When each of the server's sessions next needs its timers run. A heap of deadlines,
//! so that a wake-up costs the sessions that are due, not a scan of every session.
//!
//! A session's deadline moves with nearly every datagram. Rather than find and move
//! its heap entry, a new entry is pushed and the old one becomes stale: an entry is in
//! force only while it matches the session's one scheduled instant.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use crate::wire::SessionId;

/// Stale entries allowed beyond one per session before the heap is rebuilt.
const STALE_SLACK: usize = 1024;

#[derive(Default)]
pub(super) struct SessionTimers {
    heap: BinaryHeap<Reverse<(Instant, SessionId)>>,
    /// The deadline in force for each scheduled session.
    scheduled: HashMap<SessionId, Instant>,
}

impl SessionTimers {
    /// Sets when `session` next needs its timers run.
    pub(super) fn schedule(&mut self, session: SessionId, at: Instant) {
        if self.scheduled.insert(session, at) == Some(at) {
            return;
        }
        self.heap.push(Reverse((at, session)));
        if self.heap.len() > 2 * self.scheduled.len() + STALE_SLACK {
            self.rebuild();
        }
        self.drop_stale_top();
    }

    /// Forgets a session that ended.
    pub(super) fn cancel(&mut self, session: SessionId) {
        if self.scheduled.remove(&session).is_some() {
            self.drop_stale_top();
        }
    }

    /// The earliest deadline in force.
    pub(super) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Moves every session due at `now` into `due` and unschedules it: the caller runs
    /// its timers and schedules it again.
    pub(super) fn take_due(&mut self, now: Instant, due: &mut Vec<SessionId>) {
        while let Some(&Reverse((at, session))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            if self.scheduled.get(&session) == Some(&at) {
                self.scheduled.remove(&session);
                due.push(session);
            }
        }
        self.drop_stale_top();
    }

    /// The instant `session` is scheduled for, if any.
    pub(super) fn scheduled(&self, session: SessionId) -> Option<Instant> {
        self.scheduled.get(&session).copied()
    }

    /// Keeps the heap's top in force, so [`SessionTimers::next`] never wakes the
    /// server early for a deadline that moved.
    fn drop_stale_top(&mut self) {
        while let Some(&Reverse((at, session))) = self.heap.peek() {
            if self.scheduled.get(&session) == Some(&at) {
                return;
            }
            self.heap.pop();
        }
    }

    fn rebuild(&mut self) {
        self.heap = self
            .scheduled
            .iter()
            .map(|(&session, &at)| Reverse((at, session)))
            .collect();
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ids(due: &[SessionId]) -> Vec<u32> {
        due.iter().map(|id| id.0).collect()
    }

    #[test]
    fn due_sessions_come_out_once_in_deadline_order() {
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        let mut timers = SessionTimers::default();
        timers.schedule(SessionId(1), ms(30));
        timers.schedule(SessionId(2), ms(10));
        timers.schedule(SessionId(3), ms(20));
        assert_eq!(timers.next(), Some(ms(10)));
        let mut due = Vec::new();
        timers.take_due(ms(20), &mut due);
        assert_eq!(ids(&due), [2, 3]);
        assert_eq!(timers.next(), Some(ms(30)));
        assert_eq!(timers.scheduled(SessionId(2)), None);
    }

    #[test]
    fn a_moved_deadline_leaves_no_early_wake_up() {
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        let mut timers = SessionTimers::default();
        timers.schedule(SessionId(1), ms(10));
        timers.schedule(SessionId(2), ms(50));
        // Session 1's deadline moves later: its old entry must not wake anyone.
        timers.schedule(SessionId(1), ms(40));
        assert_eq!(timers.next(), Some(ms(40)));
        let mut due = Vec::new();
        timers.take_due(ms(45), &mut due);
        assert_eq!(ids(&due), [1]);
        // And earlier: the new entry wins at once.
        timers.schedule(SessionId(2), ms(5));
        assert_eq!(timers.next(), Some(ms(5)));
    }

    #[test]
    fn a_cancelled_session_never_comes_due() {
        let start = Instant::now();
        let mut timers = SessionTimers::default();
        timers.schedule(SessionId(7), start);
        timers.cancel(SessionId(7));
        assert_eq!(timers.next(), None);
        let mut due = Vec::new();
        timers.take_due(start + Duration::from_secs(1), &mut due);
        assert!(due.is_empty());
    }

    #[test]
    fn stale_entries_stay_bounded_by_the_sessions() {
        let start = Instant::now();
        let mut timers = SessionTimers::default();
        for session in 0..10 {
            timers.schedule(SessionId(session), start + Duration::from_secs(60));
        }
        // One busy session moves its deadline a million times, always later.
        for step in 0..1_000_000u64 {
            timers.schedule(SessionId(3), start + Duration::from_micros(step + 1));
        }
        assert!(timers.heap_len() <= 2 * 10 + STALE_SLACK + 1);
        let mut due = Vec::new();
        timers.take_due(start + Duration::from_secs(60), &mut due);
        due.sort_by_key(|id| id.0);
        assert_eq!(ids(&due), (0..10).collect::<Vec<_>>());
    }
}
