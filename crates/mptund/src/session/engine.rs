//! What the I/O loop drives: a protocol core with its datagrams queued per socket.
//!
//! The loop hands the engine what it read, with `now`, and pulls the rest: inner
//! packets for the TUN ([`Engine::poll_tun_packet`]), the next GSO send of a socket
//! that can take one ([`Engine::poll_transmit`]) and the next wake-up
//! ([`Engine::poll_timeout`]). A core produces the datagrams of a step into a list;
//! the engine moves them into their socket's queue at the end of the step, so the
//! loop never sees a datagram before it can send it, and a socket that cannot take
//! more holds up only its own queue. Session datagrams wait there unsealed: the core
//! seals each into the loop's send buffer when the socket takes it, so its packet
//! number, send time and the probe's record are those of the moment it leaves.

use std::io;
use std::time::Instant;

use super::transmit::{Transmit, Transmits};
use super::{Core, Outgoing, Received, Report};
use crate::buffers::{BufferPool, Packet};
use crate::counters::DropReason;

/// A core and the datagrams it produced that wait for their socket.
pub struct Engine<C: Core> {
    core: C,
    transmits: Transmits,
    /// The list a step produces into; empty between steps (kept for its capacity).
    produced: Vec<Outgoing>,
    /// What refusing datagrams produced (news of inner packets given up), and what
    /// sealing one made follow it (parity): empty between calls.
    produced_again: Vec<Outgoing>,
}

impl<C: Core> Engine<C> {
    pub fn new(core: C) -> Self {
        Self {
            core,
            transmits: Transmits::default(),
            produced: Vec::new(),
            produced_again: Vec::new(),
        }
    }

    pub fn core(&self) -> &C {
        &self.core
    }

    /// The core, for calls that produce no datagrams (reading state, settings).
    pub fn core_mut(&mut self) -> &mut C {
        &mut self.core
    }

    /// Runs `step` on the core and queues the datagrams it produced.
    pub fn produce<R>(
        &mut self,
        now: Instant,
        step: impl FnOnce(&mut C, &mut Vec<Outgoing>) -> R,
    ) -> R {
        let mut produced = std::mem::take(&mut self.produced);
        let result = step(&mut self.core, &mut produced);
        self.queue(now, &mut produced);
        self.produced = produced;
        result
    }

    /// Moves `produced` into the sockets' queues. A datagram its session's share
    /// refuses is counted and handed back to the core, whose news of the inner packet
    /// given up is queued in turn (once: what that refuses is only counted).
    fn queue(&mut self, now: Instant, produced: &mut Vec<Outgoing>) {
        let mut again = std::mem::take(&mut self.produced_again);
        for outgoing in produced.drain(..) {
            if let Err(refused) = self.transmits.push(outgoing) {
                self.record_refused(now, &refused);
                self.core.unsent(now, refused, false, &mut again);
            }
        }
        for outgoing in again.drain(..) {
            if let Err(refused) = self.transmits.push(outgoing) {
                self.record_refused(now, &refused);
                self.core.pool().recycle(refused.packet);
            }
        }
        self.produced_again = again;
    }

    fn record_refused(&mut self, now: Instant, refused: &Outgoing) {
        let detail = format_args!(
            "session {} on path {}: its share of the socket's send queue is waiting",
            refused.owner.0, refused.path.0
        );
        self.core
            .record_drop(now, DropReason::TransmitShare, &detail);
    }

    /// An inner packet read from the TUN, in `packet.bytes()` with head- and tailroom.
    pub fn handle_tun_packet(&mut self, now: Instant, packet: Packet) {
        self.produce(now, |core, out| core.handle_tun_packet(now, packet, out));
    }

    /// Inner packets read from the TUN in one batch at `now`, in order; `packets` is
    /// left empty (it keeps its room).
    pub fn handle_tun_packets(&mut self, now: Instant, packets: &mut Vec<Packet>) {
        self.produce(now, |core, out| core.handle_tun_packets(now, packets, out));
    }

    /// A datagram read from socket `received.socket`.
    pub fn handle_datagram(&mut self, now: Instant, received: Received, packet: Packet) {
        self.produce(now, |core, out| {
            core.handle_datagram(now, received, packet, out);
        });
    }

