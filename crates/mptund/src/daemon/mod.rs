//! The I/O side of the daemon: one task owns the TUN device, the path sockets and the
//! protocol core, waits for whichever is ready, and moves batches between them. All
//! protocol decisions are the core's ([`crate::session`]); this module only reads the
//! clock, performs syscalls and reports what the core asks it to.

// The loop's per-socket vectors are indexed by the socket slots it created, never
// by a wire value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod control;
mod hotplug;
mod metrics;
mod notify;
mod ops;
mod reload;
mod settings;
mod snapshot;
mod state;
mod status;
mod tun;
mod udp;

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use mptund_sched::ReorderConfig;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::buffers::{BufferPool, HEADROOM, TAILROOM};
use crate::config::{ClientConfig, Config, ServerConfig, TunConfig, DEFAULT_SOCKET_BUFFER_BYTES};
use crate::mtu;
use crate::session::{
    ClientCore, Core, Engine, Outgoing, Received, ServerCore, Transmit, MAX_PATHS,
};
use hotplug::{LinkTable, LinkWatch};
use ops::{Ops, OpsReady};
use udp::{Binding, PathSocket};

pub use control::{
    parse_request as parse_control_request, query as query_control_socket, ControlRequest,
};
pub use metrics::render as render_metrics;
pub use status::DUMP_COLUMNS;
pub use udp::{gro_segments, interface_mtu};

/// Packets read from the TUN per wake-up before the sockets get their turn.
const TUN_BATCH: usize = 64;
/// Receive batches taken from one socket per wake-up, so one busy path can't starve
/// the others or the TUN.
const SOCKET_BATCHES_PER_WAKE: usize = 4;
/// How long shutting down waits for full socket buffers to take the goodbye.
const SHUTDOWN_SEND_WAIT: Duration = Duration::from_millis(100);
/// How often a path whose socket could not be opened (interface missing) is retried.
const SOCKET_RETRY: Duration = Duration::from_secs(2);
/// Free buffers kept for reuse: a reorder buffer's worth plus a few batches.
const POOL_SPARE: usize = 512;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Where to write the final report as JSON when the daemon exits.
    pub stats_file: Option<PathBuf>,
}

/// Runs the daemon until SIGTERM or SIGINT; SIGHUP re-reads the configuration.
pub fn run(config: Config, options: RunOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        match &config {
            Config::Client(client) => run_client(client.clone(), &config, options).await,
            Config::Server(server) => run_server(server.clone(), &config, options).await,
        }
    })
}

fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The TUN MTU: configured, or derived from the paths; a configured MTU larger than
/// the smallest path allows would black-hole large packets, so it is refused.
fn choose_tun_mtu(tun: &TunConfig, derived: u16) -> anyhow::Result<u16> {
    match tun.mtu {
        Some(configured) if configured > derived => anyhow::bail!(
            "tun.mtu = {configured} is larger than the smallest path can carry ({derived} after {} bytes of encapsulation); lower tun.mtu or raise the path MTU",
            mtu::encapsulation_overhead(false)
        ),
        Some(configured) => Ok(configured),
        None if derived < mtu::MIN_TUN_MTU => anyhow::bail!(
            "the smallest path MTU leaves only {derived} bytes for inner packets (at least {} needed)",
            mtu::MIN_TUN_MTU
        ),
        None => Ok(derived),
    }
}

fn pool_for(tun_mtu: u16, reorder: &ReorderConfig) -> BufferPool {
    // One byte more than the MTU makes an oversized TUN read detectable instead of
    // silently truncated.
    let buffer_len = HEADROOM + usize::from(tun_mtu) + 1 + TAILROOM;
    BufferPool::new(buffer_len, POOL_SPARE, reorder.capacity + POOL_SPARE)
}

