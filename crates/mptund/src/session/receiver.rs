//! The receiving half of a session: the reorder buffer that hands inner packets on in
//! order, the hold it waits for a gap, and the delay line that evens out the paths'
//! delays (the replay windows are the keys', the acknowledgements the paths').

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mptund_sched::{
    AdaptiveHold, DelayEqualizer, DelayLine, PathId, ReorderBuffer, ReorderStats, SeqNo,
};

use super::SessionSettings;
use crate::buffers::{BufferPool, Packet};

pub(super) struct Receiver {
    reorder: ReorderBuffer<Inbound>,
    /// Sets the reorder buffer's hold from the paths' delays, when configured.
    adaptive_hold: Option<AdaptiveHold>,
    /// How long each arriving packet waits to be handed on at one delay, when configured.
    equalizer: Option<DelayEqualizer>,
    /// Packets in order, waiting for their equalized delivery time.
    delay_line: DelayLine<Packet>,
}

/// An inner packet in the reorder buffer with the earliest time it may be handed on.
#[derive(Debug)]
pub(super) struct Inbound {
    pub packet: Packet,
    pub not_before: Instant,
}

impl Receiver {
    pub fn new(settings: &SessionSettings) -> Self {
        Self {
            reorder: ReorderBuffer::new(settings.reorder, SeqNo(0)),
            adaptive_hold: settings.adaptive_hold.map(AdaptiveHold::new),
            equalizer: settings
                .equalize_delay
                .map(|equalization| DelayEqualizer::new(equalization, settings.reorder.max_hold)),
            delay_line: DelayLine::default(),
        }
    }

    /// Takes `inbound` as sequence number `seq`; gives it back when the reorder buffer
    /// refuses it. A gap that made a packet wait longer than the hold tells the
    /// adaptive hold.
    pub fn insert(
        &mut self,
        now: Instant,
        seq: SeqNo,
        inbound: Inbound,
    ) -> Result<(), mptund_sched::Rejected<Inbound>> {
        let inserted = self.reorder.insert(now, seq, inbound);
        if let Some(wait) = self.reorder.take_needed_wait() {
            if let Some(hold) = &mut self.adaptive_hold {
                hold.on_needed_wait(now, wait);
                self.reorder.set_max_hold(hold.target(now));
            }
        }
        inserted
    }

    /// A datagram arrived on `path` after `raw_owd_us` (with the unknown clock offset,
    /// which cancels between paths); `repair_time` is how long the peer may take to
    /// repair a loss. Returns how long a data packet (`carries_data`) waits to be
    /// handed on at the delay the equalization sets.
    pub fn on_arrival(
        &mut self,
        now: Instant,
        path: PathId,
        raw_owd_us: u32,
        carries_data: bool,
        repair_time: Duration,
    ) -> Duration {
        if let Some(hold) = &mut self.adaptive_hold {
            hold.on_arrival(now, path, raw_owd_us);
            hold.set_repair_time(repair_time);
            self.reorder.set_max_hold(hold.target(now));
        }
        self.equalizer.as_mut().map_or(Duration::ZERO, |equalizer| {
            equalizer.on_arrival(now, path, raw_owd_us, carries_data)
        })
    }

    /// The peer gave up `count` sequence numbers from `first`: nothing waits for them.
    pub fn give_up_range(&mut self, first: SeqNo, count: u32) {
        self.reorder.give_up_range(first, count);
    }

    /// Moves every packet that is in order and due now to `deliver`: through the delay
    /// line, which keeps back those that would overtake the inner flow's delay.
    pub fn drain_releasable(&mut self, now: Instant, deliver: &mut VecDeque<Packet>) {
        while let Some(inbound) = self.reorder.poll_release(now) {
            if let Some(packet) = self
                .delay_line
                .push(now, inbound.not_before, inbound.packet)
            {
                deliver.push_back(packet);
            }
        }
        while let Some(packet) = self.delay_line.poll_release(now) {
            deliver.push_back(packet);
        }
    }

    /// One packet handed on before its time, to give its buffer back: the delay line's
    /// first, then the reorder buffer's, giving up its gaps.
    pub fn release_early(&mut self, now: Instant) -> Option<Packet> {
        // Far enough ahead that every gap's hold has run out.
        let gaps_expired = now + self.reorder.max_hold() + Duration::from_secs(1);
        self.delay_line
            .poll_release(gaps_expired)
            .or_else(|| Some(self.reorder.poll_release(gaps_expired)?.packet))
    }

    /// Path `path` is gone: its delays no longer count.
    pub fn forget_path(&mut self, path: PathId) {
        if let Some(hold) = &mut self.adaptive_hold {
            hold.forget(path);
        }
        if let Some(equalizer) = &mut self.equalizer {
            equalizer.forget(path);
        }
    }

    /// Applies changed settings (see `Session::apply_settings`); `running` are the
    /// settings in force until now.
    pub fn apply_settings(&mut self, settings: &SessionSettings, running: &SessionSettings) {
        match (settings.adaptive_hold, &mut self.adaptive_hold) {
            (Some(bounds), Some(hold)) => hold.set_bounds(bounds),
            (Some(bounds), None) => self.adaptive_hold = Some(AdaptiveHold::new(bounds)),
            (None, _) => {
                self.adaptive_hold = None;
                self.reorder.set_max_hold(settings.reorder.max_hold);
            }
        }
        if settings.adaptive_hold.is_some() && self.reorder.max_hold() > settings.reorder.max_hold {
            // Until the next arrival recomputes it, the hold stays within the new bound.
            self.reorder.set_max_hold(settings.reorder.max_hold);
        }
        if settings.equalize_delay != running.equalize_delay {
            // Packets already in the delay line keep their times.
            self.equalizer = settings
                .equalize_delay
                .map(|equalization| DelayEqualizer::new(equalization, settings.reorder.max_hold));
        } else if let Some(equalizer) = &mut self.equalizer {
            equalizer.set_cap(settings.reorder.max_hold);
        }
    }

    /// Returns every buffer held to the pool, when the session ends.
    pub fn recycle_all(&mut self, now: Instant, pool: &mut BufferPool) {
        let far_future = now + Duration::from_secs(3600);
        while let Some(inbound) = self.reorder.poll_release(far_future) {
            pool.recycle(inbound.packet);
        }
        for packet in self.delay_line.drain() {
            pool.recycle(packet);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.reorder.poll_timeout(), self.delay_line.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Packet buffers held.
    pub fn held_packets(&self) -> usize {
        self.reorder.len() + self.delay_line.len()
    }

    /// The reorder buffer's capacity in sequence numbers.
    pub fn capacity(&self) -> usize {
        self.reorder.capacity()
    }

    /// The reorder buffer's hold in force.
    pub fn max_hold(&self) -> Duration {
        self.reorder.max_hold()
    }

    /// The reorder buffer's deadline alone, for diagnosing timer bugs in tests.
    #[cfg(test)]
    pub fn reorder_deadline(&self) -> Option<Instant> {
        self.reorder.poll_timeout()
    }

    pub fn stats(&self) -> ReorderStats {
        self.reorder.stats()
    }

    pub fn work_units(&self) -> u64 {
        self.reorder.work_units()
    }

    /// How much later than its fastest path the inner flow is served (zero when
    /// equalization is off or one path carries the data).
    pub fn equalized_delay(&self, now: Instant) -> Duration {
        self.equalizer
            .as_ref()
            .map_or(Duration::ZERO, |equalizer| equalizer.added_delay(now))
    }
}
