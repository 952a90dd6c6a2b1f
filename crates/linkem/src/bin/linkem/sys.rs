//! Every syscall of the emulator, each behind a safe wrapper: AF_PACKET sockets
//! bound to one interface, `ppoll` with a nanosecond timeout, a `signalfd` for
//! SIGINT/SIGTERM, and CPU usage from `getrusage`.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `PACKET_IGNORE_OUTGOING` from `<linux/if_packet.h>` (Linux 4.20+); older
/// libc crates may not export it.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Socket buffer size: 8 MiB holds ~5,500 full frames, a few hundred ms of the
/// fastest scaled path, so a scheduling hiccup of the emulator loses nothing.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` lives for the duration of the call and the length passed
    // is exactly its size; `fd` is an open socket owned by the caller.
    let result = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(result).map(|_| ())
}

/// The outcome of one receive on a packet socket.
pub enum Received {
    /// A frame of this many bytes (it may exceed the buffer, see `truncated`).
    Frame { len: usize, truncated: bool },
    /// A frame this host sent itself (only seen without `PACKET_IGNORE_OUTGOING`).
    Outgoing,
    /// Nothing more to read right now.
    Empty,
}

/// A raw AF_PACKET socket bound to one interface, receiving every protocol.
pub struct PacketSocket {
    fd: OwnedFd,
    pub interface: String,
}

impl PacketSocket {
    pub fn open(interface: &str) -> io::Result<Self> {
        let name = CString::new(interface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface `{interface}` in this network namespace"),
            ));
        }
        let protocol_all = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket creation; the result is checked before use.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                protocol_all as i32,
            )
        })?;
        // SAFETY: `raw` is a freshly created descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Best effort: without it we filter PACKET_OUTGOING frames ourselves.
        let _ = set_int_option(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        // SO_*BUFFORCE exceed rmem_max as root; fall back to the capped variant.
        for (forced, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if set_int_option(raw, libc::SOL_SOCKET, forced, SOCKET_BUFFER_BYTES).is_err() {
                set_int_option(raw, libc::SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)?;
            }
        }
        // SAFETY: an all-zero sockaddr_ll is a valid value to fill in.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol_all;
        address.sll_ifindex = ifindex as i32;
        // SAFETY: `address` is a properly initialised sockaddr_ll and the length
        // passed is its size.
        check(unsafe {
            libc::bind(
                raw,
                (&address as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(Self {
            fd,
            interface: interface.to_string(),
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Receives one frame into `buffer` without blocking.
    pub fn receive(&self, buffer: &mut [u8]) -> io::Result<Received> {
        // SAFETY: zeroed sockaddr_ll is valid; the kernel fills at most `length`.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        let mut length = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buffer` is valid for writes of `buffer.len()` bytes; with
        // MSG_TRUNC the kernel still writes at most that many and returns the
        // real frame length.
        let result = unsafe {
            libc::recvfrom(
                self.raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                (&mut address as *mut libc::sockaddr_ll).cast(),
                &mut length,
            )
        };
        if result < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Received::Empty),
                _ => Err(error),
            };
        }
        if address.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(Received::Outgoing);
        }
        let len = result as usize;
        Ok(Received::Frame {
            len,
            truncated: len > buffer.len(),
        })
    }

    /// Sends one frame out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes; the socket
        // is bound, so no destination address is needed.
        let result = unsafe {
            libc::send(
                self.raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if result < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// A descriptor that becomes readable when SIGINT or SIGTERM arrives; the
/// signals are blocked for the process so they only show up here.
pub struct ShutdownSignals {
    fd: OwnedFd,
}

impl ShutdownSignals {
    pub fn install() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
        let mut set: libc::sigset_t = unsafe { zeroed() };
        // SAFETY: `set` is a valid sigset_t owned by this frame.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
        }
        // SAFETY: `set` is initialised; the old mask is not needed (null).
        let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if blocked != 0 {
            return Err(io::Error::from_raw_os_error(blocked));
        }
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let raw =
            check(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The signal number, if one is pending.
    pub fn take(&self) -> Option<u32> {
        // SAFETY: signalfd_siginfo is plain data and the read length is its size.
        let mut info: libc::signalfd_siginfo = unsafe { zeroed() };
        let size = size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is valid for writes of `size` bytes.
        let read = unsafe {
            libc::read(
                self.raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (read == size as isize).then_some(info.ssi_signo)
    }
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: forever).
/// Sets `revents` of each entry.
pub fn wait_readable(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    let timespec = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let timespec_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid slice of pollfd for its length; `timespec_ptr` is
    // null or points at a timespec that outlives the call; a null sigmask keeps
    // the current one.
    let result = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timespec_ptr,
            std::ptr::null(),
        )
    };
    if result < 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(())
}

/// Asks the kernel for 1 µs timer slack (default 50 µs), so release times are
/// kept to within a few microseconds.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
    }
}

/// User and system CPU time this process has used.
pub fn cpu_time() -> (Duration, Duration) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut usage: libc::rusage = unsafe { zeroed() };
    // SAFETY: `usage` is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let to_duration = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    (to_duration(usage.ru_utime), to_duration(usage.ru_stime))
}