async fn run_client(
    config: ClientConfig,
    whole: &Config,
    options: RunOptions,
) -> anyhow::Result<()> {
    let mut link_mtus = Vec::new();
    for path in &config.paths {
        let link_mtu = match &path.interface {
            Some(interface) => interface_mtu(interface).unwrap_or_else(|error| {
                tracing::warn!(path = %path.name, %interface, %error, "interface MTU unknown, assuming {}", mtu::DEFAULT_LINK_MTU);
                mtu::DEFAULT_LINK_MTU
            }),
            None => mtu::DEFAULT_LINK_MTU,
        };
        link_mtus.push((link_mtu, path.endpoint.is_ipv6()));
    }
    let derived = mtu::tun_mtu(link_mtus).unwrap_or(0);
    let tun_mtu = choose_tun_mtu(&config.tun, derived)?;
    let tun = tun::create(&config.tun.name, &config.tun.addresses, tun_mtu).await?;
    tracing::info!(tun = %config.tun.name, mtu = tun_mtu, offload = tun.offload(), paths = config.paths.len(), "client starting");

    let settings = settings::client(&config, tun_mtu);
    let pool = pool_for(tun_mtu, &settings.session.reorder);
    let mut core = ClientCore::new(Instant::now(), Box::new(unix_nanos_now), settings, pool);
    let timestamp_file = state::TimestampFile::for_client(&config);
    match &timestamp_file {
        Some(file) => {
            let stored = file.read();
            tracing::info!(file = %file.path().display(), stored, "handshake timestamps are kept across restarts");
            core.resume_handshake_timestamps(stored);
        }
        None => tracing::info!("no state directory (state_directory, or the unit's StateDirectory=): handshake timestamps are not kept across restarts"),
    }
    let slots = config
        .paths
        .iter()
        .map(|path| Slot::new(path.name.clone(), Some(settings::binding(path))))
        .collect();
    let stats_interval = config.log.stats_interval;
    let interfaces = config
        .paths
        .iter()
        .filter_map(|path| Some((path.name.clone(), path.interface.clone()?)))
        .collect();
    let ops = Ops::start(whole, interfaces)?;
    let mut event_loop = EventLoop::new(core, tun, tun_mtu, slots, stats_interval, options);
    event_loop.timestamp_file = timestamp_file;
    event_loop.run(ops).await
}

/// The protocol core `mptund run` serves `config` with, before any socket or TUN
/// exists: the daemon and the per-session footprint test
/// (`tests/session_footprint.rs`) build it the same way.
pub fn server_core(config: &ServerConfig, tun_mtu: u16) -> ServerCore {
    let settings = settings::server(config, tun_mtu);
    let pool = pool_for(tun_mtu, &settings.session.reorder);
    let mut core = ServerCore::new(settings, pool);
    core.set_handshake_limits(config.handshake);
    core
}

async fn run_server(
    config: ServerConfig,
    whole: &Config,
    options: RunOptions,
) -> anyhow::Result<()> {
    let derived = mtu::tun_mtu([(mtu::DEFAULT_LINK_MTU, config.listen.is_ipv6())]).unwrap_or(0);
    let tun_mtu = choose_tun_mtu(&config.tun, derived)?;
    let tun = tun::create(&config.tun.name, &config.tun.addresses, tun_mtu).await?;
    tracing::info!(tun = %config.tun.name, mtu = tun_mtu, offload = tun.offload(), "TUN device up");
    let core = server_core(&config, tun_mtu);
    let binding = Binding {
        interface: None,
        source_address: Some(config.listen.ip()),
        port: config.listen.port(),
        ipv6: config.listen.is_ipv6(),
        buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
    };
    // The server's one socket must open: without it there is nothing to serve.
    let socket =
        PathSocket::open(&binding).with_context(|| format!("listening on {}", config.listen))?;
    tracing::info!(listen = %config.listen, tun = %config.tun.name, mtu = tun_mtu, peers = config.peers.len(), "server listening");
    let mut listen = Slot::new("listen".into(), None);
    listen.socket = Some(socket);
    let event_loop = EventLoop::new(
        core,
        tun,
        tun_mtu,
        vec![listen],
        config.log.stats_interval,
        options,
    );
    let ops = Ops::start(whole, Default::default())?;
    event_loop.run(ops).await
}

