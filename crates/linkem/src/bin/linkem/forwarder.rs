//! The forwarding loop: one thread, one `ppoll` over every packet socket and
//! the signal descriptor, woken either by frames or by the earliest release
//! time any link reports.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use linkem::scenario::{PathConfig, Scenario};
use linkem::{Admission, Link, LinkCounters};
use serde::Serialize;

use crate::sys::{self, PacketSocket, Received, ShutdownSignals};

/// Buffer per frame: a 9000-byte jumbo frame plus Ethernet and VLAN headers.
/// Larger frames mean offloads (GRO/TSO) are on; they are counted and dropped.
const FRAME_CAPACITY: usize = 9216;

/// Frames read from one socket before the loop looks at the others and at due
/// releases again: keeps release times accurate under a flood.
const RECEIVE_BATCH: usize = 64;

/// A frame buffer and the length of the frame in it.
pub struct Frame {
    storage: Box<[u8]>,
    len: usize,
}

/// Frame buffers for reuse: the data path allocates only while the number of
/// frames inside the emulator grows past its previous peak.
#[derive(Default)]
struct FramePool {
    free: Vec<Frame>,
}

impl FramePool {
    fn take(&mut self) -> Frame {
        self.free.pop().unwrap_or_else(|| Frame {
            storage: vec![0; FRAME_CAPACITY].into_boxed_slice(),
            len: 0,
        })
    }
    fn give_back(&mut self, frame: Frame) {
        self.free.push(frame);
    }
}

/// Errors of the I/O layer, per direction.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct IoCounters {
    /// Frames larger than the buffer (offloads left on): dropped.
    pub dropped_oversize: u64,
    /// Frames the kernel refused to send (full socket buffer, interface down).
    pub send_errors: u64,
}

struct Direction {
    link: Link<Frame>,
    io: IoCounters,
}

/// One path: client-side socket, server-side socket and the two directions.
struct PathPump {
    name: String,
    client_socket: PacketSocket,
    server_socket: PacketSocket,
    /// Client to server.
    up: Direction,
    /// Server to client.
    down: Direction,
}

#[derive(Serialize)]
struct DirectionReport {
    #[serde(flatten)]
    link: LinkCounters,
    #[serde(flatten)]
    io: IoCounters,
}

#[derive(Serialize)]
struct PathReport {
    name: String,
    client_interface: String,
    server_interface: String,
    up: DirectionReport,
    down: DirectionReport,
}

#[derive(Serialize)]
struct Report {
    scenario: String,
    rate_scale: f64,
    epoch_unix_s: f64,
    elapsed_s: f64,
    cpu_user_s: f64,
    cpu_system_s: f64,
    /// CPU time over wall time since start, in percent of one core.
    cpu_percent: f64,
    paths: Vec<PathReport>,
}

pub struct Options {
    pub stats_json: Option<PathBuf>,
    pub stats_interval: Option<Duration>,
    pub ready_file: Option<PathBuf>,
}

pub struct Forwarder {
    scenario_name: String,
    rate_scale: f64,
    paths: Vec<PathPump>,
    pool: FramePool,
    signals: ShutdownSignals,
    options: Options,
    epoch: Instant,
    epoch_unix_s: f64,
    warned_oversize: bool,
    warned_send_error: bool,
}

