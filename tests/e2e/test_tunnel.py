"""The tunnel end to end: two daemons in their own namespaces joined by three veth
pairs (three paths), real TUN devices, real kernel TCP through them."""

import json
import subprocess
import sys
import time

import pytest

from mptund import (CLIENT_TUN_ADDR, CLIENT_TUN_ADDR6, SERVER_PORT, SERVER_PUBLIC_ADDR,
                    SERVER_TUN_ADDR, SERVER_TUN_ADDR6, DaemonPair, direct_topology)
from netns import Testbed

from conftest import REPO_ROOT

TRANSFER = str(REPO_ROOT / "testbed" / "transfer.py")
INJECT = str(REPO_ROOT / "tests" / "e2e" / "inject.py")
MEGABYTES_50 = 50_000_000


@pytest.fixture
def tunnel():
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 3)
        # Three equal paths of 50 Mbit/s each way. Unshaped (or fast enough for bursts
        # of a millisecond to exceed ten datagrams), a path's pacing rate and burst
        # follow what it happened to carry, and round-robin, which skips a path its
        # pacer holds back, would not stripe evenly.
        for index, uplink in enumerate(uplinks, start=1):
            for ns, interface in ((client, uplink), (server, f"p{index}")):
                ns.run("tc", "qdisc", "add", "dev", interface, "root", "tbf", "rate", "50mbit",
                       "burst", "32kb", "latency", "20ms")
        pair = DaemonPair(bed, client, server, uplinks)
        pair.start()
        yield pair


