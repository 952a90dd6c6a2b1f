//! What a test does to a run besides sending inner packets: act as an attacker on
//! the path (capture what the sockets take, hand an end datagrams from any address,
//! make what only the client's key can), break paths, restart an end, step the
//! client's wall clock, and reconfigure as the daemon's reload does.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use linkem::rng::SeededRng;
use mptund_sched::PathId;

use super::{
    add_client_socket, client_core, server_settings_for, Captured, PathConfig, Sim, SERVER_ADDR,
};
use crate::keys::{PrivateKey, PublicKey};
use crate::session::testing::pool;
use crate::session::{
    ClientCore, ClientPathSettings, Engine, Received, ReconfigureError, ServerCore, ServerSettings,
};

impl Sim {
    /// The server process restarts: the same key and peers, no sessions, nothing
    /// remembered; `change` may alter its settings first (another peer list).
    pub fn restart_server_with(&mut self, change: impl FnOnce(&mut ServerSettings)) {
        let mut settings = server_settings_for(
            &self.server_key,
            &self.client_key,
            &self.other_keys,
            &self.session,
        );
        change(&mut settings);
        let core = ServerCore::new(settings, pool(self.session.max_inner_len));
        self.server.engine = Engine::new(core);
        for socket in &mut self.server.sockets {
            socket.unsent = None;
        }
    }

    pub fn restart_server(&mut self) {
        self.restart_server_with(|_| {});
    }

    /// The server's public key, as a client (or an attacker) knows it.
    pub fn server_public_key(&self) -> PublicKey {
        self.server_key.public_key()
    }

    /// The client's private key, for a test that makes what only the client could
    /// (a genuine init an attacker held back, or a copy of one with other fields).
    pub fn client_key(&self) -> &PrivateKey {
        &self.client_key
    }

    /// The client process restarts with the paths it was started with: the same
    /// key, no session, a fresh handshake jitter, its sends the socket held lost.
    /// With `resume_timestamps` it starts from the handshake timestamp ceiling its
    /// last run stored and stores its own, as the daemon does with a state
    /// directory. Datagrams on their way to it arrive at the new run, as at a
    /// socket bound to the same port.
    pub fn restart_client(&mut self, resume_timestamps: bool) {
        let now = self.now();
        let mut core = client_core(
            now,
            &self.wall,
            &self.client_key,
            &self.server_key,
            self.client_paths,
            &self.session,
            SeededRng::new(self.restart_seeds.next_u64()),
        );
        if resume_timestamps {
            core.resume_handshake_timestamps(self.stored_ceiling);
        }
        self.client.engine = Engine::new(core);
        for (index, socket) in self.client.sockets.iter_mut().enumerate() {
            socket.unsent = None;
            if index < self.client_paths && socket.open {
                self.client.engine.set_socket_open(now, index, true);
            }
        }
        self.settle();
    }

    /// The client's wall clock reads `unix_nanos` now, and runs on with the virtual
    /// clock from there (a step, as NTP or a reboot without a real-time clock makes).
    pub fn set_client_wall_clock(&mut self, unix_nanos: u64) {
        self.wall_offset_nanos = i128::from(unix_nanos) - i128::from(self.unstepped_wall());
        self.wall_follows_clock();
    }

    /// What the client's wall clock reads now, in UNIX nanoseconds.
    pub fn client_wall_clock(&self) -> u64 {
        self.wall.load(Ordering::Relaxed)
    }

    /// The handshake timestamp ceiling the client last stored, if it stores them.
    pub fn stored_timestamp_ceiling(&self) -> Option<u64> {
        self.stored_ceiling
    }

    /// Adds a client path on a new socket (the next index) over `path`'s links and
    /// opens it, as the daemon's reload does; its datagrams come from
    /// [`client_addr`](super::client_addr) of that index.
    pub fn add_client_path(
        &mut self,
        settings: ClientPathSettings,
        path: PathConfig,
    ) -> Result<PathId, ReconfigureError> {
        let now = self.now();
        let index = self.client.sockets.len();
        let id = self
            .client
            .engine
            .core_mut()
            .add_path(now, settings, index)?;
        add_client_socket(
            &mut self.client,
            0,
            path,
            &mut self.network,
            &mut self.hops,
            &mut self.wiring,
        );
        self.client.engine.set_socket_open(now, index, true);
        self.settle();
        Ok(id)
    }

    /// Removes client path `name` as the daemon's reload does: what it had in
    /// flight goes to the others, then its socket closes (its refused send and what
    /// waited for it fail; it reads nothing more). Returns the socket's index.
    pub fn remove_client_path(&mut self, name: &str) -> Result<usize, ReconfigureError> {
        let now = self.now();
        let socket = self
            .client
            .engine
            .produce(now, |core, out| core.remove_path(now, name, out))?;
        if let Some(closed) = self.client.sockets.get_mut(socket) {
            closed.open = false;
            if let Some((transmit, _)) = closed.unsent.take() {
                let error =
                    std::io::Error::new(std::io::ErrorKind::NotConnected, "path socket closed");
                self.client.engine.on_send_failed(now, &transmit, &error);
            }
        }
        self.client.engine.fail_transmits(now, socket);
        self.settle();
        Ok(socket)
    }

    /// The client's engine, for what the daemon's reload does to the core.
    pub fn client_mut(&mut self) -> &mut Engine<ClientCore> {
        &mut self.client.engine
    }

    /// The server's engine, for what the daemon's reload does to the core.
    pub fn server_mut(&mut self) -> &mut Engine<ServerCore> {
        &mut self.server.engine
    }

