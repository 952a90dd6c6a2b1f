//! The sender's record of what is in flight on one path, in packet-number order, as
//! RFC 9002 appendix A.1 keeps `sent_packets` per packet number space.
//!
//! Entries live in a [`VecDeque`] allocated once with room for a full window; an
//! acknowledged or lost packet is marked in place and popped once everything before it
//! is settled, so nothing shifts and nothing allocates per packet. Path packet numbers
//! are 32-bit and wrap; entries carry the number widened to 64 bits (see `seq`), so
//! lookups are binary searches on a plain integer.

use std::collections::VecDeque;
use std::time::Instant;

use crate::seq::{widen, widen_or_origin};

/// One packet sent on the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentPacket {
    /// Path packet number as on the wire.
    pub pn: u32,
    /// When it was sent.
    pub time: Instant,
    /// UDP payload bytes.
    pub bytes: u64,
    /// Session sequence number of a data packet, `None` for control packets.
    pub seq: Option<u32>,
    /// Rate sampling state at send time (draft-cheng-iccrg-delivery-rate-estimation
    /// `P.delivered`, `P.delivered_time`, `P.first_sent_time`, `P.is_app_limited`).
    pub delivered: u64,
    pub delivered_time: Instant,
    pub first_sent_time: Instant,
    pub app_limited: bool,
    /// The pacer's rate when it left, in bytes per second; `u64::MAX` when nothing
    /// was paced. Its delivery can show no more (see `RateEstimator`).
    pub send_rate: u64,
    /// The path had nothing in flight and had sent nothing for a smoothed RTT when it
    /// left: no packet of ours was ahead of it, so its one-way delay shows the path's
    /// jitter (`crate::owd`).
    pub sent_into_idle_path: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PacketState {
    InFlight,
    /// Acknowledged by the acknowledgement being processed; the congestion controller
    /// has not been told yet.
    AckedNow,
    Acked,
    Lost,
}

/// What an acknowledgement did to one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AckOutcome {
    Newly,
    /// Declared lost before, acknowledged now: the loss was spurious.
    AfterLoss,
    Already,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    number: u64,
    packet: SentPacket,
    state: PacketState,
}

/// Packets sent on one path and not yet settled, oldest first.
#[derive(Clone, Debug, Default)]
pub struct SentPackets {
    entries: VecDeque<Entry>,
    largest_sent: Option<u64>,
    bytes_in_flight: u64,
    packets_in_flight: usize,
}

