//! UDP sockets for paths: created with socket2 (interface binding, buffer sizes), driven
//! through quinn-udp (batched receive with GRO and packet info) on tokio.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::task::{Context, Poll};

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;

/// Datagrams read per receive call (quinn-udp's recvmmsg batch on Linux is 32).
pub const RECV_BATCH: usize = 16;
/// With GRO one receive buffer carries many datagrams, up to the UDP maximum.
const RECV_BUFFER_LEN: usize = 65_536;

/// How a path socket is bound.
#[derive(Clone, Debug)]
pub struct Binding {
    pub interface: Option<String>,
    pub source_address: Option<IpAddr>,
    /// The local port; 0 lets the kernel choose (client paths).
    pub port: u16,
    pub ipv6: bool,
    /// SO_SNDBUF and SO_RCVBUF (the forced variants work for root/CAP_NET_ADMIN).
    pub buffer_bytes: usize,
}

pub struct PathSocket {
    socket: tokio::net::UdpSocket,
    state: UdpSocketState,
    buffers: Box<[[u8; RECV_BUFFER_LEN]; RECV_BATCH]>,
    metas: [RecvMeta; RECV_BATCH],
}

/// One datagram out of a receive batch.
pub struct Datagram<'a> {
    pub bytes: &'a [u8],
    pub from: SocketAddr,
    pub local_ip: Option<IpAddr>,
}

impl PathSocket {
    pub fn open(binding: &Binding) -> io::Result<Self> {
        let domain = if binding.ipv6 {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if binding.ipv6 {
            // A wildcard IPv6 listener also takes IPv4 (mapped) unless the address says otherwise.
            socket.set_only_v6(false)?;
        }
        if let Some(interface) = &binding.interface {
            socket
                .bind_device(Some(interface.as_bytes()))
                .map_err(|error| {
                    io::Error::new(
                        error.kind(),
                        format!("binding to interface {interface}: {error}"),
                    )
                })?;
        }
        for (force, normal) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            // Without CAP_NET_ADMIN the forced size is refused; the normal one is
            // capped by net.core.{r,w}mem_max, which is then worth raising.
            if set_int_option(&socket, force, binding.buffer_bytes).is_err() {
                set_int_option(&socket, normal, binding.buffer_bytes)?;
            }
        }
        let ip = binding.source_address.unwrap_or(if binding.ipv6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        });
        let local = SocketAddr::new(ip, binding.port);
        socket.bind(&local.into()).map_err(|error| {
            io::Error::new(error.kind(), format!("binding to {local}: {error}"))
        })?;
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        let socket = tokio::net::UdpSocket::from_std(socket.into())?;
        Ok(Self {
            socket,
            state,
            buffers: vec![[0u8; RECV_BUFFER_LEN]; RECV_BATCH]
                .into_boxed_slice()
                .try_into()
                .map_err(|_| io::Error::other("receive buffer allocation"))?,
            metas: [RecvMeta::default(); RECV_BATCH],
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_recv_ready(cx)
    }

    /// Reads one batch without waiting and hands every datagram (GRO segments split)
    /// to `on_datagram`. Returns how many datagrams there were; 0 when none was waiting.
    pub fn recv_batch(&mut self, mut on_datagram: impl FnMut(Datagram<'_>)) -> io::Result<usize> {
        let Self {
            socket,
            state,
            buffers,
            metas,
        } = self;
        let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
            buffers.each_mut().map(|b| IoSliceMut::new(&mut b[..]));
        let received = match socket.try_io(Interest::READABLE, || {
            state.recv((&*socket).into(), &mut slices, metas)
        }) {
            Ok(count) => count,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(error) => return Err(error),
        };
        let mut datagrams = 0;
        for (meta, buffer) in metas.iter().zip(buffers.iter()).take(received) {
            for segment in gro_segments(&buffer[..], meta.len, meta.stride) {
                datagrams += 1;
                on_datagram(Datagram {
                    bytes: segment,
                    from: meta.addr,
                    local_ip: meta.dst_ip,
                });
            }
        }
        Ok(datagrams)
    }

    /// Sends now, in one `sendmsg`: one datagram, or with `segment_size` a run of
    /// datagrams of that size (the last may be shorter) that the kernel splits (UDP
    /// GSO). `WouldBlock` when the socket buffer is full.
    pub fn try_send(
        &self,
        destination: SocketAddr,
        source_ip: Option<IpAddr>,
        contents: &[u8],
        segment_size: Option<usize>,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination,
            ecn: None,
            contents,
            segment_size,
            src_ip: source_ip,
        };
        self.socket.try_io(Interest::WRITABLE, || {
            self.state.try_send((&self.socket).into(), &transmit)
        })
    }

    /// Datagrams one send may carry: 1 without UDP GSO. quinn-udp drops to 1 when the
    /// kernel or the interface refuses a GSO send.
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    pub fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_send_ready(cx)
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.socket.writable().await
    }
}

/// The datagrams in one receive buffer: with GRO the kernel coalesces segments of
/// `stride` bytes (the last may be shorter) into `received_len` bytes. A length
/// beyond the buffer is clamped and a zero stride reads as one datagram, so a
/// surprising answer from the kernel cannot cause a panic.
pub fn gro_segments(
    buffer: &[u8],
    received_len: usize,
    stride: usize,
) -> impl Iterator<Item = &[u8]> {
    let received = buffer.get(..received_len).unwrap_or(buffer);
    let stride = if stride == 0 {
        received.len().max(1)
    } else {
        stride
    };
    received.chunks(stride)
}

/// `setsockopt(SOL_SOCKET, option, value)` for the options socket2 does not wrap.
#[allow(unsafe_code)]
fn set_int_option(socket: &Socket, option: libc::c_int, value: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is open for the lifetime of `socket`; the option value points to
    // a live c_int and its exact size is passed.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The MTU of a network interface, from sysfs (no privileges needed).
pub fn interface_mtu(interface: &str) -> io::Result<u32> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{interface}/mtu"))?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("unreadable MTU for {interface}: {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gro_buffer_splits_into_stride_sized_segments_and_a_short_last_one() {
        let buffer: Vec<u8> = (0..=255).collect();
        let segments: Vec<&[u8]> = gro_segments(&buffer, 25, 10).collect();
        assert_eq!(segments, [&buffer[0..10], &buffer[10..20], &buffer[20..25]]);
    }

    #[test]
    fn odd_kernel_answers_do_not_panic() {
        let buffer = [7u8; 16];
        // A zero stride is one datagram, not one per byte.
        assert_eq!(gro_segments(&buffer, 16, 0).count(), 1);
        // A length past the buffer is clamped to it.
        assert_eq!(
            gro_segments(&buffer, 1000, 4)
                .map(<[u8]>::len)
                .sum::<usize>(),
            16
        );
        assert_eq!(gro_segments(&buffer, 0, 4).count(), 0);
    }
}