def start_receiver(ns, address: str, port: int) -> subprocess.Popen:
    proc = ns.popen(sys.executable, TRANSFER, "recv", "--listen", f"{address}:{port}",
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr.readline().strip() == "listening"
    return proc


def start_sender(ns, address: str, port: int, count: int, seed: int,
                 max_rate_mbit: float | None = None) -> subprocess.Popen:
    pacing = ["--max-rate-mbit", str(max_rate_mbit)] if max_rate_mbit else []
    return ns.popen(sys.executable, TRANSFER, "send", "--to", f"{address}:{port}",
                    "--bytes", str(count), "--seed", str(seed), *pacing,
                    stdout=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"transfer process failed: {out}"
    return json.loads(out)


def assert_byte_exact(sender: dict, receiver: dict, count: int) -> None:
    assert sender["bytes"] == count
    assert receiver["bytes"] == count
    assert receiver["sha256"] == sender["sha256"]


def transfers_both_ways(pair: DaemonPair, count: int, base_port: int = 5001):
    """50 MB client->server and 50 MB server->client at the same time."""
    up_rx = start_receiver(pair.server_ns, SERVER_TUN_ADDR, base_port)
    down_rx = start_receiver(pair.client_ns, CLIENT_TUN_ADDR, base_port + 1)
    up_tx = start_sender(pair.client_ns, SERVER_TUN_ADDR, base_port, count, seed=1)
    down_tx = start_sender(pair.server_ns, CLIENT_TUN_ADDR, base_port + 1, count, seed=2)
    return (up_tx, up_rx), (down_tx, down_rx)


def test_fifty_megabytes_each_way_over_three_paths(tunnel):
    (up_tx, up_rx), (down_tx, down_rx) = transfers_both_ways(tunnel, MEGABYTES_50)
    assert_byte_exact(result(up_tx), result(up_rx), MEGABYTES_50)
    assert_byte_exact(result(down_tx), result(down_rx), MEGABYTES_50)
    client, server = tunnel.stop()

    client_paths = client["sessions"][0]["paths"]
    server_paths = server["sessions"][0]["paths"]
    assert [p["name"] for p in client_paths] == ["up1", "up2", "up3"]
    assert len(server_paths) == 3
    # Round-robin striping: every path carried about a third of the data, both ways.
    # Round-robin skips a path whose window is full, and on a loaded 2-core machine a
    # path's acknowledgements sometimes come late enough for that (one run of the
    # suite: 85 % of a third), so three quarters of a third is the floor.
    packets = MEGABYTES_50 // 1400
    for path in client_paths + server_paths:
        assert path["state"] == "up"
        assert path["sent_data_packets"] > packets / 3 * 0.75, path
        assert path["received_data_packets"] > packets / 3 * 0.75, path
    # The server reached each client path at that uplink's own address.
    assert sorted(p["remote"].split(":")[0] for p in server_paths) == [
        "198.18.1.2", "198.18.2.2", "198.18.3.2"]
    for report in (client, server):
        for reason in ("authentication_failed", "replayed", "malformed", "invalid_inner_packet",
                       "oversize", "send_failed", "tun_write_failed"):
            assert report["drops"][reason] == 0, (reason, report["drops"])


@pytest.mark.parametrize("cipher", ["chacha20-poly1305", "aes-256-gcm"])
def test_either_cipher_carries_a_transfer_and_both_ends_use_it(cipher):
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 2)
        pair = DaemonPair(bed, client, server, uplinks, cipher=cipher)
        pair.start()
        count = 5_000_000
        rx = start_receiver(server, SERVER_TUN_ADDR, 5021)
        tx = start_sender(client, SERVER_TUN_ADDR, 5021, count, seed=21)
        assert_byte_exact(result(tx), result(rx), count)
        client_report, server_report = pair.stop()
        assert [s["cipher"] for s in client_report["sessions"]] == [cipher]
        assert [s["cipher"] for s in server_report["sessions"]] == [cipher]
        for report in (client_report, server_report):
            assert report["drops"]["authentication_failed"] == 0, report["drops"]


def test_inner_ipv6(tunnel):
    count = 5_000_000
    rx = start_receiver(tunnel.server_ns, f"[{SERVER_TUN_ADDR6}]", 5003)
    tx = start_sender(tunnel.client_ns, f"[{SERVER_TUN_ADDR6}]", 5003, count, seed=3)
    assert_byte_exact(result(tx), result(rx), count)


def test_bad_input_is_dropped_and_counted_while_a_transfer_runs(tunnel):
    server_public = subprocess.run([tunnel.binary, "pubkey"], check=True, capture_output=True,
                                   text=True, input=(tunnel.workdir / "server.key").read_text()
                                   ).stdout.strip()
    # The injector captures the transfer's first datagrams and fires right away, so
    # the hostile input lands in the middle of the transfer.
    injector = tunnel.server_ns.popen(
        sys.executable, INJECT, "--server", f"{SERVER_PUBLIC_ADDR}:{SERVER_PORT}",
        "--capture-interface", "p1", "--server-public-key", server_public, "--each", "3",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert injector.stderr.readline().strip() == "capturing"
    (up_tx, up_rx), (down_tx, down_rx) = transfers_both_ways(tunnel, MEGABYTES_50, base_port=5011)
    out, err = injector.communicate(timeout=60)
    assert injector.returncode == 0, err
    injected = json.loads(out)
    sent = injected["sent"]
    assert injected["answer_bytes"] == 0, "the server answered unauthenticated input"

    assert_byte_exact(result(up_tx), result(up_rx), MEGABYTES_50)
    assert_byte_exact(result(down_tx), result(down_rx), MEGABYTES_50)
    assert tunnel.running(), "a daemon died"
    _, server = tunnel.stop()
    drops = server["drops"]
    assert drops["replayed"] == sent["replayed"]
    assert drops["authentication_failed"] == sent["forged"]
    assert drops["malformed"] == sent["truncated"] + sent["random"]
    assert drops["handshake_rejected"] == sent["bad_mac_init"] + sent["garbage_noise_init"]
    assert drops["oversize"] == sent["oversize"]
    # The replays came from another address: the paths still point at the client.
    assert sorted(p["remote"].split(":")[0] for p in server["sessions"][0]["paths"]) == [
        "198.18.1.2", "198.18.2.2", "198.18.3.2"]


def test_a_captured_init_with_a_rewritten_path_id_does_not_take_down_a_fresh_server():
    """The remote crash: a genuine init, replayed to a freshly started server (which has
    no memory of its timestamp) with path id 64, 200 or 255 and mac1 recomputed."""
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 1)
        pair = DaemonPair(bed, client, server, uplinks)
        pair.write_configs()
        server_public = subprocess.run([pair.binary, "pubkey"], check=True, capture_output=True,
                                       text=True, input=(pair.workdir / "server.key").read_text()
                                       ).stdout.strip()
        injector = server.popen(
            sys.executable, INJECT, "--server", f"{SERVER_PUBLIC_ADDR}:{SERVER_PORT}",
            "--capture-interface", "p1", "--server-public-key", server_public,
            "--rewrite-init-path-ids", "64", "200", "255",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert injector.stderr.readline().strip() == "capturing"
        pair.start_server()
        pair.start_client()
        pair.wait_established(15)
        assert injector.stderr.readline().strip() == "captured"
        pair.stop()

        pair.start_server()
        deadline = time.monotonic() + 10
        while f":{SERVER_PORT}" not in server.output("ss", "-Hlun"):
            assert time.monotonic() < deadline, "the restarted server never listened"
            time.sleep(0.05)
        out, err = injector.communicate("fire\n", timeout=30)
        assert injector.returncode == 0, err
        assert json.loads(out) == {"sent": 3, "answer_bytes": 0}
        time.sleep(0.2)
        assert pair.server_proc.poll() is None, f"the server died:\n{pair.log('server')}"

        pair.start_client()
        pair.wait_established(15)
        _, report = pair.stop()
        assert report["drops"]["handshake_rejected"] == 3
        assert report["sessions_established"] == 1


def test_config_mistake_names_file_line_and_field(tmp_path):
    from mptund import mptund_binary
    broken = tmp_path / "client.toml"
    broken.write_text('mode = "client"\nprivate_key_file = "k"\n[tun]\nname = "t0"\n'
                      'addresses = ["198.18.100.2/24"]\nmtux = 1400\n')
    check = subprocess.run([mptund_binary(), "check-config", broken], capture_output=True,
                           text=True)
    assert check.returncode != 0
    assert "client.toml:6" in check.stderr
    assert "mtux" in check.stderr and "mtu" in check.stderr


def test_daemon_exits_cleanly_and_removes_its_tun(tunnel):
    tunnel.stop()
    links = tunnel.client_ns.output("ip", "-o", "link")
    assert "mpt0" not in links
    time.sleep(0.1)


def test_a_full_path_socket_holds_up_neither_the_other_path_nor_the_tun():
    """A modem stalls while its interface stays up: mid-transfer one uplink stops
    draining into a queue that never drops, so what the path had in flight fills its
    64 KiB socket buffer, and its datagrams wait there until the path is declared down
    and they are re-sent on the other. The other path, shaped to 20 Mbit/s, must go on
    at its rate meanwhile: an I/O loop that waited for the full socket stalled it."""
    count = 30_000_000
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 2)
        for uplink in uplinks:
            client.run("tc", "qdisc", "add", "dev", uplink, "root", "tbf", "rate", "20mbit",
                       "burst", "32kb", "latency", "200ms")
        pair = DaemonPair(bed, client, server, uplinks, scheduler=None, hold_ms=None,
                          congestion_controller="cubic",
                          path_settings={1: {"socket_buffer_bytes": 65536}})
        pair.start()
        receiver = start_receiver(server, SERVER_TUN_ADDR, 5201)
        started = time.monotonic()
        sender = start_sender(client, SERVER_TUN_ADDR, 5201, count, seed=5)
        time.sleep(2)
        client.run("tc", "qdisc", "change", "dev", uplinks[1], "root", "tbf", "rate", "8bit",
                   "burst", "1600", "limit", "64mb")
        sent, received = result(sender), result(receiver)
        elapsed = time.monotonic() - started
        assert_byte_exact(sent, received, count)
        client_report, _ = pair.stop()
    paths = {p["name"]: p for p in client_report["sessions"][0]["paths"]}
    # The stall really happened: the stalled path's socket was full.
    assert paths[uplinks[1]]["socket_full"] > 0, paths[uplinks[1]]
    # The flow kept at least half of the remaining path's 20 Mbit/s.
    mbit = count * 8 / elapsed / 1e6
    assert mbit > 10, f"{mbit:.1f} Mbit/s in {elapsed:.1f} s; paths {paths}"
