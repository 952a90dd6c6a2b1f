"""Running mptund in production: Prometheus metrics, the control socket and
`mptund status`, the systemd unit and its notifications, reload on SIGHUP, graceful
shutdown, and one server carrying several clients."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mptund import (CLIENT_TUN_ADDR, SERVER_PORT, SERVER_PUBLIC_ADDR, SERVER_TUN_ADDR,
                    DaemonPair, direct_topology, mptund_binary)
from netns import Testbed

from conftest import REPO_ROOT
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

METRICS_PORT = 9477
UNIT_FILE = REPO_ROOT / "deploy" / "systemd" / "mptund@.service"
# What the metrics test compares: the path counters of the report and their metric.
PATH_COUNTERS = {
    "sent_packets": "mptund_path_sent_packets_total",
    "sent_bytes": "mptund_path_sent_bytes_total",
    "sent_data_packets": "mptund_path_sent_data_packets_total",
    "received_packets": "mptund_path_received_packets_total",
    "received_bytes": "mptund_path_received_bytes_total",
    "received_data_packets": "mptund_path_received_data_packets_total",
    "lost_packets": "mptund_path_lost_packets_total",
    "send_errors": "mptund_path_send_errors_total",
    "socket_full": "mptund_path_socket_full_total",
    "reinjected_away": "mptund_path_reinjected_packets_total",
    "share_floor_packets": "mptund_path_share_floor_packets_total",
    "validations_started": "mptund_path_validations_started_total",
    "validations_succeeded": "mptund_path_validations_succeeded_total",
}


# Each uplink shaped (tbf, both directions) so that a transfer lasts long enough
# to be observed while it runs: 3 x 20 Mbit/s carry 20 MB in about 3 s.
UPLINK_RATE = "20mbit"


def shape(ns, interface: str) -> None:
    ns.run("tc", "qdisc", "add", "dev", interface, "root", "tbf", "rate", UPLINK_RATE,
           "burst", "32kb", "latency", "50ms")


def shape_uplinks(client, server, uplinks: list[str]) -> None:
    """Both ends of every uplink of `direct_topology` (up<i> and p<i>)."""
    for index, uplink in enumerate(uplinks, start=1):
        shape(client, uplink)
        shape(server, f"p{index}")


@pytest.fixture
def tunnel():
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 3)
        shape_uplinks(client, server, uplinks)
        pair = DaemonPair(bed, client, server, uplinks, metrics_port=METRICS_PORT,
                          stats_interval_ms=1000)
        pair.start()
        yield pair


# ---- helpers ------------------------------------------------------------------------

SCRAPE = """
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"Accept": sys.argv[2]})
with urllib.request.urlopen(request, timeout=10) as response:
    sys.stderr.write(response.headers["Content-Type"] + "\\n")
    sys.stdout.write(response.read().decode())
"""


def scrape(ns, openmetrics: bool = False) -> tuple[str, str]:
    """GET /metrics from inside the namespace: (content type, body)."""
    accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    done = ns.run(sys.executable, "-c", SCRAPE, f"http://127.0.0.1:{METRICS_PORT}/metrics",
                  accept, capture=True)
    return done.stderr.strip(), done.stdout


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a classic text exposition, parsed by the reference client's
    parser, keyed by (sample name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def status(pair: DaemonPair, side: str, *args: str) -> str:
    ns = pair.client_ns if side == "client" else pair.server_ns
    return ns.output(pair.binary, "status", "--socket", pair.control_socket(side), *args)


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/setup.sh installs the prometheus package"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
    assert check.returncode == 0, f"promtool: {check.stdout}{check.stderr}"


def live(pair: DaemonPair, side: str) -> dict:
    """The daemon's report now, from its control socket."""
    return json.loads(status(pair, side, "--json"))


def data_flowing(pair: DaemonPair, side: str) -> bool:
    sessions = live(pair, side)["sessions"]
    return bool(sessions) and sum(p["received_data_packets"] for p in sessions[0]["paths"]) > 300


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ---- metrics and status ------------------------------------------------------------

