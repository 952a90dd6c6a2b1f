"""Path migration end to end: a server path moves to a new client address only after
the client answered a challenge there, and an address that did not prove itself gets
at most three times the bytes it sent (RFC 9000 sections 8-9)."""

import json
import subprocess
import sys
import time

from mptund import (CLIENT_TUN_ADDR, SERVER_PORT, SERVER_PUBLIC_ADDR, SERVER_TUN_ADDR,
                    DaemonPair, direct_topology)
from netns import Testbed

from conftest import REPO_ROOT
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

SPOOF_COPIES = str(REPO_ROOT / "tests" / "e2e" / "spoof_copies.py")
MEGABYTES_20 = 20_000_000
VICTIM_ADDR = "198.18.50.2"
VICTIM_PORT = 40999
# The attacker copies the client's datagrams whose nonce counter has these low bits
# clear: one in 16. How many cross the attacker's path depends on the scheduler's
# split and the machine's speed; enough copies for the test to mean something:
COPY_MASK = 0x0F
MIN_COPIES = 20


def transfers_both_ways(pair: DaemonPair, count: int, base_port: int):
    up_rx = start_receiver(pair.server_ns, SERVER_TUN_ADDR, base_port)
    down_rx = start_receiver(pair.client_ns, CLIENT_TUN_ADDR, base_port + 1)
    up_tx = start_sender(pair.client_ns, SERVER_TUN_ADDR, base_port, count, seed=1)
    down_tx = start_sender(pair.server_ns, CLIENT_TUN_ADDR, base_port + 1, count, seed=2)
    return (up_tx, up_rx), (down_tx, down_rx)


def server_paths(report: dict) -> list[dict]:
    assert len(report["sessions"]) == 1, report["sessions"]
    return report["sessions"][0]["paths"]


def routed_topology(bed: Testbed):
    """Path 1 through a router whose link to the server is shaped (so datagrams
    queue there), path 2 direct, and a victim host on the server's network:

        client up1 198.18.1.2 -- r1 router r2 198.18.11.1 -- p1 198.18.11.2 server
        client up2 198.18.2.2 -- p2 198.18.2.1 server
        victim v1 198.18.50.2 -- v0 198.18.50.1 server (public 198.18.0.1 on lo)
    """
    client, server = bed.netns("client"), bed.netns("server")
    router, victim = bed.netns("router"), bed.netns("victim")
    server.run("ip", "addr", "add", f"{SERVER_PUBLIC_ADDR}/32", "dev", "lo")
    for ns in (client, server, router, victim):
        ns.sysctl("net.ipv4.conf.all.rp_filter", "2")
        ns.sysctl("net.ipv4.conf.default.rp_filter", "2")
    router.sysctl("net.ipv4.ip_forward", "1")
    bed.veth(client, "up1", router, "r1")
    bed.veth(router, "r2", server, "p1")
    bed.veth(client, "up2", server, "p2")
    bed.veth(server, "v0", victim, "v1")
    client.addr("up1", "198.18.1.2/24")
    router.addr("r1", "198.18.1.1/24")
    router.addr("r2", "198.18.11.1/24")
    server.addr("p1", "198.18.11.2/24")
    client.addr("up2", "198.18.2.2/24")
    server.addr("p2", "198.18.2.1/24")
    server.addr("v0", "198.18.50.1/24")
    victim.addr("v1", f"{VICTIM_ADDR}/24")
    router.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", "198.18.11.2")
    server.run("ip", "route", "add", "198.18.1.0/24", "via", "198.18.11.1")
    victim.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", "198.18.50.1")
    for index, uplink in enumerate(("up1", "up2"), start=1):
        client.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via",
                   f"198.18.{index}.1", "dev", uplink, "metric", str(index))
    router.run("tc", "qdisc", "add", "dev", "r2", "root", "tbf", "rate", "40mbit",
               "burst", "32kb", "latency", "50ms")
    # The daemon sends runs of datagrams with UDP GSO; veth would carry each run whole
    # to the attacker's capture. Split them before the wire, as a modem's link does.
    client.run("ethtool", "-K", "up1", "tx-udp-segmentation", "off")
    return client, server, router, victim, ["up1", "up2"]