/// Which event sources are ready after a wait.
#[derive(Default)]
struct Ready {
    tun: bool,
    sockets: u64,
    /// The TUN can take the packet that waits for it.
    tun_writable: bool,
    /// Blocked sockets that can take more.
    writable_sockets: u64,
    timer: bool,
    shutdown: bool,
    ops: OpsReady,
    /// A fresh interface table from the hotplug listener.
    links: Option<LinkTable>,
}

/// One socket of the loop (a client path's, or the server's listening socket) with
/// what it takes to reopen it. The core knows it only by its slot index.
struct Slot {
    /// The path (or role), for log lines.
    name: String,
    /// How to reopen the socket; `None` for the server's, which is never reopened.
    binding: Option<Binding>,
    socket: Option<PathSocket>,
    /// The addresses its interface had when the socket was opened, while the
    /// interface table is known (hotplug); a change reopens the socket.
    opened_with: Option<Vec<IpAddr>>,
}

impl Slot {
    fn new(name: String, binding: Option<Binding>) -> Self {
        Self {
            name,
            binding,
            socket: None,
            opened_with: None,
        }
    }
}

struct EventLoop<C: Core> {
    engine: Engine<C>,
    tun: tun::Tun,
    /// The sockets, by the slot index the core knows them by; `None` is a free slot
    /// (a path removed by a reload).
    slots: Vec<Option<Slot>>,
    /// The newest interface table; `None` without netlink (then sockets are simply
    /// retried).
    links: Option<LinkTable>,
    tun_mtu: u16,
    /// Per socket slot: a send the socket buffer had no room for, retried when the
    /// socket is writable; the engine keeps what comes after it.
    unsent: Vec<Option<Unsent>>,
    /// The datagrams of the send being made, back to back.
    send_buffer: Vec<u8>,
    /// Send buffers given back by sends that waited for a full socket: a blocked
    /// socket takes one of these, so no send allocates once warm.
    spare_send_buffers: Vec<Vec<u8>>,
    stats_interval: Option<Duration>,
    next_stats: Option<Instant>,
    options: RunOptions,
    /// Where a client keeps its handshake timestamp ceiling, if anywhere.
    timestamp_file: Option<state::TimestampFile>,
}

impl<C: Core> reload::RunningLoop<C> for EventLoop<C> {
    fn tun_mtu(&self) -> u16 {
        self.tun_mtu
    }

    fn core(&self) -> &C {
        self.engine.core()
    }

    fn core_mut(&mut self) -> &mut C {
        self.engine.core_mut()
    }

    fn produce<R>(
        &mut self,
        now: Instant,
        step: impl FnOnce(&mut C, &mut Vec<Outgoing>) -> R,
    ) -> R {
        self.engine.produce(now, step)
    }

    fn free_socket_slots(&self, closing: usize) -> usize {
        self.slots.iter().filter(|slot| slot.is_none()).count()
            + closing
            + MAX_PATHS.saturating_sub(self.slots.len())
    }

    fn release_socket_slot(&mut self, now: Instant, socket: usize) {
        if let Some(slot) = self.slots.get_mut(socket) {
            *slot = None;
        }
        self.fail_unsent(now, socket);
        self.engine.fail_transmits(now, socket);
    }