impl SentPackets {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: VecDeque::with_capacity(capacity),
            largest_sent: None,
            bytes_in_flight: 0,
            packets_in_flight: 0,
        }
    }

    /// Records a sent packet. Its number must follow the previous one (serially);
    /// `false` and nothing recorded otherwise.
    pub fn push(&mut self, packet: SentPacket) -> bool {
        let number = widen_or_origin(self.largest_sent, packet.pn);
        if self.largest_sent.is_some_and(|largest| number <= largest) {
            return false;
        }
        self.largest_sent = Some(number);
        self.bytes_in_flight += packet.bytes;
        self.packets_in_flight += 1;
        self.entries.push_back(Entry {
            number,
            packet,
            state: PacketState::InFlight,
        });
        true
    }

    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    pub fn packets_in_flight(&self) -> usize {
        self.packets_in_flight
    }

    /// The packet number of the oldest packet still in flight.
    pub fn oldest_in_flight(&self) -> Option<u32> {
        self.iter_in_flight().next().map(|packet| packet.pn)
    }

    /// Packets in flight, oldest first.
    pub fn iter_in_flight(&self) -> impl Iterator<Item = &SentPacket> + '_ {
        self.entries
            .iter()
            .filter(|entry| entry.state == PacketState::InFlight)
            .map(|entry| &entry.packet)
    }

    /// The widened number of the largest packet sent so far.
    pub(crate) fn largest_sent(&self) -> Option<u64> {
        self.largest_sent
    }

    /// Widens a wire packet number against the largest sent; `None` before any send.
    pub(crate) fn widen_pn(&self, pn: u32) -> Option<u64> {
        self.largest_sent.map(|largest| widen(largest, pn))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Index of the first entry whose number is at least `number`.
    pub(crate) fn first_index_from(&self, number: u64) -> usize {
        self.entries.partition_point(|entry| entry.number < number)
    }

    /// Index of the entry with exactly `number`.
    pub(crate) fn index_of(&self, number: u64) -> Option<usize> {
        let index = self.first_index_from(number);
        (self.entries.get(index)?.number == number).then_some(index)
    }

    pub(crate) fn number(&self, index: usize) -> u64 {
        self.entries[index].number
    }

    pub(crate) fn packet(&self, index: usize) -> &SentPacket {
        &self.entries[index].packet
    }

    pub(crate) fn state(&self, index: usize) -> PacketState {
        self.entries[index].state
    }

    pub(crate) fn mark_acked_now(&mut self, index: usize) -> AckOutcome {
        let entry = &mut self.entries[index];
        match entry.state {
            PacketState::InFlight => {
                entry.state = PacketState::AckedNow;
                self.bytes_in_flight -= entry.packet.bytes;
                self.packets_in_flight -= 1;
                AckOutcome::Newly
            }
            PacketState::Lost => {
                entry.state = PacketState::Acked;
                AckOutcome::AfterLoss
            }
            PacketState::AckedNow | PacketState::Acked => AckOutcome::Already,
        }
    }

    /// Ends the "acknowledged by the current ACK" mark; `true` if it was set.
    pub(crate) fn settle_acked(&mut self, index: usize) -> bool {
        let entry = &mut self.entries[index];
        let was_acked_now = entry.state == PacketState::AckedNow;
        if was_acked_now {
            entry.state = PacketState::Acked;
        }
        was_acked_now
    }

    /// Marks an in-flight entry lost and returns it; `None` if it was not in flight.
    pub(crate) fn mark_lost(&mut self, index: usize) -> Option<SentPacket> {
        let entry = &mut self.entries[index];
        if entry.state != PacketState::InFlight {
            return None;
        }
        entry.state = PacketState::Lost;
        self.bytes_in_flight -= entry.packet.bytes;
        self.packets_in_flight -= 1;
        Some(entry.packet)
    }

    /// Pops settled entries off the front. A lost packet sent at or after
    /// `keep_lost_sent_since` stays (none stays when that is `None`): a late
    /// acknowledgement of it shows the loss was spurious.
    pub(crate) fn compact(&mut self, keep_lost_sent_since: Option<Instant>) {
        while self.entries.front().is_some_and(|entry| match entry.state {
            PacketState::Acked => true,
            PacketState::Lost => keep_lost_sent_since.is_none_or(|since| entry.packet.time < since),
            PacketState::InFlight | PacketState::AckedNow => false,
        }) {
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn packet(t0: Instant, pn: u32) -> SentPacket {
        SentPacket {
            pn,
            time: t0 + Duration::from_millis(u64::from(pn)),
            bytes: 100,
            seq: Some(pn),
            delivered: 0,
            delivered_time: t0,
            first_sent_time: t0,
            app_limited: false,
            send_rate: u64::MAX,
            sent_into_idle_path: false,
        }
    }

    #[test]
    fn marks_and_pops_from_the_front_across_the_wrap() {
        let t0 = Instant::now();
        let mut sent = SentPackets::with_capacity(4);
        for pn in [u32::MAX - 1, u32::MAX, 0, 1] {
            assert!(sent.push(packet(t0, pn)));
        }
        // a number not after the largest is refused
        assert!(!sent.push(packet(t0, u32::MAX)));
        assert_eq!(sent.bytes_in_flight(), 400);
        let zero = sent.widen_pn(0).unwrap();
        assert_eq!(sent.number(2), zero);
        let index = sent.index_of(zero).unwrap();
        assert_eq!(sent.mark_acked_now(index), AckOutcome::Newly);
        assert_eq!(sent.mark_acked_now(index), AckOutcome::Already);
        sent.compact(None);
        assert_eq!(sent.len(), 4, "the front is still in flight");
        assert_eq!(sent.mark_lost(0).map(|p| p.pn), Some(u32::MAX - 1));
        assert_eq!(sent.mark_lost(1).map(|p| p.pn), Some(u32::MAX));
        assert!(sent.settle_acked(2));
        sent.compact(Some(packet(t0, u32::MAX - 1).time));
        assert_eq!(
            sent.len(),
            4,
            "lost packets stay for a late acknowledgement"
        );
        sent.compact(Some(packet(t0, u32::MAX).time));
        assert_eq!(sent.len(), 3);
        assert_eq!(sent.number(0), zero - 1, "the later lost packet stays");
        sent.compact(None);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent.bytes_in_flight(), 100);
        assert_eq!(sent.packets_in_flight(), 1);
        let pns: Vec<u32> = sent.iter_in_flight().map(|p| p.pn).collect();
        assert_eq!(pns, [1]);
    }
}
