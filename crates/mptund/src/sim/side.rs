//! One end of the simulation: its engine driven as the daemon's event loop drives
//! it (`daemon/mod.rs`: `flush`, `send_waiting`, `send_unsent`, `send`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use linkem::sim::{Clock, LinkId, Network};

use super::socket::{Datagram, Refused, SimSocket};
use super::Delivery;
use crate::buffers::HEADROOM;
use crate::session::{Core, Engine, Received, Transmit};

/// What became of one send (as the daemon's `Sent`).
pub(super) enum Sent {
    Done,
    Failed,
    Full,
}

/// The paths of every client: their addresses, links and owners, by path index.
#[derive(Default)]
pub(super) struct Wiring {
    pub(super) client_addrs: Vec<SocketAddr>,
    pub(super) up: Vec<LinkId>,
    pub(super) down: Vec<LinkId>,
    /// The client (its index) and its socket.
    pub(super) owner: Vec<(usize, usize)>,
}

impl Wiring {
    /// Where a send goes: a client's socket is one of its paths (its `Up` link,
    /// `client_paths` by socket); the server's one socket reaches the path whose
    /// address the datagram is for (its `Down` link).
    pub(super) fn path_of(
        &self,
        server: bool,
        client_paths: &[usize],
        socket: usize,
        transmit: &Transmit,
    ) -> Option<(usize, LinkId)> {
        if server {
            let path = self
                .client_addrs
                .iter()
                .position(|&addr| addr == transmit.destination)?;
            Some((path, *self.down.get(path)?))
        } else {
            let path = *client_paths.get(socket)?;
            Some((path, *self.up.get(path)?))
        }
    }
}

/// A datagram a socket took, kept while a test captures them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// When the socket took it, from the start of the run.
    pub at: Duration,
    /// The socket: the client's path index, or the server's one socket (0).
    pub socket: usize,
    pub destination: SocketAddr,
    pub bytes: Vec<u8>,
}

/// One end: its engine, its sockets and what it wrote to its TUN.
pub(super) struct Side<C: Core> {
    pub(super) engine: Engine<C>,
    pub(super) sockets: Vec<SimSocket>,
    /// A client's paths in the [`Wiring`], by socket; empty for the server.
    pub(super) paths: Vec<usize>,
    pub(super) tun: Vec<Delivery>,
    pub(super) is_server: bool,
    /// Every datagram the sockets took while a test wants them (to replay or forge
    /// one, or to see what an end answered).
    pub(super) captured: Option<Vec<Captured>>,
    /// Datagrams sent to an address no path has (address, bytes): lost, but a test
    /// may count what the server sent a stranger.
    pub(super) sent_elsewhere: Vec<(SocketAddr, usize)>,
}

impl<C: Core> Side<C> {
    /// An end with no socket yet.
    pub(super) fn new(engine: Engine<C>, is_server: bool) -> Self {
        Self {
            engine,
            sockets: Vec::new(),
            paths: Vec::new(),
            tun: Vec::new(),
            is_server,
            captured: None,
            sent_elsewhere: Vec::new(),
        }
    }

    /// The daemon's `flush`: writes to the TUN what the core released, then sends
    /// what waits for every socket that is not holding a refused send.
    pub(super) fn flush(
        &mut self,
        clock: &Clock,
        network: &mut Network<Datagram>,
        wiring: &Wiring,
    ) {
        while let Some(packet) = self.engine.poll_tun_packet() {
            self.tun.push(Delivery {
                at: clock.elapsed(),
                bytes: packet.bytes().to_vec(),
            });
            self.engine.pool().recycle(packet);
        }
        for index in 0..self.sockets.len() {
            if self.sockets[index].unsent.is_none() && self.engine.has_transmit(index) {
                self.send_waiting(index, clock, network, wiring, Vec::new());
            }
        }
    }