    fn take_socket_slot(&mut self) -> usize {
        match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    fn open_path_socket(&mut self, now: Instant, socket: usize, name: String, binding: Binding) {
        if let Some(slot) = self.slots.get_mut(socket) {
            *slot = Some(Slot::new(name, Some(binding)));
            self.open_socket(now, socket, false);
        }
    }

    fn set_stats_interval(&mut self, now: Instant, interval: Option<Duration>) {
        if self.stats_interval != interval {
            self.stats_interval = interval;
            self.next_stats = interval.map(|interval| now + interval);
        }
    }
}

/// What became of one send.
enum Sent {
    Done,
    /// The socket's buffer was full: the send waits for it.
    Full,
    /// Refused, and counted; the socket stays.
    Failed,
    /// The socket's interface went away: it was closed.
    Closed,
}

/// A send that found its socket's buffer full, with its datagrams.
struct Unsent {
    transmit: Transmit,
    contents: Vec<u8>,
}

impl<C: Core> EventLoop<C> {
    fn new(
        core: C,
        tun: tun::Tun,
        tun_mtu: u16,
        slots: Vec<Slot>,
        stats_interval: Option<Duration>,
        options: RunOptions,
    ) -> Self {
        Self {
            engine: Engine::new(core),
            tun,
            slots: slots.into_iter().map(Some).collect(),
            links: None,
            tun_mtu,
            unsent: Vec::new(),
            send_buffer: Vec::with_capacity(u16::MAX as usize),
            spare_send_buffers: Vec::new(),
            stats_interval,
            next_stats: None,
            options,
            timestamp_file: None,
        }
    }

    fn slot(&self, index: usize) -> Option<&Slot> {
        self.slots.get(index)?.as_ref()
    }

    fn socket(&self, index: usize) -> Option<&PathSocket> {
        self.slot(index)?.socket.as_ref()
    }

    /// Forgets slot `index`'s socket (closed by the caller's choice or gone).
    fn drop_socket(&mut self, index: usize) {
        if let Some(Some(slot)) = self.slots.get_mut(index) {
            slot.socket = None;
            slot.opened_with = None;
        }
    }

    /// Opens the sockets that are closed and have a binding; a path whose interface is
    /// missing (or, with hotplug, down or without an address) stays down and is
    /// retried later.
    fn open_missing_sockets(&mut self, now: Instant) {
        for index in 0..self.slots.len() {
            if self
                .slot(index)
                .is_some_and(|slot| slot.binding.is_some() && slot.socket.is_none())
            {
                self.open_socket(now, index, false);
            }
        }
    }

    /// Opens socket `index` if its interface allows; true when it is open. `quiet`
    /// leaves a failure unlogged (the interface table says why).
    fn open_socket(&mut self, now: Instant, index: usize, quiet: bool) -> bool {
        let Some(Some(slot)) = self.slots.get_mut(index) else {
            return false;
        };
        let Some(binding) = &slot.binding else {
            return false;
        };
        let addresses = match &self.links {
            Some(table) => match hotplug::usable_addresses(binding, table) {
                Some(addresses) => Some(addresses),
                None => return false,
            },
            None => None,
        };
        let open = match PathSocket::open(binding) {
            Ok(socket) => {
                tracing::info!(path = %slot.name, local = ?socket.local_addr().ok(), interface = ?binding.interface, "path socket open");
                slot.socket = Some(socket);
                slot.opened_with = addresses;
                true
            }
            Err(error) => {
                if !quiet {
                    tracing::warn!(path = %slot.name, interface = ?binding.interface, %error, "path socket unavailable, retrying in {}s", SOCKET_RETRY.as_secs());
                }
                false
            }
        };
        self.engine.set_socket_open(now, index, open);
        open
    }

    /// Closes socket `index`: its path goes down at once and its in-flight packets
    /// move to the other paths.
    fn close_socket(&mut self, now: Instant, index: usize) {
        self.drop_socket(index);
        self.fail_unsent(now, index);
        self.engine.set_socket_open(now, index, false);
    }

