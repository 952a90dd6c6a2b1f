//! The TUN device: created with its addresses and MTU, up, non-blocking on tokio.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::io;
use std::net::IpAddr;

use rtnetlink::packet_route::link::{AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute};
use rtnetlink::LinkUnspec;
use tun_rs::{AsyncDevice, DeviceBuilder};

use crate::config::IpNet;

pub async fn create(name: &str, addresses: &[IpNet], mtu: u16) -> io::Result<AsyncDevice> {
    let mut ipv4 = addresses.iter().filter_map(|net| match net.addr {
        IpAddr::V4(addr) => Some((addr, net.prefix_len)),
        IpAddr::V6(_) => None,
    });
    // Down until the kernel has been told not to make a link-local address.
    let mut builder = DeviceBuilder::new().name(name).mtu(mtu).enable(false);
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
