"""Changing a running tunnel without dropping it: paths added and removed and the
scheduler switched by a reload on SIGHUP, and an uplink whose interface goes down,
comes back and changes address (netlink hotplug), each in the middle of a TCP
transfer that must complete byte-exact over the same session."""

from __future__ import annotations

import re
import signal
import time

from mptund import SERVER_PUBLIC_ADDR, SERVER_TUN_ADDR, DaemonPair, direct_topology
from netns import Testbed

from test_ops import UPLINK_RATE, live, wait_for
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender


def shaped_bed(bed: Testbed, paths: int):
    """`direct_topology` with every uplink shaped (tbf, both directions), so that a
    transfer lasts long enough to change things while it runs."""
    client, server, uplinks = direct_topology(bed, paths)
    for index, uplink in enumerate(uplinks, start=1):
        for ns, interface in ((client, uplink), (server, f"p{index}")):
            ns.run("tc", "qdisc", "add", "dev", interface, "root", "tbf", "rate",
                   UPLINK_RATE, "burst", "32kb", "latency", "50ms")
    return client, server, uplinks


def paths_by_name(report: dict) -> dict[str, dict]:
    return {path["name"]: path for path in report["sessions"][0]["paths"]}


def server_path_from(report: dict, client_address: str) -> dict | None:
    """The server's path whose remote is `client_address` (paths are learned)."""
    for path in report["sessions"][0]["paths"]:
        if path["remote"] and path["remote"].split(":")[0] == client_address:
            return path
    return None


def tx_bytes(ns, interface: str) -> int:
    return int(ns.output("cat", f"/sys/class/net/{interface}/statistics/tx_bytes"))


def path_block(name: str) -> str:
    return f'\n[[path]]\nname = "{name}"\ninterface = "{name}"\n'


def test_reload_adds_and_removes_a_path_during_a_transfer_without_losing_the_flow():
    with Testbed() as bed:
        client_ns, server_ns, uplinks = shaped_bed(bed, 3)
        # Start with up1 and up2; the reload swaps up1 for up3.
        pair = DaemonPair(bed, client_ns, server_ns, uplinks[:2], stats_interval_ms=1000)
        pair.start()
        count = 30_000_000
        rx = start_receiver(server_ns, SERVER_TUN_ADDR, 5301)
        tx = start_sender(client_ns, SERVER_TUN_ADDR, 5301, count, seed=51)
        wait_for(lambda: sum(p["sent_data_packets"] for p in
                             live(pair, "client")["sessions"][0]["paths"]) > 1000,
                 20, "data on the client's paths")
        before = live(pair, "client")
        server_before = live(pair, "server")
        session_id = before["sessions"][0]["local_id"]
        server_session_id = server_before["sessions"][0]["local_id"]
        assert sorted(paths_by_name(before)) == ["up1", "up2"]
        assert before["sessions"][0]["scheduler"] == "round-robin"

        config = pair.workdir / "client.toml"
        text = config.read_text()
        assert path_block("up1") in text
        config.write_text(text.replace(path_block("up1"), "")
                          .replace('name = "round-robin"', 'name = "earliest-arrival"')
                          + path_block("up3"))
        pair.client_proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "new configuration is in effect" in pair.log("client"), 5,
                 "the reload to apply:\n" + pair.log("client"))
        assert tx.poll() is None, "the transfer ended before the reload: make it longer"
        # What was in flight on up1 leaves within a round trip; from then on up1 sends
        # nothing at all.
        time.sleep(0.3)
        up1_tx = tx_bytes(client_ns, "up1")
        server_up1 = server_path_from(live(pair, "server"), "198.18.1.2")
        up1_received_data = server_up1["received_data_packets"]

        sender, receiver = result(tx), result(rx)
        assert_byte_exact(sender, receiver, count)

        after = live(pair, "client")
        server_after = live(pair, "server")
        # The same session on both ends: the inner flow never noticed.
        assert after["sessions"][0]["local_id"] == session_id
        assert server_after["sessions"][0]["local_id"] == server_session_id
        assert after["sessions_established"] == 1 and server_after["sessions_established"] == 1
        assert after["sessions"][0]["scheduler"] == "earliest-arrival"
        assert server_after["sessions"][0]["scheduler"] == "round-robin"
        paths = paths_by_name(after)
        assert sorted(paths) == ["up2", "up3"], paths
        # The added path carried data, as the server saw it too...
        assert paths["up3"]["state"] == "up"
        assert paths["up3"]["sent_data_packets"] > 300, paths["up3"]
        assert server_path_from(server_after, "198.18.3.2")["received_data_packets"] > 300
        # ...and the removed one none: no datagram of ours left the client on up1 (the
        # kernel may still answer the server's last datagrams there with ICMP port
        # unreachable, and ARP goes on; one data datagram alone is ~1.4 kB).
        assert tx_bytes(client_ns, "up1") - up1_tx < 1000
        assert server_path_from(server_after, "198.18.1.2")["received_data_packets"] == \
            up1_received_data
        # Status and metrics label the new path with its interface.
        table = client_ns.output(pair.binary, "status", "--socket", pair.control_socket("client"))
        row = next(line.split() for line in table.splitlines() if line.split()[:1] == ["up3"])
        assert row[1] == "up3", table
        log = pair.log("client")
        assert re.search(r"path added.*path=up3", log), log
        assert re.search(r"path removed.*path=up1", log), log
        pair.stop()