def test_metrics_parse_during_a_transfer_and_match_the_daemons_counts(tunnel):
    count = 20_000_000
    up_rx = start_receiver(tunnel.server_ns, SERVER_TUN_ADDR, 5101)
    up_tx = start_sender(tunnel.client_ns, SERVER_TUN_ADDR, 5101, count, seed=11)
    # During the transfer: both formats parse with real parsers.
    wait_for(lambda: data_flowing(tunnel, "server"), 20, "data on the server")
    for ns in (tunnel.client_ns, tunnel.server_ns):
        content_type, classic = scrape(ns)
        assert content_type.startswith("text/plain; version=0.0.4")
        promtool_check(classic)
        content_type, openmetrics = scrape(ns, openmetrics=True)
        assert content_type.startswith("application/openmetrics-text")
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
        names = {family.name for family in text_string_to_metric_families(openmetrics)}
        assert {"mptund_path_rtt_seconds", "mptund_path_sent_bytes", "mptund_dropped_packets",
                "mptund_reorder_buffered_packets", "mptund_sessions"} <= names
    during = samples(scrape(tunnel.client_ns)[1])
    assert up_tx.poll() is None, "the transfer ended before the scrapes: make it longer"
    for uplink in tunnel.uplinks:
        labels = frozenset({"peer": "server", "path": uplink, "interface": uplink}.items())
        assert during[("mptund_path_state", labels | {("state", "up")})] == 1
        assert during[("mptund_path_sent_data_packets_total", labels)] > 0
        assert 0 < during[("mptund_path_rtt_seconds", labels)] < 1
        assert during[("mptund_path_cwnd_bytes", labels)] > 0
    assert_byte_exact(result(up_tx), result(up_rx), count)

    # Quiescent: with the client gone without a goodbye, the server sends nothing on
    # its own (only clients probe), so its counters stand still and must equal its
    # own report exactly.
    tunnel.bed.stop_process(tunnel.client_proc, sig=signal.SIGKILL)
    time.sleep(1.0)
    metrics = samples(scrape(tunnel.server_ns)[1])
    report = json.loads(status(tunnel, "server", "--json"))
    assert metrics[("mptund_sessions", frozenset())] == len(report["sessions"]) == 1
    assert metrics[("mptund_sessions_established_total", frozenset())] == \
        report["sessions_established"]
    assert metrics[("mptund_cookie_replies_sent_total", frozenset())] == \
        report["cookie_replies_sent"]
    for reason, value in report["drops"].items():
        assert metrics[("mptund_dropped_packets_total", frozenset({("reason", reason)}))] == value
    session = report["sessions"][0]
    received = 0
    for path in session["paths"]:
        labels = frozenset({"peer": "client", "path": path["name"], "interface": ""}.items())
        for field, metric in PATH_COUNTERS.items():
            assert metrics[(metric, labels)] == path[field], (path["name"], field)
        assert metrics[("mptund_path_cwnd_bytes", labels)] == path["cwnd_bytes"]
        received += path["received_bytes"]
    peer = frozenset({("peer", "client")})
    assert metrics[("mptund_reorder_released_in_order_packets_total", peer)] == \
        session["reorder"]["released_in_order"]
    assert metrics[("mptund_reorder_duplicate_packets_total", peer)] == \
        session["reorder"]["duplicates"]
    assert metrics[("mptund_session_reinjected_packets_total", peer)] == session["reinjected"]
    assert metrics[("mptund_session_capacity_sharing", peer)] == int(session["capacity_sharing"])
    # Real figures: the server received at least the transfer's bytes.
    assert received > count


