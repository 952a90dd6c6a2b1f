//! The TUN device: created with its addresses and MTU, up, non-blocking on tokio.

use std::io;
use std::net::IpAddr;

use tun_rs::{AsyncDevice, DeviceBuilder};

use crate::config::IpNet;

pub fn create(name: &str, addresses: &[IpNet], mtu: u16) -> io::Result<AsyncDevice> {
    let mut ipv4 = addresses.iter().filter_map(|net| match net.addr {
        IpAddr::V4(addr) => Some((addr, net.prefix_len)),
        IpAddr::V6(_) => None,
    });
    let mut builder = DeviceBuilder::new().name(name).mtu(mtu).enable(true);
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
    for (addr, prefix_len) in ipv4 {
        device.add_address_v4(addr, prefix_len)?;
    }
    Ok(device)
}
