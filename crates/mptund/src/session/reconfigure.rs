//! Changing a running session without ending it (configuration reload, interface
//! hotplug): paths join and leave, the scheduler is swapped, and the settings that are
//! safe to change live take effect at once.
//!
//! A path that leaves is treated like a path that died: everything it has in flight
//! is re-sent on the others under the same sequence numbers (the receiver's reorder
//! buffer closes the gap), its pending acknowledgements go out first, and only then
//! is its state dropped. A path that joins gets a path id this session never used, so
//! the peer can never confuse it with a path it still remembers.

// Datagrams are built here in pool buffers whose headroom and tailroom fit every
// header, and paths are indexed by positions the session itself found: no byte
// from the wire becomes an index, so only unwrap and expect are denied.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::time::Instant;

use mptund_sched::{AnyScheduler, PathId};

use super::queue::SendQueue;
use super::{PathSettings, Session, SessionPath, SessionSettings};
use crate::buffers::BufferPool;
use crate::counters::DropCounters;

impl Session {
    /// Replaces the scheduler; packets already sent stay where they are, the next
    /// packet is placed by the new one.
    pub fn set_scheduler(&mut self, scheduler: AnyScheduler) {
        self.sender.scheduler = scheduler;
    }

    /// The name of the scheduler in force.
    pub fn scheduler_name(&self) -> &'static str {
        use mptund_sched::Scheduler as _;
        self.sender.scheduler.name()
    }

    /// What the scheduler's capacity shares do on path `id` at `now`.
    pub fn path_share(&self, now: Instant, id: PathId) -> mptund_sched::PathShare {
        use mptund_sched::Scheduler as _;
        self.sender.scheduler.path_share(now, id)
    }

    /// Adds a path (its id must be new to this session); returns its index.
    pub fn add_path(&mut self, path: SessionPath) -> usize {
        debug_assert!(self.path_index(path.id).is_none(), "path id reused");
        tracing::info!(session = self.local_id.0, path = %path.name, id = path.id.0, "path added");
        self.paths.push(path);
        self.paths.len() - 1
    }

    /// Takes path `index` out of the session: acknowledgements it owes go out (on any
    /// path), its in-flight data is re-sent on the other paths, then it is dropped.
    /// Returns the removed path (its buffers already back in the pool).
    pub fn remove_path(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) -> SessionPath {
        // The acknowledgements for what arrived on this path are the peer's only way
        // to know those packets arrived; they may ride on any path.
        self.send_due_acks(now, true, pool);
        // Nothing may be scheduled on it while its packets are re-sent.
        self.paths[index].socket_open = false;
        self.reinject_everything_in_flight(now, index, pool, drops);
        let path = self.paths.remove(index);
        self.receiver.forget_path(path.id);
        tracing::info!(session = self.local_id.0, path = %path.name, id = path.id.0, "path removed");
        path
    }

    /// The socket of path `index` closed (interface down or gone): the path is down
    /// at once, and what it had in flight moves to the other paths now rather than
    /// after its probe timeouts.
    pub fn on_socket_closed(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        self.paths[index].socket_open = false;
        self.reinject_everything_in_flight(now, index, pool, drops);
    }

    /// Applies changed session settings. The caller has made sure only settings that
    /// can change live differ (see `daemon::reload`); `scheduler` is the new scheduler
    /// when its name or parameters changed.
    pub fn apply_settings(&mut self, settings: &SessionSettings, scheduler: Option<AnyScheduler>) {
        if let Some(scheduler) = scheduler {
            self.set_scheduler(scheduler);
        }
        self.keys.set_lifetime(settings.key_lifetime);
        self.receiver.apply_settings(settings, &self.settings);
        if settings.send_queue.capacity_packets != self.settings.send_queue.capacity_packets
            || settings.send_queue.max_sojourn != self.settings.send_queue.max_sojourn
            || settings.send_queue.codel.target != self.settings.send_queue.codel.target
            || settings.send_queue.codel.interval != self.settings.send_queue.codel.interval
        {
            // Packets waiting keep their place; only the limits change.
            let mut queue = SendQueue::new(settings.send_queue);
            std::mem::swap(&mut queue, &mut self.sender.send_queue);
            self.sender.send_queue.take_packets_from(queue);
        }
        self.settings = settings.clone();
    }

    /// The path with this id, if the session has it.
    pub fn path_by_id(&self, id: PathId) -> Option<&SessionPath> {
        self.path_index(id).map(|index| &self.paths[index])
    }
}

impl SessionPath {
    /// Changes whether the path is a backup and how it is probed, in place: its
    /// estimators and in-flight data stay.
    pub fn reconfigure(&mut self, now: Instant, backup: bool, probing: &PathSettings) {
        self.backup = backup;
        self.set_probing(now, probing);
    }
}