def test_status_table_and_json_during_a_transfer(tunnel):
    count = 20_000_000
    down_rx = start_receiver(tunnel.client_ns, CLIENT_TUN_ADDR, 5102)
    down_tx = start_sender(tunnel.server_ns, CLIENT_TUN_ADDR, 5102, count, seed=12)
    wait_for(lambda: data_flowing(tunnel, "client"), 20, "data on the client")
    first = json.loads(status(tunnel, "client", "--json"))
    table = status(tunnel, "client")
    dump = [line.split("\t") for line in status(tunnel, "client", "--dump").splitlines()]
    second = json.loads(status(tunnel, "client", "--json"))
    assert down_tx.poll() is None, "the transfer ended before the status calls: make it longer"
    assert_byte_exact(result(down_tx), result(down_rx), count)

    assert first["role"] == "client" and len(first["sessions"]) == 1
    paths = first["sessions"][0]["paths"]
    assert [p["name"] for p in paths] == tunnel.uplinks
    later = {p["name"]: p for p in second["sessions"][0]["paths"]}
    for path in paths:
        assert path["state"] == "up"
        assert path["received_data_packets"] > 0
        assert later[path["name"]]["received_bytes"] >= path["received_bytes"]
    assert sum(p["received_bytes"] for p in later.values()) > \
        sum(p["received_bytes"] for p in paths), "counters did not move during the transfer"

    # --dump: one line per path, columns as `mptund status --help` names them, the
    # counters between the two JSON reports taken around it.
    assert [row[2] for row in dump] == tunnel.uplinks, dump
    before = {p["name"]: p for p in paths}
    for row in dump:
        assert len(row) == 18, row
        peer, session, name, interface, state = row[:5]
        assert peer == "server" and int(session, 16) == first["sessions"][0]["local_id"]
        assert interface == name and state == "up", row
        assert 0 < float(row[6]) < 1000 and int(row[8]) > 0, row  # rtt_ms, cwnd_bytes
        received_bytes = int(row[17])
        assert before[name]["received_bytes"] <= received_bytes <= later[name]["received_bytes"]

    lines = table.splitlines()
    assert lines[0] == "client: 1 session up, 1 established since start", table
    header = next(line for line in lines if line.split()[:3] == ["path", "interface", "state"])
    for column in ("rtt", "cwnd", "in flight", "send rate", "delivery", "loss", "sent",
                   "received"):
        assert column in header, column
    shares = next(line for line in lines if line.strip().startswith("capacity shares:"))
    assert re.fullmatch(r"  capacity shares: (on|off), packets placed by the floors: .+", shares)
    for uplink in tunnel.uplinks:
        assert re.search(rf"\b{uplink} \d+", shares), shares
    for uplink in tunnel.uplinks:
        row = next(line for line in lines if line.split()[:1] == [uplink])
        cells = row.split()
        assert cells[1] == uplink and cells[2] == "up", row
        assert re.search(r"\d+ pkt \d+(\.\d)? (B|KiB|MiB)", row), row
        assert "Mbit/s" in row and " ms" in row, row
    # Through --config as well: the socket named in the file.
    by_config = tunnel.server_ns.output(tunnel.binary, "status", "--config",
                                        tunnel.workdir / "server.toml")
    assert by_config.startswith("server: 1 session up")
    bad = subprocess.run([tunnel.binary, "status", "--socket", tunnel.workdir / "nothing.sock"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "nothing.sock" in bad.stderr and "running" in bad.stderr
    mode = os.stat(tunnel.control_socket("client")).st_mode & 0o777
    assert mode == 0o600, oct(mode)


# ---- state directory ---------------------------------------------------------------

def test_the_client_keeps_its_handshake_timestamp_ceiling_across_a_restart():
    with Testbed() as bed:
        client_ns, server_ns, uplinks = direct_topology(bed, 1)
        pair = DaemonPair(bed, client_ns, server_ns, uplinks)
        client_config, _ = pair.write_configs()
        state = pair.workdir / "state"
        state.mkdir(mode=0o700)
        client_config.write_text(client_config.read_text().replace(
            'private_key_file = "client.key"\n',
            f'private_key_file = "client.key"\nstate_directory = "{state}"\n', 1))
        before = time.time_ns()
        pair.start_server()
        pair.start_client()
        pair.wait_established(15)
        stored = state / "client.handshake-timestamp"
        first = int(stored.read_text())
        # Stored before the first init went out: its timestamp plus a minute.
        assert before + 59 * 10**9 < first < time.time_ns() + 61 * 10**9, (before, first)
        assert stat_mode(stored) == 0o600
        assert sorted(p.name for p in state.iterdir()) == ["client.handshake-timestamp"]
        # A restart goes on above the stored ceiling, whatever the clock says, and
        # stores a higher one before its first init.
        bed.stop_process(pair.client_proc)
        pair.client_log.close()
        pair.start_client()
        pair.wait_established(15)
        second = int(stored.read_text())
        assert second >= first + 60 * 10**9, (first, second)
        assert "handshake timestamps are kept across restarts" in pair.log("client")
        pair.stop()


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


# ---- systemd -----------------------------------------------------------------------

def test_unit_file_passes_systemd_analyze_verify(tmp_path):
    text = UNIT_FILE.read_text()
    for directive in ("Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID",
                      "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                      "PrivateTmp=yes", "CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW",
                      "AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW",
                      "DeviceAllow=/dev/net/tun", "RuntimeDirectory=mptund",
                      "StateDirectory=mptund", "After=time-sync.target",
                      "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"):
        assert directive in text, directive
    # time-sync.target is passive: pulled in by the time service, only ordered after.
    assert "Wants=time-sync.target" not in text
    # verify wants the programs in ExecStart to exist: the test copy runs the
    # workspace's binary and reads its configuration from the temporary directory.
    binary = mptund_binary()
    assert "/usr/bin/mptund" in text
    copy = (text.replace("/usr/bin/mptund", str(binary))
            .replace("/etc/mptund/", f"{tmp_path}/"))
    (tmp_path / "mptund@test.service").write_text(copy)
    (tmp_path / "test.toml").write_text((REPO_ROOT / "config" / "server.toml").read_text())
    verify = subprocess.run(["systemd-analyze", "verify", "mptund@test.service"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "mptund@test.service" not in verify.stderr, verify.stderr


class NotifySocket:
    """A fake systemd: an AF_UNIX datagram socket collecting sd_notify messages, each
    with the time it arrived and whatever `on_message` returns for it."""

    def __init__(self, path: Path, on_message=lambda message: None):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str, object]] = []
        self.on_message = on_message
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            text = data.decode()
            self.messages.append((time.monotonic(), text, self.on_message(text)))

    def with_line(self, line: str) -> list[tuple[float, str, object]]:
        return [m for m in self.messages if line in m[1].splitlines()]

    def close(self):
        self._stop = True
        self.thread.join()
        self.sock.close()


def start_daemon(ns, pair: DaemonPair, side: str, env: dict) -> subprocess.Popen:
    log = open(pair.workdir / f"{side}.log", "w")
    setattr(pair, f"{side}_log", log)
    proc = ns.popen(pair.binary, "run", "--config", pair.workdir / f"{side}.toml",
                    "--stats-file", pair.workdir / f"{side}-stats.json",
                    stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    setattr(pair, f"{side}_proc", proc)
    return proc


def test_systemd_notifications_and_graceful_shutdown(tmp_path):
    with Testbed() as bed:
        client_ns, server_ns, uplinks = direct_topology(bed, 2)
        pair = DaemonPair(bed, client_ns, server_ns, uplinks)
        pair.write_configs()

        def tun_exists(message: str):
            if "READY=1" in message.splitlines():
                links = server_ns.run("ip", "-o", "link", "show", "mpt0", check=False,
                                      capture=True)
                return links.returncode == 0
            return None

        notify = NotifySocket(tmp_path / "notify.sock", tun_exists)
        try:
            server = start_daemon(server_ns, pair, "server", {
                "NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000",
                "MPTUND_LOG": "info"})
            ready = wait_for(lambda: notify.with_line("READY=1"), 10, "READY=1")
            assert ready[0][2] is True, "READY=1 came before the TUN existed"
            start_daemon(client_ns, pair, "client", {"MPTUND_LOG": "info"})
            pair.wait_established(15)

            # WATCHDOG_USEC=400 ms: a ping every 200 ms from the event loop.
            time.sleep(1.5)
            pings = [at for at, _, _ in notify.with_line("WATCHDOG=1") if at > ready[0][0]]
            assert len(pings) >= 5, notify.messages
            gaps = [b - a for a, b in zip(pings, pings[1:])]
            assert max(gaps) < 0.4, gaps

            # SIGHUP with an unchanged file: RELOADING=1, then READY=1 again.
            readies = len(notify.with_line("READY=1"))
            server.send_signal(signal.SIGHUP)
            wait_for(lambda: len(notify.with_line("READY=1")) > readies, 5, "READY=1 after reload")
            reloading = notify.with_line("RELOADING=1")
            assert reloading and any(line.startswith("MONOTONIC_USEC=")
                                     for line in reloading[0][1].splitlines())
            assert reloading[0][0] <= notify.with_line("READY=1")[-1][0]
            assert "configuration is valid and unchanged" in pair.log("server")

            # The client goes first and says goodbye: the server hears it.
            assert bed.stop_process(pair.client_proc) == 0
            wait_for(lambda: "client closed the session" in pair.log("server"), 5,
                     "the server to hear the client's goodbye")
            assert "mpt0" not in client_ns.output("ip", "-o", "link")

            assert bed.stop_process(server) == 0, pair.log("server")
            stopping = notify.with_line("STOPPING=1")
            assert stopping, notify.messages
            assert "mpt0" not in server_ns.output("ip", "-o", "link")
            report = json.loads((pair.workdir / "server-stats.json").read_text())
            assert report["sessions_established"] == 1
        finally:
            notify.close()
            for handle in (getattr(pair, "client_log", None), getattr(pair, "server_log", None)):
                if handle:
                    handle.close()


def test_broken_reload_is_refused_and_forwarding_goes_on(tunnel):
    config = tunnel.workdir / "server.toml"
    good = config.read_text()
    count = 20_000_000
    up_rx = start_receiver(tunnel.server_ns, SERVER_TUN_ADDR, 5103)
    up_tx = start_sender(tunnel.client_ns, SERVER_TUN_ADDR, 5103, count, seed=13)
    wait_for(lambda: data_flowing(tunnel, "server"), 20, "data on the server")
    # A typo on line 3, in the middle of the transfer.
    config.write_text(good.replace('listen = "0.0.0.0', 'listen = "0.0.0.O', 1))
    tunnel.server_proc.send_signal(signal.SIGHUP)
    refused = wait_for(lambda: [line for line in tunnel.log("server").splitlines()
                                if "reload refused" in line], 5, "the refusal")
    assert "server.toml:3:" in refused[0] and "listen" in refused[0], refused
    assert "running configuration stays in effect" in refused[0], refused
    assert tunnel.running()
    assert up_tx.poll() is None, "the transfer ended before the reload: make it longer"
    received_at_refusal = sum(p["received_bytes"] for p in live(tunnel, "server")["sessions"][0]["paths"])
    assert_byte_exact(result(up_tx), result(up_rx), count)
    after = sum(p["received_bytes"] for p in live(tunnel, "server")["sessions"][0]["paths"])
    assert after > received_at_refusal + count / 4, "little was forwarded after the reload"

    # A valid file whose change needs a restart is not applied, and the daemon says so.
    config.write_text(good.replace("stats_interval_ms = 1000", "stats_interval_ms = 2000")
                      .replace('name = "mpt0"\n', 'name = "mpt0"\nmtu = 1300\n', 1))
    tunnel.server_proc.send_signal(signal.SIGHUP)
    not_applied = wait_for(lambda: [line for line in tunnel.log("server").splitlines()
                                    if "valid but was not applied" in line], 5, "the answer")
    assert "tun.mtu" in not_applied[0] and "restart to apply" in not_applied[0], not_applied
    # Without the MTU, the same change applies live.
    config.write_text(good.replace("stats_interval_ms = 1000", "stats_interval_ms = 2000"))
    tunnel.server_proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "new configuration is in effect" in tunnel.log("server"), 5,
             "the reload to apply")
    ping = tunnel.client_ns.run("ping", "-c", "3", "-i", "0.2", "-W", "1", SERVER_TUN_ADDR,
                                check=False, capture=True)
    assert ping.returncode == 0, ping.stdout
    tunnel.stop()


# ---- several clients ---------------------------------------------------------------

def two_client_bed(bed: Testbed, workdir: Path):
    """One server, two clients (a: 2 uplinks, b: 1 uplink, each shaped to
    UPLINK_RATE), each with its own key and tunnel address. Returns (binary, server ns, {name: (ns, tunnel address)})."""
    binary = mptund_binary()
    server = bed.netns("server")
    server.run("ip", "addr", "add", f"{SERVER_PUBLIC_ADDR}/32", "dev", "lo")
    server.sysctl("net.ipv4.conf.all.rp_filter", "2")
    server.sysctl("net.ipv4.conf.default.rp_filter", "2")

    def keypair(name):
        private = subprocess.run([binary, "genkey"], check=True, capture_output=True,
                                 text=True).stdout
        (workdir / f"{name}.key").write_text(private)
        (workdir / f"{name}.key").chmod(0o600)
        return subprocess.run([binary, "pubkey"], input=private, check=True,
                              capture_output=True, text=True).stdout.strip()

    server_pub = keypair("server")
    clients = {}
    peers = ""
    subnet = 1
    for name, address, uplinks in (("a", "198.18.100.2", 2), ("b", "198.18.100.3", 1)):
        ns = bed.netns(name)
        ns.sysctl("net.ipv4.conf.all.rp_filter", "2")
        ns.sysctl("net.ipv4.conf.default.rp_filter", "2")
        paths = ""
        for i in range(uplinks):
            up, down = f"up{i + 1}", f"{name}{i + 1}"
            bed.veth(ns, up, server, down)
            shape(ns, up)
            shape(server, down)
            ns.addr(up, f"198.18.{subnet}.2/24")
            server.addr(down, f"198.18.{subnet}.1/24")
            ns.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", f"198.18.{subnet}.1",
                   "dev", up, "metric", str(i + 1))
            paths += f'\n[[path]]\nname = "{up}"\ninterface = "{up}"\n'
            subnet += 1
        public = keypair(name)
        (workdir / f"{name}.toml").write_text(
            f'mode = "client"\nprivate_key_file = "{name}.key"\n'
            f'\n[tun]\nname = "mpt0"\naddresses = ["{address}/24"]\n'
            f'\n[server]\nendpoint = "{SERVER_PUBLIC_ADDR}:{SERVER_PORT}"\n'
            f'public_key = "{server_pub}"\n' + paths
            + f'\n[log]\nstats_interval_ms = 1000\n'
            f'\n[control]\nsocket = "{workdir}/{name}.sock"\n')
        peers += (f'\n[[peer]]\nname = "{name}"\npublic_key = "{public}"\n'
                  f'allowed_ips = ["{address}/32"]\n')
        clients[name] = (ns, address)
    (workdir / "server.toml").write_text(
        f'mode = "server"\nprivate_key_file = "server.key"\nlisten = "0.0.0.0:{SERVER_PORT}"\n'
        f'\n[tun]\nname = "mpt0"\naddresses = ["{SERVER_TUN_ADDR}/24"]\n' + peers
        + f'\n[log]\nstats_interval_ms = 1000\n'
        f'\n[control]\nsocket = "{workdir}/server.sock"\n')
    return binary, server, clients


def test_two_clients_through_one_server_are_byte_exact_and_isolated():
    with Testbed() as bed:
        workdir = bed.scratch_dir("mptund-two-")
        binary, server, clients = two_client_bed(bed, workdir)
        logs, procs = {}, {}
        for name, ns in (("server", server), ("a", clients["a"][0]), ("b", clients["b"][0])):
            logs[name] = open(workdir / f"{name}.log", "w")
            procs[name] = ns.popen(binary, "run", "--config", workdir / f"{name}.toml",
                                   "--stats-file", workdir / f"{name}-stats.json",
                                   stdout=logs[name], stderr=subprocess.STDOUT)
        try:
            for name in ("a", "b"):
                ns, _ = clients[name]
                wait_for(lambda: ns.run("ping", "-c1", "-W1", SERVER_TUN_ADDR, check=False,
                                        capture=True).returncode == 0, 15, f"client {name}")

            # Different sizes each way, so the server's per-session counters show
            # whose bytes went where.
            sizes = {"a": (4_000_000, 3_000_000), "b": (10_000_000, 8_000_000)}
            transfers = []
            for index, name in enumerate(("a", "b")):
                ns, address = clients[name]
                down, up = sizes[name]
                down_rx = start_receiver(ns, address, 5201 + index)
                up_rx = start_receiver(server, SERVER_TUN_ADDR, 5211 + index)
                transfers.append((name, "down", down,
                                  start_sender(server, address, 5201 + index, down, seed=21 + index),
                                  down_rx))
                transfers.append((name, "up", up,
                                  start_sender(ns, SERVER_TUN_ADDR, 5211 + index, up, seed=31 + index),
                                  up_rx))
            for name, direction, count, tx, rx in transfers:
                assert_byte_exact(result(tx), result(rx), count)

            report = json.loads(server.output(binary, "status", "--socket",
                                              workdir / "server.sock", "--json"))
            sessions = {s["peer"]: s for s in report["sessions"]}
            assert sorted(sessions) == ["a", "b"]
            assert len(sessions["a"]["paths"]) == 2 and len(sessions["b"]["paths"]) == 1
            for name in ("a", "b"):
                down, up = sizes[name]
                sent = sum(p["sent_bytes"] for p in sessions[name]["paths"])
                received = sum(p["received_bytes"] for p in sessions[name]["paths"])
                # Each session carried its own client's bytes (plus headers,
                # acknowledgements and retransmissions of the shaped links)...
                assert down <= sent < down * 1.5, (name, sent)
                assert up <= received < up * 1.5, (name, received)
            # ...and not the other's: a's session stayed below b's transfers alone.
            a_sent = sum(p["sent_bytes"] for p in sessions["a"]["paths"])
            a_received = sum(p["received_bytes"] for p in sessions["a"]["paths"])
            assert a_sent < sizes["b"][0] and a_received < sizes["b"][1]
            # Each client's remote addresses are its own uplinks.
            assert {p["remote"].split(":")[0] for p in sessions["a"]["paths"]} == \
                {"198.18.1.2", "198.18.2.2"}
            assert {p["remote"].split(":")[0] for p in sessions["b"]["paths"]} == {"198.18.3.2"}

            # a may not speak for b: a packet from b's address through a's tunnel is
            # refused by the server.
            a_ns, _ = clients["a"]
            a_ns.run("ip", "addr", "add", f"{clients['b'][1]}/32", "dev", "mpt0")
            spoof = a_ns.run("ping", "-c", "3", "-i", "0.2", "-W", "1", "-I", clients["b"][1],
                             SERVER_TUN_ADDR, check=False, capture=True)
            assert spoof.returncode != 0, "a spoofed packet was answered"
            drops = json.loads(server.output(binary, "status", "--socket",
                                             workdir / "server.sock", "--json"))["drops"]
            assert drops["source_not_allowed"] >= 3, drops

            # a dies without a word in the middle of b's transfer: b goes on.
            b_ns, b_address = clients["b"]
            count = 6_000_000
            rx = start_receiver(b_ns, b_address, 5221)
            tx = start_sender(server, b_address, 5221, count, seed=41)
            time.sleep(0.5)
            bed.stop_process(procs["a"], sig=signal.SIGKILL)
            assert tx.poll() is None, "b's transfer ended before a died: make it longer"
            sender, receiver = result(tx), result(rx)
            assert_byte_exact(sender, receiver, count)
            assert receiver["longest_gap_ms"] < 1000, receiver
            assert procs["server"].poll() is None and procs["b"].poll() is None
            assert bed.stop_process(procs["b"]) == 0
            assert bed.stop_process(procs["server"]) == 0
        finally:
            for handle in logs.values():
                handle.close()