def test_spoofed_copies_draw_at_most_three_times_their_bytes_to_the_victim():
    with Testbed() as bed:
        client, server, router, victim, uplinks = routed_topology(bed)
        pair = DaemonPair(bed, client, server, uplinks)
        pair.start()
        attacker = router.popen(
            sys.executable, SPOOF_COPIES, "--capture-interface", "r1",
            "--server", f"{SERVER_PUBLIC_ADDR}:{SERVER_PORT}", "--victim-netns", victim.name,
            "--victim", f"{VICTIM_ADDR}:{VICTIM_PORT}", "--copy-mask", hex(COPY_MASK),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert attacker.stderr.readline().strip() == "capturing"

        (up_tx, up_rx), (down_tx, down_rx) = transfers_both_ways(pair, MEGABYTES_20, 5101)
        assert_byte_exact(result(up_tx), result(up_rx), MEGABYTES_20)
        assert_byte_exact(result(down_tx), result(down_rx), MEGABYTES_20)
        time.sleep(2)  # challenges still due reach the victim, or are abandoned
        out, err = attacker.communicate("stop\n", timeout=30)
        assert attacker.returncode == 0, err
        victim_counts = json.loads(out)
        assert pair.running(), "a daemon died"
        _, report = pair.stop()

    drops = report["drops"]
    paths = server_paths(report)
    print(json.dumps({"victim": victim_counts,
                      "drops": {reason: count for reason, count in drops.items() if count},
                      "paths": [{key: path[key] for key in
                                 ("name", "remote", "validations_started",
                                  "validations_succeeded")} for path in paths]}, indent=1))
    assert victim_counts["copies"] >= MIN_COPIES, victim_counts
    # The anti-amplification limit, measured where it matters: at the victim.
    assert victim_counts["received_bytes"] <= 3 * victim_counts["sent_bytes"], victim_counts
    # No path ever moved to the victim, and the refusals were counted.
    assert sorted(path["remote"].split(":")[0] for path in paths) == [
        "198.18.1.2", "198.18.2.2"]
    # The one validation that succeeded on each path but the handshake's was of
    # its first address, when the path opened.
    first_addresses = sum(path["validations_succeeded"] for path in paths)
    assert all(path["validations_succeeded"] <= 1 for path in paths)
    assert first_addresses == len(paths) - 1
    started = sum(path["validations_started"] for path in paths) - first_addresses
    assert drops["replayed"] > 0
    assert drops["unvalidated_path"] + started > 0
    # Each validation failed (one still running at the stop is not counted yet).
    assert started - len(paths) <= drops["path_validation_failed"] <= started
    # Nothing but challenges went to the victim, at most three per validation.
    assert victim_counts["received"] <= 3 * started


def test_a_real_change_of_the_client_address_mid_transfer_keeps_the_transfer_exact():
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 2)
        # 20 Mbit/s per uplink and direction: the transfers take about 4 s each.
        for index, uplink in enumerate(uplinks, start=1):
            for ns, interface in ((client, uplink), (server, f"p{index}")):
                ns.run("tc", "qdisc", "add", "dev", interface, "root", "tbf", "rate",
                       "20mbit", "burst", "32kb", "latency", "50ms")
        pair = DaemonPair(bed, client, server, uplinks, stats_interval_ms=1000)
        pair.start()
        (up_tx, up_rx), (down_tx, down_rx) = transfers_both_ways(pair, MEGABYTES_20, 5201)
        time.sleep(2.0)
        before = server_paths(pair.snapshot("server"))  # written every second
        # The uplink's address changes, as a modem's does when the operator hands out
        # a new one: the client's datagrams on path 1 come from a new source address
        # (and its socket from a new port), and the old address stops existing.
        client.sysctl("net.ipv4.conf.up1.promote_secondaries", "1")
        client.run("ip", "addr", "add", "198.18.1.3/24", "dev", "up1")
        client.run("ip", "addr", "del", "198.18.1.2/24", "dev", "up1")
        client.run("ip", "route", "replace", f"{SERVER_PUBLIC_ADDR}/32", "via", "198.18.1.1",
                   "dev", "up1", "metric", "1")
        assert all(proc.poll() is None for proc in (up_tx, up_rx, down_tx, down_rx)), \
            "the transfers ended before the address changed"
        up, down = result(up_rx), result(down_rx)
        assert_byte_exact(result(up_tx), up, MEGABYTES_20)
        assert_byte_exact(result(down_tx), down, MEGABYTES_20)
        assert pair.running(), "a daemon died"
        _, report = pair.stop()

    paths = server_paths(report)
    print(json.dumps({"longest_gap_ms": {"up": up.get("longest_gap_ms"),
                                         "down": down.get("longest_gap_ms")},
                      "drops": {reason: count for reason, count in report["drops"].items()
                                if count},
                      "paths": [{key: path[key] for key in
                                 ("name", "remote", "validations_started",
                                  "validations_succeeded", "sent_data_packets",
                                  "received_data_packets")} for path in paths]}, indent=1))
    assert before[0]["remote"].startswith("198.18.1.2:")
    moved = paths[0]
    assert moved["remote"].startswith("198.18.1.3:"), paths
    assert moved["validations_succeeded"] == moved["validations_started"] >= 1
    assert report["drops"]["path_validation_failed"] == 0
    # The moved path carried data both ways after the move.
    assert moved["sent_data_packets"] > before[0]["sent_data_packets"]
    assert moved["received_data_packets"] > before[0]["received_data_packets"]