def test_a_reload_that_needs_a_restart_is_refused_whole():
    with Testbed() as bed:
        client_ns, server_ns, uplinks = direct_topology(bed, 2)
        pair = DaemonPair(bed, client_ns, server_ns, uplinks[:1])
        pair.start()
        config = pair.workdir / "client.toml"
        good = config.read_text()
        # A new path and a new TUN MTU: the MTU needs a restart, so neither applies.
        config.write_text(good.replace('name = "mpt0"\n', 'name = "mpt0"\nmtu = 1300\n', 1)
                          + path_block("up2"))
        pair.client_proc.send_signal(signal.SIGHUP)
        refused = wait_for(lambda: [line for line in pair.log("client").splitlines()
                                    if "valid but was not applied" in line], 5, "the refusal")
        assert "tun.mtu" in refused[0] and "restart to apply" in refused[0], refused
        assert sorted(paths_by_name(live(pair, "client"))) == ["up1"]
        ping = client_ns.run("ping", "-c", "3", "-i", "0.2", "-W", "1", SERVER_TUN_ADDR,
                             check=False, capture=True)
        assert ping.returncode == 0, ping.stdout
        pair.stop()


def test_an_uplink_going_down_coming_back_and_changing_address_during_a_transfer():
    with Testbed() as bed:
        client_ns, server_ns, uplinks = shaped_bed(bed, 2)
        pair = DaemonPair(bed, client_ns, server_ns, uplinks, stats_interval_ms=1000)
        pair.start()
        count = 40_000_000
        rx = start_receiver(server_ns, SERVER_TUN_ADDR, 5302)
        tx = start_sender(client_ns, SERVER_TUN_ADDR, 5302, count, seed=52)
        wait_for(lambda: paths_by_name(live(pair, "client"))["up2"]["sent_data_packets"] > 300,
                 20, "data on up2")
        session_id = live(pair, "client")["sessions"][0]["local_id"]

        def up2() -> dict:
            return paths_by_name(live(pair, "client"))["up2"]

        # The interface goes down: the path is down at once, not after timeouts.
        client_ns.run("ip", "link", "set", "up2", "down")
        wait_for(lambda: up2()["state"] == "down", 1, "up2 reported down")
        sent_while_down = up2()["sent_data_packets"]
        time.sleep(1.0)
        assert up2()["state"] == "down"
        assert up2()["sent_data_packets"] == sent_while_down, "data sent on a down interface"

        # It comes back (a modem manager restores the route as well).
        client_ns.run("ip", "link", "set", "up2", "up")
        client_ns.run("ip", "route", "replace", f"{SERVER_PUBLIC_ADDR}/32", "via", "198.18.2.1",
                      "dev", "up2", "metric", "2")
        wait_for(lambda: up2()["state"] == "up", 5, "up2 up again")
        wait_for(lambda: up2()["sent_data_packets"] > sent_while_down + 100, 5,
                 "data on up2 again")
        assert tx.poll() is None, "the transfer ended too early: make it longer"

        # A new address (a modem re-attached): the path reopens from it.
        sent_before_readdress = up2()["sent_data_packets"]
        client_ns.run("ip", "addr", "del", "198.18.2.2/24", "dev", "up2")
        server_ns.run("ip", "addr", "add", "198.18.5.1/24", "dev", "p2")
        client_ns.run("ip", "addr", "add", "198.18.5.2/24", "dev", "up2")
        client_ns.run("ip", "route", "replace", f"{SERVER_PUBLIC_ADDR}/32", "via", "198.18.5.1",
                      "dev", "up2", "metric", "2")
        wait_for(lambda: up2()["sent_data_packets"] > sent_before_readdress + 100, 8,
                 "data on up2 from its new address")
        # The server takes the address once it has validated it: a challenge's round
        # trip, which may come after the client's first hundred packets from there.
        wait_for(lambda: server_path_from(live(pair, "server"), "198.18.5.2"), 3,
                 "the server learning the new address")

        sender, receiver = result(tx), result(rx)
        assert_byte_exact(sender, receiver, count)
        report = live(pair, "client")
        assert report["sessions"][0]["local_id"] == session_id
        assert report["sessions_established"] == 1
        assert paths_by_name(report)["up2"]["state"] == "up"
        log = pair.log("client")
        transitions = re.findall(r"(interface down, gone or without an address|interface "
                                 r"usable again|interface address changed).*?path=(\S+)", log)
        kinds = [kind for kind, name in transitions if name == "up2"]
        assert kinds[:2] == ["interface down, gone or without an address",
                             "interface usable again"], log
        assert len(kinds) >= 3, log
        pair.stop()