impl Forwarder {
    /// Opens every socket; `interface_pairs[i]` = (client side, server side) of path `i`.
    pub fn open(
        scenario: Scenario,
        interface_pairs: &[(String, String)],
        options: Options,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            interface_pairs.len() == scenario.paths.len(),
            "scenario `{}` has {} paths but {} interface pairs were given",
            scenario.name,
            scenario.paths.len(),
            interface_pairs.len()
        );
        let signals = ShutdownSignals::install()?;
        sys::tighten_timer_slack();
        let mut sockets = Vec::new();
        for (client_interface, server_interface) in interface_pairs {
            let open = |name: &str| {
                PacketSocket::open(name)
                    .map_err(|error| anyhow::anyhow!("opening AF_PACKET socket on {name}: {error}"))
            };
            sockets.push((open(client_interface)?, open(server_interface)?));
        }
        // Time zero of outages and traces: when forwarding can start.
        let epoch = Instant::now();
        let epoch_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let paths = scenario
            .paths
            .into_iter()
            .zip(sockets)
            .map(
                |(PathConfig { name, up, down }, (client_socket, server_socket))| PathPump {
                    name,
                    client_socket,
                    server_socket,
                    up: Direction {
                        link: Link::new(up, epoch),
                        io: IoCounters::default(),
                    },
                    down: Direction {
                        link: Link::new(down, epoch),
                        io: IoCounters::default(),
                    },
                },
            )
            .collect();
        let forwarder = Self {
            scenario_name: scenario.name,
            rate_scale: scenario.rate_scale,
            paths,
            pool: FramePool::default(),
            signals,
            options,
            epoch,
            epoch_unix_s,
            warned_oversize: false,
            warned_send_error: false,
        };
        if let Some(ready_file) = &forwarder.options.ready_file {
            let ready =
                serde_json::json!({ "pid": std::process::id(), "epoch_unix_s": epoch_unix_s });
            std::fs::write(ready_file, ready.to_string())?;
        }
        Ok(forwarder)
    }

    /// Forwards until SIGINT or SIGTERM, then writes the final report.
    pub fn run(mut self) -> anyhow::Result<()> {
        // pollfd order: [signals, path0 client, path0 server, path1 client, ...].
        let mut poll_fds: Vec<libc::pollfd> = std::iter::once(self.signals.raw_fd())
            .chain(
                self.paths
                    .iter()
                    .flat_map(|p| [p.client_socket.raw_fd(), p.server_socket.raw_fd()]),
            )
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut next_report = self
            .options
            .stats_interval
            .map(|interval| self.epoch + interval);
        // An I/O failure (an interface vanished) ends forwarding, but the
        // counters gathered so far are still printed and written.
        let failure = self
            .forward_until_signal(&mut poll_fds, &mut next_report)
            .err();
        let now = Instant::now();
        self.print_counters();
        self.write_report(now)?;
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn forward_until_signal(
        &mut self,
        poll_fds: &mut [libc::pollfd],
        next_report: &mut Option<Instant>,
    ) -> anyhow::Result<()> {
        loop {
            let now = Instant::now();
            self.release_due(now);
            if let (Some(due), Some(interval)) = (*next_report, self.options.stats_interval) {
                if now >= due {
                    self.write_report(now)?;
                    *next_report = Some(due + interval);
                }
            }
            let wake_at = self
                .paths
                .iter()
                .flat_map(|p| [p.up.link.poll_timeout(), p.down.link.poll_timeout()]);
            let wake_at = wake_at.chain(std::iter::once(*next_report)).flatten().min();
            let timeout = wake_at.map(|at| at.saturating_duration_since(Instant::now()));
            for poll_fd in poll_fds.iter_mut() {
                poll_fd.revents = 0;
            }
            sys::wait_readable(poll_fds, timeout)?;
            if poll_fds[0].revents != 0 {
                if let Some(signal) = self.signals.take() {
                    eprintln!("linkem: signal {signal}, stopping");
                    return Ok(());
                }
            }
            let now = Instant::now();
            for index in 0..self.paths.len() {
                if poll_fds[1 + 2 * index].revents != 0 {
                    self.receive_batch(index, Side::Client, now)?;
                }
                if poll_fds[2 + 2 * index].revents != 0 {
                    self.receive_batch(index, Side::Server, now)?;
                }
            }
        }
    }

    fn release_due(&mut self, now: Instant) {
        for path in &mut self.paths {
            for (direction, socket) in [
                (&mut path.up, &path.server_socket),
                (&mut path.down, &path.client_socket),
            ] {
                while let Some(frame) = direction.link.poll_release(now) {
                    if let Err(error) = socket.send(&frame.storage[..frame.len]) {
                        direction.io.send_errors += 1;
                        if !self.warned_send_error {
                            self.warned_send_error = true;
                            eprintln!("linkem: send on {} failed: {error} (counted in send_errors; warning once)", socket.interface);
                        }
                    }
                    self.pool.give_back(frame);
                }
            }
        }
    }

    fn receive_batch(&mut self, index: usize, side: Side, now: Instant) -> anyhow::Result<()> {
        let path = &mut self.paths[index];
        let (socket, direction) = match side {
            Side::Client => (&path.client_socket, &mut path.up),
            Side::Server => (&path.server_socket, &mut path.down),
        };
        for _ in 0..RECEIVE_BATCH {
            let mut frame = self.pool.take();
            let received = socket
                .receive(&mut frame.storage)
                .map_err(|error| anyhow::anyhow!("receiving on {}: {error}", socket.interface))?;
            match received {
                Received::Frame {
                    len,
                    truncated: false,
                } => {
                    frame.len = len;
                    if let Admission::Dropped(frame, _) =
                        direction.link.handle_packet(now, frame, len)
                    {
                        self.pool.give_back(frame);
                    }
                }
                Received::Frame {
                    len,
                    truncated: true,
                } => {
                    direction.io.dropped_oversize += 1;
                    if !self.warned_oversize {
                        self.warned_oversize = true;
                        eprintln!(
                            "linkem: {len}-byte frame on {} exceeds {FRAME_CAPACITY} bytes; turn off GRO/TSO/GSO \
                             (`ethtool -K IF gro off tso off gso off`); counted in dropped_oversize",
                            socket.interface
                        );
                    }
                    self.pool.give_back(frame);
                }
                Received::Outgoing => self.pool.give_back(frame),
                Received::Empty => {
                    self.pool.give_back(frame);
                    break;
                }
            }
        }
        Ok(())
    }

    fn report(&self, now: Instant) -> Report {
        let (user, system) = sys::cpu_time();
        let elapsed = now.saturating_duration_since(self.epoch).as_secs_f64();
        let report_direction = |d: &Direction| DirectionReport {
            link: *d.link.counters(),
            io: d.io,
        };
        Report {
            scenario: self.scenario_name.clone(),
            rate_scale: self.rate_scale,
            epoch_unix_s: self.epoch_unix_s,
            elapsed_s: elapsed,
            cpu_user_s: user.as_secs_f64(),
            cpu_system_s: system.as_secs_f64(),
            cpu_percent: if elapsed > 0.0 {
                (user + system).as_secs_f64() / elapsed * 100.0
            } else {
                0.0
            },
            paths: self
                .paths
                .iter()
                .map(|p| PathReport {
                    name: p.name.clone(),
                    client_interface: p.client_socket.interface.clone(),
                    server_interface: p.server_socket.interface.clone(),
                    up: report_direction(&p.up),
                    down: report_direction(&p.down),
                })
                .collect(),
        }
    }

    /// Writes the JSON report atomically (temporary file, then rename).
    fn write_report(&self, now: Instant) -> anyhow::Result<()> {
        let Some(path) = &self.options.stats_json else {
            return Ok(());
        };
        let text = serde_json::to_string_pretty(&self.report(now))?;
        let temporary = path.with_extension("json.tmp");
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, path)?;
        Ok(())
    }

    fn print_counters(&self) {
        let report = self.report(Instant::now());
        eprintln!(
            "linkem: scenario {} ran {:.1} s, CPU {:.1}% of one core",
            report.scenario, report.elapsed_s, report.cpu_percent
        );
        eprintln!(
            "{:<12} {:<4} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "path", "dir", "forwarded", "bytes", "queue", "random", "burst", "outage", "io_err"
        );
        for path in &report.paths {
            for (label, d) in [("up", &path.up), ("down", &path.down)] {
                eprintln!(
                    "{:<12} {:<4} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8}",
                    path.name,
                    label,
                    d.link.forwarded_packets,
                    d.link.forwarded_bytes,
                    d.link.dropped_queue_full,
                    d.link.dropped_random_loss,
                    d.link.dropped_burst_loss,
                    d.link.dropped_outage,
                    d.io.dropped_oversize + d.io.send_errors
                );
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Side {
    Client,
    Server,
}
