//! Interface hotplug: a task on the event loop's runtime listens to the kernel's link
//! and address notifications (`NETLINK_ROUTE`, groups `RTNLGRP_LINK` and
//! `RTNLGRP_IPV{4,6}_IFADDR`) and after each burst of them sends the loop a fresh
//! table of every interface: whether it is up and which addresses it has.
//!
//! The loop compares each path's binding against the table ([`usable_addresses`]): a
//! path whose interface went down, disappeared or lost its address loses its socket
//! (and its in-flight packets move to the other paths at once); one whose interface is
//! usable again, or whose address changed, gets a new socket and is probed back up.
//! A table rather than individual events keeps the loop's view exact whatever order
//! the kernel's messages come in, and a burst (an address change is a deletion and an
//! addition) is judged once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt as _, TryStreamExt as _};
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags};
use rtnetlink::{Handle, MulticastGroup};
use tokio::sync::mpsc;

use super::udp::Binding;

/// Notifications usually come in bursts (a link going down drops its routes and
/// IPv6 addresses too): the table is taken once the burst has been quiet this long.
const SETTLE: Duration = Duration::from_millis(20);

/// One interface as the kernel reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Administratively up and with carrier (`IFF_UP` and `IFF_RUNNING` or
    /// `IFF_LOWER_UP`).
    pub up: bool,
    pub addresses: Vec<IpAddr>,
}

/// Every interface by name.
pub type LinkTable = HashMap<String, LinkState>;

/// The receiving end of the listener task.
pub struct LinkWatch {
    tables: mpsc::Receiver<LinkTable>,
}

impl LinkWatch {
    /// Subscribes to link and address notifications; `None` (with a warning) when
    /// netlink is unavailable, and the daemon falls back to retrying sockets.
    pub fn start() -> Option<Self> {
        let groups = [
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ];
        let (connection, handle, mut notifications) = match rtnetlink::new_multicast_connection(
            &groups,
        ) {
            Ok(parts) => parts,
            Err(error) => {
                tracing::warn!(%error, "no netlink notifications: interface changes are noticed only by failed sends and socket retries");
                return None;
            }
        };
        tokio::spawn(connection);
        let (sender, tables) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                match dump(&handle).await {
                    Ok(table) => {
                        if sender.send(table).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => tracing::warn!(%error, "reading the interface table"),
                }
                if notifications.next().await.is_none() {
                    tracing::warn!("netlink notifications ended");
                    return;
                }
                loop {
                    tokio::time::sleep(SETTLE).await;
                    let mut more = false;
                    while let Some(Some(_)) = notifications.next().now_or_never() {
                        more = true;
                    }
                    if !more {
                        break;
                    }
                }
            }
        });
        Some(Self { tables })
    }

    /// The newest table, if one came since the last call; registers for a wake-up.
    pub fn poll(&mut self, cx: &mut std::task::Context<'_>) -> Option<LinkTable> {
        let mut newest = None;
        while let std::task::Poll::Ready(Some(table)) = self.tables.poll_recv(cx) {
            newest = Some(table);
        }
        newest
    }
}

async fn dump(handle: &Handle) -> Result<LinkTable, rtnetlink::Error> {
    let mut by_index: HashMap<u32, (String, LinkState)> = HashMap::new();
    let mut links = handle.link().get().execute();
    while let Some(link) = links.try_next().await? {
        let Some(name) = link
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                LinkAttribute::IfName(name) => Some(name.clone()),
                _ => None,
            })
        else {
            continue;
        };
        let flags = link.header.flags;
        let up = flags.contains(LinkFlags::Up)
            && (flags.contains(LinkFlags::Running) || flags.contains(LinkFlags::LowerUp));
        by_index.insert(
            link.header.index,
            (
                name,
                LinkState {
                    up,
                    addresses: Vec::new(),
                },
            ),
        );
    }
    let mut addresses = handle.address().get().execute();
    while let Some(message) = addresses.try_next().await? {
        // IPv4 reports the interface's own address as Local (Address is the peer on
        // point-to-point links); IPv6 only as Address.
        let local = message
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
        let address = local.or_else(|| {
            message
                .attributes
                .iter()
                .find_map(|attribute| match attribute {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })
        });
        if let (Some(address), Some((_, state))) =
            (address, by_index.get_mut(&message.header.index))
        {
            state.addresses.push(address);
        }
    }
    let mut table: LinkTable = by_index.into_values().collect();
    for state in table.values_mut() {
        state.addresses.sort();
    }
    Ok(table)
}

