//! The TUN device: created with its addresses and MTU, up, non-blocking on tokio, and
//! with virtio-net header offloads where the kernel has them (as wireguard-go does):
//! the inner TCP hands the TUN one TSO super-packet of up to 64 KiB, which is split here
//! into MTU-sized packets, and packets written to the TUN are coalesced (GRO) into
//! super-packets, so the kernel stack handles one large packet instead of dozens.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::io;
use std::net::IpAddr;
use std::task::{Context, Poll};
use std::time::Instant;

use rtnetlink::packet_route::link::{AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute};
use rtnetlink::LinkUnspec;
use tun_rs::{AsyncDevice, DeviceBuilder, DeviceImpl, GROTable, VIRTIO_NET_HDR_LEN};

use crate::buffers::{BufferPool, Packet, HEADROOM};
use crate::config::IpNet;
use crate::counters::DropReason;
use crate::session::{Core, Engine};

/// The largest super-packet the kernel hands over: 64 KiB of IP packet after the
/// virtio-net header.
const SUPER_PACKET_BYTES: usize = VIRTIO_NET_HDR_LEN + 65_535;
/// Segments one super-packet may split into: 64 KiB of 1280-byte IPv6 minimum MTU
/// packets is 52, so 64 always suffice.
const SEGMENTS_PER_READ: usize = 64;
/// Packets written per GRO batch: 64 buffers of 64 KiB, 4 MiB in all.
const WRITE_BATCH: usize = 64;
/// A coalesced super-packet of up to 64 KiB, with room for the virtio-net header
/// before it twice over (tun-rs's requirement).
const COALESCE_BUFFER_BYTES: usize = 2 * VIRTIO_NET_HDR_LEN + 65_535;

/// The TUN device and what its offloads need between calls.
pub struct Tun {
    device: AsyncDevice,
    offload: Option<Offload>,
    /// The packets of one read, on their way to the core (kept for its capacity).
    read_packets: Vec<Packet>,
    /// A packet the full TUN could not take yet (without offloads); the core keeps
    /// the ones behind it.
    waiting: Option<Packet>,
}

struct Offload {
    /// One super-packet as read, virtio-net header first.
    read_buffer: Box<[u8]>,
    /// Buffers ready for the segments of the next read.
    spare: Vec<Packet>,
    sizes: Vec<usize>,
    gro_table: GROTable,
    /// Packets to write, each after room for the virtio-net header; GRO appends the
    /// payload of later segments to the first of their flow.
    write_batch: Vec<Vec<u8>>,
}