    /// Called once after a batch of reads: acknowledgements that could not ride on
    /// reverse traffic go out now, in one datagram.
    pub fn flush_acks(&mut self, now: Instant) {
        self.produce(now, |core, out| core.flush_acks(now, out));
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.produce(now, |core, out| core.handle_timeout(now, out));
    }

    /// Whether socket `socket` has a send waiting for [`Engine::poll_transmit`].
    pub fn has_transmit(&self, socket: usize) -> bool {
        self.transmits.has_waiting(socket)
    }

    /// The next send of socket `socket`, at most `max_segments` datagrams sealed back
    /// to back into `buffer` as the socket takes them at `now`; `None` when nothing
    /// waits. Once polled, the datagrams are the loop's: a send that fails goes back
    /// through [`Engine::on_send_failed`].
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        socket: usize,
        max_segments: usize,
        buffer: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let core = &mut self.core;
        let follow = &mut self.produced_again;
        let transmit = self.transmits.poll(
            socket,
            max_segments,
            buffer,
            |outgoing, buffer, piggyback| core.seal(now, outgoing, buffer, piggyback, follow),
        );
        // What must follow a sealed datagram goes first in its queue, in order.
        let mut follow = std::mem::take(&mut self.produced_again);
        for outgoing in follow.drain(..).rev() {
            self.transmits.push_front(outgoing);
        }
        self.produced_again = follow;
        transmit
    }

    /// The operating system refused `transmit`: each of its datagrams is counted.
    /// What they carried the core kept in the clear and re-sends as a loss.
    pub fn on_send_failed(&mut self, now: Instant, transmit: &Transmit, error: &io::Error) {
        for _ in 0..transmit.datagrams {
            self.core.on_send_failed(now, transmit.path, error);
        }
    }

    /// Socket `socket` had no room: its sends wait for it.
    pub fn on_socket_full(&mut self, socket: usize) {
        self.core.on_socket_full(socket);
    }

    /// The socket with this index was opened or lost (client paths only). What a
    /// lost socket had waiting fails, and what its path had in flight is re-sent on
    /// the other paths.
    pub fn set_socket_open(&mut self, now: Instant, socket: usize, open: bool) {
        if !open {
            self.fail_transmits(now, socket);
        }
        self.produce(now, |core, out| {
            core.set_socket_open(now, socket, open, out)
        });
    }

    /// Fails what socket `socket` has waiting (it closed or was removed): the core
    /// counts each finished datagram, and sends the inner packets that waited
    /// unsealed on another path.
    pub fn fail_transmits(&mut self, now: Instant, socket: usize) {
        let error = io::Error::new(io::ErrorKind::NotConnected, "path socket closed");
        let waiting = self.transmits.take_all(socket);
        self.produce(now, |core, out| {
            for outgoing in waiting {
                if outgoing.unsealed.is_none() {
                    core.on_send_failed(now, outgoing.path, &error);
                }
                core.unsent(now, outgoing, true, out);
            }
        });
    }

    /// Says goodbye to the peer(s) on every path.
    pub fn close(&mut self, now: Instant) {
        self.produce(now, |core, out| core.close(now, out));
    }

    /// The next inner packet to write to the TUN.
    pub fn poll_tun_packet(&mut self) -> Option<Packet> {
        self.core.poll_tun_packet()
    }

    /// When [`Engine::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// Writing an inner packet to the TUN failed.
    pub fn on_tun_write_failed(&mut self, now: Instant, error: &io::Error) {
        self.core
            .record_drop(now, DropReason::TunWriteFailed, error);
    }

    /// Counts a drop the I/O layer decided on (a datagram too large for any buffer).
    pub fn record_drop(
        &mut self,
        now: Instant,
        reason: DropReason,
        detail: &dyn std::fmt::Display,
    ) {
        self.core.record_drop(now, reason, detail);
    }

    pub fn pool(&mut self) -> &mut BufferPool {
        self.core.pool()
    }

    pub fn report(&self, now: Instant) -> Report {
        self.core.report(now)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use super::*;
    use crate::keys::PrivateKey;
    use crate::session::testing::{client_settings, pool, session_settings};
    use crate::session::transmit::MAX_WAITING_PER_SOCKET;
    use crate::session::ClientCore;
    use crate::wire::HANDSHAKE_INIT_LEN;

    const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51900);

    /// A client with two paths whose sockets are open: each sends a handshake init.
    fn client() -> (Engine<ClientCore>, Instant) {
        let now = Instant::now();
        let server_key = PrivateKey::generate();
        let settings = client_settings(
            PrivateKey::generate(),
            server_key.public_key(),
            SERVER,
            2,
            session_settings(
                mptund_sched::SchedulerChoice::EarliestArrival(Default::default()),
                Duration::from_millis(50),
                1400,
            ),
        );
        let core = ClientCore::new(
            now,
            Box::new(|| 1_700_000_000_000_000_000),
            settings,
            pool(1400),
        );
        let mut engine = Engine::new(core);
        engine.set_socket_open(now, 0, true);
        engine.set_socket_open(now, 1, true);
        if engine.poll_timeout().is_some_and(|at| at <= now) {
            engine.handle_timeout(now);
        }
        (engine, now)
    }

    #[test]
    fn what_a_step_produced_waits_per_socket_until_polled_once() {
        let (mut engine, now) = client();
        assert!(engine.has_transmit(0) || engine.has_transmit(1));
        let mut buffer = Vec::new();
        let mut polled = 0;
        for socket in 0..2 {
            while let Some(transmit) = engine.poll_transmit(now, socket, 64, &mut buffer) {
                assert_eq!(transmit.destination, SERVER);
                assert_eq!(buffer.len(), transmit.datagrams * HANDSHAKE_INIT_LEN);
                polled += transmit.datagrams;
            }
            assert!(!engine.has_transmit(socket));
        }
        assert!(polled >= 1, "a handshake init went out");
        assert_eq!(engine.poll_transmit(now, 0, 64, &mut buffer), None);
    }

    #[test]
    fn a_closed_socket_fails_what_waits_for_it_and_the_other_keeps_its_own() {
        let (mut engine, now) = client();
        let waiting = |engine: &Engine<ClientCore>, socket| engine.has_transmit(socket);
        let (closing, other) = if waiting(&engine, 0) { (0, 1) } else { (1, 0) };
        let other_waited = waiting(&engine, other);
        engine.set_socket_open(now, closing, false);
        assert!(!engine.has_transmit(closing));
        assert_eq!(engine.has_transmit(other), other_waited);
        assert!(engine.core().drops().get(DropReason::SendFailed) >= 1);
    }

    #[test]
    fn a_socket_with_a_full_queue_fails_what_comes_on_top_and_counts_it() {
        let (mut engine, now) = client();
        let mut buffer = Vec::new();
        while engine.poll_transmit(now, 0, 64, &mut buffer).is_some() {}
        let before = engine.core().drops().get(DropReason::TransmitShare);
        engine.produce(now, |core, out| {
            for _ in 0..=MAX_WAITING_PER_SOCKET {
                out.push(Outgoing {
                    packet: core.pool().take_copy(&[0u8; 100]).unwrap(),
                    socket: 0,
                    destination: SERVER,
                    source_ip: None,
                    path: mptund_sched::PathId(0),
                    owner: crate::wire::SessionId(1),
                    unsealed: None,
                });
            }
        });
        assert_eq!(
            engine.core().drops().get(DropReason::TransmitShare),
            before + 1
        );
        let mut sent = 0;
        while let Some(transmit) = engine.poll_transmit(now, 0, 64, &mut buffer) {
            sent += transmit.datagrams;
        }
        assert_eq!(sent, MAX_WAITING_PER_SOCKET);
    }

    #[test]
    fn a_failed_send_counts_each_of_its_datagrams() {
        let (mut engine, now) = client();
        let before = engine.core().drops().get(DropReason::SendFailed);
        let transmit = Transmit {
            destination: SERVER,
            source_ip: None,
            segment_size: Some(1000),
            datagrams: 5,
            path: mptund_sched::PathId(0),
        };
        let error = io::Error::from_raw_os_error(libc::EMSGSIZE);
        engine.on_send_failed(now, &transmit, &error);
        assert_eq!(
            engine.core().drops().get(DropReason::SendFailed),
            before + 5
        );
    }
}