/// The addresses a path bound as `binding` could send from now; `None` when it can't
/// send at all: its interface is missing or down, has no address of the path's
/// family (link-local IPv6 does not reach a server), or lacks the configured source
/// address.
pub fn usable_addresses(binding: &Binding, table: &LinkTable) -> Option<Vec<IpAddr>> {
    let routable = |ip: &&IpAddr| {
        ip.is_ipv6() == binding.ipv6
            && !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
    };
    match (&binding.interface, binding.source_address) {
        (Some(interface), source) => {
            let link = table.get(interface).filter(|link| link.up)?;
            let addresses: Vec<IpAddr> = link.addresses.iter().filter(routable).copied().collect();
            match source {
                Some(source) if !addresses.contains(&source) => None,
                _ if addresses.is_empty() => None,
                _ => Some(addresses),
            }
        }
        (None, Some(source)) => table
            .values()
            .any(|link| link.up && link.addresses.contains(&source))
            .then(|| vec![source]),
        (None, None) => Some(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(interface: Option<&str>, source: Option<&str>) -> Binding {
        Binding {
            interface: interface.map(str::to_owned),
            source_address: source.map(|s| s.parse().unwrap()),
            port: 0,
            ipv6: false,
            buffer_bytes: crate::config::DEFAULT_SOCKET_BUFFER_BYTES,
        }
    }

    fn table(entries: Links<'_>) -> LinkTable {
        entries
            .iter()
            .map(|(name, up, addresses)| {
                (
                    name.to_string(),
                    LinkState {
                        up: *up,
                        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
                    },
                )
            })
            .collect()
    }

    type Links<'a> = &'a [(&'a str, bool, &'a [&'a str])];

    #[test]
    fn an_interface_path_needs_its_link_up_with_an_address_of_its_family() {
        let path = binding(Some("wwan0"), None);
        let cases: &[(Links<'_>, Option<&[&str]>)] = &[
            (&[("wwan0", true, &["198.18.1.2"])], Some(&["198.18.1.2"])),
            (&[("wwan0", false, &["198.18.1.2"])], None),
            (&[], None),
            (&[("wwan0", true, &[])], None),
            (&[("wwan0", true, &["fe80::1", "2001:db8::2"])], None),
            (&[("wwan1", true, &["198.18.1.2"])], None),
        ];
        for (links, expected) in cases {
            let expected = expected.map(|list| {
                list.iter()
                    .map(|a| a.parse::<IpAddr>().unwrap())
                    .collect::<Vec<_>>()
            });
            assert_eq!(
                usable_addresses(&path, &table(links)),
                expected,
                "{links:?}"
            );
        }
    }

    #[test]
    fn a_source_address_must_still_be_assigned() {
        let on_interface = binding(Some("wwan0"), Some("198.18.1.2"));
        let anywhere = binding(None, Some("198.18.1.2"));
        let moved = table(&[("wwan0", true, &["198.18.5.2"])]);
        assert_eq!(usable_addresses(&on_interface, &moved), None);
        assert_eq!(usable_addresses(&anywhere, &moved), None);
        let present = table(&[("wwan0", true, &["198.18.1.2"])]);
        assert!(usable_addresses(&on_interface, &present).is_some());
        assert!(usable_addresses(&anywhere, &present).is_some());
    }
}