    /// Fails the send socket `index` had no room for (it closed or went away): the
    /// core counts its datagrams and re-sends their data elsewhere.
    fn fail_unsent(&mut self, now: Instant, index: usize) {
        if let Some(unsent) = self.unsent.get_mut(index).and_then(Option::take) {
            let error = io::Error::new(io::ErrorKind::NotConnected, "path socket closed");
            self.engine.on_send_failed(now, &unsent.transmit, &error);
            self.spare_send_buffers.push(unsent.contents);
        }
    }

    fn is_blocked(&self, index: usize) -> bool {
        self.unsent.get(index).is_some_and(Option::is_some)
    }

    /// A new interface table: paths whose interface went away or down lose their
    /// socket, paths whose interface is usable again (or changed address) get a new
    /// one. One log line per transition.
    fn on_link_table(&mut self, now: Instant, table: LinkTable) {
        self.links = Some(table);
        let Some(table) = &self.links else { return };
        let mut changes = Vec::new();
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let Some(binding) = &slot.binding else {
                continue;
            };
            let usable = hotplug::usable_addresses(binding, table);
            match (&usable, slot.socket.is_some()) {
                (None, true) => changes.push((index, LinkChange::Lost)),
                (Some(_), false) => changes.push((index, LinkChange::Back)),
                (Some(addresses), true)
                    if slot
                        .opened_with
                        .as_ref()
                        .is_some_and(|before| before != addresses) =>
                {
                    changes.push((index, LinkChange::Readdressed))
                }
                _ => {}
            }
        }
        for (index, change) in changes {
            let Some(slot) = self.slot(index) else {
                continue;
            };
            let name = slot.name.clone();
            let interface = slot
                .binding
                .as_ref()
                .and_then(|binding| binding.interface.clone());
            match change {
                LinkChange::Lost => {
                    tracing::info!(path = %name, ?interface, "interface down, gone or without an address: path down");
                    self.close_socket(now, index);
                }
                LinkChange::Back => {
                    tracing::info!(path = %name, ?interface, "interface usable again: reopening the path");
                    self.open_socket(now, index, false);
                }
                LinkChange::Readdressed => {
                    tracing::info!(path = %name, ?interface, "interface address changed: reopening the path");
                    self.close_socket(now, index);
                    self.open_socket(now, index, false);
                }
            }
        }
    }