impl Tun {
    /// Whether the kernel took the virtio-net header offloads.
    pub fn offload(&self) -> bool {
        self.offload.is_some()
    }

    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.device.poll_readable(cx)
    }

    /// Ready when a packet waits for room and the TUN can take it.
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> bool {
        self.waiting.is_some() && self.device.poll_writable(cx).is_ready()
    }

    /// Reads what the TUN has, up to about `budget` packets, and hands each to the
    /// core, stamped when its read returned. A super-packet that cannot be split (the
    /// kernel's own, so not expected) is counted as an invalid inner packet.
    pub fn read<C: Core>(&mut self, engine: &mut Engine<C>, budget: usize) -> io::Result<()> {
        let mut read = 0;
        while read < budget {
            let now = Instant::now();
            let packets = &mut self.read_packets;
            let result = match &mut self.offload {
                Some(offload) => offload.read(&self.device, engine.pool(), packets),
                None => read_one(&self.device, engine.pool(), packets),
            };
            match result {
                Ok(()) => {
                    read += packets.len().max(1);
                    engine.handle_tun_packets(now, packets);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error)
                    if self.offload.is_some()
                        && matches!(
                            error.kind(),
                            io::ErrorKind::InvalidInput | io::ErrorKind::Other
                        ) =>
                {
                    engine.record_drop(
                        now,
                        DropReason::InvalidInnerPacket,
                        &format_args!("TUN super-packet: {error}"),
                    );
                    read += 1;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Writes what the core released until it has nothing more or the TUN is full.
    pub fn write<C: Core>(&mut self, engine: &mut Engine<C>) {
        let Some(offload) = &mut self.offload else {
            while let Some(packet) = self.waiting.take().or_else(|| engine.poll_tun_packet()) {
                match self.device.try_send(packet.bytes()) {
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        self.waiting = Some(packet);
                        return;
                    }
                    Err(error) => engine.on_tun_write_failed(Instant::now(), &error),
                    Ok(_) => {}
                }
                engine.pool().recycle(packet);
            }
            return;
        };
        loop {
            let mut count = 0;
            while count < WRITE_BATCH {
                let Some(packet) = engine.poll_tun_packet() else {
                    break;
                };
                if offload.write_batch.len() <= count {
                    // GRO appends the segments of a flow to its first packet in place;
                    // tun-rs coalesces only into a buffer that already has the room.
                    offload
                        .write_batch
                        .push(Vec::with_capacity(COALESCE_BUFFER_BYTES));
                }
                if let Some(buffer) = offload.write_batch.get_mut(count) {
                    buffer.clear();
                    buffer.resize(VIRTIO_NET_HDR_LEN, 0);
                    buffer.extend_from_slice(packet.bytes());
                    count += 1;
                }
                engine.pool().recycle(packet);
            }
            let Some(batch) = offload
                .write_batch
                .get_mut(..count)
                .filter(|b| !b.is_empty())
            else {
                return;
            };
            // The device's own (non-blocking) writes, not the async ones: a TUN write
            // hands the packet to the kernel's stack at once, and should one ever find
            // the device busy, the loop does not wait for it (the packet is counted).
            let written = DeviceImpl::send_multiple(
                &self.device,
                &mut offload.gro_table,
                batch,
                VIRTIO_NET_HDR_LEN,
            );
            if let Err(error) = written {
                engine.on_tun_write_failed(Instant::now(), &error);
            }
        }
    }
}

/// One packet from a TUN without offloads, into `packets`.
fn read_one(
    device: &AsyncDevice,
    pool: &mut BufferPool,
    packets: &mut Vec<Packet>,
) -> io::Result<()> {
    let mut packet = pool.take();
    match device.try_recv(packet.inner_read_area()) {
        Ok(len) => {
            packet.set_range(HEADROOM, HEADROOM + len);
            packets.push(packet);
            Ok(())
        }
        Err(error) => {
            pool.recycle(packet);
            Err(error)
        }
    }
}

impl Offload {
    fn new() -> Self {
        Self {
            read_buffer: vec![0u8; SUPER_PACKET_BYTES].into_boxed_slice(),
            spare: Vec::with_capacity(SEGMENTS_PER_READ),
            sizes: vec![0; SEGMENTS_PER_READ],
            gro_table: GROTable::new(),
            write_batch: Vec::with_capacity(WRITE_BATCH),
        }
    }

    /// One read into `packets`: a packet, or the segments of a super-packet, in order.
    fn read(
        &mut self,
        device: &AsyncDevice,
        pool: &mut BufferPool,
        packets: &mut Vec<Packet>,
    ) -> io::Result<()> {
        while self.spare.len() < SEGMENTS_PER_READ {
            self.spare.push(pool.take());
        }
        // The buffers' read areas, on the stack: nothing is allocated per read.
        let mut areas: [&mut [u8]; SEGMENTS_PER_READ] = std::array::from_fn(|_| &mut [][..]);
        for (area, packet) in areas.iter_mut().zip(self.spare.iter_mut()) {
            *area = packet.inner_read_area();
        }
        let segments =
            device.try_recv_multiple(&mut self.read_buffer, &mut areas, &mut self.sizes, 0)?;
        // The filled buffers are the first `segments` of `spare`.
        let filled = segments.min(self.spare.len());
        for (mut packet, &len) in self.spare.drain(..filled).zip(&self.sizes) {
            packet.set_range(HEADROOM, HEADROOM + len);
            packets.push(packet);
        }
        Ok(())
    }
}

/// Creates the TUN device, with offloads unless the kernel refuses them.
pub async fn create(name: &str, addresses: &[IpNet], mtu: u16) -> io::Result<Tun> {
    let device = match create_device(name, addresses, mtu, true).await {
        Ok(device) => device,
        Err(error) => {
            tracing::warn!(%error, tun = name, "TUN offloads unavailable, one packet per read and write");
            create_device(name, addresses, mtu, false).await?
        }
    };
    let offload = device.tcp_gso().then(Offload::new);
    Ok(Tun {
        device,
        offload,
        read_packets: Vec::with_capacity(SEGMENTS_PER_READ),
        waiting: None,
    })
}

async fn create_device(
    name: &str,
    addresses: &[IpNet],
    mtu: u16,
    offload: bool,
) -> io::Result<AsyncDevice> {
    let mut ipv4 = addresses.iter().filter_map(|net| match net.addr {
        IpAddr::V4(addr) => Some((addr, net.prefix_len)),
        IpAddr::V6(_) => None,
    });
    // Down until the kernel has been told not to make a link-local address.
    let mut builder = DeviceBuilder::new()
        .name(name)
        .mtu(mtu)
        .offload(offload)
        .enable(false);
    // The builder takes one IPv4 address; further ones are added to the device.
    if let Some((addr, prefix_len)) = ipv4.next() {
        builder = builder.ipv4(addr, prefix_len, None);
    }
    for net in addresses {
        if let IpAddr::V6(addr) = net.addr {
            builder = builder.ipv6(addr, net.prefix_len);
        }
    }
    let device = builder.build_async().map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("creating TUN device {name}: {error} (needs CAP_NET_ADMIN and /dev/net/tun)"),
        )
    })?;
    if let Err(error) = without_link_local(name).await {
        tracing::warn!(%error, tun = name, "could not switch off IPv6 link-local addressing on the TUN: the kernel's router solicitations will be counted as no_route drops");
    }
    device.enabled(true)?;
    for (addr, prefix_len) in ipv4 {
        device.add_address_v4(addr, prefix_len)?;
    }
    Ok(device)
}

/// Sets the device's IPv6 address generation mode to none (`ip link set NAME
/// addrgenmode none`), over netlink because the unit's /proc/sys is read-only.
/// Without a link-local address the kernel sends no router solicitations or MLD
/// reports into the tunnel: the peer has no route for them and would drop them.
async fn without_link_local(name: &str) -> io::Result<()> {
    let (connection, handle, _) = rtnetlink::new_connection()?;
    let connection = tokio::spawn(connection);
    let message = LinkUnspec::new_with_name(name)
        .append_extra_attribute(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )]))
        .build();
    let result = handle.link().set(message).execute().await;
    connection.abort();
    result.map_err(io::Error::other)
}