    /// The daemon's `send_waiting`: GSO runs until nothing is left or the socket
    /// is full.
    pub(super) fn send_waiting(
        &mut self,
        index: usize,
        clock: &Clock,
        network: &mut Network<Datagram>,
        wiring: &Wiring,
        mut buffer: Vec<u8>,
    ) {
        loop {
            let max_segments = self.sockets[index].config.max_gso_segments;
            let Some(transmit) =
                self.engine
                    .poll_transmit(clock.now(), index, max_segments, &mut buffer)
            else {
                return;
            };
            match self.send(index, transmit, buffer, clock, network, wiring) {
                (Sent::Done | Sent::Failed, Some(returned)) => buffer = returned,
                _ => return,
            }
        }
    }

    /// The daemon's `send`: a full socket keeps the send with its buffer; a failure
    /// is the engine's to count. Hands the buffer back unless the socket kept it.
    pub(super) fn send(
        &mut self,
        index: usize,
        transmit: Transmit,
        contents: Vec<u8>,
        clock: &Clock,
        network: &mut Network<Datagram>,
        wiring: &Wiring,
    ) -> (Sent, Option<Vec<u8>>) {
        let now = clock.now();
        let path = wiring.path_of(self.is_server, &self.paths, index, &transmit);
        let socket = &mut self.sockets[index];
        match socket.try_send(now, clock.elapsed(), &transmit, &contents, path, network) {
            Ok(()) => {
                if path.is_none() {
                    self.sent_elsewhere
                        .push((transmit.destination, contents.len()));
                }
                if let Some(captured) = &mut self.captured {
                    let segment_size = transmit.segment_size.unwrap_or(contents.len()).max(1);
                    captured.extend(contents.chunks(segment_size).map(|segment| Captured {
                        at: clock.elapsed(),
                        socket: index,
                        destination: transmit.destination,
                        bytes: segment.to_vec(),
                    }));
                }
                (Sent::Done, Some(contents))
            }
            Err(Refused::WouldBlock) => {
                socket.unsent = Some((transmit, contents));
                self.engine.on_socket_full(index);
                (Sent::Full, None)
            }
            Err(Refused::NotConnected) => {
                let error = std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "path socket is not open",
                );
                self.engine.on_send_failed(now, &transmit, &error);
                (Sent::Failed, Some(contents))
            }
        }
    }

    /// The daemon's `send_unsent`, for every socket holding a send that is now
    /// writable.
    pub(super) fn send_unsent(
        &mut self,
        clock: &Clock,
        network: &mut Network<Datagram>,
        wiring: &Wiring,
    ) {
        for index in 0..self.sockets.len() {
            if !self.sockets[index].writable(clock.elapsed(), network) {
                continue;
            }
            let Some((transmit, contents)) = self.sockets[index].unsent.take() else {
                continue;
            };
            if let (Sent::Done | Sent::Failed, Some(buffer)) =
                self.send(index, transmit, contents, clock, network, wiring)
            {
                self.send_waiting(index, clock, network, wiring, buffer);
            }
        }
    }

    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if self.engine.poll_timeout().is_some_and(|at| at <= now) {
            self.engine.handle_timeout(now);
        }
    }

    pub(super) fn read_tun(&mut self, now: Instant, bytes: &[u8]) {
        self.read_tun_batch(now, std::iter::once(bytes));
    }

    /// Inner packets the TUN hands over in one read at `now`, as the daemon's reader
    /// hands a batch to [`Engine::handle_tun_packets`].
    pub(super) fn read_tun_batch<'a>(
        &mut self,
        now: Instant,
        packets: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let mut batch = Vec::new();
        for bytes in packets {
            let mut packet = self.engine.pool().take();
            packet.buffer_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
            packet.set_range(HEADROOM, HEADROOM + bytes.len());
            batch.push(packet);
        }
        self.engine.handle_tun_packets(now, &mut batch);
    }

    pub(super) fn read_datagram(&mut self, now: Instant, received: Received, bytes: &[u8]) {
        // As the daemon's `read_socket`: a datagram too large for any buffer is
        // counted and dropped.
        match self.engine.pool().take_copy(bytes) {
            Some(packet) => self.engine.handle_datagram(now, received, packet),
            None => self.engine.record_drop(
                now,
                crate::counters::DropReason::Oversize,
                &format_args!("datagram of {} bytes from {}", bytes.len(), received.from),
            ),
        }
    }
}