    /// Opens or closes client path `path`'s socket, as the daemon does when its
    /// interface goes or comes back.
    pub fn set_client_socket_open(&mut self, path: usize, open: bool) {
        let now = self.now();
        let socket = &mut self.client.sockets[path];
        socket.open = open;
        if !open {
            if let Some((transmit, _)) = socket.unsent.take() {
                let error =
                    std::io::Error::new(std::io::ErrorKind::NotConnected, "path socket closed");
                self.client.engine.on_send_failed(now, &transmit, &error);
            }
        }
        self.client.engine.set_socket_open(now, path, open);
        self.settle();
    }

    /// Cuts client path `path` both ways, or mends it: datagrams sent while it is
    /// cut are lost, those already on it arrive.
    pub fn cut_path(&mut self, path: usize, cut: bool) {
        self.cut_global_path(self.client.paths[path], cut);
    }

    /// Cuts every path of client `client` both ways, or mends them (as
    /// [`Sim::cut_path`]).
    pub fn cut_nth_client(&mut self, client: usize, cut: bool) {
        for global in self.side(client).paths.clone() {
            self.cut_global_path(global, cut);
        }
    }

    fn cut_global_path(&mut self, global: usize, cut: bool) {
        for id in [self.wiring.up[global], self.wiring.down[global]] {
            if let Some(link) = self.network.link_mut(id) {
                link.set_cut(cut);
            }
        }
    }

    /// The next `count` datagrams the server sends on path `path` are lost.
    pub fn lose_next_to_client(&mut self, path: usize, count: usize) {
        let down = self.wiring.down[self.client.paths[path]];
        if let Some(link) = self.network.link_mut(down) {
            link.lose_next(count);
        }
    }

    /// Datagrams to the client on path `path` still to be lost.
    pub fn losses_to_come_to_client(&self, path: usize) -> usize {
        self.network
            .link(self.wiring.down[self.client.paths[path]])
            .map_or(0, linkem::Link::losses_to_come)
    }

    /// Client path `path`'s datagrams come from `addr` from now on (its NAT mapping
    /// changed); the server reaches the path only there.
    pub fn rebind_client_path(&mut self, path: usize, addr: SocketAddr) {
        self.wiring.client_addrs[self.client.paths[path]] = addr;
    }

    /// Bytes the server sent to `addr` while no path had that address.
    pub fn server_sent_elsewhere(&self, addr: SocketAddr) -> usize {
        self.server
            .sent_elsewhere
            .iter()
            .filter(|(to, _)| *to == addr)
            .map(|(_, len)| len)
            .sum()
    }

    /// The client says goodbye on every path ([`Engine::close`], as the daemon at
    /// shutdown).
    pub fn close_client(&mut self) {
        let now = self.now();
        self.client.engine.close(now);
        self.settle();
    }

    /// From now on, keeps a copy of every datagram the client's sockets take (see
    /// [`Sim::client_datagrams`]); what was kept before is forgotten.
    pub fn capture_client_datagrams(&mut self) {
        self.client.captured = Some(Vec::new());
    }

    /// The datagrams the client's sockets took since [`Sim::capture_client_datagrams`];
    /// a datagram's socket is its path.
    pub fn client_datagrams(&self) -> &[Captured] {
        self.client.captured.as_deref().unwrap_or_default()
    }

    /// From now on, keeps a copy of every datagram the server's socket takes,
    /// wherever it is sent (see [`Sim::server_datagrams`]); what was kept before is
    /// forgotten.
    pub fn capture_server_datagrams(&mut self) {
        self.server.captured = Some(Vec::new());
    }

    /// The datagrams the server's socket took since
    /// [`Sim::capture_server_datagrams`], in the order it took them.
    pub fn server_datagrams(&self) -> &[Captured] {
        self.server.captured.as_deref().unwrap_or_default()
    }

    /// `bytes` reach the server now from client path `path`'s address, as from an
    /// attacker on the path (or a copy the network made).
    pub fn inject_to_server(&mut self, path: usize, bytes: &[u8]) {
        self.inject_to_server_from(self.wiring.client_addrs[self.client.paths[path]], bytes);
    }

    /// `bytes` reach the server now from `from`, any address.
    pub fn inject_to_server_from(&mut self, from: SocketAddr, bytes: &[u8]) {
        self.inject_batch_to_server([(from, bytes)]);
    }

    /// The server reads `batch` now, each datagram from its address, in one batch:
    /// acknowledgements (and cookie replies) are flushed once after it, as the
    /// daemon does after a batch of reads. Its timers do not run.
    pub fn inject_batch_to_server<'a>(
        &mut self,
        batch: impl IntoIterator<Item = (SocketAddr, &'a [u8])>,
    ) {
        let now = self.now();
        for (from, bytes) in batch {
            let received = Received {
                socket: 0,
                from,
                local_ip: Some(SERVER_ADDR.ip()),
            };
            self.server.read_datagram(now, received, bytes);
        }
        self.server.engine.flush_acks(now);
        self.settle();
    }

    /// `bytes` reach the client now on path `path`'s socket from the server's
    /// address, as from an attacker who spoofs it; a closed socket reads nothing.
    pub fn inject_to_client(&mut self, path: usize, bytes: &[u8]) {
        if !self.client.sockets[path].open {
            return;
        }
        let now = self.now();
        let received = Received {
            socket: path,
            from: SERVER_ADDR,
            local_ip: None,
        };
        self.client.read_datagram(now, received, bytes);
        self.client.engine.flush_acks(now);
        self.record_rtt_samples();
        self.settle();
    }

    /// One wake-up of the server's loop now with nothing to read: its timers run if
    /// due, and what that produced is sent. [`Sim::run_for`] instead wakes it as
    /// often as it asks within the interval.
    pub fn wake_server(&mut self) {
        let now = self.now();
        self.server.handle_timeout(now);
        self.settle();
    }
}