    async fn run(mut self, mut ops: Ops) -> anyhow::Result<()>
    where
        C: reload::ApplyConfig + state::KeepsState,
    {
        let mut sigterm =
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut sigint =
            signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        // Only client paths bind to interfaces; the server needs no hotplug.
        let mut links = if self
            .slots
            .iter()
            .flatten()
            .any(|slot| slot.binding.is_some())
        {
            LinkWatch::start()
        } else {
            None
        };
        self.open_missing_sockets(Instant::now());
        // Parsing the configuration (10,000 peers: tens of MiB) is done.
        release_freed_memory();
        // The TUN exists and the sockets are open (or retried): systemd may go on.
        ops.notifier.ready("forwarding");
        let start = Instant::now();
        let mut next_socket_retry = start + SOCKET_RETRY;
        self.next_stats = self.stats_interval.map(|interval| start + interval);
        let sleep = tokio::time::sleep_until(start.into());
        tokio::pin!(sleep);

        loop {
            let now = Instant::now();
            ops.notifier.handle_timeout(now);
            if self.engine.poll_timeout().is_some_and(|at| at <= now) {
                self.engine.handle_timeout(now);
            }
            // A handshake that waits for its timestamp ceiling to be stored goes
            // out at the next wake-up, which the core then asks for at once.
            if let Some(file) = &mut self.timestamp_file {
                self.engine.core_mut().keep_state(file);
            }
            if now >= next_socket_retry {
                next_socket_retry = now + SOCKET_RETRY;
                self.open_missing_sockets(now);
            }
            if let (Some(at), Some(interval)) = (self.next_stats, self.stats_interval) {
                if now >= at {
                    self.next_stats = Some(now + interval);
                    let report = self.engine.report(now);
                    for line in report.log_lines() {
                        tracing::info!("{line}");
                    }
                    if let Err(error) = self.write_stats(&report) {
                        tracing::warn!("{error:#}");
                    }
                }
            }
            self.flush();

            let mut deadline = next_socket_retry;
            for at in [
                self.engine.poll_timeout(),
                self.next_stats,
                ops.notifier.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            {
                deadline = deadline.min(at);
            }
            sleep.as_mut().reset(deadline.into());

            let ready = self
                .wait(
                    sleep.as_mut(),
                    &mut sigterm,
                    &mut sigint,
                    &mut ops,
                    &mut links,
                )
                .await?;
            if ready.shutdown {
                ops.notifier.stopping();
                return self.shut_down().await;
            }
            let now = Instant::now();
            if ready.ops.requests {
                ops.answer(|| self.engine.report(now));
                // A report of thousands of sessions is megabytes, freed at once.
                release_freed_memory();
            }
            if ready.ops.reload {
                reload::reload(&mut self, &mut ops, now);
            }
            if let Some(table) = ready.links {
                self.on_link_table(now, table);
            }
            for index in bits(ready.writable_sockets) {
                self.send_unsent(index);
            }
            if ready.tun {
                self.read_tun()?;
            }
            for index in 0..self.slots.len() {
                if ready.sockets & (1 << index) != 0 {
                    self.read_socket(index);
                }
            }
            // Acknowledgements that found no reverse data to ride on go out once per
            // batch, not once per datagram.
            self.engine.flush_acks(Instant::now());
        }
    }

    /// Waits until the TUN or a socket is readable, the timer fires or a signal comes.
    async fn wait(
        &self,
        mut sleep: Pin<&mut tokio::time::Sleep>,
        sigterm: &mut Signal,
        sigint: &mut Signal,
        ops: &mut Ops,
        links: &mut Option<LinkWatch>,
    ) -> anyhow::Result<Ready> {
        std::future::poll_fn(|cx| {
            let mut ready = Ready::default();
            match self.tun.poll_readable(cx) {
                Poll::Ready(Ok(())) => ready.tun = true,
                Poll::Ready(Err(error)) => {
                    return Poll::Ready(
                        Err(anyhow::Error::from(error).context("TUN device failed")),
                    )
                }
                Poll::Pending => {}
            }
            for (index, slot) in self.slots.iter().enumerate() {
                if let Some(socket) = slot.as_ref().and_then(|slot| slot.socket.as_ref()) {
                    // An error here resurfaces on the receive call, which handles it.
                    if socket.poll_recv_ready(cx).is_ready() {
                        ready.sockets |= 1 << index;
                    }
                }
            }
            for index in (0..self.unsent.len()).filter(|&index| self.is_blocked(index)) {
                // A closed socket is "writable": its datagrams fail at once.
                let writable = self
                    .socket(index)
                    .is_none_or(|socket| socket.poll_send_ready(cx).is_ready());
                if writable {
                    ready.writable_sockets |= 1 << index;
                }
            }
            ready.tun_writable = self.tun.poll_writable(cx);
            ready.timer = sleep.as_mut().poll(cx).is_ready();
            ready.shutdown = sigterm.poll_recv(cx).is_ready() || sigint.poll_recv(cx).is_ready();
            ready.ops = ops.poll(cx);
            ready.links = links.as_mut().and_then(|links| links.poll(cx));
            if ready.links.is_some()
                || ready.tun
                || ready.sockets != 0
                || ready.tun_writable
                || ready.writable_sockets != 0
                || ready.timer
                || ready.shutdown
                || ready.ops.requests
                || ready.ops.reload
            {
                Poll::Ready(Ok(ready))
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Reads a batch from the TUN. Each packet is stamped when it is read: under CPU
    /// load a batch takes milliseconds, and a stale stamp would shift the send times
    /// the paths' RTT and delay estimates are measured from.
    fn read_tun(&mut self) -> anyhow::Result<()> {
        self.tun
            .read(&mut self.engine, TUN_BATCH)
            .context("reading from the TUN device")
    }

    /// Reads up to a few batches from socket `index`, each stamped when it was read
    /// (a receive time taken before the wake-up's other work would make RTTs look
    /// shorter than they are).
    fn read_socket(&mut self, index: usize) {
        let Self { engine, slots, .. } = self;
        let Some(socket) = slots
            .get_mut(index)
            .and_then(Option::as_mut)
            .and_then(|slot| slot.socket.as_mut())
        else {
            return;
        };
        for _ in 0..SOCKET_BATCHES_PER_WAKE {
            let mut received_at = None;
            let result = socket.recv_batch(|datagram| {
                let now = *received_at.get_or_insert_with(Instant::now);
                let received = Received {
                    socket: index,
                    from: datagram.from,
                    local_ip: datagram.local_ip,
                };
                match engine.pool().take_copy(datagram.bytes) {
                    Some(packet) => engine.handle_datagram(now, received, packet),
                    None => engine.record_drop(
                        now,
                        crate::counters::DropReason::Oversize,
                        &format_args!(
                            "datagram of {} bytes from {}",
                            datagram.bytes.len(),
                            datagram.from
                        ),
                    ),
                }
            });
            match result {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(path = index, %error, "receive failed");
                    break;
                }
            }
        }
    }

    /// Writes what the core released to the TUN and sends what it produced, without
    /// waiting: a socket whose buffer is full keeps its send (see `wait`) and the
    /// engine keeps what comes after it, so one congested path never holds up
    /// another path or the TUN.
    fn flush(&mut self) {
        self.write_tun();
        loop {
            let mut closed = 0u64;
            for index in 0..self.slots.len() {
                if !self.is_blocked(index)
                    && self.engine.has_transmit(index)
                    && !self.send_waiting(index)
                {
                    closed |= 1 << index;
                }
            }
            if closed == 0 {
                return;
            }
            // The closed sockets' in-flight data is now queued for the other paths.
            let now = Instant::now();
            for index in bits(closed) {
                self.engine.set_socket_open(now, index, false);
            }
        }
    }

    /// Writes released packets to the TUN until it is full.
    fn write_tun(&mut self) {
        self.tun.write(&mut self.engine);
    }

    /// Retries the send socket `index` had no room for, then sends what else waits.
    fn send_unsent(&mut self, index: usize) {
        let Some(unsent) = self.unsent.get_mut(index).and_then(Option::take) else {
            return;
        };
        let spare = std::mem::replace(&mut self.send_buffer, unsent.contents);
        let sent = self.send(index, &unsent.transmit);
        // A send kept again took the buffer with it (and left a spare one).
        let retried = std::mem::replace(&mut self.send_buffer, spare);
        self.spare_send_buffers.push(retried);
        let open = match sent {
            Sent::Done | Sent::Failed => self.send_waiting(index),
            Sent::Full => true,
            Sent::Closed => false,
        };
        if !open {
            self.engine.set_socket_open(Instant::now(), index, false);
        }
    }

    /// Sends what the engine has for socket `index`, a GSO run per `sendmsg`, until
    /// nothing is left or the socket is full. False when the socket failed for good
    /// and was closed (its interface went away).
    fn send_waiting(&mut self, index: usize) -> bool {
        loop {
            let max_segments = self.socket(index).map_or(1, PathSocket::max_gso_segments);
            let Some(transmit) = self.engine.poll_transmit(
                Instant::now(),
                index,
                max_segments,
                &mut self.send_buffer,
            ) else {
                return true;
            };
            match self.send(index, &transmit) {
                Sent::Done | Sent::Failed => {}
                Sent::Full => return true,
                Sent::Closed => return false,
            }
        }
    }

    /// Sends `transmit`, whose datagrams are in the send buffer. A full socket keeps
    /// the send, with the buffer, for when it is writable; a failure is the engine's
    /// to count, and a link failure closes the socket.
    fn send(&mut self, index: usize, transmit: &Transmit) -> Sent {
        let result = match self.socket(index) {
            Some(socket) => socket.try_send(
                transmit.destination,
                transmit.source_ip,
                &self.send_buffer,
                transmit.segment_size,
            ),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "path socket is not open",
            )),
        };
        let error = match result {
            Ok(()) => return Sent::Done,
            Err(error) => error,
        };
        if error.kind() == io::ErrorKind::WouldBlock {
            if self.unsent.len() <= index {
                self.unsent.resize_with(index + 1, || None);
            }
            if let Some(slot) = self.unsent.get_mut(index) {
                // The send keeps its buffer; the next send gets a spare one, or a new
                // one at its full size rather than growing one from nothing.
                let fresh = self
                    .spare_send_buffers
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(u16::MAX as usize));
                *slot = Some(Unsent {
                    transmit: *transmit,
                    contents: std::mem::replace(&mut self.send_buffer, fresh),
                });
            }
            self.engine.on_socket_full(index);
            return Sent::Full;
        }
        self.engine.on_send_failed(Instant::now(), transmit, &error);
        let reopenable = self
            .slot(index)
            .filter(|slot| slot.binding.is_some() && slot.socket.is_some());
        if let Some(slot) = reopenable.filter(|_| is_link_failure(&error)) {
            tracing::warn!(path = %slot.name, %error, "path interface down or gone, closing its socket");
            self.drop_socket(index);
            return Sent::Closed;
        }
        Sent::Failed
    }

    async fn shut_down(mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        tracing::info!("shutting down: telling the peer");
        self.engine.close(now);
        self.flush();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_SEND_WAIT;
        while let Some(index) = (0..self.unsent.len()).find(|&index| self.is_blocked(index)) {
            if let Some(socket) = self.socket(index) {
                if tokio::time::timeout_at(deadline, socket.writable())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            self.send_unsent(index);
            self.flush();
        }
        let report = self.engine.report(now);
        for line in report.log_lines() {
            tracing::info!("{line}");
        }
        self.write_stats(&report)
    }

    /// Replaces the stats file, if one was asked for, atomically: a reader never sees
    /// half a report.
    fn write_stats(&self, report: &crate::session::Report) -> anyhow::Result<()> {
        let Some(path) = &self.options.stats_file else {
            return Ok(());
        };
        let json = serde_json::to_string_pretty(&status::JsonReport::new(report))
            .context("serialising the report")?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, json).with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("replacing {}", path.display()))
    }
}

/// The interface under a socket is gone (ENODEV, ENXIO), down (ENETDOWN) or lost the
/// source address (EADDRNOTAVAIL): the socket is closed and reopened once the
/// interface is usable again.
/// Hands the heap memory freed so far back to the kernel. glibc keeps what a large
/// configuration's parse freed as its own, so an idle server's RSS stayed tens of MiB
/// above what it uses.
#[cfg(target_env = "gnu")]
#[allow(unsafe_code)]
fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it touches no
    // memory in use and cannot fail in a way that matters (0 means nothing to free).
    unsafe { libc::malloc_trim(0) };
}

/// Other C libraries (musl) give freed memory back on their own.
#[cfg(not(target_env = "gnu"))]
fn release_freed_memory() {}

/// The indices of the set bits of `set`, lowest first.
fn bits(set: u64) -> impl Iterator<Item = usize> {
    (0..u64::BITS as usize).filter(move |index| set & (1 << index) != 0)
}

fn is_link_failure(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENODEV | libc::ENXIO | libc::ENETDOWN | libc::EADDRNOTAVAIL)
    )
}

/// What happened to a path's interface.
enum LinkChange {
    Lost,
    Back,
    Readdressed,
}
